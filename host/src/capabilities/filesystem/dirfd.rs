//! Directories opened by handle: a path the host checked is opened once, following no
//! symlink at any component and never climbing out of where it starts (openat2 with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it, one `O_NOFOLLOW`
//! component at a time elsewhere), so a name swapped for a link between a check and the open
//! is refused instead of followed. Used for mounts ([`super::enforce`]) and for walking a
//! directory a guest moves ([`super::gate`]). A leaf: it imports nothing of ours.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd as _, FromRawFd as _, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path};

/// `openat(dirfd, name)` of a directory (`O_DIRECTORY | O_CLOEXEC`), with `extra` flags
/// (`O_NOFOLLOW`, `O_PATH`).
pub(super) fn openat(dirfd: RawFd, name: &std::ffi::CStr, extra: libc::c_int) -> std::io::Result<File> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | extra;
    // SAFETY: `name` is a NUL-terminated string; the returned descriptor is owned by the File.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Open directory `rel` below `base` (an absolute path from `/` when `base` is `None`)
/// following no symlink at any component and never climbing out of `base`.
pub(super) fn open_no_links(base: Option<&File>, rel: &Path) -> std::io::Result<File> {
    let start = match base {
        Some(b) => b.try_clone()?,
        None => openat(libc::AT_FDCWD, c"/", 0)?,
    };
    let rel = rel.strip_prefix("/").unwrap_or(rel);
    if rel.as_os_str().is_empty() {
        return Ok(start);
    }
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(std::io::Error::other(format!("{} is not a plain path", rel.display())));
    }
    let c_rel = CString::new(rel.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `open_how` is plain data; zero is its "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: the pointers are valid for the call; the size is the struct's.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            start.as_raw_fd(),
            c_rel.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        // SAFETY: `fd` was just opened and is owned by nobody else.
        return Ok(unsafe { File::from_raw_fd(fd as RawFd) });
    }
    let e = std::io::Error::last_os_error();
    // Kernels before 5.6 (or a seccomp filter) lack openat2: one component at a time.
    match e.raw_os_error() {
        Some(libc::ENOSYS | libc::EPERM) => open_by_components(start, rel),
        _ => Err(e),
    }
}

/// [`open_no_links`] without openat2: each component opened with `O_NOFOLLOW` from the
/// last (`rel` holds only plain names, so nothing climbs).
fn open_by_components(start: File, rel: &Path) -> std::io::Result<File> {
    let mut at = start;
    let last = rel.components().count().saturating_sub(1);
    for (i, c) in rel.components().enumerate() {
        let name = CString::new(c.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // Directories on the way need only be passed through (O_PATH); the mount itself is read.
        let path_only = if i < last { libc::O_PATH } else { 0 };
        at = openat(at.as_raw_fd(), &name, libc::O_NOFOLLOW | path_only)?;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_follows_no_link_at_any_component_either_way() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a", root.join("l")).unwrap();
        std::os::unix::fs::symlink("b", root.join("a/lb")).unwrap();
        let base = open_no_links(None, &root).unwrap();
        let opened = open_no_links(Some(&base), Path::new("a/b")).unwrap();
        assert_eq!(std::fs::read_link(format!("/proc/self/fd/{}", opened.as_raw_fd())).unwrap(), root.join("a/b"));
        for via_link in ["l/b", "a/lb", "l"] {
            assert!(open_no_links(Some(&base), Path::new(via_link)).is_err(), "{via_link}");
            let walked = open_by_components(base.try_clone().unwrap(), Path::new(via_link));
            assert!(walked.is_err(), "component walk, {via_link}");
        }
        assert!(open_by_components(base.try_clone().unwrap(), Path::new("a/b")).is_ok());
        assert!(open_no_links(Some(&base), Path::new("a/../..")).is_err(), "no climbing");
    }
}
