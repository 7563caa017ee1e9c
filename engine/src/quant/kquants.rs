//! ggml's reference quantizers for the 5-bit and K-quant formats: what `llama-quantize` writes
//! without an importance matrix. Ports of `quantize_row_{q5_0,q5_1,q4_K,q5_K,q6_K}_ref` and their
//! helpers (`nearest_int`, `make_qx_quants`, `make_qkx2_quants`) from ggml's `ggml-quants.c`, with
//! every float operation in the C code's order so that the bytes come out the same; the serializers
//! that lay the blocks out as GGUF stores them; and [`quantize_bytes`] for any type the engine reads.

use half::{bf16, f16};

use super::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
    QK, QK_K, q4_0_bytes, q4_1_bytes, q4_k_bytes, q5_0_bytes, q5_1_bytes, q5_k_bytes, q6_k_bytes,
    q8_0_bytes, quantize_q4_0, quantize_q4_1, quantize_q8_0,
};
use crate::error::{Error, Result};

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml `nearest_int`: rounds half to even by adding 1.5 * 2^23 and reading the mantissa, exact for
/// `|v| < 2^22`. Larger magnitudes and NaN give what the C code gives (garbage, never a panic).
#[inline]
fn nearest_int(v: f32) -> i32 {
    let biased = (v + 12_582_912.0).to_bits() as i32;
    (biased & 0x007f_ffff) - 0x0040_0000
}

/// ggml `quantize_row_q5_0_ref`: `x = (q - 16) * d` with `d = max / -16` for the value of largest
/// magnitude. Blocks of `x` beyond `out` (or of `out` beyond `x`) are left alone.
pub fn quantize_q5_0(x: &[f32], out: &mut [BlockQ5_0]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xs {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let q0 = ((xs[j] * id + 16.5) as i8).min(31) as u8;
            let q1 = ((xs[j + QK / 2] * id + 16.5) as i8).min(31) as u8;
            b.qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
            qh |= u32::from((q0 >> 4) & 1) << j;
            qh |= u32::from((q1 >> 4) & 1) << (j + QK / 2);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// ggml `quantize_row_q5_1_ref`: `x = q * d + m` with `m` the block's minimum and `d` its range
/// over 31.
pub fn quantize_q5_1(x: &[f32], out: &mut [BlockQ5_1]) {
    for (xs, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in xs {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        b.m = f16::from_f32(min);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let q0 = ((xs[j] - min) * id + 0.5) as u8;
            let q1 = ((xs[j + QK / 2] - min) * id + 0.5) as u8;
            b.qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
            qh |= u32::from((q0 >> 4) & 1) << j;
            qh |= u32::from((q1 >> 4) & 1) << (j + QK / 2);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// ggml `make_qkx2_quants` (with `use_mad` false, as the Q4_K and Q5_K quantizers call it): fits
/// `x ≈ scale * q - min` with `q` in `0..=nmax` under `weights`, trying `nstep + 1` scales from
/// `(nmax + rmin) / range` in steps of `rdelta / range`. Writes the levels, returns `(scale, min)`.
fn make_qkx2_quants(
    x: &[f32; 32],
    weights: &[f32; 32],
    nmax: i32,
    levels: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels[..32].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..32 {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        levels[i] = l as u8;
        let diff = scale * f32::from(levels[i]) + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut trial = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..32 {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            trial[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..32 {
                let diff = this_scale * f32::from(trial[i]) + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                levels[..32].copy_from_slice(&trial);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml `make_qx_quants` with `rmse_type` 1 and no importance weights, as the Q6_K quantizer calls
/// it: fits `x ≈ scale * (q - nmax)` with `q` in `0..2 nmax`, weighting each value by its square,
/// over 19 candidate scales. Writes the levels, returns the scale.
fn make_qx_quants(x: &[f32; 16], nmax: i32, levels: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels[..16].fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let (w, l) = (v * v, level(iscale, v) as f32);
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -nmax as f32 / max;
    for (q, &v) in levels.iter_mut().zip(x) {
        *q = (level(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (q, &v) in levels.iter_mut().zip(x) {
                *q = (level(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The 6-bit scales and mins of a Q4_K/Q5_K super-block as ggml packs them: sub-blocks 0..4 in the
/// low 6 bits of bytes 0..4 (scales) and 4..8 (mins), sub-blocks 4..8 in the nibbles of bytes 8..12
/// with their top two bits in the top bits of bytes 0..8.
fn pack_scales_mins(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    packed[..4].copy_from_slice(&scales[..4]);
    packed[4..8].copy_from_slice(&mins[..4]);
    for j in 4..8 {
        let (ls, lm) = (scales[j], mins[j]);
        packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
        packed[j - 4] |= (ls >> 4) << 6;
        packed[j] |= (lm >> 4) << 6;
    }
    packed
}

/// The levels, super-block scales and packed sub-block scales of one Q4_K or Q5_K super-block: the
/// part `quantize_row_q4_K_ref` and `quantize_row_q5_K_ref` share, for `nmax` 15 or 31.
struct ScaleMinFit {
    levels: [u8; QK_K],
    d: f16,
    dmin: f16,
    scales: [u8; 12],
}

fn fit_scale_min_super_block(x: &[f32; QK_K], nmax: i32, rmin: f32, nstep: i32) -> ScaleMinFit {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, xs) in x.as_chunks::<32>().0.iter().enumerate() {
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights = xs.map(|v| av_x + v.abs());
        let levels_j = &mut levels[32 * j..32 * j + 32];
        (scales[j], mins[j]) = make_qkx2_quants(xs, &weights, nmax, levels_j, rmin, 0.1, nstep);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let six_bits = |v: f32| (nearest_int(v) as u8).min(63);
    let packed = pack_scales_mins(
        &scales.map(|s| six_bits(inv_scale * s)),
        &mins.map(|m| six_bits(inv_min * m)),
    );
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..QK_K / 32 {
        let (sc, m) = super::scale_min_k4(j, &packed);
        let dj = d.to_f32() * f32::from(sc);
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            levels[i] = nearest_int((x[i] + dm) / dj).clamp(0, nmax) as u8;
        }
    }
    ScaleMinFit {
        levels,
        d,
        dmin,
        scales: packed,
    }
}

/// ggml `quantize_row_q4_K_ref`: per 32 values a weighted scale-and-min fit, the eight scales and
/// mins then quantized to 6 bits against the super-block's `d` and `dmin`. Super-blocks of `x`
/// beyond `out` (or of `out` beyond `x`) are left alone.
pub fn quantize_q4_k(x: &[f32], out: &mut [BlockQ4K]) {
    for (xs, b) in x.as_chunks::<QK_K>().0.iter().zip(out.iter_mut()) {
        *b = q4_k_block(xs);
    }
}

fn q4_k_block(x: &[f32; QK_K]) -> BlockQ4K {
    let fit = fit_scale_min_super_block(x, 15, -1.0, 20);
    let mut qs = [0u8; QK_K / 2];
    for (q, levels) in qs.chunks_exact_mut(32).zip(fit.levels.chunks_exact(64)) {
        for l in 0..32 {
            q[l] = levels[l] | (levels[l + 32] << 4);
        }
    }
    BlockQ4K {
        d: fit.d,
        dmin: fit.dmin,
        scales: fit.scales,
        qs,
    }
}

/// ggml `quantize_row_q5_K_ref`: as [`quantize_q4_k`] with 5-bit levels, the fifth bits in `qh`.
pub fn quantize_q5_k(x: &[f32], out: &mut [BlockQ5K]) {
    for (xs, b) in x.as_chunks::<QK_K>().0.iter().zip(out.iter_mut()) {
        *b = q5_k_block(xs);
    }
}

fn q5_k_block(x: &[f32; QK_K]) -> BlockQ5K {
    let fit = fit_scale_min_super_block(x, 31, -0.5, 15);
    let (mut qs, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 8]);
    for (chunk, (q, levels)) in qs
        .chunks_exact_mut(32)
        .zip(fit.levels.chunks_exact(64))
        .enumerate()
    {
        let (bit_lo, bit_hi) = (1u8 << (2 * chunk), 1u8 << (2 * chunk + 1));
        for l in 0..32 {
            let (lo, hi) = (levels[l], levels[l + 32]);
            if lo > 15 {
                qh[l] |= bit_lo;
            }
            if hi > 15 {
                qh[l] |= bit_hi;
            }
            q[l] = (lo & 0xF) | ((hi & 0xF) << 4);
        }
    }
    BlockQ5K {
        d: fit.d,
        dmin: fit.dmin,
        scales: fit.scales,
        qh,
        qs,
    }
}

/// ggml `quantize_row_q6_K_ref`: sixteen sub-blocks of 16 fitted with `make_qx_quants`, their scales
/// quantized to int8 against the super-block's `d`, the values to 6 bits.
pub fn quantize_q6_k(x: &[f32], out: &mut [BlockQ6K]) {
    for (xs, b) in x.as_chunks::<QK_K>().0.iter().zip(out.iter_mut()) {
        *b = q6_k_block(xs);
    }
}

fn q6_k_block(x: &[f32; QK_K]) -> BlockQ6K {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for (ib, xs) in x.as_chunks::<16>().0.iter().enumerate() {
        scales[ib] = make_qx_quants(xs, 32, &mut levels[16 * ib..16 * ib + 16]);
        if scales[ib].abs() > max_abs_scale {
            max_abs_scale = scales[ib].abs();
            max_scale = scales[ib];
        }
    }
    let mut block = BlockQ6K {
        ql: [0; QK_K / 2],
        qh: [0; QK_K / 4],
        scales: [0; QK_K / 16],
        d: f16::ZERO,
    };
    if max_abs_scale < GROUP_MAX_EPS {
        return block;
    }
    let iscale = -128.0 / max_scale;
    block.d = f16::from_f32(1.0 / iscale);
    for (q, &s) in block.scales.iter_mut().zip(&scales) {
        *q = nearest_int(iscale * s).min(127) as i8;
    }
    for (j, &sc) in block.scales.iter().enumerate() {
        let d = block.d.to_f32() * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            levels[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as u8;
        }
    }
    for (levels, (ql, qh)) in levels.chunks_exact(128).zip(
        block
            .ql
            .chunks_exact_mut(64)
            .zip(block.qh.chunks_exact_mut(32)),
    ) {
        for l in 0..32 {
            let [q1, q2, q3, q4] = [l, l + 32, l + 64, l + 96].map(|i| levels[i]);
            ql[l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    block
}

/// `x` encoded as GGUF stores `kind`, with ggml's reference quantizers for the block types (what
/// `llama-quantize` writes without an importance matrix) and round-to-nearest-even for F16 and BF16.
///
/// # Errors
/// When `x.len()` is not a whole number of `kind`'s blocks.
pub fn quantize_bytes(kind: GgmlType, x: &[f32]) -> Result<Vec<u8>> {
    let block = kind.block_size();
    if !x.len().is_multiple_of(block) {
        return Err(Error::Quantize {
            kind: kind.name(),
            len: x.len(),
            problem: format!("not a whole number of blocks of {block}"),
        });
    }
    let blocks = x.len() / block;
    Ok(match kind {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::BF16 => x
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect(),
        GgmlType::Q4_0 => {
            let mut out = vec![BlockQ4_0::default(); blocks];
            quantize_q4_0(x, &mut out);
            q4_0_bytes(&out)
        }
        GgmlType::Q4_1 => {
            let mut out = vec![BlockQ4_1::default(); blocks];
            quantize_q4_1(x, &mut out);
            q4_1_bytes(&out)
        }
        GgmlType::Q8_0 => {
            let mut out = vec![BlockQ8_0::default(); blocks];
            quantize_q8_0(x, &mut out);
            q8_0_bytes(&out)
        }
        GgmlType::Q5_0 => {
            let mut out = vec![BlockQ5_0::default(); blocks];
            quantize_q5_0(x, &mut out);
            q5_0_bytes(&out)
        }
        GgmlType::Q5_1 => {
            let mut out = vec![BlockQ5_1::default(); blocks];
            quantize_q5_1(x, &mut out);
            q5_1_bytes(&out)
        }
        GgmlType::Q4K => q4_k_bytes(&super_blocks(x).map(q4_k_block).collect::<Vec<_>>()),
        GgmlType::Q5K => q5_k_bytes(&super_blocks(x).map(q5_k_block).collect::<Vec<_>>()),
        GgmlType::Q6K => q6_k_bytes(&super_blocks(x).map(q6_k_block).collect::<Vec<_>>()),
    })
}

fn super_blocks(x: &[f32]) -> impl Iterator<Item = &[f32; QK_K]> {
    x.as_chunks::<QK_K>().0.iter()
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;
    use crate::quant::dequantize_bytes;

    /// The five formats this module adds.
    const KINDS: [GgmlType; 5] = [
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ];

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// Weights as trained models hold them: mostly small, a few large.
    fn heavy_tailed(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let v: f32 = rng.random_range(-1.0f32..1.0);
                v * v * v * rng.random_range(0.01f32..0.2)
            })
            .collect()
    }

    fn dequantize(kind: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
        let mut out = vec![0f32; n];
        dequantize_bytes(kind, bytes, &mut out);
        out
    }

    fn round_trip(kind: GgmlType, x: &[f32]) -> Vec<f32> {
        let bytes = quantize_bytes(kind, x).expect("whole blocks");
        assert_eq!(
            bytes.len(),
            x.len() / kind.block_size() * kind.block_bytes(),
            "{kind}"
        );
        dequantize(kind, &bytes, x.len())
    }

    /// llama.cpp's `test-quantize-fns` measure: the root of the summed squared error over `n`.
    fn total_error(a: &[f32], b: &[f32]) -> f32 {
        let sum: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(x - y) * f64::from(x - y))
            .sum();
        (sum.sqrt() / a.len() as f64) as f32
    }

    fn rmse(a: &[f32], b: &[f32]) -> f32 {
        let sum: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        (sum / a.len() as f32).sqrt()
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            -0.5,
            -2.5,
            4_194_303.0,
            -4_194_303.0,
        ];
        values.extend(random(10_000, 1).iter().map(|v| v * 1000.0));
        values.extend((-400..=400).map(|k| k as f32 * 0.25));
        for v in values {
            assert_eq!(nearest_int(v), v.round_ties_even() as i32, "{v}");
        }
    }

    /// llama.cpp's `test-quantize-fns` data and bound (`MAX_QUANTIZATION_TOTAL_ERROR`) for these types.
    #[test]
    fn synthetic_data_stays_within_llama_cpp_error_bound() {
        let x: Vec<f32> = (0..32 * 128)
            .map(|i| 0.1 + 2.0 * (i as f32).cos())
            .collect();
        for kind in KINDS {
            let error = total_error(&x, &round_trip(kind, &x));
            assert!(error < 0.002, "{kind}: total error {error}");
        }
    }

    #[test]
    fn random_round_trips_stay_within_each_format_error() {
        // Root-mean-square error on uniform [-1, 1): a step of 2/31 (5-bit) or 2/63 (6-bit) gives
        // about step / sqrt(12); K-quants fit their scales and do better than their bits alone.
        let bounds = [
            (GgmlType::Q5_0, 0.022),
            (GgmlType::Q5_1, 0.020),
            (GgmlType::Q4K, 0.040),
            (GgmlType::Q5K, 0.020),
            (GgmlType::Q6K, 0.010),
        ];
        for seed in 0..4 {
            let x = random(QK_K * 16, seed);
            for (kind, bound) in bounds {
                let error = rmse(&x, &round_trip(kind, &x));
                assert!(error < bound, "{kind} seed {seed}: rmse {error}");
            }
        }
        // More bits, less error, on weights shaped like a model's.
        let x = heavy_tailed(QK_K * 16, 9);
        let error = |kind| rmse(&x, &round_trip(kind, &x));
        assert!(error(GgmlType::Q5K) < error(GgmlType::Q4K));
        assert!(error(GgmlType::Q6K) < error(GgmlType::Q5K));
        assert!(error(GgmlType::Q5_1) < error(GgmlType::Q4_1));
        assert!(error(GgmlType::Q5_0) < error(GgmlType::Q4_0));
    }

    #[test]
    fn q5_0_block_by_hand() {
        // x[j] = (j - 16) / 2: the largest magnitude is x[0] = -8, so d = 0.5 and q[j] = j.
        let x: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 0.5).collect();
        let bytes = quantize_bytes(GgmlType::Q5_0, &x).unwrap();
        let mut expected = vec![0x00, 0x38, 0x00, 0x00, 0xFF, 0xFF];
        expected.extend((0..16u8).map(|j| j | (j << 4)));
        assert_eq!(bytes, expected);
        assert_eq!(dequantize(GgmlType::Q5_0, &bytes, 32), x);
    }

    #[test]
    fn q5_1_block_by_hand() {
        // x[j] = 1 + j / 4: min 1, range 7.75 = 31 * 0.25, so q[j] = j.
        let x: Vec<f32> = (0..32).map(|j| 1.0 + j as f32 * 0.25).collect();
        let bytes = quantize_bytes(GgmlType::Q5_1, &x).unwrap();
        let mut expected = vec![0x00, 0x34, 0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF];
        expected.extend((0..16u8).map(|j| j | (j << 4)));
        assert_eq!(bytes, expected);
        assert_eq!(dequantize(GgmlType::Q5_1, &bytes, 32), x);
    }

    /// Values `i mod (nmax + 1)` fit scale 1 and min 0 exactly in every sub-block: the largest scale
    /// is 1, so every 6-bit scale is 63 against `d = 1/63`, and every min is 0.
    fn integer_ramp(nmax: usize) -> Vec<f32> {
        (0..QK_K).map(|i| (i % 32 % (nmax + 1)) as f32).collect()
    }

    /// What a block of 6-bit scales 63 against `d = 1/63` (in half precision) gives for levels `x`.
    fn scaled_by_63_d(levels: &[f32]) -> Vec<f32> {
        let step = f16::from_f32(1.0 / 63.0).to_f32() * 63.0;
        levels.iter().map(|&l| step * l).collect()
    }

    /// The 12 scale bytes when every sub-block has 6-bit scale 63 and min 0.
    const ALL_63_NO_MIN: [u8; 12] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x0F, 0x0F, 0x0F, 0x0F];

    #[test]
    fn q4_k_block_by_hand() {
        let x = integer_ramp(15);
        let bytes = quantize_bytes(GgmlType::Q4K, &x).unwrap();
        assert_eq!(bytes[0..2], f16::from_f32(1.0 / 63.0).to_le_bytes());
        assert_eq!(bytes[2..4], [0, 0], "dmin");
        assert_eq!(bytes[4..16], ALL_63_NO_MIN);
        // Each 32 bytes hold 64 values: value l low nibble, value l + 32 high nibble, both l mod 16.
        for (i, &b) in bytes[16..].iter().enumerate() {
            let l = (i % 32 % 16) as u8;
            assert_eq!(b, l | (l << 4), "qs[{i}]");
        }
        assert_eq!(dequantize(GgmlType::Q4K, &bytes, QK_K), scaled_by_63_d(&x));
    }

    #[test]
    fn q5_k_block_by_hand() {
        let x = integer_ramp(31);
        let bytes = quantize_bytes(GgmlType::Q5K, &x).unwrap();
        assert_eq!(bytes[0..2], f16::from_f32(1.0 / 63.0).to_le_bytes());
        assert_eq!(bytes[2..4], [0, 0], "dmin");
        assert_eq!(bytes[4..16], ALL_63_NO_MIN);
        // Value l of each 32 is l: its fifth bit is set for l >= 16, in every pair of bits of qh[l].
        for (l, &b) in bytes[16..48].iter().enumerate() {
            assert_eq!(b, if l >= 16 { 0xFF } else { 0 }, "qh[{l}]");
        }
        for (i, &b) in bytes[48..].iter().enumerate() {
            let l = (i % 16) as u8;
            assert_eq!(b, l | (l << 4), "qs[{i}]");
        }
        assert_eq!(dequantize(GgmlType::Q5K, &bytes, QK_K), scaled_by_63_d(&x));
    }

    /// Sub-block `s` holds `c * (4 * ((i + s) mod 16) - 32)`: each is fitted exactly by scale `c`
    /// with levels `4 * ((i + s) mod 16)`, so `d = -c / 128` and every int8 scale is -128.
    #[test]
    fn q6_k_block_by_hand() {
        let c = 1.0 / 64.0;
        let level = |i: usize| 4 * ((i % 16 + i / 16) % 16);
        let x: Vec<f32> = (0..QK_K).map(|i| c * (level(i) as f32 - 32.0)).collect();
        let bytes = quantize_bytes(GgmlType::Q6K, &x).unwrap();
        assert_eq!(bytes[208..210], f16::from_f32(-c / 128.0).to_le_bytes());
        assert_eq!(bytes[192..208], [0x80; 16], "scales");
        for half in 0..2 {
            for l in 0..32 {
                let q = |k: usize| level(128 * half + l + 32 * k) as u8;
                let (ql, qh) = (&bytes[64 * half..], &bytes[128 + 32 * half..]);
                assert_eq!(ql[l], (q(0) & 0xF) | ((q(2) & 0xF) << 4));
                assert_eq!(ql[l + 32], (q(1) & 0xF) | ((q(3) & 0xF) << 4));
                let high =
                    (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
                assert_eq!(qh[l], high);
            }
        }
        assert_eq!(dequantize(GgmlType::Q6K, &bytes, QK_K), x);
    }

    /// Hand-checked blocks are their own requantization, as they are for ggml: their values are
    /// exactly what the block holds, and the fit finds the block again.
    #[test]
    fn exact_blocks_requantize_to_themselves() {
        let blocks = [
            (
                GgmlType::Q5_0,
                (0..32).map(|j| (j as f32 - 16.0) * 0.5).collect(),
            ),
            (
                GgmlType::Q5_1,
                (0..32).map(|j| 1.0 + j as f32 * 0.25).collect(),
            ),
            (GgmlType::Q4K, integer_ramp(15)),
            (GgmlType::Q5K, integer_ramp(31)),
            (
                GgmlType::Q6K,
                (0..QK_K)
                    .map(|i| (4 * ((i % 16 + i / 16) % 16)) as f32 / 64.0 - 0.5)
                    .collect::<Vec<f32>>(),
            ),
        ];
        for (kind, x) in blocks {
            let once = quantize_bytes(kind, &x).unwrap();
            let twice = quantize_bytes(kind, &dequantize(kind, &once, x.len())).unwrap();
            assert_eq!(once, twice, "{kind}");
        }
    }

    /// A Q5_0 block's value of largest magnitude dequantizes to exactly `-16 d`, so ggml's quantizer
    /// finds the same `d` and levels again: every block is stable, whatever the data.
    #[test]
    fn q5_0_requantization_is_stable_on_any_data() {
        let x = random(QK * 512, 5);
        let once = quantize_bytes(GgmlType::Q5_0, &x).unwrap();
        let twice = quantize_bytes(GgmlType::Q5_0, &dequantize(GgmlType::Q5_0, &once, x.len()));
        assert_eq!(once, twice.unwrap());
    }

    /// Requantizing dequantized data (what `llama-quantize --allow-requantize` does) loses little
    /// more: the second generation stays close to the first.
    #[test]
    fn requantization_stays_close_to_the_first_generation() {
        let x = heavy_tailed(QK_K * 32, 11);
        for kind in KINDS {
            let first = round_trip(kind, &x);
            let second = round_trip(kind, &first);
            let (drift, error) = (rmse(&first, &second), rmse(&x, &first));
            assert!(drift <= error, "{kind}: drift {drift}, first error {error}");
        }
    }

    #[test]
    fn zeros_quantize_to_zeros() {
        let x = vec![0f32; QK_K * 2];
        for kind in KINDS {
            let bytes = quantize_bytes(kind, &x).unwrap();
            if kind == GgmlType::Q5_0 {
                // ggml's `d = max / -16` is -0 for a zero block, and zero is level 16: nibble 0
                // with the fifth bit set.
                let mut block = vec![0x00, 0x80, 0xFF, 0xFF, 0xFF, 0xFF];
                block.extend([0u8; 16]);
                assert_eq!(bytes, block.repeat(x.len() / QK), "{kind}");
            } else {
                assert!(bytes.iter().all(|&b| b == 0), "{kind}: {bytes:?}");
            }
            assert_eq!(dequantize(kind, &bytes, x.len()), x, "{kind}");
        }
    }

    #[test]
    fn constant_rows_stay_finite_and_close() {
        for value in [1.0f32, -1.0, 0.37, -0.25, 3e-2, 1000.0] {
            let x = vec![value; QK_K];
            for kind in KINDS {
                let back = round_trip(kind, &x);
                let worst = back.iter().map(|v| (v - value).abs()).fold(0f32, f32::max);
                assert!(
                    worst <= value.abs() * 1e-2,
                    "{kind} {value}: off by {worst}"
                );
            }
        }
        // Small enough that the half-precision scales lose bits (Q6_K's `d` is about max / 4096):
        // still finite, still the right sign.
        for value in [-1e-3f32, 1e-8, -1e-30] {
            let x = vec![value; QK_K];
            for kind in KINDS {
                let back = round_trip(kind, &x);
                assert!(back.iter().all(|v| v.is_finite()), "{kind} {value}");
                assert!(back.iter().all(|v| v * value >= 0.0), "{kind} {value}");
            }
        }
    }

    /// Scales beyond half precision become infinite, as ggml's do; nothing panics, and values
    /// within range next to them are unaffected in other blocks.
    #[test]
    fn values_beyond_half_precision_do_not_panic() {
        let mut x = random(QK_K * 2, 3);
        x[5] = 1e9;
        x[6] = -3e38;
        x[QK_K - 1] = f32::INFINITY;
        for kind in KINDS {
            let back = round_trip(kind, &x);
            let tail = &back[QK_K..];
            assert!(rmse(&x[QK_K..], tail) < 0.05, "{kind}");
        }
    }

    #[test]
    fn partial_blocks_are_an_error() {
        for kind in KINDS {
            let err = quantize_bytes(kind, &[0.5; 40]).unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("40 values") && message.contains(kind.name()),
                "{message}"
            );
        }
        assert_eq!(
            quantize_bytes(GgmlType::Q5_0, &[]).unwrap(),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn every_readable_type_round_trips_through_bytes() {
        let x = random(QK_K * 2, 8);
        for kind in [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
        ]
        .into_iter()
        .chain(KINDS)
        {
            let error = rmse(&x, &round_trip(kind, &x));
            assert!(error < 0.07, "{kind}: {error}");
        }
        assert_eq!(round_trip(GgmlType::F32, &x), x);
    }

    #[test]
    fn block_functions_match_the_byte_encoder() {
        let x = random(QK_K * 3, 4);
        let mut q50 = vec![BlockQ5_0::default(); x.len() / QK];
        quantize_q5_0(&x, &mut q50);
        assert_eq!(
            q5_0_bytes(&q50),
            quantize_bytes(GgmlType::Q5_0, &x).unwrap()
        );
        let mut q51 = vec![BlockQ5_1::default(); x.len() / QK];
        quantize_q5_1(&x, &mut q51);
        assert_eq!(
            q5_1_bytes(&q51),
            quantize_bytes(GgmlType::Q5_1, &x).unwrap()
        );
        let mut q4k = vec![q4_k_block(&[0.0; QK_K]); 3];
        quantize_q4_k(&x, &mut q4k);
        assert_eq!(q4_k_bytes(&q4k), quantize_bytes(GgmlType::Q4K, &x).unwrap());
        let mut q5k = vec![q5_k_block(&[0.0; QK_K]); 3];
        quantize_q5_k(&x, &mut q5k);
        assert_eq!(q5_k_bytes(&q5k), quantize_bytes(GgmlType::Q5K, &x).unwrap());
        let mut q6k = vec![q6_k_block(&[0.0; QK_K]); 3];
        quantize_q6_k(&x, &mut q6k);
        assert_eq!(q6_k_bytes(&q6k), quantize_bytes(GgmlType::Q6K, &x).unwrap());
    }
}
