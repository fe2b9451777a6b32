//! The owner lease's keeper: the core's renewal task, publishing on the lease's watch channel.

use tokio::sync::watch;

use super::OwnerLease;
use crate::clock::Jitter;
use crate::error::Result;
use crate::lease::renewal::Running;
use crate::lease::LeaseState;

/// A running keeper of an owner lease. Dropping it stops renewals (the lease then runs out on
/// its own); call [`Keeper::release`] on orderly shutdown.
#[derive(Debug)]
pub struct Keeper {
    lease: OwnerLease,
    running: Running,
}

impl OwnerLease {
    /// Start a keeper for this lease: it renews every `renew_window` from the send time of the
    /// last renewal, shortened by a random fraction of up to `jitter_fraction` so that many
    /// owners do not renew in lockstep, and publishes every change of state.
    pub fn spawn_keeper(&self, jitter: Jitter, jitter_fraction: f64) -> Keeper {
        Keeper {
            lease: self.clone(),
            // Every change is published on the lease's watch; the log line is the report.
            running: Running::spawn(self.clone(), jitter, jitter_fraction, |_| {}),
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
    pub async fn stop(self) {
        self.running.stop().await;
    }

    /// Stop renewing and release the lease.
    pub async fn release(self) -> Result<()> {
        let lease = self.lease.clone();
        self.stop().await;
        lease.release().await
    }
}
