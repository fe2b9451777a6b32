//! A named lock held for a command's life: acquired (waiting as asked, leaving the queue on a
//! signal), kept by a background heartbeat, watched for the instant it can no longer be proved
//! held, and released. Used by `lock run` and `run --lock`.
//!
//! `Kept::ended` completes with no request when the lock is Lost or released, or when no more
//! than a quarter of its duration is left on the holder's clock (counted from the send time of
//! its last successful write, so never later than the store's expiry); the heartbeat renews at
//! half the duration and retries until then. Releasing is bounded too: `Kept::release` gives up
//! at the lock's `valid_until` and says so in one line, since past it the lock is no longer
//! ours to release; the exit status stays COMMAND's.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;
use banklease::clock::Jitter;
use banklease::error::error_chain;
use banklease::lock::{
    Acquired, Blocking, Heartbeat, HeartbeatFailure, Lock, LockHolder, LockName, Term, Wait,
};
use banklease::{Error, LeaseState};
use rustix::process::Signal;
use tokio::sync::mpsc;

use super::{writer_locks_in, Holder, Who};
use crate::child::overdue::{self, OneWarning};
use crate::child::Signals;
use crate::{human, Ctx};

/// What COMMAND is told of the lock it runs under.
pub const KEY_ENV: &str = "BANKLEASE_LOCK_KEY";
/// The lock's namespace.
pub const NAMESPACE_ENV: &str = "BANKLEASE_LOCK_NAMESPACE";
/// The fencing token of the holding (for `banklease lock put --token`).
pub const TOKEN_ENV: &str = "BANKLEASE_LOCK_TOKEN";
/// The holder name (owner and session), as `lock release --owner` takes it.
pub const OWNER_ENV: &str = "BANKLEASE_LOCK_OWNER";
/// The session alone, as `--session` takes it.
pub const SESSION_ENV: &str = "BANKLEASE_LOCK_SESSION";

/// How acquiring ended when it did not fail outright.
#[derive(Debug)]
pub enum Outcome {
    /// Held; keep it with [`Held::keep`].
    Held(Held),
    /// Held by someone else (or promised to an earlier waiter) when the wait ran out.
    Unavailable {
        key: LockName,
        /// Who holds it, or the earlier waiter it is promised to.
        holder: LockHolder,
        /// The holder's time left (store clock).
        remaining: Duration,
    },
    /// A signal came while waiting: the ticket was deleted, nothing is held.
    Interrupted(Signal),
}

/// The lock, acquired and not yet kept.
#[derive(Debug)]
pub struct Held {
    lock: Lock,
    holder: Holder,
    acquired: Acquired,
    namespace: String,
}

/// What to acquire, for whom, for how long, and how long to wait.
#[derive(Debug)]
pub struct Wanted<'a> {
    /// The namespace's name.
    pub ns: &'a str,
    pub key: &'a str,
    pub who: &'a Who,
    pub duration: Duration,
    pub payload: Option<&'a str>,
    pub wait: Wait,
}

/// Acquire what `wanted` says; a signal on `signals` gives up the wait (leaving the queue at
/// once).
pub async fn acquire(ctx: &Ctx, wanted: &Wanted<'_>, signals: &mut Signals) -> Result<Outcome> {
    let Wanted {
        ns,
        key,
        who,
        duration,
        payload,
        wait,
    } = *wanted;
    let locks = writer_locks_in(ctx, ns).await?;
    let holder = who.resolve()?;
    let lock = locks.lock(key, &holder.name)?;
    let mut signalled = None;
    let stop = async {
        signalled = Some(signals.recv().await);
    };
    let result = lock
        .acquire_blocking_or(Term::For(duration), payload, &Blocking::new(wait), stop)
        .await;
    match result {
        Ok(Some(acquired)) => Ok(Outcome::Held(Held {
            lock,
            holder,
            acquired,
            namespace: locks.namespace().to_owned(),
        })),
        Ok(None) => Ok(Outcome::Interrupted(
            signalled.expect("stopped only by a signal"),
        )),
        Err(Error::Unavailable {
            holder, remaining, ..
        }) => Ok(Outcome::Unavailable {
            key: locks.full_key(key)?,
            holder,
            remaining,
        }),
        Err(e) => Err(e.into()),
    }
}

impl Outcome {
    /// Why the lock was not taken, for one `error:` line (`None` when held).
    pub fn refusal(&self) -> Option<String> {
        match self {
            Outcome::Held(_) => None,
            Outcome::Unavailable {
                key,
                holder,
                remaining,
            } => Some(format!(
                "not acquired: key=`{key}` is held by {} ({} left); wait longer or try again \
                 later",
                holder.quoted(),
                human(*remaining)
            )),
            Outcome::Interrupted(signal) => Some(format!(
                "interrupted by signal {} while waiting for the lock; left the wait queue",
                signal.as_raw()
            )),
        }
    }
}

impl Held {
    /// The lock handle.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Who holds it.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// The fencing token of this holding.
    pub fn token(&self) -> u64 {
        self.acquired.fence.value
    }

    /// The variables COMMAND gets.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            (KEY_ENV, self.lock.key().into()),
            (NAMESPACE_ENV, self.namespace.clone().into()),
            (TOKEN_ENV, self.token().to_string().into()),
            (OWNER_ENV, self.lock.owner().into()),
            (SESSION_ENV, self.holder.session.clone().into()),
        ]
    }

    /// Start the background heartbeat.
    pub fn keep(self, ctx: &Ctx) -> Kept {
        let (heartbeat, failures) = self
            .lock
            .spawn_heartbeat(Jitter::from_entropy(), ctx.config.lease.renew_jitter);
        Kept {
            heartbeat,
            failures,
            taken: false,
            ended: false,
            warning: OneWarning::default(),
        }
    }
}

/// A lock kept by its heartbeat.
#[derive(Debug)]
pub struct Kept {
    heartbeat: Heartbeat,
    failures: mpsc::Receiver<HeartbeatFailure>,
    /// Its record was seen naming another holding: nothing of ours is left to release.
    taken: bool,
    /// [`Kept::ended`] completed: the caller's `error:` line says why, and a release that
    /// cannot reach the store adds nothing to it.
    ended: bool,
    /// The job's one warning about its holds, shared with its other hold's watch.
    warning: OneWarning,
}

/// The part of a lock's duration that must be left for it to count as held: a quarter. The
/// heartbeat renews at half the duration and retries until then; a SIGKILL sent `kill_after`
/// (less than this) after it lands before the lock can expire.
pub fn validity_margin(duration: Duration) -> Duration {
    duration / 4
}

/// Completes when the lock's record names another holding than ours — taken or released under
/// us (`lock release --token`), or removed — so that COMMAND's tree is stopped then, not at
/// the next heartbeat. One GET every eighth of the duration (between 250 ms and 2 s); a read
/// that fails is the heartbeat's to judge.
/// A failed read's cause is kept in `cause`, for the job's one warning.
async fn taken_under_us(
    lock: &Lock,
    clock: &banklease::clock::SharedClock,
    cause: &std::cell::RefCell<Option<String>>,
) -> String {
    let every = (lock.duration().unwrap_or_default() / 8)
        .clamp(Duration::from_millis(250), Duration::from_secs(2));
    loop {
        clock.sleep(every).await;
        match lock.record_names_us().await {
            Ok(true) => {}
            Ok(false) if lock.fence().is_some() => {
                return "lost: its record names another holding (taken or released under it)"
                    .to_owned()
            }
            // Released by us, or lost already: the other watch says so.
            Ok(false) => return std::future::pending().await,
            Err(e) => {
                tracing::debug!(key = %lock.full_key(), error = %error_chain(&e),
                    "cannot read the lock's record; the heartbeat judges it");
                *cause.borrow_mut() = Some(failure_cause(&e));
            }
        }
    }
}

impl Kept {
    /// Completes, with the reason, when the lock can no longer be proved held: lost, released,
    /// taken or released under us (its record read every eighth of the duration), or less than
    /// [`validity_margin`] left because no heartbeat succeeded. Logs each failed heartbeat
    /// (info).
    pub async fn ended(&mut self) -> String {
        let lock = self.heartbeat.lock().clone();
        let margin = validity_margin(lock.duration().unwrap_or_default());
        let short = format!(
            "less than {} left and no heartbeat succeeded",
            human(margin)
        );
        let clock = lock.locks().clock().clone();
        let ended = crate::child::hold_ended(
            lock.subscribe(),
            || lock.remaining(),
            margin,
            &short,
            &clock,
        );
        tokio::pin!(ended);
        let cause = std::cell::RefCell::new(None);
        let taken = taken_under_us(&lock, &clock, &cause);
        tokio::pin!(taken);
        let what = format!("the lock key=`{}`", lock.full_key());
        let overdue = overdue::watch(
            &what,
            || lock.remaining(),
            lock.duration().unwrap_or_default() / 2,
            margin,
            || cause.borrow().clone(),
            &self.warning,
            &clock,
        );
        tokio::pin!(overdue);
        let mut reporting = true;
        loop {
            tokio::select! {
                reason = &mut ended => {
                    self.ended = true;
                    return reason;
                }
                reason = &mut taken => {
                    self.taken = true;
                    self.ended = true;
                    return reason;
                }
                never = &mut overdue => match never {},
                failure = self.failures.recv(), if reporting => match failure {
                    // The first failed renewal is the job's one warning (unless given), with
                    // the time left; if the lock ends for it, the `error:` line says why.
                    Some(f) if !f.lost => {
                        let why = failure_cause(&f.error);
                        tracing::info!(key = %lock.full_key(), error = %error_chain(&f.error),
                            "lock heartbeat failed; retrying");
                        if self.warning.first() {
                            eprintln!("{}", overdue::line(&what, None, Some(&why),
                                lock.remaining(), margin));
                        }
                        *cause.borrow_mut() = Some(why);
                    }
                    Some(_) => {}
                    None => reporting = false,
                },
            }
        }
    }

    /// The lock being kept.
    pub fn lock(&self) -> &Lock {
        self.heartbeat.lock()
    }

    /// The caller says in its `error:` line that the job was stopped (the other hold ended):
    /// a release that cannot reach the store adds nothing to it.
    pub fn said_ended(&mut self) {
        self.ended = true;
    }

    /// Share the job's one warning with its other hold (`run --lock`'s owner lease).
    pub fn share_warning(&mut self, warning: &OneWarning) {
        self.warning = warning.clone();
    }

    /// Stop the heartbeat and leave the lock to run out on its own: processes of COMMAND's
    /// tree could not be stopped, and its record still names them for waiters on this host.
    pub async fn abandon(self) {
        self.heartbeat.stop().await;
    }

    /// Stop the heartbeat and release the lock, giving up when the lock runs out on its own
    /// (its `valid_until`, on the holder's clock), as an owner lease's release does: a store
    /// that does not answer must not keep the supervisor (and COMMAND's status) for the client's
    /// whole retry budget. A failure or giving up is said in one line; the lock then lapses. A
    /// lock already lost is not ours to release: the heartbeat is only stopped.
    pub async fn release(self) {
        let lock = self.heartbeat.lock().clone();
        let key = lock.full_key();
        if self.taken || matches!(*lock.subscribe().borrow(), LeaseState::Lost { .. }) {
            // Dropped, the heartbeat stops; nothing of ours is left to release.
            tracing::debug!(key = %key, "the lock was lost; nothing to release");
            return;
        }
        if lock.remaining().is_zero() {
            // Ran out already (this process was stopped past it: the caller has said so); the
            // next holder may hold it now, and a release would be given up at once.
            tracing::debug!(key = %key, "the lock ran out before its release; nothing to release");
            self.heartbeat.stop().await;
            return;
        }
        let said = self.ended;
        let ran_out_line = || {
            if said {
                // After the `error:` line that the lock could no longer be proved held.
                tracing::debug!(key = %key, "the lock lapsed before its release could land");
                return;
            }
            eprintln!(
                "warning: the lock key=`{key}` was not released before it ran out (the store \
                 did not answer in time); it has lapsed on its own"
            )
        };
        let release = async {
            match self.heartbeat.release().await {
                Ok(()) => {}
                // The library gives the release up when the hold runs out: say that, once.
                Err(_) if lock.remaining().is_zero() => ran_out_line(),
                Err(e) if said => tracing::debug!(key = %key, error = %error_chain(&e),
                    "releasing the lock failed; it lapses on its own"),
                Err(e) => eprintln!(
                    "warning: releasing the lock key=`{key}` failed ({}); it lapses on its own",
                    error_chain(&e)
                ),
            }
        };
        let clock = lock.locks().clock().clone();
        // On the holder's clock, which counts suspended time: looked at least once a second.
        let ran_out = async {
            loop {
                let left = lock.remaining();
                if left.is_zero() {
                    return;
                }
                clock.sleep(left.min(Duration::from_secs(1))).await;
            }
        };
        tokio::select! {
            biased;
            () = release => {}
            () = ran_out => ran_out_line(),
        }
    }
}

/// What made a renewal fail, in the words of its cause (a store's answer, classified).
pub fn failure_cause(error: &banklease::Error) -> String {
    match error {
        banklease::Error::Store { source, .. } => banklease::store::classify(source).to_string(),
        other => other.to_string(),
    }
}
