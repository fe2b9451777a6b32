//! The blocking half of [`LocalStore`](super::LocalStore): stripe locks, staged writes published
//! under a lock, and the sweep of stale temporaries. Everything here runs on the blocking pool.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path as FsPath, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::{PutMode, PutPayload, PutResult, UpdateVersion};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use sha2::{Digest, Sha256};

use super::beneath::{self, kind_at, Root, RootGone};
pub(super) use super::beneath::{context, root_gone};

/// Lock files sit in the store's root as `.banklease-lock#<k>`: object_store's local store
/// hides every name ending in `#<digits>` from listings (its own temporaries look like that), so
/// no listing or GC pass ever sees them. Made by the first write of a key of their stripe, so
/// only in a bank (every command checks the layout first). Where they sit is part of the
/// on-disk protocol, as the stripes are: a release that locked elsewhere would not exclude
/// this one.
pub(super) const LOCK_PREFIX: &str = ".banklease-lock#";

/// Protocol constant: every process that writes the same directory must map a key to the same
/// lock file, so the stripe count and the hash (SHA-256 of the key) never change.
pub(super) const STRIPES: u64 = 64;

/// Every write is staged in this directory of the store's root (the bank's own `_banklease/`),
/// never beside the key: the sweep then looks only here and cannot meet a user's file, however
/// its name looks. Renames and links from here stay within the bank's file system.
pub(super) const STAGING: &str = "_banklease/staging";

/// A staged file's name: `w-<32 hex digits>#0`. The `#<digits>` ending hides it from
/// object_store's listings; the random part is never reused.
const STAGED_PREFIX: &str = "w-";
/// The extended attribute of a staged file that names the key it is staged for.
pub(super) const KEY_XATTR: &str = "user.banklease.key";
const STAGED_SUFFIX: &str = "#0";

/// Bound on random names tried for one staged write (a collision is already vanishingly rare).
const MAX_STAGED: u32 = 16;

/// The name `store` in errors.
pub(super) const STORE: &str = "LocalStore";

/// An exclusive lock on one stripe: an open file description holding `flock`. Dropping it closes
/// the file, which releases the lock; a crashed process releases it too. Distinct open file
/// descriptions conflict even within one process, so threads need no extra mutex.
#[derive(Debug)]
pub(super) struct StripeGuard(#[allow(dead_code)] File);

pub(super) fn stripe_of(key: &str) -> u64 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) % STRIPES
}

/// Refuse to write under `root` when it is no longer the directory the store was opened on:
/// gone, or another one at its path — the bare mount point of an unmounted disk, a bank moved
/// away and a directory made in its place. Nothing is created there (only `init` makes a bank).
fn still_root(root: &Root) -> io::Result<()> {
    if root.still_there() {
        return Ok(());
    }
    Err(io::Error::new(
        ErrorKind::NotFound,
        RootGone(root.path().to_owned()),
    ))
}

/// Lock the stripes of `keys` (deduplicated, in stripe order, so two multi-key operations never
/// deadlock; locking one stripe twice would wait on ourselves). The lock files are opened in
/// the root's descriptor, never through a link planted at their names.
pub(super) fn lock_keys(root: &Root, keys: &[&str]) -> io::Result<Vec<StripeGuard>> {
    still_root(root)?;
    let mut stripes: Vec<u64> = keys.iter().map(|k| stripe_of(k)).collect();
    stripes.sort_unstable();
    stripes.dedup();
    stripes
        .into_iter()
        .map(|k| {
            let name = format!("{LOCK_PREFIX}{k}");
            let open = |flags: OFlags| {
                rustix::fs::openat(
                    root.fd(),
                    name.as_str(),
                    flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                    Mode::from_raw_mode(0o666),
                )
            };
            let fd = open(OFlags::RDWR | OFlags::CREATE)
                // Another user's lock file: flock works on a read-only descriptor too.
                .or_else(|e| match e {
                    rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => open(OFlags::RDONLY),
                    e => Err(e),
                })
                .map_err(|e| match e {
                    rustix::io::Errno::LOOP => link_in_bank(root, FsPath::new(&name)),
                    e => context(
                        e.into(),
                        "open lock file",
                        &root.display(FsPath::new(&name)),
                    ),
                })?;
            let file = File::from(fd);
            file.lock()
                .map_err(|e| context(e, "lock", &root.display(FsPath::new(&name))))?;
            Ok(StripeGuard(file))
        })
        .collect()
}

/// A link met at `rel`, as the error every operation gives for it.
pub(super) fn link_in_bank(root: &Root, rel: &FsPath) -> io::Error {
    io::Error::other(beneath::LinkInBank {
        rel: rel.to_owned(),
        root: root.path().to_owned(),
    })
}

/// The ETag object_store's `LocalFileSystem` reports for a file (inode, mtime in µs, size), from
/// a `stat` of it, so a version read through object_store's own local store compares equal.
pub(super) fn etag_of_stat(st: &rustix::fs::Stat) -> String {
    let inode = st.st_ino;
    let mtime = stat_micros(st);
    let size = st.st_size;
    format!("\"{inode:x}-{mtime:x}-{size:x}\"")
}

/// A `stat`'s modification time in µs since the epoch (0 before it).
pub(super) fn stat_micros(st: &rustix::fs::Stat) -> u128 {
    u128::try_from(st.st_mtime).unwrap_or_default() * 1_000_000
        + u128::from(st.st_mtime_nsec) / 1_000
}

/// How a write ended when it did not succeed, before mapping to object_store's errors.
#[derive(Debug)]
pub(super) enum WriteError {
    Exists,
    /// Conditional overwrite on a file system whose timestamps are rounded.
    NotImplemented,
    Precondition(String),
    Io(io::Error),
}

/// A hook run once the staged file is written and the condition checked, before publishing
/// (tests only: a writer killed there must leave nothing a reader can see; a writer slowed there
/// widens the window a missing lock would let a racer through).
pub(super) type BeforePublish = Option<std::sync::Arc<dyn Fn() + Send + Sync>>;

/// Write `payload` to a fresh staged file, then under the key's stripe lock check `mode`
/// against the current file and publish: a hard link for create (atomic even against writers
/// that do not take our locks), a rename otherwise.
///
/// The published file carries the file system's own stamp (the kernel's, set as it is
/// published: the `file:` bank's store clock is the file system's, never a writer's), strictly
/// after the version it replaces when the clock has not moved since (two writes in one µs), but
/// following the clock when it stepped back by more than a millisecond, so that the store's
/// stamps — which the GC reads as the store's clock — keep tracking it. The ETag changes on
/// every write either way: the temporary is created while the replaced version is still
/// linked, so their inodes differ.
///
/// `exact_mtime` is false on a file system that rounds timestamps (see
/// `LocalStore::keeps_exact_mtime`): there an older version's ETag could come back, so
/// conditional overwrites are refused.
pub(super) fn put(
    root: &Root,
    key: &str,
    rel: &FsPath,
    payload: &PutPayload,
    mode: &PutMode,
    exact_mtime: bool,
    before_publish: &BeforePublish,
) -> Result<PutResult, WriteError> {
    if matches!(mode, PutMode::Update(_)) && !exact_mtime {
        return Err(WriteError::NotImplemented);
    }
    let fill = |file: &mut File| payload.iter().try_for_each(|chunk| file.write_all(chunk));
    put_with(root, key, rel, fill, mode, before_publish)
}

/// Copy the file at `from` to the key `key` at `rel` as a new version (stamped, published
/// under the lock like a put). The source is read whole before the lock is taken, never
/// through a link. `mode` is create or overwrite (a copy has no conditional overwrite).
pub(super) fn copy(
    root: &Root,
    key: &str,
    rel: &FsPath,
    from: &FsPath,
    mode: &PutMode,
) -> Result<PutResult, WriteError> {
    let mut source = beneath::open_file(root, from).map_err(WriteError::Io)?;
    let fill = |file: &mut File| io::copy(&mut source, file).map(|_| ());
    put_with(root, key, rel, fill, mode, &None)
}

/// Move the file of `from_key` to `to_key` under both keys' locks: the same object (same
/// inode, mtime and ETag) under a new name; `create` refuses an existing target. A link at
/// either name, or on the way to it, is left alone (an error naming it).
pub(super) fn rename(
    root: &Root,
    (from_key, from): (&str, &FsPath),
    (to_key, to): (&str, &FsPath),
    create: bool,
) -> Result<(), WriteError> {
    let _guard = lock_keys(root, &[from_key, to_key]).map_err(WriteError::Io)?;
    let (from_dir, from_name) = beneath::split(from).map_err(WriteError::Io)?;
    let (to_dir, to_name) = beneath::split(to).map_err(WriteError::Io)?;
    let source = beneath::dirs(root, from_dir, false).map_err(WriteError::Io)?;
    match kind_at(source.fd(), from_name).map_err(WriteError::Io)? {
        Some(FileType::Symlink) => return Err(WriteError::Io(link_in_bank(root, from))),
        None => {
            return Err(WriteError::Io(io::Error::new(
                ErrorKind::NotFound,
                format!("`{}` does not exist", root.display(from).display()),
            )))
        }
        Some(_) => {}
    }
    with_parent(root, to_dir, |target| {
        refuse_link_at(root, target.fd(), to_name, to)?;
        if create {
            rustix::fs::linkat(
                source.fd(),
                from_name,
                target.fd(),
                to_name,
                AtFlags::empty(),
            )
            .map_err(|e| match e {
                rustix::io::Errno::EXIST => WriteError::Exists,
                e => WriteError::Io(io_at(e, "link", root, to)),
            })?;
            rustix::fs::unlinkat(source.fd(), from_name, AtFlags::empty())
                .map_err(|e| WriteError::Io(io_at(e, "remove", root, from)))
        } else {
            rustix::fs::renameat(source.fd(), from_name, target.fd(), to_name)
                .map_err(|e| WriteError::Io(io_at(e, "rename", root, from)))
        }
    })?;
    if !from.starts_with(STAGING) {
        source.prune();
    }
    Ok(())
}

/// An error of a call on `rel`, with its path.
fn io_at(e: rustix::io::Errno, what: &str, root: &Root, rel: &FsPath) -> io::Error {
    context(e.into(), what, &root.display(rel))
}

/// Refuse to replace a link at `name` (in `dir`, the directory of `rel`): a link in the bank
/// is someone else's, and is left as it is.
fn refuse_link_at(
    root: &Root,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &OsStr,
    rel: &FsPath,
) -> Result<(), WriteError> {
    match kind_at(dir, name) {
        Ok(Some(FileType::Symlink)) => Err(WriteError::Io(link_in_bank(root, rel))),
        Ok(_) => Ok(()),
        Err(e) => Err(WriteError::Io(context(e, "stat", &root.display(rel)))),
    }
}

fn put_with(
    root: &Root,
    key: &str,
    rel: &FsPath,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
    mode: &PutMode,
    before_publish: &BeforePublish,
) -> Result<PutResult, WriteError> {
    let mut staged = Staged::new(root, key).map_err(WriteError::Io)?;
    let result = fill(&mut staged.file)
        .map_err(|e| WriteError::Io(context(e, "write", &staged.path)))
        .and_then(|()| publish(root, key, rel, &staged, mode, before_publish));
    if result.is_err() {
        staged.discard();
    }
    result
}

/// A staged write in progress: a file under [`STAGING`] holding an exclusive `flock` for as long
/// as its writer lives, so a sweep never removes it under a live writer however slowly the
/// writer goes (a multipart upload fed by a slow producer); a crashed writer's lock goes with its
/// process. It is known by its name in the staging directory, held open: never by a path
/// through which a link could lead.
#[derive(Debug)]
pub(super) struct Staged {
    pub(super) file: File,
    /// Its full path, for messages.
    pub(super) path: PathBuf,
    /// The staging directory.
    dir: OwnedFd,
    /// Its name there.
    name: OsString,
}

impl Staged {
    /// A new staged file with a random name never used before: a name a sweep freed is never
    /// taken again by another writer, whose half-written file the first one could otherwise
    /// publish.
    /// `key` is what it is staged for, kept in the extended attribute [`KEY_XATTR`] where the
    /// file system keeps them (for what a report names; nothing is decided by it).
    #[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
    pub(super) fn new(root: &Root, key: &str) -> io::Result<Self> {
        still_root(root)?;
        let dir = beneath::dirs(root, FsPath::new(STAGING), true)?.into_fd()?;
        for _ in 0..MAX_STAGED {
            let name = format!(
                "{STAGED_PREFIX}{}{STAGED_SUFFIX}",
                uuid::Uuid::new_v4().simple()
            );
            let path = root.display(&FsPath::new(STAGING).join(&name));
            let fd = match rustix::fs::openat(
                &dir,
                name.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(context(e.into(), "create", &path)),
            };
            let file = File::from(fd);
            // A sweep that looked at this file just now holds it for a moment (and leaves it:
            // it is new); wait for that, then keep the lock until the write ends.
            file.lock().map_err(|e| context(e, "lock", &path))?;
            // Best effort: a file system without user attributes stages all the same.
            #[cfg(target_os = "linux")]
            let _ = rustix::fs::fsetxattr(
                &file,
                KEY_XATTR,
                key.as_bytes(),
                rustix::fs::XattrFlags::empty(),
            );
            return Ok(Self {
                file,
                path,
                dir,
                name: name.into(),
            });
        }
        Err(io::Error::other(format!(
            "no free name for a staged write in `{}` after {MAX_STAGED} tries",
            root.display(FsPath::new(STAGING)).display()
        )))
    }

    /// Whether the name still holds this staged file (same device and inode).
    fn is_ours(&self) -> bool {
        let (Ok(held), Ok(now)) = (
            rustix::fs::fstat(&self.file),
            rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW),
        ) else {
            return false;
        };
        held.st_ino == now.st_ino && held.st_dev == now.st_dev
    }

    /// Remove the staged file if it is still ours (a failed or abandoned write).
    pub(super) fn discard(&self) {
        if self.is_ours() {
            let _ = rustix::fs::unlinkat(&self.dir, &self.name, AtFlags::empty());
        }
    }
}

/// Stamp `file` with the file system's clock (the kernel's, as a write would), strictly after
/// `old` (the replaced version's stamp, µs) when the clock reads at most
/// [`STEP_BACK_TOLERANCE_MICROS`] behind it. Returns its `stat`.
fn stamp(file: &File, old: Option<u128>) -> io::Result<rustix::fs::Stat> {
    let omit = Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_OMIT,
    };
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    rustix::fs::futimens(
        file,
        &Timestamps {
            last_access: omit,
            last_modification: now,
        },
    )?;
    let st = rustix::fs::fstat(file)?;
    let Some(old) = old else {
        return Ok(st);
    };
    let new = stat_micros(&st);
    if new > old || old - new > STEP_BACK_TOLERANCE_MICROS {
        return Ok(st);
    }
    let after = old + 1;
    let at = Timespec {
        tv_sec: i64::try_from(after / 1_000_000).unwrap_or(i64::MAX),
        tv_nsec: i64::try_from(after % 1_000_000 * 1_000).unwrap_or_default(),
    };
    rustix::fs::futimens(
        file,
        &Timestamps {
            last_access: omit,
            last_modification: at,
        },
    )?;
    Ok(rustix::fs::fstat(file)?)
}

/// Under the key's stripe lock: check `mode` against the current file, stamp the staged file
/// with the file system's clock, and publish it at `rel` — a hard link for create (atomic even
/// against writers that do not take our locks), a rename otherwise. Only our own staged file is
/// ever published (checked by device and inode); a link at the key's name, or on the way to it,
/// is left as it is and the write refused.
pub(super) fn publish(
    root: &Root,
    key: &str,
    rel: &FsPath,
    staged: &Staged,
    mode: &PutMode,
    before_publish: &BeforePublish,
) -> Result<PutResult, WriteError> {
    let _guard = lock_keys(root, &[key]).map_err(WriteError::Io)?;
    let (dir, name) = beneath::split(rel).map_err(WriteError::Io)?;
    let mut hooked = false;
    with_parent(root, dir, |parent| {
        let current = match rustix::fs::statat(parent.fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                return Err(WriteError::Io(link_in_bank(root, rel)))
            }
            Ok(st) => Some(st),
            Err(rustix::io::Errno::NOENT) => None,
            Err(e) => return Err(WriteError::Io(io_at(e, "stat", root, rel))),
        };
        check(mode, current.as_ref())?;
        if let Some(hook) = before_publish.as_ref().filter(|_| !hooked) {
            hooked = true;
            hook();
        }
        let st = stamp(&staged.file, current.as_ref().map(stat_micros))
            .map_err(|e| WriteError::Io(context(e, "set mtime of", &staged.path)))?;
        // The staged file may have been removed under us (by hand: a sweep leaves a locked
        // file alone), and another file made at its name since.
        if !staged.is_ours() {
            return Err(WriteError::Io(io::Error::new(
                ErrorKind::NotFound,
                format!(
                    "the staged file `{}` was removed before it could be published; nothing \
                     was written, retry",
                    staged.path.display()
                ),
            )));
        }
        match mode {
            PutMode::Create => {
                match rustix::fs::linkat(
                    &staged.dir,
                    &staged.name,
                    parent.fd(),
                    name,
                    AtFlags::empty(),
                ) {
                    // A failure to remove it only leaves a staged file for the sweep.
                    Ok(()) => {
                        let _ = rustix::fs::unlinkat(&staged.dir, &staged.name, AtFlags::empty());
                    }
                    Err(rustix::io::Errno::EXIST) => return Err(WriteError::Exists),
                    Err(e) => return Err(WriteError::Io(io_at(e, "link", root, rel))),
                }
            }
            PutMode::Overwrite | PutMode::Update(_) => {
                rustix::fs::renameat(&staged.dir, &staged.name, parent.fd(), name)
                    .map_err(|e| WriteError::Io(io_at(e, "rename onto", root, rel)))?
            }
        }
        Ok(PutResult {
            e_tag: Some(etag_of_stat(&st)),
            version: None,
            extensions: Default::default(),
        })
    })
}

/// A step back of the store's clock up to this much is taken for two writes within one µs (the
/// new version is stamped just after the old one); a larger one is followed.
const STEP_BACK_TOLERANCE_MICROS: u128 = 1_000;

/// Whether the file system under `root` keeps modification times to the microsecond (the
/// ETag's unit): an odd stamp is written to a scratch file and read back. ext3, ext4 with small
/// inodes, HFS+, FAT and exFAT round them, and there an older version's ETag could match again.
/// The scratch file is a staged write's (`_banklease/staging/`, never the store's root): one left
/// by a crash is swept like any other.
pub(super) fn keeps_exact_mtime(root: &Root) -> io::Result<bool> {
    let staged = Staged::new(root, "")?;
    let result = (|| {
        let odd = Duration::from_secs(1_700_000_000) + Duration::from_micros(123_457);
        staged.file.set_modified(UNIX_EPOCH + odd)?;
        let back = staged.file.metadata()?.modified()?;
        Ok(back.duration_since(UNIX_EPOCH).ok() == Some(odd))
    })();
    staged.discard();
    result.map_err(|e| context(e, "set and read back the mtime of", &staged.path))
}

fn check(mode: &PutMode, current: Option<&rustix::fs::Stat>) -> Result<(), WriteError> {
    match (mode, current) {
        (PutMode::Overwrite, _) | (PutMode::Create, None) => Ok(()),
        (PutMode::Create, Some(_)) => Err(WriteError::Exists),
        (PutMode::Update(UpdateVersion { e_tag: None, .. }), _) => Err(WriteError::Precondition(
            "a conditional overwrite on a local store needs the ETag of the version it replaces"
                .to_owned(),
        )),
        (PutMode::Update(_), None) => Err(WriteError::Precondition(
            "the object does not exist".to_owned(),
        )),
        (
            PutMode::Update(UpdateVersion {
                e_tag: Some(want), ..
            }),
            Some(st),
        ) => {
            let have = etag_of_stat(st);
            if &have == want {
                Ok(())
            } else {
                Err(WriteError::Precondition(format!(
                    "etag=`{have}` does not match expected=`{want}`"
                )))
            }
        }
    }
}

/// Remove the file at `rel` under its key's stripe lock, and the directories its removal left
/// empty, up to (not including) the root, stopping at the first that is not empty: an object
/// store has no directories, and a bank's per-owner, per-checkpoint and per-lock ones would
/// otherwise pile up. Never in the staging directory. A writer that made one of them just
/// before it is removed finds its link or rename failing with "not found" and makes it again
/// ([`with_parent`]). Nothing is resolved through a link: a link at `rel` or on the way is
/// left as it is (an error naming it).
pub(super) fn delete(root: &Root, key: &str, rel: &FsPath) -> io::Result<()> {
    let _guard = lock_keys(root, &[key])?;
    beneath::remove_file(root, rel, !rel.starts_with(STAGING))
}

/// Run `op` in the directory `dir` (relative to the root), made first below the root; made
/// again, a few times, when a concurrent delete pruned it in between (the op then fails with
/// "not found"). Never makes the root itself: a bank whose directory vanished while a command
/// ran (moved away, a backup disk unmounted) is not made anew — only `init` makes a bank.
fn with_parent<T>(
    root: &Root,
    dir: &FsPath,
    mut op: impl FnMut(&beneath::Dirs<'_>) -> Result<T, WriteError>,
) -> Result<T, WriteError> {
    let mut tries = 0;
    loop {
        still_root(root).map_err(WriteError::Io)?;
        let parent = beneath::dirs(root, dir, true).map_err(WriteError::Io)?;
        match op(&parent) {
            Err(WriteError::Io(e)) if e.kind() == ErrorKind::NotFound && tries < 3 => tries += 1,
            done => return done,
        }
    }
}

/// Whether `name` (in [`STAGING`]) is a file this store staged: `w-<32 hex digits>#0`.
pub(super) fn is_temporary(name: &str) -> bool {
    name.strip_prefix(STAGED_PREFIX)
        .and_then(|rest| rest.strip_suffix(STAGED_SUFFIX))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// What a sweep of stale temporaries found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TemporarySweep {
    /// Temporaries older than the threshold.
    pub stale: u64,
    /// Of those, removed (zero on a dry run).
    pub removed: u64,
    /// Temporaries younger than the threshold, or whose writer still holds them (however old),
    /// left for their writers.
    pub fresh: u64,
    /// Whether the walk reached the end of the tree (else: call again to go on).
    pub done: bool,
}

/// A walk of the staging directory in progress, resumable across calls (it holds one entry per
/// write in flight or left by a crash, so a walk is short; the budget bounds it anyway).
#[derive(Debug, Default)]
pub struct SweepWalk {
    open: Option<StagingDir>,
    started: bool,
}

impl SweepWalk {
    /// Whether the walk has begun.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Whether the walk has visited the whole tree.
    pub fn is_done(&self) -> bool {
        self.started && self.open.is_none()
    }
}

/// Go on with `walk` over the staging directory of `root` for at most `budget` entries,
/// removing the files this store staged that no live writer holds (their `flock` is free: the
/// writer crashed or dropped its upload) and whose mtime is older than `older_than` (a writer
/// between creating its file and locking it is never caught). Nothing outside the staging
/// directory is looked at, and nothing there but names this store makes, never through a link.
pub(super) fn sweep(
    root: &Root,
    walk: &mut SweepWalk,
    budget: usize,
    older_than: Duration,
    dry_run: bool,
) -> io::Result<TemporarySweep> {
    let now = store_clock();
    let mut report = TemporarySweep::default();
    if !walk.started {
        walk.started = true;
        walk.open = staging_dir(root)?;
    }
    let mut visited = 0;
    while visited < budget {
        let Some(staging) = walk.open.as_mut() else {
            break;
        };
        let Some(entry) = staging.entries.next() else {
            walk.open = None;
            continue;
        };
        visited += 1;
        let Some((name, path, file)) = staging.open_staged(entry)? else {
            continue;
        };
        match file.try_lock() {
            Ok(()) => {}
            // A live writer holds it, however long it has been idle.
            Err(std::fs::TryLockError::WouldBlock) => {
                report.fresh += 1;
                continue;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(context(e, "lock", &path)),
        }
        let modified = match file.metadata().and_then(|m| m.modified()) {
            Ok(t) => t,
            Err(e) => return Err(context(e, "stat", &path)),
        };
        let age = now.duration_since(modified).unwrap_or_default();
        if age < older_than {
            report.fresh += 1;
            continue;
        }
        report.stale += 1;
        if dry_run {
            continue;
        }
        // Still holding the lock: a writer cannot have taken this file meanwhile.
        match rustix::fs::unlinkat(&staging.fd, &name, AtFlags::empty()) {
            Ok(()) => report.removed += 1,
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(context(e.into(), "remove staged file", &path)),
        }
    }
    report.done = walk.is_done();
    Ok(report)
}

/// The staging directory, held open, and its entries.
pub(super) struct StagingDir {
    /// Its path, for messages.
    path: PathBuf,
    fd: OwnedFd,
    pub(super) entries: rustix::fs::Dir,
}

impl std::fmt::Debug for StagingDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingDir")
            .field("path", &self.path)
            .finish()
    }
}

/// The staging directory and its entries, reached without following a link (a link in its
/// place is an error naming it); `None` when nothing was ever staged in this bank.
pub(super) fn staging_dir(root: &Root) -> io::Result<Option<StagingDir>> {
    let path = root.display(FsPath::new(STAGING));
    let fd = match beneath::dirs(root, FsPath::new(STAGING), false) {
        Ok(dirs) => dirs.into_fd()?,
        Err(e) if e.kind() == ErrorKind::NotFound && !root_gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let entries =
        rustix::fs::Dir::read_from(&fd).map_err(|e| context(e.into(), "read directory", &path))?;
    Ok(Some(StagingDir { path, fd, entries }))
}

impl StagingDir {
    /// One entry, opened, when it is a file this store staged (never through a link); `None`
    /// for anything else, and for a file published or swept since it was listed.
    pub(super) fn open_staged(
        &self,
        entry: rustix::io::Result<rustix::fs::DirEntry>,
    ) -> io::Result<Option<(OsString, PathBuf, File)>> {
        let entry = entry.map_err(|e| context(e.into(), "read directory", &self.path))?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
        if !is_temporary(&name.to_string_lossy()) {
            return Ok(None);
        }
        let path = self.path.join(&name);
        match rustix::fs::openat(
            &self.fd,
            &name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let file = File::from(fd);
                let meta = file.metadata().map_err(|e| context(e, "stat", &path))?;
                Ok(meta.is_file().then_some((name, path, file)))
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP) => Ok(None),
            Err(e) => Err(context(e.into(), "open", &path)),
        }
    }
}

/// The store's own clock: the kernel's real-time clock, which stamps every write (the file
/// system's own times, [`stamp`]). Read from the kernel itself (the vDSO or a system call,
/// never the C library, which a process may have interposed: `faketime`), so that a process
/// whose view of the time is wrong still reads the clock the stamps were made with; and at
/// the granularity the kernel stamps files with (its coarse clock, one tick), so that a stamp
/// made before a reading is never after it — a lease never looks older than it is.
pub(crate) fn store_clock() -> SystemTime {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    let since = Duration::new(
        u64::try_from(now.tv_sec).unwrap_or_default(),
        u32::try_from(now.tv_nsec).unwrap_or_default(),
    );
    UNIX_EPOCH + since
}

/// Whether the stamps already in `root` (the bank's descriptor, the root and two of the bank's
/// directories) show sub-millisecond parts, which a file system that rounds times would not
/// keep: read, never written. A µs-exact stamp is a whole millisecond once in a thousand, so
/// an exact file system is taken for a rounding one only when every stamp is (then judging
/// writes a clock probe rather than trusting this host's clock).
pub(super) fn existing_stamps_are_exact(root: &Root) -> bool {
    [".", "banklease.json", "_banklease", "leases"]
        .iter()
        .filter_map(|p| rustix::fs::statat(root.fd(), *p, AtFlags::SYMLINK_NOFOLLOW).ok())
        .any(|st| st.st_mtime_nsec % 1_000_000 != 0)
}

#[cfg(test)]
mod tests;
