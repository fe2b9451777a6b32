//! What lock operations answer: an acquisition, the current holder, a lock object's state, a
//! stateless release, and the order of an acquire-any.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::fence::Fence;
use super::record::LockRecord;
use crate::clock::Jitter;

/// What a successful acquisition gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The fencing token of this holding: greater than every earlier holder's.
    pub fence: Fence,
    /// Until when the lock is held, on the holder's monotonic clock (send time + duration).
    pub valid_until: Instant,
}

/// The current holder of a key, as read from the store and judged on its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// `<namespace>/<key>`.
    pub key: String,
    /// The holder.
    pub holder: String,
    /// The holder's payload.
    pub payload: Option<String>,
    /// Time left on the store's clock (skew margin deducted).
    pub remaining: Duration,
    /// The fencing token of the holding.
    pub fence: u64,
}

/// The state of a lock object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// Nobody holds it.
    Free,
    /// Held.
    Held {
        /// By whom.
        holder: String,
        /// For at least this long more, on the store's clock.
        remaining: Duration,
    },
    /// The holding ran out and nobody has taken it since.
    Expired {
        /// The last holder.
        holder: String,
        /// For at least this long, on the store's clock.
        since: Duration,
    },
}

impl LockState {
    /// `free`, `held` or `expired`.
    pub fn name(&self) -> &'static str {
        match self {
            LockState::Free => "free",
            LockState::Held { .. } => "held",
            LockState::Expired { .. } => "expired",
        }
    }

    /// The holder, if held.
    pub fn holder(&self) -> Option<&str> {
        match self {
            LockState::Held { holder, .. } => Some(holder),
            _ => None,
        }
    }

    /// Time left, zero unless held.
    pub fn remaining(&self) -> Duration {
        match self {
            LockState::Held { remaining, .. } => *remaining,
            _ => Duration::ZERO,
        }
    }
}

/// Everything about one lock object, for `show` and `list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The key (without namespace).
    pub key: String,
    /// Free, held or expired, on the store's clock.
    pub state: LockState,
    /// The payload of the current (or last) holding.
    pub payload: Option<String>,
    /// The fencing counter.
    pub fence: u64,
    /// The declared duration of the last write.
    pub duration: Duration,
    /// Stamped by the store; expiry is judged from it.
    pub last_modified: DateTime<Utc>,
    /// The whole record.
    pub record: LockRecord,
}

/// What a stateless release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The owner held the key; it is free now.
    Released,
    /// Nobody held the key (free, expired or never used); nothing was written.
    Free,
}

/// The order in which [`Locks::acquire_any`] tries its keys.
#[derive(Debug, Clone)]
pub enum Order {
    /// As given.
    AsGiven,
    /// Shuffled with this (seeded) jitter source, so that many callers spread over the keys.
    Random(Jitter),
}
