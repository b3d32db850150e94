//! The guest's own filesystem calls, seen by the host: `wasi:filesystem/types` and
//! `/preopens` are re-linked over wasmtime-wasi's through a view that forwards every
//! function to it, and on the way
//!
//! - charges what a call adds to the disk through its read-write mounts against its
//!   `disk_write_mb` budget: every byte written (`write`, file output streams, including
//!   `write-zeroes` and splices, which end in the stream's `write`), growth by `set-size`
//!   or by writing past the end of a file, and [`ENTRY_BYTES`] for each file, directory or
//!   link it creates. Past the budget the guest gets `insufficient-space` (ENOSPC), as from
//!   a full disk, and the call's report names the limit;
//! - records the refusals wasmtime-wasi makes inside the guest's mounts (`not-permitted`,
//!   `access`, `read-only`: a path that leads out of a mount, a symlink pointing out, a
//!   write to a read-only mount) as one aggregated `filesystem` denial per call: a count
//!   and the first few guest paths.
//!
//! The budget is per call (each call's store has its own), shared with the call's file
//! output streams through an `Arc`. A path outside every mount (`/etc/passwd` with only
//! `/workspace` mounted) is resolved by the guest's libc against its preopens and never
//! reaches the host: there is nothing to see, and nothing is opened. A call without
//! mounts has no descriptors, so none of this runs for it.
//!
//! Why one file of ~840 lines: every function of the two WASI interfaces must be forwarded
//! (the compiler checks the list is whole), and the accounting and link judgements they
//! call are only correct together; the handle-walking primitives live in [`super::dirfd`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Result;
use bytes::Bytes;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, Dir, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, ErrorCode, HostDescriptor, HostDirectoryEntryStream, OpenFlags,
};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, FsError, FsResult, OutputStream, Pollable, StreamError, StreamResult,
};
use wasmtime_wasi::{FsPerms, OpenMode};

use crate::capabilities::CapabilityKind;
use crate::capabilities::Limits;
use crate::sandbox::{CallState, Denial};

/// What a new directory entry (file, directory, link) costs against the budget: one
/// filesystem block, so a guest creating empty files by the thousand runs out too.
pub(crate) const ENTRY_BYTES: u64 = 4096;
/// Refused operations named in the denial; the rest are counted.
const NAMED_REFUSALS: usize = 5;
/// Guest paths are kept this long at most (a path the guest chose, per open descriptor).
const MAX_PATH_BYTES: usize = 512;

/// One call's disk-write budget.
pub(crate) struct DiskBudget {
    limit: u64,
    used: AtomicU64,
    /// A write was refused for lack of budget.
    hit: AtomicBool,
}

impl DiskBudget {
    fn new(limit_mb: u64) -> DiskBudget {
        DiskBudget { limit: limit_mb.saturating_mul(1 << 20), used: AtomicU64::new(0), hit: AtomicBool::new(false) }
    }

    /// Take `bytes` from the budget, all or nothing.
    fn charge(&self, bytes: u64) -> bool {
        if bytes == 0 {
            return true;
        }
        let taken = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| u.checked_add(bytes).filter(|n| *n <= self.limit))
            .is_ok();
        if !taken {
            self.hit.store(true, Ordering::Relaxed);
        }
        taken
    }

    /// Give back what a write that failed did not use.
    fn refund(&self, bytes: u64) {
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(bytes)));
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used.load(Ordering::Relaxed))
    }
}

/// The filesystem slice of a call: its budget, the guest paths of its open descriptors
/// (to name refusals), and the refusals.
#[derive(Default)]
pub(crate) struct FsState {
    /// `None` without a read-write mount: nothing can be written at all.
    budget: Option<Arc<DiskBudget>>,
    limit_mb: u64,
    paths: HashMap<u32, String>,
    /// The mounts, opened and checked by handle ([`super::enforce`]): what
    /// `get-directories` hands the guest, instead of wasmtime-wasi's preopens by path.
    preopens: Vec<(Dir, String)>,
    refused: u64,
    named: Vec<String>,
}

impl FsState {
    pub(crate) fn new(limits: &Limits, preopens: Vec<(Dir, String)>) -> FsState {
        let writable = preopens.iter().any(|(d, _)| d.perms == FsPerms::ReadWrite);
        FsState {
            budget: writable.then(|| Arc::new(DiskBudget::new(limits.disk_write_mb))),
            limit_mb: limits.disk_write_mb,
            preopens,
            ..FsState::default()
        }
    }

    /// The refusals and a budget overrun, as denials (one line each, however many).
    pub(crate) fn take_denials(&mut self) -> Vec<Denial> {
        let mut out = Vec::new();
        if self.refused > 0 {
            let more = self.refused - self.named.len() as u64;
            let mut message = format!(
                "{} filesystem operation(s) refused inside the skill's mounts (a path leading out of a mount, a symlink pointing out, or a write to a read-only mount): {}",
                self.refused,
                self.named.join("; ")
            );
            if more > 0 {
                message.push_str(&format!("; and {more} more"));
            }
            out.push(Denial { capability: CapabilityKind::Filesystem.into(), message });
            self.refused = 0;
            self.named.clear();
        }
        if let Some(b) = &self.budget
            && b.hit.swap(false, Ordering::Relaxed)
        {
            out.push(Denial {
                capability: CapabilityKind::Filesystem.into(),
                message: format!(
                    "disk-write limit reached: a call may write {} MiB through its read-write mounts (limit disk_write_mb; new files and directories count {ENTRY_BYTES} bytes each), and further writes failed with insufficient-space. A skill that needs more declares `limits: disk_write_mb: N` in SKILL.md (at most {}) and the user grants it with `skillhost policy grant NAME limits`",
                    self.limit_mb,
                    Limits::CEILING.disk_write_mb
                ),
            });
        }
        out
    }

    fn path_of(&self, fd: u32) -> &str {
        self.paths.get(&fd).map_or("(a descriptor)", String::as_str)
    }

    fn join(&self, dir: u32, path: &str) -> String {
        let mut joined = format!("{}/{path}", self.path_of(dir).trim_end_matches('/'));
        if joined.len() > MAX_PATH_BYTES {
            joined.truncate(joined.floor_char_boundary(MAX_PATH_BYTES));
            joined.push('…');
        }
        joined
    }

    /// Record `result` if wasmtime-wasi refused the operation on `target`.
    fn note<T>(&mut self, op: &str, target: impl FnOnce(&FsState) -> String, result: FsResult<T>) -> FsResult<T> {
        if let Err(e) = &result
            && let Some(code @ (ErrorCode::NotPermitted | ErrorCode::Access | ErrorCode::ReadOnly)) =
                e.downcast_ref().copied()
        {
            self.refused += 1;
            if self.named.len() < NAMED_REFUSALS {
                let code = match code {
                    ErrorCode::NotPermitted => "not-permitted",
                    ErrorCode::Access => "access",
                    _ => "read-only",
                };
                let target = target(self);
                self.named.push(format!("{op} {target} ({code})"));
            }
        }
        result
    }
}

/// wasmtime-wasi's filesystem view, and the call's [`FsState`].
pub(crate) struct GatedFs<'a> {
    inner: WasiFilesystemCtxView<'a>,
    state: &'a mut FsState,
}

struct GatedFsView;

impl HasData for GatedFsView {
    type Data<'a> = GatedFs<'a>;
}

fn view(s: &mut CallState) -> GatedFs<'_> {
    GatedFs {
        inner: WasiFilesystemCtxView { ctx: s.wasi.filesystem(), table: &mut s.table },
        state: &mut s.caps.filesystem,
    }
}

/// Re-link `wasi:filesystem/types` and `/preopens` over wasmtime-wasi's (linked already).
pub(super) fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
    linker.allow_shadowing(true);
    let linked = types::add_to_linker::<CallState, GatedFsView>(linker, view)
        .and_then(|()| preopens::add_to_linker::<CallState, GatedFsView>(linker, view));
    linker.allow_shadowing(false);
    Ok(linked?)
}

fn borrow(rep: u32) -> Resource<Descriptor> {
    Resource::new_borrow(rep)
}

/// Whether a link with this text points down from where it stands: relative, not empty,
/// no `..` component. Such a link stays inside its mount wherever a rename or a hard link
/// later puts it and whatever the links it passes through are (the guest's own point down
/// too); a link that may climb would have to be re-judged at every rename of anything
/// above it. The sandbox would never follow a link out, but the user's own tools would.
fn points_down(target: &str) -> bool {
    !target.is_empty() && !target.starts_with('/') && target.split('/').all(|c| c != "..")
}

/// How many links deep [`GatedFs::link_points_down`] follows the links a new link passes
/// through before refusing (the kernel's own limit is 40; a real tree needs a few).
const MAX_LINK_DEPTH: usize = 8;

/// The operations judged by the links in the tree (rename, symlink, link), one at a time
/// across every call in this process: a judgement reads the tree, and another call's
/// operation between the judgement and the act could change what was judged (a directory
/// holding a planted link renamed, in the same parent, onto the name just walked). Another
/// process writing the same workspace is not covered.
static LINK_JUDGED: std::sync::LazyLock<tokio::sync::Mutex<()>> =
    std::sync::LazyLock::new(|| tokio::sync::Mutex::new(()));

/// How many entries a moved directory may hold for [`climbing_link_below`] to walk it; a
/// larger tree is not moved by a skill (the walk would hold the call for too long).
const MAX_WALKED_ENTRIES: usize = 100_000;

/// The first link below the open directory `dir` (path `rel`) whose text does not point
/// down, walked by handle: each subdirectory opened with `O_NOFOLLOW` from its parent's
/// handle, so a name swapped for a link during the walk is not followed.
fn climbing_link_below(dir: &std::fs::File, rel: &str, budget: &mut usize) -> std::io::Result<Option<String>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    for entry in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let entry = entry?;
        *budget = budget.checked_sub(1).ok_or_else(|| std::io::Error::other("directory too large to move"))?;
        let name = entry.file_name();
        let here = join_rel(rel, &name.to_string_lossy());
        let c_name = std::ffi::CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            let mut buf = vec![0u8; 4096];
            // SAFETY: `buf` is valid for its length; the result is the number of bytes written.
            let n = unsafe { libc::readlinkat(dir.as_raw_fd(), c_name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A text that fills the buffer may be cut short: judged as climbing, not read.
            let n = n as usize;
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            if n >= buf.len() || !points_down(&text) {
                return Ok(Some(here));
            }
        } else if kind.is_dir() {
            let sub = super::dirfd::openat(dir.as_raw_fd(), &c_name, libc::O_NOFOLLOW)?;
            if let Some(found) = climbing_link_below(&sub, &here, budget)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// `parent/name`, or `name` when `parent` is empty (paths relative to a descriptor).
fn join_rel(parent: &str, name: &str) -> String {
    if parent.is_empty() { name.to_string() } else { format!("{parent}/{name}") }
}

/// The directory part of a relative path (`""` for a bare name).
fn parent_rel(path: &str) -> &str {
    path.trim_end_matches('/').rsplit_once('/').map_or("", |(p, _)| p)
}

fn no_space() -> FsError {
    ErrorCode::InsufficientSpace.into()
}

impl GatedFs<'_> {
    /// The budget and the file behind `fd` when writing to it costs budget: a file opened
    /// for writing under a read-write mount. Anything else is refused by wasmtime-wasi or
    /// the OS without writing.
    fn charged_file(&self, fd: &Resource<Descriptor>) -> Option<(Arc<DiskBudget>, Arc<std::fs::File>)> {
        let budget = self.state.budget.as_ref()?;
        match self.inner.table.get(fd) {
            Ok(Descriptor::File(f)) if f.perms == FsPerms::ReadWrite && f.open_mode.contains(OpenMode::WRITE) => {
                Some((budget.clone(), f.file.clone()))
            }
            _ => None,
        }
    }

    /// Whether a link with text `target` standing at `at` (relative to descriptor `dir`)
    /// stays in its mount, judged on the tree: its text points down ([`points_down`]),
    /// and so does every link already in the mount that the text passes through, followed
    /// as the kernel would (a planted `up -> ..` makes `x -> up/secret` climb).
    async fn link_points_down(&mut self, dir: u32, at: &str, target: &str) -> bool {
        let mut pending = vec![(parent_rel(at).to_string(), target.to_string())];
        let mut followed = 0;
        while let Some((base, text)) = pending.pop() {
            if !points_down(&text) {
                return false;
            }
            let mut prefix = base;
            for part in text.split('/').filter(|c| !c.is_empty() && *c != ".") {
                prefix = join_rel(&prefix, part);
                let stat =
                    HostDescriptor::stat_at(&mut self.inner, borrow(dir), types::PathFlags::empty(), prefix.clone());
                match stat.await {
                    Ok(st) if st.type_ == types::DescriptorType::SymbolicLink => {
                        followed += 1;
                        if followed > MAX_LINK_DEPTH {
                            return false;
                        }
                        match HostDescriptor::readlink_at(&mut self.inner, borrow(dir), prefix.clone()).await {
                            Ok(inner) => pending.push((parent_rel(&prefix).to_string(), inner)),
                            Err(_) => return false,
                        }
                    }
                    Ok(_) => {}
                    // Nothing there yet: what the guest puts there later is judged then.
                    Err(e) if matches!(e.downcast_ref(), Some(ErrorCode::NoEntry)) => break,
                    Err(_) => return false,
                }
            }
        }
        true
    }

    /// Whether renaming `old` (below descriptor `dir`) to `new` (below `new_dir`) keeps every
    /// link it carries inside the mount. Only a directory carries links, and only a move to
    /// another parent changes where a link's `..` leads (the ancestors are what it climbs
    /// through). Such a move is refused when the directory holds a link that does not point
    /// down ([`points_down`]): links the guest makes point down, so that one was planted by
    /// the user and is judged by the tree it was planted in. A directory that cannot be
    /// walked (reached through links, too large) is not moved either.
    async fn directory_moves_safely(&mut self, dir: u32, old: &str, new_dir: u32, new: &str) -> bool {
        let st = HostDescriptor::stat_at(&mut self.inner, borrow(dir), types::PathFlags::empty(), old.to_string());
        match st.await {
            Ok(st) if st.type_ == types::DescriptorType::Directory => {}
            // Not a directory, or nothing there (the rename itself then says why).
            _ => return true,
        }
        let from = self.parent_identity(dir, old).await;
        if from.is_some() && from == self.parent_identity(new_dir, new).await {
            return true;
        }
        let Ok(Descriptor::Dir(base)) = self.inner.table.get(&borrow(dir)) else { return false };
        let base = base.dir.clone();
        let old = std::path::PathBuf::from(old.trim_end_matches('/'));
        let walked = tokio::task::spawn_blocking(move || {
            let moved = super::dirfd::open_no_links(Some(&base), &old)?;
            let mut budget = MAX_WALKED_ENTRIES;
            climbing_link_below(&moved, "", &mut budget)
        })
        .await;
        match walked {
            Ok(Ok(None)) => true,
            Ok(Ok(Some(link))) => {
                tracing::debug!("refused moving a directory that holds the climbing link {link}");
                false
            }
            _ => false,
        }
    }

    /// The identity (device and inode, hashed) of the directory `path` stands in.
    async fn parent_identity(&mut self, dir: u32, path: &str) -> Option<(u64, u64)> {
        let parent = parent_rel(path);
        let r = if parent.is_empty() {
            HostDescriptor::metadata_hash(&mut self.inner, borrow(dir)).await
        } else {
            HostDescriptor::metadata_hash_at(&mut self.inner, borrow(dir), types::PathFlags::empty(), parent.into())
                .await
        };
        r.ok().map(|h| (h.lower, h.upper))
    }

    /// Whether `old` (relative to `dir`) is a link, and if so its text; `None` when it is
    /// not a link or cannot be read (the operation itself then says why).
    async fn link_text(&mut self, dir: u32, old: &str) -> Option<String> {
        let st = HostDescriptor::stat_at(&mut self.inner, borrow(dir), types::PathFlags::empty(), old.to_string());
        match st.await {
            Ok(st) if st.type_ == types::DescriptorType::SymbolicLink => {
                HostDescriptor::readlink_at(&mut self.inner, borrow(dir), old.to_string()).await.ok()
            }
            _ => None,
        }
    }

    /// The budget when creating an entry in directory `fd` costs budget.
    fn charged_dir(&self, fd: &Resource<Descriptor>) -> Option<Arc<DiskBudget>> {
        let budget = self.state.budget.as_ref()?;
        match self.inner.table.get(fd) {
            Ok(Descriptor::Dir(d)) if d.perms == FsPerms::ReadWrite => Some(budget.clone()),
            _ => None,
        }
    }

    /// Charge creating one entry under `dir` (when that costs budget): the budget to
    /// refund from if the creation then fails.
    fn charge_entry(&self, dir: &Resource<Descriptor>) -> FsResult<Option<Arc<DiskBudget>>> {
        match self.charged_dir(dir) {
            Some(b) if !b.charge(ENTRY_BYTES) => Err(no_space()),
            budget => Ok(budget),
        }
    }
}

/// Give back an entry's charge when its creation failed.
fn settle_entry<T>(budget: Option<Arc<DiskBudget>>, r: &FsResult<T>) {
    if let (Some(b), Err(_)) = (budget, r) {
        b.refund(ENTRY_BYTES);
    }
}

/// The current size of an open file: one `fstat`, cheap enough to run in place.
fn size_of(file: &std::fs::File) -> FsResult<u64> {
    Ok(file.metadata()?.len())
}

impl preopens::Host for GatedFs<'_> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        let mut dirs = preopens::Host::get_directories(&mut self.inner)?;
        for (dir, guest) in self.state.preopens.clone() {
            dirs.push((self.inner.table.push(Descriptor::Dir(dir))?, guest));
        }
        for (fd, guest) in &dirs {
            self.state.paths.insert(fd.rep(), guest.clone());
        }
        Ok(dirs)
    }
}

impl types::Host for GatedFs<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        types::Host::convert_error_code(&mut self.inner, err)
    }

    fn filesystem_error_code(&mut self, err: Resource<wasmtime::Error>) -> wasmtime::Result<Option<ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.inner, err)
    }
}

impl HostDirectoryEntryStream for GatedFs<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        HostDirectoryEntryStream::read_directory_entry(&mut self.inner, stream).await
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        HostDirectoryEntryStream::drop(&mut self.inner, stream)
    }
}

impl HostDescriptor for GatedFs<'_> {
    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
        len: types::Filesize,
        advice: types::Advice,
    ) -> FsResult<()> {
        HostDescriptor::advise(&mut self.inner, fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync_data(&mut self.inner, fd).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorFlags> {
        HostDescriptor::get_flags(&mut self.inner, fd).await
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorType> {
        HostDescriptor::get_type(&mut self.inner, fd).await
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: types::Filesize) -> FsResult<()> {
        let rep = fd.rep();
        // Growing a file costs its growth (a sparse file still reads as that many bytes).
        let mut charged = None;
        if let Some((budget, file)) = self.charged_file(&fd) {
            let growth = size.saturating_sub(size_of(&file)?);
            if !budget.charge(growth) {
                return Err(no_space());
            }
            charged = Some((budget, growth));
        }
        let r = HostDescriptor::set_size(&mut self.inner, fd, size).await;
        if let (Some((b, growth)), Err(_)) = (&charged, &r) {
            b.refund(*growth);
        }
        self.state.note("set-size", |s| s.path_of(rep).to_string(), r)
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        let rep = fd.rep();
        let r = HostDescriptor::set_times(&mut self.inner, fd, atim, mtim).await;
        self.state.note("set-times", |s| s.path_of(rep).to_string(), r)
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: types::Filesize,
        offset: types::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        HostDescriptor::read(&mut self.inner, fd, len, offset).await
    }

    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buf: Vec<u8>,
        offset: types::Filesize,
    ) -> FsResult<types::Filesize> {
        let rep = fd.rep();
        let mut charged = None;
        if let Some((budget, file)) = self.charged_file(&fd) {
            // The bytes, and the hole a write past the end leaves before them.
            let hole = offset.saturating_sub(size_of(&file)?);
            let cost = (buf.len() as u64).saturating_add(hole);
            if !budget.charge(cost) {
                return Err(no_space());
            }
            charged = Some((budget, cost));
        }
        let r = HostDescriptor::write(&mut self.inner, fd, buf, offset).await;
        if let (Some((b, cost)), Err(_)) = (&charged, &r) {
            b.refund(*cost);
        }
        self.state.note("write", |s| s.path_of(rep).to_string(), r)
    }

    async fn read_directory(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<types::DirectoryEntryStream>> {
        let rep = fd.rep();
        let r = HostDescriptor::read_directory(&mut self.inner, fd).await;
        self.state.note("read-directory", |s| s.path_of(rep).to_string(), r)
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync(&mut self.inner, fd).await
    }

    async fn create_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (rep, target) = (fd.rep(), path.clone());
        let budget = self.charge_entry(&fd)?;
        let r = HostDescriptor::create_directory_at(&mut self.inner, fd, path).await;
        settle_entry(budget, &r);
        self.state.note("create-directory", |s| s.join(rep, &target), r)
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat(&mut self.inner, fd).await
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        let (rep, target) = (fd.rep(), path.clone());
        let r = HostDescriptor::stat_at(&mut self.inner, fd, path_flags, path).await;
        self.state.note("stat", |s| s.join(rep, &target), r)
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        let (rep, target) = (fd.rep(), path.clone());
        let r = HostDescriptor::set_times_at(&mut self.inner, fd, path_flags, path, atim, mtim).await;
        self.state.note("set-times", |s| s.join(rep, &target), r)
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path_flags: types::PathFlags,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (rep, target) = (fd.rep(), old_path.clone());
        let _judged = LINK_JUDGED.lock().await;
        // A second name for a link is a link standing somewhere else: judged there.
        if let Some(text) = self.link_text(rep, &old_path).await
            && !self.link_points_down(new_descriptor.rep(), &new_path, &text).await
        {
            return self.state.note("link", |s| s.join(rep, &target), Err(ErrorCode::NotPermitted.into()));
        }
        let budget = self.charge_entry(&new_descriptor)?;
        let r = HostDescriptor::link_at(&mut self.inner, fd, old_path_flags, old_path, new_descriptor, new_path).await;
        settle_entry(budget, &r);
        self.state.note("link", |s| s.join(rep, &target), r)
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        oflags: OpenFlags,
        flags: types::DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        let (rep, target) = (fd.rep(), path.clone());
        // A new file costs an entry: look first whether it exists (unless it must not).
        let creates = oflags.contains(OpenFlags::CREATE)
            && self.charged_dir(&fd).is_some()
            && (oflags.contains(OpenFlags::EXCLUSIVE)
                || HostDescriptor::stat_at(&mut self.inner, borrow(rep), path_flags, path.clone()).await.is_err());
        let budget = if creates { self.charge_entry(&fd)? } else { None };
        let r = HostDescriptor::open_at(&mut self.inner, fd, path_flags, path, oflags, flags).await;
        settle_entry(budget, &r);
        if let Ok(opened) = &r {
            let guest = self.state.join(rep, &target);
            self.state.paths.insert(opened.rep(), guest);
        }
        self.state.note("open", |s| s.join(rep, &target), r)
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        self.state.paths.remove(&fd.rep());
        HostDescriptor::drop(&mut self.inner, fd)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        let (rep, target) = (fd.rep(), path.clone());
        let r = HostDescriptor::readlink_at(&mut self.inner, fd, path).await;
        self.state.note("readlink", |s| s.join(rep, &target), r)
    }

    async fn remove_directory_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (rep, target) = (fd.rep(), path.clone());
        let r = HostDescriptor::remove_directory_at(&mut self.inner, fd, path).await;
        self.state.note("remove-directory", |s| s.join(rep, &target), r)
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (rep, target) = (fd.rep(), old_path.clone());
        let _judged = LINK_JUDGED.lock().await;
        // A link moved is judged where it will stand.
        if let Some(text) = self.link_text(rep, &old_path).await
            && !self.link_points_down(new_fd.rep(), &new_path, &text).await
        {
            return self.state.note("rename", |s| s.join(rep, &target), Err(ErrorCode::NotPermitted.into()));
        }
        // So is every link a moved directory holds: one that climbs (planted by someone
        // else; the guest cannot make one) means something else under another parent.
        if !self.directory_moves_safely(rep, &old_path, new_fd.rep(), &new_path).await {
            return self.state.note("rename", |s| s.join(rep, &target), Err(ErrorCode::NotPermitted.into()));
        }
        let r = HostDescriptor::rename_at(&mut self.inner, fd, old_path, new_fd, new_path).await;
        self.state.note("rename", |s| s.join(rep, &target), r)
    }

    async fn symlink_at(&mut self, fd: Resource<Descriptor>, src_path: String, dest_path: String) -> FsResult<()> {
        let (rep, target) = (fd.rep(), dest_path.clone());
        let _judged = LINK_JUDGED.lock().await;
        if !self.link_points_down(rep, &dest_path, &src_path).await {
            return self.state.note("symlink", |s| s.join(rep, &target), Err(ErrorCode::NotPermitted.into()));
        }
        let budget = self.charge_entry(&fd)?;
        let r = HostDescriptor::symlink_at(&mut self.inner, fd, src_path, dest_path).await;
        settle_entry(budget, &r);
        self.state.note("symlink", |s| s.join(rep, &target), r)
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (rep, target) = (fd.rep(), path.clone());
        let r = HostDescriptor::unlink_file_at(&mut self.inner, fd, path).await;
        self.state.note("unlink", |s| s.join(rep, &target), r)
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        HostDescriptor::read_via_stream(&mut self.inner, fd, offset)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        let rep = fd.rep();
        let charged = self.charged_file(&fd);
        let r = HostDescriptor::write_via_stream(&mut self.inner, fd, offset);
        let r = match (charged, r) {
            (Some((budget, file)), Ok(stream)) => {
                // A stream writes on from `offset`: the hole before it is its only gap.
                let hole = offset.saturating_sub(size_of(&file)?);
                if budget.charge(hole) {
                    self.budgeted(stream, budget)
                } else {
                    self.inner.table.delete(stream)?;
                    Err(no_space())
                }
            }
            (_, r) => r,
        };
        self.state.note("write-via-stream", |s| s.path_of(rep).to_string(), r)
    }

    fn append_via_stream(&mut self, fd: Resource<Descriptor>) -> FsResult<Resource<DynOutputStream>> {
        let rep = fd.rep();
        let charged = self.charged_file(&fd);
        let r = HostDescriptor::append_via_stream(&mut self.inner, fd);
        let r = match (charged, r) {
            (Some((budget, _)), Ok(stream)) => self.budgeted(stream, budget),
            (_, r) => r,
        };
        self.state.note("append-via-stream", |s| s.path_of(rep).to_string(), r)
    }

    async fn is_same_object(&mut self, a: Resource<Descriptor>, b: Resource<Descriptor>) -> wasmtime::Result<bool> {
        HostDescriptor::is_same_object(&mut self.inner, a, b).await
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<types::MetadataHashValue> {
        HostDescriptor::metadata_hash(&mut self.inner, fd).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        let (rep, target) = (fd.rep(), path.clone());
        let r = HostDescriptor::metadata_hash_at(&mut self.inner, fd, path_flags, path).await;
        self.state.note("stat", |s| s.join(rep, &target), r)
    }
}

impl GatedFs<'_> {
    /// Replace wasmtime-wasi's file output stream in the table by one that charges `budget`.
    fn budgeted(
        &mut self,
        stream: Resource<DynOutputStream>,
        budget: Arc<DiskBudget>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let inner = self.inner.table.delete(stream)?;
        let wrapped: DynOutputStream = Box::new(BudgetedStream { inner, budget });
        Ok(self.inner.table.push(wrapped)?)
    }
}

/// A file output stream whose writes are charged to the call's disk budget.
struct BudgetedStream {
    inner: DynOutputStream,
    budget: Arc<DiskBudget>,
}

fn stream_no_space() -> StreamError {
    // As from a full disk: the guest's libc reads ENOSPC through `filesystem-error-code`.
    StreamError::LastOperationFailed(std::io::Error::from_raw_os_error(libc::ENOSPC).into())
}

impl BudgetedStream {
    fn charge(&self, bytes: usize) -> StreamResult<()> {
        if self.budget.charge(bytes as u64) { Ok(()) } else { Err(stream_no_space()) }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for BudgetedStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let n = bytes.len();
        self.charge(n)?;
        self.inner.write(bytes).inspect_err(|_| self.budget.refund(n as u64))
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        // Charged in full up front: a failure part-way may have written some of it.
        self.charge(bytes.len())?;
        self.inner.blocking_write_and_flush(bytes).await
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let permit = self.inner.check_write()?;
        let left = self.budget.remaining();
        if permit > 0 && left == 0 {
            self.budget.hit.store(true, Ordering::Relaxed);
            return Err(stream_no_space());
        }
        Ok(permit.min(usize::try_from(left).unwrap_or(usize::MAX)))
    }

    fn write_zeroes(&mut self, nelem: usize) -> StreamResult<()> {
        self.charge(nelem)?;
        self.inner.write_zeroes(nelem).inspect_err(|_| self.budget.refund(nelem as u64))
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for BudgetedStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[cfg(test)]
mod tests {
    use super::{DiskBudget, climbing_link_below, join_rel, parent_rel, points_down};

    #[test]
    fn a_link_may_only_point_down_from_where_it_stands() {
        for down in ["file.txt", "a/b/c", "./x", "d", "."] {
            assert!(points_down(down), "{down}");
        }
        for climbs in ["../x", "a/../../x", "..", "/etc/passwd", "", "a/.."] {
            assert!(!points_down(climbs), "{climbs}");
        }
        assert_eq!(parent_rel("a/b/link"), "a/b");
        assert_eq!(parent_rel("link"), "");
        assert_eq!(join_rel("", "x"), "x");
    }

    #[test]
    fn a_moved_tree_is_walked_for_links_that_climb() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
        std::fs::write(t.path().join("a/b/file"), "x").unwrap();
        std::os::unix::fs::symlink("file", t.path().join("a/b/down")).unwrap();
        let walk = |budget: &mut usize| {
            climbing_link_below(&std::fs::File::open(t.path().join("a")).unwrap(), "", budget).unwrap()
        };
        assert_eq!(walk(&mut 100), None, "links that point down move with their tree");
        std::os::unix::fs::symlink("../../..", t.path().join("a/b/c/up")).unwrap();
        assert_eq!(walk(&mut 100).as_deref(), Some("b/c/up"));
        let mut tiny = 2;
        let too_large = climbing_link_below(&std::fs::File::open(t.path().join("a")).unwrap(), "", &mut tiny);
        assert!(too_large.is_err(), "a tree past the budget is not walked to the end");
    }

    #[test]
    fn a_budget_is_all_or_nothing_and_refunds() {
        let b = DiskBudget::new(1);
        assert!(b.charge(1 << 19));
        assert!(!b.charge((1 << 19) + 1), "over the limit by one byte");
        assert!(b.hit.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(b.remaining(), 1 << 19);
        assert!(b.charge(1 << 19));
        assert!(!b.charge(1));
        b.refund(10);
        assert_eq!(b.remaining(), 10);
        assert!(!b.charge(u64::MAX), "no overflow");
    }
}
