//! `GateStore<T>`: forwards every call to `inner`, except that the answer to one chosen GET can
//! be held back *after the store served it* — the read describes the store at the instant it was
//! served, but its caller only sees it when the test lets it through. This is the "answer
//! delivered late" fault (a collector paused after its read landed, a slow network, a swapped-out
//! process): whatever the caller does with the answer must be judged at the instant the request
//! was sent, not when the answer arrived. [`GateStore::gate_listings`] holds listings instead, at
//! their start, so that a test can hold a pass in flight.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt as _};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use tokio::sync::oneshot;

/// The test's end of a held read.
#[derive(Debug)]
pub struct Held {
    /// Fires once the store has served the read (its answer is now waiting).
    pub served: oneshot::Receiver<()>,
    /// Send to deliver the answer.
    pub release: oneshot::Sender<()>,
}

struct Hold {
    suffix: String,
    /// A create-if-absent as Swift makes it: the check, then (after the release) the write.
    split_create: bool,
    skip: usize,
    /// Answer NotFound instead of serving the read (a lagging replica's false 404).
    not_found: bool,
    /// Hold a GET only, letting HEADs through.
    gets_only: bool,
    served: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// A new hold on `suffix` (after `skip` matching calls) in `holds`, and the test's end of it.
fn push_hold(holds: &Mutex<Vec<Hold>>, suffix: &str, skip: usize) -> Held {
    let (served_tx, served_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    holds.lock().unwrap().push(Hold {
        suffix: suffix.to_owned(),
        split_create: false,
        skip,
        not_found: false,
        gets_only: false,
        served: served_tx,
        release: release_rx,
    });
    Held {
        served: served_rx,
        release: release_tx,
    }
}

/// A store whose next GET of a path ending in a given suffix is answered late (and, with
/// [`GateStore::hold_next_write`], whose next PUT of a path ending in a suffix lands and is
/// answered late).
#[derive(Clone)]
pub struct GateStore<T> {
    inner: T,
    holds: Arc<Mutex<Vec<Hold>>>,
    write_holds: Arc<Mutex<Vec<Hold>>>,
    listings: Arc<Mutex<Option<ListGate>>>,
}

/// The test's end of gated listings ([`GateStore::gate_listings`]).
#[derive(Debug, Clone)]
pub struct ListGate {
    /// Notified as each listing reaches the gate.
    pub entered: Arc<tokio::sync::Notify>,
    /// Each permit added lets one listing through.
    pub gate: Arc<tokio::sync::Semaphore>,
}

impl<T> fmt::Debug for GateStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GateStore")
    }
}

impl<T> fmt::Display for GateStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GateStore")
    }
}

impl<T: ObjectStore> GateStore<T> {
    /// A gate in front of `inner`, holding nothing yet.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            holds: Arc::new(Mutex::new(Vec::new())),
            write_holds: Arc::new(Mutex::new(Vec::new())),
            listings: Arc::new(Mutex::new(None)),
        }
    }

    /// From now on, every listing waits at a gate when it starts: it notifies `entered`, then
    /// takes one permit of `gate` (none at first; the gate is never closed).
    pub fn gate_listings(&self) -> ListGate {
        let gate = ListGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.listings.lock().unwrap() = Some(gate.clone());
        gate
    }

    /// Hold the answer of the next PUT whose path ends with `suffix`: it lands in the inner
    /// store, then `served` fires and the caller waits for `release`.
    pub fn hold_next_write(&self, suffix: &str) -> Held {
        push_hold(&self.write_holds, suffix, 0)
    }

    /// Split the next create-if-absent PUT of a path ending in `suffix` as Swift's is split:
    /// the check that nothing is there is made, `served` fires, and only after `release` is the
    /// object written, over whatever another create wrote meanwhile (a store whose
    /// create-if-absent is not atomic: the hold is how long the two steps are apart, up to the
    /// writer's retry budget when its client sends the write again).
    pub fn split_next_create(&self, suffix: &str) -> Held {
        let held = push_hold(&self.write_holds, suffix, 0);
        self.write_holds
            .lock()
            .unwrap()
            .last_mut()
            .unwrap()
            .split_create = true;
        held
    }

    /// Hold the answer of the next GET (or HEAD) whose path ends with `suffix`.
    pub fn hold_next_read(&self, suffix: &str) -> Held {
        self.hold_read(suffix, 0)
    }

    /// Hold the answer of the GET (or HEAD) whose path ends with `suffix` after letting `skip`
    /// such reads through.
    pub fn hold_read(&self, suffix: &str, skip: usize) -> Held {
        push_hold(&self.holds, suffix, skip)
    }

    /// Answer the next GET (or HEAD) whose path ends with `suffix` with NotFound, as a replica
    /// that missed the object would; the returned handle works as for a held read.
    pub fn not_found_next(&self, suffix: &str) -> Held {
        let held = self.hold_read(suffix, 0);
        self.holds.lock().unwrap().last_mut().unwrap().not_found = true;
        held
    }

    /// [`hold_read`](Self::hold_read) of GETs only: HEADs of the path go through uncounted.
    pub fn hold_get(&self, suffix: &str, skip: usize) -> Held {
        let held = self.hold_read(suffix, skip);
        self.holds.lock().unwrap().last_mut().unwrap().gets_only = true;
        held
    }

    fn take_hold(&self, location: &Path, head: bool) -> Option<Hold> {
        let mut holds = self.holds.lock().unwrap();
        let i = holds
            .iter()
            .position(|h| location.as_ref().contains(&h.suffix) && !(head && h.gets_only))?;
        if holds[i].skip > 0 {
            holds[i].skip -= 1;
            return None;
        }
        Some(holds.remove(i))
    }
}

#[async_trait]
impl<T: ObjectStore> ObjectStore for GateStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let hold = {
            let mut holds = self.write_holds.lock().unwrap();
            let i = holds
                .iter()
                .position(|h| location.as_ref().ends_with(&h.suffix));
            i.map(|i| holds.remove(i))
        };
        let hold = match hold {
            Some(hold)
                if hold.split_create && matches!(opts.mode, object_store::PutMode::Create) =>
            {
                // The check, then the write after the release: another create may land between.
                match self.inner.head(location).await {
                    Ok(_) => {
                        let _ = hold.served.send(());
                        let _ = hold.release.await;
                        return Err(object_store::Error::AlreadyExists {
                            path: location.to_string(),
                            source: "gate: split create found the object".into(),
                        });
                    }
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
                let _ = hold.served.send(());
                let _ = hold.release.await;
                let mut opts = opts;
                opts.mode = object_store::PutMode::Overwrite;
                return self.inner.put_opts(location, payload, opts).await;
            }
            other => other,
        };
        let result = self.inner.put_opts(location, payload, opts).await;
        if let Some(hold) = hold {
            let _ = hold.served.send(());
            let _ = hold.release.await;
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let hold = self.take_hold(location, options.head);
        let result = match &hold {
            Some(h) if h.not_found => Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: "gate: a replica without the object".into(),
            }),
            _ => self.inner.get_opts(location, options).await,
        };
        if let Some(hold) = hold {
            let _ = hold.served.send(());
            let _ = hold.release.await;
        }
        result
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> Result<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let inner = self.inner.list(prefix);
        let Some(ListGate { entered, gate }) = self.listings.lock().unwrap().clone() else {
            return inner;
        };
        futures::stream::once(async move {
            entered.notify_one();
            gate.acquire().await.expect("gate open").forget();
            inner
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
