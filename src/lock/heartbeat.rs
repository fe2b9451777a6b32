//! Background heartbeats for a named lock: the lease core's keeper, reporting failures through a
//! channel.

use tokio::sync::mpsc;

use super::named::Lock;
use crate::clock::Jitter;
use crate::error::{Error, Result};
use crate::lease::{Failure, Running};

/// Failures reported before the receiver must have read them (later ones are dropped, and
/// logged).
const CHANNEL_CAPACITY: usize = 16;

/// A failed heartbeat, as reported by a [`Heartbeat`].
#[derive(Debug)]
pub struct HeartbeatFailure {
    /// What went wrong.
    pub error: Error,
    /// True when the hold is gone for good ([`Error::LockLost`]): the heartbeat has stopped and
    /// the holder must stop acting as one. False for a store error that is being retried.
    pub lost: bool,
}

/// A running background heartbeat: renews the lock every half length (jittered shorter) from the
/// send time of its last write, retries store errors with backoff while time remains, and
/// reports every failure on the channel returned by [`Lock::spawn_heartbeat`]. Dropping it stops
/// the heartbeats (the lock then runs out on its own); call [`Heartbeat::release`] on orderly
/// shutdown.
#[derive(Debug)]
pub struct Heartbeat {
    lock: Lock,
    running: Running,
}

impl Lock {
    /// Start a background heartbeat (see [`Heartbeat`]).
    pub fn spawn_heartbeat(
        &self,
        jitter: Jitter,
        jitter_fraction: f64,
    ) -> (Heartbeat, mpsc::Receiver<HeartbeatFailure>) {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let report = move |failure: Failure| {
            let failure = match failure {
                Failure::Retrying(error) => HeartbeatFailure { error, lost: false },
                Failure::Final(error) => HeartbeatFailure { error, lost: true },
            };
            // Closed: the holder stopped watching (it is ending, and says why itself); full:
            // it has older failures unread. Neither is the operator's business (a job's mail
            // carried this line beside the failure it was about).
            if let Err(e) = tx.try_send(failure) {
                tracing::debug!(error = %e, "heartbeat failure not reported: the channel is full or closed");
            }
        };
        let running = Running::spawn(self.clone(), jitter, jitter_fraction, report);
        (
            Heartbeat {
                lock: self.clone(),
                running,
            },
            rx,
        )
    }
}

impl Heartbeat {
    /// The lock being kept.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Stop the heartbeats, waiting for one in flight to finish. The lock stays held until it
    /// runs out.
    pub async fn stop(self) {
        self.running.stop().await;
    }

    /// Stop the heartbeats and release the lock.
    pub async fn release(self) -> Result<()> {
        let lock = self.lock.clone();
        self.stop().await;
        lock.release().await
    }
}
