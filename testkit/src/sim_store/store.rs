//! [`SimStore`]: the in-memory store on a [`StoreClock`], and every [`ObjectStore`] method.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    Attributes, CopyMode, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload,
    ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions,
    PutPayload, PutResult, RenameOptions, RenameTargetMode, Result, UploadPart,
};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::state::{e_tag, under, Entry, Staleness, State};
use super::{Mutation, MutationKind, Observer, StoreClock, StoreView};

const STORE: &str = "SimStore";

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
