//! The x86_64 helpers both SIMD tiers share: block loads and f16 scales, horizontal sums, the
//! exact Q8_0 block sums, prefetching, and the unpacking of K-quant scales. Each enables only the
//! features it needs (all within AVX2, FMA and F16C), so it inlines into either tier's kernels.

#![cfg(target_arch = "x86_64")]
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use half::f16;

use super::k_numerics::{K4Block, KScales, path};
use crate::quant::{BlockQ6K, BlockQ8K, QK};

// ---------------------------------------------------------------------------------------------
// Loads and reductions. Safe functions: they need the target features (callers have them), and
// every load reads from a reference of exactly the loaded size.

/// One f16 as f32, by F16C's `vcvtph2ps` of a register holding only that half.
///
/// Written as the intrinsics, the compiler sees that only the half's lane matters and puts it into
/// whatever register it likes with `vpinsrw`, which keeps that register's other lanes: the
/// conversion then waits for the register's last write. In a dot product's loop that register
/// was an accumulator, so every block's scales waited for the previous block's sums, and a decode
/// step ran at half the memory speed of the same loop in C. Here the half is moved into a
/// register with zeros above it (`vmovd`, which depends on nothing before it), and the conversion
/// is an instruction the compiler cannot rewrite.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_to_f32(h: f16) -> f32 {
    let half = _mm_cvtsi32_si128(i32::from(h.to_bits()));
    let converted: __m128;
    // SAFETY: `vcvtph2ps` reads and writes only the two named registers; the caller's target
    // features include F16C.
    unsafe {
        std::arch::asm!(
            "vcvtph2ps {converted}, {half}",
            half = in(xmm_reg) half,
            converted = lateout(xmm_reg) converted,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    _mm_cvtss_f32(converted)
}

/// The first four f16 of a block as f32 lanes: its scale (and for Q4_1/Q8_1 the second f16 field)
/// in lanes 0 (and 1); lanes 2 and 3 are quant bytes and must be ignored.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn head_f32<T>(block: &T) -> __m128 {
    const { assert!(size_of::<T>() >= 8) };
    let converted: __m128;
    // SAFETY: `block` is at least 8 readable bytes (checked above), which is what `vcvtph2ps`
    // reads, with no alignment requirement; the caller's target features include F16C. Written as
    // an instruction for the reason given at [`f16_to_f32`]: where only lane 0 is used, the
    // compiler would otherwise narrow the load into a `vpinsrw` that waits on an unrelated register.
    unsafe {
        std::arch::asm!(
            "vcvtph2ps {converted}, qword ptr [{block}]",
            block = in(reg) block as *const T,
            converted = lateout(xmm_reg) converted,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    converted
}

/// The 32 int8 values of a block.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn load_i8x32(q: &[i8; QK]) -> __m256i {
    // SAFETY: `q` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(q.as_ptr().cast()) }
}

/// ggml `bytes_from_nibbles_32`: 16 packed bytes to 32 bytes in 0..=15, low nibbles (elements
/// 0..16) in the low 128 bits, high nibbles (elements 16..32) in the high 128 bits.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn bytes_from_nibbles_32(qs: &[u8; QK / 2]) -> __m256i {
    // SAFETY: `qs` is 16 readable bytes; `loadu` has no alignment requirement.
    let tmp = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    // Both halves hold the 16 bytes; shift the high half's 64-bit words right by 4.
    let both = _mm256_broadcastsi128_si256(tmp);
    let shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn load_i16x16(v: &[i16; 16]) -> __m256i {
    // SAFETY: `v` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// ggml `hsum_float_8`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn hsum_float_8(x: __m256) -> f32 {
    let mut res = _mm256_extractf128_ps::<1>(x);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

/// Activations `first..first + 4` (`first` a multiple of four) as one little-endian word, to
/// broadcast to every lane of a kernel that holds a row per lane.
#[inline(always)]
pub(super) fn quad<const N: usize>(qs: &[i8; N], first: usize) -> i32 {
    let (quads, _) = qs.as_chunks::<4>();
    i32::from_le_bytes(quads[first / 4].map(|v| v as u8))
}

/// The length every row and the activations are cut to: the shortest (all equal in correct use).
#[inline(always)]
pub(super) fn common_len<T, U>(rows: &[&[T]], y: &[U]) -> usize {
    debug_assert!(
        rows.iter().all(|r| r.len() == y.len()),
        "row length mismatch"
    );
    rows.iter().fold(y.len(), |n, r| n.min(r.len()))
}

/// Every row cut to `n` items (a plain loop: it inlines, so the row lengths stay known).
#[inline(always)]
pub(super) fn cut<T, const R: usize>(mut rows: [&[T]; R], n: usize) -> [&[T]; R] {
    for r in &mut rows {
        *r = &r[..n];
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// Exact integers out of vectors.

/// The eight int32 lanes of `v`, in order.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn store_i32x8(v: __m256i) -> [i32; 8] {
    let mut out = [0i32; 8];
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
    out
}

/// The four int32 lanes of `v`, in order.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn store_i32x4(v: __m128i) -> [i32; 4] {
    let mut out = [0i32; 4];
    // SAFETY: `out` is 16 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), v) };
    out
}

// ---------------------------------------------------------------------------------------------
// Prefetching the rows ahead.

/// Asks for the cache line at `line`, where the program puts the request: an instruction the
/// compiler keeps in place among the loads. Written as `_mm_prefetch`, the compiler may gather a
/// loop's requests into one burst and reorder the loads around it (the interleaved Q4_K decode of
/// the 8B shape ran at two thirds of its speed so). A prefetch never faults, whatever the address.
#[inline(always)]
pub(super) fn prefetch_in_order(line: *const i8) {
    // SAFETY: `prefetcht0` only hints the caches: it reads nothing into a register, writes nothing,
    // and never faults, whatever the address.
    unsafe {
        std::arch::asm!(
            "prefetcht0 byte ptr [{line}]",
            line = in(reg) line,
            options(nostack, preserves_flags),
        );
    }
}

/// As [`prefetch_in_order`], into the second-level cache only (`prefetcht1`): for a dot that does
/// more work per byte than the others, whose requests into the first level would outnumber the
/// misses that level can hold in flight (the interleaved Q6_K decode streamed 14 GiB/s a thread so on
/// Zen 4, and 26 GiB/s asking for the second level).
#[inline(always)]
pub(super) fn prefetch_l2_in_order(line: *const i8) {
    // SAFETY: `prefetcht1` only hints the caches, as `prefetcht0` does.
    unsafe {
        std::arch::asm!(
            "prefetcht1 byte ptr [{line}]",
            line = in(reg) line,
            options(nostack, preserves_flags),
        );
    }
}

/// Rows past the current group that [`prefetch_rows_ahead`] asks for.
pub(super) const PREFETCH_ROWS: usize = 8;

/// While block `i` of `R` adjacent rows is read, asks for the matching stretch of the rows
/// [`PREFETCH_ROWS`] further on. Rows read one block of each in turn jump back and forth in memory,
/// which the hardware prefetchers do not follow: without this, four rows per call ran a decode step
/// (weights streaming from memory) at half the speed of one row per call. Addresses past the matrix
/// are only hints: a prefetch never faults.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_rows_ahead<T, const R: usize>(rows: &[&[T]; R], i: usize) {
    let row_bytes = size_of_val(rows[0]);
    let per_block = R * row_bytes / rows[0].len().max(1);
    let ahead =
        (rows[0].as_ptr() as *const i8).wrapping_add(PREFETCH_ROWS * row_bytes + i * per_block);
    prefetch_in_order(ahead);
    prefetch_in_order(ahead.wrapping_add(64));
}

/// While super-block `i` of `R` adjacent rows is read, asks for every cache line of the matching
/// stretch of the rows [`PREFETCH_ROWS`] further on: [`prefetch_rows_ahead`] for blocks of more than
/// a line.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_blocks_ahead<T, const R: usize>(rows: &[&[T]; R], i: usize) {
    const LINE: usize = 64;
    let stretch = R * size_of::<T>();
    let ahead = (rows[0].as_ptr() as *const i8)
        .wrapping_add(PREFETCH_ROWS * size_of_val(rows[0]) + i * stretch);
    for offset in (0..stretch).step_by(LINE) {
        prefetch_in_order(ahead.wrapping_add(offset));
    }
}

// ---------------------------------------------------------------------------------------------
// K-quant scales, minimums and offsets.

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K super-block (ggml
/// `get_scale_min_k4`), one per byte of each word, sub-block 0 in the lowest byte.
#[inline(always)]
pub(super) fn scales_mins_k4(packed: &[u8; 12]) -> (u64, u64) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let (words, _) = packed.as_chunks::<4>();
    let [a, b, c] = [0, 1, 2].map(|k| u32::from_le_bytes(words[k]));
    // Sub-blocks 0..4 keep the low 6 bits of bytes 0..4 (scales) and 4..8 (mins); sub-blocks 4..8
    // take nibbles of bytes 8..12 and, as their top two bits, the spare top bits of bytes 0..8.
    let scales_high = (c & LOW4) | (((a >> 6) & TOP2) << 4);
    let mins_high = ((c >> 4) & LOW4) | (((b >> 6) & TOP2) << 4);
    let join = |low: u32, high: u32| u64::from(low) | (u64::from(high) << 32);
    (join(a & LOW6, scales_high), join(b & LOW6, mins_high))
}

/// Lane `r`: the exact sum of the 8 lanes of `v[r]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn totals_of_four_x8(v: [__m256i; 4]) -> __m128i {
    let pair = |a: __m256i, b: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b))
    };
    let (ab, cd) = (pair(v[0], v[1]), pair(v[2], v[3]));
    let halves = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    _mm_add_epi32(
        _mm256_castsi256_si128(halves),
        _mm256_extracti128_si256::<1>(halves),
    )
}

/// The exact sum of eight int32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn total_i32x8(v: __m256i) -> i32 {
    let halves = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let pairs = _mm_add_epi32(halves, _mm_shuffle_epi32::<0b01_00_11_10>(halves));
    _mm_cvtsi128_si32(_mm_add_epi32(
        pairs,
        _mm_shuffle_epi32::<0b10_11_00_01>(pairs),
    ))
}

/// Eight bytes widened to eight i16 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn u8x8_to_i16(bytes: u64) -> __m128i {
    _mm_cvtepu8_epi16(_mm_cvtsi64_si128(bytes as i64))
}

/// The sums of the eight 32-value sub-blocks of an activation block, as i16 lanes (each at most
/// `32 * 128` in magnitude), from its 16-value sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn sub_block_sums(y: &BlockQ8K) -> __m128i {
    let sums = load_i16x16(&y.bsums);
    _mm_hadd_epi16(
        _mm256_castsi256_si128(sums),
        _mm256_extracti128_si256::<1>(sums),
    )
}

/// The minimums' int32 products of a Q4_K/Q5_K super-block, as ggml forms them: lane `k` is
/// `m[2k] * s[2k] + m[2k+1] * s[2k+1]` for sub-block mins `m` and activation sums `s`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn k4_min_products(mins: u64, sub_sums: __m128i) -> __m128i {
    _mm_madd_epi16(u8x8_to_i16(mins), sub_sums)
}

/// A Q4_K/Q5_K super-block's `d` and `dmin` (one `vcvtph2ps` of its head) with the activation's `dy`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn k4_block_scales<W: K4Block>(block: &W, dy: f32) -> KScales {
    let head = head_f32(block);
    KScales {
        d: _mm_cvtss_f32(head),
        dmin: _mm_cvtss_f32(_mm_movehdup_ps(head)),
        dy,
    }
}

/// The minimums' products ([`k4_min_products`]) as [`KInts::mins`] for path `P`: the four pairs, or
/// only their total where the path takes nothing else.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn k4_min_ints<const P: u8>(products: __m128i) -> [i32; 4] {
    if P == path::TILED || P == path::REPACKED_GEMV {
        let pairs = _mm_add_epi32(products, _mm_shuffle_epi32::<0b01_00_11_10>(products));
        let total = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
        [_mm_cvtsi128_si32(total), 0, 0, 0]
    } else {
        store_i32x4(products)
    }
}

/// The `-32` offset of a Q6_K super-block's values, as ggml's AVX2 code subtracts it from the int32
/// lanes: lane `l` is `32 * (s[2l] * sc[2l] + s[2l+1] * sc[2l+1])` for the 16-value sums `s` and
/// scales `sc`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q6_k_offset(x: &BlockQ6K, bsums: __m256i) -> __m256i {
    // SAFETY: `x.scales` is 16 readable bytes; `loadu` has no alignment requirement.
    let scales = unsafe { _mm_loadu_si128(x.scales.as_ptr().cast()) };
    _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(scales)))
}

/// Eight int8 scales widened to i16.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn scales_i16(scales: &[i8; 8]) -> __m128i {
    // SAFETY: `scales` is 8 readable bytes; `loadl_epi64` reads 8 bytes, unaligned.
    _mm_cvtepi8_epi16(unsafe { _mm_loadl_epi64(scales.as_ptr().cast()) })
}

// ---------------------------------------------------------------------------------------------
// Entry points.

/// Stamps a tier's tiled forms of the types it has no tile kernel for: its single-row and four-row
/// dots over every row and token (see `tiles::gemm_by_row_dots`, which the calling module imports
/// with `OutLayout`).
macro_rules! gemm_by_dots {
    ($($name:ident: $w:ty, $a:ty => $dot:ident, $dot_x4:ident;)*) => {$(
        /// Every weight row against every token through this tier's dots, as the scalar tiled form.
        ///
        /// # Safety
        /// The CPU must support this tier.
        pub(crate) unsafe fn $name(w: &[$w], x: &[$a], nb: usize, out: &mut [f32], layout: OutLayout) {
            // SAFETY: the caller's CPU supports this tier (this function's contract).
            unsafe { gemm_by_row_dots((w, x, nb), (out, layout), $dot, $dot_x4) }
        }
    )*};
}

pub(super) use gemm_by_dots;
