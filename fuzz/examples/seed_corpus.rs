//! Writes a seed corpus for the `gguf` target: tiny random Llamas in every weight type and a small
//! file holding every metadata value type, into the folder given (default `corpus/gguf`).

use std::path::PathBuf;

use strata_engine::{
    format::{
        gguf::MetaValue,
        gguf_writer::{GgufWriter, TinyLlama},
    },
    quant::GgmlType,
    weights::WeightType,
};

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("corpus/gguf"), PathBuf::from);
    std::fs::create_dir_all(&dir)?;
    let small = TinyLlama {
        n_layers: 1,
        dim: 32,
        n_heads: 2,
        n_kv_heads: 1,
        ffn_dim: 32,
        ..TinyLlama::default()
    };
    for kind in WeightType::ALL {
        std::fs::write(
            dir.join(format!("tiny-{kind}.gguf")),
            small.writer(1, kind).to_bytes(),
        )?;
    }
    let mut w = GgufWriter::new();
    w.metadata("u8", MetaValue::U8(1))
        .metadata("i8", MetaValue::I8(-1))
        .metadata("u16", MetaValue::U16(2))
        .metadata("i16", MetaValue::I16(-2))
        .metadata("u32", MetaValue::U32(3))
        .metadata("i32", MetaValue::I32(-3))
        .metadata("f32", MetaValue::F32(0.5))
        .metadata("bool", MetaValue::Bool(true))
        .metadata("string", MetaValue::String("text".into()))
        .metadata("u64", MetaValue::U64(4))
        .metadata("i64", MetaValue::I64(-4))
        .metadata("f64", MetaValue::F64(0.25))
        .metadata(
            "nested",
            MetaValue::Array(vec![MetaValue::Array(vec![
                MetaValue::U8(1),
                MetaValue::U8(2),
            ])]),
        )
        .metadata("general.alignment", MetaValue::U32(16))
        .tensor("f16", &[4], GgmlType::F16, vec![0; 8])
        .tensor("q5_0", &[32], GgmlType::Q5_0, vec![0x5a; 22])
        .tensor("q5_1", &[32], GgmlType::Q5_1, vec![0x5a; 24])
        .tensor("q4_k", &[256], GgmlType::Q4K, vec![0x3c; 144])
        .tensor("q5_k", &[256], GgmlType::Q5K, vec![0x3c; 176])
        .tensor("q6_k", &[256], GgmlType::Q6K, vec![0x3c; 210]);
    std::fs::write(dir.join("every-type.gguf"), w.to_bytes())?;
    println!("wrote the seed corpus to {}", dir.display());
    Ok(())
}
