//! Requantizes a GGUF file to one of `llama-quantize`'s file types (Q4_K_M, Q5_K_M, Q8_0, ...).
//!
//! Each tensor gets the type [`plan`] chooses for it. A tensor already in its type is copied; the
//! others are dequantized and quantized again with ggml's reference quantizers. The output keeps
//! llama-quantize's layout: the input's metadata in file order with `general.quantization_version`
//! and `general.file_type` set last, tensors ordered by layer and then by name, so that the same
//! input gives the same bytes as llama.cpp's tool.

use std::{
    fs::{self, File},
    io::BufWriter,
    path::{Path, PathBuf},
};

use rayon::prelude::*;

pub use crate::format::quant_plan::{
    FileType, TensorPlan, fallback, plan, plan_tensors, type_counts,
};
use crate::{
    error::{Error, Result},
    format::{
        gguf::{GgufFile, MetaValue},
        gguf_writer::GgufWriter,
    },
    quant,
};

/// ggml's `GGML_QNT_VERSION`, written as `general.quantization_version`.
const QUANTIZATION_VERSION: u32 = 2;

/// Values dequantized and requantized per task, as llama-quantize's chunks (`32 * 512`).
const VALUES_PER_TASK: usize = 32 * 512;

/// What [`requantize_file`] wrote.
#[derive(Debug, Clone)]
pub struct Requantized {
    /// The output file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Every tensor, in output order.
    pub tensors: Vec<TensorPlan>,
}

/// `file` requantized to `ftype`, in memory, with the plan it followed.
///
/// # Errors
/// As [`plan`]; and when a tensor's bytes do not fit its type.
pub fn requantize(file: &GgufFile, ftype: FileType) -> Result<(GgufWriter, Vec<TensorPlan>)> {
    let tensors = plan(file, ftype)?;
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata_in_file_order() {
        writer.metadata(key, value.clone());
    }
    // As llama-quantize: the versions go last, the split keys of a sharded input go.
    for key in [
        "general.quantization_version",
        "general.file_type",
        "split.no",
        "split.count",
        "split.tensors.count",
    ] {
        writer.remove_metadata(key);
    }
    writer
        .metadata(
            "general.quantization_version",
            MetaValue::U32(QUANTIZATION_VERSION),
        )
        .metadata("general.file_type", MetaValue::U32(ftype.id()));
    for tensor in &tensors {
        let info = file
            .tensor(&tensor.name)
            .ok_or_else(|| Error::model(file.path(), format!("tensor {} vanished", tensor.name)))?;
        let data = file.tensor_data(info);
        let bytes = if tensor.converts() {
            convert_tensor(data, tensor).map_err(|e| match e {
                Error::Quantize { problem, .. } => {
                    Error::model(file.path(), format!("tensor {}: {problem}", tensor.name))
                }
                other => other,
            })?
        } else {
            data.to_vec()
        };
        writer.tensor(&tensor.name, &tensor.dims, tensor.to, bytes);
        file.release_data(info, 0..info.size);
    }
    Ok((writer, tensors))
}

/// Dequantizes a tensor's rows and quantizes them as the plan says, a few rows per task.
fn convert_tensor(data: &[u8], tensor: &TensorPlan) -> Result<Vec<u8>> {
    let columns = tensor.dims[0] as usize;
    let row_bytes = columns / tensor.from.block_size() * tensor.from.block_bytes();
    if row_bytes == 0 || !data.len().is_multiple_of(row_bytes) {
        return Err(Error::Quantize {
            kind: tensor.to.name(),
            len: data.len(),
            problem: format!("{} bytes are not whole rows of {row_bytes}", data.len()),
        });
    }
    let rows_per_task = VALUES_PER_TASK.div_ceil(columns).max(1);
    let pieces: Vec<Vec<u8>> = data
        .par_chunks(row_bytes * rows_per_task)
        .map(|rows| {
            let mut values = vec![0f32; rows.len() / row_bytes * columns];
            quant::dequantize_bytes(tensor.from, rows, &mut values);
            quant::quantize_bytes(tensor.to, &values)
        })
        .collect::<Result<_>>()?;
    Ok(pieces.concat())
}

/// Requantizes the GGUF file at `input` to `ftype` and writes it to `output` (through a scratch
/// file beside it, renamed into place once complete). This is what `strata model quantize` runs:
/// `requantize_file(q4_k_m, out, FileType::Q5KM)` writes what `llama-quantize --allow-requantize
/// IN OUT Q5_K_M` writes.
///
/// # Errors
/// When `input` is not a readable GGUF file, its metadata lacks what the type rules read, or the
/// output cannot be written.
pub fn requantize_file(input: &Path, output: &Path, ftype: FileType) -> Result<Requantized> {
    let file = GgufFile::open(input)?;
    let (writer, tensors) = requantize(&file, ftype)?;
    drop(file);
    let write_err = |e: std::io::Error| Error::Write {
        path: output.to_path_buf(),
        problem: e.to_string(),
    };
    let mut scratch_name = output.as_os_str().to_owned();
    scratch_name.push(".partial");
    let scratch = PathBuf::from(scratch_name);
    let written = (|| {
        let mut out = BufWriter::new(File::create(&scratch)?);
        writer.write_to(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&scratch, output)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&scratch);
        return Err(write_err(e));
    }
    let bytes = fs::metadata(output).map_err(write_err)?.len();
    Ok(Requantized {
        path: output.to_path_buf(),
        bytes,
        tensors,
    })
}

#[cfg(test)]
mod tests;
