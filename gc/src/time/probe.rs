//! Reading the store clock for a pass: the first reading checked against the last one (and the
//! bank's step floor), later readings checked against the first before anything is deleted. A
//! step refuses the pass; a forward step is remembered as the floor ([`crate::time::timing`]).

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::add_saturating;
use banklease::clock::StoreTime;
use banklease::error::error_chain;
use banklease::lease::MAX_EXPIRE_WINDOW;
use banklease::{Bank, LeaseObserver};
use chrono::{DateTime, Utc};

use banklease::clock::SharedClock;

use crate::pass::options::GcOptions;
use crate::time::host_clock;
use crate::time::timing::{read_floor_versioned, retire_floor, write_floor, ClockWatch, Refused};

/// The clock checks of one collector. Clones share the watch (the last reading and the floor).
///
/// Its bank is the collector's own, not a pass's counting view: the floor's reads and writes
/// are not the pass's requests.
#[derive(Debug, Clone)]
pub(crate) struct ClockProbe {
    bank: Bank,
    clock: SharedClock,
    watch: Arc<ClockWatch>,
    grace: Duration,
    skew_margin: Duration,
    read_staleness: Duration,
    dry_run: bool,
    floor_at_first_reading: bool,
}

impl ClockProbe {
    pub(crate) fn new(bank: Bank, clock: SharedClock, options: &GcOptions) -> Self {
        Self {
            bank,
            clock,
            watch: Arc::new(ClockWatch::default()),
            grace: options.grace,
            skew_margin: options.skew_margin,
            read_staleness: options.read_staleness,
            dry_run: options.dry_run,
            floor_at_first_reading: options.floor_at_first_reading,
        }
    }

    /// The step floor: stamps older than a detected store-clock step are judged from it.
    pub(crate) fn floor(&self) -> Option<DateTime<Utc>> {
        self.watch.floor()
    }

    /// A pass's first reading of the store clock: the bank's step floor is loaded, and the
    /// reading is checked against the previous pass's, or this host's last
    /// ([`crate::time::host_clock`]), see [`crate::time::timing`]. Then it becomes this host's last, but
    /// only once the bank keeps whatever this reading found: a step's floor, or a floor it
    /// raised without one (no reference, an uncertain comparison, an unreadable record). A
    /// reading neither compared nor floored is not recorded: it would be an unchecked link.
    pub(crate) async fn start(&self, observer: &LeaseObserver) -> banklease::Result<StoreTime> {
        let floor = read_floor_versioned(&self.bank).await?;
        let host = host_clock::read(&self.bank, &self.clock).await?;
        if let Some(reference) = host.as_ref().and_then(|h| h.reference()) {
            self.watch.offer(reference);
        }
        let store_time = observer.store_time().await?;
        if let Some((Some(floor), version)) = floor {
            // A floor older than any expire window plus grace constrains no stamp any more.
            let spent = add_saturating(
                floor,
                MAX_EXPIRE_WINDOW
                    .saturating_add(self.grace)
                    .saturating_add(self.skew_margin),
            );
            if spent < store_time.at {
                if !self.dry_run {
                    // Retired only as read: a floor another collector wrote since is kept.
                    // Harmless to keep: a failure is no reason to stop collecting.
                    if let Err(e) = retire_floor(&self.bank, floor, version).await {
                        tracing::warn!(error = %error_chain(&e), "retiring a spent clock floor failed");
                    }
                }
            } else {
                self.watch.raise_floor(floor);
            }
        }
        let floor_before = self.watch.floor();
        let checked = self.watch.start(
            &store_time,
            self.step_tolerance(),
            self.grace,
            self.floor_at_first_reading,
        );
        let compared = match &checked {
            Ok(c) => c.compared,
            Err(Refused::Step(_)) => true,
            Err(Refused::Unverified) => false,
        };
        // A record this reading could not be compared with (unreadable, older than its
        // allowance) is doubt about what came before: judge nothing older than now. Only where
        // there is no record at all (the first pass of a boot) does a reading start the chain
        // unchecked: a step before it cannot be told.
        let had_record = host.as_ref().is_some_and(|h| h.had_record());
        if !compared && checked.is_ok() && had_record {
            self.watch.raise_floor(store_time.at);
        }
        let raised = self.watch.floor() > floor_before;
        let (checked, step_kept) = self.on_step(checked.map(|_| ())).await;
        // A floor this reading raised without a step is kept in the bank too, so that a pass
        // comparing with this reading later still judges from it. Without a host record to
        // write (no boot clock) nothing will compare with it: the floor stays this collector's.
        let kept = match (&checked, raised, self.dry_run) {
            (_, _, true) => false,
            _ if host.is_none() => false,
            (Ok(()), true, false) => match self.watch.floor() {
                Some(floor) => match write_floor(&self.bank, floor).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "recording the clock floor failed");
                        false
                    }
                },
                None => false,
            },
            (Ok(()), false, false) => compared || !had_record,
            (Err(_), _, false) => step_kept,
        };
        if kept {
            if let Some(host) = &host {
                host_clock::write(&self.bank, &self.clock, host, &store_time).await;
            }
        }
        checked?;
        Ok(store_time)
    }

    /// A later reading in the same pass, before anything is deleted on the strength of what was
    /// judged against `first`.
    pub(crate) async fn again(
        &self,
        observer: &LeaseObserver,
        first: &StoreTime,
    ) -> banklease::Result<()> {
        let again = observer.store_time().await?;
        let checked = self.watch.recheck(first, &again, self.step_tolerance());
        self.on_step(checked).await.0
    }

    /// Steps smaller than the margin are what the margin absorbs; a lagging replica may serve
    /// the clock probe up to `read_staleness` old.
    fn step_tolerance(&self) -> Duration {
        self.skew_margin.saturating_add(self.read_staleness)
    }

    /// The pass's answer to a check, and whether the bank keeps what the check found (a forward
    /// step's floor written, or nothing to keep).
    async fn on_step(&self, checked: Result<(), Refused>) -> (banklease::Result<()>, bool) {
        let step =
            match checked {
                Ok(()) => return (Ok(()), true),
                Err(Refused::Step(step)) => step,
                Err(Refused::Unverified) => {
                    tracing::warn!(bank = self.bank.label(),
                    "store clock reading not verified (a lagging replica): pass aborted, nothing \
                     judged or deleted");
                    return (
                        Err(banklease::Error::ClockUnverified {
                            bank: self.bank.label().to_owned(),
                            attempts: banklease::collector::CLOCK_PROBE_ATTEMPTS as u32,
                        }),
                        false,
                    );
                }
            };
        let direction = if step.forward { "forward" } else { "backward" };
        tracing::error!(step = ?step.by, direction, at = %step.at,
            "store clock stepped: pass aborted, nothing deleted");
        let mut kept = !step.forward;
        if step.forward && !self.dry_run {
            if let Some(floor) = self.watch.floor() {
                match write_floor(&self.bank, floor).await {
                    Ok(()) => kept = true,
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "recording the clock floor failed")
                    }
                }
            }
        }
        (
            Err(banklease::Error::ClockStep {
                step: step.by,
                direction,
                at: step.at,
            }),
            kept,
        )
    }
}
