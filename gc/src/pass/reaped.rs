//! Reap records: `gc/reaped/<owner>`, why a collector deleted an owner's lease.
//!
//! A collection's evidence lives in the decision it takes; a reap deletes the very object its
//! evidence is about, so the evidence is written beside it first — the lease as read, the
//! store's time it was judged at, margin, grace, collector and pass — and `banklease lease show`
//! prints it for an owner whose lease is gone. A reap whose record cannot be written is not
//! done (the next pass tries again): no lease disappears without its reason.
//!
//! Records are kept for [`REAP_RECORD_MAX_AGE`] on the store's clock, then forgotten by a pass.

use std::time::{Duration, Instant};

use banklease::checkpoint::Evidence;
use banklease::clock::StoreTime;
use banklease::paths::{Key, Prefix};
use banklease::{Bank, LeaseRecord, OwnerId};
use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::pass::context::PassContext;
use crate::pass::plan::past;
use crate::pass::report::Problem;

/// How long a reap record is kept, on the store's clock.
pub const REAP_RECORD_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// This release's reap record format.
pub const REAP_RECORD_FORMAT: u32 = 1;

/// The JSON body of `gc/reaped/<owner>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReapRecord {
    /// Body format version.
    pub format: u32,
    /// The owner whose lease was deleted.
    pub owner_id: OwnerId,
    /// The collector's wall clock when it decided to reap, for humans.
    pub reaped_at: DateTime<Utc>,
    /// The lease as the collector read it last (host, pid, windows, generation).
    pub lease: Option<LeaseRecord>,
    /// What the owner was judged dead on, as a collection's decision records it.
    pub evidence: Evidence,
}

/// Write `record` (overwriting an earlier reap's of the same owner, whose lease was re-made).
pub(crate) async fn write(bank: &Bank, record: &ReapRecord) -> banklease::Result<()> {
    let path = Key::GcReaped(record.owner_id.clone()).path(bank);
    let body = serde_json::to_vec(record).expect("records always serialise");
    bank.store()
        .put(&path, PutPayload::from(body))
        .await
        .map(drop)
        .map_err(|e| banklease::Error::store("put", &path, e))
}

/// The reap record of `owner`, if a collector reaped its lease in the last
/// [`REAP_RECORD_MAX_AGE`].
pub async fn read(bank: &Bank, owner: &OwnerId) -> banklease::Result<Option<ReapRecord>> {
    let path = Key::GcReaped(owner.clone()).path(bank);
    let got = match bank.store().get(&path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(banklease::Error::store("get", &path, e)),
    };
    let corrupt = |reason: String| banklease::Error::Corrupt {
        path: path.clone(),
        reason,
    };
    if got.meta.size > banklease::checkpoint::MAX_META_BYTES {
        return Err(corrupt(format!("size `{}` is too large", got.meta.size)));
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| banklease::Error::store("get", &path, e))?;
    let record: ReapRecord =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not a reap record: {e}")))?;
    if record.format > REAP_RECORD_FORMAT {
        return Err(corrupt(format!(
            "format `{}` is newer than this banklease understands; upgrade banklease",
            record.format
        )));
    }
    Ok(Some(record))
}

/// Forget reap records older than [`REAP_RECORD_MAX_AGE`] on the store's clock; returns what
/// failed, and what is under `gc/reaped/` that banklease did not write (kept). Forgetting one
/// early loses only its explanation, never a lease or a checkpoint. Only what reads back as a
/// reap record of the owner its key names is removed (read once it is due, not before).
pub(crate) async fn forget(ctx: &PassContext, sent: Instant) -> (Vec<Problem>, Vec<String>) {
    use futures::StreamExt;
    let now = ctx.store_time.at_send(sent, Duration::ZERO);
    let bank = &ctx.bank;
    let prefix = Prefix::GcReaped.path(bank);
    let (mut problems, mut foreign, mut due) = (Vec::new(), Vec::new(), Vec::new());
    let mut listing = bank.store().list(Some(&prefix));
    while let Some(item) = listing.next().await {
        match item {
            Ok(meta) => match Key::parse(bank, &meta.location) {
                Some(Key::GcReaped(owner)) => {
                    if past(
                        StoreTime::between(meta.last_modified, now),
                        REAP_RECORD_MAX_AGE,
                        Duration::ZERO,
                    ) {
                        due.push((owner, meta.location));
                    }
                }
                _ => foreign.push(format!(
                    "`{}` (not a reap record banklease writes)",
                    meta.location
                )),
            },
            Err(e) => {
                problems.push(Problem::new(
                    format!("listing `{prefix}`"),
                    banklease::error::error_chain(&e),
                ));
                break;
            }
        }
    }
    drop(listing);
    for (owner, path) in due {
        match read(bank, &owner).await {
            Ok(Some(record)) if record.owner_id == owner => {}
            Ok(None) => continue,
            Ok(Some(_)) | Err(banklease::Error::Corrupt { .. }) => {
                foreign.push(format!("`{path}` (not a reap record banklease writes)"));
                continue;
            }
            Err(e) => {
                problems.push(Problem::of(format!("reap record `{path}`"), &e));
                continue;
            }
        }
        match bank.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => problems.push(Problem::new(
                format!("reap record `{path}`"),
                banklease::error::error_chain(&e),
            )),
        }
    }
    (problems, foreign)
}
