//! The XLM-RoBERTa SentencePiece unigram tokenizer, from the vocabulary and normalization
//! map the model file carries.
//!
//! Pipeline: per-codepoint normalization (the file's flattened NFKC-style map; an empty
//! replacement deletes the character), runs of spaces collapsed to one, a leading space
//! added, spaces written as the metaspace `▁`, then the most probable segmentation into
//! pieces (Viterbi over the unigram log-probabilities). A character no piece covers
//! becomes `<unk>` with a penalty below every real piece.

use std::collections::HashMap;

use super::format::TokenizerData;

const METASPACE: char = '\u{2581}';

pub(super) struct Tokenizer {
    pieces: HashMap<Box<[u8]>, u32>,
    scores: Vec<f32>,
    normalization: HashMap<u32, Box<[char]>>,
    pub bos: u32,
    pub eos: u32,
    unk: u32,
    unk_score: f32,
    max_piece_bytes: usize,
}

impl Tokenizer {
    pub(super) fn new(data: &TokenizerData<'_>) -> Tokenizer {
        let specials = [data.bos, data.eos, data.pad, data.unk];
        let mut pieces = HashMap::with_capacity(data.scores.len());
        let mut max_piece_bytes = 1;
        for (id, w) in data.offsets.windows(2).enumerate() {
            let bytes = &data.blob[w[0] as usize..w[1] as usize];
            let id = id as u32;
            // Control pieces (<s>, </s>, <pad>, <unk>, <mask>) are never produced from text.
            let control = specials.contains(&id)
                || (bytes.starts_with(b"<") && bytes.ends_with(b">") && data.scores[id as usize] == 0.0);
            if bytes.is_empty() || control {
                continue;
            }
            max_piece_bytes = max_piece_bytes.max(bytes.len());
            pieces.entry(bytes.into()).or_insert(id);
        }
        let min_score = data.scores.iter().copied().fold(f32::INFINITY, f32::min);
        let normalization = data
            .normalization
            .iter()
            .map(|(cp, out)| (*cp, out.iter().filter_map(|&c| char::from_u32(c)).collect()))
            .collect();
        Tokenizer {
            pieces,
            scores: data.scores.clone(),
            normalization,
            bos: data.bos,
            eos: data.eos,
            unk: data.unk,
            unk_score: min_score - 10.0,
            max_piece_bytes,
        }
    }

    /// The normalized text as the pieces spell it (`▁` for spaces, leading `▁`).
    fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + 4);
        let mut last_space = false;
        let mut push = |c: char, out: &mut String| {
            if c == ' ' {
                if last_space {
                    return;
                }
                last_space = true;
                out.push(METASPACE);
            } else {
                last_space = false;
                out.push(c);
            }
        };
        for c in text.chars() {
            match self.normalization.get(&(c as u32)) {
                Some(replacement) => replacement.iter().for_each(|&r| push(r, &mut out)),
                None => push(c, &mut out),
            }
        }
        if !out.starts_with(METASPACE) {
            out.insert(0, METASPACE);
        }
        out
    }

    /// The token ids of `text`, without `<s>`/`</s>`.
    pub(super) fn encode(&self, text: &str) -> Vec<u32> {
        self.segment(text).0
    }

    /// The natural log of the probability of `text`'s best segmentation under the unigram
    /// model (the sum of its pieces' scores): how common the text is in the model's corpus.
    pub(super) fn log_prob(&self, text: &str) -> f32 {
        self.segment(text).1
    }

    fn segment(&self, text: &str) -> (Vec<u32>, f32) {
        let norm = self.normalize(text);
        let bytes = norm.as_bytes();
        let bounds: Vec<usize> = norm.char_indices().map(|(i, _)| i).chain(std::iter::once(bytes.len())).collect();
        let n = bounds.len() - 1;
        // best[e]: score of the best segmentation of the first e characters, and its last piece.
        let mut best = vec![(f32::NEG_INFINITY, 0usize, self.unk); n + 1];
        best[0].0 = 0.0;
        for start in 0..n {
            let base = best[start].0;
            if base == f32::NEG_INFINITY {
                continue;
            }
            for end in start + 1..=n {
                let piece = &bytes[bounds[start]..bounds[end]];
                if piece.len() > self.max_piece_bytes {
                    break;
                }
                if let Some(&id) = self.pieces.get(piece) {
                    let score = base + self.scores[id as usize];
                    if score > best[end].0 {
                        best[end] = (score, start, id);
                    }
                }
            }
            let unk = base + self.unk_score;
            if unk > best[start + 1].0 {
                best[start + 1] = (unk, start, self.unk);
            }
        }
        let mut ids = Vec::new();
        let mut at = n;
        while at > 0 {
            let (_, from, id) = best[at];
            ids.push(id);
            at = from;
        }
        ids.reverse();
        (ids, best[n].0)
    }
}
