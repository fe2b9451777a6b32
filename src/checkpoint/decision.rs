//! The decision on a checkpoint and what carries it out: [`decide`] (the one create-if-absent on
//! `decisions/<id>`), [`finish_owner_decision`], and the GC's tombstones. Owners reach these only
//! through [`crate::Checkpoint`]; the collector through `banklease::collector`, which only the
//! `collector` feature (enabled by the GC crate) makes public, so an owner cannot decide or
//! tombstone another owner's checkpoint through the library.
//!
//! Never delete on doubt: [`finish_owner_decision`] writes over an `index.json` only once it
//! could read it (a newer format, garbage or a store error leaves the marker, so the move is
//! retried and an operator sees why). The GC's tombstone of an id without `index.json` is a
//! fence: a paused owner's late create of `index.json` then fails (`Error::Fenced`) instead of
//! landing as a protecting checkpoint without a marker, which no pass would ever find.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutMode};
use serde::{Deserialize, Serialize};

use crate::bank::Bank;
use crate::checkpoint::record::{read_record, Record, CHECKPOINT_FORMAT};
use crate::checkpoint::status::{Decider, Status};
use crate::checkpoint::{create_index, rewrite_index, to_payload, CheckpointRecord, Next, Rebuilt};
use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, Result};
use crate::id::{CheckpointId, OwnerId};
use crate::lease::{CondWrite, Found, How, Tokened, Written};
use crate::paths::Key;

/// `decisions/<id>`: the one write that moves a checkpoint out of `protecting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Body format version.
    pub format: u32,
    /// The checkpoint.
    pub checkpoint_id: CheckpointId,
    /// The checkpoint's owner.
    pub owner_id: OwnerId,
    /// Who decided.
    pub by: Decider,
    /// `available` or `error` (owner), `deleted` (GC).
    pub outcome: Status,
    /// Unique per attempt, to recognise our own write when an answer was lost.
    pub token: String,
    /// Wall clock of the decider, for humans.
    pub decided_at: DateTime<Utc>,
    /// Why the GC decided (its decisions only; `banklease checkpoint explain` prints it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// Set when an operator's `checkpoint resolve` rebuilt this decision from `index.json`
    /// (then `decided_at` is when it was rebuilt: the original was lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<Rebuilt>,
}

impl Decision {
    /// The GC's decision to collect checkpoint `id` of `owner`, on `evidence`, with a fresh
    /// token (the collector's pass, or an operator's `checkpoint resolve`).
    pub fn collect(
        id: &CheckpointId,
        owner: &OwnerId,
        decided_at: DateTime<Utc>,
        evidence: Option<Evidence>,
    ) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            rebuilt: None,
            checkpoint_id: id.clone(),
            owner_id: owner.clone(),
            by: Decider::Gc,
            outcome: Status::Deleted,
            token: uuid::Uuid::new_v4().simple().to_string(),
            decided_at,
            evidence,
        }
    }
}

/// What a GC collection was decided on, recorded in its decision: the owner's lease as read,
/// the store's time it was judged at, the rules applied, and who decided in which pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// `expired` (the lease ran out) or `missing` (no lease object).
    pub lease: String,
    /// The lease's `last_modified` as read (raised to any clock-step floor), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_stamp: Option<DateTime<Utc>>,
    /// The expire window the lease declared, in milliseconds, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_window_ms: Option<u64>,
    /// The store's time the lease was judged at (the instant its read was sent).
    pub judged_at: DateTime<Utc>,
    /// How long the owner had been dead then, in milliseconds, the margin in its favour: since
    /// its lease's end (expired), or since the lease was first seen missing (missing).
    pub dead_for_ms: u64,
    /// The skew margin applied, in milliseconds.
    pub skew_margin_ms: u64,
    /// The grace the owner had to be dead for, in milliseconds.
    pub grace_ms: u64,
    /// The collector that decided (the GC lease's owner id of a daemon or `banklease gc`).
    pub collector: String,
    /// The host the collector ran on, for humans (absent from older releases' decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_host: Option<String>,
    /// The collector's process id, for humans (absent from older releases' decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector_pid: Option<u32>,
    /// The pass that decided (random per pass).
    pub pass: String,
}

/// What [`decide`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Our decision is the one in the bank.
    Won(Decision),
    /// Someone decided first; here is their decision.
    Lost(Decision),
}

impl Record for Decision {
    const ID_FIELD: &'static str = "checkpoint_id";
    fn checkpoint(&self) -> &CheckpointId {
        &self.checkpoint_id
    }
}

/// Try to take the decision on checkpoint `decision.checkpoint_id` with create-if-absent.
///
/// An ambiguous answer (AlreadyExists after a lost reply, an error after the create landed) is
/// settled by reading the decision back and comparing tokens ([`CondWrite`]).
pub async fn decide(bank: &Bank, decision: Decision) -> Result<Decided> {
    let path = Key::Decision(decision.checkpoint_id.clone()).path(bank);
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
    let index = Key::Index(id.clone()).path(bank);
    // Decided on the record as it is at the write (rewrite_index): a removal that lands
    // between a read and the write is read again and kept. Never overwrite what cannot be
    // read (a newer format, garbage, a store error): the error leaves the marker, so the move
    // is retried, and an operator sees why.
    let rewritten = rewrite_index(bank, id, |existing| {
        let created_at = match existing {
            Some(r) if r.owner_id != decision.owner_id => {
                return Err(Error::Corrupt {
                    path: index.clone(),
                    reason: format!(
                        "it names owner_id=`{}` but decision names owner_id=`{}`",
                        r.owner_id, decision.owner_id
                    ),
                })
            }
            // Removed (or being removed) after the owner finished it: only the owner's marker
            // is left of its move. Rewriting the outcome would bring back an `available`
            // record whose data is gone, and drop the removal's trail.
            Some(r) if r.removal.is_some() => return Ok(Next::Leave),
            Some(r) if r.status == decision.outcome => return Ok(Next::Leave),
            Some(r) => r.created_at,
            None => decision.decided_at,
        };
        let mut record =
            CheckpointRecord::new(id, &decision.owner_id, decision.outcome, created_at);
        // An operator's rebuilt record keeps saying so.
        record.rebuilt = existing.and_then(|r| r.rebuilt.clone());
        Ok(Next::Write(Box::new(record)))
    })
    .await?;
    let removed = rewritten
        .record
        .as_ref()
        .is_some_and(|r| r.removal.is_some());
    // A failed checkpoint is indexed before its marker goes (a crash in between leaves the
    // marker, and the GC's repair comes back here): the entry's stamp, on the store's clock,
    // starts `gc.keep_failed_for`, and the GC lists only these to retire failed checkpoints.
    // Created only if absent: a removal's entry (`removing`) is never emptied, and a failure's
    // retention keeps its first stamp.
    if decision.outcome == Status::Error && !removed {
        let failed = Key::Failed(id.clone()).path(bank);
        match bank
            .store()
            .put_opts(
                &failed,
                object_store::PutPayload::default(),
                object_store::PutOptions::from(object_store::PutMode::Create),
            )
            .await
        {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(Error::store("put", &failed, e)),
        }
    }
    let marker = Key::marker(&decision.owner_id, id).path(bank);
    match bank.store().delete(&marker).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::store("delete", &marker, e)),
    }
}

/// Make `checkpoints/<id>/index.json` a `deleted` record: the GC's last word on a collected
/// checkpoint. It stays (like the decision) so that a late create-if-absent of the same id by a
/// paused owner fails instead of resurrecting a marker-less protecting checkpoint. Written on
/// the version it reads (a tombstone there already is left, with its removal's trail).
#[cfg_attr(not(feature = "collector"), allow(dead_code))]
pub async fn write_tombstone(
    bank: &Bank,
    id: &CheckpointId,
    owner: &OwnerId,
    created_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<()> {
    rewrite_index(bank, id, |existing| {
        Ok(match existing {
            Some(r) if r.status == Status::Deleted => Next::Leave,
            Some(r) => {
                let mut record =
                    CheckpointRecord::new(id, owner, Status::Deleted, created_at.unwrap_or(now));
                record.removal = r.removal.clone();
                Next::Write(Box::new(record))
            }
            None => Next::Write(Box::new(CheckpointRecord::new(
                id,
                owner,
                Status::Deleted,
                created_at.unwrap_or(now),
            ))),
        })
    })
    .await
    .map(drop)
}

/// Create `checkpoints/<id>/index.json` as a `deleted` tombstone naming `owner`, only if no
/// index.json exists (create-if-absent): the GC's first move on a marker without metadata, so
/// that a create of the same id in flight fails instead of landing under a marker it does not
/// own. Returns false when an index.json already exists.
#[cfg_attr(not(feature = "collector"), allow(dead_code))]
pub async fn create_tombstone(
    bank: &Bank,
    id: &CheckpointId,
    owner: &OwnerId,
    now: DateTime<Utc>,
) -> Result<bool> {
    // False: ours (a retried create whose answer was lost) or someone else's; the caller reads.
    create_index(
        bank,
        &CheckpointRecord::new(id, owner, Status::Deleted, now),
    )
    .await
}

/// Read `decisions/<id>` ([`parse_record`](crate::checkpoint::record::parse_record)'s rule).
pub async fn read_decision(bank: &Bank, id: &CheckpointId) -> Result<Option<Decision>> {
    read_record(bank, id, &Key::Decision(id.clone()).path(bank)).await
}
