//! Retiring failed checkpoints: a checkpoint its owner completed as `error` is indexed under
//! `index/failed/<id>` when that move finishes; once the entry's stamp (the store's clock) is
//! older than `gc.keep_failed_for` plus the skew margin, judged at the instant the listing was
//! sent (not raised to a step floor: see `retire_failed`; less the confirmed steps since, and
//! only on a reading compared with an earlier one), the pass removes the checkpoint — data
//! first, then its records
//! ([`banklease::collector::remove_finished`]). A removal begun and interrupted (a pass's, or an
//! operator's `checkpoint delete`, which indexes what it removes here first) is finished at
//! once, whatever its age. The others are counted, with their bytes, so that an operator sees
//! what the setting keeps.
//!
//! Only what the entry names and `index.json` confirms is removed: a checkpoint whose
//! `index.json` is not a failed one (or not there) only loses its entry, and one that cannot be
//! read is a problem, left for a human. `gc.max_deletions` bounds retirements with collections:
//! they take what the pass's collections left, and the rest wait, named, for the next pass.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use banklease::checkpoint::{self, Removal, Status};
use banklease::clock::StoreTime;
use banklease::collector::{forget_failed, remove_finished};
use banklease::error::error_chain;
use banklease::paths::{Key, Prefix};
use banklease::CheckpointId;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;

use crate::pass::context::PassContext;
use crate::pass::plan::past;
use crate::pass::report::{duration_words, Action, PassReport, Problem};
use crate::time::steps::{not_counting, read_steps};

/// What became of one failed checkpoint's entry.
enum Outcome {
    /// Kept: not failed for `keep_failed_for` yet (or kept for ever), with its data's bytes.
    Kept(u64),
    /// Retired (dry run: would be), and why.
    Retired(banklease::OwnerId, String),
    /// Due, but over the pass's limit (`gc.max_deletions`): kept for the next pass.
    Deferred(banklease::OwnerId, u64),
    /// The entry named no failed checkpoint: it was forgotten.
    Stale,
    /// Not an entry banklease wrote (a body it never writes, or no checkpoint of that id at
    /// all): kept, and named.
    Foreign(String),
}

/// Whether the entry at `entry` holds exactly what a removal writes (gone: as good as empty,
/// the caller reads the record next).
/// Also the entry's stamp as read (a listing may show an older version's: a removal that wrote
/// its entry again just now must not be judged by its first one).
async fn holds_removing(
    bank: &banklease::Bank,
    entry: &object_store::path::Path,
) -> banklease::Result<(bool, Option<chrono::DateTime<chrono::Utc>>)> {
    let got = match bank.store().get(entry).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok((true, None)),
        Err(e) => return Err(banklease::Error::store("get", entry, e)),
    };
    let stamp = got.meta.last_modified;
    if got.meta.size > 64 {
        return Ok((false, Some(stamp)));
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| banklease::Error::store("get", entry, e))?;
    let ours = bytes.is_empty() || &bytes[..] == banklease::collector::REMOVING_ENTRY;
    Ok((ours, Some(stamp)))
}

/// Retire the failed checkpoints past `gc.keep_failed_for`; count the others.
pub(crate) async fn retire_failed(ctx: &PassContext, report: &mut PassReport) {
    let bank = &ctx.bank;
    let prefix = Prefix::Failed.path(bank);
    let sent = ctx.clock.now();
    let prefix = &prefix;
    // The pass's deletions so far: its collections (and, to err low, those that failed part
    // way), then each retirement as it is decided.
    let limit = (ctx.options.max_deletions > 0).then_some(ctx.options.max_deletions as u64);
    let taken = &AtomicU64::new(report.collected + report.errors);
    // Without the confirmed steps a retention could end early: no retirement on that doubt.
    let steps = match read_steps(bank).await {
        Ok(steps) => steps,
        Err(e) => {
            tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, error = %error_chain(&e),
                "reading the confirmed clock steps failed: no failed checkpoint retired this pass");
            report.failed(Problem::of("gc/clock-steps".to_owned(), &e));
            return;
        }
    };
    let steps = &steps[..];
    let unvouched = &AtomicU64::new(0);
    let mut results = bank
        .store()
        .list(Some(prefix))
        .map(|item| async move {
            let meta = item.map_err(|e| {
                let listing = format!("listing `{prefix}`");
                (listing, banklease::Error::store("list", prefix, e))
            })?;
            // Not an entry of the layout: not ours to read or remove.
            let Some(Key::Failed(id)) = Key::parse(bank, &meta.location) else {
                return Ok(None);
            };
            // Unfloored: the step floor holds back what could still be alive; a failed
            // checkpoint is garbage either way, and a floor would restart every retention
            // at each daemon start. The confirmed steps since its stamp are not counted.
            let now = ctx.store_time.at_send(sent, ctx.options.read_staleness);
            let failed_for = not_counting(steps, meta.last_modified, now);
            // A reading no earlier one vouches for may be a clock that reads wrong (a host
            // booted with a wrong RTC, on a `file:` bank) or a step unseen: no retention ends
            // on it, whatever it says.
            let failed_for = if ctx.compared {
                failed_for
            } else {
                let due = ctx.options.keep_failed_for.is_some_and(|keep| {
                    let keep = keep.max(ctx.options.late_write_window);
                    past(failed_for, keep, ctx.options.skew_margin)
                });
                if due {
                    unvouched.fetch_add(1, Ordering::Relaxed);
                }
                Duration::ZERO
            };
            let outcome = one(ctx, &id, failed_for, meta.size > 0, taken, limit)
                .await
                .map_err(|e| (format!("checkpoint `{id}`"), e))?;
            Ok(Some((id, outcome, failed_for)))
        })
        .buffer_unordered(ctx.options.concurrency);
    while let Some(result) = results.next().await {
        match result {
            Ok(None) | Ok(Some((_, Outcome::Stale, _))) => {}
            Ok(Some((_, Outcome::Foreign(what), _))) => report.foreign(what),
            Ok(Some((_, Outcome::Kept(bytes), failed_for))) => {
                report.failed_kept += 1;
                report.failed_kept_bytes += bytes;
                report.keep_oldest_failed(failed_for);
            }
            Ok(Some((id, Outcome::Retired(owner, why), _))) => {
                report.retired += 1;
                report.name(id, owner, Action::Retire, why);
            }
            Ok(Some((id, Outcome::Deferred(owner, bytes), failed_for))) => {
                // Kept, and named as skipped: counted as such, so that the summary's count is
                // the list's.
                report.skipped += 1;
                report.failed_kept += 1;
                report.failed_kept_bytes += bytes;
                report.keep_oldest_failed(failed_for);
                let why = "due for retirement, but over this pass's limit (gc.max_deletions); \
                           the next pass retires it";
                report.name(id, owner, Action::Skip, why.to_owned());
            }
            Err((object, e)) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, object, error = %error_chain(&e),
                    "retiring a failed checkpoint failed; the next pass tries again");
                report.failed(Problem::of(object, &e));
            }
        }
    }
    let unvouched = unvouched.load(Ordering::Relaxed);
    if unvouched > 0 {
        report.clock.push(format!(
            "{unvouched} failed checkpoint(s) due for retirement kept: this pass's reading of the \
             store's clock had no earlier one to be compared with (the first pass of a process \
             or a boot, or after doubt), and no retention ends on such a reading; the next pass \
             retires them"
        ));
    }
}

/// Judge (and, unless a dry run, retire) the failed checkpoint `id`, failed for `failed_for`.
async fn one(
    ctx: &PassContext,
    id: &CheckpointId,
    failed_for: Duration,
    removing: bool,
    taken: &AtomicU64,
    limit: Option<u64>,
) -> banklease::Result<Outcome> {
    let bank = &ctx.bank;
    let options = &ctx.options;
    // Never sooner than the late-write window after the failure: the owner's own write of its
    // move (`index.json` as `error`) may still be in flight that long, and landing on a
    // retirement begun it would undo the mark (simulation, Collectors seed 1,009,196).
    let due = options
        .keep_failed_for
        .map(|keep| keep.max(options.late_write_window))
        .filter(|keep| past(failed_for, *keep, options.skew_margin));
    // A failure's (empty) entry not yet due: counted without reading its record.
    if !removing && due.is_none() {
        return Ok(Outcome::Kept(data_bytes(ctx, id).await?));
    }
    let entry = Key::Failed(id.clone()).path(bank);
    let foreign = |why: &str| Outcome::Foreign(format!("`{entry}` ({why})"));
    // A removal's entry holds `removing`, a failure's nothing: anything else is not ours.
    let mut failed_for = failed_for;
    if removing {
        let sent = ctx.clock.now();
        let (ours, stamp) = holds_removing(bank, &entry).await?;
        if !ours {
            return Ok(foreign(
                "not an entry banklease writes: its body is not `removing`",
            ));
        }
        if let Some(stamp) = stamp.filter(|_| ctx.compared) {
            let now = ctx.store_time.at_send(sent, options.read_staleness);
            failed_for = StoreTime::between(stamp, now);
        }
    }
    let record = match checkpoint::read_checkpoint(bank, id).await? {
        Some(r)
            if matches!(r.status, Status::Error | Status::ErrorDeleting)
                || (matches!(r.status, Status::Deleting | Status::Deleted)
                    && r.removal.is_some()) =>
        {
            r
        }
        // Entered by a removal that has yet to mark it (`remove_finished` enters first): left
        // alone for `gc.late_write_window` (at least the store client's retry budget), by which
        // a mark in flight has landed (a slow one, seen by the simulation's operator, outlived
        // the grace); after, nothing was begun and the entry is forgotten.
        Some(r)
            if r.status == Status::Available
                && !past(failed_for, options.late_write_window, options.skew_margin) =>
        {
            return Ok(Outcome::Stale);
        }
        // Every entry banklease makes follows its checkpoint's index.json, which is never
        // deleted (a tombstone stays): without one, the entry is someone else's.
        None => {
            return Ok(foreign(
                "no checkpoint of that id: not an entry banklease wrote",
            ))
        }
        other => {
            tracing::info!(checkpoint_id = %id, status = ?other.map(|r| r.status),
                "a failed checkpoint's entry names no failed checkpoint: forgotten");
            if !options.dry_run {
                forget_failed(bank, id).await?;
                // A removal whose mark was on its way when the record was read: read again
                // (past the staleness a replica may have) and, marked now, put the entry back,
                // so that a pass finishes it should its remover stop. (The remover makes sure
                // of the entry after its mark too: one of the two sees the other.)
                if !options.read_staleness.is_zero() {
                    ctx.clock.sleep(options.read_staleness).await;
                }
                // A read that fails proves nothing: the entry is put back (a pass forgets it
                // again if its removal never began).
                let marked = checkpoint::read_checkpoint(bank, id)
                    .await
                    .map_or(true, |r| r.is_some_and(|r| r.removal.is_some()));
                if marked {
                    banklease::collector::ensure_entry(bank, id).await?;
                }
            }
            return Ok(Outcome::Stale);
        }
    };
    let why = match &record.removal {
        // Begun by a pass or an operator and interrupted: finished now, whatever its age.
        Some(begun) => format!(
            "finishing the removal {} began{}",
            if begun.by == "gc" {
                "a gc pass".to_owned()
            } else {
                format!("operator `{}`", begun.name)
            },
            if begun.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", begun.reason)
            }
        ),
        None => {
            let Some(keep) = due else {
                return Ok(Outcome::Kept(data_bytes(ctx, id).await?));
            };
            let setting = if Some(keep) == options.keep_failed_for {
                "gc.keep_failed_for"
            } else {
                "gc.late_write_window, longer than gc.keep_failed_for"
            };
            format!(
                "failed {} ago, past {setting} ({})",
                duration_words(failed_for),
                duration_words(keep)
            )
        }
    };
    // A slot under the pass's limit, reserved before acting (a dry run counts as a pass would);
    // a tombstone whose entry is all that is left deletes no checkpoint.
    if record.status != Status::Deleted
        && limit.is_some_and(|l| taken.fetch_add(1, Ordering::SeqCst) >= l)
    {
        return Ok(Outcome::Deferred(
            record.owner_id,
            data_bytes(ctx, id).await?,
        ));
    }
    if !options.dry_run {
        let removal = Removal {
            by: "gc".to_owned(),
            name: options.collector.clone(),
            pass: Some(ctx.pass.clone()),
            at: ctx.clock.system_now().into(),
            reason: why.clone(),
            was: record.status,
        };
        let objects = remove_finished(bank, &record, removal).await?;
        tracing::info!(checkpoint_id = %id, owner_id = %record.owner_id, objects, %why, "retired");
    }
    Ok(Outcome::Retired(record.owner_id, why))
}

/// The bytes of checkpoint `id`'s data.
async fn data_bytes(ctx: &PassContext, id: &CheckpointId) -> banklease::Result<u64> {
    let prefix = Prefix::Data(id).path(&ctx.bank);
    ctx.bank
        .store()
        .list(Some(&prefix))
        .map_err(|e| banklease::Error::store("list", &prefix, e))
        .try_fold(0u64, |sum, meta| async move { Ok(sum + meta.size) })
        .await
}
