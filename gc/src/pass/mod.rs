//! One GC pass: list the protecting index, judge each owner once, collect the dead owners'
//! checkpoints. This module only orchestrates; each job is a task in its own module, taking the
//! pass's [`PassContext`]: finding and judging zombies ([`crate::pass::zombies`]), the plan
//! ([`crate::pass::plan`], pure), the late sweep ([`crate::pass::sweep`]), collecting ([`crate::pass::collect`],
//! in bulk by [`crate::pass::batch`]), the GC's records ([`crate::pass::records`]), reaping
//! ([`crate::pass::reap`]), retiring failed checkpoints ([`crate::pass::retire`]) and the `file:`
//! temporaries sweep ([`crate::pass::temporaries`]).
//!
//! Requests of a pass: 2 to read the store clock, the listing pages of `index/protecting/`, one
//! lease read per owner (and, for an owner whose lease is missing, one read of
//! `gc/missing/<owner>`), then, if anything is to be deleted, 2 to read the store clock again
//! (step check), per dead owner a listing of its markers, and per collected checkpoint: read
//! `index.json` (owner and status check), create `decisions/<id>`, write `index/sweep/<id>`,
//! list its data, overwrite `index.json` with a `deleted` tombstone — and, in bulk across the
//! checkpoints and owners of the pass ([`crate::pass::batch`]), delete its data before the tombstone
//! and its marker after it. Last, the listing of `index/sweep/` and the late-data sweep of what
//! is due.
//!
//! Invariants kept here (see ARCHITECTURE.md):
//! - **a read is judged at the instant before it was sent** ([`LeaseObserver::view`],
//!   [`StoreTime::at_send`]), and stamps older than a detected store-clock step are judged from
//!   the step ([`crate::time::timing`]);
//! - **only a protecting checkpoint is collected**: a marker beside a checkpoint in any other
//!   status without a decision is a stray marker, removed and nothing else;
//! - **never trust a listing for absence**: an owner is judged by reading its lease object, not by
//!   whether a listing shows it; the reaper counts an owner absent from the protecting index as
//!   having no checkpoint only when that listing ran to its end;
//! - **never delete on doubt**: an unreadable lease, a store error, or an `index.json` naming
//!   another owner skips the checkpoint;
//! - **fencing before collecting**: nothing of a checkpoint is deleted before the GC has won (or
//!   finds a GC decision in) `decisions/<id>`;
//! - **resumable**: the marker is deleted last, so a pass interrupted anywhere leaves the
//!   checkpoint on the next pass's work list, and every step is idempotent;
//! - **bounded memory**: the protecting index is streamed, so memory grows with the number of
//!   owners, not of checkpoints, and each dead owner's markers are streamed with at most
//!   `gc.concurrency` collections in flight.

pub mod batch;
mod collect;
mod context;
pub mod declared;
pub(crate) mod delete;
pub mod options;
pub mod plan;
mod reap;
pub mod reaped;
mod records;
pub mod report;
mod retire;
pub mod sweep;
mod temporaries;
mod zombies;

use std::collections::HashSet;
use std::sync::Arc;

use banklease::clock::SharedClock;
use banklease::store::CountingStore;
use banklease::{Bank, LeaseObserver, OwnerId};

use crate::pass::collect::collect;
use crate::pass::context::PassContext;
use crate::pass::declared::OwnerRules;
use crate::pass::options::GcOptions;
use crate::pass::plan::plan;
use crate::pass::reap::reap_leases;
use crate::pass::records::{forget_clock_probes, forget_missing};
use crate::pass::retire::retire_failed;
use crate::pass::sweep::sweep_due;
use crate::pass::temporaries::TemporarySweep;
use crate::time::probe::ClockProbe;
pub use report::{Action, PassReport, StagedUpload};
pub use temporaries::TEMPORARY_SWEEP_BUDGET;

/// Checkpoints of each action the pass's log line names (the report names them all).
const NAMED_IN_LOG: usize = 5;

/// Runs GC passes on one bank. Clones share what the collector remembers between passes (the
/// last store-clock reading, for step detection; the temporaries sweep's walk).
#[derive(Debug, Clone)]
pub struct Collector {
    bank: Bank,
    /// The bank as given: a standby's clock watch reads on the host's readers' key with it.
    watching: Bank,
    clock: SharedClock,
    options: GcOptions,
    probe: ClockProbe,
    temporaries: TemporarySweep,
    /// Passes run by this collector and its clones.
    passes: Arc<std::sync::atomic::AtomicU64>,
}

impl Collector {
    /// A collector on `bank`.
    pub fn new(bank: Bank, clock: SharedClock, options: GcOptions) -> Self {
        // The clock is read on the host's collectors' probe key, which readers never write. A
        // dry run deletes nothing and holds no GC lease: it reads as readers do, on their key,
        // so that looking never leaves a second probe in the bank.
        let watching = bank.clone();
        let bank = if options.dry_run {
            bank
        } else {
            bank.for_collector()
        };
        Self {
            watching,
            probe: ClockProbe::new(bank.clone(), Arc::clone(&clock), &options),
            bank,
            clock,
            options,
            temporaries: TemporarySweep::default(),
            passes: Arc::default(),
        }
    }

    /// Read the store clock between passes (a standby daemon does, every lease renew window),
    /// so that the next pass has a recent reading to compare with. A step is remembered (the
    /// floor, in memory and in the bank) and reported as an error. Read on the host's readers'
    /// key: the collectors' key is the active collector's, whose pass a standby rewriting it
    /// every renew window would leave unverified on a store whose reads lag.
    pub async fn watch_clock(&self) -> banklease::Result<()> {
        let observer = LeaseObserver::new(
            self.watching.clone(),
            Arc::clone(&self.clock),
            self.options.skew_margin,
        )
        .with_read_staleness(self.options.read_staleness);
        self.probe.start(&observer).await.map(|_| ())
    }

    /// The options.
    pub fn options(&self) -> &GcOptions {
        &self.options
    }

    /// Run one pass. Errors on single checkpoints are counted in the report; the pass itself
    /// fails only when the store clock cannot be read (then nothing can be judged) or was seen
    /// to step forward ([`banklease::Error::ClockStep`]; nothing is deleted).
    pub async fn run_pass(&self) -> banklease::Result<PassReport> {
        let started = self.clock.now();
        let number = self
            .passes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Count this pass's requests on a view of the same store and prefix.
        let counting = CountingStore::new(Arc::clone(self.bank.store()));
        let counters = Arc::clone(counting.counters());
        let bank = self.bank.with_store(Arc::new(counting));
        let mut report = PassReport {
            dry_run: self.options.dry_run,
            ..PassReport::default()
        };

        let observer = LeaseObserver::new(
            bank.clone(),
            Arc::clone(&self.clock),
            self.options.skew_margin,
        )
        .with_read_staleness(self.options.read_staleness);
        let store_time = self.probe.start(&observer).await?;
        report.clock = self.probe.take_notes();
        if let Some(floor) = self.probe.floor() {
            report.clock_floor = Some(floor);
        }
        let ctx = PassContext {
            observer: observer.with_floor(self.probe.floor()),
            bank,
            clock: Arc::clone(&self.clock),
            options: self.options.clone(),
            store_time,
            compared: self.probe.compared(),
            probe: self.probe.clone(),
            pass: uuid::Uuid::new_v4().simple().to_string(),
            rules: OwnerRules::of(&self.bank),
        };

        // 1. List the protecting index; judge each owner once, by reading its lease.
        let judged = zombies::find(&ctx, &mut report).await;

        // 2. Decide (pure), then act.
        let plan = plan(&judged.tallies, report.scanned, &self.options);
        let mut cleared: HashSet<OwnerId> = HashSet::new();
        if let Some(reason) = &plan.braked {
            tracing::error!("{reason}");
            report.braked = Some(reason.clone());
            report.skipped += plan.candidates;
            for (owner, id) in judged.dead_listed.iter().cloned() {
                report.name(id, owner, Action::Skip, "the safety brake refused the pass");
            }
            report.checkpoints_omitted += judged.dead_unlisted;
        } else {
            // Before anything is deleted: the store clock must not have stepped during the pass.
            let acting = !self.options.dry_run;
            if !plan.dead.is_empty() || acting {
                ctx.check_clock_again().await?;
            }
            if acting {
                // First, what earlier passes marked for the late sweep (stamped before this pass).
                let swept = sweep_due(&ctx).await;
                report.late_data_swept += swept.objects;
                report.failed_all(swept.problems);
                swept.foreign.into_iter().for_each(|f| report.foreign(f));
            }
            cleared = collect(&ctx, &plan, judged.listed_at, &mut report).await;
            // Failed checkpoints past `gc.keep_failed_for`: retired, the rest counted.
            retire_failed(&ctx, &mut report).await;
            if acting {
                // Missing-since records are kept only for owners whose lease still reads as
                // missing and whose checkpoints are not all gone.
                let keep: HashSet<&OwnerId> = judged
                    .keep_records
                    .iter()
                    .filter(|o| !cleared.contains(*o))
                    .collect();
                report.failed_all(forget_missing(&ctx.bank, |o| keep.contains(o)).await);
            }
            // Only after a complete listing: the reaper takes an owner the listing did not show
            // for one with no protecting checkpoint (the failed listing is a problem already).
            if self.options.reap_leases && acting && judged.listed_all {
                let seen: HashSet<OwnerId> =
                    judged.tallies.iter().map(|t| t.owner.clone()).collect();
                reap_leases(&ctx, &seen, &cleared, &mut report).await?;
            }
            if acting {
                let sent = self.clock.now();
                let (problems, foreign) = forget_clock_probes(&ctx, sent).await;
                report.failed_all(problems);
                foreign.into_iter().for_each(|f| report.foreign(f));
                let (problems, foreign) = crate::pass::reaped::forget(&ctx, sent).await;
                report.failed_all(problems);
                foreign.into_iter().for_each(|f| report.foreign(f));
                // Host records age in days: a collector's first pass looks, then one in
                // `CLOCK_HOSTS_EVERY` (one LIST).
                if number.is_multiple_of(crate::pass::records::CLOCK_HOSTS_EVERY) {
                    let (problems, foreign) =
                        crate::pass::records::forget_clock_hosts(&ctx, sent).await;
                    report.failed_all(problems);
                    foreign.into_iter().for_each(|f| report.foreign(f));
                }
            }
            let (swept, errors) = self.temporaries.sweep(&ctx).await;
            report.temporaries_swept += swept;
            report.failed_all(errors);
            let (staged, errors) = crate::pass::temporaries::staged_of_collected(&ctx).await;
            report.staged_uploads = staged;
            report.failed_all(errors);
        }
        // Links the pass's listings met in a `file:` bank: never followed, kept, named.
        if let Some(local) = ctx.bank.local() {
            for met in local.take_met() {
                report.foreign(met);
            }
        }

        // What dead owners still have protecting after this pass: zombies, the oldest first.
        report.oldest_zombie_age_ms = judged
            .dead_for
            .iter()
            .filter(|(owner, _)| !cleared.contains(*owner))
            .map(|(_, d)| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        // Named in a stable order (collections finish in any order).
        report.checkpoints.sort_by(|a, b| {
            (a.action, &a.owner_id, &a.checkpoint_id).cmp(&(
                b.action,
                &b.owner_id,
                &b.checkpoint_id,
            ))
        });
        report.requests = counters.snapshot();
        report.duration_ms = self
            .clock
            .now()
            .saturating_duration_since(started)
            .as_millis() as u64;
        tracing::info!(
            scanned = report.scanned,
            owners = report.owners,
            dead = report.dead,
            collected = report.collected,
            skipped = report.skipped,
            errors = report.errors,
            dry_run = report.dry_run,
            checkpoints = %report.named_summary(NAMED_IN_LOG),
            "gc pass done"
        );
        Ok(report)
    }
}
