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

use banklease::clock::{Jitter, SharedClock, SystemClock};
use banklease::config::{Config, OwnerIdScheme};
use banklease::error_chain;
use banklease::paths::Key;
use banklease::{Bank, Keeper, LeaseState, OwnerId, OwnerLease};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument as _};

use crate::error::{Context as _, Error, Result};
use crate::metrics::{self, Metrics};
use crate::options::GcOptions;
use crate::pass::Collector;
use crate::report::PassReport;

mod single;
pub use single::{host_pid, ActiveElsewhere, PassLease, Single};

/// How long open `/metrics` requests may take to finish once the daemon stops; a client that
/// holds its connection longer is cut off rather than delay the exit.
const METRICS_STOP_GRACE: Duration = Duration::from_secs(5);

/// Run the daemon on the bank of `config` until `shutdown` completes.
///
/// Errors only when it cannot start (bank unusable, metrics address taken) or cannot release
/// the GC lease at shutdown. Failed passes are logged and counted, never fatal.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    Daemon::open(config)?.run(shutdown).await
}

/// One pass with the GC lease ([`Daemon::run_single`]; refused while another daemon is active),
/// its report. `Ok(None)` when `shutdown` completed before a pass could start.
pub async fn run_once(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Option<PassReport>> {
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
    /// A single pass collects past the safety brake.
    force: bool,
    /// A single pass runs beside an active daemon (without the GC lease).
    beside: bool,
}

/// How a spell as the active daemon ended.
#[derive(Debug)]
enum End {
    /// Shutdown was requested.
    Shutdown,
    /// The keeper lost the GC lease.
    Lost(String),
    /// `--once`: the single pass ran (boxed: a report is large beside the other variants).
    Once(Box<Result<PassReport>>),
}

impl Daemon {
    /// A daemon on the bank named by `config.bank.url`, on the system clock.
    pub fn open(config: Config) -> Result<Self> {
        let url = config.bank_url()?;
        // Its store client with the configured limits: the budget the configuration was
        // judged on.
        let bank = Bank::open_configured(&config.bank, false)
            .with_context(|| format!("cannot open the bank: url=`{url}`"))?;
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
            force: false,
            beside: false,
        }
    }

    /// For a single pass ([`run_single`](Self::run_single)): collect even when the safety brake
    /// would refuse. An operator's override; a daemon that keeps running ignores it.
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// For a single pass: run it even while another daemon is active (beside it, without the
    /// GC lease) instead of refusing. An operator's override, apart from the brake's.
    pub fn beside_daemon(mut self, beside: bool) -> Self {
        self.beside = beside;
        self
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
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        self.execute(false, shutdown).await.map(|_| ())
    }

    /// One pass, as [`run_single`](Self::run_single), its report only.
    pub async fn run_once(self, shutdown: impl Future<Output = ()>) -> Result<Option<PassReport>> {
        Ok(self.run_single(shutdown).await?.map(|single| single.report))
    }

    /// One pass (`banklease gc`, `banklease-gc --once`): it takes the GC lease at once and
    /// releases it after, or refuses with [`ActiveElsewhere`] while another daemon holds it
    /// (unless [`beside_daemon`](Self::beside_daemon)); a dry run takes no lease. Serves no metrics.
    /// `Ok(None)` when `shutdown` came first.
    ///
    /// A dry run reads only: it goes through a [`reading_only`](Bank::reading_only) handle,
    /// so it leaves nothing new in the bank and works for a user who may only read.
    pub async fn run_single(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Option<Single>> {
        if self.config.gc.dry_run {
            self.bank = self.bank.reading_only();
        }
        self.execute(true, shutdown).await
    }

    async fn execute(
        self,
        once: bool,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Option<Single>> {
        let cancel = CancellationToken::new();
        // Every line names this collector by its host and pid beside its id.
        let span = tracing::info_span!("gc", owner_id = %self.owner,
            host = %banklease::local_hostname(), pid = std::process::id());
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

    async fn work(&self, once: bool, cancel: CancellationToken) -> Result<Option<Single>> {
        // A bank in a layout this release does not know is not touched.
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            checked = banklease::layout::check(&self.bank) => checked.with_context(|| {
                format!("refusing to start on bank=`{}`", self.bank.label())
            })?,
        }
        // A dry run (a reading-only handle) probes nothing: the probe writes, and a bank that
        // fails it holds no owner to judge (an owner's acquire runs the same probe and refuses
        // such a bank), so the pass finds what a collecting pass would.
        let probed = if self.bank.is_reading_only() {
            None
        } else {
            // Aborting the probe on shutdown is harmless: at worst it leaves its probe key.
            let capabilities = tokio::select! {
                biased;
                () = cancel.cancelled() => return Ok(None),
                probed = self.bank.capabilities() => probed.with_context(|| {
                    format!(
                        "refusing to start: cannot probe what bank=`{}` supports",
                        self.bank.label()
                    )
                })?,
            };
            // Cheap: from the probe alone; `banklease doctor` runs the races.
            let lease = banklease::doctor::owner_lease_verdict(capabilities);
            if lease.basis == banklease::doctor::Basis::NotAtAll {
                return Err(Error::LeasesUnsupported {
                    bank: self.bank.label().to_owned(),
                    why: lease.why,
                });
            }
            Some((capabilities.renewal, lease.basis))
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            checked = crate::timing::check_skew_margin(
                &self.bank, &self.clock, self.config.lease.skew_margin,
            ) => checked.with_context(|| {
                format!("refusing to start on bank=`{}`", self.bank.label())
            })?,
        }
        match probed {
            Some((renewal, basis)) if once => info!(bank = self.bank.label(), ?renewal,
                owner_lease = %basis, dry_run = self.config.gc.dry_run,
                "bank probed; running one pass"),
            Some((renewal, basis)) => info!(bank = self.bank.label(), ?renewal,
                owner_lease = %basis,
                interval = %humantime::format_duration(self.config.gc.interval),
                dry_run = self.config.gc.dry_run, "bank probed; starting as standby"),
            None => info!(
                bank = self.bank.label(),
                "dry run: reading only, nothing probed"
            ),
        }

        // A single pass serves no metrics: the port is the running daemon's.
        let server = match &self.config.gc.metrics_addr {
            Some(addr) if !once => Some(MetricsServer::start(addr, self.metrics.clone()).await?),
            _ => None,
        };
        let result = self.lead_or_wait(once, &cancel).await;
        self.metrics.set_active(false);
        if let Some(server) = server {
            server.stop(&self.clock).await;
        }
        result
    }

    /// Alternate between standby and active until shutdown (or, with `once`, one pass).
    async fn lead_or_wait(&self, once: bool, cancel: &CancellationToken) -> Result<Option<Single>> {
        let collector = Arc::new(Collector::new(
            self.bank.clone(),
            self.clock.clone(),
            // Long-running: it can afford to hold collection back one window after it starts,
            // to be safe from a step it had no reading before. A single pass (`--once`) cannot:
            // it would never collect.
            GcOptions::from_config(&self.config)
                .to_builder()
                .floor_at_first_reading(!once)
                .force(once && self.force)
                .collector(self.owner.to_string())
                .build(),
        ));
        let tracker = TaskTracker::new();
        if once {
            return self.single(&collector, &tracker, cancel).await;
        }
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
            match end {
                End::Lost(reason) => {
                    warn!(%reason, "gc lease lost; back to standby");
                    keeper.stop().await;
                    continue;
                }
                // A daemon that keeps running ends only by shutdown.
                End::Shutdown | End::Once(_) => {}
            }
            // Passes are awaited where they start, so the tracker is empty here unless a pass
            // task outlived its awaiting future; never release under a running pass.
            tracker.close();
            tracker.wait().await;
            keeper.release().await.with_context(|| {
                format!(
                    "cannot release the gc lease: path=`{}`; a standby takes over once it \
                     expires (lease_expire_window=`{}`)",
                    self.lease_path(),
                    humantime::format_duration(self.config.gc.lease.expire_window)
                )
            })?;
            info!("gc lease released");
            return Ok(None);
        }
    }

    /// Try to take the GC lease every `lease_renew_window` until it is won (`Some`) or shutdown
    /// is requested (`None`).
    async fn standby(
        &self,
        collector: &Collector,
        cancel: &CancellationToken,
    ) -> Option<OwnerLease> {
        let windows = self.config.gc.lease;
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
            match self.take_gc_lease().await {
                Ok(lease) => return Some(lease),
                Err(banklease::Error::LeaseExists {
                    owner_id,
                    host,
                    pid,
                }) => {
                    failure.reset();
                    let ours = owner_id == self.owner;
                    if holder.changed(owner_id.as_str()) {
                        // From the read that judged it: no request of its own.
                        info!(holder = %owner_id, holder_host = host.as_deref().unwrap_or("-"),
                            holder_pid = pid.unwrap_or(0), ours,
                            "standby: the gc lease is held and alive");
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

    /// One attempt at the GC lease: won only once its holder's lease has expired on the store's
    /// clock (the standby's and a single pass's way in).
    async fn take_gc_lease(&self) -> banklease::Result<OwnerLease> {
        OwnerLease::take_over_at(
            &self.bank,
            self.lease_path(),
            self.owner.clone(),
            self.config.gc.lease,
            self.clock.clone(),
            // A read up to `read_staleness` old is judged that much earlier: the same as a
            // margin that much larger.
            self.config
                .lease
                .skew_margin
                .saturating_add(self.config.gc.read_staleness),
        )
        .await
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
                    return End::Once(Box::new(result));
                }
                // Measured from the end, so a slow pass never runs back to back with the next.
                next_pass = self.clock.now() + self.config.gc.interval;
                continue;
            } else {
                // Too little lease time left to promise a standby will not start meanwhile. The
                // keeper is renewing; its next state change wakes us, the cap is a backstop.
                debug!(remaining = ?lease.remaining(), "gc lease validity too short to start a pass; waiting for renewal");
                self.config.gc.lease.renew_window
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
    async fn pass(&self, collector: &Arc<Collector>, tracker: &TaskTracker) -> Result<PassReport> {
        let started = self.clock.now();
        let collector = collector.clone();
        // A task of its own: a panic in a pass is reported like a failed pass, and shutdown's
        // `tracker.wait()` covers it. Awaited without racing shutdown: never abandoned half-way.
        let task = tracker
            .spawn(async move { collector.run_pass().await }.instrument(tracing::Span::current()));
        let result = match task.await {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(e)) => Err(e).with_context(|| "gc pass failed".to_owned()),
            Err(join) => Err(Error::PassAborted(join.to_string())),
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
                error!(error = %error_chain(e), "gc pass failed; trying again next interval");
            }
        }
        result
    }

    fn lease_path(&self) -> object_store::path::Path {
        Key::GcActive.path(&self.bank)
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
    async fn start(addr: &str, metrics: Arc<Metrics>) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Metrics {
                context: format!("cannot listen on metrics_addr=`{addr}`"),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| Error::Metrics {
            context: format!("cannot read the bound address of metrics_addr=`{addr}`"),
            source,
        })?;
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
mod tests;
