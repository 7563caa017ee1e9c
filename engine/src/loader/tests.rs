//! Hugging Face folders written by the converter from tiny GGUF models, read back by
//! [`SafetensorsFolder`] and [`load_folder`].

use std::{
    borrow::Cow,
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use serde_json::json;

use super::*;
use crate::{
    convert::{
        ConvertOptions, HfDtype, gguf_to_hf,
        test_model::{DIM, FFN, TinySpec, tiny_gguf},
    },
    format::{
        TensorSource,
        safetensors::{CONFIG_FILE, HfLlamaConfig, INDEX_FILE, SafetensorsFolder, WEIGHTS_FILE},
    },
    model::{Logits, RopeStyle},
    quant::GgmlType,
    weights::WeightType,
};

/// A tiny model converted to a Hugging Face folder (`tmp/hf`).
fn hf_folder(spec: TinySpec, dtype: HfDtype) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let gguf =
        GgufFile::from_bytes(Path::new("tiny.gguf"), tiny_gguf(spec)).expect("tiny GGUF parses");
    let dir = tmp.path().join("hf");
    gguf_to_hf(
        &gguf,
        &dir,
        ConvertOptions {
            dtype,
            force: false,
        },
    )
    .expect("converts");
    (tmp, dir)
}

fn llama() -> TinySpec {
    TinySpec {
        arch: "llama",
        tied: false,
        bias: false,
        seed: 11,
    }
}

/// An owned tensor for rewriting safetensors files.
type Owned = (String, Dtype, Vec<usize>, Vec<u8>);

fn read_tensors(path: &Path) -> Vec<Owned> {
    let bytes = std::fs::read(path).expect("read weights");
    let st = SafeTensors::deserialize(&bytes).expect("valid safetensors");
    let mut tensors: Vec<Owned> = st
        .iter()
        .map(|(n, t)| {
            (
                n.to_string(),
                t.dtype(),
                t.shape().to_vec(),
                t.data().to_vec(),
            )
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

fn write_tensors(path: &Path, tensors: &[Owned]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.as_str(),
                TensorView::new(*d, s.clone(), b).expect("consistent view"),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).expect("serializes");
    std::fs::write(path, bytes).expect("write weights");
}

/// Rewrites `model.safetensors` through `edit` (`None` drops the tensor).
fn rewrite(dir: &Path, edit: impl Fn(Owned) -> Option<Owned>) {
    let path = dir.join(WEIGHTS_FILE);
    let tensors: Vec<Owned> = read_tensors(&path).into_iter().filter_map(edit).collect();
    write_tensors(&path, &tensors);
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(CONFIG_FILE);
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    edit(&mut config);
    std::fs::write(&path, config.to_string()).expect("write");
}

fn open_err(dir: &Path) -> String {
    match SafetensorsFolder::open(dir) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// Splits `model.safetensors` into two shards and an index.
fn shard(dir: &Path) -> BTreeMap<String, String> {
    let tensors = read_tensors(&dir.join(WEIGHTS_FILE));
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let (a, b): (Vec<_>, Vec<_>) = tensors
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 2 == 0);
    let mut weight_map = BTreeMap::new();
    for (file, part) in names.iter().zip([a, b]) {
        let part: Vec<Owned> = part.into_iter().map(|(_, t)| t).collect();
        weight_map.extend(part.iter().map(|t| (t.0.clone(), file.to_string())));
        write_tensors(&dir.join(file), &part);
    }
    std::fs::remove_file(dir.join(WEIGHTS_FILE)).expect("remove the single file");
    write_index(dir, &weight_map);
    weight_map
}

fn write_index(dir: &Path, weight_map: &BTreeMap<String, String>) {
    let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.join(INDEX_FILE), index.to_string()).expect("write index");
}

#[test]
fn tensors_are_borrowed_except_llama_q_and_k() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F16);
    let folder = SafetensorsFolder::open(&dir).expect("opens");
    assert_eq!(folder.config().rope_style, RopeStyle::Interleaved);
    let v = folder
        .tensor("blk.0.attn_v.weight")
        .expect("reads")
        .expect("present");
    assert!(matches!(v.data, Cow::Borrowed(_)));
    assert_eq!(
        (v.kind, v.dims.as_slice()),
        (GgmlType::F16, &[DIM as u64, 32][..])
    );
    let q = folder
        .tensor("blk.0.attn_q.weight")
        .expect("reads")
        .expect("present");
    assert!(matches!(q.data, Cow::Owned(_)));
    let down = folder
        .tensor("blk.1.ffn_down.weight")
        .expect("reads")
        .expect("present");
    assert_eq!(down.dims, [FFN as u64, DIM as u64]);
    assert!(folder.tensor("blk.0.attn_q.bias").expect("reads").is_none());
    assert!(folder.tensor("rope_freqs.weight").expect("reads").is_none());

    let qwen = TinySpec {
        arch: "qwen2",
        tied: true,
        bias: true,
        seed: 12,
    };
    let (_tmp, dir) = hf_folder(qwen, HfDtype::Bf16);
    let folder = SafetensorsFolder::open(&dir).expect("opens");
    assert_eq!(folder.config().rope_style, RopeStyle::Neox);
    let q = folder
        .tensor("blk.0.attn_q.weight")
        .expect("reads")
        .expect("present");
    assert!(
        matches!(q.data, Cow::Borrowed(_)),
        "qwen2 rows are not permuted"
    );
    assert_eq!(q.kind, GgmlType::BF16);
    assert!(
        folder.tensor("output.weight").expect("reads").is_none(),
        "tied"
    );
}

#[test]
fn sharded_folder_gives_the_same_logits() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    let options = LoadOptions {
        weights: Some(WeightType::F32),
        threads: 1,
        placement: Default::default(),
    };
    let tokens = [1, 2, 3, 100, 200, 256];
    let run = |dir: &Path| {
        let loaded = load_folder(dir, options).expect("loads");
        let mut cache = loaded.model.new_cache(tokens.len());
        loaded
            .model
            .forward(&tokens, &mut cache, Logits::All)
            .expect("forward")
    };
    let single = run(&dir);
    shard(&dir);
    assert_eq!(
        SafetensorsFolder::open(&dir)
            .expect("opens")
            .files()
            .count(),
        2
    );
    assert_eq!(run(&dir), single);
}

#[test]
fn bad_index_is_named() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    let mut weight_map = shard(&dir);

    let [first, second] = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let holder = weight_map["model.embed_tokens.weight"].clone();
    let wrong = if holder == first { second } else { first };
    weight_map.insert("model.embed_tokens.weight".into(), wrong.into());
    write_index(&dir, &weight_map);
    let err = open_err(&dir);
    let want = format!(
        "{INDEX_FILE}: bad index: tensor model.embed_tokens.weight is listed in {wrong}, which does not hold it"
    );
    assert!(err.contains(&want), "{err}");

    weight_map.insert(
        "model.embed_tokens.weight".into(),
        "model-00003-of-00002.safetensors".into(),
    );
    write_index(&dir, &weight_map);
    let err = open_err(&dir);
    assert!(
        err.contains("shard model-00003-of-00002.safetensors is missing"),
        "{err}"
    );

    weight_map.insert(
        "model.embed_tokens.weight".into(),
        "../model.safetensors".into(),
    );
    write_index(&dir, &weight_map);
    let err = open_err(&dir);
    assert!(err.contains("is not a file name in the folder"), "{err}");

    std::fs::write(dir.join(INDEX_FILE), "{\"weight_map\": 3}").expect("write");
    let err = open_err(&dir);
    assert!(err.contains("bad index"), "{err}");

    std::fs::remove_file(dir.join(INDEX_FILE)).expect("remove");
    let err = open_err(&dir);
    assert!(
        err.contains("neither model.safetensors nor model.safetensors.index.json"),
        "{err}"
    );
}

#[test]
fn missing_tensor_is_named() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    rewrite(&dir, |t| {
        (t.0 != "model.layers.1.mlp.up_proj.weight").then_some(t)
    });
    let err = open_err(&dir);
    assert!(err.contains("tensor model.layers.1.mlp.up_proj.weight is missing (the model needs it as blk.1.ffn_up.weight)"), "{err}");
    assert!(err.starts_with(&dir.display().to_string()), "{err}");

    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    rewrite(&dir, |t| (t.0 != "lm_head.weight").then_some(t));
    let err = open_err(&dir);
    assert!(
        err.contains("lm_head.weight is missing (config.json says tie_word_embeddings is false)"),
        "{err}"
    );
}

#[test]
fn bad_shape_is_named() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    rewrite(&dir, |(name, dtype, shape, bytes)| {
        if name == "model.layers.0.self_attn.k_proj.weight" {
            // Same bytes, rows and columns swapped: [64, 32] instead of [32, 64].
            Some((name, dtype, vec![shape[1], shape[0]], bytes))
        } else {
            Some((name, dtype, shape, bytes))
        }
    });
    let err = open_err(&dir);
    assert!(err.contains("model.safetensors: tensor model.layers.0.self_attn.k_proj.weight has shape [64, 32], config.json implies [32, 64]"), "{err}");
}

#[test]
fn unsupported_dtype_is_named() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    rewrite(&dir, |(name, dtype, shape, bytes)| {
        let dtype = if name == "model.norm.weight" {
            Dtype::I32
        } else {
            dtype
        };
        Some((name, dtype, shape, bytes))
    });
    let err = SafetensorsFolder::open(&dir).err().expect("refused");
    assert!(matches!(err, Error::UnsupportedType { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("tensor model.norm.weight has unsupported type I32"),
        "{text}"
    );
}

#[test]
fn truncated_weights_are_refused() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    let path = dir.join(WEIGHTS_FILE);
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("write");
    let err = open_err(&dir);
    assert!(
        err.contains("model.safetensors: not a valid safetensors file"),
        "{err}"
    );
}

#[test]
fn config_problems_are_named() {
    let (tmp, dir) = hf_folder(llama(), HfDtype::F32);
    let err = open_err(tmp.path());
    assert!(err.contains("config.json is missing"), "{err}");

    edit_config(&dir, |c| {
        c.as_object_mut().expect("object").remove("hidden_size");
    });
    let err = open_err(&dir);
    assert!(
        err.contains("config.json: invalid config: missing field `hidden_size`"),
        "{err}"
    );

    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    edit_config(&dir, |c| {
        c["model_type"] = "gpt2".into();
        c["architectures"] = json!(["GPT2LMHeadModel"]);
    });
    assert!(open_err(&dir).contains("is not supported (supported: llama, qwen2)"));

    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    edit_config(&dir, |c| {
        c["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0})
    });
    assert!(open_err(&dir).contains("rope_scaling of type \"llama3\" is not supported"));

    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    edit_config(&dir, |c| c["num_key_value_heads"] = 3.into());
    assert!(open_err(&dir).contains("4 heads are not a multiple of 3 kv heads"));

    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    edit_config(&dir, |c| c["head_dim"] = 32.into());
    // A head size of its own (as Gemma's) is taken, so the projections' shapes must follow it.
    let err = open_err(&dir);
    assert!(
        err.contains("self_attn.") && err.contains("config.json implies"),
        "{err}"
    );
}

#[test]
fn config_without_optional_keys_uses_transformers_defaults() {
    let text = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 260, "rope_scaling": null}"#;
    let hf: HfLlamaConfig = serde_json::from_str(text).expect("parses");
    let config = hf.to_llama_config(Path::new("config.json")).expect("valid");
    assert_eq!(config.architecture, "llama");
    assert_eq!((config.n_kv_heads, config.head_dim), (4, 16));
    assert_eq!(
        (config.rope_theta, config.rms_eps, config.context_length),
        (10_000.0, 1e-6, 2048)
    );
}

#[test]
fn missing_tokenizer_is_named() {
    let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
    std::fs::remove_file(dir.join(TOKENIZER_FILE)).expect("remove");
    let err = load_folder(&dir, LoadOptions::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("tokenizer.json is missing"), "{err}");
}
