//! Unit tests against an in-process fake of Keystone + Swift (an [`HttpService`]), for what the
//! live TempAuth server of `tests/swift_store.rs` cannot show: Keystone v3, re-authentication
//! when the server revokes a token, retries, and that no secret is ever printed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use http::{Method, StatusCode};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpResponseBody, HttpService,
};
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStoreExt, RetryConfig};

use super::*;

const PASSWORD: &str = "s3cret-password";

#[derive(Debug, Default)]
struct FakeState {
    /// The token Swift currently accepts.
    valid: Option<String>,
    issued: u32,
    /// Answer the next object request with these statuses first.
    fail_with: Vec<StatusCode>,
    /// Invalidate the token after this many object requests.
    revoke_after: Option<u32>,
    object_requests: u32,
    auth_bodies: Vec<String>,
    seen_urls: Vec<String>,
    /// Every request after authentication: method, URL path, and its `X-Newest` header.
    seen_newest: Vec<(Method, String, Option<String>)>,
    /// Answer every PUT 403, as Swift answers a token with only the reader role.
    refuse_writes: bool,
    /// Swift's answers carry no `Date` (Keystone's still do).
    undated_store: bool,
    /// The container's listing (`?format=json`), answered to every GET of it.
    listing: Option<String>,
    /// Every request waits for a permit here first (a paused server).
    hold: Option<Arc<tokio::sync::Semaphore>>,
}

#[derive(Debug, Clone, Default)]
struct Fake(Arc<Mutex<FakeState>>);

impl Fake {
    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap()
    }
}

fn respond(status: StatusCode, headers: &[(&str, String)], body: String) -> HttpResponse {
    let mut b = http::Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    b.body(HttpResponseBody::from(body)).unwrap()
}

#[async_trait]
impl HttpService for Fake {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        let hold = self.state().hold.clone();
        if let Some(hold) = hold {
            hold.acquire().await.unwrap().forget();
        }
        let mut s = self.state();
        s.seen_urls.push(parts.uri.to_string());
        if parts.uri.path() == "/v3/auth/tokens" && parts.method == Method::POST {
            let body = String::from_utf8(body.as_bytes().unwrap().to_vec()).unwrap();
            s.auth_bodies.push(body);
            s.issued += 1;
            let token = format!("tok-{}", s.issued);
            s.valid = Some(token.clone());
            let catalog = serde_json::json!({"token": {
                "expires_at": "2999-01-01T00:00:00.000000Z",
                "catalog": [{"type": "object-store", "endpoints": [
                    {"interface": "public", "region": "r1",
                     "url": "http://swift.invalid/v1/AUTH_p"}]}]}});
            // Keystone's own clock, years off the store's: never the store's time.
            let date = ("Date", "Mon, 01 Jan 2035 00:00:00 GMT".to_owned());
            return Ok(respond(
                StatusCode::CREATED,
                &[("X-Subject-Token", token), date],
                catalog.to_string(),
            ));
        }
        s.object_requests += 1;
        let newest = parts
            .headers
            .get("x-newest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        s.seen_newest
            .push((parts.method.clone(), parts.uri.path().to_owned(), newest));
        if !s.fail_with.is_empty() {
            let status = s.fail_with.remove(0);
            return Ok(respond(status, &[], "<html>fail</html>".into()));
        }
        let token = parts
            .headers
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if token.is_none() || token != s.valid {
            return Ok(respond(
                StatusCode::UNAUTHORIZED,
                &[],
                "<html>401</html>".into(),
            ));
        }
        if s.revoke_after == Some(s.object_requests) {
            s.valid = None;
        }
        let date = if s.undated_store {
            ("X-No-Date", String::new())
        } else {
            ("Date", "Sun, 22 Nov 2026 14:20:11 GMT".to_owned())
        };
        if s.refuse_writes && parts.method == Method::PUT {
            return Ok(respond(
                StatusCode::FORBIDDEN,
                &[date],
                "<html>403</html>".into(),
            ));
        }
        let query = parts.uri.query().unwrap_or_default();
        if let (true, Some(listing)) = (parts.method == Method::GET, &s.listing) {
            if query.contains("format=json") {
                return Ok(respond(StatusCode::OK, &[date], listing.clone()));
            }
        }
        Ok(match parts.method {
            Method::PUT => respond(
                StatusCode::CREATED,
                &[("Etag", "abc".into()), date],
                String::new(),
            ),
            _ => respond(StatusCode::NOT_FOUND, &[date], "<html>nf</html>".into()),
        })
    }
}

#[derive(Debug)]
struct FakeConnector(Fake);

impl HttpConnector for FakeConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(self.0.clone()))
    }
}

fn keystone_store(fake: &Fake) -> SwiftStore {
    SwiftBuilder::new()
        .with_config(SwiftConfigKey::OsAuthUrl, "http://keystone.invalid:5000")
        .with_config(SwiftConfigKey::OsUsername, "alice")
        .with_config(SwiftConfigKey::OsPassword, PASSWORD)
        .with_config(SwiftConfigKey::OsProjectName, "proj")
        .with_config(SwiftConfigKey::OsUserDomainName, "Default")
        .with_config(SwiftConfigKey::OsProjectDomainName, "Default")
        .with_config(SwiftConfigKey::OsRegionName, "r1")
        .with_container("c")
        .with_http_connector(FakeConnector(fake.clone()))
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(2),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: Duration::from_secs(5),
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn keystone_v3_token_and_catalog_endpoint_are_used() {
    let fake = Fake::default();
    let store = keystone_store(&fake);
    assert_eq!(store.authentications(), 0, "building does not authenticate");
    let r = store.put(&Path::from("a/b"), "x".into()).await.unwrap();
    assert_eq!(r.e_tag.as_deref(), Some("abc"));
    assert_eq!(store.authentications(), 1);
    let s = fake.state();
    assert_eq!(
        s.seen_urls[0],
        "http://keystone.invalid:5000/v3/auth/tokens"
    );
    assert_eq!(s.seen_urls[1], "http://swift.invalid/v1/AUTH_p/c/a/b");
    let body: serde_json::Value = serde_json::from_str(&s.auth_bodies[0]).unwrap();
    assert_eq!(
        body["auth"]["identity"]["password"]["user"]["name"],
        "alice"
    );
    assert_eq!(
        body["auth"]["scope"]["project"]["domain"]["name"],
        "Default"
    );
}

#[tokio::test]
async fn a_revoked_token_is_renewed_once_and_the_request_repeated() {
    let fake = Fake::default();
    fake.state().revoke_after = Some(1);
    let store = keystone_store(&fake);
    store.put(&Path::from("one"), "1".into()).await.unwrap();
    // The token was revoked after that request: the next one meets 401, re-authenticates.
    store.put(&Path::from("two"), "2".into()).await.unwrap();
    assert_eq!(store.authentications(), 2);
    assert_eq!(fake.state().issued, 2);
}

#[tokio::test]
async fn a_bogus_preauthenticated_token_falls_back_to_the_credentials() {
    let fake = Fake::default();
    let store = SwiftBuilder::new()
        .with_config(SwiftConfigKey::OsAuthUrl, "http://keystone.invalid:5000/v3")
        .with_config(SwiftConfigKey::OsUsername, "alice")
        .with_config(SwiftConfigKey::OsPassword, PASSWORD)
        .with_config(SwiftConfigKey::OsProjectId, "p-id")
        .with_storage_url("http://swift.invalid/v1/AUTH_p")
        .with_token("bogus-token")
        .with_container("c")
        .with_http_connector(FakeConnector(fake.clone()))
        .build()
        .unwrap();
    store.put(&Path::from("x"), "x".into()).await.unwrap();
    assert_eq!(store.authentications(), 1);
}

#[tokio::test]
async fn a_refused_token_without_credentials_is_unauthenticated_and_not_printed() {
    let fake = Fake::default();
    let store = SwiftBuilder::new()
        .with_storage_url("http://swift.invalid/v1/AUTH_p")
        .with_token("bogus-token-123")
        .with_container("c")
        .with_http_connector(FakeConnector(fake.clone()))
        .build()
        .unwrap();
    let err = store.put(&Path::from("x"), "x".into()).await.unwrap_err();
    assert!(
        matches!(err, object_store::Error::Unauthenticated { .. }),
        "{err}"
    );
    for shown in [err.to_string(), format!("{err:?}"), format!("{store:?}")] {
        assert!(!shown.contains("bogus-token-123"), "{shown}");
    }
}

#[tokio::test]
async fn server_errors_are_retried_and_404_is_not_found() {
    let fake = Fake::default();
    let store = keystone_store(&fake);
    fake.state().fail_with = vec![StatusCode::SERVICE_UNAVAILABLE, StatusCode::BAD_GATEWAY];
    store.put(&Path::from("x"), "x".into()).await.unwrap();
    let err = store.head(&Path::from("missing")).await.unwrap_err();
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
    fake.state().fail_with = vec![StatusCode::SERVICE_UNAVAILABLE; 10];
    let err = store.head(&Path::from("x")).await.unwrap_err();
    assert!(err.to_string().contains("503"), "{err}");
}

/// With several replicas, a Swift proxy answers a GET or HEAD from the first object server that
/// has the object, which may have missed the latest PUTs and POSTs (a lease renewal). Every
/// object read must ask for the newest replica; writes, deletions and container requests need
/// not.
#[tokio::test]
async fn every_object_get_and_head_asks_for_the_newest_replica() {
    let fake = Fake::default();
    let store = keystone_store(&fake);
    let p = Path::from("leases/owner");
    // The fake answers 404 to reads; only what was sent matters here.
    let _ = store.get(&p).await;
    let _ = store.head(&p).await;
    let _ = store
        .get_opts(
            &p,
            GetOptions {
                range: Some((0..4).into()),
                ..GetOptions::default()
            },
        )
        .await;
    let _ = store.head_swift(&p).await;
    let _ = store.copy_if_not_exists(&p, &Path::from("copy")).await;
    store.put(&p, "x".into()).await.unwrap();
    let _ = store.delete(&p).await;
    let s = fake.state();
    let reads: Vec<_> = s
        .seen_newest
        .iter()
        .filter(|(m, _, _)| *m == Method::GET || *m == Method::HEAD)
        .collect();
    assert_eq!(reads.len(), 5, "{:?}", s.seen_newest);
    for (method, path, newest) in &reads {
        assert_eq!(path, "/v1/AUTH_p/c/leases/owner", "{method}");
        assert_eq!(newest.as_deref(), Some("true"), "{method} {path}");
    }
    for (method, path, newest) in &s.seen_newest {
        if *method != Method::GET && *method != Method::HEAD {
            assert_eq!(newest, &None, "{method} {path}");
        }
    }
}

#[test]
fn secrets_never_print_in_debug_or_errors() {
    let builder = SwiftBuilder::new()
        .with_tempauth(
            "http://127.0.0.1:8080/auth/v1.0",
            "test:tester",
            "k3y-value",
        )
        .with_config(SwiftConfigKey::OsPassword, PASSWORD)
        .with_token("tok-secret");
    let shown = format!("{builder:?}");
    for secret in ["k3y-value", PASSWORD, "tok-secret"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    let store = builder.clone().with_container("c").build().unwrap();
    let shown = format!("{store:?} {store}");
    for secret in ["k3y-value", PASSWORD, "tok-secret"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert_eq!(store.to_string(), "SwiftStore(c)");
}

#[test]
fn configuration_errors_name_what_is_missing() {
    let err = |b: SwiftBuilder| b.build().unwrap_err().to_string();
    assert!(err(SwiftBuilder::new().with_container("c")).contains("ST_AUTH"));
    assert!(err(SwiftBuilder::new()
        .with_config(SwiftConfigKey::AuthUrl, "http://x/auth/v1.0")
        .with_config(SwiftConfigKey::User, "a:b")
        .with_container("c"))
    .contains("ST_KEY"));
    assert!(err(SwiftBuilder::new()
        .with_config(SwiftConfigKey::OsAuthUrl, "http://x:5000")
        .with_config(SwiftConfigKey::OsUsername, "u")
        .with_config(SwiftConfigKey::OsPassword, "p")
        .with_container("c"))
    .contains("OS_PROJECT_NAME"));
    assert!(err(SwiftBuilder::new().with_tempauth("http://x/a", "u", "k")).contains("container"));
    assert!(err(SwiftBuilder::new()
        .with_tempauth("http://u:pw@x/a", "u", "k")
        .with_container("c"))
    .contains("credentials in the URL"));
    assert!("NOT_A_KEY".parse::<SwiftConfigKey>().is_err());
    assert_eq!(
        "os_auth_url".parse::<SwiftConfigKey>().unwrap(),
        SwiftConfigKey::OsAuthUrl
    );
}

/// A bank on the fake through Keystone, its answers going through a [`DateRecorder`] as a bank
/// opened from a URL does.
///
/// [`DateRecorder`]: crate::clock::store::DateRecorder
fn dated_bank(fake: &Fake) -> crate::Bank {
    let store = SwiftBuilder::new()
        .with_config(SwiftConfigKey::OsAuthUrl, "http://keystone.invalid:5000/v3")
        .with_config(SwiftConfigKey::OsUsername, "alice")
        .with_config(SwiftConfigKey::OsPassword, PASSWORD)
        .with_config(SwiftConfigKey::OsProjectName, "proj")
        .with_config(SwiftConfigKey::OsRegionName, "r1")
        .with_container("c")
        .with_http_connector(crate::clock::store::DateRecorder::new(Arc::new(
            FakeConnector(fake.clone()),
        )))
        .build()
        .unwrap();
    crate::Bank::from_swift(store, "bank", "swift://c/bank")
}

#[tokio::test]
async fn a_reader_takes_the_stores_time_from_the_date_of_its_answer_widened_by_a_second() {
    use crate::clock::{Clock, MockClock, SharedClock};
    let fake = Fake::default();
    fake.state().refuse_writes = true;
    let bank = dated_bank(&fake);
    let mock = Arc::new(MockClock::new());
    let clock: SharedClock = mock.clone();
    // A writer (an owner, a collector) never judges by a Date: the refused probe is an error.
    let err = bank.store_time(&clock).await.unwrap_err();
    assert!(err.to_string().contains("status=403"), "{err}");

    let before = mock.now();
    let t = bank.reading_only().store_time(&clock).await.unwrap();
    // The store's answer (after Keystone's, whose clock is not the store's) gives the stamp.
    let date = chrono::DateTime::parse_from_rfc2822("Sun, 22 Nov 2026 14:20:11 GMT").unwrap();
    assert_eq!(t.at, date);
    assert!(t.verified);
    // The Date is truncated to the second: the store's time at the answer is below `at + 1 s`,
    // so the reading is taken as sent a second before the request was.
    assert_eq!(before.duration_since(t.sent), Duration::from_secs(1));
    assert_eq!(
        t.at_instant(t.observed),
        date,
        "a lower bound: the Date itself"
    );
    assert_eq!(
        t.upper_at(t.observed).unwrap(),
        date + chrono::Duration::seconds(1),
        "an upper bound: the Date and its second"
    );
    // The read was of the descriptor, answered 404 here (a bank without one is dated too).
    let s = fake.state();
    let last = s.seen_newest.last().unwrap();
    assert_eq!(
        (last.0.clone(), last.1.as_str()),
        (Method::HEAD, "/v1/AUTH_p/c/bank/banklease.json")
    );
}

/// The reader's HEAD meets a revoked token: the client authenticates again inside the dated
/// request (Keystone's answer is dated 2035) and repeats the HEAD, whose answer has no `Date`.
/// Keystone's Date never stands for the store's: no reading, a `ReadOnly` refusal.
#[tokio::test]
async fn keystones_date_never_stands_for_an_undated_store_answer() {
    use crate::clock::{MockClock, SharedClock};
    let fake = Fake::default();
    {
        let mut s = fake.state();
        s.refuse_writes = true;
        s.undated_store = true;
        // Request 1: the reader's refused probe PUT; the token is revoked after it.
        s.revoke_after = Some(1);
    }
    let bank = dated_bank(&fake).reading_only();
    let clock: SharedClock = Arc::new(MockClock::new());
    let err = bank.store_time(&clock).await.unwrap_err();
    assert!(
        matches!(err, crate::Error::ReadOnly { .. }),
        "judged on Keystone's Date? {err}"
    );
    assert!(err.to_string().contains("carry no Date header"), "{err}");
    assert_eq!(
        fake.state().issued,
        2,
        "authenticated again inside the dated HEAD"
    );
}

/// `lock list` and `lock show` on Swift, reading only: refused as a writer's probe would refuse
/// the bank (Swift ignores If-Match), without the probe's writes (a read leaves nothing new).
#[tokio::test]
async fn a_reader_of_locks_on_swift_is_refused_as_the_probe_would_refuse_it_writing_nothing() {
    use crate::clock::{MockClock, SharedClock};
    let fake = Fake::default();
    let bank = dated_bank(&fake).reading_only();
    let clock: SharedClock = Arc::new(MockClock::new());
    let locks = crate::lock::Locks::new(&bank, "default", clock).unwrap();
    let err = locks.snapshot().await.unwrap_err();
    match &err {
        crate::Error::Unsupported { usage, detail, .. } => {
            assert_eq!(*usage, "named locks");
            assert!(detail.contains("If-Match) is refused"), "{err}");
        }
        other => panic!("expected Unsupported, got {other}"),
    }
    assert!(locks.inspect("jobs/nightly").await.is_err());
    let s = fake.state();
    assert!(
        s.seen_newest.iter().all(|(m, ..)| *m != Method::PUT),
        "a reader wrote: {:?}",
        s.seen_newest
    );
}

/// A container whose keys begin with `/` (an OpenStack Karbor bank: `/checkpoints/…`) lists, at
/// its top, the common prefix `/`; `init` must take it for a foreign key and refuse, writing
/// nothing, not for an empty container to make a bank in.
#[tokio::test]
async fn init_refuses_a_container_whose_keys_begin_with_a_slash_and_writes_nothing() {
    let fake = Fake::default();
    fake.state().listing = Some(
        serde_json::json!([{"subdir": "/"}, {"name": "/", "bytes": 0, "hash": "d41d8cd98f00b204e9800998ecf8427e",
            "last_modified": "2026-11-22T14:20:11.000000", "content_type": "application/directory"}])
        .to_string(),
    );
    let store = keystone_store(&fake);
    let bank = crate::Bank::from_swift(store, "", "swift://c");
    let err = crate::layout::init(&bank).await.expect_err("not empty");
    assert!(
        matches!(&err, crate::Error::NotABank { found, .. } if found.starts_with('/')),
        "{err:?}"
    );
    let puts: Vec<_> = fake
        .state()
        .seen_newest
        .iter()
        .filter(|(m, ..)| *m == Method::PUT)
        .map(|(_, p, _)| p.clone())
        .collect();
    assert!(puts.is_empty(), "written: {puts:?}");
}

#[tokio::test]
async fn requests_in_flight_are_counted_until_answered_or_given_up() {
    let fake = Fake::default();
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    fake.state().hold = Some(Arc::clone(&hold));
    let store = Arc::new(keystone_store(&fake));
    let in_flight = |n| {
        let store = Arc::clone(&store);
        async move {
            for _ in 0..1000 {
                if store.in_flight() == n {
                    return;
                }
                tokio::task::yield_now().await;
            }
            panic!("in_flight stayed {} (wanted {n})", store.in_flight());
        }
    };
    assert_eq!(store.in_flight(), 0);
    let put = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.put(&Path::from("a"), "x".into()).await }
    });
    // Held at the server: its authentication is in flight as part of the request.
    in_flight(1).await;
    hold.add_permits(2);
    put.await.unwrap().unwrap();
    assert_eq!(store.in_flight(), 0);
    // A caller that gives up (a timeout, an abandoned renewal) is no longer counted.
    let put = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.put(&Path::from("b"), "x".into()).await }
    });
    in_flight(1).await;
    put.abort();
    assert!(put.await.unwrap_err().is_cancelled());
    assert_eq!(store.in_flight(), 0);
}
