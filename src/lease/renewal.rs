//! One keeper for every holding: a task that renews it on its cadence, retries store errors with
//! backoff while time remains, and stops once the holding is Lost or released. Owner leases
//! ([`crate::Keeper`]) and named locks ([`crate::lock::Heartbeat`]) are thin users of it.
//!
//! Lost is final here too: the keeper never sleeps past `valid_until`, and a renewal that
//! outlasts the validity (a hung or retried request) is abandoned there and Lost published, so
//! the holder learns it at the instant an observer may judge it dead, not when the store answers.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::holding::Holding;
use crate::clock::Jitter;
use crate::error::{Error, Result};

/// When a holding is renewed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cadence {
    /// From the send time of the last successful write to the next renewal (jittered shorter).
    pub interval: Duration,
    /// The first retry after a failed renewal; doubled on each failure ...
    pub first_backoff: Duration,
    /// ... up to this.
    pub max_backoff: Duration,
}

/// What a keeper renews.
pub(crate) trait Renewable: Clone + Send + Sync + 'static {
    /// What the holding keeps beside the core state.
    type Extra: Clone + Send + 'static;
    fn holding(&self) -> &Holding<Self::Extra>;
    fn renew(&self) -> impl Future<Output = Result<Instant>> + Send;
    fn cadence(&self) -> Cadence;
}

/// A failed renewal, as the keeper reports it.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A store error, retried while time remains.
    Retrying(Error),
    /// The holding is gone for good (Lost or released); the keeper has stopped.
    Final(Error),
}

/// A running keeper task: cancelled on drop.
#[derive(Debug)]
pub(crate) struct Running {
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Running {
    pub(crate) fn spawn<R: Renewable>(
        renewable: R,
        jitter: Jitter,
        fraction: f64,
        report: impl FnMut(Failure) + Send + 'static,
    ) -> Self {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(keep(renewable, cancel.clone(), jitter, fraction, report));
        Self {
            cancel,
            task: Some(task),
        }
    }

    /// Stop, waiting for a renewal in flight to finish.
    pub(crate) async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn keep<R: Renewable>(
    renewable: R,
    cancel: CancellationToken,
    jitter: Jitter,
    fraction: f64,
    mut report: impl FnMut(Failure),
) {
    let holding = renewable.holding();
    let clock = holding.clock().clone();
    let cadence = renewable.cadence();
    let mut backoff = cadence.first_backoff;
    // `held()` turns a holding whose time ran out into Lost.
    let mut next = match holding.held() {
        Ok(h) => h.t_send + jitter.shorten(cadence.interval, fraction),
        Err(e) => return report(Failure::Final(e)),
    };
    loop {
        let valid_until = match holding.held() {
            Ok(h) => h.valid_until,
            Err(e) => return report(Failure::Final(e)),
        };
        // Never sleep past the end of the holding: running out must be noticed and published.
        let wait = next.min(valid_until).saturating_duration_since(clock.now());
        tokio::select! {
            // Stopping wins over a renewal due at the same instant, and the choice does not
            // depend on `select!`'s random start (a simulation seed must replay).
            biased;
            _ = cancel.cancelled() => return,
            _ = clock.sleep(wait) => {}
        }
        let valid_until = match holding.held() {
            Ok(h) => h.valid_until,
            Err(e) => return report(Failure::Final(e)),
        };
        // A renewal can outlast the holding: a paused server answers nothing until the client's
        // timeout (30 s by default), a dead one is retried inside the client for up to minutes.
        // Stop waiting for it when the time runs out, so that Lost is published then and the
        // renewal is not carried on (a late write would refresh the object for observers) —
        // unless it succeeded at the last moment.
        let renewal = tokio::select! {
            // A renewal answered at the very instant the time runs out is judged by the commit
            // (too late: Lost), not dropped at random.
            biased;
            result = renewable.renew() => result,
            _ = clock.sleep(valid_until.saturating_duration_since(clock.now())) => {
                match holding.held() {
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(target: crate::lease::RENEWAL_TARGET, error = %e, "time ran out while a renewal was in flight; abandoned it");
                        return report(Failure::Final(e));
                    }
                }
            }
        };
        match renewal {
            Ok(_) => {
                backoff = cadence.first_backoff;
                // Count from the renewal's send time, as validity does, so a slow answer does
                // not push the next renewal later.
                match holding.held() {
                    Ok(h) => next = h.t_send + jitter.shorten(cadence.interval, fraction),
                    Err(e) => return report(Failure::Final(e)),
                }
            }
            Err(error) => {
                if let Err(final_error) = holding.held() {
                    let error = match error {
                        e @ (Error::LeaseLost { .. } | Error::LockLost { .. }) => e,
                        _ => final_error,
                    };
                    return report(Failure::Final(error));
                }
                // Retry with backoff while time remains; the sleep above is capped by
                // `valid_until`, so running out of time ends as Lost, never as a silent stop.
                tracing::warn!(target: crate::lease::RENEWAL_TARGET, %error, retry_in = ?backoff, "renewal failed");
                report(Failure::Retrying(error));
                next = clock.now() + jitter.shorten(backoff, fraction);
                backoff = (backoff * 2).min(cadence.max_backoff);
            }
        }
    }
}
