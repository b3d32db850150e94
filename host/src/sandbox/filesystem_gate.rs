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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Result;
use bytes::Bytes;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, ErrorCode, HostDescriptor, HostDirectoryEntryStream, OpenFlags,
};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, FsError, FsResult, OutputStream, Pollable, StreamError, StreamResult,
};
use wasmtime_wasi::{FsPerms, OpenMode};

use crate::capabilities::CapabilityKind;
use super::{CallState, Denial};
use crate::capabilities::Limits;

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
    /// Guest paths of the mounts (the preopens).
    roots: Vec<String>,
    refused: u64,
    named: Vec<String>,
}

impl FsState {
    pub(crate) fn new(limits: &Limits, writable: bool) -> FsState {
        FsState {
            budget: writable.then(|| Arc::new(DiskBudget::new(limits.disk_write_mb))),
            limit_mb: limits.disk_write_mb,
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

    /// Whether a symlink at `link` (relative to descriptor `dir`) whose text is `target`
    /// points inside the mount that holds it, judged on the text alone: one that leads out
    /// is refused even though the sandbox would never follow it, since the user's own tools
    /// (editors, git, scripts) would.
    fn link_stays_inside(&self, dir: u32, link: &str, target: &str) -> bool {
        let Some(dir) = self.paths.get(&dir).and_then(|p| lexical(p)) else { return false };
        let Some(root) = self
            .roots
            .iter()
            .filter(|r| dir == **r || r.as_str() == "/" || dir.starts_with(&format!("{r}/")))
            .max_by_key(|r| r.len())
        else {
            return false;
        };
        if target.starts_with('/') || link.starts_with('/') {
            return false;
        }
        let Some(link) = lexical(&format!("{dir}/{link}")) else { return false };
        let parent = link.rsplit_once('/').map_or("", |(p, _)| p);
        match lexical(&format!("{parent}/{target}")) {
            Some(to) => to == *root || root == "/" || to.starts_with(&format!("{root}/")),
            None => false,
        }
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

/// `path` (absolute, guest side) with `.` and `..` resolved on the text; `None` if it climbs
/// above `/`.
fn lexical(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
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
        let dirs = preopens::Host::get_directories(&mut self.inner)?;
        for (fd, guest) in &dirs {
            self.state.paths.insert(fd.rep(), guest.clone());
            self.state.roots.push(lexical(guest).unwrap_or_default());
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
        let r = HostDescriptor::rename_at(&mut self.inner, fd, old_path, new_fd, new_path).await;
        self.state.note("rename", |s| s.join(rep, &target), r)
    }

    async fn symlink_at(&mut self, fd: Resource<Descriptor>, src_path: String, dest_path: String) -> FsResult<()> {
        let (rep, target) = (fd.rep(), dest_path.clone());
        if !self.state.link_stays_inside(rep, &dest_path, &src_path) {
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
    use super::{DiskBudget, FsState, lexical};

    #[test]
    fn a_symlink_may_point_only_inside_its_mount() {
        let mut fs = FsState::default();
        fs.paths.insert(1, "/data".into());
        fs.paths.insert(2, "/data/sub/../deep".into());
        fs.roots.push("/data".into());
        assert!(fs.link_stays_inside(1, "link", "file.txt"));
        assert!(fs.link_stays_inside(1, "a/b/link", "../../file.txt"));
        assert!(fs.link_stays_inside(2, "link", "../x"));
        assert!(!fs.link_stays_inside(1, "evil", "../../ws-sibling/canary.txt"));
        assert!(!fs.link_stays_inside(1, "evil", "../data-sibling/x"));
        assert!(!fs.link_stays_inside(2, "link", "../../x"));
        assert!(!fs.link_stays_inside(1, "evil", "/etc/passwd"));
        assert!(!fs.link_stays_inside(9, "link", "file.txt"), "an unknown descriptor is refused");
        assert_eq!(lexical("/a/./b/../c"), Some("/a/c".into()));
        assert_eq!(lexical("/a/../.."), None);
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
