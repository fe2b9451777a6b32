//! `Port<S, H>`: one participant's connection to a store, for a harness that pauses, suspends,
//! cuts off or kills participants (the GC simulation's owners and collectors). Every request is
//! passed through the participant's [`PortHooks`] before it is sent (a pause, a refusal: the
//! participant is dead or cut off) and after its answer arrived, before the caller sees it (a
//! pause there is a late answer); the hooks may also shape what the participant is answered
//! (a lagging replica). The store itself is `S`, shared by every participant's port.

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt as _;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

/// What a harness does around each request of one participant.
pub trait PortHooks: Send + Sync + fmt::Debug + 'static {
    /// The participant's name, for the trace.
    fn name(&self) -> &str;
    /// The harness's time, for the trace.
    fn now(&self) -> Duration;
    /// Before a request on `path` is sent: wait out a pause, or refuse (the participant crashed
    /// or is cut off). Returns the request's number.
    fn before(&self, path: &Path) -> impl Future<Output = object_store::Result<u32>> + Send;
    /// After request `n`'s answer arrived, before the participant sees it.
    fn after(&self, n: u32, path: &Path) -> impl Future<Output = ()> + Send;
    /// Serve `call` on the participant's behalf (the store may ask who is calling).
    fn serve<R: Send>(
        &self,
        call: impl Future<Output = R> + Send,
    ) -> impl Future<Output = R> + Send;
    /// Just before a PUT of `location` is served.
    fn before_put(&self, _location: &Path) {}
    /// The answer to a GET (or HEAD) of `location`, as the participant will receive it.
    fn answer_get(&self, _location: &Path, _answer: &mut object_store::Result<GetResult>) {}
    /// Trace an answer to a request sent at `sent`.
    fn note(&self, op: &str, path: &Path, sent: Duration, what: &dyn fmt::Display);
    /// The error of a request that got no answer, saying why.
    fn gone(&self, why: &str) -> object_store::Error;
}

/// A short description of an answer, for the trace.
fn answer<T>(r: &object_store::Result<T>, detail: impl Fn(&T) -> String) -> String {
    match r {
        Ok(v) => detail(v),
        Err(object_store::Error::NotFound { .. }) => "not found".to_owned(),
        Err(object_store::Error::AlreadyExists { .. }) => "already exists".to_owned(),
        Err(object_store::Error::Precondition { .. }) => "precondition failed".to_owned(),
        Err(e) => format!(
            "error ({})",
            e.to_string().chars().take(60).collect::<String>()
        ),
    }
}

/// One participant's connection to `inner`: every request goes through `hooks` before it is sent
/// and after its answer arrived, and is served on the participant's behalf.
#[derive(Debug)]
pub struct Port<S, H> {
    inner: S,
    hooks: Arc<H>,
}

impl<S, H> Port<S, H> {
    /// A port to `inner` for the participant `hooks` stands for.
    pub fn new(inner: S, hooks: Arc<H>) -> Self {
        Self { inner, hooks }
    }
}

impl<S: fmt::Display, H: PortHooks> fmt::Display for Port<S, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Port({}, {})", self.hooks.name(), self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: ObjectStore + Clone, H: PortHooks> ObjectStore for Port<S, H> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let sent = self.hooks.now();
        let n = self.hooks.before(location).await?;
        self.hooks.before_put(location);
        let mode = format!("PUT({:?})", opts.mode);
        let r = self
            .hooks
            .serve(self.inner.put_opts(location, payload, opts))
            .await;
        self.hooks.after(n, location).await;
        self.hooks.note(
            &mode,
            location,
            sent,
            &answer(&r, |p| format!("ok {:?}", p.e_tag)),
        );
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let n = self.hooks.before(location).await?;
        let r = self.inner.put_multipart_opts(location, opts).await;
        self.hooks.after(n, location).await;
        r
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let sent = self.hooks.now();
        let n = self.hooks.before(location).await?;
        let op = if options.head { "HEAD" } else { "GET" };
        let mut r = self.inner.get_opts(location, options).await;
        self.hooks.answer_get(location, &mut r);
        self.hooks.after(n, location).await;
        self.hooks.note(
            op,
            location,
            sent,
            &answer(&r, |g| {
                format!(
                    "last_modified={} e_tag={:?}",
                    g.meta.last_modified.format("%H:%M:%S%.3f"),
                    g.meta.e_tag
                )
            }),
        );
        r
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        let n = self.hooks.before(location).await?;
        let r = self.inner.get_ranges(location, ranges).await;
        self.hooks.after(n, location).await;
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = self.inner.clone();
        let hooks = self.hooks.clone();
        locations
            .then(move |location| {
                let inner = inner.clone();
                let hooks = hooks.clone();
                async move {
                    let location = location?;
                    let sent = hooks.now();
                    let n = hooks.before(&location).await?;
                    let r = hooks
                        .serve(
                            inner
                                .delete_stream(
                                    futures::stream::iter([Ok(location.clone())]).boxed(),
                                )
                                .next(),
                        )
                        .await
                        .unwrap_or_else(|| Err(hooks.gone("no answer")));
                    hooks.after(n, &location).await;
                    hooks.note("DELETE", &location, sent, &answer(&r, |_| "ok".to_owned()));
                    r
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let hooks = self.hooks.clone();
        let prefix = prefix.cloned();
        futures::stream::once(async move {
            let at = prefix.clone().unwrap_or_default();
            match hooks.before(&at).await {
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
                Ok(n) => {
                    let items: Vec<_> = inner.list(prefix.as_ref()).collect().await;
                    hooks.after(n, &at).await;
                    futures::stream::iter(items).boxed()
                }
            }
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let hooks = self.hooks.clone();
        let prefix = prefix.cloned();
        let offset = offset.clone();
        futures::stream::once(async move {
            let at = prefix.clone().unwrap_or_default();
            match hooks.before(&at).await {
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
                Ok(n) => {
                    let items: Vec<_> = inner
                        .list_with_offset(prefix.as_ref(), &offset)
                        .collect()
                        .await;
                    hooks.after(n, &at).await;
                    futures::stream::iter(items).boxed()
                }
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let at = prefix.cloned().unwrap_or_default();
        let n = self.hooks.before(&at).await?;
        let r = self.inner.list_with_delimiter(prefix).await;
        self.hooks.after(n, &at).await;
        r
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.hooks.before(from).await?;
        let n = self.hooks.before(to).await?;
        let r = self
            .hooks
            .serve(self.inner.copy_opts(from, to, options))
            .await;
        self.hooks.after(n, to).await;
        r
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.hooks.before(from).await?;
        let n = self.hooks.before(to).await?;
        let r = self
            .hooks
            .serve(self.inner.rename_opts(from, to, options))
            .await;
        self.hooks.after(n, to).await;
        r
    }
}
