//! The observer's view of a lease, for the GC and the admin CLI.
//!
//! Invariant: expiry is judged in **one clock domain, the store's**. The lease object's
//! `last_modified` (stamped by the store) plus the owner's declared expire window is compared
//! with the store's current time ([`StoreTime`]), minus a skew margin. The owner's wall-clock
//! fields in the record are never used, and neither is this host's wall clock.

use crate::error::error_chain;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::bank::Bank;
use crate::clock::expiry::{judge_expiry, Expiry};
use crate::clock::store::StoreTime;
use crate::clock::SharedClock;
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
/// The lease's expire window judged by [`judge_expiry`]: `Alive.remaining = (last_modified +
/// expire − margin) − store_now` (floored at zero) and `Expired.since = store_now −
/// (last_modified + expire + drift(expire) + margin)`: both err on the side of the owner being
/// alive.
pub fn judge(
    record: LeaseRecord,
    last_modified: DateTime<Utc>,
    store_now: DateTime<Utc>,
    margin: Duration,
) -> LeaseView {
    match judge_expiry(last_modified, record.expire_window(), store_now, margin) {
        Expiry::Expired { since } => LeaseView::Expired {
            since,
            record: Box::new(record),
        },
        Expiry::Held { remaining } => LeaseView::Alive {
            remaining,
            record: Box::new(record),
        },
    }
}

/// What a lease view was judged on ([`LeaseObserver::view_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The lease's `last_modified` as read, raised to the step floor; `None` when there was no
    /// lease (or it could not be read).
    pub stamp: Option<DateTime<Utc>>,
    /// The lease's `last_modified` as read, not raised to the floor: when it is older than
    /// `stamp`, the floor held the lease back.
    pub raw_stamp: Option<DateTime<Utc>>,
    /// The store's time the read was judged at: the instant before it was sent, on the store's
    /// clock, less the read staleness.
    pub judged_at: DateTime<Utc>,
}

/// Reads and judges leases against one reading of the store clock.
#[derive(Debug, Clone)]
pub struct LeaseObserver {
    bank: Bank,
    clock: SharedClock,
    margin: Duration,
    staleness: Duration,
    floor: Option<DateTime<Utc>>,
}

impl LeaseObserver {
    /// An observer on `bank` with a skew `margin` (see `lease.skew_margin`).
    pub fn new(bank: Bank, clock: SharedClock, margin: Duration) -> Self {
        Self {
            bank,
            clock,
            margin,
            staleness: Duration::ZERO,
            floor: None,
        }
    }

    /// How old a read's answer may be on this store (replicas that lag; `gc.read_staleness`).
    /// Every read is judged this much before the instant it was sent. Zero for stores with
    /// read-after-write consistency: S3, local files, and Swift for objects written by PUT or
    /// DELETE, which `X-Newest` ranks (banklease renews Swift leases by PUT for that reason;
    /// a change made by POST alone is not ranked).
    pub fn with_read_staleness(mut self, staleness: Duration) -> Self {
        self.staleness = staleness;
        self
    }

    /// Treat every `last_modified` earlier than `floor` as written at `floor`: the store clock
    /// was seen to step forward at `floor`, so an older stamp may be up to the step older than
    /// it looks. See [`crate::clock::StoreTime`] and the GC's step detection.
    pub fn with_floor(mut self, floor: Option<DateTime<Utc>>) -> Self {
        self.floor = floor;
        self
    }

    /// The skew margin.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// Read the store's clock (two requests; a third after waiting out the read staleness when
    /// a lagging replica answered). One reading serves a whole GC pass.
    pub async fn store_time(&self) -> crate::Result<StoreTime> {
        self.bank
            .store_time_with_lag(&self.clock, self.staleness)
            .await
    }

    /// One request: read the owner's lease and judge it against `store_time`, carried to the
    /// instant *before the read was sent* on this host's monotonic clock.
    pub async fn view(&self, owner: &OwnerId, store_time: &StoreTime) -> LeaseView {
        self.view_read(owner, store_time).await.0
    }

    /// [`view`](Self::view), with what it was judged on: the lease's stamp as read (raised to
    /// the floor) and the store's time it was judged at — the evidence a collection records.
    pub async fn view_read(&self, owner: &OwnerId, store_time: &StoreTime) -> (LeaseView, Read) {
        // Invariant: a read is judged at the instant before it was sent (StoreTime::at_send).
        let sent = self.clock.now();
        let judged_at = store_time.at_send(sent, self.staleness);
        match read_lease(&self.bank, owner).await {
            Ok(None) => (
                LeaseView::Missing,
                Read {
                    stamp: None,
                    raw_stamp: None,
                    judged_at,
                },
            ),
            Ok(Some((record, meta))) => {
                let stamp = self.floored(meta.last_modified);
                (
                    judge(record, stamp, judged_at, self.margin),
                    Read {
                        stamp: Some(stamp),
                        raw_stamp: Some(meta.last_modified),
                        judged_at,
                    },
                )
            }
            Err(e) => (
                LeaseView::Unreadable {
                    error: error_chain(&e),
                },
                Read {
                    stamp: None,
                    raw_stamp: None,
                    judged_at,
                },
            ),
        }
    }

    /// An admin's answer to "may this owner start an update now?" (`banklease validity-check`,
    /// Python's `LeaseObserver.view`): three requests (the store's clock, then the lease).
    ///
    /// The view is judged at a *lower* bound of the store's time, which is right for "is it
    /// dead?". This question needs an *upper* bound, so `remaining` also loses both round trips
    /// and the read staleness, and is zero when no reading of the store's clock showed this
    /// observer's own probe (up to three are made). The owner's declared validity window is used
    /// unless `window` is given; `fallback` serves when the lease declares none (missing or
    /// unreadable).
    ///
    /// Advisory: the owner counts its validity from the *send* time of its last renewal, the
    /// observer from the store's stamp of it, which is later by that request's latency (covered
    /// by the skew margin only while the latency stays below it). The owner's own
    /// [`OwnerLease::check_validity`](crate::OwnerLease::check_validity) is what its writes
    /// obey.
    pub async fn validity_check(
        &self,
        owner: &OwnerId,
        window: Option<Duration>,
        fallback: Duration,
    ) -> crate::Result<ValidityCheck> {
        // Only a reading of our own probe bounds the store's time from above: another version
        // (a concurrent prober's, a lagging replica's) may be older by any amount.
        let mut t = self.store_time().await?;
        for _ in 1..VALIDITY_CLOCK_READINGS {
            if t.verified {
                break;
            }
            t = self.store_time().await?;
        }
        let sent = self.clock.now();
        let view = self.view(owner, &t).await;
        let received = self.clock.now();
        let declared = match &view {
            LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } => {
                Some(Duration::from_millis(record.validity_window_ms))
            }
            _ => None,
        };
        let (validity_window, window_source) = match (window, declared) {
            (Some(w), _) => (w, WindowSource::Given),
            (None, Some(w)) => (w, WindowSource::Owner),
            (None, None) => (fallback, WindowSource::Fallback),
        };
        let uncertainty = received.saturating_duration_since(sent)
            + t.observed.saturating_duration_since(t.sent)
            + self.staleness;
        let remaining = match &view {
            LeaseView::Alive { remaining, .. } => remaining.saturating_sub(uncertainty),
            _ => Duration::ZERO,
        };
        let remaining = if t.verified {
            remaining
        } else {
            Duration::ZERO
        };
        let ok = matches!(view, LeaseView::Alive { .. }) && remaining >= validity_window;
        Ok(ValidityCheck {
            view,
            remaining,
            validity_window,
            window_source,
            ok,
        })
    }

    /// `stamp`, raised to the step floor if there is one.
    pub fn floored(&self, stamp: DateTime<Utc>) -> DateTime<Utc> {
        match self.floor {
            Some(floor) if floor > stamp => floor,
            _ => stamp,
        }
    }
}

/// Clock readings [`LeaseObserver::validity_check`] makes at most to get one of its own probe.
const VALIDITY_CLOCK_READINGS: usize = 3;

/// Where a [`ValidityCheck`]'s validity window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSource {
    /// Given by the caller (`--validity-window`).
    Given,
    /// Declared by the owner in its lease.
    Owner,
    /// The caller's fallback (its configuration): the lease declares none.
    Fallback,
}

/// The answer of [`LeaseObserver::validity_check`].
#[derive(Debug, Clone)]
pub struct ValidityCheck {
    /// What the observer read.
    pub view: LeaseView,
    /// Lease time left at the latest instant the answer may be acted on (zero unless alive).
    pub remaining: Duration,
    /// The validity window `remaining` must reach.
    pub validity_window: Duration,
    /// Where `validity_window` came from.
    pub window_source: WindowSource,
    /// Whether the owner may start an update: alive, with at least the validity window left.
    pub ok: bool,
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
            retry_budget_ms: None,
            // Deliberately absurd wall-clock fields: they must not matter.
            acquired_at: DateTime::<Utc>::MIN_UTC,
            renewed_at: DateTime::<Utc>::MAX_UTC,
            generation: 1,
            token: "t".into(),
            process: None,
        }
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn judged_on_store_times_with_margin() {
        let m = Duration::from_secs(2);
        // Written at 0, expires at 10; dead from 12.01 (0.1 % of 10 s, then the margin 2).
        match judge(record(10_000), t(0), t(5), m) {
            LeaseView::Alive { remaining, .. } => assert_eq!(remaining, Duration::from_secs(3)),
            v => panic!("{v:?}"),
        }
        match judge(record(10_000), t(0), t(11), m) {
            LeaseView::Alive { remaining, .. } => assert_eq!(remaining, Duration::ZERO),
            v => panic!("{v:?}"),
        }
        match judge(record(10_000), t(0), t(12), m) {
            LeaseView::Alive { remaining, .. } => assert_eq!(remaining, Duration::ZERO),
            v => panic!("{v:?}"),
        }
        match judge(record(10_000), t(0), t(20), m) {
            LeaseView::Expired { since, .. } => assert_eq!(since, Duration::from_millis(7_990)),
            v => panic!("{v:?}"),
        }
    }

    /// A huge margin must not overflow the date arithmetic (an overflow panicked the daemon's
    /// main task); it only ever makes a lease look alive.
    #[test]
    fn huge_margins_do_not_panic_and_favour_the_owner() {
        for margin in [Duration::MAX, Duration::from_secs(u64::MAX / 4)] {
            match judge(record(10_000), t(0), t(1_000_000), margin) {
                LeaseView::Alive { .. } => {}
                v => panic!("{v:?}"),
            }
        }
        match judge(
            record(10_000),
            DateTime::<Utc>::MAX_UTC,
            t(0),
            Duration::from_secs(1),
        ) {
            LeaseView::Alive { .. } => {}
            v => panic!("{v:?}"),
        }
    }
}
