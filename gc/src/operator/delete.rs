//! An operator deletes a checkpoint by id (`banklease checkpoint delete ID…`, Python's
//! `delete_checkpoint`).
//!
//! - A finished checkpoint (`error`; `available` only when asked; one whose removal was
//!   interrupted) is removed as the GC retires a failed one: `index.json` says it is going, its
//!   data goes, then a tombstone keeps the operator's [`Removal`]
//!   ([`banklease::collector::remove_finished`]).
//! - A `protecting` checkpoint is deleted only when its owner is proved dead, judged as a pass
//!   judges it; then it is collected as a pass collects it — the one create-if-absent decision
//!   first, so that an owner's completion racing it wins or loses whole (never both), then the
//!   late-sweep marker, its data, the tombstone and its marker. An owner that completed first
//!   keeps its checkpoint: the deletion is refused, and can be asked again.
//!
//! Invariant: **`checkpoint delete` never deletes a live owner's checkpoint, an `available`
//! one unasked, or what it cannot read**; every deletion leaves the trail `checkpoint explain`
//! reads (a `Removal` in the tombstone, or the decision's evidence naming the operator).

use banklease::checkpoint::{self, Decided, Decider, Decision, Removal, Status};
use banklease::clock::SharedClock;
use banklease::collector::{decide, finish_owner_decision, remove_finished, write_tombstone};
use banklease::paths::{Key, Prefix};
use banklease::{Bank, CheckpointId, OwnerId};
use object_store::ObjectStoreExt;
use serde::Serialize;

use crate::operator::resolve::dead;
use crate::pass::delete::delete_prefix;
use crate::pass::options::GcOptions;
use crate::pass::sweep::mark_for_sweep;

/// The command named in evidence and refusals.
const DELETE: &str = "checkpoint delete";

/// What to delete, and who asks.
#[derive(Debug, Clone)]
pub struct DeleteRequest {
    /// Delete `available` checkpoints too (completed backups).
    pub available: bool,
    /// Judge and report only; delete nothing.
    pub dry_run: bool,
    /// Who deletes (recorded in the trail).
    pub operator: String,
    /// Why, recorded in the trail (`deleted by checkpoint delete` when not given).
    pub reason: Option<String>,
}

/// What [`delete`] did with one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Deletion {
    /// Deleted (dry run: would be): its data, then its records.
    Deleted {
        /// Its owner.
        owner_id: OwnerId,
        /// Its status before.
        was: Status,
        /// Data objects deleted (0 in a dry run).
        objects: u64,
    },
    /// Already deleted: nothing left to do.
    AlreadyDeleted {
        /// Its owner.
        owner_id: OwnerId,
    },
    /// Refused: nothing of it was deleted.
    Refused {
        /// Why, and what to do.
        reason: String,
    },
}

/// Delete checkpoint `id` as `request` asks (`options` judge its owner, as a pass would).
pub async fn delete(
    bank: &Bank,
    clock: &SharedClock,
    options: &GcOptions,
    id: &CheckpointId,
    request: &DeleteRequest,
) -> banklease::Result<Deletion> {
    let refused = |reason: String| Ok(Deletion::Refused { reason });
    let Some(record) = checkpoint::read_checkpoint(bank, id).await? else {
        return refused(format!(
            "checkpoint `{id}` has no index.json in bank=`{}` (`banklease checkpoint explain \
             {id}` says what is there)",
            bank.label()
        ));
    };
    let owner = record.owner_id.clone();
    let deleted = |was, objects| Deletion::Deleted {
        owner_id: owner.clone(),
        was,
        objects,
    };
    match record.status {
        Status::Protecting => {}
        Status::Available if !request.available && record.removal.is_none() => {
            return refused(format!(
                "checkpoint `{id}` is available (a completed backup); pass --available to \
                 delete it"
            ))
        }
        Status::Deleted if record.removal.is_none() => {
            return Ok(Deletion::AlreadyDeleted { owner_id: owner });
        }
        was => {
            if request.dry_run {
                return Ok(deleted(was, 0));
            }
            let removal = Removal {
                by: "operator".to_owned(),
                name: request.operator.clone(),
                pass: None,
                at: clock.system_now().into(),
                reason: request
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("deleted by {DELETE}")),
                was,
            };
            let was = record.removal.as_ref().map_or(was, |r| r.was);
            if record.status == Status::Deleted {
                // Interrupted after its tombstone: only the last steps are left.
                remove_finished(bank, &record, removal).await?;
                return Ok(Deletion::AlreadyDeleted { owner_id: owner });
            }
            let objects = remove_finished(bank, &record, removal).await?;
            return Ok(deleted(was, objects));
        }
    }
    // Protecting: only a dead owner's, judged and collected as a pass does it, by what the
    // owner declared (its store client's retry budget: `index.json`'s, else its marker's).
    let declared = match record.retry_budget_ms {
        Some(ms) => Some(ms),
        None => checkpoint::read_marker_budget(bank, &owner, id).await?,
    };
    let evidence = match dead(
        bank,
        clock,
        options,
        &owner,
        &request.operator,
        DELETE,
        declared,
    )
    .await?
    {
        Ok(evidence) => evidence,
        Err(why) => return refused(format!("checkpoint `{id}` is protecting and {why}")),
    };
    if request.dry_run {
        return Ok(deleted(Status::Protecting, 0));
    }
    let decision = Decision::collect(id, &owner, clock.system_now().into(), Some(evidence));
    match decide(bank, decision).await? {
        Decided::Won(_) => {}
        Decided::Lost(d) if d.by == Decider::Gc => {} // a pass, or an earlier delete: resume
        Decided::Lost(d) => {
            // Its owner completed it first: its outcome stands.
            finish_owner_decision(bank, &d).await?;
            return refused(format!(
                "checkpoint `{id}` was completed by its owner as {} just before; it was not \
                 deleted (run again to delete it as {})",
                d.outcome, d.outcome
            ));
        }
    }
    // As a pass finishes a collection: a write still in flight is swept later.
    let late = crate::pass::declared::OwnerRules::of(bank).late_window(declared, options);
    mark_for_sweep(bank, id, late).await?;
    let objects = delete_prefix(bank, &Prefix::Data(id).path(bank)).await?;
    write_tombstone(
        bank,
        id,
        &owner,
        Some(record.created_at),
        clock.system_now().into(),
    )
    .await?;
    let marker = Key::marker(&owner, id).path(bank);
    match bank.store().delete(&marker).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(banklease::Error::store("delete", &marker, e)),
    }
    Ok(deleted(Status::Protecting, objects))
}
