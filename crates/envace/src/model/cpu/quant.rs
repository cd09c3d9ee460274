//! Quantised weight matrices for CPU decoding of GGUF models: Q4_1 and Q8_0 rows multiplied by
//! activations quantised to Q8_1, with an AVX2 kernel (x86-64) or a NEON one (aarch64, in
//! `quant/neon.rs`) chosen at run time, and a scalar reference that every other path is tested
//! against; and the f32 dot products of few-row decoding (AVX2, NEON, and 4 × 4 AVX-512 and
//! NEON tiles).
//!
//! The layouts follow ggml. A Q4_1 block holds 32 weights as a scale `d`, a minimum `m` and 16
//! bytes of 4-bit codes (the low nibble of byte `j` is weight `j`, the high nibble weight
//! `j + 16`), each weight being `d * code + m`. A Q8_0 block holds a scale and 32 signed bytes.
//! A Q8_1 activation block holds a scale `d`, the sum `s = d * Σ q` and 32 signed bytes, so a
//! Q4_1 dot product is `d_w * d_a * Σ code * q + m_w * s_a` per block. Scales are widened to f32
//! once, when a matrix is loaded.

// `std::arch` loads read through raw pointers and calling a `#[target_feature]` function needs
// `unsafe`; both are confined to the AVX2, AVX-512 and NEON kernels, which check every length
// first.
#![allow(unsafe_code)]

#[cfg(target_arch = "aarch64")]
mod neon;

use half::f16;
use rayon::prelude::*;

/// Weights per quantisation block (Q4_1, Q8_0 and Q8_1 alike).
pub const BLOCK: usize = 32;

/// Which quantisation a [`QMatrix`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QKind {
    /// 4-bit codes with a scale and a minimum per block (20 bytes in GGUF).
    Q4_1,
    /// 8-bit signed codes with a scale per block (34 bytes in GGUF).
    Q8_0,
}

impl QKind {
    /// Bytes of one block in a GGUF file.
    pub fn gguf_block_bytes(self) -> usize {
        match self {
            QKind::Q4_1 => 4 + BLOCK / 2,
            QKind::Q8_0 => 2 + BLOCK,
        }
    }

    /// Bytes of codes per block in a [`QMatrix`].
    fn code_bytes(self) -> usize {
        match self {
            QKind::Q4_1 => BLOCK / 2,
            QKind::Q8_0 => BLOCK,
        }
    }
}

/// A row-major `(n_rows, n_cols)` weight matrix in Q4_1 or Q8_0, each row a whole number of
/// blocks.
#[derive(Debug, Clone)]
pub struct QMatrix {
    kind: QKind,
    n_rows: usize,
    n_cols: usize,
    /// Per block, row-major.
    scales: Vec<f32>,
    /// Per block (Q4_1 only; empty for Q8_0).
    mins: Vec<f32>,
    /// `code_bytes` per block.
    codes: Vec<u8>,
}

impl QMatrix {
    /// Parses GGUF block bytes of a `(n_rows, n_cols)` matrix; `Err` says what does not fit.
    pub fn from_gguf_bytes(
        kind: QKind,
        n_rows: usize,
        n_cols: usize,
        bytes: &[u8],
    ) -> Result<Self, String> {
        if !n_cols.is_multiple_of(BLOCK) {
            return Err(format!(
                "{n_cols} columns are not a whole number of {BLOCK}-weight blocks"
            ));
        }
        let n_blocks = n_rows * n_cols / BLOCK;
        let block_bytes = kind.gguf_block_bytes();
        if bytes.len() != n_blocks * block_bytes {
            return Err(format!(
                "{} bytes of {kind:?} data, expected {} for ({n_rows}, {n_cols})",
                bytes.len(),
                n_blocks * block_bytes
            ));
        }
        let mut scales = Vec::with_capacity(n_blocks);
        let mut mins = Vec::new();
        let mut codes = Vec::with_capacity(n_blocks * kind.code_bytes());
        let half = |lo: u8, hi: u8| f16::from_le_bytes([lo, hi]).to_f32();
        for block in bytes.chunks_exact(block_bytes) {
            scales.push(half(block[0], block[1]));
            match kind {
                QKind::Q4_1 => {
                    mins.push(half(block[2], block[3]));
                    codes.extend_from_slice(&block[4..]);
                }
                QKind::Q8_0 => codes.extend_from_slice(&block[2..]),
            }
        }
        Ok(QMatrix {
            kind,
            n_rows,
            n_cols,
            scales,
            mins,
            codes,
        })
    }

    /// Quantises a row-major f32 matrix the way ggml's reference quantisers do (for tests and
    /// for building matrices in code).
    pub fn quantize(kind: QKind, n_rows: usize, n_cols: usize, values: &[f32]) -> Self {
        assert_eq!(
            values.len(),
            n_rows * n_cols,
            "values do not fill the matrix"
        );
        assert!(
            n_cols.is_multiple_of(BLOCK),
            "columns must fill whole blocks"
        );
        let mut m = QMatrix {
            kind,
            n_rows,
            n_cols,
            scales: Vec::new(),
            mins: Vec::new(),
            codes: Vec::new(),
        };
        for block in values.chunks_exact(BLOCK) {
            match kind {
                QKind::Q4_1 => {
                    let min = block.iter().copied().fold(f32::INFINITY, f32::min);
                    let max = block.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let d = f16::from_f32((max - min) / 15.0).to_f32();
                    let min = f16::from_f32(min).to_f32();
                    let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
                    m.scales.push(d);
                    m.mins.push(min);
                    for j in 0..BLOCK / 2 {
                        let code = |x: f32| ((x - min) * inv + 0.5).clamp(0.0, 15.0) as u8;
                        m.codes
                            .push(code(block[j]) | (code(block[j + BLOCK / 2]) << 4));
                    }
                }
                QKind::Q8_0 => {
                    let amax = block.iter().fold(0f32, |a, &x| a.max(x.abs()));
                    let d = f16::from_f32(amax / 127.0).to_f32();
                    let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
                    m.scales.push(d);
                    m.codes.extend(
                        block
                            .iter()
                            .map(|&x| (x * inv).round().clamp(-127.0, 127.0) as i8 as u8),
                    );
                }
            }
        }
        m
    }

    /// Rows (outputs).
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Columns (inputs).
    pub fn n_cols(&self) -> usize {
        self.n_cols
    }

    /// The quantisation.
    pub fn kind(&self) -> QKind {
        self.kind
    }

    /// Stacks matrices of the same kind and width on top of each other (e.g. q, k and v
    /// projections into one product).
    pub fn stack(parts: &[QMatrix]) -> Result<QMatrix, String> {
        let Some(first) = parts.first() else {
            return Err("nothing to stack".to_owned());
        };
        let mut out = QMatrix {
            kind: first.kind,
            n_rows: 0,
            n_cols: first.n_cols,
            scales: Vec::new(),
            mins: Vec::new(),
            codes: Vec::new(),
        };
        for part in parts {
            if (part.kind, part.n_cols) != (first.kind, first.n_cols) {
                return Err(format!(
                    "cannot stack a {:?} matrix of {} columns on a {:?} one of {}",
                    part.kind, part.n_cols, first.kind, first.n_cols
                ));
            }
            out.n_rows += part.n_rows;
            out.scales.extend_from_slice(&part.scales);
            out.mins.extend_from_slice(&part.mins);
            out.codes.extend_from_slice(&part.codes);
        }
        Ok(out)
    }

    /// Reorders rows: row `i` of the result is row `order[i]` of `self`.
    pub fn permute_rows(&self, order: &[usize]) -> QMatrix {
        let blocks_per_row = self.n_cols / BLOCK;
        let code_bytes = self.kind.code_bytes();
        let mut out = QMatrix {
            kind: self.kind,
            n_rows: order.len(),
            n_cols: self.n_cols,
            scales: Vec::with_capacity(self.scales.len()),
            mins: Vec::with_capacity(self.mins.len()),
            codes: Vec::with_capacity(self.codes.len()),
        };
        for &row in order {
            let blocks = row * blocks_per_row..(row + 1) * blocks_per_row;
            out.scales.extend_from_slice(&self.scales[blocks.clone()]);
            if !self.mins.is_empty() {
                out.mins.extend_from_slice(&self.mins[blocks.clone()]);
            }
            out.codes
                .extend_from_slice(&self.codes[blocks.start * code_bytes..blocks.end * code_bytes]);
        }
        out
    }

    /// Row `row` dequantised into `out` (`n_cols` values), e.g. an embedding lookup.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let blocks_per_row = self.n_cols / BLOCK;
        let code_bytes = self.kind.code_bytes();
        for (b, chunk) in out.chunks_exact_mut(BLOCK).enumerate() {
            let block = row * blocks_per_row + b;
            let codes = &self.codes[block * code_bytes..(block + 1) * code_bytes];
            let d = self.scales[block];
            match self.kind {
                QKind::Q4_1 => {
                    let m = self.mins[block];
                    for j in 0..BLOCK / 2 {
                        chunk[j] = d * f32::from(codes[j] & 0x0F) + m;
                        chunk[j + BLOCK / 2] = d * f32::from(codes[j] >> 4) + m;
                    }
                }
                QKind::Q8_0 => {
                    for (x, &c) in chunk.iter_mut().zip(codes) {
                        *x = d * f32::from(c as i8);
                    }
                }
            }
        }
    }

    /// The whole matrix as f32 (tests).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.n_rows * self.n_cols];
        for (row, chunk) in out.chunks_exact_mut(self.n_cols.max(1)).enumerate() {
            self.dequantize_row(row, chunk);
        }
        out
    }
}

/// Rows of activations quantised to Q8_1: per block a scale, `d * Σ q` and 32 codes.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    n_rows: usize,
    n_cols: usize,
    scales: Vec<f32>,
    sums: Vec<f32>,
    codes: Vec<i8>,
}

impl Q8Rows {
    /// Quantises a row-major `(n_rows, n_cols)` f32 matrix (ggml's `quantize_row_q8_1`, with the
    /// scales kept in f32).
    pub fn quantize(n_rows: usize, n_cols: usize, values: &[f32]) -> Self {
        assert_eq!(values.len(), n_rows * n_cols, "values do not fill the rows");
        assert!(
            n_cols.is_multiple_of(BLOCK),
            "columns must fill whole blocks"
        );
        let n_blocks = values.len() / BLOCK;
        let mut rows = Q8Rows {
            n_rows,
            n_cols,
            scales: Vec::with_capacity(n_blocks),
            sums: Vec::with_capacity(n_blocks),
            codes: Vec::with_capacity(values.len()),
        };
        for block in values.chunks_exact(BLOCK) {
            let amax = block.iter().fold(0f32, |a, &x| a.max(x.abs()));
            let d = amax / 127.0;
            let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
            let mut sum = 0i32;
            for &x in block {
                let q = (x * inv).round() as i8;
                sum += i32::from(q);
                rows.codes.push(q);
            }
            rows.scales.push(d);
            rows.sums.push(d * sum as f32);
        }
        rows
    }
}

/// Which dot-product kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Portable Rust, the reference.
    Scalar,
    /// AVX2 + FMA (x86-64, detected at run time).
    Avx2,
    /// NEON (aarch64, detected at run time).
    Neon,
}

/// The widest vector extensions our CPU kernels use, in increasing order. A CPU has the sets
/// of its architecture only ([`KERNEL_SETS`]): NEON on aarch64, AVX2 and AVX-512 on x86-64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// Portable Rust only.
    Scalar,
    /// NEON (Advanced SIMD, every aarch64 CPU).
    Neon,
    /// AVX2 and FMA.
    Avx2,
    /// AVX2, FMA and AVX-512F.
    Avx512,
}

impl SimdLevel {
    /// The name `ENVACE_SIMD` takes and the benchmarks record.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Neon => "neon",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }
}

/// The environment variable that lowers [`simd_level`] below what the CPU has (`avx2` or
/// `scalar` on x86-64, `scalar` on aarch64), so that any machine can measure the kernels an
/// older CPU would run.
pub const SIMD_ENV: &str = "ENVACE_SIMD";

/// The kernel sets this architecture's CPUs can have, widest first: the values `ENVACE_SIMD`
/// takes here.
#[cfg(target_arch = "x86_64")]
pub const KERNEL_SETS: &[SimdLevel] = &[SimdLevel::Avx512, SimdLevel::Avx2, SimdLevel::Scalar];
/// The kernel sets this architecture's CPUs can have, widest first: the values `ENVACE_SIMD`
/// takes here.
#[cfg(target_arch = "aarch64")]
pub const KERNEL_SETS: &[SimdLevel] = &[SimdLevel::Neon, SimdLevel::Scalar];
/// The kernel sets this architecture's CPUs can have, widest first: the values `ENVACE_SIMD`
/// takes here.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const KERNEL_SETS: &[SimdLevel] = &[SimdLevel::Scalar];

/// What this CPU has, detected once: the kernels' safety checks read it on every call.
fn detected_simd() -> SimdLevel {
    static DETECTED: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *DETECTED.get_or_init(detect_simd)
}

fn detect_simd() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            return SimdLevel::Avx2;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            return SimdLevel::Neon;
        }
    }
    SimdLevel::Scalar
}

/// The level `ENVACE_SIMD=value` gives on a CPU with `detected`: never above the CPU's; a value
/// that is not one of `sets` (this architecture's [`KERNEL_SETS`]) is an error naming the
/// variable and the values it takes.
pub fn simd_level_from(
    value: Option<&str>,
    detected: SimdLevel,
    sets: &[SimdLevel],
) -> Result<SimdLevel, String> {
    let asked = match value.map(str::trim) {
        None | Some("") => return Ok(detected),
        Some(name) => sets.iter().copied().find(|set| set.name() == name),
    };
    let Some(asked) = asked else {
        let names: Vec<&str> = sets.iter().map(|set| set.name()).collect();
        let listed = match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        return Err(format!(
            "{SIMD_ENV}={:?} is not a kernel set of this CPU ({}); use {listed} (or unset it)",
            value.unwrap_or_default(),
            std::env::consts::ARCH
        ));
    };
    Ok(asked.min(detected))
}

/// [`simd_level`], or the error naming a bad `ENVACE_SIMD`: binaries call it before any work
/// starts, so that a typo is an error message rather than a panic in the first kernel.
pub fn checked_simd_level() -> Result<SimdLevel, String> {
    let value = std::env::var(SIMD_ENV).ok();
    simd_level_from(value.as_deref(), detected_simd(), KERNEL_SETS)
}

/// The vector extensions every CPU kernel of ours uses: the CPU's, or fewer when `ENVACE_SIMD`
/// says so. Read once per process (a bad value panics with [`checked_simd_level`]'s message).
pub fn simd_level() -> SimdLevel {
    static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| checked_simd_level().unwrap_or_else(|err| panic!("{err}")))
}

/// The fastest kernel this CPU supports (within [`simd_level`]).
pub fn best_kernel() -> Kernel {
    match simd_level() {
        SimdLevel::Avx2 | SimdLevel::Avx512 => Kernel::Avx2,
        SimdLevel::Neon => Kernel::Neon,
        SimdLevel::Scalar => Kernel::Scalar,
    }
}

/// Whether the AVX-512 kernels may run (the CPU has AVX-512F and `ENVACE_SIMD` allows it).
#[cfg(target_arch = "x86_64")]
fn avx512_allowed() -> bool {
    simd_level() == SimdLevel::Avx512
}

/// `Σ a[i] · b[i]` over the shorter of two f32 slices, with the AVX2 or NEON kernel where the
/// CPU has it (decoding's attention and small-batch products use it on plain f32 weights).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if best_kernel() == Kernel::Avx2 {
            return avx2::dot_f32_checked(a, b);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if best_kernel() == Kernel::Neon {
            return neon::dot_f32_checked(a, b);
        }
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Four dot products of `w` with `xs[0..4]` at once (each `x` at least as long as `w`): `w` is
/// read once for all four, and four independent sums keep the FMA units busy.
pub fn dot4_f32(w: &[f32], xs: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if best_kernel() == Kernel::Avx2 {
            return avx2::dot4_f32_checked(w, xs);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if best_kernel() == Kernel::Neon {
            return neon::dot4_f32_checked(w, xs);
        }
    }
    xs.map(|x| w.iter().zip(x).map(|(a, b)| a * b).sum())
}

/// The sixteen dot products of four weight rows with four input rows, `out[a][b] = ws[a] ·
/// xs[b]` (every slice at least as long as `ws[0]`): with AVX-512 or NEON each step loads four
/// weight and four input vectors for sixteen multiply-adds; elsewhere it is four [`dot4_f32`].
pub fn dot4x4_f32(ws: [&[f32]; 4], xs: [&[f32]; 4]) -> [[f32; 4]; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512_allowed() {
            return avx512::dot4x4_f32_checked(ws, xs);
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if best_kernel() == Kernel::Neon {
            return neon::dot4x4_f32_checked(ws, xs);
        }
    }
    let n = ws[0].len();
    ws.map(|w| dot4_f32(&w[..n], xs))
}

/// Input rows and weight rows of one [`tile16_f32`] tile.
pub const TILE: usize = 16;

/// One 16 × 16 tile of a batched decode product with no horizontal sums:
/// `out[r][a] = Σ_j w[a·k + j] · xt[j·16 + r]` for the 16 weight rows `a` of `w` (row-major, `k`
/// values each) and 16 input rows `r` given transposed in `xt` (`k` groups of 16, one value per
/// input row). Each step multiplies one vector of the 16 inputs' `j`-th values by a broadcast
/// weight, so the sums build up in lanes and need no reduction at the end, where the dot-product
/// tile ([`dot4x4_f32`]) sums sixteen vectors across lanes per 4 × 4 outputs. `None` where the
/// CPU has neither AVX-512 nor AVX2 (callers then take dot products).
pub fn tile16_f32(xt: &[f32], w: &[f32], k: usize) -> Option<[[f32; TILE]; TILE]> {
    tile16_at(simd_level(), xt, w, k)
}

/// Whether [`tile16_f32`] has a kernel on this CPU (and kernel set).
pub fn has_tile16() -> bool {
    tile16_kernel(simd_level()).is_some()
}

/// A [`tile16_f32`] kernel: transposed inputs, weight rows, `k`.
type Tile16Kernel = unsafe fn(&[f32], &[f32], usize) -> [[f32; TILE]; TILE];

/// The [`tile16_f32`] kernel of `level`, `None` where it has none: the one place that decides
/// which levels tile, for both [`tile16_at`] and [`has_tile16`]. Safety of calling it: the CPU
/// has `level`'s extensions and both slices hold `16 k` values.
fn tile16_kernel(level: SimdLevel) -> Option<Tile16Kernel> {
    match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => Some(avx512::tile16),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => Some(avx2::tile16),
        _ => None,
    }
}

/// [`tile16_f32`] with the kernels of `level` (at most the CPU's).
fn tile16_at(level: SimdLevel, xt: &[f32], w: &[f32], k: usize) -> Option<[[f32; TILE]; TILE]> {
    assert!(
        xt.len() >= k * TILE && w.len() >= k * TILE,
        "tile16_f32: {} transposed inputs and {} weights for k = {k}",
        xt.len(),
        w.len()
    );
    assert!(
        level <= detected_simd(),
        "{level:?} kernels on a CPU without them"
    );
    let kernel = tile16_kernel(level)?;
    // SAFETY: the CPU has the level's extensions (asserted above); both slices hold `16 k`
    // values (asserted above).
    Some(unsafe { kernel(xt, w, k) })
}

/// Values ahead of a tile kernel's column that [`prefetch_rows`] asks for: two cache lines.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 32;

/// Asks the cache for the line [`PREFETCH_AHEAD`] values past column `j` of each of `R` weight
/// rows of `k` values from `w`, and for the line at column `j` of each of the `R` rows one tile
/// ([`TILE`] rows) further on, into the second-level cache. The tile kernels read sixteen
/// (AVX-512) or six (AVX2) rows side by side, one cache line of each every sixteen columns: too
/// many short streams for the hardware prefetcher, which left a batch-16 decode waiting on the
/// weights. The first lines keep the rows in hand; near the end of the rows they are the first
/// lines of the `R` rows that follow, which the kernel (or its next pass) reads next. The second
/// bring in the next tile's rows while this one computes, so that a tile starts on weights
/// already in the core's cache rather than on memory's latency: one tile kernel streaming 64 MB
/// of rows of 256 went from 27–32 to 53–55 GMAC/s with AVX-512 and from 19–26 to 52–53 with AVX2,
/// about its rate on weights in cache (54–58). A prefetch never faults, so the addresses past
/// the end of `w` need no check; they are formed with wrapping arithmetic and never read.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_rows<const R: usize>(w: *const f32, k: usize, j: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1, _mm_prefetch};
    let ahead = j + PREFETCH_AHEAD;
    let at = if ahead < k { ahead } else { R * k + ahead - k };
    for a in 0..R {
        let line = w.wrapping_add(a * k + at).cast::<i8>();
        let next = w.wrapping_add((TILE + a) * k + j).cast::<i8>();
        // SAFETY: a prefetch reads nothing and cannot fault, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(line);
            _mm_prefetch::<_MM_HINT_T1>(next);
        }
    }
}

/// The layout [`tile16_f32`] takes its inputs in: `xt[j·16 + r] = x[r·k + j]` for the 16 rows
/// `r` of `x` (row-major, `k` values each). Whole groups of 16 (AVX-512) or 8 (AVX2) columns
/// go through register transposes; a store per value instead took about 2% of a batch-16
/// decode step's profile, on the calling thread while the other worker waited.
///
/// # Panics
/// When `x` holds fewer than `16 k` values or `xt` is not `16 k` long.
pub fn transpose16_rows(x: &[f32], k: usize, xt: &mut [f32]) {
    transpose16_rows_at(simd_level(), x, k, xt);
}

/// [`transpose16_rows`] with the kernels of `level` (at most the CPU's).
fn transpose16_rows_at(level: SimdLevel, x: &[f32], k: usize, xt: &mut [f32]) {
    assert!(
        x.len() >= TILE * k && xt.len() == TILE * k,
        "transpose16_rows: {} inputs and {} outputs for k = {k}",
        x.len(),
        xt.len()
    );
    assert!(
        level <= detected_simd(),
        "{level:?} kernels on a CPU without them"
    );
    let done = match level {
        // SAFETY (both): the CPU has the level's extensions (asserted above); `x` holds 16 rows
        // of `k` values and `xt` `16 k` (asserted above).
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { avx512::transpose16_rows(x, k, xt) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { avx2::transpose16_rows(x, k, xt) },
        _ => 0,
    };
    for j in done..k {
        for r in 0..TILE {
            xt[j * TILE + r] = x[r * k + j];
        }
    }
}

/// Panics unless `n_rows` rows of `width` values, one every `stride` values, fit in `len`.
fn check_strided(kernel: &str, n_rows: usize, width: usize, len: usize, stride: usize) {
    if let Some(last) = n_rows.checked_sub(1) {
        assert!(
            stride >= width && len >= last * stride + width,
            "{kernel}: {n_rows} rows of stride {stride} do not fit in {len} values"
        );
    }
}

/// `out[j] = q · rows[j]` for the `out.len()` rows that start every `stride` values of `rows`
/// (each at least `q.len()` long): decoding's attention scores, one query against the cached
/// keys. With AVX-512 sixteen keys, with AVX2 eight, share one transposing reduction.
pub fn dots_strided_f32(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    dots_strided_at(simd_level(), q, rows, stride, out);
}

/// [`dots_strided_f32`] with the kernels of `level` (at most the CPU's).
fn dots_strided_at(level: SimdLevel, q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    let d = q.len();
    check_strided("dots_strided_f32", out.len(), d, rows.len(), stride);
    assert!(
        level <= detected_simd(),
        "{level:?} kernels on a CPU without them"
    );
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both): the CPU has the level's extensions (asserted above); the row bounds
        // were checked above.
        SimdLevel::Avx512 => return unsafe { avx512::dots_strided(q, rows, stride, out) },
        SimdLevel::Avx2 => return unsafe { avx2::dots_strided(q, rows, stride, out) },
        SimdLevel::Neon | SimdLevel::Scalar => {}
    }
    #[cfg(target_arch = "aarch64")]
    if level == SimdLevel::Neon {
        // SAFETY: the CPU has NEON (asserted above); the row bounds were checked above.
        return unsafe { neon::dots_strided(q, rows, stride, out) };
    }
    for (j, o) in out.iter_mut().enumerate() {
        let row = &rows[j * stride..j * stride + d];
        *o = q.iter().zip(row).map(|(a, b)| a * b).sum();
    }
}

/// `out += Σ_j weights[j] · rows[j]` for the rows that start every `stride` values of `rows`
/// (each at least `out.len()` long): decoding's attention-weighted sum of the cached values.
/// With AVX-512 or AVX2 the output stays in registers across all rows, 64 values at a time.
pub fn axpy_strided_f32(out: &mut [f32], weights: &[f32], rows: &[f32], stride: usize) {
    axpy_strided_at(simd_level(), out, weights, rows, stride);
}

/// [`axpy_strided_f32`] with the kernels of `level` (at most the CPU's).
fn axpy_strided_at(
    level: SimdLevel,
    out: &mut [f32],
    weights: &[f32],
    rows: &[f32],
    stride: usize,
) {
    let d = out.len();
    check_strided("axpy_strided_f32", weights.len(), d, rows.len(), stride);
    assert!(
        level <= detected_simd(),
        "{level:?} kernels on a CPU without them"
    );
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both): the CPU has the level's extensions (asserted above); the row bounds
        // were checked above.
        SimdLevel::Avx512 => return unsafe { avx512::axpy_strided(out, weights, rows, stride) },
        SimdLevel::Avx2 => return unsafe { avx2::axpy_strided(out, weights, rows, stride) },
        SimdLevel::Neon | SimdLevel::Scalar => {}
    }
    #[cfg(target_arch = "aarch64")]
    if level == SimdLevel::Neon {
        // SAFETY: the CPU has NEON (asserted above); the row bounds were checked above.
        return unsafe { neon::axpy_strided(out, weights, rows, stride) };
    }
    for (j, &w) in weights.iter().enumerate() {
        if w != 0.0 {
            for (o, &v) in out.iter_mut().zip(&rows[j * stride..j * stride + d]) {
                *o += w * v;
            }
        }
    }
}

/// `out[i] = exp((values[i] − shift) · scale)`, 0 where that is NaN, and their sum in f64: the
/// softmax numerators of one row of logits (with `shift` its maximum and `scale` the inverse
/// temperature, so every argument is at most 0). With AVX-512 sixteen, with AVX2 eight at a
/// time by a degree-7 polynomial after range reduction (within a few ulp of the exact value);
/// elsewhere `f32::exp`.
pub fn exp_shifted_f32(values: &[f32], shift: f32, scale: f32, out: &mut [f32]) -> f64 {
    exp_shifted_at(simd_level(), values, shift, scale, out)
}

/// [`exp_shifted_f32`] with the kernels of `level` (at most the CPU's).
fn exp_shifted_at(
    level: SimdLevel,
    values: &[f32],
    shift: f32,
    scale: f32,
    out: &mut [f32],
) -> f64 {
    assert_eq!(values.len(), out.len(), "exp_shifted_f32: lengths differ");
    assert!(
        level <= detected_simd(),
        "{level:?} kernels on a CPU without them"
    );
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both): the CPU has the level's extensions (asserted above); the lengths
        // match.
        SimdLevel::Avx512 => return unsafe { avx512::exp_shifted(values, shift, scale, out) },
        SimdLevel::Avx2 => return unsafe { avx2::exp_shifted(values, shift, scale, out) },
        SimdLevel::Neon | SimdLevel::Scalar => {}
    }
    #[cfg(target_arch = "aarch64")]
    if level == SimdLevel::Neon {
        // SAFETY: the CPU has NEON (asserted above); the lengths match.
        return unsafe { neon::exp_shifted(values, shift, scale, out) };
    }
    exp_shifted_scalar(values, shift, scale, out)
}

/// The vector exponentials' range: below `EXP_LOWEST` exp underflows f32's normal range, and
/// arguments are clamped to `EXP_HIGHEST` (softmax arguments are at most 0 anyway).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const EXP_LOWEST: f32 = -87.336_54;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const EXP_HIGHEST: f32 = 88.0;
/// ln 2 in two parts (Cody and Waite), for an exact `x − k ln 2`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const LN2_HI: f32 = 0.693_359_4;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const LN2_LO: f32 = -2.121_944_4e-4;
/// exp(r)'s Taylor coefficients to r^7, highest first (Horner's scheme).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const EXP_COEFFS: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

fn exp_shifted_scalar(values: &[f32], shift: f32, scale: f32, out: &mut [f32]) -> f64 {
    let mut sum = 0f64;
    for (o, &v) in out.iter_mut().zip(values) {
        let e = ((v - shift) * scale).exp();
        *o = if e.is_nan() { 0.0 } else { e };
        sum += f64::from(*o);
    }
    sum
}

/// `out (m, n) = x (m, k) · wᵀ` with `w: (n, k)` quantised, `x` already quantised to Q8_1;
/// rows of `w` are shared out over rayon's threads.
pub fn matmul(w: &QMatrix, x: &Q8Rows, out: &mut [f32], kernel: Kernel) {
    assert_eq!(w.n_cols, x.n_cols, "matmul: inner dimensions differ");
    let (m, n) = (x.n_rows, w.n_rows);
    assert_eq!(out.len(), m * n, "matmul: output is not (m, n)");
    let blocks_per_row = w.n_cols / BLOCK;
    // Each task computes a run of weight rows against every activation row, so each weight
    // block is read once; results are written transposed and laid out afterwards.
    let rows_per_task = (n / (4 * rayon::current_num_threads().max(1))).clamp(16, 256);
    if m == 1 {
        // One activation row (a decode step): the output row is already in row order.
        out.par_chunks_mut(rows_per_task)
            .enumerate()
            .for_each(|(task, chunk)| {
                let row0 = task * rows_per_task;
                for (r, result) in chunk.iter_mut().enumerate() {
                    *result = dot_row(w, row0 + r, x, 0, blocks_per_row, kernel);
                }
            });
        return;
    }
    let mut out_t = vec![0f32; n * m];
    out_t
        .par_chunks_mut(rows_per_task * m)
        .enumerate()
        .for_each(|(task, chunk)| {
            let row0 = task * rows_per_task;
            for (r, results) in chunk.chunks_exact_mut(m).enumerate() {
                let row = row0 + r;
                for (i, result) in results.iter_mut().enumerate() {
                    *result = dot_row(w, row, x, i, blocks_per_row, kernel);
                }
            }
        });
    for (row, results) in out_t.chunks_exact(m.max(1)).enumerate() {
        for (i, &v) in results.iter().enumerate() {
            out[i * n + row] = v;
        }
    }
}

/// Dot product of weight row `row` with activation row `i`.
fn dot_row(w: &QMatrix, row: usize, x: &Q8Rows, i: usize, n_blocks: usize, kernel: Kernel) -> f32 {
    let wb = row * n_blocks..(row + 1) * n_blocks;
    let xb = i * n_blocks..(i + 1) * n_blocks;
    let w_scales = &w.scales[wb.clone()];
    let x_scales = &x.scales[xb.clone()];
    let x_codes = &x.codes[xb.start * BLOCK..xb.end * BLOCK];
    match w.kind {
        QKind::Q4_1 => {
            let w_mins = &w.mins[wb.clone()];
            let w_codes = &w.codes[wb.start * BLOCK / 2..wb.end * BLOCK / 2];
            let x_sums = &x.sums[xb];
            match kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => {
                    avx2::dot_q4_1(w_codes, w_scales, w_mins, x_codes, x_scales, x_sums)
                }
                #[cfg(target_arch = "aarch64")]
                Kernel::Neon => {
                    neon::dot_q4_1(w_codes, w_scales, w_mins, x_codes, x_scales, x_sums)
                }
                _ => dot_q4_1_scalar(w_codes, w_scales, w_mins, x_codes, x_scales, x_sums),
            }
        }
        QKind::Q8_0 => {
            let w_codes = &w.codes[wb.start * BLOCK..wb.end * BLOCK];
            match kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => avx2::dot_q8_0(w_codes, w_scales, x_codes, x_scales),
                #[cfg(target_arch = "aarch64")]
                Kernel::Neon => neon::dot_q8_0(w_codes, w_scales, x_codes, x_scales),
                _ => dot_q8_0_scalar(w_codes, w_scales, x_codes, x_scales),
            }
        }
    }
}

/// Panics unless every slice of a Q4_1 row product holds `n` blocks: what the vector kernels
/// read without further checks.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn check_q4_1_blocks(
    n: usize,
    w_codes: &[u8],
    w_mins: &[f32],
    x_codes: &[i8],
    x_scales: &[f32],
    x_sums: &[f32],
) {
    assert!(
        w_codes.len() >= n * BLOCK / 2
            && w_mins.len() >= n
            && x_codes.len() >= n * BLOCK
            && x_scales.len() >= n
            && x_sums.len() >= n,
        "dot_q4_1: slices shorter than {n} blocks"
    );
}

/// Panics unless every slice of a Q8_0 row product holds `n` blocks.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn check_q8_0_blocks(n: usize, w_codes: &[u8], x_codes: &[i8], x_scales: &[f32]) {
    assert!(
        w_codes.len() >= n * BLOCK && x_codes.len() >= n * BLOCK && x_scales.len() >= n,
        "dot_q8_0: slices shorter than {n} blocks"
    );
}

/// Q4_1 · Q8_1 over whole blocks, the reference every faster kernel is tested against.
pub fn dot_q4_1_scalar(
    w_codes: &[u8],
    w_scales: &[f32],
    w_mins: &[f32],
    x_codes: &[i8],
    x_scales: &[f32],
    x_sums: &[f32],
) -> f32 {
    let mut total = 0f32;
    for b in 0..w_scales.len() {
        let codes = &w_codes[b * BLOCK / 2..(b + 1) * BLOCK / 2];
        let xs = &x_codes[b * BLOCK..(b + 1) * BLOCK];
        let mut sum = 0i32;
        for j in 0..BLOCK / 2 {
            sum += i32::from(codes[j] & 0x0F) * i32::from(xs[j]);
            sum += i32::from(codes[j] >> 4) * i32::from(xs[j + BLOCK / 2]);
        }
        total += w_scales[b] * x_scales[b] * sum as f32 + w_mins[b] * x_sums[b];
    }
    total
}

/// Q8_0 · Q8_1 over whole blocks (the reference).
pub fn dot_q8_0_scalar(w_codes: &[u8], w_scales: &[f32], x_codes: &[i8], x_scales: &[f32]) -> f32 {
    let mut total = 0f32;
    for b in 0..w_scales.len() {
        let codes = &w_codes[b * BLOCK..(b + 1) * BLOCK];
        let xs = &x_codes[b * BLOCK..(b + 1) * BLOCK];
        let sum: i32 = codes
            .iter()
            .zip(xs)
            .map(|(&c, &x)| i32::from(c as i8) * i32::from(x))
            .sum();
        total += w_scales[b] * x_scales[b] * sum as f32;
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! The AVX-512 kernel; callers have checked that the CPU has AVX-512F.

    use std::arch::x86_64::*;

    /// [`super::dot4x4_f32`] for callers that checked the CPU has AVX-512F.
    pub(super) fn dot4x4_f32_checked(ws: [&[f32]; 4], xs: [&[f32]; 4]) -> [[f32; 4]; 4] {
        let n = ws[0].len();
        assert!(
            ws.iter().chain(&xs).all(|s| s.len() >= n),
            "dot4x4_f32: a row is shorter than the first weight row"
        );
        // SAFETY: the caller checked AVX-512F; every slice holds at least `n` values.
        unsafe { dot4x4_f32(ws, xs, n) }
    }

    #[target_feature(enable = "avx512f")]
    fn dot4x4_f32(ws: [&[f32]; 4], xs: [&[f32]; 4], n: usize) -> [[f32; 4]; 4] {
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: `i + 16 <= n` and every slice holds at least `n` values.
            unsafe {
                let x = xs.map(|x| _mm512_loadu_ps(x.as_ptr().add(i)));
                for (acc, w) in acc.iter_mut().zip(&ws) {
                    let w = _mm512_loadu_ps(w.as_ptr().add(i));
                    for (a, &x) in acc.iter_mut().zip(&x) {
                        *a = _mm512_fmadd_ps(w, x, *a);
                    }
                }
            }
            i += 16;
        }
        let mut sums = [0f32; 16];
        // SAFETY: `sums` holds sixteen values.
        unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), reduce16(acc)) };
        let mut out = [[0f32; 4]; 4];
        for (a, (out, w)) in out.iter_mut().zip(&ws).enumerate() {
            for (r, (o, x)) in out.iter_mut().zip(&xs).enumerate() {
                *o = sums[4 * a + r] + (i..n).map(|j| w[j] * x[j]).sum::<f32>();
            }
        }
        out
    }

    /// [`super::dots_strided_f32`]. Safety: AVX-512F is present and `rows` holds
    /// `out.len()` rows of `q.len()` values every `stride` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dots_strided(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        let d = q.len();
        let full = d / 16 * 16;
        let tail = |j: usize| -> f32 { (full..d).map(|i| q[i] * rows[j * stride + i]).sum() };
        let mut j = 0;
        while j + 16 <= out.len() {
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            let mut i = 0;
            while i < full {
                // SAFETY: `i + 16 <= d`; rows `j..j + 16` hold `d` values each (caller).
                unsafe {
                    let qv = _mm512_loadu_ps(q.as_ptr().add(i));
                    for (a, four) in acc.iter_mut().enumerate() {
                        for (r, acc) in four.iter_mut().enumerate() {
                            let row = rows.as_ptr().add((j + 4 * a + r) * stride + i);
                            *acc = _mm512_fmadd_ps(qv, _mm512_loadu_ps(row), *acc);
                        }
                    }
                }
                i += 16;
            }
            // SAFETY: `out[j..j + 16]` exists.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(j), reduce16(acc)) };
            if full < d {
                for (r, o) in out[j..j + 16].iter_mut().enumerate() {
                    *o += tail(j + r);
                }
            }
            j += 16;
        }
        for (r, o) in out.iter_mut().enumerate().skip(j) {
            let mut acc = _mm512_setzero_ps();
            let mut i = 0;
            while i < full {
                // SAFETY: as above, for row `r`.
                unsafe {
                    let row = rows.as_ptr().add(r * stride + i);
                    acc = _mm512_fmadd_ps(
                        _mm512_loadu_ps(q.as_ptr().add(i)),
                        _mm512_loadu_ps(row),
                        acc,
                    );
                }
                i += 16;
            }
            *o = _mm512_reduce_add_ps(acc) + tail(r);
        }
    }

    /// [`super::axpy_strided_f32`]. Safety: AVX-512F is present and `rows` holds
    /// `weights.len()` rows of `out.len()` values every `stride` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn axpy_strided(
        out: &mut [f32],
        weights: &[f32],
        rows: &[f32],
        stride: usize,
    ) {
        let d = out.len();
        let mut i = 0;
        // Four vectors (64 values) of the output at a time, held in registers over every row.
        while i < d {
            let width = (d - i).min(64);
            let n_full = width / 16;
            let mut acc = [_mm512_setzero_ps(); 4];
            for (j, &w) in weights.iter().enumerate() {
                if w == 0.0 {
                    continue;
                }
                let wv = _mm512_set1_ps(w);
                for (v, acc) in acc.iter_mut().enumerate().take(n_full) {
                    // SAFETY: `i + 16 v + 16 <= d` and row `j` holds `d` values (caller).
                    unsafe {
                        let row = rows.as_ptr().add(j * stride + i + 16 * v);
                        *acc = _mm512_fmadd_ps(wv, _mm512_loadu_ps(row), *acc);
                    }
                }
                for c in i + 16 * n_full..i + width {
                    out[c] += w * rows[j * stride + c];
                }
            }
            for (v, acc) in acc.iter().enumerate().take(n_full) {
                // SAFETY: `i + 16 v + 16 <= d`.
                unsafe {
                    let o = out.as_mut_ptr().add(i + 16 * v);
                    _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), *acc));
                }
            }
            i += width;
        }
    }

    /// [`super::exp_shifted_f32`]. Safety: AVX-512F is present and the lengths match.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn exp_shifted(
        values: &[f32],
        shift: f32,
        scale: f32,
        out: &mut [f32],
    ) -> f64 {
        // exp(x) = 2^n · exp(r), n = round(x / ln 2), r = x − n ln 2 (in two parts, Cody and
        // Waite), |r| ≤ ln 2 / 2; exp(r) by its Taylor series to r^7 (error below 1e-8).
        use super::{EXP_COEFFS, EXP_HIGHEST, EXP_LOWEST, LN2_HI, LN2_LO};
        let (shift_v, scale_v) = (_mm512_set1_ps(shift), _mm512_set1_ps(scale));
        let lowest = _mm512_set1_ps(EXP_LOWEST);
        let mut sums = [_mm512_setzero_pd(); 2];
        let n = values.len() / 16 * 16;
        let mut i = 0;
        while i < n {
            // SAFETY: `i + 16 <= values.len() == out.len()`.
            let v = unsafe { _mm512_loadu_ps(values.as_ptr().add(i)) };
            let x = _mm512_mul_ps(_mm512_sub_ps(v, shift_v), scale_v);
            // NaN and arguments past underflow give 0 (an ordered compare is false for NaN).
            let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, lowest);
            let x = _mm512_min_ps(_mm512_max_ps(x, lowest), _mm512_set1_ps(EXP_HIGHEST));
            let k = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
            );
            let r = _mm512_fnmadd_ps(k, _mm512_set1_ps(LN2_HI), x);
            let r = _mm512_fnmadd_ps(k, _mm512_set1_ps(LN2_LO), r);
            let mut p = _mm512_set1_ps(EXP_COEFFS[0]);
            for &c in &EXP_COEFFS[1..] {
                p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
            }
            let e = _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, k));
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i), e) };
            sums[0] = _mm512_add_pd(sums[0], _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            sums[1] = _mm512_add_pd(
                sums[1],
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                    _mm512_castps_pd(e),
                ))),
            );
            i += 16;
        }
        _mm512_reduce_add_pd(_mm512_add_pd(sums[0], sums[1]))
            + super::exp_shifted_scalar(&values[n..], shift, scale, &mut out[n..])
    }

    /// [`super::tile16_f32`]. Safety: AVX-512F is present and `xt` and `w` hold `16 k` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile16(xt: &[f32], w: &[f32], k: usize) -> [[f32; 16]; 16] {
        // acc[a], lane r: weight row a times input row r.
        let mut acc = [_mm512_setzero_ps(); 16];
        let (xp, wp) = (xt.as_ptr(), w.as_ptr());
        for j in 0..k {
            if j % 16 == 0 {
                super::prefetch_rows::<16>(wp, k, j);
            }
            // SAFETY: `j < k`: `xt` holds `16 k` values and row `a < 16` of `w` `k` (caller).
            unsafe {
                let x = _mm512_loadu_ps(xp.add(j * 16));
                for (a, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(_mm512_set1_ps(*wp.add(a * k + j)), x, *acc);
                }
            }
        }
        let rows = transpose16(acc);
        let mut out = [[0f32; 16]; 16];
        for (out, row) in out.iter_mut().zip(rows) {
            // SAFETY: `out` holds sixteen values.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), row) };
        }
        out
    }

    /// [`super::transpose16_rows`] for whole groups of 16 columns; returns the columns done.
    /// Safety: AVX-512F is present, `x` holds `16 k` values and `xt` `16 k`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose16_rows(x: &[f32], k: usize, xt: &mut [f32]) -> usize {
        let whole = k / 16 * 16;
        let (xp, tp) = (x.as_ptr(), xt.as_mut_ptr());
        for j0 in (0..whole).step_by(16) {
            // SAFETY: rows `r < 16` hold `k ≥ j0 + 16` values each, and `xt` `16 k` (caller).
            unsafe {
                let rows: [__m512; 16] =
                    std::array::from_fn(|r| _mm512_loadu_ps(xp.add(r * k + j0)));
                for (j, column) in transpose16(rows).into_iter().enumerate() {
                    _mm512_storeu_ps(tp.add((j0 + j) * 16), column);
                }
            }
        }
        whole
    }

    /// The transpose of a 16 × 16 matrix held as sixteen row vectors: 32-bit then 64-bit
    /// interleaves within 128-bit lanes, then two rounds of 128-bit lane shuffles.
    #[target_feature(enable = "avx512f")]
    fn transpose16(m: [__m512; 16]) -> [__m512; 16] {
        // a[2i], a[2i + 1]: rows 2i and 2i + 1 interleaved, columns 4L, 4L + 1 and 4L + 2,
        // 4L + 3 of each 128-bit lane L.
        let mut a = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            a[2 * i] = _mm512_unpacklo_ps(m[2 * i], m[2 * i + 1]);
            a[2 * i + 1] = _mm512_unpackhi_ps(m[2 * i], m[2 * i + 1]);
        }
        // b[4i + c]: rows 4i..4i + 4 of column 4L + c in lane L.
        let mut b = [_mm512_setzero_ps(); 16];
        let pd = _mm512_castps_pd;
        for i in 0..4 {
            let (a0, a1, a2, a3) = (a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]);
            b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a0), pd(a2)));
            b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a0), pd(a2)));
            b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a1), pd(a3)));
            b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a1), pd(a3)));
        }
        // Column 4L + c gathers lane L of b[c], b[4 + c], b[8 + c], b[12 + c].
        let mut t = [_mm512_setzero_ps(); 16];
        for c in 0..4 {
            let even_0 = _mm512_shuffle_f32x4::<0b10_00_10_00>(b[c], b[4 + c]);
            let odd_0 = _mm512_shuffle_f32x4::<0b11_01_11_01>(b[c], b[4 + c]);
            let even_1 = _mm512_shuffle_f32x4::<0b10_00_10_00>(b[8 + c], b[12 + c]);
            let odd_1 = _mm512_shuffle_f32x4::<0b11_01_11_01>(b[8 + c], b[12 + c]);
            t[c] = _mm512_shuffle_f32x4::<0b10_00_10_00>(even_0, even_1);
            t[8 + c] = _mm512_shuffle_f32x4::<0b11_01_11_01>(even_0, even_1);
            t[4 + c] = _mm512_shuffle_f32x4::<0b10_00_10_00>(odd_0, odd_1);
            t[12 + c] = _mm512_shuffle_f32x4::<0b11_01_11_01>(odd_0, odd_1);
        }
        t
    }

    /// The sixteen horizontal sums of `acc[a][r]`, as lane `4a + r` of one vector: a
    /// transposing tree of 15 shuffle-and-add steps instead of sixteen separate reductions.
    #[target_feature(enable = "avx512f")]
    fn reduce16(acc: [[__m512; 4]; 4]) -> __m512 {
        // Within each 128-bit lane, pairs of vectors: [a0+a2, b0+b2, a1+a3, b1+b3].
        let pair = |a: __m512, b: __m512| {
            _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b))
        };
        // Then pairs of pairs: [a, b, c, d] per 128-bit lane.
        let quad = |ab: __m512, cd: __m512| {
            let (ab, cd) = (_mm512_castps_pd(ab), _mm512_castps_pd(cd));
            _mm512_add_ps(
                _mm512_castpd_ps(_mm512_unpacklo_pd(ab, cd)),
                _mm512_castpd_ps(_mm512_unpackhi_pd(ab, cd)),
            )
        };
        // Then the four 128-bit lanes of two such vectors, added in twos.
        let lanes = |x: __m512, y: __m512| {
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
                _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
            )
        };
        let [r0, r1, r2, r3] = acc.map(|[v0, v1, v2, v3]| quad(pair(v0, v1), pair(v2, v3)));
        lanes(lanes(r0, r1), lanes(r2, r3))
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The AVX2 + FMA kernels; callers have checked that the CPU has both.

    use std::arch::x86_64::*;

    /// [`super::tile16_f32`]. Safety: AVX2 and FMA are present and `xt` and `w` hold `16 k`
    /// values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile16(xt: &[f32], w: &[f32], k: usize) -> [[f32; 16]; 16] {
        // Weight rows 0..6, 6..12 and 12..16 against all sixteen inputs (two vectors of eight):
        // twelve sums (eight in the last pass) stay in registers, with the two input vectors and
        // a broadcast weight. Twelve independent sums keep both FMA pipes busy through their
        // four-cycle latency, where eight (four rows at a time) left no slack, and the inputs
        // are read three times instead of four.
        let mut sums = [[0f32; 16]; 16];
        // SAFETY (all three): the caller's; rows `a0..a0 + R ≤ 16`.
        unsafe {
            rows_tile::<6>(xt, w, k, 0, &mut sums);
            rows_tile::<6>(xt, w, k, 6, &mut sums);
            rows_tile::<4>(xt, w, k, 12, &mut sums);
        }
        // sums[a][r] → out[r][a].
        let mut out = [[0f32; 16]; 16];
        for (a, sums) in sums.iter().enumerate() {
            for (r, &v) in sums.iter().enumerate() {
                out[r][a] = v;
            }
        }
        out
    }

    /// [`super::transpose16_rows`] for whole groups of 8 columns, as two 8 × 8 register
    /// transposes (rows 0..8 and 8..16); returns the columns done. Safety: AVX2 is present, `x`
    /// holds `16 k` values and `xt` `16 k`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose16_rows(x: &[f32], k: usize, xt: &mut [f32]) -> usize {
        let whole = k / 8 * 8;
        let (xp, tp) = (x.as_ptr(), xt.as_mut_ptr());
        for j0 in (0..whole).step_by(8) {
            for half in 0..2 {
                // SAFETY: rows `8 half + r < 16` hold `k ≥ j0 + 8` values each, and `xt` `16 k`
                // (caller).
                unsafe {
                    let rows: [__m256; 8] =
                        std::array::from_fn(|r| _mm256_loadu_ps(xp.add((8 * half + r) * k + j0)));
                    for (j, column) in transpose8(rows).into_iter().enumerate() {
                        _mm256_storeu_ps(tp.add((j0 + j) * 16 + 8 * half), column);
                    }
                }
            }
        }
        whole
    }

    /// The transpose of an 8 × 8 matrix held as eight row vectors: 32-bit then 64-bit
    /// interleaves within 128-bit lanes, then a swap of 128-bit lanes.
    #[target_feature(enable = "avx2")]
    fn transpose8(m: [__m256; 8]) -> [__m256; 8] {
        // a[2i], a[2i + 1]: rows 2i and 2i + 1 interleaved (columns 0, 1 / 2, 3 of each lane).
        let a: [__m256; 8] = std::array::from_fn(|i| {
            if i % 2 == 0 {
                _mm256_unpacklo_ps(m[i], m[i + 1])
            } else {
                _mm256_unpackhi_ps(m[i - 1], m[i])
            }
        });
        let pd = _mm256_castps_pd;
        // b[4i + c]: rows 4i..4i + 4 of column c (and c + 4 in the upper lane).
        let mut b = [_mm256_setzero_ps(); 8];
        for i in 0..2 {
            let (a0, a1, a2, a3) = (a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]);
            b[4 * i] = _mm256_castpd_ps(_mm256_unpacklo_pd(pd(a0), pd(a2)));
            b[4 * i + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(pd(a0), pd(a2)));
            b[4 * i + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(pd(a1), pd(a3)));
            b[4 * i + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(pd(a1), pd(a3)));
        }
        // Column c: the lower lanes of b[c] and b[4 + c]; column c + 4: their upper lanes.
        std::array::from_fn(|j| {
            let c = j % 4;
            if j < 4 {
                _mm256_permute2f128_ps::<0x20>(b[c], b[4 + c])
            } else {
                _mm256_permute2f128_ps::<0x31>(b[c], b[4 + c])
            }
        })
    }

    /// `sums[a0 + a][r]` for weight rows `a0..a0 + R` of one [`tile16`]. Safety: as there, and
    /// `a0 + R ≤ 16`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_tile<const R: usize>(
        xt: &[f32],
        w: &[f32],
        k: usize,
        a0: usize,
        sums: &mut [[f32; 16]; 16],
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let (xp, wp) = (xt.as_ptr(), w.as_ptr());
        for j in 0..k {
            if j % 16 == 0 {
                super::prefetch_rows::<R>(wp.wrapping_add(a0 * k), k, j);
            }
            // SAFETY: `j < k`: `xt` holds `16 k` values and row `a0 + a < 16` of `w` `k`
            // (caller).
            unsafe {
                let x = [
                    _mm256_loadu_ps(xp.add(j * 16)),
                    _mm256_loadu_ps(xp.add(j * 16 + 8)),
                ];
                for (a, acc) in acc.iter_mut().enumerate() {
                    let wv = _mm256_broadcast_ss(&*wp.add((a0 + a) * k + j));
                    acc[0] = _mm256_fmadd_ps(wv, x[0], acc[0]);
                    acc[1] = _mm256_fmadd_ps(wv, x[1], acc[1]);
                }
            }
        }
        for (a, acc) in acc.iter().enumerate() {
            // SAFETY: `sums[a0 + a]` holds sixteen values.
            unsafe {
                _mm256_storeu_ps(sums[a0 + a].as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(sums[a0 + a].as_mut_ptr().add(8), acc[1]);
            }
        }
    }

    /// [`super::exp_shifted_f32`]. Safety: AVX2 and FMA are present and the lengths match.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_shifted(
        values: &[f32],
        shift: f32,
        scale: f32,
        out: &mut [f32],
    ) -> f64 {
        // exp(x) = 2^k · exp(r), k = round(x / ln 2), r = x − k ln 2 (in two parts), |r| ≤
        // ln 2 / 2, exp(r) by its Taylor series to r^7. AVX2 has no `scalef`: 2^k is built in
        // the exponent field, which the clamp to [-87.3, 88] keeps normal (k in [-126, 127]).
        use super::{EXP_COEFFS, EXP_HIGHEST, EXP_LOWEST, LN2_HI, LN2_LO};
        let (shift_v, scale_v) = (_mm256_set1_ps(shift), _mm256_set1_ps(scale));
        let (lowest, highest) = (_mm256_set1_ps(EXP_LOWEST), _mm256_set1_ps(EXP_HIGHEST));
        let mut sums = [_mm256_setzero_pd(); 2];
        let n = values.len() / 8 * 8;
        let mut i = 0;
        while i < n {
            // SAFETY: `i + 8 <= values.len() == out.len()`.
            let v = unsafe { _mm256_loadu_ps(values.as_ptr().add(i)) };
            let x = _mm256_mul_ps(_mm256_sub_ps(v, shift_v), scale_v);
            // NaN and arguments past underflow give 0 (an ordered compare is false for NaN).
            let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(x, lowest);
            let x = _mm256_min_ps(_mm256_max_ps(x, lowest), highest);
            let k = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            );
            let r = _mm256_fnmadd_ps(k, _mm256_set1_ps(LN2_HI), x);
            let r = _mm256_fnmadd_ps(k, _mm256_set1_ps(LN2_LO), r);
            let mut p = _mm256_set1_ps(EXP_COEFFS[0]);
            for &c in &EXP_COEFFS[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
            }
            let two_k = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(k),
                _mm256_set1_epi32(127),
            )));
            let e = _mm256_and_ps(_mm256_mul_ps(p, two_k), keep);
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), e) };
            sums[0] = _mm256_add_pd(sums[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            sums[1] = _mm256_add_pd(sums[1], _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
            i += 8;
        }
        let mut lanes = [0f64; 4];
        // SAFETY: `lanes` holds four values.
        unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(sums[0], sums[1])) };
        lanes.iter().sum::<f64>()
            + super::exp_shifted_scalar(&values[n..], shift, scale, &mut out[n..])
    }

    /// [`super::axpy_strided_f32`]. Safety: AVX2 and FMA are present and `rows` holds
    /// `weights.len()` rows of `out.len()` values every `stride` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn axpy_strided(
        out: &mut [f32],
        weights: &[f32],
        rows: &[f32],
        stride: usize,
    ) {
        let d = out.len();
        let mut i = 0;
        // Eight vectors (64 values) of the output at a time, held in registers over every row.
        while i < d {
            let width = (d - i).min(64);
            let n_full = width / 8;
            let mut acc = [_mm256_setzero_ps(); 8];
            for (j, &w) in weights.iter().enumerate() {
                if w == 0.0 {
                    continue;
                }
                let wv = _mm256_set1_ps(w);
                for (v, acc) in acc.iter_mut().enumerate().take(n_full) {
                    // SAFETY: `i + 8 v + 8 <= d` and row `j` holds `d` values (caller).
                    unsafe {
                        let row = rows.as_ptr().add(j * stride + i + 8 * v);
                        *acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(row), *acc);
                    }
                }
                for c in i + 8 * n_full..i + width {
                    out[c] += w * rows[j * stride + c];
                }
            }
            for (v, acc) in acc.iter().enumerate().take(n_full) {
                // SAFETY: `i + 8 v + 8 <= d`.
                unsafe {
                    let o = out.as_mut_ptr().add(i + 8 * v);
                    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), *acc));
                }
            }
            i += width;
        }
    }

    /// [`super::dots_strided_f32`]. Safety: AVX2 and FMA are present and `rows` holds
    /// `out.len()` rows of `q.len()` values every `stride` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dots_strided(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        let d = q.len();
        let full = d / 8 * 8;
        let tail = |j: usize| -> f32 { (full..d).map(|i| q[i] * rows[j * stride + i]).sum() };
        let mut j = 0;
        // Eight keys at a time: each query vector is loaded once for all eight.
        while j + 8 <= out.len() {
            let mut acc = [_mm256_setzero_ps(); 8];
            let mut i = 0;
            while i < full {
                // SAFETY: `i + 8 <= d`; rows `j..j + 8` hold `d` values each (caller).
                unsafe {
                    let qv = _mm256_loadu_ps(q.as_ptr().add(i));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let row = rows.as_ptr().add((j + r) * stride + i);
                        *acc = _mm256_fmadd_ps(qv, _mm256_loadu_ps(row), *acc);
                    }
                }
                i += 8;
            }
            // SAFETY: `out[j..j + 8]` exists.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(j), reduce8(acc)) };
            if full < d {
                for (r, o) in out[j..j + 8].iter_mut().enumerate() {
                    *o += tail(j + r);
                }
            }
            j += 8;
        }
        for (r, o) in out.iter_mut().enumerate().skip(j) {
            let row = &rows[r * stride..r * stride + d];
            *o = dot_f32_checked(q, row);
        }
    }

    /// The eight horizontal sums of `acc[r]`, as lane `r` of one vector.
    #[target_feature(enable = "avx2,fma")]
    fn reduce8(acc: [__m256; 8]) -> __m256 {
        // Pairwise horizontal adds within 128-bit halves: after two rounds each half holds the
        // half-sums of four rows; adding the halves crosswise completes them.
        let t0 = _mm256_hadd_ps(acc[0], acc[1]);
        let t1 = _mm256_hadd_ps(acc[2], acc[3]);
        let t2 = _mm256_hadd_ps(acc[4], acc[5]);
        let t3 = _mm256_hadd_ps(acc[6], acc[7]);
        let u0 = _mm256_hadd_ps(t0, t1);
        let u1 = _mm256_hadd_ps(t2, t3);
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(u0, u1),
            _mm256_permute2f128_ps::<0x31>(u0, u1),
        )
    }

    use super::BLOCK;

    /// Q4_1 · Q8_1 (see [`super::dot_q4_1_scalar`]).
    pub(super) fn dot_q4_1(
        w_codes: &[u8],
        w_scales: &[f32],
        w_mins: &[f32],
        x_codes: &[i8],
        x_scales: &[f32],
        x_sums: &[f32],
    ) -> f32 {
        let n = w_scales.len();
        super::check_q4_1_blocks(n, w_codes, w_mins, x_codes, x_scales, x_sums);
        // SAFETY: `super::best_kernel` selects this kernel only when the CPU reports AVX2 and
        // FMA, and the lengths were checked above.
        unsafe { dot_q4_1_impl(n, w_codes, w_scales, w_mins, x_codes, x_scales, x_sums) }
    }

    #[target_feature(enable = "avx2,fma")]
    fn dot_q4_1_impl(
        n: usize,
        w_codes: &[u8],
        w_scales: &[f32],
        w_mins: &[f32],
        x_codes: &[i8],
        x_scales: &[f32],
        x_sums: &[f32],
    ) -> f32 {
        let (w_scales, w_mins) = (&w_scales[..n], &w_mins[..n]);
        let (x_scales, x_sums) = (&x_scales[..n], &x_sums[..n]);
        // Two accumulators in registers, so consecutive blocks' multiply-adds do not wait on
        // each other.
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut b = 0;
        while b + 1 < n {
            let scale0 = _mm256_set1_ps(w_scales[b] * x_scales[b]);
            let scale1 = _mm256_set1_ps(w_scales[b + 1] * x_scales[b + 1]);
            acc0 = _mm256_fmadd_ps(scale0, q4_1_block(w_codes, x_codes, b), acc0);
            acc1 = _mm256_fmadd_ps(scale1, q4_1_block(w_codes, x_codes, b + 1), acc1);
            b += 2;
        }
        if b < n {
            let scale = _mm256_set1_ps(w_scales[b] * x_scales[b]);
            acc0 = _mm256_fmadd_ps(scale, q4_1_block(w_codes, x_codes, b), acc0);
        }
        horizontal_sum(_mm256_add_ps(acc0, acc1)) + dot_f32(w_mins, x_sums)
    }

    /// The 32 code × activation products of Q4_1 block `b`, summed into 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn q4_1_block(w_codes: &[u8], x_codes: &[i8], b: usize) -> __m256 {
        // SAFETY: block `b` lies inside both slices (the caller checked their lengths against
        // the number of blocks); the loads are unaligned.
        let (packed, xs) = unsafe {
            (
                _mm_loadu_si128(w_codes.as_ptr().add(b * BLOCK / 2).cast()),
                _mm256_loadu_si256(x_codes.as_ptr().add(b * BLOCK).cast()),
            )
        };
        // Low nibbles are weights 0..16, high nibbles weights 16..32: the same order as the 32
        // activation codes.
        let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
        let codes = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
        // u8 × i8 pairs summed to i16 (at most 2 · 15 · 128, no saturation), then to i32.
        let pairs = _mm256_maddubs_epi16(codes, xs);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// [`dot_f32`] for callers that checked the CPU has AVX2 and FMA.
    pub(super) fn dot_f32_checked(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: every caller checked `best_kernel() == Kernel::Avx2` (AVX2 and FMA present).
        unsafe { dot_f32(a, b) }
    }

    /// [`super::dot4_f32`] for callers that checked the CPU has AVX2 and FMA.
    pub(super) fn dot4_f32_checked(w: &[f32], xs: [&[f32]; 4]) -> [f32; 4] {
        assert!(
            xs.iter().all(|x| x.len() >= w.len()),
            "dot4_f32: an x is shorter than w"
        );
        // SAFETY: every caller checked `best_kernel() == Kernel::Avx2`; lengths checked above.
        unsafe { dot4_f32(w, xs) }
    }

    #[target_feature(enable = "avx2,fma")]
    fn dot4_f32(w: &[f32], xs: [&[f32]; 4]) -> [f32; 4] {
        let n = w.len();
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: `i + 8 <= n` and every slice holds at least `n` values (checked above).
            unsafe {
                let vw = _mm256_loadu_ps(w.as_ptr().add(i));
                for (a, x) in acc.iter_mut().zip(&xs) {
                    *a = _mm256_fmadd_ps(vw, _mm256_loadu_ps(x.as_ptr().add(i)), *a);
                }
            }
            i += 8;
        }
        let mut out = [0f32; 4];
        for (o, (a, x)) in out.iter_mut().zip(acc.iter().zip(&xs)) {
            *o = horizontal_sum(*a);
            for j in i..n {
                *o += w[j] * x[j];
            }
        }
        out
    }

    /// `Σ a[i] · b[i]` over the shorter slice, eight at a time.
    #[target_feature(enable = "avx2,fma")]
    fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: `i + 8 <= n` and both slices hold at least `n` values.
            let (va, vb) = unsafe {
                (
                    _mm256_loadu_ps(a.as_ptr().add(i)),
                    _mm256_loadu_ps(b.as_ptr().add(i)),
                )
            };
            acc = _mm256_fmadd_ps(va, vb, acc);
            i += 8;
        }
        let mut total = horizontal_sum(acc);
        for j in i..n {
            total += a[j] * b[j];
        }
        total
    }

    /// Q8_0 · Q8_1 (see [`super::dot_q8_0_scalar`]).
    pub(super) fn dot_q8_0(
        w_codes: &[u8],
        w_scales: &[f32],
        x_codes: &[i8],
        x_scales: &[f32],
    ) -> f32 {
        let n = w_scales.len();
        super::check_q8_0_blocks(n, w_codes, x_codes, x_scales);
        // SAFETY: as for `dot_q4_1`.
        unsafe { dot_q8_0_impl(n, w_codes, w_scales, x_codes, x_scales) }
    }

    #[target_feature(enable = "avx2,fma")]
    fn dot_q8_0_impl(
        n: usize,
        w_codes: &[u8],
        w_scales: &[f32],
        x_codes: &[i8],
        x_scales: &[f32],
    ) -> f32 {
        let w_scales = &w_scales[..n];
        let x_scales = &x_scales[..n];
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut b = 0;
        while b + 1 < n {
            let scale0 = _mm256_set1_ps(w_scales[b] * x_scales[b]);
            let scale1 = _mm256_set1_ps(w_scales[b + 1] * x_scales[b + 1]);
            acc0 = _mm256_fmadd_ps(scale0, q8_0_block(w_codes, x_codes, b), acc0);
            acc1 = _mm256_fmadd_ps(scale1, q8_0_block(w_codes, x_codes, b + 1), acc1);
            b += 2;
        }
        if b < n {
            let scale = _mm256_set1_ps(w_scales[b] * x_scales[b]);
            acc0 = _mm256_fmadd_ps(scale, q8_0_block(w_codes, x_codes, b), acc0);
        }
        horizontal_sum(_mm256_add_ps(acc0, acc1))
    }

    /// The 32 products of Q8_0 block `b` with the activation codes, summed into 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn q8_0_block(w_codes: &[u8], x_codes: &[i8], b: usize) -> __m256 {
        // SAFETY: block `b` lies inside both slices (the caller checked their lengths).
        let (ws, xs) = unsafe {
            (
                _mm256_loadu_si256(w_codes.as_ptr().add(b * BLOCK).cast()),
                _mm256_loadu_si256(x_codes.as_ptr().add(b * BLOCK).cast()),
            )
        };
        // maddubs wants one unsigned operand: |w| times x with w's sign moved onto x.
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(ws, ws), _mm256_sign_epi8(xs, ws));
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    #[target_feature(enable = "avx2,fma")]
    fn horizontal_sum(v: __m256) -> f32 {
        let halves = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
        let one = _mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1));
        _mm_cvtss_f32(one)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel set this CPU can run, the scalar reference first.
    fn levels() -> Vec<SimdLevel> {
        let levels: Vec<SimdLevel> = KERNEL_SETS.iter().rev().copied().collect();
        let found: Vec<SimdLevel> = levels
            .iter()
            .copied()
            .filter(|&l| l <= detected_simd())
            .collect();
        if found.len() < levels.len() {
            eprintln!("this CPU runs only {found:?}: the other kernel sets are not checked here");
        }
        found
    }

    #[test]
    fn simd_env_lowers_the_kernel_set_but_never_raises_it() {
        use SimdLevel::{Avx2, Avx512, Neon, Scalar};
        let x86 = [Avx512, Avx2, Scalar];
        assert_eq!(simd_level_from(None, Avx512, &x86), Ok(Avx512));
        assert_eq!(simd_level_from(Some(""), Avx2, &x86), Ok(Avx2));
        assert_eq!(simd_level_from(Some("avx2"), Avx512, &x86), Ok(Avx2));
        assert_eq!(simd_level_from(Some(" scalar "), Avx512, &x86), Ok(Scalar));
        assert_eq!(simd_level_from(Some("avx512"), Avx2, &x86), Ok(Avx2));
        let err = simd_level_from(Some("AVX2"), Avx512, &x86).unwrap_err();
        assert!(err.contains("ENVACE_SIMD=\"AVX2\"") && err.contains("avx512, avx2 or scalar"));
        // Another architecture's sets are not this CPU's: an error, never a silent fallback.
        let err = simd_level_from(Some("neon"), Avx512, &x86).unwrap_err();
        assert!(err.contains("not a kernel set of this CPU"), "{err}");
        let arm = [Neon, Scalar];
        assert_eq!(simd_level_from(Some("scalar"), Neon, &arm), Ok(Scalar));
        assert_eq!(simd_level_from(Some("neon"), Neon, &arm), Ok(Neon));
        let err = simd_level_from(Some("avx2"), Neon, &arm).unwrap_err();
        assert!(err.contains("use neon or scalar"), "{err}");
        // This build's own sets, widest first, end with the scalar reference.
        assert_eq!(KERNEL_SETS.last(), Some(&Scalar));
        assert!(KERNEL_SETS.contains(&detected_simd()));
        // Every aarch64 Linux CPU has NEON, so its kernels are the ones tested there.
        #[cfg(target_arch = "aarch64")]
        assert_eq!(detected_simd(), Neon);
    }

    #[test]
    fn dot_products_match_plain_sums_at_every_length() {
        for n in [0, 1, 3, 4, 7, 8, 15, 16, 17, 33, 100, 256] {
            let rows: Vec<Vec<f32>> = (0..5).map(|r| values(n + r, 50 + r as u64)).collect();
            let plain = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(p, q)| p * q).sum() };
            // Slices of different lengths: the shorter one decides.
            let got = dot_f32(&rows[0], &rows[1]);
            let expected = plain(&rows[0], &rows[1]);
            assert!(
                (got - expected).abs() < 1e-4,
                "dot_f32, n = {n}: {got} vs {expected}"
            );
            let w = &rows[0][..n];
            let xs = [&rows[1][..], &rows[2][..], &rows[3][..], &rows[4][..]];
            for (x, got) in xs.iter().zip(dot4_f32(w, xs)) {
                let expected = plain(w, x);
                assert!(
                    (got - expected).abs() < 1e-4,
                    "dot4_f32, n = {n}: {got} vs {expected}"
                );
            }
        }
    }

    /// Deterministic values in [-1, 1) (SplitMix64-style hashing of the index and a seed).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let mut z = (i ^ seed.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// f32 reference: the dequantised weights times the dequantised activations.
    fn reference(w: &QMatrix, x: &Q8Rows) -> Vec<f32> {
        let wf = w.dequantize();
        let k = w.n_cols;
        let xf: Vec<f32> = x
            .codes
            .iter()
            .enumerate()
            .map(|(idx, &q)| x.scales[idx / BLOCK] * f32::from(q))
            .collect();
        let mut out = vec![0f32; x.n_rows * w.n_rows];
        for i in 0..x.n_rows {
            for r in 0..w.n_rows {
                out[i * w.n_rows + r] = (0..k)
                    .map(|c| f64::from(wf[r * k + c]) * f64::from(xf[i * k + c]))
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn the_sixteen_by_sixteen_tile_matches_plain_dot_products_with_every_kernel() {
        for level in levels() {
            for k in [1, 7, 16, 33, 256] {
                let w = values(16 * k, 40);
                let x: Vec<Vec<f32>> = (0..16).map(|r| values(k, 41 + r)).collect();
                // The inputs transposed: k groups of sixteen, one value per input row.
                let xt: Vec<f32> = (0..k).flat_map(|j| x.iter().map(move |x| x[j])).collect();
                let Some(tile) = tile16_at(level, &xt, &w, k) else {
                    assert!(
                        matches!(level, SimdLevel::Scalar | SimdLevel::Neon),
                        "{level:?} has a tile kernel"
                    );
                    continue;
                };
                for (r, x) in x.iter().enumerate() {
                    for a in 0..16 {
                        let row = &w[a * k..(a + 1) * k];
                        let expected: f32 = row.iter().zip(x).map(|(p, q)| p * q).sum();
                        let diff = (tile[r][a] - expected).abs();
                        assert!(
                            diff < 1e-4 * (k as f32).sqrt(),
                            "{level:?}, k = {k}, input {r}, weight {a}: {} vs {expected}",
                            tile[r][a]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_sixteen_row_transpose_matches_a_plain_loop_with_every_kernel() {
        for level in levels() {
            // Whole groups of 16 and of 8 columns, and columns left over after them.
            for k in [1, 7, 8, 15, 16, 33, 256, 770] {
                // Sixteen rows, with values beyond them that must not be read into `xt`.
                let x = values(16 * k + 5, 50 + k as u64);
                let mut xt = vec![f32::NAN; 16 * k];
                transpose16_rows_at(level, &x, k, &mut xt);
                for j in 0..k {
                    for r in 0..16 {
                        assert_eq!(
                            xt[j * 16 + r],
                            x[r * k + j],
                            "{level:?}, k = {k}, column {j}, row {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_four_by_four_tile_matches_plain_dot_products() {
        for n in [5, 16, 40, 256] {
            let rows: Vec<Vec<f32>> = (0..8).map(|r| values(n, 30 + r)).collect();
            let ws = std::array::from_fn(|a| rows[a].as_slice());
            let xs = std::array::from_fn(|b| rows[4 + b].as_slice());
            let tile = dot4x4_f32(ws, xs);
            for (a, w) in ws.iter().enumerate() {
                for (b, x) in xs.iter().enumerate() {
                    let expected: f32 = w.iter().zip(*x).map(|(p, q)| p * q).sum();
                    let diff = (tile[a][b] - expected).abs();
                    assert!(
                        diff < 1e-4,
                        "n = {n}, ({a}, {b}): {} vs {expected}",
                        tile[a][b]
                    );
                }
            }
        }
    }

    #[test]
    fn the_vector_exponential_matches_f32_exp() {
        let mut values: Vec<f32> = values(1000, 5).iter().map(|v| v * 60.0).collect();
        values.extend([
            f32::NAN,
            f32::NEG_INFINITY,
            -87.0,
            -88.0,
            -200.0,
            0.0,
            1e-30,
        ]);
        for (level, (shift, scale)) in levels()
            .into_iter()
            .flat_map(|l| [(0.0, 1.0), (60.0, 1.0), (30.0, 2.0), (10.0, 0.5)].map(|a| (l, a)))
        {
            let mut out = vec![f32::NAN; values.len()];
            let sum = exp_shifted_at(level, &values, shift, scale, &mut out);
            let mut expected_sum = 0f64;
            for (&v, &got) in values.iter().zip(&out) {
                let expected = f64::from((v - shift) * scale).exp();
                let expected = if expected.is_nan() { 0.0 } else { expected };
                expected_sum += expected as f32 as f64;
                let tolerance = expected * 4.0 * f64::from(f32::EPSILON) + 1e-37;
                assert!(
                    (f64::from(got) - expected).abs() <= tolerance,
                    "{level:?}: exp(({v} − {shift}) · {scale}): {got} vs {expected}"
                );
            }
            assert!(
                (sum - expected_sum).abs() <= expected_sum * 1e-6 + 1e-30,
                "{level:?}: sum {sum} vs {expected_sum}"
            );
        }
    }

    #[test]
    fn the_strided_attention_kernels_match_plain_loops() {
        for level in levels() {
            strided_kernels_match_plain_loops(level);
        }
    }

    fn strided_kernels_match_plain_loops(level: SimdLevel) {
        for d in [5, 8, 16, 64, 80, 130] {
            for n_rows in [0, 1, 7, 8, 9, 15, 16, 17, 37] {
                let stride = d + 3;
                let rows = values(n_rows * stride + d, 7 + d as u64);
                let q = values(d, 11);
                let mut scores = vec![f32::NAN; n_rows];
                dots_strided_at(level, &q, &rows, stride, &mut scores);
                // Some weights zero, as masked keys are.
                let weights: Vec<f32> = (0..n_rows)
                    .map(|j| if j % 5 == 2 { 0.0 } else { scores[j] })
                    .collect();
                let start = values(d, 13);
                let mut out = start.clone();
                axpy_strided_at(level, &mut out, &weights, &rows, stride);
                for j in 0..n_rows {
                    let row = &rows[j * stride..j * stride + d];
                    let expected: f32 = q.iter().zip(row).map(|(a, b)| a * b).sum();
                    let diff = (scores[j] - expected).abs();
                    assert!(
                        diff < 1e-4,
                        "{level:?}: d {d}, {n_rows} rows, score {j}: {diff}"
                    );
                }
                for c in 0..d {
                    let expected = start[c]
                        + (0..n_rows)
                            .map(|j| weights[j] * rows[j * stride + c])
                            .sum::<f32>();
                    let diff = (out[c] - expected).abs();
                    assert!(
                        diff < 1e-3,
                        "{level:?}: d {d}, {n_rows} rows, output {c}: {diff}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_kernel_matches_the_reference_over_many_shapes() {
        let shapes = [
            (1, 1, 32),
            (1, 3, 64),
            (2, 17, 96),
            (1, 64, 576),
            (5, 40, 1536),
            (32, 300, 576),
            (3, 1000, 64),
        ];
        let kernels = if best_kernel() == Kernel::Scalar {
            eprintln!("no vector kernels on this CPU: only the scalar kernel is checked");
            vec![Kernel::Scalar]
        } else {
            vec![Kernel::Scalar, best_kernel()]
        };
        for (seed, &(m, n, k)) in shapes.iter().enumerate() {
            for kind in [QKind::Q4_1, QKind::Q8_0] {
                let w = QMatrix::quantize(kind, n, k, &values(n * k, seed as u64));
                let mut xs = values(m * k, 1000 + seed as u64);
                // Large and all-zero blocks too.
                xs.iter_mut().take(BLOCK).for_each(|x| *x *= 100.0);
                if m > 1 {
                    xs[k..k + BLOCK].iter_mut().for_each(|x| *x = 0.0);
                }
                let x = Q8Rows::quantize(m, k, &xs);
                let expected = reference(&w, &x);
                let mut scalar = vec![0f32; m * n];
                matmul(&w, &x, &mut scalar, Kernel::Scalar);
                for &kernel in &kernels {
                    let mut got = vec![0f32; m * n];
                    matmul(&w, &x, &mut got, kernel);
                    for (idx, (&g, &e)) in got.iter().zip(&expected).enumerate() {
                        let tolerance = 1e-4 * (1.0 + e.abs()) * (k as f32).sqrt();
                        assert!(
                            (g - e).abs() <= tolerance,
                            "{kind:?} {kernel:?} ({m}, {n}, {k}) out[{idx}] = {g}, expected {e}"
                        );
                        // The integer sums are exact, so kernels differ only by float order.
                        let s = scalar[idx];
                        assert!(
                            (g - s).abs() <= 1e-5 * (1.0 + s.abs()) * (k as f32).sqrt(),
                            "{kind:?} {kernel:?} ({m}, {n}, {k}) out[{idx}] = {g}, scalar {s}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn gguf_bytes_parse_and_rows_permute_stack_and_dequantize() {
        // One Q4_1 row of one block: d = 0.5, m = -1, codes j → j % 16 (low) and 15 - j (high).
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&f16::from_f32(0.5).to_le_bytes());
        bytes.extend_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let w = QMatrix::from_gguf_bytes(QKind::Q4_1, 1, 32, &bytes).unwrap();
        let row = w.dequantize();
        assert_eq!(row[0], -1.0);
        assert_eq!(row[15], 0.5 * 15.0 - 1.0);
        assert_eq!(row[16], 0.5 * 15.0 - 1.0);
        assert_eq!(row[31], -1.0);
        let err = QMatrix::from_gguf_bytes(QKind::Q4_1, 2, 32, &bytes).unwrap_err();
        assert!(err.contains("20 bytes of Q4_1 data, expected 40"), "{err}");

        let a = QMatrix::quantize(QKind::Q8_0, 3, 64, &values(192, 7));
        let stacked = QMatrix::stack(&[a.clone(), a.clone()]).unwrap();
        assert_eq!(stacked.n_rows(), 6);
        let swapped = stacked.permute_rows(&[5, 0]);
        let full = stacked.dequantize();
        assert_eq!(
            swapped.dequantize(),
            [&full[320..384], &full[0..64]].concat()
        );
        let other = QMatrix::quantize(QKind::Q4_1, 1, 64, &values(64, 8));
        assert!(QMatrix::stack(&[a, other]).is_err());
    }
}
