//! What a store really enforces, measured rather than assumed.
//!
//! A condition a store silently ignores is worse than one it refuses: the caller believes it is
//! protected when it is not. So before a bank is used for leasing, [`Capabilities::probe`] writes a
//! probe key and checks each condition against its actual effect.
//!
//! Invariant: **never rely on a silently ignored condition.** The probe writes its key twice
//! with create-if-absent and overwrites it with a stale ETag. A store that ignores
//! create-if-absent is refused for leasing; one that ignores or refuses If-Match renews by
//! verify-then-overwrite (read the ETag, then overwrite). That is not atomic against a third
//! writer, but the GC cannot fall into its gap: it acts only after expiry on the store's clock
//! plus margin and grace, and a renewal counts only if its answer came before the owner's
//! `valid_until`.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How a store treats one kind of conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Condition {
    /// The condition is checked: a write whose condition fails is rejected.
    Enforced,
    /// The store refuses conditional writes of this kind (NotImplemented or an error).
    Refused,
    /// The store accepts the write and ignores the condition. Never rely on it.
    Ignored,
}

/// How an owner renews its lease on this bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RenewalMechanism {
    /// One conditional overwrite (If-Match on the ETag the owner wrote last). Atomic.
    ConditionalUpdate,
    /// Read the lease's ETag, then overwrite unconditionally. Not atomic: a replacement or
    /// deletion landing between the two requests is not seen. The GC cannot fall into that gap,
    /// because it acts only after the lease expired (store clock) plus grace, and a renewal counts
    /// only if its answer arrived while the lease was still valid on the owner's clock.
    VerifyThenOverwrite,
    /// Native Swift: the lease object is written with `X-Delete-After` and renewed by a HEAD
    /// (the ETag must still be ours) then a PUT of a new body with a fresh `X-Delete-After`.
    /// Not a POST: with several replicas, `X-Newest` reads rank replicas by their data file's
    /// timestamp, so a replica that missed POST-only renewals would still be served, with an
    /// old `last_modified` that makes a live owner look dead. Swift ignores If-Match, so a
    /// replacement landing between the HEAD and the PUT is not seen (timing, as above).
    SwiftPut,
}

/// The measured capabilities of a bank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// `PutMode::Create` on an existing key.
    pub create_if_absent: Condition,
    /// `PutMode::Update` with a stale ETag.
    pub conditional_overwrite: Condition,
    /// The renewal mechanism chosen from the two above.
    pub renewal: RenewalMechanism,
    /// The store deletes expired lease objects by itself (Swift's `X-Delete-After`).
    pub server_side_expiry: bool,
    /// The store refused its own (quoted) ETag in a matching `If-Match` and honoured the
    /// unquoted form, atomically under a race (Ceph RGW): every condition is sent unquoted
    /// ([`EtagForm`](crate::store::EtagForm)).
    #[serde(default)]
    pub unquoted_etags: bool,
}

impl Capabilities {
    /// Probe `bank`: write a fresh key twice with create-if-absent, then overwrite it with the
    /// current and with a stale version. The probe key is removed afterwards.
    ///
    /// Refuses the bank (an [`Error::Unsupported`]) when create-if-absent is not enforced: lease
    /// acquisition and the completion-versus-collection decision both rest on it.
    /// `path` is a fresh key (`_banklease/probe/<uuid>`), `bank` the bank's label for errors,
    /// `swift` whether the store is native Swift (whose leases carry a server-side expiry).
    pub(crate) async fn probe(
        store: &Arc<dyn ObjectStore>,
        path: Path,
        bank: &str,
        swift: bool,
        etag_form: Option<&crate::store::EtagForm>,
    ) -> Result<Self> {
        let create = PutOptions::from(PutMode::Create);
        let first = store
            .put_opts(&path, PutPayload::from_static(b"probe-1"), create.clone())
            .await;
        let first = match first {
            Ok(r) => r,
            Err(object_store::Error::NotImplemented { .. }) => {
                return Err(unsupported(
                    bank,
                    "create-if-absent is refused by the store",
                ))
            }
            // A user who may only read: labelled as a permission, not as a store that cannot
            // keep leases (the probe is the first write an owner or a collector makes).
            Err(e) if crate::store::cause::is_write_permission(&e) => {
                return Err(crate::store::cause::write_refused(bank, e))
            }
            Err(e) => return Err(Error::store("put", &path, e)),
        };
        let second = store
            .put_opts(&path, PutPayload::from_static(b"probe-2"), create)
            .await;
        let create_if_absent = match second {
            Err(object_store::Error::AlreadyExists { .. }) => Condition::Enforced,
            Ok(_) => Condition::Ignored,
            Err(e) => {
                let _ = store.delete(&path).await;
                return Err(Error::store("put", &path, e));
            }
        };

        let conditional_overwrite = if create_if_absent == Condition::Enforced {
            probe_update(store.as_ref(), &path, &first, etag_form).await
        } else {
            Ok(Condition::Refused)
        };
        // Best effort: a leftover probe key is harmless and identifiable by its path.
        let _ = store.delete(&path).await;
        let conditional_overwrite =
            conditional_overwrite.map_err(|e| Error::store("put", &path, e))?;

        if create_if_absent != Condition::Enforced {
            return Err(unsupported(
                bank,
                "create-if-absent is silently ignored (a second create of the same key succeeded); \
                 leases and checkpoint decisions cannot be kept on this store",
            ));
        }
        let renewal = match conditional_overwrite {
            Condition::Enforced => RenewalMechanism::ConditionalUpdate,
            // Swift refuses If-Match through our backend (it would silently ignore it); its
            // leases carry `X-Delete-After`, set again by each renewal's PUT.
            _ if swift => RenewalMechanism::SwiftPut,
            // An ignored condition is never relied on: fall back to the mechanism that does not
            // use it at all.
            Condition::Refused | Condition::Ignored => RenewalMechanism::VerifyThenOverwrite,
        };
        let caps = Self {
            create_if_absent,
            conditional_overwrite,
            renewal,
            server_side_expiry: swift,
            unquoted_etags: etag_form.is_some_and(|f| f.is_unquoted()),
        };
        tracing::debug!(bank, ?caps, "probed bank capabilities");
        Ok(caps)
    }
}

async fn probe_update(
    store: &dyn ObjectStore,
    path: &object_store::path::Path,
    first: &object_store::PutResult,
    etag_form: Option<&crate::store::EtagForm>,
) -> std::result::Result<Condition, object_store::Error> {
    let current = UpdateVersion {
        e_tag: first.e_tag.clone(),
        version: first.version.clone(),
    };
    let stale = UpdateVersion {
        e_tag: Some("\"banklease-stale-etag\"".to_owned()),
        // GCS matches the generation (object_store's `version`), not the ETag, and refuses an
        // update without one; no real object has generation 1 (generations are µs stamps).
        version: Some("1".to_owned()),
    };
    match store
        .put_opts(
            path,
            PutPayload::from_static(b"probe-3"),
            PutOptions::from(PutMode::Update(current.clone())),
        )
        .await
    {
        Ok(_) => {}
        Err(e) if is_refusal(&e) => return Ok(Condition::Refused),
        // A matching version was rejected: perhaps only in the form sent (RGW compares its
        // unquoted ETag byte for byte); otherwise the store does not implement it usefully.
        Err(object_store::Error::Precondition { .. }) => {
            match etag_form.filter(|f| !f.is_unquoted()) {
                Some(form) if unquoted_is_honoured(store, path, &current).await? => {
                    form.use_unquoted();
                }
                _ => return Ok(Condition::Refused),
            }
        }
        Err(e) => return Err(e),
    }
    match store
        .put_opts(
            path,
            PutPayload::from_static(b"probe-4"),
            PutOptions::from(PutMode::Update(stale)),
        )
        .await
    {
        Err(object_store::Error::Precondition { .. }) => Ok(Condition::Enforced),
        Ok(_) => Ok(Condition::Ignored),
        Err(e) if is_refusal(&e) => Ok(Condition::Refused),
        Err(e) => Err(e),
    }
}

/// Racing writers of the unquoted form, each round: one winner on a store whose `If-Match` is
/// atomic (RGW: one of 16 in every round).
const UNQUOTED_RACE_WRITERS: usize = 4;
const UNQUOTED_RACE_ROUNDS: usize = 3;

/// Whether `path` (at `current`, whose quoted ETag was just refused) takes an overwrite whose
/// `If-Match` is the unquoted ETag, refuses a stale one, and lets exactly one of
/// [`UNQUOTED_RACE_WRITERS`] racing writers through in each of [`UNQUOTED_RACE_ROUNDS`] rounds:
/// only then is the unquoted form relied on.
async fn unquoted_is_honoured(
    store: &dyn ObjectStore,
    path: &object_store::path::Path,
    current: &UpdateVersion,
) -> std::result::Result<bool, object_store::Error> {
    use crate::store::unquoted;
    let update = |version: UpdateVersion, body: String| {
        store.put_opts(
            path,
            PutPayload::from(body),
            PutOptions::from(PutMode::Update(unquoted(version))),
        )
    };
    let mut version = match update(current.clone(), "probe-3u".to_owned()).await {
        Ok(r) => UpdateVersion {
            e_tag: r.e_tag,
            version: r.version,
        },
        Err(object_store::Error::Precondition { .. }) => return Ok(false),
        Err(e) if is_refusal(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    for round in 0..UNQUOTED_RACE_ROUNDS {
        let attempts = (0..UNQUOTED_RACE_WRITERS)
            .map(|i| update(version.clone(), format!("probe-race-{round}-{i}")));
        let mut winners = Vec::new();
        for result in futures::future::join_all(attempts).await {
            match result {
                Ok(r) => winners.push(r),
                Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match winners.len() {
            1 => {
                let r = winners.pop().expect("one winner");
                version = UpdateVersion {
                    e_tag: r.e_tag,
                    version: r.version,
                };
            }
            // None honoured, or several won: not a condition to rely on.
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// Whether the store refused a request as not implemented: object_store's NotImplemented or
/// NotSupported, or an HTTP 501 that its S3 client retries like any 5xx and then reports only
/// as a generic error naming the status (Swift's s3api answers conditional PUTs so). The
/// status text is all that identifies it: the client's error type is private.
pub fn is_refusal(e: &object_store::Error) -> bool {
    if matches!(
        e,
        object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }
    ) {
        return true;
    }
    let mut next: Option<&dyn std::error::Error> = Some(e);
    // Bounded: error chains are short, but nothing guarantees they end.
    for _ in 0..32 {
        let Some(err) = next else { break };
        if err.to_string().contains("501 Not Implemented") {
            return true;
        }
        next = err.source();
    }
    false
}

fn unsupported(bank: &str, detail: &str) -> Error {
    Error::Unsupported {
        bank: bank.to_owned(),
        usage: "leasing",
        detail: detail.to_owned(),
    }
}
