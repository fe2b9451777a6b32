//! The owner lease: one object per owner at `leases/<owner_id>`.
//!
//! An owner *acquires* its lease with create-if-absent, *renews* it with a write that succeeds only
//! if the object is still the one it wrote last, and *releases* it on orderly shutdown. Between
//! requests it answers [`OwnerLease::check_validity`] from memory. The rules a write must obey
//! (send-time expiry, late answers, Lost is final, read-back) are the core's
//! ([`super::holding`]); this module is what is owner-specific: the record, the renewal
//! mechanisms, takeover and release.
//!
//! Invariant: **a lease being released is never valid.** [`OwnerLease::release`] leaves `Held`
//! before it sends the DELETE, so an owner whose DELETE landed but whose answer was lost cannot
//! go on believing a lease that observers already see Missing. A lease whose validity ran out
//! unnoticed is Lost, not released: its object may be a successor's (a takeover of the GC's
//! lease), so nothing is deleted; nor with less than `validity_window` left, and a DELETE still
//! unanswered at `valid_until` is abandoned.
//!
//! On Swift a renewal is a HEAD then a PUT (`renew_swift`: a new data file, which `X-Newest`
//! reads rank, where a POST would not be), and it re-checks the validity after the HEAD: a HEAD
//! that outlasted it sends no PUT, since the lease may already be judged dead.
//!
//! - `acquire`: acquiring and taking over (create-if-absent, or a takeover of an expired lease).

mod acquire;
mod keeper;

pub use keeper::Keeper;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use tokio::sync::watch;

use super::holding::{Held, Holding, LeaseState, Phase, ReadBack, Reconciled, Words};
use super::record::{encode, new_token, read_lease_at, LeaseRecord, LEASE_FORMAT};
use super::renewal::{Cadence, Renewable};
use super::swift;
use super::write::{self, CondWrite, Found, How, Renewed, Tokened};
use crate::bank::Bank;
use crate::capability::RenewalMechanism;
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::id::OwnerId;
use crate::process::ProcessStamp;
use crate::windows::LeaseWindows;

static WORDS: Words = Words {
    what: "lease",
    ran_out: "validity ran out before a renewal succeeded",
    answered_late: "renewal answered after the validity had run out; a GC may have acted",
    too_slow: "the write took longer than the expire window",
    gone: "lease object is gone (deleted)",
    loss_is_error: true,
};

struct Shared {
    bank: Bank,
    path: Path,
    owner: OwnerId,
    windows: LeaseWindows,
    mechanism: RenewalMechanism,
    host: String,
    acquired_at: DateTime<Utc>,
    holding: Holding<()>,
    /// Serialises renew and release; the holding's state is never held across an await.
    op: tokio::sync::Mutex<()>,
}

/// An owner's lease. Cheap to clone; clones share state.
///
/// See the crate documentation for a complete example.
#[derive(Clone)]
pub struct OwnerLease {
    shared: Arc<Shared>,
}

impl fmt::Debug for OwnerLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerLease")
            .field("owner_id", &self.shared.owner)
            .field("bank", &self.shared.bank.label())
            .field("state", &self.shared.holding.phase())
            .finish()
    }
}

impl OwnerLease {
    /// The owner.
    pub fn owner_id(&self) -> &OwnerId {
        &self.shared.owner
    }

    /// The bank the lease lives in.
    pub fn bank(&self) -> &Bank {
        &self.shared.bank
    }

    /// The lease windows.
    pub fn windows(&self) -> LeaseWindows {
        self.shared.windows
    }

    /// The clock the lease runs on.
    pub fn clock(&self) -> &SharedClock {
        self.holding().clock()
    }

    /// The renewal mechanism chosen for this bank.
    pub fn mechanism(&self) -> RenewalMechanism {
        self.shared.mechanism
    }

    /// Lease time left on the owner's clock; zero when lost, released or run out.
    /// Makes no request.
    pub fn remaining(&self) -> Duration {
        self.holding().remaining()
    }

    /// True iff at least `validity_window` of lease time is left. Makes **no request**: call it
    /// before every update of a checkpoint.
    pub fn check_validity(&self) -> bool {
        self.ensure_valid().is_ok()
    }

    /// Like [`check_validity`](Self::check_validity), but says why not.
    pub fn ensure_valid(&self) -> Result<()> {
        let validity_window = self.shared.windows.validity_window;
        match self.holding().phase() {
            Phase::Held(h) => {
                let remaining = h.valid_until.saturating_duration_since(self.now());
                if remaining >= validity_window {
                    Ok(())
                } else {
                    Err(Error::ValidityTooShort {
                        owner_id: self.shared.owner.clone(),
                        remaining,
                        validity_window,
                    })
                }
            }
            Phase::Lost(reason) => Err(self.holding().lost_error(&reason)),
            Phase::Released => Err(self.holding().lost_error("released")),
        }
    }

    /// The current state. A held lease whose validity has run out is reported Lost.
    pub fn state(&self) -> LeaseState {
        self.holding().state()
    }

    /// Watch the state: every change (renewed, lost, released) is published.
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.holding().subscribe()
    }

    /// Renew once. On success returns the new `valid_until`.
    ///
    /// Errors: [`Error::LeaseLost`] (final) when the object is gone or changed or the validity
    /// ran out first; a store error (transient, try again while time remains) otherwise.
    pub async fn renew(&self) -> Result<Instant> {
        let _op = self.shared.op.lock().await;
        let held = self.holding().held()?;
        let path = &self.shared.path;
        if let (RenewalMechanism::SwiftPut, Some(swift)) =
            (self.shared.mechanism, self.shared.bank.swift())
        {
            return self.renew_swift(swift, &held, path).await;
        }
        let store = self.shared.bank.store();
        let mode = match self.shared.mechanism {
            RenewalMechanism::ConditionalUpdate => PutMode::Update(UpdateVersion {
                e_tag: held.e_tag.clone(),
                version: held.version.clone(),
            }),
            // Only reached if a Swift-mechanism lease lost its Swift handle: verify, then
            // overwrite, which rests on the same timing argument.
            RenewalMechanism::VerifyThenOverwrite | RenewalMechanism::SwiftPut => {
                let meta = match store.head(path).await {
                    Ok(m) => m,
                    Err(object_store::Error::NotFound { .. }) => {
                        return Err(self.holding().mark_lost(WORDS.gone.to_owned()))
                    }
                    Err(e) => return Err(Error::store("head", path, e)),
                };
                if meta.e_tag != held.e_tag {
                    // Changed since our last write: ours only if it carries one of our tokens.
                    match self.reconcile(&held).await? {
                        Reconciled::Adopted(valid_until) => return Ok(valid_until),
                        Reconciled::Lagging => return Err(crate::lease::write::lagging(path)),
                        Reconciled::Unchanged(_) => {}
                    }
                }
                // As on Swift: a HEAD that hung past the validity must not be followed by
                // an overwrite, which would refresh (or re-create) a Lost lease.
                self.holding().held()?;
                PutMode::Overwrite
            }
        };
        self.write_renewal(&held, self.now(), How::Put(mode)).await
    }

    /// The renewal's write (generation + 1, a new token), sent from `t_send` and given up when
    /// the validity runs out.
    async fn write_renewal(&self, held: &Held<()>, t_send: Instant, how: How) -> Result<Instant> {
        let path = &self.shared.path;
        let generation = held.generation + 1;
        let token = new_token();
        let body = self.body(generation, &token)?;
        let write =
            CondWrite::new(&self.shared.bank, self.clock(), path).deadline(held.valid_until);
        let renewed = write::renew(
            self.holding(),
            held,
            write,
            t_send,
            generation,
            token,
            body,
            &how,
            || self.read_found(),
            replaced_by,
        )
        .await?;
        match renewed {
            Renewed::Until(valid_until) => Ok(valid_until),
            // Still our previous write under a new ETag: not renewed; try again.
            Renewed::Unchanged(_) => Err(Error::store(
                "put",
                path,
                object_store::Error::Precondition {
                    path: path.to_string(),
                    source: "lease etag changed but content is ours; retry".into(),
                },
            )),
        }
    }

    /// Release the lease (delete its object). From the moment this is called, `check_validity`
    /// is false for good — even if the delete then fails (the object then expires on the store
    /// clock). Releasing a lost lease, or one whose validity has run out, deletes nothing: the
    /// object may no longer be ours.
    pub async fn release(&self) -> Result<()> {
        let _op = self.shared.op.lock().await;
        // A held lease whose validity ran out unnoticed may already be someone else's object (a
        // takeover, a reaped and re-created key): `held()` makes it Lost, and it is never
        // deleted.
        let held = match self.holding().held() {
            Ok(h) => h,
            Err(_) => {
                if let Phase::Lost(reason) = self.holding().phase() {
                    // The holder was told it was lost (its state); nothing to add for an
                    // operator.
                    tracing::debug!(owner_id = %self.shared.owner, reason = %reason,
                        "releasing a lost lease: leaving its object alone");
                }
                self.holding().set_released();
                return Ok(());
            }
        };
        // A release is an update like any other: it needs `validity_window` left, or its DELETE
        // (retried by the client, or delayed) could land after a successor took the key over
        // and delete the successor's lease.
        let left = held.valid_until.saturating_duration_since(self.now());
        if left < self.shared.windows.validity_window {
            tracing::warn!(target: crate::lease::RENEWAL_TARGET, owner_id = %self.shared.owner, left = ?left,
                "releasing with less than validity_window left: leaving the lease object to \
                 expire");
            self.holding().set_released();
            return Ok(());
        }
        // Invariant: the lease stops being valid *before* the delete is sent. Once the delete
        // lands, observers see the lease Missing and may collect; an owner still believing its
        // lease (answer pending, or lost) would then race the GC. Released is final either way:
        // a failed delete leaves an object that simply expires on the store clock.
        self.holding().set_released();
        let path = &self.shared.path;
        let left = held.valid_until.saturating_duration_since(self.now());
        // Abandoned (client retries stop) once the validity it was sent under runs out.
        let outcome = tokio::select! {
            biased;
            r = self.shared.bank.store().delete(path) => Some(r),
            () = self.clock().sleep(left) => None,
        };
        match outcome {
            Some(Ok(()) | Err(object_store::Error::NotFound { .. })) => {
                tracing::info!(owner_id = %self.shared.owner, "lease released");
                Ok(())
            }
            Some(Err(e)) => Err(Error::store("delete", path, e)),
            None => {
                tracing::warn!(target: crate::lease::RENEWAL_TARGET, owner_id = %self.shared.owner,
                    "release abandoned: the delete outlasted the validity; the lease object \
                     expires on the store clock");
                Ok(())
            }
        }
    }

    // ---- internals -------------------------------------------------------------------------

    fn holding(&self) -> &Holding<()> {
        &self.shared.holding
    }

    fn now(&self) -> Instant {
        self.holding().clock().now()
    }

    /// Swift: HEAD (still our object?), then PUT a new body (generation + 1, a new token) with
    /// a fresh `X-Delete-After`.
    ///
    /// A PUT, not a POST: with several replicas, `X-Newest` reads rank replicas by the timestamp
    /// of their data file, which a POST does not change. A replica that missed POST-only
    /// renewals would be served to some reads with the lease's old `last_modified`, and a GC
    /// would judge a live owner dead (measured on a 3-replica Swift, gc/tests/swift_replicas.rs).
    /// As with verify-then-overwrite, a PUT whose answer is lost is remembered as pending and
    /// adopted by the next renewal's read-back.
    async fn renew_swift(
        &self,
        swift: &crate::store::swift::SwiftStore,
        held: &Held<()>,
        path: &Path,
    ) -> Result<Instant> {
        let head_sent = self.now();
        let head = match swift.head_swift(path).await {
            Ok(h) => h,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(self
                    .holding()
                    .mark_lost("lease object is gone (deleted or expired)".to_owned()))
            }
            Err(e) => return Err(Error::store("head", path, e)),
        };
        if head.meta.e_tag != held.e_tag {
            // Changed since our last write: ours only if it carries one of our tokens.
            match self.reconcile(held).await? {
                Reconciled::Adopted(valid_until) => return Ok(valid_until),
                Reconciled::Lagging => return Err(crate::lease::write::lagging(path)),
                Reconciled::Unchanged(_) => {}
            }
        }
        // The HEAD may have hung or been retried past the validity: a lease that ran out
        // meanwhile is Lost, and its object must not be refreshed for observers now.
        self.holding().held()?;
        // On a grid when the HEAD told the server's time: consecutive renewals then send the
        // same X-Delete-At, and the object server leaves its expirer queue alone.
        let ttl = swift::ttl_secs(self.shared.windows);
        let t_send = self.now();
        let how = match head.date {
            Some(date) => {
                let since_head = t_send.saturating_duration_since(head_sent);
                How::SwiftDeleteAt(swift::delete_at(date, since_head, ttl))
            }
            None => How::SwiftDeleteAfter {
                secs: ttl,
                create: false,
            },
        };
        self.write_renewal(held, t_send, how).await
    }

    fn body(&self, generation: u64, token: &str) -> Result<PutPayload> {
        let w = self.shared.windows;
        let record = LeaseRecord {
            format: LEASE_FORMAT,
            owner_id: self.shared.owner.clone(),
            host: self.shared.host.clone(),
            pid: std::process::id(),
            renew_window_ms: w.renew_window.as_millis() as u64,
            // Rounded up: observers must never see a shorter window than the owner uses.
            expire_window_ms: w.expire_window.as_micros().div_ceil(1000) as u64,
            validity_window_ms: w.validity_window.as_millis() as u64,
            // Rounded up, as the expire window: a collector must never wait less than needed.
            retry_budget_ms: Some(crate::config::ceil_ms(self.shared.bank.retry_budget())),
            acquired_at: self.shared.acquired_at,
            renewed_at: self.shared.clock_system_now(),
            generation,
            token: token.to_owned(),
            process: ProcessStamp::this_process(),
        };
        encode(&self.shared.path, "lease", &record)
    }

    /// The lease record at its path, as the conditional write reads it back.
    async fn read_found(&self) -> Result<Option<Found<LeaseRecord>>> {
        let found = read_lease_at(&self.shared.bank, &self.shared.path).await?;
        Ok(found.map(|(record, meta)| Found {
            record,
            e_tag: meta.e_tag,
            version: meta.version,
        }))
    }

    /// Read the lease back: our last write under a new ETag, a pending write of ours (adopted),
    /// or anything else (Lost).
    async fn reconcile(&self, held: &Held<()>) -> Result<Reconciled<()>> {
        let mut why = String::new();
        let read = self.read_found().await.map(|found| {
            found.map(|f| {
                why = replaced_by(&f.record);
                ReadBack {
                    token: f.record.token,
                    e_tag: f.e_tag,
                    version: f.version,
                }
            })
        });
        self.holding().reconcile(held, read, || why)
    }
}

/// Why a lease record read back that is not ours means the lease is lost.
fn replaced_by(record: &LeaseRecord) -> String {
    format!(
        "lease object was replaced by another writer (generation `{}`, host `{}`)",
        record.generation, record.host
    )
}

impl Tokened for LeaseRecord {
    fn token(&self) -> &str {
        &self.token
    }
}

impl Shared {
    fn clock_system_now(&self) -> DateTime<Utc> {
        self.holding.clock().system_now().into()
    }
}

impl Renewable for OwnerLease {
    type Extra = ();

    fn holding(&self) -> &Holding<()> {
        &self.shared.holding
    }

    fn renew(&self) -> impl std::future::Future<Output = Result<Instant>> + Send {
        OwnerLease::renew(self)
    }

    fn cadence(&self) -> Cadence {
        let renew = self.shared.windows.renew_window;
        let first_backoff = (renew / 20).max(Duration::from_millis(10));
        Cadence {
            interval: renew,
            first_backoff,
            max_backoff: (renew / 2).max(first_backoff),
        }
    }
}
