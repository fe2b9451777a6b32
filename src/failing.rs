//! `FailingStore<T>`: an [`ObjectStore`] wrapper that injects faults, for tests
//! (feature `test-util`).
//!
//! Faults are scripted per operation kind: added latency (on a [`MockClock`], so a "slow request"
//! is deterministic), errors *before* the inner call, errors *after* the inner call succeeded
//! (the write landed, the caller saw a failure), and partitions (every call fails until healed).
//! Every method is forwarded.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

use crate::clock::MockClock;

/// The kinds of request a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put_opts` (every put mode).
    Put,
    /// `get_opts` without `head`.
    Get,
    /// `get_opts` with `head` set.
    Head,
    /// Each path of `delete_stream`.
    Delete,
    /// `list`, `list_with_offset`, `list_with_delimiter`.
    List,
    /// `copy_opts`, `rename_opts`.
    Copy,
}

/// When an injected error strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// Fail without calling the inner store.
    Before,
    /// Call the inner store; if it succeeded, report a failure anyway.
    After,
}

#[derive(Debug, Default)]
struct Script {
    latency: HashMap<Op, Duration>,
    failures: HashMap<Op, Vec<Strike>>,
    partitioned: bool,
    ignore_conditions: bool,
    calls: HashMap<Op, u64>,
}

/// The fault-injecting wrapper.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use banklease::failing::{FailingStore, Op, Strike};
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
pub struct FailingStore<T> {
    inner: Arc<T>,
    script: Arc<Mutex<Script>>,
    clock: Option<MockClock>,
}

// Manual: a derive would demand `T: Clone`.
impl<T> Clone for FailingStore<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            script: Arc::clone(&self.script),
            clock: self.clock.clone(),
        }
    }
}

impl<T: ObjectStore> FailingStore<T> {
    /// Wrap `inner` with no faults scripted.
    pub fn new(inner: T) -> Self {
        Self {
            inner: Arc::new(inner),
            script: Arc::default(),
            clock: None,
        }
    }

    /// Latency advances this mock clock instead of sleeping.
    pub fn with_clock(mut self, clock: MockClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Every `op` request takes `latency` (advanced on the mock clock before the inner call).
    pub fn set_latency(&self, op: Op, latency: Duration) {
        self.script().latency.insert(op, latency);
    }

    /// The next `count` `op` requests fail, at `strike`.
    pub fn fail_next(&self, op: Op, strike: Strike, count: usize) {
        self.script()
            .failures
            .entry(op)
            .or_default()
            .extend(std::iter::repeat_n(strike, count));
    }

    /// While partitioned, every request fails before reaching the inner store.
    pub fn set_partitioned(&self, partitioned: bool) {
        self.script().partitioned = partitioned;
    }

    /// Turn every conditional put (create-if-absent, update-if-match) into a plain overwrite
    /// that reports success: a store that silently ignores conditions.
    pub fn set_ignore_conditions(&self, ignore: bool) {
        self.script().ignore_conditions = ignore;
    }

    /// How many `op` requests were made (including failed ones).
    pub fn calls(&self, op: Op) -> u64 {
        self.script().calls.get(&op).copied().unwrap_or(0)
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("fault script poisoned")
    }

    /// Count the call, apply latency, and decide its fate.
    async fn enter(&self, op: Op) -> Result<Option<Strike>> {
        let (latency, strike, partitioned) = {
            let mut s = self.script();
            *s.calls.entry(op).or_default() += 1;
            let strike = s
                .failures
                .get_mut(&op)
                .and_then(|v| (!v.is_empty()).then(|| v.remove(0)));
            (s.latency.get(&op).copied(), strike, s.partitioned)
        };
        if let (Some(latency), Some(clock)) = (latency, &self.clock) {
            clock.advance(latency);
        }
        if partitioned || strike == Some(Strike::Before) {
            return Err(injected(op, "before"));
        }
        Ok(strike)
    }

    async fn run<R>(
        &self,
        op: Op,
        call: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        let strike = self.enter(op).await?;
        let result = call.await;
        match (result, strike) {
            (Ok(_), Some(Strike::After)) => Err(injected(op, "after the inner call succeeded")),
            (r, _) => r,
        }
    }
}

fn injected(op: Op, when: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FailingStore",
        source: format!("injected fault: op={op:?} {when}").into(),
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
        if self.script().ignore_conditions {
            opts.mode = object_store::PutMode::Overwrite;
        }
        self.run(Op::Put, self.inner.put_opts(location, payload, opts))
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
                    let inner = this.inner.clone();
                    let loc = location.clone();
                    this.run(Op::Delete, async move {
                        let mut s = inner.delete_stream(futures::stream::iter([Ok(loc)]).boxed());
                        match s.next().await {
                            Some(r) => r.map(|_| ()),
                            None => Ok(()),
                        }
                    })
                    .await
                    .map(|_| location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_faulty(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_faulty(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.run(Op::List, self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.run(Op::Copy, self.inner.copy_opts(from, to, options))
            .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.run(Op::Copy, self.inner.rename_opts(from, to, options))
            .await
    }
}

impl<T: ObjectStore> FailingStore<T> {
    fn list_faulty(
        &self,
        inner: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let this = self.clone();
        futures::stream::once(async move {
            match this.enter(Op::List).await {
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
                // A listing struck "after" fails once its first entry has been seen.
                Ok(Some(Strike::After)) => inner
                    .take(1)
                    .chain(futures::stream::iter([Err(injected(
                        Op::List,
                        "after the first entry",
                    ))]))
                    .boxed(),
                Ok(_) => inner,
            }
        })
        .flatten()
        .boxed()
    }
}
