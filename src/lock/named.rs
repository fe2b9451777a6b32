//! Named locks: the handle that acquires, heartbeats and releases one key, and the holder's
//! answers from memory.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::PutMode;

use super::fence::Fence;
use super::info::{Acquired, Current};
use super::process::{ProcessBinding, Processes};
use super::record::{read_found, read_record, record_write, LockRecord};
use super::take::{
    kept_by, new_record, take_seeing, unavailable, Granted, Mode, Spec, CONTENTION_ROUNDS,
};
use super::{LockHolder, LockName, Locks, Term};
use crate::error::{Error, Result};
use crate::id::OwnerId;
use crate::lease::{
    self, Cadence, Held, Holding, How, LeaseState, Phase, Renewable, Renewed, Words, Written,
};

// ---- the handle ------------------------------------------------------------------------------

static WORDS: Words = Words {
    what: "lock",
    ran_out: "its time ran out before a heartbeat succeeded",
    answered_late: "the heartbeat was answered after the hold had run out; another owner may have \
                    taken the key",
    too_slow: "the write took longer than the lock's duration",
    gone: "the lock object is gone",
    loss_is_error: true,
};

/// What a lock's holding keeps beside the core state.
#[derive(Debug, Clone)]
pub(crate) struct Holds {
    fence: u64,
    payload: Option<String>,
}

/// What a holding is bound to ([`Lock::bind_to_processes`]), stamped anew at each write.
#[derive(Debug, Clone)]
struct Bound {
    binding: ProcessBinding,
    handoff: bool,
}

/// Another holder, as seen by our last successful call.
#[derive(Debug, Clone)]
struct Seen {
    holder: String,
    payload: Option<String>,
    until: Instant,
    /// The processes its holding is bound to, when it names them.
    process: Option<ProcessBinding>,
}

struct Inner {
    locks: Locks,
    key: String,
    owner: String,
    path: Path,
    holding: Holding<Holds>,
    seen: Mutex<Option<Seen>>,
    /// COMMAND's process group and pid that our holdings are bound to, named in each
    /// heartbeat's record ([`Lock::bind_to_processes`]).
    bound: Mutex<Option<Bound>>,
    /// Serialises the handle's writes; no state is held across an await.
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
            .field("phase", &self.holding().phase())
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(locks: Locks, key: &str, owner: OwnerId) -> Self {
        let path = locks.lock_path(key);
        let (lost_key, lost_owner) = (locks.name(key), owner.clone());
        let holding = Holding::new(
            locks.clock.clone(),
            &WORDS,
            format!("key={} owner={owner}", locks.name(key)),
            "never acquired",
            move |reason| Error::LockLost {
                key: lost_key.clone(),
                owner: lost_owner.clone(),
                reason: reason.to_owned(),
            },
        );
        Self {
            inner: Arc::new(Inner {
                locks,
                key: key.to_owned(),
                owner: owner.to_string(),
                path,
                holding,
                seen: Mutex::new(None),
                bound: Mutex::new(None),
                op: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The key (without namespace).
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The lock's name, `<namespace>/<key>`.
    pub fn full_key(&self) -> LockName {
        self.inner.locks.name(&self.inner.key)
    }

    /// The owner this handle acts for.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The namespace's locks.
    pub fn locks(&self) -> &Locks {
        &self.inner.locks
    }

    /// Watch the holding: `Held { valid_until }` after each acquisition or heartbeat, then
    /// `Lost` or `Released`.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<LeaseState> {
        self.holding().subscribe()
    }

    pub(crate) fn holding(&self) -> &Holding<Holds> {
        &self.inner.holding
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Option<Seen>> {
        self.inner.seen.lock().expect("lock state poisoned")
    }

    fn now(&self) -> Instant {
        self.inner.locks.clock.now()
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
        let mut held_by = None;
        match take_seeing(&self.inner.locks, &self.inner.key, &spec, &mut held_by).await {
            Ok(g) => self.hold(g, duration),
            Err(Error::Unavailable {
                key,
                holder,
                remaining,
            }) => {
                let now = self.now();
                self.holding()
                    .lose_if_held(format!("the key is held by {}", holder.quoted()));
                *self.seen() = Some(Seen {
                    holder: holder.to_string(),
                    payload: None,
                    until: now + remaining,
                    process: held_by,
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

    fn hold(&self, g: Granted, duration: Duration) -> Result<Acquired> {
        let fence = g.record.fence;
        let (answered, t_send) = (g.landed.answered, g.landed.t_send);
        let written = g.landed.read_back(g.record.token);
        let extra = Holds {
            fence,
            payload: g.record.payload,
        };
        let valid_until = self
            .holding()
            .commit_new(answered, t_send, written, duration, extra)?;
        *self.seen() = None;
        Ok(Acquired {
            fence: Fence {
                lock: self.full_key(),
                value: fence,
            },
            valid_until,
        })
    }

    /// Extend the hold by its duration, counted from this heartbeat's send time. Fails with
    /// [`Error::LockLost`] (final for this holding) if the time ran out first, or if the object
    /// changed since our last write — another owner held the key in between, even if it has
    /// released it since; a store error is transient (try again while time remains).
    pub async fn heartbeat(&self) -> Result<Instant> {
        let _op = self.inner.op.lock().await;
        let mut held = self.holding().held()?;
        let locks = &self.inner.locks;
        let path = &self.inner.path;
        for _ in 0..CONTENTION_ROUNDS {
            let generation = held.generation + 1;
            let record = self.record_of(&held, generation);
            let write = record_write(&locks.bank, &locks.clock, path).deadline(held.valid_until);
            let renewed = lease::renew(
                self.holding(),
                &held,
                write,
                locks.clock.now(),
                generation,
                record.token.clone(),
                record.to_payload(path)?,
                &How::Put(update_of_held(&held)),
                || read_found(&locks.bank, path),
                |rec| replaced_by(&held, rec),
            )
            .await?;
            match renewed {
                Renewed::Until(valid_until) => return Ok(valid_until),
                // Still our last write, under a new ETag: write again on it.
                Renewed::Unchanged(now_held) => held = now_held,
            }
        }
        Err(Error::store(
            "put",
            path,
            object_store::Error::Precondition {
                path: path.to_string(),
                source: "lock ETag keeps changing while its content stays ours; retry".into(),
            },
        ))
    }

    /// Bind the holdings of this handle to this process and to `to`: COMMAND, its process
    /// group, and what names its whole tree (its cgroup, or the guard's word that it is gone).
    /// From the next heartbeat on, their records name them ([`ProcessBinding`], stamped anew at
    /// each write): only this holder then takes or releases the lock while they live, and a
    /// waiter on this host's kernel does not take it past its expiry while COMMAND's tree runs.
    /// With `to.handoff`, such a waiter also takes it as soon as the kernel proves them all
    /// gone, instead of at its expiry: only for a hold that must end with them and whose work
    /// stays in them, as `lock run`'s does. False where the kernel cannot name them (then
    /// nothing changes).
    pub fn bind_to_processes(&self, to: &Processes) -> bool {
        let binding = ProcessBinding::of_this_process(to);
        let bound = binding.is_some();
        *self.inner.bound.lock().expect("lock state poisoned") = binding.map(|binding| Bound {
            binding,
            handoff: to.handoff,
        });
        bound
    }

    /// The processes the holding that kept the key at our last refused acquisition is bound
    /// to, when it names them.
    pub(crate) fn holders_processes(&self) -> Option<ProcessBinding> {
        self.seen().as_ref().and_then(|s| s.process.clone())
    }

    fn record_of(&self, held: &Held<Holds>, generation: u64) -> LockRecord {
        let mut record = new_record(
            &self.inner.locks,
            &self.inner.key,
            Some(&self.inner.owner),
            held.extra.payload.as_deref(),
            held.length,
            held.extra.fence,
            generation,
        );
        let bound = self
            .inner
            .bound
            .lock()
            .expect("lock state poisoned")
            .clone();
        // Named until the release, COMMAND gone or not: what it started may still run.
        if let Some(b) = bound {
            let binding = b.binding.restamped();
            if b.handoff {
                record.process = binding;
            } else {
                record.tree = binding;
            }
        }
        record
    }

    /// Release the lock: write a free record (keeping the fencing counter) with If-Match on our
    /// last write. Not an error when nobody holds the key; [`Error::Unavailable`] when someone
    /// else does.
    pub async fn release(&self) -> Result<()> {
        let _op = self.inner.op.lock().await;
        let locks = &self.inner.locks;
        let Phase::Held(mut held) = self.holding().phase() else {
            // Not ours (any more): report who holds it, touch nothing.
            return match locks.current(&self.inner.key).await? {
                Some(c) if c.holder != self.inner.owner => {
                    Err(unavailable(locks, &self.inner.key, &c.holder, c.remaining))
                }
                _ => {
                    self.holding().set_released();
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
                held.extra.fence,
                held.generation + 1,
            );
            let path = &self.inner.path;
            // Given up when the hold runs out: past it the key may be someone else's.
            let written = record_write(&locks.bank, &locks.clock, path)
                .deadline(held.valid_until)
                .send(
                    free.to_payload(path)?,
                    &free.token,
                    &How::Put(update_of_held(&held)),
                    || read_found(&locks.bank, path),
                )
                .await?;
            // Changed since our last write: ours under a new ETag or a pending heartbeat
            // (release on top of it), or someone else's (then it is not ours to release).
            let found = match written {
                Written::Ours(_) => {
                    self.holding().set_released();
                    tracing::debug!(key = %self.full_key(), "lock released");
                    return Ok(());
                }
                Written::Conflict(None) => {
                    self.holding().set_released();
                    return Ok(());
                }
                Written::Conflict(Some(found)) => found,
            };
            if self.holding().is_ours(&held, &found.record.token) {
                held.e_tag = found.e_tag;
                held.version = found.version;
                held.generation = found.record.generation;
                continue;
            }
            self.holding()
                .mark_lost("another owner held the key".to_owned());
            return match locks.current(&self.inner.key).await? {
                Some(c) => Err(unavailable(locks, &self.inner.key, &c.holder, c.remaining)),
                None => Ok(()),
            };
        }
        Err(kept_by(
            locks,
            &self.inner.key,
            LockHolder::Contended,
            Duration::ZERO,
        ))
    }

    /// Get-current: who holds the key now (store clock), remembered for the answers from memory.
    pub async fn current(&self) -> Result<Option<Current>> {
        let current = self.inner.locks.current(&self.inner.key).await?;
        let now = self.now();
        match &current {
            Some(c) if c.holder == self.inner.owner => {
                // Ours? Only if it is the holding this handle made.
                if let Phase::Held(h) = self.holding().phase() {
                    if h.extra.fence != c.fence {
                        self.holding().mark_lost(format!(
                            "the key was acquired again (fencing token `{}` -> `{}`)",
                            h.extra.fence, c.fence
                        ));
                    }
                }
                *self.seen() = None;
            }
            Some(c) => {
                self.holding()
                    .lose_if_held(format!("the key is held by `{}`", c.holder));
                *self.seen() = Some(Seen {
                    holder: c.holder.clone(),
                    payload: c.payload.clone(),
                    until: now + c.remaining,
                    process: None,
                });
            }
            None => *self.seen() = None,
        }
        Ok(current)
    }

    // ---- answers from memory (no request) ----------------------------------------------------

    /// True iff this handle holds the lock: acquired, not released or lost, and its time (from
    /// the send time of its last successful write) has not run out.
    pub fn am_owner(&self) -> bool {
        self.holding().live().is_some()
    }

    /// True iff the key is held by anyone as far as our last successful call knows: by us
    /// ([`am_owner`](Self::am_owner)), or by another holder whose remaining time (as judged
    /// then) has not run out since.
    pub fn is_owned(&self) -> bool {
        let now = self.now();
        self.am_owner() || matches!(&*self.seen(), Some(s) if now < s.until)
    }

    /// When the current holding ends, on this host's monotonic clock: ours (send time +
    /// duration), else the other holder's as last seen; `None` when nothing is known.
    pub fn expires(&self) -> Option<Instant> {
        match (self.holding().phase(), &*self.seen()) {
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
        match self.holding().live() {
            Some(h) => (h.t_send + h.length / 2).saturating_duration_since(self.now()),
            None => Duration::ZERO,
        }
    }

    /// Whether the lock's record still names our holding — its holder and fencing token — read
    /// now (one GET): `Ok(false)` once it was taken or released under us (`lock release
    /// --token`) or removed, or when we hold nothing. A heartbeat of ours changes neither.
    pub async fn record_names_us(&self) -> Result<bool> {
        let Some(fence) = self.fence() else {
            return Ok(false);
        };
        Ok(
            match read_record(&self.inner.locks.bank, &self.inner.path).await? {
                Some((rec, _)) => {
                    rec.holder.as_deref() == Some(self.inner.owner.as_str())
                        && rec.fence == fence.value
                }
                None => false,
            },
        )
    }

    /// The fencing token of our holding, while we hold the lock.
    pub fn fence(&self) -> Option<Fence> {
        match self.holding().phase() {
            Phase::Held(h) => Some(Fence {
                lock: self.full_key(),
                value: h.extra.fence,
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
        self.seen()
            .as_ref()
            .filter(|s| now < s.until)
            .map(|s| s.holder.clone())
    }

    /// The payload as last known: ours while we hold it, else the other holder's last seen.
    pub fn payload(&self) -> Option<String> {
        match (self.holding().phase(), &*self.seen()) {
            (Phase::Held(h), _) => h.extra.payload,
            (_, Some(s)) => s.payload.clone(),
            _ => None,
        }
    }

    /// The duration of our holding, while we hold the lock.
    pub fn duration(&self) -> Option<Duration> {
        match self.holding().phase() {
            Phase::Held(h) => Some(h.length),
            _ => None,
        }
    }
}

/// `PutMode::Update` on our last write.
/// Why a lock record read back after a refused heartbeat means the hold is lost.
fn replaced_by(held: &Held<Holds>, rec: &LockRecord) -> String {
    if rec.fence != held.extra.fence {
        format!(
            "another owner held the key in between (fencing token `{}` -> `{}`, now {})",
            held.extra.fence,
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
    }
}

fn update_of_held(held: &Held<Holds>) -> PutMode {
    PutMode::Update(object_store::UpdateVersion {
        e_tag: held.e_tag.clone(),
        version: held.version.clone(),
    })
}

impl Renewable for Lock {
    type Extra = Holds;

    fn holding(&self) -> &Holding<Holds> {
        &self.inner.holding
    }

    fn renew(&self) -> impl std::future::Future<Output = Result<Instant>> + Send {
        self.heartbeat()
    }

    /// Every half length from the send time of the last write; retries from a twentieth of the
    /// length up to a quarter.
    fn cadence(&self) -> Cadence {
        let length = self.duration().unwrap_or_default();
        let first_backoff = (length / 20).max(Duration::from_millis(10));
        Cadence {
            interval: length / 2,
            first_backoff,
            max_backoff: (length / 4).max(first_backoff),
        }
    }
}
