//! What `explain` says of a finished checkpoint's removal: the trail a retirement or a
//! `checkpoint delete` left in `index.json`, and when the GC retires a failed checkpoint.

use banklease::checkpoint::{CheckpointRecord, Removal, Status};
use banklease::paths::Key;
use banklease::CheckpointId;
use chrono::{DateTime, Utc};
use object_store::ObjectStoreExt;

use crate::output::to_second;
use crate::{human, Ctx};

/// The removal in words: ``retired by the gc (collector `c`, pass `p`) at T: failed 15d ago,
/// past gc.keep_failed_for (14d); it was error``.
pub(crate) fn removal_line(r: &Removal) -> String {
    let who = match (r.by.as_str(), &r.pass) {
        ("gc", Some(pass)) => format!("retired by the gc (collector `{}`, pass `{pass}`)", r.name),
        ("gc", None) => format!("retired by the gc (collector `{}`)", r.name),
        _ => format!("deleted by operator `{}`", r.name),
    };
    format!(
        "{who} at {}: {}; it was {}",
        to_second(&r.at.to_rfc3339()),
        r.reason,
        r.was
    )
}

/// What comes next for a finished checkpoint whose removal began, if one did.
pub(crate) fn removal_next(record: &CheckpointRecord) -> Option<String> {
    let r = record.removal.as_ref()?;
    Some(match record.status {
        Status::Deleted => "nothing: it was removed (this tombstone keeps the trail)".to_owned(),
        _ if r.by == "gc" => "the next gc pass finishes its removal".to_owned(),
        _ => format!(
            "its removal was interrupted: `banklease checkpoint delete {}` finishes it",
            record.id
        ),
    })
}

/// When the GC retires a failed checkpoint (one request: the entry of `index/failed/`), for a
/// checkpoint that is `error` and not being removed; `None` otherwise.
pub(crate) async fn retire_next(ctx: &Ctx, record: &CheckpointRecord) -> Option<String> {
    let id: &CheckpointId = &record.id;
    let entry = Key::Failed(id.clone()).path(&ctx.bank);
    if let Some(r) = &record.removal {
        // An operator's removal, interrupted: a pass finishes it if it was entered (removals
        // since this release are).
        if record.status == Status::Deleted || r.by == "gc" {
            return None;
        }
        return Some(match ctx.bank.store().head(&entry).await {
            Ok(_) => format!(
                "its removal was interrupted: the next gc pass finishes it, or `banklease \
                 checkpoint delete {id}` now"
            ),
            Err(_) => format!(
                "its removal was interrupted: `banklease checkpoint delete {id}` finishes it"
            ),
        });
    }
    if record.status != Status::Error {
        return None;
    }
    let keep = ctx.config.gc.keep_failed_for;
    Some(match ctx.bank.store().head(&entry).await {
        Ok(meta) => match keep {
            Some(keep) => {
                // As the gc judges it: never sooner than the late-write window.
                let late = ctx.config.gc.late_write_window;
                let (wait, setting) = if late > keep {
                    (late, "gc.late_write_window, longer than gc.keep_failed_for")
                } else {
                    (keep, "gc.keep_failed_for")
                };
                let from: DateTime<Utc> = meta.last_modified + wait + ctx.config.lease.skew_margin;
                format!(
                    "the gc retires it, data first, once it has been failed for {setting} ({}): \
                     at the first pass from {} (store clock)",
                    human(wait),
                    to_second(&from.to_rfc3339())
                )
            }
            None => format!(
                "kept: gc.keep_failed_for is `never`; `banklease checkpoint delete {id}` \
                 removes it"
            ),
        },
        Err(object_store::Error::NotFound { .. }) => format!(
            "kept: it is not in the gc's index of failed checkpoints (it failed under a release \
             that did not index them), so no pass retires it; `banklease checkpoint delete {id}` \
             removes it"
        ),
        Err(e) => format!(
            "unknown: the gc's index entry `{entry}` cannot be read: {}",
            banklease::error::error_chain(&e)
        ),
    })
}
