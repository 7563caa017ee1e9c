//! Fuzzes the GGUF reader: any bytes must parse or be refused with an error, never panic; a file that
//! parses must give every tensor's bytes and every metadata summary without reading out of bounds.
#![no_main]

use std::{hint::black_box, path::Path};

use libfuzzer_sys::fuzz_target;
use strata_engine::format::gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(Path::new("fuzz.gguf"), data.to_vec()) else {
        return;
    };
    for info in &file.tensors {
        let bytes = file.tensor_data(info);
        assert_eq!(bytes.len(), info.size, "tensor {}", info.name);
        black_box(bytes.iter().fold(0u8, |acc, &b| acc ^ b));
        black_box(info.elements());
    }
    for value in file.metadata.values() {
        black_box(value.summary());
    }
});
