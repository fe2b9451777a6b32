//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use banklease::clock::MockClock;
use banklease::failing::FailingStore;
use banklease::Bank;
use object_store::ObjectStore;

/// The backends every suite runs on. Real servers join through `BANKLEASE_TEST_*` variables.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    File,
}

pub const BACKENDS: [Backend; 2] = [Backend::Memory, Backend::File];

/// A bank on `backend` behind a `FailingStore` driven by `clock`. The tempdir (for `file`)
/// lives as long as the returned guard.
pub fn bank(
    backend: Backend,
    clock: &MockClock,
) -> (
    Bank,
    FailingStore<Arc<dyn ObjectStore>>,
    Option<tempfile::TempDir>,
) {
    let (inner, dir): (Arc<dyn ObjectStore>, _) = match backend {
        Backend::Memory => (Arc::new(object_store::memory::InMemory::new()), None),
        Backend::File => {
            let dir = tempfile::tempdir().unwrap();
            let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
            (Arc::new(store), Some(dir))
        }
    };
    let failing = FailingStore::new(inner).with_clock(clock.clone());
    let bank = Bank::from_store(Arc::new(failing.clone()), "", &format!("{backend:?}"));
    (bank, failing, dir)
}
