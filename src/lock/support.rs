//! Whether a bank can keep named locks — measured once per store, never assumed.
//!
//! Named locks rest on two conditional writes, and on both being atomic under races:
//! - create-if-absent, for the first holder of a key and for queue tickets;
//! - overwrite-if-match (If-Match on the ETag), for every takeover, heartbeat, extension,
//!   release and fencing-counter step. There is no fallback: "read the ETag, then overwrite"
//!   (what owner leases use on Swift) would let two takeovers of an expired lock both
//!   succeed, and a heartbeat succeed over another owner's holding.
//!
//! So a bank is accepted only if [`Bank::capabilities`] says both conditions are
//! [`Condition::Enforced`], concurrent create-if-absent writers on one fresh key always had
//! exactly one winner ([`probe_create_race`]), and so did concurrent If-Match writers with the
//! same ETag (probed here). Swift (If-Match ignored, creates not atomic) and stores that refuse
//! If-Match are refused with an [`Error::Unsupported`] that says why. Local files are served:
//! `banklease::local` makes If-Match atomic there.
//!
//! The verdict is cached per store (a registry keyed by the store's identity, holding a weak
//! reference so a dropped store's verdict is never reused for a new one), and a bank opened by
//! URL keeps it in the bank for every later process (`learnt.rs`): a lock command then measures
//! nothing. Store errors during the probe are not cached: the next lock operation probes again.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use object_store::path::Path;
use object_store::ObjectStore;

use crate::bank::Bank;
use crate::capability::Condition;
use crate::error::{Error, Result};
use crate::learnt::Verdict;
use crate::paths::Key;
use crate::race::{probe_create_race, probe_update_race};

/// Concurrent writers per probe round, and rounds.
const RACE_WRITERS: u32 = 16;
const RACE_ROUNDS: u32 = 4;

/// Why a store that refuses If-Match cannot keep named locks.
const IF_MATCH_REFUSED: &str = "conditional overwrite (If-Match) is refused by the store; named \
     locks need it for takeovers, heartbeats, releases and fencing tokens, and are not faked \
     with read-then-overwrite; use a store that enforces it (file:, Azure, GCS, or an S3 server \
     that honours conditional writes)";

/// What the bank is to be used for, in refusals.
const USAGE: &str = "named locks";
const FENCING_USAGE: &str = "fenced writes";

impl Verdict {
    fn or_refuse(&self, bank: &Bank, usage: &'static str) -> Result<()> {
        match self {
            Verdict::Supported => Ok(()),
            Verdict::Refused(detail) => Err(Error::Unsupported {
                bank: bank.label().to_owned(),
                usage,
                detail: detail.clone(),
            }),
        }
    }
}

type Cell = Arc<tokio::sync::OnceCell<Verdict>>;

struct Entry {
    store: Weak<dyn ObjectStore>,
    cell: Cell,
    /// Whether the store's ETags change on every write (fenced writes), probed separately.
    fencing: Cell,
}

fn registry() -> &'static Mutex<Vec<Entry>> {
    static REGISTRY: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn cell_for(bank: &Bank) -> Cell {
    cells_for(bank).0
}

fn cells_for(bank: &Bank) -> (Cell, Cell) {
    let store = bank.store();
    let ptr = Arc::as_ptr(store) as *const ();
    let mut entries = registry().lock().expect("lock support registry poisoned");
    // A dead entry's address may be reused by a new store: drop dead entries first.
    entries.retain(|e| e.store.strong_count() > 0);
    if let Some(e) = entries
        .iter()
        .find(|e| e.store.as_ptr() as *const () == ptr)
    {
        return (e.cell.clone(), e.fencing.clone());
    }
    let (cell, fencing) = (Cell::default(), Cell::default());
    entries.push(Entry {
        store: Arc::downgrade(store),
        cell: cell.clone(),
        fencing: fencing.clone(),
    });
    (cell, fencing)
}

/// Fail with [`Error::Unsupported`] unless `bank` can keep named locks *and* its ETags change on
/// every write, as [`guarded_put`](super::fence::guarded_put) needs (probed once per store).
///
/// Invariant: **a fenced write is never conditioned on a content hash.** The guarded object's
/// write is an If-Match on the version read before the fence check; where the ETag is a hash of
/// the content (S3, MinIO, Ceph, moto: the MD5 of a single-part object), a newer holder that
/// rewrites the same bytes leaves that ETag as it was, and a paused older holder's If-Match would
/// still match and replace the newer holder's write — in a versioned bucket too, whose new
/// version ids no S3 condition carries. Such stores are refused for fenced writes, found by
/// trying a stale condition after an identical rewrite ([`stale_condition_holds`]; the locks
/// themselves are unaffected: a lock record carries a fresh random token in every write, so its
/// ETag always changes).
///
/// The cheap checks come first: the store's conditions (known from the bank's own probe), then
/// the three writes of that trial; the races (over a hundred writes) only for a store that
/// passes both, so that `lock put` on S3 is refused at once.
pub async fn ensure_fencing_supported(bank: &Bank) -> Result<()> {
    let (cell, fencing) = cells_for(bank);
    // A kept verdict on named locks answers the cheap checks too.
    if bank.learnt().await?.is_some_and(|l| l.locks.is_some()) {
        ensure_supported(bank).await?;
    }
    match cell.get() {
        Some(verdict) => verdict.or_refuse(bank, USAGE)?,
        None => {
            if let Some(refused) = refused_by_conditions(bank).await? {
                return refused.or_refuse(bank, USAGE);
            }
        }
    }
    let verdict = fencing
        .get_or_try_init(|| async {
            if let Some(learnt) = bank.learnt().await? {
                if let Some(kept) = &learnt.fencing {
                    return Ok(kept.as_kept(&learnt));
                }
            }
            let verdict = probe_fencing(bank).await?;
            let kept = verdict.clone();
            bank.learn(|l| l.fencing = Some(kept)).await;
            Ok::<_, Error>(verdict)
        })
        .await?;
    verdict.or_refuse(bank, FENCING_USAGE)?;
    ensure_supported(bank).await
}

/// Write the same bytes twice to a fresh key, then try the first write's condition.
async fn probe_fencing(bank: &Bank) -> Result<Verdict> {
    let path = Key::Probe(uuid::Uuid::new_v4().to_string()).path(bank);
    Ok(
        match stale_condition_holds(bank.store().as_ref(), &path).await? {
            Some(etag) => Verdict::Refused(format!(
            "the store's ETag is a hash of the content (a condition on the version a first write \
             got, etag={etag}, still held after the same bytes were written again), so after a \
             newer holder rewrote the same bytes a paused older holder's If-Match would still \
             match and replace the newer write; fenced writes need a store whose ETag (or GCS \
             generation) changes on every write (file:, Azure, GCS); a versioned S3 bucket does \
             not help, as S3 conditions on the ETag alone"
        )),
            None => Verdict::Supported,
        },
    )
}

/// Whether `store` can tell a rewrite of identical bytes from no write: the same bytes are
/// written twice at `path`, then a conditional update carrying the *first* write's version
/// (ETag, and object_store's version where the store conditions on it) is tried, and the key
/// deleted. The ETag of the first write when that stale condition still held: the store
/// conditions on a hash of the content (S3 and RGW, versioned buckets too, whose new version
/// ids no condition carries). `None` when it was refused as stale. The store must enforce
/// conditional overwrite (check that first). `doctor` measures this too.
///
/// The condition itself is tried, not the versions compared: a versioned S3 bucket answers
/// each write with a new version id while an If-Match on the old ETag still matches.
pub(crate) async fn stale_condition_holds(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<Option<String>> {
    use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
    let body = PutPayload::from_static(b"banklease fencing probe");
    let result = async {
        let first = store
            .put(path, body.clone())
            .await
            .map_err(|e| Error::store("put", path, e))?;
        store
            .put(path, body)
            .await
            .map_err(|e| Error::store("put", path, e))?;
        let stale = UpdateVersion {
            e_tag: first.e_tag.clone(),
            version: first.version.clone(),
        };
        let opts = PutOptions::from(PutMode::Update(stale));
        match store
            .put_opts(path, PutPayload::from_static(b"stale"), opts)
            .await
        {
            Ok(_) => Ok(Some(first.e_tag.unwrap_or_default())),
            Err(object_store::Error::Precondition { .. }) => Ok(None),
            Err(e) => Err(Error::store("put", path, e)),
        }
    }
    .await;
    // Best effort: a leftover probe key is harmless and identifiable by its path.
    let _ = store.delete(path).await;
    result
}

/// Measure afresh whether `bank` keeps named locks and fenced writes, and keep both verdicts in
/// the bank (`init`: no later command measures them). A bank made on a caller's store keeps
/// nothing, and is measured when first used, as before.
pub(crate) async fn measure(bank: &Bank) -> Result<()> {
    if !bank.keeps_learnt() {
        return Ok(());
    }
    let (cell, fencing) = cells_for(bank);
    let locks = probe(bank).await?;
    let fenced = match &locks {
        Verdict::Supported => Some(probe_fencing(bank).await?),
        Verdict::Refused(_) => None,
    };
    let (kept_locks, kept_fenced) = (locks.clone(), fenced.clone());
    bank.learn(|l| {
        l.locks = Some(kept_locks);
        l.fencing = kept_fenced;
    })
    .await;
    let _ = cell.set(locks);
    if let Some(fenced) = fenced {
        let _ = fencing.set(fenced);
    }
    Ok(())
}

/// Fail with [`Error::Unsupported`] unless `bank` can keep named locks (probed once per store).
pub async fn ensure_supported(bank: &Bank) -> Result<()> {
    let cell = cell_for(bank);
    let verdict = cell
        .get_or_try_init(|| async {
            if let Some(learnt) = bank.learnt().await? {
                if let Some(kept) = &learnt.locks {
                    // Not measured here: conditions go in the form the record says this store
                    // honours (Ceph RGW's unquoted ETags), as the probe would have set it.
                    bank.use_kept_etag_form(&learnt);
                    return Ok(kept.as_kept(&learnt));
                }
            }
            let verdict = probe(bank).await?;
            let kept = verdict.clone();
            bank.learn(|l| l.locks = Some(kept)).await;
            Ok::<_, Error>(verdict)
        })
        .await?;
    verdict.or_refuse(bank, USAGE)
}

/// [`ensure_supported`] for reading only (`lock show`, `lock list`): only a writer on a store
/// that keeps locks could have made them, so they can be read without measuring the store. A
/// [`reading_only`](Bank::reading_only) handle does not measure it (the probe races writers on
/// fresh keys, which a read must not leave behind): it takes a verdict already made in this
/// process, refuses Swift (whose backend refuses If-Match, so the probe could only refuse it),
/// and reads. Any other handle measures, and reads on when the probe's writes are refused.
pub(crate) async fn ensure_readable(bank: &Bank) -> Result<()> {
    if bank.is_reading_only() {
        if let Some(verdict) = cell_for(bank).get() {
            return verdict.or_refuse(bank, USAGE);
        }
        if bank.swift().is_some() {
            return Verdict::Refused(IF_MATCH_REFUSED.to_owned()).or_refuse(bank, USAGE);
        }
        return Ok(());
    }
    match ensure_supported(bank).await {
        // The capability probe's refused write (a user who may only read): reading goes on.
        Err(Error::Permission { .. }) => Ok(()),
        Err(Error::Store { source, .. }) if crate::store::cause::is_refused_write(&source) => {
            Ok(())
        }
        checked => checked,
    }
}

async fn probe(bank: &Bank) -> Result<Verdict> {
    if let Some(refused) = refused_by_conditions(bank).await? {
        return Ok(refused);
    }
    let race = probe_create_race(bank, RACE_WRITERS, RACE_ROUNDS).await?;
    if !race.looked_atomic() {
        return Ok(Verdict::Refused(format!(
            "concurrent create-if-absent is not atomic ({} of {} rounds of {} writers had several \
             winners, up to {}); two holders could both acquire a free key",
            race.rounds_with_several_winners, race.rounds, race.writers, race.max_winners
        )));
    }
    let race = probe_update_race(bank, RACE_WRITERS, RACE_ROUNDS).await?;
    if !race.looked_atomic() {
        return Ok(Verdict::Refused(format!(
            "concurrent If-Match overwrites are not atomic ({} of {} rounds of {} writers had \
             several winners, up to {}); two holders could both take over an expired lock",
            race.rounds_with_several_winners, race.rounds, race.writers, race.max_winners
        )));
    }
    tracing::debug!(bank = bank.label(), "bank can keep named locks");
    Ok(Verdict::Supported)
}

/// The refusal the store's conditions alone call for, if any: read from the bank's capability
/// probe (made once per bank), with no race of its own.
async fn refused_by_conditions(bank: &Bank) -> Result<Option<Verdict>> {
    let caps = match bank.capabilities().await {
        Ok(caps) => caps.clone(),
        // The bank's own probe already refused it (create-if-absent not kept): same reason.
        Err(Error::Unsupported { detail, .. }) => return Ok(Some(Verdict::Refused(detail))),
        Err(e) => return Err(e),
    };
    let refused = |why: &str| Ok(Some(Verdict::Refused(why.to_owned())));
    match caps.create_if_absent {
        Condition::Enforced => {}
        Condition::Refused => {
            return refused("create-if-absent is refused by the store; named locks need it")
        }
        Condition::Ignored => {
            return refused(
                "create-if-absent is silently ignored by the store; named locks need it",
            )
        }
    }
    match caps.conditional_overwrite {
        Condition::Enforced => Ok(None),
        Condition::Refused => refused(IF_MATCH_REFUSED),
        Condition::Ignored => refused(
            "conditional overwrite (If-Match) is silently ignored by the store; named locks need \
             it for takeovers, heartbeats, releases and fencing tokens; use a store that enforces \
             it (file:, Azure, GCS, or an S3 server that honours conditional writes)",
        ),
    }
}
