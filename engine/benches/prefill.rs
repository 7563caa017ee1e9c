//! Prefill matrix products: quantized weights against many tokens, one entry per tier this host
//! supports.
//!
//! - `tiled`: the tier's tiled kernel (`gemm_*`) over the whole product on one thread.
//! - `x4`: the same product as four-row dots, one token at a time (the path before tiling), on one
//!   thread.
//! - `matmul`: [`kernels::matmul_with`] as the model calls it: activations quantized, the work split
//!   over the rayon pool (`RAYON_NUM_THREADS` sets its size).
//!
//! Shapes (SmolLM2-135M): the 1536 x 576 MLP up projection and the 576 x 1536 down projection, against
//! 64 and 512 tokens; for the K-quants (whose rows are whole 256-value super-blocks), Llama 3.2 1B's
//! 2048 x 2048 attention projection against 128 tokens (one parallel task's share of a prompt).
//! `Throughput::Elements` counts multiply-adds (`rows x cols x tokens`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use strata_engine::{
    kernels::{self, MatmulScratch, OutLayout, cpu, dispatch::KernelTable, k_numerics::KPath},
    quant::{self, BlockQ8_0, BlockQ8_1, BlockQ8K, QK, QK_K},
    weights::{Weight, WeightData, WeightType},
};

/// `(rows, cols)` of the weights.
const SHAPES: [(usize, usize); 2] = [(1536, 576), (576, 1536)];
/// Tokens per product.
const TOKENS: [usize; 2] = [64, 512];
/// `(rows, cols, tokens)` of the K-quant products.
const K_SHAPES: [(usize, usize, usize); 2] = [(2048, 2048, 128), (2048, 8192, 128)];

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn tables() -> Vec<&'static KernelTable> {
    cpu::available_tiers()
        .into_iter()
        .map(|t| KernelTable::for_tier(t).expect("available tiers have tables"))
        .collect()
}

/// A tiled product through a table.
type Tiled<W, A> = fn(&KernelTable, &[W], &[A], usize, &mut [f32], OutLayout);
/// A four-row dot through a table.
type Four<W, A> = fn(&KernelTable, [&[W]; 4], &[A]) -> [f32; 4];

/// The one-thread kernels of a weight type: the tiled product, and the four-row dot it replaced.
struct Kernels<W, A> {
    tiled: Tiled<W, A>,
    four: Four<W, A>,
}

/// `tiled` and `x4` of `w` (rows of `nb` blocks) against `x` (tokens of `nb` blocks) on every tier.
fn bench_kernels<W, A>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    (w, x, nb): (&[W], &[A], usize),
    kernels: &Kernels<W, A>,
) {
    let (rows, tokens) = (w.len() / nb, x.len() / nb);
    let mut out = vec![0f32; rows * tokens];
    let row = |r: usize| &w[r * nb..(r + 1) * nb];
    for k in tables() {
        let tier = k.tier().name();
        group.bench_function(format!("{name}/{tier}/tiled"), |b| {
            b.iter(|| {
                (kernels.tiled)(
                    k,
                    w,
                    black_box(x),
                    nb,
                    &mut out,
                    OutLayout::token_major(rows),
                );
                black_box(&out);
            })
        });
        group.bench_function(format!("{name}/{tier}/x4"), |b| {
            b.iter(|| {
                for (t, y) in black_box(x).chunks_exact(nb).enumerate() {
                    for r in (0..rows).step_by(4) {
                        let v = (kernels.four)(k, [row(r), row(r + 1), row(r + 2), row(r + 3)], y);
                        out[t * rows + r..t * rows + r + 4].copy_from_slice(&v);
                    }
                }
                black_box(&out);
            })
        });
    }
}

/// The whole matmul on every tier.
fn bench_matmul(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, w: &Weight, x: &[f32]) {
    let tokens = x.len() / w.cols;
    let mut out = vec![0f32; tokens * w.rows];
    let mut scratch = MatmulScratch::default();
    for k in tables() {
        let tier = k.tier().name();
        group.bench_function(format!("{name}/{tier}/matmul"), |b| {
            b.iter(|| kernels::matmul_with(k, w, black_box(x), tokens, &mut out, &mut scratch))
        });
    }
}

fn prefill(c: &mut Criterion) {
    for (rows, cols) in SHAPES {
        let values = random(rows * cols, 1);
        let nb = cols / QK;
        for tokens in TOKENS {
            let x = random(tokens * cols, 2);
            let mut a8 = vec![BlockQ8_0::default(); tokens * nb];
            quant::quantize_activations_q8_0(&x, &mut a8);
            let mut a81 = vec![BlockQ8_1::default(); tokens * nb];
            quant::quantize_activations_q8_1(&x, &mut a81);
            let name = format!("{rows}x{cols}/{tokens}");
            for kind in [WeightType::Q8_0, WeightType::Q4_1, WeightType::Q4_0] {
                let w = Weight::from_f32(values.clone(), rows, cols, kind);
                let mut g = group(c, kind, rows * cols * tokens);
                match &w.data {
                    WeightData::Q8_0(v) => bench_kernels(
                        &mut g,
                        &name,
                        (v, &a8, nb),
                        &Kernels {
                            tiled: KernelTable::gemm_q8_0_q8_0,
                            four: KernelTable::vec_dot_q8_0_q8_0_x4,
                        },
                    ),
                    WeightData::Q4_0(v) => bench_kernels(
                        &mut g,
                        &name,
                        (v, &a8, nb),
                        &Kernels {
                            tiled: KernelTable::gemm_q4_0_q8_0,
                            four: KernelTable::vec_dot_q4_0_q8_0_x4,
                        },
                    ),
                    WeightData::Q4_1(v) => bench_kernels(
                        &mut g,
                        &name,
                        (v, &a81, nb),
                        &Kernels {
                            tiled: KernelTable::gemm_q4_1_q8_1,
                            four: KernelTable::vec_dot_q4_1_q8_1_x4,
                        },
                    ),
                    _ => unreachable!("quantized types only"),
                }
                bench_matmul(&mut g, &name, &w, &x);
                g.finish();
            }
        }
    }
}

/// A benchmark group counting multiply-adds, with short runs.
fn group<'a>(c: &'a mut Criterion, kind: WeightType, macs: usize) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(format!("prefill_{kind}"));
    g.throughput(Throughput::Elements(macs as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    g
}

fn prefill_k_quants(c: &mut Criterion) {
    for (rows, cols, tokens) in K_SHAPES {
        let values = random(rows * cols, 1);
        let nb = cols / QK_K;
        let x = random(tokens * cols, 2);
        let mut a8k = vec![BlockQ8K::default(); tokens * nb];
        quant::quantize_activations_q8_k(&x, &mut a8k);
        let name = format!("{rows}x{cols}/{tokens}");
        for kind in [WeightType::Q4K, WeightType::Q5K, WeightType::Q6K] {
            let w = Weight::from_f32(values.clone(), rows, cols, kind);
            let mut g = group(c, kind, rows * cols * tokens);
            match &w.data {
                WeightData::Q4K(v) => bench_kernels(
                    &mut g,
                    &name,
                    (v, &a8k, nb),
                    &Kernels {
                        tiled: KernelTable::gemm_q4_k_q8_k,
                        four: |k, rows, y| k.vec_dot_q4_k_q8_k_x4(rows, y, KPath::Tiled),
                    },
                ),
                WeightData::Q5K(v) => bench_kernels(
                    &mut g,
                    &name,
                    (v, &a8k, nb),
                    &Kernels {
                        tiled: KernelTable::gemm_q5_k_q8_k,
                        four: |k, rows, y| k.vec_dot_q5_k_q8_k_x4(rows, y, KPath::Tiled),
                    },
                ),
                WeightData::Q6K(v) => bench_kernels(
                    &mut g,
                    &name,
                    (v, &a8k, nb),
                    &Kernels {
                        tiled: KernelTable::gemm_q6_k_q8_k,
                        four: |k, rows, y| k.vec_dot_q6_k_q8_k_x4(rows, y, KPath::Tiled),
                    },
                ),
                _ => unreachable!("K-quant types only"),
            }
            bench_matmul(&mut g, &name, &w, &x);
            g.finish();
        }
    }
}

criterion_group!(benches, prefill, prefill_k_quants);
criterion_main!(benches);
