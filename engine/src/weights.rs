//! Weight matrices in the runtime type the engine computes with, converted once at load.

use std::{fmt, str::FromStr};

use half::{bf16, f16};

use crate::quant::{self, BlockQ4_0, BlockQ4_1, BlockQ8_0, GgmlType, QK};

/// The type a weight matrix is held in at run time, a profile dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit blocks of 32.
    Q8_0,
    /// 4-bit blocks of 32 with a scale.
    Q4_0,
    /// 4-bit blocks of 32 with a scale and a minimum.
    Q4_1,
}

impl WeightType {
    /// Every runtime type, highest precision first.
    pub const ALL: [WeightType; 6] = [
        Self::F32,
        Self::F16,
        Self::Bf16,
        Self::Q8_0,
        Self::Q4_1,
        Self::Q4_0,
    ];

    /// The lowercase name used on the command line and in stored results.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
        }
    }

    /// The runtime type that holds a file type as it is, if any.
    pub fn of_file_type(kind: GgmlType) -> Option<Self> {
        Some(match kind {
            GgmlType::F32 => Self::F32,
            GgmlType::F16 => Self::F16,
            GgmlType::BF16 => Self::Bf16,
            GgmlType::Q8_0 => Self::Q8_0,
            GgmlType::Q4_0 => Self::Q4_0,
            GgmlType::Q4_1 => Self::Q4_1,
            GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => {
                return None;
            }
        })
    }

    /// Whether this type stores 4-bit blocks.
    pub fn is_4bit(self) -> bool {
        matches!(self, Self::Q4_0 | Self::Q4_1)
    }

    /// The row-length granularity the type needs.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::Bf16 => 1,
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 => QK,
        }
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown weight type name.
#[derive(Debug, thiserror::Error)]
#[error("unknown weight type {0:?} (expected one of f32, f16, bf16, q8_0, q4_0, q4_1)")]
pub struct UnknownWeightType(pub String);

impl FromStr for WeightType {
    type Err = UnknownWeightType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownWeightType(s.to_string()))
    }
}

/// The values of a weight matrix, row-major, in one runtime type.
#[derive(Debug, Clone)]
pub enum WeightData {
    /// f32 values.
    F32(Vec<f32>),
    /// f16 values.
    F16(Vec<f16>),
    /// bf16 values.
    Bf16(Vec<bf16>),
    /// Q8_0 blocks.
    Q8_0(Vec<BlockQ8_0>),
    /// Q4_0 blocks.
    Q4_0(Vec<BlockQ4_0>),
    /// Q4_1 blocks.
    Q4_1(Vec<BlockQ4_1>),
}

/// A `rows x cols` matrix: `y = W x` takes `cols` inputs to `rows` outputs.
#[derive(Debug, Clone)]
pub struct Weight {
    /// Output dimension.
    pub rows: usize,
    /// Input dimension (row length).
    pub cols: usize,
    /// The values.
    pub data: WeightData,
}

impl Weight {
    /// Builds a matrix from file bytes of type `kind`, converting to `target` (or keeping the file's type
    /// when `target` is `None` and the engine can run it; K-quants are dequantized to f32).
    ///
    /// The caller has checked that `bytes` holds `rows * cols` elements of `kind` and that `cols` is a
    /// multiple of the block sizes involved.
    pub fn from_bytes(
        kind: GgmlType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        target: Option<WeightType>,
    ) -> Self {
        let keep = WeightType::of_file_type(kind);
        let target = target.or(keep).unwrap_or(WeightType::F32);
        let data = if Some(target) == keep {
            match kind {
                GgmlType::Q4_0 => WeightData::Q4_0(quant::parse_q4_0(bytes)),
                GgmlType::Q4_1 => WeightData::Q4_1(quant::parse_q4_1(bytes)),
                GgmlType::Q8_0 => WeightData::Q8_0(quant::parse_q8_0(bytes)),
                GgmlType::F16 => WeightData::F16(
                    bytes
                        .chunks_exact(2)
                        .map(|b| f16::from_le_bytes([b[0], b[1]]))
                        .collect(),
                ),
                GgmlType::BF16 => WeightData::Bf16(
                    bytes
                        .chunks_exact(2)
                        .map(|b| bf16::from_le_bytes([b[0], b[1]]))
                        .collect(),
                ),
                _ => WeightData::F32(dequantized(kind, bytes, rows * cols)),
            }
        } else {
            return Self::from_f32(dequantized(kind, bytes, rows * cols), rows, cols, target);
        };
        Self { rows, cols, data }
    }

    /// Builds a matrix of type `target` from row-major f32 values.
    pub fn from_f32(values: Vec<f32>, rows: usize, cols: usize, target: WeightType) -> Self {
        let blocks = values.len() / QK;
        let data = match target {
            WeightType::F32 => WeightData::F32(values),
            WeightType::F16 => WeightData::F16(values.iter().map(|&v| f16::from_f32(v)).collect()),
            WeightType::Bf16 => {
                WeightData::Bf16(values.iter().map(|&v| bf16::from_f32(v)).collect())
            }
            WeightType::Q8_0 => {
                let mut out = vec![BlockQ8_0::default(); blocks];
                quant::quantize_q8_0(&values, &mut out);
                WeightData::Q8_0(out)
            }
            WeightType::Q4_0 => {
                let mut out = vec![BlockQ4_0::default(); blocks];
                quant::quantize_q4_0(&values, &mut out);
                WeightData::Q4_0(out)
            }
            WeightType::Q4_1 => {
                let mut out = vec![BlockQ4_1::default(); blocks];
                quant::quantize_q4_1(&values, &mut out);
                WeightData::Q4_1(out)
            }
        };
        Self { rows, cols, data }
    }

    /// Stacks matrices of one type and row length on top of each other (`[a; b; c]`), so that products
    /// sharing an input run as one pass; `None` when types or row lengths differ.
    pub fn stack(parts: &[Weight]) -> Option<Weight> {
        let first = parts.first()?;
        if parts
            .iter()
            .any(|p| p.cols != first.cols || p.kind() != first.kind())
        {
            return None;
        }
        let rows = parts.iter().map(|p| p.rows).sum();
        macro_rules! concat {
            ($variant:ident) => {
                WeightData::$variant(
                    parts
                        .iter()
                        .flat_map(|p| match &p.data {
                            WeightData::$variant(v) => v.iter().copied(),
                            _ => unreachable!("types were checked equal"),
                        })
                        .collect(),
                )
            };
        }
        let data = match first.data {
            WeightData::F32(_) => concat!(F32),
            WeightData::F16(_) => concat!(F16),
            WeightData::Bf16(_) => concat!(Bf16),
            WeightData::Q8_0(_) => concat!(Q8_0),
            WeightData::Q4_0(_) => concat!(Q4_0),
            WeightData::Q4_1(_) => concat!(Q4_1),
        };
        Some(Weight {
            rows,
            cols: first.cols,
            data,
        })
    }

    /// The runtime type.
    pub fn kind(&self) -> WeightType {
        match self.data {
            WeightData::F32(_) => WeightType::F32,
            WeightData::F16(_) => WeightType::F16,
            WeightData::Bf16(_) => WeightType::Bf16,
            WeightData::Q8_0(_) => WeightType::Q8_0,
            WeightData::Q4_0(_) => WeightType::Q4_0,
            WeightData::Q4_1(_) => WeightType::Q4_1,
        }
    }

    /// Bytes the values take in memory.
    pub fn byte_size(&self) -> usize {
        match &self.data {
            WeightData::F32(v) => v.len() * 4,
            WeightData::F16(v) => v.len() * 2,
            WeightData::Bf16(v) => v.len() * 2,
            WeightData::Q8_0(v) => v.len() * size_of::<BlockQ8_0>(),
            WeightData::Q4_0(v) => v.len() * size_of::<BlockQ4_0>(),
            WeightData::Q4_1(v) => v.len() * size_of::<BlockQ4_1>(),
        }
    }

    /// Writes row `row` as f32 into `out` (`cols` values): the embedding lookup.
    pub fn row_to_f32(&self, row: usize, out: &mut [f32]) {
        let (start, end) = (row * self.cols, (row + 1) * self.cols);
        let (bstart, bend) = (start / QK, end / QK);
        match &self.data {
            WeightData::F32(v) => out.copy_from_slice(&v[start..end]),
            WeightData::F16(v) => out
                .iter_mut()
                .zip(&v[start..end])
                .for_each(|(o, x)| *o = x.to_f32()),
            WeightData::Bf16(v) => out
                .iter_mut()
                .zip(&v[start..end])
                .for_each(|(o, x)| *o = x.to_f32()),
            WeightData::Q8_0(v) => quant::dequantize_q8_0(&v[bstart..bend], out),
            WeightData::Q4_0(v) => quant::dequantize_q4_0(&v[bstart..bend], out),
            WeightData::Q4_1(v) => quant::dequantize_q4_1(&v[bstart..bend], out),
        }
    }

    /// The whole matrix as f32, row-major.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (row, chunk) in out.chunks_exact_mut(self.cols).enumerate() {
            self.row_to_f32(row, chunk);
        }
        out
    }
}

fn dequantized(kind: GgmlType, bytes: &[u8], elements: usize) -> Vec<f32> {
    let mut out = vec![0f32; elements];
    quant::dequantize_bytes(kind, bytes, &mut out);
    out
}
