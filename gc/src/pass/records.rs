//! The GC's own records in the bank: `gc/missing/<owner>` (when a lease was first seen missing)
//! and the store-clock probe keys of processes long gone. Written and forgotten by the pass.
//!
//! Invariant: **a missing lease is timed from when a pass first saw it missing.** A lease that
//! the store itself removed (Swift's `X-Delete-After` backstop, an operator) carries no expiry
//! time, so the first pass that finds it missing writes `gc/missing/<owner>` (create-if-absent);
//! its `last_modified` starts the grace, which is then exactly as long as for an expired lease.
//! The record is forgotten as soon as a pass reads the lease again (or the owner has nothing
//! left), so one written on a false 404 never shortens a later grace.

use std::time::{Duration, Instant};

use banklease::clock::StoreTime;
use banklease::paths::{Key, Prefix};
use banklease::{Bank, OwnerId};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::pass::context::PassContext;
use crate::pass::plan::{past, MissingFor};
use crate::pass::report::Problem;

/// `gc/missing/<owner>`: written by the first pass that finds the owner's lease missing.
pub fn missing_path(bank: &Bank, owner: &OwnerId) -> Path {
    Key::GcMissing(owner.clone()).path(bank)
}

/// Read (or start) the missing-since record of `owner`, its HEAD sent at `sent`.
pub(crate) async fn missing_for(
    ctx: &PassContext,
    owner: &OwnerId,
    sent: Instant,
) -> banklease::Result<MissingFor> {
    let bank = &ctx.bank;
    let path = missing_path(bank, owner);
    match bank.store().head(&path).await {
        // A pass writes it empty: anything else there is not ours to time the grace by (nor
        // to remove), so the grace never starts — no collection on doubt.
        Ok(meta) if meta.size != 0 => {
            tracing::warn!(path = %path, size = meta.size,
                "a file the GC did not write sits where its missing-since record goes; \
                 remove it for the owner's checkpoints to be collected");
            Ok(MissingFor::JustNow)
        }
        Ok(meta) => Ok(MissingFor::AtLeast(
            ctx.elapsed_since(meta.last_modified, sent),
        )),
        Err(object_store::Error::NotFound { .. }) => {
            if !ctx.options.dry_run {
                let put = bank
                    .store()
                    .put_opts(
                        &path,
                        PutPayload::default(),
                        PutOptions::from(PutMode::Create),
                    )
                    .await;
                match put {
                    Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
                    Err(e) => return Err(banklease::Error::store("put", &path, e)),
                }
            }
            Ok(MissingFor::JustNow)
        }
        Err(e) => Err(banklease::Error::store("head", &path, e)),
    }
}

/// Store-clock probe keys older than this (store clock) belong to hosts that stopped reading
/// the clock; every process on a host rewrites the host's key at every reading.
pub const CLOCK_PROBE_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// Whether `name` is a store-clock probe's name as banklease writes it: `host-<16 hex>` (a
/// host's commands), `host-<16 hex>-gc` (its collectors), or an older release's per-process
/// `<32 hex>`. Nothing else in the folder is banklease's.
pub(crate) fn is_clock_probe_name(name: &str) -> bool {
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    // `host-<16 hex>`, or its collectors' `host-<16 hex>-gc`.
    let host = |h: &str| hex(h, 16) || h.strip_suffix("-gc").is_some_and(|h| hex(h, 16));
    name.strip_prefix("host-").is_some_and(host) || hex(name, 32)
}

/// Remove store-clock probe keys (`_banklease/clock/host-<hex>`, and the per-process keys of
/// older releases) not written for a day; returns what failed, and what is in the folder that
/// banklease did not write (kept). A key removed under a live process is rewritten by its next
/// reading.
pub(crate) async fn forget_clock_probes(
    ctx: &PassContext,
    sent: Instant,
) -> (Vec<Problem>, Vec<String>) {
    let bank = &ctx.bank;
    let own = bank.own_clock_probe();
    // A probe's own stamp, unfloored and with no staleness allowance: a day dwarfs both, and
    // a key removed too early is only rewritten.
    let now = ctx.store_time.at_send(sent, Duration::ZERO);
    let foreign = std::sync::Mutex::new(Vec::new());
    let problems = delete_listed(
        bank,
        &bank.clock_probe_prefix(),
        "store-clock probe",
        |meta| {
            let ours = meta.location.filename().is_some_and(is_clock_probe_name)
                && meta
                    .location
                    .prefix_match(&bank.clock_probe_prefix())
                    .map(|p| p.count())
                    == Some(1);
            if !ours {
                foreign.lock().expect("not poisoned").push(format!(
                    "`{}` (not a clock probe banklease writes)",
                    meta.location
                ));
                return false;
            }
            meta.location != own
                && past(
                    StoreTime::between(meta.last_modified, now),
                    CLOCK_PROBE_MAX_AGE,
                    Duration::ZERO,
                )
        },
    )
    .await;
    (problems, foreign.into_inner().expect("not poisoned"))
}

/// Host clock records no pass has written for this long are removed.
pub const HOST_RECORD_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// A collector looks for host records to remove in its first pass and one in this many after.
pub(crate) const CLOCK_HOSTS_EVERY: u64 = 16;

/// Remove the store-clock records of hosts (and boot clocks: a reboot, another time namespace)
/// that no pass has written for `max(30 days, max_reference_gap(grace))`. Only what reads back as a host record is removed; anything else under
/// `gc/clock-hosts/` is kept and named. Returns what failed, and what was kept.
pub(crate) async fn forget_clock_hosts(
    ctx: &PassContext,
    sent: Instant,
) -> (Vec<Problem>, Vec<String>) {
    use futures::StreamExt;
    let bank = &ctx.bank;
    let prefix = Prefix::GcClockHosts.path(bank);
    let own = crate::time::host_clock::own_key(bank, &ctx.clock);
    // A removed record makes its boot's next pass start as a new boot's would (unchecked, the
    // brake its only guard), where an old one would have floored it: only records no pass of a
    // running boot is likely to come back to go.
    let max_age =
        HOST_RECORD_MAX_AGE.max(crate::time::timing::max_reference_gap(ctx.options.grace));
    let now = ctx.store_time.at_send(sent, Duration::ZERO);
    let (mut problems, mut foreign, mut due) = (Vec::new(), Vec::new(), Vec::new());
    let mut listing = bank.store().list(Some(&prefix));
    while let Some(item) = listing.next().await {
        match item {
            Ok(meta) => {
                let old = past(
                    StoreTime::between(meta.last_modified, now),
                    max_age,
                    Duration::ZERO,
                );
                let ours = matches!(Key::parse(bank, &meta.location), Some(Key::GcClockHost(_)));
                if !ours || meta.size > 4096 {
                    foreign.push(format!(
                        "`{}` (not a host clock record banklease writes)",
                        meta.location
                    ));
                } else if old && Some(&meta.location) != own.as_ref() {
                    due.push(meta.location);
                }
            }
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
    for path in due {
        let bytes = match bank.store().get(&path).await {
            Ok(got) => match got.bytes().await {
                Ok(b) => b,
                Err(e) => {
                    problems.push(Problem::new(format!("host record `{path}`"), e));
                    continue;
                }
            },
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => {
                problems.push(Problem::new(format!("host record `{path}`"), e));
                continue;
            }
        };
        if !crate::time::host_clock::is_record(&bytes) {
            foreign.push(format!(
                "`{path}` (not a host clock record banklease writes)"
            ));
            continue;
        }
        match bank.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => problems.push(Problem::new(format!("host record `{path}`"), e)),
        }
    }
    (problems, foreign)
}

/// Remove the missing-since records of owners that `keep` rejects; returns what failed.
///
/// Safe whatever the listing shows or omits: removing a record only restarts the grace of an
/// owner whose lease is missing (collection comes later, never earlier). Only what a pass wrote
/// is removed: an empty object at a key of the layout — never a name that merely parses as an
/// owner id with something in it.
pub(crate) async fn forget_missing(bank: &Bank, keep: impl Fn(&OwnerId) -> bool) -> Vec<Problem> {
    let prefix = Prefix::GcMissing.path(bank);
    delete_listed(bank, &prefix, "missing-since record", |meta| {
        meta.size == 0
            && matches!(Key::parse(bank, &meta.location), Some(Key::GcMissing(o)) if !keep(&o))
    })
    .await
}

/// Delete the objects under `prefix` that `stale` selects (listed first, then deleted); returns
/// what failed. For the GC's own bookkeeping, where deleting too much only delays.
pub(crate) async fn delete_listed(
    bank: &Bank,
    prefix: &Path,
    what: &str,
    stale: impl Fn(&object_store::ObjectMeta) -> bool,
) -> Vec<Problem> {
    use futures::StreamExt;
    let mut errors = Vec::new();
    let mut found = Vec::new();
    let mut listing = bank.store().list(Some(prefix));
    while let Some(item) = listing.next().await {
        match item {
            Ok(meta) if stale(&meta) => found.push(meta.location),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, error = %banklease::error::error_chain(&e), what, "listing failed");
                errors.push(Problem::new(
                    format!("listing `{prefix}`"),
                    banklease::error::error_chain(&e),
                ));
                break;
            }
        }
    }
    drop(listing);
    for path in found {
        match bank.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, path = %path, error = %banklease::error::error_chain(&e), what,
                    "removing failed");
                errors.push(Problem::new(
                    format!("{what} `{path}`"),
                    banklease::error::error_chain(&e),
                ));
            }
        }
    }
    errors
}
