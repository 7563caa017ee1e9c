use std::path::Path;

use super::*;
use crate::{
    format::quant_plan::tests::{mini_gemma, parse},
    quant::GgmlType,
};

#[test]
fn requantizing_keeps_metadata_order_and_copies_tensors_already_in_type() {
    let source = mini_gemma(GgmlType::Q8_0, true);
    let file = parse(&source);
    let (writer, tensors) = requantize(&file, FileType::Q5KM).unwrap();
    let out = parse(&writer);
    let keys: Vec<&str> = out.metadata_in_file_order().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "general.architecture",
            "general.name",
            "gemma3.block_count",
            "gemma3.embedding_length",
            "tokenizer.ggml.model",
            "general.quantization_version",
            "general.file_type",
        ]
    );
    assert_eq!(out.meta("general.file_type"), Some(&MetaValue::U32(17)));
    for (info, plan) in out.tensors.iter().zip(&tensors) {
        assert_eq!(
            (info.name.as_str(), info.kind),
            (plan.name.as_str(), plan.to)
        );
        let input = file.tensor(&info.name).unwrap();
        assert_eq!(info.dims, input.dims, "{}", info.name);
        if !plan.converts() {
            assert_eq!(
                out.tensor_data(info),
                file.tensor_data(input),
                "{}",
                info.name
            );
            continue;
        }
        let n = info.elements() as usize;
        let (mut before, mut after) = (vec![0f32; n], vec![0f32; n]);
        quant::dequantize_bytes(input.kind, file.tensor_data(input), &mut before);
        quant::dequantize_bytes(info.kind, out.tensor_data(info), &mut after);
        let worst = before
            .iter()
            .zip(&after)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 0.05, "{}: off by {worst}", info.name);
        // Each conversion is ggml's quantizer applied to the dequantized rows.
        let expected = quant::quantize_bytes(plan.to, &before).unwrap();
        assert_eq!(out.tensor_data(info), expected, "{}", info.name);
    }
}

#[test]
fn requantizing_twice_to_the_same_type_is_a_copy() {
    let file = parse(&mini_gemma(GgmlType::F32, true));
    let (once, _) = requantize(&file, FileType::Q5KM).unwrap();
    let once = once.to_bytes();
    let again = GgufFile::from_bytes(Path::new("q5.gguf"), once.clone()).unwrap();
    let (twice, tensors) = requantize(&again, FileType::Q5KM).unwrap();
    assert!(tensors.iter().all(|t| !t.converts()));
    assert_eq!(twice.to_bytes(), once);
}

#[test]
fn requantize_file_writes_through_a_scratch_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.gguf");
    fs::write(&input, mini_gemma(GgmlType::F32, true).to_bytes()).unwrap();
    let output = dir.path().join("out.gguf");
    let done = requantize_file(&input, &output, FileType::Q8_0).unwrap();
    assert_eq!(done.bytes, fs::metadata(&output).unwrap().len());
    let out = GgufFile::open(&output).unwrap();
    assert_eq!(out.tensors.len(), done.tensors.len());
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["in.gguf", "out.gguf"]);
    let err =
        requantize_file(&input, &dir.path().join("no/such/dir.gguf"), FileType::Q8_0).unwrap_err();
    assert!(err.to_string().contains("no/such/dir.gguf"), "{err}");
}
