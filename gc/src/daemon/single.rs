//! A single pass (`banklease gc`, `banklease-gc --once`): it takes the GC lease for its pass
//! and releases it after, or — while an active daemon holds it — refuses, unless forced, and
//! says which. A dry run deletes nothing and takes no lease.
//!
//! Invariant: **a manual pass never runs unannounced beside the active daemon.** Collection is
//! safe either way (every collection is decided by a create-if-absent write per checkpoint), but
//! two collectors at once duplicate work and reports, and an operator who did not mean it must
//! be told; `--beside-daemon` is the operator saying they know.

use banklease::clock::Jitter;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::{Daemon, End};
use crate::error::{Context as _, Error, Result};
use crate::pass::Collector;
use crate::report::PassReport;

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

impl Daemon {
    /// One pass: with the GC lease (taken at once or not at all), beside an active daemon when
    /// forced, without a lease when it is a dry run. `Ok(None)` when shutdown came first.
    pub(super) async fn single(
        &self,
        collector: &std::sync::Arc<Collector>,
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
        let lease = match self.take_gc_lease().await {
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
                        self.lease_path()
                    )
                })
            }
        };
        let keeper = lease.spawn_keeper(Jitter::from_entropy(), self.config.lease.renew_jitter);
        info!("holding the gc lease for one pass");
        let end = self.active(&keeper, collector, tracker, true, cancel).await;
        tracker.close();
        tracker.wait().await;
        let report = match end {
            End::Once(result) => Some(*result),
            End::Shutdown => None,
            End::Lost(reason) => {
                keeper.stop().await;
                return Err(Error::LostBeforePass { reason });
            }
        };
        keeper.release().await.with_context(|| {
            format!("cannot release the gc lease: path=`{}`", self.lease_path())
        })?;
        info!("gc lease released");
        Ok(report.transpose()?.map(|report| Single {
            report,
            lease: PassLease::Held,
        }))
    }
}
