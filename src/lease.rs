//! The owner lease: one object per owner at `leases/<owner_id>`.
//!
//! An owner *acquires* its lease with create-if-absent, *renews* it with a write that succeeds only
//! if the object is still the one it wrote last, and *releases* it on orderly shutdown. Between
//! requests it answers [`OwnerLease::check_validity`] from memory.
//!
//! Invariants kept here (see ARCHITECTURE.md):
//! - **Send-time expiry**: `valid_until = t_send + expire_window`, where `t_send` is the monotonic
//!   instant taken *before* the write was sent, and only when the write succeeded. A slow request
//!   therefore shortens the validity, never lengthens it.
//! - **Lost is final**: a lease whose object is gone or changed, or whose validity ran out before a
//!   renewal succeeded, is Lost. Nothing here ever re-creates or revives it: a GC may already have
//!   collected its checkpoints.
//! - **Ambiguity is resolved by reading back**: when a write's outcome is unknown (a timeout, or a
//!   retry answered AlreadyExists/Precondition), the object is read and its per-write `token`
//!   compared with the tokens this owner sent.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::bank::Bank;
use crate::capability::RenewalMechanism;
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::id::{local_hostname, OwnerId};
use crate::windows::LeaseWindows;

/// The lease body format this version writes and understands.
pub const LEASE_FORMAT: u32 = 1;
/// Lease objects larger than this are refused unread.
pub const MAX_LEASE_BYTES: u64 = 64 * 1024;
/// The longest expire window a lease record may claim (anything longer is treated as corrupt).
pub const MAX_EXPIRE_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// The JSON body of a lease object. Unknown fields are ignored on read so that newer writers of
/// the same format stay readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Body format version.
    pub format: u32,
    /// The owner.
    pub owner_id: OwnerId,
    /// Host of the owner, for humans.
    pub host: String,
    /// Process id of the owner, for humans.
    pub pid: u32,
    /// The owner's renew window in milliseconds.
    pub renew_window_ms: u64,
    /// The owner's expire window in milliseconds; observers judge expiry with it.
    pub expire_window_ms: u64,
    /// The owner's validity window in milliseconds.
    pub validity_window_ms: u64,
    /// When the lease was acquired, owner's wall clock, for humans only.
    pub acquired_at: DateTime<Utc>,
    /// When this write was made, owner's wall clock, for humans only.
    pub renewed_at: DateTime<Utc>,
    /// 1 for the acquiring write, +1 on each renewal.
    pub generation: u64,
    /// A random token unique to this write, to recognise it when reading back.
    pub token: String,
}

impl LeaseRecord {
    /// The expire window the owner declared.
    pub fn expire_window(&self) -> Duration {
        Duration::from_millis(self.expire_window_ms)
    }

    /// Parse a lease body read from `path`, checking its format version and bounds.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_owned(),
            reason,
        };
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let version: Version = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(format!("not a lease record: {e}")))?;
        if version.format > LEASE_FORMAT {
            return Err(corrupt(format!(
                "lease format `{}` is newer than this banklease understands (`{LEASE_FORMAT}`); \
                 upgrade banklease",
                version.format
            )));
        }
        let record: LeaseRecord = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(format!("not a lease record: {e}")))?;
        if record.expire_window_ms == 0 || record.expire_window() > MAX_EXPIRE_WINDOW {
            return Err(corrupt(format!(
                "expire_window_ms=`{}` is out of range",
                record.expire_window_ms
            )));
        }
        Ok(record)
    }
}

/// Read the lease object of `owner`: `None` when the store says it does not exist.
pub async fn read_lease(bank: &Bank, owner: &OwnerId) -> Result<Option<(LeaseRecord, ObjectMeta)>> {
    let record = read_lease_at(bank, &bank.lease_path(owner)).await?;
    if let Some((r, _)) = &record {
        if r.owner_id != *owner {
            return Err(Error::Corrupt {
                path: bank.lease_path(owner).to_string(),
                reason: format!("it names owner_id=`{}`", r.owner_id),
            });
        }
    }
    Ok(record)
}

/// Read a lease object at any path: `None` when the store says it does not exist.
pub async fn read_lease_at(bank: &Bank, path: &Path) -> Result<Option<(LeaseRecord, ObjectMeta)>> {
    let path = path.clone();
    let got = match bank.store().get(&path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", &path, e)),
    };
    let meta = got.meta.clone();
    if meta.size > MAX_LEASE_BYTES {
        return Err(Error::Corrupt {
            path: path.to_string(),
            reason: format!("size `{}` exceeds {MAX_LEASE_BYTES} bytes", meta.size),
        });
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| Error::store("get", &path, e))?;
    if bytes.len() as u64 > MAX_LEASE_BYTES {
        return Err(Error::Corrupt {
            path: path.to_string(),
            reason: format!("size exceeds {MAX_LEASE_BYTES} bytes"),
        });
    }
    let record = LeaseRecord::parse(path.as_ref(), &bytes)?;
    Ok(Some((record, meta)))
}

/// The owner-side state of a lease, as published to watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// The lease is held until `valid_until` (monotonic, owner's clock).
    Held {
        /// When the lease stops being valid unless renewed.
        valid_until: Instant,
    },
    /// The lease is lost; final.
    Lost {
        /// Why.
        reason: String,
    },
    /// The lease was released by its owner; final.
    Released,
}

#[derive(Debug, Clone)]
struct Held {
    e_tag: Option<String>,
    version: Option<String>,
    generation: u64,
    token: String,
    valid_until: Instant,
}

/// A write whose outcome is unknown: it may have landed.
#[derive(Debug, Clone)]
struct Pending {
    token: String,
    generation: u64,
    t_send: Instant,
}

#[derive(Debug)]
enum Phase {
    Held(Held),
    Lost(String),
    Released,
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    pending: Vec<Pending>,
}

struct Shared {
    bank: Bank,
    path: Path,
    owner: OwnerId,
    windows: LeaseWindows,
    clock: SharedClock,
    mechanism: RenewalMechanism,
    host: String,
    acquired_at: DateTime<Utc>,
    inner: Mutex<Inner>,
    /// Serialises renew and release; `inner` is only held briefly and never across an await.
    op: tokio::sync::Mutex<()>,
    state_tx: watch::Sender<LeaseState>,
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
            .field("state", &*self.shared.state_tx.borrow())
            .finish()
    }
}

/// Retries of a transient error inside one acquire call (same token, so a landed write is
/// recognised).
const ACQUIRE_ATTEMPTS: usize = 3;
/// Pending writes remembered; older ones are forgotten (each is a renewal that timed out).
const MAX_PENDING: usize = 16;

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
        let holder = record.owner_id.to_string();
        let view = crate::observe::judge(
            record,
            meta.last_modified,
            store_time.at_send(sent, Duration::ZERO),
            margin,
        );
        if !matches!(view, crate::observe::LeaseView::Expired { .. }) {
            return Err(Error::LeaseExists { owner_id: holder });
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
            tracing::warn!(owner_id = %owner, "{warning}");
        }
        let mechanism = bank.capabilities().await?.renewal;
        let acquired_at: DateTime<Utc> = clock.system_now().into();
        let (state_tx, _) = watch::channel(LeaseState::Lost {
            reason: "not yet acquired".to_owned(),
        });
        let lease = OwnerLease {
            shared: Arc::new(Shared {
                bank: bank.clone(),
                path: path.clone(),
                owner,
                windows,
                clock,
                mechanism,
                host: local_hostname(),
                acquired_at,
                inner: Mutex::new(Inner {
                    phase: Phase::Lost("not yet acquired".to_owned()),
                    pending: Vec::new(),
                }),
                op: tokio::sync::Mutex::new(()),
                state_tx,
            }),
        };
        let token = new_token();
        let body = lease.body(1, &token)?;
        let opts = PutOptions::from(mode);
        let mut last_err = None;
        // Taken once, before the first attempt: a retry may find (and adopt) an earlier attempt
        // that landed, so validity must count from the earliest write that may have landed.
        let t_send = lease.shared.clock.now();
        for attempt in 0..ACQUIRE_ATTEMPTS {
            let result = match (bank.swift(), &opts.mode) {
                (Some(swift), PutMode::Create) if mechanism == RenewalMechanism::SwiftPut => swift
                    .put_with_delete_after(&path, body.clone(), swift_ttl_secs(windows), true)
                    .await
                    .map(|w| (w.e_tag, None)),
                _ => bank
                    .store()
                    .put_opts(&path, body.clone(), opts.clone())
                    .await
                    .map(|put| (put.e_tag, put.version)),
            };
            match result {
                Ok((e_tag, version)) => {
                    lease.commit(t_send, e_tag, version, 1, token)?;
                    return Ok(lease);
                }
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => {
                    // Ours, if an earlier attempt (or the client's own retry) landed.
                    return match read_lease_at(bank, &path).await {
                        Ok(Some((record, meta))) if record.token == token => {
                            lease.commit(t_send, meta.e_tag, meta.version, 1, token)?;
                            Ok(lease)
                        }
                        Ok(Some((record, _))) => Err(Error::LeaseExists {
                            owner_id: record.owner_id.to_string(),
                        }),
                        _ => Err(Error::LeaseExists {
                            owner_id: lease.shared.owner.to_string(),
                        }),
                    };
                }
                Err(e) => {
                    let err = Error::store("put", &path, e);
                    if !err.is_transient() {
                        return Err(err);
                    }
                    tracing::warn!(owner_id = %lease.shared.owner, attempt, error = %err,
                        "lease acquire failed; retrying with the same token");
                    last_err = Some(err);
                }
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

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
        &self.shared.clock
    }

    /// The renewal mechanism chosen for this bank.
    pub fn mechanism(&self) -> RenewalMechanism {
        self.shared.mechanism
    }

    /// Lease time left on the owner's clock; zero when lost, released or run out.
    /// Makes no request.
    pub fn remaining(&self) -> Duration {
        let now = self.shared.clock.now();
        match &self.lock().phase {
            Phase::Held(h) => h.valid_until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// True iff at least `validity_window` of lease time is left. Makes **no request**: call it
    /// before every update of a checkpoint.
    pub fn check_validity(&self) -> bool {
        self.remaining() >= self.shared.windows.validity_window
            && matches!(self.lock().phase, Phase::Held(_))
    }

    /// Like [`check_validity`](Self::check_validity), but says why not.
    pub fn ensure_valid(&self) -> Result<()> {
        let now = self.shared.clock.now();
        let inner = self.lock();
        match &inner.phase {
            Phase::Held(h) => {
                let remaining = h.valid_until.saturating_duration_since(now);
                if remaining >= self.shared.windows.validity_window {
                    Ok(())
                } else {
                    Err(Error::ValidityTooShort {
                        owner_id: self.shared.owner.to_string(),
                        remaining,
                        validity_window: self.shared.windows.validity_window,
                    })
                }
            }
            Phase::Lost(reason) => Err(self.lost_error(reason)),
            Phase::Released => Err(self.lost_error("released")),
        }
    }

    /// The current state. A held lease whose validity has run out is reported Lost.
    pub fn state(&self) -> LeaseState {
        let now = self.shared.clock.now();
        let mut inner = self.lock();
        self.expire_if_due(&mut inner, now);
        phase_state(&inner.phase)
    }

    /// Watch the state: every change (renewed, lost, released) is published.
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.shared.state_tx.subscribe()
    }

    /// Renew once. On success returns the new `valid_until`.
    ///
    /// Errors: [`Error::LeaseLost`] (final) when the object is gone or changed or the validity
    /// ran out first; a store error (transient, try again while time remains) otherwise.
    pub async fn renew(&self) -> Result<Instant> {
        let _op = self.shared.op.lock().await;
        let held = self.held_for_write()?;
        let path = self.shared.path.clone();
        if let (RenewalMechanism::SwiftPut, Some(swift)) =
            (self.shared.mechanism, self.shared.bank.swift())
        {
            return self.renew_swift(swift, &held, &path).await;
        }
        let store = self.shared.bank.store();
        let generation = held.generation + 1;
        let token = new_token();
        let body = self.body(generation, &token)?;

        let mode = match self.shared.mechanism {
            RenewalMechanism::ConditionalUpdate => PutMode::Update(UpdateVersion {
                e_tag: held.e_tag.clone(),
                version: held.version.clone(),
            }),
            // Only reached if a Swift-mechanism lease lost its Swift handle: verify, then
            // overwrite, which rests on the same timing argument.
            RenewalMechanism::VerifyThenOverwrite | RenewalMechanism::SwiftPut => {
                let meta = match store.head(&path).await {
                    Ok(m) => m,
                    Err(object_store::Error::NotFound { .. }) => {
                        return Err(self.mark_lost("lease object is gone (deleted)".to_owned()))
                    }
                    Err(e) => return Err(Error::store("head", &path, e)),
                };
                if meta.e_tag != held.e_tag {
                    // Changed since our last write: ours only if it carries one of our tokens.
                    if let Reconciled::Adopted(valid_until) = self.reconcile(&held).await? {
                        return Ok(valid_until);
                    }
                }
                // As on Swift: a HEAD that hung past the validity must not be followed by
                // an overwrite, which would refresh (or re-create) a Lost lease.
                self.held_for_write()?;
                PutMode::Overwrite
            }
        };
        let t_send = self.shared.clock.now();
        match store.put_opts(&path, body, PutOptions::from(mode)).await {
            Ok(put) => self.commit(t_send, put.e_tag, put.version, generation, token),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => {
                // Either someone else changed or deleted the object, or our own write landed and
                // a retry of it was refused. Only reading back can tell.
                self.remember_pending(&token, generation, t_send);
                match self.reconcile(&held).await? {
                    Reconciled::Adopted(valid_until) => Ok(valid_until),
                    // Still our previous write under a new ETag: not renewed; try again.
                    Reconciled::Unchanged => Err(Error::store(
                        "put",
                        &path,
                        object_store::Error::Precondition {
                            path: path.to_string(),
                            source: "lease etag changed but content is ours; retry".into(),
                        },
                    )),
                }
            }
            Err(e) => {
                self.remember_pending(&token, generation, t_send);
                Err(Error::store("put", &path, e))
            }
        }
    }

    /// Release the lease (delete its object). From the moment this is called, `check_validity`
    /// is false for good — even if the delete then fails (the object then expires on the store
    /// clock). Releasing a lost lease, or one whose validity has run out, deletes nothing: the
    /// object may no longer be ours.
    pub async fn release(&self) -> Result<()> {
        let _op = self.shared.op.lock().await;
        let deadline = {
            let now = self.shared.clock.now();
            let mut inner = self.lock();
            // A held lease whose validity ran out unnoticed may already be someone else's
            // object (a takeover, a reaped and re-created key): it is Lost, never deleted.
            self.expire_if_due(&mut inner, now);
            match &inner.phase {
                Phase::Released => return Ok(()),
                Phase::Lost(reason) => {
                    tracing::warn!(owner_id = %self.shared.owner, reason = %reason,
                        "releasing a lost lease: leaving its object alone");
                    drop(inner);
                    self.set_phase(Phase::Released);
                    return Ok(());
                }
                Phase::Held(h) => {
                    // A release is an update like any other: it needs `validity_window` left,
                    // or its DELETE (retried by the client, or delayed) could land after a
                    // successor took the key over and delete the successor's lease.
                    let valid_until = h.valid_until;
                    let left = valid_until.saturating_duration_since(now);
                    if left < self.shared.windows.validity_window {
                        tracing::warn!(owner_id = %self.shared.owner, left = ?left,
                            "releasing with less than validity_window left: leaving the lease \
                             object to expire");
                        drop(inner);
                        self.set_phase(Phase::Released);
                        return Ok(());
                    }
                    valid_until
                }
            }
        };
        // Invariant: the lease stops being valid *before* the delete is sent. Once the delete
        // lands, observers see the lease Missing and may collect; an owner still believing its
        // lease (answer pending, or lost) would then race the GC. Released is final either way:
        // a failed delete leaves an object that simply expires on the store clock.
        self.set_phase(Phase::Released);
        let path = self.shared.path.clone();
        let left = deadline.saturating_duration_since(self.shared.clock.now());
        // Abandoned (client retries stop) once the validity it was sent under runs out.
        let outcome = tokio::select! {
            biased;
            r = self.shared.bank.store().delete(&path) => Some(r),
            () = self.shared.clock.sleep(left) => None,
        };
        match outcome {
            Some(Ok(()) | Err(object_store::Error::NotFound { .. })) => {
                tracing::info!(owner_id = %self.shared.owner, "lease released");
                Ok(())
            }
            Some(Err(e)) => Err(Error::store("delete", &path, e)),
            None => {
                tracing::warn!(owner_id = %self.shared.owner,
                    "release abandoned: the delete outlasted the validity; the lease object \
                     expires on the store clock");
                Ok(())
            }
        }
    }

    // ---- internals -------------------------------------------------------------------------

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
        swift: &crate::swift::SwiftStore,
        held: &Held,
        path: &Path,
    ) -> Result<Instant> {
        let head_sent = self.shared.clock.now();
        let head = match swift.head_swift(path).await {
            Ok(h) => h,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(self.mark_lost("lease object is gone (deleted or expired)".to_owned()))
            }
            Err(e) => return Err(Error::store("head", path, e)),
        };
        if head.meta.e_tag != held.e_tag {
            // Changed since our last write: ours only if it carries one of our tokens.
            if let Reconciled::Adopted(valid_until) = self.reconcile(held).await? {
                return Ok(valid_until);
            }
        }
        let generation = held.generation + 1;
        let token = new_token();
        let body = self.body(generation, &token)?;
        // The HEAD may have hung or been retried past the validity: a lease that ran out
        // meanwhile is Lost, and its object must not be refreshed for observers now.
        self.held_for_write()?;
        let t_send = self.shared.clock.now();
        // On a grid when the HEAD told the server's time: consecutive renewals then send the
        // same X-Delete-At, and the object server leaves its expirer queue alone.
        let ttl = swift_ttl_secs(self.shared.windows);
        let put = match head.date {
            Some(date) => {
                let since_head = t_send.saturating_duration_since(head_sent);
                let at = swift_delete_at(date, since_head, ttl);
                swift.put_with_delete_at(path, body, at).await
            }
            None => swift.put_with_delete_after(path, body, ttl, false).await,
        };
        match put {
            Ok(w) => self.commit(t_send, w.e_tag, None, generation, token),
            Err(e) => {
                self.remember_pending(&token, generation, t_send);
                Err(Error::store("put", path, e))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().expect("lease state poisoned")
    }

    fn lost_error(&self, reason: &str) -> Error {
        Error::LeaseLost {
            owner_id: self.shared.owner.to_string(),
            reason: reason.to_owned(),
        }
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
            acquired_at: self.shared.acquired_at,
            renewed_at: self.shared.clock.system_now().into(),
            generation,
            token: token.to_owned(),
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| Error::Corrupt {
            path: self.shared.path.to_string(),
            reason: format!("cannot encode lease record: {e}"),
        })?;
        Ok(PutPayload::from(bytes))
    }

    fn set_phase(&self, phase: Phase) {
        let state = phase_state(&phase);
        self.lock().phase = phase;
        self.shared.state_tx.send_replace(state);
    }

    fn mark_lost(&self, reason: String) -> Error {
        {
            let inner = self.lock();
            if let Phase::Lost(existing) = &inner.phase {
                return self.lost_error(existing);
            }
        }
        tracing::error!(owner_id = %self.shared.owner, reason = %reason, "lease lost");
        self.set_phase(Phase::Lost(reason.clone()));
        self.lost_error(&reason)
    }

    /// Mark a held lease whose validity has run out as Lost. Returns true if it did.
    fn expire_if_due(&self, inner: &mut Inner, now: Instant) -> bool {
        if let Phase::Held(h) = &inner.phase {
            if now >= h.valid_until {
                let reason = "validity ran out before a renewal succeeded".to_owned();
                tracing::error!(owner_id = %self.shared.owner, reason = %reason, "lease lost");
                inner.phase = Phase::Lost(reason);
                self.shared.state_tx.send_replace(phase_state(&inner.phase));
                return true;
            }
        }
        false
    }

    /// The held state, or the final error if the lease is no longer held.
    fn held_for_write(&self) -> Result<Held> {
        let now = self.shared.clock.now();
        let mut inner = self.lock();
        self.expire_if_due(&mut inner, now);
        match &inner.phase {
            Phase::Held(h) => Ok(h.clone()),
            Phase::Lost(reason) => Err(self.lost_error(reason)),
            Phase::Released => Err(self.lost_error("released")),
        }
    }

    fn remember_pending(&self, token: &str, generation: u64, t_send: Instant) {
        let mut inner = self.lock();
        if inner.pending.len() >= MAX_PENDING {
            inner.pending.remove(0);
        }
        inner.pending.push(Pending {
            token: token.to_owned(),
            generation,
            t_send,
        });
    }

    /// Record a successful write sent at `t_send`.
    ///
    /// Invariant: a write counts only if its answer arrived while the lease was still valid on
    /// the owner's clock. Once the validity ran out, a GC may have judged the owner dead, so a
    /// late success must not revive the lease.
    fn commit(
        &self,
        t_send: Instant,
        e_tag: Option<String>,
        version: Option<String>,
        generation: u64,
        token: String,
    ) -> Result<Instant> {
        let now = self.shared.clock.now();
        let mut inner = self.lock();
        if let Phase::Held(h) = &inner.phase {
            if now >= h.valid_until {
                drop(inner);
                return Err(self.mark_lost(
                    "renewal answered after the validity had run out; a GC may have acted"
                        .to_owned(),
                ));
            }
        } else if generation > 1 {
            let reason = match &inner.phase {
                Phase::Lost(r) => r.clone(),
                _ => "released".to_owned(),
            };
            return Err(self.lost_error(&reason));
        }
        let valid_until = t_send + self.shared.windows.expire_window;
        if now >= valid_until {
            drop(inner);
            return Err(self.mark_lost("the write took longer than the expire window".to_owned()));
        }
        inner.pending.clear();
        inner.phase = Phase::Held(Held {
            e_tag,
            version,
            generation,
            token,
            valid_until,
        });
        self.shared
            .state_tx
            .send_replace(LeaseState::Held { valid_until });
        Ok(valid_until)
    }

    /// Read the lease back. If it carries the token of our last committed write, nothing
    /// changed but its ETag; if it carries a pending token, that write landed: adopt it. Any
    /// other content, or no object, means the lease is Lost.
    async fn reconcile(&self, held: &Held) -> Result<Reconciled> {
        let read = read_lease_at(&self.shared.bank, &self.shared.path).await;
        let (record, meta) = match read {
            Ok(Some(found)) => found,
            Ok(None) => return Err(self.mark_lost("lease object is gone (deleted)".to_owned())),
            Err(e @ Error::Corrupt { .. }) => {
                return Err(self.mark_lost(format!("lease object was replaced: {e}")))
            }
            Err(e) => return Err(e),
        };
        if record.token == held.token {
            let mut inner = self.lock();
            if let Phase::Held(h) = &mut inner.phase {
                h.e_tag = meta.e_tag;
                h.version = meta.version;
            }
            return Ok(Reconciled::Unchanged);
        }
        let pending = self
            .lock()
            .pending
            .iter()
            .find(|p| p.token == record.token)
            .cloned();
        match pending {
            Some(p) => {
                tracing::info!(owner_id = %self.shared.owner, generation = p.generation,
                    "an earlier renewal whose answer was lost did land; adopting it");
                self.commit(p.t_send, meta.e_tag, meta.version, p.generation, p.token)
                    .map(Reconciled::Adopted)
            }
            None => Err(self.mark_lost(format!(
                "lease object was replaced by another writer (generation `{}`, host `{}`)",
                record.generation, record.host
            ))),
        }
    }
}

/// What reading the lease back found.
enum Reconciled {
    /// Our last committed write, under a new ETag.
    Unchanged,
    /// A pending write of ours landed; the lease is valid until the instant given.
    Adopted(Instant),
}

fn phase_state(phase: &Phase) -> LeaseState {
    match phase {
        Phase::Held(h) => LeaseState::Held {
            valid_until: h.valid_until,
        },
        Phase::Lost(reason) => LeaseState::Lost {
            reason: reason.clone(),
        },
        Phase::Released => LeaseState::Released,
    }
}

/// Extra lifetime of a Swift lease object beyond its expire window before Swift deletes it by
/// itself. Observers judge expiry from `last_modified` long before; the server-side deletion is
/// a backstop that removes dead owners' leases even when no GC runs. The slack keeps the lease
/// readable (Expired, with a known `since`) through a typical GC grace, and absorbs
/// `X-Delete-At`'s whole-second rounding (a TTL of N s lasts somewhere in (N−1, N]).
pub const SWIFT_TTL_SLACK: Duration = Duration::from_secs(60);

/// `X-Delete-After` for a lease with these windows: never before the owner's own expiry.
fn swift_ttl_secs(windows: LeaseWindows) -> u64 {
    (windows.expire_window + SWIFT_TTL_SLACK).as_secs() + 1
}

/// `X-Delete-At` steps: renewals within one step send the same value.
pub const SWIFT_DELETE_AT_GRID_SECS: u64 = 60;

/// An `X-Delete-At` no earlier than `ttl_secs` after the server's current time, rounded up to
/// the grid. The server's time is estimated from the HEAD's `Date` (whole seconds, truncated: +1)
/// plus what passed since the HEAD was sent (+1 for its fraction), so it never falls short of
/// what `X-Delete-After: ttl_secs` would have given; it lasts at most one grid step longer.
fn swift_delete_at(date: DateTime<Utc>, since_head: Duration, ttl_secs: u64) -> u64 {
    let server_now = u64::try_from(date.timestamp()).unwrap_or(0) + 1 + since_head.as_secs() + 1;
    (server_now + ttl_secs).div_ceil(SWIFT_DELETE_AT_GRID_SECS) * SWIFT_DELETE_AT_GRID_SECS
}

fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
