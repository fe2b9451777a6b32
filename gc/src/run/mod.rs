//! How a pass is run, by a daemon or once: the checks before the first pass ([`preflight`]), the
//! bank's single GC lease (`gc/active`, [`take_gc_lease`]), a pass in a task of its own
//! ([`run_tracked`]) and a single pass under the lease ([`OnePass`]). The daemon's standby and
//! interval loop are in crate `banklease-gc-daemon`.
//!
//! Invariant: **a pass starts only while the GC lease passes `check_validity`** (zero requests).
//! The GC lease keeps collectors from duplicating work; it is not what makes collection safe
//! (every collection is decided by a create-if-absent write per checkpoint, `decisions/<id>`).

use std::future::Future;
use std::sync::Arc;

use banklease::clock::SharedClock;
use banklease::config::{Config, OwnerIdScheme};
use banklease::paths::Key;
use banklease::{Bank, LeaseState, OwnerId, OwnerLease};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, Instrument as _};

use crate::error::{Context as _, Error, Result};
use crate::pass::options::GcOptions;
use crate::pass::report::PassReport;
use crate::pass::Collector;

mod single;
pub use single::{host_pid, ActiveElsewhere, OnePass, PassLease, Single};

/// The collector's own owner id, by the configuration's scheme.
pub fn collector_id(config: &Config, clock: &SharedClock) -> OwnerId {
    match config.lease.owner_id_scheme {
        OwnerIdScheme::HostStart => OwnerId::for_this_process(clock.system_now()),
        OwnerIdScheme::Uuid => OwnerId::random(),
    }
}

/// The checks before the first pass: the layout, what the store supports (not for a dry run,
/// which only reads) and the skew margin against the store's stamp resolution. `Ok(false)`
/// when `cancel` came first. `once`: a single pass is about to run (only the log line differs).
pub async fn preflight(
    bank: &Bank,
    clock: &SharedClock,
    config: &Config,
    once: bool,
    cancel: &CancellationToken,
) -> Result<bool> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => return Ok(false),
        checked = banklease::layout::check(bank) => checked.with_context(|| {
            format!("refusing to start on bank=`{}`", bank.label())
        })?,
    }
    let probed = if bank.is_reading_only() {
        None
    } else {
        let capabilities = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(false),
            probed = bank.capabilities() => probed.with_context(|| {
                format!(
                    "refusing to start: cannot probe what bank=`{}` supports",
                    bank.label()
                )
            })?,
        };
        // A bank where no owner can keep a lease has no live owners to judge: refuse rather than
        // collect on a store whose leases mean nothing.
        let lease = banklease::doctor::owner_lease_verdict(capabilities);
        if lease.basis == banklease::doctor::Basis::NotAtAll {
            return Err(Error::LeasesUnsupported {
                bank: bank.label().to_owned(),
                why: lease.why,
            });
        }
        Some((capabilities.renewal, lease.basis))
    };
    tokio::select! {
        biased;
        () = cancel.cancelled() => return Ok(false),
        checked = crate::time::timing::check_skew_margin(
            bank, clock, config.lease.skew_margin,
        ) => checked.with_context(|| {
            format!("refusing to start on bank=`{}`", bank.label())
        })?,
    }
    match probed {
        Some((renewal, basis)) if once => info!(bank = bank.label(), ?renewal,
            owner_lease = %basis, dry_run = config.gc.dry_run,
            "bank probed; running one pass"),
        Some((renewal, basis)) => info!(bank = bank.label(), ?renewal,
            owner_lease = %basis,
            interval = %humantime::format_duration(config.gc.interval),
            dry_run = config.gc.dry_run, "bank probed; starting as standby"),
        None => info!(bank = bank.label(), "dry run: reading only, nothing probed"),
    }
    Ok(true)
}

/// The collector a daemon (`once` false) or a single pass runs. A daemon persists a forward
/// step seen at its first reading as the floor; a single pass may be `force`d past the brake.
pub fn collector(
    bank: &Bank,
    clock: &SharedClock,
    config: &Config,
    owner: &OwnerId,
    once: bool,
    force: bool,
) -> Arc<Collector> {
    Arc::new(Collector::new(
        bank.clone(),
        clock.clone(),
        GcOptions::from_config(config)
            .to_builder()
            .floor_at_first_reading(!once)
            .force(once && force)
            .collector(owner.to_string())
            .build(),
    ))
}

/// Take the bank's GC lease, or take it over once its holder's lease expired on the store's
/// clock by more than the skew margin and the read staleness.
pub async fn take_gc_lease(
    bank: &Bank,
    owner: &OwnerId,
    config: &Config,
    clock: &SharedClock,
) -> banklease::Result<OwnerLease> {
    OwnerLease::take_over_at(
        bank,
        gc_lease_path(bank),
        owner.clone(),
        config.gc.lease,
        clock.clone(),
        // A read up to `read_staleness` old is judged that much earlier: the same as a margin
        // that much larger.
        config
            .lease
            .skew_margin
            .saturating_add(config.gc.read_staleness),
    )
    .await
}

/// Run `work` in the collector's span until it ends. At `shutdown`, `work`'s token is
/// cancelled, so it starts nothing new, and `work` is awaited to its end: a pass in flight
/// finishes.
pub async fn until_shutdown<T, F: Future<Output = T>>(
    owner: &OwnerId,
    shutdown: impl Future<Output = ()>,
    work: impl FnOnce(CancellationToken) -> F,
) -> T {
    let cancel = CancellationToken::new();
    let span = tracing::info_span!("gc", owner_id = %owner,
        host = %banklease::id::local_hostname(), pid = std::process::id());
    let work = work(cancel.clone()).instrument(span);
    tokio::pin!(work);
    tokio::select! {
        biased;
        () = shutdown => {
            info!("shutdown requested: no new passes; finishing the pass in flight");
            cancel.cancel();
            work.await
        }
        result = &mut work => result,
    }
}

/// Where the bank's GC lease is.
pub fn gc_lease_path(bank: &Bank) -> object_store::path::Path {
    Key::GcActive.path(bank)
}

/// Run one pass to its end in a task of `tracker`: a panic in a pass is reported like a failed
/// pass, and shutdown's `tracker.wait()` covers it. Awaited without racing shutdown: a pass is
/// never abandoned half-way.
pub async fn run_tracked(collector: &Arc<Collector>, tracker: &TaskTracker) -> Result<PassReport> {
    let collector = collector.clone();
    let task = tracker
        .spawn(async move { collector.run_pass().await }.instrument(tracing::Span::current()));
    match task.await {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(e)) => Err(e).with_context(|| "gc pass failed".to_owned()),
        Err(join) => Err(Error::PassAborted(join.to_string())),
    }
}

/// Why a spell under the GC lease ended before its work was done.
#[derive(Debug)]
pub enum Interrupted {
    /// Shutdown was requested.
    Shutdown,
    /// The keeper lost the GC lease.
    Lost(String),
}

/// Checked before each step under the GC lease (zero requests): shutdown asked, or the lease
/// no longer held.
pub fn interrupted(
    cancel: &CancellationToken,
    state: &mut watch::Receiver<LeaseState>,
) -> Option<Interrupted> {
    if cancel.is_cancelled() {
        return Some(Interrupted::Shutdown);
    }
    lost_reason(&state.borrow_and_update()).map(Interrupted::Lost)
}

/// Wait `wait` under the GC lease, or less: until its keeper publishes a change (a renewal, a
/// loss) or shutdown is requested.
pub async fn wait_under_lease(
    cancel: &CancellationToken,
    state: &mut watch::Receiver<LeaseState>,
    clock: &SharedClock,
    wait: std::time::Duration,
) -> std::result::Result<(), Interrupted> {
    tokio::select! {
        () = cancel.cancelled() => Err(Interrupted::Shutdown),
        changed = state.changed() => match changed {
            Ok(()) => Ok(()),
            Err(_) => Err(Interrupted::Lost("the lease state channel closed".to_owned())),
        },
        () = clock.sleep(wait) => Ok(()),
    }
}

/// Why a lease in `state` can no longer be counted on; `None` while it is held.
pub fn lost_reason(state: &LeaseState) -> Option<String> {
    match state {
        LeaseState::Held { .. } => None,
        LeaseState::Lost { reason } => Some(reason.clone()),
        LeaseState::Released => Some("released".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use banklease::clock::{Clock as _, SystemClock};

    use super::*;

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
}
