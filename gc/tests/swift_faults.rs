//! Faults on a real Swift server: owners keep leases and the GC passes through a
//! `swift-proxy-server` that the test owns, and kills (`SIGKILL`), restarts, pauses (`SIGSTOP`)
//! and resumes (`SIGCONT`) in the middle of renewals and of a pass.
//!
//! The proxy is a copy of the running single-node Swift's (`.ci/start-swift.sh`) on a free
//! port, with `workers = 0` (one process, so one signal stops it all). The account, container
//! and object servers and memcached are the shared ones: the data is the same, and tempauth
//! tokens (kept in memcached) stay valid across restarts. The shared proxy (`ST_AUTH`) is never
//! touched; every final assertion reads through it, object by object (GET or HEAD — never a
//! listing for absence).
//!
//! Clients: the owners' store uses the defaults that `Bank::open` uses (30 s request timeout,
//! 10 retries within 3 min), so a paused proxy makes their renewals hang rather than fail; the
//! GC's store uses a 2 s timeout and 2 retries within 3 s, so that an interrupted pass fails its
//! requests within the test's time instead of waiting the fault out.
//!
//! Needs `BANKLEASE_TEST_SWIFT=1` with `ST_AUTH`, `ST_USER`, `ST_KEY`, `SWIFT_CONTAINER`;
//! `SWIFT_ROOT` (default `/tmp/banklease-stores/swift`, as in `.ci/start-swift.sh`) locates
//! `etc/proxy-server.conf`, `SWIFT_PROXY_BIN` (default `/usr/bin/swift-proxy-server`) the
//! proxy. Without `BANKLEASE_TEST_SWIFT=1` each test says that it skips; with it, a proxy that
//! cannot be started fails the test. The tests run one at a time (they measure real time).
#![allow(clippy::disallowed_methods)] // a real server and real outages: real time

use banklease_testkit::backends;
use banklease_testkit::cid;
use banklease_testkit::swift_proxy;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use banklease::checkpoint::{self, Decider, Status};
use banklease::clock::{Clock, Jitter, MockClock, SystemClock};
use banklease::paths::{Key, Prefix};
use banklease::store::SwiftBuilder;
use banklease::Checkpoint;
use banklease::{Bank, Keeper, LeaseState, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions, PassReport};
use banklease_testkit::failing::{FailingStore, Op};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::path::Path;
use object_store::RetryConfig;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use swift_proxy::Proxy;

/// The GC's skew margin: at least Swift's whole-second `Last-Modified`, although this backend
/// reads the 10 µs `X-Timestamp`.
const MARGIN: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_millis(500);
// ---- the test's own proxy: common/swift_proxy.rs -----------------------------------------

// ---- clients ---------------------------------------------------------------------------

/// One HTTP request as the owners' client sent it.
#[derive(Debug, Clone)]
struct Sent {
    method: http::Method,
    path: String,
    at: Instant,
    answered: Option<Instant>,
}

/// Every request the owners' store sends, with when it was sent and answered.
#[derive(Debug, Clone, Default)]
struct Requests(Arc<Mutex<Vec<Sent>>>);

impl Requests {
    /// The requests on `owner`'s lease object.
    fn to_lease(&self, owner: &OwnerId) -> Vec<Sent> {
        let suffix = format!("/leases/{}", owner.as_str());
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|s| s.path.ends_with(&suffix))
            .cloned()
            .collect()
    }
}

#[derive(Debug)]
struct Recording {
    inner: HttpClient,
    log: Requests,
}

#[async_trait]
impl HttpService for Recording {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let i = {
            let mut log = self.log.0.lock().unwrap();
            log.push(Sent {
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
                at: SystemClock.now(),
                answered: None,
            });
            log.len() - 1
        };
        let out = self.inner.execute(req).await;
        self.log.0.lock().unwrap()[i].answered = Some(SystemClock.now());
        out
    }
}

#[derive(Debug)]
struct RecordingConnector(Requests);

impl HttpConnector for RecordingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Recording {
            inner,
            log: self.0.clone(),
        }))
    }
}

fn container() -> String {
    std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".to_owned())
}

fn swift_via(proxy: &Proxy) -> SwiftBuilder {
    let user = std::env::var("ST_USER").unwrap_or_else(|_| "test:tester".to_owned());
    let key = std::env::var("ST_KEY").unwrap_or_else(|_| "testing".to_owned());
    SwiftBuilder::new()
        .with_tempauth(proxy.auth_url(), user, key)
        .with_container(container())
}

/// The owners' bank through the test's proxy: default client options (as `Bank::open`), every
/// request recorded.
fn owners_bank(proxy: &Proxy, prefix: &str, requests: &Requests) -> Bank {
    let store = swift_via(proxy)
        .with_http_connector(RecordingConnector(requests.clone()))
        .build()
        .unwrap();
    Bank::from_swift(store, prefix, &format!("owners via :{}", proxy.port))
}

/// The GC's bank through the test's proxy: short timeouts, and a wrapper that can slow its
/// deletions down (so that a fault lands in the middle of a pass) and counts its calls.
fn gc_bank(proxy: &Proxy, prefix: &str) -> (Bank, FailingStore<Arc<dyn ObjectStore>>) {
    let store = swift_via(proxy)
        .with_client_options(
            ClientOptions::new()
                .with_timeout(Duration::from_secs(2))
                .with_connect_timeout(Duration::from_secs(1)),
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(400),
                base: 2.0,
            },
            max_retries: 2,
            retry_timeout: Duration::from_secs(3),
        })
        .build()
        .unwrap();
    let bank = Bank::from_swift(store, prefix, &format!("gc via :{}", proxy.port));
    let failing = FailingStore::new(Arc::clone(bank.store())).with_sleeping_clock(SystemClock);
    (bank.with_store(Arc::new(failing.clone())), failing)
}

/// The same bank through the shared, healthy proxy (`ST_AUTH`): where the truth is read. Made a
/// bank here (`init`), as an operator does before any owner starts.
async fn shared_bank(prefix: &str) -> Bank {
    let bank = Bank::open(&format!("swift://{}/{prefix}", container())).unwrap();
    banklease::layout::init(&bank).await.unwrap();
    bank
}

fn unique_prefix() -> String {
    format!("faults-{}", uuid::Uuid::new_v4().simple())
}

/// The tests run one at a time; `None` (after saying so) when Swift is not configured.
async fn serial(test: &str) -> Option<tokio::sync::MutexGuard<'static, ()>> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    if !backends::backends().contains(&backends::Backend::Swift) {
        eprintln!("{test}: skipped: needs BANKLEASE_TEST_SWIFT=1 and a Swift (.ci/start-swift.sh)");
        return None;
    }
    Some(SERIAL.lock().await)
}

/// Poll `done` every 20 ms until it holds; panic with `what` after `within`.
async fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- owners ----------------------------------------------------------------------------

fn windows(renew_ms: u64, expire_ms: u64, validity_ms: u64) -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_millis(renew_ms),
        Duration::from_millis(expire_ms),
        Duration::from_millis(validity_ms),
    )
    .unwrap()
}

/// An owner whose keeper runs, with every state its keeper published and when.
struct Kept {
    lease: OwnerLease,
    keeper: Option<Keeper>,
    history: Arc<Mutex<Vec<(Instant, LeaseState)>>>,
}

impl Kept {
    async fn start(bank: &Bank, shared: &Bank, windows: LeaseWindows, seed: u64) -> Kept {
        let lease = OwnerLease::acquire(bank, OwnerId::random(), windows, Arc::new(SystemClock))
            .await
            .unwrap();
        let keeper = lease.spawn_keeper(Jitter::seeded(seed), 0.1);
        let mut rx = keeper.state();
        // Instants on the owner's clock (`SystemClock`, which counts suspended time), the
        // domain its `valid_until` is in: std's `Instant` is a different clock.
        let history = Arc::new(Mutex::new(vec![(
            SystemClock.now(),
            rx.borrow_and_update().clone(),
        )]));
        let recorded = Arc::clone(&history);
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let state = rx.borrow_and_update().clone();
                let last = !matches!(state, LeaseState::Held { .. });
                recorded.lock().unwrap().push((SystemClock.now(), state));
                if last {
                    return;
                }
            }
        });
        banklease::lease::read_lease(shared, lease.owner_id())
            .await
            .unwrap()
            .expect("the lease is visible through the shared proxy");
        Kept {
            lease,
            keeper: Some(keeper),
            history,
        }
    }

    fn name(&self) -> String {
        self.lease.owner_id().as_str()[..8].to_owned()
    }

    /// When the keeper published Lost, and why.
    fn lost(&self) -> Option<(Instant, String)> {
        self.history
            .lock()
            .unwrap()
            .iter()
            .find_map(|(at, s)| match s {
                LeaseState::Lost { reason } => Some((*at, reason.clone())),
                _ => None,
            })
    }

    /// The last validity the keeper published.
    fn last_valid_until(&self) -> Option<Instant> {
        self.history
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, s)| match s {
                LeaseState::Held { valid_until } => Some(*valid_until),
                _ => None,
            })
            .next_back()
    }

    /// Whether the keeper published a successful renewal at or after `t`.
    fn renewed_since(&self, t: Instant) -> bool {
        self.history
            .lock()
            .unwrap()
            .iter()
            .any(|(at, s)| *at >= t && matches!(s, LeaseState::Held { .. }))
    }

    fn renewals(&self) -> usize {
        self.history
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| matches!(s, LeaseState::Held { .. }))
            .count()
    }

    /// Held, valid, never reported Lost, and the object in the store is still this process's
    /// (same owner and pid; Swift renews by HEAD + PUT, so the token changes with each renewal).
    async fn assert_kept(&self, shared: &Bank, when: &str) {
        let name = self.name();
        assert_eq!(self.lost(), None, "{name} {when}: the keeper reported Lost");
        assert!(
            matches!(self.lease.state(), LeaseState::Held { .. }),
            "{name} {when}: {:?}",
            self.lease.state()
        );
        assert!(
            self.lease.check_validity(),
            "{name} {when}: remaining {:?}",
            self.lease.remaining()
        );
        let (record, _) = banklease::lease::read_lease(shared, self.lease.owner_id())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name} {when}: the lease object is gone"));
        assert_eq!(record.owner_id, *self.lease.owner_id(), "{name} {when}");
        assert_eq!(record.pid, std::process::id(), "{name} {when}: replaced");
        assert!(record.generation >= 1, "{name} {when}");
    }

    async fn release(mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.release().await.unwrap();
        }
    }
}

/// `last_modified` of a lease object through the shared proxy (its `X-Timestamp`).
async fn lease_modified(shared: &Bank, owner: &OwnerId) -> DateTime<Utc> {
    shared
        .store()
        .head(&shared.lease_path(owner))
        .await
        .unwrap()
        .last_modified
}

/// How an outage of the test's proxy is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `kill -9`, then a restart (which takes the proxy's start-up time).
    Kill,
    /// `SIGSTOP`, then `SIGCONT`.
    Pause,
}

/// Begin an outage of `proxy`.
fn begin(proxy: &mut Proxy, fault: Fault) {
    match fault {
        Fault::Kill => proxy.kill(),
        Fault::Pause => proxy.pause(),
    }
}

/// End an outage of `proxy` begun by [`begin`].
async fn end(proxy: &mut Proxy, fault: Fault) {
    match fault {
        Fault::Kill => {
            proxy.restart().await;
        }
        Fault::Pause => proxy.resume(),
    }
}

/// Keepers ride out a short outage of the proxy and report Lost — on time, once — in one
/// longer than the expire window, never renewing the lease back to life afterwards.
async fn keepers_through(fault: Fault, expire: Duration, short: Duration) {
    let test = format!("keepers through {fault:?}");
    let Some(_serial) = serial(&test).await else {
        return;
    };
    let mut proxy = Proxy::start().await;
    let prefix = unique_prefix();
    let requests = Requests::default();
    let bank = owners_bank(&proxy, &prefix, &requests);
    let shared = shared_bank(&prefix).await;
    let renew = Duration::from_secs(1);
    let w = LeaseWindows::new(renew, expire, Duration::from_millis(500)).unwrap();
    let mut owners = Vec::new();
    for seed in 0..3 {
        owners.push(Kept::start(&bank, &shared, w, seed).await);
    }
    wait_until(
        "every keeper renewed twice",
        Duration::from_secs(10),
        || owners.iter().all(|o| o.renewals() >= 3),
    )
    .await;

    // 1. A short outage: every keeper rides it out.
    let began = SystemClock.now();
    begin(&mut proxy, fault);
    if fault == Fault::Pause {
        tokio::time::sleep(short).await;
    }
    end(&mut proxy, fault).await;
    let back = SystemClock.now();
    let outage = back - began;
    eprintln!("{test}: short outage {outage:?}");
    // The keepers' last renewals were sent at most one renew window before the outage; they
    // must still hold enough time when it ends to retry (the default backoff is ≤ 3.2 s here).
    assert!(
        outage + renew + Duration::from_secs(2) < expire,
        "{test}: the outage ({outage:?}) is too long for expire {expire:?}: is the machine \
         overloaded? (the proxy restarts in 2–4 s here)"
    );
    wait_until(
        "every keeper renewed after the outage",
        expire - outage - renew,
        || owners.iter().all(|o| o.renewed_since(back)),
    )
    .await;
    for o in &owners {
        o.assert_kept(&shared, "after the short outage").await;
    }

    // 2. An outage longer than the expire window: every keeper reports Lost when its validity
    // runs out (send-time expiry; a hung request extends nothing), and not earlier. A bare
    // owner (no keeper) calls `renew` once as the outage begins: it hangs or retries inside
    // the client past its validity, and must end Lost without writing.
    let bare = OwnerLease::acquire(&bank, OwnerId::random(), w, Arc::new(SystemClock))
        .await
        .unwrap();
    let bare_valid_until = bare.renew().await.unwrap();
    let bare_before = lease_modified(&shared, bare.owner_id()).await;
    let began = SystemClock.now();
    begin(&mut proxy, fault);
    let renewing = tokio::spawn({
        let bare = bare.clone();
        async move { bare.renew().await }
    });
    // What the store holds from now on (a killed proxy lands nothing more; a paused one may
    // still land a request sent before the pause, when it resumes).
    let mut before = Vec::new();
    for o in &owners {
        before.push(lease_modified(&shared, o.lease.owner_id()).await);
    }
    wait_until(
        "every keeper reported Lost during the outage",
        expire + Duration::from_secs(2),
        || owners.iter().all(|o| o.lost().is_some()),
    )
    .await;
    for o in &owners {
        let name = o.name();
        let (lost_at, reason) = o.lost().unwrap();
        let valid_until = o.last_valid_until().unwrap();
        assert!(
            valid_until <= began + expire,
            "{name}: validity until {:?} after the outage began, beyond send-time expiry",
            valid_until - began
        );
        assert!(
            lost_at >= valid_until,
            "{name}: Lost {:?} before its validity ran out",
            valid_until - lost_at
        );
        assert!(
            lost_at <= valid_until + Duration::from_millis(750),
            "{name}: Lost reported {:?} after its validity ran out",
            lost_at - valid_until
        );
        assert!(reason.contains("validity ran out"), "{name}: {reason}");
        assert!(!o.lease.check_validity(), "{name}");
    }
    // The bare owner's validity runs out during the outage too.
    let bare_out = bare_valid_until + Duration::from_millis(200);
    tokio::time::sleep(bare_out.saturating_duration_since(SystemClock.now())).await;
    assert!(!bare.check_validity());
    end(&mut proxy, fault).await;
    let back = SystemClock.now();
    eprintln!("{test}: long outage {:?}", back - began);
    // Long enough for a keeper that came back to life to renew twice.
    tokio::time::sleep(renew * 2 + Duration::from_millis(500)).await;
    // The bare renewal ends once the proxy answers again (a killed one: at the client's next
    // retry, a few seconds at most here).
    let renewed = tokio::time::timeout(Duration::from_secs(40), renewing)
        .await
        .expect("the bare renewal ended")
        .unwrap();
    assert!(
        matches!(renewed, Err(banklease::Error::LeaseLost { .. })),
        "{test}: a renewal that outlasted its validity: {renewed:?}"
    );
    assert!(!bare.check_validity());
    let late: Vec<_> = requests
        .to_lease(bare.owner_id())
        .into_iter()
        .filter(|s| s.method == http::Method::PUT && s.at >= bare_valid_until)
        .collect();
    assert!(
        late.is_empty(),
        "{test}: the bare owner wrote after its validity: {late:?}"
    );
    assert_eq!(
        lease_modified(&shared, bare.owner_id()).await,
        bare_before,
        "{test}: the bare owner's lease was refreshed after its validity ran out"
    );
    for (o, before) in owners.iter().zip(before) {
        let name = o.name();
        let (lost_at, _) = o.lost().unwrap();
        assert!(
            matches!(o.lease.state(), LeaseState::Lost { .. }),
            "{name}: Lost is final, yet {:?}",
            o.lease.state()
        );
        assert!(!o.lease.check_validity(), "{name}");
        let lease_requests = requests.to_lease(o.lease.owner_id());
        let late: Vec<_> = lease_requests.iter().filter(|s| s.at >= lost_at).collect();
        assert!(
            late.is_empty(),
            "{name}: requests on the lease after it was Lost: {late:?}"
        );
        // The object is this process's, not re-created, and not renewed since the outage
        // began — except by a PUT sent before the pause and answered after it.
        let (record, _) = banklease::lease::read_lease(&shared, o.lease.owner_id())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: the lease object is gone"));
        assert_eq!(record.pid, std::process::id(), "{name}");
        let after = lease_modified(&shared, o.lease.owner_id()).await;
        if after != before {
            let in_flight = lease_requests.iter().any(|s| {
                s.method == http::Method::PUT
                    && s.at < began
                    && s.answered.is_none_or(|a| a >= began)
            });
            assert!(
                fault == Fault::Pause && in_flight,
                "{name}: the lease was renewed after the outage began ({before} → {after})"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepers_ride_out_a_proxy_restart_and_report_lost_after_a_long_outage() {
    // The short outage is the restart itself (2–4 s here).
    keepers_through(Fault::Kill, Duration::from_secs(10), Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepers_ride_out_a_proxy_pause_and_report_lost_while_requests_hang() {
    keepers_through(
        Fault::Pause,
        Duration::from_secs(6),
        Duration::from_millis(2500),
    )
    .await;
}

// ---- GC passes -------------------------------------------------------------------------

const DATA: [&str; 2] = ["d0", "d1"];

/// `n` protecting checkpoints of `lease`'s owner, with [`DATA`] each.
async fn protecting(lease: &OwnerLease, tag: &str, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("{tag}-{i:02}")).collect();
    let made: Vec<()> = futures::stream::iter(ids.clone())
        .map(|id| async move {
            let cp = Checkpoint::create(lease, &cid(&id)).await.unwrap();
            for d in DATA {
                cp.put_data(d, PutPayload::from_static(b"bytes"))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    assert_eq!(made.len(), n);
    ids
}

async fn exists(bank: &Bank, path: &Path) -> bool {
    match bank.store().head(path).await {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("HEAD {path}: {e}"),
    }
}

/// Read object by object (never a listing): the checkpoint is exactly as its owner left it.
async fn assert_untouched(shared: &Bank, owner: &OwnerId, id: &str) {
    let status = checkpoint::read_checkpoint(shared, &cid(id))
        .await
        .unwrap()
        .map(|r| r.status);
    assert_eq!(status, Some(Status::Protecting), "{id}");
    assert_eq!(
        checkpoint::read_decision(shared, &cid(id)).await.unwrap(),
        None,
        "{id}"
    );
    assert!(
        exists(shared, &Key::marker(owner, &cid(id)).path(shared)).await,
        "{id}: marker"
    );
    for d in DATA {
        let path = Prefix::Data(&cid(id)).path(shared).join(d);
        assert!(exists(shared, &path).await, "{id}: {d}");
    }
}

/// Read object by object: the GC decided the checkpoint and removed everything but its
/// tombstone and decision.
async fn assert_collected(shared: &Bank, owner: &OwnerId, id: &str) {
    let status = checkpoint::read_checkpoint(shared, &cid(id))
        .await
        .unwrap()
        .map(|r| r.status);
    assert_eq!(status, Some(Status::Deleted), "{id}");
    let decision = checkpoint::read_decision(shared, &cid(id)).await.unwrap();
    assert_eq!(decision.map(|d| d.by), Some(Decider::Gc), "{id}");
    assert!(
        !exists(shared, &Key::marker(owner, &cid(id)).path(shared)).await,
        "{id}: marker"
    );
    for d in DATA {
        let path = Prefix::Data(&cid(id)).path(shared).join(d);
        assert!(!exists(shared, &path).await, "{id}: {d}");
    }
}

fn gc_options() -> GcOptions {
    GcOptions::builder()
        .grace(GRACE)
        .skew_margin(MARGIN)
        .concurrency(4)
        .max_deletions(0)
        .brake_ratio(1.0)
        .brake_min(1_000_000)
        .dry_run(false)
        .force(false)
        .reap_leases(true)
        .build()
}

async fn pass(bank: &Bank) -> PassReport {
    Collector::new(bank.clone(), Arc::new(SystemClock), gc_options())
        .run_pass()
        .await
        .unwrap()
}

/// A GC pass is interrupted by `fault` in the middle of its deletions: it reports errors and
/// collects nothing of the live owner; the next pass, through the recovered proxy, finishes
/// the dead owner's checkpoints. The live owner's keeper goes through the same proxy, so it
/// rides out the same fault (a live owner whose renewals fail for a while must not look dead).
async fn pass_through(fault: Fault) {
    let test = format!("GC pass through {fault:?}");
    let Some(_serial) = serial(&test).await else {
        return;
    };
    const DEAD_CHECKPOINTS: usize = 24;
    let mut proxy = Proxy::start().await;
    let prefix = unique_prefix();
    let requests = Requests::default();
    let owners = owners_bank(&proxy, &prefix, &requests);
    let (gc, gc_faults) = gc_bank(&proxy, &prefix);
    let shared = shared_bank(&prefix).await;

    // A lives: its expire window outlasts any outage here (the fault plus a restart).
    let live = Kept::start(&owners, &shared, windows(1000, 15_000, 500), 7).await;
    let live_ids = protecting(&live.lease, "live", 3).await;
    // B is dead: its clock is frozen (it believes its lease forever) and it never renews, so
    // the store sees its lease expire.
    let dead_acquired = SystemClock.now();
    let dead = OwnerLease::acquire(
        &owners,
        OwnerId::random(),
        windows(1000, 2000, 500),
        Arc::new(MockClock::new()),
    )
    .await
    .unwrap();
    let dead_ids = protecting(&dead, "dead", DEAD_CHECKPOINTS).await;
    let dead_by =
        dead_acquired + Duration::from_secs(2) + MARGIN + GRACE + Duration::from_millis(500);
    tokio::time::sleep(dead_by.saturating_duration_since(SystemClock.now())).await;

    // 1. The pass, slowed down so that the fault lands while it deletes.
    gc_faults.set_latency(Op::Delete, Duration::from_millis(100));
    let collector = Collector::new(gc.clone(), Arc::new(SystemClock), gc_options());
    let running = tokio::spawn(async move { collector.run_pass().await });
    wait_until("the pass started deleting", Duration::from_secs(30), || {
        assert!(
            !running.is_finished(),
            "{test}: the pass ended before the fault"
        );
        gc_faults.calls(Op::Delete) >= 14
    })
    .await;
    let began = Instant::now();
    begin(&mut proxy, fault);
    if fault == Fault::Pause {
        // Longer than the GC's client waits (2 s timeout, one retry, 3 s budget).
        tokio::time::sleep(Duration::from_secs(5)).await;
        end(&mut proxy, fault).await;
    }
    let first = tokio::time::timeout(Duration::from_secs(90), running)
        .await
        .expect("the interrupted pass ended")
        .unwrap();
    if fault == Fault::Kill {
        end(&mut proxy, fault).await;
    }
    eprintln!(
        "{test}: outage {:?}; interrupted pass: {first:?}",
        began.elapsed()
    );
    gc_faults.set_latency(Op::Delete, Duration::ZERO);
    match &first {
        Ok(r) => {
            assert!(r.errors > 0, "{test}: the fault went unnoticed: {r:?}");
            assert!(
                r.collected < DEAD_CHECKPOINTS as u64,
                "{test}: the pass was not interrupted: {r:?}"
            );
            assert_eq!((r.alive, r.dead), (1, 1), "{test}: {r:?}");
        }
        Err(e) => eprintln!("{test}: the interrupted pass failed: {e}"),
    }
    for id in &live_ids {
        assert_untouched(&shared, live.lease.owner_id(), id).await;
    }

    // 2. The next pass, through the recovered proxy, completes the work.
    let second = pass(&gc).await;
    eprintln!("{test}: next pass: {second:?}");
    // What it has left to do depends on which of the interrupted requests landed after all
    // (a paused proxy carries out requests whose client gave up); the store tells.
    assert_eq!((second.errors, second.alive), (0, 1), "{test}: {second:?}");
    for id in &dead_ids {
        assert_collected(&shared, dead.owner_id(), id).await;
    }
    for id in &live_ids {
        assert_untouched(&shared, live.lease.owner_id(), id).await;
    }
    assert!(
        !exists(&shared, &shared.lease_path(dead.owner_id())).await,
        "{test}: the dead owner's lease was not reaped"
    );
    live.assert_kept(&shared, "after the passes").await;

    // 3. Nothing is left to do.
    let third = pass(&gc).await;
    assert_eq!(
        (third.scanned, third.collected, third.errors),
        (live_ids.len() as u64, 0, 0),
        "{test}: {third:?}"
    );
    live.assert_kept(&shared, "at the end").await;
    live.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_pass_killed_mid_pass_is_finished_by_the_next_one() {
    pass_through(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_pass_paused_mid_pass_is_finished_by_the_next_one() {
    pass_through(Fault::Pause).await;
}
