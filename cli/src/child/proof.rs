//! What COMMAND runs under, as the guard and a continued supervisor need it: the holds (a
//! named lock, an owner lease), each with the margin before its end at which COMMAND must be
//! stopped.

use std::time::Duration;

use banklease::clock::SharedClock;
use banklease::error::error_chain;
use banklease::lock::Lock;
use banklease::{ErrorKind, OwnerLease};

use crate::human;

/// Retry pause while re-proving after a transient store error.
const RETRY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
enum Hold {
    Lock { lock: Lock, margin: Duration },
    Lease { lease: OwnerLease, margin: Duration },
}

impl Hold {
    fn left(&self) -> Duration {
        match self {
            Hold::Lock { lock, margin } => lock.remaining().saturating_sub(*margin),
            Hold::Lease { lease, margin } => lease.remaining().saturating_sub(*margin),
        }
    }

    fn margin(&self) -> Duration {
        match self {
            Hold::Lock { margin, .. } | Hold::Lease { margin, .. } => *margin,
        }
    }

    fn what(&self) -> String {
        match self {
            Hold::Lock { lock, .. } => format!("the lock key=`{}`", lock.full_key()),
            Hold::Lease { lease, .. } => format!("the lease of owner_id=`{}`", lease.owner_id()),
        }
    }

    /// One renewal, sent now.
    async fn renew(&self) -> banklease::Result<()> {
        match self {
            Hold::Lock { lock, .. } => lock.heartbeat().await.map(drop),
            Hold::Lease { lease, .. } => lease.renew().await.map(drop),
        }
    }
}

/// The holds COMMAND runs under.
#[derive(Debug, Clone, Default)]
pub struct Proof {
    holds: Vec<Hold>,
}

impl Proof {
    /// Add a named lock, COMMAND to be stopped once less than `margin` of it is left.
    pub fn lock(mut self, lock: &Lock, margin: Duration) -> Self {
        self.holds.push(Hold::Lock {
            lock: lock.clone(),
            margin,
        });
        self
    }

    /// Add an owner lease, COMMAND to be stopped once less than `margin` of it is left.
    pub fn lease(mut self, lease: &OwnerLease, margin: Duration) -> Self {
        self.holds.push(Hold::Lease {
            lease: lease.clone(),
            margin,
        });
        self
    }

    /// Bind every lock COMMAND runs under to this supervisor and to COMMAND's tree (`to`), and
    /// renew each at once so that its record names them: only this holder then takes or
    /// releases the lock while they live, a waiter on this host does not take it past its
    /// expiry while the tree runs, and with `to.handoff` takes it as soon as the kernel proves
    /// them all gone, not at its expiry ([`Lock::bind_to_processes`]). A renewal that fails here
    /// is the heartbeat's to retry.
    pub fn bind_locks(&self, to: &banklease::lock::process::Processes) {
        for hold in &self.holds {
            let Hold::Lock { lock, .. } = hold else {
                continue;
            };
            if lock.bind_to_processes(to) {
                let lock = lock.clone();
                tokio::spawn(async move {
                    if let Err(e) = lock.heartbeat().await {
                        tracing::debug!(key = %lock.full_key(), error = %error_chain(&e),
                            "the renewal that names COMMAND's processes failed; the heartbeat \
                             names them next");
                    }
                });
            }
        }
    }

    /// Before COMMAND starts: bind every lock to this supervisor and to `to` (which names the
    /// guard in COMMAND's place), and wait (at most `within`) until the renewal that says so
    /// has landed, so that no release by name finds a lock of a started COMMAND unbound.
    /// Bound again with COMMAND once it runs ([`bind_locks`](Self::bind_locks)). A renewal that
    /// fails or takes longer is the heartbeat's to retry (the start is not held up for it).
    pub async fn bind_before_start(
        &self,
        to: &banklease::lock::process::Processes,
        within: std::time::Duration,
    ) {
        for hold in &self.holds {
            let Hold::Lock { lock, .. } = hold else {
                continue;
            };
            if !lock.bind_to_processes(to) {
                continue;
            }
            // Its own task: a renewal cut off mid-write would leave a version the lock does
            // not know, and the next heartbeat would take it for another writer's.
            let renewing = {
                let lock = lock.clone();
                tokio::spawn(async move { lock.heartbeat().await.map(drop) })
            };
            match tokio::time::timeout(within, renewing).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::debug!(key = %lock.full_key(), error = %error_chain(&e),
                    "the renewal that binds the lock before COMMAND starts failed"),
                Ok(Err(e)) => tracing::debug!(key = %lock.full_key(), error = %e,
                    "the renewal that binds the lock before COMMAND starts did not finish"),
                Err(_) => tracing::debug!(key = %lock.full_key(),
                    "the renewal that binds the lock before COMMAND starts is late; it goes on"),
            }
        }
    }

    /// Proved time left before COMMAND must be stopped: the least over the holds of the time
    /// left (send-time expiry on the holder's clock) less its margin. Sends no request.
    pub fn left(&self) -> Duration {
        self.holds
            .iter()
            .map(Hold::left)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Why COMMAND must be stopped now, if it must: the first hold with no proved time left.
    pub fn what_ran_out(&self) -> Option<String> {
        self.holds
            .iter()
            .find(|h| h.left().is_zero())
            .map(|h| format!("{} had less than {} left", h.what(), human(h.margin())))
    }

    /// Renew every hold with a request sent now (after the supervisor was stopped): `Ok` once
    /// each is proved anew, `Err(reason)` when one is lost or cannot be renewed before less than
    /// its margin is left. Transient store errors are retried while time remains.
    pub async fn reprove(&self, clock: &SharedClock) -> Result<(), String> {
        for hold in &self.holds {
            loop {
                let left = hold.left();
                if left.is_zero() {
                    return Err(format!(
                        "{} had less than {} left",
                        hold.what(),
                        human(hold.margin())
                    ));
                }
                let renewed = tokio::select! {
                    renewed = hold.renew() => renewed,
                    () = clock.sleep(left) => continue,
                };
                match renewed {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::Lost => {
                        return Err(format!("{} was lost: {}", hold.what(), error_chain(&e)))
                    }
                    Err(e) => {
                        tracing::debug!(error = %error_chain(&e), "renewal after a stop failed; retrying");
                        clock.sleep(RETRY.min(hold.left())).await;
                    }
                }
            }
        }
        Ok(())
    }
}
