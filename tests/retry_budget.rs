//! `[bank] request_timeout` and `[bank] retry_timeout` bound the store client: against a store
//! that stops answering, a request gives up inside the budget the configuration gate judges
//! with ([`ClientLimits::budget`]), not after the client's default minutes. On S3 (moto) and
//! Swift (with its re-authentication loop) behind a proxy that stops forwarding.

#![allow(clippy::disallowed_methods)] // real servers on real time

use std::time::{Duration, Instant};

use banklease::config::BankConfig;
use banklease::Bank;
use banklease_testkit::backends::Backend;
use banklease_testkit::stall::StallingProxy;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

/// Open `url` with a 1 s request timeout and 2 s of retries (a 3.5 s budget), put once while the
/// store answers, then again while it does not: the second must fail inside the budget.
async fn gives_up_inside_the_budget(url: &str, proxy: &StallingProxy) {
    let config = BankConfig {
        url: url.to_owned(),
        request_timeout: Some(Duration::from_secs(1)),
        retry_timeout: Some(Duration::from_secs(2)),
        ca_file: None,
        credentials: None,
    };
    let bank = Bank::open_configured(&config, false).unwrap();
    let budget = bank.retry_budget();
    assert_eq!(budget, Duration::from_millis(3_500), "{url}");
    let path = Path::from(format!("budget-{}", uuid::Uuid::new_v4().simple()));
    bank.store()
        .put(&path, PutPayload::from_static(b"answered"))
        .await
        .unwrap_or_else(|e| panic!("{url}: a put while the store answers: {e}"));
    proxy.stall();
    let sent = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        bank.store().put(&path, PutPayload::from_static(b"stalled")),
    )
    .await;
    let took = sent.elapsed();
    proxy.resume();
    let result = result.unwrap_or_else(|_| panic!("{url}: still retrying after 60 s"));
    assert!(result.is_err(), "{url}: a stalled put succeeded");
    assert!(
        took <= budget + Duration::from_millis(500),
        "{url}: gave up after {took:?}, past the budget {budget:?}"
    );
}

#[tokio::test]
async fn a_stalled_store_is_given_up_on_inside_the_configured_budget() {
    let mut ran = false;
    if Backend::S3.available() {
        let endpoint = std::env::var("AWS_ENDPOINT").expect("AWS_ENDPOINT");
        let proxy = StallingProxy::start(endpoint.trim_start_matches("http://")).await;
        // One test in this binary: the variable the S3 builder reads is this process's own.
        std::env::set_var("AWS_ENDPOINT", proxy.url());
        let bucket = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".into());
        gives_up_inside_the_budget(&format!("s3://{bucket}/budget"), &proxy).await;
        std::env::set_var("AWS_ENDPOINT", endpoint);
        ran = true;
    }
    if Backend::Swift.available() {
        let auth = std::env::var("ST_AUTH").expect("ST_AUTH");
        let upstream = url::Url::parse(&auth).unwrap();
        let host = format!(
            "{}:{}",
            upstream.host_str().unwrap(),
            upstream.port_or_known_default().unwrap()
        );
        let proxy = StallingProxy::start(&host).await;
        // Authentication and storage both through the proxy.
        std::env::set_var("ST_AUTH", format!("{}/auth/v1.0", proxy.url()));
        let user = std::env::var("ST_USER").unwrap_or_default();
        let account = user.split(':').next().unwrap_or("test");
        std::env::set_var(
            "OS_STORAGE_URL",
            format!("{}/v1/AUTH_{account}", proxy.url()),
        );
        let container =
            std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".into());
        gives_up_inside_the_budget(&format!("swift://{container}/budget"), &proxy).await;
        std::env::set_var("ST_AUTH", auth);
        std::env::remove_var("OS_STORAGE_URL");
        ran = true;
    }
    if !ran {
        eprintln!("skipped: set BANKLEASE_TEST_S3=1 or BANKLEASE_TEST_SWIFT=1 to run");
    }
}
