//! Background heartbeats for a named lock, reporting failures through a channel.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::named::Lock;
use crate::clock::Jitter;
use crate::error::{Error, Result};

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

/// A running background heartbeat: renews the lock every half length (jittered shorter),
/// retries store errors with backoff while time remains, and reports every failure on the
/// channel returned by [`Lock::spawn_heartbeat`]. Dropping it stops the heartbeats (the lock then
/// runs out on its own); call [`Heartbeat::release`] on orderly shutdown.
#[derive(Debug)]
pub struct Heartbeat {
    lock: Lock,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

pub(crate) fn spawn(
    lock: Lock,
    jitter: Jitter,
    fraction: f64,
) -> (Heartbeat, mpsc::Receiver<HeartbeatFailure>) {
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(beat(lock.clone(), cancel.clone(), jitter, fraction, tx));
    (
        Heartbeat {
            lock,
            cancel,
            task: Some(task),
        },
        rx,
    )
}

impl Heartbeat {
    /// The lock being kept.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Stop the heartbeats, waiting for one in flight to finish. The lock stays held until it
    /// runs out.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stop the heartbeats and release the lock.
    pub async fn release(self) -> Result<()> {
        let lock = self.lock.clone();
        self.stop().await;
        lock.release().await
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn report(tx: &mpsc::Sender<HeartbeatFailure>, failure: HeartbeatFailure) {
    if let Err(e) = tx.try_send(failure) {
        tracing::warn!(error = %e, "heartbeat failure not reported: the channel is full or closed");
    }
}

async fn beat(
    lock: Lock,
    cancel: CancellationToken,
    jitter: Jitter,
    fraction: f64,
    tx: mpsc::Sender<HeartbeatFailure>,
) {
    let clock = lock.locks().clock().clone();
    let Some(length) = lock.duration() else {
        report(
            &tx,
            HeartbeatFailure {
                error: Error::LockLost {
                    key: lock.full_key(),
                    owner: lock.owner().to_owned(),
                    reason: "not held when the heartbeat started".to_owned(),
                },
                lost: true,
            },
        );
        return;
    };
    let first_backoff = (length / 20).max(Duration::from_millis(10));
    let max_backoff = (length / 4).max(first_backoff);
    let mut backoff = first_backoff;
    // Until the next heartbeat: half the length after the last successful write, jittered.
    let mut wait = jitter.shorten(lock.renew_in(), fraction);
    loop {
        // Never sleep past the end of the hold: running out must be noticed and reported.
        let wait_now = wait.min(lock.remaining());
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = clock.sleep(wait_now) => {}
        }
        // A heartbeat can outlast the hold (a paused server answers nothing until the client's
        // timeout): stop waiting when the time runs out and report the lock Lost then, not
        // whenever the request returns.
        let heartbeat = tokio::select! {
            biased;
            result = lock.heartbeat() => result,
            _ = clock.sleep(lock.remaining()) => Err(Error::LockLost {
                key: lock.full_key(),
                owner: lock.owner().to_owned(),
                reason: "its time ran out while a heartbeat was in flight".to_owned(),
            }),
        };
        match heartbeat {
            Ok(_) => {
                backoff = first_backoff;
                wait = jitter.shorten(lock.renew_in(), fraction);
            }
            Err(error @ Error::LockLost { .. }) => {
                report(&tx, HeartbeatFailure { error, lost: true });
                return;
            }
            Err(error) => {
                tracing::warn!(key = %lock.full_key(), %error, retry_in = ?backoff, "heartbeat failed");
                report(&tx, HeartbeatFailure { error, lost: false });
                wait = jitter.shorten(backoff, fraction);
                backoff = (backoff * 2).min(max_backoff);
            }
        }
    }
}
