//! The decision on a checkpoint and what carries it out: [`decide`] (the one create-if-absent on
//! `decisions/<id>`), [`finish_owner_decision`], and the GC's tombstones. Owners reach these only
//! through [`crate::Checkpoint`]; the collector through `banklease::collector`, which only the
//! `collector` feature (enabled by the GC crate) makes public, so an owner cannot decide or
//! tombstone another owner's checkpoint through the library.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutMode};

use crate::bank::Bank;
use crate::checkpoint::{
    decision_path, index_path, marker_path, read_checkpoint, read_decision, to_payload,
    write_index, CheckpointRecord, Decided, Decision, Status,
};
use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, Result};
use crate::id::OwnerId;
use crate::lease::{CondWrite, Found, How, Tokened, Written};

/// Try to take the decision on checkpoint `decision.checkpoint_id` with create-if-absent.
///
/// An ambiguous answer (AlreadyExists after a lost reply, an error after the create landed) is
/// settled by reading the decision back and comparing tokens ([`CondWrite`]).
pub async fn decide(bank: &Bank, decision: Decision) -> Result<Decided> {
    let path = decision_path(bank, &decision.checkpoint_id);
    // No deadline: the clock only stamps the answer, which a decision does not use.
    let clock: SharedClock = Arc::new(SystemClock);
    let id = &decision.checkpoint_id;
    let read = || async {
        Ok(read_decision(bank, id).await?.map(|record| Found {
            record,
            e_tag: None,
            version: None,
        }))
    };
    let written = CondWrite::new(bank, &clock, &path)
        .send(
            to_payload(&decision),
            &decision.token,
            &How::Put(PutMode::Create),
            read,
        )
        .await?;
    match written {
        Written::Ours(_) => Ok(Decided::Won(decision)),
        Written::Conflict(Some(existing)) => Ok(Decided::Lost(existing.record)),
        Written::Conflict(None) => Err(Error::Corrupt {
            path: path.clone(),
            reason: "create said it exists, but it cannot be read; retry".to_owned(),
        }),
    }
}

impl Tokened for Decision {
    fn token(&self) -> &str {
        &self.token
    }
}

/// Complete an owner's decision: write `index.json` with its outcome, then delete the marker.
/// Idempotent; used by the owner right after winning, and by the GC to finish the move of an
/// owner that crashed in between.
pub async fn finish_owner_decision(bank: &Bank, decision: &Decision) -> Result<()> {
    let id = &decision.checkpoint_id;
    let index = index_path(bank, id);
    // Never overwrite what cannot be read (a newer format, garbage, a store error): the error
    // leaves the marker, so the move is retried, and an operator sees why.
    let existing = read_checkpoint(bank, id).await?;
    let created_at = match &existing {
        Some(r) if r.owner_id != decision.owner_id => {
            return Err(Error::Corrupt {
                path: index.clone(),
                reason: format!(
                    "it names owner_id=`{}` but decision names owner_id=`{}`",
                    r.owner_id, decision.owner_id
                ),
            })
        }
        Some(r) => r.created_at,
        None => decision.decided_at,
    };
    let mut record = CheckpointRecord::new(id, &decision.owner_id, decision.outcome, created_at);
    // An operator's rebuilt record keeps saying so.
    record.rebuilt = existing.and_then(|r| r.rebuilt);
    write_index(bank, &record, false).await?;
    let marker = marker_path(bank, &decision.owner_id, id);
    match bank.store().delete(&marker).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::store("delete", &marker, e)),
    }
}

/// Overwrite `checkpoints/<id>/index.json` with a `deleted` record: the GC's last word on a
/// collected checkpoint. It stays (like the decision) so that a late create-if-absent of the
/// same id by a paused owner fails instead of resurrecting a marker-less protecting checkpoint.
#[cfg_attr(not(feature = "collector"), allow(dead_code))]
pub async fn write_tombstone(
    bank: &Bank,
    id: &str,
    owner: &OwnerId,
    created_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<()> {
    let record = CheckpointRecord::new(id, owner, Status::Deleted, created_at.unwrap_or(now));
    write_index(bank, &record, false).await.map(drop)
}

/// Create `checkpoints/<id>/index.json` as a `deleted` tombstone naming `owner`, only if no
/// index.json exists (create-if-absent): the GC's first move on a marker without metadata, so
/// that a create of the same id in flight fails instead of landing under a marker it does not
/// own. Returns false when an index.json already exists.
#[cfg_attr(not(feature = "collector"), allow(dead_code))]
pub async fn create_tombstone(
    bank: &Bank,
    id: &str,
    owner: &OwnerId,
    now: DateTime<Utc>,
) -> Result<bool> {
    // False: ours (a retried create whose answer was lost) or someone else's; the caller reads.
    write_index(
        bank,
        &CheckpointRecord::new(id, owner, Status::Deleted, now),
        true,
    )
    .await
}
