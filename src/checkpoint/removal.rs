//! Removing a finished checkpoint (feature `collector`): the GC's retirement of failed
//! checkpoints past `gc.keep_failed_for`, and an operator's `checkpoint delete`.
//!
//! A finished checkpoint was decided by its owner (`decisions/<id>`); nothing races to decide
//! it again, so its removal is a sequence of idempotent steps that any remover resumes:
//! a marker its owner's move left goes first, then the checkpoint gets an `index/failed/` entry
//! if it has none (an `available` one, or one failed under a release that did not index), then
//! `index.json` says it is going (`deleting` from `available`, `error-deleting` from `error`,
//! with the [`Removal`]), then its data goes, then `index.json` becomes a `deleted` tombstone
//! that keeps the [`Removal`] (the trail `checkpoint explain` reads), and last the entry goes. A
//! crash anywhere leaves a status that says where it stopped, and the entry that brings the
//! removal back to the next pass, which finishes a begun one at once (a crash between the entry
//! and the first mark begins nothing: a pass forgets that entry once it is older than
//! `gc.late_write_window`, by which a mark in flight has landed; and a remover whose entry a pass
//! forgot before its mark landed puts it back, as does the pass that sees the mark after it).
//!
//! Invariant: **only a finished checkpoint is removed this way, and never on doubt.** A
//! `protecting` checkpoint is refused (it is the collector's, through the decision); the
//! `index.json` must be readable and name the owner it was read with; the decision record stays.

use futures::StreamExt;
use object_store::ObjectStoreExt;

use crate::bank::Bank;
use crate::checkpoint::record::{CheckpointRecord, Removal};
use crate::checkpoint::shared::{rewrite_index, Next};
use crate::checkpoint::status::Status;
use crate::error::{Error, Result};
use crate::paths::{Key, Prefix};
use crate::store::cause::write_failed;

/// What a removal's `index/failed/` entry holds (a failure's is empty).
pub const REMOVING_ENTRY: &[u8] = b"removing";
const REMOVING: &[u8] = REMOVING_ENTRY;

/// Remove the finished checkpoint whose `index.json` reads as `record`, as `removal` says
/// (`removal.was` is set here from `record`). Returns the data objects deleted. Resumes a
/// removal found `deleting`/`error-deleting` (keeping its first [`Removal`]); a `deleted`
/// record with a removal only gets its last steps again. Each write of `index.json` is decided
/// on the record as it is then (another remover's removal is kept, not replaced; a record that
/// changed into one this may not remove stops it).
pub async fn remove_finished(
    bank: &Bank,
    record: &CheckpointRecord,
    mut removal: Removal,
) -> Result<u64> {
    let index = Key::Index(record.id.clone()).path(bank);
    going_of(&index, record)?;
    if record.removal.is_none() {
        removal.was = finished_status(record.status);
    }
    // The owner's move may have stopped before its marker went: it goes first, so that no
    // repair of that move comes back to this checkpoint.
    let marker = Key::marker(&record.owner_id, &record.id).path(bank);
    match bank.store().delete(&marker).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(write_failed(bank.label(), "delete", &marker, e)),
    }
    if record.removal.is_none() {
        // Not empty, unlike a failure's entry: a pass reads the record of such an entry at
        // once, and of an empty one only once its retention is due (one request less per kept
        // failure per pass). A failure's retention restarts should the removal not begin.
        let entry = Key::Failed(record.id.clone()).path(bank);
        if let Err(e) = bank
            .store()
            .put(&entry, object_store::PutPayload::from_static(REMOVING))
            .await
        {
            return Err(write_failed(bank.label(), "put", &entry, e));
        }
    }
    // Mark it going, on the record as it is now: the first removal's trail is kept.
    rewrite_index(bank, &record.id, |now| {
        let now = same_checkpoint(&index, record, now)?;
        if record.removal.is_some() && now.removal.is_none() {
            // A removal is never taken back: this is the record before the one read when the
            // removal began (a replica that lags), and nothing is decided on it.
            return Err(lagging(&index));
        }
        let going = going_of(&index, now)?;
        if now.status == going && now.removal.is_some() {
            return Ok(Next::Leave);
        }
        let mut marked = now.clone();
        marked.status = going;
        marked.removal = Some(now.removal.clone().unwrap_or_else(|| Removal {
            was: finished_status(now.status),
            ..removal.clone()
        }));
        Ok(Next::Write(Box::new(marked)))
    })
    .await?;
    // A pass forgets an entry whose removal had not marked `index.json` within the window (one
    // that never began); a slow removal's mark can land after that. Marked now, the entry is
    // made sure of: a pass then finishes this removal should this process stop.
    ensure_entry(bank, &record.id).await?;
    // The data is listed to be deleted, and a listing may not show what was written just
    // before it: a pass sweeps the data prefix once more, `gc.late_write_window` after this
    // marker (as after a collection), whatever the listing missed.
    let sweep = Key::SweepMarker(record.id.clone()).path(bank);
    bank.store()
        .put(&sweep, object_store::PutPayload::default())
        .await
        .map_err(|e| write_failed(bank.label(), "put", &sweep, e))?;
    let deleted = delete_data(bank, &record.id).await?;
    rewrite_index(bank, &record.id, |now| {
        let now = same_checkpoint(&index, record, now)?;
        match now.status {
            Status::Deleted => Ok(Next::Leave),
            Status::Deleting | Status::ErrorDeleting if now.removal.is_some() => {
                let mut tombstone = now.clone();
                tombstone.status = Status::Deleted;
                Ok(Next::Write(Box::new(tombstone)))
            }
            // The record before this removal's own mark: a replica that lags answered (or,
            // on a store without If-Match, another writer's older version landed). Nothing
            // is decided on it; the removal's entry brings it back to the next pass.
            Status::Available | Status::Error if now.removal.is_none() => Err(lagging(&index)),
            status => Err(Error::Corrupt {
                path: index.clone(),
                reason: format!(
                    "status=`{status}` while its removal was under way: another writer moved \
                     it; left as it is, `banklease checkpoint explain` says what it holds"
                ),
            }),
        }
    })
    .await?;
    forget_failed(bank, &record.id).await?;
    Ok(deleted)
}

/// A removal that read back `index.json` as it was before the removal's mark (a replica that
/// lags; on a store without If-Match, a write of an older version): transient, the removal's
/// entry brings it back to the next pass.
fn lagging(index: &object_store::path::Path) -> Error {
    Error::store(
        "get",
        index,
        object_store::Error::Generic {
            store: "banklease",
            source: "read back the record as it was before this removal marked it (a replica \
                     lags): not finished now, the next gc pass finishes it"
                .into(),
        },
    )
}

/// The finished status a record had before any removal marked it: what a trail says it `was`,
/// even when the record a remover reads is already marked but carries no trail (on a store
/// without If-Match, a read that lags can show a mark whose trail another remover wrote later).
fn finished_status(status: Status) -> Status {
    match status {
        Status::Deleting => Status::Available,
        Status::ErrorDeleting => Status::Error,
        other => other,
    }
}

/// What a removal marks a record of this status: `deleting` from `available`,
/// `error-deleting` from `error`, the same for one being removed, `deleted` for a tombstone
/// that kept its removal; any other is not a finished checkpoint's to remove.
fn going_of(index: &object_store::path::Path, record: &CheckpointRecord) -> Result<Status> {
    match record.status {
        Status::Available => Ok(Status::Deleting),
        Status::Error => Ok(Status::ErrorDeleting),
        Status::Deleting | Status::ErrorDeleting => Ok(record.status),
        Status::Deleted if record.removal.is_some() => Ok(Status::Deleted),
        status => Err(Error::Corrupt {
            path: index.clone(),
            reason: format!(
                "status=`{status}` is not a finished checkpoint's to remove: a protecting \
                 one is the collector's (through its decision), a tombstone is gone already"
            ),
        }),
    }
}

/// The record as it is now, when it is still the one the removal began on (there, and its
/// owner's).
fn same_checkpoint<'a>(
    index: &object_store::path::Path,
    began: &CheckpointRecord,
    now: Option<&'a CheckpointRecord>,
) -> Result<&'a CheckpointRecord> {
    match now {
        Some(now) if now.owner_id == began.owner_id => Ok(now),
        Some(now) => Err(Error::Corrupt {
            path: index.clone(),
            reason: format!(
                "it names owner_id=`{}` now, not `{}` as when its removal began",
                now.owner_id, began.owner_id
            ),
        }),
        None => Err(Error::Corrupt {
            path: index.clone(),
            reason: "it is gone since its removal began".to_owned(),
        }),
    }
}

/// Make sure `index/failed/<id>` is there for a removal that marked `index.json` (put back,
/// as a removal writes it, when a pass forgot it meanwhile).
/// A few attempts (each already retried by the store client): the entry is what brings an
/// interrupted removal back to a pass, so a transient failure is not left to the next run.
pub async fn ensure_entry(bank: &Bank, id: &crate::id::CheckpointId) -> Result<()> {
    let entry = Key::Failed(id.clone()).path(bank);
    let mut last = None;
    for _ in 0..ENSURE_ATTEMPTS {
        let attempt = match bank.store().head(&entry).await {
            Ok(_) => return Ok(()),
            Err(object_store::Error::NotFound { .. }) => bank
                .store()
                .put(&entry, object_store::PutPayload::from_static(REMOVING))
                .await
                .map(drop)
                .map_err(|e| write_failed(bank.label(), "put", &entry, e)),
            Err(e) => Err(Error::store("head", &entry, e)),
        };
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

/// Attempts of [`ensure_entry`].
const ENSURE_ATTEMPTS: usize = 3;

/// Delete `index/failed/<id>` (gone already is fine).
pub async fn forget_failed(bank: &Bank, id: &crate::id::CheckpointId) -> Result<()> {
    let entry = Key::Failed(id.clone()).path(bank);
    match bank.store().delete(&entry).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(write_failed(bank.label(), "delete", &entry, e)),
    }
}

/// Delete every data object of checkpoint `id` (listed, then deleted in bulk); how many.
async fn delete_data(bank: &Bank, id: &crate::id::CheckpointId) -> Result<u64> {
    let prefix = Prefix::Data(id).path(bank);
    let store = bank.store();
    let locations = store
        .list(Some(&prefix))
        .map(|item| item.map(|meta| meta.location))
        .boxed();
    let mut results = store.delete_stream(locations);
    let mut n = 0;
    while let Some(result) = results.next().await {
        match result {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => n += 1,
            Err(e) => return Err(write_failed(bank.label(), "delete", &prefix, e)),
        }
    }
    Ok(n)
}
