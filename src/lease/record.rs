//! Records of the lease protocol: the versioned JSON body every lease and lock object carries,
//! its bounded read, and the owner lease's record.
//!
//! A newer format is refused with "upgrade banklease", never guessed at; an oversized object is
//! refused unread; unknown fields are ignored so that newer writers of the same format stay
//! readable.

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt, PutPayload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::bank::Bank;
use crate::error::{Error, Result};
use crate::id::OwnerId;
use crate::process::ProcessStamp;
use crate::windows::MAX_EXPIRE_WINDOW;

/// The lease body format this version writes and understands.
pub const LEASE_FORMAT: u32 = 1;
/// Lease objects larger than this are refused unread.
pub const MAX_LEASE_BYTES: u64 = 64 * 1024;

/// Parse a `what` record (`lease`, `lock`) of at most `format` read from `path`.
pub(crate) fn parse_versioned<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    what: &str,
    format: u32,
) -> Result<T> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    #[derive(Deserialize)]
    struct Version {
        format: u32,
    }
    let version: Version =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a {what} record: {e}")))?;
    if version.format > format {
        return Err(corrupt(format!(
            "{what} format `{}` is newer than this banklease understands (`{format}`); \
             upgrade banklease",
            version.format
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a {what} record: {e}")))
}

/// Encode a `what` record for a write to `path`.
pub(crate) fn encode<T: Serialize>(path: &Path, what: &str, record: &T) -> Result<PutPayload> {
    let bytes = serde_json::to_vec(record).map_err(|e| Error::Corrupt {
        path: path.clone(),
        reason: format!("cannot encode {what} record: {e}"),
    })?;
    Ok(PutPayload::from(bytes))
}

/// Read the object at `path`, refusing one over `max` bytes: `None` when the store says it does
/// not exist (a read, never a listing).
pub(crate) async fn read_bounded(
    bank: &Bank,
    path: &Path,
    max: u64,
) -> Result<Option<(Bytes, ObjectMeta)>> {
    let got = match bank.store().get(path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", path, e)),
    };
    let meta = got.meta.clone();
    let too_large = |size: String| Error::Corrupt {
        path: path.clone(),
        reason: format!("size `{size}` exceeds {max} bytes"),
    };
    if meta.size > max {
        return Err(too_large(meta.size.to_string()));
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| Error::store("get", path, e))?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len().to_string()));
    }
    Ok(Some((bytes, meta)))
}

/// The JSON body of a lease object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Body format version.
    pub format: u32,
    /// The owner.
    pub owner_id: OwnerId,
    /// Host of the owner, for humans.
    pub host: String,
    /// Process id of the owner, for humans.
    pub pid: u32,
    /// The owner's renew window in milliseconds.
    pub renew_window_ms: u64,
    /// The owner's expire window in milliseconds; observers judge expiry with it.
    pub expire_window_ms: u64,
    /// The owner's validity window in milliseconds.
    pub validity_window_ms: u64,
    /// The retry budget of the owner's store client in milliseconds
    /// ([`ClientLimits::budget`](crate::config::ClientLimits::budget)): the longest a write it
    /// sent may take to land. A collector judges this owner's checkpoints by it beside its
    /// windows. Absent from records of releases before it: such an owner is judged by its
    /// store's longest default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget_ms: Option<u64>,
    /// When the lease was acquired, owner's wall clock, for humans only.
    pub acquired_at: DateTime<Utc>,
    /// When this write was made, owner's wall clock, for humans only.
    pub renewed_at: DateTime<Utc>,
    /// 1 for the acquiring write, +1 on each renewal.
    pub generation: u64,
    /// A random token unique to this write, to recognise it when reading back.
    pub token: String,
    /// The owner's process: boot, pid namespace and start time, so that a human on its host
    /// can be told whether it still runs ([`ProcessStamp::here`]). Absent from records of
    /// releases before it, and where `/proc` does not say; readers that do not know it ignore
    /// it (records are read without `deny_unknown_fields`), so the format stays `1`. Never
    /// read by a judgement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessStamp>,
}

impl LeaseRecord {
    /// The expire window the owner declared.
    pub fn expire_window(&self) -> Duration {
        Duration::from_millis(self.expire_window_ms)
    }

    /// Parse a lease body read from `path`, checking its format version and bounds.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let record: LeaseRecord = parse_versioned(path, bytes, "lease", LEASE_FORMAT)?;
        if record.expire_window_ms == 0 || record.expire_window() > MAX_EXPIRE_WINDOW {
            return Err(Error::Corrupt {
                path: path.clone(),
                reason: format!(
                    "expire_window_ms=`{}` is out of range",
                    record.expire_window_ms
                ),
            });
        }
        Ok(record)
    }
}

/// Read the lease object of `owner`: `None` when the store says it does not exist.
pub async fn read_lease(bank: &Bank, owner: &OwnerId) -> Result<Option<(LeaseRecord, ObjectMeta)>> {
    let path = bank.lease_path(owner);
    let record = read_lease_at(bank, &path).await?;
    if let Some((r, _)) = &record {
        if r.owner_id != *owner {
            return Err(Error::Corrupt {
                path: path.clone(),
                reason: format!("it names owner_id=`{}`", r.owner_id),
            });
        }
    }
    Ok(record)
}

/// Read a lease object at any path: `None` when the store says it does not exist.
pub async fn read_lease_at(bank: &Bank, path: &Path) -> Result<Option<(LeaseRecord, ObjectMeta)>> {
    let Some((bytes, meta)) = read_bounded(bank, path, MAX_LEASE_BYTES).await? else {
        return Ok(None);
    };
    Ok(Some((LeaseRecord::parse(path, &bytes)?, meta)))
}

/// A fresh per-write token.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"{"format":1,"owner_id":"o","host":"h","pid":7,"renew_window_ms":1,
        "expire_window_ms":3000,"validity_window_ms":1,"acquired_at":"2026-01-01T00:00:00Z",
        "renewed_at":"2026-01-01T00:00:00Z","generation":1,"token":"t"}"#;

    #[test]
    fn records_without_a_process_stamp_read_and_readers_ignore_fields_they_do_not_know() {
        let path = Path::from("leases/o");
        let old = LeaseRecord::parse(&path, OLD.as_bytes()).unwrap();
        assert_eq!(old.process, None);
        // A record with the stamp reads back whole; one with a field of a newer writer too.
        let stamped = LeaseRecord {
            process: Some(ProcessStamp {
                boot_id: "b".into(),
                pid_ns: 4026531836,
                time_ns: Some(4026531834),
                start_ticks: 42,
            }),
            ..old.clone()
        };
        let bytes = serde_json::to_vec(&stamped).unwrap();
        assert_eq!(LeaseRecord::parse(&path, &bytes).unwrap(), stamped);
        let newer = OLD.replace(r#""token":"t""#, r#""token":"t","someday":{"x":1}"#);
        assert_eq!(LeaseRecord::parse(&path, newer.as_bytes()).unwrap(), old);
        // And an unstamped record is written as before: no `process` key at all.
        assert!(!String::from_utf8(serde_json::to_vec(&old).unwrap())
            .unwrap()
            .contains("process"));
    }
}
