//! The backend harness is `banklease_testkit::backends`; this module keeps, on top of it, the
//! names that the GC crate's tests (which include this file by path) still use.
#![allow(dead_code)]

use std::sync::Arc;

use banklease::clock::MockClock;
use banklease::Bank;
use banklease_testkit::failing::FailingStore;
use object_store::ObjectStore;

pub use banklease_testkit::backends::{backends, Backend};

/// Keeps a test's bank alive (a temporary directory for `file:`).
pub type Guard = banklease_testkit::backends::TestBank;

/// A fresh bank (made by `init`) on `backend` (a unique prefix on the shared servers).
pub async fn plain_bank(backend: Backend) -> (Bank, Guard) {
    let guard = backend.open().await;
    (guard.bank.clone(), guard)
}

/// A fresh bank on `backend` behind a `FailingStore` driven by `clock`.
pub async fn bank(
    backend: Backend,
    clock: &MockClock,
) -> (Bank, FailingStore<Arc<dyn ObjectStore>>, Guard) {
    let guard = backend.open().await;
    let (bank, failing) = guard.with_faults(clock);
    (bank, failing, guard)
}
