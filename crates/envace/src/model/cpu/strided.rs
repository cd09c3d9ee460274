//! A bounds-checked, safe front to `gemm::gemm` for f32 matrices read through row and column
//! strides out of larger buffers (a head's columns of a packed query, key or value buffer),
//! single-threaded: callers share the work out themselves.

// `gemm::gemm` takes raw pointers and strides; `product` checks every index it can reach first.
#![allow(unsafe_code)]

/// A `rows × cols` matrix inside `data`: element `(r, c)` is `data[offset + r·row_stride +
/// c·col_stride]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl View<'_> {
    /// The transposed matrix: the same elements, rows and columns swapped.
    pub fn t(self) -> Self {
        View {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// One past the largest index the view reaches (0 when it is empty).
    fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return 0;
        }
        self.offset + (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride + 1
    }
}

/// `out = scale · lhs · rhs`, with `out` row-major `(lhs.rows, rhs.cols)`.
///
/// # Panics
/// When the shapes disagree or a view reaches past its buffer (a caller's bug, never data).
pub(crate) fn product(out: &mut [f32], lhs: View<'_>, rhs: View<'_>, scale: f32) {
    assert_eq!(
        out.len(),
        lhs.rows * rhs.cols,
        "strided product: the output is not m × n"
    );
    product_into(out, (0, rhs.cols), lhs, rhs, scale, false);
}

/// [`product`] into a block of a larger row-major buffer: the `lhs.rows × rhs.cols` result
/// goes to `out` from `offset` on, its rows `row_stride` apart, and is added to what is there
/// when `accumulate` is set (else it replaces it).
pub(crate) fn product_into(
    out: &mut [f32],
    (offset, row_stride): (usize, usize),
    lhs: View<'_>,
    rhs: View<'_>,
    scale: f32,
    accumulate: bool,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert_eq!(rhs.rows, k, "strided product: inner dimensions differ");
    assert!(n <= row_stride, "strided product: output rows overlap");
    assert!(
        lhs.end() <= lhs.data.len() && rhs.end() <= rhs.data.len(),
        "strided product: a view reaches past its buffer"
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        offset + (m - 1) * row_stride + n <= out.len(),
        "strided product: the output block reaches past its buffer"
    );
    if k == 0 {
        if !accumulate {
            for row in 0..m {
                out[offset + row * row_stride..offset + row * row_stride + n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the output block's m rows of n values, `row_stride` apart from `offset`, lie
    // inside `out` (asserted above) and do not overlap (n ≤ row_stride); both views reach only
    // elements inside their buffers (asserted above). gemm reads the destination only when
    // `accumulate` is set, where it holds initialised values.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr().add(offset),
            1,
            row_stride as isize,
            accumulate,
            lhs.data.as_ptr().add(lhs.offset),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr().add(rhs.offset),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_into_a_block_replace_or_add_and_leave_the_rest() {
        let a: Vec<f32> = (0..12).map(|v| v as f32 * 0.25 - 1.0).collect();
        let b: Vec<f32> = (0..8).map(|v| 2.0 - v as f32 * 0.5).collect();
        let lhs = View {
            data: &a,
            offset: 0,
            rows: 3,
            cols: 4,
            row_stride: 4,
            col_stride: 1,
        };
        let rhs = View {
            data: &b,
            offset: 0,
            rows: 4,
            cols: 2,
            row_stride: 2,
            col_stride: 1,
        };
        let want = |r: usize, c: usize| (0..4).map(|i| a[r * 4 + i] * b[i * 2 + c]).sum::<f32>();
        for accumulate in [false, true] {
            // A 3 × 2 block at row 1, column 1 of a 5 × 4 buffer of sevens.
            let mut out = vec![7.0f32; 20];
            product_into(&mut out, (5, 4), lhs, rhs, 0.5, accumulate);
            for (i, &v) in out.iter().enumerate() {
                let (row, col) = (i / 4, i % 4);
                let inside = (1..4).contains(&row) && (1..3).contains(&col);
                let expected = if !inside {
                    7.0
                } else {
                    0.5 * want(row - 1, col - 1) + if accumulate { 7.0 } else { 0.0 }
                };
                assert!(
                    (v - expected).abs() < 1e-5,
                    "({row}, {col}): {v} vs {expected}"
                );
            }
        }
    }

    #[test]
    fn strided_products_match_the_naive_sum() {
        // lhs: rows 1..3 of a 4 × 5 buffer, columns 1..4; rhs: a transposed 3 × 2 read from a
        // 2 × 3 buffer (row stride 1, column stride 3).
        let a: Vec<f32> = (0..20).map(|v| v as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..6).map(|v| v as f32 - 2.0).collect();
        let lhs = View {
            data: &a,
            offset: 5 + 1,
            rows: 2,
            cols: 3,
            row_stride: 5,
            col_stride: 1,
        };
        let rhs = View {
            data: &b,
            offset: 0,
            rows: 3,
            cols: 2,
            row_stride: 1,
            col_stride: 3,
        };
        let mut out = vec![7.0; 4];
        product(&mut out, lhs, rhs, 2.0);
        for r in 0..2 {
            for c in 0..2 {
                let want: f32 = (0..3).map(|i| a[6 + r * 5 + i] * b[i + c * 3]).sum::<f32>() * 2.0;
                assert!((out[r * 2 + c] - want).abs() < 1e-5, "({r}, {c})");
            }
        }
    }

    #[test]
    #[should_panic(expected = "reaches past its buffer")]
    fn a_view_past_its_buffer_is_refused() {
        let a = vec![0f32; 4];
        let view = View {
            data: &a,
            offset: 1,
            rows: 2,
            cols: 2,
            row_stride: 2,
            col_stride: 1,
        };
        product(&mut [0.0; 4], view, view, 1.0);
    }
}
