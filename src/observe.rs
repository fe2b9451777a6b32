//! The observer's view of a lease, for the GC and the admin CLI.
//!
//! Invariant: expiry is judged in **one clock domain, the store's**. The lease object's
//! `last_modified` (stamped by the store) plus the owner's declared expire window is compared
//! with the store's current time ([`StoreTime`]), minus a skew margin. The owner's wall-clock
//! fields in the record are never used, and neither is this host's wall clock.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::bank::{Bank, StoreTime};
use crate::clock::SharedClock;
use crate::error::Error;
use crate::id::OwnerId;
use crate::lease::{read_lease, LeaseRecord};

/// What an observer knows about an owner's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseView {
    /// The lease is valid for at least `remaining` more (store clock, margin already deducted).
    Alive {
        /// Lease time left, conservatively.
        remaining: Duration,
        /// The lease body.
        record: Box<LeaseRecord>,
    },
    /// The lease expired at least `since` ago (store clock, margin already deducted).
    Expired {
        /// Time since expiry, conservatively.
        since: Duration,
        /// The lease body.
        record: Box<LeaseRecord>,
    },
    /// The store says there is no lease object (a read, not a listing).
    Missing,
    /// The lease could not be read or parsed. Never a reason to collect.
    Unreadable {
        /// What went wrong.
        error: String,
    },
}

impl LeaseView {
    /// A short name: `alive`, `expired`, `missing`, `unreadable`.
    pub fn name(&self) -> &'static str {
        match self {
            LeaseView::Alive { .. } => "alive",
            LeaseView::Expired { .. } => "expired",
            LeaseView::Missing => "missing",
            LeaseView::Unreadable { .. } => "unreadable",
        }
    }
}

/// Judge a lease from what the store said. Pure: the GC's planner and tests call it directly.
///
/// `Alive.remaining = (last_modified + expire − margin) − store_now` (floored at zero) and
/// `Expired.since = store_now − (last_modified + expire + margin)`: both err on the side of the
/// owner being alive.
pub fn judge(
    record: LeaseRecord,
    last_modified: DateTime<Utc>,
    store_now: DateTime<Utc>,
    margin: Duration,
) -> LeaseView {
    let margin = chrono::Duration::from_std(margin).unwrap_or(chrono::Duration::MAX);
    let expire =
        chrono::Duration::from_std(record.expire_window()).unwrap_or(chrono::Duration::MAX);
    let expires_at = last_modified + expire;
    if store_now >= expires_at + margin {
        LeaseView::Expired {
            since: StoreTime::between(expires_at + margin, store_now),
            record: Box::new(record),
        }
    } else {
        LeaseView::Alive {
            remaining: StoreTime::between(store_now, expires_at - margin),
            record: Box::new(record),
        }
    }
}

/// Reads and judges leases against one reading of the store clock.
#[derive(Debug, Clone)]
pub struct LeaseObserver {
    bank: Bank,
    clock: SharedClock,
    margin: Duration,
}

impl LeaseObserver {
    /// An observer on `bank` with a skew `margin` (see `lease.skew_margin`).
    pub fn new(bank: Bank, clock: SharedClock, margin: Duration) -> Self {
        Self {
            bank,
            clock,
            margin,
        }
    }

    /// Read the store's clock (two requests). One reading serves a whole GC pass.
    pub async fn store_time(&self) -> crate::Result<StoreTime> {
        self.bank.store_time(&self.clock).await
    }

    /// One request: read the owner's lease and judge it against `store_time`, carried forward
    /// to now on this host's monotonic clock.
    pub async fn view(&self, owner: &OwnerId, store_time: &StoreTime) -> LeaseView {
        match read_lease(&self.bank, owner).await {
            Ok(None) => LeaseView::Missing,
            Ok(Some((record, meta))) => {
                let store_now = store_time.at_instant(self.clock.now());
                judge(record, meta.last_modified, store_now, self.margin)
            }
            Err(e @ (Error::Corrupt { .. } | Error::Store { .. })) => LeaseView::Unreadable {
                error: error_chain(&e),
            },
            Err(e) => LeaseView::Unreadable {
                error: error_chain(&e),
            },
        }
    }
}

/// An error and its sources on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LEASE_FORMAT;

    fn record(expire_ms: u64) -> LeaseRecord {
        LeaseRecord {
            format: LEASE_FORMAT,
            owner_id: OwnerId::parse("o").unwrap(),
            host: "h".into(),
            pid: 1,
            renew_window_ms: 1,
            expire_window_ms: expire_ms,
            validity_window_ms: 1,
            // Deliberately absurd wall-clock fields: they must not matter.
            acquired_at: DateTime::<Utc>::MIN_UTC,
            renewed_at: DateTime::<Utc>::MAX_UTC,
            generation: 1,
            token: "t".into(),
        }
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn judged_on_store_times_with_margin() {
        let m = Duration::from_secs(2);
        // Written at 0, expires at 10; margin 2.
        match judge(record(10_000), t(0), t(5), m) {
            LeaseView::Alive { remaining, .. } => assert_eq!(remaining, Duration::from_secs(3)),
            v => panic!("{v:?}"),
        }
        match judge(record(10_000), t(0), t(11), m) {
            LeaseView::Alive { remaining, .. } => assert_eq!(remaining, Duration::ZERO),
            v => panic!("{v:?}"),
        }
        match judge(record(10_000), t(0), t(12), m) {
            LeaseView::Expired { since, .. } => assert_eq!(since, Duration::ZERO),
            v => panic!("{v:?}"),
        }
        match judge(record(10_000), t(0), t(20), m) {
            LeaseView::Expired { since, .. } => assert_eq!(since, Duration::from_secs(8)),
            v => panic!("{v:?}"),
        }
    }
}
