//! Fuzzes the GGUF reader: any bytes must parse or be refused with an error, never panic; a file that
//! parses must give every tensor's bytes and every metadata summary without reading out of bounds, and
//! every tensor's blocks (K-quant super-blocks, 5-bit blocks, ...) must check and dequantize whatever
//! their scales and bits hold.
#![no_main]

use std::{hint::black_box, path::Path};

use libfuzzer_sys::fuzz_target;
use strata_engine::{format::gguf::GgufFile, quant};

/// Most elements dequantized per tensor, so that a file claiming a huge tensor stays quick.
const MAX_DEQUANTIZED: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(Path::new("fuzz.gguf"), data.to_vec()) else {
        return;
    };
    for info in &file.tensors {
        let bytes = file.tensor_data(info);
        assert_eq!(bytes.len(), info.size, "tensor {}", info.name);
        black_box(bytes.iter().fold(0u8, |acc, &b| acc ^ b));
        black_box(info.elements());
        let _ = black_box(quant::check_block_scales(info.kind, bytes));
        let block = info.kind.block_size();
        let blocks = (info.elements() as usize / block).min(MAX_DEQUANTIZED / block);
        let mut values = vec![0f32; blocks * block];
        quant::dequantize_bytes(info.kind, &bytes[..blocks * info.kind.block_bytes()], &mut values);
        black_box(values.iter().fold(0f32, |acc, &v| acc + v));
    }
    for value in file.metadata.values() {
        black_box(value.summary());
    }
});
