//! Hostile GGUF files, built in memory: each must be refused with an error that names the file and
//! the problem, never a panic. Header, metadata and tensor-table cases are written byte by byte;
//! model-level cases start from the tiny random Llama and break one thing.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng, rngs::StdRng};
use strata_engine::{
    Error,
    format::{
        gguf::{GgufFile, MetaValue},
        gguf_writer::{GgufWriter, TinyLlama, tiny_llama_gguf},
    },
    loader::LoadedModel,
    model::{LlamaConfig, LoadOptions},
    quant::GgmlType,
    tokenizer::Tokenizer,
    weights::WeightType,
};

const PATH: &str = "/models/hostile.gguf";

// Value type ids of GGUF metadata.
const T_U8: u32 = 0;
const T_U32: u32 = 4;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;

/// Little-endian bytes written field by field, for files the writer would not produce.
#[derive(Default, Clone)]
struct Raw(Vec<u8>);

impl Raw {
    /// `GGUF`, version, tensor count, metadata count.
    fn header(version: u32, tensors: u64, metadata: u64) -> Self {
        let mut raw = Self(b"GGUF".to_vec());
        raw.u32(version).u64(tensors).u64(metadata);
        raw
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }

    /// A `key = u32` metadata entry.
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(T_U32).u32(v)
    }

    /// A tensor-table entry.
    fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }

    /// Pads to the default alignment and appends `n` bytes of tensor data.
    fn data(&mut self, n: usize) -> &mut Self {
        let aligned = self.0.len().div_ceil(32) * 32;
        self.0.resize(aligned + n, 0xab);
        self
    }

    fn build(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// Parses `bytes` and returns the error message, failing the test if they parse.
#[track_caller]
fn refused(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(Path::new(PATH), bytes) {
        Ok(file) => panic!(
            "accepted: version {}, {} tensors",
            file.version,
            file.tensors.len()
        ),
        Err(err) => {
            let message = err.to_string();
            assert!(
                message.starts_with(PATH),
                "the error names the file: {message}"
            );
            message
        }
    }
}

#[track_caller]
fn assert_mentions(message: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            message.contains(needle),
            "{message:?} does not mention {needle:?}"
        );
    }
}

#[test]
fn bad_magic() {
    let mut raw = Raw(b"GGML".to_vec());
    raw.u32(3).u64(0).u64(0);
    assert_mentions(
        &refused(raw.build()),
        &["not a GGUF file", "expected \"GGUF\""],
    );
}

#[test]
fn unsupported_versions() {
    for version in [0, 1, 4, u32::MAX] {
        let message = refused(Raw::header(version, 0, 0).build());
        assert_mentions(&message, &[&format!("unsupported GGUF version {version}")]);
    }
}

#[test]
fn truncated_header() {
    assert_mentions(&refused(b"GG".to_vec()), &["truncated", "magic"]);
    assert_mentions(&refused(b"GGUF\x03\0".to_vec()), &["truncated", "version"]);
    let mut raw = Raw(b"GGUF".to_vec());
    raw.u32(3).bytes(&[1, 0, 0]);
    assert_mentions(
        &refused(raw.build()),
        &["truncated", "tensor count", "needs 8 bytes"],
    );
    let mut raw = Raw(b"GGUF".to_vec());
    raw.u32(3).u64(0).bytes(&[2]);
    assert_mentions(&refused(raw.build()), &["truncated", "metadata count"]);
}

#[test]
fn truncated_in_metadata() {
    let mut raw = Raw::header(3, 0, 2);
    raw.kv_u32("general.alignment", 32)
        .str("general.name")
        .u32(T_STRING)
        .u64(10)
        .bytes(b"tiny");
    assert_mentions(&refused(raw.build()), &["claims 10 bytes", "only 4 remain"]);

    let mut raw = Raw::header(3, 0, 1);
    raw.str("llama.block_count").u32(T_U32).bytes(&[2, 0]);
    assert_mentions(
        &refused(raw.build()),
        &[
            "truncated",
            "llama.block_count",
            "needs 4 bytes, only 2 remain",
        ],
    );

    let mut raw = Raw::header(3, 0, 3);
    raw.kv_u32("a", 1).kv_u32("b", 2);
    assert_mentions(&refused(raw.build()), &["truncated", "metadata key #2"]);
}

#[test]
fn truncated_in_tensor_table() {
    let mut raw = Raw::header(3, 1, 0);
    raw.str("blk.0.attn_q.weight").u32(2).u64(64);
    assert_mentions(
        &refused(raw.build()),
        &["truncated", "dims of tensor blk.0.attn_q.weight"],
    );

    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("a", &[8], GgmlType::F32.id(), 0).str("b");
    assert_mentions(&refused(raw.build()), &["tensor table claims 2 entries"]);
}

/// Every cut of a valid file before the end of its last tensor's data is refused.
#[test]
fn every_truncation_is_refused() {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", MetaValue::String("llama".into()))
        .metadata(
            "nested",
            MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::I16(-1)])]),
        )
        .tensor("a", &[3], GgmlType::F32, vec![1; 12])
        .tensor("b", &[32], GgmlType::Q8_0, vec![2; 34]);
    let bytes = w.to_bytes();
    let file = GgufFile::from_bytes(Path::new(PATH), bytes.clone()).expect("the whole file parses");
    let end = file
        .tensors
        .iter()
        .map(|t| t.offset + t.size)
        .max()
        .expect("tensors");
    for cut in 0..end {
        let message = refused(bytes[..cut].to_vec());
        assert!(
            message.contains("truncated")
                || message.contains("remain")
                || message.contains("file has"),
            "cut at {cut}: {message}"
        );
    }
}

#[test]
fn string_length_beyond_the_file() {
    let mut raw = Raw::header(3, 0, 1);
    raw.u64(1 << 40).bytes(b"general");
    assert_mentions(
        &refused(raw.build()),
        &[
            "metadata key #0 claims 1099511627776 bytes",
            "only 7 remain",
        ],
    );

    let mut raw = Raw::header(3, 0, 1);
    raw.str("general.name").u32(T_STRING).u64(u64::MAX);
    assert_mentions(
        &refused(raw.build()),
        &["general.name claims 18446744073709551615 bytes"],
    );

    let mut raw = Raw::header(3, 1, 0);
    raw.u64(u64::MAX - 1).bytes(&[0; 40]);
    assert_mentions(&refused(raw.build()), &["name of tensor #0 claims"]);
}

#[test]
fn absurd_tensor_count() {
    let message = refused(Raw::header(3, u64::MAX, 0).build());
    assert_mentions(&message, &["absurd tensor count 18446744073709551615"]);
    // Under the cap but more than the bytes left could describe.
    let message = refused(Raw::header(3, 1 << 19, 0).build());
    assert_mentions(
        &message,
        &["tensor table claims 524288 entries, only 0 bytes remain"],
    );
}

#[test]
fn absurd_metadata_count() {
    let message = refused(Raw::header(3, 0, 1 << 40).build());
    assert_mentions(&message, &["absurd metadata count 1099511627776"]);
}

#[test]
fn array_claiming_more_items_than_bytes() {
    let mut raw = Raw::header(3, 0, 1);
    raw.str("tokenizer.ggml.tokens")
        .u32(T_ARRAY)
        .u32(T_STRING)
        .u64(u64::MAX)
        .bytes(&[0; 16]);
    assert_mentions(
        &refused(raw.build()),
        &[
            "tokenizer.ggml.tokens",
            "array claims 18446744073709551615 items",
        ],
    );

    // 100 u32 items need 400 bytes; only 100 are there.
    let mut raw = Raw::header(3, 0, 1);
    raw.str("scores")
        .u32(T_ARRAY)
        .u32(T_U32)
        .u64(100)
        .bytes(&[0; 100]);
    assert_mentions(&refused(raw.build()), &["scores", "array claims 100 items"]);
}

#[test]
fn nesting_too_deep() {
    let mut raw = Raw::header(3, 0, 1);
    raw.str("deep").u32(T_ARRAY);
    for _ in 0..5 {
        raw.u32(T_ARRAY).u64(1);
    }
    raw.u32(T_U8).u64(1).bytes(&[7]);
    assert_mentions(&refused(raw.build()), &["deep", "nested deeper than"]);

    // Four levels are fine.
    let mut w = GgufWriter::new();
    let mut value = MetaValue::U8(7);
    for _ in 0..4 {
        value = MetaValue::Array(vec![value]);
    }
    w.metadata("deep", value.clone());
    let file = GgufFile::from_bytes(Path::new(PATH), w.to_bytes()).expect("depth 4 parses");
    assert_eq!(file.meta("deep"), Some(&value));
}

#[test]
fn invalid_bool_byte() {
    let mut raw = Raw::header(3, 0, 1);
    raw.str("tokenizer.ggml.add_bos_token")
        .u32(T_BOOL)
        .bytes(&[2]);
    assert_mentions(
        &refused(raw.build()),
        &[
            "tokenizer.ggml.add_bos_token",
            "bool byte 2 is neither 0 nor 1",
        ],
    );

    let mut raw = Raw::header(3, 0, 1);
    raw.str("flags")
        .u32(T_ARRAY)
        .u32(T_BOOL)
        .u64(3)
        .bytes(&[0, 1, 255]);
    assert_mentions(&refused(raw.build()), &["flags", "bool byte 255"]);
}

#[test]
fn unknown_metadata_value_type() {
    let mut raw = Raw::header(3, 0, 1);
    raw.str("general.name").u32(13).bytes(&[0; 8]);
    assert_mentions(
        &refused(raw.build()),
        &["general.name", "unknown value type 13"],
    );

    let mut raw = Raw::header(3, 0, 1);
    raw.str("items").u32(T_ARRAY).u32(99).u64(2).bytes(&[0; 16]);
    assert_mentions(&refused(raw.build()), &["items", "unknown value type 99"]);

    // Even an empty array must declare a known item type.
    let mut raw = Raw::header(3, 0, 1);
    raw.str("empty").u32(T_ARRAY).u32(0xdead).u64(0);
    assert_mentions(
        &refused(raw.build()),
        &["empty", "unknown value type 57005"],
    );
}

#[test]
fn unknown_tensor_type_id() {
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("blk.0.attn_q.weight", &[32, 32], 99, 0)
        .data(4096);
    let message = refused(raw.build());
    assert_mentions(
        &message,
        &["blk.0.attn_q.weight", "unsupported type", "ggml type id 99"],
    );
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("t", &[32], 99, 0).data(4096);
    let err = GgufFile::from_bytes(Path::new(PATH), raw.build())
        .err()
        .expect("refused");
    assert!(matches!(err, Error::UnsupportedType { .. }), "{err:?}");
}

#[test]
fn block_types_the_engine_does_not_run_are_named() {
    for (id, name) in [
        (10u32, "Q2_K"),
        (11, "Q3_K"),
        (23, "IQ4_XS"),
        (16, "IQ2_XXS"),
    ] {
        let mut raw = Raw::header(3, 1, 0);
        raw.tensor("blk.3.ffn_down.weight", &[256, 4], id, 0)
            .data(4096);
        let message = refused(raw.build());
        assert_mentions(
            &message,
            &["blk.3.ffn_down.weight", &format!("unsupported type {name}")],
        );
        assert!(
            !message.contains("type id"),
            "named, not numbered: {message}"
        );
    }
}

#[test]
fn truncated_super_block_at_the_end_of_the_file() {
    // Two Q4_K super-blocks need 288 bytes; the file ends 40 bytes short.
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("blk.0.attn_q.weight", &[256, 2], GgmlType::Q4K.id(), 0)
        .data(248);
    assert_mentions(
        &refused(raw.build()),
        &[
            "tensor blk.0.attn_q.weight needs 288 bytes at offset",
            "file has",
        ],
    );
}

#[test]
fn tensor_shorter_than_its_shape_runs_into_the_next() {
    // A Q6_K tensor declared as two super-blocks (420 bytes) but given one, then the next tensor.
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("blk.0.ffn_down.weight", &[256, 2], GgmlType::Q6K.id(), 0)
        .tensor("blk.0.ffn_norm.weight", &[8], GgmlType::F32.id(), 224)
        .data(512);
    assert_mentions(
        &refused(raw.build()),
        &[
            "tensor blk.0.ffn_down.weight (Q6_K [256, 2]: 420 bytes at offset",
            "overlaps tensor blk.0.ffn_norm.weight",
        ],
    );
}

#[test]
fn row_length_not_a_multiple_of_a_super_block() {
    for kind in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let mut raw = Raw::header(3, 1, 0);
        raw.tensor("t", &[320, 1], kind.id(), 0).data(1024);
        assert_mentions(
            &refused(raw.build()),
            &[&format!(
                "row length 320 is not a multiple of the {kind} block size 256"
            )],
        );
    }
}

#[test]
fn rank_zero_and_rank_five() {
    for rank in [0u32, 5, 1000] {
        let mut raw = Raw::header(3, 1, 0);
        raw.str("t").u32(rank);
        for _ in 0..rank.min(5) {
            raw.u64(1);
        }
        raw.u32(GgmlType::F32.id()).u64(0).data(64);
        assert_mentions(
            &refused(raw.build()),
            &["tensor t", &format!("rank {rank} (supported 1..=4)")],
        );
    }
}

#[test]
fn dims_whose_product_overflows() {
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("t", &[1 << 32, 1 << 32, 1 << 32], GgmlType::F32.id(), 0)
        .data(64);
    assert_mentions(&refused(raw.build()), &["tensor t", "overflow"]);

    // The element count fits in 64 bits, its byte size does not.
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("t", &[1 << 62], GgmlType::F32.id(), 0).data(64);
    assert_mentions(&refused(raw.build()), &["tensor t", "overflow"]);
}

#[test]
fn row_length_not_a_multiple_of_the_block_size() {
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("blk.0.ffn_up.weight", &[33, 2], GgmlType::Q4_0.id(), 0)
        .data(64);
    assert_mentions(
        &refused(raw.build()),
        &[
            "blk.0.ffn_up.weight",
            "row length 33 is not a multiple of the Q4_0 block size 32",
        ],
    );
}

#[test]
fn tensor_data_beyond_the_end_of_the_file() {
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("token_embd.weight", &[64, 16], GgmlType::F32.id(), 0)
        .data(1000);
    assert_mentions(
        &refused(raw.build()),
        &[
            "tensor token_embd.weight needs 4096 bytes at offset",
            "file has",
        ],
    );

    // An offset so large that offset + size wraps around.
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("t", &[8], GgmlType::F32.id(), !31u64).data(64);
    assert_mentions(
        &refused(raw.build()),
        &["tensor t needs 32 bytes", "file has"],
    );
}

#[test]
fn misaligned_offset() {
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("a", &[1], GgmlType::F32.id(), 0)
        .tensor("b", &[1], GgmlType::F32.id(), 4)
        .data(64);
    assert_mentions(
        &refused(raw.build()),
        &["tensor b", "offset 4 is not aligned to 32"],
    );
}

#[test]
fn bad_alignment_values() {
    for alignment in [0u32, 3, 48] {
        let mut raw = Raw::header(3, 0, 1);
        raw.kv_u32("general.alignment", alignment);
        assert_mentions(
            &refused(raw.build()),
            &[&format!(
                "general.alignment {alignment} is not a power of two"
            )],
        );
    }
}

#[test]
fn duplicate_tensor_names() {
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("output_norm.weight", &[8], GgmlType::F32.id(), 0)
        .tensor("output_norm.weight", &[8], GgmlType::F32.id(), 32)
        .data(64);
    assert_mentions(
        &refused(raw.build()),
        &["duplicate tensor name output_norm.weight"],
    );
}

#[test]
fn duplicate_keys() {
    let mut raw = Raw::header(3, 0, 2);
    raw.kv_u32("llama.block_count", 2)
        .kv_u32("llama.block_count", 30);
    assert_mentions(
        &refused(raw.build()),
        &["duplicate metadata key llama.block_count"],
    );
}

#[test]
fn non_utf8_strings() {
    let mut raw = Raw::header(3, 0, 1);
    raw.u64(4)
        .bytes(&[b'k', 0xff, 0xfe, b'y'])
        .u32(T_U8)
        .bytes(&[0]);
    assert_mentions(
        &refused(raw.build()),
        &["metadata key #0 is not valid UTF-8"],
    );

    let mut raw = Raw::header(3, 0, 1);
    raw.str("general.name")
        .u32(T_STRING)
        .u64(2)
        .bytes(&[0xc3, 0x28]);
    assert_mentions(&refused(raw.build()), &["general.name is not valid UTF-8"]);

    let mut raw = Raw::header(3, 1, 0);
    raw.u64(2)
        .bytes(&[0x80, 0x80])
        .u32(1)
        .u64(8)
        .u32(GgmlType::F32.id())
        .u64(0)
        .data(64);
    assert_mentions(
        &refused(raw.build()),
        &["name of tensor #0 is not valid UTF-8"],
    );
}

/// Writes `bytes` to a temporary file and opens it as a model.
fn open_model(
    bytes: Vec<u8>,
) -> (
    tempfile::TempDir,
    PathBuf,
    strata_engine::Result<LoadedModel>,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tiny.gguf");
    std::fs::write(&path, bytes).expect("write model");
    let model = LoadedModel::open(
        &path,
        LoadOptions {
            weights: None,
            threads: 1,
            placement: Default::default(),
        },
    );
    (dir, path, model)
}

/// The error of opening a broken tiny model, which must name the temporary file.
#[track_caller]
fn model_refused(writer: &GgufWriter) -> String {
    let (_dir, path, model) = open_model(writer.to_bytes());
    let message = match model {
        Ok(_) => panic!("the broken model loaded"),
        Err(err) => err.to_string(),
    };
    assert!(
        message.starts_with(&path.display().to_string()),
        "the error names the file: {message}"
    );
    message
}

/// The error of reading the config of a broken tiny model.
#[track_caller]
fn config_refused(writer: &GgufWriter) -> String {
    let file =
        GgufFile::from_bytes(Path::new(PATH), writer.to_bytes()).expect("the file itself is valid");
    let message = LlamaConfig::from_gguf(&file)
        .expect_err("config refused")
        .to_string();
    assert!(
        message.starts_with(PATH),
        "the error names the file: {message}"
    );
    message
}

fn tiny() -> GgufWriter {
    TinyLlama::default().writer(5, WeightType::Q8_0)
}

#[test]
fn the_unbroken_tiny_model_opens() {
    let (_dir, _path, model) = open_model(tiny().to_bytes());
    let model = model.expect("the tiny model loads");
    assert_eq!(model.model.config().n_layers, 2);
    assert_eq!(model.tokenizer.vocab_size(), TinyLlama::VOCAB_SIZE);
}

/// A tiny model whose feed-forward is wide enough (256) for K-quant super-blocks in `ffn_down`.
fn tiny_with_k_quant_down(kind: GgmlType, scale: half::f16, bad_block: usize) -> GgufWriter {
    let mut w = TinyLlama {
        ffn_dim: 256,
        ..TinyLlama::default()
    }
    .writer(5, WeightType::Q8_0);
    let blocks = TinyLlama::default().dim; // one super-block per output row
    let mut data = vec![0x11u8; blocks * kind.block_bytes()];
    let d_at = if kind == GgmlType::Q6K {
        kind.block_bytes() - 2
    } else {
        0
    };
    for (i, block) in data.chunks_exact_mut(kind.block_bytes()).enumerate() {
        let d = if i == bad_block {
            scale
        } else {
            half::f16::from_f32(0.01)
        };
        block[d_at..d_at + 2].copy_from_slice(&d.to_le_bytes());
    }
    w.tensor("blk.1.ffn_down.weight", &[256, blocks as u64], kind, data);
    w
}

#[test]
fn k_quant_blocks_with_non_finite_scales_are_refused() {
    for kind in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let finite = tiny_with_k_quant_down(kind, half::f16::from_f32(0.5), 0);
        let (_dir, _path, model) = open_model(finite.to_bytes());
        model.unwrap_or_else(|err| panic!("{kind} with finite scales loads: {err}"));
        for (scale, shown) in [(half::f16::NAN, "NaN"), (half::f16::INFINITY, "inf")] {
            let broken = tiny_with_k_quant_down(kind, scale, 7);
            assert_mentions(
                &model_refused(&broken),
                &[&format!(
                    "tensor blk.1.ffn_down.weight: block 7 has a non-finite d ({shown})"
                )],
            );
        }
    }
}

#[test]
fn missing_tensor() {
    let mut w = tiny();
    assert!(w.remove_tensor("blk.1.ffn_up.weight"));
    assert_mentions(
        &model_refused(&w),
        &["tensor blk.1.ffn_up.weight is missing"],
    );
    let mut w = tiny();
    assert!(w.remove_tensor("output_norm.weight"));
    assert_mentions(
        &model_refused(&w),
        &["tensor output_norm.weight is missing"],
    );
}

#[test]
fn tensor_with_the_wrong_shape() {
    let mut w = tiny();
    // Square instead of 64 inputs -> 32 key outputs (2 kv heads of 16).
    w.tensor_f32(
        "blk.0.attn_k.weight",
        &[64, 64],
        WeightType::Q8_0,
        &[0.5; 64 * 64],
    );
    assert_mentions(
        &model_refused(&w),
        &["tensor blk.0.attn_k.weight has shape [64, 64], expected [64, 32]"],
    );

    let mut w = tiny();
    w.tensor_f32("blk.1.ffn_norm.weight", &[32], WeightType::F32, &[1.0; 32]);
    assert_mentions(
        &model_refused(&w),
        &["tensor blk.1.ffn_norm.weight has shape [32], expected [64]"],
    );
}

#[test]
fn unsupported_architecture() {
    let mut w = tiny();
    w.metadata("general.architecture", MetaValue::String("gpt2".into()));
    assert_mentions(
        &config_refused(&w),
        &["architecture \"gpt2\" is not supported"],
    );
    assert_mentions(
        &model_refused(&w),
        &["architecture \"gpt2\" is not supported"],
    );

    let mut w = tiny();
    w.metadata("general.architecture", MetaValue::U32(1));
    assert_mentions(
        &config_refused(&w),
        &["general.architecture is missing or not a string"],
    );
}

#[test]
fn missing_hyperparameter() {
    for key in [
        "llama.block_count",
        "llama.embedding_length",
        "llama.feed_forward_length",
        "llama.context_length",
    ] {
        let mut w = tiny();
        w.remove_metadata(key).expect("the tiny model has the key");
        assert_mentions(
            &config_refused(&w),
            &[&format!("metadata key {key} is missing")],
        );
    }
    let mut w = tiny();
    w.metadata(
        "llama.attention.layer_norm_rms_epsilon",
        MetaValue::String("small".into()),
    );
    assert_mentions(
        &model_refused(&w),
        &["llama.attention.layer_norm_rms_epsilon is missing or not a number"],
    );
}

#[test]
fn head_count_not_dividing_the_width() {
    let mut w = tiny();
    w.metadata("llama.attention.head_count", MetaValue::U32(5));
    assert_mentions(
        &config_refused(&w),
        &["embedding length 64 is not divisible by 5 heads"],
    );

    let mut w = tiny();
    w.metadata("llama.attention.head_count_kv", MetaValue::U32(3));
    assert_mentions(
        &config_refused(&w),
        &["4 heads are not a multiple of 3 kv heads"],
    );

    let mut w = tiny();
    w.metadata("llama.attention.head_count", MetaValue::U32(0));
    assert_mentions(&config_refused(&w), &["not divisible by 0 heads"]);
}

#[test]
fn special_token_outside_the_vocabulary() {
    let mut w = tiny();
    w.metadata("tokenizer.ggml.eos_token_id", MetaValue::U32(300));
    assert_mentions(
        &model_refused(&w),
        &["tokenizer.ggml.eos_token_id = 300 is outside the vocabulary of 300"],
    );
}

/// Parses `bytes` and, when they parse, reads everything a caller could: no panic either way.
fn exercise(bytes: Vec<u8>) -> bool {
    let Ok(file) = GgufFile::from_bytes(Path::new(PATH), bytes) else {
        return false;
    };
    for info in &file.tensors {
        assert_eq!(file.tensor_data(info).len(), info.size);
        let _ = info.elements();
    }
    for value in file.metadata.values() {
        let _ = value.summary();
    }
    if let Ok(config) = LlamaConfig::from_gguf(&file) {
        let _ = Tokenizer::from_gguf(&file);
        let _ = strata_engine::model::Llama::load(
            config,
            &file,
            LoadOptions {
                weights: None,
                threads: 1,
                placement: Default::default(),
            },
        );
    }
    true
}

/// One random mutation: flip bits, overwrite with boundary values, or cut the file.
fn mutate(bytes: &mut Vec<u8>, rng: &mut StdRng, hot: usize) {
    // Most mutations land in the header, metadata and tensor table, where parsing decisions are made.
    let at = |rng: &mut StdRng, len: usize| {
        if rng.random_bool(0.9) {
            rng.random_range(0..hot.min(len))
        } else {
            rng.random_range(0..len)
        }
    };
    for _ in 0..rng.random_range(1..=3) {
        if bytes.is_empty() {
            return;
        }
        let i = at(rng, bytes.len());
        match rng.random_range(0..20) {
            0..=5 => bytes[i] ^= 1 << rng.random_range(0..8),
            6..=9 => bytes[i] = rng.random(),
            10..=13 => bytes[i] = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.random_range(0..5)],
            14..=17 => {
                let word: [u8; 8] = [u64::MAX, 0, 1 << 32, 1 << 62, i64::MAX as u64]
                    [rng.random_range(0..5)]
                .to_le_bytes();
                let end = (i + 8).min(bytes.len());
                bytes[i..end].copy_from_slice(&word[..end - i]);
            }
            18 => bytes.truncate(i),
            _ => {
                bytes.remove(i);
            }
        }
    }
}

#[test]
fn random_mutations_of_a_valid_file_never_panic() {
    let mut small = GgufWriter::new();
    small
        .metadata("general.architecture", MetaValue::String("llama".into()))
        .metadata("general.alignment", MetaValue::U32(32))
        .metadata(
            "flags",
            MetaValue::Array(vec![MetaValue::Bool(true), MetaValue::Bool(false)]),
        )
        .metadata(
            "nested",
            MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::F64(1.0)])]),
        )
        .metadata("i64", MetaValue::I64(-5))
        .tensor("a", &[4, 2], GgmlType::F16, vec![0x3c; 16])
        .tensor("b", &[32], GgmlType::Q4_1, vec![0; 20])
        .tensor("c", &[256], GgmlType::Q6K, vec![0; 210]);
    let tiny = tiny_llama_gguf(3, WeightType::Q4_0);
    let tiny_hot = GgufFile::from_bytes(Path::new(PATH), tiny.clone())
        .expect("tiny parses")
        .tensors
        .iter()
        .map(|t| t.offset)
        .min()
        .expect("tensors");
    let seed = 0x5eed_6675;
    let small = small.to_bytes();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut parsed = 0;
    let iterations = 10_000;
    for iteration in 0..iterations {
        let (base, hot) = if iteration % 4 == 3 {
            (&tiny, tiny_hot)
        } else {
            (&small, 256)
        };
        let mut bytes = base.clone();
        mutate(&mut bytes, &mut rng, hot);
        let outcome = catch_unwind(AssertUnwindSafe(|| exercise(bytes)));
        match outcome {
            Ok(ok) => parsed += usize::from(ok),
            Err(_) => panic!("iteration {iteration} of seed {seed:#x} panicked"),
        }
    }
    eprintln!("{parsed} of {iterations} mutated files parsed");
    // The mutations should not all be fatal, or the test would only exercise the first checks.
    assert!(
        parsed > iterations / 20,
        "only {parsed} of {iterations} mutated files parsed"
    );
}
