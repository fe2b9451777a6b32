//! The late-data sweep: a collected checkpoint's data prefix is listed and emptied once more,
//! after any write still in flight at the collection has landed.
//!
//! Invariant: **no late write outlives the sweep.** An owner checks its validity before each
//! `put_data`, but a put sent just before `valid_until` (or retried by its HTTP client) can land
//! after the GC deleted the data prefix — and nothing would list that prefix again. Before
//! deleting any data, the GC writes `index/sweep/<id>`; a pass deletes everything under
//! `checkpoints/<id>/data/` once that marker is older than `gc.late_write_window` plus the skew
//! margin (store clock), counts what it found (`late_data_swept`), and only then removes the
//! marker. The marker is written before the data is deleted, so a crash anywhere leaves either
//! the protecting marker (the collection resumes and rewrites it) or the sweep marker. A sweep
//! deletes only under a checkpoint whose decision is the GC's.
//!
//! Not covered: an owner stopped (SIGSTOP, a VM freeze) *between* its validity check and
//! sending a `put_data`, for longer than the window, sends its write afterwards. Such an object
//! is garbage under a tombstoned checkpoint — storage, not safety — and is not swept.

use banklease::checkpoint::{read_decision, Decider};
use banklease::error::error_chain;
use banklease::paths::{Key, Prefix};
use banklease::Bank;
use banklease::CheckpointId;
use std::time::Duration;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

use crate::pass::context::PassContext;
use crate::pass::delete::{delete_markers, delete_prefix, MARKER_BATCH};
use crate::pass::plan::past;
use crate::pass::report::Problem;

/// `index/sweep/` — collected checkpoints whose data is swept once more.
pub fn sweep_prefix(bank: &Bank) -> Path {
    Prefix::Sweep.path(bank)
}

/// `index/sweep/<id>`
pub fn sweep_path(bank: &Bank, id: &CheckpointId) -> Path {
    Key::SweepMarker(id.to_owned()).path(bank)
}

/// The body of a sweep marker: how long after it the sweep runs, the late-write window of the
/// checkpoint's owner (its declared retry budget's) when that is longer than a collector's own.
/// Markers of releases before it are empty: each collector then uses its own window.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SweepRecord {
    late_write_window_ms: u64,
}

/// Larger sweep markers are refused unread.
const MAX_SWEEP_RECORD_BYTES: u64 = 1024;

/// Write (or rewrite: a later stamp only delays the sweep) the sweep marker of `id`, to be swept
/// `late_write_window` (or a collector's own window, if longer) after it.
pub async fn mark_for_sweep(
    bank: &Bank,
    id: &CheckpointId,
    late_write_window: Duration,
) -> banklease::Result<()> {
    let path = sweep_path(bank, id);
    let body = serde_json::to_vec(&SweepRecord {
        late_write_window_ms: banklease::config::ceil_ms(late_write_window),
    })
    .expect("a sweep record serialises");
    bank.store()
        .put(&path, PutPayload::from(body))
        .await
        .map_err(|e| banklease::Error::store("put", &path, e))?;
    Ok(())
}

/// The late-write window a sweep marker asks for (`None`: an empty marker, or one that cannot
/// be read as a record, which is then judged by the collector's own window and named).
async fn marker_window(bank: &Bank, marker: &Path) -> banklease::Result<Option<Duration>> {
    let got = match bank.store().get(marker).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(banklease::Error::store("get", marker, e)),
    };
    if got.meta.size > MAX_SWEEP_RECORD_BYTES {
        return Err(banklease::Error::Corrupt {
            path: marker.clone(),
            reason: format!(
                "size `{}` exceeds {MAX_SWEEP_RECORD_BYTES} bytes",
                got.meta.size
            ),
        });
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| banklease::Error::store("get", marker, e))?;
    if bytes.is_empty() {
        return Ok(None);
    }
    let record: SweepRecord =
        serde_json::from_slice(&bytes).map_err(|e| banklease::Error::Corrupt {
            path: marker.clone(),
            reason: format!("not a sweep record: {e}"),
        })?;
    Ok(Some(Duration::from_millis(record.late_write_window_ms)))
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Checkpoints whose data was swept (their sweep marker removed).
    pub checkpoints: u64,
    /// Data objects found and deleted: late writes.
    pub objects: u64,
    /// Sweep markers not yet due.
    pub waiting: u64,
    /// What failed (each leaves its marker for the next pass).
    pub problems: Vec<Problem>,
    /// Markers banklease did not write (a body that is no sweep record; no decision and no
    /// checkpoint of that id): kept, named, and no error.
    pub foreign: Vec<String>,
}

/// Sweep every checkpoint whose sweep marker is older than `late_write_window` plus the margin
/// on the store clock (judged at the instant the listing was sent, stamps raised to the floor).
/// A task of the pass: run only when the pass acts (not in a dry run).
pub(crate) async fn sweep_due(ctx: &PassContext) -> Swept {
    let bank = &ctx.bank;
    let mut swept = Swept::default();
    let prefix = sweep_prefix(bank);
    let sent = ctx.clock.now();
    let mut due = Vec::new();
    let mut listing = bank.store().list(Some(&prefix));
    while let Some(item) = listing.next().await {
        match item {
            Ok(meta) => {
                let Some(Key::SweepMarker(id)) = Key::parse(bank, &meta.location) else {
                    continue;
                };
                let elapsed = ctx.elapsed_since(meta.last_modified, sent);
                if past(
                    elapsed,
                    ctx.options.late_write_window,
                    ctx.options.skew_margin,
                ) {
                    due.push((id, elapsed, meta.size > 0));
                } else {
                    swept.waiting += 1;
                }
            }
            Err(e) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, error = %error_chain(&e), "listing the sweep markers failed");
                swept
                    .problems
                    .push(Problem::new(format!("listing `{prefix}`"), error_chain(&e)));
                break;
            }
        }
    }
    drop(listing);
    let mut results = futures::stream::iter(due)
        .map(|(id, elapsed, has_body)| async move {
            let marker = sweep_path(bank, &id);
            if has_body {
                // The owner's own window, when its declared budget needs longer than ours.
                match marker_window(bank, &marker).await {
                    Ok(Some(window)) if !past(elapsed, window, ctx.options.skew_margin) => {
                        return Ok(Swept1::Waiting)
                    }
                    Ok(_) => {}
                    // Not a record banklease writes: someone else's, kept and named.
                    Err(banklease::Error::Corrupt { reason, .. }) => {
                        return Ok(Swept1::Foreign(format!(
                            "`{marker}` (not a sweep marker banklease writes: {reason})"
                        )))
                    }
                    Err(e) => return Err((id, e)),
                }
            }
            sweep_one(bank, &id, marker).await.map_err(|e| (id, e))
        })
        .buffer_unordered(ctx.options.concurrency.max(1));
    let mut done: Vec<Path> = Vec::new();
    while let Some(result) = results.next().await {
        match result {
            Ok(Swept1::Nothing) => {}
            Ok(Swept1::Foreign(what)) => swept.foreign.push(what),
            Ok(Swept1::Waiting) => swept.waiting += 1,
            Ok(Swept1::Done(found, marker)) => {
                swept.objects += found;
                done.push(marker);
                if done.len() >= MARKER_BATCH {
                    delete_sweep_markers(bank, &mut done, &mut swept).await;
                }
            }
            Err((id, e)) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, checkpoint_id = %id, error = %error_chain(&e),
                    "sweeping late data failed; next pass retries");
                swept.problems.push(Problem::new(
                    format!("checkpoint `{id}`"),
                    format!("sweeping its late data failed: {}", error_chain(&e)),
                ));
            }
        }
    }
    drop(results);
    delete_sweep_markers(bank, &mut done, &mut swept).await;
    swept
}

/// What became of one due sweep marker.
enum Swept1 {
    /// Nothing to sweep (an owner's decision: the marker was removed).
    Nothing,
    /// Its owner's window is not over yet.
    Waiting,
    /// Not a marker banklease wrote: kept.
    Foreign(String),
    /// Swept: the late data found, and the marker to remove.
    Done(u64, Path),
}

/// Sweep one checkpoint's late data under its GC decision; `None` when there was nothing to
/// sweep (an owner's decision: the marker was removed).
async fn sweep_one(bank: &Bank, id: &CheckpointId, marker: Path) -> banklease::Result<Swept1> {
    // Never delete on doubt: only the data of a checkpoint the GC decided to collect, or that a
    // removal (`checkpoint delete`, a retirement) took, whatever its decision.
    let removed = banklease::checkpoint::read_checkpoint(bank, id)
        .await?
        .is_some_and(|r| r.removal.is_some());
    match read_decision(bank, id).await? {
        _ if removed => {}
        Some(d) if d.by == Decider::Gc => {}
        Some(_) => {
            tracing::warn!(checkpoint_id = %id,
                "sweep marker beside an owner's decision: data left alone, marker removed");
            match bank.store().delete(&marker).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => return Ok(Swept1::Nothing),
                Err(e) => return Err(banklease::Error::store("delete", &marker, e)),
            }
        }
        // Every marker banklease writes follows its checkpoint's index.json (which stays): a
        // marker with neither a decision nor a checkpoint is someone else's.
        None if banklease::checkpoint::read_checkpoint(bank, id)
            .await?
            .is_none() =>
        {
            return Ok(Swept1::Foreign(format!(
                "`{marker}` (not a sweep marker banklease writes: no checkpoint of that id)"
            )));
        }
        None => {
            // A lagging replica may not show the decision yet: doubt, so nothing is
            // deleted and the marker stays for a later pass.
            tracing::warn!(checkpoint_id = %id,
                "sweep marker without a readable gc decision: left for a later pass");
            return Err(banklease::Error::Corrupt {
                path: marker.clone(),
                reason: "no decision reads back for this sweep marker; left for a later \
                         pass"
                    .to_owned(),
            });
        }
    }
    let found = delete_prefix(bank, &Prefix::Data(id).path(bank)).await?;
    if found > 0 {
        tracing::warn!(checkpoint_id = %id, found,
            "late data under a collected checkpoint: deleted");
    }
    // A removal's marker also finishes the removal, should its remover have stopped and its
    // `index/failed/` entry be lost: the record becomes the tombstone it was going to be.
    if removed {
        finish_removal(bank, id).await?;
    }
    // The marker goes in bulk with the others', after every sweep of the batch.
    Ok(Swept1::Done(found, marker))
}

/// Make a removed checkpoint's record the `deleted` tombstone that keeps its removal (on the
/// version read; one already a tombstone, or no longer a removal's, is left), and forget its
/// `index/failed/` entry.
async fn finish_removal(bank: &Bank, id: &CheckpointId) -> banklease::Result<()> {
    use banklease::checkpoint::{rewrite_index, Next, Status};
    rewrite_index(bank, id, |now| {
        Ok(match now {
            Some(r)
                if r.removal.is_some()
                    && matches!(r.status, Status::Deleting | Status::ErrorDeleting) =>
            {
                let mut tombstone = r.clone();
                tombstone.status = Status::Deleted;
                Next::Write(Box::new(tombstone))
            }
            _ => Next::Leave,
        })
    })
    .await?;
    banklease::collector::forget_failed(bank, id).await
}

/// End the sweep of every checkpoint in `markers` by deleting its sweep marker.
async fn delete_sweep_markers(bank: &Bank, markers: &mut Vec<Path>, swept: &mut Swept) {
    let (done, failed) = delete_markers(bank, markers, "a sweep marker").await;
    swept.checkpoints += done;
    swept.problems.extend(failed);
}
