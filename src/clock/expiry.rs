//! The one expiry judgement: is a holding that the store stamped at `last_modified`, declared to
//! last `length`, still held at the store's time `store_now`? Owner leases
//! ([`crate::observe::judge`]), named locks (`lock::record::judge`) and takeovers all call it.
//!
//! Everything uncertain goes in the holder's favour: the skew margin, and the clock drift of
//! the holding's *own* declared length (its holder times it on its own clock, which may count
//! 0.1 % less than passed), whatever window the observer is configured with; the arithmetic
//! saturates, so absurd margins or stamps only make a holding look alive.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock::drift::clock_drift_over;
use crate::clock::store::{add_saturating, sub_saturating, StoreTime};

/// Where a holding stands on the store's clock, the skew margin deducted in the holder's favour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Held for at least `remaining` more.
    Held {
        /// Time left, conservatively.
        remaining: Duration,
    },
    /// Ran out at least `since` ago.
    Expired {
        /// Time since expiry, conservatively.
        since: Duration,
    },
}

/// Judge a holding from what the store said. Pure.
///
/// `Held.remaining = (last_modified + length − margin) − store_now` (floored at zero) and
/// `Expired.since = store_now − (last_modified + length + drift(length) + margin)`: both err on
/// the side of the holder being alive.
///
/// Invariant: **each holding is given the drift of its own length.** Its holder times it on its
/// own clock, which may count [`MAX_CLOCK_DRIFT_PPM`](crate::clock::drift::MAX_CLOCK_DRIFT_PPM) less
/// than passed ([`clock_drift_over`]): it is dead only that much past its declared length, on
/// top of the margin — the length the holder declared (up to 30 days), not the observer's
/// configured window.
pub fn judge_expiry(
    last_modified: DateTime<Utc>,
    length: Duration,
    store_now: DateTime<Utc>,
    margin: Duration,
) -> Expiry {
    // The read returned this stamp, so the store's time was at least `last_modified` (a read
    // judged at its send instant may predate it). Only ever shortens `remaining`.
    let store_now = store_now.max(last_modified);
    // Saturating arithmetic: absurd margins, lengths or stamps only ever make the holder look
    // alive.
    let expires_at = add_saturating(last_modified, length);
    let dead_from = add_saturating(add_saturating(expires_at, clock_drift_over(length)), margin);
    if store_now >= dead_from && dead_from < DateTime::<Utc>::MAX_UTC {
        Expiry::Expired {
            since: StoreTime::between(dead_from, store_now),
        }
    } else {
        Expiry::Held {
            remaining: StoreTime::between(store_now, sub_saturating(expires_at, margin)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn judged_on_store_times_with_margin_in_the_holders_favour() {
        let (m, ten) = (Duration::from_secs(2), Duration::from_secs(10));
        let held = |s: u64| Expiry::Held {
            remaining: Duration::from_secs(s),
        };
        // 10 ms short of whole seconds: the holder's drift.
        let expired = |s: u64| Expiry::Expired {
            since: Duration::from_secs(s) + Duration::from_millis(990),
        };
        assert_eq!(judge_expiry(t(0), ten, t(5), m), held(3));
        assert_eq!(judge_expiry(t(0), ten, t(11), m), held(0));
        // Dead from 12.01 s: 10 s, 0.1 % of it, the margin.
        assert_eq!(judge_expiry(t(0), ten, t(12), m), held(0));
        assert_eq!(judge_expiry(t(0), ten, t(21), m), expired(8));
        // A read judged before the stamp it returned: the store's time was at least the stamp.
        assert_eq!(judge_expiry(t(0), ten, t(-5), m), held(8));
    }

    /// A holder times its holding on its own clock, which may count 0.1 % less time than
    /// passed: a 30-day lease is judged dead only 0.1 % of 30 days (43m 12s) past its end and the
    /// margin, whatever window the observer itself is configured with. (Before, only the margin
    /// was added: a holder whose clock ran 500 ppm slow was judged dead while it still held.)
    #[test]
    fn a_holding_is_dead_only_past_the_drift_of_its_own_length() {
        let month = Duration::from_secs(30 * 24 * 3600);
        let m = Duration::from_secs(2);
        let end = month.as_secs() as i64 + 2;
        let drift = 43 * 60 + 12;
        assert!(matches!(
            judge_expiry(t(0), month, t(end + drift - 1), m),
            Expiry::Held { .. }
        ));
        assert_eq!(
            judge_expiry(t(0), month, t(end + drift + 5), m),
            Expiry::Expired {
                since: Duration::from_secs(5)
            }
        );
    }

    /// A huge margin or stamp must not overflow the date arithmetic (it once panicked in the
    /// daemon's main task); it only ever makes the holder look alive.
    #[test]
    fn huge_margins_and_stamps_do_not_panic_and_favour_the_holder() {
        let ten = Duration::from_secs(10);
        for margin in [Duration::MAX, Duration::from_secs(u64::MAX / 4)] {
            assert!(matches!(
                judge_expiry(t(0), ten, t(1_000_000), margin),
                Expiry::Held { .. }
            ));
        }
        assert!(matches!(
            judge_expiry(DateTime::<Utc>::MAX_UTC, ten, t(0), Duration::from_secs(1)),
            Expiry::Held { .. }
        ));
        assert!(matches!(
            judge_expiry(t(0), Duration::MAX, t(1_000_000), Duration::ZERO),
            Expiry::Held { .. }
        ));
    }
}
