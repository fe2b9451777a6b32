//! The configuration's rules: windows whose guarantees would hold only by luck are refused
//! ([`Config::refusals`]), and the values each must have (`check_values`).

use std::time::Duration;

use super::{round_up_to_ms, Config};
use crate::bank::scheme::Scheme;
use crate::clock::drift::{clock_drift_over, landed_within, longest_drifting_within};
use crate::error::{Error, Result};

/// Rule (c) for one owner, on a store whose create-if-absent is timing only (Swift).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwiftRule {
    /// The latest, after the owner's last renewal was sent, that its retried write of
    /// `decisions/<id>` can land: `budget + 0.1 % of (expire − validity + budget)`.
    pub landed: Duration,
    /// The shortest grace that holds the collector's create past it (zero when every grace
    /// does): `landed − validity − skew_margin`, and a nanosecond.
    pub shortest_grace: Duration,
}

/// [`SwiftRule`] for an owner of retry `budget` and windows `expire` and `validity`, judged with
/// skew `margin`: its write is sent at most `expire − validity` after its last renewal (its
/// clock), may be sent again for `budget`, and must have landed before the collector's create,
/// `expire + margin + grace` after that renewal on the store's clock.
pub fn swift_rule(
    budget: Duration,
    expire: Duration,
    validity: Duration,
    margin: Duration,
) -> SwiftRule {
    let counted = expire.saturating_sub(validity).saturating_add(budget);
    let landed = budget.saturating_add(clock_drift_over(counted));
    let fence = validity.saturating_add(margin);
    SwiftRule {
        landed,
        shortest_grace: if landed < fence {
            Duration::ZERO
        } else {
            (landed - fence).saturating_add(Duration::from_nanos(1))
        },
    }
}

impl Config {
    /// Windows for which the arithmetic behind the guarantees fails, one message per failed
    /// rule (empty when every rule holds). Each names the keys with their values, the
    /// inequality that failed with its numbers, and the fix. The rules, with `drift(d)` =
    /// [`MAX_CLOCK_DRIFT_PPM`](crate::clock::drift::MAX_CLOCK_DRIFT_PPM) of `d` and `budget` = [`store_client_retry_budget`] of `bank.url`:
    ///
    /// - (a) `drift(lease.expire_window) <= lease.skew_margin + gc.grace`. An owner times its
    ///   lease on its own clock, which may count 0.1 % less than passed; the GC collects
    ///   `skew_margin + grace` after expiry on the store's clock. Beyond that an owner can still
    ///   call its lease valid, renew it and write when the GC has judged it dead. Only the
    ///   owners' `[lease]` windows: the GC's own lease (`gc.lease_*`) keeps standbys from
    ///   duplicating work and is judged without grace, but collection never rests on it (each
    ///   checkpoint is decided by `decisions/<id>`), so a slow clock there costs a duplicated
    ///   pass, not a checkpoint.
    /// - (b) `gc.late_write_window >= budget + drift(budget)`. A write an owner sent before its
    ///   lease ran out can land `budget` later (the client's clock counting it); the late-data
    ///   sweep runs `late_write_window + skew_margin` after the collection, on the store's clock.
    /// - (c) on a `swift://` bank, `budget + drift(expire_window − validity_window + budget) <
    ///   validity_window + skew_margin + grace`. Swift's create-if-absent is not atomic, so
    ///   whether the owner's completion or the GC's collection wins `decisions/<id>` rests on
    ///   timing: the owner sends it at most `expire_window − validity_window` after its last
    ///   renewal was sent (its clock), its client may send it again for `budget`, and all of it
    ///   must have landed before the GC's create, `expire_window + skew_margin + grace` after that
    ///   renewal on the store's clock. (Other stores whose create-if-absent races are not atomic
    ///   are found by `banklease doctor`, not by their URL.)
    pub fn refusals(&self) -> Vec<String> {
        self.refusals_with_budget(self.bank.retry_budget())
    }

    /// The knobs behind the budget, as a refusal names them.
    fn budget_words(&self) -> String {
        let d = |v: Option<Duration>| {
            v.map_or_else(
                || "the client's default".to_owned(),
                |v| format!("`{}`", humantime::format_duration(v)),
            )
        };
        format!(
            "bank.retry_timeout={} and bank.request_timeout={} give {}",
            d(self.bank.retry_timeout),
            d(self.bank.request_timeout),
            humantime::format_duration(self.bank.retry_budget())
        )
    }

    /// The shortest `gc.grace` rule (c) allows on this bank with these windows and budget
    /// (zero when every grace does, or the bank is not on Swift), for `banklease doctor`.
    pub fn shortest_grace(&self) -> Duration {
        if Scheme::of(&self.bank.url) != Some(Scheme::Swift) {
            return Duration::ZERO;
        }
        let rule = self.swift_rule_with(self.bank.retry_budget());
        round_up_to_ms(rule.shortest_grace.max(Duration::from_nanos(1)))
    }

    /// Rule (c) for an owner of these `[lease]` windows and margin whose client retries for
    /// `budget` (Swift, where create-if-absent is timing only).
    fn swift_rule_with(&self, budget: Duration) -> SwiftRule {
        let lease = &self.lease;
        swift_rule(
            budget,
            lease.windows.expire_window,
            lease.windows.validity_window,
            lease.skew_margin,
        )
    }

    fn refusals_with_budget(&self, budget: Duration) -> Vec<String> {
        let d = |v: Duration| humantime::format_duration(v).to_string();
        let lease = &self.lease;
        let gc = &self.gc;
        let margin_grace = lease.skew_margin.saturating_add(gc.grace);
        let mut refusals = Vec::new();
        // (a)
        let drift = clock_drift_over(lease.windows.expire_window);
        if drift > margin_grace {
            refusals.push(format!(
                "lease.expire_window=`{}` needs lease.skew_margin + gc.grace >= 0.1 % of it, the \
                 time an owner's clock may lose over it (lease.skew_margin=`{}` + gc.grace=`{}` = \
                 {} < {}): raise gc.grace to at least {} or shorten lease.expire_window to at \
                 most {}",
                d(lease.windows.expire_window),
                d(lease.skew_margin),
                d(gc.grace),
                d(margin_grace),
                d(drift),
                d(drift.saturating_sub(lease.skew_margin)),
                d(longest_drifting_within(margin_grace)),
            ));
        }
        // (b)
        let landed = landed_within(budget);
        if gc.late_write_window < landed {
            refusals.push(format!(
                "gc.late_write_window=`{}` needs gc.late_write_window >= the store client's retry \
                 budget on bank.url=`{}` + 0.1 % of it, the longest a write sent before an \
                 owner's lease ran out can take to land ({} < {} + {} = {}): raise \
                 gc.late_write_window to at least {}, or shorten the budget with \
                 [bank] retry_timeout and request_timeout ({})",
                d(gc.late_write_window),
                self.bank.url.trim(),
                d(gc.late_write_window),
                d(budget),
                d(clock_drift_over(budget)),
                d(landed),
                d(landed),
                self.budget_words(),
            ));
        }
        // (c)
        if Scheme::of(&self.bank.url) == Some(Scheme::Swift) {
            let rule = self.swift_rule_with(budget);
            let (landed, grace) = (rule.landed, rule.shortest_grace);
            let fence = lease.windows.validity_window.saturating_add(margin_grace);
            if gc.grace < grace {
                refusals.push(format!(
                    "bank.url=`{}` needs the store client's retry budget + 0.1 % of \
                     (lease.expire_window − lease.validity_window + that budget) < \
                     lease.validity_window + lease.skew_margin + gc.grace: create-if-absent is \
                     not atomic on Swift, so only timing keeps an owner's retried write of \
                     decisions/<id> from landing beside the GC's ({} + 0.1 % of \
                     (lease.expire_window=`{}` − lease.validity_window=`{}` + {}) = {} >= \
                     lease.validity_window=`{}` + lease.skew_margin=`{}` + gc.grace=`{}` = {}): \
                     raise gc.grace to at least {}, or shorten the budget with [bank] \
                     retry_timeout and request_timeout ({})",
                    self.bank.url.trim(),
                    d(budget),
                    d(lease.windows.expire_window),
                    d(lease.windows.validity_window),
                    d(budget),
                    d(landed),
                    d(lease.windows.validity_window),
                    d(lease.skew_margin),
                    d(gc.grace),
                    d(fence),
                    d(round_up_to_ms(grace)),
                    self.budget_words(),
                ));
            }
        }
        refusals
    }

    /// The value checks of [`validate`](Self::validate) without [`Config::refusals`]: ranges and
    /// the windows' own rules. Returns the warnings.
    pub(super) fn check_values(&self) -> Result<Vec<String>> {
        let mut warnings = self.lease.windows.validate()?;
        warnings.extend(self.gc.lease.validate().map_err(|e| match e {
            // The rule names the lease's own words; the keys at fault are [gc]'s.
            Error::InvalidWindows { rule, detail } => Error::config(format!(
                "[gc] lease_* windows: {rule} is violated ({detail}); change \
                 gc.lease_renew_window, gc.lease_expire_window or gc.lease_validity_window"
            )),
            other => other,
        })?);
        if !(0.0..=0.5).contains(&self.lease.renew_jitter) {
            return Err(Error::config(format!(
                "lease.renew_jitter=`{}` must be between 0 and 0.5",
                self.lease.renew_jitter
            )));
        }
        if !(0.0..=1.0).contains(&self.gc.brake_ratio) || self.gc.brake_ratio.is_nan() {
            return Err(Error::config(format!(
                "gc.brake_ratio=`{}` must be between 0 and 1",
                self.gc.brake_ratio
            )));
        }
        if self.gc.concurrency == 0 || self.gc.concurrency > 1024 {
            return Err(Error::config(format!(
                "gc.concurrency=`{}` must be between 1 and 1024",
                self.gc.concurrency
            )));
        }
        // Bounds that keep the date arithmetic of every judgement far from overflow, and that
        // refuse a margin no store can honour (every store stamps with some resolution).
        let bounded = |key: &str, value: Duration, min: Duration, max: Duration| {
            if value < min || value > max {
                Err(Error::config(format!(
                    "{key}=`{}` must be between {} and {}",
                    humantime::format_duration(value),
                    humantime::format_duration(min),
                    humantime::format_duration(max),
                )))
            } else {
                Ok(())
            }
        };
        const DAY: Duration = Duration::from_secs(24 * 3600);
        bounded(
            "lease.skew_margin",
            self.lease.skew_margin,
            Duration::from_millis(1),
            DAY,
        )?;
        bounded("gc.grace", self.gc.grace, Duration::ZERO, 365 * DAY)?;
        bounded(
            "gc.read_staleness",
            self.gc.read_staleness,
            Duration::ZERO,
            DAY,
        )?;
        bounded(
            "gc.late_write_window",
            self.gc.late_write_window,
            Duration::from_secs(1),
            DAY,
        )?;
        for (key, value) in [
            ("bank.request_timeout", self.bank.request_timeout),
            ("bank.retry_timeout", self.bank.retry_timeout),
        ] {
            if let Some(v) = value {
                bounded(key, v, Duration::from_millis(1), DAY)?;
            }
        }
        let windows = self.lease.windows;
        let slack = windows
            .expire_window
            .saturating_sub(windows.validity_window);
        if self.lease.skew_margin >= slack {
            warnings.push(format!(
                "lease.skew_margin=`{}` is not shorter than expire_window − validity_window=`{}`: \
                 no observer with this margin can ever call a lease of these windows valid \
                 (`validity-check` answers not ok for every such owner); lower skew_margin or \
                 lengthen expire_window",
                humantime::format_duration(self.lease.skew_margin),
                humantime::format_duration(slack),
            ));
        }
        if self.gc.interval.is_zero() {
            return Err(Error::config("gc.interval must be longer than zero"));
        }
        Ok(warnings)
    }
}
