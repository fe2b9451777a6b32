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
use crate::time::steps::{record_step, ClockStep};
use crate::time::timing::{
    read_floor_versioned, settle_floor, write_floor, write_step_candidate, ClockWatch, FloorChange,
    Refused, Step,
};

/// `d` to the millisecond, for words.
fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

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
    /// `gc.keep_failed_for`: how long a confirmed step is kept in `gc/clock-steps`.
    keep_failed_for: Option<Duration>,
    /// The last forward step this collector judged, with its size (for `gc/clock-steps` once a
    /// later reading confirms it).
    last_step: Arc<std::sync::Mutex<Option<Step>>>,
    /// Whether the last first reading was compared with a clean earlier one.
    compared: Arc<std::sync::atomic::AtomicBool>,
    /// What the clock checks found that an operator should know (a floor dropped or holding
    /// collection back, a step confirmed), since the pass last took them.
    notes: Arc<std::sync::Mutex<Vec<String>>>,
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
            keep_failed_for: options.keep_failed_for,
            last_step: Arc::default(),
            compared: Arc::default(),
            notes: Arc::default(),
        }
    }

    fn note(&self, what: String) {
        tracing::warn!(%what, "store clock");
        self.notes.lock().expect("notes poisoned").push(what);
    }

    /// What the clock checks found since the last call, for the pass's report.
    pub(crate) fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("notes poisoned"))
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
        // Only a floor raised on evidence of a step: one raised for want of a reference records
        // none, and dropping the references older than it had each host's pass floor for the
        // other's, for ever.
        if let Some(f) = floor.as_ref().and_then(|f| f.evidence) {
            self.watch.behind_floor(f);
        }
        let store_time = observer.store_time().await?;
        let floor_before = self.watch.floor();
        let checked = self.watch.start(
            &store_time,
            self.step_tolerance(),
            self.grace,
            self.floor_at_first_reading,
            floor.as_ref().and_then(|f| f.step),
        );
        let compared = match &checked {
            Ok(c) => c.compared,
            Err(Refused::Step(_)) => true,
            Err(Refused::Unverified) => false,
        };
        self.compared.store(
            checked.as_ref().is_ok_and(|c| c.compared),
            std::sync::atomic::Ordering::SeqCst,
        );
        // What becomes of the bank's record: a candidate confirmed or undone is cleared; a floor
        // spent, or ahead of a reading compared with a clean reference (known wrong: a floor
        // is only ever a reading), is retired; one ahead of a reading that could not be
        // compared is brought down to it.
        let mut clear_step = false;
        let mut change = FloorChange::Keep;
        if let Ok(c) = &checked {
            if let Some(at) = c.confirmed {
                clear_step = true;
                self.note(format!(
                    "the store's clock stepped forward at {at} and stayed there (a later reading \
                     is at or past it): stamps older than the step are judged as written at it"
                ));
                let by = floor
                    .as_ref()
                    .filter(|f| f.step == Some(at))
                    .and_then(|f| f.step_by)
                    .or_else(|| {
                        let own = *self.last_step.lock().expect("last step poisoned");
                        own.filter(|s| s.at == at).map(|s| s.by)
                    });
                self.keep_step(at, by, store_time.at).await;
            }
            if let Some(at) = c.undone {
                // Undone only where compared with a clean reference; otherwise the candidate
                // stays for a pass that can tell (this one floors at its reading).
                clear_step = c.compared;
                self.note(if c.compared {
                    format!(
                        "a reading judged a step ({at}) is ahead of the store's clock ({}), \
                         which kept the time it had before: it was wrong, and holds nothing back",
                        store_time.at
                    )
                } else {
                    format!(
                        "a reading judged a step ({at}) is ahead of the store's clock ({}) and \
                         this reading could not be compared with an earlier one: stamps older \
                         than now are judged as written now (one expire window)",
                        store_time.at
                    )
                });
            }
            if let Some(dropped) = c.dropped {
                self.note(format!(
                    "dropped a clock floor at {dropped}, ahead of the store's verified clock ({})",
                    store_time.at
                ));
            }
        }
        if let Some(f) = floor.as_ref().and_then(|f| f.floor) {
            // A floor older than any expire window plus grace constrains no stamp any more.
            let spent = add_saturating(
                f,
                MAX_EXPIRE_WINDOW
                    .saturating_add(self.grace)
                    .saturating_add(self.skew_margin),
            );
            let ahead = (f - store_time.at)
                .to_std()
                .ok()
                .filter(|ahead| *ahead > self.step_tolerance());
            let clean = checked.as_ref().is_ok_and(|c| c.compared);
            if spent < store_time.at {
                change = FloorChange::Retire;
            } else if let Some(ahead) = ahead.filter(|_| clean) {
                change = FloorChange::Retire;
                self.note(format!(
                    "the bank's clock floor `gc/clock-floor` ({f}) was {} ahead of the store's \
                     verified clock ({}): a reading from a clock that was wrong, not a floor; {}",
                    humantime::format_duration(whole_ms(ahead)),
                    store_time.at,
                    if self.dry_run {
                        "it holds nothing back, and a pass that acts retires it"
                    } else {
                        "retired, it holds nothing back"
                    }
                ));
            } else {
                if let Some(ahead) = ahead {
                    change = FloorChange::Lower(store_time.at);
                    self.note(format!(
                        "the bank's clock floor `gc/clock-floor` ({f}) is {} ahead of the \
                         store's clock ({}) and this reading could not be compared with an \
                         earlier one: brought down to it, stamps older than now are judged as \
                         written now (one expire window)",
                        humantime::format_duration(whole_ms(ahead)),
                        store_time.at
                    ));
                }
                self.watch.raise_floor(f, store_time.at);
            }
        }
        if let (Some(read), false) = (&floor, self.dry_run) {
            // Only as read: a record another collector wrote since is kept. A failure is no
            // reason to stop collecting (the next pass settles it).
            if let Err(e) = settle_floor(&self.bank, read, clear_step, change).await {
                tracing::warn!(error = %error_chain(&e), "settling the clock floor failed");
            }
        }
        // A record this reading could not be compared with (unreadable, older than its
        // allowance) is doubt about what came before: judge nothing older than now. Only where
        // there is no record at all (the first pass of a boot) does a reading start the chain
        // unchecked: a step before it cannot be told.
        let had_record = host.as_ref().is_some_and(|h| h.had_record());
        if !compared && checked.is_ok() && had_record {
            self.watch.raise_floor(store_time.at, store_time.at);
        }
        let raised = self.watch.floor() > floor_before;
        let confirmed = checked.as_ref().is_ok_and(|c| c.confirmed.is_some());
        let evidence = checked.as_ref().ok().and_then(|c| c.evidence);
        let (checked, step_kept) = self.on_step(checked.map(|_| ())).await;
        // A floor this reading raised without a step is kept in the bank too, so that a pass
        // comparing with this reading later still judges from it; a confirmed step's floor is
        // the bank's in any case. Without a host record to write (no boot clock) nothing will
        // compare with a floored reading: that floor stays this collector's.
        let kept = match (&checked, raised, self.dry_run) {
            (_, _, true) => false,
            _ if host.is_none() && !confirmed => false,
            (Ok(()), _, false) if raised || evidence.is_some() => match self.watch.floor() {
                Some(floor) => match write_floor(&self.bank, floor, evidence).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "recording the clock floor failed");
                        false
                    }
                },
                None => false,
            },
            (Ok(()), _, false) => compared || !had_record,
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

    /// Record a confirmed step in `gc/clock-steps`, so that no retention counts it. Only where
    /// something is retained on the store's clock (`gc.keep_failed_for`) and this pass acts.
    async fn keep_step(&self, at: DateTime<Utc>, by: Option<Duration>, now: DateTime<Utc>) {
        let Some(keep) = self.keep_failed_for.filter(|_| !self.dry_run) else {
            return;
        };
        let Some(by) = by else {
            self.note(format!(
                "the size of the step confirmed at {at} was not recorded (the pass that saw it \
                 could not write it): failed checkpoints stamped before it may be retired up to \
                 that much early"
            ));
            return;
        };
        let step = ClockStep {
            at,
            by_ms: u64::try_from(by.as_millis()).unwrap_or(u64::MAX),
        };
        match record_step(&self.bank, step, keep, now).await {
            Ok(()) => self.note(format!(
                "failed checkpoints stamped before it keep their retention without the step's {} \
                 (`gc/clock-steps`)",
                humantime::format_duration(whole_ms(by))
            )),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "recording the confirmed step failed");
                self.note(format!(
                    "recording the step confirmed at {at} in `gc/clock-steps` failed ({}): \
                     failed checkpoints stamped before it may be retired up to {} early",
                    error_chain(&e),
                    humantime::format_duration(whole_ms(by))
                ));
            }
        }
    }

    /// Whether the last first reading ([`start`](Self::start)) was compared with a clean
    /// earlier one: only then is its time known not to be a wrong reading or a step unseen.
    pub(crate) fn compared(&self) -> bool {
        self.compared.load(std::sync::atomic::Ordering::SeqCst)
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
        let tolerance = self.skew_margin.saturating_add(self.read_staleness);
        // A dry run reads as readers do: where the bank's record allows, by the `Date` of one
        // answer, whole seconds rounded down, widened by a second below its send. Compared with
        // a collector's reading (whose stamp is rounded down too), that second would otherwise
        // pass for a step hiding in the advance, and the dry run would floor at its own reading
        // and hold back what a real pass collects. It deletes nothing, so looser is safe.
        if self.dry_run {
            tolerance.saturating_add(banklease::store::DATE_RESOLUTION)
        } else {
            tolerance
        }
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
        // The step's reading is evidence about that reading, never a floor (a host whose
        // clock read wrong once would stall every later pass): the bank keeps it as the step
        // candidate, which a later reading confirms or undoes. The host's record keeps its
        // last good reading. A backward step keeps nothing.
        if step.forward {
            *self.last_step.lock().expect("last step poisoned") = Some(step);
        }
        if step.forward && !self.dry_run {
            if let Err(e) = write_step_candidate(&self.bank, step.at, step.by).await {
                tracing::warn!(error = %error_chain(&e), "recording the step candidate failed");
            }
        }
        let kept = !step.forward;
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
