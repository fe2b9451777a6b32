//! Deleting for the tasks of a pass: one object, a bulk of markers, everything under a prefix.
//! "Not found" counts as deleted everywhere: every step of a pass is idempotent.

use banklease::Bank;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::pass::report::Problem;

/// Delete `path`; already gone is fine.
pub(crate) async fn delete_ok_if_missing(bank: &Bank, path: &Path) -> banklease::Result<()> {
    match bank.store().delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(banklease::Error::Store {
            op: "delete",
            path: path.clone(),
            source: e,
        }),
    }
}

/// Markers (protecting or sweep) deleted in one bulk request (`DeleteObjects`, Swift's bulk
/// delete; one request each where the store has none).
pub const MARKER_BATCH: usize = 1000;

/// Delete `markers` (emptied) in bulk: how many were deleted or already gone, and what failed
/// (each warned about as `what`; a later pass finds those again).
pub(crate) async fn delete_markers(
    bank: &Bank,
    markers: &mut Vec<Path>,
    what: &str,
) -> (u64, Vec<Problem>) {
    if markers.is_empty() {
        return (0, Vec::new());
    }
    let locations = futures::stream::iter(std::mem::take(markers).into_iter().map(Ok)).boxed();
    let mut results = bank.store().delete_stream(locations);
    let (mut done, mut failed) = (0, Vec::new());
    while let Some(result) = results.next().await {
        match result {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => done += 1,
            Err(e) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, error = %e, "deleting {what} failed; a later pass finds it again");
                let object = error_path(&e).unwrap_or_else(|| what.to_owned());
                failed.push(Problem::new(object, banklease::error::error_chain(&e)));
            }
        }
    }
    (done, failed)
}

/// The path an object_store error names, when it names one (a bulk delete's answers are not in
/// the order of the request).
pub(crate) fn error_path(e: &object_store::Error) -> Option<String> {
    use object_store::Error as E;
    match e {
        E::NotFound { path, .. }
        | E::AlreadyExists { path, .. }
        | E::Precondition { path, .. }
        | E::NotModified { path, .. }
        | E::PermissionDenied { path, .. }
        | E::Unauthenticated { path, .. } => Some(path.to_string()),
        _ => None,
    }
}

/// Delete every object under `prefix`; returns how many the listing showed. A listing may still
/// show objects already deleted; deleting them again is harmless.
pub(crate) async fn delete_prefix(bank: &Bank, prefix: &Path) -> banklease::Result<u64> {
    let store = bank.store();
    let locations = store.list(Some(prefix)).map_ok(|m| m.location).boxed();
    let mut deleted = store.delete_stream(locations);
    let mut n = 0;
    while let Some(r) = deleted.next().await {
        match r {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => n += 1,
            Err(e) => {
                return Err(banklease::Error::Store {
                    op: "delete",
                    path: prefix.clone(),
                    source: e,
                })
            }
        }
    }
    Ok(n)
}
