//! The HTTP side of the Swift backend: sessions, retries, URLs.
//!
//! Every request goes through [`SwiftClient::send`]:
//!
//! 1. take the current [`Session`] (authenticating first if there is none or it is about to
//!    expire);
//! 2. execute the request, retrying connection errors, 5xx and 429 with exponential backoff
//!    ([`RetryConfig`], sleeping on the [`Clock`] so tests control it);
//! 3. on 401, re-authenticate **once** (unless another request already did) and go to 1.
//!
//! Every object GET and HEAD carries `X-Newest: true` (added here, so no read path can forget
//! it): with more than one replica, the proxy otherwise answers from the first object server that
//! has the object, which may have missed the latest writes. See the module documentation for
//! what `X-Newest` does not cover (changes made by POST alone).
//!
//! Statuses are returned to the caller, which knows what a 404 or 412 means for its operation.
//!
//! Retried writes behave like object_store's own clients: a PUT whose first attempt landed but
//! whose answer was lost is sent again, so a create-if-absent PUT can report `AlreadyExists`
//! for an object it wrote itself. Read back to resolve.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use object_store::client::{HttpClient, HttpErrorKind, HttpRequestBody, HttpResponse};
use object_store::path::Path;
use object_store::{ClientOptions, PutPayload, RetryConfig};
use url::Url;

use super::auth::{Credentials, Session};
use super::error::{snippet, Error};
use super::headers::X_NEWEST;
use crate::clock::{Jitter, SharedClock};

/// `X-Auth-Token`
pub(crate) const AUTH_TOKEN: HeaderName = HeaderName::from_static("x-auth-token");

/// What a request addresses inside the account.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The account (the storage URL itself): bulk operations.
    Account,
    /// The configured container itself.
    Container,
    /// An object in the configured container.
    Object(&'a Path),
}

/// One logical request; re-issued as is on retries and after re-authentication.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) method: Method,
    pub(crate) target: Target<'a>,
    pub(crate) query: Vec<(&'static str, String)>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<PutPayload>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(method: Method, target: Target<'a>) -> Self {
        Self {
            method,
            target,
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: None,
        }
    }

    pub(crate) fn header(mut self, name: impl Into<HeaderName>, value: HeaderValue) -> Self {
        self.headers.insert(name.into(), value);
        self
    }

    pub(crate) fn headers(mut self, headers: HeaderMap) -> Self {
        self.headers.extend(headers);
        self
    }

    pub(crate) fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.push((key, value.into()));
        self
    }

    pub(crate) fn body(mut self, payload: PutPayload) -> Self {
        self.body = Some(payload);
        self
    }

    /// Whether the request reads an object (GET or HEAD), and so must ask for the newest
    /// replica.
    fn reads_object(&self) -> bool {
        matches!(self.target, Target::Object(_))
            && (self.method == Method::GET || self.method == Method::HEAD)
    }

    /// The path for messages: the object name, or empty for the container.
    pub(crate) fn path(&self) -> String {
        match self.target {
            Target::Account | Target::Container => String::new(),
            Target::Object(p) => p.to_string(),
        }
    }
}

pub(crate) struct SwiftClient {
    /// Objects per bulk-delete request (from `GET /info`; 0: no bulk delete), read once.
    pub(crate) bulk_delete_limit: tokio::sync::OnceCell<usize>,
    pub(crate) http: HttpClient,
    pub(crate) credentials: Credentials,
    /// Used instead of the storage URL the authentication returns (`OS_STORAGE_URL`).
    pub(crate) storage_url_override: Option<Url>,
    pub(crate) container: String,
    pub(crate) retry: RetryConfig,
    pub(crate) clock: SharedClock,
    pub(crate) jitter: Jitter,
    pub(crate) list_limit: usize,
    pub(crate) client_options: ClientOptions,
    /// The current session; the lock is held across an authentication, so concurrent callers
    /// wait for one authentication instead of each making their own.
    pub(crate) session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// How many authentications this client has made.
    pub(crate) authentications: AtomicU64,
    /// Requests sent and not yet answered (or given up on), authentication included.
    pub(crate) in_flight: AtomicUsize,
    /// A re-authentication and the resend count against the request's own retry budget
    /// ([`super::SwiftBuilder::with_one_retry_cutoff`]).
    pub(crate) one_cutoff: bool,
}

impl fmt::Debug for SwiftClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SwiftClient")
            .field("container", &self.container)
            .field("credentials", &self.credentials)
            .field(
                "storage_url_override",
                &self.storage_url_override.as_ref().map(Url::as_str),
            )
            .field("retry", &self.retry)
            .field("list_limit", &self.list_limit)
            .field("authentications", &self.authentications)
            .finish_non_exhaustive()
    }
}

impl SwiftClient {
    /// The session to use now, authenticating if there is none or it is about to expire.
    pub(crate) async fn session(&self) -> Result<Arc<Session>, Error> {
        let mut guard = self.session.lock().await;
        let now = self.now_utc();
        if let Some(s) = guard.as_ref() {
            if !s.expiring(now) || !self.credentials.can_authenticate() {
                return Ok(Arc::clone(s));
            }
        }
        let fresh = Arc::new(self.authenticate(None).await?);
        *guard = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Replace `stale` (which Swift refused) with a new session, unless another request has
    /// already done so; within the cutoff of the request that met the 401, if it has one.
    async fn reauthenticate(
        &self,
        stale: &Session,
        cutoff: Option<Instant>,
    ) -> Result<Arc<Session>, Error> {
        let mut guard = self.session.lock().await;
        if let Some(s) = guard.as_ref() {
            if s.generation != stale.generation {
                return Ok(Arc::clone(s));
            }
        }
        tracing::debug!(container = %self.container, "swift answered 401; re-authenticating");
        let fresh = Arc::new(self.authenticate(cutoff).await?);
        *guard = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    async fn authenticate(&self, cutoff: Option<Instant>) -> Result<Session, Error> {
        let endpoint = self.credentials.endpoint();
        // The token's lifetime counts from here: before the request, never after the answer.
        let sent = self.now_utc();
        let response = self
            .execute(
                &self.credentials.method(),
                &endpoint,
                || self.credentials.request(),
                cutoff,
            )
            .await
            .map_err(|e| match e {
                Error::Request {
                    retries, source, ..
                } => Error::AuthUnreachable {
                    url: endpoint.clone(),
                    retries,
                    variable: self.credentials.url_variable(),
                    source,
                },
                other => other,
            })?;
        let mut session = self.credentials.session(response, sent).await?;
        if let Some(url) = &self.storage_url_override {
            session.storage_url = url.clone();
        }
        session.generation = self.authentications.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::debug!(
            endpoint = %endpoint,
            storage_url = %session.storage_url,
            generation = session.generation,
            "swift authenticated"
        );
        Ok(session)
    }

    fn now_utc(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from(self.clock.system_now())
    }

    /// Send `req` with the session's token; re-authenticate once on 401. With one retry cutoff
    /// (`[bank] retry_timeout`), no attempt of the request, the re-authentication or the resend
    /// starts past it: the retry budget the timing rules use covers all three.
    pub(crate) async fn send(&self, req: &Request<'_>) -> Result<HttpResponse, Error> {
        let _flying = InFlight::enter(&self.in_flight);
        let mut session = self.session().await?;
        let cutoff = self
            .one_cutoff
            .then(|| self.clock.now() + self.retry.retry_timeout + self.retry.backoff.max_backoff);
        let past_cutoff = || cutoff.is_some_and(|c| self.clock.now() >= c);
        let mut reauthenticated = false;
        loop {
            let url = self.url(&session.storage_url, req);
            let token = session.token.header_value()?;
            let path = req.path();
            let response = self
                .execute(
                    &req.method,
                    &path,
                    || {
                        let mut b = http::Request::builder()
                            .method(req.method.clone())
                            .uri(url.as_str());
                        if let Some(h) = b.headers_mut() {
                            h.extend(req.headers.clone());
                            h.insert(AUTH_TOKEN, token.clone());
                            if req.reads_object() {
                                h.insert(X_NEWEST, HeaderValue::from_static("true"));
                            }
                        }
                        let body = match &req.body {
                            Some(p) => HttpRequestBody::from(p.clone()),
                            None => HttpRequestBody::empty(),
                        };
                        b.body(body).map_err(|source| Error::BuildRequest {
                            method: req.method.clone(),
                            path: path.clone(),
                            source,
                        })
                    },
                    cutoff,
                )
                .await?;
            if response.status() == StatusCode::UNAUTHORIZED
                && !reauthenticated
                && self.credentials.can_authenticate()
                && !past_cutoff()
            {
                reauthenticated = true;
                session = self.reauthenticate(&session, cutoff).await?;
                if past_cutoff() {
                    // The resend would start past the budget: Swift's refusal is the answer.
                    return Ok(response);
                }
                continue;
            }
            return Ok(response);
        }
    }

    /// Execute a request built by `make`, retrying transport errors, 5xx and 429: while fewer
    /// than `max_retries` retries were made and `retry_timeout` has not passed since the first
    /// attempt — or, with a `cutoff`, while a retry after the backoff would start before it.
    async fn execute(
        &self,
        method: &Method,
        path: &str,
        make: impl Fn() -> Result<http::Request<HttpRequestBody>, Error>,
        cutoff: Option<Instant>,
    ) -> Result<HttpResponse, Error> {
        let started = self.clock.now();
        let mut retries = 0;
        loop {
            let outcome = self.http.execute(make()?).await;
            let retryable = match &outcome {
                Ok(r) => Credentials::retryable(r.status()),
                Err(e) => matches!(
                    e.kind(),
                    HttpErrorKind::Connect
                        | HttpErrorKind::Request
                        | HttpErrorKind::Timeout
                        | HttpErrorKind::Interrupted
                ),
            };
            let now = self.clock.now();
            let elapsed = now.saturating_duration_since(started);
            let wait = self.backoff(retries);
            let out_of_time = match cutoff {
                Some(cutoff) => now + wait >= cutoff,
                None => elapsed >= self.retry.retry_timeout,
            };
            if !retryable || retries >= self.retry.max_retries || out_of_time {
                return outcome.map_err(|source| Error::Request {
                    method: method.clone(),
                    path: path.to_owned(),
                    retries,
                    source,
                });
            }
            match &outcome {
                Ok(r) => {
                    tracing::debug!(%method, path, status = %r.status(), ?wait, "swift: retrying")
                }
                Err(e) => tracing::debug!(%method, path, error = %e, ?wait, "swift: retrying"),
            }
            self.clock.sleep(wait).await;
            // A backoff that overran (a busy or paused process) sends nothing past the cutoff.
            if cutoff.is_some_and(|c| self.clock.now() >= c) {
                return outcome.map_err(|source| Error::Request {
                    method: method.clone(),
                    path: path.to_owned(),
                    retries,
                    source,
                });
            }
            drop(outcome);
            retries += 1;
        }
    }

    /// `init * base^n`, capped, with up to half of it taken off at random.
    fn backoff(&self, retries: usize) -> Duration {
        let b = &self.retry.backoff;
        let exp = b.base.max(1.0).powi(retries.min(64) as i32);
        let full = b.init_backoff.mul_f64(exp.min(1e6)).min(b.max_backoff);
        self.jitter.shorten(full, 0.5)
    }

    /// `{storage_url}/{container}[/{object name}]?{query}`, each part percent-encoded.
    ///
    /// An object_store [`Path`] is already a string of `/`-separated, percent-encoded parts
    /// (`a/b%2Fc`); that string is the Swift object name, so each part is encoded once more as a
    /// URL path segment (`a/b%252Fc`) and Swift decodes it back to the name.
    pub(crate) fn url(&self, storage_url: &Url, req: &Request<'_>) -> Url {
        let mut url = storage_url.clone();
        if !matches!(req.target, Target::Account) {
            if let Ok(mut segs) = url.path_segments_mut() {
                segs.pop_if_empty().push(&self.container);
                if let Target::Object(p) = req.target {
                    segs.extend(p.parts());
                }
            }
        }
        if !req.query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in &req.query {
                q.append_pair(k, v);
            }
        }
        url
    }

    /// The cluster's capabilities (`GET /info`, unauthenticated, beside `/v1`), or `None` when
    /// the cluster does not publish them (404: `expose_info = false`).
    pub(crate) async fn info(&self) -> Result<Option<serde_json::Value>, Error> {
        let session = self.session().await?;
        let mut url = session.storage_url.clone();
        // `/info` sits where the API version does: `http://proxy/v1/AUTH_x` → `http://proxy/info`.
        let path = url.path().to_owned();
        let base = path
            .find("/v1/")
            .or_else(|| path.strip_suffix("/v1").map(|p| p.len()));
        url.set_path(&format!("{}/info", &path[..base.unwrap_or(0)]));
        url.set_query(None);
        let method = Method::GET;
        let response = self
            .execute(
                &method,
                "/info",
                || {
                    http::Request::builder()
                        .method(Method::GET)
                        .uri(url.as_str())
                        .body(HttpRequestBody::empty())
                        .map_err(|source| Error::BuildRequest {
                            method: Method::GET,
                            path: "/info".to_owned(),
                            source,
                        })
                },
                None,
            )
            .await?;
        match response.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND | StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => {
                return Ok(None)
            }
            _ => return Err(self.status_error(&method, "/info", response).await),
        }
        let body = response
            .into_body()
            .bytes()
            .await
            .map_err(|source| Error::Body {
                method: method.clone(),
                path: "/info".to_owned(),
                source,
            })?;
        Ok(serde_json::from_slice(&body).ok())
    }

    /// `/{container}/{object name}`, encoded, as `X-Copy-From` wants it.
    pub(crate) fn copy_source(&self, path: &Path) -> String {
        let mut url = Url::parse("http://x/").expect("static url");
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.pop_if_empty()
                .push(&self.container)
                .extend(path.parts());
        }
        url.path().to_owned()
    }

    /// Turn an error status into [`Error::Status`] (reading a snippet of the body).
    pub(crate) async fn status_error(
        &self,
        method: &Method,
        path: &str,
        response: HttpResponse,
    ) -> Error {
        let status = response.status();
        let body = match response.into_body().bytes().await {
            Ok(b) => snippet(&b),
            Err(_) => String::new(),
        };
        Error::Status {
            method: method.clone(),
            path: path.to_owned(),
            status,
            body,
            hint: self.refusal_hint(status),
        }
    }

    /// What to check when Swift refuses a request that carried a token it may have issued
    /// itself (TempAuth) or had validated by Keystone.
    fn refusal_hint(&self, status: StatusCode) -> &'static str {
        match (&self.credentials, status) {
            (Credentials::Keystone(_), StatusCode::FORBIDDEN) => {
                "; keystone accepted the credentials but swift refused the token: the user needs \
                 an operator role (keystoneauth's operator_roles, usually `member` or `admin`) on \
                 the project the storage url names"
            }
            (Credentials::Keystone(_), StatusCode::UNAUTHORIZED) => {
                "; swift did not accept a fresh keystone token: check that the proxy's authtoken \
                 middleware validates against this keystone (its www_authenticate_uri, auth_url \
                 and service user)"
            }
            (_, StatusCode::FORBIDDEN) => {
                "; the credentials may not do this on this container (check its ACLs and the \
                 user's roles)"
            }
            (Credentials::None, StatusCode::UNAUTHORIZED) => {
                "; check OS_AUTH_TOKEN (it may have expired; with credentials set, banklease \
                 renews it itself)"
            }
            (_, StatusCode::UNAUTHORIZED) => "; swift did not accept a fresh token",
            _ => "",
        }
    }
}

/// Counts a request in flight until it is answered or dropped (a caller that gives up).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
