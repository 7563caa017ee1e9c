//! GGML tensor types and their block formats: layout, dequantization to f32, and the reference
//! quantizers (ports of ggml's `quantize_row_*_ref`, so that requantizing at load gives the same
//! weights that `llama-quantize` writes).

mod blocks;
mod bytes;
mod dequantize;
mod interleaved;
mod kquants;
mod quantize;

pub use blocks::*;
pub use bytes::*;
pub use dequantize::*;
pub use interleaved::*;
pub use kquants::*;
pub use quantize::*;

/// Elements per block of the 32-wide formats.
pub const QK: usize = 32;
/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// A tensor element type as GGUF numbers it (ggml's `ggml_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// Blocks of 32 4-bit values with one scale.
    Q4_0,
    /// Blocks of 32 4-bit values with a scale and a minimum.
    Q4_1,
    /// Blocks of 32 5-bit values with one scale.
    Q5_0,
    /// Blocks of 32 5-bit values with a scale and a minimum.
    Q5_1,
    /// Blocks of 32 8-bit values with one scale.
    Q8_0,
    /// 4-bit K-quant: super-blocks of 256 in eight sub-blocks with 6-bit scales and mins.
    Q4K,
    /// 5-bit K-quant: as [`GgmlType::Q4K`] plus one high bit per value.
    Q5K,
    /// 6-bit K-quant: super-blocks of 256 in sixteen sub-blocks with 8-bit scales.
    Q6K,
    /// bfloat16.
    BF16,
}

impl GgmlType {
    /// Maps ggml's numeric type id; `None` for ids the engine does not read.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// ggml's name for a type id, also for the types the engine does not read (so that an error can
    /// name them): `None` for ids ggml does not define.
    pub fn name_of_id(id: u32) -> Option<&'static str> {
        if let Some(kind) = Self::from_id(id) {
            return Some(kind.name());
        }
        Some(match id {
            9 => "Q8_1",
            10 => "Q2_K",
            11 => "Q3_K",
            15 => "Q8_K",
            16 => "IQ2_XXS",
            17 => "IQ2_XS",
            18 => "IQ3_XXS",
            19 => "IQ1_S",
            20 => "IQ4_NL",
            21 => "IQ3_S",
            22 => "IQ2_S",
            23 => "IQ4_XS",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            29 => "IQ1_M",
            34 => "TQ1_0",
            35 => "TQ2_0",
            39 => "MXFP4",
            _ => return None,
        })
    }

    /// ggml's numeric type id.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::BF16 => 30,
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => QK,
            Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
        }
    }

    /// Whether values are stored in blocks with scales (not as floats).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => size_of::<BlockQ4_0>(),
            Self::Q4_1 => size_of::<BlockQ4_1>(),
            Self::Q5_0 => Q5_0_BYTES,
            Self::Q5_1 => Q5_1_BYTES,
            Self::Q8_0 => size_of::<BlockQ8_0>(),
            Self::Q4K => Q4_K_BYTES,
            Self::Q5K => Q5_K_BYTES,
            Self::Q6K => Q6_K_BYTES,
        }
    }

    /// The name ggml uses (`Q4_1`, `F16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::BF16 => "BF16",
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests;
