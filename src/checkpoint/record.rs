//! The records of a checkpoint (`index.json`, the decision), their paths in the bank, and their
//! bounded, versioned reads (see [`crate::checkpoint`] for the objects and the write order).

use std::future::Future;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::bank::Bank;
use crate::checkpoint::status::Status;
use crate::error::{Error, Result};
use crate::id::{CheckpointId, OwnerId};
use crate::paths::Key;

/// Format version of checkpoint metadata and decision bodies.
pub const CHECKPOINT_FORMAT: u32 = 1;
/// Metadata and decision objects larger than this are refused unread.
pub const MAX_META_BYTES: u64 = 64 * 1024;

/// `checkpoints/<id>/index.json`. Unknown fields are ignored on read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// Body format version.
    pub format: u32,
    /// The checkpoint id.
    pub id: CheckpointId,
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
    /// Set on a finished checkpoint that is being (`deleting`, `error-deleting`) or was
    /// (`deleted`) removed after its owner decided it: by the GC's retention of failed
    /// checkpoints, or by an operator's `checkpoint delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal: Option<Removal>,
}

/// Who removed a finished checkpoint, when and why (`checkpoint explain` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    /// `gc` (retention of failed checkpoints) or `operator` (`checkpoint delete`).
    pub by: String,
    /// The collector's owner id, or the operator's name.
    pub name: String,
    /// The GC pass (random per pass), for a retirement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    /// When it began (the remover's wall clock, for humans).
    pub at: DateTime<Utc>,
    /// Why, in words.
    pub reason: String,
    /// The status it had before (`available`, `error`).
    pub was: Status,
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
    pub fn new(
        id: &CheckpointId,
        owner: &OwnerId,
        status: Status,
        created_at: DateTime<Utc>,
    ) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            rebuilt: None,
            retry_budget_ms: None,
            removal: None,
            id: id.clone(),
            owner_id: owner.clone(),
            status,
            created_at,
        }
    }
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
pub async fn read_marker_budget(
    bank: &Bank,
    owner: &OwnerId,
    id: &CheckpointId,
) -> Result<Option<u64>> {
    let path = Key::marker(owner, id).path(bank);
    let Some((bytes, _)) =
        crate::lease::record::read_bounded(bank, &path, MAX_MARKER_BYTES).await?
    else {
        return Ok(None);
    };
    Ok(serde_json::from_slice::<MarkerRecord>(&bytes)
        .ok()
        .map(|r| r.retry_budget_ms))
}

/// Parse a marker path under `index/protecting/` into (owner, checkpoint id).
/// `None` when it is not of the form `<owner>/<id>` with valid ids.
pub fn parse_marker(bank: &Bank, path: &Path) -> Option<(OwnerId, CheckpointId)> {
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
    fn checkpoint(&self) -> &CheckpointId;
}

impl Record for CheckpointRecord {
    const ID_FIELD: &'static str = "id";
    fn checkpoint(&self) -> &CheckpointId {
        &self.id
    }
}

/// The one rule by which a checkpoint record reads, for the GC and owners ([`read_checkpoint`],
/// [`read_decision`]) and for `checkpoint resolve`, which replaces only a record that fails it
/// (`crate::repair`): at most [`MAX_META_BYTES`] (`body` is not fetched past that), JSON in a
/// format this release knows, the record's fields, and naming checkpoint `id`, the one it is
/// stored under — another's would make the reader act on that other checkpoint.
pub(crate) async fn parse_record<T: Record>(
    path: &Path,
    id: &CheckpointId,
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
pub(crate) async fn read_record<T: Record>(
    bank: &Bank,
    id: &CheckpointId,
    path: &Path,
) -> Result<Option<T>> {
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
pub async fn read_checkpoint(bank: &Bank, id: &CheckpointId) -> Result<Option<CheckpointRecord>> {
    read_record(bank, id, &Key::Index(id.clone()).path(bank)).await
}

#[cfg(test)]
mod tests {
    fn cid(id: &str) -> crate::CheckpointId {
        crate::CheckpointId::parse(id).unwrap()
    }

    use super::*;
    use crate::checkpoint::Decision;

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
        let (cp1, cp2) = (cid("cp1"), cid("cp2"));
        let path = Path::from("x");
        let owner = OwnerId::parse("o1").unwrap();
        let now = Utc::now();
        let index = serde_json::to_vec(&CheckpointRecord::new(&cp1, &owner, Status::Error, now));
        let decision = serde_json::to_vec(&Decision::collect(&cp1, &owner, now, None));
        let (index, decision) = (Bytes::from(index.unwrap()), Bytes::from(decision.unwrap()));
        let body = |b: &Bytes| std::future::ready(Ok(b.clone()));
        let size = |b: &Bytes| b.len() as u64;
        assert!(
            parse_record::<CheckpointRecord>(&path, &cp1, size(&index), body(&index))
                .await
                .is_ok()
        );
        assert!(
            parse_record::<Decision>(&path, &cp1, size(&decision), body(&decision))
                .await
                .is_ok()
        );
        let other = parse_record::<CheckpointRecord>(&path, &cp2, size(&index), body(&index));
        assert!(
            matches!(other.await, Err(Error::Corrupt { reason, .. }) if reason == "it names id=`cp1`, another checkpoint")
        );
        let other = parse_record::<Decision>(&path, &cp2, size(&decision), body(&decision));
        assert!(
            matches!(other.await, Err(Error::Corrupt { reason, .. }) if reason.starts_with("it names checkpoint_id=`cp1`"))
        );
        let unfetched = async { panic!("a body over the limit is never fetched") };
        let big = parse_record::<Decision>(&path, &cp1, MAX_META_BYTES + 1, unfetched);
        assert!(
            matches!(big.await, Err(Error::Corrupt { reason, .. }) if reason.contains("exceeds"))
        );
    }

    #[test]
    fn markers_parse_only_when_well_formed() {
        let bank = Bank::open("memory:///root").unwrap();
        let owner = OwnerId::parse("o1").unwrap();
        let p = Key::marker(&owner, &CheckpointId::parse("cp1").unwrap()).path(&bank);
        assert_eq!(p.as_ref(), "root/index/protecting/o1/cp1");
        assert_eq!(parse_marker(&bank, &p), Some((owner, cid("cp1"))));
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
