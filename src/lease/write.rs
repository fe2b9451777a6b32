//! The conditional write every holding and decision is made of, written once: owner leases
//! (acquire, renew), lock records (acquire, heartbeat, release, claim, expire), the lock
//! queue's tickets, and the decision on a checkpoint.
//!
//! A write carries a token unique to it. It is sent with its condition (create-if-absent,
//! If-Match on the version last seen; Swift's PUT with a delete time); a transient error is
//! retried with the same body, so a write that landed is still recognised. A refused condition,
//! or an answer that never came, is settled by reading the object back: this write's token means
//! it landed, whoever answered; anything else is someone else's write, or no object.
//!
//! Invariant: **an ambiguous write is settled only by reading back.** Neither a refused
//! condition nor an error says whether our own attempt (or the client's hidden retry of it)
//! landed first; only the token read back does. The send time is taken once, before the first
//! attempt: a retry may adopt an earlier attempt that landed, and validity must count from it.
//!
//! Invariant: **no answer counts after the deadline.** A write given a deadline (a renewal or a
//! release: the end of the holding it acts for) is abandoned there, read-back included, and an
//! answer that arrives at or after it is treated as no answer: the write may still land, and
//! the caller must treat it as pending.
//!
//! [`renew`] adds what every renewal of a [`Holding`] shares: a write whose outcome is unknown
//! is remembered as pending, and a read-back is settled by the holding's own rules.

use std::future::Future;
use std::time::Instant;

use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};

use super::holding::{Held, Holding, ReadBack, Reconciled};
use crate::bank::Bank;
use crate::clock::SharedClock;
use crate::error::{Error, Result};

/// A record that carries the token of the write that made it.
pub(crate) trait Tokened {
    /// The token of the write that made this record.
    fn token(&self) -> &str;
}

/// How a write is sent.
#[derive(Debug, Clone)]
pub(crate) enum How {
    /// object_store's put with this mode (create-if-absent, If-Match, or a plain overwrite
    /// where the bank's timing argument stands in for a condition).
    Put(PutMode),
    /// Swift: a PUT with `X-Delete-After` (and `If-None-Match: *` with `create`).
    SwiftDeleteAfter {
        /// The object's time to live.
        secs: u64,
        /// Create-if-absent.
        create: bool,
    },
    /// Swift: a PUT with `X-Delete-At` (seconds since the epoch, on the server's clock).
    SwiftDeleteAt(u64),
}

/// A write that landed.
#[derive(Debug)]
pub(crate) struct Landed {
    pub e_tag: Option<String>,
    pub version: Option<String>,
    /// Monotonic instant taken before the *first* attempt was sent.
    pub t_send: Instant,
    /// When the answer (or the read-back that recognised the write) arrived.
    pub answered: Instant,
}

impl Landed {
    /// What the holding state machine knows of this write of the record with `token`.
    pub(crate) fn read_back(self, token: String) -> ReadBack {
        ReadBack {
            token,
            e_tag: self.e_tag,
            version: self.version,
        }
    }
}

/// A record read back, with the version it was read at.
#[derive(Debug)]
pub(crate) struct Found<R> {
    pub record: R,
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

impl<R: Tokened> Found<R> {
    fn read_back(&self) -> ReadBack {
        ReadBack {
            token: self.record.token().to_owned(),
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        }
    }
}

/// The outcome of a conditional write.
#[derive(Debug)]
pub(crate) enum Written<R> {
    /// This write landed (possibly on a retry, recognised by its token).
    Ours(Landed),
    /// The condition was refused and the object read back is not this write: someone else's
    /// record (`Some`), or no object.
    Conflict(Option<Found<R>>),
}

/// One conditional write: where, with how many attempts, and until when.
#[derive(Clone, Copy)]
pub(crate) struct CondWrite<'a> {
    bank: &'a Bank,
    clock: &'a SharedClock,
    path: &'a Path,
    attempts: usize,
    deadline: Option<Instant>,
}

impl<'a> CondWrite<'a> {
    /// A write at `path`: one attempt, no deadline.
    pub(crate) fn new(bank: &'a Bank, clock: &'a SharedClock, path: &'a Path) -> Self {
        Self {
            bank,
            clock,
            path,
            attempts: 1,
            deadline: None,
        }
    }

    /// Send the same body (same token) up to `n` times after transient errors.
    pub(crate) fn attempts(self, n: usize) -> Self {
        Self {
            attempts: n.max(1),
            ..self
        }
    }

    /// Give up at `deadline` (holder's clock); an answer at or after it does not count.
    pub(crate) fn deadline(self, deadline: Instant) -> Self {
        Self {
            deadline: Some(deadline),
            ..self
        }
    }

    /// Send `body` (whose record carries `token`) as `how` says, settling a refused condition
    /// or an unanswered attempt with `read` (the record at the path, `None` when absent).
    ///
    /// Errors: a store error that is not transient at once; a transient one once the attempts
    /// are spent or the deadline passed (the write may land, or have landed: pending); a
    /// read-back's error after a refused condition.
    pub(crate) async fn send<R, F, Fut>(
        &self,
        body: PutPayload,
        token: &str,
        how: &How,
        read: F,
    ) -> Result<Written<R>>
    where
        R: Tokened,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<Found<R>>>>,
    {
        self.send_from(self.clock.now(), body, token, how, read)
            .await
    }

    /// [`send`](Self::send), with validity counted from `t_send`, taken before this call.
    async fn send_from<R, F, Fut>(
        &self,
        t_send: Instant,
        body: PutPayload,
        token: &str,
        how: &How,
        mut read: F,
    ) -> Result<Written<R>>
    where
        R: Tokened,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<Found<R>>>>,
    {
        let mut last_err = None;
        let mut forgot = false;
        for attempt in 0..self.attempts {
            let Some(answer) = self.in_time(self.put(body.clone(), how)).await else {
                return Err(self.gave_up());
            };
            match answer {
                Ok((e_tag, version)) => {
                    return Ok(Written::Ours(Landed {
                        e_tag,
                        version,
                        t_send,
                        answered: self.clock.now(),
                    }))
                }
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
                    | object_store::Error::NotFound { .. },
                ) => {
                    // Someone else's write, or ours (an earlier attempt, the client's retry).
                    return match self.in_time(self.settle(token, t_send, &mut read)).await {
                        Some(settled) => settled,
                        None => Err(self.gave_up()),
                    };
                }
                Err(e) => {
                    // The store refused a condition it was measured to keep (its software
                    // changed): what was learnt about it is forgotten, and the next process
                    // measures it again. Lease, decision and lock writes alike.
                    if !forgot && crate::capability::is_refusal(&e) {
                        forgot = true;
                        // Within the write's deadline, as everything it waits for.
                        let _ = self.in_time(self.bank.forget_learnt()).await;
                    }
                    // A user who may not write: the operator's one line, not a failed request
                    // on one of banklease's own objects (nor retries of it).
                    let err =
                        crate::store::cause::write_failed(self.bank.label(), "put", self.path, e);
                    if !err.is_transient() {
                        return Err(err);
                    }
                    // Internal: the caller says what a failure that lasts means.
                    tracing::debug!(path = %self.path, attempt, error = %err,
                        "conditional write failed; reading back, then retrying with the same token");
                    // It may have landed: then it is ours, and done.
                    if let Some(Ok(ours @ Written::Ours(_))) =
                        self.in_time(self.settle(token, t_send, &mut read)).await
                    {
                        return Ok(ours);
                    }
                    last_err = Some(err);
                }
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    /// The one send of a conditional write to the store.
    async fn put(
        &self,
        body: PutPayload,
        how: &How,
    ) -> object_store::Result<(Option<String>, Option<String>)> {
        let swift = || {
            self.bank
                .swift()
                .ok_or_else(|| object_store::Error::NotSupported {
                    source: "a Swift write on a bank that is not Swift".into(),
                })
        };
        match how {
            How::Put(mode) => self
                .bank
                .store()
                .put_opts(self.path, body, PutOptions::from(mode.clone()))
                .await
                .map(|put| (put.e_tag, put.version)),
            How::SwiftDeleteAfter { secs, create } => swift()?
                .put_with_delete_after(self.path, body, *secs, *create)
                .await
                .map(|w| (w.e_tag, None)),
            How::SwiftDeleteAt(at) => swift()?
                .put_with_delete_at(self.path, body, *at)
                .await
                .map(|w| (w.e_tag, None)),
        }
    }

    /// Read the object back: this write's token makes it ours.
    async fn settle<R, F, Fut>(
        &self,
        token: &str,
        t_send: Instant,
        read: &mut F,
    ) -> Result<Written<R>>
    where
        R: Tokened,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<Found<R>>>>,
    {
        Ok(match read().await? {
            Some(found) if found.record.token() == token => Written::Ours(Landed {
                e_tag: found.e_tag,
                version: found.version,
                t_send,
                answered: self.clock.now(),
            }),
            other => Written::Conflict(other),
        })
    }

    /// `work`'s result if it came before the deadline; `None` (abandoned) otherwise.
    async fn in_time<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let Some(deadline) = self.deadline else {
            return Some(work.await);
        };
        let left = deadline.saturating_duration_since(self.clock.now());
        if left.is_zero() {
            return None;
        }
        // Biased: the same order on every run (a simulation replays a seed exactly); an answer
        // ready with the deadline is judged by the clock below.
        let out = tokio::select! {
            biased;
            out = work => out,
            () = self.clock.sleep(left) => return None,
        };
        (self.clock.now() < deadline).then_some(out)
    }

    fn gave_up(&self) -> Error {
        Error::store(
            "put",
            self.path,
            object_store::Error::Generic {
                store: "banklease",
                source: "no answer before the holding it was sent for ran out; it may still land"
                    .into(),
            },
        )
    }
}

/// A renewal not made because a read-back showed an earlier write of ours
/// ([`Reconciled::Lagging`]): transient, tried again while the holding lasts.
pub(crate) fn lagging(path: &Path) -> Error {
    Error::store(
        "get",
        path,
        object_store::Error::Generic {
            store: "banklease",
            source: "a replica answered with an earlier write of this holder (the store lags); \
                     not renewed this time and nothing written, tried again"
                .into(),
        },
    )
}

/// What a renewal of a holding came to.
#[derive(Debug)]
pub(crate) enum Renewed<X> {
    /// Renewed; valid until this instant.
    Until(Instant),
    /// Not renewed: the object is still our last write, under a new version (write again on it).
    Unchanged(Held<X>),
}

/// One write of `holding` (generation `generation`, with `token`), sent from `t_send` (taken
/// by the caller before it computed the write), that renews `held`: a landed write is committed (it counts only if answered while the holding was valid); one whose
/// outcome is unknown is remembered as pending; a refused condition is settled by the
/// holding's read-back rules (`replaced` says why someone else's record means Lost).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn renew<X, R, F, Fut>(
    holding: &Holding<X>,
    held: &Held<X>,
    write: CondWrite<'_>,
    t_send: Instant,
    generation: u64,
    token: String,
    body: PutPayload,
    how: &How,
    read: F,
    replaced: impl FnOnce(&R) -> String,
) -> Result<Renewed<X>>
where
    X: Clone,
    R: Tokened,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<Found<R>>>>,
{
    let path = write.path.clone();
    let written = write.send_from(t_send, body, &token, how, read).await;
    let found = match written {
        Ok(Written::Ours(landed)) => {
            let (answered, t_send) = (landed.answered, landed.t_send);
            return holding
                .commit_renewal(answered, t_send, landed.read_back(token), generation)
                .map(Renewed::Until);
        }
        Ok(Written::Conflict(found)) => Ok(found),
        // Someone else's bytes where our record was: replaced.
        Err(e @ Error::Corrupt { .. }) => Err(e),
        Err(e) => {
            // Unanswered: it may land (or have landed); recognised when read back.
            holding.remember_pending(&token, generation, t_send);
            // Given up at the deadline, the holding's end: say it is lost, not a store error.
            holding.held()?;
            return Err(e);
        }
    };
    holding.remember_pending(&token, generation, t_send);
    let mut why = None;
    let read = found.map(|found| {
        found.map(|f| {
            why = Some(replaced(&f.record));
            f.read_back()
        })
    });
    match holding.reconcile(held, read, || why.unwrap_or_default())? {
        Reconciled::Adopted(valid_until) => Ok(Renewed::Until(valid_until)),
        Reconciled::Unchanged(now_held) => Ok(Renewed::Unchanged(now_held)),
        Reconciled::Lagging => Err(lagging(&path)),
    }
}
