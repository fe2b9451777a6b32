//! Acquiring an owner lease: create-if-absent (retried with the same token, so a landed write
//! is recognised), or the takeover of a lease that expired on the store's clock.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, UpdateVersion};

use super::{OwnerLease, Shared, WORDS};
use crate::bank::Bank;
use crate::capability::RenewalMechanism;
use crate::clock::expiry::{judge_expiry, Expiry};
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::id::{local_hostname, OwnerId};
use crate::lease::holding::Holding;
use crate::lease::record::{new_token, read_lease_at};
use crate::lease::swift;
use crate::lease::write::{CondWrite, How, Written};
use crate::windows::LeaseWindows;

/// Retries of a transient error inside one acquire call (same token, so a landed write is
/// recognised).
const ACQUIRE_ATTEMPTS: usize = 3;

impl OwnerLease {
    /// Acquire the lease of `owner` in `bank`: create-if-absent of `leases/<owner_id>`.
    ///
    /// Fails with [`Error::LeaseExists`] if the object is already there (owner ids are unique;
    /// a second acquire of the same id is a bug or a stale id), and with [`Error::Unsupported`] if
    /// the bank cannot keep leases (see [`crate::capability`]).
    /// Refuses a prefix that is not a bank ([`Error::NotABank`]) or a layout this release does
    /// not know ([`crate::layout::check`]).
    pub async fn acquire(
        bank: &Bank,
        owner: OwnerId,
        windows: LeaseWindows,
        clock: SharedClock,
    ) -> Result<Self> {
        // Never write a lease into a prefix that is not a bank (or a layout we do not know).
        crate::layout::check(bank).await?;
        let path = bank.lease_path(&owner);
        Self::acquire_at(bank, path, owner, windows, clock).await
    }

    /// Acquire a lease object at any `path` (the GC's single-active lease uses this), with the
    /// same protocol as [`acquire`](Self::acquire).
    pub async fn acquire_at(
        bank: &Bank,
        path: Path,
        owner: OwnerId,
        windows: LeaseWindows,
        clock: SharedClock,
    ) -> Result<Self> {
        Self::acquire_with(bank, path, owner, windows, clock, PutMode::Create).await
    }

    /// Acquire the lease at `path`, taking it over if its holder's lease has expired on the
    /// store's clock (by more than `margin`). Fails with [`Error::LeaseExists`] while the holder
    /// is alive, or when its lease cannot be read (never take over on doubt).
    ///
    /// On a bank with enforced conditional overwrite the takeover is one If-Match write on the
    /// expired object, so of two racing standbys exactly one wins. Elsewhere it is delete, then
    /// create-if-absent: two standbys may both succeed and the loser learns it at its first
    /// renewal (within one renew window).
    pub async fn take_over_at(
        bank: &Bank,
        path: Path,
        owner: OwnerId,
        windows: LeaseWindows,
        clock: SharedClock,
        margin: Duration,
    ) -> Result<Self> {
        match Self::acquire_at(bank, path.clone(), owner.clone(), windows, clock.clone()).await {
            Err(Error::LeaseExists { .. }) => {}
            other => return other,
        }
        let store_time = bank.store_time(&clock).await?;
        // Invariant: a read is judged at the instant before it was sent (StoreTime::at_send):
        // the holder may have renewed while the answer was on its way.
        let sent = clock.now();
        let Some((record, meta)) = read_lease_at(bank, &path).await? else {
            return Self::acquire_at(bank, path, owner, windows, clock).await;
        };
        let holder = record.owner_id.clone();
        let expiry = judge_expiry(
            meta.last_modified,
            record.expire_window(),
            store_time.at_send(sent, Duration::ZERO),
            margin,
        );
        if !matches!(expiry, Expiry::Expired { .. }) {
            return Err(Error::LeaseExists {
                owner_id: holder,
                host: Some(record.host),
                pid: Some(record.pid),
            });
        }
        tracing::info!(path = %path, previous = %holder, "taking over an expired lease");
        if bank.capabilities().await?.renewal == RenewalMechanism::ConditionalUpdate {
            let mode = PutMode::Update(UpdateVersion {
                e_tag: meta.e_tag,
                version: meta.version,
            });
            return Self::acquire_with(bank, path, owner, windows, clock, mode).await;
        }
        match bank.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(Error::store("delete", &path, e)),
        }
        Self::acquire_at(bank, path, owner, windows, clock).await
    }

    async fn acquire_with(
        bank: &Bank,
        path: Path,
        owner: OwnerId,
        windows: LeaseWindows,
        clock: SharedClock,
        mode: PutMode,
    ) -> Result<Self> {
        for warning in windows.validate()? {
            if !crate::windows::first_time(&warning) {
                continue;
            }
            tracing::warn!(owner_id = %owner, "{warning}");
        }
        let mechanism = bank.capabilities().await?.renewal;
        let acquired_at: DateTime<Utc> = clock.system_now().into();
        let lost_owner = owner.clone();
        let holding = Holding::new(
            clock,
            &WORDS,
            format!("owner_id={owner}"),
            "not yet acquired",
            move |reason| Error::LeaseLost {
                owner_id: lost_owner.clone(),
                reason: reason.to_owned(),
            },
        );
        let lease = OwnerLease {
            shared: Arc::new(Shared {
                bank: bank.clone(),
                path: path.clone(),
                owner,
                windows,
                mechanism,
                host: local_hostname(),
                acquired_at,
                holding,
                op: tokio::sync::Mutex::new(()),
            }),
        };
        let token = new_token();
        let how = match mode {
            PutMode::Create
                if mechanism == RenewalMechanism::SwiftPut && bank.swift().is_some() =>
            {
                How::SwiftDeleteAfter {
                    secs: swift::ttl_secs(windows),
                    create: true,
                }
            }
            mode => How::Put(mode),
        };
        let written = CondWrite::new(bank, lease.clock(), &path)
            .attempts(ACQUIRE_ATTEMPTS)
            .send(lease.body(1, &token)?, &token, &how, || lease.read_found())
            .await?;
        match written {
            Written::Ours(landed) => {
                let (answered, t_send) = (landed.answered, landed.t_send);
                let written = landed.read_back(token);
                lease
                    .holding()
                    .commit_new(answered, t_send, written, windows.expire_window, ())?;
                Ok(lease)
            }
            Written::Conflict(found) => Err(match found {
                Some(f) => Error::LeaseExists {
                    owner_id: f.record.owner_id,
                    host: Some(f.record.host),
                    pid: Some(f.record.pid),
                },
                // Gone again since the store refused: still not ours to take.
                None => Error::LeaseExists {
                    owner_id: lease.shared.owner.clone(),
                    host: None,
                    pid: None,
                },
            }),
        }
    }
}
