//! The writes of [`Store`]: add (with merging), batch add, priority changes, promotion of
//! daily notes, forget and restore, quarantine, compaction, the weekly maintenance job and
//! import. Each takes the write guard first (in [`Store::begin`]) and keeps it through its
//! index update, so concurrent writes behave as if they ran one after the other.

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context as _, Result, anyhow, bail};
use redb::{ReadableDatabase, ReadableMultimapTable, ReadableTable};
use serde::{Deserialize, Serialize};

use super::daily::{self, DailyEntry, PROMOTE_FLAG};
use super::merge::{Relation, dice, may_merge, may_supersede, merge_into, relation, round_importance, same_identity};
use super::records::{
    ArchiveEntry, Deprecation, MemoryKind, MemoryRecord, NewRecord, Provenance, SearchFilter, archive_reason,
};
use super::schema::{ARCHIVE, BY_SKILL, MAX_ID, PROMOTED};
use super::statement::Statement;
use super::store::{Store, validate_namespace};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CompactReport {
    pub merged: Vec<(u64, u64)>,
    /// (outdated id, id of the update that replaced it).
    #[serde(default)]
    pub superseded: Vec<(u64, u64)>,
    pub expired: Vec<u64>,
    pub deprecated_removed: Vec<u64>,
    /// Archive ids of everything removed (`memory restore ID` undoes one).
    pub archived: Vec<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MaintainReport {
    pub compact: CompactReport,
    pub demoted: Vec<u64>,
    pub daily_archived: Vec<String>,
    pub promoted: Vec<u64>,
    /// Flagged notes that could not be promoted (too long, over the priority-5 budget...).
    pub promote_errors: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImportReport {
    pub imported: usize,
    pub unchanged: usize,
    /// (id in the file, id given) for records whose id was taken by a different record.
    pub renumbered: Vec<(u64, u64)>,
}

/// Live records by id, and the newest (created, id) per (namespace, tag): what
/// [`Store::newest_on_subject`] looks up.
pub(super) struct LiveIndex<'a> {
    by_id: HashMap<u64, &'a MemoryRecord>,
    newest_tag: HashMap<(&'a str, &'a str), (u64, u64)>,
}

impl<'a> LiveIndex<'a> {
    fn of(all: &'a [MemoryRecord], now: u64) -> LiveIndex<'a> {
        let mut by_id = HashMap::new();
        let mut newest_tag: HashMap<(&str, &str), (u64, u64)> = HashMap::new();
        for r in all.iter().filter(|r| r.is_live(now)) {
            by_id.insert(r.id, r);
            for t in &r.tags {
                let e = newest_tag.entry((r.namespace.as_str(), t.as_str())).or_insert((r.created_ms, r.id));
                *e = (*e).max((r.created_ms, r.id));
            }
        }
        LiveIndex { by_id, newest_tag }
    }
}

/// What [`Store::add_outcome`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddOutcome {
    /// Stored as a new record.
    Stored,
    /// Folded into a record stating the same fact.
    Merged,
    /// Stored as the update of this (older) record, which was archived as outdated.
    Superseded(u64),
}

/// `new` replaces `old` as an update: it keeps the standing of the record it replaces (the
/// higher priority if `new` is the user's, every tag) and links back to it; both provenances stay (the old one in
/// the archive entry).
fn supersede(new: &mut MemoryRecord, old: &MemoryRecord) {
    // Only the user's own update inherits: a skill's priority stays what the policy capped
    // it to (`memory.max_skill_priority`), whatever its earlier record had.
    if old.priority > new.priority && new.is_user_written() {
        new.priority = old.priority;
        if new.priority > 1 {
            new.expires_ms = None;
        }
    }
    for t in &old.tags {
        if !new.tags.contains(t) {
            new.tags.push(t.clone());
        }
    }
    new.supersedes.push(old.id);
    new.importance = round_importance(new.importance_at(new.updated_ms));
}

impl Store {
    /// Store `r`: merged into a near-duplicate when there is one (the archive keeps the
    /// incoming version, and the stored one when its wording changes); stored as the live
    /// record when it updates an older one (same subject, new value: the older one is
    /// archived as outdated with a link to it, unless it is the user's and `r` is not);
    /// else stored as a new record. Returns the id that holds the fact.
    pub fn add(&self, r: NewRecord) -> Result<u64> {
        Ok(self.add_detailed(r)?.0)
    }

    /// [`Store::add`], also saying whether the record was merged into an existing one.
    pub fn add_detailed(&self, r: NewRecord) -> Result<(u64, bool)> {
        let (id, outcome) = self.add_outcome(r)?;
        Ok((id, outcome == AddOutcome::Merged))
    }

    /// [`Store::add`], saying what became of the record: stored, merged into a restatement,
    /// or stored as the update of an older record (archived as outdated, linked to it).
    pub fn add_outcome(&self, r: NewRecord) -> Result<(u64, AddOutcome)> {
        self.check_new(&r)?;
        self.vectors.prepare(&r.content);
        let now = self.now_ms();
        let namespace = r.namespace.clone();
        // Under the write guard: a concurrent add of the same fact is either seen here
        // (and merged) or waits for this one to be indexed.
        let txn = self.begin()?;
        let mut incoming = self.new_record(txn.new_id()?, r, now);
        let related = self.related_of(&namespace, &incoming, None)?;
        // Re-read inside the transaction: the index may lag the store after a failed update.
        let related = match related {
            Some((d, rel)) => txn.get(d.id)?.filter(|d| d.is_live(now)).map(|d| (d, rel)),
            None => None,
        };
        let (stored, outcome) = match related {
            Some((mut existing, Relation::Restatement)) if may_merge(&existing, &incoming) => {
                let superseded = merge_into(&mut existing, &incoming, now);
                txn.put(&existing)?;
                if let Some(old) = superseded {
                    txn.archive(now, archive_reason::SUPERSEDED, old, Some(existing.id))?;
                }
                txn.archive(now, archive_reason::MERGED, incoming, Some(existing.id))?;
                (existing, AddOutcome::Merged)
            }
            Some((old, Relation::Update)) if may_supersede(&old, &incoming) => {
                supersede(&mut incoming, &old);
                txn.put(&incoming)?;
                txn.delete(&old)?;
                let old_id = old.id;
                txn.archive_outdated(now, old, incoming.id)?;
                (incoming, AddOutcome::Superseded(old_id))
            }
            _ => {
                txn.put(&incoming)?;
                (incoming, AddOutcome::Stored)
            }
        };
        if stored.priority == 5 {
            self.check_protected(&namespace, &txn.protected(&namespace, now)?)?;
        }
        txn.bump_generation()?;
        let _written = txn.commit()?;
        let deletes: Vec<u64> = match outcome {
            AddOutcome::Superseded(old) => vec![old],
            _ => vec![],
        };
        self.reindex(&[&stored], &deletes, &[])?;
        Ok((stored.id, outcome))
    }

    /// The live record of `namespace` that `record` restates or updates, if any: the most
    /// similar of the index's best candidates that is one or the other.
    pub(super) fn related_of(
        &self,
        namespace: &str,
        record: &MemoryRecord,
        except: Option<u64>,
    ) -> Result<Option<(MemoryRecord, Relation)>> {
        let new = Statement::of(&record.content);
        if new.units.is_empty() && new.numbers().is_empty() {
            return Ok(None);
        }
        let now = self.now_ms();
        let candidates = self.index.search(&record.content, &SearchFilter::namespace(namespace), now, 8)?;
        let mut best: Option<(f64, MemoryRecord, Relation)> = None;
        for r in self.load(candidates.into_iter().map(|(id, _)| id))? {
            if Some(r.id) == except || r.id == record.id || !r.is_live(now) {
                continue;
            }
            let old = Statement::of(&r.content);
            let rel = relation(&old, &new, self.config.merge_similarity);
            if rel == Relation::Unrelated {
                continue;
            }
            let s = dice(&old, &new);
            if best.as_ref().is_none_or(|(b, _, _)| s > *b) {
                best = Some((s, r, rel));
            }
        }
        Ok(best.map(|(_, r, rel)| (r, rel)))
    }

    /// Store many records in one transaction, without merging (bulk loads and benchmarks;
    /// `memory compact` merges duplicates afterwards). Priority-5 budgets are checked.
    pub fn add_batch(&self, records: Vec<NewRecord>) -> Result<Vec<u64>> {
        for r in &records {
            self.check_new(r)?;
        }
        let now = self.now_ms();
        let txn = self.begin()?;
        let mut stored = Vec::with_capacity(records.len());
        for r in records {
            let rec = self.new_record(txn.new_id()?, r, now);
            txn.put(&rec)?;
            stored.push(rec);
        }
        let namespaces: BTreeSet<&str> =
            stored.iter().filter(|r| r.priority == 5).map(|r| r.namespace.as_str()).collect();
        for ns in namespaces {
            self.check_protected(ns, &txn.protected(ns, now)?)?;
        }
        txn.bump_generation()?;
        let _written = txn.commit()?;
        let refs: Vec<&MemoryRecord> = stored.iter().collect();
        self.reindex(&refs, &[], &[])?;
        Ok(stored.iter().map(|r| r.id).collect())
    }

    /// [`Store::add_batch`] with each record's vector given instead of embedded (for
    /// benchmarks that need a large store quickly; normal writes embed).
    pub fn add_batch_embedded(&self, batch: Vec<(NewRecord, Vec<f32>)>) -> Result<Vec<u64>> {
        let mut records = Vec::with_capacity(batch.len());
        for (r, v) in batch {
            self.vectors.give(&r.content, v)?;
            records.push(r);
        }
        self.add_batch(records)
    }

    fn update_record(&self, id: u64, change: impl FnOnce(&mut MemoryRecord) -> Result<()>) -> Result<MemoryRecord> {
        let txn = self.begin()?;
        let mut r = txn.get(id)?.ok_or_else(|| anyhow!("no memory #{id}; `skillhost memory search` lists ids"))?;
        change(&mut r)?;
        r.updated_ms = self.now_ms();
        r.importance = round_importance(r.importance_at(r.updated_ms));
        txn.put(&r)?;
        if r.priority == 5 {
            self.check_protected(&r.namespace, &txn.protected(&r.namespace, r.updated_ms)?)?;
        }
        txn.bump_generation()?;
        let _written = txn.commit()?;
        self.reindex(&[&r], &[], &[])?;
        Ok(r)
    }

    /// Set a record's priority (0-5); lowering it to 1 or less gives it a day from now.
    pub fn set_priority(&self, id: u64, priority: u8) -> Result<MemoryRecord> {
        if priority > 5 {
            bail!("priority {priority} is out of range; use 0 to 5");
        }
        let expires = self.now_ms() + self.config.low_priority_ttl_ms;
        self.update_record(id, |r| {
            r.expires_ms = (priority <= 1).then(|| r.expires_ms.unwrap_or(expires));
            r.priority = priority;
            Ok(())
        })
    }

    /// Copy daily-note entry `date:line` into long-term memory (once).
    pub fn promote_daily(&self, date: &str, line: u32, namespace: &str, kind: MemoryKind, priority: u8) -> Result<u64> {
        let entry = self
            .daily
            .read(date)?
            .into_iter()
            .find(|e| e.line == line)
            .ok_or_else(|| anyhow!("the daily note of {date} has no entry on line {line}; `skillhost memory daily --date {date}` shows them"))?;
        {
            let txn = self.db.begin_read()?;
            if let Some(id) = txn.open_table(PROMOTED)?.get((date, line))? {
                bail!("{date}:{line} was already promoted to memory #{}", id.value());
            }
        }
        let content = entry.text.replace(PROMOTE_FLAG, "");
        // Drop the HH:MM:SS stamp the note carries.
        let content = match content.split_once(' ') {
            Some((time, rest)) if time.len() == 8 && time.as_bytes()[2] == b':' => rest.trim().to_string(),
            _ => content.trim().to_string(),
        };
        let id = self.add(NewRecord {
            namespace: namespace.to_string(),
            kind,
            content,
            priority,
            tags: vec![],
            provenance: Provenance {
                skill: "daily-note".into(),
                skill_hash: String::new(),
                session: format!("daily:{date}"),
                step: line,
            },
        })?;
        let txn = self.begin()?;
        txn.txn.open_table(PROMOTED)?.insert((date, line), id)?;
        txn.commit()?;
        Ok(id)
    }

    /// Move a record to the archive (`memory restore` brings it back).
    pub fn forget(&self, id: u64) -> Result<u64> {
        let now = self.now_ms();
        let txn = self.begin()?;
        let r = txn.get(id)?.ok_or_else(|| anyhow!("no memory #{id}; `skillhost memory search` lists ids"))?;
        txn.delete(&r)?;
        let archive_id = txn.archive(now, "forgotten", r, None)?;
        txn.bump_generation()?;
        let _written = txn.commit()?;
        self.reindex(&[], &[id], &[])?;
        Ok(archive_id)
    }

    /// Put an archived record back (same id). Fails if that id is in use again. An outdated
    /// record whose successor is still live keeps `superseded_by` (both are live then; the
    /// caller must say so).
    pub fn restore(&self, archive_id: u64) -> Result<MemoryRecord> {
        let now = self.now_ms();
        let txn = self.begin()?;
        let entry: ArchiveEntry = {
            let t = txn.txn.open_table(ARCHIVE)?;
            let v = t
                .get(archive_id)?
                .ok_or_else(|| anyhow!("no archive entry {archive_id}; `skillhost memory archive` lists them"))?;
            serde_json::from_slice(v.value()).with_context(|| format!("archive entry {archive_id} is corrupt"))?
        };
        let mut record = entry.record;
        if txn.get(record.id)?.is_some() {
            if entry.reason != archive_reason::SUPERSEDED {
                bail!("memory #{} exists again; forget it first, then restore", record.id);
            }
            // A superseded wording shares the id of the record that absorbed it: it comes
            // back as a record of its own.
            record.id = txn.new_id()?;
        }
        record.deprecated = None;
        record.expires_ms = record.expires_ms.map(|_| now + self.config.low_priority_ttl_ms);
        // An outdated record comes back still marked as superseded while its successor is
        // live: search ranks it after that one, and `memory archive --restore` says so.
        if let Some(successor) = record.superseded_by
            && !txn.get(successor)?.is_some_and(|s| s.is_live(now))
        {
            record.superseded_by = None;
        }
        txn.put(&record)?;
        if record.priority == 5 {
            self.check_protected(&record.namespace, &txn.protected(&record.namespace, now)?)?;
        }
        txn.txn.open_table(ARCHIVE)?.remove(archive_id)?;
        txn.bump_generation()?;
        let _written = txn.commit()?;
        self.reindex(&[&record], &[], &[])?;
        Ok(record)
    }

    /// Deprecate every live record that `skill` wrote (only version `hash_prefix`, if
    /// given): the response to poisoned memory. Returns the ids.
    pub fn quarantine(&self, skill: &str, hash_prefix: Option<&str>) -> Result<Vec<u64>> {
        let now = self.now_ms();
        let txn = self.begin()?;
        let ids: Vec<u64> = {
            let t = txn.txn.open_multimap_table(BY_SKILL)?;
            let mut ids = Vec::new();
            for v in t.get(skill)? {
                ids.push(v?.value());
            }
            ids
        };
        let reason = match hash_prefix {
            Some(h) => format!("quarantined: written by {skill} version {h}"),
            None => format!("quarantined: written by {skill}"),
        };
        let mut changed = Vec::new();
        for id in ids {
            let Some(mut r) = txn.get(id)? else { continue };
            let hit = r
                .provenance
                .iter()
                .any(|p| p.skill == skill && hash_prefix.is_none_or(|h| p.skill_hash.starts_with(h)));
            if hit && r.deprecated.is_none() {
                r.deprecated = Some(Deprecation { at_ms: now, reason: reason.clone() });
                r.updated_ms = now;
                txn.put(&r)?;
                changed.push(id);
            }
        }
        txn.bump_generation()?;
        let _written = txn.commit()?;
        self.reindex(&[], &changed, &[])?;
        Ok(changed)
    }

    /// Cleanup job: archive deprecated and expired records, merge near-duplicates (each
    /// record against its best index candidates, not every pair).
    pub fn compact(&self, namespace: Option<&str>) -> Result<CompactReport> {
        if let Some(ns) = namespace {
            validate_namespace(ns)?;
        }
        let now = self.now_ms();
        let mut report = CompactReport::default();
        let txn = self.begin()?;
        let records: Vec<MemoryRecord> =
            txn.all()?.into_iter().filter(|r| namespace.is_none_or(|ns| r.namespace == ns)).collect();
        let mut removed: Vec<u64> = Vec::new();
        let mut survivors: Vec<MemoryRecord> = Vec::new();
        for r in records {
            if r.deprecated.is_some() {
                txn.delete(&r)?;
                removed.push(r.id);
                report.deprecated_removed.push(r.id);
                report.archived.push(txn.archive(now, "deprecated", r, None)?);
            } else if !r.is_live(now) {
                txn.delete(&r)?;
                removed.push(r.id);
                report.expired.push(r.id);
                report.archived.push(txn.archive(now, "expired", r, None)?);
            } else {
                survivors.push(r);
            }
        }
        let position: HashMap<u64, usize> = survivors.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
        let statements: Vec<Statement> = survivors.iter().map(|r| Statement::of(&r.content)).collect();
        let mut gone = vec![false; survivors.len()];
        let mut updated: Vec<usize> = Vec::new();
        for i in 0..survivors.len() {
            if gone[i] {
                continue;
            }
            let filter = SearchFilter::namespace(&survivors[i].namespace);
            for (id, _) in self.index.search(&survivors[i].content, &filter, now, 8)? {
                let Some(&j) = position.get(&id) else { continue };
                if j == i || gone[i] || gone[j] {
                    continue;
                }
                // Bulk loads and imports are not compared on the way in: an older record
                // updated by a newer one is archived as outdated here.
                let (older, newer) =
                    if (survivors[j].created_ms, j) < (survivors[i].created_ms, i) { (j, i) } else { (i, j) };
                let rel = relation(&statements[older], &statements[newer], self.config.merge_similarity);
                if rel == Relation::Update && may_supersede(&survivors[older], &survivors[newer]) {
                    let old = survivors[older].clone();
                    let successor = survivors[newer].id;
                    supersede(&mut survivors[newer], &old);
                    gone[older] = true;
                    txn.delete(&old)?;
                    removed.push(old.id);
                    report.superseded.push((old.id, successor));
                    report.archived.push(txn.archive_outdated(now, old, successor)?);
                    if !updated.contains(&newer) {
                        updated.push(newer);
                    }
                    continue;
                }
                if j <= i || rel != Relation::Restatement || !may_merge(&survivors[i], &survivors[j]) {
                    continue;
                }
                let other = survivors[j].clone();
                let keep_id = survivors[i].id;
                if let Some(old) = merge_into(&mut survivors[i], &other, now) {
                    report.archived.push(txn.archive(now, archive_reason::SUPERSEDED, old, Some(keep_id))?);
                }
                gone[j] = true;
                txn.delete(&other)?;
                removed.push(other.id);
                report.merged.push((other.id, keep_id));
                report.archived.push(txn.archive(now, archive_reason::MERGED, other, Some(keep_id))?);
                if !updated.contains(&i) {
                    updated.push(i);
                }
            }
        }
        updated.retain(|&i| !gone[i]);
        for &i in &updated {
            txn.put(&survivors[i])?;
        }
        txn.bump_generation()?;
        let _written = txn.commit()?;
        let upserts: Vec<&MemoryRecord> = updated.iter().map(|&i| &survivors[i]).collect();
        self.reindex(&upserts, &removed, &[])?;
        Ok(report)
    }

    /// The weekly job: compact, archive records whose importance decayed below the
    /// threshold, archive daily notes older than 90 days, promote `#promote` entries.
    /// Never demoted: priority 4 and 5, and a record that is the newest on its subject (see
    /// [`Store::newest_on_subject`]); a record recently handed out by recall or search does
    /// not decay (its importance counts from its last reference).
    pub fn maintain(&self, namespace: &str) -> Result<MaintainReport> {
        validate_namespace(namespace)?;
        let compact = self.compact(None)?;
        let now = self.now_ms();
        let mut report = MaintainReport { compact, ..MaintainReport::default() };

        let txn = self.begin()?;
        let all = txn.all()?;
        let live = LiveIndex::of(&all, now);
        let decayed: Vec<MemoryRecord> = all
            .iter()
            .filter(|r| r.priority < 4 && r.importance_at(now) < self.config.demote_below)
            .filter(|r| !self.newest_on_subject(r, &live, now))
            .cloned()
            .collect();
        if decayed.is_empty() {
            txn.abort()?;
        } else {
            for r in decayed {
                txn.delete(&r)?;
                report.demoted.push(r.id);
                report.compact.archived.push(txn.archive(now, "demoted", r, None)?);
            }
            txn.bump_generation()?;
            let _written = txn.commit()?;
            self.reindex(&[], &report.demoted, &[])?;
        }

        let today = daily::date_of(now);
        for date in self.daily.dates()? {
            let flagged: Vec<DailyEntry> = self.daily.read(&date)?.into_iter().filter(DailyEntry::flagged).collect();
            for e in flagged {
                let done = {
                    let txn = self.db.begin_read()?;
                    txn.open_table(PROMOTED)?.get((date.as_str(), e.line))?.is_some()
                };
                if !done {
                    // One bad note must not stop the weekly job: report it and go on.
                    match self.promote_daily(&date, e.line, namespace, MemoryKind::General, 3) {
                        Ok(id) => report.promoted.push(id),
                        Err(err) => report.promote_errors.push(format!("{date}:{}: {err:#}", e.line)),
                    }
                }
            }
            if daily::days_between(&date, &today)? > self.config.daily_archive_days {
                let to = self.dir.join("archive").join("daily");
                std::fs::create_dir_all(&to).with_context(|| format!("cannot create {}", to.display()))?;
                let from = self.daily.path(&date);
                std::fs::rename(&from, to.join(format!("{date}.md")))
                    .with_context(|| format!("cannot move {} to the archive", from.display()))?;
                report.daily_archived.push(date);
            }
        }
        if !report.daily_archived.is_empty() {
            let _written = self.write_guard();
            self.refresh_daily_fingerprint()?;
            self.rebuild_index()?;
        }
        Ok(report)
    }

    /// Is `r` the newest live record on its subject? For standing knowledge (preferences,
    /// facts, pitfalls) that is true unless a newer live record updates it (same subject,
    /// another value); an updated fact (one that superseded another) and the newest live
    /// record carrying one of its tags (a project's latest fact) are, too. Task results,
    /// snapshots and general notes are events: they age out as before.
    pub(super) fn newest_on_subject(&self, r: &MemoryRecord, live: &LiveIndex<'_>, now: u64) -> bool {
        if !r.supersedes.is_empty() {
            return true;
        }
        let newest_of_a_tag = r.tags.iter().any(|t| {
            live.newest_tag
                .get(&(r.namespace.as_str(), t.as_str()))
                .is_some_and(|&(created, id)| (created, id) <= (r.created_ms, r.id))
        });
        if newest_of_a_tag {
            return true;
        }
        if !matches!(r.kind, MemoryKind::Preference | MemoryKind::Fact | MemoryKind::Pitfall) {
            return false;
        }
        // Newer records on the same subject are among the index's best candidates.
        let st = Statement::of(&r.content);
        let candidates =
            self.index.search(&r.content, &SearchFilter::namespace(&r.namespace), now, 8).unwrap_or_default();
        !candidates.iter().filter_map(|(id, _)| live.by_id.get(id)).any(|o| {
            o.id != r.id
                && o.created_ms > r.created_ms
                && relation(&st, &Statement::of(&o.content), self.config.merge_similarity) == Relation::Update
        })
    }

    /// Append to today's daily note.
    pub fn note(&self, text: &str) -> Result<DailyEntry> {
        if text.len() > self.config.max_record_bytes {
            bail!("the note is {} bytes, over the limit of {}; summarize it", text.len(), self.config.max_record_bytes);
        }
        super::daily::DailyNotes::entry_text(text)?;
        let _written = self.write_guard();
        let entry = if let Some((seq, _)) = super::log::replaying() {
            // A note is a file, not a row: commit a count of them so that the shared log sees
            // that this op changed the store and logs it (replicas append the same line).
            // The count (which marks the op begun) commits before the line is written: a kill
            // between the two leaves the op begun and not applied, so the replica is rebuilt
            // from the log on its next open, where the other order would replay the op and
            // write its line twice.
            let txn = super::schema::Txn {
                txn: self.db.begin_write().context("cannot start a memory store transaction")?,
                cache: None,
                changes: std::cell::RefCell::new(Vec::new()),
                guard: None,
            };
            txn.set_meta("daily_notes_written", txn.meta("daily_notes_written")? + 1)?;
            txn.commit()?;
            self.daily.append(self.now_ms(), text).map_err(|e| {
                anyhow::Error::new(super::log::PartlyApplied(format!(
                    "op {seq} (a daily note) began here but its line could not be written: {e:#}"
                )))
            })?
        } else {
            self.daily.append(self.now_ms(), text)?
        };
        self.refresh_daily_fingerprint()?;
        self.reindex(&[], &[], std::slice::from_ref(&entry))?;
        Ok(entry)
    }

    /// Load `memory export` output. All or nothing: one bad line imports nothing and the
    /// error names it. Ids are kept when free; a record identical to the stored one is
    /// skipped; a different record under a taken id gets a new id.
    pub fn import(&self, input: &str, source: &str) -> Result<ImportReport> {
        let mut incoming = Vec::new();
        for (i, line) in input.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let r: MemoryRecord =
                serde_json::from_str(line).with_context(|| format!("{source}:{}: not a memory record", i + 1))?;
            validate_namespace(&r.namespace).with_context(|| format!("{source}:{}", i + 1))?;
            if r.priority > 5 || r.content.trim().is_empty() {
                bail!("{source}:{}: priority must be 0-5 and content non-empty", i + 1);
            }
            if r.id == 0 || r.id >= MAX_ID {
                bail!("{source}:{}: id {} is out of range (1 to 2^53-1)", i + 1, r.id);
            }
            incoming.push(r);
        }
        let mut report = ImportReport::default();
        let txn = self.begin()?;
        let mut stored = Vec::new();
        for mut r in incoming {
            match txn.get(r.id)? {
                // The same memory (counters and state may have moved on since the export).
                Some(existing) if same_identity(&existing, &r) => {
                    report.unchanged += 1;
                    continue;
                }
                Some(_) => {
                    let new_id = txn.new_id()?;
                    report.renumbered.push((r.id, new_id));
                    r.id = new_id;
                }
                None => {
                    if r.id >= txn.meta("next_id")? {
                        txn.set_meta("next_id", r.id + 1)?;
                    }
                }
            }
            txn.put(&r)?;
            report.imported += 1;
            stored.push(r);
        }
        let namespaces: BTreeSet<String> =
            stored.iter().filter(|r| r.priority == 5).map(|r| r.namespace.clone()).collect();
        let now = self.now_ms();
        for ns in namespaces {
            self.check_protected(&ns, &txn.protected(&ns, now)?)?;
        }
        txn.bump_generation()?;
        let _written = txn.commit()?;
        let refs: Vec<&MemoryRecord> = stored.iter().collect();
        self.reindex(&refs, &[], &[])?;
        Ok(report)
    }
}
