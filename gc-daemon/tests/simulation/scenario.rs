//! The collector-side fault model, drawn from a run's seed, and the events that
//! carry it out.
//!
//! The original model perturbs owners only. These faults perturb everyone, and the collectors
//! in particular:
//!
//! - **collector pauses at every request point**: before a request is sent, and after its answer
//!   arrived but before the collector acts on it — in particular between the store serving a
//!   lease or store-clock read at `t` and the judgement at `t + D` (`RandomPauses`);
//! - **late answers** for every participant: served at `t`, delivered at `t + D`
//!   (`FailingStore::set_late_answers`);
//! - **stale reads** within a replica-lag bound `L`: a GET/HEAD returns the version current at an
//!   instant within `L` before it was served (`SimStore::set_stale_reads`); the collectors are
//!   configured with `gc.read_staleness = L`;
//! - **ambiguous creates**: create-if-absent puts that land and are answered with an error, then
//!   retried by the library or the owner (`FailingStore::set_create_error_after`);
//! - **host suspends** of owners: nothing of the owner runs, and its clock counts the suspended
//!   time (`CLOCK_BOOTTIME`) or, in the deliberately broken variant, stops (`CLOCK_MONOTONIC`);
//! - **large steps of the store clock**, forward by more than `skew_margin + grace` at once (a
//!   `file:` bank whose host's wall clock is stepped);
//! - **restored markers**: a completed checkpoint's protecting marker comes back and its decision
//!   is gone (a bank restored from an old copy, pruned decisions) — the GC must not collect an
//!   `available`/`error` checkpoint;
//! - **lagging probe reads**: around a large step, every read-back of a store-clock
//!   probe key returns the version before the one just written, as a lagging replica would, so
//!   a collector's readings are unverified — and their stamps may be from after the step. With
//!   one collector (`SingleCollector`, `SingleDaemon`) no other collector's floor covers for it.

use super::*;

/// The longest stop of an owner (pause or suspend), and so the longest a write checked valid
/// can take to land; the late-data sweep waits longer than this.
pub(crate) const MAX_STALL: Duration = Duration::from_millis(3 * EXPIRE.as_millis() as u64);
/// `gc.late_write_window`: a collected checkpoint's data is swept once more this long after the
/// collection (plus the margin), once any write checked valid before it has landed.
pub(crate) const LATE_WRITE_WINDOW: Duration =
    Duration::from_millis(MAX_STALL.as_millis() as u64 + 200);
/// The largest replica lag of a run with stale reads (`gc.read_staleness`).
pub(crate) const MAX_STALENESS: Duration = Duration::from_millis(400);
/// Data under a collected checkpoint is a leak once the GC's last touch of it is older than the
/// sweep's window, plus the margin and the staleness it waits out, plus two passes.
pub(crate) const ORPHAN_BOUND: Duration = Duration::from_millis(
    LATE_WRITE_WINDOW.as_millis() as u64
        + MARGIN.as_millis() as u64
        + MAX_STALENESS.as_millis() as u64
        + 2 * INTERVAL.as_millis() as u64
        + 200,
);
/// The longest collector pause.
pub(crate) const MAX_GC_PAUSE: Duration = Duration::from_millis(2_500);
/// The largest step of the store clock: well beyond `skew_margin + grace` (300 ms), up to three
/// expire windows.
pub(crate) const MAX_STEP: Duration = Duration::from_millis(3_000);

/// The new faults of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Faults {
    /// Collector pauses: chance at each request point, and after a judged read's answer.
    pub(crate) gc_pauses: Option<(f64, f64)>,
    /// Late answers, for every participant: chance per request, longest delay.
    pub(crate) late: Option<(f64, Duration)>,
    /// Stale reads: the lag bound `L`, and the fraction of reads served stale.
    pub(crate) stale: Option<(Duration, f64)>,
    /// The fraction of create-if-absent puts that land and are answered with an error.
    pub(crate) ambiguous_creates: f64,
    /// How many owner hosts are suspended.
    pub(crate) suspends: u64,
    /// What an owner's clock does while its host is suspended.
    pub(crate) suspend_time: SuspendTime,
    /// How many large forward steps of the store clock.
    pub(crate) big_steps: u64,
    /// How many completed checkpoints get their marker back and lose their decision.
    pub(crate) restores: u64,
    /// Lagging probe reads around each large step (and once on their own).
    pub(crate) probe_lag: bool,
}

/// Which of the new faults a run has: all of them, or only those named (`gc-pauses`, `late`,
/// `stale`, `creates`, `suspends`, `steps`, `restores`, `probe-lag`; none at all for the
/// original model).
/// `SIM_FAULTS` (comma-separated; `none`) sets it for the seeds run from the environment; for
/// finding which fault exposes which defect.
pub(crate) type Only = Option<&'static [&'static str]>;

/// The faults named by `SIM_FAULTS`.
pub(crate) fn env_faults() -> Only {
    static ON: std::sync::OnceLock<Only> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("SIM_FAULTS").ok().map(|v| {
            let names: Vec<&'static str> = v
                .split(',')
                .map(|s| &*Box::leak(s.trim().to_owned().into_boxed_str()))
                .collect();
            &*Box::leak(names.into_boxed_slice())
        })
    })
}

fn enabled(only: Only, name: &str) -> bool {
    only.is_none_or(|on| on.contains(&name))
}

impl Faults {
    /// Draw the faults of a run. A healthy store gets none of them but suspends (a suspended
    /// owner is not a crashed one, so the liveness bound still holds); the broken kinds get
    /// the faults that must expose them.
    pub(crate) fn draw(rng: &mut Rng, kind: GcKind, healthy: bool, only: Only) -> Self {
        let faulty = !healthy;
        let mut f = Faults {
            gc_pauses: (faulty && rng.chance(0.5))
                .then(|| (0.002 + rng.unit() * 0.008, 0.02 + rng.unit() * 0.06)),
            late: (faulty && rng.chance(0.5))
                .then(|| (0.005 + rng.unit() * 0.025, EXPIRE.mul_f64(1.5))),
            stale: (faulty && rng.chance(0.5)).then(|| {
                let lag = rng.ms(50..MAX_STALENESS.as_millis() as u64 + 1);
                (lag, 0.1 + rng.unit() * 0.4)
            }),
            ambiguous_creates: if faulty && rng.chance(0.5) {
                0.02 + rng.unit() * 0.13
            } else {
                0.0
            },
            suspends: if rng.chance(0.3) { rng.range(1..4) } else { 0 },
            suspend_time: SuspendTime::Counted,
            big_steps: u64::from(faulty && rng.chance(0.3)),
            restores: if faulty && rng.chance(0.3) {
                rng.range(1..4)
            } else {
                0
            },
            // Drawn last, so that every earlier draw of a seed is what it was before.
            probe_lag: false,
        };
        f.probe_lag = faulty && rng.chance(0.4);
        if matches!(
            kind,
            GcKind::SingleCollector
                | GcKind::SingleDaemon
                | GcKind::OneShot
                | GcKind::BrokenOneShotNoBootClock
        ) && faulty
            && rng.chance(0.5)
        {
            // A lone collector's only protection against a step is its own readings.
            f.big_steps = 1;
            f.probe_lag = true;
        }
        if !enabled(only, "gc-pauses") {
            f.gc_pauses = None;
        }
        if !enabled(only, "late") {
            f.late = None;
        }
        if !enabled(only, "stale") {
            f.stale = None;
        }
        if !enabled(only, "creates") {
            f.ambiguous_creates = 0.0;
        }
        if !enabled(only, "suspends") {
            f.suspends = 0;
        }
        if !enabled(only, "steps") {
            f.big_steps = 0;
        }
        if !enabled(only, "restores") {
            f.restores = 0;
        }
        if !enabled(only, "probe-lag") {
            f.probe_lag = false;
        }
        match kind {
            GcKind::BrokenJudgeAtReceipt | GcKind::BrokenReaper => {
                f.gc_pauses = Some((0.01, 0.3));
            }
            GcKind::SuspendStopsOwnerClock => {
                f.suspends = rng.range(2..5);
                f.suspend_time = SuspendTime::Stopped;
            }
            // What exposes it is a step between two passes that a reading sees at once: in
            // every run, and never hidden behind lagging probe reads (unverified readings judge
            // nothing).
            GcKind::BrokenOneShotNoBootClock if enabled(only, "steps") => {
                f.big_steps = 1;
                f.probe_lag = false;
            }
            _ => {}
        }
        f
    }

    /// Apply the store-side faults.
    pub(crate) fn apply(&self, rng: &mut Rng, sim: &SimStore, faults: &FailingStore<SimStore>) {
        if let Some((rate, max)) = self.late {
            for op in Op::ALL {
                faults.set_late_answers(op, rate, max);
            }
        }
        faults.set_create_error_after(self.ambiguous_creates);
        if let Some((lag, rate)) = self.stale {
            sim.set_stale_reads(lag, rate, rng.next());
        }
    }

    /// The read staleness the collectors are configured with.
    pub(crate) fn read_staleness(&self) -> Duration {
        self.stale.map_or(Duration::ZERO, |(lag, _)| lag)
    }

    /// Pauses at the request points of a collector, from its own generator.
    pub(crate) fn gc_pauses(&self, rng: &mut Rng) -> Option<RandomPauses> {
        self.gc_pauses.map(|(rate, read_rate)| RandomPauses {
            rate,
            read_rate,
            max: MAX_GC_PAUSE,
            rng: rng.fork(),
        })
    }

    /// The events that carry the faults out, at world offsets.
    pub(crate) fn schedule(&self, rng: &mut Rng, events: &mut Vec<(Duration, Event)>) {
        let run = RUN.as_millis() as u64;
        for _ in 0..self.suspends {
            events.push((rng.ms(300..run - 1_000), Event::Suspend));
        }
        let mut steps = Vec::new();
        for _ in 0..self.big_steps {
            let at = rng.ms(500..run - 1_500);
            steps.push(at);
            events.push((at, Event::BigStep));
        }
        for _ in 0..self.restores {
            events.push((rng.ms(1_000..run - 500), Event::Restore));
        }
        if self.probe_lag {
            if steps.is_empty() {
                steps.push(rng.ms(500..run - 1_500));
            }
            for at in steps {
                let from = at.saturating_sub(rng.ms(0..300));
                events.push((from, Event::ProbeLag(true)));
                events.push((at + rng.ms(300..1_500), Event::ProbeLag(false)));
            }
        }
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gc_pauses={:?} late_answers={:?} stale_reads={:?} ambiguous_creates={:.3} \
             suspends={} ({:?}) big_steps={} restores={} probe_lag={}",
            self.gc_pauses,
            self.late,
            self.stale,
            self.ambiguous_creates,
            self.suspends,
            self.suspend_time,
            self.big_steps,
            self.restores,
            self.probe_lag
        )
    }
}

/// What the driver does at an instant of the run.
#[derive(Debug)]
pub(crate) enum Event {
    StartOwner,
    CrashOwner,
    Isolate(bool),
    Partition(bool),
    Jump,
    CrashGc,
    /// A running owner's host sleeps.
    Suspend,
    /// The store clock steps forward by more than `skew_margin + grace`.
    BigStep,
    /// A completed checkpoint's marker is restored and its decision pruned.
    Restore,
    /// Lagging probe reads start (`true`) or end.
    ProbeLag(bool),
    /// Every collector's reading of the store's clock comes back this much ahead ...
    Ahead(Duration),
    /// ... until it is right again.
    Back,
}

/// Suspend a running owner's host for 0.3–3 expire windows (only if it resumes before the run
/// ends). Returns its name.
pub(crate) fn suspend_owner(
    world: &World,
    rng: &mut Rng,
    running: &[String],
    clocks: &mut BTreeMap<String, Drifting>,
    time: SuspendTime,
) -> Option<String> {
    if running.is_empty() {
        return None;
    }
    let name = running[rng.range(0..running.len() as u64) as usize].clone();
    let length = EXPIRE.mul_f64(0.3 + rng.unit() * 2.7);
    let now = world.now();
    if now + length >= RUN {
        return None;
    }
    let ctl = world.reg().owners.get(&name)?.ctl.clone();
    if ctl.paused() {
        // One stop at a time: a write checked valid lands within `MAX_STALL`.
        return None;
    }
    ctl.suspend(length);
    clocks.get_mut(&name)?.suspend(now + length, time);
    Some(name)
}

/// Bring back the protecting marker of a completed checkpoint and remove its decision, as a
/// restore of an old copy of the bank (or a pruning of decisions) would. Returns its id.
pub(crate) async fn restore_marker(world: &World, rng: &mut Rng) -> Option<String> {
    let completed: Vec<String> = world.reg().completed.keys().cloned().collect();
    if completed.is_empty() {
        return None;
    }
    let id = completed[rng.range(0..completed.len() as u64) as usize].clone();
    let owner = owner_of_checkpoint(&id);
    let marker = Path::from(format!("{PREFIX}/index/protecting/{owner}/{id}"));
    let decision = Path::from(format!("{PREFIX}/decisions/{id}"));
    world.sim.put(&marker, PutPayload::default()).await.ok()?;
    world.sim.delete(&decision).await.ok()?;
    world.trace(format_args!(
        "RESTORE: {id} (completed) has its marker back and no decision"
    ));
    world.reg().restored.insert(id.clone());
    Some(id)
}
