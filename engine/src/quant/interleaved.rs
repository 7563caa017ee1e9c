//! Rows interleaved sixteen at a time: the layouts the SIMD tiers' kernels read a row per int32
//! lane from (AVX-512: sixteen rows a vector; AVX2: each half of a group, eight rows, a vector), with
//! no unpacking per call (as ggml's `block_q4_Kx8` does for eight rows on AVX2).
//!
//! Each interleaved block holds block `i` of sixteen consecutive rows, byte for byte the same bits
//! as their sixteen file blocks in another order, so a matrix takes the same memory either way:
//! [`BlockQ4_0x16`] for Q4_0, [`BlockQ4Kx16`] for Q4_K, [`BlockQ6Kx16`] for Q6_K, [`BlockQ8_0x16`]
//! for Q8_0.

use half::f16;

use super::{BlockQ4_0, BlockQ4K, BlockQ6K, BlockQ8_0, QK, QK_K};

/// Rows interleaved in one block.
pub const INTERLEAVED_ROWS: usize = 16;

/// A block of [`INTERLEAVED_ROWS`] rows of `Row`s, four bytes of a row to each four-byte word.
pub trait InterleavedBlock: Copy + Default {
    /// The file's block of one row.
    type Row: Copy;

    /// Block `i` of each of `rows` (sixteen rows of `nb` blocks, one after the other).
    fn gather(rows: &[Self::Row], nb: usize, i: usize) -> Self;

    /// Row `r`'s block, as the file holds it.
    fn row(&self, r: usize) -> Self::Row;
}

/// Copies each four-byte word of `row` into word `r` of the matching entry of `words`.
fn spread_words<const N: usize>(row: &[u8], words: &mut [[u8; 4 * INTERLEAVED_ROWS]; N], r: usize) {
    for (word, out) in row.as_chunks::<4>().0.iter().zip(words) {
        out[4 * r..4 * r + 4].copy_from_slice(word);
    }
}

/// The inverse of [`spread_words`]: word `r` of each entry of `words` into `row`.
fn gather_words<const N: usize>(words: &[[u8; 4 * INTERLEAVED_ROWS]; N], r: usize, row: &mut [u8]) {
    for (word, out) in words.iter().zip(row.as_chunks_mut::<4>().0) {
        out.copy_from_slice(&word[4 * r..4 * r + 4]);
    }
}

/// Super-block `i` of sixteen Q4_K rows, each part a row per four-byte word:
/// - `scales[w]`, word `r`: bytes `4w..4w + 4` of row `r`'s packed scales and minimums;
/// - `qs[8j + m]`, word `r`: bytes `32j + 4m..32j + 4m + 4` of row `r`'s nibbles, that is values
///   `64j + 4m..+4` (low nibbles, sub-block `2j`) and `64j + 32 + 4m..+4` (high nibbles, `2j + 1`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ4Kx16 {
    /// Each row's super-block scale of the scales.
    pub d: [f16; INTERLEAVED_ROWS],
    /// Each row's super-block scale of the minimums.
    pub dmin: [f16; INTERLEAVED_ROWS],
    /// The rows' packed 6-bit scales and minimums, four bytes of a row to a word.
    pub scales: [[u8; 4 * INTERLEAVED_ROWS]; 3],
    /// The rows' nibbles, four bytes of a row to a word.
    pub qs: [[u8; 4 * INTERLEAVED_ROWS]; QK_K / 8],
}
const _: () = assert!(size_of::<BlockQ4Kx16>() == INTERLEAVED_ROWS * size_of::<BlockQ4K>());

impl Default for BlockQ4Kx16 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; INTERLEAVED_ROWS],
            dmin: [f16::ZERO; INTERLEAVED_ROWS],
            scales: [[0; 4 * INTERLEAVED_ROWS]; 3],
            qs: [[0; 4 * INTERLEAVED_ROWS]; QK_K / 8],
        }
    }
}

impl InterleavedBlock for BlockQ4Kx16 {
    type Row = BlockQ4K;

    fn gather(rows: &[BlockQ4K], nb: usize, i: usize) -> Self {
        let mut out = Self::default();
        for r in 0..INTERLEAVED_ROWS {
            let block = &rows[r * nb + i];
            out.d[r] = block.d;
            out.dmin[r] = block.dmin;
            spread_words(&block.scales, &mut out.scales, r);
            spread_words(&block.qs, &mut out.qs, r);
        }
        out
    }

    fn row(&self, r: usize) -> BlockQ4K {
        let mut block = BlockQ4K {
            d: self.d[r],
            dmin: self.dmin[r],
            ..BlockQ4K::default()
        };
        gather_words(&self.scales, r, &mut block.scales);
        gather_words(&self.qs, r, &mut block.qs);
        block
    }
}

/// Super-block `i` of sixteen Q6_K rows, each part a row per four-byte word:
/// - `scales[w]`, word `r`: row `r`'s 16-value scales `4w..4w + 4` (as the bytes of their i8);
/// - `ql[k]`, word `r`: bytes `4k..4k + 4` of row `r`'s low four bits: with `n = k / 16` and
///   `p = 4 (k % 16)`, values `128n + p..+4` (low nibbles) and `128n + 64 + p..+4` (high ones);
/// - `qh[m]`, word `r`: bytes `4m..4m + 4` of row `r`'s high two bits: with `n = m / 8` and
///   `p = 4 (m % 8)`, bit pairs 0-1, 2-3, 4-5 and 6-7 of values `128n + p..+4`, `128n + 32 + p..`,
///   `128n + 64 + p..` and `128n + 96 + p..`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ6Kx16 {
    /// Each row's super-block scale.
    pub d: [f16; INTERLEAVED_ROWS],
    /// The rows' 16-value scales, four of a row to a word.
    pub scales: [[u8; 4 * INTERLEAVED_ROWS]; QK_K / 64],
    /// The rows' low four bits, four bytes of a row to a word.
    pub ql: [[u8; 4 * INTERLEAVED_ROWS]; QK_K / 8],
    /// The rows' high two bits, four bytes of a row to a word.
    pub qh: [[u8; 4 * INTERLEAVED_ROWS]; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ6Kx16>() == INTERLEAVED_ROWS * size_of::<BlockQ6K>());

impl Default for BlockQ6Kx16 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; INTERLEAVED_ROWS],
            scales: [[0; 4 * INTERLEAVED_ROWS]; QK_K / 64],
            ql: [[0; 4 * INTERLEAVED_ROWS]; QK_K / 8],
            qh: [[0; 4 * INTERLEAVED_ROWS]; QK_K / 16],
        }
    }
}

impl InterleavedBlock for BlockQ6Kx16 {
    type Row = BlockQ6K;

    fn gather(rows: &[BlockQ6K], nb: usize, i: usize) -> Self {
        let mut out = Self::default();
        for r in 0..INTERLEAVED_ROWS {
            let block = &rows[r * nb + i];
            out.d[r] = block.d;
            spread_words(&block.scales.map(|s| s as u8), &mut out.scales, r);
            spread_words(&block.ql, &mut out.ql, r);
            spread_words(&block.qh, &mut out.qh, r);
        }
        out
    }

    fn row(&self, r: usize) -> BlockQ6K {
        let mut block = BlockQ6K {
            d: self.d[r],
            ..BlockQ6K::default()
        };
        let mut scales = [0u8; QK_K / 16];
        gather_words(&self.scales, r, &mut scales);
        block.scales = scales.map(|s| s as i8);
        gather_words(&self.ql, r, &mut block.ql);
        gather_words(&self.qh, r, &mut block.qh);
        block
    }
}

/// Block `i` of sixteen Q8_0 rows: `qs[l]`, word `r`, holds values `4l..4l + 4` of row `r` (the
/// bytes of their i8), the four values of ggml's lane `l`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8_0x16 {
    /// Each row's scale.
    pub d: [f16; INTERLEAVED_ROWS],
    /// The rows' values, four of a row to a word.
    pub qs: [[u8; 4 * INTERLEAVED_ROWS]; QK / 4],
}
const _: () = assert!(size_of::<BlockQ8_0x16>() == INTERLEAVED_ROWS * size_of::<BlockQ8_0>());

impl Default for BlockQ8_0x16 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; INTERLEAVED_ROWS],
            qs: [[0; 4 * INTERLEAVED_ROWS]; QK / 4],
        }
    }
}

impl InterleavedBlock for BlockQ8_0x16 {
    type Row = BlockQ8_0;

    fn gather(rows: &[BlockQ8_0], nb: usize, i: usize) -> Self {
        let mut out = Self::default();
        for r in 0..INTERLEAVED_ROWS {
            let block = &rows[r * nb + i];
            out.d[r] = block.d;
            spread_words(&block.qs.map(|v| v as u8), &mut out.qs, r);
        }
        out
    }

    fn row(&self, r: usize) -> BlockQ8_0 {
        let mut values = [0u8; QK];
        gather_words(&self.qs, r, &mut values);
        BlockQ8_0 {
            d: self.d[r],
            qs: values.map(|v| v as i8),
        }
    }
}

/// Block `i` of sixteen Q4_0 rows: `qs[k]`, word `r`, holds bytes `4k..4k + 4` of row `r`, that is
/// values `4k..4k + 4` (low nibbles) and `16 + 4k..+4` (high nibbles).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ4_0x16 {
    /// Each row's scale.
    pub d: [f16; INTERLEAVED_ROWS],
    /// The rows' nibbles, four bytes of a row to a word.
    pub qs: [[u8; 4 * INTERLEAVED_ROWS]; QK / 8],
}
const _: () = assert!(size_of::<BlockQ4_0x16>() == INTERLEAVED_ROWS * size_of::<BlockQ4_0>());

impl Default for BlockQ4_0x16 {
    fn default() -> Self {
        Self {
            d: [f16::ZERO; INTERLEAVED_ROWS],
            qs: [[0; 4 * INTERLEAVED_ROWS]; QK / 8],
        }
    }
}

impl InterleavedBlock for BlockQ4_0x16 {
    type Row = BlockQ4_0;

    fn gather(rows: &[BlockQ4_0], nb: usize, i: usize) -> Self {
        let mut out = Self::default();
        for r in 0..INTERLEAVED_ROWS {
            let block = &rows[r * nb + i];
            out.d[r] = block.d;
            spread_words(&block.qs, &mut out.qs, r);
        }
        out
    }

    fn row(&self, r: usize) -> BlockQ4_0 {
        let mut block = BlockQ4_0 {
            d: self.d[r],
            ..BlockQ4_0::default()
        };
        gather_words(&self.qs, r, &mut block.qs);
        block
    }
}

/// Appends to `out` the interleaved form of `rows`: whole groups of sixteen rows of `nb` blocks.
pub fn interleave<B: InterleavedBlock>(rows: &[B::Row], nb: usize, out: &mut Vec<B>) {
    if nb == 0 {
        return;
    }
    debug_assert!(rows.len().is_multiple_of(INTERLEAVED_ROWS * nb));
    for group in rows.chunks_exact(INTERLEAVED_ROWS * nb) {
        out.extend((0..nb).map(|i| B::gather(group, nb, i)));
    }
}

/// Interleaves rows as they come, a few at a time: each whole group of sixteen goes to the output,
/// the rows of a group not yet whole wait (at most fifteen rows are held apart).
#[derive(Debug)]
pub struct Interleaver<B: InterleavedBlock> {
    nb: usize,
    pending: Vec<B::Row>,
}

impl<B: InterleavedBlock> Interleaver<B> {
    /// An interleaver of rows of `nb` blocks.
    pub fn new(nb: usize) -> Self {
        Self {
            nb,
            pending: Vec::new(),
        }
    }

    /// Takes the next whole rows, appending each group they complete to `out`.
    pub fn push(&mut self, mut rows: &[B::Row], out: &mut Vec<B>) {
        let group = INTERLEAVED_ROWS * self.nb;
        if group == 0 {
            return;
        }
        if !self.pending.is_empty() {
            let take = (group - self.pending.len()).min(rows.len());
            self.pending.extend_from_slice(&rows[..take]);
            rows = &rows[take..];
            if self.pending.len() == group {
                interleave(&self.pending, self.nb, out);
                self.pending.clear();
            }
        }
        let whole = rows.len() / group * group;
        interleave(&rows[..whole], self.nb, out);
        self.pending.extend_from_slice(&rows[whole..]);
    }

    /// Whether every row pushed is in the output.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The rows of interleaved `groups` (groups of `nb` blocks) as the file holds them, a row's blocks
/// one after the other.
pub fn deinterleave<B: InterleavedBlock>(groups: &[B], nb: usize) -> Vec<B::Row> {
    if nb == 0 {
        return Vec::new();
    }
    groups
        .chunks_exact(nb)
        .flat_map(|group| {
            (0..INTERLEAVED_ROWS).flat_map(move |r| group.iter().map(move |b| b.row(r)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random_q4_k(n: usize, seed: u64) -> Vec<BlockQ4K> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| BlockQ4K {
                d: f16::from_f32(rng.random_range(-1.0..1.0)),
                dmin: f16::from_f32(rng.random_range(-1.0..1.0)),
                scales: std::array::from_fn(|_| rng.random()),
                qs: std::array::from_fn(|_| rng.random()),
            })
            .collect()
    }

    fn random_q6_k(n: usize, seed: u64) -> Vec<BlockQ6K> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| BlockQ6K {
                ql: std::array::from_fn(|_| rng.random()),
                qh: std::array::from_fn(|_| rng.random()),
                scales: std::array::from_fn(|_| rng.random()),
                d: f16::from_f32(rng.random_range(-1.0..1.0)),
            })
            .collect()
    }

    fn round_trip<B: InterleavedBlock>(rows: &[B::Row], nb: usize)
    where
        B::Row: PartialEq + std::fmt::Debug,
    {
        let mut groups = Vec::<B>::new();
        interleave(rows, nb, &mut groups);
        assert_eq!(size_of_val(groups.as_slice()), size_of_val(rows));
        assert_eq!(deinterleave(&groups, nb), rows);
    }

    fn random_q8_0(n: usize, seed: u64) -> Vec<BlockQ8_0> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| BlockQ8_0 {
                d: f16::from_f32(rng.random_range(-1.0..1.0)),
                qs: std::array::from_fn(|_| rng.random()),
            })
            .collect()
    }

    fn random_q4_0(n: usize, seed: u64) -> Vec<BlockQ4_0> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| BlockQ4_0 {
                d: f16::from_f32(rng.random_range(-1.0..1.0)),
                qs: std::array::from_fn(|_| rng.random()),
            })
            .collect()
    }

    #[test]
    fn interleaving_keeps_every_row_and_takes_the_same_bytes() {
        let nb = 3;
        round_trip::<BlockQ4_0x16>(&random_q4_0(2 * INTERLEAVED_ROWS * nb, 4), nb);
        round_trip::<BlockQ4Kx16>(&random_q4_k(2 * INTERLEAVED_ROWS * nb, 5), nb);
        round_trip::<BlockQ6Kx16>(&random_q6_k(2 * INTERLEAVED_ROWS * nb, 6), nb);
        round_trip::<BlockQ8_0x16>(&random_q8_0(2 * INTERLEAVED_ROWS * nb, 7), nb);
    }

    #[test]
    fn a_q8_0_word_holds_four_values_of_one_row() {
        let nb = 3;
        let rows = random_q8_0(INTERLEAVED_ROWS * nb, 9);
        let block = BlockQ8_0x16::gather(&rows, nb, 2);
        let r = 7;
        let source = &rows[r * nb + 2];
        let values: Vec<u8> = source.qs[20..24].iter().map(|&v| v as u8).collect();
        assert_eq!(block.qs[5][4 * r..4 * r + 4], values);
        assert_eq!(block.d[r], source.d);
    }

    #[test]
    fn rows_pushed_in_uneven_pieces_interleave_as_one_matrix() {
        let nb = 2;
        let rows = random_q6_k(3 * INTERLEAVED_ROWS * nb, 7);
        let mut whole = Vec::<BlockQ6Kx16>::new();
        interleave(&rows, nb, &mut whole);
        let mut interleaver = Interleaver::<BlockQ6Kx16>::new(nb);
        let mut pieces = Vec::new();
        // Pieces of 5, 23 and 20 rows: a group split across pieces, one piece holding a whole group.
        for piece in [0..5, 5..28, 28..48] {
            interleaver.push(&rows[piece.start * nb..piece.end * nb], &mut pieces);
        }
        assert!(interleaver.is_done());
        assert_eq!(pieces, whole);
    }

    #[test]
    fn a_q4_k_word_holds_four_bytes_of_one_row() {
        let nb = 2;
        let rows = random_q4_k(INTERLEAVED_ROWS * nb, 6);
        let block = BlockQ4Kx16::gather(&rows, nb, 1);
        let (r, j, m) = (5, 2, 3);
        let source = &rows[r * nb + 1];
        assert_eq!(
            block.qs[8 * j + m][4 * r..4 * r + 4],
            source.qs[32 * j + 4 * m..32 * j + 4 * m + 4]
        );
        assert_eq!(block.scales[2][4 * r..4 * r + 4], source.scales[8..12]);
        assert_eq!(block.d[r], source.d);
    }

    #[test]
    fn a_q6_k_word_holds_four_bytes_of_one_row() {
        let nb = 2;
        let rows = random_q6_k(INTERLEAVED_ROWS * nb, 8);
        let block = BlockQ6Kx16::gather(&rows, nb, 1);
        let r = 11;
        let source = &rows[r * nb + 1];
        assert_eq!(block.ql[21][4 * r..4 * r + 4], source.ql[84..88]);
        assert_eq!(block.qh[9][4 * r..4 * r + 4], source.qh[36..40]);
        let scales: Vec<u8> = source.scales[12..16].iter().map(|&s| s as u8).collect();
        assert_eq!(block.scales[3][4 * r..4 * r + 4], scales);
        assert_eq!(block.d[r], source.d);
    }
}
