//! Named locks: acquire, acquire-any, heartbeat, release, get-current, and the holder's answers
//! from memory.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::PutMode;

use super::fence::Fence;
use super::queue;
use super::record::{
    self, judge, new_token, read_record, update_of, write_record, Judged, LockRecord, StoreClock,
    Written,
};
use super::{support, Locks, Term};
use crate::clock::Jitter;
use crate::error::{Error, Result};
use crate::id::local_hostname;

/// Rounds of read-judge-write when the object keeps changing under us.
const CONTENTION_ROUNDS: usize = 4;
/// Pending (unanswered) heartbeats remembered.
const MAX_PENDING: usize = 16;

/// What a successful acquisition gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The fencing token of this holding: greater than every earlier holder's.
    pub fence: Fence,
    /// Until when the lock is held, on the holder's monotonic clock (send time + duration).
    pub valid_until: Instant,
}

/// The current holder of a key, as read from the store and judged on its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// `<namespace>/<key>`.
    pub key: String,
    /// The holder.
    pub holder: String,
    /// The holder's payload.
    pub payload: Option<String>,
    /// Time left on the store's clock (skew margin deducted).
    pub remaining: Duration,
    /// The fencing token of the holding.
    pub fence: u64,
}

/// The state of a lock object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// Nobody holds it.
    Free,
    /// Held.
    Held {
        /// By whom.
        holder: String,
        /// For at least this long more, on the store's clock.
        remaining: Duration,
    },
    /// The holding ran out and nobody has taken it since.
    Expired {
        /// The last holder.
        holder: String,
        /// For at least this long, on the store's clock.
        since: Duration,
    },
}

impl LockState {
    /// `free`, `held` or `expired`.
    pub fn name(&self) -> &'static str {
        match self {
            LockState::Free => "free",
            LockState::Held { .. } => "held",
            LockState::Expired { .. } => "expired",
        }
    }

    /// The holder, if held.
    pub fn holder(&self) -> Option<&str> {
        match self {
            LockState::Held { holder, .. } => Some(holder),
            _ => None,
        }
    }

    /// Time left, zero unless held.
    pub fn remaining(&self) -> Duration {
        match self {
            LockState::Held { remaining, .. } => *remaining,
            _ => Duration::ZERO,
        }
    }
}

/// Everything about one lock object, for `show` and `list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The key (without namespace).
    pub key: String,
    /// Free, held or expired, on the store's clock.
    pub state: LockState,
    /// The payload of the current (or last) holding.
    pub payload: Option<String>,
    /// The fencing counter.
    pub fence: u64,
    /// The declared duration of the last write.
    pub duration: Duration,
    /// Stamped by the store; expiry is judged from it.
    pub last_modified: DateTime<Utc>,
    /// The whole record.
    pub record: LockRecord,
}

/// What a stateless release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The owner held the key; it is free now.
    Released,
    /// Nobody held the key (free, expired or never used); nothing was written.
    Free,
}

/// The order in which [`Locks::acquire_any`] tries its keys.
#[derive(Debug, Clone)]
pub enum Order {
    /// As given.
    AsGiven,
    /// Shuffled with this (seeded) jitter source, so that many callers spread over the keys.
    Random(Jitter),
}

/// How a key is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Free, expired, or already held by the same owner (then replaced).
    Acquire,
    /// Free or expired only: held by anyone, even the same holder, is unavailable.
    Claim,
}

pub(crate) struct Spec<'a> {
    pub owner: &'a str,
    pub duration: Duration,
    pub payload: Option<&'a str>,
    pub mode: Mode,
    /// Our ticket in the key's wait queue, when taking the lock from the head of the queue.
    pub ticket: Option<&'a str>,
}

/// A write that took the lock.
#[derive(Debug)]
pub(crate) struct Granted {
    pub record: LockRecord,
    pub e_tag: Option<String>,
    pub version: Option<String>,
    pub t_send: Instant,
}

pub(crate) fn new_record(
    locks: &Locks,
    key: &str,
    holder: Option<&str>,
    payload: Option<&str>,
    duration: Duration,
    fence: u64,
    generation: u64,
) -> LockRecord {
    LockRecord {
        format: record::LOCK_FORMAT,
        key: locks.full_key(key),
        holder: holder.map(str::to_owned),
        payload: payload.map(str::to_owned),
        // Rounded up: observers must never see a shorter duration than the holder uses.
        duration_ms: u64::try_from(duration.as_micros().div_ceil(1000)).unwrap_or(u64::MAX),
        fence,
        generation,
        token: new_token(),
        host: local_hostname(),
        pid: std::process::id(),
        written_at: locks.clock.system_now().into(),
    }
}

/// A lazily read store clock, read at most once per operation.
pub(crate) struct LazyStoreClock(Option<StoreClock>);

impl LazyStoreClock {
    pub(crate) fn new() -> Self {
        Self(None)
    }

    pub(crate) async fn get(&mut self, locks: &Locks) -> Result<StoreClock> {
        if let Some(sc) = self.0 {
            return Ok(sc);
        }
        let sc = StoreClock::read(&locks.bank, &locks.clock).await?;
        self.0 = Some(sc);
        Ok(sc)
    }

    /// The store's time now, at least.
    /// The store's time, at least, at monotonic instant `sent`: the instant taken before the
    /// read being judged was sent (a read is judged at the instant before it was sent).
    pub(crate) async fn lower_at(&mut self, locks: &Locks, sent: Instant) -> Result<DateTime<Utc>> {
        let sc = self.get(locks).await?;
        Ok(sc.lower(sent))
    }
}

fn unavailable(locks: &Locks, key: &str, holder: &str, remaining: Duration) -> Error {
    Error::Unavailable {
        key: locks.full_key(key),
        holder: holder.to_owned(),
        remaining,
    }
}

/// Take `key`: read it, judge it, and write a new holding with create-if-absent (never used) or
/// If-Match on the ETag judged (free, expired, or ours to replace).
pub(crate) async fn take(locks: &Locks, key: &str, spec: &Spec<'_>) -> Result<Granted> {
    support::ensure_supported(&locks.bank).await?;
    locks.check_payload(key, spec.payload)?;
    let path = locks.lock_path(key);
    let mut sc = LazyStoreClock::new();
    for _ in 0..CONTENTION_ROUNDS {
        let sent = locks.clock.now();
        let current = read_record(&locks.bank, &path).await?;
        // `replacing_own`: the owner's own live holding, replaced by a new acquisition. Anything
        // else taken here is free or expired, and goes to the first live waiter if there is one.
        let (mode, fence, replacing_own) = match &current {
            None => (PutMode::Create, 1, false),
            Some((rec, meta)) => {
                let state = match &rec.holder {
                    None => Judged::Free,
                    Some(_) => judge(
                        rec,
                        meta.last_modified,
                        sc.lower_at(locks, sent).await?,
                        locks.margin,
                    ),
                };
                let replacing_own = match (state, &rec.holder) {
                    (Judged::Held { .. }, Some(h))
                        if h == spec.owner && spec.mode == Mode::Acquire =>
                    {
                        true
                    }
                    (Judged::Held { remaining }, Some(h)) => {
                        return Err(unavailable(locks, key, h, remaining))
                    }
                    _ => false,
                };
                (update_of(meta), rec.fence.saturating_add(1), replacing_own)
            }
        };
        if !replacing_own {
            // Fairness: a free key goes to the first live waiter, if any.
            if let Some(waiter) = queue::first_live(locks, key, spec.ticket, &mut sc).await? {
                return Err(unavailable(
                    locks,
                    key,
                    &format!("{} (first in the wait queue)", waiter.owner),
                    Duration::ZERO,
                ));
            }
        }
        let record = new_record(
            locks,
            key,
            Some(spec.owner),
            spec.payload,
            spec.duration,
            fence,
            1,
        );
        match write_record(&locks.bank, &locks.clock, &path, &record, mode).await? {
            Written::Ours {
                e_tag,
                version,
                t_send,
                ..
            } => {
                tracing::debug!(key = %record.key, owner = spec.owner, fence, "lock taken");
                return Ok(Granted {
                    record,
                    e_tag,
                    version,
                    t_send,
                });
            }
            Written::Conflict => continue,
        }
    }
    // Still changing after several rounds: somebody else is busy with it.
    let holder = match read_record(&locks.bank, &path).await {
        Ok(Some((rec, _))) => rec.holder.unwrap_or_else(|| "(contended)".to_owned()),
        _ => "(contended)".to_owned(),
    };
    Err(unavailable(locks, key, &holder, Duration::ZERO))
}

impl Locks {
    /// Try `keys` in `order` and acquire the first one available. Fails with
    /// [`Error::Unavailable`] only if every key is held; if some key failed otherwise (a store
    /// error) and none could be acquired, that error is returned.
    pub async fn acquire_any(
        &self,
        keys: &[&str],
        owner: &str,
        term: Term,
        payload: Option<&str>,
        order: Order,
    ) -> Result<Lock> {
        let mut keys: Vec<&str> = keys.to_vec();
        if keys.is_empty() {
            return Err(Error::InvalidId {
                kind: "lock key",
                id: String::new(),
                reason: "no key was given",
            });
        }
        if let Order::Random(jitter) = &order {
            shuffle(&mut keys, jitter);
        }
        let mut soonest: Option<(String, Duration)> = None;
        let mut other_error = None;
        for key in &keys {
            match self.acquire(key, owner, term, payload).await {
                Ok(lock) => return Ok(lock),
                Err(Error::Unavailable {
                    holder, remaining, ..
                }) => {
                    if soonest.as_ref().is_none_or(|(_, r)| remaining < *r) {
                        soonest = Some((holder, remaining));
                    }
                }
                Err(e) => {
                    tracing::warn!(key = %self.full_key(key), error = %e, "acquire-any: key failed");
                    other_error = Some(e);
                }
            }
        }
        if let Some(e) = other_error {
            return Err(e);
        }
        let (holder, remaining) = soonest.expect("every key was unavailable");
        let all: Vec<String> = keys.iter().map(|k| self.full_key(k)).collect();
        Err(Error::Unavailable {
            key: all.join(","),
            holder,
            remaining,
        })
    }

    /// Release `key` if `owner` holds it, without a handle (the CLI's release). Not an error when
    /// nobody holds the key; [`Error::Unavailable`] when someone else does.
    pub async fn release(&self, key: &str, owner: &str) -> Result<Release> {
        Self::validate_key(key)?;
        crate::id::validate_id("owner", owner)?;
        support::ensure_supported(&self.bank).await?;
        let path = self.lock_path(key);
        let mut sc = LazyStoreClock::new();
        for _ in 0..CONTENTION_ROUNDS {
            let sent = self.clock.now();
            let Some((rec, meta)) = read_record(&self.bank, &path).await? else {
                return Ok(Release::Free);
            };
            match rec.holder.as_deref() {
                None => return Ok(Release::Free),
                Some(h) if h == owner => {
                    let free = new_record(self, key, None, None, Duration::ZERO, rec.fence, 0);
                    match write_record(&self.bank, &self.clock, &path, &free, update_of(&meta))
                        .await?
                    {
                        Written::Ours { .. } => return Ok(Release::Released),
                        Written::Conflict => continue,
                    }
                }
                Some(h) => {
                    let now = sc.lower_at(self, sent).await?;
                    return match judge(&rec, meta.last_modified, now, self.margin) {
                        Judged::Held { remaining } => Err(unavailable(self, key, h, remaining)),
                        _ => Ok(Release::Free),
                    };
                }
            }
        }
        Err(unavailable(self, key, "(contended)", Duration::ZERO))
    }

    /// Who holds `key` now (store clock): `None` when it is free, expired or never used.
    pub async fn current(&self, key: &str) -> Result<Option<Current>> {
        let Some(info) = self.inspect(key).await? else {
            return Ok(None);
        };
        Ok(match info.state {
            LockState::Held { holder, remaining } => Some(Current {
                key: self.full_key(key),
                holder,
                payload: info.payload,
                remaining,
                fence: info.fence,
            }),
            _ => None,
        })
    }

    /// Everything about `key`'s lock object, judged on the store's clock; `None` if the key was
    /// never used.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>> {
        Self::validate_key(key)?;
        support::ensure_supported(&self.bank).await?;
        let sent = self.clock.now();
        let Some((rec, meta)) = read_record(&self.bank, &self.lock_path(key)).await? else {
            return Ok(None);
        };
        let mut sc = LazyStoreClock::new();
        let state = match &rec.holder {
            None => LockState::Free,
            Some(h) => {
                let now = sc.lower_at(self, sent).await?;
                match judge(&rec, meta.last_modified, now, self.margin) {
                    Judged::Held { remaining } => LockState::Held {
                        holder: h.clone(),
                        remaining,
                    },
                    Judged::Expired { since } => LockState::Expired {
                        holder: h.clone(),
                        since,
                    },
                    Judged::Free => LockState::Free,
                }
            }
        };
        Ok(Some(info_of(key, state, rec, meta.last_modified)))
    }
}

pub(crate) fn info_of(
    key: &str,
    state: LockState,
    rec: LockRecord,
    last_modified: DateTime<Utc>,
) -> LockInfo {
    LockInfo {
        key: key.to_owned(),
        state,
        payload: rec.payload.clone(),
        fence: rec.fence,
        duration: rec.duration(),
        last_modified,
        record: rec,
    }
}

/// Fisher–Yates with uniform draws from the jitter source.
fn shuffle<T>(items: &mut [T], jitter: &Jitter) {
    for i in (1..items.len()).rev() {
        // `shorten(base, 1.0)` is uniform in [0, base]: a uniform draw in [0, 1].
        let u = jitter.shorten(Duration::from_secs(1), 1.0).as_secs_f64();
        let j = ((u * (i + 1) as f64) as usize).min(i);
        items.swap(i, j);
    }
}

// ---- the handle ------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Held {
    e_tag: Option<String>,
    version: Option<String>,
    fence: u64,
    generation: u64,
    token: String,
    duration: Duration,
    payload: Option<String>,
    t_send: Instant,
    valid_until: Instant,
}

#[derive(Debug, Clone)]
enum Phase {
    Idle,
    Held(Held),
    Lost(String),
    Released,
}

/// Another holder, as seen by our last successful call.
#[derive(Debug, Clone)]
struct Seen {
    holder: String,
    payload: Option<String>,
    until: Instant,
}

#[derive(Debug, Clone)]
struct Pending {
    token: String,
    generation: u64,
    t_send: Instant,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    seen: Option<Seen>,
    pending: Vec<Pending>,
}

struct Inner {
    locks: Locks,
    key: String,
    owner: String,
    path: Path,
    state: Mutex<State>,
    /// Serialises the handle's writes; `state` is only held briefly, never across an await.
    op: tokio::sync::Mutex<()>,
}

/// A handle on one key for one owner. Cheap to clone; clones share state.
///
/// The handle remembers the outcome of its last successful call, so [`is_owned`](Self::is_owned),
/// [`am_owner`](Self::am_owner), [`expires`](Self::expires), [`seconds_left`](Self::seconds_left)
/// and [`seconds_to_renew`](Self::seconds_to_renew) make no request and keep answering while the
/// store is unreachable — conservatively: the holder's time runs from the send time of its last
/// successful write.
#[derive(Clone)]
pub struct Lock {
    inner: Arc<Inner>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.full_key())
            .field("owner", &self.inner.owner)
            .field("phase", &self.state().phase)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(locks: Locks, key: &str, owner: &str) -> Self {
        let path = locks.lock_path(key);
        Self {
            inner: Arc::new(Inner {
                locks,
                key: key.to_owned(),
                owner: owner.to_owned(),
                path,
                state: Mutex::new(State {
                    phase: Phase::Idle,
                    seen: None,
                    pending: Vec::new(),
                }),
                op: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The key (without namespace).
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// `<namespace>/<key>`.
    pub fn full_key(&self) -> String {
        self.inner.locks.full_key(&self.inner.key)
    }

    /// The owner this handle acts for.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The namespace's locks.
    pub fn locks(&self) -> &Locks {
        &self.inner.locks
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().expect("lock state poisoned")
    }

    fn now(&self) -> Instant {
        self.inner.locks.clock.now()
    }

    fn lost(&self, reason: impl Into<String>) -> Error {
        Error::LockLost {
            key: self.full_key(),
            owner: self.inner.owner.clone(),
            reason: reason.into(),
        }
    }

    fn mark_lost(&self, reason: String) -> Error {
        tracing::warn!(key = %self.full_key(), owner = %self.inner.owner, %reason, "lock lost");
        self.state().phase = Phase::Lost(reason.clone());
        self.lost(reason)
    }

    /// Acquire the key: succeeds when it is free, expired on the store's clock, or already held
    /// by this owner (the holding is then replaced, with a new fencing token). Fails with
    /// [`Error::Unavailable`] when another owner holds it — or when it is free but promised to
    /// the first waiter of its wait queue.
    pub async fn acquire(&self, term: Term, payload: Option<&str>) -> Result<Acquired> {
        let duration = term.resolve(&self.inner.locks, &self.inner.key)?;
        self.acquire_for(duration, payload, None).await
    }

    pub(crate) async fn acquire_for(
        &self,
        duration: Duration,
        payload: Option<&str>,
        ticket: Option<&str>,
    ) -> Result<Acquired> {
        let _op = self.inner.op.lock().await;
        let spec = Spec {
            owner: &self.inner.owner,
            duration,
            payload,
            mode: Mode::Acquire,
            ticket,
        };
        match take(&self.inner.locks, &self.inner.key, &spec).await {
            Ok(g) => Ok(self.hold(g, duration)),
            Err(Error::Unavailable {
                key,
                holder,
                remaining,
            }) => {
                let now = self.now();
                let mut state = self.state();
                if let Phase::Held(_) = state.phase {
                    state.phase = Phase::Lost(format!("the key is held by `{holder}`"));
                }
                state.seen = Some(Seen {
                    holder: holder.clone(),
                    payload: None,
                    until: now + remaining,
                });
                Err(Error::Unavailable {
                    key,
                    holder,
                    remaining,
                })
            }
            Err(e) => Err(e),
        }
    }

    fn hold(&self, g: Granted, duration: Duration) -> Acquired {
        let valid_until = g.t_send + duration;
        let fence = g.record.fence;
        let mut state = self.state();
        state.pending.clear();
        state.seen = None;
        state.phase = Phase::Held(Held {
            e_tag: g.e_tag,
            version: g.version,
            fence,
            generation: g.record.generation,
            token: g.record.token,
            duration,
            payload: g.record.payload,
            t_send: g.t_send,
            valid_until,
        });
        Acquired {
            fence: Fence {
                lock: self.full_key(),
                value: fence,
            },
            valid_until,
        }
    }

    /// The held state, or [`Error::LockLost`] if this handle does not hold the lock (any more).
    fn held(&self) -> Result<Held> {
        let now = self.now();
        let mut state = self.state();
        match &state.phase {
            Phase::Held(h) if now < h.valid_until => Ok(h.clone()),
            Phase::Held(_) => {
                let reason = "its time ran out before a heartbeat succeeded".to_owned();
                state.phase = Phase::Lost(reason.clone());
                Err(self.lost(reason))
            }
            Phase::Lost(reason) => Err(self.lost(reason.clone())),
            Phase::Released => Err(self.lost("released")),
            Phase::Idle => Err(self.lost("never acquired")),
        }
    }

    /// Extend the hold by its duration, counted from this heartbeat's send time. Fails with
    /// [`Error::LockLost`] (final for this holding) if the time ran out first, or if the object
    /// changed since our last write — another owner held the key in between, even if it has
    /// released it since; a store error is transient (try again while time remains).
    pub async fn heartbeat(&self) -> Result<Instant> {
        let _op = self.inner.op.lock().await;
        let mut held = self.held()?;
        let locks = &self.inner.locks;
        for _ in 0..CONTENTION_ROUNDS {
            let generation = held.generation + 1;
            let record = new_record(
                locks,
                &self.inner.key,
                Some(&self.inner.owner),
                held.payload.as_deref(),
                held.duration,
                held.fence,
                generation,
            );
            let mode = PutMode::Update(object_store::UpdateVersion {
                e_tag: held.e_tag.clone(),
                version: held.version.clone(),
            });
            let t_send = self.now();
            let written = write_record(&locks.bank, &locks.clock, &self.inner.path, &record, mode)
                .await
                .inspect_err(|_| {
                    // Unanswered: it may land (or have landed); recognise it when read back.
                    let mut state = self.state();
                    if state.pending.len() >= MAX_PENDING {
                        state.pending.remove(0);
                    }
                    state.pending.push(Pending {
                        token: record.token.clone(),
                        generation,
                        t_send,
                    });
                })?;
            match written {
                Written::Ours {
                    e_tag,
                    version,
                    t_send,
                    answered,
                } => {
                    return self.commit(
                        &held,
                        e_tag,
                        version,
                        generation,
                        record.token,
                        t_send,
                        answered,
                    )
                }
                Written::Conflict => match self.reconcile(&held).await? {
                    Reconciled::Adopted(valid_until) => return Ok(valid_until),
                    // Still our last write, under a new ETag: write again on it.
                    Reconciled::Unchanged(now_held) => held = now_held,
                },
            }
        }
        Err(Error::store(
            "put",
            &self.inner.path,
            object_store::Error::Precondition {
                path: self.inner.path.to_string(),
                source: "lock ETag keeps changing while its content stays ours; retry".into(),
            },
        ))
    }

    /// Record a successful heartbeat sent at `t_send` and answered at `answered`.
    ///
    /// It counts only if answered while the previous hold was still valid: afterwards someone
    /// may have judged the lock expired and taken it over.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        prev: &Held,
        e_tag: Option<String>,
        version: Option<String>,
        generation: u64,
        token: String,
        t_send: Instant,
        answered: Instant,
    ) -> Result<Instant> {
        if answered >= prev.valid_until {
            return Err(self.mark_lost(
                "the heartbeat was answered after the hold had run out; another owner may have \
                 taken the key"
                    .to_owned(),
            ));
        }
        let valid_until = t_send + prev.duration;
        let mut state = self.state();
        state.pending.clear();
        state.phase = Phase::Held(Held {
            e_tag,
            version,
            generation,
            token,
            t_send,
            valid_until,
            ..prev.clone()
        });
        Ok(valid_until)
    }

    /// Read the object back after a conflict: still our last write (new ETag), one of our pending
    /// heartbeats (adopt it), or anything else (lost).
    async fn reconcile(&self, held: &Held) -> Result<Reconciled> {
        let found = match read_record(&self.inner.locks.bank, &self.inner.path).await {
            Ok(found) => found,
            Err(e @ Error::Corrupt { .. }) => {
                return Err(self.mark_lost(format!("the lock object was replaced: {e}")))
            }
            Err(e) => return Err(e),
        };
        let Some((rec, meta)) = found else {
            return Err(self.mark_lost("the lock object is gone".to_owned()));
        };
        if rec.token == held.token {
            let mut now_held = held.clone();
            now_held.e_tag = meta.e_tag;
            now_held.version = meta.version;
            return Ok(Reconciled::Unchanged(now_held));
        }
        let pending = self
            .state()
            .pending
            .iter()
            .find(|p| p.token == rec.token)
            .cloned();
        if let Some(p) = pending {
            tracing::info!(key = %self.full_key(), generation = p.generation,
                "an earlier heartbeat whose answer was lost did land; adopting it");
            return self
                .commit(
                    held,
                    meta.e_tag,
                    meta.version,
                    p.generation,
                    p.token,
                    p.t_send,
                    self.now(),
                )
                .map(Reconciled::Adopted);
        }
        let reason = if rec.fence != held.fence {
            format!(
                "another owner held the key in between (fencing token `{}` -> `{}`, now {})",
                held.fence,
                rec.fence,
                match &rec.holder {
                    Some(h) => format!("held by `{h}`"),
                    None => "released".to_owned(),
                }
            )
        } else if rec.holder.is_none() {
            "the lock was released by someone else".to_owned()
        } else {
            format!(
                "the lock object was rewritten by another writer (holder `{}`)",
                rec.holder.as_deref().unwrap_or("-")
            )
        };
        Err(self.mark_lost(reason))
    }

    /// Release the lock: write a free record (keeping the fencing counter) with If-Match on our
    /// last write. Not an error when nobody holds the key; [`Error::Unavailable`] when someone
    /// else does.
    pub async fn release(&self) -> Result<()> {
        let _op = self.inner.op.lock().await;
        let phase = self.state().phase.clone();
        let locks = &self.inner.locks;
        let Phase::Held(mut held) = phase else {
            // Not ours (any more): report who holds it, touch nothing.
            return match locks.current(&self.inner.key).await? {
                Some(c) if c.holder != self.inner.owner => {
                    Err(unavailable(locks, &self.inner.key, &c.holder, c.remaining))
                }
                _ => {
                    self.state().phase = Phase::Released;
                    Ok(())
                }
            };
        };
        for _ in 0..CONTENTION_ROUNDS {
            let free = new_record(
                locks,
                &self.inner.key,
                None,
                None,
                Duration::ZERO,
                held.fence,
                held.generation + 1,
            );
            let mode = PutMode::Update(object_store::UpdateVersion {
                e_tag: held.e_tag.clone(),
                version: held.version.clone(),
            });
            match write_record(&locks.bank, &locks.clock, &self.inner.path, &free, mode).await? {
                Written::Ours { .. } => {
                    self.state().phase = Phase::Released;
                    tracing::debug!(key = %self.full_key(), "lock released");
                    return Ok(());
                }
                Written::Conflict => {}
            }
            // Changed since our last write: ours under a new ETag or a pending heartbeat
            // (release on top of it), or someone else's (then it is not ours to release).
            let Some((rec, meta)) = read_record(&locks.bank, &self.inner.path).await? else {
                self.state().phase = Phase::Released;
                return Ok(());
            };
            let ours = rec.token == held.token
                || self.state().pending.iter().any(|p| p.token == rec.token);
            if ours {
                held.e_tag = meta.e_tag;
                held.version = meta.version;
                held.generation = rec.generation;
                continue;
            }
            self.state().phase = Phase::Lost("another owner held the key".to_owned());
            return match locks.current(&self.inner.key).await? {
                Some(c) => Err(unavailable(locks, &self.inner.key, &c.holder, c.remaining)),
                None => Ok(()),
            };
        }
        Err(unavailable(
            locks,
            &self.inner.key,
            "(contended)",
            Duration::ZERO,
        ))
    }

    /// Get-current: who holds the key now (store clock), remembered for the answers from memory.
    pub async fn current(&self) -> Result<Option<Current>> {
        let current = self.inner.locks.current(&self.inner.key).await?;
        let now = self.now();
        let mut state = self.state();
        match &current {
            Some(c) if c.holder == self.inner.owner => {
                // Ours? Only if it is the holding this handle made.
                if let Phase::Held(h) = &state.phase {
                    if h.fence != c.fence {
                        state.phase = Phase::Lost(format!(
                            "the key was acquired again (fencing token `{}` -> `{}`)",
                            h.fence, c.fence
                        ));
                    }
                }
                state.seen = None;
            }
            Some(c) => {
                if let Phase::Held(_) = state.phase {
                    state.phase = Phase::Lost(format!("the key is held by `{}`", c.holder));
                }
                state.seen = Some(Seen {
                    holder: c.holder.clone(),
                    payload: c.payload.clone(),
                    until: now + c.remaining,
                });
            }
            None => state.seen = None,
        }
        Ok(current)
    }

    // ---- answers from memory (no request) ----------------------------------------------------

    /// True iff this handle holds the lock: acquired, not released or lost, and its time (from
    /// the send time of its last successful write) has not run out.
    pub fn am_owner(&self) -> bool {
        let now = self.now();
        matches!(&self.state().phase, Phase::Held(h) if now < h.valid_until)
    }

    /// True iff the key is held by anyone as far as our last successful call knows: by us
    /// ([`am_owner`](Self::am_owner)), or by another holder whose remaining time (as judged
    /// then) has not run out since.
    pub fn is_owned(&self) -> bool {
        let now = self.now();
        self.am_owner() || matches!(&self.state().seen, Some(s) if now < s.until)
    }

    /// When the current holding ends, on this host's monotonic clock: ours (send time +
    /// duration), else the other holder's as last seen; `None` when nothing is known.
    pub fn expires(&self) -> Option<Instant> {
        let state = self.state();
        match (&state.phase, &state.seen) {
            (Phase::Held(h), _) => Some(h.valid_until),
            (_, Some(s)) => Some(s.until),
            _ => None,
        }
    }

    /// Time until [`expires`](Self::expires), zero when passed or unknown.
    pub fn remaining(&self) -> Duration {
        self.expires()
            .map(|t| t.saturating_duration_since(self.now()))
            .unwrap_or_default()
    }

    /// [`remaining`](Self::remaining) in seconds.
    pub fn seconds_left(&self) -> f64 {
        self.remaining().as_secs_f64()
    }

    /// Seconds until our hold should be renewed — half its length after the send time of our last
    /// successful write; zero when overdue or when we do not hold the lock.
    pub fn seconds_to_renew(&self) -> f64 {
        self.renew_in().as_secs_f64()
    }

    /// Time until our hold should be renewed (see [`seconds_to_renew`](Self::seconds_to_renew)).
    pub fn renew_in(&self) -> Duration {
        let now = self.now();
        match &self.state().phase {
            Phase::Held(h) if now < h.valid_until => {
                (h.t_send + h.duration / 2).saturating_duration_since(now)
            }
            _ => Duration::ZERO,
        }
    }

    /// The fencing token of our holding, while we hold the lock.
    pub fn fence(&self) -> Option<Fence> {
        match &self.state().phase {
            Phase::Held(h) => Some(Fence {
                lock: self.full_key(),
                value: h.fence,
            }),
            _ => None,
        }
    }

    /// The holder as last known: us while we hold it, else the other holder last seen.
    pub fn holder(&self) -> Option<String> {
        if self.am_owner() {
            return Some(self.inner.owner.clone());
        }
        let now = self.now();
        self.state()
            .seen
            .as_ref()
            .filter(|s| now < s.until)
            .map(|s| s.holder.clone())
    }

    /// The payload as last known: ours while we hold it, else the other holder's last seen.
    pub fn payload(&self) -> Option<String> {
        let state = self.state();
        match (&state.phase, &state.seen) {
            (Phase::Held(h), _) => h.payload.clone(),
            (_, Some(s)) => s.payload.clone(),
            _ => None,
        }
    }

    /// The duration of our holding, while we hold the lock.
    pub fn duration(&self) -> Option<Duration> {
        match &self.state().phase {
            Phase::Held(h) => Some(h.duration),
            _ => None,
        }
    }

    /// Start a background heartbeat (see [`super::Heartbeat`]).
    pub fn spawn_heartbeat(
        &self,
        jitter: Jitter,
        jitter_fraction: f64,
    ) -> (
        super::Heartbeat,
        tokio::sync::mpsc::Receiver<super::HeartbeatFailure>,
    ) {
        super::keeper::spawn(self.clone(), jitter, jitter_fraction)
    }
}

enum Reconciled {
    Unchanged(Held),
    Adopted(Instant),
}
