//! The capability probe through the public API, on stores that banklease's own unit tests cannot
//! build (the test doubles are in `banklease-testkit`, which depends on banklease).

use std::sync::Arc;

use banklease::capability::probe_create_race;
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
