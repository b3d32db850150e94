//! The directory the search index lives in: tantivy's memory-mapped directory, except that
//! its writes are not fsynced.
//!
//! Why that is safe: the index is derived. redb (fsynced on every write) is the source of
//! truth, and every index commit carries a stamp of the store generation it matches (see
//! `index.rs`). What can go wrong without fsync is only what a crash of the *machine* does
//! to files still in the page cache: a killed process loses nothing (the kernel keeps its
//! writes), a power loss or kernel crash may leave new index files empty, torn or missing.
//! So each unsynced commit also names the boot it was made in ([`boot_id`]): an index whose
//! last commit was made in this boot is exactly what was written; one from an earlier boot
//! is checked file by file (every segment file read back and its checksum verified) before
//! it is used, and rebuilt from the store if anything is wrong. A power loss therefore
//! costs at worst a rebuild of the index, never a record and never a wrong answer.
//!
//! What it saves: a tantivy commit fsyncs each new segment file, the meta file and the
//! directory (some ten fsyncs per `memory add`, each a journal commit on ext4, slow when
//! the disk is busy); the add now pays redb's fsync alone. Without a boot id (not Linux)
//! every write is fsynced as tantivy does by default.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tantivy::directory::error::{DeleteError, LockError, OpenDirectoryError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, FileSlice, Lock, MmapDirectory, TerminatingWrite,
    WatchCallback, WatchHandle, WritePtr,
};

/// Where the kernel says which boot this is (a random id per boot).
const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

/// The id of the running boot, if the system has one (Linux). Read once per process.
pub(super) fn boot_id() -> Option<&'static str> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string(BOOT_ID_FILE)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
    })
    .as_deref()
}

/// tantivy's [`MmapDirectory`] with unsynced writes (synced ones without a boot id).
#[derive(Clone, Debug)]
pub(super) struct IndexDirectory {
    inner: MmapDirectory,
    root: PathBuf,
    fsync: bool,
}

impl IndexDirectory {
    pub(super) fn open(root: &Path) -> Result<IndexDirectory, OpenDirectoryError> {
        Ok(IndexDirectory { inner: MmapDirectory::open(root)?, root: root.to_path_buf(), fsync: Self::fsyncs() })
    }

    /// Are writes fsynced (no boot id to tell a crash of the machine by)?
    pub(super) fn fsyncs() -> bool {
        boot_id().is_none()
    }
}

/// A new index file, written through to the kernel and closed without fsync.
struct UnsyncedFile(File);

impl Write for UnsyncedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl TerminatingWrite for UnsyncedFile {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        self.0.flush()
    }
}

impl Directory for IndexDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }

    fn open_read(&self, path: &Path) -> Result<FileSlice, OpenReadError> {
        self.inner.open_read(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        if self.fsync {
            return self.inner.open_write(path);
        }
        let full = self.root.join(path);
        let file = OpenOptions::new().write(true).create_new(true).open(&full).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                OpenWriteError::FileAlreadyExists(path.to_path_buf())
            } else {
                OpenWriteError::wrap_io_error(e, path.to_path_buf())
            }
        })?;
        Ok(BufWriter::new(Box::new(UnsyncedFile(file))))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if self.fsync {
            return self.inner.atomic_write(path, data);
        }
        // Still atomic (a temp file renamed over the old one), just not forced to disk.
        let full = self.root.join(path);
        let mut tmp = crate::fsutil::temp_file_for(&full)?;
        tmp.write_all(data)?;
        tmp.flush()?;
        tmp.persist(&full).map_err(|e| e.error)?;
        Ok(())
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }

    fn sync_directory(&self) -> io::Result<()> {
        if self.fsync { self.inner.sync_directory() } else { Ok(()) }
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}
