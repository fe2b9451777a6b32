//! Collecting zombies: the protecting checkpoints of the owners the plan found dead. Per
//! checkpoint: check its owner and status, win the decision (fencing), mark it for the late
//! sweep, list its data — then its data, tombstone and marker go in bulk with the other
//! checkpoints' ([`crate::pass::batch`]).
//!
//! Only a `protecting` checkpoint is decided (or a `deleted` one, to resume): a marker beside a
//! checkpoint in any other status, or beside an `index.json` another owner won, is a stray and
//! only the marker goes; a GC decision over a finished checkpoint is doubt and deletes nothing.
//! A marker without `index.json` first gets a tombstone by create-if-absent, so that a create of
//! the same id landing meanwhile fails instead of being collected under that marker's owner; the
//! pass goes on only if its own tombstone reads back (create-if-absent is not atomic on Swift).
//! A missing lease's markers must themselves be older than grace plus margin
//! (`old_enough`): a guard against a lease read before its write was visible.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use banklease::checkpoint::{
    self, parse_marker, read_decision, Decided, Decider, Decision, Status,
};
use banklease::clock::StoreTime;
use banklease::collector::{create_tombstone, decide, finish_owner_decision};
use banklease::error::error_chain;
use banklease::paths::{Key, Prefix};
use banklease::CheckpointId;
use banklease::{Bank, OwnerId};
use futures::StreamExt;
use object_store::ObjectMeta;

use crate::pass::batch::{list_data, Batch, Listed};
use crate::pass::context::PassContext;
use crate::pass::delete::delete_ok_if_missing;
use crate::pass::plan::{past, OwnerTally, Plan, Verdict};
use crate::pass::report::{duration_words, Action, PassReport, Problem};
use crate::pass::sweep::mark_for_sweep;

/// What happened to one checkpoint, and why (in words, for the report).
enum Outcome {
    /// Would be collected (dry run).
    Collected,
    /// Decided and listed: its data, tombstone and marker go in bulk with others' (batch.rs).
    Listed(Listed),
    Repaired(&'static str),
    Skipped(&'static str),
    /// Left for a later pass: what its owner declared needs longer (why).
    Waiting(String),
}

/// A stray marker beside another owner's checkpoint, removed.
const STRAY_BESIDE_OTHER: &str =
    "a stray protecting marker of a dead owner beside another owner's checkpoint: removed";
/// A stray marker beside a finished checkpoint, removed.
const STRAY_BESIDE_FINISHED: &str =
    "a stray protecting marker beside a checkpoint that is not protecting: removed";
/// A create of the id landed while the pass fenced it: judged again next pass.
const CREATED_MEANWHILE: &str = "created meanwhile: judged again next pass";
/// An owner's decided move, finished for it.
const OWNERS_MOVE: &str = "its owner decided it but did not finish the move: finished";

/// Why a dead owner's checkpoint is collected, in words.
pub(crate) fn dead_because(tally: &OwnerTally) -> String {
    let Some(e) = &tally.evidence else {
        return "its owner is dead".to_owned();
    };
    let words = |ms: u64| duration_words(Duration::from_millis(ms));
    match e.lease.as_str() {
        "missing" => format!(
            "its owner's lease has been missing for {} (grace {})",
            words(e.dead_for_ms),
            words(e.grace_ms)
        ),
        _ => format!(
            "its owner's lease expired {} ago (grace {})",
            words(e.dead_for_ms),
            words(e.grace_ms)
        ),
    }
}

/// Collect the dead owners of `plan` (their markers as listed at `listed_at`); returns the
/// owners all of whose protecting checkpoints were removed (none in a dry run).
pub(crate) async fn collect(
    ctx: &PassContext,
    plan: &Plan,
    listed_at: Instant,
    report: &mut PassReport,
) -> HashSet<OwnerId> {
    let collecting = Collecting {
        ctx,
        listed_at,
        limit: plan.limit,
        taken: AtomicU64::new(0),
    };
    // Every dead owner's collected checkpoints go out in bulk together (batch.rs).
    let mut batch = Batch::default();
    let mut clean_owners = Vec::new();
    for tally in &plan.dead {
        if collecting.collect_owner(tally, &mut batch, report).await {
            clean_owners.push(tally.owner.clone());
        }
    }
    let unfinished = batch.finish(ctx, report).await;
    clean_owners
        .into_iter()
        .filter(|owner| !unfinished.contains(owner))
        .collect()
}

/// The collection of one pass, across its dead owners.
struct Collecting<'a> {
    ctx: &'a PassContext,
    /// When the protecting index was listed.
    listed_at: Instant,
    /// Most checkpoints to collect this pass (`None` = no limit) ...
    limit: Option<u64>,
    /// ... and how many slots under it are taken.
    taken: AtomicU64,
}

impl Collecting<'_> {
    /// Collect the protecting checkpoints of one dead owner, `concurrency` at a time. True when
    /// every marker was removed (nothing skipped, no error).
    async fn collect_owner(
        &self,
        tally: &OwnerTally,
        batch: &mut Batch,
        report: &mut PassReport,
    ) -> bool {
        let (ctx, bank) = (self.ctx, &self.ctx.bank);
        let mut clean = true;
        let prefix = Prefix::Protecting.path(bank).join(tally.owner.as_str());
        let listing = bank.store().list(Some(&prefix));
        let prefix = &prefix;
        let mut results = listing
            .map(|item| async move {
                let meta = item.map_err(|e| {
                    let listing = format!("listing `{prefix}`");
                    (listing, banklease::Error::store("list", prefix, e))
                })?;
                // Not a marker of this owner's (a name outside the layout): counted, unnamed.
                let Some((owner, id)) = parse_marker(bank, &meta.location) else {
                    return Ok(None);
                };
                if owner != tally.owner {
                    return Ok(None);
                }
                if !self.old_enough(&tally.verdict, &meta) {
                    let why = "its marker is younger than the grace (its owner's lease is missing)";
                    return Ok(Some((id, Outcome::Skipped(why))));
                }
                // Reserve a slot under the per-pass limit before acting.
                let n = self.taken.fetch_add(1, Ordering::SeqCst);
                if self.limit.is_some_and(|l| n >= l) {
                    let why = "over this pass's limit (gc.max_deletions)";
                    return Ok(Some((id, Outcome::Skipped(why))));
                }
                let outcome = if ctx.options.dry_run {
                    // What a pass would meet, read but not acted on: a record that cannot be
                    // read is a problem a dry run names too.
                    self.dry_run_one(tally, &id).await
                } else {
                    self.collect_one(tally, &id).await
                };
                match outcome {
                    Ok(outcome) => Ok(Some((id, outcome))),
                    Err(e) => Err((format!("checkpoint `{id}`"), e)),
                }
            })
            .buffer_unordered(ctx.options.concurrency);
        // Consumed as it comes: memory stays bounded by `concurrency` and the batch, not by the
        // owner's size. A checkpoint finished through the batch counts (or fails) there.
        while let Some(result) = results.next().await {
            let owner = || tally.owner.clone();
            match result {
                Ok(None) => {
                    report.skipped += 1;
                    clean = false;
                }
                Ok(Some((id, Outcome::Collected))) => {
                    report.collected += 1;
                    report.name(id, owner(), Action::Collect, dead_because(tally));
                }
                Ok(Some((_, Outcome::Listed(listed)))) => {
                    batch.add(ctx, listed, report).await;
                }
                Ok(Some((id, Outcome::Repaired(why)))) => {
                    report.repaired += 1;
                    report.name(id, owner(), Action::Repair, why);
                }
                Ok(Some((id, Outcome::Skipped(why)))) => {
                    report.skipped += 1;
                    report.name(id, owner(), Action::Skip, why);
                    clean = false;
                }
                Ok(Some((id, Outcome::Waiting(why)))) => {
                    report.name(id, owner(), Action::Skip, why.clone());
                    report.wait(why);
                    report.skipped += 1;
                    clean = false;
                }
                Err((object, e)) => {
                    tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, owner_id = %tally.owner, object, error = %error_chain(&e),
                        "collecting a checkpoint failed; the next pass resumes it");
                    report.failed(Problem::of(object, &e));
                    clean = false;
                }
            }
        }
        // A dry run removed nothing.
        clean && !ctx.options.dry_run
    }

    /// A missing lease gives no expiry time, so its markers must themselves be older than
    /// `grace` (store clock, judged when the listing was sent) — a guard against reading a lease
    /// before its write is visible. The grace itself runs from when the lease was first seen
    /// missing ([`Verdict::of_missing`]).
    fn old_enough(&self, verdict: &Verdict, marker: &ObjectMeta) -> bool {
        match verdict {
            Verdict::Missing => {
                let ctx = self.ctx;
                let now = ctx
                    .store_time
                    .at_send(self.listed_at, ctx.options.read_staleness);
                // The observer's floor: the one this pass judged its leases with.
                ctx.past_grace(StoreTime::between(
                    ctx.observer.floored(marker.last_modified),
                    now,
                ))
            }
            _ => true,
        }
    }

    /// Collect one checkpoint: check its owner and status, win the decision, mark it for the
    /// late sweep, delete data, metadata, marker — in that order.
    /// What [`collect_one`](Self::collect_one) would do, by reading only: the records it
    /// would read must read, and `index.json` must name the marker's owner.
    async fn dry_run_one(
        &self,
        tally: &OwnerTally,
        id: &CheckpointId,
    ) -> banklease::Result<Outcome> {
        let bank = &self.ctx.bank;
        let index = checkpoint::read_checkpoint(bank, id).await?;
        read_decision(bank, id).await?;
        Ok(match index {
            // A stray marker: the pass would remove it.
            Some(record) if record.owner_id != tally.owner => Outcome::Repaired(STRAY_BESIDE_OTHER),
            index => {
                let declared = self.declared(tally, id, index.as_ref()).await?;
                match self.waiting(tally, index.as_ref(), declared) {
                    Some(why) => Outcome::Waiting(why),
                    None => Outcome::Collected,
                }
            }
        })
    }

    /// The retry budget the owner of checkpoint `id` declared, as the rules take it: its
    /// lease's while the lease is there and says one; else (the lease gone, or a release before
    /// declarations) `index.json`'s, or, where that says none (absent, a collector's tombstone),
    /// its marker's. At most one read (the marker), and only on that last path.
    async fn declared(
        &self,
        tally: &OwnerTally,
        id: &CheckpointId,
        index: Option<&checkpoint::CheckpointRecord>,
    ) -> banklease::Result<Option<u64>> {
        if tally.verdict != Verdict::Missing {
            if let Some(ms) = tally.budget_ms {
                return Ok(Some(ms));
            }
        }
        match index.and_then(|r| r.retry_budget_ms) {
            Some(ms) => Ok(Some(ms)),
            None => checkpoint::read_marker_budget(&self.ctx.bank, &tally.owner, id).await,
        }
    }

    /// Why the checkpoint of a dead owner is left for later, if it is: an owner whose lease is
    /// gone is judged by the budget it `declared` (or the store's longest default), which may
    /// need longer than the grace since the lease was first seen missing. Only before anything
    /// is decided (`index` protecting or absent): a tombstone is written, and a decision taken,
    /// only after this wait.
    fn waiting(
        &self,
        tally: &OwnerTally,
        index: Option<&checkpoint::CheckpointRecord>,
        declared: Option<u64>,
    ) -> Option<String> {
        // An expired lease's own declarations were judged with it (zombies.rs).
        if tally.verdict != Verdict::Missing
            || index.is_some_and(|r| r.status != Status::Protecting)
        {
            return None;
        }
        let ctx = self.ctx;
        let (wait, why) = ctx.rules.wait_missing(&tally.owner, declared, &ctx.options);
        // Without the evidence of how long the lease has been gone, nothing is known to be
        // over: wait.
        let dead_for = tally
            .evidence
            .as_ref()
            .map_or(Duration::ZERO, |e| Duration::from_millis(e.dead_for_ms));
        why.filter(|_| !past(dead_for, wait, ctx.options.skew_margin))
    }

    async fn collect_one(
        &self,
        tally: &OwnerTally,
        id: &CheckpointId,
    ) -> banklease::Result<Outcome> {
        let (ctx, bank) = (self.ctx, &self.ctx.bank);
        let (owner, evidence) = (&tally.owner, tally.evidence.as_ref());
        // What the owner declared, read once: for the wait before deciding, and the sweep's.
        let declared;
        // Never delete on doubt: the metadata, if present, must be readable and name the
        // marker's owner.
        let mut existing = checkpoint::read_checkpoint(bank, id).await?;
        match &existing {
            Some(record) if record.owner_id != *owner => {
                // `index.json` is the create-if-absent winner's: this dead owner's marker is a
                // stray (its create crashed or lost after the marker). Only the marker goes:
                // nothing of the other owner's checkpoint is touched, and this owner, dead past
                // grace, can no longer be writing under it.
                tracing::warn!(checkpoint_id = %id, marker_owner = %owner, owner_id = %record.owner_id,
                    "stray protecting marker of a dead owner beside another owner's checkpoint: removed");
                delete_ok_if_missing(bank, &Key::marker(owner, id).path(bank)).await?;
                return Ok(Outcome::Repaired(STRAY_BESIDE_OTHER));
            }
            Some(record) if !matches!(record.status, Status::Protecting | Status::Deleted) => {
                // Only a protecting checkpoint may be collected. A finished one is either an
                // owner's move to finish, or carries a stray marker.
                return match read_decision(bank, id).await? {
                    Some(d) if d.by == Decider::Owner => {
                        finish_owner_decision(bank, &d).await?;
                        Ok(Outcome::Repaired(OWNERS_MOVE))
                    }
                    Some(_) => {
                        tracing::warn!(checkpoint_id = %id, owner_id = %owner, status = %record.status,
                            "a gc decision on a checkpoint that is not protecting: not collecting");
                        Ok(Outcome::Skipped(
                            "a gc decision on a checkpoint that is not protecting (doubt: a \
                             human looks, `banklease checkpoint explain`)",
                        ))
                    }
                    None => {
                        tracing::warn!(checkpoint_id = %id, owner_id = %owner, status = %record.status,
                            "stray protecting marker beside a checkpoint that is not protecting: removed");
                        delete_ok_if_missing(bank, &Key::marker(owner, id).path(bank)).await?;
                        Ok(Outcome::Repaired(STRAY_BESIDE_FINISHED))
                    }
                };
            }
            Some(record) => {
                declared = self.declared(tally, id, Some(record)).await?;
                if let Some(why) = self.waiting(tally, Some(record), declared) {
                    return Ok(Outcome::Waiting(why));
                }
            }
            None => {
                declared = self.declared(tally, id, None).await?;
                if let Some(why) = self.waiting(tally, None, declared) {
                    return Ok(Outcome::Waiting(why));
                }
                // No metadata: tombstone the id first (create-if-absent), so that a create of
                // the same id landing now — a paused owner's, or another owner's reusing it —
                // fails instead of having its checkpoint collected under this marker's owner.
                let now = ctx.clock.system_now().into();
                if !create_tombstone(bank, id, owner, now).await? {
                    // Someone created it meanwhile: judge it again next pass.
                    return Ok(Outcome::Skipped(CREATED_MEANWHILE));
                }
                existing = checkpoint::read_checkpoint(bank, id).await?;
                if existing.is_none() && !ctx.options.read_staleness.is_zero() {
                    // Our create landed (it said so): a replica that lags answered. Read once
                    // more past its lag rather than give the checkpoint up for this pass.
                    ctx.clock.sleep(ctx.options.read_staleness).await;
                    existing = checkpoint::read_checkpoint(bank, id).await?;
                }
                // On a store whose create-if-absent is not atomic (Swift) a create racing ours
                // may have won too: go on only over our own tombstone.
                if !matches!(&existing, Some(r) if r.status == Status::Deleted && r.owner_id == *owner)
                {
                    return Ok(Outcome::Skipped(CREATED_MEANWHILE));
                }
            }
        }
        let decision =
            Decision::collect(id, owner, ctx.clock.system_now().into(), evidence.cloned());
        if let Some(e) = evidence {
            tracing::info!(checkpoint_id = %id, owner_id = %owner, lease = e.lease,
                lease_stamp = ?e.lease_stamp, judged_at = %e.judged_at, dead_for_ms = e.dead_for_ms,
                skew_margin_ms = e.skew_margin_ms, grace_ms = e.grace_ms, collector = e.collector,
                pass = e.pass, "deciding to collect");
        }
        match decide(bank, decision).await? {
            Decided::Won(_) => {}
            Decided::Lost(existing) if existing.by == Decider::Gc => {
                // An earlier pass (or another GC) decided and was interrupted: resume.
            }
            Decided::Lost(existing) => {
                // The owner completed it but crashed before finishing the move: finish it.
                finish_owner_decision(bank, &existing).await?;
                return Ok(Outcome::Repaired(OWNERS_MOVE));
            }
        }
        let late = ctx.rules.late_window(declared, &ctx.options);
        let listed = finish_collection(bank, owner, id, existing, late).await?;
        Ok(Outcome::Listed(Listed {
            reason: dead_because(tally),
            ..listed
        }))
    }
}

/// The GC holds the decision: the sweep marker, then the data listed for the batch, which
/// deletes it with other checkpoints' and then writes the tombstone and deletes the marker
/// (batch.rs). Idempotent: a marker left by a crash brings the checkpoint back here on the
/// next pass.
async fn finish_collection(
    bank: &Bank,
    owner: &OwnerId,
    id: &CheckpointId,
    existing: Option<checkpoint::CheckpointRecord>,
    late_window: Duration,
) -> banklease::Result<Listed> {
    // Before any data goes: a write still in flight may land after the deletion.
    mark_for_sweep(bank, id, late_window).await?;
    let data = list_data(bank, id).await?;
    // The tombstone (not a deletion) keeps `index.json`'s creation time: an owner paused
    // inside `Checkpoint::create` may still have its create-if-absent of index.json in
    // flight; against a tombstone it fails, where after a deletion it would land as a
    // protecting checkpoint with no marker — a zombie no pass could ever find (found by the
    // simulation, seed 8).
    Ok(Listed {
        owner: owner.clone(),
        id: id.to_owned(),
        created_at: existing.map(|r| r.created_at),
        data,
        reason: String::new(),
    })
}
