//! Register tiles of a quantized matrix product: which rows a tile takes and where its results go.
//!
//! A tile is `R` weight rows by `C` tokens. The tiled kernels keep its `R x C` accumulators in
//! registers across every block of the rows, so each weight block is loaded once for `C` tokens and
//! each activation block once for `R` rows. Tiles at the edges of a product are padded (with a row or
//! token repeated or zero), and only their real results are stored.

/// Where the result for `(row, token)` goes: `out[token * token_stride + row * row_stride]`, rows and
/// tokens counted from the first of the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutLayout {
    /// Distance between the results of consecutive tokens.
    pub token_stride: usize,
    /// Distance between the results of consecutive rows.
    pub row_stride: usize,
}

impl OutLayout {
    /// Token-major results (`out[token][row]`), rows `rows` apart: the layout of a matmul's output.
    pub fn token_major(rows: usize) -> Self {
        Self {
            token_stride: rows,
            row_stride: 1,
        }
    }

    /// Row-major results (`out[row][token]`), tokens `tokens` apart.
    pub fn row_major(tokens: usize) -> Self {
        Self {
            token_stride: 1,
            row_stride: tokens,
        }
    }
}

/// Stores the results of a tile (`values[row][token]`, rows from `first_row`, tokens from
/// `first_token`) for its first `rows` rows and `tokens` tokens (the others pad the tile).
#[inline(always)]
pub(crate) fn store_tile<const R: usize, const C: usize>(
    out: &mut [f32],
    layout: OutLayout,
    (first_row, first_token): (usize, usize),
    (rows, tokens): (usize, usize),
    values: [[f32; C]; R],
) {
    for (r, row) in values.iter().enumerate().take(rows) {
        for (t, &v) in row.iter().enumerate().take(tokens) {
            out[(first_token + t) * layout.token_stride + (first_row + r) * layout.row_stride] = v;
        }
    }
}

/// `out[r] = dot(row r of w)` for the rows of `w` (rows of `nb` blocks), one per entry of `out` (rows
/// past the end of `w` leave their entries as they are); with `nb` = 0 every row is empty.
#[inline(always)]
pub(crate) fn each_row<W>(w: &[W], nb: usize, out: &mut [f32], mut dot: impl FnMut(&[W]) -> f32) {
    if nb == 0 {
        out.fill_with(|| dot(&[]));
        return;
    }
    for (row, o) in w.chunks_exact(nb).zip(out) {
        *o = dot(row);
    }
}

/// The `R` rows of `w` (rows of `nb` blocks) from `first`; past the last row, the last row again
/// (its results are dropped).
#[inline(always)]
pub(crate) fn tile_rows<const R: usize, W>(w: &[W], nb: usize, first: usize) -> [&[W]; R] {
    let last = (w.len() / nb).saturating_sub(1);
    std::array::from_fn(|r| &w[(first + r).min(last) * nb..][..nb])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_place_results_by_row_and_token_and_drop_padding() {
        let values = [[1.0, 2.0], [3.0, 4.0]];
        let mut out = vec![0f32; 3 * 4];
        store_tile(&mut out, OutLayout::token_major(3), (1, 2), (2, 1), values);
        let mut want = vec![0f32; 3 * 4];
        want[2 * 3 + 1] = 1.0;
        want[2 * 3 + 2] = 3.0;
        assert_eq!(out, want);
        let mut out = vec![0f32; 3 * 4];
        store_tile(&mut out, OutLayout::row_major(4), (1, 2), (1, 2), values);
        let mut want = vec![0f32; 3 * 4];
        want[4 + 2] = 1.0;
        want[4 + 3] = 2.0;
        assert_eq!(out, want);
    }
}
