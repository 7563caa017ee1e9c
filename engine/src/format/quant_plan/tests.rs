use std::collections::BTreeMap;

use super::*;
use crate::{
    format::gguf_writer::GgufWriter,
    quant::{self, QK_K},
};

/// Gemma 3 270M's layers that llama.cpp's mixes give more bits (`use_more_bits` of 18).
const GEMMA_MORE_BITS_LAYERS: [usize; 9] = [0, 1, 4, 7, 10, 13, 15, 16, 17];

/// A Gemma 3 270M in miniature: its metadata keys, tensor names, row lengths (640, 1024, 2048)
/// and 18 layers, with a few rows per matrix, all in `kind` where blocks allow (F32 otherwise).
pub(crate) fn mini_gemma(kind: GgmlType, tied: bool) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", MetaValue::String("gemma3".into()))
        .metadata("general.name", MetaValue::String("mini".into()))
        .metadata("gemma3.block_count", MetaValue::U32(18))
        .metadata("gemma3.embedding_length", MetaValue::U32(640))
        .metadata("general.quantization_version", MetaValue::U32(2))
        .metadata("general.file_type", MetaValue::U32(0))
        .metadata("tokenizer.ggml.model", MetaValue::String("llama".into()));
    let mut seed = 1u32;
    let mut matrix = |w: &mut GgufWriter, name: &str, columns: u64, rows: u64| {
        let values: Vec<f32> = (0..columns * rows)
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect();
        let kind = if columns.is_multiple_of(kind.block_size() as u64) {
            kind
        } else {
            GgmlType::F32
        };
        let bytes = quant::quantize_bytes(kind, &values).expect("whole blocks");
        w.tensor(name, &[columns, rows], kind, bytes);
    };
    let norm = |w: &mut GgufWriter, name: &str, width: u64| {
        let bytes: Vec<u8> = (0..width).flat_map(|_| 1f32.to_le_bytes()).collect();
        w.tensor(name, &[width], GgmlType::F32, bytes);
    };
    // The file order of a converted model (not llama-quantize's order).
    matrix(&mut w, "token_embd.weight", 640, 8);
    for i in 0..18 {
        let name = |part: &str| format!("blk.{i}.{part}");
        norm(&mut w, &name("attn_norm.weight"), 640);
        matrix(&mut w, &name("attn_q.weight"), 640, 4);
        matrix(&mut w, &name("attn_k.weight"), 640, 2);
        matrix(&mut w, &name("attn_v.weight"), 640, 2);
        norm(&mut w, &name("attn_q_norm.weight"), 256);
        norm(&mut w, &name("attn_k_norm.weight"), 256);
        matrix(&mut w, &name("attn_output.weight"), 1024, 2);
        norm(&mut w, &name("post_attention_norm.weight"), 640);
        norm(&mut w, &name("ffn_norm.weight"), 640);
        matrix(&mut w, &name("ffn_gate.weight"), 640, 4);
        matrix(&mut w, &name("ffn_up.weight"), 640, 4);
        matrix(&mut w, &name("ffn_down.weight"), 2048, 2);
        norm(&mut w, &name("post_ffw_norm.weight"), 640);
    }
    norm(&mut w, "output_norm.weight", 640);
    if !tied {
        matrix(&mut w, "output.weight", 640, 8);
    }
    w
}

pub(crate) fn parse(w: &GgufWriter) -> GgufFile {
    GgufFile::from_bytes(Path::new("mini.gguf"), w.to_bytes()).expect("parses")
}

fn counts(tensors: &[TensorPlan]) -> BTreeMap<&'static str, usize> {
    type_counts(tensors)
        .into_iter()
        .map(|(kind, n)| (kind.name(), n))
        .collect()
}

fn type_of<'a>(tensors: &'a [TensorPlan], name: &str) -> &'a TensorPlan {
    tensors.iter().find(|t| t.name == name).expect(name)
}

#[test]
fn more_bits_layers_are_llama_cpps() {
    let layers: Vec<usize> = (0..18).filter(|&i| use_more_bits(i, 18)).collect();
    assert_eq!(layers, GEMMA_MORE_BITS_LAYERS);
    let layers: Vec<usize> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
    assert_eq!(
        layers,
        [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    );
}

#[test]
fn tensors_are_ordered_by_layer_then_name() {
    let mut names = vec![
        "blk.10.attn_q.weight",
        "output_norm.weight",
        "blk.2.ffn_up.weight",
        "blk.2.attn_k.weight",
        "token_embd.weight",
        "blk.0.attn_v.weight",
    ];
    names.sort_by(|a, b| weight_order(a, b));
    assert_eq!(
        names,
        [
            "output_norm.weight",
            "token_embd.weight",
            "blk.0.attn_v.weight",
            "blk.2.attn_k.weight",
            "blk.2.ffn_up.weight",
            "blk.10.attn_q.weight",
        ]
    );
}

#[test]
fn categories_and_quantizable_tensors_follow_llama_cpp() {
    assert_eq!(Category::of("blk.0.attn_v.weight"), Category::AttentionV);
    assert_eq!(
        Category::of("blk.0.attn_qkv.weight"),
        Category::AttentionQkv
    );
    assert_eq!(
        Category::of("blk.3.ffn_down_exps.weight"),
        Category::FfnDown
    );
    assert_eq!(Category::of("output.weight"), Category::Output);
    assert_eq!(Category::of("blk.0.attn_k_norm.weight"), Category::Other);
    assert!(allows_quantization("blk.0.attn_q.weight", 2));
    assert!(!allows_quantization("blk.0.attn_norm.weight", 2));
    assert!(!allows_quantization("blk.0.ffn_gate_inp.weight", 2));
    assert!(!allows_quantization("blk.0.attn_q.bias", 2));
    assert!(!allows_quantization("token_embd.weight", 1));
    assert_eq!(ggml_n_dims(&[640, 1]), 1);
    assert_eq!(ggml_n_dims(&[640, 2, 1]), 2);
    assert_eq!(ggml_n_dims(&[1]), 1);
}

#[test]
fn fallbacks_for_rows_that_are_not_whole_super_blocks() {
    assert_eq!(fallback(640, GgmlType::Q4K), GgmlType::Q5_0);
    assert_eq!(fallback(640, GgmlType::Q5K), GgmlType::Q5_1);
    assert_eq!(fallback(640, GgmlType::Q6K), GgmlType::Q8_0);
    assert_eq!(fallback(1024, GgmlType::Q5K), GgmlType::Q5K);
    assert_eq!(fallback(48, GgmlType::Q6K), GgmlType::F16);
    assert_eq!(fallback(48, GgmlType::Q4_0), GgmlType::F16);
}

/// The mix of the real Gemma 3 270M Q4_K_M file, and of llama-quantize's Q5_K_M from it.

#[test]
fn gemma_mixes_match_llama_quantize() {
    let file = parse(&mini_gemma(GgmlType::F32, true));
    let q4 = plan(&file, FileType::Q4KM).unwrap();
    assert_eq!(
        counts(&q4),
        BTreeMap::from([
            ("F32", 109),
            ("Q4_K", 27),
            ("Q5_0", 81),
            ("Q6_K", 9),
            ("Q8_0", 10)
        ])
    );
    let q5 = plan(&file, FileType::Q5KM).unwrap();
    assert_eq!(
        counts(&q5),
        BTreeMap::from([
            ("F32", 109),
            ("Q5_K", 27),
            ("Q5_1", 81),
            ("Q6_K", 9),
            ("Q8_0", 10)
        ])
    );
    for i in 0..18 {
        let more = GEMMA_MORE_BITS_LAYERS.contains(&i);
        let v = type_of(&q5, &format!("blk.{i}.attn_v.weight")).to;
        let down = type_of(&q5, &format!("blk.{i}.ffn_down.weight")).to;
        assert_eq!(
            v,
            if more { GgmlType::Q8_0 } else { GgmlType::Q5_1 },
            "layer {i}"
        );
        assert_eq!(
            down,
            if more { GgmlType::Q6K } else { GgmlType::Q5K },
            "layer {i}"
        );
        let q = type_of(&q5, &format!("blk.{i}.attn_q.weight")).to;
        assert_eq!(q, GgmlType::Q5_1);
        let out = type_of(&q5, &format!("blk.{i}.attn_output.weight")).to;
        assert_eq!(out, GgmlType::Q5K);
    }
    assert_eq!(type_of(&q5, "token_embd.weight").to, GgmlType::Q8_0);
    assert_eq!(q5[0].name, "output_norm.weight");
    assert_eq!(q5[1].name, "token_embd.weight");
    assert_eq!(q5[2].name, "blk.0.attn_k.weight");
}

#[test]
fn plain_mixes_and_the_output_head() {
    let file = parse(&mini_gemma(GgmlType::F32, false));
    let q8 = plan(&file, FileType::Q8_0).unwrap();
    assert_eq!(counts(&q8), BTreeMap::from([("F32", 109), ("Q8_0", 128)]));
    let q4 = plan(&file, FileType::Q4_0).unwrap();
    // The output head of a Q4_0 file is Q6_K, here Q8_0 for its 640-wide rows; untied
    // embeddings keep the file's default type.
    assert_eq!(type_of(&q4, "output.weight").to, GgmlType::Q8_0);
    assert_eq!(type_of(&q4, "token_embd.weight").to, GgmlType::Q4_0);
    assert_eq!(type_of(&q4, "blk.3.ffn_down.weight").to, GgmlType::Q4_0);
    let f16 = plan(&file, FileType::F16).unwrap();
    assert_eq!(counts(&f16), BTreeMap::from([("F16", 128), ("F32", 109)]));
    let q4ks = plan(&file, FileType::Q4KS).unwrap();
    assert_eq!(type_of(&q4ks, "blk.1.ffn_down.weight").to, GgmlType::Q5K);
    assert_eq!(type_of(&q4ks, "blk.2.ffn_down.weight").to, GgmlType::Q4K);
    assert_eq!(type_of(&q4ks, "blk.3.attn_v.weight").to, GgmlType::Q5_1);
    assert_eq!(type_of(&q4ks, "blk.4.attn_v.weight").to, GgmlType::Q5_0);
}

#[test]
fn files_without_architecture_or_block_count_are_refused() {
    let mut w = mini_gemma(GgmlType::F32, true);
    w.remove_metadata("gemma3.block_count");
    let err = plan(&parse(&w), FileType::Q5KM).unwrap_err();
    assert!(err.to_string().contains("gemma3.block_count"), "{err}");
    w.remove_metadata("general.architecture");
    let err = plan(&parse(&w), FileType::Q5KM).unwrap_err();
    assert!(err.to_string().contains("general.architecture"), "{err}");
}

#[test]
fn file_types_parse_by_name() {
    for ftype in FileType::ALL {
        assert_eq!(ftype.name().parse::<FileType>(), Ok(ftype));
    }
    assert_eq!("Q5_K_M".parse::<FileType>(), Ok(FileType::Q5KM));
    let err = "q3_k".parse::<FileType>().unwrap_err();
    assert!(err.contains("q5_k_m"), "{err}");
    assert_eq!(FileType::Q5KM.id(), 17);
    assert_eq!(FileType::Q4KM.default_type().block_size(), QK_K);
}
