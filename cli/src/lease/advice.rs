//! Advice to a human reading a lease: clock times (UTC and local) from which its owner's
//! checkpoints may be collected, and what this host can tell of the owner's process.
//!
//! **Invariant:** advice only. The GC judges on its own (gc/src/pass/plan.rs); nothing here is read
//! by a judgement, so nothing here can make it collect more or sooner.

use std::time::Duration;

use banklease::clock::add_saturating;
use banklease::clock::drift::clock_drift_over;
use banklease::clock::StoreTime;
use banklease::observe::Read;
use banklease::process::ProcessHere;
use banklease::process::ProcessStamp;
use banklease::{LeaseRecord, LeaseView, OwnerId};
use chrono::{DateTime, Local, Utc};
use object_store::ObjectStoreExt;

use crate::{human, Ctx};

/// `2026-11-27 00:12:03 UTC (2026-11-27 01:12:03 +01:00 local), in 9m 37s` — `t` on the
/// store's clock, told from `now` on the same clock.
pub(crate) fn instant(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let local = t.with_timezone(&Local);
    let when = if t > now {
        format!("in {}", human(whole_seconds(StoreTime::between(now, t))))
    } else {
        format!("{} ago", human(whole_seconds(StoreTime::between(t, now))))
    };
    format!(
        "{} UTC ({} local), {when}",
        t.format("%Y-%m-%d %H:%M:%S"),
        local.format("%Y-%m-%d %H:%M:%S %:z")
    )
}

fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

/// When a lease stamped `stamp` by the store, as its `record` declares it, stops counting: its
/// expiry, plus its holder's clock drift, plus the margin in its favour (as `judge_expiry`).
pub(crate) fn counts_until(
    record: &LeaseRecord,
    stamp: DateTime<Utc>,
    margin: Duration,
) -> DateTime<Utc> {
    let window = record.expire_window();
    add_saturating(
        add_saturating(add_saturating(stamp, window), clock_drift_over(window)),
        margin,
    )
}

/// Whether this host can tell that the process `record` names has exited.
pub(crate) fn process_exited(record: &LeaseRecord) -> bool {
    matches!(
        ProcessStamp::here(record.process.as_ref(), record.pid),
        ProcessHere::Exited | ProcessHere::PidReused
    )
}

/// What this host can tell of the process `record` names, in words; its lease counts until
/// `until` (store clock), told from `now`.
pub(crate) fn process(record: &LeaseRecord, until: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let pid = record.pid;
    let counts = if until > now {
        format!("the lease still counts until {}", instant(until, now))
    } else {
        format!("the lease counted until {}", instant(until, now))
    };
    match ProcessStamp::here(record.process.as_ref(), pid) {
        ProcessHere::Running => format!("its process {pid} runs on this host"),
        ProcessHere::Exited => format!("its process {pid} on this host has exited; {counts}"),
        ProcessHere::PidReused => format!(
            "its process {pid} on this host has exited (pid {pid} now belongs to a process \
             started later); {counts}"
        ),
        ProcessHere::Unproven { pid_running } => {
            let named = format!("a process named {pid} on a host named `{}`", record.host);
            if record.host != banklease::id::local_hostname() {
                return named;
            }
            // The same name proves nothing (cloned machines share one): say what is seen only.
            let seen = match pid_running {
                Some(true) => {
                    "a process with that pid is running here, which may or may not \
                               be it"
                }
                Some(false) => "no process with that pid runs here",
                None => "whether a process with that pid runs here cannot be told",
            };
            format!(
                "{named}, as this host is named; {seen} (the lease does not prove it was \
                 written on this machine since its last boot)"
            )
        }
    }
}

/// What `explain` tells beyond the judgement: advice, never read by the gc.
pub(crate) struct Advice {
    /// What this host can tell of the owner's process.
    pub(crate) process: Option<String>,
    /// "its process N on this host has exited", when this host can tell it has.
    pub(crate) process_gone: Option<String>,
    /// From when the gc may collect the owner's protecting checkpoints (store clock).
    pub(crate) collectable_from: Option<DateTime<Utc>>,
    /// That instant in words (UTC, local, how long from now).
    pub(crate) collectable_from_words: Option<String>,
    /// Why that is later than the grace: what the owner declared needs longer on this store.
    pub(crate) waiting: Option<String>,
    /// The bank's clock floor, when it is later than the lease's stamp: the lease is timed from
    /// it (a store-clock step was seen after the owner's last renewal).
    pub(crate) held_by: Option<DateTime<Utc>>,
}

/// The owner's process and the clock time from which its checkpoints may be collected, from
/// its lease as read (`view`, `read`) and the grace its declarations need; a missing lease from
/// the gc's missing-since record and the budget the checkpoint's `index.json` declared
/// (`declared_ms`).
pub(crate) async fn advise(
    ctx: &Ctx,
    owner: &OwnerId,
    view: &LeaseView,
    read: &Read,
    declared_ms: Option<u64>,
) -> Option<Advice> {
    let now = read.judged_at;
    let rules = banklease_gc::pass::declared::OwnerRules::of(&ctx.bank);
    let options = banklease_gc::GcOptions::from_config(&ctx.config);
    // What the gc judges by: a floor later than the stamp holds the lease from the floor. (Read
    // failing: said without it.)
    let floor = banklease_gc::time::timing::read_floor(&ctx.bank)
        .await
        .ok()
        .flatten();
    let mut held_by = None;
    let (process, collectable_from, waiting) = match (view, read.stamp) {
        (LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. }, Some(stamp)) => {
            held_by = floor.filter(|f| *f > stamp);
            let until = counts_until(
                record,
                held_by.unwrap_or(stamp),
                ctx.config.lease.skew_margin,
            );
            let process = process(record, until, now);
            let gone = process_exited(record)
                .then(|| format!("its process {} on this host has exited", record.pid));
            let (grace, waiting) = rules.grace_for(record, &options);
            (
                Some((process, gone)),
                Some(add_saturating(until, grace)),
                waiting,
            )
        }
        (LeaseView::Missing, _) => {
            let path = banklease::paths::Key::GcMissing(owner.clone()).path(&ctx.bank);
            let seen = ctx.bank.store().head(&path).await.ok();
            let (wait, waiting) = rules.wait_missing(owner, declared_ms, &options);
            let from =
                seen.map(|m| add_saturating(m.last_modified, wait + ctx.config.lease.skew_margin));
            (None, from, waiting)
        }
        _ => return None,
    };
    Some(Advice {
        process_gone: process.as_ref().and_then(|(_, gone)| gone.clone()),
        process: process.map(|(p, _)| p),
        collectable_from,
        collectable_from_words: collectable_from.map(|t| instant(t, now)),
        waiting,
        held_by,
    })
}
