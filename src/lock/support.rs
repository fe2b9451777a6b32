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
//! reference so a dropped store's verdict is never reused for a new one). Store errors during the
//! probe are not cached: the next lock operation probes again.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use object_store::ObjectStore;

use crate::bank::Bank;
use crate::capability::{probe_create_race, probe_update_race, Condition};
use crate::error::{Error, Result};

/// Concurrent writers per probe round, and rounds.
const RACE_WRITERS: u32 = 16;
const RACE_ROUNDS: u32 = 4;

/// What the bank is to be used for, in refusals.
const USAGE: &str = "named locks";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Supported,
    Refused(String),
}

type Cell = Arc<tokio::sync::OnceCell<Verdict>>;

struct Entry {
    store: Weak<dyn ObjectStore>,
    cell: Cell,
}

fn registry() -> &'static Mutex<Vec<Entry>> {
    static REGISTRY: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn cell_for(bank: &Bank) -> Cell {
    let store = bank.store();
    let ptr = Arc::as_ptr(store) as *const ();
    let mut entries = registry().lock().expect("lock support registry poisoned");
    // A dead entry's address may be reused by a new store: drop dead entries first.
    entries.retain(|e| e.store.strong_count() > 0);
    if let Some(e) = entries
        .iter()
        .find(|e| e.store.as_ptr() as *const () == ptr)
    {
        return e.cell.clone();
    }
    let cell = Cell::default();
    entries.push(Entry {
        store: Arc::downgrade(store),
        cell: cell.clone(),
    });
    cell
}

/// Fail with [`Error::Unsupported`] unless `bank` can keep named locks (probed once per store).
pub async fn ensure_supported(bank: &Bank) -> Result<()> {
    let cell = cell_for(bank);
    match cell.get_or_try_init(|| probe(bank)).await? {
        Verdict::Supported => Ok(()),
        Verdict::Refused(detail) => Err(Error::Unsupported {
            bank: bank.label().to_owned(),
            usage: USAGE,
            detail: detail.clone(),
        }),
    }
}

async fn probe(bank: &Bank) -> Result<Verdict> {
    let caps = match bank.capabilities().await {
        Ok(caps) => caps.clone(),
        // The bank's own probe already refused it (create-if-absent not kept): same reason.
        Err(Error::Unsupported { detail, .. }) => return Ok(Verdict::Refused(detail)),
        Err(e) => return Err(e),
    };
    match caps.create_if_absent {
        Condition::Enforced => {}
        Condition::Refused => {
            return Ok(Verdict::Refused(
                "create-if-absent is refused by the store; named locks need it".to_owned(),
            ))
        }
        Condition::Ignored => {
            return Ok(Verdict::Refused(
                "create-if-absent is silently ignored by the store; named locks need it".to_owned(),
            ))
        }
    }
    match caps.conditional_overwrite {
        Condition::Enforced => {}
        Condition::Refused => {
            return Ok(Verdict::Refused(
                "conditional overwrite (If-Match) is refused by the store; named locks need it \
                 for takeovers, heartbeats, releases and fencing tokens, and are not faked with \
                 read-then-overwrite; use memory:// or S3 with conditional writes"
                    .to_owned(),
            ))
        }
        Condition::Ignored => {
            return Ok(Verdict::Refused(
                "conditional overwrite (If-Match) is silently ignored by the store; named locks \
                 need it for takeovers, heartbeats, releases and fencing tokens; use memory:// \
                 or S3 with conditional writes"
                    .to_owned(),
            ))
        }
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
