//! ggml's reference quantizers for the 32-wide formats, and the activation quantizers whose
//! rounding the integer dot products depend on.

use half::f16;

use super::*;

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
pub(super) fn round_to_i8(v: f32) -> i8 {
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
