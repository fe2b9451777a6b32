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
//! request [`dated`] runs (a task-local slot), never from another task's; only the last answer
//! counts, with or without a `Date` (an authentication server's answer before the store's never
//! stands for it), and an answer a cache served (`Age`) gives none.

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
        // Every answer sets the slot, a `Date` or none: an earlier answer's (an authentication
        // server's) never stands for a later one. Outside `dated` there is no slot.
        let date = date_of(answer.headers());
        let _ = SLOT.try_with(|slot| *slot.lock().expect("not poisoned") = date);
        Ok(answer)
    }
}

/// The `Date` header of an answer (IMF-fixdate, as HTTP servers send it); none for an answer a
/// cache served (`Age`), whose `Date` was made before the request was sent.
fn date_of(headers: &http::HeaderMap) -> Option<DateTime<Utc>> {
    if headers.contains_key(http::header::AGE) {
        return None;
    }
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

    /// One answer's headers.
    type Headers = Vec<(&'static str, &'static str)>;

    /// Answers each request with the next headers of its list (none once it runs out).
    #[derive(Debug, Clone)]
    struct Answers(Arc<Mutex<Vec<Headers>>>);

    #[async_trait]
    impl HttpService for Answers {
        async fn call(&self, _req: HttpRequest) -> Result<HttpResponse, HttpError> {
            let mut b = http::Response::builder().status(200);
            let mut answers = self.0.lock().unwrap();
            if !answers.is_empty() {
                for (k, v) in answers.remove(0) {
                    b = b.header(k, v);
                }
            }
            Ok(b.body(HttpResponseBody::from(String::new())).unwrap())
        }
    }

    impl HttpConnector for Answers {
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
    async fn only_the_last_answer_of_the_request_gives_the_date() {
        const D1: &str = "Thu, 26 Nov 2026 00:40:19 GMT";
        const D2: &str = "Thu, 26 Nov 2026 00:40:21 GMT";
        let answers = Answers(Arc::new(Mutex::new(vec![
            vec![("Date", D1)],
            vec![("Date", D2)],
            // An authentication server's dated answer, then the store's without a Date.
            vec![("Date", D1)],
            vec![],
            // A cache's answer: its Date was not made while the request was in flight.
            vec![("Date", D2), ("Age", "120")],
            vec![("Date", "not a date")],
        ])));
        let client = DateRecorder::new(Arc::new(answers))
            .connect(&ClientOptions::new())
            .unwrap();
        let one = |n: usize| {
            let client = &client;
            async move {
                dated(async {
                    for _ in 0..n {
                        client.execute(request()).await.unwrap();
                    }
                })
                .await
                .1
            }
        };
        // Outside `dated`, nothing is kept: the first answer is not seen below.
        client.execute(request()).await.unwrap();
        assert_eq!(
            one(1).await,
            Some(DateTime::from_timestamp(1_795_653_621, 0).unwrap()),
            "the answer inside `dated`"
        );
        assert_eq!(one(2).await, None, "the last answer has no Date");
        assert_eq!(one(1).await, None, "a cached answer (`Age`) is no reading");
        assert_eq!(one(1).await, None, "an unparsable Date is none");
    }
}
