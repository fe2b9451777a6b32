//! One GC pass: list the protecting index, judge each owner once, collect the dead owners'
//! checkpoints.
//!
//! Requests of a pass: 2 to read the store clock, the listing pages of `index/protecting/`, one
//! lease read per owner (and, for an owner whose lease is missing, one read of
//! `gc/missing/<owner>`), then, if anything is to be deleted, 2 to read the store clock again
//! (step check), per dead owner a listing of its markers, and per collected checkpoint: read
//! `index.json` (owner and status check), create `decisions/<id>`, write `index/sweep/<id>`,
//! list its data, overwrite `index.json` with a `deleted` tombstone — and, in bulk across the
//! checkpoints and owners of the pass ([`crate::batch`]), delete its data before the tombstone
//! and its marker after it. Last, the listing of `index/sweep/` and the late-data sweep of what
//! is due.
//!
//! Invariants kept here (see ARCHITECTURE.md):
//! - **a read is judged at the instant before it was sent** ([`LeaseObserver::view`],
//!   [`StoreTime::at_send`]), and stamps older than a detected store-clock step are judged from
//!   the step ([`crate::timing`]);
//! - **only a protecting checkpoint is collected**: a marker beside a checkpoint in any other
//!   status without a decision is a stray marker, removed and nothing else;
//! - **never trust a listing for absence**: an owner is judged by reading its lease object, not by
//!   whether a listing shows it;
//! - **never delete on doubt**: an unreadable lease, a store error, or an `index.json` naming
//!   another owner skips the checkpoint;
//! - **fencing before collecting**: nothing of a checkpoint is deleted before the GC has won (or
//!   finds a GC decision in) `decisions/<id>`;
//! - **resumable**: the marker is deleted last, so a pass interrupted anywhere leaves the
//!   checkpoint on the next pass's work list, and every step is idempotent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use banklease::bank::StoreTime;
use banklease::checkpoint::{
    self, decide, finish_owner_decision, marker_path, parse_marker, protecting_prefix,
    read_decision, Decided, Decider, Decision, Status, CHECKPOINT_FORMAT,
};
use banklease::clock::SharedClock;
use banklease::counting::CountingStore;
use banklease::observe::error_chain;
use banklease::{Bank, LeaseObserver, LeaseView, OwnerId};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;

use crate::batch::{list_data, Batch, Listed};
use crate::plan::{plan, GcOptions, OwnerTally, Verdict};
use crate::sweep::{mark_for_sweep, sweep_due};
use crate::timing::{
    floor_path, forget_clock_probes, forget_missing, missing_for, read_floor, write_floor,
    ClockWatch, MissingFor, Refused,
};
use banklease::bank::add_saturating;
use banklease::lease::MAX_EXPIRE_WINDOW;
use banklease::local::SweepWalk;

/// What a pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassReport {
    /// Protecting markers seen.
    pub scanned: u64,
    /// Distinct owners among them.
    pub owners: u64,
    /// Owners whose lease is alive.
    pub alive: u64,
    /// Owners whose lease expired, but less than `grace` ago.
    pub in_grace: u64,
    /// Owners whose lease is expired past grace, or missing.
    pub dead: u64,
    /// Owners whose lease could not be read or judged (never collected).
    pub unreadable: u64,
    /// Checkpoints collected (or, with `dry_run`, that would have been).
    pub collected: u64,
    /// Checkpoints found already decided by their owner, whose move the GC finished.
    pub repaired: u64,
    /// Protecting checkpoints left alone (live, doubtful, too young, or held back by limits).
    pub skipped: u64,
    /// Errors met (each one leaves its checkpoint for the next pass).
    pub errors: u64,
    /// Data objects found (and deleted) under collected checkpoints by the late sweep: writes
    /// of paused owners that landed after the collection.
    pub late_data_swept: u64,
    /// Lease objects of dead owners deleted (expired past grace, nothing left to collect).
    pub leases_reaped: u64,
    /// `file:` banks: temporaries of writers killed before publishing, older than
    /// `late_write_window`, removed (or, dry run, found). Swept at most once per that window.
    pub temporaries_swept: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Why the brake refused the pass, if it did.
    pub braked: Option<String>,
    /// Requests made, by kind (`put`, `get`, `head`, `delete`, `list`).
    pub requests: BTreeMap<String, u64>,
    /// Wall time of the pass in milliseconds.
    pub duration_ms: u64,
    /// Protecting checkpoints seen, by their owner's state: `alive`, `in_grace`, `dead`,
    /// `unreadable`.
    pub protecting: BTreeMap<String, u64>,
    /// Owner leases judged, by state (`alive`, `expired`, `missing`, `unreadable`): the owners
    /// of protecting checkpoints, and — when leases are reaped (not in a dry run) — every other
    /// lease of the bank.
    pub leases: BTreeMap<String, u64>,
    /// How long the longest-dead owner whose protecting checkpoints this pass left behind
    /// (braked, limited, dry run, errors) has been dead, in milliseconds; 0 when none is left.
    pub oldest_zombie_age_ms: u64,
}

/// Runs GC passes on one bank. Clones share what the collector remembers between passes (the
/// last store-clock reading, for step detection).
#[derive(Debug, Clone)]
pub struct Collector {
    bank: Bank,
    clock: SharedClock,
    options: GcOptions,
    watch: Arc<ClockWatch>,
    /// When this collector's last walk of a `file:` bank's temporaries ended (monotonic).
    last_temporary_sweep: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// That walk, while it goes on across passes.
    temporary_walk: Arc<std::sync::Mutex<SweepWalk>>,
}

/// Entries of a `file:` bank's staging directory a pass reads at most looking for stale staged
/// files (it holds one per write in flight or crashed, so one pass almost always reads it all).
pub const TEMPORARY_SWEEP_BUDGET: usize = 50_000;

/// What happened to one checkpoint.
enum Outcome {
    /// Collected (dry run: would have been).
    Collected,
    /// Decided and listed: its data, tombstone and marker go in bulk with others' (batch.rs).
    Listed(Listed),
    Repaired,
    Skipped,
}

impl Collector {
    /// A collector on `bank`.
    pub fn new(bank: Bank, clock: SharedClock, options: GcOptions) -> Self {
        Self {
            bank,
            clock,
            options,
            watch: Arc::new(ClockWatch::default()),
            last_temporary_sweep: Arc::default(),
            temporary_walk: Arc::default(),
        }
    }

    /// On a `file:` bank, remove what writers killed between writing and publishing left
    /// (staged files in `_banklease/staging/` that no writer holds, older than
    /// `late_write_window`). Each pass goes on with the walk for at most
    /// [`TEMPORARY_SWEEP_BUDGET`] entries, and a new walk starts at most once per window after
    /// the last one ended. Returns (swept, errors).
    async fn sweep_temporaries(&self, bank: &Bank) -> (u64, u64) {
        let Some(local) = bank.local() else {
            return (0, 0);
        };
        let window = self.options.late_write_window;
        let now = self.clock.now();
        {
            let walking = {
                let walk = self.temporary_walk.lock().expect("not poisoned");
                walk.is_started() && !walk.is_done()
            };
            let last = self.last_temporary_sweep.lock().expect("not poisoned");
            if !walking && last.is_some_and(|t| now.saturating_duration_since(t) < window) {
                return (0, 0);
            }
        }
        let step = local
            .sweep_temporaries_step(
                &self.temporary_walk,
                TEMPORARY_SWEEP_BUDGET,
                window,
                self.options.dry_run,
            )
            .await;
        match step {
            Ok(swept) => {
                if swept.done {
                    *self.last_temporary_sweep.lock().expect("not poisoned") = Some(now);
                    *self.temporary_walk.lock().expect("not poisoned") = SweepWalk::default();
                }
                if swept.stale > 0 {
                    tracing::info!(
                        bank = bank.label(),
                        stale = swept.stale,
                        removed = swept.removed,
                        "swept temporaries left by crashed writers"
                    );
                }
                let found = if self.options.dry_run {
                    swept.stale
                } else {
                    swept.removed
                };
                (found, 0)
            }
            Err(e) => {
                // Start over next time: the walk may be stuck on what failed.
                *self.temporary_walk.lock().expect("not poisoned") = SweepWalk::default();
                tracing::warn!(bank = bank.label(), error = %e,
                    "cannot sweep stale temporaries; will retry next pass");
                (0, 1)
            }
        }
    }

    /// A pass's first reading of the store clock: the bank's step floor is loaded, and the
    /// reading is checked against the previous pass's (see [`crate::timing`]).
    async fn probe_start(&self, observer: &LeaseObserver) -> banklease::Result<StoreTime> {
        let floor = read_floor(&self.bank).await?;
        let store_time = observer.store_time().await?;
        if let Some(floor) = floor {
            // A floor older than any expire window plus grace constrains no stamp any more.
            let spent = add_saturating(
                floor,
                MAX_EXPIRE_WINDOW
                    .saturating_add(self.options.grace)
                    .saturating_add(self.options.skew_margin),
            );
            if spent < store_time.at {
                if !self.options.dry_run {
                    // Harmless to keep: a failure is no reason to stop collecting.
                    if let Err(e) = delete_ok_if_missing(&self.bank, &floor_path(&self.bank)).await
                    {
                        tracing::warn!(error = %error_chain(&e), "removing a spent clock floor failed");
                    }
                }
            } else {
                self.watch.raise_floor(floor);
            }
        }
        let checked = self.watch.start(
            &store_time,
            self.step_tolerance(),
            self.options.grace,
            self.options.floor_at_first_reading,
        );
        self.on_step(checked).await?;
        Ok(store_time)
    }

    /// Read the store clock between passes (a standby daemon does, every lease renew window),
    /// so that the next pass has a recent reading to compare with. A step is remembered (the
    /// floor, in memory and in the bank) and reported as an error.
    pub async fn watch_clock(&self) -> banklease::Result<()> {
        let observer = LeaseObserver::new(
            self.bank.clone(),
            Arc::clone(&self.clock),
            self.options.skew_margin,
        );
        self.probe_start(&observer).await.map(|_| ())
    }

    /// A later reading in the same pass, before anything is deleted on the strength of what was
    /// judged against `first`.
    async fn probe_again(
        &self,
        observer: &LeaseObserver,
        first: &StoreTime,
    ) -> banklease::Result<()> {
        let again = observer.store_time().await?;
        let checked = self.watch.recheck(first, &again, self.step_tolerance());
        self.on_step(checked).await
    }

    /// Steps smaller than the margin are what the margin absorbs; a lagging replica may serve
    /// the clock probe up to `read_staleness` old.
    fn step_tolerance(&self) -> std::time::Duration {
        self.options
            .skew_margin
            .saturating_add(self.options.read_staleness)
    }

    async fn on_step(&self, checked: Result<(), Refused>) -> banklease::Result<()> {
        let step =
            match checked {
                Ok(()) => return Ok(()),
                Err(Refused::Step(step)) => step,
                Err(Refused::Unverified) => {
                    tracing::warn!(bank = self.bank.label(),
                    "store clock reading not verified (a lagging replica): pass aborted, nothing \
                     judged or deleted");
                    return Err(banklease::Error::ClockUnverified {
                        bank: self.bank.label().to_owned(),
                        attempts: banklease::bank::CLOCK_PROBE_ATTEMPTS as u32,
                    });
                }
            };
        let direction = if step.forward { "forward" } else { "backward" };
        tracing::error!(step = ?step.by, direction, at = %step.at,
            "store clock stepped: pass aborted, nothing deleted");
        if step.forward && !self.options.dry_run {
            if let Some(floor) = self.watch.floor() {
                if let Err(e) = write_floor(&self.bank, floor).await {
                    tracing::warn!(error = %error_chain(&e), "recording the clock floor failed");
                }
            }
        }
        Err(banklease::Error::ClockStep {
            step: step.by,
            direction,
            at: step.at,
        })
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
        let store_time = self.probe_start(&observer).await?;
        let observer = observer.with_floor(self.watch.floor());

        // 1. Stream the protecting index; memory grows with owners, not checkpoints.
        let listed_at = self.clock.now();
        let mut markers: HashMap<OwnerId, u64> = HashMap::new();
        let mut order: Vec<OwnerId> = Vec::new();
        let mut listing = bank.store().list(Some(&protecting_prefix(&bank)));
        while let Some(item) = listing.next().await {
            match item {
                Ok(meta) => match parse_marker(&bank, &meta.location) {
                    Some((owner, _)) => {
                        report.scanned += 1;
                        let n = markers.entry(owner.clone()).or_insert_with(|| {
                            order.push(owner);
                            0
                        });
                        *n += 1;
                    }
                    None => {
                        tracing::warn!(path = %meta.location, "malformed protecting marker: skipped");
                        report.skipped += 1;
                    }
                },
                Err(e) => {
                    // Judge what was seen; the rest waits for the next pass.
                    tracing::warn!(error = %error_chain(&e), "listing the protecting index failed");
                    report.errors += 1;
                    break;
                }
            }
        }
        drop(listing);
        report.owners = order.len() as u64;

        // 2. Judge each owner once, by reading its lease (never by a listing).
        #[allow(clippy::type_complexity)]
        let views: Vec<(OwnerId, Verdict, bool, &'static str, Option<Duration>)> =
            futures::stream::iter(order)
            .map(|owner| {
                let observer = &observer;
                let store_time = &store_time;
                let observer_bank = &bank;
                async move {
                    let view = observer.view(&owner, store_time).await;
                    let mut verdict = Verdict::of(&view, self.options.grace);
                    let state = view.name();
                    let mut dead_for = match &view {
                        LeaseView::Expired { since, .. } => Some(*since),
                        _ => None,
                    };
                    // Keep a missing-since record only while the lease reads as missing (or
                    // cannot be read): one left from an earlier episode would start a later
                    // episode's grace long before it began.
                    let keep_record = matches!(
                        view,
                        LeaseView::Missing | LeaseView::Unreadable { .. }
                    );
                    if verdict == Verdict::Missing {
                        (verdict, dead_for) =
                            self.missing_verdict(observer_bank, &owner, store_time).await;
                    }
                    tracing::debug!(owner_id = %owner, view = view.name(), ?verdict, "judged owner");
                    (owner, verdict, keep_record, state, dead_for)
                }
            })
            .buffered(self.options.concurrency)
            .collect()
            .await;
        let keep_records: HashSet<OwnerId> = views
            .iter()
            .filter(|(_, _, keep, _, _)| *keep)
            .map(|(owner, _, _, _, _)| owner.clone())
            .collect();
        let mut dead_for: HashMap<OwnerId, Duration> = HashMap::new();
        let tallies: Vec<OwnerTally> = views
            .into_iter()
            .map(|(owner, verdict, _, state, dead)| {
                let n = markers.get(&owner).copied().unwrap_or(0);
                *report.leases.entry(state.to_owned()).or_default() += 1;
                let owner_state = match &verdict {
                    Verdict::Alive => {
                        report.alive += 1;
                        "alive"
                    }
                    Verdict::InGrace => {
                        report.in_grace += 1;
                        "in_grace"
                    }
                    Verdict::Unreadable(error) => {
                        tracing::warn!(owner_id = %owner, %error, "lease unreadable: not collecting");
                        report.unreadable += 1;
                        "unreadable"
                    }
                    Verdict::Expired | Verdict::Missing => {
                        report.dead += 1;
                        dead_for.insert(owner.clone(), dead.unwrap_or_default());
                        "dead"
                    }
                };
                *report.protecting.entry(owner_state.to_owned()).or_default() += n;
                if !verdict.is_dead() {
                    report.skipped += n;
                }
                OwnerTally {
                    owner,
                    markers: n,
                    verdict,
                }
            })
            .collect();

        // 3. Decide (pure), then act.
        let plan = plan(&tallies, report.scanned, &self.options);
        let mut cleared: HashSet<OwnerId> = HashSet::new();
        if let Some(reason) = &plan.braked {
            tracing::error!("{reason}");
            report.braked = Some(reason.clone());
            report.skipped += plan.candidates;
        } else {
            // Before anything is deleted: the store clock must not have stepped during the pass.
            let acting = !self.options.dry_run;
            if !plan.dead.is_empty() || acting {
                self.probe_again(&observer, &store_time).await?;
            }
            if acting {
                // First, what earlier passes marked for the late sweep (stamped before this pass).
                let swept = sweep_due(
                    &bank,
                    &self.clock,
                    &store_time,
                    self.options.late_write_window,
                    self.options.skew_margin,
                    self.options.read_staleness,
                    self.watch.floor(),
                    self.options.concurrency,
                )
                .await;
                report.late_data_swept += swept.objects;
                report.errors += swept.errors;
            }
            let taken = AtomicU64::new(0);
            // Every dead owner's collected checkpoints go out in bulk together (batch.rs).
            let mut batch = Batch::default();
            let mut clean_owners = Vec::new();
            for tally in &plan.dead {
                let clean = self
                    .collect_owner(
                        &bank,
                        tally,
                        &store_time,
                        listed_at,
                        &observer,
                        plan.limit,
                        &taken,
                        &mut batch,
                        &mut report,
                    )
                    .await;
                if clean {
                    clean_owners.push(tally.owner.clone());
                }
            }
            let unfinished = batch
                .finish(&bank, &self.clock, self.options.concurrency, &mut report)
                .await;
            cleared.extend(
                clean_owners
                    .into_iter()
                    .filter(|owner| !unfinished.contains(owner)),
            );
            if acting {
                // Missing-since records are kept only for owners whose lease still reads as
                // missing and whose checkpoints are not all gone.
                let keep: HashSet<&OwnerId> = keep_records
                    .iter()
                    .filter(|o| !cleared.contains(*o))
                    .collect();
                report.errors += forget_missing(&bank, |o| keep.contains(o)).await;
            }
            if self.options.reap_leases && acting {
                let seen: HashSet<OwnerId> = tallies.iter().map(|t| t.owner.clone()).collect();
                self.reap_leases(&bank, &observer, &store_time, &seen, &cleared, &mut report)
                    .await?;
            }
            if acting {
                let sent = self.clock.now();
                report.errors += forget_clock_probes(&bank, &store_time, sent).await;
            }
            let (swept, errors) = self.sweep_temporaries(&bank).await;
            report.temporaries_swept += swept;
            report.errors += errors;
        }

        // What dead owners still have protecting after this pass: zombies, the oldest first.
        report.oldest_zombie_age_ms = dead_for
            .iter()
            .filter(|(owner, _)| !cleared.contains(*owner))
            .map(|(_, d)| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
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
            "gc pass done"
        );
        Ok(report)
    }

    /// Delete the lease objects of owners that are expired past grace and have no protecting
    /// checkpoint left: those whose markers this pass removed without a skip or error
    /// (`cleared`), and those with no marker in the listing at all (judged here, once each).
    ///
    /// Safe: an owner expired on the store clock (plus margin and grace) has long judged its own
    /// lease Lost, never renews it, and cannot create checkpoints.
    async fn reap_leases(
        &self,
        bank: &Bank,
        observer: &LeaseObserver,
        store_time: &StoreTime,
        seen: &HashSet<OwnerId>,
        cleared: &HashSet<OwnerId>,
        report: &mut PassReport,
    ) -> banklease::Result<()> {
        let prefix = bank.path(&["leases"]);
        let mut listing = bank.store().list(Some(&prefix));
        let mut candidates = Vec::new();
        while let Some(item) = listing.next().await {
            let meta = match item {
                Ok(meta) => meta,
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "listing leases failed");
                    report.errors += 1;
                    break;
                }
            };
            let Some(owner) = meta
                .location
                .prefix_match(&prefix)
                .and_then(|mut parts| {
                    let first = parts.next()?;
                    parts.next().is_none().then_some(first)
                })
                .and_then(|part| OwnerId::parse(part.as_ref()).ok())
            else {
                continue;
            };
            if cleared.contains(&owner) || !seen.contains(&owner) {
                candidates.push(owner);
            }
        }
        drop(listing);
        // Judge every candidate first (the reads), then check the store clock once more, then
        // delete: a step after this pass's first reading would make fresh stamps look old.
        let judged: Vec<(OwnerId, Verdict, Option<&'static str>)> =
            futures::stream::iter(candidates)
                .map(|owner| async move {
                    // Cleared owners were judged this pass; the others are judged now. Either way the
                    // lease is re-read, so one renewed since (impossible when expired) is never lost.
                    let view = observer.view(&owner, store_time).await;
                    let counted = (!seen.contains(&owner)).then_some(view.name());
                    let verdict = Verdict::of(&view, self.options.grace);
                    (owner, verdict, counted)
                })
                .buffer_unordered(self.options.concurrency)
                .collect()
                .await;
        for state in judged.iter().filter_map(|(_, _, counted)| *counted) {
            *report.leases.entry(state.to_owned()).or_default() += 1;
        }
        let expired: Vec<OwnerId> = judged
            .into_iter()
            .filter(|(_, v, _)| *v == Verdict::Expired)
            .map(|(o, _, _)| o)
            .collect();
        if expired.is_empty() {
            return Ok(());
        }
        self.probe_again(observer, store_time).await?;
        let mut reaped = futures::stream::iter(expired)
            .map(|owner| async move {
                delete_ok_if_missing(bank, &bank.lease_path(&owner)).await?;
                tracing::info!(owner_id = %owner, "reaped the lease of a dead owner");
                Ok::<(), banklease::Error>(())
            })
            .buffer_unordered(self.options.concurrency);
        while let Some(result) = reaped.next().await {
            match result {
                Ok(()) => report.leases_reaped += 1,
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "reaping a lease failed");
                    report.errors += 1;
                }
            }
        }
        Ok(())
    }

    /// Collect the protecting checkpoints of one dead owner, `concurrency` at a time. True when
    /// every marker was removed (nothing skipped, no error).
    #[allow(clippy::too_many_arguments)]
    async fn collect_owner(
        &self,
        bank: &Bank,
        tally: &OwnerTally,
        store_time: &StoreTime,
        listed_at: Instant,
        observer: &LeaseObserver,
        limit: Option<u64>,
        taken: &AtomicU64,
        batch: &mut Batch,
        report: &mut PassReport,
    ) -> bool {
        let mut clean = true;
        let prefix = protecting_prefix(bank).join(tally.owner.as_str());
        let listing = bank.store().list(Some(&prefix));
        let prefix = &prefix;
        let mut results = listing
            .map(|item| async move {
                let meta = item.map_err(|e| banklease::Error::Store {
                    op: "list",
                    path: prefix.to_string(),
                    source: e,
                })?;
                let Some((owner, id)) = parse_marker(bank, &meta.location) else {
                    return Ok(Outcome::Skipped);
                };
                if owner != tally.owner {
                    return Ok(Outcome::Skipped);
                }
                if !self.old_enough(&tally.verdict, &meta, store_time, listed_at, observer) {
                    return Ok(Outcome::Skipped);
                }
                // Reserve a slot under the per-pass limit before acting.
                let n = taken.fetch_add(1, Ordering::SeqCst);
                if limit.is_some_and(|l| n >= l) {
                    return Ok(Outcome::Skipped);
                }
                if self.options.dry_run {
                    return Ok(Outcome::Collected);
                }
                self.collect_one(bank, &owner, &id).await
            })
            .buffer_unordered(self.options.concurrency);
        // Consumed as it comes: memory stays bounded by `concurrency` and the batch, not by the
        // owner's size. A checkpoint finished through the batch counts (or fails) there.
        while let Some(result) = results.next().await {
            match result {
                Ok(Outcome::Collected) => report.collected += 1,
                Ok(Outcome::Listed(listed)) => {
                    batch
                        .add(bank, &self.clock, self.options.concurrency, listed, report)
                        .await;
                }
                Ok(Outcome::Repaired) => report.repaired += 1,
                Ok(Outcome::Skipped) => {
                    report.skipped += 1;
                    clean = false;
                }
                Err(e) => {
                    tracing::warn!(owner_id = %tally.owner, error = %error_chain(&e),
                        "collecting a checkpoint failed; the next pass resumes it");
                    report.errors += 1;
                    clean = false;
                }
            }
        }
        // A dry run removed nothing.
        clean && !self.options.dry_run
    }

    /// A missing lease gives no expiry time, so its markers must themselves be older than
    /// `grace` (store clock, judged when the listing was sent) — a guard against reading a lease
    /// before its write is visible. The grace itself runs from when the lease was first seen
    /// missing ([`Self::missing_verdict`]).
    fn old_enough(
        &self,
        verdict: &Verdict,
        marker: &ObjectMeta,
        store_time: &StoreTime,
        listed_at: Instant,
        observer: &LeaseObserver,
    ) -> bool {
        match verdict {
            Verdict::Missing => {
                let now = store_time.at_send(listed_at, self.options.read_staleness);
                StoreTime::between(observer.floored(marker.last_modified), now)
                    >= self.options.grace.saturating_add(self.options.skew_margin)
            }
            _ => true,
        }
    }

    /// A missing lease: `Missing` (collect) once it has been seen missing for `grace + margin`,
    /// `InGrace` before, `Unreadable` if that cannot be told.
    async fn missing_verdict(
        &self,
        bank: &Bank,
        owner: &OwnerId,
        store_time: &StoreTime,
    ) -> (Verdict, Option<Duration>) {
        let sent = self.clock.now();
        match missing_for(
            bank,
            owner,
            store_time,
            sent,
            self.options.read_staleness,
            self.watch.floor(),
            self.options.dry_run,
        )
        .await
        {
            Ok(MissingFor::AtLeast(d))
                if d >= self.options.grace.saturating_add(self.options.skew_margin) =>
            {
                (Verdict::Missing, Some(d))
            }
            Ok(_) => (Verdict::InGrace, None),
            Err(e) => (
                Verdict::Unreadable(format!(
                    "lease missing, but its missing-since record cannot be read: {}",
                    error_chain(&e)
                )),
                None,
            ),
        }
    }

    /// Collect one checkpoint: check its owner and status, win the decision, mark it for the
    /// late sweep, delete data, metadata, marker — in that order.
    async fn collect_one(
        &self,
        bank: &Bank,
        owner: &OwnerId,
        id: &str,
    ) -> banklease::Result<Outcome> {
        // Never delete on doubt: the metadata, if present, must be readable and name the
        // marker's owner.
        let mut existing = checkpoint::read_checkpoint(bank, id).await?;
        match &existing {
            Some(record) if record.owner_id != *owner => {
                tracing::warn!(checkpoint_id = id, marker_owner = %owner, owner_id = %record.owner_id,
                    "marker and index.json disagree on the owner: not collecting");
                return Ok(Outcome::Skipped);
            }
            Some(record) if !matches!(record.status, Status::Protecting | Status::Deleted) => {
                // Only a protecting checkpoint may be collected. A finished one is either an
                // owner's move to finish, or carries a stray marker.
                return match read_decision(bank, id).await? {
                    Some(d) if d.by == Decider::Owner => {
                        finish_owner_decision(bank, &d).await?;
                        Ok(Outcome::Repaired)
                    }
                    Some(_) => {
                        tracing::warn!(checkpoint_id = id, owner_id = %owner, status = %record.status,
                            "a gc decision on a checkpoint that is not protecting: not collecting");
                        Ok(Outcome::Skipped)
                    }
                    None => {
                        tracing::warn!(checkpoint_id = id, owner_id = %owner, status = %record.status,
                            "stray protecting marker beside a checkpoint that is not protecting: removed");
                        delete_ok_if_missing(bank, &marker_path(bank, owner, id)).await?;
                        Ok(Outcome::Repaired)
                    }
                };
            }
            Some(_) => {}
            None => {
                // No metadata: tombstone the id first (create-if-absent), so that a create of
                // the same id landing now — a paused owner's, or another owner's reusing it —
                // fails instead of having its checkpoint collected under this marker's owner.
                let now = self.clock.system_now().into();
                if !checkpoint::create_tombstone(bank, id, owner, now).await? {
                    // Someone created it meanwhile: judge it again next pass.
                    return Ok(Outcome::Skipped);
                }
                existing = checkpoint::read_checkpoint(bank, id).await?;
                // On a store whose create-if-absent is not atomic (Swift) a create racing ours
                // may have won too: go on only over our own tombstone.
                if !matches!(&existing, Some(r) if r.status == Status::Deleted && r.owner_id == *owner)
                {
                    return Ok(Outcome::Skipped);
                }
            }
        }
        let decision = Decision {
            format: CHECKPOINT_FORMAT,
            checkpoint_id: id.to_owned(),
            owner_id: owner.clone(),
            by: Decider::Gc,
            outcome: Status::Deleted,
            token: uuid_token(),
            decided_at: self.clock.system_now().into(),
        };
        match decide(bank, decision).await? {
            Decided::Won(_) => {}
            Decided::Lost(existing) if existing.by == Decider::Gc => {
                // An earlier pass (or another GC) decided and was interrupted: resume.
            }
            Decided::Lost(existing) => {
                // The owner completed it but crashed before finishing the move: finish it.
                finish_owner_decision(bank, &existing).await?;
                return Ok(Outcome::Repaired);
            }
        }
        self.finish_collection(bank, owner, id, existing).await
    }

    /// The GC holds the decision: the sweep marker, then the data listed for the batch, which
    /// deletes it with other checkpoints' and then writes the tombstone and deletes the marker
    /// (batch.rs). Idempotent: a marker left by a crash brings the checkpoint back here on the
    /// next pass.
    async fn finish_collection(
        &self,
        bank: &Bank,
        owner: &OwnerId,
        id: &str,
        existing: Option<checkpoint::CheckpointRecord>,
    ) -> banklease::Result<Outcome> {
        // Before any data goes: a write still in flight may land after the deletion.
        mark_for_sweep(bank, id).await?;
        let data = list_data(bank, id).await?;
        // The tombstone (not a deletion) keeps `index.json`'s creation time: an owner paused
        // inside `Checkpoint::create` may still have its create-if-absent of index.json in
        // flight; against a tombstone it fails, where after a deletion it would land as a
        // protecting checkpoint with no marker — a zombie no pass could ever find (found by the
        // simulation, seed 8).
        Ok(Outcome::Listed(Listed {
            owner: owner.clone(),
            id: id.to_owned(),
            created_at: existing.map(|r| r.created_at),
            data,
        }))
    }
}

fn uuid_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

async fn delete_ok_if_missing(bank: &Bank, path: &Path) -> banklease::Result<()> {
    match bank.store().delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(banklease::Error::Store {
            op: "delete",
            path: path.to_string(),
            source: e,
        }),
    }
}
