//! A tiny random Llama/Qwen2 GGUF file built in memory, for the converter's tests and those of the
//! Hugging Face folders it writes.

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::{format::gguf::MetaValue, quant, quant::GgmlType};

/// Shape and options of a tiny model.
#[derive(Clone, Copy)]
pub(crate) struct TinySpec {
    pub(crate) arch: &'static str,
    /// No `output.weight`: the embedding is the head.
    pub(crate) tied: bool,
    /// Q/K/V biases.
    pub(crate) bias: bool,
    pub(crate) seed: u64,
}

pub(crate) const DIM: usize = 64;
pub(crate) const HEADS: usize = 4;
pub(crate) const KV_HEADS: usize = 2;
pub(crate) const FFN: usize = 96;
pub(crate) const LAYERS: usize = 2;
const KV_DIM: usize = DIM / HEADS * KV_HEADS;

/// GPT-2's printable stand-in for each byte, in byte order.
fn byte_alphabet() -> Vec<String> {
    let mut extra = 0u32;
    (0u32..256)
        .map(|b| {
            let printable =
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            let code = if printable {
                b
            } else {
                extra += 1;
                255 + extra
            };
            char::from_u32(code).expect("a valid char").to_string()
        })
        .collect()
}

/// Vocabulary: the 256 byte tokens, two merges, two control tokens (BOS, EOS).
pub(crate) fn vocab() -> Vec<String> {
    let mut tokens = byte_alphabet();
    tokens.extend(["he", "Ġt", "<|im_start|>", "<|im_end|>"].map(String::from));
    tokens
}

struct Tensor {
    name: String,
    dims: Vec<u64>,
    kind: GgmlType,
    data: Vec<u8>,
}

/// GGUF v3 bytes: header, metadata, tensor table, 32-byte aligned data.
fn gguf_bytes(metadata: &[(&str, MetaValue)], tensors: &[Tensor]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    fn type_id(value: &MetaValue) -> u32 {
        match value {
            MetaValue::U32(_) => 4,
            MetaValue::I32(_) => 5,
            MetaValue::F32(_) => 6,
            MetaValue::Bool(_) => 7,
            MetaValue::String(_) => 8,
            MetaValue::Array(_) => 9,
            other => panic!("the test writer does not write {other:?}"),
        }
    }
    fn value(out: &mut Vec<u8>, v: &MetaValue) {
        match v {
            MetaValue::U32(v) => out.extend(v.to_le_bytes()),
            MetaValue::I32(v) => out.extend(v.to_le_bytes()),
            MetaValue::F32(v) => out.extend(v.to_le_bytes()),
            MetaValue::Bool(v) => out.push(u8::from(*v)),
            MetaValue::String(s) => string(out, s),
            MetaValue::Array(items) => {
                out.extend(items.first().map_or(8, type_id).to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|item| value(out, item));
            }
            other => panic!("the test writer does not write {other:?}"),
        }
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, v) in metadata {
        string(&mut out, key);
        out.extend(type_id(v).to_le_bytes());
        value(&mut out, v);
    }
    let mut offset = 0u64;
    for t in tensors {
        string(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(t.kind.id().to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += (t.data.len() as u64).next_multiple_of(32);
    }
    for t in tensors {
        out.resize(out.len().next_multiple_of(32), 0);
        out.extend(&t.data);
    }
    out
}

fn encode(kind: GgmlType, values: &[f32]) -> Vec<u8> {
    match kind {
        GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::BF16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => {
            let mut blocks = vec![quant::BlockQ8_0::default(); values.len() / quant::QK];
            quant::quantize_q8_0(values, &mut blocks);
            quant::q8_0_bytes(&blocks)
        }
        other => panic!("the test writer does not encode {other}"),
    }
}

/// A tiny random model as GGUF bytes: a mix of F32, F16 and Q8_0 tensors.
pub(crate) fn tiny_gguf(spec: TinySpec) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let tokens = vocab();
    let n_vocab = tokens.len();
    let mut tensors = Vec::new();
    let mut add =
        |name: String, rows: usize, cols: usize, kind: GgmlType, center: f32, spread: f32| {
            let values: Vec<f32> = (0..rows * cols)
                .map(|_| center + rng.random_range(-spread..spread))
                .collect();
            let dims = if rows == 1 {
                vec![cols as u64]
            } else {
                vec![cols as u64, rows as u64]
            };
            tensors.push(Tensor {
                name,
                dims,
                kind,
                data: encode(kind, &values),
            });
        };
    let w = 1.0 / (DIM as f32).sqrt();
    add(
        "token_embd.weight".into(),
        n_vocab,
        DIM,
        GgmlType::F16,
        0.0,
        1.0,
    );
    if !spec.tied {
        add("output.weight".into(), n_vocab, DIM, GgmlType::Q8_0, 0.0, w);
    }
    add("output_norm.weight".into(), 1, DIM, GgmlType::F32, 1.0, 0.2);
    for i in 0..LAYERS {
        let name = |s: &str| format!("blk.{i}.{s}");
        add(name("attn_norm.weight"), 1, DIM, GgmlType::F32, 1.0, 0.2);
        add(
            name("attn_q.weight"),
            DIM,
            DIM,
            GgmlType::Q8_0,
            0.0,
            2.0 * w,
        );
        add(
            name("attn_k.weight"),
            KV_DIM,
            DIM,
            GgmlType::F32,
            0.0,
            2.0 * w,
        );
        add(name("attn_v.weight"), KV_DIM, DIM, GgmlType::F16, 0.0, w);
        add(name("attn_output.weight"), DIM, DIM, GgmlType::Q8_0, 0.0, w);
        if spec.bias {
            add(name("attn_q.bias"), 1, DIM, GgmlType::F32, 0.0, 0.5);
            add(name("attn_k.bias"), 1, KV_DIM, GgmlType::F32, 0.0, 0.5);
            add(name("attn_v.bias"), 1, KV_DIM, GgmlType::F32, 0.0, 0.5);
        }
        add(name("ffn_norm.weight"), 1, DIM, GgmlType::F32, 1.0, 0.2);
        add(name("ffn_gate.weight"), FFN, DIM, GgmlType::Q8_0, 0.0, w);
        add(name("ffn_up.weight"), FFN, DIM, GgmlType::F32, 0.0, w);
        add(
            name("ffn_down.weight"),
            DIM,
            FFN,
            GgmlType::Q8_0,
            0.0,
            1.0 / (FFN as f32).sqrt(),
        );
    }
    let arch = spec.arch;
    let key = |k: &str| format!("{arch}.{k}");
    let strings =
        |items: Vec<String>| MetaValue::Array(items.into_iter().map(MetaValue::String).collect());
    let types = (0..n_vocab)
        .map(|i| MetaValue::I32(if i >= n_vocab - 2 { 3 } else { 1 }))
        .collect();
    let metadata: Vec<(String, MetaValue)> = vec![
        (
            "general.architecture".into(),
            MetaValue::String(arch.into()),
        ),
        (key("block_count"), MetaValue::U32(LAYERS as u32)),
        (key("context_length"), MetaValue::U32(128)),
        (key("embedding_length"), MetaValue::U32(DIM as u32)),
        (key("feed_forward_length"), MetaValue::U32(FFN as u32)),
        (key("attention.head_count"), MetaValue::U32(HEADS as u32)),
        (
            key("attention.head_count_kv"),
            MetaValue::U32(KV_HEADS as u32),
        ),
        (key("rope.freq_base"), MetaValue::F32(10_000.0)),
        (
            key("attention.layer_norm_rms_epsilon"),
            MetaValue::F32(1e-5),
        ),
        (
            "tokenizer.ggml.model".into(),
            MetaValue::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".into(),
            MetaValue::String("smollm".into()),
        ),
        ("tokenizer.ggml.tokens".into(), strings(tokens)),
        (
            "tokenizer.ggml.merges".into(),
            strings(vec!["h e".into(), "Ġ t".into()]),
        ),
        ("tokenizer.ggml.token_type".into(), MetaValue::Array(types)),
        (
            "tokenizer.ggml.bos_token_id".into(),
            MetaValue::U32(n_vocab as u32 - 2),
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            MetaValue::U32(n_vocab as u32 - 1),
        ),
        ("tokenizer.ggml.add_bos_token".into(), MetaValue::Bool(true)),
        (
            "tokenizer.chat_template".into(),
            MetaValue::String(
                "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}".into(),
            ),
        ),
    ];
    let metadata: Vec<(&str, MetaValue)> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    gguf_bytes(&metadata, &tensors)
}
