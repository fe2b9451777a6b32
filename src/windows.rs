//! The three lease windows and the rules that tie them together.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The longest expire window a lease may have (a record claiming more is treated as corrupt).
pub const MAX_EXPIRE_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// How often an owner renews its lease, when it expires, and how much must be left to start an
/// update.
///
/// Rules, checked by [`LeaseWindows::validate`]:
/// - every window is longer than zero;
/// - `renew_window < expire_window`: a lease is renewed before it can expire;
/// - `validity_window <= renew_window`: right after a renewal, an update can start;
/// - a warning (not an error) when `expire_window < 2 × renew_window`: then a single failed
///   renewal loses the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseWindows {
    /// Time between renewals.
    #[serde(with = "humantime_serde")]
    pub renew_window: Duration,
    /// Lifetime of the lease counted from the instant before a successful write was sent.
    #[serde(with = "humantime_serde")]
    pub expire_window: Duration,
    /// Lease time that must be left for `check_validity` to answer true.
    #[serde(with = "humantime_serde")]
    pub validity_window: Duration,
}

impl Default for LeaseWindows {
    fn default() -> Self {
        Self {
            renew_window: Duration::from_secs(120),
            expire_window: Duration::from_secs(600),
            validity_window: Duration::from_secs(100),
        }
    }
}

fn fmt_d(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

impl LeaseWindows {
    /// Windows from their three durations, validated.
    pub fn new(renew: Duration, expire: Duration, validity: Duration) -> Result<Self> {
        let w = Self {
            renew_window: renew,
            expire_window: expire,
            validity_window: validity,
        };
        w.validate()?;
        Ok(w)
    }

    /// Check the rules; on success return the warnings (possibly none).
    pub fn validate(&self) -> Result<Vec<String>> {
        for (name, d) in [
            ("renew_window > 0", self.renew_window),
            ("expire_window > 0", self.expire_window),
            ("validity_window > 0", self.validity_window),
        ] {
            if d.is_zero() {
                return Err(Error::InvalidWindows {
                    rule: name,
                    detail: "it is zero".to_owned(),
                });
            }
        }
        if self.renew_window >= self.expire_window {
            return Err(Error::InvalidWindows {
                rule: "renew_window < expire_window",
                detail: format!(
                    "renew_window=`{}` expire_window=`{}`: renew_window must be shorter by more than {}",
                    fmt_d(self.renew_window),
                    fmt_d(self.expire_window),
                    fmt_d(self.renew_window - self.expire_window),
                ),
            });
        }
        if self.validity_window > self.renew_window {
            return Err(Error::InvalidWindows {
                rule: "validity_window <= renew_window",
                detail: format!(
                    "validity_window=`{}` renew_window=`{}`: validity_window is {} too long",
                    fmt_d(self.validity_window),
                    fmt_d(self.renew_window),
                    fmt_d(self.validity_window - self.renew_window),
                ),
            });
        }
        if self.expire_window > MAX_EXPIRE_WINDOW {
            // Observers refuse records claiming more (they would find the lease unreadable).
            return Err(Error::InvalidWindows {
                rule: "expire_window <= 30days",
                detail: format!(
                    "expire_window=`{}` is longer than observers accept (`{}`)",
                    fmt_d(self.expire_window),
                    fmt_d(MAX_EXPIRE_WINDOW),
                ),
            });
        }
        let mut warnings = Vec::new();
        if self.expire_window < self.renew_window * 2 {
            warnings.push(format!(
                "expire_window=`{}` is less than 2 × renew_window=`{}`: a single failed renewal \
                 loses the lease",
                fmt_d(self.expire_window),
                fmt_d(self.renew_window),
            ));
        }
        Ok(warnings)
    }
}

/// Whether `warning` is said for the first time in this process (recording it): the same
/// windows are checked when the configuration loads and when the lease is acquired, and an
/// operator should read each warning once.
pub(crate) fn first_time(warning: &str) -> bool {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.iter().any(|w| w == warning) {
        return false;
    }
    said.push(warning.to_owned());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_are_valid_without_warning() {
        assert!(LeaseWindows::default().validate().unwrap().is_empty());
    }

    #[test]
    fn sub_second_windows_are_accepted() {
        let w = LeaseWindows::new(ms(100), ms(300), ms(50)).unwrap();
        assert!(w.validate().unwrap().is_empty());
    }

    #[test]
    fn renew_not_shorter_than_expire_is_refused_with_amount() {
        let err = LeaseWindows::new(ms(700), ms(500), ms(100)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("renew_window < expire_window"), "{msg}");
        assert!(msg.contains("200ms"), "{msg}");
        assert!(LeaseWindows::new(ms(500), ms(500), ms(100)).is_err());
    }

    #[test]
    fn validity_longer_than_renew_is_refused_with_amount() {
        let err = LeaseWindows::new(ms(100), ms(500), ms(150)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("validity_window <= renew_window"), "{msg}");
        assert!(msg.contains("50ms"), "{msg}");
        LeaseWindows::new(ms(100), ms(500), ms(100)).unwrap();
    }

    #[test]
    fn zero_is_refused() {
        let err = LeaseWindows::new(ms(0), ms(500), ms(0)).unwrap_err();
        assert!(err.to_string().contains("renew_window > 0"), "{err}");
    }

    #[test]
    fn short_expire_warns() {
        let w = LeaseWindows::new(ms(300), ms(500), ms(100)).unwrap();
        let warnings = w.validate().unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("single failed renewal"));
    }
}
