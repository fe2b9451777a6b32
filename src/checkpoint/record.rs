//! The records of a checkpoint (`index.json`, the decision), their paths in the bank, and their
//! bounded, versioned reads (see [`crate::checkpoint`] for the objects and the write order).

use std::fmt;
use std::future::Future;
use std::str::FromStr;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::bank::Bank;
use crate::error::{Error, Result};
use crate::id::{validate_id, OwnerId};
use crate::paths::{Key, Prefix};

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
    /// Set when an operator's `checkpoint resolve` rebuilt this record (then `created_at` is
    /// the decision's time: the original was lost with the unreadable bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<Rebuilt>,
    /// The retry budget of the creating owner's store client in milliseconds, as its lease
    /// declares it: a collector that finds the lease gone judges the checkpoint by it. Absent
    /// from records of releases before it, and from records a collector wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget_ms: Option<u64>,
}

/// Who rebuilt a record that could not be read (`banklease checkpoint resolve`), when, and from
/// what: the rebuilt record says so itself, and `checkpoint explain` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rebuilt {
    /// Who ran `checkpoint resolve` (its `--operator`).
    pub operator: String,
    /// When (the operator's wall clock).
    pub at: DateTime<Utc>,
    /// The record it was rebuilt from: `index.json` or `decision`.
    pub from: String,
    /// Where the unreadable bytes it replaced are kept (`_banklease/set-aside/...`).
    pub kept_at: String,
}

impl CheckpointRecord {
    /// The record of `id`, owned by `owner`, in this release's format.
    pub fn new(id: &str, owner: &OwnerId, status: Status, created_at: DateTime<Utc>) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            rebuilt: None,
            retry_budget_ms: None,
            id: id.to_owned(),
            owner_id: owner.clone(),
            status,
            created_at,
        }
    }
}

/// Write `record` as its checkpoint's `index.json`: overwrite, or with `create_only`, only if
/// none exists (false when one does: the caller reads it to learn whose it is).
pub(crate) async fn write_index(
    bank: &Bank,
    record: &CheckpointRecord,
    create_only: bool,
) -> Result<bool> {
    let index = index_path(bank, &record.id);
    let mode = if create_only {
        PutMode::Create
    } else {
        PutMode::Overwrite
    };
    match bank
        .store()
        .put_opts(&index, to_payload(record), PutOptions::from(mode))
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) if create_only => Ok(false),
        Err(e) => Err(Error::store("put", &index, e)),
    }
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
        id: &str,
        owner: &OwnerId,
        decided_at: DateTime<Utc>,
        evidence: Option<Evidence>,
    ) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            rebuilt: None,
            checkpoint_id: id.to_owned(),
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

/// Check a checkpoint id (same rules as owner ids).
pub fn validate_checkpoint_id(id: &str) -> Result<()> {
    Ok(validate_id("checkpoint", id)?)
}

/// `index/protecting/<owner>/<id>`
pub fn marker_path(bank: &Bank, owner: &OwnerId, id: &str) -> Path {
    Key::Marker {
        owner: owner.clone(),
        checkpoint: id.to_owned(),
    }
    .path(bank)
}

/// `index/protecting/` — the prefix the GC lists.
pub fn protecting_prefix(bank: &Bank) -> Path {
    Prefix::Protecting.path(bank)
}

/// `checkpoints/<id>/index.json`
pub fn index_path(bank: &Bank, id: &str) -> Path {
    Key::Index(id.to_owned()).path(bank)
}

/// `checkpoints/<id>/data/`
pub fn data_prefix(bank: &Bank, id: &str) -> Path {
    Prefix::Data(id).path(bank)
}

/// `decisions/<id>`
pub fn decision_path(bank: &Bank, id: &str) -> Path {
    Key::Decision(id.to_owned()).path(bank)
}

/// The body of a protecting marker: what its owner declared, for a collector that finds the
/// marker without its `index.json` and the owner's lease gone (a crash between the two writes).
/// Markers of releases before it are empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerRecord {
    /// The retry budget of the owner's store client in milliseconds, as its lease declares it.
    pub retry_budget_ms: u64,
}

/// Larger markers are not read.
const MAX_MARKER_BYTES: u64 = 1024;

/// The marker body an owner on `bank` writes.
pub(crate) fn marker_body(bank: &Bank) -> PutPayload {
    let record = MarkerRecord {
        retry_budget_ms: crate::config::ceil_ms(bank.retry_budget()),
    };
    PutPayload::from(serde_json::to_vec(&record).expect("a marker record serialises"))
}

/// The retry budget a marker declares: `None` for a marker that is gone, empty (an older
/// release's) or not a record this release reads.
pub async fn read_marker_budget(bank: &Bank, owner: &OwnerId, id: &str) -> Result<Option<u64>> {
    let path = marker_path(bank, owner, id);
    let Some((bytes, _)) =
        crate::lease::record::read_bounded(bank, &path, MAX_MARKER_BYTES).await?
    else {
        return Ok(None);
    };
    Ok(serde_json::from_slice::<MarkerRecord>(&bytes)
        .ok()
        .map(|r| r.retry_budget_ms))
}

/// Parse a marker path under [`protecting_prefix`] into (owner, checkpoint id).
/// `None` when it is not of the form `<owner>/<id>` with valid ids.
pub fn parse_marker(bank: &Bank, path: &Path) -> Option<(OwnerId, String)> {
    match Key::parse(bank, path)? {
        Key::Marker { owner, checkpoint } => Some((owner, checkpoint)),
        _ => None,
    }
}

/// A record stored under its checkpoint's id: `index.json` or the decision.
pub(crate) trait Record: serde::de::DeserializeOwned {
    /// Its field naming the checkpoint, as a refusal names it.
    const ID_FIELD: &'static str;
    /// The checkpoint it names.
    fn checkpoint(&self) -> &str;
}

impl Record for CheckpointRecord {
    const ID_FIELD: &'static str = "id";
    fn checkpoint(&self) -> &str {
        &self.id
    }
}

impl Record for Decision {
    const ID_FIELD: &'static str = "checkpoint_id";
    fn checkpoint(&self) -> &str {
        &self.checkpoint_id
    }
}

/// The one rule by which a checkpoint record reads, for the GC and owners ([`read_checkpoint`],
/// [`read_decision`]) and for `checkpoint resolve`, which replaces only a record that fails it
/// (`crate::repair`): at most [`MAX_META_BYTES`] (`body` is not fetched past that), JSON in a
/// format this release knows, the record's fields, and naming checkpoint `id`, the one it is
/// stored under — another's would make the reader act on that other checkpoint.
pub(crate) async fn parse_record<T: Record>(
    path: &Path,
    id: &str,
    size: u64,
    body: impl Future<Output = Result<Bytes>>,
) -> Result<T> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    if size > MAX_META_BYTES {
        return Err(corrupt(format!(
            "size `{size}` exceeds {MAX_META_BYTES} bytes"
        )));
    }
    let bytes = body.await?;
    let _: Version =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not valid JSON: {e}")))?;
    if let Some(format) = newer_format(&bytes) {
        return Err(corrupt(format!(
            "format `{format}` is newer than this banklease understands (`{CHECKPOINT_FORMAT}`); \
             upgrade banklease"
        )));
    }
    let record: T =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("unexpected content: {e}")))?;
    if record.checkpoint() != id {
        return Err(corrupt(format!(
            "it names {}=`{}`, another checkpoint",
            T::ID_FIELD,
            record.checkpoint()
        )));
    }
    Ok(record)
}

/// Read the record of checkpoint `id` at `path` by [`parse_record`].
async fn read_record<T: Record>(bank: &Bank, id: &str, path: &Path) -> Result<Option<T>> {
    let got = match bank.store().get(path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", path, e)),
    };
    let size = got.meta.size;
    let body = async { got.bytes().await.map_err(|e| Error::store("get", path, e)) };
    parse_record(path, id, size, body).await.map(Some)
}

#[derive(Deserialize)]
struct Version {
    format: u32,
}

/// The format of a record's bytes when it is newer than this release's: a newer release wrote
/// it, and only it may read or replace it.
pub(crate) fn newer_format(bytes: &[u8]) -> Option<u32> {
    serde_json::from_slice::<Version>(bytes)
        .ok()
        .map(|v| v.format)
        .filter(|&f| f > CHECKPOINT_FORMAT)
}

pub(crate) fn to_payload<T: Serialize>(value: &T) -> PutPayload {
    PutPayload::from(serde_json::to_vec(value).expect("records always serialise"))
}

/// Read `checkpoints/<id>/index.json` ([`parse_record`]'s rule).
pub async fn read_checkpoint(bank: &Bank, id: &str) -> Result<Option<CheckpointRecord>> {
    validate_checkpoint_id(id)?;
    read_record(bank, id, &index_path(bank, id)).await
}

/// Read `decisions/<id>` ([`parse_record`]'s rule).
pub async fn read_decision(bank: &Bank, id: &str) -> Result<Option<Decision>> {
    validate_checkpoint_id(id)?;
    read_record(bank, id, &decision_path(bank, id)).await
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

    /// The rule refuses a record naming another checkpoint, whichever record it is, and one
    /// over the size limit without fetching its body.
    #[tokio::test]
    async fn a_record_reads_only_under_its_own_id_and_size() {
        let path = Path::from("x");
        let owner = OwnerId::parse("o1").unwrap();
        let now = Utc::now();
        let index = serde_json::to_vec(&CheckpointRecord::new("cp1", &owner, Status::Error, now));
        let decision = serde_json::to_vec(&Decision::collect("cp1", &owner, now, None));
        let (index, decision) = (Bytes::from(index.unwrap()), Bytes::from(decision.unwrap()));
        let body = |b: &Bytes| std::future::ready(Ok(b.clone()));
        let size = |b: &Bytes| b.len() as u64;
        assert!(
            parse_record::<CheckpointRecord>(&path, "cp1", size(&index), body(&index))
                .await
                .is_ok()
        );
        assert!(
            parse_record::<Decision>(&path, "cp1", size(&decision), body(&decision))
                .await
                .is_ok()
        );
        let other = parse_record::<CheckpointRecord>(&path, "cp2", size(&index), body(&index));
        assert!(
            matches!(other.await, Err(Error::Corrupt { reason, .. }) if reason == "it names id=`cp1`, another checkpoint")
        );
        let other = parse_record::<Decision>(&path, "cp2", size(&decision), body(&decision));
        assert!(
            matches!(other.await, Err(Error::Corrupt { reason, .. }) if reason.starts_with("it names checkpoint_id=`cp1`"))
        );
        let unfetched = async { panic!("a body over the limit is never fetched") };
        let big = parse_record::<Decision>(&path, "cp1", MAX_META_BYTES + 1, unfetched);
        assert!(
            matches!(big.await, Err(Error::Corrupt { reason, .. }) if reason.contains("exceeds"))
        );
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
