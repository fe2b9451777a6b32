//! The collector's side of the clock reasoning: store-clock steps (missing leases: records.rs).
//!
//! Invariant: **one clock domain, the store's — and a step in it is detected, not trusted.**
//! Every probe of the store clock ([`StoreTime`]) is compared with the previous one (the previous
//! pass's, then this pass's first before anything is deleted): the store's time may not advance
//! more than this host's monotonic clock could have between the two stamps (plus the skew margin
//! and a 0.1 % rate allowance). Only a *verified* reading counts: one whose read-back showed the
//! probe's own write. An unverified one (a lagging replica answered with another version) is no
//! reading at all: the pass judges nothing ([`banklease::Error::ClockUnverified`]), it is never a
//! reference for the next comparison, and never a first-reading floor — its stamp may be from
//! after a step that no comparison saw. A previous reading is a reference only while the rate
//! allowance over the gap stays within `grace`: past that, a step of more than margin + grace
//! could hide in it, so an older reference counts as none (and a daemon takes its reading as a
//! floor). A stamp may be from anywhere between its send and its answer: when the store's advance
//! since the reference exceeds the *shortest* real time between the two stamps by more than the
//! allowance, margin and grace, a step may have hidden in a late answer, and every collector
//! floors at its reading. A forward step larger than that aborts the pass
//! ([`banklease::Error::ClockStep`]) and raises a *floor*: from then on every `last_modified`
//! older than the step is judged as if written at the step, so an owner whose last renewal was
//! stamped before the step is timed from the step. On a `file:` bank the store clock is this
//! host's wall clock, so an NTP step or a manual `date -s` is exactly this case.
//!
//! The floor is kept in the bank (`gc/clock-floor`), so a restarted daemon, a standby that
//! takes over and a one-shot pass keep it until it is older than any expire window plus grace;
//! it is written only over an older one, conditionally on the version read, and one ahead of
//! the store's time (a step later undone) is brought down to the current reading. A backward
//! step within a pass (later stamps would look older than the pass's first reading says) aborts
//! the pass too. A step before a process's first reading cannot be told from elapsed time, so a
//! daemon takes its first reading as a floor (collection waits one expire window plus margin
//! and grace after it starts) and keeps reading the clock on standby; a standby that sees a
//! step does not take over in that round.

use std::sync::Mutex;
use std::time::Duration;

use banklease::clock::StoreTime;
use banklease::paths::Key;
use banklease::Bank;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

/// The fraction by which the store's clock may run faster than this host's monotonic clock
/// between two probes before a difference counts as a step.
const RATE_ALLOWANCE: f64 = 0.001;

/// A forward step of the store clock between two probes, if one is proven: the store's time
/// advanced by more than the longest real time that can separate the two stamps (from before
/// the first probe was sent to after the second was answered), plus `tolerance`.
pub fn forward_step(
    earlier: &StoreTime,
    later: &StoreTime,
    tolerance: Duration,
) -> Option<Duration> {
    let store_elapsed = (later.at - earlier.at).to_std().ok()?;
    let real_max = later.observed.saturating_duration_since(earlier.sent);
    let allowed = real_max + real_max.mul_f64(RATE_ALLOWANCE) + tolerance;
    (store_elapsed > allowed).then(|| store_elapsed - real_max)
}

/// A backward step between two probes, if one is proven: the store's time advanced by less than
/// the shortest real time that separates the two stamps (from after the first probe was answered
/// to before the second was sent), minus `tolerance`. Between passes it is harmless (older stamps
/// only look younger); *during* a pass it makes every stamp written after it look older than the
/// pass's first reading says, so a pass that sees one deletes nothing.
pub fn backward_step(
    earlier: &StoreTime,
    later: &StoreTime,
    tolerance: Duration,
) -> Option<Duration> {
    let real_min = later.sent.saturating_duration_since(earlier.observed);
    let least = real_min.saturating_sub(real_min.mul_f64(RATE_ALLOWANCE));
    // Signed: the store's time may have gone backwards outright.
    let store_elapsed = later.at - earlier.at;
    let least = chrono::TimeDelta::from_std(least).ok()?;
    let tolerance = chrono::TimeDelta::from_std(tolerance).ok()?;
    (store_elapsed < least - tolerance).then(|| {
        (chrono::TimeDelta::from_std(real_min).unwrap_or(chrono::TimeDelta::MAX) - store_elapsed)
            .to_std()
            .unwrap_or(Duration::ZERO)
    })
}

/// What a collector remembers between passes about the store's clock.
#[derive(Debug, Default)]
pub(crate) struct ClockWatch {
    inner: Mutex<WatchState>,
}

#[derive(Debug, Default)]
struct WatchState {
    last: Option<StoreTime>,
    floor: Option<DateTime<Utc>>,
    /// A reading judged a forward step from `last`: evidence about that reading, never a
    /// reference or a floor. A later reading that fits it (and not `last`) confirms the step.
    stepped: Option<StoreTime>,
    /// The bank's floor in force, offered before a reading (see [`ClockWatch::behind_floor`]).
    bank_floor: Option<DateTime<Utc>>,
}

/// A step seen by [`ClockWatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) by: Duration,
    pub(crate) forward: bool,
    pub(crate) at: DateTime<Utc>,
}

/// What [`ClockWatch::start`] did with a reading it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// It was compared with a recent previous reading (no step hid in the gap).
    pub(crate) compared: bool,
    /// It raised the floor (no reference, or an uncertain comparison): stamps older than it
    /// are judged as written at it.
    pub(crate) floored: bool,
    /// It confirmed a forward step an earlier reading was judged to be (the store's clock is
    /// at or past that reading): the floor is now at that reading's stamp.
    pub(crate) confirmed: Option<DateTime<Utc>>,
    /// Evidence of a step: the higher stamp of a comparison that could not rule one out (a
    /// reading behind its reference: the reference's; a store advance a step could hide in:
    /// the reading's), or a confirmed step's floor. A reading at or below it may be from before
    /// the step (see `FloorRecord::evidence`). `None` for a floor raised for want of a
    /// reference alone.
    pub(crate) evidence: Option<DateTime<Utc>>,
    /// It is behind the step candidate: that reading was wrong, or the step undone since.
    pub(crate) undone: Option<DateTime<Utc>>,
    /// A floor this process held that was ahead of this reading, compared with a clean
    /// reference: known wrong, dropped.
    pub(crate) dropped: Option<DateTime<Utc>>,
}

/// Why [`ClockWatch`] refuses a reading for judging.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refused {
    /// The store's clock stepped.
    Step(Step),
    /// The reading was not verified (another version was read back): it is no reading.
    Unverified,
}

/// Whether `later` fits `earlier` (no step either way between them, and recent enough to
/// compare): the store's clock kept the time `earlier` read.
fn fits(earlier: &StoreTime, later: &StoreTime, tolerance: Duration, gap_limit: Duration) -> bool {
    later.observed.saturating_duration_since(earlier.sent) <= gap_limit
        && forward_step(earlier, later, tolerance).is_none()
        && backward_step(earlier, later, tolerance).is_none()
}

/// The longest gap between two readings for which the rate allowance stays within `grace`:
/// an older previous reading is no reference.
pub(crate) fn max_reference_gap(grace: Duration) -> Duration {
    grace.div_f64(RATE_ALLOWANCE)
}

impl ClockWatch {
    /// A pass's first reading, checked against the previous pass's (when recent): `Err` when the
    /// store clock stepped forward since (the floor is then raised to this reading's stamp), or
    /// when the reading is not verified (nothing is changed then).
    ///
    /// Without a recent previous reading (the first pass of a process, a standby that just took
    /// over, a previous reading older than [`max_reference_gap`]) a step that happened before
    /// this reading cannot be seen. With `floor_without_reference` the reading itself becomes a
    /// floor then: every stamp older than it is judged as written at it, which holds collection
    /// back for one expire window plus margin and grace — the daemon's choice; a one-shot pass
    /// could never collect that way.
    pub(crate) fn start(
        &self,
        probe: &StoreTime,
        tolerance: Duration,
        grace: Duration,
        floor_without_reference: bool,
        candidate: Option<DateTime<Utc>>,
    ) -> Result<Checked, Refused> {
        let mut s = self.inner.lock().expect("clock watch poisoned");
        if !probe.verified {
            // Another version's stamp, maybe from after a step no comparison saw: no reading.
            return Err(Refused::Unverified);
        }
        // A previous reading from before a step the bank's floor records (at or before this
        // reading): no reference (see `behind_floor`).
        let before_floor = match (s.bank_floor.take(), s.last) {
            (Some(floor), Some(last)) => {
                let reached = probe.at
                    + chrono::TimeDelta::from_std(tolerance).unwrap_or(chrono::TimeDelta::MAX)
                    >= floor;
                last.at < floor && reached
            }
            _ => false,
        };
        if before_floor {
            s.last = None;
        }
        let gap_limit = max_reference_gap(grace);
        let recent = s
            .last
            .filter(|prev| probe.observed.saturating_duration_since(prev.sent) <= gap_limit);
        // Each stamp may be from anywhere between its send and its answer, so a step no larger
        // than the readings' round trips passes `forward_step`. Unless the store's advance fits
        // the *shortest* real time between the stamps (plus allowance, margin and grace), a step
        // the grace does not cover may have hidden in them: the comparison proves nothing.
        let hides = |prev: &StoreTime| {
            let real_min = probe.sent.saturating_duration_since(prev.observed);
            let store_elapsed = (probe.at - prev.at).to_std().unwrap_or(Duration::ZERO);
            store_elapsed > real_min + real_min.mul_f64(RATE_ALLOWANCE) + tolerance + grace
        };
        // A reading some pass judged a step (this process's, or the bank's candidate): the
        // store's clock at or past it confirms the step; behind it, the step was undone or the
        // reading was wrong. This process's own candidate has its instants, so a reading can be
        // compared with it as with a reference; the bank's has only its stamp.
        let own = s.stepped;
        let candidate = match (candidate, own.map(|c| c.at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let reached = |c: DateTime<Utc>| {
            probe.at + chrono::TimeDelta::from_std(tolerance).unwrap_or(chrono::TimeDelta::MAX) >= c
        };
        let step = recent.and_then(|prev| forward_step(&prev, probe, tolerance));
        if let Some(by) = step {
            // A reading judged a step is evidence about itself (a host whose clock read wrong
            // once, a step later undone), never a floor: it becomes a candidate, and only a
            // later reading at or past it confirms the step.
            if let Some(at) = candidate.filter(|c| reached(*c)) {
                // Confirmed. Compared with this process's own candidate (no further step since
                // it), the floor is the step's own stamp; otherwise another step may hide
                // between the candidate and this reading, and the floor is this reading: every
                // older stamp judged as written now, for one expire window.
                let floor = match own.filter(|c| fits(c, probe, tolerance, gap_limit)) {
                    Some(c) => c.at,
                    None => probe.at,
                };
                s.floor = Some(s.floor.map_or(floor, |f| f.max(floor)));
                s.last = Some(*probe);
                s.stepped = None;
                return Ok(Checked {
                    compared: true,
                    floored: true,
                    confirmed: Some(at),
                    evidence: Some(floor),
                    undone: None,
                    dropped: None,
                });
            }
            // A stepped reading behind the one kept (which was wrong, or undone since) takes
            // its place: kept, the one ahead would never be reached and every later step from
            // the reference would stay unconfirmed (simulation, Collectors seed 1,005,991: a
            // reading 54 s ahead once, then a real step of 2.5 s refused every pass).
            if s.stepped.is_none_or(|kept| probe.at < kept.at) {
                s.stepped = Some(*probe);
            }
            return Err(Refused::Step(Step {
                by,
                forward: true,
                at: probe.at,
            }));
        }
        // No step from the reference (or nothing to compare with). A reading behind its
        // reference proves nothing either: measured from a reference that was ahead (a reading
        // that was wrong for a while), a forward step since can net out to nothing.
        s.stepped = None;
        let behind = |prev: &StoreTime| backward_step(prev, probe, tolerance).is_some();
        // Behind its reference, the step (back) is between the two, and every stamp up to the
        // reference's, that one included, may be from before its correction (evidence drops
        // readings strictly below it); a step hiding in an advance is before this reading.
        let evidence = recent.as_ref().and_then(|prev| {
            if behind(prev) {
                Some((prev.at + chrono::TimeDelta::nanoseconds(1)).max(probe.at))
            } else {
                hides(prev).then_some(probe.at)
            }
        });
        let uncertain = evidence.is_some();
        // A reference behind a step the bank's floor records (one another collector confirmed)
        // was dropped: what this reading would be compared with is on the other side of a
        // step, so it is uncertain, as after a reading behind its reference.
        let uncertain = uncertain || before_floor;
        let reference = recent.filter(|_| !uncertain);
        let (mut confirmed, mut undone) = (None, None);
        match candidate {
            // At or past the candidate with no step from a clean reference: the step is behind
            // a compared chain, its stamp the floor. Without a reference the candidate's
            // relation to this reading is unknown: the floor is this reading.
            Some(at) if reached(at) => {
                let floor = if reference.is_some() { at } else { probe.at };
                s.floor = Some(s.floor.map_or(floor, |f| f.max(floor)));
                confirmed = Some(at);
            }
            // Behind the candidate and fitting a clean reference: the clock kept the time it
            // had before that reading, which was wrong (or undone since) and holds nothing.
            // Without a reference it cannot be told: floored at this reading below.
            Some(at) => undone = Some(at),
            None => {}
        }
        // Without a reference a daemon floors at its reading; after an uncertain one every
        // collector does (the clock was known before, and may have stepped since); and so does
        // a reading behind a step candidate that it cannot compare.
        let floored =
            (reference.is_none() && (floor_without_reference || undone.is_some())) || uncertain;
        // A floor ahead of the store's time holds every judgement back until the store catches
        // up. Ahead of a reading compared with a clean reference, it is known wrong (the clock
        // kept its time since, and a floor is only ever a reading): it goes. Otherwise it is
        // brought down to now, which judges every older stamp as written now — the most
        // conservative floor there is.
        let mut dropped = None;
        if let Some(floor) = s.floor.filter(|f| *f > probe.at) {
            let ahead = (floor - probe.at).to_std().unwrap_or(Duration::ZERO);
            if reference.is_some() && ahead > tolerance {
                s.floor = None;
                dropped = Some(floor);
            } else {
                s.floor = Some(probe.at);
            }
        }
        if floored {
            s.floor = Some(s.floor.map_or(probe.at, |f| f.max(probe.at)));
        }
        s.last = Some(*probe);
        Ok(Checked {
            compared: reference.is_some(),
            floored,
            evidence: evidence.or(s.floor.filter(|_| confirmed.is_some())),
            confirmed,
            undone,
            dropped,
        })
    }

    /// A later reading in the same pass, checked both ways against the pass's first: `Err` on a
    /// step either way (a forward one also raises the floor), and when either reading is not
    /// verified (nothing may be deleted on a comparison that was not made).
    pub(crate) fn recheck(
        &self,
        first: &StoreTime,
        probe: &StoreTime,
        tolerance: Duration,
    ) -> Result<(), Refused> {
        let mut s = self.inner.lock().expect("clock watch poisoned");
        if !probe.verified || !first.verified {
            return Err(Refused::Unverified);
        }
        if let Some(by) = forward_step(first, probe, tolerance) {
            // A candidate, not a floor (see `start`).
            s.stepped = Some(*probe);
            return Err(Refused::Step(Step {
                by,
                forward: true,
                at: probe.at,
            }));
        }
        if backward_step(first, probe, tolerance).is_none() {
            s.last = Some(*probe);
        }
        match backward_step(first, probe, tolerance) {
            Some(by) => Err(Refused::Step(Step {
                by,
                forward: false,
                at: probe.at,
            })),
            None => Ok(()),
        }
    }

    /// The bank's floor in force that a confirmed step raised is `floor`: a previous reading
    /// older than it is from before that step, and no reference for this one (compared with it, this
    /// reading would be refused as a step every time, and the floor raised again by the
    /// confirmations of each refusal's candidate: a one-shot process whose host record predates
    /// a step stalled collection so, simulation seed 130). It is dropped, and the next reading
    /// is uncertain: it floors at itself, once, and becomes the reference.
    /// A floor ahead of the reading is not such a step: it is a wrong floor, which a clean
    /// comparison with the previous reading retires.
    pub(crate) fn behind_floor(&self, floor: DateTime<Utc>) {
        self.inner.lock().expect("clock watch poisoned").bank_floor = Some(floor);
    }

    /// Take `reference` (a reading another process on this host recorded,
    /// [`crate::time::host_clock`]) as the previous reading when it is later than the one remembered,
    /// or there is none.
    pub(crate) fn offer(&self, reference: StoreTime) {
        let mut s = self.inner.lock().expect("clock watch poisoned");
        if s.last.is_none_or(|last| last.observed < reference.observed) {
            s.last = Some(reference);
        }
    }

    /// The reading last judged a step and not yet confirmed or undone.
    #[cfg(test)]
    pub(crate) fn stepped(&self) -> Option<StoreTime> {
        self.inner.lock().expect("clock watch poisoned").stepped
    }

    /// Raise the floor to `floor` (one read from the bank), but no further than `now` (this
    /// pass's reading): a floor ahead of the store's time would hold every judgement back
    /// until the store caught up, and judging every older stamp as written now is the most
    /// conservative floor there is.
    pub(crate) fn raise_floor(&self, floor: DateTime<Utc>, now: DateTime<Utc>) {
        let floor = floor.min(now);
        let mut s = self.inner.lock().expect("clock watch poisoned");
        s.floor = Some(s.floor.map_or(floor, |f| f.max(floor)));
    }

    /// Stamps older than this are judged as written at it (a step was seen there).
    pub(crate) fn floor(&self) -> Option<DateTime<Utc>> {
        self.inner.lock().expect("clock watch poisoned").floor
    }
}

/// `gc/clock-floor`: the latest store-clock step any collector of this bank saw, so that a
/// restarted daemon or a standby taking over keeps judging older stamps from it.
pub fn floor_path(bank: &Bank) -> Path {
    Key::GcClockFloor.path(bank)
}

/// The body of `gc/clock-floor`. A spent floor is retired in place (`spent`: a delete cannot be
/// made conditional on the version one read); it keeps its `floor`, so that a release before
/// `spent` reads a floor old enough to be spent and deletes it as it always did.
///
/// `step` is a reading some pass judged a forward step and no reading has confirmed yet: never
/// a floor (a host whose clock read wrong once would otherwise stall every later pass), only
/// what a later reading confirms (the store's clock is at or past it) or undoes (behind it).
/// A record that holds only a candidate has a spent `floor`, which releases before `step`
/// ignore.
#[derive(serde::Serialize, serde::Deserialize)]
struct FloorRecord {
    floor: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    spent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step: Option<DateTime<Utc>>,
    /// How far the candidate stepped (ms), for `gc/clock-steps` once it is confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step_by_ms: Option<u64>,
    /// The newest evidence of a step some collector had (`Checked::evidence`): a confirmed
    /// step's floor, or the higher stamp of a comparison that could not rule one out (a
    /// reading behind its reference — a step back, whose correction no later comparison across
    /// it sees — or a store advance a step could hide in). A host's reading older than it may be
    /// from before the step: it is no reference. A floor raised for want of a reference alone
    /// (a first reading, a record dropped) is no such evidence, and leaves other hosts'
    /// readings their references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    evidence: Option<DateTime<Utc>>,
}

/// `gc/clock-floor` as read: the floor (unless spent), the step candidate, and the version.
#[derive(Debug, Clone)]
pub(crate) struct FloorRead {
    pub(crate) floor: Option<DateTime<Utc>>,
    pub(crate) step: Option<DateTime<Utc>>,
    /// How far the candidate stepped, where the pass that judged it said.
    pub(crate) step_by: Option<Duration>,
    /// The newest floor raised on evidence of a step, unless spent (see
    /// [`ClockWatch::behind_floor`]).
    pub(crate) evidence: Option<DateTime<Utc>>,
    /// The floor as stored, spent or not (kept when only the candidate changes).
    stored: DateTime<Utc>,
    spent: bool,
    pub(crate) version: UpdateVersion,
}

/// Attempts of a conditional floor write that another collector's keeps beating.
const FLOOR_WRITE_ATTEMPTS: usize = 5;

/// The bank's clock floor in force (not spent), for commands that say what holds a checkpoint
/// back (`checkpoint explain`): every stamp older than it is judged as written at it. Reads only.
pub async fn read_floor(bank: &Bank) -> banklease::Result<Option<DateTime<Utc>>> {
    Ok(read_floor_versioned(bank).await?.and_then(|f| f.floor))
}

/// The floor in the bank and its version: `None` when there is no object.
pub(crate) async fn read_floor_versioned(bank: &Bank) -> banklease::Result<Option<FloorRead>> {
    let path = floor_path(bank);
    // A HEAD first: almost always there is no floor, and then the pass's GETs are all lease reads.
    match bank.store().head(&path).await {
        Ok(_) => {}
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(banklease::Error::store("head", &path, e)),
    }
    let got = match bank.store().get(&path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(banklease::Error::store("get", &path, e)),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let bytes = got
        .bytes()
        .await
        .map_err(|e| banklease::Error::store("get", &path, e))?;
    let record: FloorRecord =
        serde_json::from_slice(&bytes).map_err(|e| banklease::Error::Corrupt {
            path: path.clone(),
            reason: format!("not a clock-floor record: {e}"),
        })?;
    Ok(Some(FloorRead {
        floor: (!record.spent).then_some(record.floor),
        step: record.step,
        step_by: record.step_by_ms.map(Duration::from_millis),
        evidence: record.evidence.filter(|_| !record.spent),
        stored: record.floor,
        spent: record.spent,
        version,
    }))
}

/// Replace the record read as `read` by `record`, only if it is still that version: a record
/// another collector wrote since is kept (it knows at least as much). Where If-Match is
/// refused (Swift), a HEAD compares the version just before an overwrite.
async fn replace_floor(
    bank: &Bank,
    read: &FloorRead,
    record: &FloorRecord,
) -> banklease::Result<()> {
    let path = floor_path(bank);
    let body = PutPayload::from(serde_json::to_vec(record).expect("a floor record"));
    match bank
        .store()
        .put_opts(
            &path,
            body.clone(),
            PutOptions::from(PutMode::Update(read.version.clone())),
        )
        .await
    {
        Ok(_) | Err(object_store::Error::Precondition { .. }) => Ok(()),
        Err(e) if banklease::store::is_refusal(&e) => {
            overwrite_if_unchanged(bank, read, body).await
        }
        Err(e) => Err(banklease::Error::store("put", &path, e)),
    }
}

/// Overwrite `gc/clock-floor` with `body` if a HEAD still shows the version `read` saw (a
/// store without If-Match: the window between the two is the one left).
async fn overwrite_if_unchanged(
    bank: &Bank,
    read: &FloorRead,
    body: PutPayload,
) -> banklease::Result<()> {
    let path = floor_path(bank);
    match bank.store().head(&path).await {
        Ok(meta) if meta.e_tag == read.version.e_tag => bank
            .store()
            .put(&path, body)
            .await
            .map(drop)
            .map_err(|e| banklease::Error::store("put", &path, e)),
        Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(banklease::Error::store("head", &path, e)),
    }
}

/// Keep `at` (a reading this pass judged a forward step) as the bank's step candidate, beside
/// whatever floor is there, unless an earlier candidate is kept already. Never a floor.
pub(crate) async fn write_step_candidate(
    bank: &Bank,
    at: DateTime<Utc>,
    by: Duration,
) -> banklease::Result<()> {
    let by_ms = Some(u64::try_from(by.as_millis()).unwrap_or(u64::MAX));
    let path = floor_path(bank);
    for _ in 0..FLOOR_WRITE_ATTEMPTS {
        let read = read_floor_versioned(bank).await?;
        let (record, mode) = match &read {
            Some(read) if read.step.is_some_and(|s| s <= at) => return Ok(()),
            Some(read) => (
                FloorRecord {
                    floor: read.stored,
                    spent: read.spent,
                    step: Some(at),
                    step_by_ms: by_ms,
                    evidence: read.evidence,
                },
                PutMode::Update(read.version.clone()),
            ),
            None => (
                FloorRecord {
                    floor: at,
                    spent: true,
                    step: Some(at),
                    step_by_ms: by_ms,
                    evidence: None,
                },
                PutMode::Create,
            ),
        };
        let body = serde_json::to_vec(&record).expect("a floor record");
        match bank
            .store()
            .put_opts(&path, PutPayload::from(body), PutOptions::from(mode))
            .await
        {
            Ok(_) => return Ok(()),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => continue,
            // No If-Match (Swift): compared by a HEAD just before the overwrite.
            Err(e) if banklease::store::is_refusal(&e) => {
                let Some(read) = &read else { return Ok(()) };
                let body = serde_json::to_vec(&record).expect("a floor record");
                return overwrite_if_unchanged(bank, read, PutPayload::from(body)).await;
            }
            Err(e) => return Err(banklease::Error::store("put", &path, e)),
        }
    }
    Ok(())
}

/// Settle the bank's record after a reading: the step candidate cleared (confirmed into the
/// floor, or undone), and a floor known wrong retired or brought down to `lowered`.
pub(crate) async fn settle_floor(
    bank: &Bank,
    read: &FloorRead,
    clear_step: bool,
    floor: FloorChange,
) -> banklease::Result<()> {
    let (stored, spent) = match floor {
        FloorChange::Keep => (read.stored, read.spent),
        FloorChange::Retire => (read.stored, true),
        FloorChange::Lower(to) => (to, false),
    };
    let (step, step_by) = if clear_step {
        (None, None)
    } else {
        (read.step, read.step_by)
    };
    if (stored, spent, step) == (read.stored, read.spent, read.step) {
        return Ok(());
    }
    replace_floor(
        bank,
        read,
        &FloorRecord {
            floor: stored,
            spent,
            step,
            step_by_ms: step_by.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            // Never above the floor it is part of.
            evidence: read.evidence,
        },
    )
    .await
}

/// What [`settle_floor`] does with the floor itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloorChange {
    Keep,
    /// Known wrong (ahead of a compared reading), or spent.
    Retire,
    /// Ahead of a reading that could not be compared: brought down to it, the most
    /// conservative floor there is, and no further hold than one expire window.
    Lower(DateTime<Utc>),
}

/// Record `floor` in the bank, never over a newer one: each write is conditional on the
/// version just read (create-if-absent where there is none), and a floor already at or above
/// `floor` is left as it is. On a store without conditional overwrites (Swift) the check and
/// the write are two requests: a newer floor landing between them can be replaced by this
/// older one, which holds stamps back less far (the next collector to see the clock raises it
/// again from its own readings).
///
/// `evidence`, if any, is kept beside it (the newest: see `FloorRecord::evidence`). A floor is
/// never lowered: one already higher stays, with the evidence recorded beside it.
pub(crate) async fn write_floor(
    bank: &Bank,
    floor: DateTime<Utc>,
    evidence: Option<DateTime<Utc>>,
) -> banklease::Result<()> {
    let path = floor_path(bank);
    for _ in 0..FLOOR_WRITE_ATTEMPTS {
        let current = read_floor_versioned(bank).await?;
        let there = current.as_ref().and_then(|c| c.floor);
        let kept = current.as_ref().and_then(|c| c.evidence);
        let new_evidence = evidence;
        if there.is_some_and(|t| t >= floor) && kept >= new_evidence {
            return Ok(());
        }
        let target = there.map_or(floor, |t| t.max(floor));
        let evidence = match (kept, new_evidence) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        // A step candidate another collector kept is kept too.
        let body = serde_json::to_vec(&FloorRecord {
            floor: target,
            spent: false,
            step: current.as_ref().and_then(|c| c.step),
            step_by_ms: current
                .as_ref()
                .and_then(|c| c.step_by)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            evidence,
        })
        .expect("a floor record serialises");
        let mode = match current {
            Some(read) => PutMode::Update(read.version),
            None => PutMode::Create,
        };
        let sent = bank
            .store()
            .put_opts(
                &path,
                PutPayload::from(body.clone()),
                PutOptions::from(mode),
            )
            .await;
        match sent {
            Ok(_) => return Ok(()),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => continue,
            // No conditional overwrite here (object_store may report a refused If-Match as a
            // generic error after its retries: `is_refusal`).
            Err(e) if banklease::store::is_refusal(&e) => {
                return bank
                    .store()
                    .put(&path, PutPayload::from(body))
                    .await
                    .map(|_| ())
                    .map_err(|e| banklease::Error::store("put", &path, e));
            }
            Err(e) => return Err(banklease::Error::store("put", &path, e)),
        }
    }
    Err(banklease::Error::store(
        "put",
        &path,
        object_store::Error::Generic {
            store: "gc",
            source: format!(
                "other collectors replaced the clock floor {FLOOR_WRITE_ATTEMPTS} times while \
                 this one wrote; the next pass tries again"
            )
            .into(),
        },
    ))
}

/// Refuse to collect with a skew margin below the store's timestamp resolution (1 s on S3 and
/// Swift's Last-Modified): no judgement could then absorb the truncation of every stamp. The
/// daemon checks before it starts, a one-shot pass (CLI, Python) before it runs: a writer
/// measures the resolution itself (six requests), a reader takes what `init` kept.
pub async fn check_skew_margin(
    bank: &Bank,
    clock: &banklease::clock::SharedClock,
    margin: Duration,
) -> banklease::Result<()> {
    let resolution = if bank.is_reading_only() {
        bank.stamp_resolution(clock).await?
    } else {
        bank.measure_stamp_resolution(clock).await?
    };
    refuse_below(bank, resolution, margin)
}

/// [`check_skew_margin`] on the resolution `init` measured and kept in the bank (measured here
/// only when none is kept): for lock commands, whose cost is a handful of requests.
pub async fn check_skew_margin_kept(
    bank: &Bank,
    clock: &banklease::clock::SharedClock,
    margin: Duration,
) -> banklease::Result<()> {
    let resolution = bank.stamp_resolution(clock).await?;
    refuse_below(bank, resolution, margin)
}

fn refuse_below(bank: &Bank, resolution: Duration, margin: Duration) -> banklease::Result<()> {
    if margin < resolution {
        return Err(banklease::Error::Config {
            message: format!(
                "lease.skew_margin=`{}` is below the store's timestamp resolution=`{}` on \
                 bank=`{}`; set lease.skew_margin to at least the resolution",
                humantime::format_duration(margin),
                humantime::format_duration(resolution),
                bank.label()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // a real instant as the base of made-up probes
mod tests {
    use super::*;

    async fn floor_of(bank: &Bank) -> Option<DateTime<Utc>> {
        read_floor_versioned(bank)
            .await
            .unwrap()
            .and_then(|f| f.floor)
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    /// A collector that was paused between seeing a step and recording it must not lower the
    /// floor another collector raised meanwhile.
    #[tokio::test]
    async fn a_floor_is_never_replaced_by_an_older_one() {
        let bank = Bank::open("memory://").unwrap();
        write_floor(&bank, at(100), None).await.unwrap();
        write_floor(&bank, at(50), None).await.unwrap();
        assert_eq!(floor_of(&bank).await, Some(at(100)));
        write_floor(&bank, at(200), None).await.unwrap();
        assert_eq!(floor_of(&bank).await, Some(at(200)));
        // Nor by an older one raised on evidence of a step: the floor stays, the evidence is
        // kept beside it (never above it).
        write_floor(&bank, at(150), Some(at(150))).await.unwrap();
        let read = read_floor_versioned(&bank).await.unwrap().unwrap();
        assert_eq!((read.floor, read.evidence), (Some(at(200)), Some(at(150))));
    }

    /// A spent floor is retired only as it was read: one another collector wrote after the
    /// read is kept.
    #[tokio::test]
    async fn retiring_a_spent_floor_keeps_one_written_since() {
        let bank = Bank::open("memory://").unwrap();
        write_floor(&bank, at(10), None).await.unwrap();
        let read = read_floor_versioned(&bank).await.unwrap().unwrap();
        write_floor(&bank, at(500), None).await.unwrap();
        settle_floor(&bank, &read, false, FloorChange::Retire)
            .await
            .unwrap();
        assert_eq!(floor_of(&bank).await, Some(at(500)));
        // Retired as read: no floor, and a later step writes one again.
        let read = read_floor_versioned(&bank).await.unwrap().unwrap();
        settle_floor(&bank, &read, false, FloorChange::Retire)
            .await
            .unwrap();
        assert_eq!(floor_of(&bank).await, None);
        write_floor(&bank, at(600), None).await.unwrap();
        assert_eq!(floor_of(&bank).await, Some(at(600)));
    }
    use std::time::Instant;

    const GRACE: Duration = Duration::from_secs(60);

    fn probe(base: Instant, sent_ms: u64, observed_ms: u64, at_ms: i64) -> StoreTime {
        StoreTime {
            verified: true,
            at: DateTime::from_timestamp_millis(1_800_000_000_000 + at_ms).unwrap(),
            sent: base + Duration::from_millis(sent_ms),
            observed: base + Duration::from_millis(observed_ms),
        }
    }

    #[test]
    fn steps_are_forward_jumps_beyond_the_real_time_between_stamps() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let first = probe(base, 0, 10, 5);
        // 60 s later on both clocks: no step.
        assert_eq!(
            forward_step(&first, &probe(base, 60_000, 60_010, 60_005), tol),
            None
        );
        // Within the round trips and the tolerance: no step.
        assert_eq!(
            forward_step(&first, &probe(base, 60_000, 60_010, 60_100), tol),
            None
        );
        // An hour ahead: a step of about an hour.
        let step = forward_step(&first, &probe(base, 60_000, 60_010, 3_660_005), tol).unwrap();
        assert!(step >= Duration::from_secs(3599), "{step:?}");
        // Backwards: harmless, not a step.
        assert_eq!(
            forward_step(&first, &probe(base, 60_000, 60_010, -5_000), tol),
            None
        );
    }

    /// A dry run's reading is a `Date`: whole seconds rounded down, its send widened a second
    /// below. Against a collector's reading whose stamp is rounded down too, the two seconds
    /// look like a step hiding in the advance at a collector's tolerance (the reading is
    /// floored, and the dry run holds back what a pass collects), and fit at a dry run's, a
    /// second more (`ClockProbe::step_tolerance`).
    #[test]
    fn a_date_reading_fits_a_rounded_stamp_only_with_the_dates_second() {
        let base = Instant::now();
        // S3's margin (its stamps are whole seconds), the Python suite's grace.
        let collectors = Duration::from_millis(1100);
        let grace = Duration::from_millis(200);
        for (tolerance, floored) in [
            (collectors, true),
            (collectors + banklease::store::DATE_RESOLUTION, false),
        ] {
            let watch = ClockWatch::default();
            // The real pass: a stamp of 10 s read at 10.95 s.
            watch.offer(probe(base, 10_940, 10_950, 10_000));
            // The dry run about 5 s later: `Date` 16 s, answered at 16.06 s, sent a second
            // before 16.05 s.
            let dry = probe(base, 15_050, 16_060, 16_000);
            let checked = watch.start(&dry, tolerance, grace, false, None).unwrap();
            assert_eq!(checked.floored, floored, "tolerance {tolerance:?}");
        }
    }

    /// A reading judged a step is no floor: only a later reading that fits it (and still not
    /// the reference) confirms the step, and the floor is then the step's stamp, kept.
    #[test]
    fn a_step_raises_the_floor_only_once_a_later_reading_confirms_it() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let watch = ClockWatch::default();
        assert!(watch
            .start(&probe(base, 0, 10, 5), tol, GRACE, false, None)
            .is_ok());
        assert_eq!(watch.floor(), None);
        let stepped = probe(base, 1_000, 1_010, 7_200_000);
        assert!(watch.start(&stepped, tol, GRACE, false, None).is_err());
        assert_eq!(watch.floor(), None, "a step's own reading is never a floor");
        assert_eq!(watch.stepped().map(|s| s.at), Some(stepped.at));
        let next = probe(base, 2_000, 2_010, 7_201_000);
        let checked = watch.start(&next, tol, GRACE, false, None).unwrap();
        assert_eq!(checked.confirmed, Some(stepped.at));
        assert_eq!(watch.floor(), Some(stepped.at));
        let later = probe(base, 3_000, 3_010, 7_202_000);
        let checked = watch.start(&later, tol, GRACE, false, None).unwrap();
        assert!(checked.compared && checked.confirmed.is_none());
        assert_eq!(watch.floor(), Some(stepped.at));
    }

    /// A previous reading from before a step another collector confirmed (the bank's floor is
    /// after it) is no reference: the next reading is not refused as that step again, it floors
    /// at itself and becomes the reference.
    #[test]
    fn a_reference_behind_the_banks_floor_is_dropped() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let watch = ClockWatch::default();
        assert!(watch
            .start(&probe(base, 0, 10, 5), tol, GRACE, false, None)
            .is_ok());
        // A step of 3 s, confirmed elsewhere: the floor is at its stamp.
        let after = probe(base, 1_000, 1_010, 4_005);
        watch.behind_floor(after.at - chrono::TimeDelta::milliseconds(500));
        let checked = watch.start(&after, tol, GRACE, false, None).unwrap();
        assert!(checked.floored && !checked.compared, "{checked:?}");
        assert_eq!(watch.floor(), Some(after.at));
        let next = probe(base, 2_000, 2_010, 5_005);
        let checked = watch.start(&next, tol, GRACE, false, None).unwrap();
        assert!(checked.compared && !checked.floored, "{checked:?}");
    }

    /// A reading a minute ahead once, then a real step of 2.5 s (behind that reading): the real
    /// one is the candidate the next reading confirms. Before, the reading ahead stayed the
    /// candidate, never reached, and every later pass was refused for the real step.
    #[test]
    fn a_real_step_after_a_wrong_reading_is_confirmed() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let watch = ClockWatch::default();
        assert!(watch
            .start(&probe(base, 0, 10, 5), tol, GRACE, false, None)
            .is_ok());
        let wrong = probe(base, 1_000, 1_010, 61_000);
        assert!(watch.start(&wrong, tol, GRACE, false, None).is_err());
        let real = probe(base, 2_000, 2_010, 4_500);
        assert!(watch.start(&real, tol, GRACE, false, None).is_err());
        assert_eq!(watch.stepped().map(|s| s.at), Some(real.at));
        let next = probe(base, 3_000, 3_010, 5_500);
        let checked = watch.start(&next, tol, GRACE, false, None).unwrap();
        assert_eq!(checked.confirmed, Some(real.at));
    }

    /// A reading an hour ahead (a host whose clock read wrong once), then readings that fit
    /// the one before it again: no floor is left, nothing holds collection back.
    #[test]
    fn a_step_that_is_undone_leaves_no_floor() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let watch = ClockWatch::default();
        assert!(watch
            .start(&probe(base, 0, 10, 5), tol, GRACE, false, None)
            .is_ok());
        assert!(watch
            .start(
                &probe(base, 1_000, 1_010, 3_601_000),
                tol,
                GRACE,
                false,
                None
            )
            .is_err());
        let back = watch
            .start(&probe(base, 2_000, 2_010, 2_005), tol, GRACE, false, None)
            .unwrap();
        assert!(back.compared && !back.floored && back.confirmed.is_none());
        assert_eq!(watch.floor(), None);
        assert!(watch.stepped().is_none());
    }

    /// A floor held in memory that is ahead of a reading compared with a clean reference is
    /// known wrong and dropped; without a reference it is brought down to the reading.
    #[test]
    fn a_floor_ahead_of_a_compared_reading_is_dropped() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let at = |ms: i64| probe(base, 0, 0, ms).at;
        let watch = ClockWatch::default();
        watch.raise_floor(at(3_600_000), at(3_600_000));
        let first = watch
            .start(&probe(base, 0, 10, 5), tol, GRACE, false, None)
            .unwrap();
        assert!(!first.compared);
        assert_eq!(
            watch.floor(),
            Some(at(5)),
            "no reference: brought down to now"
        );
        watch.raise_floor(at(3_600_000), at(3_600_000));
        let second = watch
            .start(&probe(base, 1_000, 1_010, 1_005), tol, GRACE, false, None)
            .unwrap();
        assert!(second.compared);
        assert_eq!(second.dropped, Some(at(3_600_000)));
        assert_eq!(watch.floor(), None);
    }

    #[test]
    fn within_a_pass_a_step_either_way_is_refused() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let watch = ClockWatch::default();
        let first = probe(base, 0, 10, 5);
        assert!(watch.start(&first, tol, GRACE, false, None).is_ok());
        let fine = probe(base, 5_000, 5_010, 5_005);
        assert!(watch.recheck(&first, &fine, tol).is_ok());
        let Err(Refused::Step(back)) =
            watch.recheck(&first, &probe(base, 5_000, 5_010, -900_000), tol)
        else {
            panic!("a backward step is refused");
        };
        assert!(
            !back.forward && back.by >= Duration::from_secs(900),
            "{back:?}"
        );
        assert_eq!(watch.floor(), None, "a backward step raises no floor");
        let Err(Refused::Step(fwd)) =
            watch.recheck(&first, &probe(base, 5_000, 5_010, 905_000), tol)
        else {
            panic!("a forward step is refused");
        };
        assert!(fwd.forward);
        assert_eq!(watch.floor(), None, "a step's own reading is never a floor");
        assert!(watch.stepped().is_some());
    }

    #[test]
    fn without_any_reading_only_a_daemon_takes_its_first_reading_as_floor() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let watch = ClockWatch::default();
        assert!(watch
            .start(&probe(base, 0, 10, 5), tol, GRACE, false, None)
            .is_ok());
        assert_eq!(watch.floor(), None);
        // Two hours later, a 20-second step is still seen (the allowance is 0.1 % of the gap).
        let later = 7_200_000;
        let stepped = probe(base, later, later + 10, later as i64 + 20_000);
        assert!(watch.start(&stepped, tol, GRACE, true, None).is_err());
        // A daemon makes its very first reading its floor.
        let watch = ClockWatch::default();
        let first = probe(base, 0, 10, 5);
        assert!(watch.start(&first, tol, GRACE, true, None).is_ok());
        assert_eq!(watch.floor(), Some(first.at));
    }

    fn unverified(p: StoreTime) -> StoreTime {
        StoreTime {
            verified: false,
            ..p
        }
    }

    #[test]
    fn an_unverified_reading_is_no_reading() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        // A daemon whose first reading is unverified: refused, and no floor taken from it.
        let watch = ClockWatch::default();
        let first = unverified(probe(base, 0, 10, 5));
        assert!(matches!(
            watch.start(&first, tol, GRACE, true, None),
            Err(Refused::Unverified)
        ));
        assert_eq!(watch.floor(), None);
        // Nor is it a reference: a verified reading after a step is then compared with nothing
        // older (and becomes the daemon's floor), never with the unverified stamp.
        let after = probe(base, 1_000, 1_010, 3_600_000);
        assert!(watch.start(&after, tol, GRACE, true, None).is_ok());
        assert_eq!(watch.floor(), Some(after.at));
        // Within a pass, either reading unverified: nothing may be deleted.
        let again = unverified(probe(base, 2_000, 2_010, 3_601_000));
        assert!(matches!(
            watch.recheck(&after, &again, tol),
            Err(Refused::Unverified)
        ));
        assert!(matches!(
            watch.recheck(
                &unverified(after),
                &probe(base, 2_000, 2_010, 3_601_000),
                tol
            ),
            Err(Refused::Unverified)
        ));
    }

    #[test]
    fn a_reference_older_than_its_allowance_is_no_reference() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let grace = Duration::from_secs(1);
        // 1,000 × grace: the allowance over the gap reaches the grace.
        assert_eq!(max_reference_gap(grace), Duration::from_secs(1_000));
        let watch = ClockWatch::default();
        assert!(watch
            .start(&probe(base, 0, 10, 5), tol, grace, false, None)
            .is_ok());
        // 2,000 s later, with a 1.5 s step: inside the 2 s allowance of that gap, so a
        // comparison would pass it; the reference is too old to be one.
        let later = 2_000_000;
        let stepped = probe(base, later, later + 10, later as i64 + 1_500);
        assert!(watch.start(&stepped, tol, grace, true, None).is_ok());
        // ... so the daemon takes this reading as its floor, as with no reference at all.
        assert_eq!(watch.floor(), Some(stepped.at));
    }

    /// A reference whose answer came long after it was sent (the collector paused before the
    /// probe went out, a late answer) may have been stamped anywhere in that time: a step within
    /// it cannot be told from elapsed time. Simulation seed 393 (collectors): a probe sent at
    /// 4,257 ms and answered at 5,749 ms, a 1,083 ms step at 6,473 ms, the next pass's first
    /// probe at 6,490 ms: no step seen, and a live owner's checkpoint was collected. Such a
    /// reference is none, and the reading becomes a floor even for a one-shot collector: a step
    /// may have happened since the collector last knew the clock.
    #[test]
    fn a_reference_answered_late_hides_no_step() {
        let base = Instant::now();
        let tol = Duration::from_millis(100);
        let grace = Duration::from_millis(200);
        let watch = ClockWatch::default();
        // Sent at 0, served after a 1.47 s pause (stamp 1,470), answered at 1,492.
        assert!(watch
            .start(&probe(base, 0, 1_492, 1_470), tol, grace, false, None)
            .is_ok());
        // 741 ms of real time later the store's clock is 1,083 ms further on than that.
        let stepped = probe(base, 2_233, 2_266, 1_470 + 741 + 1_083);
        let judged = watch.start(&stepped, tol, grace, false, None);
        assert!(
            judged.is_err() || watch.floor() == Some(stepped.at),
            "a possible step was judged on: {judged:?}, floor {:?}",
            watch.floor()
        );
    }
}
