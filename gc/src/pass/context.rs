//! The context every task of a pass takes: the bank (the pass's counting view), the clock, the
//! options, the lease observer and the pass's first store-clock reading. As in SlateDB's GC
//! tasks, a task gets its `now` from here and honours `dry_run` from here.

use std::time::{Duration, Instant};

use banklease::clock::SharedClock;
use banklease::clock::StoreTime;
use banklease::{Bank, LeaseObserver};
use chrono::{DateTime, Utc};

use crate::pass::declared::OwnerRules;
use crate::pass::options::GcOptions;
use crate::pass::plan::past;
use crate::time::probe::ClockProbe;

/// One pass, as its tasks see it.
#[derive(Debug)]
pub(crate) struct PassContext {
    /// The bank, through the pass's request counter.
    pub(crate) bank: Bank,
    pub(crate) clock: SharedClock,
    pub(crate) options: GcOptions,
    /// Judges leases against `store_time`, stamps raised to the step floor.
    pub(crate) observer: LeaseObserver,
    /// The pass's first (checked) reading of the store clock.
    pub(crate) store_time: StoreTime,
    /// Whether that reading was compared with a clean earlier one (not the first of a process
    /// or a boot, not after doubt): retentions are judged only on such a reading.
    pub(crate) compared: bool,
    pub(crate) probe: ClockProbe,
    /// This pass's id, recorded in the evidence of what it collects.
    pub(crate) pass: String,
    /// What each owner's declarations ask of this bank's store.
    pub(crate) rules: OwnerRules,
}

impl PassContext {
    /// How long before a read sent at `sent` the object stamped `stamp` was written, on the
    /// store clock: judged at the instant the read was sent (less `read_staleness`), the stamp
    /// raised to the step floor.
    pub(crate) fn elapsed_since(&self, stamp: DateTime<Utc>, sent: Instant) -> Duration {
        let stamp = self.probe.floor().map_or(stamp, |f| f.max(stamp));
        let now = self.store_time.at_send(sent, self.options.read_staleness);
        StoreTime::between(stamp, now)
    }

    /// Whether `elapsed` (store clock) is past the grace, the margin in the owner's favour.
    pub(crate) fn past_grace(&self, elapsed: Duration) -> bool {
        past(elapsed, self.options.grace, self.options.skew_margin)
    }

    /// Read the store clock again before deleting on the strength of what was judged against
    /// the first reading: a step in between refuses the pass.
    pub(crate) async fn check_clock_again(&self) -> banklease::Result<()> {
        self.probe.again(&self.observer, &self.store_time).await
    }
}
