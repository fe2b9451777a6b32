//! The bank: an object store plus a root prefix, opened from a URL.
//!
//! Every key under the prefix is built and parsed in `paths.rs` (the whole layout is listed in
//! ARCHITECTURE.md, "Bank layout"); every id is validated before it becomes a path segment.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::{Path, PathPart};
use object_store::ObjectStore;

use crate::capability::Capabilities;
use crate::config::{BankConfig, ClientLimits};
use crate::credentials::Credentials;
use crate::error::Result;
use crate::id::OwnerId;
use crate::paths::{Key, Prefixed};

mod learnt;
mod open;
mod store_time;
#[cfg(feature = "collector")]
pub use store_time::CLOCK_PROBE_ATTEMPTS;
pub(crate) mod scheme;

/// A handle on one bank. Cheap to clone; clones share the capability cache.
#[derive(Clone)]
pub struct Bank {
    inner: Arc<BankInner>,
    /// A handle for a command that only reads and judges ([`Bank::reading_only`]): it leaves
    /// nothing new in the bank, and a refused clock probe falls back to what the store says
    /// without a write. Never for a writer.
    reading_only: bool,
    /// A collector's handle ([`Bank::for_collector`]): its store-clock probe key is the host's
    /// collectors' own, which reading commands never write.
    collector: bool,
}

struct BankInner {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    label: String,
    capabilities: tokio::sync::OnceCell<Capabilities>,
    /// What the store is, for the record of what probes learnt about it (`learnt.rs`): its URL,
    /// and the endpoint its client was configured with.
    identity: String,
    /// Whether this bank keeps what probes learn in the bank and reads it back (a bank opened
    /// by URL: what every process of a host opens); one made on a caller's store probes in
    /// each process, as before.
    keeps_learnt: bool,
    /// The record as this handle knows it: read back once, then as this handle updated it.
    learnt: tokio::sync::OnceCell<std::sync::Mutex<Option<crate::learnt::Learnt>>>,
    /// The native Swift store behind `store`, when the bank is on Swift: the lease layer uses
    /// Swift's own primitives (X-Delete-After, POST) that the `ObjectStore` trait cannot carry.
    swift: Option<crate::store::swift::SwiftStore>,
    /// The local store behind `store`, when the bank is a `file:` directory: the GC sweeps
    /// its crashed writers' temporaries.
    local: Option<crate::store::local::LocalStore>,
    /// An in-process store made by [`Bank::open`] (`memory://`): a bank from the start.
    made_at_open: bool,
    /// The limits the store client was opened with (`[bank] request_timeout`, `retry_timeout`).
    limits: crate::config::ClientLimits,
    /// The form its conditions are sent in, for an S3-compatible store (`from_s3_compatible`).
    etag_form: Option<crate::store::EtagForm>,
}

impl fmt::Debug for Bank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bank")
            .field("url", &self.inner.label)
            .field("prefix", &self.inner.prefix.as_ref())
            .finish()
    }
}

impl Bank {
    /// Open a bank from its URL:
    ///
    /// - `file:///abs/path` or `file:relative/path` (resolved against the working directory): a
    ///   directory on the local filesystem, which must exist ([`Error::NoBank`] otherwise; see
    ///   [`open_or_create`](Self::open_or_create)); `%XX` escapes are decoded;
    /// - `memory://` (optionally `memory:///prefix`): in-process, for tests; a new bank each
    ///   time, a bank from the start (nothing else can name it, so it cannot be a typo);
    /// - `s3://bucket/prefix`: S3 or an S3-compatible server, configured by the `AWS_*`
    ///   environment variables (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, `AWS_REGION`, ...), with
    ///   conditional writes by ETag enabled;
    /// - `az://container/prefix`: Azure Blob Storage (or Azurite), configured by the `AZURE_*`
    ///   environment variables (`AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`,
    ///   `AZURE_STORAGE_USE_EMULATOR`, `AZURITE_BLOB_STORAGE_URL`, ...);
    /// - `gs://bucket/prefix`: Google Cloud Storage, configured by the `GOOGLE_*` variables
    ///   (`GOOGLE_SERVICE_ACCOUNT`, ...); conditional overwrites match the object's generation;
    /// - `swift://container/prefix`: OpenStack Swift (native backend, `ST_*` or `OS_*`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> banklease::Result<()> {
    /// let bank = banklease::Bank::open("memory:///tenant-a")?;
    /// assert_eq!(bank.prefix().as_ref(), "tenant-a");
    /// # Ok(()) }
    /// ```
    ///
    /// Its store client gets the limits the configuration sets, where it sets them
    /// ([`ClientLimits::configured`]: `[bank] request_timeout` and `retry_timeout` of the file
    /// `BANKLEASE_CONFIG` names, the `BANKLEASE_BANK__*` variables over them): an owner opened
    /// here declares the retry budget of the client it really has, and collectors wait for it.
    pub fn open(url: &str) -> Result<Self> {
        Self::open_configured_limits(url, false)
    }

    fn open_configured_limits(url: &str, create: bool) -> Result<Self> {
        let section = crate::config::BankConfig::configured()?;
        let limits = section.limits();
        let mut bank = Self::open_with(
            url,
            create,
            limits,
            section.ca_file.as_deref(),
            section.credentials.as_ref(),
        )?;
        Arc::get_mut(&mut bank.inner)
            .expect("a bank just built is not shared")
            .limits = limits;
        Ok(bank)
    }

    /// [`open`](Self::open) with `credentials` instead of the environment's (an embedder
    /// holding them in its own configuration): S3 keys for an `s3://` bank, a `clouds.yaml`
    /// cloud or OpenStack options for a `swift://` bank. Given for another kind of bank, they
    /// are refused ([`Error::InvalidUrl`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> banklease::Result<()> {
    /// use banklease::{Bank, Credentials};
    /// let bank = Bank::open_with_credentials(
    ///     "s3://backups/tenant-a",
    ///     Credentials::s3("AKIDEXAMPLE", "secret"),
    /// )?;
    /// assert_eq!(bank.prefix().as_ref(), "tenant-a");
    /// assert!(Bank::open_with_credentials("memory://", Credentials::s3("a", "b")).is_err());
    /// # Ok(()) }
    /// ```
    pub fn open_with_credentials(url: &str, credentials: Credentials) -> Result<Self> {
        let mut config = crate::config::BankConfig::configured()?;
        config.url = url.to_owned();
        config.credentials = Some(credentials);
        Self::open_configured(&config, false)
    }

    /// [`open`](Self::open), creating a `file:` bank's directory when it is missing (what
    /// `banklease init` does). `open` never creates it: a mistyped path is refused
    /// ([`Error::NoBank`]) instead of becoming an empty bank.
    pub fn open_or_create(url: &str) -> Result<Self> {
        Self::open_configured_limits(url, true)
    }

    /// The bank a `[bank]` section names, its store client opened with the section's limits
    /// (`request_timeout`, `retry_timeout`); `create` as [`open_or_create`](Self::open_or_create).
    pub fn open_configured(config: &BankConfig, create: bool) -> Result<Self> {
        let mut bank = Self::open_with(
            &config.url,
            create,
            config.limits(),
            config.ca_file.as_deref(),
            config.credentials.as_ref(),
        )?;
        Arc::get_mut(&mut bank.inner)
            .expect("a bank just built is not shared")
            .limits = config.limits();
        Ok(bank)
    }

    /// The limits its store client was opened with.
    pub fn client_limits(&self) -> ClientLimits {
        self.inner.limits
    }

    /// The same bank, declaring that its store client has `limits` (for a store built outside
    /// [`open`](Self::open), whose client was made with them): the retry budget its owners
    /// declare to collectors is then theirs. Declaring limits shorter than the client's own
    /// lets a collector decide while one of its writes may still land.
    pub fn with_declared_limits(&self, limits: ClientLimits) -> Self {
        let mut bank = self.with_store(Arc::clone(self.store()));
        Arc::get_mut(&mut bank.inner)
            .expect("a bank just built is not shared")
            .limits = limits;
        bank
    }

    /// Whether create-if-absent on this bank is a check and a write that another create can
    /// fall between (native Swift, by its URL or its store): then only timing keeps two
    /// creates of one key from both landing, and the collector's timing rule (c) holds for
    /// every owner.
    pub fn create_is_timing_only(&self) -> bool {
        self.inner.swift.is_some()
            || scheme::Scheme::of(&self.inner.label) == Some(scheme::Scheme::Swift)
    }

    /// The retry budget of its store client ([`ClientLimits::budget`]).
    pub fn retry_budget(&self) -> Duration {
        self.inner.limits.budget(&self.inner.label)
    }

    /// A bank on an existing store, with `prefix` as its root. `label` names it in messages and
    /// must not contain secrets.
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: &str, label: &str) -> Self {
        Self::build(store, None, None, prefix, label)
    }

    /// A bank on an S3-compatible store (what `s3://` opens): every conditional overwrite goes
    /// through an [`EtagAdapter`](crate::store::EtagAdapter), so that a store that compares its
    /// ETags unquoted (Ceph RGW) is sent the form it honours once the capability probe found it.
    pub fn from_s3_compatible(store: Arc<dyn ObjectStore>, prefix: &str, label: &str) -> Self {
        let form = crate::store::EtagForm::default();
        let adapted = Arc::new(crate::store::EtagAdapter::new(store, form.clone()));
        let mut bank = Self::build(adapted, None, None, prefix, label);
        Arc::get_mut(&mut bank.inner)
            .expect("a bank just built is not shared")
            .etag_form = Some(form);
        bank
    }

    /// A bank on a native Swift store: leases use Swift's server-side expiry and POST renewal.
    pub fn from_swift(store: crate::store::swift::SwiftStore, prefix: &str, label: &str) -> Self {
        Self::build(Arc::new(store.clone()), Some(store), None, prefix, label)
    }

    /// A bank on a whole local directory with atomic conditional writes (what `file:` opens).
    pub fn from_local(store: crate::store::local::LocalStore, label: &str) -> Self {
        Self::build(Arc::new(store.clone()), None, Some(store), "", label)
    }

    /// A view of this bank through another store that wraps the same objects (a counting or
    /// fault-injecting wrapper); the Swift handle, if any, is kept, and a
    /// [`reading_only`](Self::reading_only) handle stays one.
    pub fn with_store(&self, store: Arc<dyn ObjectStore>) -> Self {
        let mut bank = Self::build(
            store,
            self.inner.swift.clone(),
            self.inner.local.clone(),
            self.inner.prefix.as_ref(),
            &self.inner.label,
        );
        let inner = Arc::get_mut(&mut bank.inner).expect("a bank just built is not shared");
        inner.made_at_open = self.inner.made_at_open;
        // The client behind the wrapper is the same: so is its retry budget, and the form its
        // conditions are sent in (the wrapped store goes through the same adapter).
        inner.limits = self.inner.limits;
        inner.etag_form.clone_from(&self.inner.etag_form);
        inner.identity.clone_from(&self.inner.identity);
        inner.keeps_learnt = self.inner.keeps_learnt;
        bank.reading_only = self.reading_only;
        bank.collector = self.collector;
        bank
    }

    fn build(
        store: Arc<dyn ObjectStore>,
        swift: Option<crate::store::swift::SwiftStore>,
        local: Option<crate::store::local::LocalStore>,
        prefix: &str,
        label: &str,
    ) -> Self {
        Self {
            inner: Arc::new(BankInner {
                store,
                prefix: Path::from(prefix.trim_matches('/')),
                label: label.to_owned(),
                capabilities: tokio::sync::OnceCell::new(),
                identity: label.to_owned(),
                keeps_learnt: false,
                learnt: tokio::sync::OnceCell::new(),
                swift,
                local,
                made_at_open: false,
                limits: crate::config::ClientLimits::default(),
                etag_form: None,
            }),
            reading_only: false,
            collector: false,
        }
    }

    /// This bank for a command that only reads and judges (listing, showing, `validity-check`,
    /// a dry run): it writes nothing. Its store-clock reading is this host's clock on a `file:`
    /// bank whose file system keeps exact stamps (the host's clock is that bank's clock: every
    /// write there is stamped with it), and on a server the `Date` of its answer to one read,
    /// to the second (a reader and a writer judge alike, the reader a second more cautiously).
    /// Only where neither serves does it rewrite this host's one probe
    /// (`_banklease/clock/host-…`, [`own_clock_probe`](Self::own_clock_probe)), and a refused
    /// write there refuses the command. It never adopts a bank without a descriptor. Owners and
    /// collectors never get it: they fail on a refused probe as on any refused write.
    pub fn reading_only(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            reading_only: true,
            collector: self.collector,
        }
    }

    /// A handle for a collector (a pass, `checkpoint resolve`): the same bank, whose store-clock
    /// probe is the host's collectors' key (`host-<16 hex digits>-gc`), so that reading
    /// commands rewriting the host's shared key (`lease show` in a loop) never make a pass's
    /// reading unverified. Collectors of one host share it, and take turns under the GC lease.
    pub fn for_collector(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            reading_only: self.reading_only,
            collector: true,
        }
    }

    /// Whether this bank's store was made by [`Bank::open`] itself (`memory://`): nothing else
    /// can name it, so an empty one is a bank, not a typo.
    pub fn made_at_open(&self) -> bool {
        self.inner.made_at_open
    }

    /// Whether this is a [`reading_only`](Self::reading_only) handle.
    pub fn is_reading_only(&self) -> bool {
        self.reading_only
    }

    /// The native Swift store, when the bank is on Swift.
    pub fn swift(&self) -> Option<&crate::store::swift::SwiftStore> {
        self.inner.swift.as_ref()
    }

    /// The local store, when the bank is a `file:` directory.
    pub fn local(&self) -> Option<&crate::store::local::LocalStore> {
        self.inner.local.as_ref()
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The root prefix of the bank within the store (empty for a whole directory or bucket).
    pub fn prefix(&self) -> &Path {
        &self.inner.prefix
    }

    /// The bank's URL, for messages.
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// The path of `parts` under the bank's prefix. Parts must already be validated ids or
    /// fixed names; [`PathPart`] escapes anything else so it stays one segment.
    pub fn path(&self, parts: &[&str]) -> Path {
        let mut path = self.inner.prefix.clone();
        for part in parts {
            path = path.join(PathPart::from(*part));
        }
        path
    }

    /// `leases/<owner_id>`
    pub fn lease_path(&self, owner: &OwnerId) -> Path {
        Key::Lease(owner.clone()).path(self)
    }

    /// Whether this bank's store is known to refuse If-Match without asking it: native Swift,
    /// or a capability probe this process already made. A rewrite then compares versions by a
    /// HEAD at once instead of sending a write the store refuses (a request, and on a store whose
    /// answers are counted by a test, a write).
    pub fn refuses_if_match(&self) -> bool {
        self.swift().is_some()
            || self
                .inner
                .capabilities
                .get()
                .is_some_and(|c| c.conditional_overwrite == crate::capability::Condition::Refused)
    }

    /// What the store really enforces, probed once per bank handle and cached. Always measured
    /// here, never taken from what an earlier process kept in the bank: owners, collectors and
    /// deciders rest the product's promise on it (a bank copied to a store that ignores
    /// create-if-absent must be refused, whatever the copy says). A bank opened by URL keeps
    /// what it measured (`_banklease/store.json`) for named locks and readers.
    pub async fn capabilities(&self) -> Result<&Capabilities> {
        self.inner
            .capabilities
            .get_or_try_init(|| self.probe_capabilities())
            .await
    }

    /// Send conditions in the form the kept record says this store honours (Ceph RGW: unquoted
    /// ETags), for a lock command that takes the kept verdict instead of measuring.
    pub(crate) fn use_kept_etag_form(&self, learnt: &crate::learnt::Learnt) {
        if learnt.capabilities.unquoted_etags {
            if let Some(form) = &self.inner.etag_form {
                form.use_unquoted();
            }
        }
    }

    /// Measure the store again whatever was learnt before (`init`, `doctor`), and keep what was
    /// measured (the named-lock and fenced-write verdicts are measured again when next needed).
    pub async fn measure_capabilities(&self) -> Result<Capabilities> {
        let caps = self.probe_capabilities().await?;
        if self.inner.keeps_learnt && !self.is_reading_only() {
            // Everything kept before was measured on what may be another store now.
            let learnt = crate::learnt::Learnt::new(self.identity(), caps.clone());
            self.remember(learnt.clone());
            learnt::write(self, &learnt).await;
        }
        // A handle whose capabilities were read before keeps them for its life; the next
        // process reads what was just measured.
        let _ = self.inner.capabilities.set(caps.clone());
        Ok(caps)
    }

    async fn probe_capabilities(&self) -> Result<Capabilities> {
        let path = Key::Probe(uuid::Uuid::new_v4().to_string()).path(self);
        let caps = Capabilities::probe(
            self.store(),
            path,
            self.label(),
            self.swift().is_some(),
            self.inner.etag_form.as_ref(),
        )
        .await?;
        if self.inner.keeps_learnt && !self.is_reading_only() {
            // Kept as measured: the other verdicts stay while the conditions are the same,
            // and go with them when they changed (they were measured on what they were).
            let kept = learnt::update(self, &caps, |l| {
                if l.capabilities != caps {
                    *l = crate::learnt::Learnt::new(self.identity(), caps.clone());
                }
            })
            .await;
            if let Some(kept) = kept {
                self.remember(kept);
            }
        }
        Ok(caps)
    }

    /// The store refused a condition it was measured to keep: the record is forgotten, here
    /// and in the bank (the next process measures again).
    pub(crate) async fn forget_learnt(&self) {
        learnt::forget(self).await;
    }

    /// The store behaved against the record: this handle no longer answers from it.
    pub(crate) fn forget_remembered(&self) {
        if let Some(cell) = self.inner.learnt.get() {
            *cell.lock().expect("learnt record poisoned") = None;
        }
    }

    /// What this handle now knows was learnt (what [`learnt`](Self::learnt) answers next).
    fn remember(&self, learnt: crate::learnt::Learnt) {
        match self.inner.learnt.get() {
            Some(cell) => *cell.lock().expect("learnt record poisoned") = Some(learnt),
            // Not read yet (or being read: the read then finds what was just written).
            None => {
                let _ = self.inner.learnt.set(std::sync::Mutex::new(Some(learnt)));
            }
        }
    }

    /// What earlier probes of this store learnt and kept in the bank (`None` for a bank made on
    /// a caller's store, or when nothing usable is kept).
    pub(crate) async fn learnt(&self) -> Result<Option<crate::learnt::Learnt>> {
        if !self.inner.keeps_learnt {
            return Ok(None);
        }
        let learnt = self
            .inner
            .learnt
            .get_or_try_init(|| async { learnt::read(self).await.map(std::sync::Mutex::new) })
            .await?;
        Ok(learnt.lock().expect("learnt record poisoned").clone())
    }

    /// Keep one more thing measured (`update` sets that field alone) in the bank's record: the
    /// record is read afresh and written on the version read, so that what `init` or `doctor`
    /// measured meanwhile is never overwritten with this handle's older view; a lost race
    /// costs a measurement later, nothing else.
    pub(crate) async fn learn(&self, update: impl FnOnce(&mut crate::learnt::Learnt)) {
        // A reader keeps nothing, and must not probe capabilities (writes) to fill a record.
        if !self.inner.keeps_learnt || self.is_reading_only() {
            return;
        }
        let Ok(caps) = self.capabilities().await else {
            return;
        };
        if let Some(learnt) = learnt::update(self, caps, update).await {
            self.remember(learnt);
        }
    }

    /// Whether conditions are sent with unquoted ETags (what the probe, or its record, says).
    #[cfg(test)]
    pub(crate) fn sends_unquoted(&self) -> bool {
        self.inner
            .etag_form
            .as_ref()
            .is_some_and(crate::store::EtagForm::is_unquoted)
    }

    /// Whether this bank keeps what probes learn in the bank (opened by URL).
    pub(crate) fn keeps_learnt(&self) -> bool {
        self.inner.keeps_learnt
    }

    /// What the store is, for the record of what probes learnt about it.
    pub(crate) fn identity(&self) -> &str {
        &self.inner.identity
    }

    /// This bank (just opened by URL on a store `identity` names) keeps what probes learn.
    pub(crate) fn keeping_learnt(mut self, identity: String) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("a bank just opened is not shared");
        inner.identity = identity;
        inner.keeps_learnt = true;
        self
    }
}

impl Prefixed for Bank {
    fn root(&self) -> &Path {
        &self.inner.prefix
    }
}

fn file_url_path(rest: &str) -> std::result::Result<PathBuf, String> {
    // `%XX` escapes are decoded (`b%C3%A4nk%20pct` is `bänk pct`), as in any file URL.
    let decode = |absolute: &str| {
        url::Url::parse(&format!("file://{absolute}"))
            .ok()
            .and_then(|u| u.to_file_path().ok())
            .ok_or_else(|| format!("`{absolute}` is not a valid path of a file URL"))
    };
    let path = if let Some(after) = rest.strip_prefix("//") {
        // file://host/path: only an empty host or localhost is local.
        let (host, path) = match after.find('/') {
            Some(i) => after.split_at(i),
            None => (after, ""),
        };
        if !host.is_empty() && host != "localhost" {
            return Err(format!("host `{host}` is not local; use file:///abs/path"));
        }
        if path.is_empty() {
            PathBuf::new()
        } else {
            decode(path)?
        }
    } else if rest.is_empty() {
        PathBuf::new()
    } else if rest.starts_with('/') {
        decode(rest)?
    } else {
        // Relative: decoded as if absolute, then made relative again.
        let absolute = decode(&format!("/{rest}"))?;
        absolute
            .strip_prefix("/")
            .map(std::path::Path::to_path_buf)
            .map_err(|_| format!("`{rest}` is not a valid relative path"))?
    };
    if path.as_os_str().is_empty() {
        return Err("no path; use file:///abs/path or file:relative/path".to_owned());
    }
    if path == std::path::Path::new("/") {
        return Err("the filesystem root cannot be a bank; name a directory".to_owned());
    }
    let path = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot resolve relative path: {e}"))?
            .join(path)
    };
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn urls_are_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("b").display());
        // Opening never creates a bank's directory: a mistyped path is no bank.
        let err = Bank::open(&url).unwrap_err();
        assert!(matches!(err, Error::NoBank { .. }), "{err}");
        assert!(
            err.to_string().contains("banklease --bank file://"),
            "{err}"
        );
        assert!(!dir.path().join("b").exists());
        let bank = Bank::open_or_create(&url).unwrap();
        assert!(dir.path().join("b").is_dir());
        assert_eq!(bank.prefix().as_ref(), "");
        Bank::open(&url).unwrap();
        let bank = Bank::open("memory://").unwrap();
        assert_eq!(bank.prefix().as_ref(), "");
        let bank = Bank::open("memory:///a/b/").unwrap();
        assert_eq!(bank.path(&["leases", "x"]).as_ref(), "a/b/leases/x");
    }

    #[test]
    fn bad_urls_are_refused_with_reason() {
        for (url, needle) in [
            ("", "empty"),
            ("   ", "empty"),
            ("file:///", "root"),
            ("file://", "no path"),
            ("file://otherhost/x", "not local"),
            ("ftp://x", "unknown scheme"),
            ("/var/lib/bank", "did you mean `file:///var/lib/bank`?"),
            ("./bank", "did you mean `file:./bank`?"),
            ("swift://", "no container"),
            ("s3://", "no bucket"),
            ("az://", "no container"),
            ("gs://", "no bucket"),
        ] {
            let err = Bank::open(url).unwrap_err().to_string();
            assert!(err.contains(needle), "{url}: {err}");
        }
    }

    #[test]
    fn file_urls_decode_percent_escapes() {
        let p = file_url_path("///srv/b%C3%A4nk%20pct").unwrap();
        assert_eq!(p, PathBuf::from("/srv/bänk pct"));
        let p = file_url_path("//localhost/srv/a%2Fb").unwrap();
        assert_eq!(p, PathBuf::from("/srv/a/b"));
        let p = file_url_path("rel%20dir/x").unwrap();
        assert!(
            p.is_absolute() && p.ends_with("rel dir/x"),
            "{}",
            p.display()
        );
    }

    #[test]
    fn relative_file_url_resolves_against_cwd() {
        let p = file_url_path("some/dir").unwrap();
        assert!(p.is_absolute());
        assert!(p.ends_with("some/dir"));
    }

    #[test]
    fn path_parts_cannot_escape() {
        let bank = Bank::open("memory:///p").unwrap();
        let path = bank.path(&["leases", "a/../../b"]);
        assert_eq!(path.parts().count(), 3);
        assert!(path.as_ref().starts_with("p/leases/"));
    }
}
