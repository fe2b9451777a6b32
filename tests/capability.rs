//! The capability probe through the public API (and on stores that banklease's own unit tests cannot
//! build: the test doubles are in `banklease-testkit`, which depends on banklease).

use std::sync::Arc;

use banklease::doctor::probe_create_race;
use banklease::{Bank, Condition, RenewalMechanism};
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
