//! Finding zombies: the protecting index is listed once, and each owner in it judged once, by
//! reading its lease (never by a listing). A missing lease is timed by its missing-since record
//! ([`crate::pass::records`]); the verdicts themselves are the planner's ([`crate::pass::plan::Verdict`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use banklease::checkpoint::{parse_marker, Evidence};
use banklease::error::error_chain;
use banklease::paths::Prefix;
use banklease::{CheckpointId, LeaseView, OwnerId};
use futures::StreamExt;

use crate::pass::context::PassContext;
use crate::pass::plan::{OwnerTally, Verdict};
use crate::pass::records::missing_for;
use crate::pass::report::{duration_words, Action, PassReport, Problem, MAX_NAMED};

/// The owners of the protecting index, judged.
#[derive(Debug)]
pub(crate) struct Judged {
    /// Every owner with a marker in the listing, in listing order.
    pub(crate) tallies: Vec<OwnerTally>,
    /// When the listing was sent: a missing lease's markers are judged at that instant.
    pub(crate) listed_at: Instant,
    /// Whether the listing ran to its end: only then does an owner it did not show have no
    /// protecting checkpoint (the reaper's premise).
    pub(crate) listed_all: bool,
    /// Owners whose missing-since record is kept: their lease reads as missing (or cannot be
    /// read). A record left from an earlier episode would start a later episode's grace long
    /// before it began.
    pub(crate) keep_records: HashSet<OwnerId>,
    /// How long each dead owner has been dead.
    pub(crate) dead_for: HashMap<OwnerId, Duration>,
    /// The dead owners' checkpoints as listed (the first [`MAX_NAMED`]), for a report that
    /// names what the brake held back; and how many the listing showed beyond them.
    pub(crate) dead_listed: Vec<(OwnerId, CheckpointId)>,
    pub(crate) dead_unlisted: u64,
}

/// One owner's judgement.
struct Judgement {
    owner: OwnerId,
    /// Why the owner waits past the collector's grace (what it declared needs longer).
    waiting: Option<String>,
    /// The retry budget its lease declared.
    budget_ms: Option<u64>,
    verdict: Verdict,
    keep_record: bool,
    state: &'static str,
    dead_for: Option<Duration>,
    evidence: Option<Evidence>,
    /// Judged alive (or in grace) only because the clock floor raised its stamp: by the stamp
    /// itself its lease expired this long ago, and the floor holds it until then.
    held: Option<Held>,
}

/// A lease the clock floor holds back.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// How long ago it expired by its own stamp.
    since: Duration,
    /// The floor its stamp is judged from.
    floor: chrono::DateTime<chrono::Utc>,
    /// When the floored stamp's lease is past the grace (store clock): collected from then.
    until: chrono::DateTime<chrono::Utc>,
}

/// List the protecting index (streamed: memory grows with owners, not checkpoints) and judge
/// each owner once.
pub(crate) async fn find(ctx: &PassContext, report: &mut PassReport) -> Judged {
    let bank = &ctx.bank;
    let listed_at = ctx.clock.now();
    let mut markers: HashMap<OwnerId, u64> = HashMap::new();
    // Named in the report (bounded: beyond MAX_NAMED, only counted).
    let mut listed: Vec<(OwnerId, CheckpointId)> = Vec::new();
    let mut order: Vec<OwnerId> = Vec::new();
    let mut listed_all = true;
    let prefix = Prefix::Protecting.path(bank);
    let mut listing = bank.store().list(Some(&prefix));
    while let Some(item) = listing.next().await {
        match item {
            Ok(meta) => match parse_marker(bank, &meta.location) {
                Some((owner, id)) => {
                    report.scanned += 1;
                    if listed.len() < MAX_NAMED {
                        listed.push((owner.clone(), id));
                    }
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
                // Judge what was seen (each owner by its lease); the rest waits for the next
                // pass. An owner not seen may have markers, so nothing is reaped.
                listed_all = false;
                let reaping = ctx.options.reap_leases && !ctx.options.dry_run;
                let error = format!(
                    "{}{}",
                    error_chain(&e),
                    if reaping {
                        "; no lease is reaped this pass (an owner it did not list may still \
                         have protecting checkpoints)"
                    } else {
                        ""
                    }
                );
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, %error, "listing the protecting index failed");
                report.failed(Problem::new(
                    format!("listing the protecting index `{prefix}`"),
                    error,
                ));
                break;
            }
        }
    }
    drop(listing);
    report.owners = order.len() as u64;

    let judgements: Vec<Judgement> = futures::stream::iter(order)
        .map(|owner| judge(ctx, owner))
        .buffered(ctx.options.concurrency)
        .collect()
        .await;
    let keep_records: HashSet<OwnerId> = judgements
        .iter()
        .filter(|j| j.keep_record)
        .map(|j| j.owner.clone())
        .collect();
    let mut dead_for: HashMap<OwnerId, Duration> = HashMap::new();
    // Why each owner's checkpoints are left alone, for those that are.
    let mut left_alone: HashMap<OwnerId, String> = HashMap::new();
    let tallies: Vec<OwnerTally> = judgements
        .into_iter()
        .map(|j| {
            let n = markers.get(&j.owner).copied().unwrap_or(0);
            if let Some(why) = j.waiting.clone() {
                report.wait(why);
            }
            *report.leases.entry(j.state.to_owned()).or_default() += 1;
            let owner_state = match &j.verdict {
                // By its stamp a zombie, held back only by the clock floor: not alive, and
                // counted as the oldest zombie is (the alert on piling zombies sees it).
                _ if j.held.is_some() => {
                    let held = j.held.expect("held");
                    report.held_back += 1;
                    report.held_back_until = report.held_back_until.max(Some(held.until));
                    dead_for.insert(j.owner.clone(), held.since);
                    "held_back"
                }
                Verdict::Alive => {
                    report.alive += 1;
                    "alive"
                }
                Verdict::InGrace => {
                    report.in_grace += 1;
                    "in_grace"
                }
                Verdict::Unreadable(error) => {
                    tracing::warn!(owner_id = %j.owner, %error, "lease unreadable: not collecting");
                    report.unreadable += 1;
                    "unreadable"
                }
                Verdict::Expired | Verdict::Missing => {
                    report.dead += 1;
                    dead_for.insert(j.owner.clone(), j.dead_for.unwrap_or_default());
                    "dead"
                }
            };
            *report.protecting.entry(owner_state.to_owned()).or_default() += n;
            if !j.verdict.is_dead() {
                report.skipped += n;
                left_alone.insert(j.owner.clone(), left_alone_because(&j));
            }
            OwnerTally {
                owner: j.owner,
                markers: n,
                verdict: j.verdict,
                evidence: j.evidence,
                budget_ms: j.budget_ms,
            }
        })
        .collect();
    // Name what is left alone; keep the dead owners' for the brake. Beyond the bound of the
    // listing kept, both are counted only.
    let (mut alone_named, mut dead_listed) = (0u64, Vec::new());
    for (owner, id) in listed {
        match left_alone.get(&owner) {
            Some(why) => {
                alone_named += 1;
                report.name(id, owner, Action::Skip, why.clone());
            }
            None => dead_listed.push((owner, id)),
        }
    }
    let markers_of = |dead: bool| -> u64 {
        tallies
            .iter()
            .filter(|t| t.verdict.is_dead() == dead)
            .map(|t| t.markers)
            .sum()
    };
    report.checkpoints_omitted += markers_of(false).saturating_sub(alone_named);
    let dead_unlisted = markers_of(true).saturating_sub(dead_listed.len() as u64);
    Judged {
        tallies,
        listed_at,
        listed_all,
        keep_records,
        dead_for,
        dead_listed,
        dead_unlisted,
    }
}

/// Why an owner's protecting checkpoints are left alone (it is not judged dead), in words.
fn left_alone_because(j: &Judgement) -> String {
    if let Some(held) = j.held {
        return format!(
            "its owner's lease expired {} ago by its stamp, but stamps older than the clock \
             floor {} (a store-clock step seen there) are judged as written at it: held back \
             until {} on the store's clock",
            duration_words(held.since),
            held.floor.format("%Y-%m-%d %H:%M:%S%.3f UTC"),
            held.until.format("%Y-%m-%d %H:%M:%S%.3f UTC"),
        );
    }
    match &j.verdict {
        Verdict::Alive => "its owner's lease is alive".to_owned(),
        Verdict::InGrace => match (&j.waiting, j.dead_for) {
            (Some(why), _) => why.clone(),
            (None, Some(since)) => format!(
                "its owner's lease expired {} ago, within the grace",
                duration_words(since)
            ),
            (None, None) => "its owner's lease is missing, within the grace".to_owned(),
        },
        Verdict::Unreadable(error) => format!("its owner's lease cannot be judged: {error}"),
        Verdict::Expired | Verdict::Missing => String::new(),
    }
}

/// Judge one owner by reading its lease (and, when it is missing, its missing-since record).
async fn judge(ctx: &PassContext, owner: OwnerId) -> Judgement {
    let (view, read) = ctx.observer.view_read(&owner, &ctx.store_time).await;
    // The owner's own rule: its declared budget and windows may need more than the grace.
    let (grace, longer) = match &view {
        LeaseView::Expired { record, .. } => ctx.rules.grace_for(record, &ctx.options),
        _ => (ctx.options.grace, None),
    };
    let budget_ms = match &view {
        LeaseView::Expired { record, .. } => record.retry_budget_ms,
        _ => None,
    };
    let mut verdict = Verdict::of(&view, grace);
    let waiting = longer.filter(|_| {
        verdict == Verdict::InGrace && Verdict::of(&view, ctx.options.grace) == Verdict::Expired
    });
    let mut dead_for = match &view {
        LeaseView::Expired { since, .. } => Some(*since),
        _ => None,
    };
    if verdict == Verdict::Missing {
        let sent = ctx.clock.now();
        let seen = missing_for(ctx, &owner, sent)
            .await
            .map_err(|e| error_chain(&e));
        (verdict, dead_for) = Verdict::of_missing(seen, ctx.options.grace, ctx.options.skew_margin);
    }
    tracing::debug!(owner_id = %owner, view = view.name(), ?verdict, "judged owner");
    let held = held_by_the_floor(ctx, &view, &read, &verdict, grace);
    let evidence = match (&verdict, dead_for) {
        (Verdict::Expired | Verdict::Missing, Some(dead_for)) => {
            Some(evidence(ctx, &view, &read, dead_for, grace))
        }
        _ => None,
    };
    Judgement {
        evidence,
        waiting,
        budget_ms,
        keep_record: matches!(view, LeaseView::Missing | LeaseView::Unreadable { .. }),
        state: view.name(),
        owner,
        verdict,
        dead_for,
        held,
    }
}

/// Whether the clock floor alone keeps this owner from being judged dead: its lease, judged by
/// its own stamp at the same instant, is expired past the grace.
fn held_by_the_floor(
    ctx: &PassContext,
    view: &LeaseView,
    read: &banklease::observe::Read,
    verdict: &Verdict,
    grace: Duration,
) -> Option<Held> {
    if verdict.is_dead() {
        return None;
    }
    let (Some(stamp), Some(raw)) = (read.stamp, read.raw_stamp) else {
        return None;
    };
    if raw >= stamp {
        return None;
    }
    let record = match view {
        LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } => record,
        _ => return None,
    };
    let margin = ctx.options.skew_margin;
    let by_stamp = banklease::observe::judge((**record).clone(), raw, read.judged_at, margin);
    if !Verdict::of(&by_stamp, grace).is_dead() {
        return None;
    }
    let LeaseView::Expired { since, .. } = by_stamp else {
        return None;
    };
    let after = record.expire_window() + margin + grace;
    let until = stamp + chrono::TimeDelta::from_std(after).unwrap_or(chrono::TimeDelta::MAX);
    Some(Held {
        since,
        floor: stamp,
        until,
    })
}

/// The evidence an owner was judged dead on, as a decision (or a reap record) records it.
pub(crate) fn evidence(
    ctx: &PassContext,
    view: &LeaseView,
    read: &banklease::observe::Read,
    dead_for: Duration,
    grace: Duration,
) -> Evidence {
    Evidence {
        lease: view.name().to_owned(),
        lease_stamp: read.stamp,
        expire_window_ms: match view {
            LeaseView::Expired { record, .. } => Some(millis(record.expire_window())),
            _ => None,
        },
        judged_at: read.judged_at,
        dead_for_ms: millis(dead_for),
        skew_margin_ms: millis(ctx.options.skew_margin),
        grace_ms: millis(grace),
        collector: ctx.options.collector.clone(),
        collector_host: Some(banklease::id::local_hostname()),
        collector_pid: Some(std::process::id()),
        pass: ctx.pass.clone(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
