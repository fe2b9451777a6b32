//! What each owner declared, and how long the collector waits for it.
//!
//! Invariant: **each owner is judged by what is in force for that owner.** The timing rules the
//! configuration gate checks for the collector's own `[lease]` windows and store client
//! ([`banklease::config::Config::refusals`]) are checked again for every owner, with the
//! windows and the retry budget *it* declared (its lease record; `index.json` when the lease
//! is gone; the store's longest default, [`default_retry_budget`], when it declared none): on
//! a store whose create-if-absent is timing only (Swift) its checkpoints are not decided
//! before its rule (c) holds ([`swift_rule`]), and its late-data sweep waits for its rule (b)
//! ([`landed_within`]). An owner that declares more than the collector's configuration only
//! waits longer; nothing is decided early.

use std::time::Duration;

use banklease::clock::drift::landed_within;
use banklease::config::{default_retry_budget, swift_rule};
use banklease::{Bank, LeaseRecord, OwnerId};

use crate::pass::options::GcOptions;

/// An owner's retry budget as the collector takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The budget.
    pub budget: Duration,
    /// False: the owner declared none, this is its store's longest default.
    pub declared: bool,
}

/// The rules of one bank's store, for its owners.
#[derive(Debug, Clone)]
pub struct OwnerRules {
    /// Create-if-absent is a check and a write (Swift): only timing keeps an owner's retried
    /// write of `decisions/<id>` from landing beside the collector's.
    timing_only_create: bool,
    /// What an owner that declares nothing is assumed to have.
    default_budget: Duration,
}

impl OwnerRules {
    /// The rules of `bank`'s store.
    pub fn of(bank: &Bank) -> Self {
        Self {
            timing_only_create: bank.create_is_timing_only(),
            default_budget: default_retry_budget(bank.label()),
        }
    }

    /// The budget of an owner that declared `declared_ms` (or nothing).
    pub fn budget(&self, declared_ms: Option<u64>) -> Budget {
        match declared_ms {
            Some(ms) => Budget {
                budget: Duration::from_millis(ms),
                declared: true,
            },
            None => Budget {
                budget: self.default_budget,
                declared: false,
            },
        }
    }

    /// The grace an expired lease's owner is judged with: the collector's, or longer where its
    /// own rule (c) needs it; then why it is longer, for the report.
    pub fn grace_for(
        &self,
        record: &LeaseRecord,
        options: &GcOptions,
    ) -> (Duration, Option<String>) {
        if !self.timing_only_create {
            return (options.grace, None);
        }
        let budget = self.budget(record.retry_budget_ms);
        let rule = swift_rule(
            budget.budget,
            record.expire_window(),
            Duration::from_millis(record.validity_window_ms),
            options.skew_margin,
        );
        if rule.shortest_grace <= options.grace {
            return (options.grace, None);
        }
        let why = waiting_words(&record.owner_id, budget, rule.shortest_grace);
        (rule.shortest_grace, Some(why))
    }

    /// How long after a lease was first seen missing its owner's checkpoint is decided: the
    /// collector's grace, or longer where the retry budget its `index.json` declared needs it.
    /// A lease that is gone was deleted after every write its owner sent while it was valid
    /// (Swift's server-side expiry runs past the expire window and its drift), so each has
    /// landed within its budget (and drift) of that.
    pub fn wait_missing(
        &self,
        owner: &OwnerId,
        declared_ms: Option<u64>,
        options: &GcOptions,
    ) -> (Duration, Option<String>) {
        if !self.timing_only_create {
            return (options.grace, None);
        }
        let budget = self.budget(declared_ms);
        let landed = landed_within(budget.budget);
        if landed <= options.grace {
            return (options.grace, None);
        }
        (landed, Some(waiting_words(owner, budget, landed)))
    }

    /// The late-write window of a checkpoint collected from an owner of this budget: the
    /// collector's, or longer where the owner's rule (b) needs it.
    pub fn late_window(&self, declared_ms: Option<u64>, options: &GcOptions) -> Duration {
        options
            .late_write_window
            .max(landed_within(self.budget(declared_ms).budget))
    }
}

/// "waiting for owner `X`'s declared 11m 15s retry budget (its checkpoints are decided after
/// 10m 53s 776ms of grace)".
fn waiting_words(owner: &OwnerId, budget: Budget, wait: Duration) -> String {
    let d = |d: Duration| {
        humantime::format_duration(Duration::from_millis(banklease::config::ceil_ms(d))).to_string()
    };
    let whose = if budget.declared {
        "declared"
    } else {
        "undeclared (the store's longest default)"
    };
    format!(
        "waiting for owner `{owner}`'s {whose} {} retry budget: create-if-absent is not \
         atomic on this store, so its checkpoints are decided only after {} of grace",
        d(budget.budget),
        d(wait)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(timing_only_create: bool) -> OwnerRules {
        OwnerRules {
            timing_only_create,
            default_budget: Duration::from_secs(675),
        }
    }

    #[test]
    fn the_late_window_covers_the_owners_budget() {
        let options = GcOptions::builder()
            .late_write_window(Duration::from_secs(60))
            .build();
        let r = rules(false);
        assert_eq!(
            r.late_window(Some(1_000), &options),
            Duration::from_secs(60)
        );
        assert_eq!(
            r.late_window(Some(120_000), &options),
            Duration::from_millis(120_120)
        );
        // Undeclared: the store's longest default.
        assert_eq!(
            r.late_window(None, &options),
            Duration::from_millis(675_675)
        );
    }

    #[test]
    fn a_missing_leases_wait_covers_the_declared_or_default_budget_on_swift_only() {
        let options = GcOptions::builder().grace(Duration::from_secs(10)).build();
        let owner = OwnerId::parse("o").unwrap();
        assert_eq!(
            rules(false).wait_missing(&owner, None, &options).0,
            Duration::from_secs(10)
        );
        let (wait, why) = rules(true).wait_missing(&owner, None, &options);
        assert_eq!(wait, Duration::from_millis(675_675));
        assert!(why.unwrap().contains("undeclared"), "{wait:?}");
        assert_eq!(
            rules(true).wait_missing(&owner, Some(4_500), &options).0,
            Duration::from_secs(10)
        );
    }
}
