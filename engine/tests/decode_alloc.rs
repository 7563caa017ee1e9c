//! A decode step allocates nothing once the engine has warmed up: activations, the pass's bookkeeping
//! and the kernels' scratch are owned by the engine and its threads and reused. Counted by a global
//! allocator over every thread of the process, so this file holds one test only.

// A counting global allocator is an `unsafe impl` by definition.
#![allow(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    path::Path,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

use strata_engine::{
    format::{gguf::GgufFile, gguf_writer::TinyLlama},
    model::{KvType, Llama, LlamaConfig, LoadOptions, Logits},
    weights::WeightType,
};

/// Counts allocations while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// The sizes of the first allocations counted, for the failure message.
static SIZES: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            let i = ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            if let Some(size) = SIZES.get(i) {
                size.store(layout.size(), Ordering::Relaxed);
            }
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A tiny model with this model family's head size (64), so the fast attention kernel runs.
fn model(kind: WeightType) -> Llama {
    let shape = TinyLlama {
        dim: 192,
        n_heads: 3,
        n_kv_heads: 1,
        ffn_dim: 256,
        context_length: 256,
        ..TinyLlama::default()
    };
    let file = GgufFile::from_bytes(Path::new("tiny.gguf"), shape.writer(5, kind).to_bytes())
        .expect("parses");
    let config = LlamaConfig::from_gguf(&file).expect("config");
    let model = Llama::load(
        config,
        &file,
        LoadOptions {
            weights: None,
            threads: 2,
            placement: Default::default(),
        },
    )
    .expect("loads");
    // Every worker thread started (they start asynchronously, and starting allocates).
    model.install(|| rayon::broadcast(|_| ()));
    model
}

#[test]
fn decode_steps_allocate_nothing_after_warm_up() {
    // Every model (and its pool's threads) up before anything is counted.
    let models: Vec<(WeightType, Llama)> = [WeightType::Q8_0, WeightType::Q4_1, WeightType::F16]
        .into_iter()
        .map(|kind| (kind, model(kind)))
        .collect();
    for (kind, model) in &models {
        for kv in [KvType::F16, KvType::F32] {
            let prompt: Vec<u32> = (0..40).map(|i| 5 + i * 3).collect();
            let mut cache = model.new_cache_with(200, kv);
            let mut logits = Vec::new();
            let allocations = model.install(|| {
                model
                    .forward_into(&prompt, &mut cache, Logits::Last, &mut logits)
                    .expect("prefill");
                // Warm-up: the first steps grow every thread's scratch to its decode size.
                for token in [7, 8, 9, 10] {
                    model
                        .forward_into(&[token], &mut cache, Logits::Last, &mut logits)
                        .expect("warm-up step");
                }
                ALLOCATIONS.store(0, Ordering::SeqCst);
                COUNTING.store(true, Ordering::SeqCst);
                // Across a key block boundary (position 64) and on.
                for token in 11..100u32 {
                    if model
                        .forward_into(&[token], &mut cache, Logits::Last, &mut logits)
                        .is_err()
                    {
                        break;
                    }
                }
                COUNTING.store(false, Ordering::SeqCst);
                ALLOCATIONS.load(Ordering::SeqCst)
            });
            assert_eq!(cache.len(), 40 + 4 + 89, "{kind} {kv:?}: every step ran");
            assert!(logits.iter().all(|v| v.is_finite()));
            assert_eq!(
                allocations,
                0,
                "{kind} weights, {kv:?} cache: decode steps allocated (first sizes in bytes: {:?})",
                SIZES
                    .iter()
                    .map(|s| s.load(Ordering::SeqCst))
                    .collect::<Vec<_>>()
            );
        }
    }
}
