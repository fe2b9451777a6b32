//! Shared helpers for the integration tests: the same suites run on every backend available.
#![allow(dead_code)]

use std::sync::Arc;

use banklease::clock::MockClock;
use banklease::Bank;
use banklease_testkit::failing::FailingStore;
use object_store::ObjectStore;

/// The backends a suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    File,
    /// Native Swift; needs `BANKLEASE_TEST_SWIFT=1` and `ST_*` (started by `.ci/start-swift.sh`).
    Swift,
    /// S3-compatible (moto); needs `BANKLEASE_TEST_S3=1` and `AWS_*`, `S3_BUCKET`
    /// (started by `.ci/start-s3.sh`).
    S3,
    /// Azure Blob (Azurite); needs `BANKLEASE_TEST_AZURE=1` and `AZURE_*`, `AZURITE_*`
    /// (started by `.ci/start-azurite.sh`).
    Azure,
}

impl Backend {
    /// Whether faults injected by `FailingStore` reach lease writes. On Swift the lease layer
    /// talks to the Swift store directly (X-Delete-After, POST), below the wrapper.
    pub fn faults_reach_lease_writes(self) -> bool {
        self != Backend::Swift
    }

    /// Resolution of the store's `last_modified` stamps (S3 and Azure: whole seconds).
    pub fn stamp_resolution(self) -> std::time::Duration {
        match self {
            Backend::S3 | Backend::Azure => std::time::Duration::from_secs(1),
            Backend::Memory | Backend::File | Backend::Swift => std::time::Duration::ZERO,
        }
    }

    /// A server over the network (setting up an owner takes a while there).
    pub fn is_server(self) -> bool {
        matches!(self, Backend::Swift | Backend::S3 | Backend::Azure)
    }
}

/// Memory and file always; Swift and S3 when their servers are configured. Says which are
/// skipped, once per test binary.
pub fn backends() -> Vec<Backend> {
    static SAID: std::sync::Once = std::sync::Once::new();
    let mut out = vec![Backend::Memory, Backend::File];
    let swift = std::env::var("BANKLEASE_TEST_SWIFT").as_deref() == Ok("1");
    let s3 = std::env::var("BANKLEASE_TEST_S3").as_deref() == Ok("1");
    let azure = std::env::var("BANKLEASE_TEST_AZURE").as_deref() == Ok("1");
    if swift {
        out.push(Backend::Swift);
    }
    if s3 {
        out.push(Backend::S3);
    }
    if azure {
        out.push(Backend::Azure);
    }
    SAID.call_once(|| {
        if !swift {
            eprintln!(
                "note: Swift suites skipped: set BANKLEASE_TEST_SWIFT=1 (.ci/run starts Swift)"
            );
        }
        if !s3 {
            eprintln!("note: S3 suites skipped: set BANKLEASE_TEST_S3=1 (.ci/run starts moto)");
        }
        if !azure {
            eprintln!(
                "note: Azure suites skipped: set BANKLEASE_TEST_AZURE=1 (.ci/run starts Azurite)"
            );
        }
    });
    out
}

/// Keeps a test's bank alive (a temporary directory for `file:`).
pub struct Guard(Option<tempfile::TempDir>);

/// A fresh, empty bank on `backend` (a unique prefix on the shared servers).
pub fn plain_bank(backend: Backend) -> (Bank, Guard) {
    let unique = format!("t-{}", uuid::Uuid::new_v4().simple());
    match backend {
        Backend::Memory => (Bank::open("memory://").unwrap(), Guard(None)),
        Backend::File => {
            let dir = tempfile::tempdir().unwrap();
            let bank = Bank::open(&format!("file://{}", dir.path().display())).unwrap();
            (bank, Guard(Some(dir)))
        }
        Backend::Swift => {
            let container =
                std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".to_owned());
            let bank = Bank::open(&format!("swift://{container}/{unique}")).unwrap();
            (bank, Guard(None))
        }
        Backend::S3 => {
            let bucket = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".to_owned());
            let bank = Bank::open(&format!("s3://{bucket}/{unique}")).unwrap();
            (bank, Guard(None))
        }
        Backend::Azure => {
            let container = std::env::var("AZURE_CONTAINER_NAME")
                .unwrap_or_else(|_| "banklease-test".to_owned());
            let bank = Bank::open(&format!("az://{container}/{unique}")).unwrap();
            (bank, Guard(None))
        }
    }
}

/// A fresh bank on `backend` behind a `FailingStore` driven by `clock`.
pub fn bank(
    backend: Backend,
    clock: &MockClock,
) -> (Bank, FailingStore<Arc<dyn ObjectStore>>, Guard) {
    let (plain, guard) = plain_bank(backend);
    let failing = FailingStore::new(Arc::clone(plain.store())).with_clock(clock.clone());
    let bank = plain.with_store(Arc::new(failing.clone()));
    (bank, failing, guard)
}
