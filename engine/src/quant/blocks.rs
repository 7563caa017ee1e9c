//! ggml's `#[repr(C)]` block structs, with their sizes asserted, and the activation blocks that
//! quantized weights are multiplied with.

use half::f16;

use super::{QK, QK_K};

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
