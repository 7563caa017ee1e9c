//! The batched forward pass over a paged key/value pool computes the same logits, bit for bit, as
//! one sequence at a time over its own contiguous cache, whatever the batch mix, the chunking of the
//! prompt and the placement of blocks.

use std::path::Path;

use strata_engine::{
    format::{
        gguf::GgufFile,
        gguf_writer::{TinyLlama, tiny_llama_gguf},
    },
    model::{BatchSeq, KvType, Llama, LlamaConfig, LoadOptions, Logits, PagedKv},
    weights::WeightType,
};

fn tiny(kind: WeightType) -> Llama {
    tiny_on(kind, 2)
}

fn tiny_on(kind: WeightType, threads: usize) -> Llama {
    load(tiny_llama_gguf(7, kind), threads)
}

/// A tiny random Gemma 3: 3 layers of width 64, 4 query heads of 32 over 2 key/value heads (queries
/// twice as wide as the model), tied head, layers sliding over `window` positions but the last of
/// every `period` (0: all slide).
fn tiny_gemma(kind: WeightType, window: usize, period: usize) -> Llama {
    let shape = TinyLlama {
        architecture: "gemma3",
        n_layers: 3,
        head_dim: Some(32),
        sliding_window: Some((window, period)),
        tied_embeddings: true,
        ..TinyLlama::default()
    };
    load(shape.writer(11, kind).to_bytes(), 2)
}

fn load(bytes: Vec<u8>, threads: usize) -> Llama {
    let file = GgufFile::from_bytes(Path::new("tiny.gguf"), bytes).expect("parses");
    let config = LlamaConfig::from_gguf(&file).expect("config");
    Llama::load(
        config,
        &file,
        LoadOptions {
            weights: None,
            threads,
            placement: Default::default(),
        },
    )
    .expect("loads")
}

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 37 + salt * 11 + 3) % 290 + 5)
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Logits of one sequence alone: the prompt at once, then each of `follow` one by one.
fn alone(model: &Llama, kv: KvType, prompt: &[u32], follow: &[u32]) -> Vec<Vec<u32>> {
    let mut cache = model.new_cache_with(prompt.len() + follow.len(), kv);
    let mut out = vec![bits(
        &model
            .forward(prompt, &mut cache, Logits::Last)
            .expect("prefill"),
    )];
    for &t in follow {
        out.push(bits(
            &model
                .forward(&[t], &mut cache, Logits::Last)
                .expect("decode"),
        ));
    }
    out
}

/// Decode steps run on a team of the pool's threads, long prompts as fork-joins on the pool; both
/// give the bits of a one-thread model.
#[test]
fn one_thread_and_a_team_of_two_give_the_same_bits() {
    for kind in [WeightType::Q8_0, WeightType::Q4_1, WeightType::F16] {
        let (one, two) = (tiny_on(kind, 1), tiny_on(kind, 2));
        for kv in [KvType::F16, KvType::F32] {
            for prompt_len in [5, 40] {
                let (p, follow) = (prompt(prompt_len, 4), [7, 70, 170]);
                assert_eq!(
                    alone(&one, kv, &p, &follow),
                    alone(&two, kv, &p, &follow),
                    "{kind} {kv:?} prompt of {prompt_len}"
                );
            }
        }
    }
}

#[test]
fn batched_paged_logits_equal_single_sequence_logits() {
    let block_size = 4;
    for kind in [
        WeightType::Q8_0,
        WeightType::Q4_1,
        WeightType::F16,
        WeightType::F32,
    ] {
        let model = tiny(kind);
        for kv in [KvType::F16, KvType::F32] {
            let prompts = [prompt(3, 1), prompt(11, 2), prompt(6, 3)];
            let follow = [vec![9, 17, 33], vec![40, 41, 42], vec![5, 6, 7]];
            let want: Vec<_> = prompts
                .iter()
                .zip(&follow)
                .map(|(p, f)| alone(&model, kv, p, f))
                .collect();

            let mut pool = PagedKv::new(model.config(), 32, block_size, kv);
            // Scattered, interleaved block tables.
            let tables: Vec<Vec<u32>> = vec![vec![30, 2], vec![5, 29, 11, 0], vec![17, 8, 3]];
            // Step 1: sequence 1 prefills its first chunk only; the others their whole prompt.
            let got_first = model
                .forward_batch(
                    &[
                        BatchSeq {
                            tokens: &prompts[0],
                            start: 0,
                            blocks: &tables[0],
                            logits: true,
                        },
                        BatchSeq {
                            tokens: &prompts[1][..5],
                            start: 0,
                            blocks: &tables[1],
                            logits: false,
                        },
                        BatchSeq {
                            tokens: &prompts[2],
                            start: 0,
                            blocks: &tables[2],
                            logits: true,
                        },
                    ],
                    &mut pool,
                )
                .expect("step 1");
            assert!(
                got_first[1].is_none(),
                "no logits asked for a partial prefill"
            );
            assert_eq!(
                bits(got_first[0].as_ref().expect("logits")),
                want[0][0],
                "{kind} {kv:?} seq 0 prefill"
            );
            assert_eq!(
                bits(got_first[2].as_ref().expect("logits")),
                want[2][0],
                "{kind} {kv:?} seq 2 prefill"
            );
            // Step 2: sequence 1 finishes its prompt while the others decode.
            let got = model
                .forward_batch(
                    &[
                        BatchSeq {
                            tokens: &follow[0][..1],
                            start: 3,
                            blocks: &tables[0],
                            logits: true,
                        },
                        BatchSeq {
                            tokens: &prompts[1][5..],
                            start: 5,
                            blocks: &tables[1],
                            logits: true,
                        },
                        BatchSeq {
                            tokens: &follow[2][..1],
                            start: 6,
                            blocks: &tables[2],
                            logits: true,
                        },
                    ],
                    &mut pool,
                )
                .expect("step 2");
            assert_eq!(
                bits(got[0].as_ref().expect("logits")),
                want[0][1],
                "{kind} {kv:?} seq 0 decode"
            );
            assert_eq!(
                bits(got[1].as_ref().expect("logits")),
                want[1][0],
                "{kind} {kv:?} seq 1 prefill"
            );
            assert_eq!(
                bits(got[2].as_ref().expect("logits")),
                want[2][1],
                "{kind} {kv:?} seq 2 decode"
            );
            // Step 3: everybody decodes, one of them alone in a second call.
            let got = model
                .forward_batch(
                    &[
                        BatchSeq {
                            tokens: &follow[0][1..2],
                            start: 4,
                            blocks: &tables[0],
                            logits: true,
                        },
                        BatchSeq {
                            tokens: &follow[1][..1],
                            start: 11,
                            blocks: &tables[1],
                            logits: true,
                        },
                    ],
                    &mut pool,
                )
                .expect("step 3");
            assert_eq!(
                bits(got[0].as_ref().expect("logits")),
                want[0][2],
                "{kind} {kv:?} seq 0 decode 2"
            );
            assert_eq!(
                bits(got[1].as_ref().expect("logits")),
                want[1][1],
                "{kind} {kv:?} seq 1 decode"
            );
            let got = model
                .forward_batch(
                    &[BatchSeq {
                        tokens: &follow[2][1..2],
                        start: 7,
                        blocks: &tables[2],
                        logits: true,
                    }],
                    &mut pool,
                )
                .expect("step 3, alone");
            assert_eq!(
                bits(got[0].as_ref().expect("logits")),
                want[2][2],
                "{kind} {kv:?} seq 2 decode 2"
            );
        }
    }
}

#[test]
fn bad_batches_are_refused_with_a_reason() {
    let model = tiny(WeightType::Q8_0);
    let mut pool = PagedKv::new(model.config(), 4, 4, KvType::F16);
    let tokens = prompt(6, 1);
    let short_table = [0u32];
    let err = model
        .forward_batch(
            &[BatchSeq {
                tokens: &tokens,
                start: 0,
                blocks: &short_table,
                logits: true,
            }],
            &mut pool,
        )
        .expect_err("table too short");
    assert!(err.to_string().contains("cannot hold 6 positions"), "{err}");
    let outside = [0u32, 9];
    let err = model
        .forward_batch(
            &[BatchSeq {
                tokens: &tokens,
                start: 0,
                blocks: &outside,
                logits: true,
            }],
            &mut pool,
        )
        .expect_err("block outside the pool");
    assert!(err.to_string().contains("block 9"), "{err}");
    let err = model
        .forward_batch(
            &[BatchSeq {
                tokens: &[],
                start: 0,
                blocks: &outside,
                logits: true,
            }],
            &mut pool,
        )
        .expect_err("empty");
    assert!(err.to_string().contains("no tokens"), "{err}");
}

/// Every position's logits of `tokens` run alone in one pass.
fn every_position(model: &Llama, kv: KvType, tokens: &[u32]) -> Vec<Vec<u32>> {
    let mut cache = model.new_cache_with(tokens.len(), kv);
    let logits = model
        .forward(tokens, &mut cache, Logits::All)
        .expect("forward");
    logits
        .chunks_exact(model.config().vocab_size)
        .map(bits)
        .collect()
}

/// Gemma 3's sliding-window layers over the paged pool: sequences longer than the window, fed in
/// chunks that cross the window's edge and the blocks', batched together, give each chunk's last
/// logits with the bits of the sequence run alone.
#[test]
fn gemma3_batched_paged_logits_equal_single_sequence_logits() {
    let block_size = 4;
    for kind in [WeightType::Q8_0, WeightType::F32] {
        let model = tiny_gemma(kind, 6, 2);
        assert_eq!(model.config().q_dim(), 2 * model.config().dim);
        for kv in [KvType::F16, KvType::F32] {
            let sequences = [prompt(19, 1), prompt(8, 2), prompt(23, 3)];
            let chunks: [&[usize]; 3] = [&[5, 9, 1, 1, 1, 1, 1], &[7, 1], &[2, 14, 7]];
            let want: Vec<_> = sequences
                .iter()
                .map(|s| every_position(&model, kv, s))
                .collect();
            let mut pool = PagedKv::new(model.config(), 32, block_size, kv);
            let tables: [Vec<u32>; 3] = [
                vec![30, 2, 9, 14, 22],
                vec![5, 29],
                vec![17, 8, 3, 0, 11, 26],
            ];
            let mut done = [0usize; 3];
            for step in 0.. {
                let live: Vec<usize> = (0..3).filter(|&i| step < chunks[i].len()).collect();
                if live.is_empty() {
                    break;
                }
                let batch: Vec<BatchSeq<'_>> = live
                    .iter()
                    .map(|&i| BatchSeq {
                        tokens: &sequences[i][done[i]..done[i] + chunks[i][step]],
                        start: done[i],
                        blocks: &tables[i],
                        logits: true,
                    })
                    .collect();
                let got = model.forward_batch(&batch, &mut pool).expect("step");
                for (&i, logits) in live.iter().zip(&got) {
                    done[i] += chunks[i][step];
                    assert_eq!(
                        bits(logits.as_ref().expect("logits")),
                        want[i][done[i] - 1],
                        "{kind} {kv:?} sequence {i} at position {}",
                        done[i] - 1
                    );
                }
            }
        }
    }
}

/// With every layer sliding over 4 positions, the last of 12 tokens reaches back 3 positions per
/// layer (to position 2 after 3 layers): tokens before that change nothing, tokens inside change
/// its logits, and with global layers the first token changes them too.
#[test]
fn a_sliding_window_forgets_tokens_beyond_its_reach() {
    let sliding = tiny_gemma(WeightType::F32, 4, 0);
    let global = tiny_gemma(WeightType::F32, 4, 1);
    for kv in [KvType::F16, KvType::F32] {
        let base = prompt(12, 5);
        let with = |at: usize| {
            let mut tokens = base.clone();
            tokens[at] = tokens[at] % 200 + 7;
            assert_ne!(tokens[at], base[at]);
            tokens
        };
        let last = |model: &Llama, tokens: &[u32]| {
            let mut cache = model.new_cache_with(tokens.len(), kv);
            bits(
                &model
                    .forward(tokens, &mut cache, Logits::Last)
                    .expect("forward"),
            )
        };
        for early in [0, 1] {
            assert_eq!(
                last(&sliding, &with(early)),
                last(&sliding, &base),
                "{kv:?}: token {early} is beyond the windows' reach"
            );
        }
        for inside in [2, 8, 11] {
            assert_ne!(
                last(&sliding, &with(inside)),
                last(&sliding, &base),
                "{kv:?}: token {inside} is within reach"
            );
        }
        assert_ne!(
            last(&global, &with(0)),
            last(&global, &base),
            "{kv:?}: global layers see the first token"
        );
    }
}

/// A long prompt's feed-forward steps take a fixed number of tokens at a time; a prompt fed in
/// pieces cut elsewhere gives every position the same logits, bit for bit.
#[test]
fn a_long_prompt_in_one_pass_equals_it_in_pieces() {
    for kind in [WeightType::Q8_0, WeightType::F32] {
        let shape = TinyLlama {
            context_length: 512,
            ..TinyLlama::default()
        };
        let model = load(shape.writer(7, kind).to_bytes(), 2);
        let p = prompt(300, 5);
        let mut cache = model.new_cache_with(p.len(), KvType::F16);
        let whole = model
            .forward(&p, &mut cache, Logits::All)
            .expect("one pass");
        let mut cache = model.new_cache_with(p.len(), KvType::F16);
        let mut pieces = Vec::new();
        for piece in [&p[..100], &p[100..]] {
            let logits = model
                .forward(piece, &mut cache, Logits::All)
                .expect("a piece");
            pieces.extend(logits);
        }
        assert_eq!(bits(&whole), bits(&pieces), "{kind}");
    }
}
