//! Q4_K rows interleaved sixteen at a time: the layout the AVX-512 kernels read a row per int32 lane
//! from, with no unpacking per call (as ggml's `block_q4_Kx8` does for eight rows on AVX2).
//!
//! Each [`BlockQ4Kx16`] holds super-block `i` of sixteen consecutive rows, byte for byte the same
//! bits as their sixteen [`BlockQ4K`]s, so a matrix takes the same memory either way.

use half::f16;

use super::{BlockQ4K, QK_K};

/// Rows interleaved in one [`BlockQ4Kx16`].
pub const INTERLEAVED_ROWS: usize = 16;

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

impl BlockQ4Kx16 {
    /// Super-block `i` of each of `rows` (sixteen rows of `nb` super-blocks, one after the other).
    pub fn gather(rows: &[BlockQ4K], nb: usize, i: usize) -> Self {
        let mut out = Self::default();
        for r in 0..INTERLEAVED_ROWS {
            let block = &rows[r * nb + i];
            out.d[r] = block.d;
            out.dmin[r] = block.dmin;
            for (w, word) in block.scales.as_chunks::<4>().0.iter().enumerate() {
                out.scales[w][4 * r..4 * r + 4].copy_from_slice(word);
            }
            for (k, word) in block.qs.as_chunks::<4>().0.iter().enumerate() {
                out.qs[k][4 * r..4 * r + 4].copy_from_slice(word);
            }
        }
        out
    }

    /// Row `r`'s super-block, as the file holds it.
    pub fn row(&self, r: usize) -> BlockQ4K {
        let mut block = BlockQ4K {
            d: self.d[r],
            dmin: self.dmin[r],
            ..BlockQ4K::default()
        };
        for (w, word) in block.scales.as_chunks_mut::<4>().0.iter_mut().enumerate() {
            word.copy_from_slice(&self.scales[w][4 * r..4 * r + 4]);
        }
        for (k, word) in block.qs.as_chunks_mut::<4>().0.iter_mut().enumerate() {
            word.copy_from_slice(&self.qs[k][4 * r..4 * r + 4]);
        }
        block
    }
}

/// Appends to `out` the interleaved form of `rows`: whole groups of sixteen rows of `nb` super-blocks.
pub fn interleave_q4_k(rows: &[BlockQ4K], nb: usize, out: &mut Vec<BlockQ4Kx16>) {
    if nb == 0 {
        return;
    }
    debug_assert!(rows.len().is_multiple_of(INTERLEAVED_ROWS * nb));
    for group in rows.chunks_exact(INTERLEAVED_ROWS * nb) {
        out.extend((0..nb).map(|i| BlockQ4Kx16::gather(group, nb, i)));
    }
}

/// Interleaves rows as they come, a few at a time: each whole group of sixteen goes to the output,
/// the rows of a group not yet whole wait (at most fifteen rows are held apart).
#[derive(Debug, Default)]
pub struct Interleaver {
    nb: usize,
    pending: Vec<BlockQ4K>,
}

impl Interleaver {
    /// An interleaver of rows of `nb` super-blocks.
    pub fn new(nb: usize) -> Self {
        Self {
            nb,
            pending: Vec::new(),
        }
    }

    /// Takes the next whole rows, appending each group they complete to `out`.
    pub fn push(&mut self, mut rows: &[BlockQ4K], out: &mut Vec<BlockQ4Kx16>) {
        let group = INTERLEAVED_ROWS * self.nb;
        if group == 0 {
            return;
        }
        if !self.pending.is_empty() {
            let take = (group - self.pending.len()).min(rows.len());
            self.pending.extend_from_slice(&rows[..take]);
            rows = &rows[take..];
            if self.pending.len() == group {
                interleave_q4_k(&self.pending, self.nb, out);
                self.pending.clear();
            }
        }
        let whole = rows.len() / group * group;
        interleave_q4_k(&rows[..whole], self.nb, out);
        self.pending.extend_from_slice(&rows[whole..]);
    }

    /// Whether every row pushed is in the output.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The rows of interleaved `groups` (groups of `nb` super-blocks) as the file holds them, a row's
/// super-blocks one after the other.
pub fn deinterleave_q4_k(groups: &[BlockQ4Kx16], nb: usize, out: &mut Vec<BlockQ4K>) {
    out.clear();
    if nb == 0 {
        return;
    }
    for group in groups.chunks_exact(nb) {
        for r in 0..INTERLEAVED_ROWS {
            out.extend(group.iter().map(|block| block.row(r)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random_blocks(n: usize, seed: u64) -> Vec<BlockQ4K> {
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

    #[test]
    fn interleaving_keeps_every_row_and_takes_the_same_bytes() {
        let nb = 3;
        let rows = random_blocks(2 * INTERLEAVED_ROWS * nb, 5);
        let mut groups = Vec::new();
        interleave_q4_k(&rows, nb, &mut groups);
        assert_eq!(size_of_val(groups.as_slice()), size_of_val(rows.as_slice()));
        let mut back = Vec::new();
        deinterleave_q4_k(&groups, nb, &mut back);
        assert_eq!(back, rows);
    }

    #[test]
    fn rows_pushed_in_uneven_pieces_interleave_as_one_matrix() {
        let nb = 2;
        let rows = random_blocks(3 * INTERLEAVED_ROWS * nb, 7);
        let mut whole = Vec::new();
        interleave_q4_k(&rows, nb, &mut whole);
        let mut interleaver = Interleaver::new(nb);
        let mut pieces = Vec::new();
        // Pieces of 5, 23 and 20 rows: a group split across pieces, one piece holding a whole group.
        for piece in [0..5, 5..28, 28..48] {
            interleaver.push(&rows[piece.start * nb..piece.end * nb], &mut pieces);
        }
        assert!(interleaver.is_done());
        assert_eq!(pieces, whole);
    }

    #[test]
    fn a_word_holds_four_bytes_of_one_row() {
        let nb = 2;
        let rows = random_blocks(INTERLEAVED_ROWS * nb, 6);
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
}
