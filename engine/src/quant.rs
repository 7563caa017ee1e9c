//! GGML tensor types and their block formats: layout, dequantization to f32, and the reference
//! quantizers (ports of ggml's `quantize_row_*_ref`, so that requantizing at load gives the same
//! weights that `llama-quantize` writes).

use half::{bf16, f16};

mod kquants;
pub use kquants::*;

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

/// Bytes of a ggml `block_q5_0`: f16 scale, 32 high bits, 16 bytes of low nibbles.
pub const Q5_0_BYTES: usize = 22;
/// Bytes of a ggml `block_q5_1`: f16 scale and minimum, 32 high bits, 16 bytes of low nibbles.
pub const Q5_1_BYTES: usize = 24;
/// Bytes of a ggml `block_q4_K`: f16 `d` and `dmin`, 12 bytes of packed 6-bit scales and mins, 128
/// bytes of nibbles.
pub const Q4_K_BYTES: usize = 144;
/// Bytes of a ggml `block_q5_K`: as Q4_K plus 32 bytes of high bits.
pub const Q5_K_BYTES: usize = 176;
/// Bytes of a ggml `block_q6_K`: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales,
/// f16 `d`.
pub const Q6_K_BYTES: usize = 210;

/// ggml `block_q4_0`: `x = (q - 8) * d`; low nibbles hold elements 0..16, high nibbles 16..32.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed 4-bit values.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

/// ggml `block_q4_1`: `x = q * d + m`; nibble order as in [`BlockQ4_0`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum.
    pub m: f16,
    /// Packed 4-bit values.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

/// ggml `block_q8_0`: `x = q * d`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Values.
    pub qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

impl Default for BlockQ8_0 {
    fn default() -> Self {
        Self {
            d: f16::ZERO,
            qs: [0; QK],
        }
    }
}

/// ggml `block_q8_1`: like [`BlockQ8_0`] plus `s = d * sum(qs)`, the activation format paired with Q4_1.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d * sum(qs)`.
    pub s: f16,
    /// Values.
    pub qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 36);

impl Default for BlockQ8_1 {
    fn default() -> Self {
        Self {
            d: f16::ZERO,
            s: f16::ZERO,
            qs: [0; QK],
        }
    }
}

/// A block type that activations are quantized into, with the values it holds.
pub trait ActivationBlock: Default + Clone + Send + Sync {
    /// Values per block.
    const SIZE: usize;
}

impl ActivationBlock for BlockQ8_0 {
    const SIZE: usize = QK;
}

impl ActivationBlock for BlockQ8_1 {
    const SIZE: usize = QK;
}

impl ActivationBlock for BlockQ8K {
    const SIZE: usize = QK_K;
}

/// ggml `block_q5_0`: `x = (q - 16) * d`; the fifth bit of element `j` is bit `j` of the
/// little-endian word `qh`, nibbles as in [`BlockQ4_0`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// The 32 fifth bits, little-endian.
    pub qh: [u8; 4],
    /// Packed low 4 bits.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_0>() == Q5_0_BYTES);

/// ggml `block_q5_1`: `x = q * d + m`; bits as in [`BlockQ5_0`]. Pairs with [`BlockQ8_1`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum.
    pub m: f16,
    /// The 32 fifth bits, little-endian.
    pub qh: [u8; 4],
    /// Packed low 4 bits.
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_1>() == Q5_1_BYTES);

/// ggml `block_q4_K`: eight sub-blocks of 32, `x = d * sc * q - dmin * m` with 6-bit `sc` and `m`
/// packed in `scales` (see ggml's `get_scale_min_k4`); each 64 values share 32 bytes of `qs`, low
/// nibbles first.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale of the scales.
    pub d: f16,
    /// Super-block scale of the mins.
    pub dmin: f16,
    /// Packed 6-bit scales and mins.
    pub scales: [u8; 12],
    /// Packed 4-bit values.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ4K>() == Q4_K_BYTES);

/// ggml `block_q5_K`: [`BlockQ4K`] plus a fifth bit per value: bit `2i` of `qh[l]` for the low
/// nibble of `qs[32i + l]`, bit `2i + 1` for its high nibble.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale of the scales.
    pub d: f16,
    /// Super-block scale of the mins.
    pub dmin: f16,
    /// Packed 6-bit scales and mins.
    pub scales: [u8; 12],
    /// The fifth bits.
    pub qh: [u8; QK_K / 8],
    /// Packed low 4 bits.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ5K>() == Q5_K_BYTES);

/// ggml `block_q6_K`: sixteen sub-blocks of 16, `x = d * scales[s] * (q - 32)` with 6-bit `q`
/// (low 4 bits in `ql`, high 2 bits in `qh`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits.
    pub qh: [u8; QK_K / 4],
    /// Sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}
const _: () = assert!(size_of::<BlockQ6K>() == Q6_K_BYTES);

/// ggml `block_q8_K`: the activation format paired with the K-quants: 256 int8 values, an f32 scale,
/// and the sums of each 16 values (which the K-quants' mins multiply).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Values.
    pub qs: [i8; QK_K],
    /// Sums of each 16 consecutive values.
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ8K>() == 292);

impl Default for BlockQ4K {
    fn default() -> Self {
        Self {
            d: f16::ZERO,
            dmin: f16::ZERO,
            scales: [0; 12],
            qs: [0; QK_K / 2],
        }
    }
}

impl Default for BlockQ5K {
    fn default() -> Self {
        Self {
            d: f16::ZERO,
            dmin: f16::ZERO,
            scales: [0; 12],
            qh: [0; QK_K / 8],
            qs: [0; QK_K / 2],
        }
    }
}

impl Default for BlockQ6K {
    fn default() -> Self {
        Self {
            ql: [0; QK_K / 2],
            qh: [0; QK_K / 4],
            scales: [0; QK_K / 16],
            d: f16::ZERO,
        }
    }
}

impl Default for BlockQ8K {
    fn default() -> Self {
        Self {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

fn f16_at(bytes: &[u8], at: usize) -> f16 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// Parses Q4_0 blocks from file bytes (length a multiple of 18).
pub fn parse_q4_0(bytes: &[u8]) -> Vec<BlockQ4_0> {
    bytes
        .chunks_exact(18)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[2..18]);
            BlockQ4_0 {
                d: f16_at(b, 0),
                qs,
            }
        })
        .collect()
}

/// Parses Q4_1 blocks from file bytes (length a multiple of 20).
pub fn parse_q4_1(bytes: &[u8]) -> Vec<BlockQ4_1> {
    bytes
        .chunks_exact(20)
        .map(|b| {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&b[4..20]);
            BlockQ4_1 {
                d: f16_at(b, 0),
                m: f16_at(b, 2),
                qs,
            }
        })
        .collect()
}

/// Parses Q8_0 blocks from file bytes (length a multiple of 34).
pub fn parse_q8_0(bytes: &[u8]) -> Vec<BlockQ8_0> {
    bytes
        .chunks_exact(34)
        .map(|b| {
            let mut qs = [0i8; QK];
            for (q, &byte) in qs.iter_mut().zip(&b[2..34]) {
                *q = byte as i8;
            }
            BlockQ8_0 {
                d: f16_at(b, 0),
                qs,
            }
        })
        .collect()
}

/// `N` bytes of `b` from `at`.
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    std::array::from_fn(|i| b[at + i])
}

/// Parses Q5_0 blocks from file bytes (length a multiple of 22).
pub fn parse_q5_0(bytes: &[u8]) -> Vec<BlockQ5_0> {
    bytes
        .chunks_exact(Q5_0_BYTES)
        .map(|b| BlockQ5_0 {
            d: f16_at(b, 0),
            qh: bytes_at(b, 2),
            qs: bytes_at(b, 6),
        })
        .collect()
}

/// Parses Q5_1 blocks from file bytes (length a multiple of 24).
pub fn parse_q5_1(bytes: &[u8]) -> Vec<BlockQ5_1> {
    bytes
        .chunks_exact(Q5_1_BYTES)
        .map(|b| BlockQ5_1 {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qh: bytes_at(b, 4),
            qs: bytes_at(b, 8),
        })
        .collect()
}

/// Parses Q4_K super-blocks from file bytes (length a multiple of 144).
pub fn parse_q4_k(bytes: &[u8]) -> Vec<BlockQ4K> {
    bytes
        .chunks_exact(Q4_K_BYTES)
        .map(|b| BlockQ4K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: bytes_at(b, 4),
            qs: bytes_at(b, 16),
        })
        .collect()
}

/// Parses Q5_K super-blocks from file bytes (length a multiple of 176).
pub fn parse_q5_k(bytes: &[u8]) -> Vec<BlockQ5K> {
    bytes
        .chunks_exact(Q5_K_BYTES)
        .map(|b| BlockQ5K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: bytes_at(b, 4),
            qh: bytes_at(b, 16),
            qs: bytes_at(b, 48),
        })
        .collect()
}

/// Parses Q6_K super-blocks from file bytes (length a multiple of 210).
pub fn parse_q6_k(bytes: &[u8]) -> Vec<BlockQ6K> {
    bytes
        .chunks_exact(Q6_K_BYTES)
        .map(|b| BlockQ6K {
            ql: bytes_at(b, 0),
            qh: bytes_at(b, 128),
            scales: bytes_at::<16>(b, 192).map(|s| s as i8),
            d: f16_at(b, 208),
        })
        .collect()
}

/// Serializes blocks back to GGUF bytes.
pub fn q4_0_bytes(blocks: &[BlockQ4_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 18);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q4_1_bytes(blocks: &[BlockQ4_1]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 20);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.m.to_le_bytes());
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q8_0_bytes(blocks: &[BlockQ8_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * 34);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend(b.qs.iter().map(|&q| q as u8));
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q5_0_bytes(blocks: &[BlockQ5_0]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q5_0_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes blocks back to GGUF bytes.
pub fn q5_1_bytes(blocks: &[BlockQ5_1]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q5_1_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.m.to_le_bytes());
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes super-blocks back to GGUF bytes.
pub fn q4_k_bytes(blocks: &[BlockQ4K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q4_K_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.dmin.to_le_bytes());
        out.extend_from_slice(&b.scales);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes super-blocks back to GGUF bytes.
pub fn q5_k_bytes(blocks: &[BlockQ5K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q5_K_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.d.to_le_bytes());
        out.extend_from_slice(&b.dmin.to_le_bytes());
        out.extend_from_slice(&b.scales);
        out.extend_from_slice(&b.qh);
        out.extend_from_slice(&b.qs);
    }
    out
}

/// Serializes super-blocks back to GGUF bytes.
pub fn q6_k_bytes(blocks: &[BlockQ6K]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() * Q6_K_BYTES);
    for b in blocks {
        out.extend_from_slice(&b.ql);
        out.extend_from_slice(&b.qh);
        out.extend(b.scales.iter().map(|&s| s as u8));
        out.extend_from_slice(&b.d.to_le_bytes());
    }
    out
}

/// Dequantizes Q4_0 blocks into `out` (32 values per block).
pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            y[j] = ((b.qs[j] & 0x0f) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Dequantizes Q4_1 blocks into `out`.
pub fn dequantize_q4_1(blocks: &[BlockQ4_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for j in 0..QK / 2 {
            y[j] = (b.qs[j] & 0x0f) as f32 * d + m;
            y[j + QK / 2] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

/// Dequantizes Q8_0 blocks into `out`.
pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = q as f32 * d;
        }
    }
}

/// ggml `quantize_row_q8_0_ref`: how `llama-quantize` writes Q8_0 weights (round half away from zero).
pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        for (q, &v) in b.qs.iter_mut().zip(xs) {
            *q = (v * id).round() as i8;
        }
    }
}

/// `v.round_ties_even() as i8` for the scaled activations, without a library call: adding and
/// subtracting 1.5 * 2^23 rounds to an integer, half to even, for every `|v| < 2^22`, and keeps
/// infinities and NaN (whose conversions saturate to 127, -128 and 0 either way). Scaled activations
/// are at most 127 in magnitude, or infinite when the scale overflows; any value of 2^22 or more in
/// magnitude, however it rounds, saturates to 127 or -128 like its exact rounding. Branch-free, so
/// that loops of it vectorize.
#[inline(always)]
fn round_to_i8(v: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    ((v + MAGIC) - MAGIC) as i8
}

/// Activations to Q8_0 as ggml's x86 `quantize_row_q8_0` rounds them: scale `127 / max|x|`, round half
/// to even. The int8 products downstream amplify any rounding difference, so this is kept exact.
pub fn quantize_activations_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        b.d = f16::from_f32(amax / 127.0);
        for (q, &v) in b.qs.iter_mut().zip(xs) {
            *q = round_to_i8(v * id);
        }
    }
}

/// Activations to Q8_1 (Q8_0 plus the scaled block sum), rounded as ggml's x86 `quantize_row_q8_1`.
pub fn quantize_activations_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(xs) {
            *q = round_to_i8(v * id);
            sum += *q as i32;
        }
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
    }
}

/// Activations to Q8_K as ggml's x86 `quantize_row_q8_K` (its reference `quantize_row_q8_K_ref`)
/// writes them: the value of largest magnitude, sign kept, sets `iscale = -127 / max`; each value is
/// `iscale * x` rounded half to even (at most 127 in magnitude, as `|x| <= |max|`, so ggml's clamp to
/// 127 never acts); `bsums` are the sums of each 16 values and `d = 1 / iscale`. An all-zero
/// super-block gets `d = 0` and zero values.
pub fn quantize_activations_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xs, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        // The value of largest magnitude, sign kept, first of equals: in two passes that the compiler
        // vectorizes (a max reduction, then a search that usually stops early).
        let amax = xs.iter().fold(0f32, |m, &v| m.max(v.abs()));
        let Some(&max) = xs.iter().find(|v| v.abs() == amax).filter(|_| amax > 0.0) else {
            *b = BlockQ8K::default();
            continue;
        };
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xs) {
            *q = round_to_i8(iscale * v);
        }
        for (sum, qs) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *sum = qs.iter().map(|&q| i16::from(q)).sum();
        }
        b.d = 1.0 / iscale;
    }
}

/// ggml `quantize_row_q4_0_ref`.
pub fn quantize_q4_0(x: &[f32], out: &mut [BlockQ4_0]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        // The value of largest magnitude, sign kept.
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xs {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        for j in 0..QK / 2 {
            let x0 = ((xs[j] * id + 8.5) as i8).min(15) as u8;
            let x1 = ((xs[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            b.qs[j] = x0 | (x1 << 4);
        }
    }
}

/// ggml `quantize_row_q4_1_ref`.
pub fn quantize_q4_1(x: &[f32], out: &mut [BlockQ4_1]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let min = xs.iter().copied().fold(f32::INFINITY, f32::min);
        let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        b.m = f16::from_f32(min);
        for j in 0..QK / 2 {
            let x0 = (((xs[j] - min) * id + 0.5) as i8).min(15) as u8;
            let x1 = (((xs[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            b.qs[j] = x0 | (x1 << 4);
        }
    }
}

/// ggml `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K super-block.
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The eight 6-bit scales and the eight 6-bit mins of a Q4_K/Q5_K super-block, by sub-block.
pub(crate) fn scales_mins_k4(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let pairs: [(u8, u8); 8] = std::array::from_fn(|j| scale_min_k4(j, packed));
    (pairs.map(|p| p.0), pairs.map(|p| p.1))
}

/// The 4-bit values of a Q4_K super-block in element order: each 64 values share 32 bytes of `qs`,
/// low nibbles first.
pub(crate) fn q4_k_values(b: &BlockQ4K) -> [u8; QK_K] {
    std::array::from_fn(|i| {
        let byte = b.qs[i / 64 * 32 + i % 32];
        if i % 64 < 32 { byte & 0xF } else { byte >> 4 }
    })
}

/// The 5-bit values of a Q5_K super-block in element order: the Q4_K nibble of element `i` plus
/// 16 when bit `i / 32` of `qh[i % 32]` is set.
pub(crate) fn q5_k_values(b: &BlockQ5K) -> [u8; QK_K] {
    std::array::from_fn(|i| {
        let byte = b.qs[i / 64 * 32 + i % 32];
        let low = if i % 64 < 32 { byte & 0xF } else { byte >> 4 };
        low | (((b.qh[i % 32] >> (i / 32)) & 1) << 4)
    })
}

/// The 6-bit values of a Q6_K super-block in element order, less 32: each 128 values take 64 bytes of
/// `ql` (elements `l` and `l + 64` from byte `l`'s nibbles, `l + 32` and `l + 96` from byte `l + 32`'s)
/// and 32 bytes of `qh` (two bits each for `l`, `l + 32`, `l + 64`, `l + 96` in byte `l`).
pub(crate) fn q6_k_values(b: &BlockQ6K) -> [i8; QK_K] {
    std::array::from_fn(|i| {
        let (half, k) = (i / 128, i % 128);
        let (quarter, l) = (k / 32, k % 32);
        let ql = b.ql[64 * half + l + 32 * (quarter % 2)];
        let low = if quarter < 2 { ql & 0xF } else { ql >> 4 };
        let high = (b.qh[32 * half + l] >> (2 * quarter)) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// The 5-bit values of a Q5_0/Q5_1 block in element order: nibbles as in [`BlockQ4_0`], the fifth
/// bit of element `j` in bit `j` of the little-endian `qh` word.
pub(crate) fn five_bit_values(qs: &[u8; QK / 2], qh: &[u8; 4]) -> [u8; QK] {
    let qh = u32::from_le_bytes(*qh);
    std::array::from_fn(|j| {
        let low = if j < QK / 2 {
            qs[j] & 0x0f
        } else {
            qs[j - QK / 2] >> 4
        };
        low | ((((qh >> j) & 1) as u8) << 4)
    })
}

/// ggml `dequantize_row_q4_K`: `x = d * sc * q - dmin * m` per sub-block of 32.
pub fn dequantize_q4_k(blocks: &[BlockQ4K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let q = q4_k_values(b);
        k4_affine(b.d, b.dmin, &b.scales, &q, y);
    }
}

/// ggml `dequantize_row_q5_K`: as [`dequantize_q4_k`] with 5-bit values.
pub fn dequantize_q5_k(blocks: &[BlockQ5K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let q = q5_k_values(b);
        k4_affine(b.d, b.dmin, &b.scales, &q, y);
    }
}

/// `y = (d * sc) * q - dmin * m` over the eight sub-blocks of a Q4_K/Q5_K super-block.
fn k4_affine(d: f16, dmin: f16, packed: &[u8; 12], q: &[u8; QK_K], y: &mut [f32]) {
    let (d, dmin) = (d.to_f32(), dmin.to_f32());
    let (scales, mins) = scales_mins_k4(packed);
    for (s, (qs, ys)) in q.chunks_exact(32).zip(y.chunks_exact_mut(32)).enumerate() {
        let (ds, ms) = (d * scales[s] as f32, dmin * mins[s] as f32);
        for (v, &q) in ys.iter_mut().zip(qs) {
            *v = ds * q as f32 - ms;
        }
    }
}

/// ggml `dequantize_row_q6_K`: `x = d * scales[s] * (q - 32)` per sub-block of 16.
pub fn dequantize_q6_k(blocks: &[BlockQ6K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let q = q6_k_values(b);
        for (s, (qs, ys)) in q.chunks_exact(16).zip(y.chunks_exact_mut(16)).enumerate() {
            let ds = d * b.scales[s] as f32;
            for (v, &q) in ys.iter_mut().zip(qs) {
                *v = ds * q as f32;
            }
        }
    }
}

/// ggml `dequantize_row_q5_0`: `x = (q - 16) * d`.
pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(&five_bit_values(&b.qs, &b.qh)) {
            *v = (q as i32 - 16) as f32 * d;
        }
    }
}

/// ggml `dequantize_row_q5_1`: `x = q * d + m`.
pub fn dequantize_q5_1(blocks: &[BlockQ5_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (v, &q) in y.iter_mut().zip(&five_bit_values(&b.qs, &b.qh)) {
            *v = q as f32 * d + m;
        }
    }
}

/// The scales (f16 fields) of one block of `kind`, by name and byte offset in the block.
pub(crate) fn scale_fields(kind: GgmlType) -> &'static [(&'static str, usize)] {
    match kind {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[],
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[("d", 0)],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[("d", 0), ("m", 2)],
        GgmlType::Q4K | GgmlType::Q5K => &[("d", 0), ("dmin", 2)],
        GgmlType::Q6K => &[("d", Q6_K_BYTES - 2)],
    }
}

/// A block whose scale is infinite or NaN, which would poison every product it enters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("block {block} has a non-finite {field} ({value})")]
pub struct NonFiniteScale {
    /// The block's index in the tensor.
    pub block: usize,
    /// The scale's name in ggml's block struct (`d`, `m`, `dmin`).
    pub field: &'static str,
    /// The value as f32 (`inf`, `-inf`, `NaN`).
    pub value: f32,
}

/// Checks every block scale of raw tensor bytes of `kind`, as ggml's `ggml_validate_row_data` does
/// for the block types: the first block whose scale is infinite or NaN is an error. Block values
/// themselves (nibbles, packed 6-bit scales, high bits) cannot be out of range: every bit pattern is
/// a valid block.
pub fn check_block_scales(kind: GgmlType, bytes: &[u8]) -> Result<(), NonFiniteScale> {
    let fields = scale_fields(kind);
    if fields.is_empty() {
        return Ok(());
    }
    for (block, b) in bytes.chunks_exact(kind.block_bytes()).enumerate() {
        for &(field, at) in fields {
            let value = f16_at(b, at);
            if !value.is_finite() {
                return Err(NonFiniteScale {
                    block,
                    field,
                    value: value.to_f32(),
                });
            }
        }
    }
    Ok(())
}

/// Dequantizes raw tensor bytes of any readable type into f32 (`out.len()` elements).
pub fn dequantize_bytes(kind: GgmlType, bytes: &[u8], out: &mut [f32]) {
    match kind {
        GgmlType::F32 => {
            for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (v, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *v = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (v, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *v = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => dequantize_q4_0(&parse_q4_0(bytes), out),
        GgmlType::Q4_1 => dequantize_q4_1(&parse_q4_1(bytes), out),
        GgmlType::Q8_0 => dequantize_q8_0(&parse_q8_0(bytes), out),
        GgmlType::Q5_0 => dequantize_q5_0(&parse_q5_0(bytes), out),
        GgmlType::Q5_1 => dequantize_q5_1(&parse_q5_1(bytes), out),
        GgmlType::Q4K => dequantize_q4_k(&parse_q4_k(bytes), out),
        GgmlType::Q5K => dequantize_q5_k(&parse_q5_k(bytes), out),
        GgmlType::Q6K => dequantize_q6_k(&parse_q6_k(bytes), out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn rmse(a: &[f32], b: &[f32]) -> f32 {
        (a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>() / a.len() as f32).sqrt()
    }

    #[test]
    fn round_trips_stay_within_the_format_error() {
        let x = random(32 * 64, 7);
        let mut y = vec![0f32; x.len()];

        let mut q8 = vec![BlockQ8_0::default(); 64];
        quantize_q8_0(&x, &mut q8);
        dequantize_q8_0(&q8, &mut y);
        assert!(rmse(&x, &y) < 0.005, "q8_0 rmse {}", rmse(&x, &y));

        let mut q40 = vec![BlockQ4_0::default(); 64];
        quantize_q4_0(&x, &mut q40);
        dequantize_q4_0(&q40, &mut y);
        assert!(rmse(&x, &y) < 0.08, "q4_0 rmse {}", rmse(&x, &y));

        let mut q41 = vec![BlockQ4_1::default(); 64];
        quantize_q4_1(&x, &mut q41);
        dequantize_q4_1(&q41, &mut y);
        assert!(rmse(&x, &y) < 0.05, "q4_1 rmse {}", rmse(&x, &y));
    }

    #[test]
    fn byte_serialization_round_trips() {
        let x = random(32 * 8, 3);
        let mut q41 = vec![BlockQ4_1::default(); 8];
        quantize_q4_1(&x, &mut q41);
        assert_eq!(parse_q4_1(&q4_1_bytes(&q41)), q41);
        let mut q40 = vec![BlockQ4_0::default(); 8];
        quantize_q4_0(&x, &mut q40);
        assert_eq!(parse_q4_0(&q4_0_bytes(&q40)), q40);
        let mut q8 = vec![BlockQ8_0::default(); 8];
        quantize_q8_0(&x, &mut q8);
        assert_eq!(parse_q8_0(&q8_0_bytes(&q8)), q8);
    }

    #[test]
    fn rounding_to_i8_matches_round_ties_even() {
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            -0.5,
            -1.5,
            126.5,
            -126.5,
            127.0,
            -127.0,
            127.49,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            4_194_303.5,
            4_194_304.0,
            1e30,
            -1e30,
            f32::MIN_POSITIVE,
        ];
        values.extend(random(10_000, 9).iter().map(|v| v * 300.0));
        values.extend((-600..=600).map(|k| k as f32 * 0.25));
        for v in values {
            assert_eq!(round_to_i8(v), v.round_ties_even() as i8, "{v}");
        }
    }

    #[test]
    fn q8_1_sum_matches_its_values() {
        let x = random(64, 11);
        let mut q = vec![BlockQ8_1::default(); 2];
        quantize_activations_q8_1(&x, &mut q);
        for b in &q {
            let sum: i32 = b.qs.iter().map(|&v| v as i32).sum();
            assert!((b.s.to_f32() - sum as f32 * b.d.to_f32()).abs() < 1e-2);
        }
    }

    #[test]
    fn q8_k_keeps_the_sign_of_the_largest_value_and_rounds_half_to_even() {
        // max = 127 (positive), so iscale = -1 and every value is negated: ties go to even.
        let mut x = vec![0f32; QK_K];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = 3.5;
        x[3] = -0.5;
        x[4] = -127.0;
        x[17] = 1.5;
        x[255] = -6.25;
        let mut out = vec![
            BlockQ8K {
                d: 9.0,
                qs: [5; QK_K],
                bsums: [7; QK_K / 16],
            };
            1
        ];
        quantize_activations_q8_k(&x, &mut out);
        let b = &out[0];
        assert_eq!(b.d, -1.0);
        assert_eq!(&b.qs[..5], &[-127, -2, -4, 0, 127]);
        assert_eq!((b.qs[17], b.qs[255]), (-2, 6));
        assert!(b.qs[5..17].iter().all(|&q| q == 0));
        assert_eq!(b.bsums[0], -127 - 2 - 4 + 127);
        assert_eq!(b.bsums[1], -2);
        assert_eq!(b.bsums[15], 6);
        assert!(b.bsums[2..15].iter().all(|&s| s == 0));
    }

    #[test]
    fn q8_k_with_a_negative_maximum_scales_up_and_zero_blocks_are_cleared() {
        // max = -2: iscale = 63.5, d = 1 / 63.5; 1.0 -> 63.5 -> 64 (even), 0.5 -> 31.75 -> 32.
        let mut x = vec![0f32; 2 * QK_K];
        x[0] = -2.0;
        x[1] = 1.0;
        x[2] = 0.5;
        x[3] = 0.007_812_5;
        let mut out = vec![
            BlockQ8K {
                d: 3.0,
                qs: [1; QK_K],
                bsums: [16; QK_K / 16],
            };
            2
        ];
        quantize_activations_q8_k(&x, &mut out);
        assert_eq!(out[0].d, 1.0 / 63.5);
        assert_eq!(&out[0].qs[..4], &[-127, 64, 32, 0]);
        assert_eq!(out[0].bsums[0], -127 + 64 + 32);
        assert_eq!(out[1], BlockQ8K::default(), "an all-zero block");
    }

    /// ggml's `quantize_row_q8_K_ref` as written there: one pass for the signed maximum, rounding
    /// half to even, a clamp to 127.
    fn q8_k_reference(xs: &[f32]) -> BlockQ8K {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xs {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            return BlockQ8K::default();
        }
        let iscale = -127.0 / max;
        let mut b = BlockQ8K::default();
        for (q, &v) in b.qs.iter_mut().zip(xs) {
            *q = (iscale * v).round_ties_even().clamp(-128.0, 127.0) as i8;
        }
        for (sum, qs) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *sum = qs.iter().map(|&q| i16::from(q)).sum();
        }
        b.d = 1.0 / iscale;
        b
    }

    #[test]
    fn q8_k_equals_the_reference_on_random_blocks_ties_and_specials() {
        let mut x = random(QK_K * 8, 23);
        // Equal magnitudes of both signs (the first sets the sign), halves that round to even,
        // a NaN, an infinity.
        x[10] = 3.0;
        x[200] = -3.0;
        x[QK_K + 5] = -1.0;
        x[QK_K + 6] = 1.0;
        for (i, v) in x[2 * QK_K..3 * QK_K].iter_mut().enumerate() {
            *v = (i as f32 - 128.0) / 2.0;
        }
        x[3 * QK_K + 9] = f32::NAN;
        x[4 * QK_K + 1] = f32::INFINITY;
        let mut got = vec![BlockQ8K::default(); 8];
        quantize_activations_q8_k(&x, &mut got);
        for (i, (b, xs)) in got.iter().zip(x.chunks_exact(QK_K)).enumerate() {
            let want = q8_k_reference(xs);
            assert_eq!(
                (b.d.to_bits(), b.qs, b.bsums),
                (want.d.to_bits(), want.qs, want.bsums),
                "block {i}"
            );
        }
    }

    #[test]
    fn q8_k_dequantizes_within_half_a_step() {
        let x = random(QK_K * 3, 21);
        let mut q = vec![BlockQ8K::default(); 3];
        quantize_activations_q8_k(&x, &mut q);
        for (b, xs) in q.iter().zip(x.chunks_exact(QK_K)) {
            for (&v, &q) in xs.iter().zip(&b.qs) {
                assert!(
                    (b.d * q as f32 - v).abs() <= b.d.abs() * 0.5001,
                    "{v} vs {q}"
                );
            }
            for (sum, qs) in b.bsums.iter().zip(b.qs.chunks_exact(16)) {
                assert_eq!(*sum as i32, qs.iter().map(|&q| q as i32).sum::<i32>());
            }
        }
    }

    #[test]
    fn new_block_types_parse_and_serialize_back_to_their_bytes() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut bytes = |len: usize| (0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>();
        let b = bytes(3 * Q5_0_BYTES);
        assert_eq!(q5_0_bytes(&parse_q5_0(&b)), b);
        let b = bytes(3 * Q5_1_BYTES);
        assert_eq!(q5_1_bytes(&parse_q5_1(&b)), b);
        let b = bytes(3 * Q4_K_BYTES);
        assert_eq!(q4_k_bytes(&parse_q4_k(&b)), b);
        let b = bytes(3 * Q5_K_BYTES);
        assert_eq!(q5_k_bytes(&parse_q5_k(&b)), b);
        let b = bytes(3 * Q6_K_BYTES);
        assert_eq!(q6_k_bytes(&parse_q6_k(&b)), b);
        let block = &parse_q6_k(&b)[1];
        assert_eq!(block.d, f16_at(&b, Q6_K_BYTES + 208));
        assert_eq!(block.scales[3], b[Q6_K_BYTES + 192 + 3] as i8);
    }

    #[test]
    fn q6_k_places_every_quarter_of_both_halves() {
        let mut block = vec![0u8; Q6_K_BYTES];
        block[208..210].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        // Element 67 (first half, third quarter): high nibble of ql[3], bits 4-5 of qh[3], scale 4.
        block[3] = 0x90;
        block[128 + 3] = 0b10 << 4;
        block[192 + 4] = 2;
        // Element 229 (second half, fourth quarter): high nibble of ql[64 + 32 + 5], bits 6-7 of
        // qh[32 + 5], scale 14 (negative).
        block[64 + 32 + 5] = 0x70;
        block[128 + 32 + 5] = 0b11 << 6;
        block[192 + 14] = (-3i8) as u8;
        // Element 165 (second half, second quarter): low nibble of ql[64 + 32 + 5], bits 2-3 of
        // qh[32 + 5], scale 10.
        block[64 + 32 + 5] |= 0x0A;
        block[128 + 32 + 5] |= 0b01 << 2;
        block[192 + 10] = 1;
        let mut out = vec![0f32; QK_K];
        dequantize_q6_k(&parse_q6_k(&block), &mut out);
        assert_eq!(out[67], 0.5 * 2.0 * ((9 | (2 << 4)) - 32) as f32);
        assert_eq!(out[229], 0.5 * -3.0 * ((7 | (3 << 4)) - 32) as f32);
        assert_eq!(out[165], 0.5 * ((10 | (1 << 4)) - 32) as f32);
        assert_eq!(out[66], 0.5 * 2.0 * -32.0);
    }

    #[test]
    fn q6_k_dequantizes_a_known_block() {
        // All quants 32 (i.e. zero after the -32 offset) except the first, scale 1, d = 0.5.
        let mut block = vec![0u8; 210];
        block[0] = 0x1; // ql[0] low nibble 1 -> q = 1 - 32 = -31 with qh 0
        for s in &mut block[192..208] {
            *s = 1;
        }
        block[208..210].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        let mut out = vec![0f32; 256];
        dequantize_q6_k(&parse_q6_k(&block), &mut out);
        assert_eq!(out[0], 0.5 * -31.0);
        assert_eq!(out[1], 0.5 * -32.0);
    }

    #[test]
    fn non_finite_block_scales_are_found() {
        let mut q4k = vec![0u8; 3 * Q4_K_BYTES];
        assert_eq!(check_block_scales(GgmlType::Q4K, &q4k), Ok(()));
        q4k[2 * Q4_K_BYTES + 2..2 * Q4_K_BYTES + 4].copy_from_slice(&f16::NAN.to_le_bytes());
        let err = check_block_scales(GgmlType::Q4K, &q4k).unwrap_err();
        assert_eq!((err.block, err.field), (2, "dmin"));

        let mut q6k = vec![0u8; 2 * Q6_K_BYTES];
        q6k[2 * Q6_K_BYTES - 2..].copy_from_slice(&f16::NEG_INFINITY.to_le_bytes());
        let err = check_block_scales(GgmlType::Q6K, &q6k).unwrap_err();
        assert_eq!((err.block, err.field), (1, "d"));
        assert_eq!(err.to_string(), "block 1 has a non-finite d (-inf)");

        let mut q51 = vec![0u8; Q5_1_BYTES];
        q51[2..4].copy_from_slice(&f16::INFINITY.to_le_bytes());
        assert_eq!(
            check_block_scales(GgmlType::Q5_1, &q51).unwrap_err().field,
            "m"
        );
        // Plain floats are values, not scales.
        assert_eq!(
            check_block_scales(GgmlType::F16, &f16::NAN.to_le_bytes()),
            Ok(())
        );
    }

    #[test]
    fn q5_0_dequantizes_a_known_block() {
        let mut block = vec![0u8; Q5_0_BYTES];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        // High bit of element 1 (bit 1) and of element 16 (bit 16).
        block[2..6].copy_from_slice(&((1u32 << 1) | (1u32 << 16)).to_le_bytes());
        block[6] = 0x3F; // element 0: 15, element 16: 3 (+16 from the high bit)
        block[7] = 0x02; // element 1: 2 + 16, element 17: 0
        let mut out = vec![0f32; QK];
        dequantize_q5_0(&parse_q5_0(&block), &mut out);
        assert_eq!(out[0], (15 - 16) as f32 * 0.5);
        assert_eq!(out[16], (3 + 16 - 16) as f32 * 0.5);
        assert_eq!(out[1], (2 + 16 - 16) as f32 * 0.5);
        assert_eq!(out[17], -16.0 * 0.5);
    }

    #[test]
    fn q5_1_dequantizes_a_known_block() {
        let mut block = vec![0u8; Q5_1_BYTES];
        block[0..2].copy_from_slice(&f16::from_f32(2.0).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        block[4..8].copy_from_slice(&(1u32 << 31).to_le_bytes()); // element 31's high bit
        block[8 + 15] = 0xF1; // element 15: 1, element 31: 15 + 16
        let mut out = vec![0f32; QK];
        dequantize_q5_1(&parse_q5_1(&block), &mut out);
        assert_eq!(out[15], 2.0 - 1.0);
        assert_eq!(out[31], 31.0 * 2.0 - 1.0);
        assert_eq!(out[0], -1.0);
    }

    #[test]
    fn q5_k_dequantizes_a_known_block() {
        let mut block = vec![0u8; Q5_K_BYTES];
        block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
        block[4] = 3; // scale of sub-block 0
        block[8] = 8; // min of sub-block 0
        block[5] = 1; // scale of sub-block 1
        // Sub-blocks 4..8 take their scales from the packed high bits: sub-block 4's scale is the low
        // nibble of byte 8 plus (byte 0 >> 6) << 4.
        block[4] |= 0b0100_0000; // sub-block 4's scale gains 16
        block[12] = 0x05; // low nibble of sub-block 4's scale
        block[16] = 0b0000_0011; // qh[0]: fifth bit of element 0 (sub-block 0) and 32 (sub-block 1)
        block[16 + 1] = 0b0001_0000; // qh[1]: fifth bit of element 129 (sub-block 4)
        block[48] = 0x21; // element 0: 1, element 32: 2
        block[48 + 64 + 1] = 0x07; // element 129 (sub-block 4): 7
        let mut out = vec![0f32; QK_K];
        dequantize_q5_k(&parse_q5_k(&block), &mut out);
        assert_eq!(out[0], 3.0 * (1 + 16) as f32 - 0.25 * 8.0);
        assert_eq!(out[32], (2 + 16) as f32);
        assert_eq!(out[1], -2.0);
        let sc4 = (5 | (1 << 4)) as f32;
        assert_eq!(out[129], sc4 * (7 + 16) as f32);
    }

    #[test]
    fn q4_k_dequantizes_a_known_block() {
        let mut block = vec![0u8; 144];
        block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        block[4] = 2; // scale of sub-block 0
        block[8] = 4; // min of sub-block 0
        block[16] = 0x73; // first byte: low nibble 3 (sub-block 0), high nibble 7 (sub-block 1)
        let mut out = vec![0f32; 256];
        dequantize_q4_k(&parse_q4_k(&block), &mut out);
        assert_eq!(out[0], 2.0 * 3.0 - 0.5 * 4.0);
        assert_eq!(out[1], -2.0);
        assert_eq!(out[32], 0.0);
    }
}
