//! The BERT encoder: embeddings, 12 post-norm transformer layers, over a batch of token
//! sequences laid end to end in one `[tokens, hidden]` matrix (each matmul then streams its
//! weights once for the whole batch; attention stays within each sequence).
//!
//! Linear layers run in integers: the 4-bit weights are expanded once at load to signed
//! bytes (-8..7) with one f32 scale per block of 32, activations are quantized per block of
//! 32 to bytes (scale = max |x| / 127), and each block contributes
//! `w_scale * a_scale * sum(w_i * a_i)`. Integer sums are exact in any order, so the two
//! kernels ([`Kernel`]) agree up to the order of f32 additions: the portable one (plain
//! loops, any CPU) and an AVX2 one (`maddubs`/`madd`, 32 products per instruction pair,
//! each weight block reused across a tile of 4 tokens), picked at run time. Rows of the
//! output are spread over the rayon pool. The element-wise steps (quantization, GELU) are
//! written branch-free so they vectorise, and are compiled once more for AVX2.
//!
//! Why one file of ~700 lines of code (the rest is tests): the two kernels and the layer
//! loop that calls them share their block layout and must change together.

use anyhow::{Result, bail};
use rayon::prelude::*;

use super::format::{BLOCK, BLOCK_BYTES, DType, Parsed, Shape, f16_to_f32};

/// Which dot-product kernel the encoder runs; both give the same vectors (to f32 rounding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Plain Rust for any CPU (the reference the faster one is tested against).
    Portable,
    /// x86-64 with AVX2 and FMA.
    Avx2,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn detect() -> Kernel {
        if Kernel::Avx2.is_available() { Kernel::Avx2 } else { Kernel::Portable }
    }

    /// Can this CPU run `self`?
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx2 => false,
        }
    }
}

/// A 4-bit weight matrix `[rows, cols]`, expanded to one signed byte per weight.
pub(super) struct QMatrix {
    rows: usize,
    cols: usize,
    weights: Vec<i8>,
    scales: Vec<f32>,
}

impl QMatrix {
    pub(super) fn from_q4(bytes: &[u8], rows: usize, cols: usize) -> QMatrix {
        let mut weights = vec![0i8; rows * cols];
        let mut scales = Vec::with_capacity(rows * cols / BLOCK);
        for (block, out) in bytes.chunks_exact(BLOCK_BYTES).zip(weights.chunks_exact_mut(BLOCK)) {
            scales.push(f16_to_f32(u16::from_le_bytes([block[0], block[1]])));
            // Byte j holds weight j (low nibble) and weight j + 16 (high nibble).
            for (j, &q) in block[2..].iter().enumerate() {
                out[j] = (q & 0x0f) as i8 - 8;
                out[j + 16] = (q >> 4) as i8 - 8;
            }
        }
        QMatrix { rows, cols, weights, scales }
    }

    /// Row `row`, dequantized (the tests compare the integer path with it).
    #[cfg(test)]
    fn row_f32(&self, row: usize, out: &mut [f32]) {
        let w = &self.weights[row * self.cols..(row + 1) * self.cols];
        let s = &self.scales[row * self.cols / BLOCK..(row + 1) * self.cols / BLOCK];
        for ((o, w), s) in out.chunks_exact_mut(BLOCK).zip(w.chunks_exact(BLOCK)).zip(s) {
            for (o, &w) in o.iter_mut().zip(w) {
                *o = f32::from(w) * s;
            }
        }
    }
}

/// Unit vectors held as signed bytes with one scale per 32 values (the encoder's
/// activation format: scale = max |x| / 127), a quarter of their f32 size, and scanned with
/// the encoder's integer kernel. A dot product of 384 values comes out within 2e-3 of the
/// f32 one (tested), close enough to pick candidates; callers that rank by it exactly
/// recompute the few they keep from the f32 vectors.
pub(crate) struct ByteVectors {
    rows: QMatrix,
    kernel: Kernel,
}

/// Rows per rayon task of a scan, and the size below which a scan stays on the caller's
/// thread (a small store is not worth the hand-off to the pool).
const SCAN_TASK_ROWS: usize = 4096;
const SCAN_PARALLEL_FROM: usize = 8192;

impl ByteVectors {
    /// No rows of `dim` values (a multiple of 32), scanned with `kernel` (one this CPU runs).
    pub fn new(dim: usize, kernel: Kernel) -> Result<ByteVectors> {
        if dim == 0 || !dim.is_multiple_of(BLOCK) {
            bail!("vectors of {dim} values: the byte format needs a multiple of {BLOCK}");
        }
        if !kernel.is_available() {
            bail!("this CPU cannot run the {kernel:?} kernel");
        }
        Ok(ByteVectors { rows: QMatrix { rows: 0, cols: dim, weights: Vec::new(), scales: Vec::new() }, kernel })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.rows.rows
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.rows.cols
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.rows.rows == 0
    }

    /// Append `v` (of the dimension given to [`ByteVectors::new`]) as the last row.
    pub fn push(&mut self, v: &[f32]) {
        let m = &mut self.rows;
        assert_eq!(v.len(), m.cols, "a vector of another dimension");
        let at = m.weights.len();
        m.weights.resize(at + m.cols, 0);
        m.scales.resize(m.scales.len() + m.cols / BLOCK, 0.0);
        let blocks = m.cols / BLOCK;
        quantize_blocks(v, &mut m.weights[at..], &mut m.scales[m.rows * blocks..]);
        m.rows += 1;
    }

    /// Overwrite row `row` with `v`.
    pub fn set(&mut self, row: usize, v: &[f32]) {
        let m = &mut self.rows;
        assert!(row < m.rows && v.len() == m.cols, "row {row} of {} or another dimension", m.rows);
        let blocks = m.cols / BLOCK;
        quantize_blocks(
            v,
            &mut m.weights[row * m.cols..(row + 1) * m.cols],
            &mut m.scales[row * blocks..(row + 1) * blocks],
        );
    }

    /// Remove row `row` by moving the last row into its place (the caller renumbers that
    /// one from `len()` to `row`).
    pub fn swap_remove(&mut self, row: usize) {
        let m = &mut self.rows;
        assert!(row < m.rows, "row {row} of {}", m.rows);
        let (cols, blocks, last) = (m.cols, m.cols / BLOCK, m.rows - 1);
        if row != last {
            m.weights.copy_within(last * cols..(last + 1) * cols, row * cols);
            m.scales.copy_within(last * blocks..(last + 1) * blocks, row * blocks);
        }
        m.weights.truncate(last * cols);
        m.scales.truncate(last * blocks);
        m.rows = last;
    }

    /// The dot product of `query` with every row, in row order (spread over the rayon
    /// pool for large tables).
    pub fn dots(&self, query: &[f32]) -> Vec<f32> {
        let m = &self.rows;
        assert_eq!(query.len(), m.cols, "a query of another dimension");
        let mut q = Quantized::default();
        q.quantize(query, m.cols, self.kernel);
        let mut out = vec![0f32; m.rows];
        if m.rows < SCAN_PARALLEL_FROM {
            dot_rows(self.kernel, m, 0, &q, &mut out);
        } else {
            out.par_chunks_mut(SCAN_TASK_ROWS).enumerate().for_each(|(task, chunk)| {
                dot_rows(self.kernel, m, task * SCAN_TASK_ROWS, &q, chunk);
            });
        }
        out
    }

    /// Bytes the rows take.
    pub fn footprint(&self) -> usize {
        self.rows.weights.capacity() + self.rows.scales.capacity() * 4
    }
}

/// Row-major 4-bit rows read straight from the mapped file (the 96M-weight vocabulary
/// table is only ever read a row at a time, so it is not expanded).
pub(super) struct Q4Rows<'a> {
    pub bytes: &'a [u8],
    pub cols: usize,
}

impl Q4Rows<'_> {
    pub(super) fn row_f32(&self, row: usize, out: &mut [f32]) {
        let per_row = self.cols / BLOCK * BLOCK_BYTES;
        let row_bytes = &self.bytes[row * per_row..(row + 1) * per_row];
        for (block, o) in row_bytes.chunks_exact(BLOCK_BYTES).zip(out.chunks_exact_mut(BLOCK)) {
            let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
            for (j, &q) in block[2..].iter().enumerate() {
                o[j] = f32::from((q & 0x0f) as i8 - 8) * d;
                o[j + 16] = f32::from((q >> 4) as i8 - 8) * d;
            }
        }
    }
}

struct Linear {
    weight: QMatrix,
    bias: Vec<f32>,
}

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
    out_norm: LayerNorm,
}

pub(super) struct Encoder {
    pub shape: Shape,
    /// Set only to a kernel [`Kernel::is_available`] accepts (the AVX2 code relies on it).
    kernel: Kernel,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Encoder {
    pub(super) fn load(parsed: &Parsed<'_>, data: &[u8]) -> Result<Encoder> {
        let s = parsed.shape;
        let (h, ff) = (s.hidden, s.ffn);
        let linear = |name: &str, rows: usize, cols: usize| -> Result<Linear> {
            let t = parsed.tensor(&format!("{name}.w"), DType::Q4, rows * cols)?;
            Ok(Linear {
                weight: QMatrix::from_q4(&data[t.offset..t.offset + t.bytes], rows, cols),
                bias: parsed.f32_tensor(data, &format!("{name}.b"), rows)?,
            })
        };
        let norm = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                weight: parsed.f32_tensor(data, &format!("{name}.w"), h)?,
                bias: parsed.f32_tensor(data, &format!("{name}.b"), h)?,
            })
        };
        let mut layers = Vec::with_capacity(s.layers);
        for l in 0..s.layers {
            layers.push(Layer {
                query: linear(&format!("l{l}.q"), h, h)?,
                key: linear(&format!("l{l}.k"), h, h)?,
                value: linear(&format!("l{l}.v"), h, h)?,
                attn_out: linear(&format!("l{l}.ao"), h, h)?,
                attn_norm: norm(&format!("l{l}.aln"))?,
                ff_in: linear(&format!("l{l}.fi"), ff, h)?,
                ff_out: linear(&format!("l{l}.fo"), h, ff)?,
                out_norm: norm(&format!("l{l}.oln"))?,
            });
        }
        let token_type_all = parsed.tensors.get("emb.type").map(|t| t.elements).unwrap_or(0);
        if token_type_all < h {
            bail!("tensor `emb.type` is missing or smaller than one row");
        }
        let mut token_type = parsed.f32_tensor(data, "emb.type", token_type_all)?;
        token_type.truncate(h);
        Ok(Encoder {
            shape: s,
            kernel: Kernel::detect(),
            positions: parsed.f32_tensor(data, "emb.pos", s.max_positions * h)?,
            token_type,
            embed_norm: norm("emb.ln")?,
            layers,
        })
    }

    pub(super) fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Run on `kernel` from now on; an error if this CPU cannot.
    pub(super) fn set_kernel(&mut self, kernel: Kernel) -> Result<()> {
        if !kernel.is_available() {
            bail!("this CPU cannot run the {kernel:?} embedding kernel");
        }
        self.kernel = kernel;
        Ok(())
    }

    /// Mean-pooled (not normalized) outputs of each sequence of `ids`; every sequence
    /// holds its own `<s>`/`</s>` and fits `max_positions`.
    pub(super) fn forward(&self, words: &Q4Rows<'_>, sequences: &[&[u32]]) -> Vec<Vec<f32>> {
        let h = self.shape.hidden;
        let total: usize = sequences.iter().map(|s| s.len()).sum();
        let mut spans = Vec::with_capacity(sequences.len());
        let mut x = vec![0f32; total * h];
        let mut at = 0;
        for seq in sequences {
            for (pos, &id) in seq.iter().enumerate() {
                let row = &mut x[(at + pos) * h..(at + pos + 1) * h];
                words.row_f32(id as usize, row);
                let p = &self.positions[pos * h..(pos + 1) * h];
                for ((r, p), t) in row.iter_mut().zip(p).zip(&self.token_type) {
                    *r += p + t;
                }
            }
            spans.push(at..at + seq.len());
            at += seq.len();
        }
        layer_norm(&mut x, None, &self.embed_norm, h, self.shape.ln_eps);
        let kernel = self.kernel;
        let mut q = vec![0f32; total * h];
        let mut k = vec![0f32; total * h];
        let mut v = vec![0f32; total * h];
        let mut ctx = vec![0f32; total * h];
        let mut tmp = vec![0f32; total * h];
        let mut mid = vec![0f32; total * self.shape.ffn];
        let mut acts = Quantized::default();
        let mut scratch = Vec::new();
        for layer in &self.layers {
            acts.quantize(&x, h, kernel);
            linear(kernel, &layer.query, &acts, &mut q, &mut scratch);
            linear(kernel, &layer.key, &acts, &mut k, &mut scratch);
            linear(kernel, &layer.value, &acts, &mut v, &mut scratch);
            attention(&q, &k, &v, &mut ctx, &spans, h, self.shape.heads);
            acts.quantize(&ctx, h, kernel);
            linear(kernel, &layer.attn_out, &acts, &mut tmp, &mut scratch);
            layer_norm(&mut x, Some(&tmp), &layer.attn_norm, h, self.shape.ln_eps);
            acts.quantize(&x, h, kernel);
            linear(kernel, &layer.ff_in, &acts, &mut mid, &mut scratch);
            mid.par_chunks_mut(GELU_CHUNK).for_each(|c| gelu_slice(kernel, c));
            acts.quantize(&mid, self.shape.ffn, kernel);
            linear(kernel, &layer.ff_out, &acts, &mut tmp, &mut scratch);
            layer_norm(&mut x, Some(&tmp), &layer.out_norm, h, self.shape.ln_eps);
        }
        spans
            .iter()
            .map(|span| {
                let mut mean = vec![0f32; h];
                for t in span.clone() {
                    for (m, v) in mean.iter_mut().zip(&x[t * h..(t + 1) * h]) {
                        *m += v;
                    }
                }
                let n = span.len().max(1) as f32;
                mean.iter_mut().for_each(|m| *m /= n);
                mean
            })
            .collect()
    }
}

/// Values per rayon task of the GELU pass (a few tasks per core for one short text).
const GELU_CHUNK: usize = 8192;

/// Activations `[tokens, cols]` quantized per block of 32 to signed bytes.
#[derive(Default)]
struct Quantized {
    values: Vec<i8>,
    scales: Vec<f32>,
    cols: usize,
}

impl Quantized {
    fn quantize(&mut self, x: &[f32], cols: usize, kernel: Kernel) {
        self.cols = cols;
        self.values.resize(x.len(), 0);
        self.scales.resize(x.len() / BLOCK, 0.0);
        match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an `Avx2` kernel exists only where the CPU has AVX2 and FMA.
            Kernel::Avx2 => unsafe { avx2::quantize(x, &mut self.values, &mut self.scales) },
            _ => quantize_blocks(x, &mut self.values, &mut self.scales),
        }
    }

    fn tokens(&self) -> usize {
        self.values.len().checked_div(self.cols).unwrap_or(0)
    }
}

/// 1.5 x 2^23: adding and subtracting it rounds an f32 below 2^22 to the nearest integer
/// (ties to even) with plain arithmetic, which vectorises (`f32::round` is a libm call).
const ROUND_MAGIC: f32 = 12_582_912.0;

/// Per block of 32: scale = max |x| / 127, values = x / scale rounded. Written branch-free
/// over fixed lanes so the compiler vectorises it; both kernels run this same code.
#[inline(always)]
fn quantize_blocks(x: &[f32], values: &mut [i8], scales: &mut [f32]) {
    for ((block, out), scale) in x.chunks_exact(BLOCK).zip(values.chunks_exact_mut(BLOCK)).zip(scales.iter_mut()) {
        let mut lanes = [0f32; 8];
        for chunk in block.chunks_exact(8) {
            for (l, v) in lanes.iter_mut().zip(chunk) {
                *l = l.max(v.abs());
            }
        }
        let max = lanes.iter().fold(0f32, |m, &v| m.max(v));
        *scale = max / 127.0;
        let inv = if max > 0.0 { 127.0 / max } else { 0.0 };
        for (o, v) in out.iter_mut().zip(block) {
            let q = ((v * inv).clamp(-127.0, 127.0) + ROUND_MAGIC) - ROUND_MAGIC;
            *o = q as i8;
        }
    }
}

/// Output rows each rayon task computes (a few KiB of weights stay in L1 across tokens).
const ROWS_PER_TASK: usize = 16;

/// `out[t, r] = bias[r] + sum_c W[r, c] * x[t, c]`, with `x` quantized; `scratch` is the
/// transposed result, kept between calls so the hot loop does not allocate.
fn linear(kernel: Kernel, layer: &Linear, x: &Quantized, out: &mut [f32], scratch: &mut Vec<f32>) {
    let (rows, cols) = (layer.weight.rows, layer.weight.cols);
    let tokens = x.tokens();
    assert_eq!(cols, x.cols, "activations do not match the weight matrix");
    assert!(out.len() >= tokens * rows, "output too small for {tokens} x {rows}");
    // Computed transposed ([rows, tokens]) so each task owns a contiguous slice.
    scratch.clear();
    scratch.resize(rows * tokens, 0.0);
    scratch.par_chunks_mut(ROWS_PER_TASK * tokens.max(1)).enumerate().for_each(|(task, chunk)| {
        dot_rows(kernel, &layer.weight, task * ROWS_PER_TASK, x, chunk);
    });
    for (t, o) in out.chunks_exact_mut(rows).take(tokens).enumerate() {
        for (r, (o, b)) in o.iter_mut().zip(&layer.bias).enumerate() {
            *o = b + scratch[r * tokens + t];
        }
    }
}

/// `out[(r - first) * tokens + t]` = the dot product of weight row `r` with token `t`,
/// for the rows `out` holds.
fn dot_rows(kernel: Kernel, w: &QMatrix, first: usize, x: &Quantized, out: &mut [f32]) {
    let tokens = x.tokens();
    let rows = out.len().checked_div(tokens).unwrap_or(0);
    assert!(first + rows <= w.rows && x.values.len() == tokens * w.cols && x.scales.len() * BLOCK == x.values.len());
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx2` kernel exists only where the CPU has AVX2 and FMA; the sizes
        // the kernel reads within were checked just above.
        Kernel::Avx2 => unsafe { avx2::dot_rows(w, first, x, out) },
        _ => dot_rows_portable(w, first, &x.values, &x.scales, tokens, out),
    }
}

/// The reference kernel: exact integer sums per block, scaled and added in order.
fn dot_rows_portable(w: &QMatrix, first: usize, a: &[i8], a_scales: &[f32], tokens: usize, out: &mut [f32]) {
    let cols = w.cols;
    let blocks = cols / BLOCK;
    for (i, out_row) in out.chunks_exact_mut(tokens.max(1)).enumerate() {
        let r = first + i;
        let w_row = &w.weights[r * cols..(r + 1) * cols];
        let w_scales = &w.scales[r * blocks..(r + 1) * blocks];
        for (t, o) in out_row.iter_mut().enumerate().take(tokens) {
            let a_row = &a[t * cols..(t + 1) * cols];
            let s_row = &a_scales[t * blocks..(t + 1) * blocks];
            let mut acc = 0f32;
            for ((wb, ab), (ws, as_)) in
                w_row.chunks_exact(BLOCK).zip(a_row.chunks_exact(BLOCK)).zip(w_scales.iter().zip(s_row))
            {
                let mut sum = 0i32;
                for (&x, &y) in wb.iter().zip(ab) {
                    sum += i32::from(i16::from(x) * i16::from(y));
                }
                acc += sum as f32 * ws * as_;
            }
            *o = acc;
        }
    }
}

/// GELU over a slice, on the chosen kernel's instruction set.
fn gelu_slice(kernel: Kernel, xs: &mut [f32]) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx2` kernel exists only where the CPU has AVX2 and FMA.
        Kernel::Avx2 => unsafe { avx2::gelu(xs) },
        _ => gelu_all(xs),
    }
}

#[inline(always)]
fn gelu_all(xs: &mut [f32]) {
    xs.iter_mut().for_each(|x| *x = gelu(*x));
}

/// The AVX2 + FMA kernels (x86-64, chosen at run time by [`Kernel::detect`]).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{BLOCK, QMatrix, Quantized};

    /// Tokens per tile: each weight block is loaded once and used for this many tokens
    /// (4 accumulators plus the operands fit the 16 vector registers).
    const TILE: usize = 4;

    /// [`super::dot_rows_portable`] with 32 products per instruction pair: `maddubs`
    /// multiplies unsigned by signed bytes, so the weights' signs move onto the
    /// activations (`sign`), and `|w| <= 8`, `|a| <= 127` keep every pair sum (<= 2032)
    /// clear of its 16-bit saturation (so do [`super::ByteVectors`]' `|w| <= 127`: <= 32258);
    /// `madd` by ones widens to 32 bits. The integer sum of a block is exact, as in the
    /// portable kernel; only the order of the f32 additions differs (8 lanes, then across them).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `x` must hold `tokens x w.cols` values with one
    /// scale per block, and rows `first..first + out.len() / tokens` must exist in `w`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(w: &QMatrix, first: usize, x: &Quantized, out: &mut [f32]) {
        let tokens = x.tokens();
        let mut t0 = 0;
        while t0 < tokens {
            // SAFETY: forwarded from the caller; every tile stays below `tokens`.
            let n = unsafe {
                match tokens - t0 {
                    1 => tile::<1>(w, first, x, t0, out),
                    2 => tile::<2>(w, first, x, t0, out),
                    3 => tile::<3>(w, first, x, t0, out),
                    _ => tile::<TILE>(w, first, x, t0, out),
                }
            };
            t0 += n;
        }
    }

    /// Tokens `t0..t0 + T` against every row of this task. Returns `T`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile<const T: usize>(w: &QMatrix, first: usize, x: &Quantized, t0: usize, out: &mut [f32]) -> usize {
        let (cols, tokens) = (w.cols, x.tokens());
        let blocks = cols / BLOCK;
        let ones = _mm256_set1_epi16(1);
        let acts = x.values.as_ptr();
        let act_scales = x.scales.as_ptr();
        for (i, out_row) in out.chunks_exact_mut(tokens).enumerate() {
            let r = first + i;
            // SAFETY (all pointer arithmetic below): row `r` < w.rows and token
            // `t0 + j` < tokens (the caller's contract), block `b` < cols / BLOCK.
            let w_row = unsafe { w.weights.as_ptr().add(r * cols) };
            let w_scales = unsafe { w.scales.as_ptr().add(r * blocks) };
            let mut acc = [_mm256_setzero_ps(); T];
            for b in 0..blocks {
                let wv = unsafe { _mm256_loadu_si256(w_row.add(b * BLOCK).cast()) };
                let w_abs = _mm256_sign_epi8(wv, wv);
                let w_scale = _mm256_set1_ps(unsafe { *w_scales.add(b) });
                for (j, acc) in acc.iter_mut().enumerate() {
                    let t = t0 + j;
                    let av = unsafe { _mm256_loadu_si256(acts.add(t * cols + b * BLOCK).cast()) };
                    let pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(av, wv));
                    let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                    let scale = _mm256_mul_ps(w_scale, _mm256_set1_ps(unsafe { *act_scales.add(t * blocks + b) }));
                    *acc = _mm256_fmadd_ps(sums, scale, *acc);
                }
            }
            for (j, acc) in acc.iter().enumerate() {
                out_row[t0 + j] = horizontal_sum(*acc);
            }
        }
        T
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn horizontal_sum(v: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
    }

    /// [`super::quantize_blocks`] compiled for AVX2 (same arithmetic, same results).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize(x: &[f32], values: &mut [i8], scales: &mut [f32]) {
        super::quantize_blocks(x, values, scales);
    }

    /// [`super::gelu`] over a slice, compiled for AVX2 (same arithmetic, same results).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gelu(xs: &mut [f32]) {
        super::gelu_all(xs);
    }
}

/// Scaled dot-product attention of every token over the tokens of its own sequence.
fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    ctx: &mut [f32],
    spans: &[std::ops::Range<usize>],
    h: usize,
    heads: usize,
) {
    let hd = h / heads;
    let scale = 1.0 / (hd as f32).sqrt();
    ctx.par_chunks_mut(h).enumerate().for_each_init(Vec::new, |probs, (t, out)| {
        let Some(span) = spans.iter().find(|s| s.contains(&t)) else { return };
        probs.clear();
        probs.resize(span.len(), 0f32);
        for head in 0..heads {
            let qh = &q[t * h + head * hd..t * h + (head + 1) * hd];
            let mut max = f32::NEG_INFINITY;
            for (p, s) in probs.iter_mut().zip(span.clone()) {
                let kh = &k[s * h + head * hd..s * h + (head + 1) * hd];
                *p = dot_lanes(qh, kh) * scale;
                max = max.max(*p);
            }
            let mut sum = 0f32;
            for p in probs.iter_mut() {
                *p = (*p - max).exp();
                sum += *p;
            }
            let o = &mut out[head * hd..(head + 1) * hd];
            o.iter_mut().for_each(|x| *x = 0.0);
            for (p, s) in probs.iter().zip(span.clone()) {
                let weight = p / sum;
                let vh = &v[s * h + head * hd..s * h + (head + 1) * hd];
                for (o, x) in o.iter_mut().zip(vh) {
                    *o += weight * x;
                }
            }
        }
    });
}

/// Dot product summed in 8 lanes (vectorises; a single running sum does not).
#[inline(always)]
pub(super) fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (ca, cb) in a8.zip(b8) {
        for ((l, x), y) in lanes.iter_mut().zip(ca).zip(cb) {
            *l += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `x = LayerNorm(x + residual)` per token.
fn layer_norm(x: &mut [f32], residual: Option<&[f32]>, norm: &LayerNorm, h: usize, eps: f32) {
    for (t, row) in x.chunks_exact_mut(h).enumerate() {
        if let Some(r) = residual {
            for (x, r) in row.iter_mut().zip(&r[t * h..(t + 1) * h]) {
                *x += r;
            }
        }
        let mean = row.iter().sum::<f32>() / h as f32;
        let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / h as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((x, w), b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
            *x = (*x - mean) * inv * w + b;
        }
    }
}

/// GELU with the exact error function (BERT's), erf by Abramowitz & Stegun 7.1.26
/// (absolute error below 1.5e-7).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    (1.0 - poly * exp_nonpositive(-a * a)).copysign(x)
}

/// e^x for x <= 0 (relative error below 3e-7; below -87 it is 0), branch-free so a loop
/// over it vectorises, unlike the libm call: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by
/// its Taylor series to r^7, 2^n built in the exponent bits.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND_MAGIC) - ROUND_MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // n is in -126..=0 here, so 2^n is a normal number.
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in
            [(0.0f32, 0.0f32), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (-2.0, -0.995_322_3), (3.5, 0.999_999_3)]
        {
            assert!((erf(x) - want).abs() < 1e-6, "erf({x}) = {} want {want}", erf(x));
        }
    }

    #[test]
    fn integer_linear_matches_float() {
        // 2 rows x 64 cols of weights in -8..7 with scale 0.5; activations quantize exactly.
        let mut bytes = Vec::new();
        for _ in 0..4 {
            bytes.extend_from_slice(&0x3800u16.to_le_bytes()); // 0.5
            bytes.extend((0..16u8).map(|j| (j % 16) | (((15 - j) % 16) << 4)));
        }
        let layer = Linear { weight: QMatrix::from_q4(&bytes, 2, 64), bias: vec![1.0, -1.0] };
        let x: Vec<f32> = (0..64).map(|i| ((i % 5) as f32 - 2.0) * 0.25).collect();
        let mut acts = Quantized::default();
        let mut row = vec![0f32; 64];
        for kernel in [Kernel::Portable, Kernel::detect()] {
            acts.quantize(&x, 64, kernel);
            let mut out = vec![0f32; 2];
            linear(kernel, &layer, &acts, &mut out, &mut Vec::new());
            for (r, o) in out.iter().enumerate() {
                layer.weight.row_f32(r, &mut row);
                let want = layer.bias[r] + row.iter().zip(&x).map(|(w, x)| w * x).sum::<f32>();
                assert!((o - want).abs() < 1e-2, "{kernel:?} row {r}: {o} vs {want}");
            }
        }
    }

    /// xorshift64: reproducible test data without a dependency.
    fn stream(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// Random 4-bit weights (every nibble value occurs) with scales between 2^-10 and 2^-4.
    fn random_matrix(rows: usize, cols: usize, next: &mut impl FnMut() -> u64) -> QMatrix {
        let mut bytes = Vec::new();
        for _ in 0..rows * cols / BLOCK {
            let scale = 0x1400u16 + (next() % 0x1800) as u16;
            bytes.extend_from_slice(&scale.to_le_bytes());
            bytes.extend((0..16).map(|_| next() as u8));
        }
        QMatrix::from_q4(&bytes, rows, cols)
    }

    fn random_activations(n: usize, next: &mut impl FnMut() -> u64) -> Vec<f32> {
        (0..n).map(|_| (next() % 200_001) as f32 / 10_000.0 - 10.0).collect()
    }

    #[test]
    fn avx2_and_portable_kernels_agree() {
        if !Kernel::Avx2.is_available() {
            eprintln!("no AVX2 on this CPU: only the portable kernel runs here");
            return;
        }
        let mut next = stream(0x9e37_79b9_7f4a_7c15);
        // Token counts cover every tile remainder; 20 rows leave a partial rayon task.
        for (rows, cols, tokens) in [(16, 384, 1), (16, 384, 2), (16, 384, 3), (32, 1536, 4), (20, 64, 9), (5, 32, 7)] {
            let w = random_matrix(rows, cols, &mut next);
            let x = random_activations(tokens * cols, &mut next);
            let (mut portable, mut avx2) = (Quantized::default(), Quantized::default());
            portable.quantize(&x, cols, Kernel::Portable);
            avx2.quantize(&x, cols, Kernel::Avx2);
            assert_eq!(portable.values, avx2.values, "quantized values, {tokens} x {cols}");
            assert_eq!(portable.scales, avx2.scales, "quantization scales, {tokens} x {cols}");
            // All rows, and rows starting past the first (a later rayon task's slice).
            for first in [0, rows / 3] {
                let n = (rows - first) * tokens;
                let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                dot_rows(Kernel::Portable, &w, first, &portable, &mut want);
                dot_rows(Kernel::Avx2, &w, first, &portable, &mut got);
                for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                    assert!(
                        (w - g).abs() <= 1e-5 * (1.0 + w.abs()),
                        "{rows}x{cols}, {tokens} tokens, #{i}: {w} vs {g}"
                    );
                }
            }
            let layer = Linear { weight: w, bias: (0..rows).map(|r| r as f32 * 0.5).collect() };
            let (mut want, mut got) = (vec![0f32; rows * tokens], vec![0f32; rows * tokens]);
            linear(Kernel::Portable, &layer, &portable, &mut want, &mut Vec::new());
            linear(Kernel::Avx2, &layer, &portable, &mut got, &mut Vec::new());
            for (w, g) in want.iter().zip(&got) {
                assert!((w - g).abs() <= 1e-5 * (1.0 + w.abs()), "linear {rows}x{cols}: {w} vs {g}");
            }
        }
    }

    #[test]
    fn avx2_products_do_not_saturate_at_the_extremes() {
        if !Kernel::Avx2.is_available() {
            return;
        }
        // Every weight -8 (nibble 0) and every activation -127: the largest pair sums
        // `maddubs` sees (2 x 8 x 127); a saturating kernel would come out short.
        let mut bytes = Vec::new();
        for _ in 0..2 * 64 / BLOCK {
            bytes.extend_from_slice(&0x3c00u16.to_le_bytes()); // scale 1.0
            bytes.extend([0u8; 16]);
        }
        let w = QMatrix::from_q4(&bytes, 2, 64);
        let mut acts = Quantized::default();
        acts.quantize(&[-1.0f32; 64 * 3], 64, Kernel::Avx2);
        let scale = 1.0f32 / 127.0;
        let want = 64.0 * 8.0 * 127.0 * scale;
        for kernel in [Kernel::Portable, Kernel::Avx2] {
            let mut out = vec![0f32; 2 * 3];
            dot_rows(kernel, &w, 0, &acts, &mut out);
            for o in out {
                assert!((o - want).abs() < 1e-3, "{kernel:?}: {o} vs {want}");
            }
        }
    }

    #[test]
    fn fast_exp_and_gelu_match_libm() {
        let mut x = -87.0f32;
        while x <= 0.0 {
            let (got, want) = (exp_nonpositive(x), x.exp());
            assert!((got - want).abs() <= 3e-7 * want, "exp({x}) = {got}, libm {want}");
            x += 0.013;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-1000.0), exp_nonpositive(-87.0));
        let reference = |x: f32| {
            let a = (x * std::f32::consts::FRAC_1_SQRT_2).abs();
            let t = 1.0 / (1.0 + 0.327_591_1 * a);
            let poly =
                t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
            let erf = (1.0 - poly * (-a * a).exp()).copysign(x);
            0.5 * x * (1.0 + erf)
        };
        let xs: Vec<f32> = (0..4001).map(|i| (i as f32 - 2000.0) / 200.0).collect();
        for &x in &xs {
            assert!((gelu(x) - reference(x)).abs() <= 2e-6 * (1.0 + x.abs()), "gelu({x})");
        }
        // The AVX2 build of the element-wise pass gives the same bits.
        let (mut portable, mut fast) = (xs.clone(), xs.clone());
        gelu_slice(Kernel::Portable, &mut portable);
        gelu_slice(Kernel::detect(), &mut fast);
        assert_eq!(portable, fast);
    }

    /// A random unit vector of `dim` values.
    fn unit(dim: usize, next: &mut impl FnMut() -> u64) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| (next() % 20_001) as f32 / 10_000.0 - 1.0).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    #[test]
    fn byte_vector_dots_are_close_to_f32_on_every_kernel_and_path() {
        let mut next = stream(0x2545_f491_4f6c_dd1d);
        let dim = 384;
        // More rows than SCAN_PARALLEL_FROM, so the rayon path runs and leaves a partial task.
        let n = SCAN_PARALLEL_FROM + 1234;
        let rows: Vec<Vec<f32>> = (0..n).map(|_| unit(dim, &mut next)).collect();
        let query = unit(dim, &mut next);
        let exact: Vec<f32> = rows.iter().map(|r| dot_lanes(r, &query)).collect();
        let mut results = Vec::new();
        for kernel in [Kernel::Portable, Kernel::detect()] {
            let mut big = ByteVectors::new(dim, kernel).unwrap();
            let mut small = ByteVectors::new(dim, kernel).unwrap();
            for (i, r) in rows.iter().enumerate() {
                big.push(r);
                if i < 100 {
                    small.push(r);
                }
            }
            let got = big.dots(&query);
            assert_eq!(got.len(), n);
            for (i, (g, e)) in got.iter().zip(&exact).enumerate() {
                assert!((g - e).abs() < 2e-3, "{kernel:?} row {i}: {g} vs {e}");
            }
            // The one-thread path gives the same values as the parallel one.
            assert_eq!(small.dots(&query), got[..100]);
            results.push(got);
        }
        for (a, b) in results[0].iter().zip(&results[1]) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "kernels disagree: {a} vs {b}");
        }
        assert!(ByteVectors::new(100, Kernel::Portable).is_err(), "not a multiple of 32");
    }

    #[test]
    fn byte_vectors_set_and_swap_remove_keep_the_other_rows() {
        // 64 values round coarser than 384: a looser bound.
        const TOL: f32 = 5e-3;
        let mut next = stream(7);
        let rows: Vec<Vec<f32>> = (0..5).map(|_| unit(64, &mut next)).collect();
        let mut v = ByteVectors::new(64, Kernel::detect()).unwrap();
        rows.iter().for_each(|r| v.push(r));
        let q = rows[4].clone();
        // Row 1 goes; row 4 (the last) takes its place.
        v.swap_remove(1);
        assert_eq!(v.len(), 4);
        let d = v.dots(&q);
        assert!((d[1] - 1.0).abs() < TOL, "the moved row is where row 1 was: {}", d[1]);
        for (slot, orig) in [(0, 0), (2, 2), (3, 3)] {
            assert!((d[slot] - dot_lanes(&rows[orig], &q)).abs() < TOL);
        }
        // Overwriting a row changes only that row.
        v.set(0, &rows[4]);
        let d2 = v.dots(&q);
        assert!((d2[0] - 1.0).abs() < TOL);
        assert_eq!(d2[1..], d[1..]);
        // Removing the last row and then every row leaves an empty table that still scans.
        v.swap_remove(3);
        while !v.is_empty() {
            v.swap_remove(0);
        }
        assert!(v.dots(&q).is_empty());
    }
}
