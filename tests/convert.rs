//! `strata model convert` on the real SmolLM2 GGUF: the Hugging Face folder it writes loads back
//! into the same model (same f32 logits) and the same tokenizer (same ids for the reference prompts).

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use strata_engine::{
    loader::{LoadedModel, ModelFormat},
    model::{LoadOptions, Logits},
    weights::WeightType,
};

use crate::common;

/// Largest allowed difference between the logits of the GGUF file and of its f32 conversion.
const F32_LOGIT_TOLERANCE: f32 = 1e-4;

/// Runs `strata model convert` on the SmolLM2 GGUF into `out` and returns its stdout.
fn convert(out: &Path, dtype: &str) -> String {
    let gguf = common::smollm2_path();
    let output = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["model", "convert"])
        .arg(&gguf)
        .arg(out)
        .args(["--dtype", dtype])
        .env_remove("RUST_LOG")
        .output()
        .expect("run strata");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "convert failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    for file in [
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(out.join(file).is_file(), "{file} was not written");
        assert!(
            stdout.contains(file),
            "stdout does not list {file}: {stdout}"
        );
    }
    stdout
}

/// The reference prompts llama.cpp tokenized, with its token ids.
fn reference_prompts() -> Vec<(String, Vec<u32>)> {
    let path = common::reference_dir().join("SmolLM2-135M-Instruct.F32-kvf32-greedy.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).expect("reference JSON");
    json["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|case| {
            let prompt = case["prompt"].as_str().expect("prompt").to_string();
            let ids = case["prompt_token_ids_as_evaluated"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|v| v.as_u64().expect("id") as u32)
                .collect();
            (prompt, ids)
        })
        .collect()
}

fn open(path: &Path) -> LoadedModel {
    let options = LoadOptions {
        weights: Some(WeightType::F32),
        threads: 0,
        placement: Default::default(),
    };
    LoadedModel::open(path, options).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn f32_conversion_gives_the_same_logits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("smollm2-hf");
    let stdout = convert(&out, "f32");
    assert!(stdout.contains("272 tensors as f32"), "{stdout}");

    let gguf = open(&common::smollm2_path());
    let hf = open(&out);
    assert_eq!(hf.format, ModelFormat::HuggingFace);
    assert_eq!(hf.model.config(), gguf.model.config());
    for (prompt, _) in reference_prompts() {
        let tokens = gguf.tokenizer.encode(&prompt).expect("encodes");
        let run = |model: &LoadedModel| {
            let mut cache = model.model.new_cache(tokens.len());
            model
                .model
                .forward(&tokens, &mut cache, Logits::All)
                .expect("forward")
        };
        let (want, got) = (run(&gguf), run(&hf));
        assert_eq!(want.len(), got.len());
        let diff = want
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        eprintln!(
            "{prompt:?}: {} tokens, max abs logit difference {diff}",
            tokens.len()
        );
        assert!(
            diff < F32_LOGIT_TOLERANCE,
            "{prompt:?}: max abs logit difference {diff}"
        );
    }
}

#[test]
fn converted_tokenizer_encodes_like_the_gguf_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("smollm2-hf-bf16");
    convert(&out, "bf16");

    let gguf = open(&common::smollm2_path());
    let hf = open(&out);
    assert_eq!(
        (hf.tokenizer.bos(), hf.tokenizer.eos()),
        (gguf.tokenizer.bos(), gguf.tokenizer.eos())
    );
    assert_eq!(hf.tokenizer.adds_bos(), gguf.tokenizer.adds_bos());
    assert_eq!(hf.tokenizer.chat_template(), gguf.tokenizer.chat_template());
    for (prompt, ids) in reference_prompts() {
        assert_eq!(
            gguf.tokenizer.encode(&prompt).expect("encodes"),
            ids,
            "GGUF: {prompt:?}"
        );
        assert_eq!(
            hf.tokenizer.encode(&prompt).expect("encodes"),
            ids,
            "tokenizer.json: {prompt:?}"
        );
    }
    let text =
        std::fs::read_to_string(common::reference_dir().join("perplexity-text.txt")).expect("text");
    assert_eq!(
        hf.tokenizer.encode(&text).expect("encodes"),
        gguf.tokenizer.encode(&text).expect("encodes")
    );
}
