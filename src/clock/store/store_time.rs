//! The store's clock: one reading, carried forward on this host's monotonic clock.
//!
//! Invariant: every expiry judgement compares a `last_modified` written by the store with a time
//! also from the store — never with this host's wall clock (see ARCHITECTURE.md, "one clock
//! domain").
//!
//! Invariant: **a read is judged at the instant before it was sent** ([`StoreTime::at_send`]):
//! an owner may renew while the answer is on its way, so judging at receipt would turn a slow
//! answer into a live owner judged dead. The opposite question — may this holder still start an
//! update? — is judged at an upper bound instead ([`StoreTime::upper_at`]).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// One reading of the store's clock (a probe's `last_modified`, see [`Bank::store_time`](crate::Bank::store_time)), with
/// the monotonic instants around it, so that both a lower and an upper bound of the store's time
/// can be carried forward.
#[derive(Debug, Clone, Copy)]
pub struct StoreTime {
    /// The store's `last_modified` of the clock probe.
    pub at: DateTime<Utc>,
    /// This host's monotonic instant before the probe's write was sent: the stamp was made no
    /// earlier (an upper bound on the store's time, used to detect clock steps).
    pub sent: Instant,
    /// This host's monotonic instant when the probe's answer arrived.
    pub observed: Instant,
    /// Whether the read-back showed the probe's own write, or a version another prober on the
    /// same boot clock sent no earlier (stamped within the same bounds). Any other version (an
    /// older one from a lagging replica, or another boot's) still bounds the store's time from
    /// below, but bounds nothing from above and is not compared for clock steps.
    pub verified: bool,
}

impl StoreTime {
    /// A lower bound on the store's time at monotonic instant `now`: the probe was stamped no
    /// later than its answer arrived, so at most `now - observed` has passed on the store since.
    /// Under-estimating the store's time only ever makes a lease look younger (safe).
    ///
    /// An instant before `observed` (a read sent before the probe's answer arrived) is carried
    /// *back*: the stamp was made no later than `observed`, so at `now` the store's time was at
    /// least `at − (observed − now)`.
    pub fn at_instant(&self, now: Instant) -> DateTime<Utc> {
        match now.checked_duration_since(self.observed) {
            Some(elapsed) => add_saturating(self.at, elapsed),
            None => sub_saturating(self.at, self.observed - now),
        }
    }

    /// The store's time at the instant a read was *sent*, minus the store's read staleness: the
    /// instant at which the read's answer is judged.
    ///
    /// Invariant: **a read is judged at the instant before it was sent.** Its answer describes
    /// the store at some instant between send and receipt (and, on a store whose replicas may
    /// lag, up to `staleness` earlier); the only instant at which every such answer is still
    /// true of the owner is the earliest one. Judging at receipt turns a slow answer (a paused
    /// collector, a swapped-out process, a slow network) into a live owner judged dead.
    pub fn at_send(&self, sent: Instant, staleness: Duration) -> DateTime<Utc> {
        sub_saturating(self.at_instant(sent), staleness)
    }

    /// An upper bound on the store's time at `now`, for a holder's own guarantees: the probe
    /// was stamped no earlier than it was sent. `None` for an unverified reading, whose stamp
    /// may be another (older) version's and so bounds nothing from above.
    pub fn upper_at(&self, now: Instant) -> Option<DateTime<Utc>> {
        self.verified
            .then(|| add_saturating(self.at, now.saturating_duration_since(self.sent)))
    }

    /// The difference `later - earlier` as a std duration (zero if negative).
    pub fn between(earlier: DateTime<Utc>, later: DateTime<Utc>) -> Duration {
        (later - earlier).to_std().unwrap_or(Duration::ZERO)
    }
}

/// `t + d`, saturating at the largest representable time.
pub fn add_saturating(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t − d`, saturating at the smallest representable time.
pub fn sub_saturating(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The coarsest of 1 s and 1 ms that every stamp is a whole multiple of (0 when finer). A
/// sub-second stamp that happens to fall on a whole second is possible but needs every sample
/// to do so.
pub fn stamp_resolution_ms(stamps: impl Iterator<Item = DateTime<Utc>>) -> u64 {
    let mut resolution = 1000;
    for stamp in stamps {
        let nanos = stamp.timestamp_subsec_nanos();
        if nanos % 1_000_000 != 0 {
            return 0;
        }
        if nanos != 0 {
            resolution = 1;
        }
    }
    resolution
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_carried_forward_and_back() {
        let clock = crate::clock::MockClock::new();
        let sent = crate::clock::Clock::now(&clock);
        let observed = sent + Duration::from_millis(500);
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let t = StoreTime {
            at,
            sent,
            observed,
            verified: true,
        };
        let later = observed + Duration::from_secs(3);
        assert_eq!(
            StoreTime::between(at, t.at_instant(later)),
            Duration::from_secs(3)
        );
        assert_eq!(
            StoreTime::between(t.at_instant(sent), at),
            Duration::from_millis(500)
        );
        assert_eq!(
            StoreTime::between(at, t.upper_at(later).unwrap()),
            Duration::from_millis(3500)
        );
        let unverified = StoreTime {
            verified: false,
            ..t
        };
        assert!(unverified.upper_at(later).is_none());
    }
}
