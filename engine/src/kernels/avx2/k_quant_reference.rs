//! Test-only references for the Q8_0, Q4_0, 5-bit and K-quant dots: seeded random blocks (activation sums
//! consistent with their values) and exact dot products from [`crate::quant`]'s dequantizers, which
//! every tier's kernels are checked against.

use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::kernels::k_numerics::KPath;
use crate::quant::{
    self, BlockQ4_0, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, BlockQ8_1,
    BlockQ8K, GgmlType, INTERLEAVED_ROWS, InterleavedBlock, QK, QK_K,
};

/// Block counts every kernel is checked at: one, odd counts, and rows longer than any unrolling.
const BLOCK_COUNTS: [usize; 5] = [1, 3, 17, 64, 130];
/// Largest error allowed, relative to the sum of the absolute values of the products.
const TOLERANCE: f64 = 1e-5;

/// How the quant and scale bytes of a block are filled.
#[derive(Clone, Copy)]
pub(crate) enum Fill {
    /// Seeded random bytes.
    Random,
    /// Every packed byte the same: the format's extremes (largest values, scales, mins).
    All(u8),
}

impl Fill {
    fn bytes<const N: usize>(self, rng: &mut StdRng) -> [u8; N] {
        match self {
            Fill::Random => std::array::from_fn(|_| rng.random()),
            Fill::All(b) => [b; N],
        }
    }

    fn values<const N: usize>(self, rng: &mut StdRng) -> [i8; N] {
        self.bytes(rng).map(|b| b as i8)
    }
}

/// A random f16 scale over several orders of magnitude, either sign.
fn scale(rng: &mut StdRng) -> f16 {
    let m: f32 = rng.random_range(-1.0..1.0);
    f16::from_f32(m * 2f32.powi(rng.random_range(-12..2)))
}

/// A weight block type paired with its activation block type.
pub(crate) trait Reference: Copy {
    /// The activation block the weights are dotted with.
    type Act: Copy;
    /// A block with random scales and `fill`ed quant bytes.
    fn block(rng: &mut StdRng, fill: Fill) -> Self;
    /// An activation block with a random scale and `fill`ed values (and consistent sums).
    fn act(rng: &mut StdRng, fill: Fill) -> Self::Act;
    /// The exact dot of one block pair, and the sum of the absolute values of its products.
    fn exact(&self, y: &Self::Act) -> (f64, f64);
}

/// `sum(w[i] * y[i])` and `sum(|w[i] * y[i]|)` in f64.
fn dot_f64(w: &[f32], y: impl Iterator<Item = f64>) -> (f64, f64) {
    w.iter().zip(y).fold((0.0, 0.0), |(sum, mag), (&w, y)| {
        let p = f64::from(w) * y;
        (sum + p, mag + p.abs())
    })
}

fn act_q8_0(rng: &mut StdRng, fill: Fill) -> BlockQ8_0 {
    BlockQ8_0 {
        d: scale(rng),
        qs: fill.values(rng),
    }
}

/// The values of a Q8_0-like block as f64.
fn q8_values(d: f16, qs: &[i8]) -> impl Iterator<Item = f64> {
    let d = f64::from(d.to_f32());
    qs.iter().map(move |&q| d * f64::from(q))
}

impl Reference for BlockQ8_0 {
    type Act = BlockQ8_0;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        act_q8_0(rng, fill)
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8_0 {
        act_q8_0(rng, fill)
    }

    fn exact(&self, y: &BlockQ8_0) -> (f64, f64) {
        let w: Vec<f32> = q8_values(self.d, &self.qs).map(|v| v as f32).collect();
        dot_f64(&w, q8_values(y.d, &y.qs))
    }
}

impl Reference for BlockQ4_0 {
    type Act = BlockQ8_0;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        Self {
            d: scale(rng),
            qs: fill.bytes(rng),
        }
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8_0 {
        act_q8_0(rng, fill)
    }

    fn exact(&self, y: &BlockQ8_0) -> (f64, f64) {
        let mut w = [0f32; QK];
        quant::dequantize_q4_0(std::slice::from_ref(self), &mut w);
        dot_f64(&w, q8_values(y.d, &y.qs))
    }
}

impl Reference for BlockQ5_0 {
    type Act = BlockQ8_0;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        Self {
            d: scale(rng),
            qh: fill.bytes(rng),
            qs: fill.bytes(rng),
        }
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8_0 {
        act_q8_0(rng, fill)
    }

    fn exact(&self, y: &BlockQ8_0) -> (f64, f64) {
        let bytes = [&self.d.to_le_bytes()[..], &self.qh, &self.qs].concat();
        let mut w = [0f32; QK];
        quant::dequantize_bytes(GgmlType::Q5_0, &bytes, &mut w);
        dot_f64(&w, q8_values(y.d, &y.qs))
    }
}

impl Reference for BlockQ5_1 {
    type Act = BlockQ8_1;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        Self {
            d: scale(rng),
            m: scale(rng),
            qh: fill.bytes(rng),
            qs: fill.bytes(rng),
        }
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8_1 {
        let BlockQ8_0 { d, qs } = act_q8_0(rng, fill);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        let s = f16::from_f32(d.to_f32() * sum as f32);
        BlockQ8_1 { d, s, qs }
    }

    /// With the activation's stored `s` for its sum, as the format defines the product: the values
    /// come from dequantizing the block with scale 1 and minimum 0.
    fn exact(&self, y: &BlockQ8_1) -> (f64, f64) {
        let one = f16::ONE.to_le_bytes();
        let bytes = [&one[..], &f16::ZERO.to_le_bytes(), &self.qh, &self.qs].concat();
        let mut q = [0f32; QK];
        quant::dequantize_bytes(GgmlType::Q5_1, &bytes, &mut q);
        let dx = f64::from(self.d.to_f32());
        let (sum, mag) = dot_f64(&q, q8_values(y.d, &y.qs).map(|v| dx * v));
        let min = f64::from(self.m.to_f32()) * f64::from(y.s.to_f32());
        (sum + min, mag + min.abs())
    }
}

/// A Q8_K block with `fill`ed values, a random scale and its 16-value sums.
fn act_q8_k(rng: &mut StdRng, fill: Fill) -> BlockQ8K {
    let qs: [i8; QK_K] = fill.values(rng);
    let (groups, _) = qs.as_chunks::<16>();
    let bsums = std::array::from_fn(|k| groups[k].iter().map(|&q| i16::from(q)).sum());
    let d = rng.random_range(-1.0f32..1.0) * 2f32.powi(rng.random_range(-10..1));
    BlockQ8K { d, qs, bsums }
}

/// The values of a Q8_K block as f64.
fn q8_k_values(y: &BlockQ8K) -> impl Iterator<Item = f64> {
    let d = f64::from(y.d);
    y.qs.iter().map(move |&q| d * f64::from(q))
}

/// The exact dot of a K-quant super-block, given as file bytes, with an activation block.
fn exact_k(bytes: &[u8], kind: GgmlType, y: &BlockQ8K) -> (f64, f64) {
    let mut w = [0f32; QK_K];
    quant::dequantize_bytes(kind, bytes, &mut w);
    dot_f64(&w, q8_k_values(y))
}

impl Reference for BlockQ4K {
    type Act = BlockQ8K;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        Self {
            d: scale(rng),
            dmin: scale(rng),
            scales: fill.bytes(rng),
            qs: fill.bytes(rng),
        }
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8K {
        act_q8_k(rng, fill)
    }

    fn exact(&self, y: &BlockQ8K) -> (f64, f64) {
        let head = [self.d.to_le_bytes(), self.dmin.to_le_bytes()].concat();
        let bytes = [&head[..], &self.scales, &self.qs].concat();
        exact_k(&bytes, GgmlType::Q4K, y)
    }
}

impl Reference for BlockQ5K {
    type Act = BlockQ8K;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        Self {
            d: scale(rng),
            dmin: scale(rng),
            scales: fill.bytes(rng),
            qh: fill.bytes(rng),
            qs: fill.bytes(rng),
        }
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8K {
        act_q8_k(rng, fill)
    }

    fn exact(&self, y: &BlockQ8K) -> (f64, f64) {
        let head = [self.d.to_le_bytes(), self.dmin.to_le_bytes()].concat();
        let bytes = [&head[..], &self.scales, &self.qh, &self.qs].concat();
        exact_k(&bytes, GgmlType::Q5K, y)
    }
}

impl Reference for BlockQ6K {
    type Act = BlockQ8K;

    fn block(rng: &mut StdRng, fill: Fill) -> Self {
        Self {
            ql: fill.bytes(rng),
            qh: fill.bytes(rng),
            scales: fill.values(rng),
            d: scale(rng),
        }
    }

    fn act(rng: &mut StdRng, fill: Fill) -> BlockQ8K {
        act_q8_k(rng, fill)
    }

    fn exact(&self, y: &BlockQ8K) -> (f64, f64) {
        let scales = self.scales.map(|s| s as u8);
        let bytes = [&self.ql[..], &self.qh, &scales, &self.d.to_le_bytes()].concat();
        exact_k(&bytes, GgmlType::Q6K, y)
    }
}

/// `R` weight rows (four unless said) and an activation row.
pub(crate) type Case<W, const R: usize = 4> = ([Vec<W>; R], Vec<<W as Reference>::Act>);

/// `R` rows of `n` blocks and an activation row, seeded.
fn case<W: Reference, const R: usize>(
    n: usize,
    seed: u64,
    (weights, acts): (Fill, Fill),
) -> Case<W, R> {
    let mut rng = StdRng::seed_from_u64(seed);
    let rows = std::array::from_fn(|_| (0..n).map(|_| W::block(&mut rng, weights)).collect());
    let y = (0..n).map(|_| W::act(&mut rng, acts)).collect();
    (rows, y)
}

/// Every case a kernel is checked on: each of [`BLOCK_COUNTS`] with random bytes, then the extremes
/// (largest values and scales against activations of -128 and of 127).
pub(crate) fn cases<W: Reference, const R: usize>() -> Vec<Case<W, R>> {
    let random = BLOCK_COUNTS
        .iter()
        .enumerate()
        .map(|(k, &n)| case(n, k as u64 + 1, (Fill::Random, Fill::Random)));
    let extremes = [(0xff, 0x80), (0xff, 0x7f), (0x80, 0x80), (0x7f, 0x81)]
        .into_iter()
        .enumerate()
        .map(|(k, (w, y))| case(5, 100 + k as u64, (Fill::All(w), Fill::All(y))));
    random.chain(extremes).collect()
}

/// Checks a tier's one-row and four-row kernels of a type: within [`TOLERANCE`] of the exact dot
/// on every case of [`cases`], the four-row form equal bit for bit to four one-row calls, and zero
/// for empty rows.
pub(crate) fn check_kernels<W: Reference>(
    name: &str,
    one: impl Fn(&[W], &[W::Act]) -> f32,
    four: impl Fn([&[W]; 4], &[W::Act]) -> [f32; 4],
) {
    for (rows, y) in cases::<W, 4>() {
        let n = y.len();
        let singles = rows.each_ref().map(|x| one(x, &y));
        for (r, (x, &got)) in rows.iter().zip(&singles).enumerate() {
            let (want, mag) = x
                .iter()
                .zip(&y)
                .map(|(a, b)| a.exact(b))
                .fold((0.0, 0.0), |(s, m), (ds, dm)| (s + ds, m + dm));
            assert!(
                (f64::from(got) - want).abs() <= TOLERANCE * mag,
                "{name}, {n} blocks, row {r}: {got} vs exact {want} (sum of |products| {mag})"
            );
        }
        let quad = four(rows.each_ref().map(Vec::as_slice), &y);
        assert_eq!(
            quad.map(f32::to_bits),
            singles.map(f32::to_bits),
            "{name}, {n} blocks: four rows {quad:?} vs one at a time {singles:?}"
        );
    }
    assert_eq!(one(&[], &[]), 0.0, "{name}: empty row");
    assert_eq!(four([&[]; 4], &[]), [0.0; 4], "{name}: four empty rows");
}

/// Every path of a Q4_K dot, and those of the K-quants llama.cpp does not repack.
pub(crate) const ALL_PATHS: [KPath; 4] = [
    KPath::VecDot,
    KPath::Tiled,
    KPath::RepackedGemv,
    KPath::RepackedGemm,
];
pub(crate) const UNPACKED_PATHS: [KPath; 2] = [KPath::VecDot, KPath::Tiled];

/// [`check_kernels`] for a tier's one-row and four-row kernels, and [`check_same_bits`] of the
/// one-row kernel against the scalar reference's.
pub(crate) fn check_against_scalar<W: Reference>(
    name: &str,
    one: impl Fn(&[W], &[W::Act]) -> f32,
    four: impl Fn([&[W]; 4], &[W::Act]) -> [f32; 4],
    scalar: impl Fn(&[W], &[W::Act]) -> f32,
) {
    check_kernels(name, &one, four);
    check_same_bits(name, one, scalar);
}

/// Checks that two kernels of a type give the same bits on every case of [`cases`].
pub(crate) fn check_same_bits<W: Reference>(
    name: &str,
    a: impl Fn(&[W], &[W::Act]) -> f32,
    b: impl Fn(&[W], &[W::Act]) -> f32,
) {
    for (rows, y) in cases::<W, 4>() {
        for (r, x) in rows.iter().enumerate() {
            let (a, b) = (a(x, &y), b(x, &y));
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name}, {} blocks, row {r}: {a} vs {b}",
                y.len()
            );
        }
    }
}

/// Checks a tier's dot of sixteen interleaved rows: on every case of [`cases`], the bits of `scalar`
/// on each row as the file holds it.
pub(crate) fn check_interleaved<B>(
    name: &str,
    dot: impl Fn(&[B], &[<B::Row as Reference>::Act]) -> [f32; INTERLEAVED_ROWS],
    scalar: impl Fn(&[B::Row], &[<B::Row as Reference>::Act]) -> f32,
) where
    B: InterleavedBlock,
    B::Row: Reference,
{
    for (rows, y) in cases::<B::Row, INTERLEAVED_ROWS>() {
        let nb = y.len();
        let mut group = Vec::new();
        quant::interleave(&rows.concat(), nb, &mut group);
        let got = dot(&group, &y);
        let want = rows.each_ref().map(|x| scalar(x, &y));
        assert_eq!(
            got.map(f32::to_bits),
            want.map(f32::to_bits),
            "{name}, {nb} blocks"
        );
    }
}
