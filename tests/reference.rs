//! The engine against llama.cpp's reference outputs for the same model file (`shared/reference`):
//! prompt token ids, greedy continuations with top-5 probabilities, and perplexity.

use std::path::PathBuf;

use serde_json::Value;
use strata_engine::{
    loader::LoadedModel,
    model::{KvType, LoadOptions, Logits},
    weights::WeightType,
};

use crate::common;

mod gemma;

/// A position may diverge from the reference only where its top-1 and top-2 log-probabilities are this close.
const TIE_LOGPROB: f64 = 0.02;
/// Top-5 probabilities of the f32 path must be this close to the f32 reference.
const F32_PROB_TOLERANCE: f64 = 0.01;
/// Greedy tokens that must match for the quantized paths.
const QUANTIZED_PREFIX: usize = 16;

fn reference(name: &str) -> Value {
    let path = common::reference_dir().join(format!("SmolLM2-135M-Instruct.{name}-greedy.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("array of ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

fn load(weights: Option<WeightType>) -> LoadedModel {
    let path: PathBuf = common::smollm2_path();
    LoadedModel::open(
        &path,
        LoadOptions {
            weights,
            threads: 0,
            placement: Default::default(),
        },
    )
    .expect("model loads")
}

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let log_sum = sum.ln() + max;
    logits.iter().map(|&l| l as f64 - log_sum).collect()
}

fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn prompt_token_ids_match_llama_cpp() {
    let model = load(Some(WeightType::Q4_1));
    for file in ["F32-kvf32", "Q4_1", "Q8_0", "F16"] {
        for case in reference(file)["results"].as_array().expect("results") {
            let prompt = case["prompt"].as_str().expect("prompt");
            let want = ids(&case["prompt_token_ids_as_evaluated"]);
            let got = model.tokenizer.encode(prompt).expect("encodes");
            assert_eq!(got, want, "{file}: token ids of {prompt:?}");
        }
    }
}

#[test]
fn perplexity_text_has_the_reference_token_count() {
    let model = load(Some(WeightType::Q4_1));
    let text =
        std::fs::read_to_string(common::reference_dir().join("perplexity-text.txt")).expect("text");
    assert_eq!(model.tokenizer.encode(&text).expect("encodes").len(), 1562);
}

/// How a greedy run compared with the reference.
struct GreedyComparison {
    /// Tokens equal to the reference before the first divergence (or all of them).
    matched: usize,
    /// Whether the continuation diverged at all.
    diverged: bool,
}

/// Greedy-decodes each reference prompt, checking tokens (and, when `prob_tolerance` is given, the
/// top-5 probabilities) position by position. Within the first `must_match` tokens a divergence is
/// accepted only at a near-tie of the reference's top two; comparison of a prompt ends at its first
/// divergence.
fn compare_greedy(
    model: &LoadedModel,
    file: &str,
    prob_tolerance: Option<f64>,
    must_match: usize,
    kv: KvType,
) -> Vec<GreedyComparison> {
    let mut out = Vec::new();
    for case in reference(file)["results"].as_array().expect("results") {
        let prompt = ids(&case["prompt_token_ids_as_evaluated"]);
        let want = ids(&case["generated_token_ids"]);
        let positions = case["per_position"].as_array().expect("per_position");
        let mut cache = model
            .model
            .new_cache_with(prompt.len() + want.len() + 1, kv);
        let mut logits = model
            .model
            .forward(&prompt, &mut cache, Logits::Last)
            .expect("prefill");
        let mut comparison = GreedyComparison {
            matched: 0,
            diverged: false,
        };
        for (i, &expected) in want.iter().enumerate() {
            let top5 = positions[i]["top5"].as_array().expect("top5");
            let logprobs = log_softmax(&logits);
            if let Some(tolerance) = prob_tolerance {
                for entry in top5 {
                    let id = entry["id"].as_u64().expect("id") as usize;
                    let (want_p, got_p) =
                        (entry["prob"].as_f64().expect("prob"), logprobs[id].exp());
                    assert!(
                        (want_p - got_p).abs() <= tolerance,
                        "{file} {:?} position {i}: p(token {id}) = {got_p:.5}, reference {want_p:.5}",
                        case["prompt"]
                    );
                }
            }
            let got = argmax(&logits);
            if got != expected {
                let gap = top5[0]["logprob"].as_f64().expect("lp")
                    - top5[1]["logprob"].as_f64().expect("lp");
                assert!(
                    i >= must_match || gap.abs() < TIE_LOGPROB,
                    "{file} {:?} position {i}: generated {got}, reference {expected} (top-1/top-2 gap {gap:.4})",
                    case["prompt"]
                );
                comparison.diverged = true;
                break;
            }
            comparison.matched += 1;
            if i + 1 < want.len() {
                logits = model
                    .model
                    .forward(&[got], &mut cache, Logits::Last)
                    .expect("decode");
            }
        }
        out.push(comparison);
    }
    out
}

#[test]
fn f32_path_reproduces_the_f32_reference() {
    let model = load(Some(WeightType::F32));
    for (i, c) in compare_greedy(
        &model,
        "F32-kvf32",
        Some(F32_PROB_TOLERANCE),
        usize::MAX,
        KvType::F32,
    )
    .iter()
    .enumerate()
    {
        assert!(
            !c.diverged,
            "prompt {i}: the f32 path must reproduce every token"
        );
    }
}

fn quantized_path_reproduces(weights: WeightType, file: &str) {
    let model = load(Some(weights));
    for (i, c) in compare_greedy(&model, file, None, QUANTIZED_PREFIX, KvType::F16)
        .iter()
        .enumerate()
    {
        eprintln!(
            "{weights} prompt {i}: {} tokens equal to the reference before any divergence",
            c.matched
        );
        assert!(
            c.matched >= QUANTIZED_PREFIX || c.diverged,
            "{weights} prompt {i}: only {} tokens matched",
            c.matched
        );
    }
}

#[test]
fn q4_1_path_reproduces_the_q4_1_reference() {
    quantized_path_reproduces(WeightType::Q4_1, "Q4_1");
}

#[test]
fn q8_0_path_reproduces_the_q8_0_reference() {
    quantized_path_reproduces(WeightType::Q8_0, "Q8_0");
}

#[test]
fn f16_path_reproduces_the_f16_reference() {
    quantized_path_reproduces(WeightType::F16, "F16");
}

/// llama-perplexity's defaults: batches of 2048 tokens, run in micro-batches of 512.
const PERPLEXITY_BATCH: usize = 2048;
const PERPLEXITY_MICRO_BATCH: usize = 512;

/// The tokens of one chunk that llama-perplexity evaluates together at its defaults: a batch holds
/// `2048 / context` chunks, each a sequence of its own, and its micro-batches take an equal share
/// of every sequence (32 tokens at `-c 128`). The share matters for the bits: llama.cpp attends
/// over an f16 cache in its tiled form from 64 tokens of a sequence on, key by key below that.
fn perplexity_step(context: usize) -> usize {
    let sequences = (PERPLEXITY_BATCH / context).max(1);
    (PERPLEXITY_MICRO_BATCH / sequences).clamp(1, context)
}

/// llama-perplexity with `-c 128`: consecutive 128-token chunks, each from an empty cache and, when
/// the tokenizer adds a BOS, with its first token replaced by BOS, fed in the steps llama.cpp feeds
/// them ([`perplexity_step`]) and scored on the predictions made from the second half of the chunk.
fn perplexity(model: &LoadedModel, tokens: &[u32], context: usize) -> f64 {
    let first = context / 2;
    let bos = model.tokenizer.bos().filter(|_| model.tokenizer.adds_bos());
    let vocab = model.model.config().vocab_size;
    let (mut nll, mut count) = (0.0f64, 0usize);
    for chunk in tokens.chunks_exact(context) {
        let mut chunk = chunk.to_vec();
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        let mut cache = model.model.new_cache(context);
        let mut logits = Vec::with_capacity(context * vocab);
        for step in chunk.chunks(perplexity_step(context)) {
            let step_logits = model
                .model
                .forward(step, &mut cache, Logits::All)
                .expect("forward");
            logits.extend_from_slice(&step_logits);
        }
        for j in first..context - 1 {
            let logprobs = log_softmax(&logits[j * vocab..(j + 1) * vocab]);
            nll -= logprobs[chunk[j + 1] as usize];
            count += 1;
        }
    }
    (nll / count as f64).exp()
}

/// `model`'s perplexity on the reference text, by llama-perplexity's method, within 1% of llama.cpp's.
fn assert_perplexity_within_one_percent(model: &LoadedModel, label: &str, reference_ppl: f64) {
    let text =
        std::fs::read_to_string(common::reference_dir().join("perplexity-text.txt")).expect("text");
    let tokens = model.tokenizer.encode(&text).expect("encodes");
    let ppl = perplexity(model, &tokens, 128);
    let error = (ppl - reference_ppl).abs() / reference_ppl;
    eprintln!(
        "{label}: perplexity {ppl:.4}, llama.cpp {reference_ppl:.4}, relative error {:.3}%",
        error * 100.0
    );
    assert!(
        error < 0.01,
        "{label}: perplexity {ppl:.4} is not within 1% of llama.cpp's {reference_ppl:.4}"
    );
}

fn perplexity_within_one_percent(weights: WeightType, reference_ppl: f64) {
    assert_perplexity_within_one_percent(&load(Some(weights)), &weights.to_string(), reference_ppl);
}

#[test]
fn perplexity_matches_llama_cpp_f32() {
    perplexity_within_one_percent(WeightType::F32, 21.5937);
}

#[test]
fn perplexity_matches_llama_cpp_q8_0() {
    perplexity_within_one_percent(WeightType::Q8_0, 21.8013);
}

#[test]
fn perplexity_matches_llama_cpp_q4_1() {
    perplexity_within_one_percent(WeightType::Q4_1, 21.6365);
}
