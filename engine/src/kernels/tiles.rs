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

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of `C` tokens, the last tile
/// padded with `T::default()`: `put(entry, lane, block)` writes one token's block into its lane of
/// its tile's entry for that block. `nb` must not be 0.
#[inline(always)]
pub(crate) fn pack_token_tiles<const C: usize, A, T: Clone + Default>(
    (x, nb): (&[A], usize),
    out: &mut Vec<T>,
    mut put: impl FnMut(&mut T, usize, &A),
) {
    let tokens = x.len() / nb;
    out.clear();
    out.resize(tokens.div_ceil(C) * nb, T::default());
    for (t, blocks) in x.chunks_exact(nb).enumerate() {
        let (tile, lane) = (t / C, t % C);
        for (b, p) in blocks.iter().zip(&mut out[tile * nb..(tile + 1) * nb]) {
            put(p, lane, b);
        }
    }
}

/// `q`'s signed bytes four to a little-endian word, into `words` (as a lane kernel broadcasts them).
#[inline(always)]
pub(crate) fn pack_quads(q: &[i8], words: &mut [u32]) {
    for (word, quad) in words.iter_mut().zip(q.as_chunks::<4>().0) {
        *word = u32::from_le_bytes(quad.map(|v| v as u8));
    }
}

/// Two i16 in one word, `low` first.
#[inline(always)]
pub(crate) fn i16_pair(low: i16, high: i16) -> u32 {
    u32::from(low as u16) | (u32::from(high as u16) << 16)
}

/// A Q8_K token block's sums as the K-quant lane kernels read them, two i16 to a word: its
/// sub-block sums (pairs of 16-value sums, as the single-row dot forms them) and its 16-value sums.
#[inline(always)]
pub(crate) fn q8k_pair_sums<const G: usize, const H: usize>(
    b: &crate::quant::BlockQ8K,
) -> ([u32; G], [u32; H]) {
    let sub = |s: usize| b.bsums[2 * s].wrapping_add(b.bsums[2 * s + 1]);
    (
        std::array::from_fn(|g| i16_pair(sub(2 * g), sub(2 * g + 1))),
        std::array::from_fn(|m| i16_pair(b.bsums[2 * m], b.bsums[2 * m + 1])),
    )
}

/// The weight rows and tokens of a product of `w` by `x` (rows and tokens of `nb` blocks each);
/// `None` when it has none of either (or `nb` is 0).
#[inline(always)]
pub(crate) fn product_shape<W, A>(w: &[W], x: &[A], nb: usize) -> Option<(usize, usize)> {
    let tokens = x.len().checked_div(nb)?;
    let rows = w.len() / nb;
    (rows > 0 && tokens > 0).then_some((rows, tokens))
}

/// Every tile of the product of `w` (rows of `nb` blocks) by `x` (tokens of `nb` blocks), into `out`
/// as `layout` places them: [`gemm_by_packed_tiles`], each tile of `R` rows handed to `pack_rows`.
#[inline(always)]
pub(crate) fn gemm_by_tiles<const R: usize, const C: usize, W, A, T, U>(
    (w, x, nb): (&[W], &[A], usize),
    (out, layout): (&mut [f32], OutLayout),
    bufs: (&mut Vec<T>, &mut Vec<U>),
    pack_tokens: impl FnOnce(&[A], usize, &mut Vec<T>),
    mut pack_rows: impl FnMut(&[&[W]; R], &mut Vec<U>),
    dot: impl FnMut(&[U], &[T]) -> [[f32; C]; R],
) {
    let Some((rows, _)) = product_shape(w, x, nb) else {
        return;
    };
    let pack_tile =
        |first_row, buf: &mut Vec<U>| pack_rows(&tile_rows::<R, _>(w, nb, first_row), buf);
    gemm_by_packed_tiles(
        (rows, x, nb),
        (out, layout),
        bufs,
        pack_tokens,
        pack_tile,
        dot,
    );
}

/// Every tile of the product of rows interleaved `R` at a time (`groups`: each group's `nb` blocks
/// one after the other) by `x`, into `out` as `layout` places them: [`gemm_by_packed_tiles`], each
/// group handed to `pack_group`.
#[inline(always)]
pub(crate) fn gemm_by_groups<const R: usize, const C: usize, G, A, T, U>(
    (groups, x, nb): (&[G], &[A], usize),
    (out, layout): (&mut [f32], OutLayout),
    bufs: (&mut Vec<T>, &mut Vec<U>),
    pack_tokens: impl FnOnce(&[A], usize, &mut Vec<T>),
    mut pack_group: impl FnMut(&[G], &mut Vec<U>),
    dot: impl FnMut(&[U], &[T]) -> [[f32; C]; R],
) {
    let rows = groups.len().checked_div(nb).unwrap_or(0) * R;
    let pack_tile =
        |first_row: usize, buf: &mut Vec<U>| pack_group(&groups[first_row / R * nb..][..nb], buf);
    gemm_by_packed_tiles(
        (rows, x, nb),
        (out, layout),
        bufs,
        pack_tokens,
        pack_tile,
        dot,
    );
}

/// Every tile of the product of `rows` weight rows by `x` (tokens of `nb` blocks), into `out` as
/// `layout` places them: the tokens packed once by `pack_tokens` (`nb` entries per tile of `C`
/// tokens, the last tile padded), the tile of `R` rows from each `first_row` once by `pack_tile`,
/// and `dot` giving a tile's results. A tile of rows goes across every tile of tokens before the
/// next, so its unpacked blocks stay in cache while the tokens stream past.
#[inline(always)]
pub(crate) fn gemm_by_packed_tiles<const R: usize, const C: usize, A, T, U>(
    (rows, x, nb): (usize, &[A], usize),
    (out, layout): (&mut [f32], OutLayout),
    (tokens_buf, rows_buf): (&mut Vec<T>, &mut Vec<U>),
    pack_tokens: impl FnOnce(&[A], usize, &mut Vec<T>),
    mut pack_tile: impl FnMut(usize, &mut Vec<U>),
    mut dot: impl FnMut(&[U], &[T]) -> [[f32; C]; R],
) {
    let tokens = x.len().checked_div(nb).unwrap_or(0);
    if rows == 0 || tokens == 0 {
        return;
    }
    pack_tokens(x, nb, tokens_buf);
    for first_row in (0..rows).step_by(R) {
        pack_tile(first_row, rows_buf);
        for (j, entries) in tokens_buf.chunks_exact(nb).enumerate() {
            let first_token = j * C;
            let values = dot(rows_buf, entries);
            let real = (rows - first_row, tokens - first_token);
            store_tile(out, layout, (first_row, first_token), real, values);
        }
    }
}

/// Every weight row of `w` against every token of `x` (`nb` blocks each) through a tier's single-row
/// dots, four rows at a time where the rows allow (`dot_x4` must give the bits of four `dot` calls),
/// into `out` as `layout` places them: the tiled form of the block types without register tiles yet.
///
/// # Safety
/// The CPU must support the features `dot` and `dot_x4` were compiled for.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) unsafe fn gemm_by_row_dots<W, A>(
    (w, x, nb): (&[W], &[A], usize),
    (out, layout): (&mut [f32], OutLayout),
    dot: unsafe fn(&[W], &[A]) -> f32,
    dot_x4: unsafe fn([&[W]; 4], &[A]) -> [f32; 4],
) {
    if nb == 0 {
        return;
    }
    let n_rows = w.len() / nb;
    let row = |r: usize| &w[r * nb..(r + 1) * nb];
    for (t, token) in x.chunks_exact(nb).enumerate() {
        let mut r = 0;
        while r + 4 <= n_rows {
            // SAFETY: the caller's CPU supports the kernels (this function's contract).
            let four = unsafe { dot_x4([row(r), row(r + 1), row(r + 2), row(r + 3)], token) };
            for (k, v) in four.into_iter().enumerate() {
                out[t * layout.token_stride + (r + k) * layout.row_stride] = v;
            }
            r += 4;
        }
        for k in r..n_rows {
            // SAFETY: as above.
            out[t * layout.token_stride + k * layout.row_stride] = unsafe { dot(row(k), token) };
        }
    }
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
