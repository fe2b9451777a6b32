//! The lock object: its JSON body, reading it, judging it on the store's clock, and the one
//! conditional write every lock operation is made of.
//!
//! A lock object is never deleted: releasing or expiring a lock writes a *free* record
//! (`holder: null`) that keeps the fencing counter, so the next holder's token is still higher
//! than every earlier one.

use std::time::Duration;

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectMeta, PutMode, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::process::ProcessBinding;
use crate::bank::Bank;
use crate::clock::expiry::{judge_expiry, Expiry};
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::id::validate_id;
use crate::lease::{
    encode, parse_versioned, read_bounded, CondWrite, Found, How, Tokened, Written,
};

/// The lock body format this version writes and understands.
pub const LOCK_FORMAT: u32 = 1;
/// The largest payload a lock carries, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 4 * 1024;
/// Lock objects (and queue tickets) larger than this are refused unread.
pub const MAX_RECORD_BYTES: u64 = 64 * 1024;
/// The longest duration a lock may be held for in one write.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Retries of one write after a transient store error (same token, so a landed write is
/// recognised when it is read back).
const WRITE_ATTEMPTS: usize = 3;

/// The JSON body of a lock object or of a queue ticket. Unknown fields are ignored on read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// Body format version.
    pub format: u32,
    /// `<namespace>/<key>` of the lock, to recognise a misplaced object.
    pub key: String,
    /// The holder (owner) — `None` when the lock is free (released or expired explicitly).
    pub holder: Option<String>,
    /// The holder's payload, readable by anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// How long the lock is held after this write, in milliseconds, counted on the store's clock
    /// from the object's `last_modified`. Zero when free.
    pub duration_ms: u64,
    /// The fencing token of the current (or last) holding. It only ever grows.
    pub fence: u64,
    /// 1 for the acquiring write of a holding, +1 on each heartbeat or extension.
    pub generation: u64,
    /// A random token unique to this write, to recognise it when reading back.
    pub token: String,
    /// Host of the writer, for humans.
    pub host: String,
    /// Process id of the writer, for humans.
    pub pid: u32,
    /// When the write was made, writer's wall clock, for humans only (never used to judge).
    pub written_at: DateTime<Utc>,
    /// The processes the holding lives by (`lock run`, `run --lock`): a waiter on the same
    /// kernel takes the lock once they are proved gone ([`ProcessBinding`]). Absent for a hold
    /// that outlives its process (`lock acquire`) and in records of earlier releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessBinding>,
    /// The processes a holding's work runs in when no early takeover is allowed
    /// (`--no-same-host-handoff`): named for the checks that need none — only
    /// its holder takes or releases it while they live, and a waiter on their host does not take
    /// it past its expiry while COMMAND's tree runs. A key of its own, so that a reader of an
    /// older version, which would take a `process` binding over early, ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<ProcessBinding>,
}

impl LockRecord {
    /// The processes the holding is bound to, for any check (see [`LockRecord::tree`]).
    pub fn bound(&self) -> Option<&ProcessBinding> {
        self.process.as_ref().or(self.tree.as_ref())
    }
}

impl LockRecord {
    /// The declared duration.
    pub fn duration(&self) -> Duration {
        Duration::from_millis(self.duration_ms)
    }

    /// Parse a body read from `path`, checking its format version and bounds.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| Error::Corrupt {
            path: path.clone(),
            reason,
        };
        let record: LockRecord = parse_versioned(path, bytes, "lock", LOCK_FORMAT)?;
        if record.duration() > MAX_DURATION {
            return Err(corrupt(format!(
                "duration_ms=`{}` is out of range",
                record.duration_ms
            )));
        }
        if let Some(holder) = &record.holder {
            validate_id("owner", holder).map_err(|e| corrupt(e.to_string()))?;
            if record.duration_ms == 0 {
                return Err(corrupt("a held lock with duration_ms=`0`".to_owned()));
            }
        }
        Ok(record)
    }

    pub(crate) fn to_payload(&self, path: &Path) -> Result<PutPayload> {
        encode(path, "lock", self)
    }
}

/// Read the record at `path`: `None` when the store says it does not exist.
pub async fn read_record(bank: &Bank, path: &Path) -> Result<Option<(LockRecord, ObjectMeta)>> {
    let Some((bytes, meta)) = read_bounded(bank, path, MAX_RECORD_BYTES).await? else {
        return Ok(None);
    };
    Ok(Some((LockRecord::parse(path, &bytes)?, meta)))
}

/// Where a lock stands on the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// Nobody holds it (a free record).
    Free,
    /// Held for at least `remaining` more (margin deducted in the holder's favour).
    Held {
        /// Time left, conservatively.
        remaining: Duration,
    },
    /// The holding ran out at least `since` ago (margin deducted in the holder's favour).
    Expired {
        /// Time since expiry, conservatively.
        since: Duration,
    },
}

/// Judge a record from what the store said. Pure.
///
/// A held record's duration is judged by [`crate::clock::expiry::judge_expiry`], as owner leases are:
/// the skew margin always errs on the side of the holder.
pub(crate) fn judge(
    record: &LockRecord,
    last_modified: DateTime<Utc>,
    store_now: DateTime<Utc>,
    margin: Duration,
) -> Judged {
    if record.holder.is_none() {
        return Judged::Free;
    }
    match judge_expiry(last_modified, record.duration(), store_now, margin) {
        Expiry::Held { remaining } => Judged::Held { remaining },
        Expiry::Expired { since } => Judged::Expired { since },
    }
}

impl Tokened for LockRecord {
    fn token(&self) -> &str {
        &self.token
    }
}

/// The record at `path` as the conditional write reads it back.
pub(crate) async fn read_found(bank: &Bank, path: &Path) -> Result<Option<Found<LockRecord>>> {
    Ok(read_record(bank, path).await?.map(|(record, meta)| Found {
        record,
        e_tag: meta.e_tag,
        version: meta.version,
    }))
}

/// The conditional write of a lock record (or ticket) at `path`, retried with the same token.
pub(crate) fn record_write<'a>(
    bank: &'a Bank,
    clock: &'a SharedClock,
    path: &'a Path,
) -> CondWrite<'a> {
    CondWrite::new(bank, clock, path).attempts(WRITE_ATTEMPTS)
}

/// Write `record` at `path` with `mode` ([`CondWrite::send`]): ours, or someone else's.
pub(crate) async fn write_record(
    bank: &Bank,
    clock: &SharedClock,
    path: &Path,
    record: &LockRecord,
    mode: PutMode,
) -> Result<Written<LockRecord>> {
    // A condition the store refuses makes the bank forget what it learnt (`CondWrite::send`).
    record_write(bank, clock, path)
        .send(
            record.to_payload(path)?,
            &record.token,
            &How::Put(mode),
            || read_found(bank, path),
        )
        .await
}

/// `PutMode::Update` on the version described by `meta`.
pub(crate) fn update_of(meta: &ObjectMeta) -> PutMode {
    PutMode::Update(UpdateVersion {
        e_tag: meta.e_tag.clone(),
        version: meta.version.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, duration_ms: u64) -> LockRecord {
        LockRecord {
            format: LOCK_FORMAT,
            key: "ns/k".into(),
            holder: holder.map(str::to_owned),
            payload: None,
            duration_ms,
            fence: 1,
            generation: 1,
            token: "t".into(),
            host: "h".into(),
            pid: 1,
            // Absurd on purpose: the writer's wall clock is never used.
            written_at: DateTime::<Utc>::MIN_UTC,
            process: None,
            tree: None,
        }
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn judged_on_store_times_with_margin_in_the_holders_favour() {
        let m = Duration::from_secs(2);
        let r = record(Some("a"), 10_000);
        assert_eq!(
            judge(&r, t(0), t(5), m),
            Judged::Held {
                remaining: Duration::from_secs(3)
            }
        );
        assert_eq!(
            judge(&r, t(0), t(11), m),
            Judged::Held {
                remaining: Duration::ZERO
            }
        );
        // Dead from 12.01 s: the holder's 10 s, 0.1 % of it, the margin.
        assert_eq!(
            judge(&r, t(0), t(13), m),
            Judged::Expired {
                since: Duration::from_millis(990)
            }
        );
        assert_eq!(judge(&record(None, 0), t(0), t(99), m), Judged::Free);
    }

    #[test]
    fn parse_refuses_bad_records() {
        let ok = serde_json::to_vec(&record(Some("a"), 5)).unwrap();
        LockRecord::parse(&Path::from("p"), &ok).unwrap();
        for bad in [
            record(Some("../x"), 5),
            record(Some("a"), 0),
            record(Some("a"), MAX_DURATION.as_millis() as u64 + 1),
        ] {
            let bytes = serde_json::to_vec(&bad).unwrap();
            assert!(matches!(
                LockRecord::parse(&Path::from("p"), &bytes),
                Err(Error::Corrupt { .. })
            ));
        }
        let mut newer = record(None, 0);
        newer.format = LOCK_FORMAT + 1;
        let err =
            LockRecord::parse(&Path::from("p"), &serde_json::to_vec(&newer).unwrap()).unwrap_err();
        assert!(err.to_string().contains("upgrade"), "{err}");
    }
}
