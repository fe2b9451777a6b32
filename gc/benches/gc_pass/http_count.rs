//! Counting at the HTTP layer: an [`HttpConnector`] whose client counts every request it sends,
//! by kind, retries included. This is how the benchmark *observes* listing pages on S3 and
//! Swift (one `GET ?list-type=2` or `GET ?format=json` per page) and S3's bulk deletes (one
//! `POST ?delete` per `delete_stream` chunk), which [`banklease::store::CountingStore`] cannot
//! see: it counts one `list` per listing call and one `delete` per path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use banklease::clock::{Clock, SystemClock};

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::ClientOptions;

/// HTTP requests by kind: `list_page`, `get`, `head`, `put`, `post`, `delete`, `bulk_delete`
/// (S3 `POST ?delete`), `auth` (Swift TempAuth / Keystone), `other`.
///
/// Also the summed duration of all requests (until the response head arrived), so that a run's
/// mean number of requests in flight is `busy / wall time`.
#[derive(Debug, Default)]
pub struct HttpCounters {
    counts: Mutex<BTreeMap<&'static str, u64>>,
    busy_by_kind_us: Mutex<BTreeMap<&'static str, u64>>,
    busy_us: AtomicU64,
    /// Requests answered 5xx or not answered (the client retries those).
    failed: AtomicU64,
}

impl HttpCounters {
    fn bump(&self, kind: &'static str) {
        *self
            .counts
            .lock()
            .expect("counter lock")
            .entry(kind)
            .or_default() += 1;
    }

    /// Summed request durations so far by kind, in microseconds.
    pub fn busy_by_kind_us(&self) -> BTreeMap<String, u64> {
        self.busy_by_kind_us
            .lock()
            .expect("counter lock")
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect()
    }

    /// Summed request durations so far, in seconds.
    pub fn busy_secs(&self) -> f64 {
        self.busy_us.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Requests so far that were answered 5xx or failed in transport (object_store's client
    /// retries them, so each is followed by another request of the same kind).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts
            .lock()
            .expect("counter lock")
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect()
    }
}

/// The kind of one HTTP request, from its method, path and query.
fn classify(req: &HttpRequest) -> &'static str {
    let uri = req.uri();
    let path = uri.path();
    let query = uri.query().unwrap_or("");
    if path.ends_with("/auth/v1.0") || path.contains("/auth/tokens") {
        return "auth";
    }
    let method = req.method().as_str();
    if method == "GET" && (query.contains("list-type=") || query.contains("format=json")) {
        return "list_page";
    }
    match method {
        "POST" if query.split('&').any(|p| p == "delete" || p == "delete=") => "bulk_delete",
        "GET" => "get",
        "HEAD" => "head",
        "PUT" => "put",
        "POST" => "post",
        "DELETE" => "delete",
        _ => "other",
    }
}

/// Connects like object_store's default (reqwest) connector, counting every request.
#[derive(Debug, Clone, Default)]
pub struct CountingConnector {
    counters: Arc<HttpCounters>,
}

impl CountingConnector {
    /// The counters shared by every client this connector makes.
    pub fn counters(&self) -> Arc<HttpCounters> {
        Arc::clone(&self.counters)
    }
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CountingService {
            inner,
            counters: Arc::clone(&self.counters),
        }))
    }
}

#[derive(Debug)]
struct CountingService {
    inner: HttpClient,
    counters: Arc<HttpCounters>,
}

#[async_trait]
impl HttpService for CountingService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let kind = classify(&req);
        self.counters.bump(kind);
        let clock = SystemClock;
        let started = clock.now();
        let response = self.inner.execute(req).await;
        let us = clock.now().duration_since(started).as_micros() as u64;
        self.counters.busy_us.fetch_add(us, Ordering::Relaxed);
        *self
            .counters
            .busy_by_kind_us
            .lock()
            .expect("counter lock")
            .entry(kind)
            .or_default() += us;
        if response
            .as_ref()
            .map_or(true, |r| r.status().is_server_error())
        {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        response
    }
}
