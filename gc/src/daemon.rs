//! The GC daemon: one active collector per bank, any number on standby.
//!
//! Every daemon on a bank competes for one lease object, `gc/active`, with the same protocol as
//! an owner lease (see `banklease::lease`). The daemon that holds it is *active* and runs a pass
//! every `gc.interval`; the others are *standby* and try to take the lease over every
//! `gc.lease_renew_window`, which succeeds only once the active daemon's lease has expired on the
//! store's clock (by more than `lease.skew_margin`).
//!
//! ```text
//!            probe bank ──fails──▶ refuse to start
//!                │
//!                ▼
//!   ┌──────▶ standby ──take_over_at wins──▶ active ──every interval, while valid──▶ pass
//!   │            │                            │  │
//!   └── lease lost (keeper) ◀─────────────────┘  └── shutdown: finish the pass, release
//! ```
//!
//! **Invariant:** a pass starts only while the GC lease passes `check_validity` (zero requests).
//! The GC lease keeps daemons from duplicating work; it is not what makes collection safe. On a
//! store without conditional overwrite two racing standbys can both win a takeover until the
//! loser's first renewal (see `OwnerLease::take_over_at`), and a pass may outlive the lease;
//! both are harmless because every collection is decided by a create-if-absent write per
//! checkpoint (`decisions/<id>`).
//!
//! **Invariant:** a pass is never abandoned half-way. Shutdown stops new passes, waits for the
//! one in flight ([`TaskTracker`]), then releases the lease, so a standby takes over at once
//! instead of after a full expire window.
//!
//! Shutdown is the caller's future, as in mini-redis' `server::run`, so tests drive it directly.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use banklease::clock::{Jitter, SharedClock, SystemClock};
use banklease::config::{Config, OwnerIdScheme};
use banklease::observe::error_chain;
use banklease::{Bank, Keeper, LeaseState, OwnerId, OwnerLease};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument as _};

use crate::metrics::{self, Metrics};
use crate::options::GcOptions;
use crate::pass::Collector;
use crate::report::PassReport;

/// The path segments of the GC lease under the bank's prefix.
pub const GC_LEASE_PATH: [&str; 2] = ["gc", "active"];

/// How long open `/metrics` requests may take to finish once the daemon stops; a client that
/// holds its connection longer is cut off rather than delay the exit.
const METRICS_STOP_GRACE: Duration = Duration::from_secs(5);

/// Run the daemon on the bank of `config` until `shutdown` completes.
///
/// Errors only when it cannot start (bank unusable, metrics address taken) or cannot release
/// the GC lease at shutdown. Failed passes are logged and counted, never fatal.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Daemon::open(config)?.run(shutdown).await
}

/// Wait to become active, run a single pass, release the GC lease and return the pass's report.
///
/// `Ok(None)` when `shutdown` completed before a pass could start.
pub async fn run_once(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Option<PassReport>> {
    Daemon::open(config)?.run_once(shutdown).await
}

/// A GC daemon on one bank.
#[derive(Debug)]
pub struct Daemon {
    bank: Bank,
    clock: SharedClock,
    config: Config,
    owner: OwnerId,
    metrics: Arc<Metrics>,
}

/// How a spell as the active daemon ended.
#[derive(Debug)]
enum End {
    /// Shutdown was requested.
    Shutdown,
    /// The keeper lost the GC lease.
    Lost(String),
    /// `--once`: the single pass ran.
    Once(anyhow::Result<PassReport>),
}

impl Daemon {
    /// A daemon on the bank named by `config.bank.url`, on the system clock.
    pub fn open(config: Config) -> anyhow::Result<Self> {
        let bank = Bank::open(&config.bank.url)
            .with_context(|| format!("cannot open the bank: url=`{}`", config.bank.url))?;
        Ok(Self::new(bank, Arc::new(SystemClock), config))
    }

    /// A daemon on an already opened `bank` (for tests and embedding). `config.bank` is ignored.
    pub fn new(bank: Bank, clock: SharedClock, config: Config) -> Self {
        let owner = match config.lease.owner_id_scheme {
            OwnerIdScheme::HostStart => OwnerId::for_this_process(clock.system_now()),
            OwnerIdScheme::Uuid => OwnerId::random(),
        };
        Self {
            bank,
            clock,
            config,
            owner,
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// The id this daemon holds the GC lease under.
    pub fn owner_id(&self) -> &OwnerId {
        &self.owner
    }

    /// The daemon's metrics (also served on `gc.metrics_addr` when set).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Run until `shutdown` completes: standby, active, standby again if the lease is lost.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        self.execute(false, shutdown).await.map(|_| ())
    }

    /// Become active, run one pass, release the lease. `Ok(None)` when `shutdown` came first.
    pub async fn run_once(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<Option<PassReport>> {
        self.execute(true, shutdown).await
    }

    async fn execute(
        self,
        once: bool,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<Option<PassReport>> {
        let cancel = CancellationToken::new();
        let span = tracing::info_span!("gc", owner_id = %self.owner);
        let work = self.work(once, cancel.clone()).instrument(span);
        tokio::pin!(work);
        // The work is not dropped when shutdown comes: it is told to stop and then awaited, so
        // the pass in flight finishes and the lease is released.
        tokio::select! {
            // Shutdown first: one that has already happened must win over a first poll of the
            // work, which could otherwise start a pass.
            biased;
            () = shutdown => {
                info!("shutdown requested: no new passes; finishing the pass in flight");
                cancel.cancel();
                work.await
            }
            result = &mut work => result,
        }
    }

    async fn work(
        &self,
        once: bool,
        cancel: CancellationToken,
    ) -> anyhow::Result<Option<PassReport>> {
        // A bank in a layout this release does not know is not touched.
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            checked = banklease::layout::check(&self.bank) => checked.with_context(|| {
                format!("refusing to start on bank=`{}`", self.bank.label())
            })?,
        }
        // Aborting the probe on shutdown is harmless: at worst it leaves its probe key behind.
        let capabilities = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            probed = self.bank.capabilities() => probed.with_context(|| {
                format!(
                    "refusing to start: cannot keep owner leases on bank=`{}`",
                    self.bank.label()
                )
            })?,
        };
        // Cheap: from the probe alone; `banklease doctor` runs the races.
        let lease = banklease::doctor::owner_lease_verdict(capabilities);
        if lease.basis == banklease::doctor::Basis::NotAtAll {
            return Err(anyhow!(
                "refusing to start: owner leases cannot be kept on bank=`{}`: {}; run \
                 `banklease doctor` for the full capability table",
                self.bank.label(),
                lease.why
            ));
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            checked = crate::timing::check_skew_margin(
                &self.bank, &self.clock, self.config.lease.skew_margin,
            ) => checked.with_context(|| {
                format!("refusing to start on bank=`{}`", self.bank.label())
            })?,
        }
        info!(bank = self.bank.label(), renewal = ?capabilities.renewal,
            owner_lease = %lease.basis,
            interval = %humantime::format_duration(self.config.gc.interval),
            dry_run = self.config.gc.dry_run, "bank probed; starting as standby");

        let server = match &self.config.gc.metrics_addr {
            Some(addr) => Some(MetricsServer::start(addr, self.metrics.clone()).await?),
            None => None,
        };
        let result = self.lead_or_wait(once, &cancel).await;
        self.metrics.set_active(false);
        if let Some(server) = server {
            server.stop(&self.clock).await;
        }
        result
    }

    /// Alternate between standby and active until shutdown (or, with `once`, one pass).
    async fn lead_or_wait(
        &self,
        once: bool,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Option<PassReport>> {
        let collector = Arc::new(Collector::new(
            self.bank.clone(),
            self.clock.clone(),
            // Long-running: it can afford to hold collection back one window after it starts,
            // to be safe from a step it had no reading before. A single pass (`--once`) cannot:
            // it would never collect.
            GcOptions::from_config(&self.config)
                .to_builder()
                .floor_at_first_reading(!once)
                .build(),
        ));
        let tracker = TaskTracker::new();
        loop {
            let Some(lease) = self.standby(&collector, cancel).await else {
                return Ok(None);
            };
            let keeper = lease.spawn_keeper(Jitter::from_entropy(), self.config.lease.renew_jitter);
            self.metrics.set_active(true);
            info!("active: holding the gc lease");
            let end = self
                .active(&keeper, &collector, &tracker, once, cancel)
                .await;
            self.metrics.set_active(false);
            let report = match end {
                End::Lost(reason) => {
                    warn!(%reason, "gc lease lost; back to standby");
                    keeper.stop().await;
                    continue;
                }
                End::Shutdown => None,
                End::Once(result) => Some(result),
            };
            // Passes are awaited where they start, so the tracker is empty here unless a pass
            // task outlived its awaiting future; never release under a running pass.
            tracker.close();
            tracker.wait().await;
            keeper.release().await.with_context(|| {
                format!(
                    "cannot release the gc lease: path=`{}`; a standby takes over once it \
                     expires (lease_expire_window=`{}`)",
                    self.lease_path(),
                    humantime::format_duration(self.config.gc.lease_expire_window)
                )
            })?;
            info!("gc lease released");
            return report.transpose();
        }
    }

    /// Try to take the GC lease every `lease_renew_window` until it is won (`Some`) or shutdown
    /// is requested (`None`).
    async fn standby(
        &self,
        collector: &Collector,
        cancel: &CancellationToken,
    ) -> Option<OwnerLease> {
        let path = self.lease_path();
        let windows = self.config.gc.lease_windows();
        let mut holder = OnChange::default();
        let mut failure = OnChange::default();
        loop {
            if cancel.is_cancelled() {
                return None;
            }
            // Keep reading the store clock while on standby, so that the first pass after a
            // takeover has a recent reading to compare with (and a step meanwhile is seen).
            match collector.watch_clock().await {
                Ok(()) => {}
                Err(
                    e @ (banklease::Error::ClockStep { .. }
                    | banklease::Error::ClockUnverified { .. }),
                ) => {
                    // A step (or a reading that could not be checked for one) may make the
                    // active GC's lease look expired: not this round.
                    warn!(error = %error_chain(&e), "standby: the store clock stepped; not taking over this round");
                    tokio::select! {
                        () = cancel.cancelled() => return None,
                        () = self.clock.sleep(windows.renew_window) => {}
                    }
                    continue;
                }
                Err(e) => {
                    debug!(error = %error_chain(&e), "standby: store-clock reading failed");
                }
            }
            // Not raced against shutdown: an acquire abandoned after its write landed would
            // leave a lease nobody renews, and every standby would wait out its expire window.
            // A lease won just as shutdown comes is released by the caller at once.
            let attempt = OwnerLease::take_over_at(
                &self.bank,
                path.clone(),
                self.owner.clone(),
                windows,
                self.clock.clone(),
                // A read up to `read_staleness` old is judged that much earlier: the same as a
                // margin that much larger.
                self.config
                    .lease
                    .skew_margin
                    .saturating_add(self.config.gc.read_staleness),
            )
            .await;
            match attempt {
                Ok(lease) => return Some(lease),
                Err(banklease::Error::LeaseExists { owner_id }) => {
                    failure.reset();
                    let ours = owner_id == self.owner.as_str();
                    if holder.changed(&owner_id) {
                        info!(holder = %owner_id, ours, "standby: the gc lease is held and alive");
                    } else {
                        debug!(holder = %owner_id, ours, "standby: the gc lease is still held");
                    }
                }
                Err(e) => {
                    holder.reset();
                    let message = error_chain(&e);
                    if failure.changed(&message) {
                        warn!(error = %message, "standby: cannot take the gc lease; retrying");
                    } else {
                        debug!(error = %message, "standby: cannot take the gc lease; retrying");
                    }
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = self.clock.sleep(windows.renew_window) => {}
            }
        }
    }

    /// Run passes while the lease is held: the first at once, then each `interval` after the
    /// previous one ended.
    async fn active(
        &self,
        keeper: &Keeper,
        collector: &Arc<Collector>,
        tracker: &TaskTracker,
        once: bool,
        cancel: &CancellationToken,
    ) -> End {
        let lease = keeper.lease();
        let mut state = keeper.state();
        let mut next_pass = self.clock.now();
        loop {
            if cancel.is_cancelled() {
                return End::Shutdown;
            }
            if let Some(reason) = lost_reason(&state.borrow_and_update()) {
                return End::Lost(reason);
            }
            let now = self.clock.now();
            let wait = if now < next_pass {
                next_pass - now
            } else if lease.check_validity() {
                let result = self.pass(collector, tracker).await;
                if once {
                    return End::Once(result);
                }
                // Measured from the end, so a slow pass never runs back to back with the next.
                next_pass = self.clock.now() + self.config.gc.interval;
                continue;
            } else {
                // Too little lease time left to promise a standby will not start meanwhile. The
                // keeper is renewing; its next state change wakes us, the cap is a backstop.
                debug!(remaining = ?lease.remaining(), "gc lease validity too short to start a pass; waiting for renewal");
                self.config.gc.lease_renew_window
            };
            tokio::select! {
                () = cancel.cancelled() => return End::Shutdown,
                changed = state.changed() => if changed.is_err() {
                    return End::Lost("the lease state channel closed".to_owned());
                },
                () = self.clock.sleep(wait) => {}
            }
        }
    }

    /// Run one pass to its end, log and count it.
    async fn pass(
        &self,
        collector: &Arc<Collector>,
        tracker: &TaskTracker,
    ) -> anyhow::Result<PassReport> {
        let started = self.clock.now();
        let collector = collector.clone();
        // A task of its own: a panic in a pass is reported like a failed pass, and shutdown's
        // `tracker.wait()` covers it. Awaited without racing shutdown: never abandoned half-way.
        let task = tracker
            .spawn(async move { collector.run_pass().await }.instrument(tracing::Span::current()));
        let result = match task.await {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(e)) => Err(anyhow::Error::new(e).context("gc pass failed")),
            Err(join) => Err(anyhow!("gc pass task ended abnormally: {join}")),
        };
        match &result {
            Ok(report) => {
                // The collector logs its own summary (and a brake, as an error); this line only
                // adds what the daemon saw.
                self.metrics.record_pass(report, self.clock.system_now());
                debug!(
                    alive = report.alive,
                    dead = report.dead,
                    unreadable = report.unreadable,
                    collected = report.collected,
                    errors = report.errors,
                    braked = report.braked.is_some(),
                    duration_ms = report.duration_ms,
                    "pass recorded in metrics"
                );
            }
            Err(e) => {
                self.metrics
                    .record_failed_pass(self.clock.now().saturating_duration_since(started));
                error!(error = %format!("{e:#}"), "gc pass failed; trying again next interval");
            }
        }
        result
    }

    fn lease_path(&self) -> object_store::path::Path {
        self.bank.path(&GC_LEASE_PATH)
    }
}

/// Why a lease in `state` can no longer be counted on; `None` while it is held.
fn lost_reason(state: &LeaseState) -> Option<String> {
    match state {
        LeaseState::Held { .. } => None,
        LeaseState::Lost { reason } => Some(reason.clone()),
        LeaseState::Released => Some("released".to_owned()),
    }
}

/// Remembers the last value seen, so that a condition repeating every few seconds is logged
/// loudly once and quietly after.
#[derive(Debug, Default)]
struct OnChange {
    last: Option<String>,
}

impl OnChange {
    /// True when `value` differs from the previous one (or there was none).
    fn changed(&mut self, value: &str) -> bool {
        if self.last.as_deref() == Some(value) {
            return false;
        }
        self.last = Some(value.to_owned());
        true
    }

    /// Forget the previous value: the condition ended.
    fn reset(&mut self) {
        self.last = None;
    }
}

/// The `/metrics` and `/healthz` server, running until stopped.
#[derive(Debug)]
struct MetricsServer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MetricsServer {
    async fn start(addr: &str, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on metrics_addr=`{addr}`"))?;
        let local = listener
            .local_addr()
            .with_context(|| format!("cannot read the bound address of metrics_addr=`{addr}`"))?;
        info!(addr = %local, "serving /metrics and /healthz");
        let stop = CancellationToken::new();
        let task = tokio::spawn(metrics::serve(
            listener,
            metrics,
            stop.clone().cancelled_owned(),
        ));
        Ok(Self { stop, task })
    }

    /// Stop accepting and let open requests finish, for at most [`METRICS_STOP_GRACE`].
    async fn stop(mut self, clock: &SharedClock) {
        self.stop.cancel();
        let ended = tokio::select! {
            ended = &mut self.task => ended,
            () = clock.sleep(METRICS_STOP_GRACE) => {
                warn!(grace = ?METRICS_STOP_GRACE, "metrics connections still open; closing them");
                self.task.abort();
                return;
            }
        };
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "the metrics server failed"),
            Err(e) => warn!(error = %e, "the metrics server task ended abnormally"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use banklease::clock::Clock as _;
    use banklease_testkit::failing::FailingStore;
    use banklease_testkit::sim_store::{SimStore, StoreClock};
    use futures::stream::BoxStream;
    use futures::StreamExt as _;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        ObjectStoreExt as _, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    };

    fn config() -> Config {
        let env = [
            ("BANKLEASE_GC__LEASE_RENEW_WINDOW", "100ms"),
            ("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "1s"),
            ("BANKLEASE_GC__LEASE_VALIDITY_WINDOW", "50ms"),
            ("BANKLEASE_GC__INTERVAL", "50ms"),
            ("BANKLEASE_LEASE__SKEW_MARGIN", "50ms"),
            ("BANKLEASE_LEASE__OWNER_ID_SCHEME", "uuid"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        Config::load_from(None, env).unwrap()
    }

    fn clock() -> SharedClock {
        Arc::new(SystemClock)
    }

    /// Poll `cond` every 10 ms for at most `secs` seconds.
    async fn eventually(secs: u64, what: &str, cond: impl Fn() -> bool) {
        for _ in 0..secs * 100 {
            if cond() {
                return;
            }
            SystemClock.sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out after {secs}s waiting until {what}");
    }

    #[test]
    fn on_change_reports_only_new_values() {
        let mut c = OnChange::default();
        assert!(c.changed("a"));
        assert!(!c.changed("a"));
        assert!(c.changed("b"));
        c.reset();
        assert!(c.changed("b"));
    }

    #[test]
    fn only_held_is_not_lost() {
        assert_eq!(
            lost_reason(&LeaseState::Lost { reason: "x".into() }).as_deref(),
            Some("x")
        );
        assert_eq!(
            lost_reason(&LeaseState::Released).as_deref(),
            Some("released")
        );
        assert!(lost_reason(&LeaseState::Held {
            valid_until: SystemClock.now()
        })
        .is_none());
    }

    #[tokio::test]
    async fn refuses_to_start_when_the_probe_fails() {
        let store = FailingStore::new(InMemory::new());
        store.set_partitioned(true);
        let bank = Bank::from_store(Arc::new(store), "", "partitioned://");
        let daemon = Daemon::new(bank, clock(), config());
        let err = daemon
            .run(std::future::pending())
            .await
            .expect_err("a bank that cannot be probed is refused");
        let msg = format!("{err:#}");
        assert!(msg.contains("refusing to start"), "{msg}");
        assert!(msg.contains("partitioned://"), "{msg}");
    }

    /// Issue 11, defect 11: a store that stamps whole seconds (S3, Swift's Last-Modified) and
    /// a 50 ms margin: no judgement could absorb the truncation.
    #[tokio::test]
    async fn refuses_to_start_when_the_margin_is_below_the_stamp_resolution() {
        let world = banklease::clock::MockClock::new();
        // The mock clock's wall time starts on a whole second and is not advanced: every
        // stamp is a whole second.
        let store = SimStore::new(StoreClock::new(world.clone()));
        let bank = Bank::from_store(Arc::new(store), "", "whole-seconds://");
        let daemon = Daemon::new(bank, Arc::new(world), config());
        // Bounded: a daemon that starts would run until shutdown.
        let err = tokio::time::timeout(Duration::from_secs(20), daemon.run(std::future::pending()))
            .await
            .expect("the daemon refuses to start instead of running")
            .expect_err("a margin below the stamp resolution is refused");
        let msg = format!("{err:#}");
        assert!(msg.contains("lease.skew_margin=`50ms`"), "{msg}");
        assert!(msg.contains("resolution=`1s`"), "{msg}");
    }

    #[tokio::test]
    async fn shutdown_before_the_probe_ends_cleanly() {
        let bank = Bank::open("memory://").unwrap();
        let result = Daemon::new(bank, clock(), config())
            .run_once(std::future::ready(()))
            .await
            .unwrap();
        assert!(result.is_none());
    }

    /// A store whose listings wait at a gate, so that a test can hold a pass in flight.
    #[derive(Debug)]
    struct GatedStore {
        inner: InMemory,
        gate: Arc<tokio::sync::Semaphore>,
        entered: Arc<tokio::sync::Notify>,
    }

    impl std::fmt::Display for GatedStore {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "GatedStore({})", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for GatedStore {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            let inner = self.inner.list(prefix);
            let (gate, entered) = (self.gate.clone(), self.entered.clone());
            futures::stream::once(async move {
                entered.notify_one();
                // Each permit lets one listing through; the gate is never closed.
                gate.acquire().await.expect("gate open").forget();
                inner
            })
            .flatten()
            .boxed()
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn shutdown_waits_for_the_pass_in_flight_then_releases() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let entered = Arc::new(tokio::sync::Notify::new());
        let store = GatedStore {
            inner: InMemory::new(),
            gate: gate.clone(),
            entered: entered.clone(),
        };
        let bank = Bank::from_store(Arc::new(store), "", "gated://");
        let path = bank.path(&GC_LEASE_PATH);
        let daemon = Daemon::new(bank.clone(), clock(), config());
        let metrics = daemon.metrics().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(daemon.run(async move {
            let _ = stopped.await;
        }));

        tokio::time::timeout(Duration::from_secs(5), entered.notified())
            .await
            .expect("the first pass starts listing");
        stop.send(()).unwrap();
        // Many renew windows later: still waiting for the pass, still holding the lease (the
        // keeper renews it meanwhile, so no standby could start a pass).
        SystemClock.sleep(Duration::from_millis(400)).await;
        assert!(
            !run.is_finished(),
            "shutdown must wait for the pass in flight"
        );
        assert!(
            bank.store().head(&path).await.is_ok(),
            "lease kept during the pass"
        );
        assert!(metrics.is_active());

        // Open the gate for the rest of the pass (it lists the protecting index, then leases).
        gate.add_permits(16);
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("the daemon stops once the pass ended")
            .unwrap()
            .unwrap();
        assert_eq!(
            metrics.passes(metrics::Outcome::Ok) + metrics.passes(metrics::Outcome::Failed),
            1,
            "the pass in flight finished and no new one started"
        );
        assert!(
            bank.store().head(&path).await.is_err(),
            "lease released after the pass"
        );
        assert!(!metrics.is_active());
    }

    #[tokio::test]
    async fn one_active_per_bank_and_release_on_shutdown() {
        let bank = Bank::open("memory://").unwrap();
        let path = bank.path(&GC_LEASE_PATH);
        let a = Daemon::new(bank.clone(), clock(), config());
        let b = Daemon::new(bank.clone(), clock(), config());
        let (ma, mb) = (a.metrics().clone(), b.metrics().clone());
        let (stop_a, a_stopped) = tokio::sync::oneshot::channel::<()>();
        let (stop_b, b_stopped) = tokio::sync::oneshot::channel::<()>();
        let a = tokio::spawn(a.run(async move {
            let _ = a_stopped.await;
        }));
        let b = tokio::spawn(b.run(async move {
            let _ = b_stopped.await;
        }));

        eventually(5, "one daemon is active", || {
            ma.is_active() || mb.is_active()
        })
        .await;
        // Several renew windows: the other one must stay on standby.
        for _ in 0..30 {
            assert!(
                ma.is_active() != mb.is_active(),
                "exactly one daemon must be active"
            );
            SystemClock.sleep(Duration::from_millis(10)).await;
        }
        // Passes run (and, while the collector is not there yet, fail) without ending the
        // active spell.
        let (active_metrics, standby_metrics) = if ma.is_active() {
            (&ma, &mb)
        } else {
            (&mb, &ma)
        };
        eventually(5, "the active daemon runs passes", || {
            let m = active_metrics;
            m.passes(metrics::Outcome::Ok) + m.passes(metrics::Outcome::Failed) >= 2
        })
        .await;
        assert!(active_metrics.is_active());
        let standby_passes = standby_metrics.passes(metrics::Outcome::Ok)
            + standby_metrics.passes(metrics::Outcome::Failed);
        assert_eq!(standby_passes, 0, "a standby never runs a pass");

        // Stop the active one: it releases, so the standby takes over well before expiry.
        let (stop_active, active_task, standby_task, stop_standby) = if ma.is_active() {
            (stop_a, a, b, stop_b)
        } else {
            (stop_b, b, a, stop_a)
        };
        stop_active.send(()).unwrap();
        active_task.await.unwrap().unwrap();
        eventually(5, "the standby takes over", || standby_metrics.is_active()).await;
        assert!(!active_metrics.is_active());

        stop_standby.send(()).unwrap();
        standby_task.await.unwrap().unwrap();
        assert!(!standby_metrics.is_active());
        assert!(
            bank.store().head(&path).await.is_err(),
            "the gc lease is released on shutdown"
        );
    }
}
