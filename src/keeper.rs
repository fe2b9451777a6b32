//! The keeper: a task that renews an owner lease every `renew_window` and publishes its state.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::Jitter;
use crate::error::{Error, Result};
use crate::lease::{LeaseState, OwnerLease};

/// A running keeper. Dropping it stops renewals (the lease then runs out on its own); call
/// [`Keeper::release`] on orderly shutdown.
#[derive(Debug)]
pub struct Keeper {
    lease: OwnerLease,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl OwnerLease {
    /// Start a keeper for this lease. `jitter` shortens each renew interval by a random fraction
    /// of up to `jitter_fraction` so that many owners do not renew in lockstep.
    pub fn spawn_keeper(&self, jitter: Jitter, jitter_fraction: f64) -> Keeper {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(keep(self.clone(), cancel.clone(), jitter, jitter_fraction));
        Keeper {
            lease: self.clone(),
            cancel,
            task: Some(task),
        }
    }
}

impl Keeper {
    /// The lease this keeper renews.
    pub fn lease(&self) -> &OwnerLease {
        &self.lease
    }

    /// Watch the lease state: `Held { valid_until }` after each renewal, then `Lost` or
    /// `Released` (final).
    pub fn state(&self) -> watch::Receiver<LeaseState> {
        self.lease.subscribe()
    }

    /// Stop renewing, waiting for an in-flight renewal to finish. The lease object stays.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stop renewing and release the lease.
    pub async fn release(self) -> Result<()> {
        let lease = self.lease.clone();
        self.stop().await;
        lease.release().await
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn keep(lease: OwnerLease, cancel: CancellationToken, jitter: Jitter, fraction: f64) {
    let clock = lease.clock().clone();
    let renew = lease.windows().renew_window;
    let first_backoff = (renew / 20).max(Duration::from_millis(10));
    let max_backoff = (renew / 2).max(first_backoff);
    let mut backoff = first_backoff;
    let mut next = clock.now() + jitter.shorten(renew, fraction);
    loop {
        // `state()` turns a held lease whose validity ran out into Lost.
        let valid_until = match lease.state() {
            LeaseState::Held { valid_until } => valid_until,
            _ => return,
        };
        let wait = next.min(valid_until).saturating_duration_since(clock.now());
        tokio::select! {
            // Stopping wins over a renewal due at the same instant, and the choice does not
            // depend on `select!`'s random start (a simulation seed must replay).
            biased;
            _ = cancel.cancelled() => return,
            _ = clock.sleep(wait) => {}
        }
        // A renewal can outlast the validity: a paused server answers nothing until the
        // client's timeout (30 s by default), a dead one is retried inside the client for up
        // to minutes. Stop waiting for it when the validity runs out, so that Lost is
        // published then and the renewal is not carried on (a late write would refresh the
        // object for observers) — unless it succeeded at the last moment.
        let valid_until = match lease.state() {
            LeaseState::Held { valid_until } => valid_until,
            _ => return,
        };
        let renewal = tokio::select! {
            // A renewal answered at the very instant the validity runs out is judged by
            // `commit` (too late: Lost), not dropped at random.
            biased;
            result = lease.renew() => result,
            _ = clock.sleep(valid_until.saturating_duration_since(clock.now())) => {
                if matches!(lease.state(), LeaseState::Held { .. }) {
                    continue;
                }
                tracing::warn!(owner_id = %lease.owner_id(),
                    "lease validity ran out while a renewal was in flight; abandoned it");
                return;
            }
        };
        match renewal {
            Ok(valid_until) => {
                backoff = first_backoff;
                // Count from the renewal's send time (valid_until - expire), as validity does,
                // so a slow answer does not push the next renewal later.
                next =
                    valid_until - lease.windows().expire_window + jitter.shorten(renew, fraction);
                tracing::debug!(owner_id = %lease.owner_id(), remaining = ?valid_until.saturating_duration_since(clock.now()), "lease renewed");
            }
            Err(Error::LeaseLost { .. }) => return,
            Err(error) => {
                // Retry with backoff while time remains; the loop's sleep is capped by
                // valid_until, so running out of time ends as Lost, never as a silent stop.
                tracing::warn!(owner_id = %lease.owner_id(), %error, retry_in = ?backoff, "lease renewal failed");
                next = clock.now() + jitter.shorten(backoff, fraction);
                backoff = (backoff * 2).min(max_backoff);
            }
        }
    }
}
