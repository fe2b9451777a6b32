//! The bank descriptor: which layout a bank is written in, so that a release that does not
//! know it refuses the bank instead of misreading it.
//!
//! `banklease init` writes `banklease.json` at the bank's root:
//!
//! ```json
//! {"format": 1, "layout": 1, "created_by": "banklease 0.1.0", "created_at": "2026-11-23T…Z"}
//! ```
//!
//! Invariant: **a bank in a layout this release does not know is refused, never touched.**
//! The CLI's commands, `banklease run`, the GC daemon, the Python package and
//! [`OwnerLease::acquire`](crate::OwnerLease::acquire) call [`check`] before anything else.
//!
//! Invariant: **only `init` makes a bank.** [`check`] refuses a prefix without a descriptor,
//! whatever its names look like (a user's `index`, `locks/` or `gc/`), before anything is
//! written there; a bank made before descriptors existed is adopted by `banklease init` once
//! ([`Initialised::Adopted`]). A `file:` bank's directory that vanishes while a command runs is
//! never made anew by a write: its store writes only in the directory it was opened on (by
//! device and inode), and creates directories only below it.
//!
//! Invariant: **a typo never reads as a healthy empty bank.** A prefix with neither a
//! descriptor nor any banklease object is refused by [`check`] ([`Error::NoBank`], naming the
//! URL and `banklease init`), and a `file:` bank's directory is never created by opening it
//! (only [`Bank::open_or_create`](crate::Bank::open_or_create), which `init` uses): listings,
//! `validity-check`, owners and the GC would otherwise answer "nothing here" about the wrong
//! place while the real bank's zombies pile up.
//!
//! Invariant: **banklease never acts on what it did not make.** `init` adopts a prefix without
//! a descriptor only if everything at its top is a bank's own ([`BANK_ENTRIES`]): a user's
//! directory named by mistake (`--bank file:///home/me`) is refused with the foreign name it
//! holds, before anything is read, written or swept in it. On a `file:` bank the top is read
//! from the directory itself (`LocalStore::root_entries`): object_store's listings hide names
//! ending in `#<digits>`, so a directory of `photo#1` and `invoice#2024` would pass for an empty
//! one. Opening a `file:` bank writes nothing, so a directory that is not a bank keeps every
//! byte and every mtime. A `memory://` bank is a bank from its opening (nothing else can name
//! it), and there is no default bank: a missing URL is an error naming where to give one.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> banklease::Result<()> {
//! use banklease::{layout, Bank};
//!
//! let store = std::sync::Arc::new(object_store::memory::InMemory::new());
//! let bank = Bank::from_store(store, "b", "an empty store");
//! // An empty prefix is no bank yet: every command and owner refuses it.
//! assert!(matches!(layout::check(&bank).await, Err(banklease::Error::NoBank { .. })));
//! assert_eq!(layout::init(&bank).await?, layout::Initialised::Created);
//! assert_eq!(layout::init(&bank).await?, layout::Initialised::Already);
//! layout::check(&bank).await?;
//! # Ok(()) }
//! ```

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::bank::Bank;
use crate::error::{Error, Result};
use crate::paths::Key;

/// The layout this release writes and reads.
pub const LAYOUT_VERSION: u32 = 1;
pub use crate::paths::BANK_ENTRIES;
pub use crate::paths::DESCRIPTOR;

/// The descriptor's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    /// Body format version.
    pub format: u32,
    /// The bank's layout version.
    pub layout: u32,
    /// The release that created the bank, for humans.
    pub created_by: String,
    /// When, on its creator's wall clock, for humans.
    pub created_at: DateTime<Utc>,
}

/// What [`init`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initialised {
    /// The prefix was empty: the descriptor was written.
    Created,
    /// The prefix held a bank without a descriptor (made before `init` existed): written.
    Adopted,
    /// The descriptor was there already, in this layout.
    Already,
}

fn descriptor_path(bank: &Bank) -> Path {
    Key::Descriptor.path(bank)
}

/// Read the bank's descriptor; `None` when there is none.
pub async fn read(bank: &Bank) -> Result<Option<Descriptor>> {
    let path = descriptor_path(bank);
    let bytes = match bank.store().get(&path).await {
        Ok(r) => r.bytes().await.map_err(|e| Error::store("get", &path, e))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", &path, e)),
    };
    let corrupt = |e: serde_json::Error| Error::Corrupt {
        path: path.clone(),
        reason: format!("not a bank descriptor: {e}"),
    };
    // The layout first: a later layout's descriptor may lack this one's fields, and must be
    // refused as a layout this release does not know, not as a corrupt object.
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(corrupt)?;
    if let Some(layout) = value.get("layout").and_then(serde_json::Value::as_u64) {
        if layout != u64::from(LAYOUT_VERSION) {
            return Ok(Some(Descriptor {
                format: value
                    .get("format")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0) as u32,
                layout: u32::try_from(layout).unwrap_or(u32::MAX),
                created_by: value
                    .get("created_by")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("an unknown release")
                    .to_owned(),
                created_at: value
                    .get("created_at")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default(),
            }));
        }
    }
    serde_json::from_value(value).map(Some).map_err(corrupt)
}

/// Refuse a bank whose layout this release does not know, a prefix that is not a bank (no
/// descriptor, and objects banklease did not make: [`Error::NotABank`]; or only names a bank's
/// own could have: [`Error::NoDescriptor`]) and an empty one (no descriptor and nothing else:
/// [`Error::NoBank`], a mistyped URL or a bank not made yet). One GET, and one listing of the
/// prefix's top level when there is no descriptor. Writes nothing, but on `memory://`.
pub async fn check(bank: &Bank) -> Result<()> {
    match read(bank).await? {
        Some(d) if d.layout != LAYOUT_VERSION => Err(Error::UnknownLayout {
            bank: bank.label().to_owned(),
            found: d.layout,
            created_by: d.created_by,
            known: LAYOUT_VERSION,
        }),
        Some(_) => Ok(()),
        // `memory://`: nothing else can name it, so there is no bank to mistype.
        None if bank.made_at_open() => {
            if let Err(e) = write_descriptor(bank).await {
                tracing::debug!(bank = bank.label(), error = %e, "no descriptor written");
            }
            Ok(())
        }
        // Only `init` makes a bank: names that look like a bank's are no proof (a user's
        // `index`, `locks/` or `gc/`), and a bank made before descriptors is adopted by `init`
        // once, by someone who knows it is one.
        None => Err(match top_level(bank).await? {
            None => Error::NoBank {
                bank: bank.label().to_owned(),
                reason:
                    "it holds no bank descriptor (banklease.json), and no lease, checkpoint or lock"
                        .to_owned(),
            },
            Some(found) => Error::NoDescriptor {
                bank: bank.label().to_owned(),
                found,
            },
        }),
    }
}

/// What sits at the top of the bank's prefix: `Ok(None)` when nothing but housekeeping,
/// `Ok(Some(name))` when only names a bank's own could have (the first of them), and
/// [`Error::NotABank`] naming the first foreign one otherwise.
async fn top_level(bank: &Bank) -> Result<Option<String>> {
    let prefix = bank.prefix();
    let names: Vec<String> = match bank.local() {
        // The directory itself: a listing hides names ending in `#<digits>` (`photo#1`), and a
        // directory of such files would pass for an empty one.
        Some(local) => local
            .root_entries()
            .await
            .map_err(|e| Error::store("list", prefix, e))?,
        None => {
            let listed = bank
                .store()
                .list_with_delimiter(Some(prefix))
                .await
                .map_err(|e| Error::store("list", prefix, e))?;
            // Each entry is one name below the prefix. An entry that is the prefix itself is a
            // key beginning with `/` (`//` below a prefix: an OpenStack Karbor bank's
            // `/checkpoints/…`), whose empty first part the listing folds away, or a
            // pseudo-directory marker (`prefix/`): foreign either way, never an empty prefix.
            listed
                .objects
                .iter()
                .map(|o| &o.location)
                .chain(&listed.common_prefixes)
                .map(|p| {
                    let parts: Vec<String> = p
                        .prefix_match(prefix)
                        .map(|rest| rest.map(|part| part.as_ref().to_owned()).collect())
                        .unwrap_or_default();
                    match parts.as_slice() {
                        [name] => name.clone(),
                        _ => format!("{}/", prefix.as_ref()),
                    }
                })
                .collect()
        }
    };
    let mut first = None;
    for name in names {
        // Housekeeping (the clock probe, staging, `file:` lock stripes, an older release's
        // timestamp check) is what a command of an older release left in a mistyped prefix: it
        // does not make a bank.
        let housekeeping = name == HOUSEKEEPING
            || name.starts_with(".banklease-lock#")
            || name.starts_with(".banklease-mtime-check#");
        if !housekeeping && !BANK_ENTRIES.contains(&name.as_str()) {
            return Err(Error::NotABank {
                bank: bank.label().to_owned(),
                found: name,
            });
        }
        if !housekeeping && first.is_none() {
            first = Some(name);
        }
    }
    Ok(first)
}

/// The top-level entry of banklease's housekeeping objects (`_banklease/clock`, staging).
const HOUSEKEEPING: &str = "_banklease";

/// Make `bank` a bank: write its descriptor unless it has one. Refuses a prefix that holds
/// anything else than a bank's own objects ([`Error::NotABank`]), and a store where leases
/// cannot be kept ([`Error::Unsupported`], from the capability probe: e.g. Ceph RGW's Swift API,
/// which ignores create-if-absent), writing nothing.
pub async fn init(bank: &Bank) -> Result<Initialised> {
    if read(bank).await?.is_some() {
        check(bank).await?;
        // `init` measures the store again: what was learnt before may be stale (the store's
        // software changed), and `init` is what a refusal names to measure again.
        bank.measure_capabilities().await?;
        return Ok(Initialised::Already);
    }
    let empty = top_level(bank).await?.is_none();
    // Only a store that can keep leases becomes a bank: the capability probe (which removes
    // its probe key) refuses one that ignores create-if-absent before anything is written.
    bank.measure_capabilities().await?;
    let path = descriptor_path(bank);
    match write_descriptor(bank).await {
        Ok(_) => Ok(if empty {
            Initialised::Created
        } else {
            Initialised::Adopted
        }),
        // Another init won the race: judge what it wrote.
        Err(object_store::Error::AlreadyExists { .. }) => {
            check(bank).await?;
            Ok(Initialised::Already)
        }
        Err(e) => Err(Error::store("put", &path, e)),
    }
}

/// Write this release's descriptor, create-if-absent.
async fn write_descriptor(bank: &Bank) -> std::result::Result<(), object_store::Error> {
    let descriptor = Descriptor {
        format: 1,
        layout: LAYOUT_VERSION,
        created_by: format!("banklease {}", env!("CARGO_PKG_VERSION")),
        created_at: Utc::now(),
    };
    let body = serde_json::to_vec(&descriptor).expect("a descriptor serialises");
    bank.store()
        .put_opts(
            &descriptor_path(bank),
            PutPayload::from(body),
            PutOptions::from(PutMode::Create),
        )
        .await
        .map(|_| ())
}
