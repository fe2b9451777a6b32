//! Checkpoints, their index objects, and the single decision that moves one out of `protecting`.
//!
//! Objects of one checkpoint `<id>` owned by `<owner>`:
//!
//! ```text
//! index/protecting/<owner>/<id>   marker: present while the checkpoint may be protecting
//! checkpoints/<id>/index.json     id, owner_id, status, created_at, format
//! checkpoints/<id>/data/<name>    data objects
//! decisions/<id>                  who moved it out of protecting, and to what (create-if-absent)
//! ```
//!
//! Write order, and what a crash between two writes leaves:
//!
//! - **create**: marker, then `index.json`. A crash after the marker leaves a marker without
//!   metadata: the GC collects it once the owner is dead. The reverse order could leave a
//!   protecting checkpoint that no listing of the protecting index ever finds.
//! - **complete** (owner) and **collect** (GC): first win `decisions/<id>` with create-if-absent;
//!   only the winner acts. The GC leaves `index.json` as a `deleted` tombstone, so a paused
//!   owner's late create of the same id fails rather than resurrect it without a marker. The owner then writes `index.json` with the outcome and deletes the
//!   marker. A crash after the decision leaves the marker, so the GC sees the checkpoint again,
//!   finds the owner's decision and finishes the owner's move instead of collecting
//!   ([`finish_owner_decision`]).
//!
//! Invariant: **completion versus collection is decided once**, by one create-if-absent on
//! `decisions/<id>`; on a store whose create-if-absent is atomic at most one side wins. The
//! decision object stays as a tombstone so that a paused owner that wakes up later is fenced.
//! Where create-if-absent is not atomic under races (Swift), exclusion rests on timing: the
//! owner decides only while `check_validity` holds, the GC only after expiry + margin + grace,
//! and the configuration's rule (c) makes sure the owner's write (which its client may resend
//! for its whole retry budget) has landed by then.
//!
//! A create answered AlreadyExists keeps its marker unless the read-back *proves* the id
//! another owner's, a tombstone or a finished checkpoint: on doubt it fails with
//! [`Error::CheckpointAmbiguous`] and the owner takes it up with [`Checkpoint::adopt`], since
//! deleting the marker of a `protecting` checkpoint that is ours would hide it from every pass.
//!
//! - `record`: the records (`index.json`, the decision), their paths and bounded reads;
//! - [`Checkpoint`] (here): the owner's side — create (marker, then `index.json`), write data
//!   while the lease is valid, complete through the one decision;
//! - `decision`: the one create-if-absent on `decisions/<id>`, and what carries it out;
//! - `upload`: [`DataUpload`](crate::DataUpload), a data object written in parts;
//! - `repair` (feature `collector`): what an operator's `checkpoint resolve` replaces;
//! - `removal` (feature `collector`): a finished checkpoint removed (retention, `checkpoint
//!   delete`).

pub(crate) mod decision;
mod record;
#[cfg(feature = "collector")]
pub(crate) mod removal;
#[cfg(feature = "collector")]
pub(crate) mod repair;
mod shared;
pub(crate) mod status;
pub(crate) mod upload;

pub use decision::{read_decision, Decided, Decision, Evidence};
pub use record::*;
pub(crate) use shared::create_index;
pub use shared::{rewrite_index, Next, Rewritten};
pub use status::{Decider, Status, UnknownStatus};

use object_store::{ObjectStoreExt, PutPayload};

use self::decision::{decide, finish_owner_decision};
use crate::error::{Error, Result};
use crate::id::{validate_id, CheckpointId};
use crate::lease::OwnerLease;
use crate::paths::{Key, Prefix};

/// The error of an owner whose checkpoint `id` the GC collected (a tombstone is there).
fn collected(id: &CheckpointId) -> Error {
    Error::Fenced {
        checkpoint_id: id.clone(),
        decided_by: Decider::Gc,
        outcome: Status::Deleted,
    }
}

/// A checkpoint being written by the owner holding `lease`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> banklease::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease, clock::SystemClock};
/// use banklease::{Checkpoint, Status};
///
/// let bank = Bank::open("memory://")?;
/// let windows = LeaseWindows::new(Duration::from_secs(1), Duration::from_secs(5), Duration::from_secs(1))?;
/// let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock)).await?;
///
/// let id: banklease::CheckpointId = "cp-0001".parse()?;
/// let cp = Checkpoint::create(&lease, &id).await?;
/// cp.put_data("volume-1", b"backup bytes".to_vec().into()).await?;
/// cp.complete(Status::Available).await?;
/// let record = banklease::checkpoint::read_checkpoint(&bank, &id).await?.unwrap();
/// assert_eq!(record.status, Status::Available);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Checkpoint {
    lease: OwnerLease,
    id: CheckpointId,
}

impl Checkpoint {
    /// Create checkpoint `id` as `protecting`, owned by `lease`'s owner.
    ///
    /// Checks validity first (zero requests), writes the protecting marker, then `index.json`
    /// with create-if-absent ([`Error::CheckpointExists`] if the id is taken).
    pub async fn create(lease: &OwnerLease, id: &CheckpointId) -> Result<Self> {
        let cid = id.clone();
        lease.ensure_valid()?;
        let bank = lease.bank();
        let owner = lease.owner_id();
        let marker = Key::marker(owner, id).path(bank);
        bank.store()
            .put(&marker, marker_body(bank))
            .await
            .map_err(|e| Error::store("put", &marker, e))?;
        let now = lease.clock().system_now().into();
        let record = CheckpointRecord {
            retry_budget_ms: Some(crate::config::ceil_ms(bank.retry_budget())),
            removal: None,
            ..CheckpointRecord::new(id, owner, Status::Protecting, now)
        };
        lease.ensure_valid()?;
        match create_index(bank, &record).await {
            Ok(true) => {}
            Ok(false) => {
                // Ours if a lost reply hid our own success (same owner, protecting, same time).
                match read_checkpoint(bank, id).await {
                    Ok(Some(existing)) if existing == record => {}
                    Ok(Some(existing)) if existing.status == Status::Deleted => {
                        // The GC collected this id while our create was in flight (we were
                        // paused past our lease): fenced, and its marker is not ours to keep.
                        let _ = bank.store().delete(&marker).await;
                        return Err(collected(&cid));
                    }
                    Ok(Some(existing))
                        if existing.owner_id != *owner || existing.status != Status::Protecting =>
                    {
                        // Proven not our protecting checkpoint: our marker would point the GC
                        // at someone else's id (or at a finished one). Remove it.
                        let _ = bank.store().delete(&marker).await;
                        return Err(Error::CheckpointExists {
                            checkpoint_id: cid.clone(),
                        });
                    }
                    Ok(Some(_)) => {
                        // Our own protecting checkpoint from an earlier call whose answer was
                        // lost: the marker stays; the caller adopts it.
                        return Err(Error::CheckpointExists {
                            checkpoint_id: cid.clone(),
                        });
                    }
                    Ok(None) | Err(_) => {
                        // Never delete on doubt: the index.json that exists may be our own
                        // protecting one, and without its marker no pass would ever find it.
                        return Err(Error::CheckpointAmbiguous {
                            checkpoint_id: cid.clone(),
                        });
                    }
                }
            }
            Err(e) => return Err(e),
        }
        Ok(Self {
            lease: lease.clone(),
            id: cid,
        })
    }

    /// Take up checkpoint `id` again after an ambiguous [`create`](Self::create)
    /// ([`Error::CheckpointAmbiguous`], or [`Error::CheckpointExists`] for an id this owner
    /// created in an earlier call whose answer was lost).
    ///
    /// Succeeds only if `index.json` names this owner and is still `protecting`; writes the
    /// protecting marker again (idempotent) so the GC can find it. Checks validity first.
    pub async fn adopt(lease: &OwnerLease, id: &CheckpointId) -> Result<Self> {
        let cid = id.clone();
        lease.ensure_valid()?;
        let bank = lease.bank();
        let owner = lease.owner_id();
        let marker = Key::marker(owner, id).path(bank);
        match read_checkpoint(bank, id).await? {
            Some(r) if r.owner_id == *owner && r.status == Status::Protecting => {}
            None => {
                // Not proof of anything: a lagging replica may not show the index.json that
                // landed. Our marker stays (never delete on doubt).
                return Err(Error::CheckpointAmbiguous {
                    checkpoint_id: cid.clone(),
                });
            }
            found => {
                // Proven not ours to write (a tombstone, another owner's, finished, or never
                // created): a marker of ours left by the ambiguous create would point the GC at
                // it, so it goes.
                let _ = bank.store().delete(&marker).await;
                return Err(match found {
                    Some(r) if r.status == Status::Deleted => collected(&cid),
                    _ => Error::CheckpointExists {
                        checkpoint_id: cid.clone(),
                    },
                });
            }
        }
        lease.ensure_valid()?;
        bank.store()
            .put(&marker, marker_body(bank))
            .await
            .map_err(|e| Error::store("put", &marker, e))?;
        Ok(Self {
            lease: lease.clone(),
            id: cid,
        })
    }

    /// The checkpoint id.
    pub fn id(&self) -> &CheckpointId {
        &self.id
    }

    /// The lease this checkpoint is written under.
    pub fn lease(&self) -> &OwnerLease {
        &self.lease
    }

    /// Write one data object `checkpoints/<id>/data/<name>`. Checks validity first.
    pub async fn put_data(&self, name: &str, data: PutPayload) -> Result<()> {
        validate_id("data object", name)?;
        self.lease.ensure_valid()?;
        let bank = self.lease.bank();
        let path = Prefix::Data(&self.id).path(bank).join(name);
        bank.store()
            .put(&path, data)
            .await
            .map_err(|e| Error::store("put", &path, e))?;
        Ok(())
    }

    /// Move the checkpoint out of `protecting` to `outcome` (`Available` or `Error`).
    ///
    /// Checks validity first, then takes the decision. If the GC took it first, fails with
    /// [`Error::Fenced`]: the checkpoint must not be reported as available.
    pub async fn complete(&self, outcome: Status) -> Result<()> {
        if !matches!(outcome, Status::Available | Status::Error) {
            return Err(Error::config(format!(
                "an owner completes a checkpoint as available or error, not `{outcome}`"
            )));
        }
        self.lease.ensure_valid()?;
        let bank = self.lease.bank();
        let decision = Decision {
            format: CHECKPOINT_FORMAT,
            rebuilt: None,
            checkpoint_id: self.id.clone(),
            owner_id: self.lease.owner_id().clone(),
            by: Decider::Owner,
            outcome,
            token: uuid::Uuid::new_v4().simple().to_string(),
            decided_at: self.lease.clock().system_now().into(),
            evidence: None,
        };
        let decided = match decide(bank, decision).await? {
            Decided::Won(d) => d,
            // Our own earlier completion (e.g. retried after a crash of this call): finish it.
            Decided::Lost(d) if d.by == Decider::Owner && d.owner_id == *self.lease.owner_id() => {
                if d.outcome != outcome {
                    return Err(Error::Fenced {
                        checkpoint_id: self.id.clone(),
                        decided_by: d.by,
                        outcome: d.outcome,
                    });
                }
                d
            }
            Decided::Lost(d) => {
                return Err(Error::Fenced {
                    checkpoint_id: self.id.clone(),
                    decided_by: d.by,
                    outcome: d.outcome,
                })
            }
        };
        finish_owner_decision(bank, &decided).await
    }
}
