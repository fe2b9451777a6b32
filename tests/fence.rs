//! Fenced writes never let a stale holder overwrite its successor, whatever the store's ETags
//! are made of.
//!
//! Holder A (token 5) reads the guarded object's version and is paused before its conditional
//! write (its store's PUTs sleep on a mock clock the test holds); the next holder B (token 6)
//! rewrites the *same bytes* the object already holds; then A resumes. Where the ETag is a hash
//! of the content (S3, moto, MinIO, Ceph) B's write leaves the ETag as A read it, so an If-Match
//! on it would let A's stale write land — in a versioned bucket too, where each write gets a new
//! version but the condition is on the ETag alone. On memory and `file:` banks, on S3 (moto, a
//! plain and a versioned bucket) with `BANKLEASE_TEST_S3=1` and on Azure (Azurite) with
//! `BANKLEASE_TEST_AZURE=1`, and the variables `.ci/start-s3.sh` / `.ci/start-azurite.sh` print.
#![allow(clippy::disallowed_methods)] // real time for bounded polling only

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::MockClock;
use banklease::lock::fence::guarded_put;
use banklease::lock::fence::Fence;
use banklease::{Bank, Error};
use banklease_testkit::failing::{FailingStore, Op};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

/// Suite: run by each backend below.
async fn a_paused_stale_holder_never_overwrites_an_identical_rewrite(bank: Bank) {
    let path = bank.path(&["reports", "nightly.json"]);
    let fence = |value| Fence {
        lock: "jobs/nightly".parse().unwrap(),
        value,
    };
    // A's store: the same bank, whose PUTs can be held back on a clock the test drives.
    let clock = MockClock::new();
    let a_store = FailingStore::new(Arc::clone(bank.store())).with_sleeping_clock(clock.clone());
    let a_bank = bank.with_store(Arc::new(a_store.clone()));

    // A held the lock with token 5 and wrote "v1" (the sidecar now holds 5).
    let first = guarded_put(&a_bank, &fence(5), &path, PutPayload::from_static(b"v1")).await;
    if let Err(e) = &first {
        // A store whose ETags repeat may refuse fenced writes outright: then nothing of A's
        // can ever land, and neither can anyone else's.
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        let b = guarded_put(&bank, &fence(6), &path, PutPayload::from_static(b"v1")).await;
        assert!(matches!(b, Err(Error::Unsupported { .. })), "{b:?}");
        assert!(bank.store().head(&path).await.is_err(), "nothing written");
        return;
    }

    // A writes again with token 5, and stops before its conditional PUT.
    a_store.set_latency(Op::Put, Duration::from_secs(3600));
    let puts_before = a_store.calls(Op::Put);
    let stale = tokio::spawn({
        let (a_bank, path, fence) = (a_bank.clone(), path.clone(), fence(5));
        async move { guarded_put(&a_bank, &fence, &path, PutPayload::from_static(b"A-stale")).await }
    });
    for _ in 0..500 {
        if a_store.calls(Op::Put) > puts_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        a_store.calls(Op::Put) > puts_before,
        "A never reached its write"
    );

    // Meanwhile the lock passed to B (token 6), which rewrote the bytes the object holds.
    guarded_put(&bank, &fence(6), &path, PutPayload::from_static(b"v1"))
        .await
        .unwrap();

    // A resumes.
    a_store.set_latency(Op::Put, Duration::ZERO);
    clock.advance(Duration::from_secs(3600));
    let stale = tokio::time::timeout(Duration::from_secs(30), stale)
        .await
        .expect("A's write finished")
        .unwrap();
    let body = bank
        .store()
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        &body[..],
        b"v1",
        "the stale holder's write replaced its successor's (A got {stale:?})"
    );
    assert!(
        matches!(
            stale,
            Err(Error::StaleFence {
                fence: 5,
                seen: 6,
                ..
            })
        ),
        "{stale:?}"
    );
}

#[tokio::test]
async fn memory() {
    let bank = Bank::open(&format!("memory:///{}", uuid::Uuid::new_v4().simple())).unwrap();
    a_paused_stale_holder_never_overwrites_an_identical_rewrite(bank).await;
}

#[tokio::test]
async fn file() {
    let dir = tempfile::tempdir().unwrap();
    let bank = Bank::open(&format!("file://{}", dir.path().display())).unwrap();
    a_paused_stale_holder_never_overwrites_an_identical_rewrite(bank).await;
}

#[tokio::test]
async fn s3() {
    if std::env::var("BANKLEASE_TEST_S3").as_deref() != Ok("1") {
        eprintln!("skipping: set BANKLEASE_TEST_S3=1 and the variables `.ci/start-s3.sh` prints");
        return;
    }
    let bucket = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".to_owned());
    let url = format!(
        "s3://{bucket}/fence-tests/{}",
        uuid::Uuid::new_v4().simple()
    );
    let bank = Bank::open(&url).unwrap();
    a_paused_stale_holder_never_overwrites_an_identical_rewrite(bank).await;
}

/// A bucket with versioning on: every write gets a new version id, but S3 conditions on the
/// ETag alone, which stays the content's MD5 — a new version must not pass for a new ETag.
#[tokio::test]
async fn s3_versioned_bucket() {
    if std::env::var("BANKLEASE_TEST_S3").as_deref() != Ok("1") {
        eprintln!("skipping: set BANKLEASE_TEST_S3=1 and the variables `.ci/start-s3.sh` prints");
        return;
    }
    let bucket = std::env::var("S3_VERSIONED_BUCKET")
        .expect("S3_VERSIONED_BUCKET (.ci/start-s3.sh makes the versioned bucket)");
    let url = format!(
        "s3://{bucket}/fence-tests/{}",
        uuid::Uuid::new_v4().simple()
    );
    let bank = Bank::open(&url).unwrap();
    a_paused_stale_holder_never_overwrites_an_identical_rewrite(bank).await;
}

#[tokio::test]
async fn azure() {
    if std::env::var("BANKLEASE_TEST_AZURE").as_deref() != Ok("1") {
        eprintln!(
            "skipping: set BANKLEASE_TEST_AZURE=1 and the variables `.ci/start-azurite.sh` prints"
        );
        return;
    }
    let container =
        std::env::var("AZURE_CONTAINER_NAME").unwrap_or_else(|_| "banklease-test".to_owned());
    let url = format!(
        "az://{container}/fence-tests/{}",
        uuid::Uuid::new_v4().simple()
    );
    let bank = Bank::open(&url).expect("configure Azure from the AZURE_* variables");
    a_paused_stale_holder_never_overwrites_an_identical_rewrite(bank).await;
}

/// Nothing of the suite's store wrapper is lost on the way: the wrapped bank is the same bank.
#[tokio::test]
async fn the_held_back_store_is_the_same_bank() {
    let bank = Bank::open("memory:///same").unwrap();
    let wrapped = bank.with_store(Arc::new(FailingStore::new(Arc::clone(bank.store()))));
    let path: Path = bank.path(&["x"]);
    wrapped.store().put(&path, "1".into()).await.unwrap();
    assert!(bank.store().head(&path).await.is_ok());
}

/// On a store whose ETag is the content's hash (moto, Ceph RGW), a fenced put is refused before
/// the lock is read, by the three writes that show a stale condition holding, not after the
/// named-lock races (over a hundred writes) that reading the lock measures first: `lock put`
/// from a holder's COMMAND is refused at once there.
#[tokio::test]
async fn a_store_whose_etags_repeat_refuses_a_fenced_put_without_racing() {
    use banklease::lock::Locks;
    use banklease_testkit::backends::Backend;
    for backend in [Backend::S3, Backend::Rgw] {
        if !backend.available() {
            continue;
        }
        let clock = MockClock::new();
        let test_bank = backend.open().await;
        // The bank's capability probe is made before the count: every bank makes it.
        test_bank.bank.capabilities().await.unwrap();
        let (bank, faults) = test_bank.with_faults(&clock);
        bank.capabilities().await.unwrap();
        let before = faults.calls(Op::Put);
        let locks = Locks::new(&bank, "t", Arc::new(clock.clone())).unwrap();
        let err = locks
            .fenced_put(
                "k",
                1,
                &bank.path(&["fenced", "x"]),
                PutPayload::from_static(b"x"),
            )
            .await
            .unwrap_err();
        match &err {
            Error::Unsupported { usage, detail, .. } => {
                assert_eq!(*usage, "fenced writes", "{backend:?}: {err}");
                assert!(detail.contains("hash of the content"), "{backend:?}: {err}");
            }
            other => panic!("{backend:?}: expected Unsupported, got {other}"),
        }
        // The trial: the same bytes twice, then the first write's condition; and the verdict
        // kept in the bank for the next process.
        let puts = faults.calls(Op::Put) - before;
        assert!(
            puts <= 4,
            "{backend:?}: {puts} writes to refuse a fenced put"
        );
    }
}
