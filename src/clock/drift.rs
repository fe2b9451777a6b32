//! How far two clocks may drift apart, and what that costs: 0.1 % of any span. Every rule that
//! ties a window to the time it takes (the configuration's refusals, the collector's grace, a
//! write's landing) adds [`clock_drift_over`] of that span; [`landed_within`] is the latest a
//! write sent with a client of a given retry budget can land, on the collector's clock.

use std::time::Duration;

/// How far apart two clocks may run, in parts per million, that the configuration must absorb:
/// 1,000 ppm (0.1 %). An owner times its lease on its own monotonic clock, the GC on the store's;
/// over an expire window the owner's clock may count this much less time than passed. The
/// collector allows the store's clock the same rate against its own (`RATE_ALLOWANCE = 0.001` in
/// gc/src/time/timing.rs); [`Config::refusals`](crate::Config::refusals) holds the windows to it.
pub const MAX_CLOCK_DRIFT_PPM: u64 = 1_000;

/// [`MAX_CLOCK_DRIFT_PPM`] of `d`, rounded up to the nanosecond.
pub fn clock_drift_over(d: Duration) -> Duration {
    let nanos = d.as_nanos() * u128::from(MAX_CLOCK_DRIFT_PPM);
    nanos_to_duration(nanos.div_ceil(1_000_000))
}

/// The longest duration whose [`clock_drift_over`] fits in `d`.
pub fn longest_drifting_within(d: Duration) -> Duration {
    nanos_to_duration(d.as_nanos() * 1_000_000 / u128::from(MAX_CLOCK_DRIFT_PPM))
}

pub(crate) fn nanos_to_duration(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below 10^9, so it fits.
    Duration::new(secs, (nanos % NANOS_PER_SEC) as u32)
}

/// Rule (b) for one writer: the longest a write sent with a client of retry `budget` can take to
/// land, counted on the collector's clock: the budget plus 0.1 % of it.
pub fn landed_within(budget: Duration) -> Duration {
    budget.saturating_add(clock_drift_over(budget))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_rounded_up_and_inverted_down() {
        assert_eq!(
            clock_drift_over(Duration::from_secs(600)),
            Duration::from_millis(600)
        );
        assert_eq!(
            clock_drift_over(Duration::from_nanos(1)),
            Duration::from_nanos(1)
        );
        assert_eq!(
            longest_drifting_within(Duration::from_millis(599)),
            Duration::from_secs(599)
        );
        // No overflow at the extremes.
        assert!(clock_drift_over(Duration::MAX) < Duration::MAX);
        assert_eq!(longest_drifting_within(Duration::MAX).as_secs(), u64::MAX);
    }
}
