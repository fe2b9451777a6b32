//! Owner leases on Swift: the server-side expiry that backs up the store-clock judgement.
//!
//! The backstop never comes before observers may judge the lease expired from its
//! `last_modified`, and no judgement rests on it: since it may fire before `gc.grace` is over,
//! a lease found missing is timed from when a pass first saw it missing, never from the
//! backstop. Renewals send an `X-Delete-At` on a 60 s grid, so Swift's expirer queue is
//! updated about once a minute rather than at every renewal.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::windows::LeaseWindows;

/// Extra lifetime of a Swift lease object beyond its expire window before Swift deletes it by
/// itself. Observers judge expiry from `last_modified` long before; the server-side deletion is
/// a backstop that removes dead owners' leases even when no GC runs. The slack keeps the lease
/// readable (Expired, with a known `since`) through a typical GC grace, and absorbs
/// `X-Delete-At`'s whole-second rounding (a TTL of N s lasts somewhere in (N−1, N]).
pub const SWIFT_TTL_SLACK: Duration = Duration::from_secs(60);

/// `X-Delete-At` steps: renewals within one step send the same value.
pub const SWIFT_DELETE_AT_GRID_SECS: u64 = 60;

/// `X-Delete-After` for a lease with these windows: never before observers may call it dead —
/// its expire window and that window's drift (`judge_expiry`), then the slack.
pub(crate) fn ttl_secs(windows: LeaseWindows) -> u64 {
    let drift = crate::clock::drift::clock_drift_over(windows.expire_window);
    (windows.expire_window + drift + SWIFT_TTL_SLACK).as_secs() + 1
}

/// An `X-Delete-At` no earlier than `ttl_secs` after the server's current time, rounded up to
/// the grid. The server's time is estimated from the HEAD's `Date` (whole seconds, truncated: +1)
/// plus what passed since the HEAD was sent (+1 for its fraction), so it never falls short of
/// what `X-Delete-After: ttl_secs` would have given; it lasts at most one grid step longer.
pub(crate) fn delete_at(date: DateTime<Utc>, since_head: Duration, ttl_secs: u64) -> u64 {
    let server_now = u64::try_from(date.timestamp()).unwrap_or(0) + 1 + since_head.as_secs() + 1;
    (server_now + ttl_secs).div_ceil(SWIFT_DELETE_AT_GRID_SECS) * SWIFT_DELETE_AT_GRID_SECS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Swift must not delete a lease before observers may call it dead: its end, the drift of
    /// its own length (an owner's clock may count 0.1 % less), then the slack. A 30-day lease
    /// was deleted a minute after its end, 42 minutes before `judge_expiry` would call it dead,
    /// and a missing lease is collected after the grace.
    #[test]
    fn a_lease_outlives_the_drift_of_its_own_window_on_swift() {
        let month = Duration::from_secs(30 * 24 * 3600);
        let windows =
            LeaseWindows::new(Duration::from_secs(3600), month, Duration::from_secs(600)).unwrap();
        let drift = crate::clock::drift::clock_drift_over(month);
        assert!(
            Duration::from_secs(ttl_secs(windows)) >= month + drift + SWIFT_TTL_SLACK,
            "ttl {} s",
            ttl_secs(windows)
        );
    }
}
