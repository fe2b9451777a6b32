//! A single pass (`banklease gc`, `banklease-gc --once`): it takes the GC lease for its pass
//! and releases it after, or — while an active daemon holds it — refuses, unless forced, and
//! says which. A dry run deletes nothing and takes no lease.
//!
//! Invariant: **a manual pass never runs unannounced beside the active daemon.** Collection is
//! safe either way (every collection is decided by a create-if-absent write per checkpoint), but
//! two collectors at once duplicate work and reports, and an operator who did not mean it must
//! be told; `--beside-daemon` is the operator saying they know.

use std::future::Future;
use std::sync::Arc;

use banklease::clock::{Jitter, SharedClock, SystemClock};
use banklease::config::Config;
use banklease::{Bank, Keeper, OwnerId};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use super::{
    collector, collector_id, gc_lease_path, interrupted, preflight, run_tracked, wait_under_lease,
    Interrupted,
};
use crate::error::{Context as _, Error, Result};
use crate::pass::report::PassReport;
use crate::pass::Collector;

/// How a single pass stood with the GC lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "gc_lease", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PassLease {
    /// It held the GC lease for its pass, and released it.
    Held,
    /// An active daemon held the GC lease; `--beside-daemon` ran the pass beside it.
    Beside {
        /// The active daemon's owner id.
        holder: String,
        /// Its host, as its lease says (`None`: the lease could not be read).
        holder_host: Option<String>,
        /// Its pid, as its lease says.
        holder_pid: Option<u32>,
    },
    /// A dry run deletes nothing: it takes no lease.
    NotNeeded,
}

/// What a single pass did, and how it stood with the GC lease.
#[derive(Debug, Clone)]
pub struct Single {
    /// The pass's report.
    pub report: PassReport,
    /// Whether it held the GC lease.
    pub lease: PassLease,
}

/// A single pass refused: an active daemon holds the GC lease.
#[derive(Debug)]
pub struct ActiveElsewhere {
    /// The active daemon's owner id.
    pub holder: banklease::OwnerId,
    /// Its host, as its lease says (`None`: the lease could not be read).
    pub holder_host: Option<String>,
    /// Its pid, as its lease says.
    pub holder_pid: Option<u32>,
    /// The bank.
    pub bank: String,
}

impl std::fmt::Display for ActiveElsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refusing a gc pass: the gc daemon holder=`{}`{} is active on bank=`{}` (it holds \
             `gc/active`); let it collect, stop it first, or pass --beside-daemon to run \
             this pass beside it",
            self.holder,
            host_pid(self.holder_host.as_deref(), self.holder_pid),
            self.bank
        )
    }
}

impl std::error::Error for ActiveElsewhere {}

/// ` (host=`h`, pid=`7`)` beside a collector's id, or nothing when its lease could not be read.
pub fn host_pid(host: Option<&str>, pid: Option<u32>) -> String {
    match (host, pid) {
        (Some(h), Some(p)) => format!(" (host=`{h}`, pid=`{p}`)"),
        _ => String::new(),
    }
}

/// A single pass (`banklease gc`, `banklease-gc --once`, Python's `run_pass`): the checks a
/// daemon runs before its first pass, then one pass under the GC lease.
#[derive(Debug)]
pub struct OnePass {
    bank: Bank,
    clock: SharedClock,
    config: Config,
    owner: OwnerId,
    force: bool,
    beside: bool,
}

/// How the pass under the lease ended.
enum End {
    Interrupted(Interrupted),
    Done(Box<Result<PassReport>>),
}

impl OnePass {
    /// Open the configuration's bank with its client limits.
    pub fn open(config: Config) -> Result<Self> {
        let url = config.bank_url()?;
        let bank = Bank::open_configured(&config.bank, false)
            .with_context(|| format!("cannot open the bank: url=`{url}`"))?;
        Ok(Self::new(bank, Arc::new(SystemClock), config))
    }

    /// A single pass on `bank`, as `config`'s `[gc]` and `[lease]` say.
    pub fn new(bank: Bank, clock: SharedClock, config: Config) -> Self {
        let owner = collector_id(&config, &clock);
        Self {
            bank,
            clock,
            config,
            owner,
            force: false,
            beside: false,
        }
    }

    /// Collect past the mass-collection brake (`--force`).
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Run beside an active daemon instead of refusing (`--beside-daemon`).
    pub fn beside_daemon(mut self, beside: bool) -> Self {
        self.beside = beside;
        self
    }

    /// The id this collector's decisions and GC lease carry.
    pub fn owner_id(&self) -> &OwnerId {
        &self.owner
    }

    /// The bank it collects on.
    pub fn bank(&self) -> &Bank {
        &self.bank
    }

    /// The clock it runs on.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Run the pass. `Ok(None)` when `shutdown` came before it could start; a pass in flight
    /// is finished first.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Option<Single>> {
        if self.config.gc.dry_run {
            self.bank = self.bank.reading_only();
        }
        super::until_shutdown(&self.owner, shutdown, |cancel| self.work(cancel)).await
    }

    async fn work(&self, cancel: CancellationToken) -> Result<Option<Single>> {
        if !preflight(&self.bank, &self.clock, &self.config, true, &cancel).await? {
            return Ok(None);
        }
        let collector = collector(
            &self.bank,
            &self.clock,
            &self.config,
            &self.owner,
            true,
            self.force,
        );
        let tracker = TaskTracker::new();
        self.single(&collector, &tracker, &cancel).await
    }

    /// Run one pass to its end and log a failure.
    async fn pass(&self, collector: &Arc<Collector>, tracker: &TaskTracker) -> Result<PassReport> {
        let result = run_tracked(collector, tracker).await;
        if let Err(e) = &result {
            error!(error = %banklease::error::error_chain(e), "gc pass failed");
        }
        result
    }

    /// One pass: with the GC lease (taken at once or not at all), beside an active daemon when
    /// forced, without a lease when it is a dry run. `Ok(None)` when shutdown came first.
    async fn single(
        &self,
        collector: &Arc<Collector>,
        tracker: &TaskTracker,
        cancel: &CancellationToken,
    ) -> Result<Option<Single>> {
        if self.config.gc.dry_run {
            let report = self.pass(collector, tracker).await?;
            return Ok(Some(Single {
                report,
                lease: PassLease::NotNeeded,
            }));
        }
        let lease =
            match super::take_gc_lease(&self.bank, &self.owner, &self.config, &self.clock).await {
                Ok(lease) => lease,
                Err(banklease::Error::LeaseExists {
                    owner_id,
                    host: holder_host,
                    pid: holder_pid,
                }) if self.beside => {
                    warn!(holder = %owner_id, holder_host = holder_host.as_deref().unwrap_or("-"),
                    holder_pid = holder_pid.unwrap_or(0),
                    "--beside-daemon: running the pass beside the active gc daemon");
                    let report = self.pass(collector, tracker).await?;
                    return Ok(Some(Single {
                        report,
                        lease: PassLease::Beside {
                            holder: owner_id.to_string(),
                            holder_host,
                            holder_pid,
                        },
                    }));
                }
                Err(banklease::Error::LeaseExists {
                    owner_id,
                    host: holder_host,
                    pid: holder_pid,
                }) => {
                    return Err(ActiveElsewhere {
                        holder: owner_id,
                        holder_host,
                        holder_pid,
                        bank: self.bank.label().to_owned(),
                    }
                    .into());
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot take the gc lease for a pass: path=`{}`",
                            gc_lease_path(&self.bank)
                        )
                    })
                }
            };
        let keeper = lease.spawn_keeper(Jitter::from_entropy(), self.config.lease.renew_jitter);
        info!("holding the gc lease for one pass");
        let end = self.under_lease(&keeper, collector, tracker, cancel).await;
        tracker.close();
        tracker.wait().await;
        let report = match end {
            End::Done(result) => Some(*result),
            End::Interrupted(Interrupted::Shutdown) => None,
            End::Interrupted(Interrupted::Lost(reason)) => {
                keeper.stop().await;
                return Err(Error::LostBeforePass { reason });
            }
        };
        keeper.release().await.with_context(|| {
            format!(
                "cannot release the gc lease: path=`{}`",
                gc_lease_path(&self.bank)
            )
        })?;
        info!("gc lease released");
        Ok(report.transpose()?.map(|report| Single {
            report,
            lease: PassLease::Held,
        }))
    }

    /// Wait until the lease passes `check_validity`, then run the pass.
    async fn under_lease(
        &self,
        keeper: &Keeper,
        collector: &Arc<Collector>,
        tracker: &TaskTracker,
        cancel: &CancellationToken,
    ) -> End {
        let lease = keeper.lease();
        let mut state = keeper.state();
        loop {
            if let Some(interrupted) = interrupted(cancel, &mut state) {
                return End::Interrupted(interrupted);
            }
            if lease.check_validity() {
                return End::Done(Box::new(self.pass(collector, tracker).await));
            }
            debug!(remaining = ?lease.remaining(), "gc lease validity too short to start a pass; waiting for renewal");
            let wait = self.config.gc.lease.renew_window;
            if let Err(interrupted) = wait_under_lease(cancel, &mut state, &self.clock, wait).await
            {
                return End::Interrupted(interrupted);
            }
        }
    }
}
