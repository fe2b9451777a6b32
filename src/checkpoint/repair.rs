//! An operator's repair of a checkpoint record that cannot be read (`banklease checkpoint
//! resolve`): the unreadable bytes are kept under `_banklease/set-aside/`, then the record is
//! replaced, only if it is still the version that was read and kept.
//!
//! Invariant: **a repair never loses what it replaces, and never replaces what it did not
//! read.** The bytes are copied aside (create-if-absent, a fresh name) before anything is
//! written; a record in a newer format than this release knows, or one that reads by now (by
//! the rule the GC reads by, `checkpoint::parse_record`), is refused, never replaced; the replacement is conditional on the version read (If-Match where
//! the store enforces it; on Swift, which has none, a HEAD just before must show the same ETag,
//! which leaves the window between that HEAD and the PUT to another operator's repair). Which record may replace it, and
//! under what fencing, is the caller's (the GC crate's `resolve`).

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::bank::Bank;
use crate::capability::Condition;
use crate::checkpoint::{newer_format, parse_record, to_payload, CheckpointRecord, Decision};
use crate::error::{Error, Result};
use crate::id::CheckpointId;
use crate::paths::Key;

/// The largest record a repair reads and keeps: far above any record banklease writes
/// ([`MAX_META_BYTES`](crate::checkpoint::MAX_META_BYTES)); anything larger is not one.
pub const MAX_SET_ASIDE_BYTES: u64 = 1024 * 1024;

/// An unreadable record as read, and where its bytes were kept.
#[derive(Debug, Clone)]
pub struct SetAside {
    /// The record's path.
    pub path: Path,
    /// Where its bytes are kept (`_banklease/set-aside/<name>`).
    pub kept_at: Path,
    e_tag: Option<String>,
    version: Option<String>,
}

/// Whether the record at `key` may be replaced by a repair, without writing anything: it
/// exists, is not larger than [`MAX_SET_ASIDE_BYTES`], was not written by a newer release, and
/// still cannot be read by the GC's rule (`checkpoint::parse_record`; a record that reads now
/// was repaired meanwhile). An [`Error::Corrupt`] names the reason otherwise.
pub async fn check_replaceable(bank: &Bank, key: &Key) -> Result<()> {
    read_unreadable(bank, key).await.map(drop)
}

/// The unreadable record at `key`: its bytes and version, or why it may not be replaced.
async fn read_unreadable(
    bank: &Bank,
    key: &Key,
) -> Result<(Bytes, Option<String>, Option<String>)> {
    let path = key.path(bank);
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    let got = match bank.store().get(&path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(corrupt(
                "it is gone since it was read; run again".to_owned(),
            ))
        }
        Err(e) => return Err(Error::store("get", &path, e)),
    };
    if got.meta.size > MAX_SET_ASIDE_BYTES {
        return Err(corrupt(format!(
            "size `{}` is larger than any record banklease writes; look at it and remove it by \
             hand",
            got.meta.size
        )));
    }
    let (e_tag, version, size) = (
        got.meta.e_tag.clone(),
        got.meta.version.clone(),
        got.meta.size,
    );
    let bytes: Bytes = got
        .bytes()
        .await
        .map_err(|e| Error::store("get", &path, e))?;
    if let Some(format) = newer_format(&bytes) {
        return Err(corrupt(format!(
            "format `{format}` is newer than this banklease understands; a newer release wrote \
             it and reads it: upgrade banklease, never replace it"
        )));
    }
    // Readable exactly as the GC reads it: what the GC refuses, and only that, is replaced.
    let body = || std::future::ready(Ok(bytes.clone()));
    let reads = match key {
        Key::Decision(id) => parse_record::<Decision>(&path, id, size, body())
            .await
            .is_ok(),
        Key::Index(id) => parse_record::<CheckpointRecord>(&path, id, size, body())
            .await
            .is_ok(),
        _ => false,
    };
    if reads {
        return Err(corrupt(
            "it reads now (repaired meanwhile?); run again".to_owned(),
        ));
    }
    Ok((bytes, e_tag, version))
}

/// Keep the unreadable record at `key` aside (see [`check_replaceable`] for what is refused):
/// copy its bytes to `_banklease/set-aside/<UTC time>-<random>.<record>.<checkpoint>`.
pub async fn set_aside(
    bank: &Bank,
    key: Key,
    checkpoint: &CheckpointId,
    now: DateTime<Utc>,
) -> Result<SetAside> {
    let path = key.path(bank);
    let (bytes, e_tag, version) = read_unreadable(bank, &key).await?;
    let record = match &key {
        Key::Decision(_) => "decision",
        Key::Index(_) => "index",
        _ => "record",
    };
    let name = format!(
        "{}-{}.{record}.{checkpoint}",
        now.format("%Y%m%dT%H%M%SZ"),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let kept_at = Key::SetAside(name).path(bank);
    bank.store()
        .put_opts(
            &kept_at,
            PutPayload::from(bytes),
            PutOptions::from(PutMode::Create),
        )
        .await
        .map_err(|e| Error::store("put", &kept_at, e))?;
    Ok(SetAside {
        path,
        kept_at,
        e_tag,
        version,
    })
}

/// Replace the decision kept aside by `decision`.
pub async fn replace_decision(bank: &Bank, kept: &SetAside, decision: &Decision) -> Result<()> {
    replace(bank, kept, to_payload(decision)).await
}

/// Replace the `index.json` kept aside by `record`.
pub async fn replace_index(bank: &Bank, kept: &SetAside, record: &CheckpointRecord) -> Result<()> {
    replace(bank, kept, to_payload(record)).await
}

async fn replace(bank: &Bank, kept: &SetAside, payload: PutPayload) -> Result<()> {
    let path = &kept.path;
    let changed = || Error::Corrupt {
        path: (*path).clone(),
        reason: format!(
            "it changed since it was read and kept at `{}`; run again",
            kept.kept_at
        ),
    };
    let mode = if bank.capabilities().await?.conditional_overwrite == Condition::Enforced {
        PutMode::Update(UpdateVersion {
            e_tag: kept.e_tag.clone(),
            version: kept.version.clone(),
        })
    } else {
        // No If-Match here (Swift): nothing but another operator's repair writes a record
        // that exists and cannot be read, so a HEAD just before is the check; a write landing
        // between that HEAD and this PUT is the one window left (ARCHITECTURE.md).
        let now = bank
            .store()
            .head(path)
            .await
            .map_err(|e| Error::store("head", path, e))?;
        if now.e_tag != kept.e_tag {
            return Err(changed());
        }
        PutMode::Overwrite
    };
    match bank
        .store()
        .put_opts(path, payload, PutOptions::from(mode))
        .await
    {
        Ok(_) => Ok(()),
        Err(object_store::Error::Precondition { .. }) => Err(changed()),
        Err(e) => Err(Error::store("put", path, e)),
    }
}
