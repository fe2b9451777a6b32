//! The wrapper's own tests: seeded faults, timeouts, late answers, ambiguous creates, lagging
//! listings, and object_store's conformance suite without faults.

use std::time::Duration;

use banklease::clock::MockClock;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use super::*;

fn p(s: &str) -> Path {
    Path::from(s)
}

async fn listed(store: &FailingStore<InMemory>) -> Vec<String> {
    let v: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
    v.into_iter().map(|m| m.location.to_string()).collect()
}

#[tokio::test]
async fn error_rates_are_seeded_and_after_strikes_land() {
    let outcomes = |seed| async move {
        let store = FailingStore::new(InMemory::new()).with_seed(seed);
        store.set_error_rate(Op::Put, Strike::After, 0.5);
        let mut v = Vec::new();
        for i in 0..40 {
            v.push(store.put(&p(&format!("k{i}")), "x".into()).await.is_ok());
        }
        // Every write landed, failed or not.
        assert_eq!(listed(&store).await.len(), 40);
        (v, store.faults())
    };
    let (a, faults) = outcomes(3).await;
    assert_eq!(a, outcomes(3).await.0);
    assert_ne!(a, outcomes(4).await.0);
    assert_eq!(
        faults.errors_after,
        a.iter().filter(|ok| !**ok).count() as u64
    );
    assert!(
        faults.errors_after > 5 && faults.errors_after < 35,
        "{faults:?}"
    );
}

#[tokio::test]
async fn timeouts_fail_after_the_timeout_and_may_have_landed() {
    let clock = MockClock::new();
    let store = FailingStore::new(InMemory::new())
        .with_clock(clock.clone())
        .with_seed(11);
    store.set_timeout(Op::Put, Some((Duration::from_secs(2), 1.0)));
    for i in 0..40 {
        let before = clock.elapsed();
        let err = store.put(&p(&format!("k{i}")), "x".into()).await;
        assert!(err.unwrap_err().to_string().contains("timed out"));
        assert_eq!(clock.elapsed() - before, Duration::from_secs(2));
    }
    let f = store.faults();
    let landed = listed(&store).await.len() as u64;
    assert_eq!((f.timeouts_landed, f.timeouts_lost), (landed, 40 - landed));
    assert!(landed > 5 && landed < 35, "{f:?}");
    // A latency that reaches the timeout times out too; one below it does not.
    store.set_timeout(Op::Put, Some((Duration::from_secs(2), 0.0)));
    store.set_latency(Op::Put, Duration::from_secs(2));
    assert!(store.put(&p("slow"), "x".into()).await.is_err());
    store.set_latency(Op::Put, Duration::from_secs(1));
    assert!(store.put(&p("fast"), "x".into()).await.is_ok());
}

#[tokio::test]
async fn sleeping_latency_waits_for_the_driver() {
    let clock = MockClock::new();
    let store = FailingStore::new(InMemory::new()).with_sleeping_clock(clock.clone());
    store.set_latency(Op::Put, Duration::from_secs(1));
    let s = store.clone();
    let call = tokio::spawn(async move { s.put(&p("a"), "x".into()).await });
    tokio::task::yield_now().await;
    assert!(!call.is_finished());
    assert_eq!(
        clock.elapsed(),
        Duration::ZERO,
        "sleeping never advances the clock"
    );
    clock.advance(Duration::from_secs(1));
    call.await.unwrap().unwrap();
}

#[tokio::test]
async fn late_answers_arrive_after_the_store_served_them() {
    let clock = MockClock::new();
    let store = FailingStore::new(InMemory::new())
        .with_clock(clock.clone())
        .with_seed(5);
    // A timeout shorter than the delays: a late answer is never turned into one.
    store.set_timeout(Op::Get, Some((Duration::from_millis(10), 0.0)));
    store.set_late_answers(Op::Get, 1.0, Duration::from_secs(4));
    store.put(&p("a"), "1".into()).await.unwrap();
    let mut waited = Vec::new();
    for _ in 0..20 {
        let before = clock.elapsed();
        let got = store.get(&p("a")).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"1");
        waited.push(clock.elapsed() - before);
    }
    assert!(waited.iter().all(|w| *w <= Duration::from_secs(4)));
    assert!(
        waited.iter().any(|w| *w > Duration::from_secs(1)),
        "{waited:?}"
    );
    assert_eq!(store.faults().late_answers, 20);
    assert_eq!(
        store.faults().timeouts_landed + store.faults().timeouts_lost,
        0
    );
}

#[tokio::test]
async fn ambiguous_creates_land_and_fail_and_a_retry_meets_its_own_object() {
    let store = FailingStore::new(InMemory::new()).with_seed(9);
    store.set_create_error_after(1.0);
    let err = store
        .put_opts(&p("c"), "mine".into(), object_store::PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("create landed"), "{err}");
    // The create landed; a retry is refused as AlreadyExists and must read back.
    let retry = store
        .put_opts(&p("c"), "mine".into(), object_store::PutMode::Create.into())
        .await;
    assert!(matches!(
        retry,
        Err(object_store::Error::AlreadyExists { .. })
    ));
    let body = store.get(&p("c")).await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], b"mine");
    // Plain overwrites are not creates.
    store.put(&p("o"), "x".into()).await.unwrap();
    let f = store.faults();
    assert_eq!((f.creates_ambiguous, f.errors_after), (1, 0), "{f:?}");
}

#[tokio::test]
async fn listings_lag_behind_writes_and_deletes() {
    let clock = MockClock::new();
    let store = FailingStore::new(InMemory::new()).with_clock(clock.clone());
    store.put(&p("old"), "x".into()).await.unwrap();
    store.put(&p("kept"), "x".into()).await.unwrap();
    store.set_listing_lag(Duration::from_secs(5));
    store.put(&p("a/new"), "x".into()).await.unwrap();
    store.delete(&p("old")).await.unwrap();
    // Overwriting a listed object does not hide it.
    store.put(&p("kept"), "y".into()).await.unwrap();
    // The new object is hidden, the deleted one still shown.
    assert_eq!(listed(&store).await, ["kept", "old"]);
    let delimited = store.list_with_delimiter(None).await.unwrap();
    assert_eq!(delimited.objects.len(), 2);
    // A read is not a listing: it sees the truth.
    assert!(store.head(&p("a/new")).await.is_ok());
    assert!(store.head(&p("old")).await.is_err());
    clock.advance(Duration::from_secs(5));
    assert_eq!(listed(&store).await, ["a/new", "kept"]);
    let f = store.faults();
    assert_eq!((f.listing_hidden, f.listing_ghosts), (1, 2), "{f:?}");
    store.heal();
    store.put(&p("b"), "x".into()).await.unwrap();
    assert_eq!(listed(&store).await, ["a/new", "b", "kept"]);
}

#[tokio::test]
async fn conformance_without_faults() {
    use object_store::integration::*;
    let store = FailingStore::new(InMemory::new());
    put_get_delete_list(&store).await;
    list_with_offset_exclusivity(&store).await;
    get_opts(&store).await;
    list_uses_directories_correctly(&store).await;
    list_with_delimiter(&store).await;
    rename_and_copy(&store).await;
    copy_if_not_exists(&store).await;
    stream_get(&store).await;
    put_opts(&store, true).await;
}
