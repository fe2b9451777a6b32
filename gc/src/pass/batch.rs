//! Collection in bulk, across checkpoints and owners.
//!
//! A collected checkpoint ends in three steps: its data deleted, its tombstone written, its
//! protecting marker deleted — in that order. The data of many checkpoints is deleted together
//! (one `DeleteObjects` per 1,000 on S3, one Swift bulk delete per 200), then each of those
//! checkpoints gets its tombstone, and their markers are deleted together too. Per collected
//! checkpoint with d data objects that is 5 requests of its own (read `index.json`, the
//! decision, the sweep marker, the data listing, the tombstone) plus ⌈(d + 1) / B⌉ amortised.
//!
//! Invariant: **each checkpoint's order holds, whatever its neighbours in a batch do.** A
//! tombstone is written only after every one of that checkpoint's objects was seen deleted (or
//! already gone) by the bulk deletions that covered it, and a marker is deleted only after its
//! own tombstone was written. A checkpoint with an object whose deletion failed is held back —
//! it keeps its marker, the next pass resumes it from its decision (deleting data again is
//! harmless, a listing that shows nothing is a finished deletion) — and its owner is not
//! cleared; its neighbours go on, unless the error may go away on retry (the store
//! unreachable, a 5xx): that ends the deletion, and the checkpoints it did not reach wait
//! too. (The one tombstone written before any data goes is the fence of a checkpoint without
//! `index.json`, in `collect_one` (collect.rs).)

use std::collections::{HashSet, VecDeque};
use std::mem;

use banklease::error::error_chain;
use banklease::paths::{Key, Prefix};
use banklease::CheckpointId;
use banklease::{Bank, OwnerId};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;

use crate::pass::context::PassContext;
use crate::pass::delete::{delete_markers, delete_prefix, MARKER_BATCH};
use crate::pass::report::{Action, PassReport, Problem};

/// Data objects deleted together (the stores' own requests split it further: 1,000 per
/// `DeleteObjects`, 200 per Swift bulk delete).
pub const DATA_BATCH: usize = 1000;

/// Data objects of one checkpoint held for a batch; a checkpoint with more has its data deleted
/// on its own, as it is listed, so memory stays bounded whatever a checkpoint holds.
pub const LISTED_MAX: usize = 1000;

/// A collected checkpoint (decided, marked for the late sweep) whose data was listed, waiting
/// for that data to be deleted before its tombstone is written.
#[derive(Debug)]
pub(crate) struct Listed {
    pub(crate) owner: OwnerId,
    pub(crate) id: CheckpointId,
    pub(crate) created_at: Option<DateTime<Utc>>,
    pub(crate) data: Vec<Path>,
    /// Why it is collected, for the report.
    pub(crate) reason: String,
}

/// List checkpoint `id`'s data for a batch. More than [`LISTED_MAX`] objects are deleted here
/// and then (nothing left to batch) reported as none.
pub(crate) async fn list_data(bank: &Bank, id: &CheckpointId) -> banklease::Result<Vec<Path>> {
    let prefix = Prefix::Data(id).path(bank);
    let mut listing = bank.store().list(Some(&prefix));
    let mut data = Vec::new();
    while let Some(meta) = listing
        .try_next()
        .await
        .map_err(|e| banklease::Error::store("list", &prefix, e))?
    {
        if data.len() == LISTED_MAX {
            drop(listing);
            delete_prefix(bank, &prefix).await?;
            return Ok(Vec::new());
        }
        data.push(meta.location);
    }
    Ok(data)
}

/// A listed checkpoint in the batch: how many of its objects `Batch::data` still holds, and
/// whether a deletion of one of them failed.
#[derive(Debug)]
struct Waiting {
    listed: Listed,
    left: usize,
    failed: bool,
}

/// The checkpoints of a pass on their way out, and the owners one of whose checkpoints could
/// not be finished (they are not cleared: their leases are not reaped).
///
/// `data` holds the waiting checkpoints' objects in the order of `waiting`, so a deletion of
/// the first `n` objects covers the checkpoints at the front.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    data: VecDeque<Path>,
    waiting: VecDeque<Waiting>,
    tombstoned: Vec<(OwnerId, Path)>,
    failed: HashSet<OwnerId>,
}

impl Batch {
    /// Add a listed checkpoint; deletes full batches of [`DATA_BATCH`] objects as they fill
    /// (and finishes what waits once [`DATA_BATCH`] checkpoints do, data or not).
    pub(crate) async fn add(
        &mut self,
        ctx: &PassContext,
        mut listed: Listed,
        report: &mut PassReport,
    ) {
        let left = listed.data.len();
        self.data.extend(listed.data.drain(..));
        self.waiting.push_back(Waiting {
            listed,
            left,
            failed: false,
        });
        while self.data.len() >= DATA_BATCH || self.waiting.len() >= DATA_BATCH {
            let count = self.data.len().min(DATA_BATCH);
            self.flush_data(count, ctx, report).await;
        }
    }

    /// Finish everything waiting; returns the owners one of whose checkpoints is left for the
    /// next pass.
    pub(crate) async fn finish(
        mut self,
        ctx: &PassContext,
        report: &mut PassReport,
    ) -> HashSet<OwnerId> {
        while !self.waiting.is_empty() {
            let count = self.data.len().min(DATA_BATCH);
            self.flush_data(count, ctx, report).await;
        }
        self.flush_markers(&ctx.bank, report).await;
        self.failed
    }

    /// Delete the first `count` waiting objects; then each checkpoint at the front whose every
    /// object was seen deleted gets its tombstone, and one with an object that was not is held
    /// back (the next pass resumes it) — its neighbours are not.
    async fn flush_data(&mut self, count: usize, ctx: &PassContext, report: &mut PassReport) {
        let (bank, clock) = (&ctx.bank, &ctx.clock);
        let chunk: Vec<Path> = self.data.drain(..count).collect();
        let deleted = delete_paths(bank, &chunk).await;
        let mut paths = chunk.iter();
        for w in self.waiting.iter_mut() {
            if paths.len() == 0 {
                break;
            }
            let n = w.left.min(paths.len());
            for path in paths.by_ref().take(n) {
                w.failed |= !deleted.contains(path);
            }
            w.left -= n;
            if w.left > 0 {
                break;
            }
        }
        let mut ready = Vec::new();
        while self.waiting.front().is_some_and(|w| w.left == 0) {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            if w.failed {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, checkpoint_id = %w.listed.id, owner_id = %w.listed.owner,
                    "deleting a collected checkpoint's data failed; the next pass resumes it");
                report.failed(Problem::new(
                    format!("checkpoint `{}`", w.listed.id),
                    "deleting its data failed (the store's answer is in the log); the next pass \
                     resumes it",
                ));
                self.failed.insert(w.listed.owner);
            } else {
                ready.push(w.listed);
            }
        }
        let written: Vec<(Listed, banklease::Result<()>)> = futures::stream::iter(ready)
            .map(|listed| async move {
                // A tombstone, not a deletion: see `finish_collection` (collect.rs).
                let result = banklease::collector::write_tombstone(
                    bank,
                    &listed.id,
                    &listed.owner,
                    listed.created_at,
                    clock.system_now().into(),
                )
                .await;
                (listed, result)
            })
            .buffer_unordered(ctx.options.concurrency)
            .collect()
            .await;
        for (listed, result) in written {
            match result {
                Ok(()) => {
                    tracing::info!(checkpoint_id = %listed.id, owner_id = %listed.owner, "collected");
                    let marker = Key::marker(&listed.owner, &listed.id).path(bank);
                    // Named once nothing of it is left but its marker (which only counts it).
                    report.name(
                        listed.id,
                        listed.owner.clone(),
                        Action::Collect,
                        listed.reason,
                    );
                    self.tombstoned.push((listed.owner, marker));
                }
                Err(e) => {
                    tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, checkpoint_id = %listed.id, owner_id = %listed.owner,
                        error = %error_chain(&e),
                        "writing a collected checkpoint's tombstone failed; the next pass resumes it");
                    report.failed(Problem::new(
                        format!("checkpoint `{}`", listed.id),
                        format!("writing its tombstone failed: {}", error_chain(&e)),
                    ));
                    self.failed.insert(listed.owner);
                }
            }
        }
        if self.tombstoned.len() >= MARKER_BATCH {
            self.flush_markers(bank, report).await;
        }
    }

    /// Delete the markers of tombstoned checkpoints; each one deleted (or already gone)
    /// completes a collection.
    async fn flush_markers(&mut self, bank: &Bank, report: &mut PassReport) {
        let (owners, mut markers): (Vec<OwnerId>, Vec<Path>) =
            mem::take(&mut self.tombstoned).into_iter().unzip();
        let (done, failed) = delete_markers(
            bank,
            &mut markers,
            "a collected checkpoint's protecting marker",
        )
        .await;
        report.collected += done;
        let any_failed = !failed.is_empty();
        report.failed_all(failed);
        if any_failed {
            // Which ones is not told: none of these owners is cleared this pass.
            self.failed.extend(owners);
        }
    }
}

/// Delete `paths` in bulk; the ones seen deleted (or already gone).
///
/// Results come in the order of `paths` (object_store's contract); a "not found" counts for
/// the requested path only if it names it (some stores name a file path that ends with it).
/// An error that may go away on retry (the store unreachable, a 5xx) ends the deletion: the
/// rest would most likely fail too, one retried request at a time, and the next pass resumes
/// their checkpoints. A definite refusal (an object under retention, a 403) does not: only
/// that object's checkpoint is held back.
async fn delete_paths(bank: &Bank, paths: &[Path]) -> HashSet<Path> {
    let mut done = HashSet::new();
    if paths.is_empty() {
        return done;
    }
    // The stream must own its paths ('static); `paths` stays for matching the results.
    let owned: Vec<Path> = paths.to_vec();
    let locations = futures::stream::iter(owned.into_iter().map(Ok)).boxed();
    let mut results = bank.store().delete_stream(locations);
    let mut requested = paths.iter();
    while let Some(result) = results.next().await {
        let asked = requested.next();
        match result {
            Ok(path) => {
                done.insert(path);
            }
            Err(object_store::Error::NotFound { path, .. }) => {
                if let Some(asked) = asked.filter(|a| path.ends_with(a.as_ref())) {
                    done.insert(asked.clone());
                }
            }
            Err(e) => {
                let e = banklease::Error::store("delete", &asked.cloned().unwrap_or_default(), e);
                tracing::warn!(error = %e, "deleting a collected checkpoint's data object failed");
                if e.is_transient() {
                    break;
                }
            }
        }
    }
    done
}
