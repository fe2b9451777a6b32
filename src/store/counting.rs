//! `CountingStore<T>`: an [`ObjectStore`] wrapper that counts requests by kind, for GC reports,
//! metrics and benchmarks. Every method is forwarded.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// Request counters, shared by all clones of a [`CountingStore`].
#[derive(Debug, Default)]
pub struct Counters {
    put: AtomicU64,
    get: AtomicU64,
    head: AtomicU64,
    delete: AtomicU64,
    list: AtomicU64,
    copy: AtomicU64,
}

impl Counters {
    /// Counts by kind: `put`, `get`, `head`, `delete`, `list` (one per listing call, not per
    /// page), `copy`. Kinds never used are left out.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        [
            ("put", &self.put),
            ("get", &self.get),
            ("head", &self.head),
            ("delete", &self.delete),
            ("list", &self.list),
            ("copy", &self.copy),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.load(Ordering::Relaxed)))
        .filter(|(_, v)| *v > 0)
        .collect()
    }

    /// Total requests.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
}

/// The counting wrapper.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use banklease::store::CountingStore;
/// use object_store::{memory::InMemory, path::Path, ObjectStoreExt, PutPayload};
///
/// let store = CountingStore::new(InMemory::new());
/// store.put(&Path::from("a"), PutPayload::from_static(b"x")).await.unwrap();
/// store.head(&Path::from("a")).await.unwrap();
/// assert_eq!(store.counters().snapshot()["put"], 1);
/// assert_eq!(store.counters().snapshot()["head"], 1);
/// # }
/// ```
pub struct CountingStore<T> {
    inner: T,
    counters: Arc<Counters>,
}

impl<T: ObjectStore> CountingStore<T> {
    /// Wrap `inner`.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            counters: Arc::default(),
        }
    }

    /// The counters (shared; keep a clone to read them after the store is moved).
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    fn bump(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl<T: ObjectStore> fmt::Debug for CountingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

impl<T: ObjectStore> fmt::Display for CountingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for CountingStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.bump(&self.counters.put);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.bump(&self.counters.put);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head {
            self.bump(&self.counters.head);
        } else {
            self.bump(&self.counters.get);
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.bump(&self.counters.get);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counters = Arc::clone(&self.counters);
        let counted = locations
            .inspect(move |_| {
                counters.delete.fetch_add(1, Ordering::Relaxed);
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.bump(&self.counters.list);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.bump(&self.counters.list);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.bump(&self.counters.list);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.bump(&self.counters.copy);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.bump(&self.counters.copy);
        self.inner.rename_opts(from, to, options).await
    }
}
