//! The backends the suites run on, in one place: which are configured (memory and file always,
//! the servers when their variable is set, as `.ci/run` does), a fresh bank on each, and the note
//! that says when one is skipped.
//!
//! Modelled on object_store's `integration` module: a suite is written once, as a function of a
//! bank, and each test runs it on every backend:
//!
//! ```no_run
//! use banklease_testkit::backends::each_backend;
//! use banklease_testkit::failing::Op;
//!
//! # async fn suite() {
//! each_backend(async |backend, bank, store, clock| {
//!     // A fresh bank on `backend`, behind a `FailingStore` whose latency advances `clock`.
//!     store.set_latency(Op::Put, std::time::Duration::from_secs(1));
//!     # let _ = (backend, bank, clock);
//! })
//! .await;
//! # }
//! ```
//!
//! The servers and their variables (each start script prints the rest, `.ci/run` sets them all):
//!
//! | backend | variable | server, and what it also needs |
//! |---|---|---|
//! | Swift | `BANKLEASE_TEST_SWIFT=1` | `.ci/start-swift.sh`: `ST_*`, `SWIFT_CONTAINER` |
//! | S3 | `BANKLEASE_TEST_S3=1` | `.ci/start-s3.sh` (moto): `AWS_*`, `S3_BUCKET` |
//! | Azure | `BANKLEASE_TEST_AZURE=1` | `.ci/start-azurite.sh`: `AZURE_*`, `AZURITE_*` |
//! | Keystone | `BANKLEASE_TEST_KEYSTONE=1` | `.ci/start-keystone.sh` (after Swift): `KEYSTONE_*` |

use std::sync::{Arc, Once};
use std::time::Duration;

use banklease::clock::MockClock;
use banklease::config::{swift_rule, BankConfig, ClientLimits};
use banklease::Bank;
use object_store::ObjectStore;

use crate::failing::FailingStore;
use crate::keystone::KeystoneEnv;

/// The client limits of the Swift (and Keystone) test banks: 2 s per request, 2 s of retries, a
/// 4.5 s retry budget (2 s, a backoff of at most 0.5 s, then the last attempt's 2 s), which the
/// banks' owners declare.
pub const SWIFT_TEST_LIMITS: ClientLimits = ClientLimits {
    request_timeout: Some(Duration::from_secs(2)),
    retry_timeout: Some(Duration::from_secs(2)),
};

/// A store a suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `memory://`: always.
    Memory,
    /// `file://` in a temporary directory: always.
    File,
    /// Native Swift (`swift://`); needs `BANKLEASE_TEST_SWIFT=1`.
    Swift,
    /// S3-compatible, moto (`s3://`); needs `BANKLEASE_TEST_S3=1`.
    S3,
    /// Azure Blob, Azurite (`az://`); needs `BANKLEASE_TEST_AZURE=1`.
    Azure,
    /// Native Swift through Keystone v3 (`swift://` on the Keystone proxy, password auth as an
    /// openrc gives it); needs `BANKLEASE_TEST_KEYSTONE=1`.
    Keystone,
    /// Ceph RADOS Gateway's S3 API (`s3://`, a real S3 server that compares ETags unquoted);
    /// needs `BANKLEASE_TEST_RGW=1` and the `RGW_*` variables `.ci/start-rgw.sh` prints.
    Rgw,
}

impl Backend {
    /// Every backend, in the order the suites run on them.
    pub const ALL: [Backend; 7] = [
        Backend::Memory,
        Backend::File,
        Backend::Swift,
        Backend::S3,
        Backend::Azure,
        Backend::Keystone,
        Backend::Rgw,
    ];

    /// Native Swift, whichever way it authenticates (TempAuth or Keystone).
    pub fn is_swift(self) -> bool {
        matches!(self, Backend::Swift | Backend::Keystone)
    }

    /// The grace a collector needs on this backend for owners of these windows on its test
    /// banks: `grace`, or on Swift at least what rule (c) asks for the owners' declared 4.5 s
    /// budget (create-if-absent is timing only there), which the collector would otherwise
    /// wait for anyway.
    pub fn collector_grace(
        self,
        grace: Duration,
        expire: Duration,
        validity: Duration,
        margin: Duration,
    ) -> Duration {
        if !self.is_swift() {
            return grace;
        }
        let budget = SWIFT_TEST_LIMITS.budget("swift://c/p");
        let needed = swift_rule(budget, expire, validity, margin).shortest_grace;
        grace.max(Duration::from_millis(banklease::config::ceil_ms(needed)))
    }

    /// The variable that must be `1` for suites to run on this backend (`None`: always on).
    pub fn variable(self) -> Option<&'static str> {
        match self {
            Backend::Memory | Backend::File => None,
            Backend::Swift => Some("BANKLEASE_TEST_SWIFT"),
            Backend::S3 => Some("BANKLEASE_TEST_S3"),
            Backend::Azure => Some("BANKLEASE_TEST_AZURE"),
            Backend::Keystone => Some("BANKLEASE_TEST_KEYSTONE"),
            Backend::Rgw => Some("BANKLEASE_TEST_RGW"),
        }
    }

    /// Whether suites run on this backend here: memory and file always, a server when its
    /// [variable](Self::variable) is `1`.
    pub fn is_configured(self) -> bool {
        self.variable()
            .is_none_or(|v| std::env::var(v).as_deref() == Ok("1"))
    }

    /// [`is_configured`](Self::is_configured), saying so when it is not (for a test that runs
    /// on one backend only).
    pub fn available(self) -> bool {
        let configured = self.is_configured();
        if !configured {
            self.say_skipped();
        }
        configured
    }

    fn say_skipped(self) {
        let (variable, script, server) = match self {
            Backend::Memory | Backend::File => return,
            Backend::Swift => ("BANKLEASE_TEST_SWIFT", "start-swift.sh", "Swift"),
            Backend::S3 => ("BANKLEASE_TEST_S3", "start-s3.sh", "moto"),
            Backend::Azure => ("BANKLEASE_TEST_AZURE", "start-azurite.sh", "Azurite"),
            Backend::Keystone => ("BANKLEASE_TEST_KEYSTONE", "start-keystone.sh", "Keystone"),
            Backend::Rgw => ("BANKLEASE_TEST_RGW", "start-rgw.sh", "Ceph RGW"),
        };
        eprintln!(
            "note: {self:?} suites skipped: set {variable}=1 and the variables `.ci/{script}` \
             prints (.ci/run starts {server})"
        );
    }

    /// Whether faults injected by `FailingStore` reach lease writes. On Swift the lease layer
    /// talks to the Swift store directly (X-Delete-After, POST), below the wrapper.
    pub fn faults_reach_lease_writes(self) -> bool {
        !self.is_swift()
    }

    /// Resolution of the store's `last_modified` stamps (S3 and Azure: whole seconds).
    pub fn stamp_resolution(self) -> Duration {
        match self {
            Backend::S3 | Backend::Azure | Backend::Rgw => Duration::from_secs(1),
            Backend::Memory | Backend::File | Backend::Swift | Backend::Keystone => Duration::ZERO,
        }
    }

    /// A server over the network (setting up an owner takes a while there).
    pub fn is_server(self) -> bool {
        matches!(
            self,
            Backend::Swift | Backend::S3 | Backend::Azure | Backend::Keystone | Backend::Rgw
        )
    }

    /// A fresh bank, made by `banklease init` (its descriptor only): a new temporary directory
    /// for `file:`, a unique prefix `t-<uuid>` on the shared servers.
    pub async fn open(self) -> TestBank {
        self.open_at(&format!("t-{}", uuid::Uuid::new_v4().simple()))
            .await
    }

    /// [`open`](Self::open), with the unique prefix under `scope` (`<scope>/<uuid>`).
    pub async fn open_in(self, scope: &str) -> TestBank {
        self.open_at(&format!("{scope}/{}", uuid::Uuid::new_v4().simple()))
            .await
    }

    async fn open_at(self, prefix: &str) -> TestBank {
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| "banklease-test".to_owned());
        let (url, dir) = match self {
            Backend::Memory => ("memory://".to_owned(), None),
            Backend::File => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                (
                    format!("file://{}", dir.path().display()),
                    Some(Arc::new(dir)),
                )
            }
            Backend::Swift => (format!("swift://{}/{prefix}", var("SWIFT_CONTAINER")), None),
            Backend::S3 => (format!("s3://{}/{prefix}", var("S3_BUCKET")), None),
            Backend::Rgw => (format!("s3://{}/{prefix}", var("RGW_BUCKET")), None),
            Backend::Azure => (
                format!("az://{}/{prefix}", var("AZURE_CONTAINER_NAME")),
                None,
            ),
            Backend::Keystone => {
                let ks = KeystoneEnv::load().expect("BANKLEASE_TEST_KEYSTONE=1");
                (format!("swift://{}/{prefix}", ks.container()), None)
            }
        };
        let bank = match self {
            // Configured from the openrc alone: this process's ST_* belong to the TempAuth
            // Swift, and Bank::open would prefer them.
            Backend::Keystone => {
                let ks = KeystoneEnv::load().expect("BANKLEASE_TEST_KEYSTONE=1");
                Bank::from_swift(
                    ks.store_with_limits(&ks.password_vars(), None, SWIFT_TEST_LIMITS),
                    prefix,
                    &url,
                )
                .with_declared_limits(SWIFT_TEST_LIMITS)
            }
            // RGW's S3 API, configured from its own variables: this process's AWS_* are moto's.
            Backend::Rgw => Bank::from_s3_compatible(rgw_store(), prefix, &url),
            // Swift with short client limits, as an operator's `[bank]` section sets them: its
            // owners declare the budget (4.5 s), and a collector waits that long on Swift, not
            // the default client's 11m 15s.
            Backend::Swift => Bank::open_configured(
                &BankConfig {
                    url: url.clone(),
                    request_timeout: SWIFT_TEST_LIMITS.request_timeout,
                    retry_timeout: SWIFT_TEST_LIMITS.retry_timeout,
                    ca_file: None,
                    credentials: None,
                },
                false,
            )
            .unwrap_or_else(|e| panic!("{self:?}: open {url} (are its variables set?): {e}")),
            _ => Bank::open(&url)
                .unwrap_or_else(|e| panic!("{self:?}: open {url} (are its variables set?): {e}")),
        };
        banklease::layout::init(&bank)
            .await
            .unwrap_or_else(|e| panic!("{self:?}: init {url}: {e}"));
        TestBank {
            backend: self,
            bank,
            _dir: dir,
        }
    }
}

/// An S3 client of the RGW `.ci/start-rgw.sh` started (`RGW_S3_ENDPOINT`, `RGW_ACCESS_KEY_ID`,
/// `RGW_SECRET_ACCESS_KEY`, `RGW_BUCKET`), as `s3://` opens one: conditional puts by ETag.
pub fn rgw_store() -> Arc<dyn ObjectStore> {
    let var = |name: &str| {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("BANKLEASE_TEST_RGW=1 needs {name} (.ci/start-rgw.sh)"))
    };
    Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(var("RGW_S3_ENDPOINT"))
            .with_access_key_id(var("RGW_ACCESS_KEY_ID"))
            .with_secret_access_key(var("RGW_SECRET_ACCESS_KEY"))
            .with_bucket_name(var("RGW_BUCKET"))
            .with_region("us-east-1")
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
            .build()
            .expect("an S3 client of RGW"),
    )
}

/// The configured backends, in order: memory and file, then each server whose variable is set.
/// Says which are skipped, once per test binary.
pub fn backends() -> Vec<Backend> {
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        for backend in Backend::ALL {
            if !backend.is_configured() {
                backend.say_skipped();
            }
        }
    });
    Backend::ALL
        .into_iter()
        .filter(|b| b.is_configured())
        .collect()
}

/// A fresh bank on one backend; the temporary directory of a `file:` bank is removed when the
/// last clone goes.
#[derive(Debug, Clone)]
pub struct TestBank {
    /// Where it is.
    pub backend: Backend,
    /// The bank, straight on the backend's store.
    pub bank: Bank,
    _dir: Option<Arc<tempfile::TempDir>>,
}

impl TestBank {
    /// The same bank behind a [`FailingStore`] whose latency advances `clock`, and that store
    /// (to script faults and count calls). Keep `self` alive as long as the bank is used.
    pub fn with_faults(&self, clock: &MockClock) -> (Bank, Faults) {
        let failing = FailingStore::new(Arc::clone(self.bank.store())).with_clock(clock.clone());
        (self.bank.with_store(Arc::new(failing.clone())), failing)
    }
}

/// A fresh bank (made by `init`) on `backend`, and what keeps it alive.
pub async fn plain_bank(backend: Backend) -> (Bank, TestBank) {
    let guard = backend.open().await;
    (guard.bank.clone(), guard)
}

/// A fresh bank on `backend` behind a [`FailingStore`] whose latency advances `clock`, that
/// store, and what keeps the bank alive.
pub async fn faulty_bank(backend: Backend, clock: &MockClock) -> (Bank, Faults, TestBank) {
    let guard = backend.open().await;
    let (bank, failing) = guard.with_faults(clock);
    (bank, failing, guard)
}

/// The store in front of the backend's in [`each_backend`]'s banks.
pub type Faults = FailingStore<Arc<dyn ObjectStore>>;

/// Run `suite` on every configured backend ([`backends`]), one after the other, each time on a
/// fresh bank behind a fault-injecting store (no fault scripted yet) whose latency advances a
/// mock clock of its own: `suite(backend, bank, store, clock)`. The suite's owners should run on
/// that clock too.
pub async fn each_backend(suite: impl AsyncFnMut(Backend, Bank, Faults, MockClock)) {
    each_backend_where(|_| true, "", suite).await
}

/// [`each_backend`] on the backends that `keep`; on the others the suite is skipped, saying
/// `"{backend:?}: skipped: {why}"`.
pub async fn each_backend_where(
    keep: impl Fn(Backend) -> bool,
    why: &str,
    mut suite: impl AsyncFnMut(Backend, Bank, Faults, MockClock),
) {
    for backend in backends() {
        if !keep(backend) {
            eprintln!("{backend:?}: skipped: {why}");
            continue;
        }
        let clock = MockClock::new();
        let plain = backend.open().await;
        let (bank, store) = plain.with_faults(&clock);
        suite(backend, bank, store, clock).await;
        drop(plain);
    }
}

/// Run `suite` on every configured backend ([`backends`]), each time on a fresh bank straight on
/// the backend's store (no wrapper: for suites that need the store's own answers and clock).
pub async fn each_plain_backend(mut suite: impl AsyncFnMut(Backend, Bank)) {
    for backend in backends() {
        let plain = backend.open().await;
        suite(backend, plain.bank.clone()).await;
        drop(plain);
    }
}
