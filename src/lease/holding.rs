//! The holding state machine that owner leases and named locks share: what the holder knows of
//! its own holding, and the rules that decide when a write counts.
//!
//! Invariants kept here (see ARCHITECTURE.md):
//! - **Send-time expiry**: a holding is valid until `t_send + length`, where `t_send` is the
//!   monotonic instant taken *before* the write was sent, counted only once the write succeeded.
//! - **A late answer does not count**: a renewal answered after the holding ran out is Lost,
//!   never a renewal — an observer may already have judged the holder dead.
//! - **Lost is final**: nothing revives a Lost holding; the first reason is kept.
//! - **Ambiguity is settled by reading back**: a write whose outcome is unknown is remembered as
//!   *pending* by its token, and adopted if a later read-back finds it.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::clock::SharedClock;
use crate::error::{Error, Result};

/// Unanswered writes remembered; older ones are forgotten (each is a renewal that timed out).
const MAX_PENDING: usize = 16;

/// Tokens of our own earlier writes remembered, to recognise a lagging replica's answer.
const MAX_EARLIER: usize = 16;

/// The holder-side state of a holding, as published to watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Held until `valid_until` (monotonic, holder's clock).
    Held {
        /// When the holding stops being valid unless renewed.
        valid_until: Instant,
    },
    /// Lost; final.
    Lost {
        /// Why.
        reason: String,
    },
    /// Released by its holder; final.
    Released,
}

/// How one user of the core names things in its reasons and logs.
#[derive(Debug)]
pub(crate) struct Words {
    /// `lease`, `lock`.
    pub what: &'static str,
    /// Why a holding whose time ran out unrenewed is Lost.
    pub ran_out: &'static str,
    /// Why a renewal answered after the time ran out is Lost.
    pub answered_late: &'static str,
    /// Why a write that took longer than the whole length is Lost.
    pub too_slow: &'static str,
    /// Why a read-back that finds no object is Lost.
    pub gone: &'static str,
    /// Whether a loss is an error worth logging (a lease's, a lock's); a queue ticket's is
    /// routine — its waiter queues again and says so itself.
    pub loss_is_error: bool,
}

/// A live holding: our last write, and until when it holds.
#[derive(Debug, Clone)]
pub(crate) struct Held<X> {
    pub e_tag: Option<String>,
    pub version: Option<String>,
    pub generation: u64,
    pub token: String,
    /// Send instant of the write that made this holding valid.
    pub t_send: Instant,
    /// How long each write holds for.
    pub length: Duration,
    pub valid_until: Instant,
    /// What the user keeps with the holding (a lock's fencing token and payload).
    pub extra: X,
}

#[derive(Debug, Clone)]
pub(crate) enum Phase<X> {
    Held(Held<X>),
    Lost(String),
    Released,
}

/// A write whose answer was lost: it may have landed.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub token: String,
    pub generation: u64,
    pub t_send: Instant,
}

/// What a read-back of the object found.
#[derive(Debug)]
pub(crate) struct ReadBack {
    pub token: String,
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

/// What [`Holding::reconcile`] decided.
#[derive(Debug)]
pub(crate) enum Reconciled<X> {
    /// Our last committed write, under a new ETag.
    Unchanged(Held<X>),
    /// A pending write of ours landed; the holding is valid until the instant given.
    Adopted(Instant),
    /// An earlier write of ours, which a later one of ours replaced: a replica that lags
    /// answered. Nothing is known of the object now; nothing may be written on it this time.
    Lagging,
}

struct Inner<X> {
    phase: Phase<X>,
    pending: Vec<Pending>,
    /// Tokens of our committed writes that a later one replaced (newest last).
    earlier: Vec<String>,
}

/// One holding's state. Never held across an await.
pub(crate) struct Holding<X> {
    clock: SharedClock,
    words: &'static Words,
    /// `owner_id=…`, `key=… owner=…`: who, in logs.
    subject: String,
    lost: Box<dyn Fn(&str) -> Error + Send + Sync>,
    inner: Mutex<Inner<X>>,
    state_tx: watch::Sender<LeaseState>,
}

impl<X: fmt::Debug + Clone> fmt::Debug for Holding<X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holding")
            .field("subject", &self.subject)
            .field("phase", &self.lock().phase)
            .finish()
    }
}

impl<X: Clone> Holding<X> {
    /// A holding not yet made: Lost for `why_not` until a first write commits.
    pub(crate) fn new(
        clock: SharedClock,
        words: &'static Words,
        subject: String,
        why_not: &str,
        lost: impl Fn(&str) -> Error + Send + Sync + 'static,
    ) -> Self {
        let (state_tx, _) = watch::channel(LeaseState::Lost {
            reason: why_not.to_owned(),
        });
        Self {
            clock,
            words,
            subject,
            lost: Box::new(lost),
            inner: Mutex::new(Inner {
                phase: Phase::Lost(why_not.to_owned()),
                pending: Vec::new(),
                earlier: Vec::new(),
            }),
            state_tx,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<X>> {
        self.inner.lock().expect("holding state poisoned")
    }

    pub(crate) fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The error that says this holding is gone, and why.
    pub(crate) fn lost_error(&self, reason: &str) -> Error {
        (self.lost)(reason)
    }

    /// Watch the state: every change is published.
    pub(crate) fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state_tx.subscribe()
    }

    fn publish(&self, phase: &Phase<X>) {
        self.state_tx.send_replace(state_of(phase));
    }

    /// Turn a held holding whose time ran out into Lost.
    fn expire_if_due(&self, inner: &mut Inner<X>, now: Instant) {
        if matches!(&inner.phase, Phase::Held(h) if now >= h.valid_until) {
            self.log_loss(self.words.ran_out);
            inner.phase = Phase::Lost(self.words.ran_out.to_owned());
            self.publish(&inner.phase);
        }
    }

    fn log_loss(&self, reason: &str) {
        if self.words.loss_is_error {
            tracing::error!(subject = %self.subject, reason = %reason, "{} lost", self.words.what);
        } else {
            tracing::debug!(subject = %self.subject, reason = %reason, "{} lost", self.words.what);
        }
    }

    /// The current state; a held holding whose time ran out is reported (and made) Lost.
    pub(crate) fn state(&self) -> LeaseState {
        let now = self.clock.now();
        let mut inner = self.lock();
        self.expire_if_due(&mut inner, now);
        state_of(&inner.phase)
    }

    /// The phase as it stands, without judging time (for answers from memory).
    pub(crate) fn phase(&self) -> Phase<X> {
        self.lock().phase.clone()
    }

    /// The live holding, or the final error if there is none (its time ran out: Lost).
    pub(crate) fn held(&self) -> Result<Held<X>> {
        let now = self.clock.now();
        let mut inner = self.lock();
        self.expire_if_due(&mut inner, now);
        match &inner.phase {
            Phase::Held(h) => Ok(h.clone()),
            Phase::Lost(reason) => Err(self.lost_error(reason)),
            Phase::Released => Err(self.lost_error("released")),
        }
    }

    /// The holding while its time has not run out (no transition is made).
    pub(crate) fn live(&self) -> Option<Held<X>> {
        let now = self.clock.now();
        match &self.lock().phase {
            Phase::Held(h) if now < h.valid_until => Some(h.clone()),
            _ => None,
        }
    }

    /// Time left on the holder's clock; zero unless held.
    pub(crate) fn remaining(&self) -> Duration {
        self.live()
            .map(|h| h.valid_until.saturating_duration_since(self.clock.now()))
            .unwrap_or_default()
    }

    /// Mark the holding Lost for `reason` (a Lost one keeps its first reason) and return the
    /// error that says so.
    pub(crate) fn mark_lost(&self, reason: String) -> Error {
        let mut inner = self.lock();
        if let Phase::Lost(existing) = &inner.phase {
            return self.lost_error(existing);
        }
        self.log_loss(&reason);
        inner.phase = Phase::Lost(reason.clone());
        self.publish(&inner.phase);
        self.lost_error(&reason)
    }

    /// Lost for `reason` if held now: someone else was seen holding it.
    pub(crate) fn lose_if_held(&self, reason: String) {
        if matches!(self.lock().phase, Phase::Held(_)) {
            self.mark_lost(reason);
        }
    }

    /// Released, final: from now on nothing is held.
    pub(crate) fn set_released(&self) {
        let mut inner = self.lock();
        inner.phase = Phase::Released;
        self.publish(&inner.phase);
    }

    /// Remember a write whose answer was lost, to adopt it if a read-back finds it.
    pub(crate) fn remember_pending(&self, token: &str, generation: u64, t_send: Instant) {
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

    /// Whether `token` is our last write's or a pending one's.
    pub(crate) fn is_ours(&self, held: &Held<X>, token: &str) -> bool {
        held.token == token || self.lock().pending.iter().any(|p| p.token == token)
    }

    /// A first write (acquire, take) sent at `t_send` succeeded, answered at `answered`: the
    /// holding is valid until `t_send + length`.
    pub(crate) fn commit_new(
        &self,
        answered: Instant,
        t_send: Instant,
        written: ReadBack,
        length: Duration,
        extra: X,
    ) -> Result<Instant> {
        self.install(
            answered,
            Held {
                e_tag: written.e_tag,
                version: written.version,
                generation: 1,
                token: written.token,
                t_send,
                length,
                valid_until: t_send + length,
                extra,
            },
        )
    }

    /// A renewal (generation `generation`, sent at `t_send`) succeeded, answered at `answered`.
    ///
    /// Invariant: it counts only if answered while the holding was still valid. Once the time
    /// ran out, an observer may have judged the holder dead (a GC may have collected, another
    /// owner may have taken the key), so a late success must not revive it.
    pub(crate) fn commit_renewal(
        &self,
        answered: Instant,
        t_send: Instant,
        written: ReadBack,
        generation: u64,
    ) -> Result<Instant> {
        let current = match &self.lock().phase {
            Phase::Held(h) => h.clone(),
            Phase::Lost(reason) => return Err(self.lost_error(reason)),
            Phase::Released => return Err(self.lost_error("released")),
        };
        if answered >= current.valid_until {
            return Err(self.mark_lost(self.words.answered_late.to_owned()));
        }
        self.install(
            answered,
            Held {
                e_tag: written.e_tag,
                version: written.version,
                generation,
                token: written.token,
                t_send,
                valid_until: t_send + current.length,
                ..current
            },
        )
    }

    fn install(&self, answered: Instant, held: Held<X>) -> Result<Instant> {
        if answered >= held.valid_until {
            return Err(self.mark_lost(self.words.too_slow.to_owned()));
        }
        let valid_until = held.valid_until;
        let mut inner = self.lock();
        inner.pending.clear();
        if let Phase::Held(before) = &inner.phase {
            if before.token != held.token {
                let token = before.token.clone();
                if inner.earlier.len() >= MAX_EARLIER {
                    inner.earlier.remove(0);
                }
                inner.earlier.push(token);
            }
        }
        inner.phase = Phase::Held(held);
        self.publish(&inner.phase);
        Ok(valid_until)
    }

    /// After a conflict or an ambiguous answer, decide from a read-back of the object: our last
    /// write under a new ETag (`Unchanged`), one of our pending writes (adopted), an earlier
    /// write of ours that a later one replaced (`Lagging`: a replica behind answered, which says
    /// nothing of the object now), or anything else — no object, a replaced or unreadable one —
    /// which makes the holding Lost with the reason `replaced` gives.
    pub(crate) fn reconcile(
        &self,
        held: &Held<X>,
        read: Result<Option<ReadBack>>,
        replaced: impl FnOnce() -> String,
    ) -> Result<Reconciled<X>> {
        let found = match read {
            Ok(Some(found)) => found,
            Ok(None) => return Err(self.mark_lost(self.words.gone.to_owned())),
            Err(e @ Error::Corrupt { .. }) => {
                return Err(
                    self.mark_lost(format!("the {} object was replaced: {e}", self.words.what))
                )
            }
            Err(e) => return Err(e),
        };
        if found.token == held.token {
            let mut inner = self.lock();
            let mut now_held = held.clone();
            now_held.e_tag = found.e_tag;
            now_held.version = found.version;
            if let Phase::Held(h) = &mut inner.phase {
                h.e_tag = now_held.e_tag.clone();
                h.version = now_held.version.clone();
            }
            return Ok(Reconciled::Unchanged(now_held));
        }
        let (pending, earlier) = {
            let inner = self.lock();
            let pending = inner
                .pending
                .iter()
                .find(|p| p.token == found.token)
                .cloned();
            (pending, inner.earlier.contains(&found.token))
        };
        if pending.is_none() && earlier {
            // Only we write our tokens, and a later write of ours landed: this answer is a
            // lagging replica's. Not a loss (that would stop a live holder on a store that
            // lags), and not a renewal either: the caller writes nothing on it.
            tracing::debug!(subject = %self.subject,
                "a read-back showed an earlier write of ours (a replica lags); not renewed this time");
            return Ok(Reconciled::Lagging);
        }
        match pending {
            Some(p) => {
                tracing::info!(subject = %self.subject, generation = p.generation,
                    "an earlier write whose answer was lost did land; adopting it");
                self.commit_renewal(self.clock.now(), p.t_send, found, p.generation)
                    .map(Reconciled::Adopted)
            }
            None => Err(self.mark_lost(replaced())),
        }
    }
}

fn state_of<X>(phase: &Phase<X>) -> LeaseState {
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
