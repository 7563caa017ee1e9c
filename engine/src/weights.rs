//! Weight matrices in the runtime type the engine computes with, converted once at load.

use std::{fmt, str::FromStr};

use half::{bf16, f16};

use crate::{
    heap, kernels,
    quant::{
        self, BlockQ4_0, BlockQ4_0x16, BlockQ4_1, BlockQ4K, BlockQ4Kx16, BlockQ5_0, BlockQ5_1,
        BlockQ5K, BlockQ6K, BlockQ6Kx16, BlockQ8_0, BlockQ8_0x16, GgmlType, INTERLEAVED_ROWS,
        InterleavedBlock, Interleaver, QK, QK_K,
    },
};

/// The type a weight matrix is held in at run time, a profile dimension.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
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
    /// 6-bit super-blocks of 256 (K-quant).
    #[serde(rename = "q6_k")]
    Q6K,
    /// 5-bit blocks of 32 with a scale and a minimum.
    Q5_1,
    /// 5-bit blocks of 32 with a scale.
    Q5_0,
    /// 5-bit super-blocks of 256 with 6-bit scales and minimums (K-quant).
    #[serde(rename = "q5_k")]
    Q5K,
    /// 4-bit super-blocks of 256 with 6-bit scales and minimums (K-quant).
    #[serde(rename = "q4_k")]
    Q4K,
}

impl WeightType {
    /// Every runtime type, highest precision first.
    pub const ALL: [WeightType; 11] = [
        Self::F32,
        Self::F16,
        Self::Bf16,
        Self::Q8_0,
        Self::Q6K,
        Self::Q5_1,
        Self::Q5_0,
        Self::Q5K,
        Self::Q4_1,
        Self::Q4K,
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
            Self::Q6K => "q6_k",
            Self::Q5_1 => "q5_1",
            Self::Q5_0 => "q5_0",
            Self::Q5K => "q5_k",
            Self::Q4K => "q4_k",
        }
    }

    /// The runtime type that holds a file type as it is: every type the engine reads runs as it is.
    pub fn of_file_type(kind: GgmlType) -> Self {
        match kind {
            GgmlType::F32 => Self::F32,
            GgmlType::F16 => Self::F16,
            GgmlType::BF16 => Self::Bf16,
            GgmlType::Q8_0 => Self::Q8_0,
            GgmlType::Q4_0 => Self::Q4_0,
            GgmlType::Q4_1 => Self::Q4_1,
            GgmlType::Q5_0 => Self::Q5_0,
            GgmlType::Q5_1 => Self::Q5_1,
            GgmlType::Q4K => Self::Q4K,
            GgmlType::Q5K => Self::Q5K,
            GgmlType::Q6K => Self::Q6K,
        }
    }

    /// The file type that stores this runtime type as it is.
    pub fn file_type(self) -> GgmlType {
        match self {
            Self::F32 => GgmlType::F32,
            Self::F16 => GgmlType::F16,
            Self::Bf16 => GgmlType::BF16,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::Q4K => GgmlType::Q4K,
            Self::Q5K => GgmlType::Q5K,
            Self::Q6K => GgmlType::Q6K,
        }
    }

    /// Whether this type stores fewer than six bits a value: the types whose embedding and output
    /// head llama.cpp's quantizer keeps in a wider type.
    pub fn is_low_bit(self) -> bool {
        matches!(
            self,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q4K | Self::Q5K
        )
    }

    /// Whether values are stored in blocks with scales (not as floats).
    pub fn is_quantized(self) -> bool {
        self.file_type().is_quantized()
    }

    /// The row-length granularity the type needs.
    pub fn block_size(self) -> usize {
        self.file_type().block_size()
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown weight type name.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown weight type {0:?} (expected one of f32, f16, bf16, q8_0, q6_k, q5_1, q5_0, q5_k, q4_1, q4_k, q4_0)"
)]
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

/// The runtime types of a model's matrices and the bytes each holds: one type for a file of one
/// type or a requantized model, several for llama-quantize's mixes (Q4_K_M holds Q4_K, Q6_K, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WeightMix {
    /// Bytes per type, most bytes first.
    pub bytes: Vec<(WeightType, usize)>,
}

impl WeightMix {
    /// The mix of `weights`.
    pub fn of<'a>(weights: impl IntoIterator<Item = &'a Weight>) -> Self {
        let mut totals = std::collections::BTreeMap::<WeightType, usize>::new();
        for w in weights {
            *totals.entry(w.kind()).or_default() += w.byte_size();
        }
        let mut bytes: Vec<_> = totals.into_iter().collect();
        bytes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Self { bytes }
    }

    /// The type holding the most bytes (F32 for no matrices).
    pub fn main_type(&self) -> WeightType {
        self.bytes
            .first()
            .map_or(WeightType::F32, |&(kind, _)| kind)
    }
}

impl fmt::Display for WeightMix {
    /// `q4_k` for one type; `q4_k 61% + q6_k 25% + q8_0 14%` for a mix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bytes.len() <= 1 {
            return write!(f, "{}", self.main_type());
        }
        let total: usize = self.bytes.iter().map(|&(_, b)| b).sum::<usize>().max(1);
        for (i, &(kind, bytes)) in self.bytes.iter().enumerate() {
            let sep = if i == 0 { "" } else { " + " };
            write!(f, "{sep}{kind} {:.0}%", 100.0 * bytes as f64 / total as f64)?;
        }
        Ok(())
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
    /// Q8_0 blocks of sixteen rows at a time, interleaved ([`BlockQ8_0x16`]), grouped as
    /// [`Self::Q4KInterleaved`]'s.
    Q8_0Interleaved(Vec<BlockQ8_0x16>),
    /// Q4_0 blocks.
    Q4_0(Vec<BlockQ4_0>),
    /// Q4_0 blocks of sixteen rows at a time, interleaved ([`BlockQ4_0x16`]), grouped as
    /// [`Self::Q4KInterleaved`]'s.
    Q4_0Interleaved(Vec<BlockQ4_0x16>),
    /// Q4_1 blocks.
    Q4_1(Vec<BlockQ4_1>),
    /// Q5_0 blocks.
    Q5_0(Vec<BlockQ5_0>),
    /// Q5_1 blocks.
    Q5_1(Vec<BlockQ5_1>),
    /// Q4_K super-blocks.
    Q4K(Vec<BlockQ4K>),
    /// Q4_K super-blocks of sixteen rows at a time, interleaved ([`BlockQ4Kx16`]): the groups of
    /// sixteen rows one after the other, each group's super-blocks in order.
    Q4KInterleaved(Vec<BlockQ4Kx16>),
    /// Q5_K super-blocks.
    Q5K(Vec<BlockQ5K>),
    /// Q6_K super-blocks.
    Q6K(Vec<BlockQ6K>),
    /// Q6_K super-blocks of sixteen rows at a time, interleaved ([`BlockQ6Kx16`]), grouped as
    /// [`Self::Q4KInterleaved`]'s.
    Q6KInterleaved(Vec<BlockQ6Kx16>),
}

/// Runs `$body` with `$v` bound to the vector inside any [`WeightData`] variant.
macro_rules! with_values {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            WeightData::F32($v) => $body,
            WeightData::F16($v) => $body,
            WeightData::Bf16($v) => $body,
            WeightData::Q8_0($v) => $body,
            WeightData::Q8_0Interleaved($v) => $body,
            WeightData::Q4_0($v) => $body,
            WeightData::Q4_0Interleaved($v) => $body,
            WeightData::Q4_1($v) => $body,
            WeightData::Q5_0($v) => $body,
            WeightData::Q5_1($v) => $body,
            WeightData::Q4K($v) => $body,
            WeightData::Q4KInterleaved($v) => $body,
            WeightData::Q5K($v) => $body,
            WeightData::Q6K($v) => $body,
            WeightData::Q6KInterleaved($v) => $body,
        }
    };
}

impl WeightData {
    /// File bytes of `kind` held as they are.
    fn parse(kind: GgmlType, bytes: &[u8]) -> Self {
        match kind {
            GgmlType::F32 => Self::F32(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ),
            GgmlType::F16 => Self::F16(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            ),
            GgmlType::BF16 => Self::Bf16(
                bytes
                    .chunks_exact(2)
                    .map(|b| bf16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            ),
            GgmlType::Q8_0 => Self::Q8_0(quant::parse_q8_0(bytes)),
            GgmlType::Q4_0 => Self::Q4_0(quant::parse_q4_0(bytes)),
            GgmlType::Q4_1 => Self::Q4_1(quant::parse_q4_1(bytes)),
            GgmlType::Q5_0 => Self::Q5_0(quant::parse_q5_0(bytes)),
            GgmlType::Q5_1 => Self::Q5_1(quant::parse_q5_1(bytes)),
            GgmlType::Q4K => Self::Q4K(quant::parse_q4_k(bytes)),
            GgmlType::Q5K => Self::Q5K(quant::parse_q5_k(bytes)),
            GgmlType::Q6K => Self::Q6K(quant::parse_q6_k(bytes)),
        }
    }

    /// `values` in `target`, quantized with ggml's reference quantizers.
    fn quantized(values: Vec<f32>, target: WeightType) -> Self {
        fn blocks<B: Copy>(
            x: &[f32],
            zero: B,
            quantize: fn(&[f32], &mut [B]),
            size: usize,
        ) -> Vec<B> {
            let mut out = vec![zero; x.len() / size];
            quantize(x, &mut out);
            out
        }
        let x = &values;
        match target {
            WeightType::F32 => Self::F32(values),
            WeightType::F16 => Self::F16(x.iter().map(|&v| f16::from_f32(v)).collect()),
            WeightType::Bf16 => Self::Bf16(x.iter().map(|&v| bf16::from_f32(v)).collect()),
            WeightType::Q8_0 => {
                Self::Q8_0(blocks(x, BlockQ8_0::default(), quant::quantize_q8_0, QK))
            }
            WeightType::Q4_0 => {
                Self::Q4_0(blocks(x, BlockQ4_0::default(), quant::quantize_q4_0, QK))
            }
            WeightType::Q4_1 => {
                Self::Q4_1(blocks(x, BlockQ4_1::default(), quant::quantize_q4_1, QK))
            }
            WeightType::Q5_0 => {
                Self::Q5_0(blocks(x, BlockQ5_0::default(), quant::quantize_q5_0, QK))
            }
            WeightType::Q5_1 => {
                Self::Q5_1(blocks(x, BlockQ5_1::default(), quant::quantize_q5_1, QK))
            }
            WeightType::Q4K => {
                Self::Q4K(blocks(x, BlockQ4K::default(), quant::quantize_q4_k, QK_K))
            }
            WeightType::Q5K => {
                Self::Q5K(blocks(x, BlockQ5K::default(), quant::quantize_q5_k, QK_K))
            }
            WeightType::Q6K => {
                Self::Q6K(blocks(x, BlockQ6K::default(), quant::quantize_q6_k, QK_K))
            }
        }
    }

    /// An empty vector of `kind`'s values with room for `units` values or blocks, in huge pages
    /// where the system gives them (see [`heap::advise_huge_pages`]).
    fn with_capacity(kind: WeightType, units: usize) -> Self {
        use heap::huge_page_vec as room;
        match kind {
            WeightType::F32 => Self::F32(room(units)),
            WeightType::F16 => Self::F16(room(units)),
            WeightType::Bf16 => Self::Bf16(room(units)),
            WeightType::Q8_0 => Self::Q8_0(room(units)),
            WeightType::Q4_0 => Self::Q4_0(room(units)),
            WeightType::Q4_1 => Self::Q4_1(room(units)),
            WeightType::Q5_0 => Self::Q5_0(room(units)),
            WeightType::Q5_1 => Self::Q5_1(room(units)),
            WeightType::Q4K => Self::Q4K(room(units)),
            WeightType::Q5K => Self::Q5K(room(units)),
            WeightType::Q6K => Self::Q6K(room(units)),
        }
    }

    /// Appends `more`, which holds the same type.
    fn append(&mut self, more: &WeightData) {
        macro_rules! extend {
            ($($variant:ident),*) => {
                match (self, more) {
                    $((WeightData::$variant(a), WeightData::$variant(b)) => a.extend_from_slice(b),)*
                    _ => unreachable!("appended values hold the same type"),
                }
            };
        }
        extend!(F32, F16, Bf16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4K, Q5K, Q6K);
    }

    /// The runtime type.
    fn kind(&self) -> WeightType {
        match self {
            Self::F32(_) => WeightType::F32,
            Self::F16(_) => WeightType::F16,
            Self::Bf16(_) => WeightType::Bf16,
            Self::Q8_0(_) | Self::Q8_0Interleaved(_) => WeightType::Q8_0,
            Self::Q4_0(_) | Self::Q4_0Interleaved(_) => WeightType::Q4_0,
            Self::Q4_1(_) => WeightType::Q4_1,
            Self::Q5_0(_) => WeightType::Q5_0,
            Self::Q5_1(_) => WeightType::Q5_1,
            Self::Q4K(_) | Self::Q4KInterleaved(_) => WeightType::Q4K,
            Self::Q5K(_) => WeightType::Q5K,
            Self::Q6K(_) | Self::Q6KInterleaved(_) => WeightType::Q6K,
        }
    }

    /// Bytes the values take in memory.
    fn byte_size(&self) -> usize {
        with_values!(self, v => size_of_val(v.as_slice()))
    }

    /// Row `row` (of `per_row` values or blocks, as the type holds them) as f32 into `out`.
    fn row_to_f32(&self, row: usize, per_row: usize, out: &mut [f32]) {
        let units = row * per_row..(row + 1) * per_row;
        /// Row `row` of interleaved `groups` through `dequantize`, a super-block at a time.
        fn interleaved_row<B: InterleavedBlock>(
            groups: &[B],
            (row, per_row): (usize, usize),
            out: &mut [f32],
            dequantize: fn(&[B::Row], &mut [f32]),
        ) {
            let group = &groups[row / INTERLEAVED_ROWS * per_row..][..per_row];
            let values = out.len() / per_row.max(1);
            for (block, out) in group.iter().zip(out.chunks_exact_mut(values)) {
                dequantize(&[block.row(row % INTERLEAVED_ROWS)], out);
            }
        }
        match self {
            Self::Q4KInterleaved(groups) => {
                interleaved_row(groups, (row, per_row), out, quant::dequantize_q4_k);
            }
            Self::Q6KInterleaved(groups) => {
                interleaved_row(groups, (row, per_row), out, quant::dequantize_q6_k);
            }
            Self::Q8_0Interleaved(groups) => {
                interleaved_row(groups, (row, per_row), out, quant::dequantize_q8_0);
            }
            Self::Q4_0Interleaved(groups) => {
                interleaved_row(groups, (row, per_row), out, quant::dequantize_q4_0);
            }
            Self::F32(v) => out.copy_from_slice(&v[units]),
            Self::F16(v) => out
                .iter_mut()
                .zip(&v[units])
                .for_each(|(o, x)| *o = x.to_f32()),
            Self::Bf16(v) => out
                .iter_mut()
                .zip(&v[units])
                .for_each(|(o, x)| *o = x.to_f32()),
            Self::Q8_0(v) => quant::dequantize_q8_0(&v[units], out),
            Self::Q4_0(v) => quant::dequantize_q4_0(&v[units], out),
            Self::Q4_1(v) => quant::dequantize_q4_1(&v[units], out),
            Self::Q5_0(v) => quant::dequantize_q5_0(&v[units], out),
            Self::Q5_1(v) => quant::dequantize_q5_1(&v[units], out),
            Self::Q4K(v) => quant::dequantize_q4_k(&v[units], out),
            Self::Q5K(v) => quant::dequantize_q5_k(&v[units], out),
            Self::Q6K(v) => quant::dequantize_q6_k(&v[units], out),
        }
    }
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

/// Builds a [`Weight`] from a file's bytes a few rows at a time, so that a loader can hand back each
/// piece of a mapped file once it is copied, instead of holding a whole tensor twice; matrices that
/// are stacked are read one after the other into one.
pub struct WeightBuilder {
    target: WeightType,
    rows: usize,
    cols: usize,
    filled: usize,
    data: WeightData,
    /// Interleaves rows as they come, for a matrix the kernels read interleaved.
    interleaver: Option<Interleaving>,
}

/// The interleaver of a matrix held interleaved.
enum Interleaving {
    Q4_0(Interleaver<BlockQ4_0x16>),
    Q4K(Interleaver<BlockQ4Kx16>),
    Q6K(Interleaver<BlockQ6Kx16>),
    Q8_0(Interleaver<BlockQ8_0x16>),
}

impl WeightBuilder {
    /// A matrix of `rows x cols` values held as `target`.
    ///
    /// The caller has checked that `cols` is a multiple of `target`'s block size and of the block
    /// sizes of the file types it pushes.
    pub fn new(target: WeightType, rows: usize, cols: usize) -> Self {
        let units = rows * cols / target.block_size();
        let groups = units / INTERLEAVED_ROWS;
        let nb = cols / target.block_size();
        let interleaves = kernels::dispatch::table().interleaves(target, rows);
        let (data, interleaver) = match target {
            WeightType::Q4_0 if interleaves => (
                WeightData::Q4_0Interleaved(heap::huge_page_vec(groups)),
                Some(Interleaving::Q4_0(Interleaver::new(nb))),
            ),
            WeightType::Q4K if interleaves => (
                WeightData::Q4KInterleaved(heap::huge_page_vec(groups)),
                Some(Interleaving::Q4K(Interleaver::new(nb))),
            ),
            WeightType::Q6K if interleaves => (
                WeightData::Q6KInterleaved(heap::huge_page_vec(groups)),
                Some(Interleaving::Q6K(Interleaver::new(nb))),
            ),
            WeightType::Q8_0 if interleaves => (
                WeightData::Q8_0Interleaved(heap::huge_page_vec(groups)),
                Some(Interleaving::Q8_0(Interleaver::new(nb))),
            ),
            _ => (WeightData::with_capacity(target, units), None),
        };
        Self {
            target,
            rows,
            cols,
            filled: 0,
            data,
            interleaver,
        }
    }

    /// Bytes of one row stored as `file_type`.
    pub fn row_bytes(&self, file_type: GgmlType) -> usize {
        self.cols / file_type.block_size() * file_type.block_bytes()
    }

    /// Appends the next whole rows, given as file bytes of `file_type`.
    pub fn push_rows(&mut self, file_type: GgmlType, bytes: &[u8]) {
        let rows = bytes.len() / self.row_bytes(file_type);
        debug_assert_eq!(bytes.len(), rows * self.row_bytes(file_type));
        debug_assert!(self.filled + rows <= self.rows);
        let piece = if WeightType::of_file_type(file_type) == self.target {
            WeightData::parse(file_type, bytes)
        } else {
            let mut values = vec![0f32; rows * self.cols];
            quant::dequantize_bytes(file_type, bytes, &mut values);
            WeightData::quantized(values, self.target)
        };
        match (&mut self.data, &piece, &mut self.interleaver) {
            (
                WeightData::Q4_0Interleaved(out),
                WeightData::Q4_0(rows),
                Some(Interleaving::Q4_0(interleaver)),
            ) => interleaver.push(rows, out),
            (
                WeightData::Q4KInterleaved(out),
                WeightData::Q4K(rows),
                Some(Interleaving::Q4K(interleaver)),
            ) => interleaver.push(rows, out),
            (
                WeightData::Q6KInterleaved(out),
                WeightData::Q6K(rows),
                Some(Interleaving::Q6K(interleaver)),
            ) => interleaver.push(rows, out),
            (
                WeightData::Q8_0Interleaved(out),
                WeightData::Q8_0(rows),
                Some(Interleaving::Q8_0(interleaver)),
            ) => interleaver.push(rows, out),
            (data, piece, _) => data.append(piece),
        }
        self.filled += rows;
    }

    /// The matrix, once every row has been pushed.
    pub fn finish(self) -> Weight {
        debug_assert_eq!(self.filled, self.rows);
        debug_assert!(self.interleaver.as_ref().is_none_or(|i| match i {
            Interleaving::Q4_0(i) => i.is_done(),
            Interleaving::Q4K(i) => i.is_done(),
            Interleaving::Q6K(i) => i.is_done(),
            Interleaving::Q8_0(i) => i.is_done(),
        }));
        Weight {
            rows: self.rows,
            cols: self.cols,
            data: self.data,
        }
    }
}

impl Weight {
    /// Builds a matrix of type `target` from row-major f32 values.
    ///
    /// The caller has checked that `cols` is a multiple of `target`'s block size.
    pub fn from_f32(values: Vec<f32>, rows: usize, cols: usize, target: WeightType) -> Self {
        Self {
            rows,
            cols,
            data: WeightData::quantized(values, target),
        }
    }

    /// The matrix with its Q4_0, Q4_K, Q6_K or Q8_0 rows interleaved sixteen at a time
    /// ([`BlockQ4_0x16`], [`BlockQ4Kx16`], [`BlockQ6Kx16`], [`BlockQ8_0x16`]), as the loader holds them for kernels that read them so;
    /// other matrices, and those whose rows do not come in sixteens, as they are.
    pub fn interleaved(self) -> Self {
        fn groups<B: InterleavedBlock>(rows: &[B::Row], nb: usize) -> Vec<B> {
            let mut groups = Vec::with_capacity(rows.len() / INTERLEAVED_ROWS);
            quant::interleave(rows, nb, &mut groups);
            groups
        }
        if !self.rows.is_multiple_of(INTERLEAVED_ROWS) {
            return self;
        }
        let nb = self.units_per_row();
        let data = match self.data {
            WeightData::Q4_0(rows) => WeightData::Q4_0Interleaved(groups(&rows, nb)),
            WeightData::Q4K(rows) => WeightData::Q4KInterleaved(groups(&rows, nb)),
            WeightData::Q6K(rows) => WeightData::Q6KInterleaved(groups(&rows, nb)),
            WeightData::Q8_0(rows) => WeightData::Q8_0Interleaved(groups(&rows, nb)),
            data => data,
        };
        Self { data, ..self }
    }

    /// The runtime type.
    pub fn kind(&self) -> WeightType {
        self.data.kind()
    }

    /// Values or blocks per row, as the type holds them.
    pub fn units_per_row(&self) -> usize {
        self.cols / self.kind().block_size()
    }

    /// Bytes the values take in memory.
    pub fn byte_size(&self) -> usize {
        self.data.byte_size()
    }

    /// Writes row `row` as f32 into `out` (`cols` values): the embedding lookup.
    pub fn row_to_f32(&self, row: usize, out: &mut [f32]) {
        self.data.row_to_f32(row, self.units_per_row(), out);
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
