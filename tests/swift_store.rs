//! The native Swift backend against a live Swift on 127.0.0.1.
//!
//! Runs only with `BANKLEASE_TEST_SWIFT=1` and the TempAuth variables that `.ci/start-swift.sh`
//! prints (`ST_AUTH`, `ST_USER`, `ST_KEY`); otherwise every test says it skips and passes.
//! Each test works in its own fresh container, so they run in parallel and the conformance
//! suite (which deletes everything it finds) sees an empty store.
//!
//! Nothing here runs Swift's expirer or container-updater: expired objects stay listed.
#![allow(clippy::disallowed_methods)] // tests wait on real time (expiry)

use std::sync::Arc;
use std::time::{Duration, Instant};

use banklease::store::{SwiftBuilder, SwiftStore};
use banklease::Bank;
use futures::TryStreamExt;
use http::{HeaderMap, HeaderValue};
use object_store::integration;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, Error, ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion,
};

const SKIP: &str = "skipping: set BANKLEASE_TEST_SWIFT=1 (the .ci/run script starts Swift)";

/// Whether the live tests run; says so when they do not.
fn enabled() -> bool {
    if std::env::var("BANKLEASE_TEST_SWIFT").as_deref() == Ok("1") {
        return true;
    }
    eprintln!("{SKIP}");
    false
}

macro_rules! live {
    () => {
        if !enabled() {
            return;
        }
    };
}

fn container_name(tag: &str) -> String {
    format!("bl-{tag}-{}", uuid::Uuid::new_v4().simple())
}

/// A store on a new, empty container.
async fn fresh_with(tag: &str, builder: SwiftBuilder) -> SwiftStore {
    let store = builder
        .with_container(container_name(tag))
        .build()
        .expect("configure Swift from ST_AUTH/ST_USER/ST_KEY (see .ci/start-swift.sh)");
    store
        .create_container()
        .await
        .expect("create the test container");
    store
}

async fn fresh(tag: &str) -> SwiftStore {
    fresh_with(tag, SwiftBuilder::from_env()).await
}

/// Best effort: delete what is listed, then the container. Containers that still list expired
/// (not yet reaped) objects cannot be deleted and stay behind.
async fn cleanup(store: &SwiftStore) {
    let listed: Vec<Path> = store
        .list(None)
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .unwrap_or_default();
    for path in listed {
        let _ = store.delete(&path).await;
    }
    let _ = store.delete_container().await;
}

async fn listed(store: &SwiftStore) -> Vec<Path> {
    store
        .list(None)
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .unwrap()
}

async fn body(store: &SwiftStore, path: &Path) -> String {
    let bytes = store.get(path).await.unwrap().bytes().await.unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

// ---- object_store's conformance suite ---------------------------------------------------------

macro_rules! conformance {
    ($name:ident, $tag:literal, |$store:ident| $body:expr) => {
        #[tokio::test]
        async fn $name() {
            live!();
            let $store = fresh($tag).await;
            $body;
            cleanup(&$store).await;
        }
    };
}

conformance!(suite_put_get_delete_list, "pgdl", |s| {
    integration::put_get_delete_list(&s).await
});
conformance!(suite_get_opts, "getopts", |s| integration::get_opts(&s)
    .await);
// `supports_update = false`: the suite then requires `PutMode::Update` to be NotImplemented,
// which is what this backend answers because Swift ignores If-Match on PUT.
conformance!(suite_put_opts_without_update, "putopts", |s| {
    integration::put_opts(&s, false).await
});
conformance!(suite_list_uses_directories_correctly, "dirs", |s| {
    integration::list_uses_directories_correctly(&s).await
});
conformance!(suite_list_with_delimiter, "delim", |s| {
    integration::list_with_delimiter(&s).await
});
conformance!(suite_list_with_offset_exclusivity, "offset", |s| {
    integration::list_with_offset_exclusivity(&s).await
});
conformance!(suite_rename_and_copy, "copy", |s| {
    integration::rename_and_copy(&s).await
});
conformance!(suite_copy_if_not_exists, "copynx", |s| {
    integration::copy_if_not_exists(&s).await
});
conformance!(suite_copy_rename_nonexistent_object, "copymiss", |s| {
    integration::copy_rename_nonexistent_object(&s).await
});
// Attributes whose metadata keys do not round-trip through Swift are NotImplemented, which
// the suite accepts.
conformance!(suite_put_get_attributes, "attrs", |s| {
    integration::put_get_attributes(&s).await
});
conformance!(suite_get_nonexistent_object, "missing", |s| {
    let err = integration::get_nonexistent_object(&s, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
});
// Multipart uploads are Static Large Objects: parts out of order, and two uploads racing (the
// manifest written last wins).
conformance!(suite_multipart_out_of_order, "mpooo", |s| {
    integration::multipart_out_of_order(&s).await
});
conformance!(suite_multipart_race, "mprace", |s| {
    integration::multipart_race_condition(&s, true).await
});
// Not run: `stream_get` (it expects nothing listed before `complete`; an SLO's segments are
// objects of their own, listed as soon as written), `multipart`/`multipart_with_opts` (need
// `MultipartStore`), `list_paginated` (no PaginatedListStore).

#[tokio::test]
async fn suite_response_extensions_reach_the_caller() {
    live!();
    let builder =
        SwiftBuilder::from_env().with_http_connector(integration::MarkerHttpConnector::default());
    let store = fresh_with("ext", builder).await;
    integration::response_extensions(&store, false).await;
    cleanup(&store).await;
}

#[tokio::test]
async fn suite_listings_page_by_marker() {
    live!();
    // Two entries per page: every listing in these suites takes several pages.
    let store = fresh_with("paging", SwiftBuilder::from_env().with_list_limit(2)).await;
    integration::put_get_delete_list(&store).await;
    integration::list_with_delimiter(&store).await;
    integration::list_with_offset_exclusivity(&store).await;
    cleanup(&store).await;
}

// ---- Swift-specific behaviour ------------------------------------------------------------------

#[tokio::test]
async fn create_if_absent_on_an_existing_key_is_already_exists() {
    live!();
    let store = fresh("create").await;
    let path = Path::from("leases/owner-a");
    store
        .put_opts(&path, "first".into(), PutMode::Create.into())
        .await
        .unwrap();
    let err = store
        .put_opts(&path, "second".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert_eq!(body(&store, &path).await, "first");
    // The Swift-specific form says the same.
    let err = store
        .put_with_delete_after(&path, "third".into(), 60, true)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert_eq!(body(&store, &path).await, "first");
    cleanup(&store).await;
}

#[tokio::test]
async fn delete_after_hides_the_object_from_get_and_head_but_the_listing_keeps_it() {
    live!();
    let store = fresh("expiry").await;
    let path = Path::from("leases/short-lived");
    let write = store
        .put_with_delete_after(&path, "x".into(), 2, true)
        .await
        .unwrap();
    let put_at = Instant::now();
    let head = store.head_swift(&path).await.unwrap();
    let (date, delete_at) = (head.date.unwrap(), head.delete_at.unwrap());
    // X-Delete-At is whole seconds: the deadline is 1–3 s after the server's Date.
    let ahead = (delete_at - date).num_milliseconds();
    assert!(
        (1000..=3000).contains(&ahead),
        "delete_at - date = {ahead} ms"
    );
    assert!(write.date.is_some() && write.e_tag.is_some(), "{write:?}");

    // Bounded wait for Swift to stop serving it.
    let gone = loop {
        match store.head(&path).await {
            Err(Error::NotFound { .. }) => break put_at.elapsed(),
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            put_at.elapsed() < Duration::from_secs(8),
            "still served after 8 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        gone > Duration::from_millis(900),
        "gone after only {gone:?}"
    );
    eprintln!("X-Delete-After: 2 → HEAD 404 after {gone:?}");
    let err = store.get(&path).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let err = store.head_swift(&path).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    // Nothing reaped it: the container listing still shows the expired object.
    assert_eq!(listed(&store).await, vec![path.clone()]);
    // And a create-if-absent onto the expired-but-listed object succeeds.
    store
        .put_opts(&path, "again".into(), PutMode::Create.into())
        .await
        .unwrap();
    assert_eq!(body(&store, &path).await, "again");
    cleanup(&store).await;
}

#[tokio::test]
async fn post_on_a_missing_object_is_not_found() {
    live!();
    let store = fresh("postmissing").await;
    let mut headers = HeaderMap::new();
    headers.insert("x-delete-after", HeaderValue::from_static("30"));
    let err = store
        .post_metadata(&Path::from("nope"), headers)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    cleanup(&store).await;
}

#[tokio::test]
async fn post_replaces_all_user_metadata_and_resets_the_expiry() {
    live!();
    let store = fresh("post").await;
    let path = Path::from("obj");
    let mut headers = HeaderMap::new();
    headers.insert("x-object-meta-a", HeaderValue::from_static("1"));
    headers.insert("x-object-meta-b", HeaderValue::from_static("2"));
    let put = store
        .put_with_headers(&path, "body".into(), headers)
        .await
        .unwrap();
    let before = store.head_swift(&path).await.unwrap();
    assert_eq!(before.user_metadata.len(), 2, "{before:?}");
    assert_eq!(before.delete_at, None);

    let mut headers = HeaderMap::new();
    headers.insert("x-object-meta-b", HeaderValue::from_static("3"));
    headers.insert("x-delete-after", HeaderValue::from_static("600"));
    let post = store.post_metadata(&path, headers).await.unwrap();
    assert!(post.date.is_some(), "{post:?}");
    let after = store.head_swift(&path).await.unwrap();
    // `a` is gone: a POST replaces all user metadata.
    assert_eq!(
        after.user_metadata.into_iter().collect::<Vec<_>>(),
        vec![("b".to_owned(), "3".to_owned())]
    );
    assert!(after.delete_at.is_some());
    assert_eq!(after.meta.e_tag, put.e_tag, "a POST keeps the ETag");
    assert!(
        after.x_timestamp > before.x_timestamp,
        "a POST moves X-Timestamp"
    );

    // A POST without X-Delete-* removes the expiry.
    store.post_metadata(&path, HeaderMap::new()).await.unwrap();
    assert_eq!(store.head_swift(&path).await.unwrap().delete_at, None);
    assert_eq!(body(&store, &path).await, "body");
    cleanup(&store).await;
}

#[tokio::test]
async fn swift_ignores_if_match_on_put_so_a_stale_etag_still_overwrites() {
    live!();
    let store = fresh("ifmatch").await;
    let path = Path::from("obj");
    let v1 = store.put(&path, "v1".into()).await.unwrap();
    store.put(&path, "v2".into()).await.unwrap();

    // Through the trait, an update-if-match is refused rather than silently not enforced.
    let err = store
        .put_opts(
            &path,
            "v3".into(),
            PutMode::Update(UpdateVersion {
                e_tag: v1.e_tag.clone(),
                version: None,
            })
            .into(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotImplemented { .. }), "{err}");
    assert_eq!(body(&store, &path).await, "v2");

    // Sent raw, the stale If-Match does not stop the write: Swift answers 201 and overwrites.
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::IF_MATCH,
        HeaderValue::from_str(v1.e_tag.as_deref().unwrap()).unwrap(),
    );
    store
        .put_with_headers(&path, "v3".into(), headers)
        .await
        .expect("Swift ignores If-Match on PUT");
    assert_eq!(body(&store, &path).await, "v3");
    cleanup(&store).await;
}

#[tokio::test]
async fn a_bogus_token_is_replaced_by_reauthenticating_once() {
    live!();
    let store = fresh("reauth").await;
    let storage_url = store.storage_url().await.unwrap();
    let bogus = SwiftBuilder::from_env()
        .with_container(store.container())
        .with_storage_url(storage_url.clone())
        .with_token("AUTH_tk_bogus_0000")
        .build()
        .unwrap();
    assert_eq!(bogus.authentications(), 0);
    let path = Path::from("after-401");
    bogus.put(&path, "ok".into()).await.unwrap();
    assert_eq!(bogus.authentications(), 1, "one 401, one re-authentication");
    bogus.head(&path).await.unwrap();
    assert_eq!(bogus.authentications(), 1, "the new token is kept");

    // Without credentials, the refused token is final, and never printed.
    let no_credentials = SwiftBuilder::new()
        .with_container(store.container())
        .with_storage_url(storage_url)
        .with_token("AUTH_tk_bogus_0000")
        .build()
        .unwrap();
    let err = no_credentials.head(&path).await.unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err}");
    assert!(!format!("{err} {err:?} {no_credentials:?}").contains("bogus_0000"));
    cleanup(&store).await;
}

#[tokio::test]
async fn a_wrong_key_is_unauthenticated_and_never_printed() {
    live!();
    let auth = std::env::var("ST_AUTH").unwrap();
    let user = std::env::var("ST_USER").unwrap();
    let store = SwiftBuilder::new()
        .with_tempauth(auth, user, "not-the-key-42")
        .with_container("whatever")
        .build()
        .unwrap();
    let err = store.head(&Path::from("x")).await.unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err}");
    let shown = format!("{err} {err:?} {store:?}");
    assert!(!shown.contains("not-the-key-42"), "{shown}");
    let real_key = std::env::var("ST_KEY").unwrap();
    let good = SwiftBuilder::from_env()
        .with_container("c")
        .build()
        .unwrap();
    assert!(!format!("{good:?}").contains(&format!("\"{real_key}\"")));
}

#[tokio::test]
async fn head_swift_reports_x_timestamp_last_modified_and_server_date() {
    live!();
    let store = fresh("head").await;
    let path = Path::from("obj");
    store.put(&path, "x".into()).await.unwrap();
    let head = store.head_swift(&path).await.unwrap();
    let ts = head.x_timestamp.unwrap();
    let lm = head.last_modified.unwrap();
    let date = head.date.unwrap();
    assert_eq!(
        head.meta.last_modified, ts,
        "last_modified is the X-Timestamp"
    );
    // Last-Modified is the X-Timestamp rounded up to the second.
    assert!(
        lm >= ts && (lm - ts) < chrono::Duration::seconds(1),
        "{lm} vs {ts}"
    );
    assert!((date - ts).num_seconds().abs() <= 5, "{date} vs {ts}");
    assert_eq!(store.head(&path).await.unwrap().last_modified, ts);
    let listed = store.list(None).try_collect::<Vec<_>>().await.unwrap();
    assert_eq!(
        listed[0].last_modified, ts,
        "listings carry the same timestamp"
    );
    let server = store.server_date().await.unwrap();
    assert!((server - date).num_seconds().abs() <= 5);
    cleanup(&store).await;
}

#[tokio::test]
async fn attributes_swift_can_store_round_trip() {
    live!();
    let store = fresh("attrs-ok").await;
    let path = Path::from("page.html");
    let attributes = Attributes::from_iter([
        (Attribute::CacheControl, "max-age=604800"),
        (
            Attribute::ContentDisposition,
            r#"attachment; filename="test.html""#,
        ),
        (Attribute::ContentEncoding, "gzip"),
        (Attribute::ContentLanguage, "en-US"),
        (Attribute::ContentType, "text/html; charset=utf-8"),
        (Attribute::Metadata("owner-id".into()), "hello   world"),
    ]);
    store
        .put_opts(&path, "x".into(), attributes.clone().into())
        .await
        .unwrap();
    assert_eq!(store.get(&path).await.unwrap().attributes, attributes);
    // Copies (server-side and client-side) carry them along.
    store.copy(&path, &Path::from("copy.html")).await.unwrap();
    store
        .copy_if_not_exists(&path, &Path::from("copy2.html"))
        .await
        .unwrap();
    for copy in ["copy.html", "copy2.html"] {
        let got = store.get(&Path::from(copy)).await.unwrap().attributes;
        assert_eq!(got, attributes, "{copy}");
    }
    cleanup(&store).await;
}

#[tokio::test]
async fn a_missing_container_is_named_in_the_error() {
    live!();
    let store = SwiftBuilder::from_env()
        .with_container(container_name("absent"))
        .build()
        .unwrap();
    let err = store.put(&Path::from("x"), "x".into()).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    let err = store.list(None).try_collect::<Vec<_>>().await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test]
async fn bank_opens_a_swift_url_from_the_environment() {
    live!();
    let store = fresh("bank").await;
    let bank = Bank::open(&format!("swift://{}/tenant-a", store.container())).unwrap();
    assert_eq!(bank.prefix().as_ref(), "tenant-a");
    let path = bank.path(&["leases", "owner-1"]);
    bank.store()
        .put_opts(
            &path,
            PutPayload::from_static(b"{}"),
            PutMode::Create.into(),
        )
        .await
        .unwrap();
    assert_eq!(
        listed(&store).await,
        vec![Path::from("tenant-a/leases/owner-1")]
    );
    let clock: banklease::clock::SharedClock = Arc::new(banklease::clock::SystemClock);
    let t = bank.store_time(&clock).await.unwrap();
    assert!(t.at.timestamp_subsec_nanos() != 0 || t.at.timestamp() > 0);
    cleanup(&store).await;
}

/// Requests by method, counted below the store (what actually reached the proxy).
#[derive(Debug, Clone, Default)]
struct Methods(Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>);

impl Methods {
    fn get(&self, method: &str) -> u64 {
        self.0.lock().unwrap().get(method).copied().unwrap_or(0)
    }
}

#[derive(Debug)]
struct Counting {
    inner: object_store::client::HttpClient,
    methods: Methods,
}

#[async_trait::async_trait]
impl object_store::client::HttpService for Counting {
    async fn call(
        &self,
        req: object_store::client::HttpRequest,
    ) -> Result<object_store::client::HttpResponse, object_store::client::HttpError> {
        *self
            .methods
            .0
            .lock()
            .unwrap()
            .entry(req.method().to_string())
            .or_default() += 1;
        self.inner.execute(req).await
    }
}

#[derive(Debug)]
struct CountingConnector(Methods);

impl object_store::client::HttpConnector for CountingConnector {
    fn connect(
        &self,
        options: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        let inner = object_store::client::ReqwestConnector::default().connect(options)?;
        Ok(object_store::client::HttpClient::new(Counting {
            inner,
            methods: self.0.clone(),
        }))
    }
}

#[tokio::test]
async fn delete_stream_deletes_in_bulk_where_the_cluster_offers_it() {
    use futures::StreamExt;
    live!();
    let methods = Methods::default();
    let store = fresh_with(
        "bulk",
        SwiftBuilder::from_env().with_http_connector(CountingConnector(methods.clone())),
    )
    .await;
    // .ci/start-swift.sh puts the bulk middleware in the pipeline (10,000 per request).
    assert_eq!(store.bulk_delete_limit().await, 10_000);
    let mut names: Vec<String> = (0..250).map(|i| format!("d/{i:03}")).collect();
    // Names that need encoding on the bulk-delete body's lines.
    names.extend(["d/sp ace+plus", "d/per%cent", "d/ünï/cöde"].map(str::to_owned));
    for n in &names {
        store
            .put(&Path::from(n.as_str()), "x".into())
            .await
            .unwrap();
    }
    let (posts, deletes) = (methods.get("POST"), methods.get("DELETE"));
    let listed = store
        .list(Some(&Path::from("d")))
        .map_ok(|m| m.location)
        .boxed();
    let deleted: Vec<Path> = store.delete_stream(listed).try_collect().await.unwrap();
    assert_eq!(deleted.len(), names.len());
    assert_eq!(methods.get("DELETE"), deletes, "no per-object DELETE");
    assert!(
        methods.get("POST") - posts <= 2,
        "{} bulk requests for {} objects",
        methods.get("POST") - posts,
        names.len()
    );
    let left: Vec<_> = store.list(None).try_collect().await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    // Objects already gone count as deleted, as a single DELETE's 404 does for the GC.
    let missing = futures::stream::iter(["d/000", "d/001"].map(|p| Ok(Path::from(p)))).boxed();
    let again: Vec<Path> = store.delete_stream(missing).try_collect().await.unwrap();
    assert_eq!(again.len(), 2);
    cleanup(&store).await;
}
