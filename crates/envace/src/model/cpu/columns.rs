//! Disjoint column ranges of one row-major matrix, each writable from its own parallel task:
//! what `split_at_mut` does for rows, for blocks of columns that every row shares.

// A block hands out `&mut` slices of rows through a raw pointer: the ranges are checked
// disjoint when the blocks are made, and each block lends one row slice at a time.
#![allow(unsafe_code)]

use std::marker::PhantomData;

/// Columns `start..start + width` of every row of a matrix that [`column_blocks`] split.
pub(crate) struct ColumnBlock<'a> {
    ptr: *mut f32,
    n_rows: usize,
    row_len: usize,
    start: usize,
    width: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: a block is the only way to reach its columns (the ranges are disjoint and the
// matrix stays mutably borrowed for `'a`), so moving it to another thread is like moving a
// `&mut [f32]`.
unsafe impl Send for ColumnBlock<'_> {}

impl ColumnBlock<'_> {
    /// This block's columns of row `r`.
    ///
    /// # Panics
    /// When `r` is not a row of the matrix.
    pub fn row_mut(&mut self, r: usize) -> &mut [f32] {
        assert!(
            r < self.n_rows,
            "column block: row {r} of {} rows",
            self.n_rows
        );
        // SAFETY: `r < n_rows` and `start + width ≤ row_len` (checked by `column_blocks`), so
        // the slice lies inside the `n_rows × row_len` matrix; no other block reaches these
        // columns, and `&mut self` keeps this block from lending them twice at once.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.add(r * self.row_len + self.start), self.width)
        }
    }
}

/// Splits `matrix` (`n_rows` rows of `row_len` values, row-major) into one block per range of
/// `(start, width)` columns.
///
/// # Panics
/// When `matrix` is not `n_rows × row_len`, or the ranges overlap, are out of order or reach
/// past a row.
pub(crate) fn column_blocks<'a>(
    matrix: &'a mut [f32],
    n_rows: usize,
    row_len: usize,
    ranges: impl IntoIterator<Item = (usize, usize)>,
) -> Vec<ColumnBlock<'a>> {
    assert_eq!(
        matrix.len(),
        n_rows * row_len,
        "column blocks: {} values are not {n_rows} rows of {row_len}",
        matrix.len()
    );
    let ptr = matrix.as_mut_ptr();
    let mut end = 0;
    ranges
        .into_iter()
        .map(|(start, width)| {
            assert!(
                start >= end,
                "column blocks: columns {start}..{} overlap the previous block, which ends at \
                 {end}",
                start + width
            );
            assert!(
                start + width <= row_len,
                "column blocks: columns {start}..{} pass the row's {row_len}",
                start + width
            );
            end = start + width;
            ColumnBlock {
                ptr,
                n_rows,
                row_len,
                start,
                width,
                _borrow: PhantomData,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rayon::prelude::*;

    use super::*;

    #[test]
    fn blocks_written_in_parallel_fill_their_own_columns_only() {
        let (n_rows, row_len) = (5, 23);
        let mut matrix = vec![-1.0f32; n_rows * row_len];
        // Blocks of 4 columns, the last narrower, with column 8 left out.
        let ranges: Vec<(usize, usize)> = [(0, 4), (4, 4), (9, 4), (13, 4), (17, 4), (21, 2)]
            .into_iter()
            .collect();
        let blocks = column_blocks(&mut matrix, n_rows, row_len, ranges.iter().copied());
        blocks
            .into_par_iter()
            .zip(&ranges)
            .with_max_len(1)
            .for_each(|(mut block, &(start, width))| {
                for r in 0..n_rows {
                    let row = block.row_mut(r);
                    assert_eq!(row.len(), width);
                    for (c, v) in row.iter_mut().enumerate() {
                        *v = (r * 100 + start + c) as f32;
                    }
                }
            });
        for r in 0..n_rows {
            for c in 0..row_len {
                let want = if c == 8 { -1.0 } else { (r * 100 + c) as f32 };
                assert_eq!(matrix[r * row_len + c], want, "row {r}, column {c}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn overlapping_ranges_are_refused() {
        let mut matrix = vec![0f32; 2 * 8];
        column_blocks(&mut matrix, 2, 8, [(0, 4), (3, 4)]);
    }

    #[test]
    #[should_panic(expected = "pass the row")]
    fn a_range_past_the_row_is_refused() {
        let mut matrix = vec![0f32; 2 * 8];
        column_blocks(&mut matrix, 2, 8, [(6, 4)]);
    }

    #[test]
    #[should_panic(expected = "row 2 of 2 rows")]
    fn a_row_past_the_matrix_is_refused() {
        let mut matrix = vec![0f32; 2 * 8];
        let mut blocks = column_blocks(&mut matrix, 2, 8, [(0, 8)]);
        blocks[0].row_mut(2);
    }
}
