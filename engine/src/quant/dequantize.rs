//! Dequantization to f32 of every block type, and the unpacking of K-quant and 5-bit values that
//! the kernels share.

use half::{bf16, f16};

use super::*;

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

/// ggml `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K super-block.
pub(super) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
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
