//! `SimStore`: an in-memory [`ObjectStore`] on a simulated *store clock*, for deterministic
//! simulations (feature `test-util`).
//!
//! `object_store`'s `InMemory` stamps `last_modified` with the real `Utc::now()`, so a test that
//! drives time with a [`MockClock`] cannot make a lease look old to an observer. `SimStore` stamps
//! every write with its [`StoreClock`] instead: a wall clock that follows a simulated clock (a
//! [`MockClock`] or any [`Clock`] a driver moves), can be skewed by any offset relative to the
//! owners' clocks, and can jump forward (as a store's NTP correction would), which is what the
//! skew margin of [`crate::observe::judge`] must absorb.
//!
//! Like `InMemory`, it keeps a `BTreeMap` under a mutex, so create-if-absent and If-Match (the
//! ETag is a counter) are atomic, and listings are sorted by path. Two switches model weaker
//! stores: [`SimStore::refuse_conditional_update`] (like Swift's native backend: If-Match is not
//! implemented, so owners renew by verify-then-overwrite), and [`SimStore::set_stale_reads`]
//! (like a replicated store whose reads may come from a replica that lags by up to a bound:
//! a GET or HEAD may answer with the version that was current at some instant within that
//! bound before the read was served; writes and their conditions always see the latest
//! version). An [`Observer`] sees each mutation at the instant it takes effect, for checkers
//! that must judge "who was alive when this happened".
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! use banklease::clock::MockClock;
//! use banklease::sim_store::{SimStore, StoreClock};
//! use object_store::{path::Path, ObjectStoreExt};
//!
//! let world = MockClock::new();
//! let clock = StoreClock::new(world.clone()).with_skew(chrono::TimeDelta::hours(-3));
//! let store = SimStore::new(clock.clone());
//! let p = Path::from("lease");
//! store.put(&p, "x".into()).await.unwrap();
//! let written = store.head(&p).await.unwrap().last_modified;
//! assert_eq!(written, clock.now());
//!
//! world.advance(Duration::from_secs(10));
//! clock.jump_forward(Duration::from_millis(500));
//! assert_eq!((clock.now() - written).num_milliseconds(), 10_500);
//! // The object itself is unchanged: only time moved.
//! assert_eq!(store.head(&p).await.unwrap().last_modified, written);
//! # }
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, TimeDelta, Utc};
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    Attributes, CopyMode, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload,
    ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions,
    PutPayload, PutResult, RenameOptions, RenameTargetMode, Result, UploadPart,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[cfg(doc)]
use crate::clock::MockClock;
use crate::clock::{Clock, SharedClock};

const STORE: &str = "SimStore";

/// The store's wall clock: a simulated clock's wall time plus an offset that can be set (skew
/// relative to everyone else) and moved forward (a jump). Cheap to clone; clones share state.
#[derive(Clone)]
pub struct StoreClock {
    inner: Arc<StoreClockInner>,
}

struct StoreClockInner {
    source: SharedClock,
    offset: Mutex<TimeDelta>,
    jumped: Mutex<Duration>,
}

impl fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreClock")
            .field("now", &self.now())
            .field("skew", &self.skew())
            .finish()
    }
}

impl StoreClock {
    /// A store clock that follows `source`'s wall time (move `source` to move it), with no skew.
    pub fn new(source: impl Clock) -> Self {
        Self {
            inner: Arc::new(StoreClockInner {
                source: Arc::new(source),
                offset: Mutex::new(TimeDelta::zero()),
                jumped: Mutex::new(Duration::ZERO),
            }),
        }
    }

    /// Skew the store's wall clock by `skew` relative to its source (positive: the store is
    /// ahead). Owners never read the store's clock, so any skew must be harmless.
    pub fn with_skew(self, skew: TimeDelta) -> Self {
        *self.offset() = skew;
        self
    }

    /// The current offset relative to the source (the skew plus every jump so far).
    pub fn skew(&self) -> TimeDelta {
        *self.offset()
    }

    /// Move the store's clock forward by `by` at once, as a clock correction would. A store
    /// clock never moves backwards.
    pub fn jump_forward(&self, by: Duration) {
        *self.offset() += TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
        *self.inner.jumped.lock().expect("store clock poisoned") += by;
    }

    /// The sum of every forward jump so far.
    pub fn jumped(&self) -> Duration {
        *self.inner.jumped.lock().expect("store clock poisoned")
    }

    /// The store's current wall time.
    pub fn now(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from(self.inner.source.system_now()) + self.skew()
    }

    /// The clock this store clock follows.
    pub fn source(&self) -> &SharedClock {
        &self.inner.source
    }

    fn offset(&self) -> std::sync::MutexGuard<'_, TimeDelta> {
        self.inner.offset.lock().expect("store clock poisoned")
    }
}

/// What a mutation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationKind {
    /// An unconditional put (or a completed multipart upload).
    Overwrite,
    /// A create-if-absent put that created the object.
    Create,
    /// An If-Match put that matched.
    Update,
    /// A deletion of an object that existed.
    Delete,
    /// The target of a copy (or of a rename).
    Copy,
}

/// One mutation, at the instant it took effect.
#[derive(Debug)]
pub struct Mutation<'a> {
    /// What happened.
    pub kind: MutationKind,
    /// The object.
    pub path: &'a Path,
    /// Its new content (`None` for a deletion).
    pub data: Option<&'a Bytes>,
    /// Its content before the mutation (`None` if it did not exist).
    pub previous: Option<&'a Bytes>,
    /// The store clock's time of the mutation (the new `last_modified`).
    pub at: DateTime<Utc>,
}

/// The store's objects as an [`Observer`] sees them (after the mutation).
pub struct StoreView<'a> {
    map: &'a BTreeMap<Path, Entry>,
}

impl fmt::Debug for StoreView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreView")
            .field("objects", &self.map.len())
            .finish()
    }
}

impl StoreView<'_> {
    /// The content of `path`, if it exists.
    pub fn get(&self, path: &Path) -> Option<&Bytes> {
        self.map.get(path).map(|e| &e.data)
    }

    /// The paths under `prefix` (segment-wise, like a listing), in order.
    pub fn paths_under(&self, prefix: &Path) -> Vec<&Path> {
        under(self.map, Some(prefix))
            .map(|(path, _)| path)
            .collect()
    }
}

/// Called with each mutation at the instant it takes effect, under the store's lock: it must
/// not call the store (use the [`StoreView`]), and should be quick.
pub type Observer = Arc<dyn Fn(&Mutation<'_>, &StoreView<'_>) + Send + Sync>;

#[derive(Debug, Clone)]
struct Entry {
    data: Bytes,
    last_modified: DateTime<Utc>,
    e_tag: u64,
    attributes: Attributes,
}

impl Entry {
    fn meta(&self, location: &Path) -> ObjectMeta {
        ObjectMeta {
            location: location.clone(),
            last_modified: self.last_modified,
            size: self.data.len() as u64,
            e_tag: Some(e_tag(self.e_tag)),
            version: None,
        }
    }
}

/// Most versions remembered per path for stale reads (older ones are forgotten early).
const MAX_VERSIONS: usize = 256;

/// One state of a path in its timeline: since when (`None`: since before the timeline began),
/// and the object (`None`: absent).
type Version = (Option<Instant>, Option<Entry>);

/// Reads from lagging replicas (see [`SimStore::set_stale_reads`]).
#[derive(Debug)]
struct Staleness {
    lag: Duration,
    rate: f64,
    rng: StdRng,
    /// Reads answered with another version than the current one.
    served: u64,
}

#[derive(Debug, Default)]
struct State {
    next_etag: u64,
    map: BTreeMap<Path, Entry>,
    stale: Option<Staleness>,
    /// Per path, the versions that a stale read may still return, oldest first; the last one
    /// is the current state. Only kept while stale reads are on; a path without a timeline has
    /// had its current state for longer than the lag.
    timeline: HashMap<Path, VecDeque<Version>>,
}

impl State {
    /// Note that `path` changed to `entry` at `now` (from `previous`), for stale reads.
    fn record(
        &mut self,
        path: &Path,
        now: Instant,
        previous: Option<&Entry>,
        entry: Option<Entry>,
    ) {
        let Some(stale) = &self.stale else { return };
        let lag = stale.lag;
        let line = self.timeline.entry(path.clone()).or_default();
        if line.is_empty() {
            if let Some(previous) = previous {
                line.push_back((None, Some(previous.clone())));
            }
        }
        line.push_back((Some(now), entry));
        prune(line, now, lag);
        // One version older than the lag is the current state: no history left to serve.
        let horizon = now.checked_sub(lag);
        let settled = line.len() == 1
            && line[0]
                .0
                .is_none_or(|since| horizon.is_some_and(|h| since <= h));
        if settled {
            self.timeline.remove(path);
        }
    }

    /// What a read of `path` served at `now` returns: the current object, or (a fraction
    /// `rate` of reads) the version current at an instant drawn within `lag` before `now`.
    fn read(&mut self, path: &Path, now: Instant) -> Option<Entry> {
        let current = self.map.get(path).cloned();
        let Some(stale) = self.stale.as_mut() else {
            return current;
        };
        if !stale.rng.gen_bool(stale.rate) {
            return current;
        }
        let back = stale.lag.mul_f64(stale.rng.gen_range(0.0..=1.0));
        let Some(line) = self.timeline.get_mut(path) else {
            return current;
        };
        prune(line, now, stale.lag);
        let at = now.checked_sub(back).unwrap_or(now);
        let found = line
            .iter()
            .rev()
            .find(|(since, _)| since.is_none_or(|s| s <= at))
            .and_then(|(_, e)| e.clone());
        if found.as_ref().map(|e| e.e_tag) != current.as_ref().map(|e| e.e_tag) {
            stale.served += 1;
        }
        found
    }
}

/// Forget the versions of `line` that no read within `lag` of `now` can return any more.
fn prune(line: &mut VecDeque<Version>, now: Instant, lag: Duration) {
    let horizon = now.checked_sub(lag);
    while line.len() >= 2 {
        let next_since = line[1].0;
        let invisible = match (next_since, horizon) {
            (Some(s), Some(h)) => s <= h,
            _ => false,
        };
        if invisible || line.len() > MAX_VERSIONS {
            line.pop_front();
        } else {
            break;
        }
    }
}

struct Shared {
    clock: StoreClock,
    state: Mutex<State>,
    observer: Mutex<Option<Observer>>,
    refuse_update: AtomicBool,
    requests: AtomicU64,
}

/// The in-memory store on a [`StoreClock`]. Cheap to clone; clones share the objects.
#[derive(Clone)]
pub struct SimStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimStore")
            .field("objects", &self.state().map.len())
            .field("clock", &self.shared.clock)
            .finish()
    }
}

impl fmt::Display for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimStore")
    }
}

fn e_tag(n: u64) -> String {
    format!("\"{n}\"")
}

fn not_found(path: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: path.to_string(),
        source: format!("no object at `{path}`").into(),
    }
}

fn generic(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(source),
    }
}

/// The entries under `prefix`, segment-wise (`a/b` is under `a`, `ab` is not), excluding the
/// prefix itself, in path order.
fn under<'a>(
    map: &'a BTreeMap<Path, Entry>,
    prefix: Option<&Path>,
) -> impl Iterator<Item = (&'a Path, &'a Entry)> + 'a {
    let prefix = prefix.cloned();
    let start = prefix.clone().unwrap_or_default();
    map.range(start..)
        .take_while({
            let prefix = prefix.clone();
            move |(path, _)| {
                prefix
                    .as_ref()
                    .is_none_or(|p| path.as_ref().starts_with(p.as_ref()))
            }
        })
        .filter(move |(path, _)| match &prefix {
            None => true,
            Some(p) => path
                .prefix_match(p)
                .is_some_and(|mut rest| rest.next().is_some()),
        })
}

impl SimStore {
    /// An empty store stamping with `clock`.
    pub fn new(clock: StoreClock) -> Self {
        Self {
            shared: Arc::new(Shared {
                clock,
                state: Mutex::new(State::default()),
                observer: Mutex::new(None),
                refuse_update: AtomicBool::new(false),
                requests: AtomicU64::new(0),
            }),
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &StoreClock {
        &self.shared.clock
    }

    /// Answer If-Match puts with `NotImplemented`, as Swift's native backend does: owners then renew by
    /// verify-then-overwrite.
    pub fn refuse_conditional_update(&self, refuse: bool) {
        self.shared.refuse_update.store(refuse, Ordering::SeqCst);
    }

    /// Serve a fraction `rate` of reads (GET, HEAD, ranges) from a replica that lags by up to
    /// `lag`: such a read returns the version of the object (or its absence) that was current
    /// at an instant drawn uniformly within `lag` before the read was served, on the store
    /// clock's source. Writes, their conditions and listings always see the latest state.
    /// Drawn from a generator seeded with `seed`; `Duration::ZERO` turns stale reads off.
    pub fn set_stale_reads(&self, lag: Duration, rate: f64, seed: u64) {
        let mut state = self.state();
        state.timeline.clear();
        state.stale = (!lag.is_zero()).then(|| Staleness {
            lag,
            rate: rate.clamp(0.0, 1.0),
            rng: StdRng::seed_from_u64(seed),
            served: 0,
        });
    }

    /// Reads answered with another version than the current one (see
    /// [`set_stale_reads`](Self::set_stale_reads)).
    pub fn stale_reads(&self) -> u64 {
        self.state().stale.as_ref().map_or(0, |s| s.served)
    }

    /// Call `observer` with every mutation, at the instant it takes effect.
    pub fn set_observer(&self, observer: Option<Observer>) {
        *self.shared.observer.lock().expect("observer poisoned") = observer;
    }

    /// Requests answered so far (every trait method call, one per path for deletions).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Every object under `prefix` (all if `None`) with its content, in path order. Makes no
    /// request.
    pub fn objects(&self, prefix: Option<&Path>) -> Vec<(ObjectMeta, Bytes)> {
        let state = self.state();
        under(&state.map, prefix)
            .map(|(path, e)| (e.meta(path), e.data.clone()))
            .collect()
    }

    /// The content of `path`, if it exists. Makes no request.
    pub fn peek(&self, path: &Path) -> Option<Bytes> {
        self.state().map.get(path).map(|e| e.data.clone())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().expect("sim store poisoned")
    }

    fn count(&self) {
        self.shared.requests.fetch_add(1, Ordering::SeqCst);
    }

    /// The object a read of `location` is answered with now (maybe a stale version).
    fn read(&self, location: &Path) -> Option<Entry> {
        let now = self.shared.clock.source().now();
        self.state().read(location, now)
    }

    /// Apply a write under the lock and tell the observer.
    fn write(
        &self,
        location: &Path,
        data: Bytes,
        mode: PutMode,
        attributes: Attributes,
        copy: bool,
    ) -> Result<PutResult> {
        if matches!(mode, PutMode::Update(_)) && self.shared.refuse_update.load(Ordering::SeqCst) {
            return Err(object_store::Error::NotImplemented {
                operation: "put_opts with PutMode::Update".to_owned(),
                implementer: STORE.to_owned(),
            });
        }
        let observer = self
            .shared
            .observer
            .lock()
            .expect("observer poisoned")
            .clone();
        let mut state = self.state();
        let kind = match (&mode, state.map.get(location)) {
            (PutMode::Overwrite, _) => MutationKind::Overwrite,
            (PutMode::Create, None) => MutationKind::Create,
            (PutMode::Create, Some(_)) => {
                return Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: format!("`{location}` exists").into(),
                })
            }
            (PutMode::Update(v), existing) => {
                let current = existing.map(|e| e_tag(e.e_tag));
                match (&v.e_tag, current) {
                    (Some(expected), Some(current)) if *expected == current => MutationKind::Update,
                    (expected, current) => {
                        return Err(object_store::Error::Precondition {
                            path: location.to_string(),
                            source: format!(
                                "e_tag {current:?} of `{location}` does not match {expected:?}"
                            )
                            .into(),
                        })
                    }
                }
            }
        };
        let kind = if copy { MutationKind::Copy } else { kind };
        let tag = state.next_etag;
        state.next_etag += 1;
        let at = self.shared.clock.now();
        let entry = Entry {
            data,
            last_modified: at,
            e_tag: tag,
            attributes,
        };
        if state.stale.is_some() {
            let now = self.shared.clock.source().now();
            let previous = state.map.get(location).cloned();
            state.record(location, now, previous.as_ref(), Some(entry.clone()));
        }
        let previous = state.map.insert(location.clone(), entry);
        if let Some(observer) = observer {
            let mutation = Mutation {
                kind,
                path: location,
                data: state.map.get(location).map(|e| &e.data),
                previous: previous.as_ref().map(|e| &e.data),
                at,
            };
            observer(&mutation, &StoreView { map: &state.map });
        }
        Ok(PutResult {
            e_tag: Some(e_tag(tag)),
            version: None,
            extensions: Default::default(),
        })
    }

    fn remove(&self, location: &Path) {
        let observer = self
            .shared
            .observer
            .lock()
            .expect("observer poisoned")
            .clone();
        let mut state = self.state();
        if let Some(removed) = state.map.remove(location) {
            if state.stale.is_some() {
                let now = self.shared.clock.source().now();
                state.record(location, now, Some(&removed), None);
            }
            if let Some(observer) = observer {
                let mutation = Mutation {
                    kind: MutationKind::Delete,
                    path: location,
                    data: None,
                    previous: Some(&removed.data),
                    at: self.shared.clock.now(),
                };
                observer(&mutation, &StoreView { map: &state.map });
            }
        }
    }

    fn copy_entry(&self, from: &Path, to: &Path, create: bool) -> Result<()> {
        let entry = self
            .state()
            .map
            .get(from)
            .cloned()
            .ok_or_else(|| not_found(from))?;
        let mode = if create {
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        self.write(to, entry.data, mode, entry.attributes, true)?;
        Ok(())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for SimStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.count();
        self.write(location, payload.into(), opts.mode, opts.attributes, false)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.count();
        Ok(Box::new(SimUpload {
            store: self.clone(),
            location: location.clone(),
            attributes: opts.attributes,
            parts: Vec::new(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.count();
        let entry = self.read(location).ok_or_else(|| not_found(location))?;
        let meta = entry.meta(location);
        options.check_preconditions(&meta)?;
        let len = entry.data.len() as u64;
        let range = match &options.range {
            Some(r) => r.as_range(len).map_err(generic)?,
            None => 0..len,
        };
        let data = entry.data.slice(range.start as usize..range.end as usize);
        Ok(GetResult {
            payload: GetResultPayload::Stream(futures::stream::iter([Ok(data)]).boxed()),
            meta,
            range,
            attributes: entry.attributes,
            extensions: Default::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.count();
        let data = self
            .read(location)
            .map(|e| e.data)
            .ok_or_else(|| not_found(location))?;
        ranges
            .iter()
            .map(|r| {
                let r = GetRange::Bounded(r.clone())
                    .as_range(data.len() as u64)
                    .map_err(generic)?;
                Ok(data.slice(r.start as usize..r.end as usize))
            })
            .collect()
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .map(move |location| {
                let location = location?;
                this.count();
                // Like S3 and InMemory: deleting a missing object succeeds.
                this.remove(&location);
                Ok(location)
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count();
        let state = self.state();
        let metas: Vec<Result<ObjectMeta>> = under(&state.map, prefix)
            .map(|(path, e)| Ok(e.meta(path)))
            .collect();
        futures::stream::iter(metas).boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count();
        let state = self.state();
        let metas: Vec<Result<ObjectMeta>> = under(&state.map, prefix)
            .filter(|(path, _)| *path > offset)
            .map(|(path, e)| Ok(e.meta(path)))
            .collect();
        futures::stream::iter(metas).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.count();
        let root = Path::default();
        let base = prefix.unwrap_or(&root);
        let state = self.state();
        let mut objects = Vec::new();
        let mut common_prefixes: Vec<Path> = Vec::new();
        for (path, entry) in under(&state.map, prefix) {
            let Some(mut rest) = path.prefix_match(base) else {
                continue;
            };
            let Some(first) = rest.next() else { continue };
            if rest.next().is_some() {
                let common = base.clone().join(first);
                if common_prefixes.last() != Some(&common) {
                    common_prefixes.push(common);
                }
            } else {
                objects.push(entry.meta(path));
            }
        }
        Ok(ListResult {
            objects,
            common_prefixes,
            extensions: Default::default(),
        })
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.count();
        self.copy_entry(from, to, options.mode == CopyMode::Create)
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.count();
        self.copy_entry(from, to, options.target_mode == RenameTargetMode::Create)?;
        self.remove(from);
        Ok(())
    }
}

/// A multipart upload: parts are kept in memory and written at once on completion.
struct SimUpload {
    store: SimStore,
    location: Path,
    attributes: Attributes,
    parts: Vec<PutPayload>,
}

impl fmt::Debug for SimUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimUpload")
            .field("location", &self.location)
            .field("parts", &self.parts.len())
            .finish()
    }
}

#[async_trait]
impl MultipartUpload for SimUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.parts.push(data);
        Box::pin(futures::future::ready(Ok(())))
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let mut buf = Vec::new();
        for part in self.parts.drain(..) {
            for chunk in part.iter() {
                buf.extend_from_slice(chunk);
            }
        }
        self.store.write(
            &self.location,
            buf.into(),
            PutMode::Overwrite,
            std::mem::take(&mut self.attributes),
            false,
        )
    }

    async fn abort(&mut self) -> Result<()> {
        self.parts.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStoreExt, UpdateVersion};

    use crate::clock::MockClock;

    fn store() -> (MockClock, SimStore) {
        let world = MockClock::new();
        (world.clone(), SimStore::new(StoreClock::new(world)))
    }

    #[tokio::test]
    async fn conformance() {
        use object_store::integration::*;
        let (_, store) = store();
        put_get_delete_list(&store).await;
        list_with_offset_exclusivity(&store).await;
        get_opts(&store).await;
        list_uses_directories_correctly(&store).await;
        list_with_delimiter(&store).await;
        rename_and_copy(&store).await;
        copy_if_not_exists(&store).await;
        copy_rename_nonexistent_object(&store).await;
        stream_get(&store).await;
        put_opts(&store, true).await;
        put_get_attributes(&store).await;
    }

    #[tokio::test]
    async fn stamps_come_from_the_store_clock() {
        let (world, store) = store();
        let clock = store.clock().clone();
        let a = Path::from("a");
        store.put(&a, "1".into()).await.unwrap();
        let t0 = store.head(&a).await.unwrap().last_modified;
        assert_eq!(t0, clock.now());
        world.advance(Duration::from_secs(3));
        clock.jump_forward(Duration::from_millis(250));
        store.put(&a, "2".into()).await.unwrap();
        let t1 = store.head(&a).await.unwrap().last_modified;
        assert_eq!((t1 - t0).num_milliseconds(), 3_250);
        assert_eq!(clock.jumped(), Duration::from_millis(250));
        // A skewed store is hours away from everyone's wall clock; stamps follow it.
        let skewed = StoreClock::new(world.clone()).with_skew(TimeDelta::hours(5));
        let other = SimStore::new(skewed);
        other.put(&a, "x".into()).await.unwrap();
        let t2 = other.head(&a).await.unwrap().last_modified;
        // Five hours ahead of the world, without the first store's 250 ms jump.
        assert_eq!((t2 - t1).num_milliseconds(), 5 * 3_600_000 - 250);
    }

    #[tokio::test]
    async fn conditions_are_atomic_and_update_can_be_refused() {
        let (_, store) = store();
        let a = Path::from("a");
        let first = store
            .put_opts(&a, "1".into(), PutMode::Create.into())
            .await
            .unwrap();
        let again = store.put_opts(&a, "2".into(), PutMode::Create.into()).await;
        assert!(matches!(
            again,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        let stale = UpdateVersion {
            e_tag: Some("\"999\"".into()),
            version: None,
        };
        let r = store
            .put_opts(&a, "3".into(), PutMode::Update(stale).into())
            .await;
        assert!(matches!(r, Err(object_store::Error::Precondition { .. })));
        let current = UpdateVersion::from(first);
        store
            .put_opts(&a, "4".into(), PutMode::Update(current.clone()).into())
            .await
            .unwrap();
        store.refuse_conditional_update(true);
        let r = store
            .put_opts(&a, "5".into(), PutMode::Update(current).into())
            .await;
        assert!(matches!(r, Err(object_store::Error::NotImplemented { .. })));
        let body = store.get(&a).await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], b"4");
    }

    #[tokio::test]
    async fn concurrent_creates_have_one_winner() {
        let (_, store) = store();
        let p = Path::from("decision");
        let attempts = (0..16).map(|i| {
            let store = store.clone();
            let p = p.clone();
            async move {
                store
                    .put_opts(&p, format!("{i}").into(), PutMode::Create.into())
                    .await
                    .is_ok()
            }
        });
        let wins = futures::future::join_all(attempts).await;
        assert_eq!(wins.iter().filter(|w| **w).count(), 1);
    }

    #[tokio::test]
    async fn stale_reads_return_a_version_current_within_the_lag() {
        let (world, store) = store();
        let p = Path::from("lease");
        let lag = Duration::from_millis(500);
        store.set_stale_reads(lag, 1.0, 3);
        // Versions 0..5 written 200 ms apart; then deleted.
        for v in 0..5u8 {
            store.put(&p, vec![b'0' + v].into()).await.unwrap();
            world.advance(Duration::from_millis(200));
        }
        // Now 200 ms after version 4: a read may see version 2 (until 100 ms before the
        // lag's horizon), 3 or 4, never older, and never absent.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let got = store.get(&p).await.unwrap().bytes().await.unwrap();
            seen.insert(got[0] - b'0');
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [2, 3, 4]);
        assert!(store.stale_reads() > 0);
        // Deleted, but a lagging replica may still have it; creates see the latest state.
        store.delete(&p).await.unwrap();
        let mut found = 0;
        for _ in 0..100 {
            found += u32::from(store.head(&p).await.is_ok());
        }
        assert!(
            found > 50,
            "a deleted object is still read from a lagging replica"
        );
        assert!(store
            .put_opts(&p, "x".into(), PutMode::Create.into())
            .await
            .is_ok());
        // Once the lag has passed, every read is current.
        world.advance(lag + Duration::from_millis(1));
        for _ in 0..50 {
            let got = store.get(&p).await.unwrap().bytes().await.unwrap();
            assert_eq!(&got[..], b"x");
        }
        // A new object is not yet visible to a lagging replica.
        let q = Path::from("fresh");
        store.put(&q, "y".into()).await.unwrap();
        let mut missing = 0;
        for _ in 0..100 {
            missing += u32::from(store.head(&q).await.is_err());
        }
        assert!(missing > 50, "{missing}");
        store.set_stale_reads(Duration::ZERO, 0.0, 0);
        assert!(store.head(&q).await.is_ok());
    }

    #[tokio::test]
    async fn observer_sees_each_mutation_when_it_happens() {
        let (world, store) = store();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        store.set_observer(Some(Arc::new(
            move |m: &Mutation<'_>, view: &StoreView<'_>| {
                let exists = view.get(m.path).is_some();
                log.lock()
                    .unwrap()
                    .push((m.kind, m.path.to_string(), exists));
            },
        )));
        let a = Path::from("x/a");
        store
            .put_opts(&a, "1".into(), PutMode::Create.into())
            .await
            .unwrap();
        world.advance(Duration::from_secs(1));
        store.copy(&a, &Path::from("x/b")).await.unwrap();
        store.delete(&a).await.unwrap();
        store.delete(&a).await.unwrap(); // missing: no mutation
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                (MutationKind::Create, "x/a".to_owned(), true),
                (MutationKind::Copy, "x/b".to_owned(), true),
                (MutationKind::Delete, "x/a".to_owned(), false),
            ]
        );
        assert_eq!(store.objects(Some(&Path::from("x"))).len(), 1);
    }
}
