//! Reaping: the lease objects of owners expired past grace with no protecting checkpoint left
//! are deleted (`gc.reap_leases`; not in a dry run), each after its evidence is written to
//! `gc/reaped/<owner>` ([`crate::pass::reaped`]).
//!
//! Invariant: **a lease is reaped only when its owner is provably dead and empty.** Every
//! restart is a new owner, so lease objects would pile up; but a lease is deleted only if a
//! fresh read (judged at its send instant) finds it expired past grace, and the owner has no
//! protecting checkpoint left: all its markers were removed this pass, or a listing of the
//! protecting index that ran to its end showed none. An owner absent from a listing cut short
//! by an error is unknown, not empty, so such a pass reaps nothing. Such an owner judged its own
//! lease Lost long before and never renews it; mass reaping stops at the brake like mass
//! collection.

use std::collections::HashSet;

use banklease::error::error_chain;
use banklease::observe::Read;
use banklease::paths::{Key, Prefix};
use banklease::{LeaseView, OwnerId};
use futures::StreamExt;

use crate::pass::context::PassContext;
use crate::pass::delete::delete_ok_if_missing;
use crate::pass::plan::Verdict;
use crate::pass::reaped::{ReapRecord, REAP_RECORD_FORMAT};
use crate::pass::report::{PassReport, Problem};
use crate::pass::zombies::evidence;

/// Delete the lease objects of owners that are expired past grace and have no protecting
/// checkpoint left: those whose markers this pass removed without a skip or error
/// (`cleared`), and those with no marker in the listing at all (judged here, once each).
/// `seen` must come from a listing of the protecting index that ran to its end: absence from
/// a listing cut short says nothing (the pass does not call this after one).
///
/// Safe: an owner expired on the store clock (plus margin and grace) has long judged its own
/// lease Lost, never renews it, and cannot create checkpoints.
pub(crate) async fn reap_leases(
    ctx: &PassContext,
    seen: &HashSet<OwnerId>,
    cleared: &HashSet<OwnerId>,
    report: &mut PassReport,
) -> banklease::Result<()> {
    let bank = &ctx.bank;
    let prefix = Prefix::Leases.path(bank);
    let mut listing = bank.store().list(Some(&prefix));
    let mut candidates = Vec::new();
    let mut leases: u64 = 0;
    while let Some(item) = listing.next().await {
        let meta = match item {
            Ok(meta) => meta,
            Err(e) => {
                // Those listed are judged each by its own read; those not listed are left
                // alone, nothing inferred from their absence.
                let error = format!(
                    "{}; the leases it did not list wait for the next pass",
                    error_chain(&e)
                );
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, %error, "listing leases failed");
                report.failed(Problem::new(format!("listing `{prefix}`"), error));
                break;
            }
        };
        let Some(Key::Lease(owner)) = Key::parse(bank, &meta.location) else {
            continue;
        };
        leases += 1;
        if cleared.contains(&owner) || !seen.contains(&owner) {
            candidates.push(owner);
        }
    }
    drop(listing);
    // Judge every candidate first (the reads), then check the store clock once more, then
    // delete: a step after this pass's first reading would make fresh stamps look old.
    let judged: Vec<(OwnerId, LeaseView, Option<&'static str>, Read)> =
        futures::stream::iter(candidates)
            .map(|owner| async move {
                // Cleared owners were judged this pass; the others are judged now. Either way
                // the lease is re-read, so one renewed since (impossible when expired) is never
                // lost.
                let (view, read) = ctx.observer.view_read(&owner, &ctx.store_time).await;
                let counted = (!seen.contains(&owner)).then_some(view.name());
                (owner, view, counted, read)
            })
            .buffer_unordered(ctx.options.concurrency)
            .collect()
            .await;
    for state in judged.iter().filter_map(|(_, _, counted, _)| *counted) {
        *report.leases.entry(state.to_owned()).or_default() += 1;
    }
    let expired: Vec<ReapRecord> = judged
        .into_iter()
        .filter_map(|(owner, view, _, read)| match &view {
            // Judged as its checkpoints would be: by the grace its own declarations need.
            LeaseView::Expired { since, record } => {
                let (grace, _) = ctx.rules.grace_for(record, &ctx.options);
                (Verdict::of(&view, grace) == Verdict::Expired).then(|| ReapRecord {
                    format: REAP_RECORD_FORMAT,
                    owner_id: owner,
                    reaped_at: ctx.clock.system_now().into(),
                    lease: Some(record.as_ref().clone()),
                    evidence: evidence(ctx, &view, &read, *since, grace),
                })
            }
            _ => None,
        })
        .collect();
    if expired.is_empty() {
        return Ok(());
    }
    if let Some(reason) = crate::pass::plan::reap_brake(expired.len() as u64, leases, &ctx.options)
    {
        tracing::error!("{reason}");
        report.braked.get_or_insert(reason);
        return Ok(());
    }
    ctx.check_clock_again().await?;
    let mut reaped = futures::stream::iter(expired)
        .map(|record| async move {
            let owner = record.owner_id.clone();
            // The evidence first: no lease disappears without its reason.
            if let Err(e) = crate::pass::reaped::write(bank, &record).await {
                return Err((owner, "writing its reap record", e));
            }
            match delete_ok_if_missing(bank, &bank.lease_path(&owner)).await {
                Ok(()) => {
                    let e = &record.evidence;
                    tracing::info!(owner_id = %owner, lease_stamp = ?e.lease_stamp,
                        judged_at = %e.judged_at, dead_for_ms = e.dead_for_ms,
                        skew_margin_ms = e.skew_margin_ms, grace_ms = e.grace_ms,
                        collector = %e.collector, pass = %e.pass,
                        "reaped the lease of a dead owner");
                    Ok(())
                }
                Err(e) => Err((owner, "reaping it", e)),
            }
        })
        .buffer_unordered(ctx.options.concurrency);
    while let Some(result) = reaped.next().await {
        match result {
            Ok(()) => report.leases_reaped += 1,
            Err((owner, what, e)) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, owner_id = %owner, error = %error_chain(&e), what,
                    "reaping a lease failed");
                report.failed(Problem::new(
                    format!("lease of owner `{owner}`"),
                    format!("{what} failed: {}", error_chain(&e)),
                ));
            }
        }
    }
    Ok(())
}
