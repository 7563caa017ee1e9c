//! The float steps of a K-quant dot, as llama.cpp's x86 CPU backend takes them, shared by every tier.
//!
//! A tier forms a super-block's exact integers ([`KInts`]); an integer sum has the same value in any
//! order, so only these float steps decide a result's bits. llama.cpp picks one of four kernels for a
//! K-quant product, and each adds the integers to floats its own way ([`KPath`]):
//! - `ggml_vec_dot_q*_K_q8_K` (AVX2): eight int32 lanes times `d_x d_y`, fused into eight sums;
//!   Q4_K's minimums through four more, Q5_K's through one scalar sum; `hsum_float_8` at the end.
//! - the tiled K-quant product (`ggml-cpu/tiled`, calls of eight tokens or more): per super-block,
//!   `(S1 d_x) - dmin_x S2` (the second step fused), then fused with `d_y` into the sum.
//! - the repacked Q4_K GEMV (`ggml_gemv_q4_K_8x8_q8_K`): per super-block, `S1` and `S2` fused with
//!   `d_x d_y` and `dmin_x d_y` into two sums, subtracted at the end.
//! - the repacked Q4_K GEMM (`ggml_gemm_q4_K_8x8_q8_K`, tokens in whole groups of four): the same
//!   per 64 values (two sub-blocks) instead of per super-block.

use half::f16;

use crate::quant::{BlockQ4K, BlockQ5K, GgmlType, QK_K};

/// Which of llama.cpp's kernels a K-quant dot follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KPath {
    /// `ggml_vec_dot_*_q8_K`: fewer than [`TILED_MIN_TOKENS`] tokens, a matrix llama.cpp does not
    /// repack.
    VecDot,
    /// The tiled product: [`TILED_MIN_TOKENS`] tokens or more, a matrix llama.cpp does not repack.
    Tiled,
    /// The repacked Q4_K GEMV: one token, or the tokens after a call's last whole group of four.
    RepackedGemv,
    /// The repacked Q4_K GEMM: the tokens of a call in whole groups of four.
    RepackedGemm,
}

/// [`KPath`]s as const generic parameters, so that a dot's loop is compiled for one path and its
/// sums stay in registers.
pub(crate) mod path {
    pub(crate) const VEC_DOT: u8 = 0;
    pub(crate) const TILED: u8 = 1;
    pub(crate) const REPACKED_GEMV: u8 = 2;
    pub(crate) const REPACKED_GEMM: u8 = 3;
}

/// Runs `$body` with `$p` a `const` naming `$path` ([`path`]).
macro_rules! on_path {
    ($path:expr, $p:ident => $body:expr) => {{
        use $crate::kernels::k_numerics::{KPath, path};
        match $path {
            KPath::VecDot => {
                const $p: u8 = path::VEC_DOT;
                $body
            }
            KPath::Tiled => {
                const $p: u8 = path::TILED;
                $body
            }
            KPath::RepackedGemv => {
                const $p: u8 = path::REPACKED_GEMV;
                $body
            }
            KPath::RepackedGemm => {
                const $p: u8 = path::REPACKED_GEMM;
                $body
            }
        }
    }};
}
pub(crate) use on_path;

/// Tokens from which llama.cpp takes its tiled product for the K-quants it does not repack.
pub const TILED_MIN_TOKENS: usize = 8;
/// Tokens per group of llama.cpp's repacked GEMM.
const GEMM_GROUP: usize = 4;

impl KPath {
    /// The kernel llama.cpp's x86 build runs for token `t` of a call of `tokens` tokens against a
    /// `ty` matrix of `rows` rows: Q4_K matrices whose rows come in eights are repacked at load.
    pub fn for_token(ty: GgmlType, rows: usize, tokens: usize, t: usize) -> Self {
        let repacked = ty == GgmlType::Q4K && repacks(ty, rows);
        match (repacked, tokens >= TILED_MIN_TOKENS) {
            (true, _) if t < tokens - tokens % GEMM_GROUP => Self::RepackedGemm,
            (true, _) => Self::RepackedGemv,
            (false, true) => Self::Tiled,
            (false, false) => Self::VecDot,
        }
    }
}

/// Whether llama.cpp's x86 build (AVX2 and up) repacks a `ty` matrix of `rows` rows at load into
/// rows interleaved by eight, whose kernels take their own float steps: Q4_0 and Q4_K matrices whose
/// rows come in eights.
pub fn repacks(ty: GgmlType, rows: usize) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4K) && rows.is_multiple_of(8)
}

/// A Q4_K or Q5_K super-block, as the tiers' dots read it.
pub(crate) trait K4Block {
    const KIND: KKind;
    /// The 12 bytes of 6-bit scales and minimums.
    fn packed_scales(&self) -> &[u8; 12];
    /// The low four bits of the values, two to a byte.
    fn qs(&self) -> &[u8; QK_K / 2];
    /// Q5_K's fifth bits.
    fn qh(&self) -> Option<&[u8; QK_K / 8]>;
    /// The super-block scales of the scales and of the minimums.
    fn d(&self) -> f16;
    fn dmin(&self) -> f16;
}

impl K4Block for BlockQ4K {
    const KIND: KKind = KKind::Q4K;
    fn packed_scales(&self) -> &[u8; 12] {
        &self.scales
    }
    fn qs(&self) -> &[u8; QK_K / 2] {
        &self.qs
    }
    fn qh(&self) -> Option<&[u8; QK_K / 8]> {
        None
    }
    fn d(&self) -> f16 {
        self.d
    }
    fn dmin(&self) -> f16 {
        self.dmin
    }
}

impl K4Block for BlockQ5K {
    const KIND: KKind = KKind::Q5K;
    fn packed_scales(&self) -> &[u8; 12] {
        &self.scales
    }
    fn qs(&self) -> &[u8; QK_K / 2] {
        &self.qs
    }
    fn qh(&self) -> Option<&[u8; QK_K / 8]> {
        Some(&self.qh)
    }
    fn d(&self) -> f16 {
        self.d
    }
    fn dmin(&self) -> f16 {
        self.dmin
    }
}

/// The K-quant layouts, as far as the float steps tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KKind {
    Q4K,
    Q5K,
    Q6K,
}

/// One super-block's exact integers against one token's Q8_K block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KInts {
    /// ggml's AVX2 lanes: lane `l` adds, over every 32 values, its sub-block scale times the products
    /// of values `4l..4l + 4` (Q6_K: less `32 (b[2l] sc[2l] + b[2l+1] sc[2l+1])` of the 16-value
    /// activation sums `b` and scales `sc`, its offset).
    pub(crate) lanes: [i32; 8],
    /// Per 64 values (two 32-value sub-blocks): their scales times their products (Q4_K and Q5_K).
    pub(crate) pairs: [i32; 4],
    /// Per 64 values: the two sub-blocks' minimums times their activation sums (Q4_K and Q5_K).
    pub(crate) mins: [i32; 4],
}

/// The f32 scales of one super-block's dot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KScales {
    /// The weight block's `d` and `dmin` (0 for Q6_K).
    pub(crate) d: f32,
    pub(crate) dmin: f32,
    /// The activation block's `d`.
    pub(crate) dy: f32,
}

/// A K-quant dot's running float sums along path `P` ([`path`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KSum<const P: u8> {
    kind: KKind,
    lanes: [f32; 8],
    min_lanes: [f32; 4],
    sum: f32,
    min_sum: f32,
}

impl<const P: u8> KSum<P> {
    #[inline(always)]
    pub(crate) fn new(kind: KKind) -> Self {
        debug_assert!(
            kind == KKind::Q4K || P == path::VEC_DOT || P == path::TILED,
            "llama.cpp repacks only Q4_K"
        );
        Self {
            kind,
            lanes: [0.0; 8],
            min_lanes: [0.0; 4],
            sum: 0.0,
            min_sum: 0.0,
        }
    }

    /// Adds one super-block.
    #[inline(always)]
    pub(crate) fn add(&mut self, ints: &KInts, s: KScales) {
        let total = |v: &[i32]| v.iter().sum::<i32>() as f32;
        match P {
            path::VEC_DOT => {
                let d = s.dy * s.d;
                for (acc, &lane) in self.lanes.iter_mut().zip(&ints.lanes) {
                    *acc = d.mul_add(lane as f32, *acc);
                }
                let dmin = -s.dy * s.dmin;
                match self.kind {
                    KKind::Q4K => {
                        for (acc, &m) in self.min_lanes.iter_mut().zip(&ints.mins) {
                            *acc = dmin.mul_add(m as f32, *acc);
                        }
                    }
                    KKind::Q5K => {
                        let m = ints.mins.iter().sum::<i32>() as f32;
                        self.min_sum = dmin.mul_add(m, self.min_sum);
                    }
                    KKind::Q6K => {}
                }
            }
            path::TILED => {
                let mut result = total(&ints.lanes) * s.d;
                if self.kind != KKind::Q6K {
                    result = (-s.dmin).mul_add(total(&ints.mins), result);
                }
                self.sum = result.mul_add(s.dy, self.sum);
            }
            path::REPACKED_GEMV => {
                self.sum = total(&ints.lanes).mul_add(s.d * s.dy, self.sum);
                self.min_sum = total(&ints.mins).mul_add(s.dmin * s.dy, self.min_sum);
            }
            _ => {
                let (d, dmin) = (s.d * s.dy, s.dmin * s.dy);
                for (&pair, &m) in ints.pairs.iter().zip(&ints.mins) {
                    self.sum = (pair as f32).mul_add(d, self.sum);
                    self.min_sum = (m as f32).mul_add(dmin, self.min_sum);
                }
            }
        }
    }

    /// The dot.
    #[inline(always)]
    pub(crate) fn finish(self) -> f32 {
        match P {
            path::VEC_DOT => {
                let lanes = hsum_f32x8(self.lanes);
                match self.kind {
                    KKind::Q4K => lanes + hsum_f32x4(self.min_lanes),
                    KKind::Q5K => lanes + self.min_sum,
                    KKind::Q6K => lanes,
                }
            }
            path::TILED => self.sum,
            _ => self.sum - self.min_sum,
        }
    }
}

/// ggml's `hsum_float_8`: the halves added, then pairs of the four, then the two.
pub(crate) fn hsum_f32x8(v: [f32; 8]) -> f32 {
    hsum_f32x4([v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]])
}

/// ggml's `hsum_float_4`: `(v0 + v2) + (v1 + v3)`.
pub(crate) fn hsum_f32x4(v: [f32; 4]) -> f32 {
    (v[0] + v[2]) + (v[1] + v[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_picks_its_kernel_by_type_rows_and_tokens() {
        use KPath::*;
        assert_eq!(KPath::for_token(GgmlType::Q6K, 640, 1, 0), VecDot);
        assert_eq!(KPath::for_token(GgmlType::Q6K, 640, 7, 6), VecDot);
        assert_eq!(KPath::for_token(GgmlType::Q6K, 640, 8, 0), Tiled);
        assert_eq!(KPath::for_token(GgmlType::Q5K, 640, 12, 11), Tiled);
        assert_eq!(
            KPath::for_token(GgmlType::Q4K, 644, 12, 11),
            Tiled,
            "rows not in eights"
        );
        assert_eq!(KPath::for_token(GgmlType::Q4K, 644, 3, 0), VecDot);
        assert_eq!(KPath::for_token(GgmlType::Q4K, 640, 1, 0), RepackedGemv);
        let six: Vec<_> = (0..6)
            .map(|t| KPath::for_token(GgmlType::Q4K, 640, 6, t))
            .collect();
        assert_eq!(
            six,
            [
                RepackedGemm,
                RepackedGemm,
                RepackedGemm,
                RepackedGemm,
                RepackedGemv,
                RepackedGemv
            ]
        );
    }

    #[test]
    fn each_path_takes_its_own_float_steps() {
        let ints = KInts {
            lanes: [1, -2, 3, 4, 5, 6, -7, 8],
            pairs: [3, 4, 5, 6],
            mins: [1, 2, 3, 4],
        };
        let s = KScales {
            d: 0.5,
            dmin: 0.25,
            dy: 2.0,
        };
        let dot = |path: KPath, kind| {
            on_path!(path, P => {
                let mut sum = KSum::<P>::new(kind);
                sum.add(&ints, s);
                sum.add(&ints, s);
                sum.finish()
            })
        };
        // Exact in binary: every path gives the definition 2 (d dy S1 - dmin dy S2).
        for path in [KPath::VecDot, KPath::Tiled, KPath::RepackedGemv] {
            assert_eq!(dot(path, KKind::Q4K), 2.0 * (18.0 - 5.0), "{path:?}");
        }
        assert_eq!(dot(KPath::RepackedGemm, KKind::Q4K), 2.0 * (18.0 - 5.0));
        assert_eq!(dot(KPath::Tiled, KKind::Q6K), 2.0 * 18.0);
        assert_eq!(dot(KPath::VecDot, KKind::Q6K), 2.0 * 18.0);
    }

    #[test]
    fn the_paths_round_differently() {
        // Seeded integers with the totals the kernels would give, and scales that make products round.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |range: i32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % (2 * range as u64 + 1)) as i32 - range
        };
        let dot = |path: KPath, blocks: &[(KInts, KScales)]| {
            on_path!(path, P => {
                let mut sum = KSum::<P>::new(KKind::Q4K);
                for (ints, s) in blocks {
                    sum.add(ints, *s);
                }
                sum.finish()
            })
        };
        let mut differ = [0; 3];
        for _ in 0..200 {
            let blocks: Vec<(KInts, KScales)> = (0..4)
                .map(|_| {
                    let lanes = std::array::from_fn(|_| next(40_000));
                    let mut pairs: [i32; 4] = std::array::from_fn(|_| next(60_000));
                    pairs[3] = lanes.iter().sum::<i32>() - pairs[..3].iter().sum::<i32>();
                    let ints = KInts {
                        lanes,
                        pairs,
                        mins: std::array::from_fn(|_| next(9_000)),
                    };
                    let scale = |v: i32| (v as f32 + 40_001.5) / 97_531.0;
                    (
                        ints,
                        KScales {
                            d: scale(next(40_000)),
                            dmin: scale(next(40_000)),
                            dy: scale(next(40_000)),
                        },
                    )
                })
                .collect();
            let [vec_dot, tiled, gemv, gemm] = [
                KPath::VecDot,
                KPath::Tiled,
                KPath::RepackedGemv,
                KPath::RepackedGemm,
            ]
            .map(|p| dot(p, &blocks));
            differ[0] += usize::from(vec_dot != tiled);
            differ[1] += usize::from(gemv != gemm);
            differ[2] += usize::from(vec_dot != gemv);
        }
        assert!(
            differ.iter().all(|&d| d > 0),
            "paths that never differ: {differ:?}"
        );
    }
}
