//! A native OpenStack Swift backend: [`SwiftStore`] implements [`ObjectStore`] over Swift's
//! HTTP API (object_store 0.14 has no Swift backend, and its `HttpStore` cannot list Swift).
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> object_store::Result<()> {
//! use banklease::store::SwiftBuilder;
//! use object_store::{path::Path, ObjectStore, PutMode, PutPayload};
//!
//! // ST_AUTH=http://127.0.0.1:8080/auth/v1.0 ST_USER=test:tester ST_KEY=testing
//! let store = SwiftBuilder::from_env().with_container("bank").build()?;
//! let path = Path::from("leases/owner-1");
//! store.put_opts(&path, PutPayload::from_static(b"{}"), PutMode::Create.into()).await?;
//!
//! // Swift-specific: an object that Swift stops serving after 30 s, and its expiry.
//! store.put_with_delete_after(&Path::from("tmp/x"), "x".into(), 30, false).await?;
//! let head = store.head_swift(&Path::from("tmp/x")).await?;
//! println!("expires at {:?}, server time {:?}", head.delete_at, head.date);
//! # Ok(()) }
//! ```
//!
//! ## What Swift enforces (measured on Swift 2.30 and 2.38; see `shared/stores/FACTS.md`)
//!
//! | object_store                    | Swift request                             | notes |
//! |---------------------------------|-------------------------------------------|-------|
//! | `PutMode::Overwrite`            | `PUT`                                     | |
//! | `PutMode::Create`               | `PUT` + `If-None-Match: *` (412 → `AlreadyExists`) | **not atomic**: racing creators can both win |
//! | `PutMode::Update`               | —                                         | `NotImplemented`: Swift **ignores** `If-Match` on PUT |
//! | `get_opts`, `head`              | `GET`/`HEAD` + `X-Newest: true`, `Range`, `If-*` | newest replica by data file (see below); dates rounded up to seconds |
//! | `delete`                        | `DELETE` (404 → `NotFound`)               | |
//! | `list`, `list_with_offset`      | `GET ?format=json&prefix=p/&marker=`      | paged by `limit` |
//! | `list_with_delimiter`           | the same + `delimiter=/`                  | |
//! | `copy` (overwrite)              | `PUT` + `X-Copy-From` (server-side)       | |
//! | `copy_if_not_exists`            | `GET` source, `PUT` + `If-None-Match: *`  | client-side: Swift applies conditions of a copy to the *source* |
//! | multipart                       | segment `PUT`s, then `PUT ?multipart-manifest=put` (SLO) | segments under `<key>.segments/`; needs `slo` in GET /info |
//!
//! `last_modified` is the object's `X-Timestamp` (the proxy's clock when the write arrived,
//! 10 µs) from GET/HEAD and listings, falling back to `Last-Modified` (1 s, the timestamp
//! rounded **up**). Conditional dates sent to Swift are rounded up to the second to match.
//!
//! **Reads ask for the newest replica.** Every object GET and HEAD this store sends
//! (`get_opts`, `head`, [`SwiftStore::head_swift`], the source read of `copy_if_not_exists`)
//! carries `X-Newest: true`. With more than one replica, a Swift proxy answers a read from the
//! first object server that has the object, and that server may have missed the latest writes:
//! it was down, or the proxy had error-limited it, when they were sent, and until a replicator
//! runs it serves its old copy — an `index.json` still `protecting`, a marker or data object
//! that was deleted, a lease's old `last_modified` — and an observer or the GC acts on it. With
//! `X-Newest` the proxy asks every replica and answers with the newest, at the price of one
//! object-server request per replica (one hung object server delays a read by the proxy's
//! `node_timeout`; one that refuses connections costs nothing). On a 1-replica ring it changes
//! nothing.
//!
//! **What `X-Newest` does not cover: changes made by POST alone.** The proxy ranks replicas by
//! the timestamp of their *data file* (`X-Backend-Data-Timestamp`, the last PUT), not by the
//! metadata's `X-Timestamp`; replicas that differ only by POSTs tie, and the proxy answers from
//! any of them (read in Swift 2.30's and 2.38's `proxy/controllers/base.py`, and measured). A
//! lease renewed by [`SwiftStore::post_metadata`] would keep its data file, and a replica that
//! missed renewals was served to a third or more of the reads, `X-Newest` or not; that is why
//! Swift leases are renewed by a PUT, which writes a new data file that `X-Newest` ranks.
//! PUTs and DELETEs (checkpoints, markers, decisions, data) are covered: a deletion's
//! tombstone outranks an older copy. `gc/tests/swift_replicas.rs` shows both on a 3-replica
//! Swift with a stale object server; `every_object_get_and_head_asks_for_the_newest_replica`
//! that the header is sent. Listings come from the container servers and are not affected.
//!
//! Expiry (`X-Delete-After`/`X-Delete-At`) makes GET/HEAD answer 404 from the deadline on, but a
//! container listing keeps showing the object until Swift's expirer has run.
//!
//! **API boundary:** everything Swift-specific ([`SwiftStore::put_with_delete_after`],
//! [`SwiftStore::post_metadata`], [`SwiftStore::head_swift`], ...) is on [`SwiftStore`], not on
//! the trait, so wrappers (`FailingStore`, `PrefixStore`) see only standard operations.
//!
//! Just over 600 lines, on purpose: the `ObjectStore` implementation forwards every method in
//! one place (the house style of object_store's backends), and the Swift-only calls sit beside
//! the requests they share; the protocol's parts are their own files (`auth`, `client`,
//! `headers`, `list`, `bulk`, `slo`).

mod auth;
mod builder;
mod bulk;
mod client;
pub(crate) mod clouds;
mod error;
mod headers;
mod list;
mod slo;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use http::header::{
    CONTENT_LENGTH, CONTENT_TYPE, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_UNMODIFIED_SINCE,
    RANGE,
};
use http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode};
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    Result,
};

pub use builder::{SwiftBuilder, SwiftConfigKey, DEFAULT_LIST_LIMIT};

use client::{Request, SwiftClient, Target};
use error::Error;
use error::STORE;
use headers::{X_COPY_FROM, X_DELETE_AFTER, X_DELETE_AT, X_TIMESTAMP};

/// An [`ObjectStore`] on one Swift container. Cheap to clone.
///
/// Prints as `SwiftStore(container)`; `Debug` shows configuration with every secret as `***`.
#[derive(Debug, Clone)]
pub struct SwiftStore {
    client: Arc<SwiftClient>,
}

impl fmt::Display for SwiftStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SwiftStore({})", self.client.container)
    }
}

/// What Swift answered to a write (PUT or POST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwiftWrite {
    /// `ETag` (the MD5 of the body; a POST keeps the object's).
    pub e_tag: Option<String>,
    /// `Last-Modified`: the write's `X-Timestamp` rounded **up** to the second.
    pub last_modified: Option<DateTime<Utc>>,
    /// The server's `Date` when it answered.
    pub date: Option<DateTime<Utc>>,
}

impl SwiftWrite {
    fn from_headers(headers: &HeaderMap) -> Self {
        Self {
            e_tag: headers::get_str(headers, &http::header::ETAG).map(str::to_owned),
            last_modified: headers::last_modified(headers),
            date: headers::date(headers),
        }
    }
}

/// An object's metadata as Swift reports it on HEAD, including what the trait cannot carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwiftHead {
    /// The standard metadata (`last_modified` is `x_timestamp` when present).
    pub meta: ObjectMeta,
    /// `Last-Modified`: whole seconds, the X-Timestamp rounded up (so it can be ahead of `date`).
    pub last_modified: Option<DateTime<Utc>>,
    /// `X-Timestamp`: the proxy's clock when the last PUT/POST arrived (10 µs).
    pub x_timestamp: Option<DateTime<Utc>>,
    /// `X-Delete-At`: when Swift stops serving the object (whole seconds), if set.
    pub delete_at: Option<DateTime<Utc>>,
    /// The server's `Date` when it answered.
    pub date: Option<DateTime<Utc>>,
    /// `X-Object-Meta-*`, lowercase names without the prefix.
    pub user_metadata: BTreeMap<String, String>,
}

impl SwiftStore {
    fn not_implemented(&self, operation: &str) -> object_store::Error {
        object_store::Error::NotImplemented {
            operation: operation.to_owned(),
            implementer: self.to_string(),
        }
    }

    /// The container every path lives in.
    pub fn container(&self) -> &str {
        &self.client.container
    }

    /// How many times this store has authenticated (0 before the first request, or while a
    /// pre-authenticated token is accepted).
    pub fn authentications(&self) -> u64 {
        self.client.authentications.load(Ordering::SeqCst)
    }

    /// Requests this store has sent and not yet heard back from (or given up on), its
    /// authentications included: a caller driving a mock clock waits for none before moving
    /// it, so that a real server's latency does not pass as mock time.
    pub fn in_flight(&self) -> usize {
        self.client.in_flight.load(Ordering::SeqCst)
    }

    /// The storage URL (`.../v1/AUTH_account`), authenticating if needed. Holds no secret.
    pub async fn storage_url(&self) -> Result<String> {
        Ok(self.client.session().await?.storage_url.to_string())
    }

    /// Create the container (PUT; Ok if it exists already): `true` when this request created
    /// it (201), `false` when it was there (202 or 204).
    pub async fn create_container(&self) -> Result<bool> {
        let req = Request::new(Method::PUT, Target::Container)
            .header(CONTENT_LENGTH, HeaderValue::from_static("0"));
        let response = self.client.send(&req).await?;
        match response.status() {
            StatusCode::CREATED => Ok(true),
            StatusCode::ACCEPTED | StatusCode::NO_CONTENT => Ok(false),
            _ => Err(self
                .client
                .status_error(&req.method, "", response)
                .await
                .into()),
        }
    }

    /// Delete the container, which must be empty (404 → `NotFound`; 409 when not empty).
    pub async fn delete_container(&self) -> Result<()> {
        let req = Request::new(Method::DELETE, Target::Container);
        let response = self.client.send(&req).await?;
        match response.status() {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(()),
            _ => Err(self
                .client
                .status_error(&req.method, "", response)
                .await
                .into()),
        }
    }

    /// The server's clock: the `Date` of a HEAD on the container (whole seconds).
    pub async fn server_date(&self) -> Result<DateTime<Utc>> {
        let req = Request::new(Method::HEAD, Target::Container);
        let response = self.client.send(&req).await?;
        match response.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                return Err(Error::ContainerNotFound {
                    container: self.client.container.clone(),
                    method: req.method,
                }
                .into())
            }
            _ => {
                return Err(self
                    .client
                    .status_error(&req.method, "", response)
                    .await
                    .into())
            }
        }
        headers::date(response.headers()).ok_or_else(|| {
            Error::InvalidHeader {
                method: Method::HEAD,
                path: String::new(),
                name: "Date",
                reason: "missing or unparseable".into(),
            }
            .into()
        })
    }

    /// PUT with extra headers (user metadata, `X-Delete-At`, conditions ...), as sent.
    ///
    /// A 412 answers `AlreadyExists` when the headers hold `If-None-Match`, else `Precondition`.
    /// Note that Swift **ignores** `If-Match` on PUT: the object is overwritten regardless.
    pub async fn put_with_headers(
        &self,
        location: &Path,
        payload: PutPayload,
        headers: HeaderMap,
    ) -> Result<SwiftWrite> {
        Ok(self.put_raw(location, payload, headers).await?.0)
    }

    /// PUT an object that Swift stops serving `delete_after_secs` (≥ 1) seconds from now
    /// (`X-Delete-After`); `create` adds `If-None-Match: *` (412 → `AlreadyExists`).
    ///
    /// Swift stores the deadline as whole epoch seconds (`X-Delete-At`), so the object lives
    /// somewhere in `(secs − 1, secs]`. From then GET/HEAD answer 404, but listings keep showing
    /// it until the expirer reaps it.
    pub async fn put_with_delete_after(
        &self,
        location: &Path,
        payload: PutPayload,
        delete_after_secs: u64,
        create: bool,
    ) -> Result<SwiftWrite> {
        if delete_after_secs == 0 {
            return Err(Error::InvalidArgument {
                reason:
                    "delete_after_secs must be at least 1 (Swift refuses a deadline in the past)"
                        .into(),
            }
            .into());
        }
        let mut headers = HeaderMap::new();
        headers.insert(X_DELETE_AFTER, HeaderValue::from(delete_after_secs));
        if create {
            headers.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
        }
        self.put_with_headers(location, payload, headers).await
    }

    /// PUT an object that Swift stops serving at `delete_at` (epoch seconds, `X-Delete-At`,
    /// which must be in the future on the server's clock).
    pub async fn put_with_delete_at(
        &self,
        location: &Path,
        payload: PutPayload,
        delete_at: u64,
    ) -> Result<SwiftWrite> {
        let mut headers = HeaderMap::new();
        headers.insert(X_DELETE_AT, HeaderValue::from(delete_at));
        self.put_with_headers(location, payload, headers).await
    }

    /// POST `headers` to an existing object (404 → `NotFound`): typically `X-Object-Meta-*`
    /// and `X-Delete-After`/`X-Delete-At`.
    ///
    /// A POST **replaces all user metadata** (send every `X-Object-Meta-*` again), removes an
    /// `X-Delete-At` that is not sent again, and changes `X-Timestamp`/`Last-Modified` but not
    /// the ETag. Conditions (`If-Match`) on POST are ignored by Swift.
    ///
    /// With several replicas, a change made by POST alone is **not** what `X-Newest` reads
    /// rank: a replica that missed the POST can still be served (see the module documentation).
    pub async fn post_metadata(&self, location: &Path, headers: HeaderMap) -> Result<SwiftWrite> {
        let req = Request::new(Method::POST, Target::Object(location))
            .headers(headers)
            .header(CONTENT_LENGTH, HeaderValue::from_static("0"));
        let response = self.client.send(&req).await?;
        match response.status() {
            s if s.is_success() => Ok(SwiftWrite::from_headers(response.headers())),
            _ => Err(self
                .client
                .status_error(&req.method, location.as_ref(), response)
                .await
                .into()),
        }
    }

    /// HEAD with everything Swift says about the object (404 → `NotFound`).
    pub async fn head_swift(&self, location: &Path) -> Result<SwiftHead> {
        let req = Request::new(Method::HEAD, Target::Object(location));
        let response = self.client.send(&req).await?;
        if !response.status().is_success() {
            return Err(self
                .client
                .status_error(&req.method, location.as_ref(), response)
                .await
                .into());
        }
        let h = response.headers();
        let answer = headers::answer(location, &req.method, response.status(), h, None)?;
        Ok(SwiftHead {
            meta: answer.meta,
            last_modified: headers::last_modified(h),
            x_timestamp: headers::get_str(h, &X_TIMESTAMP).and_then(headers::parse_timestamp),
            delete_at: headers::get_str(h, &X_DELETE_AT).and_then(headers::parse_timestamp),
            date: headers::date(h),
            user_metadata: headers::user_metadata(h).into_iter().collect(),
        })
    }

    async fn put_raw(
        &self,
        location: &Path,
        payload: PutPayload,
        mut headers: HeaderMap,
    ) -> Result<(SwiftWrite, Extensions)> {
        let create = headers.contains_key(IF_NONE_MATCH);
        if !headers.contains_key(CONTENT_TYPE) {
            if let Some(v) = self.client.client_options.get_content_type(location) {
                if let Ok(v) = HeaderValue::from_str(v) {
                    headers.insert(CONTENT_TYPE, v);
                }
            }
        }
        headers.insert(CONTENT_LENGTH, HeaderValue::from(payload.content_length()));
        let req = Request::new(Method::PUT, Target::Object(location))
            .headers(headers)
            .body(payload);
        let response = self.client.send(&req).await?;
        match response.status() {
            s if s.is_success() => {
                let (parts, _) = response.into_parts();
                Ok((SwiftWrite::from_headers(&parts.headers), parts.extensions))
            }
            StatusCode::NOT_FOUND => Err(Error::ContainerNotFound {
                container: self.client.container.clone(),
                method: Method::PUT,
            }
            .into()),
            StatusCode::PRECONDITION_FAILED if create => {
                let source = self
                    .client
                    .status_error(&req.method, location.as_ref(), response)
                    .await;
                Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: Box::new(source),
                })
            }
            _ => Err(self
                .client
                .status_error(&req.method, location.as_ref(), response)
                .await
                .into()),
        }
    }

    async fn delete_one(client: &SwiftClient, location: &Path) -> Result<()> {
        let req = Request::new(Method::DELETE, Target::Object(location));
        let response = client.send(&req).await?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(client
            .status_error(&req.method, location.as_ref(), response)
            .await
            .into())
    }

    /// Server-side copy: `PUT to` with `X-Copy-From: /container/from`.
    async fn copy_server_side(&self, from: &Path, to: &Path) -> Result<()> {
        let source = HeaderValue::from_str(&self.client.copy_source(from)).map_err(|_| {
            Error::InvalidArgument {
                reason: format!("path `{from}` cannot be a copy source"),
            }
        })?;
        let req = Request::new(Method::PUT, Target::Object(to))
            .header(X_COPY_FROM, source)
            .header(CONTENT_LENGTH, HeaderValue::from_static("0"));
        let response = self.client.send(&req).await?;
        if response.status().is_success() {
            return Ok(());
        }
        // 404: the source is missing (or the container).
        Err(self
            .client
            .status_error(&req.method, from.as_ref(), response)
            .await
            .into())
    }

    /// Copy-if-absent, client-side: Swift's copy middleware evaluates a copy's conditional
    /// headers against the *source* (`If-None-Match: *` on a copy answers 304 and copies
    /// nothing), so the bytes are read and written back with `If-None-Match: *`.
    async fn copy_create(&self, from: &Path, to: &Path) -> Result<()> {
        let req = Request::new(Method::GET, Target::Object(from));
        let response = self.client.send(&req).await?;
        if !response.status().is_success() {
            return Err(self
                .client
                .status_error(&req.method, from.as_ref(), response)
                .await
                .into());
        }
        let (parts, body) = response.into_parts();
        if parts.headers.contains_key("x-static-large-object")
            || parts.headers.contains_key("x-object-manifest")
        {
            return Err(self.not_implemented("`copy_if_not_exists` of a large (SLO/DLO) object"));
        }
        let mut headers = headers::copied_headers(&parts.headers);
        headers.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
        let bytes = body.bytes().await.map_err(|source| Error::Body {
            method: Method::GET,
            path: from.to_string(),
            source,
        })?;
        self.put_raw(to, PutPayload::from(bytes), headers).await?;
        Ok(())
    }
}

#[async_trait]
impl ObjectStore for SwiftStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        // Tags have no Swift equivalent and are dropped, as object_store's HttpStore does.
        let mut headers =
            match &opts.mode {
                PutMode::Overwrite => HeaderMap::new(),
                PutMode::Create => {
                    let mut h = HeaderMap::new();
                    h.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
                    h
                }
                PutMode::Update(_) => return Err(self.not_implemented(
                    "`put_opts` with `PutMode::Update` (Swift silently ignores If-Match on PUT)",
                )),
            };
        let attributes = headers::attribute_headers(&opts.attributes).map_err(|reason| {
            self.not_implemented(&format!("`put_opts` with attributes: {reason}"))
        })?;
        headers.extend(attributes);
        let (write, extensions) = self.put_raw(location, payload, headers).await?;
        Ok(PutResult {
            e_tag: write.e_tag,
            version: None,
            extensions,
        })
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(self.not_implemented("`put_multipart_opts` with attributes"));
        }
        // Without the `slo` middleware a manifest PUT would store the manifest itself as the
        // object's content: refuse instead.
        let info = self.client.info().await?;
        if info.as_ref().and_then(|i| i.get("slo")).is_none() {
            return Err(self.not_implemented(
                "`put_multipart_opts`: this Swift cluster offers no Static Large Objects (no \
                 `slo` in GET /info; add the `slo` middleware to the proxy pipeline)",
            ));
        }
        Ok(Box::new(slo::SloUpload::new(self.clone(), location)))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.version.is_some() {
            return Err(self.not_implemented("`get_opts` with a version"));
        }
        let method = if options.head {
            Method::HEAD
        } else {
            Method::GET
        };
        let mut req = Request::new(method, Target::Object(location));
        let value = |s: &str| {
            HeaderValue::from_str(s).map_err(|_| Error::InvalidArgument {
                reason: format!("`{s}` is not a valid header value"),
            })
        };
        if let (Some(range), false) = (&options.range, options.head) {
            range.is_valid().map_err(|e| Error::InvalidRange {
                path: location.to_string(),
                reason: e.to_string(),
            })?;
            req = req.header(RANGE, value(&range.to_string())?);
        }
        if let Some(tag) = &options.if_match {
            req = req.header(IF_MATCH, value(tag)?);
        }
        if let Some(tag) = &options.if_none_match {
            req = req.header(IF_NONE_MATCH, value(tag)?);
        }
        if let Some(t) = options.if_modified_since {
            req = req.header(IF_MODIFIED_SINCE, value(&headers::http_date_ceil(t))?);
        }
        if let Some(t) = options.if_unmodified_since {
            req = req.header(IF_UNMODIFIED_SINCE, value(&headers::http_date_ceil(t))?);
        }

        let response = self.client.send(&req).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(self
                .client
                .status_error(&req.method, location.as_ref(), response)
                .await
                .into());
        }
        let requested = if options.head {
            None
        } else {
            options.range.as_ref()
        };
        let answer = headers::answer(location, &req.method, status, response.headers(), requested)?;
        let (parts, body) = response.into_parts();
        let payload = if options.head {
            futures::stream::empty().boxed()
        } else {
            body.bytes_stream()
                .map_err(|source| object_store::Error::Generic {
                    store: STORE,
                    source: Box::new(source),
                })
                .boxed()
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta: answer.meta,
            range: answer.range,
            attributes: answer.attributes,
            extensions: parts.extensions,
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // Bulk where the cluster offers it (`GET /info`), one DELETE per object otherwise.
        self.delete_many(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        list::objects(Arc::clone(&self.client), prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        // Swift's `marker` is exclusive, exactly like `offset`.
        list::objects(Arc::clone(&self.client), prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        Ok(list::with_delimiter(&self.client, prefix).await?)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        match options.mode {
            CopyMode::Overwrite => self.copy_server_side(from, to).await,
            CopyMode::Create => self.copy_create(from, to).await,
        }
    }
}

#[cfg(test)]
mod tests;
