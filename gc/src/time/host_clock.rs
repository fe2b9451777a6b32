//! `gc/clock-hosts/<clock>`: each host's last verified store-clock reading, paired with that
//! host's boot clock, so that a pass with no earlier reading of its own (`banklease gc` from
//! cron, `checkpoint resolve`, Python's `run_pass`, a daemon just started) still compares its
//! first reading with one ([`crate::time::timing`]).
//!
//! Invariant: **a one-shot pass sees a forward step since the last pass on its host.** The boot
//! clock never steps and reads the same in every process of one boot and time namespace (the
//! record's name), so the store's advance since the record is checked against the real time
//! since, as a daemon checks it against its previous pass. Every record is written by a
//! collector after its own reading was compared with the record before it (a step raises the
//! bank's floor first), so the chain of readings has no unchecked link. What it cannot see: a
//! step before the first pass of a boot (after a reboot, in a new time namespace, on a host
//! that never ran one) or more than [`crate::time::timing::max_reference_gap`] after the last,
//! or between cloned VMs that share a boot id; there reaping and collection both stop at the
//! brake (`brake_ratio`) rather than take most of a bank at once.

use std::time::Instant;

use banklease::clock::StoreTime;
use banklease::clock::{BootInstant, SharedClock};
use banklease::paths::Key;
use banklease::Bank;
use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

/// The record's format.
const FORMAT: u32 = 1;
/// Larger records are refused unread.
const MAX_BYTES: u64 = 4096;

/// One verified reading: the store's stamp and the boot clock when its probe was sent and when
/// its answer came.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    format: u32,
    /// The host, for humans.
    host: String,
    at: DateTime<Utc>,
    sent_boot_ns: u64,
    observed_boot_ns: u64,
}

/// The record of this host's boot clock as read at the start of a pass.
#[derive(Debug, Clone)]
pub(crate) struct HostReading {
    clock: BootInstant,
    /// `clock`'s instant on the collector's clock, read with it.
    now: Instant,
    /// The record, when there is a readable one.
    previous: Option<Record>,
    /// A record is there that cannot be read (corrupt, a newer format): doubt, which the pass
    /// answers by flooring at its reading.
    pub(crate) unreadable: bool,
    /// How to write the next: on the version read, or (an unreadable record) over whatever is
    /// there, or only where there is none.
    mode: PutMode,
}

impl HostReading {
    /// Whether a record was there (readable or not).
    pub(crate) fn had_record(&self) -> bool {
        self.previous.is_some() || self.unreadable
    }

    /// The recorded reading as a reference for [`crate::time::timing::ClockWatch`], in this process's
    /// instants; `None` without one.
    pub(crate) fn reference(&self) -> Option<StoreTime> {
        let record = self.previous.as_ref()?;
        let at = |ns: u64| {
            self.clock
                .instant_of(self.now, std::time::Duration::from_nanos(ns))
        };
        Some(StoreTime {
            at: record.at,
            sent: at(record.sent_boot_ns)?,
            observed: at(record.observed_boot_ns)?,
            verified: true,
        })
    }
}

/// Read this host's record (one GET). `Ok(None)` where the clock has no boot clock; a store
/// error fails the pass (a step may have happened that only the record would show); a record
/// that cannot be parsed is no reference and says so (`unreadable`).
pub(crate) async fn read(
    bank: &Bank,
    clock: &SharedClock,
) -> banklease::Result<Option<HostReading>> {
    let Some(boot) = clock.boot_instant() else {
        return Ok(None);
    };
    let now = clock.now();
    let path = Key::GcClockHost(boot.clock.clone()).path(bank);
    let unreadable = |why: String| {
        tracing::warn!(path = %path, why,
            "host clock record unreadable: this pass floors at its own reading and replaces it");
        (None, true, PutMode::Overwrite)
    };
    let (previous, unreadable, mode) = match bank.store().get(&path).await {
        Err(object_store::Error::NotFound { .. }) => (None, false, PutMode::Create),
        Err(e) => return Err(banklease::Error::store("get", &path, e)),
        Ok(got) if got.meta.size > MAX_BYTES => unreadable(format!("{} bytes", got.meta.size)),
        Ok(got) => {
            let version = UpdateVersion {
                e_tag: got.meta.e_tag.clone(),
                version: got.meta.version.clone(),
            };
            let bytes = got
                .bytes()
                .await
                .map_err(|e| banklease::Error::store("get", &path, e))?;
            match serde_json::from_slice::<Record>(&bytes) {
                Ok(record) if record.format <= FORMAT => {
                    (Some(record), false, PutMode::Update(version))
                }
                Ok(record) => unreadable(format!("format {} is newer", record.format)),
                Err(e) => unreadable(e.to_string()),
            }
        }
    };
    Ok(Some(HostReading {
        clock: boot,
        now,
        previous,
        unreadable,
        mode,
    }))
}

/// Whether `bytes` are a host record as banklease writes it (any format: a newer release's is
/// still its own).
pub(crate) fn is_record(bytes: &[u8]) -> bool {
    #[derive(Deserialize)]
    #[allow(dead_code)] // read only to recognise the record
    struct Shape {
        format: u32,
        at: DateTime<Utc>,
        sent_boot_ns: u64,
        observed_boot_ns: u64,
    }
    bytes.len() as u64 <= MAX_BYTES && serde_json::from_slice::<Shape>(bytes).is_ok()
}

/// This process's own record key (`None` without a boot clock).
pub(crate) fn own_key(bank: &Bank, clock: &SharedClock) -> Option<object_store::path::Path> {
    let boot = clock.boot_instant()?;
    Some(Key::GcClockHost(boot.clock).path(bank))
}

/// Record `reading` as this host's. The caller writes only a verified reading that was
/// compared with a reference, or whose floor the bank now keeps: an unchecked link would hide
/// a step from every later pass. Conditional on the version read (create-if-absent where there
/// was none), so a record another collector on this host wrote meanwhile is kept; where the
/// store has no conditional overwrite, an overwrite. The boot clock is read again now, with
/// the collector's clock, to convert the reading's instants. Failing is harmless (the next
/// pass has an older reference, or none), so it is only logged.
pub(crate) async fn write(
    bank: &Bank,
    clock: &SharedClock,
    host: &HostReading,
    reading: &StoreTime,
) {
    if !reading.verified {
        return;
    }
    let Some(boot) = clock.boot_instant().filter(|b| b.clock == host.clock.clock) else {
        return;
    };
    let now = clock.now();
    let (Some(sent), Some(observed)) = (
        boot.since_boot_at(now, reading.sent),
        boot.since_boot_at(now, reading.observed),
    ) else {
        return;
    };
    let record = Record {
        format: FORMAT,
        host: banklease::id::local_hostname(),
        at: reading.at,
        sent_boot_ns: u64::try_from(sent.as_nanos()).unwrap_or(u64::MAX),
        observed_boot_ns: u64::try_from(observed.as_nanos()).unwrap_or(u64::MAX),
    };
    let path = Key::GcClockHost(host.clock.clock.clone()).path(bank);
    let body = PutPayload::from(serde_json::to_vec(&record).expect("a host clock record"));
    let result = bank
        .store()
        .put_opts(&path, body.clone(), PutOptions::from(host.mode.clone()))
        .await;
    let result = match result {
        Err(e) if banklease::store::is_refusal(&e) => bank.store().put(&path, body).await,
        other => other,
    };
    match result {
        Ok(_) => {}
        // Another collector on this host wrote first: its reading is as good.
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => {}
        Err(e) => {
            tracing::warn!(path = %path, error = %banklease::error::error_chain(&e), "recording this host's store-clock reading failed");
        }
    }
}
