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

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::bank::Bank;
use crate::error::{Error, Result};
use crate::id::{validate_id, OwnerId};
use crate::lease::OwnerLease;

/// Format version of checkpoint metadata and decision bodies.
pub const CHECKPOINT_FORMAT: u32 = 1;
/// Metadata and decision objects larger than this are refused unread.
pub const MAX_META_BYTES: u64 = 64 * 1024;

/// Checkpoint statuses, as in the original design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Being written by its owner.
    Protecting,
    /// Completed by its owner.
    Available,
    /// Failed; completed by its owner as failed.
    Error,
    /// Being deleted (by the GC, or by a service).
    Deleting,
    /// Deleted.
    Deleted,
    /// Deletion failed.
    ErrorDeleting,
}

impl Status {
    /// The status as written in JSON and on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Protecting => "protecting",
            Status::Available => "available",
            Status::Error => "error",
            Status::Deleting => "deleting",
            Status::Deleted => "deleted",
            Status::ErrorDeleting => "error-deleting",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "protecting" => Status::Protecting,
            "available" => Status::Available,
            "error" => Status::Error,
            "deleting" => Status::Deleting,
            "deleted" => Status::Deleted,
            "error-deleting" => Status::ErrorDeleting,
            _ => {
                return Err(Error::config(format!(
                    "unknown checkpoint status `{s}`; use protecting, available, error, deleting, \
                     deleted or error-deleting"
                )))
            }
        })
    }
}

/// `checkpoints/<id>/index.json`. Unknown fields are ignored on read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// Body format version.
    pub format: u32,
    /// The checkpoint id.
    pub id: String,
    /// The owner that created it.
    pub owner_id: OwnerId,
    /// Its status.
    pub status: Status,
    /// When it was created (owner's wall clock, for humans).
    pub created_at: DateTime<Utc>,
}

/// Who took the decision on a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decider {
    /// The owner completed it (`available` or `error`).
    Owner,
    /// The GC collected it.
    Gc,
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Decider::Owner => "owner",
            Decider::Gc => "gc",
        })
    }
}

/// `decisions/<id>`: the one write that moves a checkpoint out of `protecting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Body format version.
    pub format: u32,
    /// The checkpoint.
    pub checkpoint_id: String,
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
}

/// What [`decide`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Our decision is the one in the bank.
    Won(Decision),
    /// Someone decided first; here is their decision.
    Lost(Decision),
}

/// Check a checkpoint id (same rules as owner ids).
pub fn validate_checkpoint_id(id: &str) -> Result<()> {
    validate_id("checkpoint", id)
}

/// `index/protecting/<owner>/<id>`
pub fn marker_path(bank: &Bank, owner: &OwnerId, id: &str) -> Path {
    bank.path(&["index", "protecting", owner.as_str(), id])
}

/// `index/protecting/` — the prefix the GC lists.
pub fn protecting_prefix(bank: &Bank) -> Path {
    bank.path(&["index", "protecting"])
}

/// `checkpoints/<id>/index.json`
pub fn index_path(bank: &Bank, id: &str) -> Path {
    bank.path(&["checkpoints", id, "index.json"])
}

/// `checkpoints/<id>/data/`
pub fn data_prefix(bank: &Bank, id: &str) -> Path {
    bank.path(&["checkpoints", id, "data"])
}

/// `decisions/<id>`
pub fn decision_path(bank: &Bank, id: &str) -> Path {
    bank.path(&["decisions", id])
}

/// Parse a marker path under [`protecting_prefix`] into (owner, checkpoint id).
/// `None` when it is not of the form `<owner>/<id>` with valid ids.
pub fn parse_marker(bank: &Bank, path: &Path) -> Option<(OwnerId, String)> {
    let prefix = protecting_prefix(bank);
    let mut rest = path.prefix_match(&prefix)?;
    let owner = rest.next()?;
    let id = rest.next()?;
    if rest.next().is_some() {
        return None;
    }
    let owner = OwnerId::parse(owner.as_ref()).ok()?;
    validate_checkpoint_id(id.as_ref()).ok()?;
    Some((owner, id.as_ref().to_owned()))
}

async fn read_json<T: serde::de::DeserializeOwned>(bank: &Bank, path: &Path) -> Result<Option<T>> {
    let got = match bank.store().get(path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", path, e)),
    };
    if got.meta.size > MAX_META_BYTES {
        return Err(Error::Corrupt {
            path: path.to_string(),
            reason: format!("size `{}` exceeds {MAX_META_BYTES} bytes", got.meta.size),
        });
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| Error::store("get", path, e))?;
    #[derive(Deserialize)]
    struct Version {
        format: u32,
    }
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_string(),
        reason,
    };
    let v: Version =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not valid JSON: {e}")))?;
    if v.format > CHECKPOINT_FORMAT {
        return Err(corrupt(format!(
            "format `{}` is newer than this banklease understands (`{CHECKPOINT_FORMAT}`); upgrade \
             banklease",
            v.format
        )));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| corrupt(format!("unexpected content: {e}")))
}

fn to_payload<T: Serialize>(value: &T) -> PutPayload {
    PutPayload::from(serde_json::to_vec(value).expect("records always serialise"))
}

/// Read `checkpoints/<id>/index.json`.
pub async fn read_checkpoint(bank: &Bank, id: &str) -> Result<Option<CheckpointRecord>> {
    validate_checkpoint_id(id)?;
    let record: Option<CheckpointRecord> = read_json(bank, &index_path(bank, id)).await?;
    if let Some(r) = &record {
        if r.id != id {
            return Err(Error::Corrupt {
                path: index_path(bank, id).to_string(),
                reason: format!("it names id=`{}`", r.id),
            });
        }
    }
    Ok(record)
}

/// Read `decisions/<id>`.
pub async fn read_decision(bank: &Bank, id: &str) -> Result<Option<Decision>> {
    validate_checkpoint_id(id)?;
    read_json(bank, &decision_path(bank, id)).await
}

/// Try to take the decision on checkpoint `decision.checkpoint_id` with create-if-absent.
///
/// An ambiguous answer (AlreadyExists after a lost reply) is resolved by reading the decision
/// back and comparing tokens.
pub async fn decide(bank: &Bank, decision: Decision) -> Result<Decided> {
    let path = decision_path(bank, &decision.checkpoint_id);
    let put = bank
        .store()
        .put_opts(
            &path,
            to_payload(&decision),
            PutOptions::from(PutMode::Create),
        )
        .await;
    match put {
        Ok(_) => Ok(Decided::Won(decision)),
        Err(object_store::Error::AlreadyExists { .. }) => {
            match read_decision(bank, &decision.checkpoint_id).await? {
                Some(existing) if existing.token == decision.token => Ok(Decided::Won(existing)),
                Some(existing) => Ok(Decided::Lost(existing)),
                None => Err(Error::Corrupt {
                    path: path.to_string(),
                    reason: "create said it exists, but it cannot be read; retry".to_owned(),
                }),
            }
        }
        Err(e) => Err(Error::store("put", &path, e)),
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
    let created_at = match read_checkpoint(bank, id).await? {
        Some(r) if r.owner_id != decision.owner_id => {
            return Err(Error::Corrupt {
                path: index.to_string(),
                reason: format!(
                    "it names owner_id=`{}` but decision names owner_id=`{}`",
                    r.owner_id, decision.owner_id
                ),
            })
        }
        Some(r) => r.created_at,
        None => decision.decided_at,
    };
    let record = CheckpointRecord {
        format: CHECKPOINT_FORMAT,
        id: id.clone(),
        owner_id: decision.owner_id.clone(),
        status: decision.outcome,
        created_at,
    };
    bank.store()
        .put(&index, to_payload(&record))
        .await
        .map_err(|e| Error::store("put", &index, e))?;
    let marker = marker_path(bank, &decision.owner_id, id);
    match bank.store().delete(&marker).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::store("delete", &marker, e)),
    }
}

/// Overwrite `checkpoints/<id>/index.json` with a `deleted` record: the GC's last word on a
/// collected checkpoint. It stays (like the decision) so that a late create-if-absent of the
/// same id by a paused owner fails instead of resurrecting a marker-less protecting checkpoint.
pub async fn write_tombstone(
    bank: &Bank,
    id: &str,
    owner: &OwnerId,
    created_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<()> {
    let index = index_path(bank, id);
    let record = CheckpointRecord {
        format: CHECKPOINT_FORMAT,
        id: id.to_owned(),
        owner_id: owner.clone(),
        status: Status::Deleted,
        created_at: created_at.unwrap_or(now),
    };
    bank.store()
        .put(&index, to_payload(&record))
        .await
        .map_err(|e| Error::store("put", &index, e))?;
    Ok(())
}

/// Create `checkpoints/<id>/index.json` as a `deleted` tombstone naming `owner`, only if no
/// index.json exists (create-if-absent): the GC's first move on a marker without metadata, so
/// that a create of the same id in flight fails instead of landing under a marker it does not
/// own. Returns false when an index.json already exists.
pub async fn create_tombstone(
    bank: &Bank,
    id: &str,
    owner: &OwnerId,
    now: DateTime<Utc>,
) -> Result<bool> {
    let index = index_path(bank, id);
    let record = CheckpointRecord {
        format: CHECKPOINT_FORMAT,
        id: id.to_owned(),
        owner_id: owner.clone(),
        status: Status::Deleted,
        created_at: now,
    };
    match bank
        .store()
        .put_opts(
            &index,
            to_payload(&record),
            PutOptions::from(PutMode::Create),
        )
        .await
    {
        Ok(_) => Ok(true),
        // Ours (a retried create whose answer was lost) or someone else's: the caller reads.
        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(Error::store("put", &index, e)),
    }
}

/// The error of an owner whose checkpoint `id` the GC collected (a tombstone is there).
fn collected(id: &str) -> Error {
    Error::Fenced {
        checkpoint_id: id.to_owned(),
        decided_by: Decider::Gc.to_string(),
        outcome: Status::Deleted.to_string(),
    }
}

/// A checkpoint being written by the owner holding `lease`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> banklease::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease, clock::SystemClock};
/// use banklease::checkpoint::{Checkpoint, Status};
///
/// let bank = Bank::open("memory://")?;
/// let windows = LeaseWindows::new(Duration::from_secs(1), Duration::from_secs(5), Duration::from_secs(1))?;
/// let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock)).await?;
///
/// let cp = Checkpoint::create(&lease, "cp-0001").await?;
/// cp.put_data("volume-1", b"backup bytes".to_vec().into()).await?;
/// cp.complete(Status::Available).await?;
/// let record = banklease::checkpoint::read_checkpoint(&bank, "cp-0001").await?.unwrap();
/// assert_eq!(record.status, Status::Available);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Checkpoint {
    lease: OwnerLease,
    id: String,
}

impl Checkpoint {
    /// Create checkpoint `id` as `protecting`, owned by `lease`'s owner.
    ///
    /// Checks validity first (zero requests), writes the protecting marker, then `index.json`
    /// with create-if-absent ([`Error::CheckpointExists`] if the id is taken).
    pub async fn create(lease: &OwnerLease, id: &str) -> Result<Self> {
        validate_checkpoint_id(id)?;
        lease.ensure_valid()?;
        let bank = lease.bank();
        let owner = lease.owner_id();
        let marker = marker_path(bank, owner, id);
        bank.store()
            .put(&marker, PutPayload::default())
            .await
            .map_err(|e| Error::store("put", &marker, e))?;
        let record = CheckpointRecord {
            format: CHECKPOINT_FORMAT,
            id: id.to_owned(),
            owner_id: owner.clone(),
            status: Status::Protecting,
            created_at: lease.clock().system_now().into(),
        };
        let index = index_path(bank, id);
        lease.ensure_valid()?;
        match bank
            .store()
            .put_opts(
                &index,
                to_payload(&record),
                PutOptions::from(PutMode::Create),
            )
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                // Ours if a lost reply hid our own success (same owner, protecting, same time).
                match read_checkpoint(bank, id).await {
                    Ok(Some(existing)) if existing == record => {}
                    Ok(Some(existing)) if existing.status == Status::Deleted => {
                        // The GC collected this id while our create was in flight (we were
                        // paused past our lease): fenced, and its marker is not ours to keep.
                        let _ = bank.store().delete(&marker).await;
                        return Err(collected(id));
                    }
                    Ok(Some(existing))
                        if existing.owner_id != *owner || existing.status != Status::Protecting =>
                    {
                        // Proven not our protecting checkpoint: our marker would point the GC
                        // at someone else's id (or at a finished one). Remove it.
                        let _ = bank.store().delete(&marker).await;
                        return Err(Error::CheckpointExists {
                            checkpoint_id: id.to_owned(),
                        });
                    }
                    Ok(Some(_)) => {
                        // Our own protecting checkpoint from an earlier call whose answer was
                        // lost: the marker stays; the caller adopts it.
                        return Err(Error::CheckpointExists {
                            checkpoint_id: id.to_owned(),
                        });
                    }
                    Ok(None) | Err(_) => {
                        // Never delete on doubt: the index.json that exists may be our own
                        // protecting one, and without its marker no pass would ever find it.
                        return Err(Error::CheckpointAmbiguous {
                            checkpoint_id: id.to_owned(),
                        });
                    }
                }
            }
            Err(e) => return Err(Error::store("put", &index, e)),
        }
        Ok(Self {
            lease: lease.clone(),
            id: id.to_owned(),
        })
    }

    /// Take up checkpoint `id` again after an ambiguous [`create`](Self::create)
    /// ([`Error::CheckpointAmbiguous`], or [`Error::CheckpointExists`] for an id this owner
    /// created in an earlier call whose answer was lost).
    ///
    /// Succeeds only if `index.json` names this owner and is still `protecting`; writes the
    /// protecting marker again (idempotent) so the GC can find it. Checks validity first.
    pub async fn adopt(lease: &OwnerLease, id: &str) -> Result<Self> {
        validate_checkpoint_id(id)?;
        lease.ensure_valid()?;
        let bank = lease.bank();
        let owner = lease.owner_id();
        let marker = marker_path(bank, owner, id);
        match read_checkpoint(bank, id).await? {
            Some(r) if r.owner_id == *owner && r.status == Status::Protecting => {}
            None => {
                // Not proof of anything: a lagging replica may not show the index.json that
                // landed. Our marker stays (never delete on doubt).
                return Err(Error::CheckpointAmbiguous {
                    checkpoint_id: id.to_owned(),
                });
            }
            found => {
                // Proven not ours to write (a tombstone, another owner's, finished, or never
                // created): a marker of ours left by the ambiguous create would point the GC at
                // it, so it goes.
                let _ = bank.store().delete(&marker).await;
                return Err(match found {
                    Some(r) if r.status == Status::Deleted => collected(id),
                    _ => Error::CheckpointExists {
                        checkpoint_id: id.to_owned(),
                    },
                });
            }
        }
        lease.ensure_valid()?;
        bank.store()
            .put(&marker, PutPayload::default())
            .await
            .map_err(|e| Error::store("put", &marker, e))?;
        Ok(Self {
            lease: lease.clone(),
            id: id.to_owned(),
        })
    }

    /// The checkpoint id.
    pub fn id(&self) -> &str {
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
        let path = data_prefix(bank, &self.id).join(name);
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
            checkpoint_id: self.id.clone(),
            owner_id: self.lease.owner_id().clone(),
            by: Decider::Owner,
            outcome,
            token: uuid::Uuid::new_v4().simple().to_string(),
            decided_at: self.lease.clock().system_now().into(),
        };
        let decided = match decide(bank, decision).await? {
            Decided::Won(d) => d,
            // Our own earlier completion (e.g. retried after a crash of this call): finish it.
            Decided::Lost(d) if d.by == Decider::Owner && d.owner_id == *self.lease.owner_id() => {
                if d.outcome != outcome {
                    return Err(Error::Fenced {
                        checkpoint_id: self.id.clone(),
                        decided_by: d.by.to_string(),
                        outcome: d.outcome.to_string(),
                    });
                }
                d
            }
            Decided::Lost(d) => {
                return Err(Error::Fenced {
                    checkpoint_id: self.id.clone(),
                    decided_by: d.by.to_string(),
                    outcome: d.outcome.to_string(),
                })
            }
        };
        finish_owner_decision(bank, &decided).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips() {
        for s in [
            Status::Protecting,
            Status::Available,
            Status::Error,
            Status::Deleting,
            Status::Deleted,
            Status::ErrorDeleting,
        ] {
            assert_eq!(s.as_str().parse::<Status>().unwrap(), s);
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert!("zombie".parse::<Status>().is_err());
    }

    #[test]
    fn markers_parse_only_when_well_formed() {
        let bank = Bank::open("memory:///root").unwrap();
        let owner = OwnerId::parse("o1").unwrap();
        let p = marker_path(&bank, &owner, "cp1");
        assert_eq!(p.as_ref(), "root/index/protecting/o1/cp1");
        assert_eq!(parse_marker(&bank, &p), Some((owner, "cp1".to_owned())));
        for bad in [
            "root/index/protecting/o1",
            "root/index/protecting/o1/cp1/extra",
            "root/index/protecting/.x/cp1",
            "root/other/o1/cp1",
        ] {
            assert_eq!(parse_marker(&bank, &Path::from(bad)), None, "{bad}");
        }
    }
}
