//! The `Date` header of the store's answers: the store's clock for a user who may only read.
//!
//! banklease reads the store's time by writing a probe and reading back its `last_modified`
//! ([`Bank::store_time`](crate::Bank::store_time)). Credentials that may only read cannot write
//! it; every HTTP answer still says when the store made it (`Date`, RFC 9110 §6.6.1), to the
//! second. [`DateRecorder`] is the HTTP connector every object-store bank opened from a URL goes
//! through; [`dated`] runs one request and returns the `Date` of its (last) answer.
//!
//! Invariant: **a `Date` is a stamp of the store's clock with a resolution of one second.** It is
//! truncated (never rounded up), so it is a lower bound of the store's time when the answer was
//! made, and that time is less than a second above it. It is taken only from the answers to the
//! request [`dated`] runs (a task-local slot), never from another task's, and the last answer
//! wins: an authentication request a Swift client makes first is answered before the store's.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::ClientOptions;

/// The resolution of a `Date` header.
pub const DATE_RESOLUTION: Duration = Duration::from_secs(1);

tokio::task_local! {
    static SLOT: Arc<Mutex<Option<DateTime<Utc>>>>;
}

/// An [`HttpConnector`] that notes the `Date` of every answer for [`dated`]; requests and answers
/// pass through unchanged.
#[derive(Debug, Clone)]
pub struct DateRecorder {
    inner: Arc<dyn HttpConnector>,
}

impl Default for DateRecorder {
    fn default() -> Self {
        Self::new(Arc::new(ReqwestConnector::default()))
    }
}

impl DateRecorder {
    /// Record the answers of `inner`'s clients.
    pub fn new(inner: Arc<dyn HttpConnector>) -> Self {
        Self { inner }
    }
}

impl HttpConnector for DateRecorder {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Recording {
            inner: self.inner.connect(options)?,
        }))
    }
}

#[derive(Debug)]
struct Recording {
    inner: HttpClient,
}

#[async_trait]
impl HttpService for Recording {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let answer = self.inner.execute(req).await?;
        if let Some(date) = date_of(answer.headers()) {
            // Outside `dated` there is no slot, and nothing to do.
            let _ = SLOT.try_with(|slot| *slot.lock().expect("not poisoned") = Some(date));
        }
        Ok(answer)
    }
}

/// The `Date` header of an answer (IMF-fixdate, as HTTP servers send it).
fn date_of(headers: &http::HeaderMap) -> Option<DateTime<Utc>> {
    let value = headers.get(http::header::DATE)?.to_str().ok()?;
    DateTime::parse_from_rfc2822(value)
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

/// Run `request` and return its output with the `Date` of the last answer it received through a
/// [`DateRecorder`] (`None` when there was none, or the store's answers carry no `Date`).
pub async fn dated<F: Future>(request: F) -> (F::Output, Option<DateTime<Utc>>) {
    let slot = Arc::new(Mutex::new(None));
    let output = SLOT.scope(Arc::clone(&slot), request).await;
    let date = *slot.lock().expect("not poisoned");
    (output, date)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::client::HttpResponseBody;

    /// Answers every request with the next `Date` of its list (none once it runs out).
    #[derive(Debug, Clone)]
    struct Dates(Arc<Mutex<Vec<&'static str>>>);

    #[async_trait]
    impl HttpService for Dates {
        async fn call(&self, _req: HttpRequest) -> Result<HttpResponse, HttpError> {
            let mut b = http::Response::builder().status(200);
            let mut dates = self.0.lock().unwrap();
            if !dates.is_empty() {
                b = b.header("Date", dates.remove(0));
            }
            Ok(b.body(HttpResponseBody::from(String::new())).unwrap())
        }
    }

    impl HttpConnector for Dates {
        fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
            Ok(HttpClient::new(self.clone()))
        }
    }

    fn request() -> HttpRequest {
        http::Request::builder()
            .uri("http://127.0.0.1:9/x")
            .body(object_store::client::HttpRequestBody::from(Vec::new()))
            .unwrap()
    }

    #[tokio::test]
    async fn the_last_answer_of_the_request_gives_the_date() {
        let dates = Dates(Arc::new(Mutex::new(vec![
            "Thu, 26 Nov 2026 00:40:19 GMT",
            "Thu, 26 Nov 2026 00:40:21 GMT",
            "not a date",
        ])));
        let client = DateRecorder::new(Arc::new(dates))
            .connect(&ClientOptions::new())
            .unwrap();
        // Outside `dated`, nothing is kept: the first answer is not seen below.
        client.execute(request()).await.unwrap();
        let ((), date) = dated(async {
            client.execute(request()).await.unwrap();
        })
        .await;
        assert_eq!(
            date,
            Some(DateTime::from_timestamp(1_795_653_621, 0).unwrap()),
            "the answer inside `dated`"
        );
        // An unparsable Date and no Date give none.
        let ((), date) = dated(async {
            client.execute(request()).await.unwrap();
            client.execute(request()).await.unwrap();
        })
        .await;
        assert_eq!(date, None);
    }
}
