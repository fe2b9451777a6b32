//! Fencing tokens and writes guarded by them.
//!
//! Every acquisition of a lock returns a [`Fence`]: the lock's counter, which only grows (see
//! the [module documentation](super)). A holder that was paused past its lease — a GC pause, a
//! suspended VM — may wake up believing it still holds the lock. [`guarded_put`] makes the store
//! refuse its late writes once a newer holder has written:
//!
//! the guarded object `<path>` carries the highest fencing token it has seen in a sidecar
//! `<path>.fence`. A guarded write (1) reads the object's ETag, (2) reads the sidecar and refuses
//! if it holds a higher token, (3) raises the sidecar to its token (create-if-absent, or If-Match
//! on the ETag read), and (4) writes the object with If-Match on the ETag read in (1) (or
//! create-if-absent). Any write by anyone between (1) and (4) makes (4) fail, and the round
//! starts over — provided every write changes what the condition compares: on a store whose
//! ETag is a hash of the content (S3, versioned buckets too), a rewrite of the same bytes would
//! not, so fenced writes are refused there ([`support::ensure_fencing_supported`]). So once a
//! write with token `n` has landed, a write with a token below `n` can never land: it either
//! read the sidecar after `n` raised it (refused in (2)), or read the object's ETag before
//! `n`'s write (refused in (4)).

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult};
use serde::{Deserialize, Serialize};

use super::record::update_of;
use super::{support, LockName};
use crate::bank::Bank;
use crate::error::{Error, Result};
use crate::lease::new_token;

/// Rounds of the guarded write when the object or its sidecar keep changing.
const GUARD_ROUNDS: usize = 8;
/// Sidecars larger than this are refused unread.
const MAX_SIDECAR_BYTES: u64 = 4 * 1024;

/// A fencing token: the value of a lock's counter for one holding.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// The lock it comes from (`<namespace>/<key>`); tokens of different locks do not compare.
    pub lock: LockName,
    /// The token: greater than every earlier holder's.
    pub value: u64,
}

/// The sidecar of a guarded object.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sidecar {
    format: u32,
    lock: LockName,
    fence: u64,
    token: String,
}

/// `<path>.fence`: where the highest token seen by `path` is kept.
pub fn fence_path(path: &Path) -> Path {
    // On the raw (already encoded) form, so that escaped characters stay escaped once.
    let raw = format!("{}.fence", path.as_ref());
    Path::parse(&raw).unwrap_or_else(|_| Path::from(raw.as_str()))
}

async fn read_sidecar(
    bank: &Bank,
    path: &Path,
) -> Result<Option<(Sidecar, object_store::ObjectMeta)>> {
    let got = match bank.store().get(path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", path, e)),
    };
    let meta = got.meta.clone();
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    if meta.size > MAX_SIDECAR_BYTES {
        return Err(corrupt(format!("size `{}` is too large", meta.size)));
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| Error::store("get", path, e))?;
    let sidecar: Sidecar =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not a fence sidecar: {e}")))?;
    Ok(Some((sidecar, meta)))
}

/// Write `payload` to `path` (a path in `bank`'s store, e.g. from [`Bank::path`]) only if no
/// write with a higher token of the same lock has reached it; fails with
/// [`Error::StaleFence`] otherwise. See the [module documentation](self) for the protocol.
///
/// Needs the same store guarantees as the locks themselves, and ETags that change on every write
/// ([`support::ensure_fencing_supported`]: refused on S3-compatible stores, whose ETag is the
/// content's MD5).
/// A store error leaves the outcome unknown; calling again with the same token is safe.
pub async fn guarded_put(
    bank: &Bank,
    fence: &Fence,
    path: &Path,
    payload: PutPayload,
) -> Result<PutResult> {
    support::ensure_fencing_supported(bank).await?;
    let side = fence_path(path);
    for _ in 0..GUARD_ROUNDS {
        // (1) The object's version, before anything else.
        let object_mode = match bank.store().head(path).await {
            Ok(meta) => update_of(&meta),
            Err(object_store::Error::NotFound { .. }) => PutMode::Create,
            Err(e) => return Err(Error::store("head", path, e)),
        };
        // (2) The highest token seen.
        let current = read_sidecar(bank, &side).await?;
        if let Some((seen, _)) = &current {
            if seen.lock != fence.lock {
                return Err(Error::OtherLock {
                    path: path.clone(),
                    guarded_by: seen.lock.clone(),
                    lock: fence.lock.clone(),
                });
            }
            if seen.fence > fence.value {
                return Err(Error::StaleFence {
                    path: path.clone(),
                    lock: fence.lock.clone(),
                    fence: fence.value,
                    seen: seen.fence,
                });
            }
        }
        // (3) Raise it to ours.
        let raise = match &current {
            None => Some(PutMode::Create),
            Some((seen, meta)) if seen.fence < fence.value => Some(update_of(meta)),
            Some(_) => None,
        };
        if let Some(mode) = raise {
            let body = Sidecar {
                format: 1,
                lock: fence.lock.clone(),
                fence: fence.value,
                token: new_token(),
            };
            let bytes = serde_json::to_vec(&body).map_err(|e| Error::Corrupt {
                path: side.clone(),
                reason: format!("cannot encode fence sidecar: {e}"),
            })?;
            match bank
                .store()
                .put_opts(&side, PutPayload::from(bytes), PutOptions::from(mode))
                .await
            {
                Ok(_) => {}
                // Raced: look again (if it was our own retried write, the next round sees it).
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
                    | object_store::Error::NotFound { .. },
                ) => continue,
                Err(e) => return Err(Error::store("put", &side, e)),
            }
        }
        // (4) The object, on the version read in (1).
        match bank
            .store()
            .put_opts(path, payload.clone(), PutOptions::from(object_mode))
            .await
        {
            Ok(put) => return Ok(put),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => continue,
            Err(e) => return Err(Error::store("put", path, e)),
        }
    }
    Err(Error::store(
        "put",
        path,
        object_store::Error::Precondition {
            path: path.to_string(),
            source: "the guarded object keeps changing; retry".into(),
        },
    ))
}

impl super::Locks {
    /// [`guarded_put`] with the token `token` of `key`, refused with [`Error::StaleFence`] before
    /// anything is written when the lock's counter has already passed `token` (a newer holder
    /// exists, even if it has not written yet). A write that races such a newer holder is still
    /// refused by the guarded write itself once the newer holder has written.
    pub async fn fenced_put(
        &self,
        key: &str,
        token: u64,
        path: &Path,
        payload: PutPayload,
    ) -> Result<PutResult> {
        let fence = Fence {
            lock: self.full_key(key)?,
            value: token,
        };
        // Before the lock is read: its read measures the store for named locks (races of over
        // a hundred writes), which a store refused for fenced writes need not pay.
        support::ensure_fencing_supported(&self.bank).await?;
        let counter = self.inspect(key).await?.map_or(0, |info| info.fence);
        if counter > token {
            return Err(Error::StaleFence {
                path: path.clone(),
                lock: fence.lock,
                fence: token,
                seen: counter,
            });
        }
        if counter < token {
            return Err(Error::UnknownFence {
                lock: fence.lock,
                fence: token,
                counter,
            });
        }
        guarded_put(&self.bank, &fence, path, payload).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_sits_beside_the_object() {
        assert_eq!(
            fence_path(&Path::from("a/b/c.json")).as_ref(),
            "a/b/c.json.fence"
        );
        assert_eq!(fence_path(&Path::from("x")).as_ref(), "x.fence");
        let odd = Path::from_iter(["d", "a/b%c"]);
        assert_eq!(fence_path(&odd).as_ref(), format!("{}.fence", odd.as_ref()));
        assert_eq!(fence_path(&odd).parts().count(), 2);
    }
}
