//! Safe entry points to the dot-product kernels, dispatched to the tier chosen once per process.
//!
//! A [`KernelTable`] holds one function per kernel for one [`KernelTier`]; there is one static table
//! per tier, and [`table`] picks this process's on first use ([`cpu::tier`], falling back to the best
//! supported tier with one warning if [`cpu::ENV_ISA`] asks for one the CPU lacks). Hot loops should
//! fetch the table once (`let k = dispatch::table();`) and call its methods; the free functions here
//! do the same per call, at the cost of one atomic load.
//!
//! Every kernel takes the common length of its inputs (the `_x4` forms: of all rows and the
//! activations), like the scalar references in [`scalar`]. Activations are expected as the engine's
//! quantizers write them (int8 values in -127..=127).

#![allow(unsafe_code)]

use std::{fmt, sync::OnceLock};

use half::{bf16, f16};

use super::{
    attention::{self, CachedHead, GroupQueries, Scratch},
    cpu::{self, CpuFeatures, IsaError, KernelTier},
    k_numerics::KPath,
    scalar,
    tiles::OutLayout,
};
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use crate::{
    quant::{
        self, BlockQ4_0, BlockQ4_0x16, BlockQ4_1, BlockQ4K, BlockQ4Kx16, BlockQ5_0, BlockQ5_1,
        BlockQ5K, BlockQ6K, BlockQ6Kx16, BlockQ8_0, BlockQ8_0x16, BlockQ8_1, BlockQ8K,
        INTERLEAVED_ROWS, InterleavedBlock,
    },
    weights::WeightType,
};

/// A K-quant's four-row dot along a path.
type KDotX4<W> = unsafe fn([&[W]; 4], &[BlockQ8K], KPath) -> [f32; 4];
/// A tiled product of rows interleaved sixteen at a time against activations `A`.
type GemmX16<W, A = BlockQ8K> = unsafe fn(&[W], &[A], usize, &mut [f32], OutLayout);

/// One type's kernels of rows interleaved sixteen at a time: a group against one activation row
/// (decode, and the few-token products) and the tiled product.
#[derive(Clone, Copy)]
struct Interleaved<Dot, Gemm> {
    dot: Dot,
    gemm: Gemm,
}

/// Interleaved Q4_0 groups against one activation row along the repacked GEMV, and their tiles.
type Q4_0x16Kernels = Interleaved<
    unsafe fn(&[BlockQ4_0x16], &[BlockQ8_0], &mut [f32]),
    GemmX16<BlockQ4_0x16, BlockQ8_0>,
>;
/// Sixteen interleaved Q4_K rows against one activation row along a (repacked) path, and their
/// tiles.
type Q4Kx16Kernels = Interleaved<
    unsafe fn(&[BlockQ4Kx16], &[BlockQ8K], KPath) -> [f32; INTERLEAVED_ROWS],
    GemmX16<BlockQ4Kx16>,
>;
/// Sixteen interleaved Q6_K rows against one activation row along ggml's `vec_dot`, and their
/// tiles.
type Q6Kx16Kernels = Interleaved<
    unsafe fn(&[BlockQ6Kx16], &[BlockQ8K]) -> [f32; INTERLEAVED_ROWS],
    GemmX16<BlockQ6Kx16>,
>;
/// Sixteen interleaved Q8_0 rows against one activation row along ggml's `vec_dot`, and their
/// tiles.
type Q8_0x16Kernels = Interleaved<
    unsafe fn(&[BlockQ8_0x16], &[BlockQ8_0]) -> [f32; INTERLEAVED_ROWS],
    GemmX16<BlockQ8_0x16, BlockQ8_0>,
>;

/// The kernels of rows interleaved sixteen at a time, for the types a tier has them for: the loader
/// interleaves a matrix only then.
#[derive(Clone, Copy)]
struct InterleavedKernels {
    q4_0: Option<Q4_0x16Kernels>,
    q4_k: Option<Q4Kx16Kernels>,
    q6_k: Option<Q6Kx16Kernels>,
    q8_0: Option<Q8_0x16Kernels>,
}

/// No interleaved kernels: the loader holds every matrix as the file does.
const NOT_INTERLEAVED: InterleavedKernels = InterleavedKernels {
    q4_0: None,
    q4_k: None,
    q6_k: None,
    q8_0: None,
};

/// One tier's kernels.
///
/// Only [`KernelTable::for_tier`] and [`table`] hand out tables, and only for tiers the CPU supports:
/// that is what makes calling the SIMD functions through the safe methods sound.
pub struct KernelTable {
    tier: KernelTier,
    f32: unsafe fn(&[f32], &[f32]) -> f32,
    f16: unsafe fn(&[f16], &[f16]) -> f32,
    f16_x4: unsafe fn([&[f16]; 4], &[f16]) -> [f32; 4],
    bf16: unsafe fn(&[bf16], &[bf16]) -> f32,
    q8_0: unsafe fn(&[BlockQ8_0], &[BlockQ8_0]) -> f32,
    q8_0_x4: unsafe fn([&[BlockQ8_0]; 4], &[BlockQ8_0]) -> [f32; 4],
    q8_0_gemv: unsafe fn(&[BlockQ8_0], &[BlockQ8_0], &mut [f32]),
    q4_0: unsafe fn(&[BlockQ4_0], &[BlockQ8_0]) -> f32,
    q4_0_x4: unsafe fn([&[BlockQ4_0]; 4], &[BlockQ8_0]) -> [f32; 4],
    q4_1: unsafe fn(&[BlockQ4_1], &[BlockQ8_1]) -> f32,
    q4_1_x4: unsafe fn([&[BlockQ4_1]; 4], &[BlockQ8_1]) -> [f32; 4],
    q8_0_gemm: unsafe fn(&[BlockQ8_0], &[BlockQ8_0], usize, &mut [f32], OutLayout),
    q4_0_gemm: unsafe fn(&[BlockQ4_0], &[BlockQ8_0], usize, &mut [f32], OutLayout),
    q4_0_repacked: unsafe fn(&[BlockQ4_0], &[BlockQ8_0]) -> f32,
    q4_0_repacked_x4: unsafe fn([&[BlockQ4_0]; 4], &[BlockQ8_0]) -> [f32; 4],
    q4_0_gemm_repacked: unsafe fn(&[BlockQ4_0], &[BlockQ8_0], usize, &mut [f32], OutLayout),
    q4_1_gemm: unsafe fn(&[BlockQ4_1], &[BlockQ8_1], usize, &mut [f32], OutLayout),
    q5_0: unsafe fn(&[BlockQ5_0], &[BlockQ8_0]) -> f32,
    q5_0_x4: unsafe fn([&[BlockQ5_0]; 4], &[BlockQ8_0]) -> [f32; 4],
    q5_0_gemm: unsafe fn(&[BlockQ5_0], &[BlockQ8_0], usize, &mut [f32], OutLayout),
    q5_1: unsafe fn(&[BlockQ5_1], &[BlockQ8_1]) -> f32,
    q5_1_x4: unsafe fn([&[BlockQ5_1]; 4], &[BlockQ8_1]) -> [f32; 4],
    q5_1_gemm: unsafe fn(&[BlockQ5_1], &[BlockQ8_1], usize, &mut [f32], OutLayout),
    q4_k: unsafe fn(&[BlockQ4K], &[BlockQ8K], KPath) -> f32,
    q4_k_x4: KDotX4<BlockQ4K>,
    q4_k_gemm: unsafe fn(&[BlockQ4K], &[BlockQ8K], usize, &mut [f32], OutLayout),
    q4_k_gemm_repacked: unsafe fn(&[BlockQ4K], &[BlockQ8K], usize, &mut [f32], OutLayout),
    /// The kernels of rows interleaved sixteen at a time, for the types whose matrices this tier's
    /// loader holds so (the others read such rows, which only a test hands them, through their own
    /// dots).
    interleaved: InterleavedKernels,
    q5_k: unsafe fn(&[BlockQ5K], &[BlockQ8K], KPath) -> f32,
    q5_k_x4: KDotX4<BlockQ5K>,
    q5_k_gemm: unsafe fn(&[BlockQ5K], &[BlockQ8K], usize, &mut [f32], OutLayout),
    q6_k: unsafe fn(&[BlockQ6K], &[BlockQ8K], KPath) -> f32,
    q6_k_x4: KDotX4<BlockQ6K>,
    q6_k_gemm: unsafe fn(&[BlockQ6K], &[BlockQ8K], usize, &mut [f32], OutLayout),
    attend_f16: unsafe fn(&GroupQueries<'_>, &CachedHead<'_, f16>, &mut [f32], &mut Scratch),
    attend_f32: unsafe fn(&GroupQueries<'_>, &CachedHead<'_, f32>, &mut [f32], &mut Scratch),
}

static SCALAR: KernelTable = KernelTable {
    tier: KernelTier::Scalar,
    f32: scalar::vec_dot_f32,
    f16: scalar::vec_dot_f16,
    f16_x4: scalar::vec_dot_f16_x4,
    bf16: scalar::vec_dot_bf16,
    q8_0: scalar::vec_dot_q8_0_q8_0,
    q8_0_x4: scalar::vec_dot_q8_0_q8_0_x4,
    q8_0_gemv: scalar::gemv_q8_0_q8_0,
    q4_0: scalar::vec_dot_q4_0_q8_0,
    q4_0_x4: scalar::vec_dot_q4_0_q8_0_x4,
    q4_1: scalar::vec_dot_q4_1_q8_1,
    q4_1_x4: scalar::vec_dot_q4_1_q8_1_x4,
    q8_0_gemm: scalar::gemm_q8_0_q8_0,
    q4_0_gemm: scalar::gemm_q4_0_q8_0,
    q4_0_repacked: scalar::vec_dot_q4_0_q8_0_repacked,
    q4_0_repacked_x4: scalar::vec_dot_q4_0_q8_0_repacked_x4,
    q4_0_gemm_repacked: scalar::gemm_q4_0_q8_0_repacked,
    q4_1_gemm: scalar::gemm_q4_1_q8_1,
    q5_0: scalar::vec_dot_q5_0_q8_0,
    q5_0_x4: scalar::vec_dot_q5_0_q8_0_x4,
    q5_0_gemm: scalar::gemm_q5_0_q8_0,
    q5_1: scalar::vec_dot_q5_1_q8_1,
    q5_1_x4: scalar::vec_dot_q5_1_q8_1_x4,
    q5_1_gemm: scalar::gemm_q5_1_q8_1,
    q4_k: scalar::vec_dot_q4_k_q8_k,
    q4_k_x4: scalar::vec_dot_q4_k_q8_k_x4,
    q4_k_gemm: scalar::gemm_q4_k_q8_k,
    q4_k_gemm_repacked: scalar::gemm_q4_k_q8_k_repacked,
    interleaved: NOT_INTERLEAVED,
    q5_k: scalar::vec_dot_q5_k_q8_k,
    q5_k_x4: scalar::vec_dot_q5_k_q8_k_x4,
    q5_k_gemm: scalar::gemm_q5_k_q8_k,
    q6_k: scalar::vec_dot_q6_k_q8_k,
    q6_k_x4: scalar::vec_dot_q6_k_q8_k_x4,
    q6_k_gemm: scalar::gemm_q6_k_q8_k,
    attend_f16: attention::attend_f16_portable,
    attend_f32: attention::attend_f32_portable,
};

#[cfg(target_arch = "x86_64")]
static AVX2: KernelTable = KernelTable {
    tier: KernelTier::Avx2,
    f32: avx2::vec_dot_f32,
    f16: avx2::vec_dot_f16,
    f16_x4: avx2::vec_dot_f16_x4,
    bf16: scalar::vec_dot_bf16,
    q8_0: avx2::vec_dot_q8_0_q8_0,
    q8_0_x4: avx2::vec_dot_q8_0_q8_0_x4,
    q8_0_gemv: avx2::gemv_q8_0_q8_0,
    q4_0: avx2::vec_dot_q4_0_q8_0,
    q4_0_x4: avx2::vec_dot_q4_0_q8_0_x4,
    q4_1: avx2::vec_dot_q4_1_q8_1,
    q4_1_x4: avx2::vec_dot_q4_1_q8_1_x4,
    q8_0_gemm: avx2::gemm_q8_0_q8_0,
    q4_0_gemm: avx2::gemm_q4_0_q8_0,
    q4_0_repacked: avx2::vec_dot_q4_0_q8_0_repacked,
    q4_0_repacked_x4: avx2::vec_dot_q4_0_q8_0_repacked_x4,
    q4_0_gemm_repacked: avx2::gemm_q4_0_q8_0_repacked,
    q4_1_gemm: avx2::gemm_q4_1_q8_1,
    q5_0: avx2::vec_dot_q5_0_q8_0,
    q5_0_x4: avx2::vec_dot_q5_0_q8_0_x4,
    q5_0_gemm: avx2::gemm_q5_0_q8_0,
    q5_1: avx2::vec_dot_q5_1_q8_1,
    q5_1_x4: avx2::vec_dot_q5_1_q8_1_x4,
    q5_1_gemm: avx2::gemm_q5_1_q8_1,
    q4_k: avx2::vec_dot_q4_k_q8_k,
    q4_k_x4: avx2::vec_dot_q4_k_q8_k_x4,
    q4_k_gemm: avx2::gemm_q4_k_q8_k,
    q4_k_gemm_repacked: avx2::gemm_q4_k_q8_k_repacked,
    interleaved: InterleavedKernels {
        q4_k: Some(Interleaved {
            dot: avx2::vec_dot_q4_k_x16_q8_k,
            gemm: avx2::gemm_q4_k_x16_q8_k_repacked,
        }),
        q6_k: Some(Interleaved {
            dot: avx2::vec_dot_q6_k_x16_q8_k,
            gemm: avx2::gemm_q6_k_x16_q8_k,
        }),
        ..NOT_INTERLEAVED
    },
    q5_k: avx2::vec_dot_q5_k_q8_k,
    q5_k_x4: avx2::vec_dot_q5_k_q8_k_x4,
    q5_k_gemm: avx2::gemm_q5_k_q8_k,
    q6_k: avx2::vec_dot_q6_k_q8_k,
    q6_k_x4: avx2::vec_dot_q6_k_q8_k_x4,
    q6_k_gemm: avx2::gemm_q6_k_q8_k,
    attend_f16: attention::attend_f16_avx2,
    attend_f32: attention::attend_f32_avx2,
};

#[cfg(target_arch = "x86_64")]
static AVX512: KernelTable = KernelTable {
    tier: KernelTier::Avx512,
    f32: avx512::vec_dot_f32,
    f16: avx512::vec_dot_f16,
    f16_x4: avx512::vec_dot_f16_x4,
    bf16: scalar::vec_dot_bf16,
    q8_0: avx512::vec_dot_q8_0_q8_0,
    q8_0_x4: avx512::vec_dot_q8_0_q8_0_x4,
    q8_0_gemv: avx512::gemv_q8_0_q8_0,
    q4_0: avx512::vec_dot_q4_0_q8_0,
    q4_0_x4: avx512::vec_dot_q4_0_q8_0_x4,
    q4_1: avx512::vec_dot_q4_1_q8_1,
    q4_1_x4: avx512::vec_dot_q4_1_q8_1_x4,
    q8_0_gemm: avx512::gemm_q8_0_q8_0,
    q4_0_gemm: avx512::gemm_q4_0_q8_0,
    q4_0_repacked: avx512::vec_dot_q4_0_q8_0_repacked,
    q4_0_repacked_x4: avx512::vec_dot_q4_0_q8_0_repacked_x4,
    q4_0_gemm_repacked: avx512::gemm_q4_0_q8_0_repacked,
    q4_1_gemm: avx512::gemm_q4_1_q8_1,
    q5_0: avx512::vec_dot_q5_0_q8_0,
    q5_0_x4: avx512::vec_dot_q5_0_q8_0_x4,
    q5_0_gemm: avx512::gemm_q5_0_q8_0,
    q5_1: avx512::vec_dot_q5_1_q8_1,
    q5_1_x4: avx512::vec_dot_q5_1_q8_1_x4,
    q5_1_gemm: avx512::gemm_q5_1_q8_1,
    q4_k: avx512::vec_dot_q4_k_q8_k,
    q4_k_x4: avx512::vec_dot_q4_k_q8_k_x4,
    q4_k_gemm: avx512::gemm_q4_k_q8_k,
    q4_k_gemm_repacked: avx512::gemm_q4_k_q8_k_repacked,
    interleaved: InterleavedKernels {
        q4_0: Some(Interleaved {
            dot: avx512::gemv_q4_0_x16_q8_0,
            gemm: avx512::gemm_q4_0_x16_q8_0_repacked,
        }),
        q4_k: Some(Interleaved {
            dot: avx512::vec_dot_q4_k_x16_q8_k,
            gemm: avx512::gemm_q4_k_x16_q8_k_repacked,
        }),
        q6_k: Some(Interleaved {
            dot: avx512::vec_dot_q6_k_x16_q8_k,
            gemm: avx512::gemm_q6_k_x16_q8_k,
        }),
        q8_0: Some(Interleaved {
            dot: avx512::vec_dot_q8_0_x16_q8_0,
            gemm: avx512::gemm_q8_0_x16_q8_0,
        }),
    },
    q5_k: avx512::vec_dot_q5_k_q8_k,
    q5_k_x4: avx512::vec_dot_q5_k_q8_k_x4,
    q5_k_gemm: avx512::gemm_q5_k_q8_k,
    q6_k: avx512::vec_dot_q6_k_q8_k,
    q6_k_x4: avx512::vec_dot_q6_k_q8_k_x4,
    q6_k_gemm: avx512::gemm_q6_k_q8_k,
    attend_f16: attention::attend_f16_avx512,
    attend_f32: attention::attend_f32_avx512,
};

/// The kernels of this process's tier, chosen on first use.
pub fn table() -> &'static KernelTable {
    static TABLE: OnceLock<&'static KernelTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let tier = cpu::tier().unwrap_or_else(|err| {
            let best = CpuFeatures::get().best_tier();
            tracing::warn!(%err, tier = best.name(), "ignoring the forced kernel tier");
            best
        });
        KernelTable::for_tier(tier).unwrap_or(&SCALAR)
    })
}

impl KernelTable {
    /// The kernels of `tier`, if this CPU can run them.
    pub fn for_tier(tier: KernelTier) -> Result<&'static KernelTable, IsaError> {
        let missing = CpuFeatures::get().missing(tier);
        if !missing.is_empty() {
            return Err(IsaError::Unsupported { tier, missing });
        }
        match tier {
            KernelTier::Scalar => Ok(&SCALAR),
            #[cfg(target_arch = "x86_64")]
            KernelTier::Avx2 => Ok(&AVX2),
            #[cfg(target_arch = "x86_64")]
            KernelTier::Avx512 => Ok(&AVX512),
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only x86_64 supports SIMD tiers"),
        }
    }

    /// The tier these kernels belong to (record it with any measurement).
    pub fn tier(&self) -> KernelTier {
        self.tier
    }

    /// Grouped-query attention of `queries` over one cached key/value head in f16, into `out` (laid
    /// out as the queries): see [`attention`]. Every tier gives the same bits.
    pub fn attend_f16(
        &self,
        queries: &GroupQueries<'_>,
        kv: &CachedHead<'_, f16>,
        out: &mut [f32],
    ) {
        // SAFETY: tables exist only for tiers this CPU supports (see `for_tier`); the kernels index
        // their slices with bounds checks.
        attention::with_scratch(|scratch| unsafe { (self.attend_f16)(queries, kv, out, scratch) })
    }

    /// [`Self::attend_f16`] over an f32 cache.
    pub fn attend_f32(
        &self,
        queries: &GroupQueries<'_>,
        kv: &CachedHead<'_, f32>,
        out: &mut [f32],
    ) {
        // SAFETY: as in `attend_f16`.
        attention::with_scratch(|scratch| unsafe { (self.attend_f32)(queries, kv, out, scratch) })
    }

    /// `sum(a[i] * b[i])` in f32.
    #[inline]
    pub fn vec_dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: tables exist only for tiers the CPU supports (see the type's docs); the kernels
        // read within their slices for any lengths.
        unsafe { (self.f32)(a, b) }
    }

    /// f16 weights against f16 activations, accumulated in f32.
    #[inline]
    pub fn vec_dot_f16(&self, a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.f16)(a, b) }
    }

    /// Four f16 weight rows against one activation row; equal to four [`Self::vec_dot_f16`] calls.
    #[inline]
    pub fn vec_dot_f16_x4(&self, rows: [&[f16]; 4], y: &[f16]) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.f16_x4)(rows, y) }
    }

    /// bf16 weights against bf16 activations, accumulated in f32 (the scalar kernel on every tier).
    #[inline]
    pub fn vec_dot_bf16(&self, a: &[bf16], b: &[bf16]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.bf16)(a, b) }
    }

    /// Q8_0 weights against Q8_0 activations (ggml `ggml_vec_dot_q8_0_q8_0`).
    #[inline]
    pub fn vec_dot_q8_0_q8_0(&self, x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q8_0)(x, y) }
    }

    /// Four Q8_0 weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q8_0_q8_0_x4(&self, rows: [&[BlockQ8_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q8_0_x4)(rows, y) }
    }

    /// `out[r]` = the Q8_0 dot of row `r` of `w` (rows of `y.len()` blocks) with `y`, for every entry
    /// of `out`; equal to single-row calls.
    #[inline]
    pub fn gemv_q8_0_q8_0(&self, w: &[BlockQ8_0], y: &[BlockQ8_0], out: &mut [f32]) {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q8_0_gemv)(w, y, out) }
    }

    /// Q4_0 weights against Q8_0 activations (ggml `ggml_vec_dot_q4_0_q8_0`).
    #[inline]
    pub fn vec_dot_q4_0_q8_0(&self, x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_0)(x, y) }
    }

    /// Four Q4_0 weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q4_0_q8_0_x4(&self, rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_0_x4)(rows, y) }
    }

    /// Q4_0 weights against Q8_0 activations along ggml's repacked Q4_0 GEMV and GEMM (`q4_0_8x8`,
    /// taken for matrices whose rows come in eights): one `fma(S, d_x d_y)` per block.
    #[inline]
    pub fn vec_dot_q4_0_q8_0_repacked(&self, x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_0_repacked)(x, y) }
    }

    /// Four rows of [`Self::vec_dot_q4_0_q8_0_repacked`]; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q4_0_q8_0_repacked_x4(
        &self,
        rows: [&[BlockQ4_0]; 4],
        y: &[BlockQ8_0],
    ) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_0_repacked_x4)(rows, y) }
    }

    /// Q4_1 weights against Q8_1 activations (ggml `ggml_vec_dot_q4_1_q8_1`).
    #[inline]
    pub fn vec_dot_q4_1_q8_1(&self, x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_1)(x, y) }
    }

    /// Four Q4_1 weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q4_1_q8_1_x4(&self, rows: [&[BlockQ4_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_1_x4)(rows, y) }
    }

    /// [`Self::vec_dot_q8_0_q8_0`] of every weight row of `w` against every token of `x` (`nb` blocks
    /// each, `nb > 0`), into `out` as `layout` places them. On the SIMD tiers the rows and tokens go
    /// through register tiles; every result has the bits of the single-row call of the same tier.
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q8_0_q8_0(
        &self,
        w: &[BlockQ8_0],
        x: &[BlockQ8_0],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `vec_dot_f32`; results are stored through bounds-checked indexing.
        unsafe { (self.q8_0_gemm)(w, x, nb, out, layout) }
    }

    /// [`Self::vec_dot_q4_0_q8_0`] of every weight row against every token, as
    /// [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q4_0_q8_0(
        &self,
        w: &[BlockQ4_0],
        x: &[BlockQ8_0],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q4_0_gemm)(w, x, nb, out, layout) }
    }

    /// [`Self::vec_dot_q4_0_q8_0_repacked`] of every weight row against every token, as
    /// [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q4_0_q8_0_repacked(
        &self,
        w: &[BlockQ4_0],
        x: &[BlockQ8_0],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q4_0_gemm_repacked)(w, x, nb, out, layout) }
    }

    /// [`Self::vec_dot_q4_1_q8_1`] of every weight row against every token, as
    /// [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q4_1_q8_1(
        &self,
        w: &[BlockQ4_1],
        x: &[BlockQ8_1],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q4_1_gemm)(w, x, nb, out, layout) }
    }

    /// Q5_0 weights against Q8_0 activations (ggml `ggml_vec_dot_q5_0_q8_0`).
    #[inline]
    pub fn vec_dot_q5_0_q8_0(&self, x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q5_0)(x, y) }
    }

    /// Four Q5_0 weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q5_0_q8_0_x4(&self, rows: [&[BlockQ5_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q5_0_x4)(rows, y) }
    }

    /// [`Self::vec_dot_q5_0_q8_0`] of every weight row against every token, as
    /// [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q5_0_q8_0(
        &self,
        w: &[BlockQ5_0],
        x: &[BlockQ8_0],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q5_0_gemm)(w, x, nb, out, layout) }
    }

    /// Q5_1 weights against Q8_1 activations (ggml `ggml_vec_dot_q5_1_q8_1`).
    #[inline]
    pub fn vec_dot_q5_1_q8_1(&self, x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q5_1)(x, y) }
    }

    /// Four Q5_1 weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q5_1_q8_1_x4(&self, rows: [&[BlockQ5_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q5_1_x4)(rows, y) }
    }

    /// [`Self::vec_dot_q5_1_q8_1`] of every weight row against every token, as
    /// [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q5_1_q8_1(
        &self,
        w: &[BlockQ5_1],
        x: &[BlockQ8_1],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q5_1_gemm)(w, x, nb, out, layout) }
    }

    /// Q4_K weights against Q8_K activations along `path`: the kernel of llama.cpp's whose float
    /// steps the result takes ([`KPath`]).
    #[inline]
    pub fn vec_dot_q4_k_q8_k(&self, x: &[BlockQ4K], y: &[BlockQ8K], path: KPath) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_k)(x, y, path) }
    }

    /// Four Q4_K weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q4_k_q8_k_x4(
        &self,
        rows: [&[BlockQ4K]; 4],
        y: &[BlockQ8K],
        path: KPath,
    ) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q4_k_x4)(rows, y, path) }
    }

    /// [`Self::vec_dot_q4_k_q8_k`] of every weight row against every token (`nb` super-blocks
    /// each), as [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q4_k_q8_k(
        &self,
        w: &[BlockQ4K],
        x: &[BlockQ8K],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q4_k_gemm)(w, x, nb, out, layout) }
    }

    /// [`Self::vec_dot_q4_k_q8_k`] along [`KPath::RepackedGemm`] of every weight row against every
    /// token, as [`Self::gemm_q8_0_q8_0`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q4_k_q8_k_repacked(
        &self,
        w: &[BlockQ4K],
        x: &[BlockQ8K],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q4_k_gemm_repacked)(w, x, nb, out, layout) }
    }

    /// Whether this tier's loader holds a matrix of `kind` and `rows` rows interleaved sixteen at a
    /// time ([`BlockQ4_0x16`], [`BlockQ4Kx16`], [`BlockQ6Kx16`], [`BlockQ8_0x16`]): where the tier
    /// has that type's interleaved kernels and the rows come in sixteens.
    pub fn interleaves(&self, kind: WeightType, rows: usize) -> bool {
        let k = &self.interleaved;
        let has_kernels = match kind {
            WeightType::Q4_0 => k.q4_0.is_some(),
            WeightType::Q4K => k.q4_k.is_some(),
            WeightType::Q6K => k.q6_k.is_some(),
            WeightType::Q8_0 => k.q8_0.is_some(),
            _ => false,
        };
        has_kernels && rows.is_multiple_of(INTERLEAVED_ROWS)
    }

    /// Sixteen interleaved Q4_K rows (one group of `w.len()` super-blocks) against one activation
    /// row along `path` (one of the repacked paths); equal to sixteen single-row calls on the rows.
    pub fn vec_dot_q4_k_x16_q8_k(
        &self,
        w: &[BlockQ4Kx16],
        y: &[BlockQ8K],
        path: KPath,
    ) -> [f32; INTERLEAVED_ROWS] {
        if let Some(kernels) = self.interleaved.q4_k {
            // SAFETY: as in `vec_dot_f32`.
            return unsafe { (kernels.dot)(w, y, path) };
        }
        rows_of_group(w, |rows| self.vec_dot_q4_k_q8_k_x4(rows, y, path))
    }

    /// [`Self::gemm_q4_k_q8_k_repacked`] of interleaved rows (`w`: groups of `nb` super-blocks).
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    pub fn gemm_q4_k_x16_q8_k_repacked(
        &self,
        w: &[BlockQ4Kx16],
        x: &[BlockQ8K],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        if let Some(kernels) = self.interleaved.q4_k {
            // SAFETY: as in `gemm_q8_0_q8_0`.
            return unsafe { (kernels.gemm)(w, x, nb, out, layout) };
        }
        let rows = quant::deinterleave(w, nb);
        self.gemm_q4_k_q8_k_repacked(&rows, x, nb, out, layout);
    }

    /// Q5_K weights against Q8_K activations along `path`.
    #[inline]
    pub fn vec_dot_q5_k_q8_k(&self, x: &[BlockQ5K], y: &[BlockQ8K], path: KPath) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q5_k)(x, y, path) }
    }

    /// Four Q5_K weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q5_k_q8_k_x4(
        &self,
        rows: [&[BlockQ5K]; 4],
        y: &[BlockQ8K],
        path: KPath,
    ) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q5_k_x4)(rows, y, path) }
    }

    /// [`Self::vec_dot_q5_k_q8_k`] of every weight row against every token, as
    /// [`Self::gemm_q4_k_q8_k`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q5_k_q8_k(
        &self,
        w: &[BlockQ5K],
        x: &[BlockQ8K],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q5_k_gemm)(w, x, nb, out, layout) }
    }

    /// Q6_K weights against Q8_K activations along `path`.
    #[inline]
    pub fn vec_dot_q6_k_q8_k(&self, x: &[BlockQ6K], y: &[BlockQ8K], path: KPath) -> f32 {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q6_k)(x, y, path) }
    }

    /// Four Q6_K weight rows against one activation row; equal to four single-row calls.
    #[inline]
    pub fn vec_dot_q6_k_q8_k_x4(
        &self,
        rows: [&[BlockQ6K]; 4],
        y: &[BlockQ8K],
        path: KPath,
    ) -> [f32; 4] {
        // SAFETY: as in `vec_dot_f32`.
        unsafe { (self.q6_k_x4)(rows, y, path) }
    }

    /// [`Self::vec_dot_q6_k_q8_k`] of every weight row against every token, as
    /// [`Self::gemm_q4_k_q8_k`].
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    #[inline]
    pub fn gemm_q6_k_q8_k(
        &self,
        w: &[BlockQ6K],
        x: &[BlockQ8K],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        // SAFETY: as in `gemm_q8_0_q8_0`.
        unsafe { (self.q6_k_gemm)(w, x, nb, out, layout) }
    }

    /// `out[r]` = row `r` of the interleaved Q4_0 groups `w` (of `y.len()` blocks each) against
    /// `y`, at most sixteen per group; equal to single-row repacked dots on the rows.
    pub fn gemv_q4_0_x16_q8_0(&self, w: &[BlockQ4_0x16], y: &[BlockQ8_0], out: &mut [f32]) {
        if let Some(kernels) = self.interleaved.q4_0 {
            // SAFETY: as in `vec_dot_f32`.
            return unsafe { (kernels.dot)(w, y, out) };
        }
        let nb = y.len();
        let rows = quant::deinterleave(w, nb);
        for (o, row) in out.iter_mut().zip(rows.chunks_exact(nb.max(1))) {
            *o = self.vec_dot_q4_0_q8_0_repacked(row, y);
        }
    }

    /// [`Self::gemm_q4_0_q8_0_repacked`] of interleaved rows (`w`: groups of `nb` blocks).
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    pub fn gemm_q4_0_x16_q8_0_repacked(
        &self,
        w: &[BlockQ4_0x16],
        x: &[BlockQ8_0],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        if let Some(kernels) = self.interleaved.q4_0 {
            // SAFETY: as in `gemm_q8_0_q8_0`.
            return unsafe { (kernels.gemm)(w, x, nb, out, layout) };
        }
        let rows = quant::deinterleave(w, nb);
        self.gemm_q4_0_q8_0_repacked(&rows, x, nb, out, layout);
    }

    /// Sixteen interleaved Q8_0 rows (one group of `w.len()` blocks) against one activation row;
    /// equal to sixteen single-row calls on the rows.
    pub fn vec_dot_q8_0_x16_q8_0(
        &self,
        w: &[BlockQ8_0x16],
        y: &[BlockQ8_0],
    ) -> [f32; INTERLEAVED_ROWS] {
        if let Some(kernels) = self.interleaved.q8_0 {
            // SAFETY: as in `vec_dot_f32`.
            return unsafe { (kernels.dot)(w, y) };
        }
        rows_of_group(w, |rows| self.vec_dot_q8_0_q8_0_x4(rows, y))
    }

    /// [`Self::gemm_q8_0_q8_0`] of interleaved rows (`w`: groups of `nb` blocks).
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    pub fn gemm_q8_0_x16_q8_0(
        &self,
        w: &[BlockQ8_0x16],
        x: &[BlockQ8_0],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        if let Some(kernels) = self.interleaved.q8_0 {
            // SAFETY: as in `gemm_q8_0_q8_0`.
            return unsafe { (kernels.gemm)(w, x, nb, out, layout) };
        }
        let rows = quant::deinterleave(w, nb);
        self.gemm_q8_0_q8_0(&rows, x, nb, out, layout);
    }

    /// Sixteen interleaved Q6_K rows (one group of `w.len()` super-blocks) against one activation
    /// row along ggml's `vec_dot` ([`KPath::VecDot`]); equal to sixteen single-row calls on the rows.
    pub fn vec_dot_q6_k_x16_q8_k(
        &self,
        w: &[BlockQ6Kx16],
        y: &[BlockQ8K],
    ) -> [f32; INTERLEAVED_ROWS] {
        if let Some(kernels) = self.interleaved.q6_k {
            // SAFETY: as in `vec_dot_f32`.
            return unsafe { (kernels.dot)(w, y) };
        }
        rows_of_group(w, |rows| self.vec_dot_q6_k_q8_k_x4(rows, y, KPath::VecDot))
    }

    /// [`Self::gemm_q6_k_q8_k`] of interleaved rows (`w`: groups of `nb` super-blocks).
    ///
    /// # Panics
    /// When `out` is too short for `layout`.
    pub fn gemm_q6_k_x16_q8_k(
        &self,
        w: &[BlockQ6Kx16],
        x: &[BlockQ8K],
        nb: usize,
        out: &mut [f32],
        layout: OutLayout,
    ) {
        if let Some(kernels) = self.interleaved.q6_k {
            // SAFETY: as in `gemm_q8_0_q8_0`.
            return unsafe { (kernels.gemm)(w, x, nb, out, layout) };
        }
        let rows = quant::deinterleave(w, nb);
        self.gemm_q6_k_q8_k(&rows, x, nb, out, layout);
    }
}

/// The sixteen results of a group of interleaved rows through `dot_x4` over its rows as the file
/// holds them, four at a time: the tiers without interleaved kernels.
fn rows_of_group<B: InterleavedBlock>(
    w: &[B],
    dot_x4: impl Fn([&[B::Row]; 4]) -> [f32; 4],
) -> [f32; INTERLEAVED_ROWS] {
    let nb = w.len();
    let rows = quant::deinterleave(w, nb);
    let row = |r: usize| &rows[r * nb..(r + 1) * nb];
    let mut out = [0f32; INTERLEAVED_ROWS];
    for (r, quad) in out.chunks_exact_mut(4).enumerate() {
        let r = 4 * r;
        quad.copy_from_slice(&dot_x4([row(r), row(r + 1), row(r + 2), row(r + 3)]));
    }
    out
}

impl fmt::Debug for KernelTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelTable")
            .field("tier", &self.tier)
            .finish_non_exhaustive()
    }
}

/// [`KernelTable::vec_dot_f32`] on this process's tier.
pub fn vec_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    table().vec_dot_f32(a, b)
}

/// [`KernelTable::vec_dot_f16`] on this process's tier.
pub fn vec_dot_f16(a: &[f16], b: &[f16]) -> f32 {
    table().vec_dot_f16(a, b)
}

/// [`KernelTable::vec_dot_f16_x4`] on this process's tier.
pub fn vec_dot_f16_x4(rows: [&[f16]; 4], y: &[f16]) -> [f32; 4] {
    table().vec_dot_f16_x4(rows, y)
}

/// [`KernelTable::vec_dot_bf16`] on this process's tier.
pub fn vec_dot_bf16(a: &[bf16], b: &[bf16]) -> f32 {
    table().vec_dot_bf16(a, b)
}

/// [`KernelTable::vec_dot_q8_0_q8_0`] on this process's tier.
pub fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    table().vec_dot_q8_0_q8_0(x, y)
}

/// [`KernelTable::vec_dot_q8_0_q8_0_x4`] on this process's tier.
pub fn vec_dot_q8_0_q8_0_x4(rows: [&[BlockQ8_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    table().vec_dot_q8_0_q8_0_x4(rows, y)
}

/// [`KernelTable::vec_dot_q4_0_q8_0`] on this process's tier.
pub fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    table().vec_dot_q4_0_q8_0(x, y)
}

/// [`KernelTable::vec_dot_q4_0_q8_0_x4`] on this process's tier.
pub fn vec_dot_q4_0_q8_0_x4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    table().vec_dot_q4_0_q8_0_x4(rows, y)
}

/// [`KernelTable::vec_dot_q4_1_q8_1`] on this process's tier.
pub fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    table().vec_dot_q4_1_q8_1(x, y)
}

/// [`KernelTable::vec_dot_q4_1_q8_1_x4`] on this process's tier.
pub fn vec_dot_q4_1_q8_1_x4(rows: [&[BlockQ4_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    table().vec_dot_q4_1_q8_1_x4(rows, y)
}

/// [`KernelTable::vec_dot_q5_0_q8_0`] on this process's tier.
pub fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    table().vec_dot_q5_0_q8_0(x, y)
}

/// [`KernelTable::vec_dot_q5_1_q8_1`] on this process's tier.
pub fn vec_dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    table().vec_dot_q5_1_q8_1(x, y)
}

/// [`KernelTable::vec_dot_q4_k_q8_k`] on this process's tier.
pub fn vec_dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K], path: KPath) -> f32 {
    table().vec_dot_q4_k_q8_k(x, y, path)
}

/// [`KernelTable::vec_dot_q5_k_q8_k`] on this process's tier.
pub fn vec_dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K], path: KPath) -> f32 {
    table().vec_dot_q5_k_q8_k(x, y, path)
}

/// [`KernelTable::vec_dot_q6_k_q8_k`] on this process's tier.
pub fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K], path: KPath) -> f32 {
    table().vec_dot_q6_k_q8_k(x, y, path)
}
