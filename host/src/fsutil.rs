//! File helpers shared by the library, the policy, the audit log, bundles and the compile
//! cache: atomic writes, directory swaps whose leftovers a crash recovery can recognise,
//! exclusive lock files, cheap change stamps and random names.
//!
//! Every temp file of an atomic write is named `.TARGET.PID-RANDOM.tmp` ([`TempName`]), so
//! that the leftovers of a killed writer can be told from the files of a live one and
//! swept ([`sweep_temp_files`]) instead of staying forever.
//!
//! A leaf module: it depends on nothing else in the crate, so every layer above can use it
//! without a cycle.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, anyhow};

/// [`write_atomic`] for a file meant for others (a bundle to hand out): created with the
/// usual mode (0666 less the umask, so 0644 by default) instead of a temp file's 0600.
pub fn write_atomic_shared(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}-{}.tmp", std::process::id(), random_hex(TEMP_RANDOM_LEN / 2)));
    let written = (|| -> Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Write a file atomically: temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| anyhow!("{} has no parent directory", path.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = temp_file_for(path).with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| anyhow!("cannot replace {}: {}", path.display(), e.error))?;
    Ok(())
}

/// Characters of the random part of a [`TempName`].
const TEMP_RANDOM_LEN: usize = 12;
/// Bytes of the target's name kept in a [`TempName`] (a longer one is cut).
const MAX_TEMP_TARGET_BYTES: usize = 200;

/// A temp file of an atomic write not renamed into place older than this is a leftover even
/// when a process of its pid runs (the pid was reused): no atomic write takes an hour.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

/// The temp file an atomic write of `target` goes through: `.TARGET.PID-RANDOM.tmp` next to
/// it, created 0600 (the mode survives the rename), removed if dropped before `persist`.
pub fn temp_file_for(target: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A file name has at most 255 bytes: leave room for the pid and random parts.
    while name.len() > MAX_TEMP_TARGET_BYTES {
        name.pop();
    }
    tempfile::Builder::new()
        .prefix(&format!(".{name}.{}-", std::process::id()))
        .suffix(".tmp")
        .rand_bytes(TEMP_RANDOM_LEN)
        .tempfile_in(dir)
}

/// The name of a temp file of ours read back: which file it was meant to replace and
/// which process wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TempName {
    pub target: String,
    pub pid: u32,
}

impl TempName {
    /// `.TARGET.PID-RANDOM.tmp` (see [`temp_file_for`]); `None` for any other name.
    pub fn parse(file_name: &str) -> Option<TempName> {
        let rest = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
        let (head, random) = rest.rsplit_once('-')?;
        if random.len() != TEMP_RANDOM_LEN || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let (target, pid) = head.rsplit_once('.')?;
        let pid = pid.parse().ok().filter(|_| pid.bytes().all(|b| b.is_ascii_digit()))?;
        (!target.is_empty()).then(|| TempName { target: target.to_string(), pid })
    }
}

/// Is `file_name` the tempfile crate's default name (`.tmp` and 6 letters or digits)? That
/// is what tantivy's atomic writes (and skillhost before 0.1's pid names) leave behind.
fn is_anonymous_temp(file_name: &str) -> bool {
    file_name.strip_prefix(".tmp").is_some_and(|r| r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Who may be writing temp files in a directory while it is swept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TempWriters {
    /// Only the holder of a lock this process holds (the memory store's): a temp file with
    /// no pid in its name is a leftover whatever its age.
    LockHolderOnly,
    /// Any process of the user: a temp file with no pid is a leftover only once older than
    /// [`STALE_TEMP_AGE`].
    Anyone,
}

/// Why [`sweep_temp_files`] removed a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleBecause {
    /// Its name carries the pid of a process that no longer runs.
    OwnerGone,
    /// Older than [`STALE_TEMP_AGE`].
    Old,
    /// A temp file without a pid in a directory only the lock holder (this process) writes.
    NoOwnerPossible,
}

/// Remove the temp files of atomic writes in `dir` that no live writer can still own (see
/// [`TempWriters`] and [`StaleBecause`]), and return them. Only temp files of the two
/// forms ([`TempName`] and the tempfile crate's default): nothing else in `dir` (tantivy's
/// segments, lock files, the data itself) is ever touched. Never fails: a file that cannot
/// be read or removed stays where it is.
pub fn sweep_temp_files(dir: &Path, writers: TempWriters, now: SystemTime) -> Vec<(PathBuf, StaleBecause)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let ours = TempName::parse(&file_name);
        if ours.is_none() && !is_anonymous_temp(&file_name) {
            continue;
        }
        // Never follow a link or descend: only plain files are temp files.
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        if !meta.file_type().is_file() {
            continue;
        }
        let old = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).is_some_and(|age| age > STALE_TEMP_AGE);
        let because = match ours {
            Some(name) if !pid_alive(name.pid) => Some(StaleBecause::OwnerGone),
            Some(_) => old.then_some(StaleBecause::Old),
            None if writers == TempWriters::LockHolderOnly => Some(StaleBecause::NoOwnerPossible),
            None => old.then_some(StaleBecause::Old),
        };
        if let Some(because) = because
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed.push((entry.path(), because));
        }
    }
    removed
}

/// Does a process with this pid run (this one included)?
fn pid_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Create `dir` (and its parents) readable by this user alone; an existing one is kept as
/// it is.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// `n` random bytes from the operating system, as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness (never seen on Linux): fall back to a seeded generator, which
        // still keeps names apart, though not unguessable.
        bytes.iter_mut().for_each(|b| *b = fastrand::u8(..));
    }
    hex::encode(bytes)
}

/// Hold an exclusive lock on `path` (created if missing) until the returned file is
/// dropped. Blocks while another process or thread holds it.
pub fn lock_exclusive(path: &Path) -> Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    file.lock().with_context(|| format!("cannot lock {}", path.display()))?;
    Ok(file)
}

/// Who a file is and when it last changed, from one `stat`: a different stamp means the
/// file was replaced (a new inode after an atomic write) or written in place (size, mtime,
/// ctime). Comparing stamps is how callers avoid re-reading files that did not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileStamp {
    /// The stamp of `path`, `None` when it does not exist.
    pub fn of(path: &Path) -> std::io::Result<Option<FileStamp>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(FileStamp::from_metadata(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn from_metadata(m: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
        }
    }

    pub fn dev(&self) -> u64 {
        self.dev
    }

    pub fn ino(&self) -> u64 {
        self.ino
    }

    pub fn size(&self) -> u64 {
        self.size
    }
}

/// A host-held secret (32 random bytes in a 0600 file) that seals records this host writes
/// about files it later trusts without re-reading them: a sealed stamp says "these bytes
/// were hashed and found good, and the file has not changed since". Anyone who cannot read
/// the key cannot forge a seal, so a writer of the sealed files alone (a damaged disk, a
/// stray tool, a mount that somehow reached them) gets a re-verification, never trust.
#[derive(Clone)]
pub struct SealKey(ring::hmac::Key);

impl SealKey {
    const LEN: usize = 32;

    /// The key in `path`, created if missing. A damaged key file (wrong length) is replaced:
    /// the key protects nothing that cannot be re-derived, so the only cost is that every
    /// record sealed with the old key is verified again once.
    pub fn load_or_create(path: &Path) -> Result<SealKey> {
        match std::fs::read(path) {
            Ok(bytes) if bytes.len() == Self::LEN => return Ok(SealKey::from_bytes(&bytes)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow!("cannot read the seal key {}: {e}", path.display())),
        }
        let mut bytes = [0u8; Self::LEN];
        getrandom::fill(&mut bytes).map_err(|e| anyhow!("no OS randomness for the seal key: {e}"))?;
        // write_atomic's temp file is 0600, and the rename makes a concurrent creator's key
        // and ours one winner; re-read so both processes use the one on disk.
        write_atomic(path, &bytes)?;
        match std::fs::read(path) {
            Ok(on_disk) if on_disk.len() == Self::LEN => Ok(SealKey::from_bytes(&on_disk)),
            _ => Ok(SealKey::from_bytes(&bytes)),
        }
    }

    fn from_bytes(bytes: &[u8]) -> SealKey {
        SealKey(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes))
    }

    /// HMAC-SHA256 over `parts` (each length-prefixed, so no two lists share a seal), hex.
    pub fn seal(&self, parts: &[&[u8]]) -> String {
        hex::encode(ring::hmac::sign(&self.0, &Self::framed(parts)).as_ref())
    }

    /// Does `mac` (hex) seal exactly `parts`? Compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], mac: &str) -> bool {
        let Ok(tag) = hex::decode(mac) else { return false };
        ring::hmac::verify(&self.0, &Self::framed(parts), &tag).is_ok()
    }

    fn framed(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
        for part in parts {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out
    }
}

/// A scratch directory next to the one it will replace: `.KIND-NAME-PID-RANDOM`. The pid
/// tells a later recovery whether its owner is still alive; the random part keeps two
/// threads (or a reused pid) of the same process apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScratchName {
    pub kind: String,
    pub name: String,
    pub pid: u32,
}

/// Hex digits of the random part of a scratch name.
const SCRATCH_RANDOM_HEX: usize = 16;

impl ScratchName {
    /// A new scratch path in `parent` for `kind` (`staging`, `old`, `removed`) of `name`.
    pub fn new_path(parent: &Path, kind: &str, name: &str) -> PathBuf {
        parent.join(format!(".{kind}-{name}-{}-{}", std::process::id(), random_hex(SCRATCH_RANDOM_HEX / 2)))
    }

    /// Read a scratch file name back; also the older `.KIND-NAME-PID` form. `None` for
    /// anything else.
    pub fn parse(file_name: &str) -> Option<ScratchName> {
        let rest = file_name.strip_prefix('.')?;
        let (kind, tail) = rest.split_once('-')?;
        let (head, last) = tail.rsplit_once('-')?;
        let (name, pid) = if last.len() == SCRATCH_RANDOM_HEX && last.bytes().all(|b| b.is_ascii_hexdigit()) {
            head.rsplit_once('-')?
        } else {
            (head, last)
        };
        let pid = pid.parse().ok()?;
        (!name.is_empty()).then(|| ScratchName { kind: kind.to_string(), name: name.to_string(), pid })
    }

    /// Is the process that made it still running (this one included)?
    pub fn owner_alive(&self) -> bool {
        pid_alive(self.pid)
    }
}

/// Make the prepared directory `staging` live at `target` with two renames: the current
/// `target` (if any) moves to `aside` first. A crash between the renames leaves `aside`
/// and no `target`, which a recovery recognises (see [`ScratchName`]) and undoes. On a
/// failed second rename the old version is put back. Returns whether an old version was
/// moved aside.
pub fn swap_dir(target: &Path, staging: &Path, aside: &Path) -> Result<bool> {
    let had_old = target.exists();
    if had_old {
        std::fs::rename(target, aside).with_context(|| format!("cannot move aside {}", target.display()))?;
    }
    if let Err(e) = std::fs::rename(staging, target) {
        if had_old {
            let _ = std::fs::rename(aside, target);
        }
        return Err(e).with_context(|| format!("cannot install into {}", target.display()));
    }
    Ok(had_old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_names_round_trip_in_both_forms() {
        let p = ScratchName::new_path(Path::new("/x"), "staging", "read-log-file");
        let parsed = ScratchName::parse(p.file_name().unwrap().to_str().unwrap()).unwrap();
        assert_eq!(
            parsed,
            ScratchName { kind: "staging".into(), name: "read-log-file".into(), pid: std::process::id() }
        );
        assert_ne!(p, ScratchName::new_path(Path::new("/x"), "staging", "read-log-file"), "random part differs");
        assert_eq!(
            ScratchName::parse(".old-tool-4242"),
            Some(ScratchName { kind: "old".into(), name: "tool".into(), pid: 4242 })
        );
        assert_eq!(ScratchName::parse(".old-tool"), None);
        assert_eq!(ScratchName::parse("tool"), None);
        assert_eq!(ScratchName::parse(".bundle-x-y"), None);
    }

    #[test]
    fn seals_bind_their_parts_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = SealKey::load_or_create(&dir.path().join("key")).unwrap();
        let mac = key.seal(&[b"ab", b"c"]);
        assert!(key.verify(&[b"ab", b"c"], &mac));
        assert!(!key.verify(&[b"a", b"bc"], &mac), "framing keeps part boundaries");
        assert!(!key.verify(&[b"ab", b"c"], "00"), "a wrong tag");
        assert!(!key.verify(&[b"ab", b"c"], "not hex"));
        let mode = std::fs::metadata(dir.path().join("key")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SealKey::load_or_create(&dir.path().join("key")).unwrap();
        assert!(again.verify(&[b"ab", b"c"], &mac), "the key on disk is reused");
        std::fs::write(dir.path().join("key"), b"short").unwrap();
        let fresh = SealKey::load_or_create(&dir.path().join("key")).unwrap();
        assert!(!fresh.verify(&[b"ab", b"c"], &mac), "a damaged key is replaced, old seals fail");
        assert_eq!(std::fs::read(dir.path().join("key")).unwrap().len(), 32);
    }

    #[test]
    fn stamps_change_when_a_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        assert_eq!(FileStamp::of(&f).unwrap(), None);
        write_atomic(&f, b"one").unwrap();
        let first = FileStamp::of(&f).unwrap();
        assert_eq!(first, FileStamp::of(&f).unwrap());
        write_atomic(&f, b"one").unwrap();
        assert_ne!(first, FileStamp::of(&f).unwrap(), "same bytes, new inode");
    }

    #[test]
    fn temp_names_round_trip_and_other_names_are_not_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = temp_file_for(&dir.path().join("policy.toml")).unwrap();
        let name = tmp.path().file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(TempName::parse(&name), Some(TempName { target: "policy.toml".into(), pid: std::process::id() }));
        assert_eq!(TempName::parse(".a.b.c.42-abcdefABCDEF.tmp"), Some(TempName { target: "a.b.c".into(), pid: 42 }));
        for other in [
            ".a.42-short.tmp",
            ".a.x42-abcdefABCDEF.tmp",
            "a.42-abcdefABCDEF.tmp",
            ".42-abcdefABCDEF.tmp",
            "meta.json",
            ".managed.json",
        ] {
            assert_eq!(TempName::parse(other), None, "{other}");
        }
        assert!(is_anonymous_temp(".tmpAb3dE9"));
        assert!(
            !is_anonymous_temp(".tmpAb3dE9x")
                && !is_anonymous_temp(".tantivy-meta.lock")
                && !is_anonymous_temp("tmpAb3dE9")
        );
    }

    #[test]
    fn random_hex_is_long_and_distinct() {
        let (a, b) = (random_hex(16), random_hex(16));
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
