//! Reference passages: how one query's cosines sit for text of one script that does not
//! answer it.
//!
//! A cosine alone says little: e5's sit in a narrow band whose level depends on the query
//! and on the scripts involved (a Chinese query scores every Chinese text above any English
//! one). Hybrid search measures a record's cosine against the crowd of records of its script
//! in the store, shrunk towards a prior; for records of the other script than the query's,
//! that prior is the query's cosines to these passages of the record's script (everyday
//! facts, calibration.txt, written apart from every labelled set). It is the same in a store
//! of one record as in one of 100k, so a small store's only Chinese record is measured
//! against how an English question scores on Chinese text at all (issue 31).
//!
//! The passages are embedded once per model and kept in the store's redb (about 70
//! embeddings, ~0.7 s once), like the records' vectors: recomputable, committed without fsync.

use anyhow::{Context as _, Result, anyhow};
use redb::{Database, ReadableDatabase, TableDefinition};

use super::embed::{EmbedModel, TextRole, cosine};
use super::script::Script;

/// Reference passages, one a line (`#` lines are comments).
const PASSAGES: &str = include_str!("calibration.txt");

/// model identity + passages digest -> the passages' f32 vectors, one after another.
const CALIBRATION: TableDefinition<&str, &[u8]> = TableDefinition::new("vector_calibration");

/// The reference passages' vectors of one model, by script.
pub(super) struct Calibration {
    by_script: [Vec<Vec<f32>>; 2],
}

/// Mean and spread of a query's cosines to the reference passages of one script.
#[derive(Debug, Clone, Copy)]
pub(super) struct Crowd {
    pub mean: f32,
    pub std: f32,
}

fn passages() -> Vec<&'static str> {
    PASSAGES.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

pub(super) fn script_slot(s: Script) -> usize {
    match s {
        Script::Latin => 0,
        Script::Cjk => 1,
    }
}

impl Calibration {
    /// The calibration of `model`, from `db` or embedded now (and stored there).
    pub(super) fn open(db: &Database, model: &EmbedModel) -> Result<Calibration> {
        let texts = passages();
        let key = format!("{}:{:016x}", model.identity(), fnv(PASSAGES.as_bytes()));
        let dim = model.dim();
        let stored = {
            let txn = db.begin_read()?;
            match txn.open_table(CALIBRATION) {
                Ok(t) => t.get(key.as_str())?.map(|v| v.value().to_vec()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(e.into()),
            }
        };
        let vectors: Vec<Vec<f32>> = match stored.filter(|b| b.len() == texts.len() * dim * 4) {
            Some(bytes) => bytes
                .chunks_exact(dim * 4)
                .map(|v| v.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
                .collect(),
            None => {
                let vectors = model.embed_batch(TextRole::Passage, &texts);
                let bytes: Vec<u8> = vectors.iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
                let mut txn = db.begin_write()?;
                txn.set_durability(redb::Durability::None).map_err(|e| anyhow!("memory store: {e}"))?;
                {
                    // One model's calibration at a time: an old one is dropped with its model.
                    let _ = txn.delete_table(CALIBRATION);
                    txn.open_table(CALIBRATION)?.insert(key.as_str(), bytes.as_slice())?;
                }
                txn.commit().context("cannot store the memory calibration")?;
                vectors
            }
        };
        let mut by_script: [Vec<Vec<f32>>; 2] = [Vec::new(), Vec::new()];
        for (text, v) in texts.iter().zip(vectors) {
            by_script[script_slot(Script::of(text))].push(v);
        }
        Ok(Calibration { by_script })
    }

    /// The crowd of `query` (an embedding by the same model) in each script.
    pub(super) fn crowd(&self, query: &[f32]) -> [Crowd; 2] {
        self.by_script.each_ref().map(|vs| {
            let cos: Vec<f32> = vs.iter().map(|v| cosine(query, v)).collect();
            let n = cos.len().max(1) as f32;
            let mean = cos.iter().sum::<f32>() / n;
            let var = cos.iter().map(|c| (c - mean) * (c - mean)).sum::<f32>() / n;
            Crowd { mean, std: var.sqrt().max(1e-3) }
        })
    }
}

/// FNV-1a: names the passages' version in the stored key (a changed file is re-embedded).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_passages_cover_both_scripts_evenly() {
        let texts = passages();
        let cjk = texts.iter().filter(|t| Script::of(t) == Script::Cjk).count();
        assert!(cjk >= 30 && texts.len() - cjk >= 30, "{cjk} Chinese of {}", texts.len());
    }
}
