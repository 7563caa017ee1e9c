//! Model file formats: GGUF and Hugging Face safetensors folders, both memory-mapped, both read
//! through [`TensorSource`] so that the model loader does not care where weights come from.

pub mod gguf;
pub mod gguf_writer;
pub mod mmap;
pub mod quant_plan;
pub mod requantize;
pub mod safetensors;
pub mod synth;

use std::{borrow::Cow, ops::Range, path::Path};

use crate::{error::Result, quant::GgmlType};

/// A tensor as a source holds it: GGML-order dims (`[cols, rows]` for a matrix), type and bytes.
pub struct RawTensor<'a> {
    /// Dimensions, fastest-varying first.
    pub dims: Vec<u64>,
    /// Element type.
    pub kind: GgmlType,
    /// The data, borrowed from the map when no rearrangement was needed.
    pub data: Cow<'a, [u8]>,
}

/// Where a model's tensors come from, addressed by their GGUF names (`blk.0.attn_q.weight`), already
/// laid out as GGUF lays them out.
pub trait TensorSource {
    /// The file or folder, for error messages.
    fn origin(&self) -> &Path;

    /// The tensor named `name`, or `None` when the source has none by that name.
    ///
    /// # Errors
    /// When the tensor exists but cannot be read.
    fn tensor(&self, name: &str) -> Result<Option<RawTensor<'_>>>;

    /// Tells the source that tensor `name` has been copied out: a mapped source may drop its pages
    /// from memory (they are read back from the file if the tensor is asked for again).
    fn release(&self, name: &str) {
        self.release_part(name, 0..usize::MAX);
    }

    /// Tells the source that bytes `range` of tensor `name` have been copied out (a loader copying a
    /// large tensor in pieces hands each back as it goes, so the tensor is never held twice).
    fn release_part(&self, _name: &str, _range: Range<usize>) {}
}

impl TensorSource for gguf::GgufFile {
    fn origin(&self) -> &Path {
        self.path()
    }

    fn tensor(&self, name: &str) -> Result<Option<RawTensor<'_>>> {
        Ok(gguf::GgufFile::tensor(self, name).map(|info| RawTensor {
            dims: info.dims.clone(),
            kind: info.kind,
            data: Cow::Borrowed(self.tensor_data(info)),
        }))
    }

    fn release_part(&self, name: &str, range: Range<usize>) {
        if let Some(info) = gguf::GgufFile::tensor(self, name) {
            self.release_data(info, range);
        }
    }
}
