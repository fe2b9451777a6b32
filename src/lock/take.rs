//! Taking a key: read it, judge it on the store's clock, and write a new holding with one
//! conditional write — the step that acquisitions and claims share.
//!
//! Invariant: **a held lock is taken or released only by its holder.** A record bound to
//! processes not proved gone (`lock run`'s and `run --lock`'s, and those of
//! `--no-same-host-handoff`, whose binding allows no early takeover) is neither re-entered by a
//! taker with the same holder name nor released by name ([`Locks::release`]): both answer
//! [`LockHolder::Running`], naming
//! the supervisor's pid and host, since the name alone does not make the caller the process
//! that holds it. [`Locks::release_token`] releases it deliberately, writing a free record that
//! still names the tree, so a waiter on its host does not take the lock beside what is left of
//! it ([`LockHolder::Freed`]); the supervisor, reading its record, stops its tree and exits 75.

use std::time::Duration;

use object_store::PutMode;

use super::process::ProcessBinding;
use super::record::{self, judge, read_record, update_of, write_record, Judged, LockRecord};
use super::{support, tickets, LockHolder, Locks};
use crate::clock::store::LazyStoreTime;
use crate::error::{Error, Result};
use crate::id::{local_hostname, OwnerId};
use crate::lease::{new_token, Landed, Written};

/// Rounds of read-judge-write when the object keeps changing under us.
pub(crate) const CONTENTION_ROUNDS: usize = 4;

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
    pub landed: Landed,
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
        key: locks.name(key).to_string(),
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
        process: None,
        tree: None,
    }
}

/// [`Error::Unavailable`]: `key` is held by `holder`, as its lock record (or a waiter's ticket)
/// names it. [`LockRecord::parse`] has checked that name as an owner id; one that is not is
/// reported as the record's corruption.
pub(crate) fn unavailable(locks: &Locks, key: &str, holder: &str, remaining: Duration) -> Error {
    match OwnerId::parse(holder) {
        Ok(holder) => kept_by(locks, key, LockHolder::Held(holder), remaining),
        Err(e) => Error::Corrupt {
            path: locks.lock_path(key),
            reason: e.to_string(),
        },
    }
}

/// [`Error::Unavailable`]: `key` is held by the `lock run` that `rec` names, whose processes
/// are not proved gone (a bound record proved gone is judged expired before this is asked).
pub(crate) fn running(locks: &Locks, key: &str, rec: &LockRecord, remaining: Duration) -> Error {
    let holder = rec.holder.as_deref().unwrap_or_default();
    match OwnerId::parse(holder) {
        Ok(holder) => kept_by(
            locks,
            key,
            LockHolder::Running {
                holder,
                pid: rec.bound().map_or(rec.pid, |p| p.pid),
                host: rec.host.clone(),
            },
            remaining,
        ),
        Err(e) => Error::Corrupt {
            path: locks.lock_path(key),
            reason: e.to_string(),
        },
    }
}

/// [`Error::Unavailable`]: `key` is kept from the caller by `holder`.
pub(crate) fn kept_by(locks: &Locks, key: &str, holder: LockHolder, remaining: Duration) -> Error {
    Error::Unavailable {
        key: locks.name(key).into(),
        holder,
        remaining,
    }
}

/// Take `key`: read it, judge it, and write a new holding with create-if-absent (never used) or
/// If-Match on the ETag judged (free, expired, or ours to replace).
pub(crate) async fn take(locks: &Locks, key: &str, spec: &Spec<'_>) -> Result<Granted> {
    take_seeing(locks, key, spec, &mut None).await
}

/// [`take`], noting in `held_by` the processes a holding that kept the key is bound to (for a
/// waiter that watches them: see [`ProcessBinding`]).
pub(crate) async fn take_seeing(
    locks: &Locks,
    key: &str,
    spec: &Spec<'_>,
    held_by: &mut Option<ProcessBinding>,
) -> Result<Granted> {
    support::ensure_supported(&locks.bank).await?;
    locks.check_payload(key, spec.payload)?;
    let path = locks.lock_path(key);
    let mut sc = LazyStoreTime::new();
    for _ in 0..CONTENTION_ROUNDS {
        let sent = locks.clock.now();
        let current = read_record(&locks.bank, &path).await?;
        // `replacing_own`: the owner's own live holding, replaced by a new acquisition. Anything
        // else taken here is free or expired, and goes to the first live waiter if there is one.
        let (mode, fence, replacing_own) = match &current {
            None => (PutMode::Create, 1, false),
            Some((rec, meta)) => {
                let mut state = match &rec.holder {
                    None => Judged::Free,
                    Some(_) => judge(
                        rec,
                        meta.last_modified,
                        sc.lower_at(&locks.bank, &locks.clock, sent).await?,
                        locks.margin,
                    ),
                };
                // Held, by processes this kernel proves gone: over before its expiry. The write
                // below is conditional on the version judged here.
                if let (Judged::Held { .. }, Some(p)) = (state, &rec.process) {
                    if p.gone() {
                        tracing::info!(key = %rec.key, holder = ?rec.holder, pid = p.pid,
                            group = p.group, "the holder's processes on this host are gone; \
                            taking the lock over before its expiry");
                        state = Judged::Expired {
                            since: Duration::ZERO,
                        };
                    }
                }
                // Watched for an early takeover: only a binding that allows one.
                *held_by = match state {
                    Judged::Held { .. } => rec.process.clone(),
                    _ => None,
                };
                // Expired, but COMMAND's tree still runs on this host: not taken beside it (a
                // waiter elsewhere cannot see it). The waiter watches the processes.
                // Free from a release by token: the same, for what is left of its tree.
                if let (Judged::Free, Some(p), None) = (state, rec.bound(), &rec.holder) {
                    if let Some(pid) = p.lingering() {
                        *held_by = Some(p.clone());
                        return Err(kept_by(
                            locks,
                            key,
                            LockHolder::Freed { pid },
                            Duration::ZERO,
                        ));
                    }
                }
                if let (Judged::Expired { .. }, Some(p), Some(h)) =
                    (state, rec.bound(), &rec.holder)
                {
                    if let Some(pid) = p.lingering() {
                        *held_by = Some(p.clone());
                        return Err(match OwnerId::parse(h) {
                            Ok(holder) => kept_by(
                                locks,
                                key,
                                LockHolder::Lingering { holder, pid },
                                Duration::ZERO,
                            ),
                            Err(e) => Error::Corrupt {
                                path: locks.lock_path(key),
                                reason: e.to_string(),
                            },
                        });
                    }
                }
                let replacing_own = match (state, &rec.holder) {
                    // The owner's own name, but held by a `lock run` whose processes live (or
                    // cannot be judged here): only its holder ends it.
                    (Judged::Held { remaining }, Some(h))
                        if h == spec.owner
                            && spec.mode == Mode::Acquire
                            && rec.bound().is_some() =>
                    {
                        return Err(running(locks, key, rec, remaining));
                    }
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
        // The holding this replaces, whose guard's word (if any) nobody needs once it is ours.
        let replaced = current
            .as_ref()
            .and_then(|(rec, _)| rec.bound().cloned())
            .filter(|_| !replacing_own);
        if !replacing_own {
            // Fairness: a free key goes to the first live waiter, if any.
            if let Some(waiter) = tickets::first_live(locks, key, spec.ticket, &mut sc).await? {
                return Err(match OwnerId::parse(&waiter.owner) {
                    Ok(w) => kept_by(locks, key, LockHolder::Promised(w), Duration::ZERO),
                    Err(e) => Error::Corrupt {
                        path: locks.ticket_path(key, &waiter.ticket),
                        reason: e.to_string(),
                    },
                });
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
            Written::Ours(landed) => {
                tracing::debug!(key = %record.key, owner = spec.owner, fence, "lock taken");
                if let Some(p) = &replaced {
                    p.forget_word();
                }
                return Ok(Granted { record, landed });
            }
            Written::Conflict(_) => continue,
        }
    }
    // Still changing after several rounds: somebody else is busy with it.
    Err(match read_record(&locks.bank, &path).await {
        Ok(Some((
            LockRecord {
                holder: Some(h), ..
            },
            _,
        ))) => unavailable(locks, key, &h, Duration::ZERO),
        _ => kept_by(locks, key, LockHolder::Contended, Duration::ZERO),
    })
}
