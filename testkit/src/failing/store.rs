//! The wrapper itself: construction, and every [`ObjectStore`] method forwarded through the
//! fault script.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use rand::rngs::StdRng;
use rand::SeedableRng;

use banklease::clock::{Clock, MockClock};

use super::faults::{Script, Timing, LATE_SEED};
use super::Op;

/// The fault-injecting wrapper.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use banklease_testkit::failing::{FailingStore, Op, Strike};
/// use object_store::{memory::InMemory, path::Path, ObjectStoreExt, PutPayload};
///
/// let store = FailingStore::new(InMemory::new());
/// store.fail_next(Op::Put, Strike::After, 1);
/// let p = Path::from("a");
/// assert!(store.put(&p, PutPayload::from_static(b"x")).await.is_err());
/// // ... but the write landed.
/// assert!(store.head(&p).await.is_ok());
/// # }
/// ```
///
/// Seeded random faults, reproducible from the seed:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use banklease_testkit::failing::{FailingStore, Op, Strike};
/// use object_store::{memory::InMemory, path::Path, ObjectStoreExt, PutPayload};
///
/// let run = |seed| async move {
///     let store = FailingStore::new(InMemory::new()).with_seed(seed);
///     store.set_error_rate(Op::Put, Strike::Before, 0.5);
///     let mut outcomes = Vec::new();
///     for i in 0..20 {
///         let p = Path::from(format!("k{i}"));
///         outcomes.push(store.put(&p, PutPayload::from_static(b"x")).await.is_ok());
///     }
///     (outcomes, store.faults().errors_before)
/// };
/// let (a, failed) = run(7).await;
/// assert_eq!(a, run(7).await.0);
/// assert!(failed > 0 && failed < 20);
/// # }
/// ```
pub struct FailingStore<T> {
    pub(super) inner: Arc<T>,
    pub(super) script: Arc<Mutex<Script>>,
    pub(super) timing: Timing,
}

// Manual: a derive would demand `T: Clone`.
impl<T> Clone for FailingStore<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            script: Arc::clone(&self.script),
            timing: self.timing.clone(),
        }
    }
}

impl<T: ObjectStore> FailingStore<T> {
    /// Wrap `inner` with no faults scripted.
    pub fn new(inner: T) -> Self {
        Self {
            inner: Arc::new(inner),
            script: Arc::default(),
            timing: Timing::None,
        }
    }

    /// Latency advances this mock clock instead of sleeping.
    pub fn with_clock(mut self, clock: MockClock) -> Self {
        self.timing = Timing::Advance(clock);
        self
    }

    /// Latency (and timeouts) *sleep* on `clock`: the call waits until whoever drives the clock
    /// has moved it far enough. For simulations where many tasks share the store; the listing
    /// lag is measured on this clock too.
    pub fn with_sleeping_clock(mut self, clock: impl Clock) -> Self {
        self.timing = Timing::Sleep(Arc::new(clock));
        self
    }

    /// Seed the generator that random faults are drawn from (the default seed is 0).
    pub fn with_seed(self, seed: u64) -> Self {
        let mut s = self.script();
        s.rng = StdRng::seed_from_u64(seed);
        s.rng_late = StdRng::seed_from_u64(seed ^ LATE_SEED);
        drop(s);
        self
    }

    /// The inner store.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

impl<T: ObjectStore> fmt::Debug for FailingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore({})", self.inner)
    }
}

impl<T: ObjectStore> fmt::Display for FailingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for FailingStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> Result<PutResult> {
        let create = matches!(opts.mode, object_store::PutMode::Create);
        self.script().put_to(location.as_ref());
        if self.script().ignore_conditions {
            opts.mode = object_store::PutMode::Overwrite;
        }
        if self.script().refuse_updates && matches!(opts.mode, object_store::PutMode::Update(_)) {
            return Err(object_store::Error::NotImplemented {
                operation: "put if-match".into(),
                implementer: "FailingStore (refuse_updates)".into(),
            });
        }
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.run_as(Op::Put, create, async move {
            let existed = this.must_probe(location) && inner.head(location).await.is_ok();
            let result = inner.put_opts(location, payload, opts).await;
            if result.is_ok() {
                this.wrote(location, existed);
            }
            result
        })
        .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.run(Op::Put, self.inner.put_multipart_opts(location, opts))
            .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        if op == Op::Get {
            self.script().get_of(location.as_ref());
        }
        self.run(op, self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.run(Op::Get, self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .then(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    let refused = {
                        let text = location.as_ref();
                        this.script()
                            .refused_deletes
                            .iter()
                            .any(|n| text.contains(n.as_str()))
                    };
                    if refused {
                        return Err(object_store::Error::PermissionDenied {
                            path: location.to_string(),
                            source: "deletion refused (object under retention)".into(),
                        });
                    }
                    let inner = this.inner.clone();
                    let loc = location.clone();
                    let tracker = this.clone();
                    this.run(Op::Delete, async move {
                        // What a lagging listing keeps showing after the deletion.
                        let before = if tracker.lagging() {
                            inner.head(&loc).await.ok()
                        } else {
                            None
                        };
                        let mut s =
                            inner.delete_stream(futures::stream::iter([Ok(loc.clone())]).boxed());
                        let result = match s.next().await {
                            Some(r) => r.map(|_| ()),
                            None => Ok(()),
                        };
                        if result.is_ok() {
                            tracker.deleted(&loc, before);
                        }
                        result
                    })
                    .await
                    .map(|_| location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_faulty(prefix, None, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_faulty(
            prefix,
            Some(offset),
            self.inner.list_with_offset(prefix, offset),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut result = self
            .run(Op::List, self.inner.list_with_delimiter(prefix))
            .await?;
        if self.lagging() {
            // Objects only; common prefixes are listed as the inner store has them.
            let objects = std::mem::take(&mut result.objects);
            result.objects = self.apply_lag(prefix, None, objects, Some(prefix));
        }
        Ok(result)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.run(Op::Copy, async move {
            let existed = this.must_probe(to) && inner.head(to).await.is_ok();
            let result = inner.copy_opts(from, to, options).await;
            if result.is_ok() {
                this.wrote(to, existed);
            }
            result
        })
        .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.run(Op::Copy, async move {
            let before = if this.lagging() {
                inner.head(from).await.ok()
            } else {
                None
            };
            let existed = this.must_probe(to) && inner.head(to).await.is_ok();
            let result = inner.rename_opts(from, to, options).await;
            if result.is_ok() {
                this.wrote(to, existed);
                this.deleted(from, before);
            }
            result
        })
        .await
    }
}
