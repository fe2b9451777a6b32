//! Every path of a `file:` bank resolved beneath its directory, never through a link.
//!
//! Invariant: **no operation of a `file:` bank follows a symbolic link.** A user who may write
//! into the bank can plant a link anywhere in it; a gc running as root that deleted (or wrote,
//! or renamed) through it would act on any file of the host (the CVE-2013-4392 class, which
//! systemd-tmpfiles, `find -delete` and restic's local backend avoid the same way). So every
//! path is walked from the bank directory's own descriptor, one component at a time, each
//! opened with `O_NOFOLLOW | O_DIRECTORY`, and the last one is acted on with the `*at` calls
//! (`unlinkat`, `renameat`, `linkat`, `openat(O_NOFOLLOW)`), which act on a link itself, never
//! on what it points at. A path-text check ("is it under the root?") proves nothing once a
//! component is a link; this is the kernel's word instead. A link met on the way is an error
//! naming it ([`LinkInBank`]); a listing reports one and does not descend.
//!
//! The bank's directory itself may be reached through links (`/srv/bank` a link to a disk's
//! mount): the store resolves it once, when it is opened, and holds that directory's
//! descriptor from then on.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path as FsPath, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// The bank's directory, opened once: every path is resolved from this descriptor.
#[derive(Debug)]
pub(crate) struct Root {
    path: PathBuf,
    fd: OwnedFd,
}

impl Root {
    /// Open the directory at `path` (already canonical: links in it were resolved once, by the
    /// operator's choice of bank).
    pub(super) fn open(path: PathBuf) -> io::Result<Self> {
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self { path, fd })
    }

    pub(crate) fn path(&self) -> &FsPath {
        &self.path
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the bank's path still names the directory this store opened: not when it is
    /// gone, or another directory is in its place (a backup disk unmounted, leaving the bare
    /// mount point; a bank moved away and a directory made at its path).
    pub(super) fn still_there(&self) -> bool {
        let (Ok(held), Ok(now)) = (rustix::fs::fstat(&self.fd), rustix::fs::stat(&self.path))
        else {
            return false;
        };
        held.st_dev == now.st_dev && held.st_ino == now.st_ino
    }

    /// `rel` (a path relative to the root) as the path a message names.
    pub(super) fn display(&self, rel: &FsPath) -> PathBuf {
        self.path.join(rel)
    }
}

/// A symbolic link met where the bank's own file or directory should be.
#[derive(Debug)]
pub(crate) struct LinkInBank {
    /// The link's path, relative to the bank's directory.
    pub(crate) rel: PathBuf,
    /// The bank's directory.
    pub(crate) root: PathBuf,
}

impl std::fmt::Display for LinkInBank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` is a symbolic link in the bank `{}`: banklease never follows a link in a bank, \
             nor removes one; it was left as it is (remove it if it is not meant to be there)",
            self.rel.display(),
            self.root.display()
        )
    }
}

impl std::error::Error for LinkInBank {}

/// Whether `e` is a [`LinkInBank`].
pub(crate) fn is_link_in_bank(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<LinkInBank>())
}

fn link_error(root: &Root, rel: &FsPath) -> io::Error {
    io::Error::other(LinkInBank {
        rel: rel.to_owned(),
        root: root.path.clone(),
    })
}

/// The components of `rel`, which must be plain names (object_store's paths have no `.`, `..`
/// or empty parts; anything else is refused rather than resolved).
fn names(rel: &FsPath) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            other => Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "`{}` is not a plain path below the bank ({other:?})",
                    rel.display()
                ),
            )),
        })
        .collect()
}

/// The directories from the root down to one of the bank's directories, each held open: the
/// last is where a name is acted on, and the chain is what pruning walks back up.
#[derive(Debug)]
pub(super) struct Dirs<'r> {
    root: &'r Root,
    /// The directories below the root, outermost first, with their names.
    chain: Vec<(PathBuf, OwnedFd)>,
}

impl<'r> Dirs<'r> {
    /// The innermost directory (the root when the chain is empty).
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self.chain.last() {
            Some((_, fd)) => fd.as_fd(),
            None => self.root.fd(),
        }
    }

    /// The innermost directory's descriptor, owned: an open of its own (for the root too, not
    /// a duplicate, whose reading position would be shared with every other listing).
    pub(super) fn into_fd(mut self) -> io::Result<OwnedFd> {
        match self.chain.pop() {
            Some((_, fd)) => Ok(fd),
            None => Ok(open_dir_at(self.root.fd(), OsStr::new("."))?),
        }
    }

    /// Remove the directories of the chain that are empty, innermost first, stopping at the
    /// first that is not (or that is no longer the directory the chain holds). Never the root;
    /// `rmdir` removes only an empty directory and never follows a link.
    pub(super) fn prune(self) {
        let Dirs { root, mut chain } = self;
        while let Some((rel, _)) = chain.pop() {
            let parent = match chain.last() {
                Some((_, fd)) => fd.as_fd(),
                None => root.fd(),
            };
            let Some(name) = rel.file_name() else {
                return;
            };
            if rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).is_err() {
                return;
            }
        }
    }
}

fn open_dir_at(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// What is at `name` in `dir`, not following a link; `None` when nothing is.
pub(super) fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<FileType>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Open the directory `rel` below the root, one component at a time, never through a link;
/// with `create`, make the missing ones (never the root: only `init` makes a bank).
pub(super) fn dirs<'r>(root: &'r Root, rel: &FsPath, create: bool) -> io::Result<Dirs<'r>> {
    let mut dirs = Dirs {
        root,
        chain: Vec::new(),
    };
    let mut at = PathBuf::new();
    for name in names(rel)? {
        at.push(name);
        let opened = match open_dir_at(dirs.fd(), name) {
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(dirs.fd(), name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => {
                        return Err(context(e.into(), "create directory", &root.display(&at)))
                    }
                }
                open_dir_at(dirs.fd(), name)
            }
            other => other,
        };
        let fd = match opened {
            Ok(fd) => fd,
            Err(e) => return Err(not_a_dir(&dirs, name, &at, e)),
        };
        dirs.chain.push((at.clone(), fd));
    }
    Ok(dirs)
}

/// Why `name` could not be opened as a directory: a link is named as one.
fn not_a_dir(dirs: &Dirs<'_>, name: &OsStr, at: &FsPath, e: rustix::io::Errno) -> io::Error {
    if matches!(e, rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR)
        && matches!(kind_at(dirs.fd(), name), Ok(Some(FileType::Symlink)))
    {
        return link_error(dirs.root, at);
    }
    if e == rustix::io::Errno::NOENT {
        return io::Error::new(
            ErrorKind::NotFound,
            format!("`{}` does not exist", dirs.root.display(at).display()),
        );
    }
    context(e.into(), "open directory", &dirs.root.display(at))
}

/// `rel` split into its directory and its last name.
pub(super) fn split(rel: &FsPath) -> io::Result<(&FsPath, &OsStr)> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("`{}` names no file below the bank", rel.display()),
        )),
    }
}

/// Open the file `rel` for reading, never through a link (a link at its name is an error
/// naming it, as is one on the way).
pub(super) fn open_file(root: &Root, rel: &FsPath) -> io::Result<File> {
    let (parent, name) = split(rel)?;
    let dirs = dirs(root, parent, false)?;
    // Non-blocking: a FIFO planted at a key's name would hold the open (and the reader) for
    // ever; a regular file ignores the flag.
    match rustix::fs::openat(
        dirs.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(File::from(fd)),
        Err(rustix::io::Errno::LOOP) => Err(link_error(root, rel)),
        Err(rustix::io::Errno::NOENT) => Err(io::Error::new(
            ErrorKind::NotFound,
            format!("`{}` does not exist", root.display(rel).display()),
        )),
        Err(e) => Err(context(e.into(), "open", &root.display(rel))),
    }
}

/// Remove the file `rel` and (with `prune`) the directories it leaves empty. A link at its name is
/// left (an error naming it); a directory is not a file (`unlinkat` without `REMOVEDIR`
/// refuses it).
pub(super) fn remove_file(root: &Root, rel: &FsPath, prune: bool) -> io::Result<()> {
    let (parent, name) = split(rel)?;
    let dirs = dirs(root, parent, false)?;
    if let Some(FileType::Symlink) = kind_at(dirs.fd(), name)? {
        return Err(link_error(root, rel));
    }
    match rustix::fs::unlinkat(dirs.fd(), name, AtFlags::empty()) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOENT) => {
            return Err(io::Error::new(
                ErrorKind::NotFound,
                format!("`{}` does not exist", root.display(rel).display()),
            ))
        }
        Err(e) => return Err(context(e.into(), "remove", &root.display(rel))),
    }
    if prune {
        dirs.prune();
    }
    Ok(())
}

pub(super) fn context(e: io::Error, what: &str, path: &FsPath) -> io::Error {
    // The bank's directory gone is kept as it is: the store answers it as a missing object.
    if root_gone(&e) {
        return e;
    }
    io::Error::new(e.kind(), format!("cannot {what} `{}`: {e}", path.display()))
}

/// The bank's directory is gone, or another is in its place (`fs::still_root`).
#[derive(Debug)]
pub(super) struct RootGone(pub(super) PathBuf);

impl std::fmt::Display for RootGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the bank's directory `{}` is gone, or another directory is in its place, since the \
             bank was opened (moved, or its disk unmounted); only `banklease init` makes a bank",
            self.0.display()
        )
    }
}

impl std::error::Error for RootGone {}

/// Whether `e` says the bank's directory is gone.
pub(super) fn root_gone(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<RootGone>())
}
