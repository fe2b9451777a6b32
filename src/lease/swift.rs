//! Owner leases on Swift: the server-side expiry that backs up the store-clock judgement.

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

/// `X-Delete-After` for a lease with these windows: never before the owner's own expiry.
pub(crate) fn ttl_secs(windows: LeaseWindows) -> u64 {
    (windows.expire_window + SWIFT_TTL_SLACK).as_secs() + 1
}

/// An `X-Delete-At` no earlier than `ttl_secs` after the server's current time, rounded up to
/// the grid. The server's time is estimated from the HEAD's `Date` (whole seconds, truncated: +1)
/// plus what passed since the HEAD was sent (+1 for its fraction), so it never falls short of
/// what `X-Delete-After: ttl_secs` would have given; it lasts at most one grid step longer.
pub(crate) fn delete_at(date: DateTime<Utc>, since_head: Duration, ttl_secs: u64) -> u64 {
    let server_now = u64::try_from(date.timestamp()).unwrap_or(0) + 1 + since_head.as_secs() + 1;
    (server_now + ttl_secs).div_ceil(SWIFT_DELETE_AT_GRID_SECS) * SWIFT_DELETE_AT_GRID_SECS
}
