//! The capability probe through the public API (and on stores that banklease's own unit tests cannot
//! build: the test doubles are in `banklease-testkit`, which depends on banklease).

use std::sync::Arc;

use banklease::capability::Condition;
use banklease::capability::RenewalMechanism;
use banklease::doctor::probe_create_race;
use banklease::Bank;
use banklease_testkit::failing::FailingStore;

#[tokio::test]
async fn a_store_ignoring_conditions_fails_the_race() {
    let store = FailingStore::new(object_store::memory::InMemory::new());
    store.set_ignore_conditions(true);
    let bank = Bank::from_store(Arc::new(store), "", "ignoring");
    let race = probe_create_race(&bank, 4, 2).await.unwrap();
    assert!(!race.looked_atomic());
    assert_eq!(race.max_winners, 4);
}

#[tokio::test]
async fn memory_enforces_both() {
    let bank = Bank::open("memory://").unwrap();
    let caps = bank.capabilities().await.unwrap();
    assert_eq!(caps.create_if_absent, Condition::Enforced);
    assert_eq!(caps.conditional_overwrite, Condition::Enforced);
    assert_eq!(caps.renewal, RenewalMechanism::ConditionalUpdate);
}

#[tokio::test]
async fn local_files_enforce_update() {
    let dir = tempfile::tempdir().unwrap();
    let bank = Bank::open(&format!("file://{}", dir.path().display())).unwrap();
    let caps = bank.capabilities().await.unwrap().clone();
    assert_eq!(caps.create_if_absent, Condition::Enforced);
    assert_eq!(caps.conditional_overwrite, Condition::Enforced);
    assert_eq!(caps.renewal, RenewalMechanism::ConditionalUpdate);
    // The probe cleans up after itself.
    let probe_dir = dir.path().join("_banklease/probe");
    let left = std::fs::read_dir(&probe_dir)
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);
}

/// Ceph RGW compares `If-Match` with its unquoted ETags, so the quoted ETag it returns itself is
/// refused. Opened as an S3 bank is, the probe finds the unquoted form honoured (and atomic
/// under its race), every condition is sent so, and renewals are conditional overwrites again;
/// without the adapter (a bank from the bare store, as `s3://` was opened before) the
/// conditional overwrite is refused and renewals fall back to verify-then-overwrite.
#[tokio::test]
async fn a_store_comparing_unquoted_etags_gets_the_form_it_honours() {
    use banklease::clock::MockClock;
    use banklease::{LeaseWindows, OwnerId, OwnerLease};
    use banklease_testkit::rgw::RgwEtags;
    use std::time::Duration;

    let bare = Bank::from_store(
        Arc::new(RgwEtags::new(object_store::memory::InMemory::new())),
        "",
        "s3://rgw/bare",
    );
    let caps = bare.capabilities().await.unwrap().clone();
    assert_eq!(caps.conditional_overwrite, Condition::Refused);
    assert_eq!(caps.renewal, RenewalMechanism::VerifyThenOverwrite);
    assert!(!caps.unquoted_etags);

    let bank = banklease_testkit::made(Bank::from_s3_compatible(
        Arc::new(RgwEtags::new(object_store::memory::InMemory::new())),
        "",
        "s3://rgw/bank",
    ));
    let caps = bank.capabilities().await.unwrap().clone();
    assert_eq!(caps.conditional_overwrite, Condition::Enforced);
    assert_eq!(caps.renewal, RenewalMechanism::ConditionalUpdate);
    assert!(caps.unquoted_etags);
    // The doctor's If-Match race goes through the same adapter.
    let race = banklease::doctor::probe_update_race(&bank, 8, 3)
        .await
        .unwrap();
    assert!(race.looked_atomic(), "{race:?}");
    // An owner renews by conditional overwrite, many times over.
    let clock = MockClock::new();
    let windows = LeaseWindows::new(
        Duration::from_secs(1),
        Duration::from_secs(5),
        Duration::from_millis(500),
    )
    .unwrap();
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(clock.clone()))
        .await
        .unwrap();
    for _ in 0..5 {
        clock.advance(Duration::from_secs(1));
        lease.renew().await.unwrap();
        assert!(lease.check_validity());
    }
}

/// `init` runs the checks leasing needs before it writes anything: on a store that ignores
/// create-if-absent (Ceph RGW's Swift API) it refuses with the reason, and no descriptor is
/// written, so no later command takes the prefix for a bank.
#[tokio::test]
async fn init_refuses_a_store_where_leases_cannot_be_kept_and_writes_nothing() {
    use futures::TryStreamExt;
    let store = FailingStore::new(object_store::memory::InMemory::new());
    store.set_ignore_conditions(true);
    let bank = Bank::from_store(Arc::new(store.clone()), "bank", "ignoring://bank");
    let err = banklease::layout::init(&bank)
        .await
        .expect_err("a store that ignores create-if-absent is refused");
    assert!(
        matches!(&err, banklease::Error::Unsupported { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("create-if-absent"), "{err}");
    let left: Vec<_> = object_store::ObjectStore::list(&store, None)
        .try_collect()
        .await
        .unwrap();
    assert!(left.is_empty(), "init left {left:?}");
}
