//! Named leases and locks on any key: everything the ancestor systems offered, on object storage.
//!
//! A lock lives in one object, `locks/<namespace>/<key>`, holding a JSON [`LockRecord`]: the
//! holder (an owner string), its payload, the duration it is held for, a fencing counter and a
//! per-write token. Three families of operations share it:
//!
//! - **named locks** ([`Lock`]): acquire (free, expired, or already ours), acquire-any over a
//!   list of keys, heartbeat, release, get-current, background heartbeats ([`Heartbeat`]), and
//!   answers from memory — [`Lock::is_owned`], [`Lock::am_owner`], [`Lock::expires`],
//!   [`Lock::seconds_left`], [`Lock::seconds_to_renew`] — that keep working while the store is
//!   unreachable;
//! - **claims in namespaces** (juju style, [`Locks::claim`], [`Locks::extend`], [`Locks::expire`],
//!   [`Locks::snapshot`]);
//! - **blocking acquisition** with a fair first-come-first-served ticket queue
//!   ([`Lock::acquire_blocking`], [`Blocking`]), and **fencing tokens** with a guarded write to
//!   another object ([`fence::Fence`], [`fence::guarded_put`]).
//!
//! # Guarantees
//!
//! - **Expiry is judged on the store's clock.** Anyone deciding whether a lock has expired compares
//!   the object's `last_modified` (stamped by the store) plus its declared duration with the
//!   store's time ([`crate::Bank::store_time`]), and a skew margin ([`Locks::with_skew_margin`],
//!   at least the store's timestamp resolution: 1 s on S3) is deducted in the holder's favour.
//!   Nobody's wall clock is used.
//! - **The holder counts from the send time.** A holder's own view is
//!   `valid_until = t_send + duration`, where `t_send` is its monotonic instant taken *before*
//!   the write was sent; a slow request shortens the hold, never lengthens it. A heartbeat counts
//!   only if its answer arrived while the hold was still valid. Hence: **a successful acquire,
//!   claim or extend holds for at least the requested duration from the start of the call.**
//! - **One holder at a time.** Every change of holder is a conditional write: create-if-absent
//!   for a key never used, If-Match on the ETag that was judged for a free or expired one. Of two
//!   racing acquirers exactly one wins.
//! - **A heartbeat fails if anyone else held the key in between**, even if they have released it
//!   since: the heartbeat is an If-Match on the ETag of the holder's own last write, and a
//!   conflict is read back and judged by token and fencing counter.
//! - **Ambiguity is resolved by reading back.** Every write carries a random token; a write whose
//!   answer was an error, AlreadyExists or Precondition is read back and recognised by it.
//! - **Fencing tokens only grow.** The counter lives in the lock object, which is never deleted
//!   (release and expire write a *free* record that keeps it); every acquisition writes
//!   `old + 1` with If-Match. [`fence::guarded_put`] refuses a write carrying a lower token than one the
//!   guarded object has already seen.
//! - **Nothing is faked.** Locks need create-if-absent and If-Match both enforced, and atomic
//!   under races; a bank that cannot give that (Swift, stores that ignore a condition) is refused with an
//!   [`Error::Unsupported`] that says why (see [`support`]).
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use banklease::Bank;
//! use banklease::clock::{Clock, SystemClock};
//! use banklease::lock::fence::guarded_put;
//! use banklease::lock::{Locks, Term};
//! use object_store::PutPayload;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> banklease::Result<()> {
//! let bank = Bank::open("memory://")?;
//! let clock: Arc<dyn Clock> = Arc::new(SystemClock);
//! let locks = Locks::new(&bank, "jobs", clock)?.with_skew_margin(Duration::from_millis(100));
//!
//! // Acquire: the key is free, so worker-1 gets it, with a payload anyone can read.
//! let lock = locks
//!     .acquire("nightly", "worker-1", Term::For(Duration::from_secs(30)), Some("host-a:4000"))
//!     .await?;
//! assert!(lock.am_owner()); // answered from memory, no request
//! let fence = lock.fence().expect("held");
//!
//! // Someone else cannot, and sees who holds it.
//! let err = locks
//!     .acquire("nightly", "worker-2", Term::For(Duration::from_secs(30)), None)
//!     .await
//!     .unwrap_err();
//! assert!(matches!(err, banklease::Error::Unavailable { .. }));
//! let current = locks.current("nightly").await?.expect("held");
//! assert_eq!(current.holder, "worker-1");
//! assert_eq!(current.payload.as_deref(), Some("host-a:4000"));
//!
//! // Writes to other objects can be fenced with the lock's token.
//! let report = bank.path(&["reports", "nightly.json"]);
//! guarded_put(&bank, &fence, &report, PutPayload::from_static(b"{}")).await?;
//!
//! lock.heartbeat().await?; // extend by the same duration
//! lock.release().await?;   // the key is free again; its fencing counter stays
//! assert!(!lock.am_owner());
//!
//! // Juju-style claims: a claim fails while the lease is held, even by the same holder.
//! let grant = locks.claim("leader", "unit-0", Duration::from_secs(10)).await?;
//! assert!(locks.claim("leader", "unit-0", Duration::from_secs(10)).await.is_err());
//! locks.extend("leader", "unit-0", Duration::from_secs(20)).await?;
//! assert!(grant.fence.value >= 1);
//! # Ok(())
//! # }
//! ```

mod claim;
pub mod fence;
mod heartbeat;
mod info;
pub(crate) mod name;
mod named;
mod ops;
pub mod process;
mod queue;
mod record;
pub mod session;
pub mod support;
mod take;
mod tickets;

use std::time::{Duration, SystemTime};

use object_store::path::Path;

use crate::bank::Bank;
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::id::{validate_id, OwnerId};
use crate::paths::{Key, Prefix};

pub use claim::{Grant, Snapshot};
pub use heartbeat::{Heartbeat, HeartbeatFailure};
pub use info::{Acquired, Current, LockInfo, LockState, Order, Release};
pub use name::{LockHolder, LockName, LockNames};
pub use named::Lock;
pub use queue::{Blocking, Wait, QUEUE_LOOK, WATCH_POLL};
pub use record::MAX_DURATION;
pub use record::{Judged, LockRecord, MAX_PAYLOAD_BYTES};
pub use support::ensure_supported;
pub use tickets::Waiter;

/// The namespace used when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The default skew margin, as `[lease] skew_margin`.
pub const DEFAULT_SKEW_MARGIN: Duration = Duration::from_secs(2);
/// Suffix of a key's wait-queue directory (`locks/<ns>/<key>.queue/<ticket>`); keys may not
/// end with it.
pub use crate::paths::QUEUE_SUFFIX;

/// How long a lock is to be held: a duration, or until an end time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    /// Held for this long (from the send time of the write, on the holder's clock; from the
    /// object's `last_modified`, on the store's).
    For(Duration),
    /// Held until this wall-clock time of the caller, turned into a duration once, at the start
    /// of the call, with the lock's clock ([`crate::clock::Clock::system_now`]).
    Until(SystemTime),
}

impl Term {
    fn resolve(self, locks: &Locks, key: &str) -> Result<Duration> {
        let bad = |detail: String| Error::InvalidTerm {
            key: locks.name(key),
            detail,
        };
        let duration = match self {
            Term::For(d) => d,
            Term::Until(end) => end
                .duration_since(locks.clock.system_now())
                .map_err(|_| bad("the end time is in the past".to_owned()))?,
        };
        if duration.is_zero() {
            return Err(bad("the duration is zero".to_owned()));
        }
        if duration > record::MAX_DURATION {
            return Err(bad(format!(
                "the duration `{duration:?}` exceeds {:?}",
                record::MAX_DURATION
            )));
        }
        Ok(duration)
    }
}

/// The locks of one namespace in one bank. Cheap to clone.
///
/// Every operation first checks, once per store, that the bank can keep locks
/// ([`ensure_supported`]).
#[derive(Debug, Clone)]
pub struct Locks {
    bank: Bank,
    namespace: String,
    clock: SharedClock,
    margin: Duration,
}

impl Locks {
    /// The locks of `namespace` in `bank`, timed by `clock` (the holder's monotonic clock; also
    /// carries readings of the store's clock forward). No request is made.
    pub fn new(bank: &Bank, namespace: &str, clock: SharedClock) -> Result<Self> {
        validate_id("namespace", namespace)?;
        Ok(Self {
            bank: bank.clone(),
            namespace: namespace.to_owned(),
            clock,
            margin: DEFAULT_SKEW_MARGIN,
        })
    }

    /// Set the skew margin deducted, in the holder's favour, when judging expiry on the store's
    /// clock. It must cover the store's timestamp resolution (1 s on S3) and any drift of the
    /// store's clock during a lock's duration.
    pub fn with_skew_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The bank.
    pub fn bank(&self) -> &Bank {
        &self.bank
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The skew margin.
    pub fn skew_margin(&self) -> Duration {
        self.margin
    }

    /// The name of `key`'s lock, `<namespace>/<key>` as locks are named in records and
    /// messages; fails with [`Error::InvalidId`] when the key is not valid (see
    /// [`Locks::validate_key`]).
    pub fn full_key(&self, key: &str) -> Result<LockName> {
        Ok(LockName::new(&self.namespace, key)?)
    }

    /// [`Locks::full_key`] of a key the caller has already validated.
    pub(crate) fn name(&self, key: &str) -> LockName {
        LockName::of_valid(&self.namespace, key)
    }

    /// `locks/<namespace>/<key>` (the key must be valid: see [`Locks::validate_key`]).
    pub fn lock_path(&self, key: &str) -> Path {
        Key::Lock {
            namespace: self.namespace.clone(),
            key: key.to_owned(),
        }
        .path(&self.bank)
    }

    /// The lock object of `key`, once the key is valid and the bank serves locks: what every
    /// stateless operation checks before it reads.
    pub(crate) async fn checked_path(&self, key: &str) -> Result<Path> {
        Self::validate_key(key)?;
        support::ensure_supported(&self.bank).await?;
        Ok(self.lock_path(key))
    }

    /// `locks/<namespace>/` — every lock of the namespace lies directly under it.
    pub fn namespace_path(&self) -> Path {
        Prefix::Locks(&self.namespace).path(&self.bank)
    }

    /// `locks/<namespace>/<key>.queue/` — the key's wait queue.
    pub fn queue_path(&self, key: &str) -> Path {
        Prefix::Queue {
            namespace: &self.namespace,
            key,
        }
        .path(&self.bank)
    }

    /// `locks/<namespace>/<key>.queue/<ticket>`: one waiter's ticket.
    pub(crate) fn ticket_path(&self, key: &str, ticket: &str) -> Path {
        Key::Ticket {
            namespace: self.namespace.clone(),
            key: key.to_owned(),
            ticket: ticket.to_owned(),
        }
        .path(&self.bank)
    }

    /// Check a key: `/`-separated segments such as `jobs/nightly` (see
    /// [`crate::paths::validate_lock_key`]).
    pub fn validate_key(key: &str) -> Result<()> {
        Ok(crate::paths::validate_lock_key(key)?)
    }

    fn check_payload(&self, key: &str, payload: Option<&str>) -> Result<()> {
        match payload {
            Some(p) if p.len() > MAX_PAYLOAD_BYTES => Err(Error::PayloadTooLarge {
                key: self.name(key),
                size: p.len(),
                limit: MAX_PAYLOAD_BYTES,
            }),
            _ => Ok(()),
        }
    }

    /// A handle on `key` for `owner`: no request is made until it is used.
    pub fn lock(&self, key: &str, owner: &str) -> Result<Lock> {
        Self::validate_key(key)?;
        let owner = OwnerId::parse(owner)?;
        Ok(Lock::new(self.clone(), key, owner))
    }

    /// Acquire `key` for `owner` (see [`Lock::acquire`]) and return the handle.
    pub async fn acquire(
        &self,
        key: &str,
        owner: &str,
        term: Term,
        payload: Option<&str>,
    ) -> Result<Lock> {
        let lock = self.lock(key, owner)?;
        lock.acquire(term, payload).await?;
        Ok(lock)
    }

    /// Acquire `key` for `owner`, waiting as `blocking` says (see [`Lock::acquire_blocking`]).
    pub async fn acquire_blocking(
        &self,
        key: &str,
        owner: &str,
        term: Term,
        payload: Option<&str>,
        blocking: &Blocking,
    ) -> Result<Lock> {
        let lock = self.lock(key, owner)?;
        lock.acquire_blocking(term, payload, blocking).await?;
        Ok(lock)
    }
}
