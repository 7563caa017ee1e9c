//! Gemma 3 270M against llama.cpp on the same files: the Q4_K_M file from PyPI, and its Q5_K_M
//! requantization made by the engine's own `requantize` (llama-quantize's rules and quantizers).
//!
//! This model amplifies a last-bit difference anywhere into log-probabilities 0.1-1 apart (llama.cpp
//! itself moves that far with its weight repacking turned off), so the engine reproduces llama.cpp's
//! x86 arithmetic bit for bit, and the tests feed the prompt in the batches llama-server used.
//!
//! The Q4_K_M file's path comes from `STRATA_GEMMA_GGUF`; without it the tests say so and pass,
//! unless `CI=true`, where they fail.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use serde_json::Value;
use sha2::{Digest, Sha256};
use strata_engine::{
    format::requantize::{FileType, requantize_file},
    loader::LoadedModel,
    model::{LoadOptions, Logits},
};

use super::{argmax, assert_perplexity_within_one_percent, ids, log_softmax};
use crate::common;

const ENV_GEMMA_GGUF: &str = "STRATA_GEMMA_GGUF";
/// Checks stop at the first position whose reference top-1 and top-2 log-probabilities are this
/// close; before it, every top-5 log-probability must be this close to the reference's.
const LOGPROB_TOLERANCE: f64 = 0.05;
/// llama-quantize's Q5_K_M of the Q4_K_M file, as `shared/reference/README.md` records it.
const Q5_K_M_SHA256: &str = "de0ca6e0d6daf8ca15f25a000dd7c1d4d6e05ad136029d9403ec0ff913682d1c";

/// The Q4_K_M file, or `None` (with a note) when it is not configured outside CI.
fn q4_k_m_path() -> Option<PathBuf> {
    match std::env::var_os(ENV_GEMMA_GGUF) {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{ENV_GEMMA_GGUF} must name the Gemma 3 270M GGUF file on CI")
        }
        None => {
            eprintln!("skipped: set {ENV_GEMMA_GGUF} to the Gemma 3 270M Q4_K_M GGUF file to run");
            None
        }
    }
}

/// The Q5_K_M requantization of the Q4_K_M file, written once per test run.
fn q5_k_m_path() -> Option<PathBuf> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        let input = q4_k_m_path()?;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let output = dir.join("gemma-3-270m-Q5_K_M.gguf");
        let partial = dir.join(format!("gemma-3-270m-Q5_K_M.gguf.{}", std::process::id()));
        requantize_file(&input, &partial, FileType::Q5KM).expect("requantizes to Q5_K_M");
        std::fs::rename(&partial, &output).expect("moves the requantized file in place");
        Some(output)
    })
    .clone()
}

fn load(path: &Path) -> LoadedModel {
    LoadedModel::open(
        path,
        LoadOptions {
            weights: None,
            threads: 0,
            placement: Default::default(),
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn reference(mix: &str) -> Value {
    let path = common::reference_dir().join(format!("gemma-3-270m-{mix}-greedy.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The batches in which llama-server evaluated a prompt of `len` tokens for a sliding-window model:
/// it stops a batch `4 + n_ubatch` (516) and 4 tokens before the prompt's end, to checkpoint the
/// window there. The batches matter for the bits: llama.cpp's repacked Q4_K products round a token
/// in a whole group of four of its batch differently from one outside.
fn server_prompt_batches(len: usize) -> Vec<std::ops::Range<usize>> {
    let mut cuts: Vec<usize> = [516, 4]
        .into_iter()
        .filter_map(|offset| len.checked_sub(offset))
        .filter(|&cut| cut > 0)
        .collect();
    cuts.push(len);
    let mut start = 0;
    cuts.into_iter()
        .map(|end| {
            let batch = start..end;
            start = end;
            batch
        })
        .collect()
}

/// Greedy-decodes every reference prompt from its evaluated ids; up to the first position whose
/// reference top-1 and top-2 are within [`LOGPROB_TOLERANCE`], the greedy token equals the
/// reference's and every top-5 log-probability is within the tolerance. Returns the positions
/// checked per prompt.
fn greedy_matches_until_the_first_tie(model: &LoadedModel, mix: &str) -> Vec<usize> {
    let mut checked = Vec::new();
    for case in reference(mix)["results"].as_array().expect("results") {
        let prompt = ids(&case["prompt_token_ids_as_evaluated"]);
        let want = ids(&case["generated_token_ids"]);
        let positions = case["per_position"].as_array().expect("per_position");
        let mut cache = model.model.new_cache(prompt.len() + want.len() + 1);
        let mut logits = Vec::new();
        for batch in server_prompt_batches(prompt.len()) {
            logits = model
                .model
                .forward(&prompt[batch], &mut cache, Logits::Last)
                .expect("prefill");
        }
        let mut position = 0;
        for (i, &expected) in want.iter().enumerate() {
            let top5 = positions[i]["top5"].as_array().expect("top5");
            let logprob = |k: usize| top5[k]["logprob"].as_f64().expect("logprob");
            if logprob(0) - logprob(1) < LOGPROB_TOLERANCE {
                break;
            }
            let ours = log_softmax(&logits);
            for entry in top5 {
                let id = entry["id"].as_u64().expect("id") as usize;
                let want_lp = entry["logprob"].as_f64().expect("logprob");
                assert!(
                    (ours[id] - want_lp).abs() <= LOGPROB_TOLERANCE,
                    "{mix} {:?} position {i}: log p(token {id}) = {:.4}, llama.cpp {want_lp:.4}",
                    case["prompt"],
                    ours[id]
                );
            }
            let got = argmax(&logits);
            assert_eq!(
                got, expected,
                "{mix} {:?} position {i}: generated {got}, llama.cpp {expected}",
                case["prompt"]
            );
            position = i + 1;
            logits = model
                .model
                .forward(&[got], &mut cache, Logits::Last)
                .expect("decode");
        }
        eprintln!(
            "{mix} {:?}: {position} of {} positions checked before the first near-tie",
            case["prompt"],
            want.len()
        );
        checked.push(position);
    }
    checked
}

fn reproduces_the_greedy_reference(path: &Path, mix: &str) {
    let model = load(path);
    let prompts = reference(mix)["results"].as_array().expect("results").len();
    for case in reference(mix)["results"].as_array().expect("results") {
        let prompt = case["prompt"].as_str().expect("prompt");
        let want = ids(&case["prompt_token_ids_as_evaluated"]);
        assert_eq!(
            model.tokenizer.encode(prompt).expect("encodes"),
            want,
            "{mix}: token ids of {prompt:?}"
        );
    }
    let checked = greedy_matches_until_the_first_tie(&model, mix);
    assert_eq!(checked.len(), prompts);
    assert!(
        checked.iter().sum::<usize>() >= prompts,
        "{mix}: the comparison checked only {checked:?} positions"
    );
}

#[test]
fn gemma_q4_k_m_reproduces_the_greedy_reference() {
    if let Some(path) = q4_k_m_path() {
        reproduces_the_greedy_reference(&path, "Q4_K_M");
    }
}

#[test]
fn gemma_q5_k_m_reproduces_the_greedy_reference() {
    if let Some(path) = q5_k_m_path() {
        reproduces_the_greedy_reference(&path, "Q5_K_M");
    }
}

#[test]
fn gemma_q5_k_m_requantization_equals_llama_quantize_bit_for_bit() {
    if let Some(path) = q5_k_m_path() {
        let bytes = std::fs::read(&path).expect("reads the requantized file");
        let digest = format!("{:x}", Sha256::digest(&bytes));
        assert_eq!(digest, Q5_K_M_SHA256, "sha256 of {}", path.display());
    }
}

#[test]
fn llama_server_evaluates_the_last_four_prompt_tokens_apart() {
    let whole = |end| [std::ops::Range { start: 0, end }];
    assert_eq!(server_prompt_batches(3), whole(3));
    assert_eq!(server_prompt_batches(4), whole(4));
    assert_eq!(server_prompt_batches(6), [0..2, 2..6]);
    assert_eq!(server_prompt_batches(600), [0..84, 84..596, 596..600]);
}

#[test]
fn gemma_perplexity_matches_llama_cpp_q4_k_m() {
    if let Some(path) = q4_k_m_path() {
        assert_perplexity_within_one_percent(&load(&path), "gemma Q4_K_M", 15.5155);
    }
}

#[test]
fn gemma_perplexity_matches_llama_cpp_q5_k_m() {
    if let Some(path) = q5_k_m_path() {
        assert_perplexity_within_one_percent(&load(&path), "gemma Q5_K_M", 16.5333);
    }
}
