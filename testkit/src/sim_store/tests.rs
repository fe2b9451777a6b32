//! The store's own tests: object_store's conformance suite, stamps on the store clock, atomic
//! conditions, stale reads and the observer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use banklease::clock::MockClock;
use chrono::TimeDelta;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};

use super::*;

fn store() -> (MockClock, SimStore) {
    let world = MockClock::new();
    (world.clone(), SimStore::new(StoreClock::new(world)))
}

#[tokio::test]
async fn conformance() {
    use object_store::integration::*;
    let (_, store) = store();
    put_get_delete_list(&store).await;
    list_with_offset_exclusivity(&store).await;
    get_opts(&store).await;
    list_uses_directories_correctly(&store).await;
    list_with_delimiter(&store).await;
    rename_and_copy(&store).await;
    copy_if_not_exists(&store).await;
    copy_rename_nonexistent_object(&store).await;
    stream_get(&store).await;
    put_opts(&store, true).await;
    put_get_attributes(&store).await;
}

#[tokio::test]
async fn stamps_come_from_the_store_clock() {
    let (world, store) = store();
    let clock = store.clock().clone();
    let a = Path::from("a");
    store.put(&a, "1".into()).await.unwrap();
    let t0 = store.head(&a).await.unwrap().last_modified;
    assert_eq!(t0, clock.now());
    world.advance(Duration::from_secs(3));
    clock.jump_forward(Duration::from_millis(250));
    store.put(&a, "2".into()).await.unwrap();
    let t1 = store.head(&a).await.unwrap().last_modified;
    assert_eq!((t1 - t0).num_milliseconds(), 3_250);
    assert_eq!(clock.jumped(), Duration::from_millis(250));
    // A skewed store is hours away from everyone's wall clock; stamps follow it.
    let skewed = StoreClock::new(world.clone()).with_skew(TimeDelta::hours(5));
    let other = SimStore::new(skewed);
    other.put(&a, "x".into()).await.unwrap();
    let t2 = other.head(&a).await.unwrap().last_modified;
    // Five hours ahead of the world, without the first store's 250 ms jump.
    assert_eq!((t2 - t1).num_milliseconds(), 5 * 3_600_000 - 250);
}

#[tokio::test]
async fn conditions_are_atomic_and_update_can_be_refused() {
    let (_, store) = store();
    let a = Path::from("a");
    let first = store
        .put_opts(&a, "1".into(), PutMode::Create.into())
        .await
        .unwrap();
    let again = store.put_opts(&a, "2".into(), PutMode::Create.into()).await;
    assert!(matches!(
        again,
        Err(object_store::Error::AlreadyExists { .. })
    ));
    let stale = UpdateVersion {
        e_tag: Some("\"999\"".into()),
        version: None,
    };
    let r = store
        .put_opts(&a, "3".into(), PutMode::Update(stale).into())
        .await;
    assert!(matches!(r, Err(object_store::Error::Precondition { .. })));
    let current = UpdateVersion::from(first);
    store
        .put_opts(&a, "4".into(), PutMode::Update(current.clone()).into())
        .await
        .unwrap();
    store.refuse_conditional_update(true);
    let r = store
        .put_opts(&a, "5".into(), PutMode::Update(current).into())
        .await;
    assert!(matches!(r, Err(object_store::Error::NotImplemented { .. })));
    let body = store.get(&a).await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], b"4");
}

#[tokio::test]
async fn concurrent_creates_have_one_winner() {
    let (_, store) = store();
    let p = Path::from("decision");
    let attempts = (0..16).map(|i| {
        let store = store.clone();
        let p = p.clone();
        async move {
            store
                .put_opts(&p, format!("{i}").into(), PutMode::Create.into())
                .await
                .is_ok()
        }
    });
    let wins = futures::future::join_all(attempts).await;
    assert_eq!(wins.iter().filter(|w| **w).count(), 1);
}

#[tokio::test]
async fn stale_reads_return_a_version_current_within_the_lag() {
    let (world, store) = store();
    let p = Path::from("lease");
    let lag = Duration::from_millis(500);
    store.set_stale_reads(lag, 1.0, 3);
    // Versions 0..5 written 200 ms apart; then deleted.
    for v in 0..5u8 {
        store.put(&p, vec![b'0' + v].into()).await.unwrap();
        world.advance(Duration::from_millis(200));
    }
    // Now 200 ms after version 4: a read may see version 2 (until 100 ms before the
    // lag's horizon), 3 or 4, never older, and never absent.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let got = store.get(&p).await.unwrap().bytes().await.unwrap();
        seen.insert(got[0] - b'0');
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [2, 3, 4]);
    assert!(store.stale_reads() > 0);
    // Deleted, but a lagging replica may still have it; creates see the latest state.
    store.delete(&p).await.unwrap();
    let mut found = 0;
    for _ in 0..100 {
        found += u32::from(store.head(&p).await.is_ok());
    }
    assert!(
        found > 50,
        "a deleted object is still read from a lagging replica"
    );
    assert!(store
        .put_opts(&p, "x".into(), PutMode::Create.into())
        .await
        .is_ok());
    // Once the lag has passed, every read is current.
    world.advance(lag + Duration::from_millis(1));
    for _ in 0..50 {
        let got = store.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"x");
    }
    // A new object is not yet visible to a lagging replica.
    let q = Path::from("fresh");
    store.put(&q, "y".into()).await.unwrap();
    let mut missing = 0;
    for _ in 0..100 {
        missing += u32::from(store.head(&q).await.is_err());
    }
    assert!(missing > 50, "{missing}");
    store.set_stale_reads(Duration::ZERO, 0.0, 0);
    assert!(store.head(&q).await.is_ok());
}

#[tokio::test]
async fn observer_sees_each_mutation_when_it_happens() {
    let (world, store) = store();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    store.set_observer(Some(Arc::new(
        move |m: &Mutation<'_>, view: &StoreView<'_>| {
            let exists = view.get(m.path).is_some();
            log.lock()
                .unwrap()
                .push((m.kind, m.path.to_string(), exists));
        },
    )));
    let a = Path::from("x/a");
    store
        .put_opts(&a, "1".into(), PutMode::Create.into())
        .await
        .unwrap();
    world.advance(Duration::from_secs(1));
    store.copy(&a, &Path::from("x/b")).await.unwrap();
    store.delete(&a).await.unwrap();
    store.delete(&a).await.unwrap(); // missing: no mutation
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (MutationKind::Create, "x/a".to_owned(), true),
            (MutationKind::Copy, "x/b".to_owned(), true),
            (MutationKind::Delete, "x/a".to_owned(), false),
        ]
    );
    assert_eq!(store.objects(Some(&Path::from("x"))).len(), 1);
}
