//! A local-filesystem store with atomic conditional writes: the `file:` bank.
//!
//! object_store's [`LocalFileSystem`] creates atomically (a staged file hard-linked into place)
//! but has no conditional overwrite (`PutMode::Update`): a compare-and-swap on a file needs a
//! lock, which it does not take. [`LocalStore`] wraps it, forwards every read and listing, and
//! serialises every mutation of a key — put, delete, copy and rename onto it, a multipart
//! upload's completion — under an exclusive `flock` on one of [`STRIPES`](fs::STRIPES) lock
//! files in the store's root. Under that lock a write compares the current version, then
//! publishes a fully written temporary by `rename` (or `link`, for create-if-absent). So:
//!
//! - **`PutMode::Update` is an atomic If-Match** against every process on the host that writes
//!   through a `LocalStore` (threads, processes, the CLI, the GC): one winner per version.
//! - **Create-if-absent stays atomic** even against writers that take no lock (`link` refuses an
//!   existing name).
//! - **Every write changes the ETag.** The ETag is object_store's (inode, mtime in µs, size). A
//!   new version's temporary is created while the version it replaces is still linked, so its
//!   inode differs; the writer stamps it with the store's wall clock (µs), just after the
//!   replaced version's stamp only when the clock has not moved since. A file system that rounds
//!   timestamps (ext3, ext4 with small inodes, HFS+, FAT, exFAT: an older version's ETag could
//!   come back there) is detected at the first conditional overwrite (never at open: nothing
//!   is written until a write is asked for), and conditional overwrites are then refused
//!   (`NotImplemented`), which makes owners renew by verify-then-overwrite and refuses named
//!   locks, as on a store without If-Match.
//! - **Stamps follow the store's clock**, also back after a step: the GC reads `last_modified`
//!   as the store's time (`Bank::store_time`), so a stamp held ahead of the clock would make
//!   later writes of other keys look older than they are.
//! - **A deleted key stays deleted**: a conditional write that compared before a delete cannot
//!   publish after it, because both hold the key's lock.
//! - **Only its own staged file is published**: every write (a put, a copy, a multipart upload)
//!   is staged in `_banklease/staging/` under a random name that is never reused, locked
//!   (`flock`) by its writer until it is published or dropped, and checked (device and inode)
//!   under the key's lock before it is published; a writer whose staged file was removed fails
//!   rather than publishing another writer's half-written file.
//!
//! - **No directory outlives its last object**: a delete removes the directories it left empty,
//!   up to the store's root (never the staging directory); a writer whose directory was removed
//!   between making it and publishing makes it again.
//!
//! Copies and renames run under the locks in one blocking call (a copy is a new, stamped
//! version; a rename moves the same object). A multipart upload is staged by the same rules
//! (its parts written at their offsets into its one staged file) and published like an
//! overwrite.
//!
//! Not covered: writers that bypass this wrapper (a plain `LocalFileSystem`, `cp`, `rsync`) see
//! no locks; and network filesystems, where `flock` may be local to one client (NFS before
//! Linux 2.6.12 or with `nolock`, SMB), are not measured and not claimed.
//!
//! Invariant: **the sweep removes only what this store staged and no live writer holds.**
//! A writer killed between staging and publishing leaves its staged file behind (hidden from
//! listings); [`LocalStore::sweep_temporaries`] removes those whose lock is free and whose last
//! write is older than it is told. It looks in the staging directory only, at names this store
//! makes (`w-<32 hex digits>#0`): a user's `invoice#2024` anywhere in the tree is never touched.
//! (Releases before this one staged beside the key, as `<key>#<n>`; what their crashed writers
//! left is no longer swept, since it cannot be told from a user's file.)
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> object_store::Result<()> {
//! use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
//! let dir = tempfile::tempdir().unwrap();
//! let store = banklease::store::LocalStore::new(dir.path())?;
//! let key = object_store::path::Path::from("leases/a");
//! let first = store.put(&key, "v1".into()).await?;
//! let update = |r: &object_store::PutResult| PutOptions::from(PutMode::Update(UpdateVersion {
//!     e_tag: r.e_tag.clone(),
//!     version: None,
//! }));
//! store.put_opts(&key, "v2".into(), update(&first)).await?;
//! // The first version's ETag no longer matches: the compare-and-swap is refused.
//! let stale = store.put_opts(&key, "v3".into(), update(&first)).await;
//! assert!(matches!(stale, Err(object_store::Error::Precondition { .. })));
//! # Ok(()) }
//! ```

mod beneath;
mod filesystem;
mod fs;
mod read;
mod staged;

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result, UploadPart,
};

use beneath::Root;

pub use filesystem::FileSystem;
pub(crate) use fs::store_clock;
pub use fs::{SweepWalk, TemporarySweep};
use fs::{WriteError, STORE};
pub use staged::StagedWrite;

/// The `file:` bank's store: [`LocalFileSystem`] plus atomic conditional overwrite. See the
/// [module documentation](self).
#[derive(Clone)]
pub struct LocalStore {
    /// object_store's own local store: only its mapping of keys to file names is used (every
    /// read, listing and write goes through a descriptor of the bank's directory).
    inner: Arc<LocalFileSystem>,
    root: Arc<Root>,
    /// Links (and other entries that are not the bank's) listings met.
    met: read::Met,
    /// Whether the file system keeps mtimes to the µs, measured at the first conditional
    /// overwrite; without it conditional overwrites are refused.
    exact_mtime: Arc<OnceLock<bool>>,
    /// The file system the bank's directory is on.
    file_system: FileSystem,
    before_publish: fs::BeforePublish,
}

impl fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalStore")
            .field("root", &self.root.path())
            .finish()
    }
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalStore({})", self.root.path().display())
    }
}

impl LocalStore {
    /// A store rooted at the existing directory `root`. Nothing is written: a directory opened
    /// by mistake (no bank, a user's) is left as it was, to its modification time.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        let root = std::fs::canonicalize(&root)
            .map_err(|e| generic(fs::context(e, "resolve the store root", &root)))?;
        let inner = Arc::new(LocalFileSystem::new_with_prefix(&root)?);
        let root = Root::open(root.clone())
            .map_err(|e| generic(fs::context(e, "open the store root", &root)))?;
        let file_system = FileSystem::of(root.fd());
        Ok(Self {
            inner,
            root: Arc::new(root),
            met: read::Met::default(),
            exact_mtime: Arc::default(),
            file_system,
            before_publish: None,
        })
    }

    /// Whether the file system keeps modification times to the microsecond: as measured by
    /// this store's first conditional overwrite (a scratch file in `_banklease/staging/`), or,
    /// before one, as the stamps already there say, without writing (a stamp with a part finer
    /// than a millisecond was kept exactly). Conditional overwrites are refused when it does not.
    pub fn keeps_exact_mtime(&self) -> bool {
        match self.exact_mtime.get() {
            Some(&exact) => exact,
            None => fs::existing_stamps_are_exact(&self.root),
        }
    }

    /// [`keeps_exact_mtime`](Self::keeps_exact_mtime), measured by writing if it was not yet:
    /// what a conditional overwrite rests on. Measured in the bank's staging directory, so only
    /// a write into a bank ever measures it.
    async fn measured_exact_mtime(&self) -> Result<bool> {
        if let Some(&exact) = self.exact_mtime.get() {
            return Ok(exact);
        }
        let root = Arc::clone(&self.root);
        let exact = blocking(move || {
            fs::keeps_exact_mtime(&root)
                .map_err(|e| generic(fs::context(e, "check the timestamps of", root.path())))
        })
        .await?;
        if self.exact_mtime.set(exact).is_ok() && !exact {
            tracing::warn!(root = %self.root.path().display(),
                "this file system rounds modification times: conditional overwrites (If-Match) \
                 are refused on it, so owners renew by verify-then-overwrite and named locks are \
                 unavailable");
        }
        Ok(exact)
    }

    /// The name of every entry in the store's root, read from the directory itself:
    /// object_store's listings hide every name ending in `#<digits>` (`photo#1`), which a check
    /// of what a directory holds must see.
    pub async fn root_entries(&self) -> Result<Vec<String>> {
        let root = Arc::clone(&self.root);
        blocking(move || {
            let read = || -> std::io::Result<Vec<String>> {
                std::fs::read_dir(root.path())?
                    .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect()
            };
            read().map_err(|e| generic(fs::context(e, "read directory", root.path())))
        })
        .await
    }

    /// The directory the store is rooted at.
    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// The file system the bank's directory is on (see [`FileSystem`]).
    pub fn file_system(&self) -> FileSystem {
        self.file_system
    }

    /// What listings of this store (and its clones) met since the last call that is not the
    /// bank's own and was left as it is: symbolic links, each named with its path in the bank
    /// (`` `checkpoints/cp-1/data/x` (a symbolic link) ``). A pass reports them.
    pub fn take_met(&self) -> Vec<String> {
        self.met.take()
    }

    /// Run `hook` after a put's temporary is written and its condition checked, before it is
    /// published (tests kill the writer there, or slow it down to race others).
    #[cfg(feature = "test-util")]
    pub fn with_before_publish(mut self, hook: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.before_publish = Some(hook);
        self
    }

    /// Remove the staged files (in `_banklease/staging/`, hidden from listings) that no live
    /// writer holds and whose last write is older than `older_than`: what writers killed
    /// between writing and publishing left behind. A writer holds its staged file's lock until
    /// it publishes, so a slow one is never swept; `older_than` only covers the instant between
    /// a staged file's creation and its lock. A dry run counts. The whole directory in one
    /// call; see [`Self::sweep_temporaries_step`] for a bounded one.
    pub async fn sweep_temporaries(
        &self,
        older_than: Duration,
        dry_run: bool,
    ) -> Result<TemporarySweep> {
        let walk = Arc::new(std::sync::Mutex::new(SweepWalk::default()));
        self.sweep_temporaries_step(&walk, usize::MAX, older_than, dry_run)
            .await
    }

    /// The writes staged in `_banklease/staging/` now (at most `budget` entries looked at):
    /// for reports only ([`StagedWrite`]).
    pub async fn staged_writes(&self, budget: usize) -> Result<Vec<StagedWrite>> {
        let root = Arc::clone(&self.root);
        blocking(move || staged::list(&root, budget).map_err(generic)).await
    }

    /// Go on with `walk` for at most `budget` directory entries (a caller spreads a walk of a
    /// large staging directory, after many crashes, over several calls). `done` in the result says when
    /// the walk reached the end; start a new [`SweepWalk`] for the next round.
    pub async fn sweep_temporaries_step(
        &self,
        walk: &Arc<std::sync::Mutex<SweepWalk>>,
        budget: usize,
        older_than: Duration,
        dry_run: bool,
    ) -> Result<TemporarySweep> {
        let root = Arc::clone(&self.root);
        let walk = Arc::clone(walk);
        blocking(move || {
            let mut walk = walk.lock().expect("sweep walk poisoned");
            fs::sweep(&root, &mut walk, budget, older_than, dry_run).map_err(generic)
        })
        .await
    }

    /// A recursive listing from `prefix` (keys after `offset`), walked on the blocking pool a
    /// chunk of entries at a time, never through a link.
    fn walk(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        const CHUNK: usize = 1024;
        let (root, met) = (Arc::clone(&self.root), self.met.clone());
        let (prefix, offset) = (prefix.cloned(), offset.cloned());
        let start = async move {
            blocking(move || {
                read::Walk::new(&root, prefix.as_ref(), offset.as_ref(), &met).map_err(generic)
            })
            .await
        };
        futures::stream::once(start)
            .map_ok(|walk| {
                futures::stream::try_unfold(
                    (walk, std::collections::VecDeque::new()),
                    |(mut walk, mut buffer)| async move {
                        if buffer.is_empty() {
                            (walk, buffer) = blocking(move || {
                                buffer.extend(walk.by_ref().take(CHUNK));
                                Ok((walk, buffer))
                            })
                            .await?;
                        }
                        match buffer.pop_front() {
                            Some(Ok(meta)) => Ok(Some((meta, (walk, buffer)))),
                            Some(Err(e)) => Err(generic(e)),
                            None => Ok(None),
                        }
                    },
                )
            })
            .try_flatten()
            .boxed()
    }

    /// Files carry no attributes: a write that asks for some is refused, as `LocalFileSystem`
    /// refuses it.
    fn no_attributes(&self, call: &str, attributes: &object_store::Attributes) -> Result<()> {
        if attributes.is_empty() {
            return Ok(());
        }
        Err(object_store::Error::NotImplemented {
            operation: format!("`{call}` with `opts.attributes` specified"),
            implementer: self.to_string(),
        })
    }

    /// The key, and its file's path relative to the bank's directory (object_store's mapping
    /// of a key to a file name, which also refuses names it hides).
    fn key_and_path(&self, location: &Path) -> Result<(String, PathBuf)> {
        let absolute = self.inner.path_to_filesystem(location)?;
        let relative = absolute
            .strip_prefix(self.root.path())
            .map_err(|_| object_store::Error::InvalidPath {
                source: object_store::path::Error::InvalidPath {
                    path: absolute.clone(),
                },
            })?
            .to_owned();
        Ok((location.as_ref().to_owned(), relative))
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| object_store::Error::JoinError { source })?
}

fn write_error(e: WriteError, location: &Path, implementer: &str) -> object_store::Error {
    let path = location.to_string();
    match e {
        WriteError::Exists => object_store::Error::AlreadyExists {
            path,
            source: "the object exists (create-if-absent)".into(),
        },
        WriteError::Precondition(why) => object_store::Error::Precondition {
            path,
            source: why.into(),
        },
        WriteError::NotImplemented => object_store::Error::NotImplemented {
            operation: "`put_opts` with `PutMode::Update` on a file system that rounds \
                        modification times"
                .into(),
            implementer: implementer.to_owned(),
        },
        // Gone with the bank's directory: as missing as an object can be (a renewal is then
        // answered as for a lease object deleted).
        WriteError::Io(e) if fs::root_gone(&e) => object_store::Error::NotFound {
            path,
            source: Box::new(e),
        },
        WriteError::Io(e) => generic(e),
    }
}

/// A failed copy or rename from `from` to `to`: a missing source is `NotFound` on `from`; the
/// rest is about the write at `to`.
fn transfer_error(e: WriteError, from: &Path, to: &Path, implementer: &str) -> object_store::Error {
    match e {
        WriteError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            object_store::Error::NotFound {
                path: from.to_string(),
                source: Box::new(e),
            }
        }
        e => write_error(e, to, implementer),
    }
}

/// A failed read of `location`: missing is `NotFound`; a link met is said as such.
fn read_error(e: std::io::Error, location: &Path) -> object_store::Error {
    match e.kind() {
        std::io::ErrorKind::NotFound if !fs::root_gone(&e) => object_store::Error::NotFound {
            path: location.to_string(),
            source: Box::new(e),
        },
        _ => generic(e),
    }
}

fn generic(e: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(e),
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.no_attributes("put_opts", &opts.attributes)?;
        let (key, path) = self.key_and_path(location)?;
        let root = Arc::clone(&self.root);
        let hook = self.before_publish.clone();
        let location = location.clone();
        // Only a conditional overwrite rests on exact stamps (and it is measured only then).
        let exact = match opts.mode {
            PutMode::Update(_) => self.measured_exact_mtime().await?,
            PutMode::Overwrite | PutMode::Create => true,
        };
        let implementer = self.to_string();
        blocking(move || {
            fs::put(&root, &key, &path, &payload, &opts.mode, exact, &hook)
                .map_err(|e| write_error(e, &location, &implementer))
        })
        .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.no_attributes("put_multipart_opts", &opts.attributes)?;
        let (key, path) = self.key_and_path(location)?;
        let root = Arc::clone(&self.root);
        let staged_key = key.clone();
        let staged = blocking(move || fs::Staged::new(&root, &staged_key).map_err(generic)).await?;
        Ok(Box::new(StagedUpload {
            staged: Some(Arc::new(std::sync::Mutex::new(staged))),
            offset: 0,
            store: self.clone(),
            key,
            path,
            location: location.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let (_, rel) = self.key_and_path(location)?;
        let root = Arc::clone(&self.root);
        let location = location.clone();
        blocking(move || {
            let (file, meta) =
                read::open(&root, &rel, &location).map_err(|e| read_error(e, &location))?;
            options.check_preconditions(&meta)?;
            let range = match &options.range {
                Some(r) => r
                    .as_range(meta.size)
                    .map_err(|e| object_store::Error::Generic {
                        store: STORE,
                        source: Box::new(e),
                    })?,
                None => 0..meta.size,
            };
            Ok(GetResult {
                payload: GetResultPayload::File(file, root.display(&rel)),
                meta,
                range,
                attributes: Default::default(),
                extensions: Default::default(),
            })
        })
        .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let (_, rel) = self.key_and_path(location)?;
        let root = Arc::clone(&self.root);
        let (location, ranges) = (location.clone(), ranges.to_vec());
        blocking(move || {
            let (file, meta) =
                read::open(&root, &rel, &location).map_err(|e| read_error(e, &location))?;
            ranges
                .into_iter()
                .map(|r| read::read_range(&file, meta.size, r).map_err(generic))
                .collect()
        })
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let store = self.clone();
        locations
            .map(move |location| {
                let store = store.clone();
                async move {
                    let location = location?;
                    let (key, path) = store.key_and_path(&location)?;
                    let root = Arc::clone(&store.root);
                    blocking(move || {
                        fs::delete(&root, &key, &path).map_err(|e| match e.kind() {
                            std::io::ErrorKind::NotFound if !fs::root_gone(&e) => {
                                object_store::Error::NotFound {
                                    path: location.to_string(),
                                    source: Box::new(e),
                                }
                            }
                            _ => generic(e),
                        })?;
                        Ok(location)
                    })
                    .await
                }
            })
            .buffered(10)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.walk(prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.walk(prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let root = Arc::clone(&self.root);
        let (prefix, met) = (prefix.cloned(), self.met.clone());
        let mut listed =
            blocking(move || read::one_level(&root, prefix.as_ref(), &met).map_err(generic))
                .await?;
        // The staging directory holds only hidden files: it is not an object's prefix, and
        // neither is `_banklease/` when it holds nothing else (a bank that only ever staged).
        let staging = Path::from(fs::STAGING);
        listed.common_prefixes.retain(|p| p != &staging);
        let top = staging.parts().next().map(|p| Path::from_iter([p]));
        if let Some(top) = top.filter(|t| listed.common_prefixes.contains(t)) {
            let staging = staging.clone();
            let (root, met, at) = (Arc::clone(&self.root), self.met.clone(), top.clone());
            let only_staging = blocking(move || {
                let under = read::one_level(&root, Some(&at), &met).map_err(generic)?;
                Ok(under.objects.is_empty() && under.common_prefixes.iter().all(|p| p == &staging))
            })
            .await?;
            if only_staging {
                listed.common_prefixes.retain(|p| p != &top);
            }
        }
        Ok(listed)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let (_, from_path) = self.key_and_path(from)?;
        let (key, path) = self.key_and_path(to)?;
        let mode = match options.mode {
            object_store::CopyMode::Overwrite => PutMode::Overwrite,
            object_store::CopyMode::Create => PutMode::Create,
        };
        let (root, implementer) = (Arc::clone(&self.root), self.to_string());
        let (from, to) = (from.clone(), to.clone());
        blocking(move || {
            fs::copy(&root, &key, &path, &from_path, &mode)
                .map(|_| ())
                .map_err(|e| transfer_error(e, &from, &to, &implementer))
        })
        .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let (from_key, from_path) = self.key_and_path(from)?;
        let (to_key, to_path) = self.key_and_path(to)?;
        let create = matches!(options.target_mode, object_store::RenameTargetMode::Create);
        let (root, implementer) = (Arc::clone(&self.root), self.to_string());
        let (from, to) = (from.clone(), to.clone());
        blocking(move || {
            fs::rename(&root, (&from_key, &from_path), (&to_key, &to_path), create)
                .map_err(|e| transfer_error(e, &from, &to, &implementer))
        })
        .await
    }
}

/// A multipart upload staged by the store itself, by the rules of a single write: one staged
/// file under `_banklease/staging/` with a random name, locked by its writer for the upload's
/// life (so no sweep removes it, however slowly its parts come), parts written at their offsets
/// in the order `put_part` was called, and a completion that publishes it under the key's lock
/// only if it is still our own file (device and inode).
#[derive(Debug)]
struct StagedUpload {
    /// `None` once completed or aborted.
    staged: Option<Arc<std::sync::Mutex<fs::Staged>>>,
    offset: u64,
    store: LocalStore,
    key: String,
    path: PathBuf,
    location: Path,
}

fn upload_finished(location: &Path) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: format!("the multipart upload of `{location}` was already completed or aborted")
            .into(),
    }
}

#[async_trait]
impl MultipartUpload for StagedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let offset = self.offset;
        self.offset += data.content_length() as u64;
        let staged = self.staged.clone();
        let location = self.location.clone();
        Box::pin(async move {
            let staged = staged.ok_or_else(|| upload_finished(&location))?;
            blocking(move || {
                use std::io::{Seek, SeekFrom, Write};
                let staged = staged.lock().expect("staged upload poisoned");
                let mut file = &staged.file;
                file.seek(SeekFrom::Start(offset))
                    .and_then(|_| data.iter().try_for_each(|chunk| file.write_all(chunk)))
                    .map_err(|e| generic(fs::context(e, "write", &staged.path)))
            })
            .await
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let staged = self
            .staged
            .take()
            .ok_or_else(|| upload_finished(&self.location))?;
        let (root, key, path) = (
            Arc::clone(&self.store.root),
            self.key.clone(),
            self.path.clone(),
        );
        let (location, implementer) = (self.location.clone(), self.store.to_string());
        blocking(move || {
            let staged = staged.lock().expect("staged upload poisoned");
            let published = fs::publish(&root, &key, &path, &staged, &PutMode::Overwrite, &None)
                .map_err(|e| write_error(e, &location, &implementer));
            if published.is_err() {
                staged.discard();
            }
            published
        })
        .await
    }

    async fn abort(&mut self) -> Result<()> {
        if let Some(staged) = self.staged.take() {
            blocking(move || {
                staged.lock().expect("staged upload poisoned").discard();
                Ok(())
            })
            .await?;
        }
        Ok(())
    }
}

impl Drop for StagedUpload {
    fn drop(&mut self) {
        // Abandoned: its staged file is removed now rather than left for a sweep.
        if let Some(staged) = self.staged.take() {
            if let Ok(staged) = staged.lock() {
                staged.discard();
            }
        }
    }
}
