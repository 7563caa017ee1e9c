use super::{test_model::*, *};
use crate::{
    loader::{LoadedModel, ModelFormat},
    model::{LoadOptions, Logits},
    weights::WeightType,
};

const TEXT: &str = "<|im_start|>the tether held the theta";

fn write_gguf(dir: &Path, spec: TinySpec) -> PathBuf {
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, tiny_gguf(spec)).expect("write the tiny GGUF");
    path
}

fn logits(model: &LoadedModel, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.model.new_cache(tokens.len());
    model
        .model
        .forward(tokens, &mut cache, Logits::All)
        .expect("forward")
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn f32_options() -> LoadOptions {
    LoadOptions {
        weights: Some(WeightType::F32),
        threads: 1,
        placement: Default::default(),
    }
}

/// Converts a tiny model to `dtype`, loads both, and returns (GGUF logits, HF logits).
fn round_trip(spec: TinySpec, dtype: HfDtype, options: LoadOptions) -> (Vec<f32>, Vec<f32>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gguf_path = write_gguf(tmp.path(), spec);
    let out = tmp.path().join("hf");
    let gguf = GgufFile::open(&gguf_path).expect("tiny GGUF parses");
    let converted = gguf_to_hf(
        &gguf,
        &out,
        ConvertOptions {
            dtype,
            force: false,
        },
    )
    .expect("converts");
    assert_eq!(converted.tensors, gguf.tensors.len());
    assert!(converted.files.iter().all(|f| f.is_file()));

    let from_gguf = LoadedModel::open(&gguf_path, options).expect("GGUF loads");
    let from_hf = LoadedModel::open(&out, options).expect("HF folder loads");
    assert_eq!(from_hf.format, ModelFormat::HuggingFace);
    assert_eq!(from_hf.model.config(), from_gguf.model.config());
    let tokens = from_gguf.tokenizer.encode(TEXT).expect("encodes");
    assert_eq!(from_hf.tokenizer.encode(TEXT).expect("encodes"), tokens);
    assert_eq!(from_hf.tokenizer.bos(), from_gguf.tokenizer.bos());
    assert_eq!(from_hf.tokenizer.eos(), from_gguf.tokenizer.eos());
    assert_eq!(
        from_hf.tokenizer.chat_template(),
        from_gguf.tokenizer.chat_template()
    );
    (logits(&from_gguf, &tokens), logits(&from_hf, &tokens))
}

#[test]
fn f32_llama_round_trip_gives_the_same_logits() {
    let spec = TinySpec {
        arch: "llama",
        tied: false,
        bias: false,
        seed: 1,
    };
    let (gguf, hf) = round_trip(spec, HfDtype::F32, f32_options());
    let diff = max_abs_diff(&gguf, &hf);
    assert!(diff < 1e-4, "max abs logit difference {diff}");
}

#[test]
fn f32_tied_llama_with_biases_round_trips() {
    let spec = TinySpec {
        arch: "llama",
        tied: true,
        bias: true,
        seed: 2,
    };
    let (gguf, hf) = round_trip(spec, HfDtype::F32, f32_options());
    let diff = max_abs_diff(&gguf, &hf);
    assert!(diff < 1e-4, "max abs logit difference {diff}");
}

#[test]
fn f32_qwen2_round_trip_keeps_neox_rows() {
    let spec = TinySpec {
        arch: "qwen2",
        tied: true,
        bias: true,
        seed: 3,
    };
    let (gguf, hf) = round_trip(spec, HfDtype::F32, f32_options());
    let diff = max_abs_diff(&gguf, &hf);
    assert!(diff < 1e-4, "max abs logit difference {diff}");
}

#[test]
fn f16_and_bf16_folders_stay_close() {
    let spec = TinySpec {
        arch: "llama",
        tied: false,
        bias: false,
        seed: 4,
    };
    for (dtype, tolerance) in [(HfDtype::F16, 0.005), (HfDtype::Bf16, 0.03)] {
        let (gguf, hf) = round_trip(spec, dtype, f32_options());
        let scale = gguf.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = max_abs_diff(&gguf, &hf);
        assert!(
            diff < tolerance * scale.max(1.0),
            "{dtype}: max abs logit difference {diff} (largest logit {scale})"
        );
    }
}

#[test]
fn config_json_describes_the_model() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = TinySpec {
        arch: "llama",
        tied: true,
        bias: false,
        seed: 5,
    };
    let gguf = GgufFile::from_bytes(Path::new("tiny.gguf"), tiny_gguf(spec)).expect("parses");
    let out = tmp.path().join("hf");
    gguf_to_hf(
        &gguf,
        &out,
        ConvertOptions {
            dtype: HfDtype::Bf16,
            force: false,
        },
    )
    .expect("converts");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(CONFIG_FILE)).expect("config.json"))
            .expect("JSON");
    assert_eq!(config["architectures"], json!(["LlamaForCausalLM"]));
    assert_eq!(config["model_type"], "llama");
    assert_eq!(config["tie_word_embeddings"], true);
    assert_eq!(config["torch_dtype"], "bfloat16");
    assert_eq!(config["rms_norm_eps"], json!(1e-5));
    assert_eq!(config["num_key_value_heads"], KV_HEADS);
    assert_eq!(config["bos_token_id"], vocab().len() - 2);
    let tokenizer_config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join(TOKENIZER_CONFIG_FILE)).expect("read"),
    )
    .expect("JSON");
    assert_eq!(tokenizer_config["bos_token"], "<|im_start|>");
    assert_eq!(tokenizer_config["eos_token"], "<|im_end|>");
    assert_eq!(tokenizer_config["add_bos_token"], true);
    let weights = std::fs::read(out.join(WEIGHTS_FILE)).expect("weights");
    let st = safetensors::SafeTensors::deserialize(&weights).expect("valid safetensors");
    assert!(
        st.tensor("lm_head.weight").is_err(),
        "a tied model has no lm_head"
    );
    let q = st
        .tensor("model.layers.0.self_attn.q_proj.weight")
        .expect("q_proj");
    assert_eq!((q.dtype(), q.shape()), (Dtype::BF16, &[DIM, DIM][..]));
    let down = st
        .tensor("model.layers.1.mlp.down_proj.weight")
        .expect("down_proj");
    assert_eq!(down.shape(), [DIM, FFN]);
}

#[test]
fn refuses_a_non_empty_folder_without_force() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = TinySpec {
        arch: "llama",
        tied: true,
        bias: false,
        seed: 6,
    };
    let gguf = GgufFile::from_bytes(Path::new("tiny.gguf"), tiny_gguf(spec)).expect("parses");
    std::fs::write(tmp.path().join("notes.txt"), "keep me").expect("write");
    let options = ConvertOptions {
        dtype: HfDtype::F32,
        force: false,
    };
    let err = gguf_to_hf(&gguf, tmp.path(), options).expect_err("refuses");
    assert!(matches!(err, Error::Write { .. }), "{err}");
    assert!(err.to_string().contains("not empty"), "{err}");
    assert!(
        !tmp.path().join(WEIGHTS_FILE).exists(),
        "nothing was written"
    );

    gguf_to_hf(
        &gguf,
        tmp.path(),
        ConvertOptions {
            force: true,
            ..options
        },
    )
    .expect("force writes");
    assert!(tmp.path().join(WEIGHTS_FILE).is_file());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("notes.txt")).expect("kept"),
        "keep me"
    );

    let file = tmp.path().join("notes.txt");
    let err = gguf_to_hf(&gguf, &file, options).expect_err("a file is not a folder");
    assert!(err.to_string().contains("not a folder"), "{err}");
}

#[test]
fn dtype_names_parse() {
    for dtype in [HfDtype::F32, HfDtype::F16, HfDtype::Bf16] {
        assert_eq!(dtype.name().parse::<HfDtype>(), Ok(dtype));
        assert_eq!(dtype.torch_name().parse::<HfDtype>(), Ok(dtype));
    }
    assert!("q4_0".parse::<HfDtype>().unwrap_err().contains("q4_0"));
}
