//! Blocking acquisition with a fair, first-come-first-served wait queue kept in the store.
//!
//! In the spirit of Lamport's bakery: a waiter takes a numbered ticket,
//! `locks/<ns>/<key>.queue/<ticket>` (20 zero-padded digits), by listing the queue and creating
//! `max + 1` with create-if-absent (on AlreadyExists it lists again). The ticket is itself a small
//! lease that its waiter renews; a waiter that dies loses its ticket when the ticket's lease
//! expires on the store's clock. A free (or expired) lock goes to the **lowest live ticket**:
//! every acquirer, blocking or not, checks the queue before taking a free key.
//!
//! The listing is only used to *find* tickets. A ticket is skipped only after it has been read:
//! gone (the store says so on a read), or expired on the store's clock (then it is also deleted).
//! A ticket that cannot be read stops the check: never skip on doubt.
//!
//! Two waiters whose ticket-taking overlaps may be served in either order (as in the bakery); a
//! waiter whose ticket was lost (paused past its ticket lease) takes a new one at the back.
//!
//! A waiter that gives up (its wait ran out, an error, or the future given to
//! `acquire_blocking_or` completed: `lock run` and `lock acquire` give it their signals)
//! deletes its ticket before it returns; one killed outright holds its place only until its
//! ticket's lease (1–5 s) runs out on the store's clock.
//!
//! Handoff on one host: a waiter that saw a holder bound to processes of its host
//! ([`ProcessBinding`]) asks the kernel every `LOCAL_POLL` (10 ms; `/proc`, a `kill(-group, 0)`
//! and the cgroup, no store request) and looks at the lock again when the answer changes — the
//! supervisor exiting after a release, or everything gone — so a handoff takes tens of
//! milliseconds rather than a store poll. `--no-same-host-handoff` (of `lock run` and `run
//! --lock`) allows no early takeover: the lock runs out instead.

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode};

use super::info::Acquired;
use super::named::Lock;
use super::process::ProcessBinding;
use super::record::{read_found, record_write, write_record};
use super::take::{kept_by, new_record};
use super::tickets::{list_tickets, TICKET_DIGITS};
use super::{LockHolder, Locks, Term};
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::id::OwnerId;
use crate::lease::{self, Holding, How, Renewed, Words, Written};

/// Digits of a ticket name.
/// Attempts at taking a ticket number before giving up.
const TICKET_ATTEMPTS: usize = 32;
/// The shortest pause between two looks at a key while waiting.
const MIN_POLL: Duration = Duration::from_millis(10);
/// The longest pause between two HEADs of a held lock's object while waiting: a release is
/// seen within it (the store has no notifications).
pub const WATCH_POLL: Duration = Duration::from_millis(250);
/// How often a waiter asks this host's kernel about a holder bound to its processes
/// ([`ProcessBinding`]): a handoff on one host takes about this long.
const LOCAL_POLL: Duration = Duration::from_millis(10);
/// Once a holding's end was due and it was still judged held (its stamp and the store's clock
/// are read at the store's resolution), it is looked at again this often until it is taken
/// or changes: at most about one skew margin of full looks per expiry.
const EXPIRY_POLL: Duration = Duration::from_millis(100);
/// While the key is free but promised to an earlier waiter, the queue ahead is looked at again
/// this often (that waiter may have left without the lock object changing).
pub const QUEUE_LOOK: Duration = Duration::from_secs(1);
/// How long one attempt at deleting a ticket may take (a waiter being stopped does not hang on
/// a store that does not answer).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bounds of the default ticket lease (the lock's duration, clamped): a waiter killed without
/// a chance to delete its ticket holds its place at most this long.
const MIN_TICKET_LEASE: Duration = Duration::from_secs(1);
const MAX_TICKET_LEASE: Duration = Duration::from_secs(5);

/// How long a blocking acquire waits for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Do not block: one attempt (`0`).
    No,
    /// Wait at most this long.
    For(Duration),
    /// Wait until the lock is obtained (`-1`).
    Forever,
}

impl FromStr for Wait {
    type Err = String;

    /// `0` (no), `-1` or `forever`, or a humantime duration (`30s`, `2m`).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.trim() {
            "0" => Ok(Wait::No),
            "-1" | "forever" => Ok(Wait::Forever),
            other => match humantime::parse_duration(other) {
                Ok(d) if d.is_zero() => Ok(Wait::No),
                Ok(d) => Ok(Wait::For(d)),
                Err(e) => Err(format!(
                    "`{other}` is not a duration, `0` (do not block) or `-1` (forever): {e}"
                )),
            },
        }
    }
}

/// Options of a blocking acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocking {
    /// How long to wait for the lock: [`Wait::No`], [`Wait::For`] or [`Wait::Forever`].
    pub block_for: Wait,
    /// While waiting, the lock object is looked at (one HEAD) at least this many times per lease
    /// length (the requested duration), and at least every [`WATCH_POLL`]. Default 4.
    pub attempts_per_lease: u32,
    /// Obtention timeout: the whole call, store retries included, gives up after this long,
    /// whatever `block_for` says. Default none.
    pub timeout: Option<Duration>,
    /// Consecutive store errors tolerated (each retried after `retry_interval`) before the call
    /// fails with the last one. Default 3.
    pub retries: u32,
    /// Pause after a store error. Default 200 ms.
    pub retry_interval: Duration,
    /// The lease of the waiter's queue ticket; a waiter that dies holds its place this long.
    /// Default: the requested duration, clamped to 1–5 s.
    pub ticket_lease: Option<Duration>,
}

impl Default for Blocking {
    fn default() -> Self {
        Self::new(Wait::Forever)
    }
}

impl Blocking {
    /// Default options, waiting as `block_for` says.
    pub fn new(block_for: Wait) -> Self {
        Self {
            block_for,
            attempts_per_lease: 4,
            timeout: None,
            retries: 3,
            retry_interval: Duration::from_millis(200),
            ticket_lease: None,
        }
    }
}

static TICKET_WORDS: Words = Words {
    what: "queue ticket",
    ran_out: "its time ran out before a renewal succeeded",
    answered_late: "the renewal was answered after the ticket had run out",
    too_slow: "the write took longer than the ticket's lease",
    gone: "the ticket is gone",
    loss_is_error: false,
};

/// Our ticket, a holding like any lease: send-time expiry, renewals by If-Match.
#[derive(Debug)]
struct Ticket {
    name: String,
    path: Path,
    holding: Holding<()>,
}

impl Ticket {
    async fn take(locks: &Locks, key: &str, owner: &str, lease: Duration) -> Result<Self> {
        let owner_id = OwnerId::parse(owner)?;
        for _ in 0..TICKET_ATTEMPTS {
            let next = list_tickets(locks, key)
                .await?
                .last()
                .map_or(1, |(n, _)| n.saturating_add(1));
            let name = format!("{next:0width$}", width = TICKET_DIGITS);
            let path = locks.ticket_path(key, &name);
            let record = new_record(locks, key, Some(owner), None, lease, next, 1);
            match write_record(&locks.bank, &locks.clock, &path, &record, PutMode::Create).await? {
                Written::Ours(landed) => {
                    tracing::debug!(ticket = %path, owner, "queued");
                    let (lost_key, lost_owner) = (locks.name(key), owner_id.clone());
                    let ticket = name.clone();
                    let holding = Holding::new(
                        locks.clock.clone(),
                        &TICKET_WORDS,
                        format!("ticket={path} owner={owner}"),
                        "not yet taken",
                        move |reason| Error::LockLost {
                            key: lost_key.clone(),
                            owner: lost_owner.clone(),
                            reason: format!("{reason}: queue ticket {ticket}"),
                        },
                    );
                    let (answered, t_send) = (landed.answered, landed.t_send);
                    holding.commit_new(
                        answered,
                        t_send,
                        landed.read_back(record.token),
                        lease,
                        (),
                    )?;
                    return Ok(Self {
                        name,
                        path,
                        holding,
                    });
                }
                // Someone took that number first: look again.
                Written::Conflict(_) => continue,
            }
        }
        Err(kept_by(
            locks,
            key,
            LockHolder::QueueContended,
            Duration::ZERO,
        ))
    }

    /// Whether the ticket still holds on our clock.
    fn live(&self) -> bool {
        self.holding.live().is_some()
    }

    /// Half a lease after the last renewal's send (at once when no longer held).
    fn renew_at(&self) -> Instant {
        match self.holding.live() {
            Some(held) => held.t_send + held.length / 2,
            None => self.holding.clock().now(),
        }
    }

    /// Renew; `Ok(false)` when the ticket is lost (changed, gone, or answered too late).
    async fn renew(&self, locks: &Locks, key: &str, owner: &str) -> Result<bool> {
        let Ok(held) = self.holding.held() else {
            return Ok(false);
        };
        let generation = held.generation + 1;
        let fence = self.name.parse().unwrap_or(0);
        let record = new_record(
            locks,
            key,
            Some(owner),
            None,
            held.length,
            fence,
            generation,
        );
        let mode = PutMode::Update(object_store::UpdateVersion {
            e_tag: held.e_tag.clone(),
            version: held.version.clone(),
        });
        let write = record_write(&locks.bank, &locks.clock, &self.path).deadline(held.valid_until);
        let renewed = lease::renew(
            &self.holding,
            &held,
            write,
            locks.clock.now(),
            generation,
            record.token.clone(),
            record.to_payload(&self.path)?,
            &How::Put(mode),
            || read_found(&locks.bank, &self.path),
            |_| "the ticket was replaced".to_owned(),
        )
        .await;
        match renewed {
            Ok(Renewed::Until(_)) => Ok(true),
            // Still our last write under a new version, not renewed: taken for lost, as any
            // refusal is (a new ticket is cheap; a stale one must not be kept).
            Ok(Renewed::Unchanged(_)) => Ok(false),
            Err(Error::LockLost { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Delete our ticket (best effort, each attempt bounded by [`REMOVE_TIMEOUT`]: if it
    /// stays, it expires on its own).
    async fn remove(self, locks: &Locks) {
        for _ in 0..3 {
            let deleted = tokio::select! {
                d = locks.bank.store().delete(&self.path) => d,
                () = locks.clock.sleep(REMOVE_TIMEOUT) => {
                    tracing::warn!(ticket = %self.path, "removing the queue ticket timed out");
                    continue;
                }
            };
            match deleted {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => return,
                Err(e) => {
                    tracing::warn!(ticket = %self.path, error = %e, "cannot remove queue ticket")
                }
            }
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// What a waiter knows of the lock between full looks.
#[derive(Debug, Default)]
struct Watch {
    /// The lock object's ETag, read just before the last full look (`None`: not known, or the
    /// key is unused).
    e_tag: Option<String>,
    /// When a full look is next due: the holder's expected end as judged, or [`QUEUE_LOOK`]
    /// from now while the key is promised to an earlier waiter; `None`: at once.
    look_at: Option<Instant>,
    /// The holder's processes when this host's kernel can judge them, with what it last said
    /// of them (supervisor gone, all gone).
    local: Option<(ProcessBinding, (bool, bool))>,
}

impl Watch {
    /// Whether a full look is due: the lock object changed since the ETag read before the last
    /// look (a release, a new holder, a heartbeat), or a look is due by time. One HEAD; the ETag
    /// read is returned for [`unavailable`](Self::unavailable), so that a change after the
    /// look's own read is seen as a change at the next HEAD.
    async fn look_due(&self, lock: &Lock) -> Option<Option<String>> {
        let e_tag = head_e_tag(lock).await;
        let now = lock.locks().clock.now();
        let due = self.look_at.is_none_or(|t| now >= t) || e_tag != self.e_tag;
        due.then_some(e_tag)
    }

    /// Remember a full look that found the key unavailable: held for `remaining` (store clock,
    /// margin deducted), or free and `promised` to an earlier waiter; `e_tag` was read before
    /// the look.
    fn unavailable(
        &mut self,
        lock: &Lock,
        remaining: Duration,
        promised: bool,
        e_tag: Option<String>,
    ) {
        let locks = lock.locks();
        let now = locks.clock.now();
        // The same holding (no write since), with no time left, looked at when its end was due:
        // the store's clock is read at its stamp resolution (1 s on S3) and may lag, so look
        // again soon rather than a margin later.
        let same_holding = e_tag.is_some() && e_tag == self.e_tag;
        let was_due = self.look_at.is_some_and(|t| now >= t);
        self.look_at = Some(if promised {
            now + QUEUE_LOOK
        } else if remaining.is_zero() && same_holding && was_due {
            now + EXPIRY_POLL
        } else {
            // Judged held for `remaining` with the margin deducted, on a reading of the store's
            // clock that may lag by its stamp resolution (at most the margin): dead from
            // between one and two margins after that. Look from the first.
            now + remaining + locks.margin + MIN_POLL
        });
        tracing::debug!(key = %lock.full_key(), remaining_ms = remaining.as_millis(),
            promised, same_holding, was_due,
            next_look_ms = self.look_at.map(|t| t.saturating_duration_since(now).as_millis()),
            "lock unavailable; watching it");
        self.e_tag = e_tag;
    }
}

impl Watch {
    /// Watch the processes the holding that kept the key is bound to, when this host's kernel
    /// can judge them.
    fn processes(&mut self, binding: Option<ProcessBinding>) {
        // Passed on only when judged not all gone: a change to "all gone" after that judgement
        // must still wake the waiter.
        self.local = binding.filter(ProcessBinding::local).map(|b| {
            let said = (b.supervisor_gone(), false);
            (b, said)
        });
    }

    /// Completes when what the kernel says of the holder's processes changes (its supervisor
    /// exited, as it does after a release; or they are all gone, and the lock may be taken
    /// over); never without such processes. Asks every [`LOCAL_POLL`]; no store request.
    async fn processes_changed(&self, clock: &SharedClock) {
        let Some((binding, said)) = &self.local else {
            return std::future::pending().await;
        };
        loop {
            clock.sleep(LOCAL_POLL).await;
            if (binding.supervisor_gone(), binding.gone()) != *said {
                return;
            }
        }
    }
}

/// The lock object's ETag (`None` when it cannot be told: gone, unreadable, or no ETag).
async fn head_e_tag(lock: &Lock) -> Option<String> {
    let path = lock.locks().lock_path(lock.key());
    match lock.locks().bank.store().head(&path).await {
        Ok(meta) => meta.e_tag,
        Err(_) => None,
    }
}

/// Run `work` to its end; a completion of `stop` meanwhile is noted in `stopped` (and `stop`
/// is not polled again), never cancels `work`: a write in flight may land, and must then be
/// known.
async fn unless_stopped<T, S: Future<Output = ()>>(
    work: impl Future<Output = T>,
    stop: &mut std::pin::Pin<&mut S>,
    stopped: &mut bool,
) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            () = stop.as_mut(), if !*stopped => *stopped = true,
        }
    }
}

impl Lock {
    /// Acquire, waiting for the lock as `blocking` says, in first-come-first-served order among
    /// the waiters for the key (see the [module documentation](self)).
    ///
    /// Fails with [`Error::Unavailable`] when `block_for` or the obtention timeout runs out, and
    /// with the last store error after `retries` consecutive ones.
    pub async fn acquire_blocking(
        &self,
        term: Term,
        payload: Option<&str>,
        blocking: &Blocking,
    ) -> Result<Acquired> {
        let acquired = self
            .acquire_blocking_or(term, payload, blocking, std::future::pending())
            .await?;
        Ok(acquired.expect("never stopped"))
    }

    /// [`acquire_blocking`](Self::acquire_blocking), given up when `stop` completes (a signal, a
    /// shutdown): a pause is cut short, a request in flight is let finish (a lock it took is
    /// released again), and the waiter's ticket is deleted before this returns `Ok(None)`, so
    /// the next waiter is not kept waiting behind it.
    ///
    /// While the lock is held by someone else, a waiter sends one HEAD on the lock object every
    /// [`WATCH_POLL`] (or a quarter of the duration, if shorter) and looks fully (read, judge on
    /// the store's clock, check the queue ahead of it) only when the object changed, when the
    /// holder's time is up (then every [`EXPIRY_POLL`] while it is still judged held), or once a
    /// [`QUEUE_LOOK`] while the key is promised to an earlier waiter; it renews its ticket every
    /// half ticket lease.
    pub async fn acquire_blocking_or(
        &self,
        term: Term,
        payload: Option<&str>,
        blocking: &Blocking,
        stop: impl Future<Output = ()>,
    ) -> Result<Option<Acquired>> {
        tokio::pin!(stop);
        let mut stopped = false;
        let locks = self.locks().clone();
        let clock = locks.clock.clone();
        let start = clock.now();
        let duration = term.resolve(&locks, self.key())?;
        let hard = blocking.timeout.map(|t| start + t);
        let deadline = match blocking.block_for {
            Wait::No => Some(start),
            Wait::For(d) => earliest(Some(start + d), hard),
            Wait::Forever => hard,
        };
        let past = |t: Option<Instant>| t.is_some_and(|t| clock.now() >= t);
        let poll = (duration / blocking.attempts_per_lease.max(1)).clamp(MIN_POLL, WATCH_POLL);
        let sleep_until = |wake: Instant| {
            let wake = earliest(Some(wake), deadline).expect("some");
            clock.sleep(wake.saturating_duration_since(clock.now()))
        };
        let mut errors = 0u32;

        // First without a ticket: a free key with an empty queue is taken at once.
        let mut unavailable = loop {
            let attempt = unless_stopped(
                self.acquire_for(duration, payload, None),
                &mut stop,
                &mut stopped,
            )
            .await;
            match attempt {
                Ok(a) if stopped => {
                    self.give_back(a).await;
                    return Ok(None);
                }
                Ok(a) => return Ok(Some(a)),
                _ if stopped => return Ok(None),
                Err(e @ Error::Unavailable { .. }) => break e,
                Err(e) if e.is_transient() && errors < blocking.retries && !past(hard) => {
                    errors += 1;
                    tracing::warn!(key = %self.full_key(), error = %e, errors, "acquire failed; retrying");
                    tokio::select! {
                        () = sleep_until(clock.now() + blocking.retry_interval) => {}
                        () = stop.as_mut() => return Ok(None),
                    }
                }
                Err(e) => return Err(e),
            }
        };
        if blocking.block_for == Wait::No || past(deadline) {
            return Err(unavailable);
        }

        let ticket_lease = blocking
            .ticket_lease
            .unwrap_or_else(|| duration.clamp(MIN_TICKET_LEASE, MAX_TICKET_LEASE));
        let mut ticket: Option<Ticket> = None;
        // The first look, once queued, is at once (the key may have been freed meanwhile).
        let mut watch = Watch::default();
        let result = loop {
            if past(deadline) {
                break Err(unavailable);
            }
            let step = async {
                // A ticket that ran out on our clock is lost: give it up, take a new one.
                if ticket.as_ref().is_some_and(|t| !t.live()) {
                    tracing::info!(key = %self.full_key(), "queue ticket lost; queuing again");
                    if let Some(t) = ticket.take() {
                        t.remove(&locks).await;
                    }
                }
                if ticket.is_none() {
                    ticket =
                        Some(Ticket::take(&locks, self.key(), self.owner(), ticket_lease).await?);
                    watch.look_at = None;
                }
                let t = ticket.as_ref().expect("just taken");
                if clock.now() >= t.renew_at() && !t.renew(&locks, self.key(), self.owner()).await?
                {
                    tracing::info!(key = %self.full_key(), "queue ticket lost; queuing again");
                    if let Some(t) = ticket.take() {
                        t.remove(&locks).await;
                    }
                    return Ok(None);
                }
                let Some(e_tag) = watch.look_due(self).await else {
                    return Ok(None);
                };
                let name = ticket.as_ref().map(|t| t.name.clone());
                match self.acquire_for(duration, payload, name.as_deref()).await {
                    Ok(a) => Ok(Some(a)),
                    Err(e @ Error::Unavailable { .. }) => {
                        if let Error::Unavailable {
                            remaining, holder, ..
                        } = &e
                        {
                            // Waiting for what is left of a holder's tree: looked at as for a
                            // promise; the kernel's watch wakes the waiter when it is gone.
                            let slow = holder.is_promised()
                                || matches!(
                                    holder,
                                    LockHolder::Lingering { .. } | LockHolder::Freed { .. }
                                );
                            watch.unavailable(self, *remaining, slow, e_tag);
                        }
                        watch.processes(self.holders_processes());
                        unavailable = e;
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            };
            let step: Result<Option<Acquired>> =
                unless_stopped(step, &mut stop, &mut stopped).await;
            if stopped {
                if let Ok(Some(a)) = step {
                    self.give_back(a).await;
                }
                break Ok(None);
            }
            let wait = match step {
                Ok(Some(acquired)) => break Ok(Some(acquired)),
                Ok(None) => {
                    errors = 0;
                    let mut wake = clock.now() + poll;
                    if let Some(t) = &ticket {
                        wake = wake.min(t.renew_at());
                    }
                    wake
                }
                Err(e) if e.is_transient() && errors < blocking.retries && !past(hard) => {
                    errors += 1;
                    tracing::warn!(key = %self.full_key(), error = %e, errors,
                        "store error while waiting; retrying");
                    watch.look_at = None;
                    clock.now() + blocking.retry_interval
                }
                Err(e) => break Err(e),
            };
            let changed = tokio::select! {
                () = sleep_until(wait) => false,
                () = watch.processes_changed(&clock) => true,
                () = stop.as_mut() => break Ok(None),
            };
            if changed {
                watch.look_at = None;
            }
        };
        if let Some(t) = ticket {
            t.remove(&locks).await;
        }
        result
    }

    /// Release a lock taken while the waiter was being stopped (its caller will not hold it).
    async fn give_back(&self, acquired: Acquired) {
        if let Err(e) = self.release().await {
            tracing::warn!(key = %self.full_key(), token = acquired.fence.value, error = %e,
                "a lock taken as the wait was stopped could not be released; it runs out on its own");
        }
    }
}
