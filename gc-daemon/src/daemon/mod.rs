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

use banklease::clock::{Jitter, SharedClock};
use banklease::config::Config;
use banklease::error::error_chain;
use banklease::{Bank, Keeper, OwnerId, OwnerLease};
use banklease_gc::error::{Context as _, Result};
use banklease_gc::run::{
    collector, gc_lease_path, interrupted, run_tracked, until_shutdown, wait_under_lease,
    Interrupted,
};
use banklease_gc::{Collector, OnePass, PassReport, Single};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::metrics::Metrics;

mod server;
use server::MetricsServer;

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
    /// The bank, clock, configuration and id, as a single pass of this daemon runs them.
    one: OnePass,
    metrics: Arc<Metrics>,
}

impl Daemon {
    /// A daemon on the bank named by `config.bank.url`, on the system clock, with its store
    /// client's configured limits (the budget the configuration was judged on).
    pub fn open(config: Config) -> Result<Self> {
        Ok(Self::from_pass(OnePass::open(config)?))
    }

    /// A daemon on an already opened `bank` (for tests and embedding). `config.bank` is ignored.
    pub fn new(bank: Bank, clock: SharedClock, config: Config) -> Self {
        Self::from_pass(OnePass::new(bank, clock, config))
    }

    fn from_pass(one: OnePass) -> Self {
        Self {
            one,
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// For a single pass ([`run_single`](Self::run_single)): collect even when the safety brake
    /// would refuse. An operator's override; a daemon that keeps running ignores it.
    pub fn with_force(mut self, force: bool) -> Self {
        self.one = self.one.with_force(force);
        self
    }

    /// For a single pass: run it even while another daemon is active (beside it, without the
    /// GC lease) instead of refusing. An operator's override, apart from the brake's.
    pub fn beside_daemon(mut self, beside: bool) -> Self {
        self.one = self.one.beside_daemon(beside);
        self
    }

    /// The id this daemon holds the GC lease under.
    pub fn owner_id(&self) -> &OwnerId {
        self.one.owner_id()
    }

    /// The daemon's metrics (also served on `gc.metrics_addr` when set).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Run until `shutdown` completes: standby, active, standby again if the lease is lost.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        until_shutdown(self.one.owner_id(), shutdown, |cancel| self.work(cancel)).await
    }

    /// One pass, as [`run_single`](Self::run_single), its report only.
    pub async fn run_once(self, shutdown: impl Future<Output = ()>) -> Result<Option<PassReport>> {
        Ok(self.run_single(shutdown).await?.map(|single| single.report))
    }

    /// One pass ([`OnePass`], as `banklease gc` runs it) under this daemon's id: it takes the
    /// GC lease at once and releases it after, or refuses while another daemon holds it
    /// (unless [`beside_daemon`](Self::beside_daemon)); a dry run takes no lease and reads only.
    /// Serves no metrics. `Ok(None)` when `shutdown` came first.
    pub async fn run_single(self, shutdown: impl Future<Output = ()>) -> Result<Option<Single>> {
        self.one.run(shutdown).await
    }

    async fn work(&self, cancel: CancellationToken) -> Result<()> {
        if !banklease_gc::run::preflight(
            self.one.bank(),
            self.one.clock(),
            self.one.config(),
            false,
            &cancel,
        )
        .await?
        {
            return Ok(());
        }
        let server = match &self.one.config().gc.metrics_addr {
            Some(addr) => Some(MetricsServer::start(addr, self.metrics.clone()).await?),
            None => None,
        };
        let result = self.lead_or_wait(&cancel).await;
        self.metrics.set_active(false);
        if let Some(server) = server {
            server.stop(self.one.clock()).await;
        }
        result
    }

    /// Stand by until the GC lease is won, run passes while it is held, stand by again when it
    /// is lost; at shutdown, finish the pass in flight and release the lease.
    async fn lead_or_wait(&self, cancel: &CancellationToken) -> Result<()> {
        let collector = collector(
            self.one.bank(),
            self.one.clock(),
            self.one.config(),
            self.one.owner_id(),
            false,
            false,
        );
        let tracker = TaskTracker::new();
        loop {
            let Some(lease) = self.standby(&collector, cancel).await else {
                return Ok(());
            };
            let keeper =
                lease.spawn_keeper(Jitter::from_entropy(), self.one.config().lease.renew_jitter);
            self.metrics.set_active(true);
            info!("active: holding the gc lease");
            let end = self.active(&keeper, &collector, &tracker, cancel).await;
            self.metrics.set_active(false);
            if let Interrupted::Lost(reason) = end {
                warn!(%reason, "gc lease lost; back to standby");
                keeper.stop().await;
                continue;
            }
            tracker.close();
            tracker.wait().await;
            keeper.release().await.with_context(|| {
                format!(
                    "cannot release the gc lease: path=`{}`; a standby takes over once it \
                     expires (lease_expire_window=`{}`)",
                    gc_lease_path(self.one.bank()),
                    humantime::format_duration(self.one.config().gc.lease.expire_window)
                )
            })?;
            info!("gc lease released");
            return Ok(());
        }
    }

    /// Wait as standby until the GC lease is won (`None`: shutdown came first). Each round
    /// first watches the store clock: a step seen by a standby is not a moment to take over.
    async fn standby(
        &self,
        collector: &Collector,
        cancel: &CancellationToken,
    ) -> Option<OwnerLease> {
        let windows = self.one.config().gc.lease;
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
                        () = self.one.clock().sleep(windows.renew_window) => {}
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
            match banklease_gc::run::take_gc_lease(
                self.one.bank(),
                self.one.owner_id(),
                self.one.config(),
                self.one.clock(),
            )
            .await
            {
                Ok(lease) => return Some(lease),
                Err(banklease::Error::LeaseExists {
                    owner_id,
                    host,
                    pid,
                }) => {
                    failure.reset();
                    let ours = owner_id == *self.one.owner_id();
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
                () = self.one.clock().sleep(windows.renew_window) => {}
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
        cancel: &CancellationToken,
    ) -> Interrupted {
        let lease = keeper.lease();
        let mut state = keeper.state();
        let mut next_pass = self.one.clock().now();
        loop {
            if let Some(interrupted) = interrupted(cancel, &mut state) {
                return interrupted;
            }
            let now = self.one.clock().now();
            let wait = if now < next_pass {
                next_pass - now
            } else if lease.check_validity() {
                // A failed pass is logged and counted; the next one runs at the interval.
                self.pass(collector, tracker).await;
                // Measured from the end, so a slow pass never runs back to back with the next.
                next_pass = self.one.clock().now() + self.one.config().gc.interval;
                continue;
            } else {
                // Too little lease time left to promise a standby will not start meanwhile. The
                // keeper is renewing; its next state change wakes us, the cap is a backstop.
                debug!(remaining = ?lease.remaining(), "gc lease validity too short to start a pass; waiting for renewal");
                self.one.config().gc.lease.renew_window
            };
            if let Err(interrupted) =
                wait_under_lease(cancel, &mut state, self.one.clock(), wait).await
            {
                return interrupted;
            }
        }
    }

    /// Run one pass to its end, log and count it.
    async fn pass(&self, collector: &Arc<Collector>, tracker: &TaskTracker) {
        let started = self.one.clock().now();
        let result = run_tracked(collector, tracker).await;
        match &result {
            Ok(report) => {
                // The collector logs its own summary (and a brake, as an error); this line only
                // adds what the daemon saw.
                self.metrics
                    .record_pass(report, self.one.clock().system_now());
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
                    .record_failed_pass(self.one.clock().now().saturating_duration_since(started));
                error!(error = %error_chain(e), "gc pass failed; trying again next interval");
            }
        }
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

#[cfg(test)]
mod tests;
