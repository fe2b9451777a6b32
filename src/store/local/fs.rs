//! The blocking half of [`LocalStore`](super::LocalStore): stripe locks, staged writes published
//! under a lock, and the sweep of stale temporaries. Everything here runs on the blocking pool.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path as FsPath, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::{PutMode, PutPayload, PutResult, UpdateVersion};
use sha2::{Digest, Sha256};

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

/// Lock the stripes of `keys` (deduplicated, in stripe order, so two multi-key operations never
/// deadlock; locking one stripe twice would wait on ourselves).
/// The identity (device, inode) of each store root opened in this process, latest open first:
/// a write checks that its root is still that directory.
static ROOTS: std::sync::OnceLock<
    std::sync::Mutex<std::collections::HashMap<PathBuf, (u64, u64)>>,
> = std::sync::OnceLock::new();

fn identity(path: &FsPath) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// Remember `root`'s identity: the directory the store was opened on.
pub(super) fn opened(root: &FsPath) {
    if let Ok(id) = identity(root) {
        let roots = ROOTS.get_or_init(Default::default);
        roots
            .lock()
            .expect("roots poisoned")
            .insert(root.to_owned(), id);
    }
}

/// Refuse to write under `root` when it is no longer the directory the store was opened on:
/// gone, or another one at its path — the bare mount point of an unmounted disk, a bank moved
/// away and a directory made in its place. Nothing is created there (only `init` makes a bank).
fn still_root(root: &FsPath) -> io::Result<()> {
    let known = ROOTS
        .get()
        .and_then(|r| r.lock().expect("roots poisoned").get(root).copied());
    let now = identity(root).ok();
    match (known, now) {
        (Some(known), Some(now)) if known == now => Ok(()),
        (None, Some(_)) => Ok(()),
        _ => Err(io::Error::new(
            ErrorKind::NotFound,
            RootGone(root.to_owned()),
        )),
    }
}

pub(super) fn lock_keys(root: &FsPath, keys: &[&str]) -> io::Result<Vec<StripeGuard>> {
    still_root(root)?;
    let mut stripes: Vec<u64> = keys.iter().map(|k| stripe_of(k)).collect();
    stripes.sort_unstable();
    stripes.dedup();
    stripes
        .into_iter()
        .map(|k| {
            let path = root.join(format!("{LOCK_PREFIX}{k}"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                // Another user's lock file: flock works on a read-only descriptor too.
                .or_else(|e| match e.kind() {
                    ErrorKind::PermissionDenied => File::open(&path),
                    _ => Err(e),
                })
                .map_err(|e| context(e, "open lock file", &path))?;
            file.lock().map_err(|e| context(e, "lock", &path))?;
            Ok(StripeGuard(file))
        })
        .collect()
}

/// The ETag object_store's `LocalFileSystem` reports for a file (inode, mtime in µs, size), so a
/// version read through the inner store's `head`/`get`/`list` compares equal to ours.
pub(super) fn etag(metadata: &Metadata) -> String {
    let inode = inode(metadata);
    let mtime = micros(metadata.modified().ok());
    let size = metadata.len();
    format!("\"{inode:x}-{mtime:x}-{size:x}\"")
}

#[cfg(unix)]
fn inode(metadata: &Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(metadata)
}

#[cfg(not(unix))]
fn inode(_: &Metadata) -> u64 {
    0
}

fn micros(t: Option<SystemTime>) -> u128 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros()
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

/// Write `payload` to a fresh `<path>#<n>`, then under the key's stripe lock check `mode`
/// against the current file and publish: a hard link for create (atomic even against writers
/// that do not take our locks), a rename otherwise.
///
/// The published file is stamped with the store's wall clock (µs, the ETag's unit): strictly
/// after the version it replaces when the clock has not moved since (two writes in one µs), but
/// following the clock when it stepped back by more than a millisecond, so that the store's
/// stamps — which the GC reads as the store's clock — keep tracking it. The ETag changes on every
/// write either way: the temporary is created while the replaced version is still linked, so
/// their inodes differ.
///
/// `exact_mtime` is false on a file system that rounds timestamps (see
/// `LocalStore::keeps_exact_mtime`): there an older version's ETag could come back, so
/// conditional overwrites are refused.
pub(super) fn put(
    root: &FsPath,
    key: &str,
    path: &FsPath,
    payload: &PutPayload,
    mode: &PutMode,
    exact_mtime: bool,
    before_publish: &BeforePublish,
) -> Result<PutResult, WriteError> {
    if matches!(mode, PutMode::Update(_)) && !exact_mtime {
        return Err(WriteError::NotImplemented);
    }
    let fill = |file: &mut File| payload.iter().try_for_each(|chunk| file.write_all(chunk));
    put_with(root, key, path, fill, mode, before_publish)
}

/// Copy the file at `from` to the key `key` at `path` as a new version (stamped, published
/// under the lock like a put). The source is read whole before the lock is taken. `mode` is
/// create or overwrite (a copy has no conditional overwrite).
pub(super) fn copy(
    root: &FsPath,
    key: &str,
    path: &FsPath,
    from: &FsPath,
    mode: &PutMode,
) -> Result<PutResult, WriteError> {
    let mut source = File::open(from).map_err(|e| WriteError::Io(context(e, "open", from)))?;
    let fill = |file: &mut File| io::copy(&mut source, file).map(|_| ());
    put_with(root, key, path, fill, mode, &None)
}

/// Move the file of `from_key` to `to_key` under both keys' locks: the same object (same
/// inode, mtime and ETag) under a new name; `create` refuses an existing target.
pub(super) fn rename(
    root: &FsPath,
    (from_key, from): (&str, &FsPath),
    (to_key, to): (&str, &FsPath),
    create: bool,
) -> Result<(), WriteError> {
    let _guard = lock_keys(root, &[from_key, to_key]).map_err(WriteError::Io)?;
    if create {
        match with_parent(root, to, || std::fs::hard_link(from, to)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(WriteError::Exists),
            Err(e) => return Err(WriteError::Io(context(e, "link", to))),
        }
        std::fs::remove_file(from).map_err(|e| WriteError::Io(context(e, "remove", from)))?;
    } else {
        with_parent(root, to, || std::fs::rename(from, to))
            .map_err(|e| WriteError::Io(context(e, "rename", from)))?;
    }
    prune_empty_parents(root, from);
    Ok(())
}

fn put_with(
    root: &FsPath,
    key: &str,
    path: &FsPath,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
    mode: &PutMode,
    before_publish: &BeforePublish,
) -> Result<PutResult, WriteError> {
    let mut staged = Staged::new(root, key).map_err(WriteError::Io)?;
    let result = fill(&mut staged.file)
        .map_err(|e| WriteError::Io(context(e, "write", &staged.path)))
        .and_then(|()| publish(root, key, path, &staged, mode, before_publish));
    if result.is_err() {
        staged.discard();
    }
    result
}

/// A staged write in progress: a file under [`STAGING`] holding an exclusive `flock` for as long
/// as its writer lives, so a sweep never removes it under a live writer however slowly the
/// writer goes (a multipart upload fed by a slow producer); a crashed writer's lock goes with its
/// process.
#[derive(Debug)]
pub(super) struct Staged {
    pub(super) file: File,
    pub(super) path: PathBuf,
}

impl Staged {
    /// A new staged file with a random name never used before: a name a sweep freed is never
    /// taken again by another writer, whose half-written file the first one could otherwise
    /// publish.
    /// `key` is what it is staged for, kept in the extended attribute [`KEY_XATTR`] where the
    /// file system keeps them (for what a report names; nothing is decided by it).
    #[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
    pub(super) fn new(root: &FsPath, key: &str) -> io::Result<Self> {
        let dir = root.join(STAGING);
        for _ in 0..MAX_STAGED {
            let name = format!(
                "{STAGED_PREFIX}{}{STAGED_SUFFIX}",
                uuid::Uuid::new_v4().simple()
            );
            let path = dir.join(name);
            let open = || {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
            };
            let file = match open() {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    create_below(root, &dir)?;
                    match open() {
                        Ok(f) => f,
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                        Err(e) => return Err(context(e, "create", &path)),
                    }
                }
                Err(e) => return Err(context(e, "create", &path)),
            };
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
            return Ok(Self { file, path });
        }
        Err(io::Error::other(format!(
            "no free name for a staged write in `{}` after {MAX_STAGED} tries",
            dir.display()
        )))
    }

    /// Remove the staged file if it is still ours (a failed or abandoned write).
    pub(super) fn discard(&self) {
        if let Ok(m) = self.file.metadata() {
            if is_ours(&self.path, &m) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Under the key's stripe lock: check `mode` against the current file, stamp the staged file
/// with the store's clock, and publish it at `path` — a hard link for create (atomic even
/// against writers that do not take our locks), a rename otherwise. Only our own staged file is
/// ever published (checked by device and inode).
pub(super) fn publish(
    root: &FsPath,
    key: &str,
    path: &FsPath,
    staged: &Staged,
    mode: &PutMode,
    before_publish: &BeforePublish,
) -> Result<PutResult, WriteError> {
    let _guard = lock_keys(root, &[key]).map_err(WriteError::Io)?;
    let current = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(WriteError::Io(context(e, "stat", path))),
    };
    check(mode, current.as_ref())?;
    if let Some(hook) = before_publish {
        hook();
    }
    let now = micros(Some(store_clock()));
    let stamp = match current.as_ref().map(|m| micros(m.modified().ok())) {
        Some(old) if now <= old && old - now <= STEP_BACK_TOLERANCE_MICROS => old + 1,
        _ => now,
    };
    let stamp = u64::try_from(stamp).unwrap_or(u64::MAX);
    staged
        .file
        .set_modified(UNIX_EPOCH + Duration::from_micros(stamp))
        .map_err(|e| WriteError::Io(context(e, "set mtime of", &staged.path)))?;
    let metadata = staged
        .file
        .metadata()
        .map_err(|e| WriteError::Io(context(e, "stat", &staged.path)))?;
    // The staged file may have been removed under us (by hand: a sweep leaves a locked file
    // alone), and another file made at its name since.
    if !is_ours(&staged.path, &metadata) {
        return Err(WriteError::Io(io::Error::new(
            ErrorKind::NotFound,
            format!(
                "the staged file `{}` was removed before it could be published; nothing was \
                 written, retry",
                staged.path.display()
            ),
        )));
    }
    match mode {
        PutMode::Create => match with_parent(root, path, || std::fs::hard_link(&staged.path, path))
        {
            Ok(()) => {
                // A failure here only leaves a staged file for the sweep.
                let _ = std::fs::remove_file(&staged.path);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(WriteError::Exists),
            Err(e) => return Err(WriteError::Io(context(e, "link", path))),
        },
        PutMode::Overwrite | PutMode::Update(_) => {
            with_parent(root, path, || std::fs::rename(&staged.path, path))
                .map_err(|e| WriteError::Io(context(e, "rename onto", path)))?
        }
    }
    Ok(PutResult {
        e_tag: Some(etag(&metadata)),
        version: None,
        extensions: Default::default(),
    })
}

/// A step back of the store's clock up to this much is taken for two writes within one µs (the
/// new version is stamped just after the old one); a larger one is followed.
const STEP_BACK_TOLERANCE_MICROS: u128 = 1_000;

/// Whether the file at `path` is the one `ours` describes (same device and inode).
#[cfg(unix)]
fn is_ours(path: &FsPath, ours: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == ours.ino() && m.dev() == ours.dev())
}

#[cfg(not(unix))]
fn is_ours(path: &FsPath, _: &Metadata) -> bool {
    path.exists()
}

/// Whether the file system under `root` keeps modification times to the microsecond (the
/// ETag's unit): an odd stamp is written to a scratch file and read back. ext3, ext4 with small
/// inodes, HFS+, FAT and exFAT round them, and there an older version's ETag could match again.
/// The scratch file is a staged write's (`_banklease/staging/`, never the store's root): one left
/// by a crash is swept like any other.
pub(super) fn keeps_exact_mtime(root: &FsPath) -> io::Result<bool> {
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

fn check(mode: &PutMode, current: Option<&Metadata>) -> Result<(), WriteError> {
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
            Some(m),
        ) => {
            let have = etag(m);
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

/// Remove `path` under its key's stripe lock.
pub(super) fn delete(root: &FsPath, key: &str, path: &FsPath) -> io::Result<()> {
    let _guard = lock_keys(root, &[key])?;
    std::fs::remove_file(path)?;
    prune_empty_parents(root, path);
    Ok(())
}

/// Remove the directories above `path` that its removal left empty, up to (not including)
/// `root`, stopping at the first that is not empty: an object store has no directories, and a
/// bank's per-owner, per-checkpoint and per-lock ones would otherwise pile up. Never in the
/// staging directory. A writer that made one of them just before it is removed finds its link
/// or rename failing with "not found" and makes it again ([`with_parent`]); a staged file's
/// creation makes the staging directory again the same way.
fn prune_empty_parents(root: &FsPath, path: &FsPath) {
    if path.starts_with(root.join(STAGING)) {
        return;
    }
    for dir in path.ancestors().skip(1) {
        if dir == root || !dir.starts_with(root) || std::fs::remove_dir(dir).is_err() {
            return;
        }
    }
}

/// Create `dir` and its missing parents below `root`, never `root` itself: a bank whose
/// directory vanished while a command ran (moved away, a backup disk unmounted) is not made
/// anew, in the bare mount point or anywhere — only `init` makes a bank.
fn create_below(root: &FsPath, dir: &FsPath) -> io::Result<()> {
    let below = dir.strip_prefix(root).map_err(|_| {
        io::Error::other(format!(
            "`{}` is not below the bank's directory `{}`",
            dir.display(),
            root.display()
        ))
    })?;
    still_root(root)?;
    let mut at = root.to_owned();
    for part in below.components() {
        at.push(part);
        match std::fs::create_dir(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(context(e, "create directory", &at)),
        }
    }
    Ok(())
}

/// Run `op` (a link or rename onto `path`) after making `path`'s directory below `root`; made
/// again, a few times, when a concurrent delete pruned it in between.
fn with_parent<T>(
    root: &FsPath,
    path: &FsPath,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let mut tries = 0;
    loop {
        let made = match path.parent() {
            Some(parent) => create_below(root, parent),
            None => Ok(()),
        };
        // Not found: a directory on the way was pruned in between (by a delete), make it again.
        match made.and_then(|()| op()) {
            Err(e) if e.kind() == ErrorKind::NotFound && tries < 3 => tries += 1,
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
    open: Vec<(PathBuf, std::fs::ReadDir)>,
    started: bool,
}

impl SweepWalk {
    /// Whether the walk has begun.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Whether the walk has visited the whole tree.
    pub fn is_done(&self) -> bool {
        self.started && self.open.is_empty()
    }
}

/// Go on with `walk` over the staging directory of `root` for at most `budget` entries,
/// removing the files this store staged that no live writer holds (their `flock` is free: the
/// writer crashed or dropped its upload) and whose mtime is older than `older_than` (a writer
/// between creating its file and locking it is never caught). Nothing outside the staging
/// directory is looked at, and nothing there but names this store makes.
pub(super) fn sweep(
    root: &FsPath,
    walk: &mut SweepWalk,
    budget: usize,
    older_than: Duration,
    dry_run: bool,
) -> io::Result<TemporarySweep> {
    let now = store_clock();
    let mut report = TemporarySweep::default();
    if !walk.started {
        walk.started = true;
        if let Some(open) = staging_dir(root)? {
            walk.open.push(open);
        }
    }
    let mut visited = 0;
    while visited < budget {
        let Some((dir, entries)) = walk.open.last_mut() else {
            break;
        };
        let Some(entry) = entries.next() else {
            walk.open.pop();
            continue;
        };
        visited += 1;
        let Some((path, file)) = open_staged(entry, dir)? else {
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
        match std::fs::remove_file(&path) {
            Ok(()) => report.removed += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(context(e, "remove staged file", &path)),
        }
    }
    report.done = walk.is_done();
    Ok(report)
}

/// The staging directory and its entries; `None` when nothing was ever staged in this bank.
pub(super) fn staging_dir(root: &FsPath) -> io::Result<Option<(PathBuf, std::fs::ReadDir)>> {
    let dir = root.join(STAGING);
    match std::fs::read_dir(&dir) {
        Ok(entries) => Ok(Some((dir, entries))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(context(e, "read directory", &dir)),
    }
}

/// One entry of the staging directory `dir`, opened, when it is a file this store staged;
/// `None` for anything else, and for a file published or swept since it was listed.
pub(super) fn open_staged(
    entry: io::Result<std::fs::DirEntry>,
    dir: &FsPath,
) -> io::Result<Option<(PathBuf, File)>> {
    let entry = entry.map_err(|e| context(e, "read directory", dir))?;
    let kind = match entry.file_type() {
        Ok(kind) => kind,
        // Published or swept since it was listed (a file system without `d_type` stats here).
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(context(e, "stat", &entry.path())),
    };
    if !kind.is_file() || !is_temporary(&entry.file_name().to_string_lossy()) {
        return Ok(None);
    }
    let path = entry.path();
    match File::open(&path) {
        Ok(file) => Ok(Some((path, file))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(context(e, "open", &path)),
    }
}

/// The store's own clock: like the file system it stands in for, the store stamps writes with
/// this host's wall clock (it is the `file:` bank's store clock, not a client's clock).
#[allow(clippy::disallowed_methods)]
pub(crate) fn store_clock() -> SystemTime {
    SystemTime::now()
}

/// Whether the stamps already in `root` (the bank's descriptor, the root and two of the bank's
/// directories) show sub-millisecond parts, which a file system that rounds times would not
/// keep: read, never written. A µs-exact stamp is a whole millisecond once in a thousand, so
/// an exact file system is taken for a rounding one only when every stamp is (then judging
/// writes a clock probe rather than trusting this host's clock).
pub(super) fn existing_stamps_are_exact(root: &FsPath) -> bool {
    ["banklease.json", "", "_banklease", "leases"]
        .iter()
        .filter_map(|p| std::fs::metadata(root.join(p)).ok()?.modified().ok())
        .filter_map(|t| t.duration_since(UNIX_EPOCH).ok())
        .any(|d| d.subsec_nanos() % 1_000_000 != 0)
}

pub(super) fn context(e: io::Error, what: &str, path: &FsPath) -> io::Error {
    // The bank's directory gone is kept as it is: the store answers it as a missing object.
    if root_gone(&e) {
        return e;
    }
    io::Error::new(e.kind(), format!("cannot {what} `{}`: {e}", path.display()))
}

/// The bank's directory is gone, or another is in its place ([`still_root`]).
#[derive(Debug)]
pub(super) struct RootGone(PathBuf);

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

#[cfg(test)]
mod tests;
