//! The BERT encoder: embeddings, 12 post-norm transformer layers, over a batch of token
//! sequences laid end to end in one `[tokens, hidden]` matrix (each matmul then streams its
//! weights once for the whole batch; attention stays within each sequence).
//!
//! Linear layers run in integers: the 4-bit weights are expanded once at load to signed
//! bytes (-8..7) with one f32 scale per block of 32, activations are quantized per block of
//! 32 to bytes (scale = max |x| / 127), and each block contributes
//! `w_scale * a_scale * sum(w_i * a_i)`. Integer sums are exact in any order, so the plain
//! loops below vectorise; [`dot_rows`] is compiled a second time for AVX2 and picked at
//! run time. Rows of the output are spread over the rayon pool.

use anyhow::{Result, bail};
use rayon::prelude::*;

use super::format::{BLOCK, BLOCK_BYTES, DType, Parsed, Shape, f16_to_f32};

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
            positions: parsed.f32_tensor(data, "emb.pos", s.max_positions * h)?,
            token_type,
            embed_norm: norm("emb.ln")?,
            layers,
        })
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
        let mut q = vec![0f32; total * h];
        let mut k = vec![0f32; total * h];
        let mut v = vec![0f32; total * h];
        let mut ctx = vec![0f32; total * h];
        let mut tmp = vec![0f32; total * h];
        let mut mid = vec![0f32; total * self.shape.ffn];
        let mut acts = Quantized::default();
        for layer in &self.layers {
            acts.quantize(&x, h);
            linear(&layer.query, &acts, &mut q);
            linear(&layer.key, &acts, &mut k);
            linear(&layer.value, &acts, &mut v);
            attention(&q, &k, &v, &mut ctx, &spans, h, self.shape.heads);
            acts.quantize(&ctx, h);
            linear(&layer.attn_out, &acts, &mut tmp);
            layer_norm(&mut x, Some(&tmp), &layer.attn_norm, h, self.shape.ln_eps);
            acts.quantize(&x, h);
            linear(&layer.ff_in, &acts, &mut mid);
            mid.par_chunks_mut(4096).for_each(|c| c.iter_mut().for_each(|m| *m = gelu(*m)));
            acts.quantize(&mid, self.shape.ffn);
            linear(&layer.ff_out, &acts, &mut tmp);
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

/// Activations `[tokens, cols]` quantized per block of 32 to signed bytes.
#[derive(Default)]
struct Quantized {
    values: Vec<i8>,
    scales: Vec<f32>,
    cols: usize,
}

impl Quantized {
    fn quantize(&mut self, x: &[f32], cols: usize) {
        self.cols = cols;
        self.values.resize(x.len(), 0);
        self.scales.resize(x.len() / BLOCK, 0.0);
        for ((block, out), scale) in
            x.chunks_exact(BLOCK).zip(self.values.chunks_exact_mut(BLOCK)).zip(self.scales.iter_mut())
        {
            let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            *scale = max / 127.0;
            let inv = if max > 0.0 { 127.0 / max } else { 0.0 };
            for (o, v) in out.iter_mut().zip(block) {
                *o = (v * inv).round().clamp(-127.0, 127.0) as i8;
            }
        }
    }

    fn tokens(&self) -> usize {
        self.values.len().checked_div(self.cols).unwrap_or(0)
    }
}

/// Output rows each rayon task computes (a few KiB of weights stay in L1 across tokens).
const ROWS_PER_TASK: usize = 16;

/// `out[t, r] = bias[r] + sum_c W[r, c] * x[t, c]`, with `x` quantized.
fn linear(layer: &Linear, x: &Quantized, out: &mut [f32]) {
    let (rows, cols) = (layer.weight.rows, layer.weight.cols);
    let tokens = x.tokens();
    debug_assert_eq!(cols, x.cols);
    // Computed transposed ([rows, tokens]) so each task owns a contiguous slice.
    let mut transposed = vec![0f32; rows * tokens];
    transposed.par_chunks_mut(ROWS_PER_TASK * tokens.max(1)).enumerate().for_each(|(task, chunk)| {
        let first = task * ROWS_PER_TASK;
        dot_rows(&layer.weight, first, &x.values, &x.scales, tokens, chunk);
    });
    for t in 0..tokens {
        let o = &mut out[t * rows..(t + 1) * rows];
        for (r, (o, b)) in o.iter_mut().zip(&layer.bias).enumerate() {
            *o = b + transposed[r * tokens + t];
        }
    }
}

fn dot_rows(w: &QMatrix, first: usize, a: &[i8], a_scales: &[f32], tokens: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { dot_rows_avx2(w, first, a, a_scales, tokens, out) };
        return;
    }
    dot_rows_portable(w, first, a, a_scales, tokens, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_rows_avx2(w: &QMatrix, first: usize, a: &[i8], a_scales: &[f32], tokens: usize, out: &mut [f32]) {
    dot_rows_portable(w, first, a, a_scales, tokens, out);
}

/// `out[(r - first) * tokens + t]` for the rows of this task.
#[inline(always)]
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
    ctx.par_chunks_mut(h).enumerate().for_each(|(t, out)| {
        let Some(span) = spans.iter().find(|s| s.contains(&t)) else { return };
        let mut probs = vec![0f32; span.len()];
        for head in 0..heads {
            let qh = &q[t * h + head * hd..t * h + (head + 1) * hd];
            let mut max = f32::NEG_INFINITY;
            for (p, s) in probs.iter_mut().zip(span.clone()) {
                let kh = &k[s * h + head * hd..s * h + (head + 1) * hd];
                *p = qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() * scale;
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
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

fn erf(x: f32) -> f32 {
    let sign = x.signum();
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    sign * (1.0 - poly * (-x * x).exp())
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
        acts.quantize(&x, 64);
        let mut out = vec![0f32; 2];
        linear(&layer, &acts, &mut out);
        let mut row = vec![0f32; 64];
        for (r, o) in out.iter().enumerate() {
            layer.weight.row_f32(r, &mut row);
            let want = layer.bias[r] + row.iter().zip(&x).map(|(w, x)| w * x).sum::<f32>();
            assert!((o - want).abs() < 1e-2, "row {r}: {o} vs {want}");
        }
    }
}
