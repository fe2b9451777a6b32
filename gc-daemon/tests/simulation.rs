//! Deterministic simulation of owners, keepers, checkpoints and GCs sharing one bank, under
//! crashes, stop-the-world pauses, clock skew and jumps, store faults, and faults aimed at the
//! collectors (scenario.rs).
//!
//! Each run is one seed: a current-thread tokio runtime with no timer driver (a real sleep would
//! panic), one `SimStore` stamping `last_modified` on a skewed, jumping *store clock* (and, in
//! some runs, serving stale versions from a lagging replica), a shared `FailingStore` (seeded
//! error rates, timeouts, listing lag, partitions, late answers, ambiguous creates) in front of
//! it, and a driver that owns time: it advances the world's clock in small random steps, every
//! owner's and GC's own clock with a little drift, and lets every task run to quiescence
//! between steps. The clocks are `SimClock`s, mock clocks that wake sleepers in a fixed order
//! (see there). Owners run the real library (`OwnerLease`, `Keeper`, `Checkpoint`); the GC is
//! two `banklease_gc_daemon::Daemon`s or two bare `Collector`s racing on the same bank. Every
//! participant reaches the store through its own `Port`, which the driver can pause (at any
//! request point, before it is sent or after its answer arrived), suspend, cut off or kill.
//! The collector-side faults are described in `simulation/scenario.rs`.
//!
//! After every run the checker reports (see RELIABILITY.md):
//!
//! - **safety**: no checkpoint collected while its owner's lease is valid from the owner's own
//!   point of view (`lease.remaining()` at the instant the GC's decision or deletion takes effect
//!   in the store); no owner's lease deleted or replaced by anyone else while it is valid from
//!   the owner's point of view; none both completed (the owner got `Ok`) and collected; no
//!   `available`/`error` checkpoint decided or collected by the GC; nothing outside the bank's
//!   prefix touched; no Lost lease Held again;
//! - **liveness**: with a healthy store, the GC decides every crashed owner's protecting
//!   checkpoints within `expire_window + skew_margin + grace + 2 × interval` of the crash (the
//!   bound without the margin is reported, see `LIVENESS_ASKED`); after the faults heal, no
//!   zombie is left at all (no marker of an owner that is not alive, no protecting index.json
//!   without a marker or of an owner that is not alive), and no data is left under a collected
//!   checkpoint once the late-data sweep is due.
//!
//! Deliberately broken variants prove the checker can fail: collectors judging expiry on their
//! own skewed wall clock, skipping the decision key, judging a read when its answer arrived,
//! reaping leases so judged, or deleting `index.json` instead of leaving a tombstone; and owners
//! whose clock stops while their host is suspended.
//!
//! Reproduce one seed, with its trace: `SIM_SEED=123 cargo test -p banklease-gc-daemon --test simulation
//! -- --nocapture` (`SIM_KIND=collectors` for one kind, `SIM_FAULTS=late,stale` for some of the
//! new faults only, `SIM_VERBOSE=1` for every request). More seeds: `SIM_SEEDS=10000 cargo test
//! --release -p banklease-gc-daemon --test simulation -- --ignored --nocapture` (see RELIABILITY.md).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use banklease::checkpoint::{
    parse_marker, CheckpointRecord, Decided, Decider, Decision, Status, CHECKPOINT_FORMAT,
};
use banklease::clock::{Clock, Jitter, MockClock, SharedClock};
use banklease::collector::{decide, finish_owner_decision, write_tombstone};
use banklease::config::Config;
use banklease::observe::judge;
use banklease::paths::{Key, Prefix};
use banklease::LeaseView;
use banklease::{Bank, Checkpoint, Error, LeaseState, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions};
use banklease_gc_daemon::Daemon;
use banklease_testkit::failing::{FailingStore, FaultCounts, Op, Strike};
use banklease_testkit::port::{Port, PortHooks};
use banklease_testkit::sim_store::{Mutation, MutationKind, SimStore, StoreClock, StoreView};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{GetResult, ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};

#[path = "simulation/actors.rs"]
mod actors;
#[path = "simulation/check.rs"]
mod check;
#[path = "simulation/clock.rs"]
mod clock;
#[path = "simulation/driver.rs"]
mod driver;
#[path = "simulation/operator.rs"]
mod operator;
#[path = "simulation/port.rs"]
mod port;
#[path = "simulation/report.rs"]
mod report;
#[path = "simulation/scenario.rs"]
mod scenario;
#[path = "simulation/wrong_clock.rs"]
mod wrong_clock;

use actors::*;
use check::*;
use clock::*;
use driver::*;
use operator::*;
use port::*;
use report::*;
use scenario::*;
use wrong_clock::*;

// ---- the model's numbers -----------------------------------------------------------------

const RENEW: Duration = Duration::from_millis(250);
const EXPIRE: Duration = Duration::from_millis(1000);
const VALIDITY: Duration = Duration::from_millis(100);
const MARGIN: Duration = Duration::from_millis(100);
const GRACE: Duration = Duration::from_millis(200);
/// With 250 ms, 14 zombies in 7,112 healthy runs were undecided when the bound passed: the bound
/// `expire + grace + 2 × interval` leaves out `skew_margin` and the pass's own duration, so it
/// holds only while `interval >= skew_margin + 2 × pass duration`.
const INTERVAL: Duration = Duration::from_millis(300);
const GC_RENEW: Duration = Duration::from_millis(100);
const GC_EXPIRE: Duration = Duration::from_millis(500);
const GC_VALIDITY: Duration = Duration::from_millis(50);

/// Owners start, crash, pause and meet faults during this much simulated time ...
const RUN: Duration = Duration::from_secs(8);
/// ... then the store heals, nothing new starts, and the GC gets this long to clean up: long
/// enough for the late-data sweep of a collection made just before the faults heal, and for
/// the slowest case the faults leave behind them: an answer sent before the heal and delivered
/// up to 1.5 expire windows after it (1.5 s), a standby taking over from an active daemon cut
/// off by it (the GC lease's 0.5 s and an interval), its first comparison with that wide
/// reading unable to rule out a hidden step (the floor then judges every older stamp as
/// written now), and that floor's hold — the longest owner expire window (1.4 s), its declared
/// retry budget (675 ms), margin and grace — and two intervals: about 6.8 s after the heal.
/// With 5 s, 1 run in 50,000 (Daemons seed 1,007,805: a standby's first reading after such an
/// answer floored 2.9 s after the heal) still held its zombie at the end.
const TAIL: Duration = Duration::from_millis(7000);
/// The liveness bound asked for: `expire_window + grace + 2 × interval`. It leaves out the skew
/// margin and the duration of the passes (the daemon starts a pass `interval` after the previous
/// one *ended*), so it is exceeded by a few ms in a few runs; those are counted, not failed on.
const LIVENESS_ASKED: Duration = Duration::from_millis(
    EXPIRE.as_millis() as u64 + GRACE.as_millis() as u64 + 2 * INTERVAL.as_millis() as u64,
);
/// What a pass itself may take to reach a zombie on a healthy store, allowed on top of the bound
/// asked for and the margin. A pass makes several requests before and while it decides (the
/// store clock probed again, the clock floor read, missing-since records, due sweeps, sweep
/// markers), some of them one owner at a time: seed 1,002,575 (daemons) decided a zombie 298 ms
/// into a pass that started 300 ms after a 458 ms pass, 2.118 s after the crash. Zombies beyond
/// the bound without it are counted (`over_margin_bound`, RELIABILITY.md).
const PASS_ALLOWANCE: Duration = Duration::from_millis(250);
/// How much longer a pass that retires failed checkpoints may take: each retirement is some
/// eighteen requests (its record, mark, entry, sweep marker, the data's listing and deletion,
/// the tombstone), and the next pass starts `interval` after this one ended. Seed 1,002,794
/// (single collector, healthy) retired four in one pass of about 600 ms. In runs with
/// retirement, the bound grows by this much; the others keep the tight one.
const RETIRE_ALLOWANCE: Duration = Duration::from_millis(1_000);
/// The bound checked: the one asked for plus `skew_margin` plus one pass.
const LIVENESS: Duration = Duration::from_millis(
    LIVENESS_ASKED.as_millis() as u64
        + MARGIN.as_millis() as u64
        + PASS_ALLOWANCE.as_millis() as u64,
);
/// Owner and GC clock rates differ from the world's by at most this fraction.
const MAX_DRIFT: f64 = 0.002;
/// The store clock jumps forward by at most this much at once, at most once per `JUMP_SPACING`,
/// which keeps the jumps within the margin over any expire window.
const MAX_JUMP: Duration = Duration::from_millis(80);
const JUMP_SPACING: Duration = Duration::from_secs(2);
/// Most owners one run starts (restarts included).
const MAX_OWNERS: usize = 14;
/// The bank's prefix; the sentinels live outside it.
const PREFIX: &str = "bank";
const SENTINELS: [&str; 3] = [
    "elsewhere/index/protecting/o000/o000-c0",
    "bank-twin/checkpoints/o000-c0/index.json",
    "bank-twin/leases/o000",
];

// ---- what a run can find -----------------------------------------------------------------

/// Which collector runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GcKind {
    /// Two `banklease_gc_daemon::Daemon`s (one active, one standby).
    Daemons,
    /// Two bare `Collector`s passing concurrently (they race on every decision).
    Collectors,
    /// One bare `Collector`: no second collector's clock floor (`gc/clock-floor`) can cover for
    /// a step this one failed to see.
    SingleCollector,
    /// One `banklease_gc_daemon::Daemon`: likewise, and its first-reading floor is its own.
    SingleDaemon,
    /// `banklease gc` from cron: a fresh `Collector` every pass, with no reading of its own and
    /// no first-reading floor, on one host whose boot clock pairs with the readings a pass
    /// there leaves in the bank (`gc/clock-hosts/`).
    OneShot,
    /// Broken: `OneShot` on a host without a boot clock, so that no pass compares its first
    /// reading with anything: a step between passes goes unseen.
    BrokenOneShotNoBootClock,
    /// Broken: judges expiry on the GC's own wall clock (skewed), then decides and deletes.
    BrokenOwnClock,
    /// Broken: judges on the store clock, but deletes without taking the decision key.
    BrokenNoDecision,
    /// Broken: judges a lease at the instant the read's answer arrived (not before it was
    /// sent), with collector pauses after judged reads; leaves tombstones.
    BrokenJudgeAtReceipt,
    /// Broken: collects nothing, but reaps every lease judged expired at the instant the
    /// read's answer arrived, with collector pauses.
    BrokenReaper,
    /// Broken: judges at receipt without collector pauses, decides, but deletes `index.json`
    /// instead of leaving a tombstone (and never sweeps late data).
    BrokenNoTombstone,
    /// Broken on the owners' side: real collectors, but an owner's clock stops while its host
    /// is suspended (`CLOCK_MONOTONIC`), and suspends happen in every run.
    SuspendStopsOwnerClock,
    /// Broken: real collectors that also repair owners' moves by rewriting `index.json` on a
    /// version read a moment before, whatever is there by then; an operator deletes
    /// checkpoints by hand in every run.
    BrokenBlindRewrite,
    /// Broken: a collector that keeps the reading of a pass that saw a forward step as the
    /// bank's floor; the store's clock reads far ahead once in every run.
    BrokenFloorFromStep,
    /// Broken: real collectors that retire failed checkpoints as soon as they are listed
    /// (`keep_failed_for` zero) where the bank's retention is 1–4 s, in every run.
    BrokenRetiresEarly,
}

impl GcKind {
    fn is_broken(self) -> bool {
        !matches!(
            self,
            GcKind::Daemons
                | GcKind::Collectors
                | GcKind::SingleCollector
                | GcKind::SingleDaemon
                | GcKind::OneShot
        )
    }

    /// The bound within which a crashed owner's zombies are decided on a healthy store. A lone
    /// collector has no second one passing between its passes: one more pass may have to end
    /// first (seed 1,009,263, single collector: decided 2.153 s after the crash, 3 ms past
    /// `LIVENESS`, after passes of about 500 ms).
    fn liveness(self) -> Duration {
        match self.collectors() {
            1 => LIVENESS + PASS_ALLOWANCE,
            _ => LIVENESS,
        }
    }

    /// How many collectors run.
    fn collectors(self) -> usize {
        match self {
            GcKind::SingleCollector
            | GcKind::SingleDaemon
            | GcKind::OneShot
            | GcKind::BrokenOneShotNoBootClock => 1,
            _ => 2,
        }
    }

    /// The kinds every seed runs with.
    const REAL: [GcKind; 5] = [
        GcKind::Daemons,
        GcKind::Collectors,
        GcKind::SingleCollector,
        GcKind::SingleDaemon,
        GcKind::OneShot,
    ];
}

/// A kind as `SIM_KIND` names it: `OneShot` is `one-shot`.
fn kind_name(kind: &GcKind) -> String {
    let mut out = String::new();
    for (i, c) in format!("{kind:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

// ---- the tests -----------------------------------------------------------------------------

/// The default run of `cargo test`: a few hundred seeds (`SIM_SEEDS` to change), or exactly one
/// (`SIM_SEED`, printing its trace).
#[test]
fn safety_and_liveness_hold_for_many_seeds() {
    if let Some(seed) = env_u64("SIM_SEED") {
        for kind in env_kinds() {
            let o = run(seed, kind);
            for line in &o.trace {
                println!("{line}");
            }
            println!("seed {seed} ({kind:?}): violations={:?}", o.violations);
            if !kind.is_broken() {
                assert!(o.violations.is_empty(), "{}", report_failure(kind, &o));
            }
        }
        return;
    }
    let n = env_u64("SIM_SEEDS").unwrap_or(150);
    check_seeds(0..n);
}

/// `cargo test --release -p banklease-gc-daemon --test simulation -- --ignored --nocapture`: 10,000
/// seeds for each collector kind (or `SIM_SEEDS`, from `SIM_FIRST_SEED`).
#[test]
#[ignore = "long: 10,000 seeds; run in release mode, see RELIABILITY.md"]
fn ten_thousand_seeds() {
    let first = env_u64("SIM_FIRST_SEED").unwrap_or(1_000_000);
    let n = env_u64("SIM_SEEDS").unwrap_or(10_000);
    check_seeds(first..first + n);
}

#[test]
fn a_seed_replays_exactly() {
    let seeds = env_u64("SIM_REPLAY_SEEDS").unwrap_or(6);
    for seed in 0..seeds {
        for kind in [GcKind::Daemons, GcKind::Collectors] {
            let mut a = run(seed, kind);
            let mut b = run(seed, kind);
            a.trace = a.trace.iter().map(|l| without_uuids(l)).collect();
            b.trace = b.trace.iter().map(|l| without_uuids(l)).collect();
            if let Some(i) =
                (0..a.trace.len().max(b.trace.len())).find(|i| a.trace.get(*i) != b.trace.get(*i))
            {
                panic!(
                    "seed {seed} ({kind:?}) diverged at trace line {i}:\n  {:?}\n  {:?}",
                    a.trace.get(i),
                    b.trace.get(i)
                );
            }
            assert!(a.trace.len() > 20, "seed {seed}: a run that did nothing");
        }
    }
}

/// `line` with every random id (a run of 32 or more hex digits and dashes: uuids of probe
/// keys, tokens) replaced by `<id>`: they differ from run to run, and nothing depends on them.
fn without_uuids(line: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in line.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() || c == '-' {
            run.push(c);
            continue;
        }
        if run.len() >= 32 {
            out.push_str("<id>");
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// The kinds `SIM_KIND` names (`daemons`, `collectors`, `single-collector`, `single-daemon`,
/// or a broken kind in kebab case, e.g. `broken-reaper`); the four real ones by default.
fn env_kinds() -> Vec<GcKind> {
    let all = [
        GcKind::Daemons,
        GcKind::Collectors,
        GcKind::SingleCollector,
        GcKind::SingleDaemon,
        GcKind::OneShot,
        GcKind::BrokenOneShotNoBootClock,
        GcKind::BrokenOwnClock,
        GcKind::BrokenNoDecision,
        GcKind::BrokenJudgeAtReceipt,
        GcKind::BrokenReaper,
        GcKind::BrokenNoTombstone,
        GcKind::SuspendStopsOwnerClock,
        GcKind::BrokenBlindRewrite,
        GcKind::BrokenFloorFromStep,
        GcKind::BrokenRetiresEarly,
    ];
    match std::env::var("SIM_KIND") {
        Ok(name) => {
            let kinds: Vec<GcKind> = all.into_iter().filter(|k| kind_name(k) == name).collect();
            assert!(!kinds.is_empty(), "SIM_KIND=`{name}` names no kind");
            kinds
        }
        Err(_) => GcKind::REAL.to_vec(),
    }
}

/// Run broken `kind` on seeds until the checker reports one of `expected`.
fn broken_is_caught(kind: GcKind, expected: &[&str]) {
    let mut seen = BTreeMap::new();
    for seed in 0..300 {
        let o = run(seed, kind);
        for v in &o.violations {
            *seen.entry(v.kind()).or_insert(0) += 1;
        }
        if let Some(v) = o.violations.iter().find(|v| expected.contains(&v.kind())) {
            println!("{kind:?} caught at seed {seed}: {v}\n(all kinds so far: {seen:?})");
            return;
        }
    }
    panic!("{kind:?}: no seed in 0..300 showed {expected:?}; the checker is blind (saw {seen:?})");
}

#[test]
fn broken_collector_judging_on_its_own_clock_is_caught() {
    broken_is_caught(GcKind::BrokenOwnClock, &["collected-while-valid"]);
}

#[test]
fn broken_collector_skipping_the_decision_is_caught() {
    broken_is_caught(
        GcKind::BrokenNoDecision,
        &["completed-and-collected", "available-collected"],
    );
}

/// A lease read judged when its answer arrives, after a pause, rather than at its send.
#[test]
fn broken_collector_judging_a_read_at_its_receipt_is_caught() {
    broken_is_caught(GcKind::BrokenJudgeAtReceipt, &["collected-while-valid"]);
}

/// A live owner's lease deleted by a reaper that judged a late answer.
#[test]
fn broken_reaper_deleting_a_live_lease_is_caught() {
    broken_is_caught(GcKind::BrokenReaper, &["lease-deleted-while-valid"]);
}

/// An operator's deletion undone by a repair that rewrote `index.json` on a version read
/// before the deletion landed: an `available` record over a checkpoint whose data is gone.
#[test]
fn broken_blind_rewrite_of_index_json_is_caught() {
    broken_is_caught(GcKind::BrokenBlindRewrite, &["removal-undone"]);
}

/// A retention ignored: failed checkpoints retired as soon as a pass lists them.
#[test]
fn broken_retirement_ignoring_the_retention_is_caught() {
    broken_is_caught(GcKind::BrokenRetiresEarly, &["retired-early"]);
}

/// A reading from a store clock that was far ahead once, kept as a floor: every stamp older than
/// it is held back, and the zombies of owners that died meanwhile are left.
#[test]
fn broken_floor_from_a_stepped_reading_is_caught() {
    broken_is_caught(GcKind::BrokenFloorFromStep, &["zombie-left"]);
}

/// A protecting index.json no pass will find (no tombstone), and late data never swept.
#[test]
fn broken_collector_leaving_zombies_and_late_data_is_caught() {
    broken_is_caught(GcKind::BrokenNoTombstone, &["zombie-unmarked"]);
    broken_is_caught(GcKind::BrokenNoTombstone, &["orphan-data"]);
}

/// A one-shot pass (a fresh collector, no first-reading floor) whose host has no boot clock
/// compares its first store-clock reading with nothing: a step between two passes makes live
/// owners look dead. With the boot clock (`OneShot`, a real kind) the pass compares with the
/// reading the last pass on its host recorded.
#[test]
fn a_one_shot_pass_without_its_hosts_last_reading_is_caught() {
    broken_is_caught(
        GcKind::BrokenOneShotNoBootClock,
        &["collected-while-valid", "lease-deleted-while-valid"],
    );
}

/// An owner whose clock stops while its host is suspended believes in a lease the store has
/// long seen expire.
#[test]
fn owner_clock_stopping_during_a_suspend_is_caught() {
    broken_is_caught(
        GcKind::SuspendStopsOwnerClock,
        &["collected-while-valid", "lease-deleted-while-valid"],
    );
}

/// The simulation's first two findings, replayed from the seeds that found them: a release whose
/// DELETE landed but was not answered left the lease valid to its owner (release now leaves
/// `Held` before its DELETE), and a paused owner's index.json landed after collection as a
/// protecting checkpoint without a marker (the GC now leaves an index.json tombstone).
#[test]
fn known_findings_are_fixed() {
    let cases = [
        (GcKind::Daemons, 1_000_004, Known::ReleaseAmbiguous),
        (GcKind::Collectors, 1_000_118, Known::ReleaseAmbiguous),
        (GcKind::Daemons, 8, Known::IndexAfterCollection),
        (GcKind::Collectors, 1_000_012, Known::IndexAfterCollection),
    ];
    let mut still = Vec::new();
    for (kind, seed, known) in cases {
        let o = run(seed, kind);
        if o.known.contains_key(&known) {
            let lines: Vec<&String> = o.trace.iter().filter(|l| l.contains("KNOWN")).collect();
            still.push(format!("{known:?} at seed {seed} ({kind:?}): {lines:?}"));
        }
    }
    assert!(still.is_empty(), "still happening:\n{}", still.join("\n"));
}

/// Seeds at which the collector judged on an unverified store-clock reading (`ClockWatch` let an
/// unverified reading through without comparing it, and a lagging replica's stamp from after a
/// step made live owners look dead). Each failed with that code (seen by reverting the fix in
/// gc/src/time/timing.rs: the `verified` checks of `ClockWatch::start` and `recheck`); none may fail
/// now. The seeds were chosen again when banks gained their descriptor (one request fewer per
/// layout check moved every scenario): with the fix reverted, seeds 400..3400 then failed on
/// liveness (zombies left) at these, each with lagging probe reads.
#[test]
fn unverified_clock_readings_are_never_judged_on() {
    use GcKind::{Collectors, SingleCollector, SingleDaemon};
    let cases: [(GcKind, u64, &str); 3] = [
        (SingleCollector, 822, "zombies left (one collector)"),
        (Collectors, 1762, "zombies left"),
        (SingleDaemon, 637, "zombies left (one daemon)"),
    ];
    let mut still = Vec::new();
    for (kind, seed, what) in cases {
        let o = run_with(seed, kind, None);
        assert!(
            o.probe_lag_reads > 0,
            "seed {seed} ({kind:?}): no lagging probe read; the scenario changed"
        );
        if !o.violations.is_empty() {
            still.push(format!(
                "seed {seed} ({kind:?}; {what}): {:?}\n  reproduce: SIM_SEED={seed} SIM_KIND={} \
                 cargo test --release -p banklease-gc-daemon --test simulation -- --nocapture safety",
                o.violations,
                match kind {
                    SingleCollector => "single-collector",
                    Collectors => "collectors",
                    _ => "daemons",
                },
            ));
        }
    }
    assert!(still.is_empty(), "still happening:\n{}", still.join("\n"));
}

/// A reference reading answered late (the collector paused before its probe went out) let a
/// store-clock step of 1,083 ms between it and the next pass's first reading pass for elapsed
/// time, and a live owner's checkpoint was collected (seed 393, collectors, in a 1,000-seed run;
/// `ClockWatch::start` now counts both readings' round trips against the grace). It failed
/// with that code; it may not now.
#[test]
fn a_late_reference_reading_hides_no_step() {
    let o = run_with(393, GcKind::Collectors, None);
    assert!(
        o.violations.is_empty(),
        "seed 393 (Collectors): {:?}\n  reproduce: SIM_SEED=393 SIM_KIND=collectors cargo test \
         -p banklease-gc-daemon --test simulation -- --nocapture",
        o.violations
    );
}

/// Seeds at which the collector-side faults (scenario.rs) first broke an invariant, each run
/// with only the fault that exposed it; the string beside each says what went wrong. Each of
/// them failed on the code before its fix; none may fail now.
#[test]
fn collector_side_findings_are_fixed() {
    use GcKind::{Collectors, Daemons, OneShot, SingleCollector};
    let cases: [(GcKind, u64, Only, &str); 18] = [
        (
            Daemons,
            1_000_615,
            Some(&["late"]),
            "a lease read answered late, judged at receipt: collected while valid",
        ),
        (
            Collectors,
            1_000_290,
            Some(&["late"]),
            "the reaper judged a late answer: a live lease deleted",
        ),
        (
            Daemons,
            1_000_833,
            Some(&["gc-pauses"]),
            "a collector paused after a lease read: a live lease reaped",
        ),
        (
            Daemons,
            1_000_107,
            Some(&["stale"]),
            "a stale read (no lease yet) judged Missing: collected while valid",
        ),
        (
            Daemons,
            1_000_310,
            Some(&["stale"]),
            "acquire counted from its retry: a lease valid to its owner reaped",
        ),
        (
            Daemons,
            1_000_106,
            Some(&[]),
            "a retried create whose read-back failed deleted its own marker",
        ),
        (
            Daemons,
            1_000_020,
            Some(&["creates"]),
            "an ambiguous create, retried: a protecting index.json without marker",
        ),
        (
            Daemons,
            1_000_006,
            Some(&["restores"]),
            "a restored marker beside an available checkpoint: collected",
        ),
        (
            Daemons,
            1_000_002,
            Some(&[]),
            "a paused owner's late put_data under a collected checkpoint, never swept",
        ),
        (
            Daemons,
            1_000_002,
            Some(&["steps"]),
            "a store-clock step: collected while valid",
        ),
        (
            Collectors,
            1_000_024,
            Some(&["steps"]),
            "a store-clock step: collected while valid, a live lease reaped",
        ),
        (
            OneShot,
            17,
            None,
            "an operator's slow removal: its entry forgotten by a pass before its mark, then \
             stopped part way: left deleting for ever",
        ),
        (
            OneShot,
            63,
            None,
            "a store without If-Match kept no step candidate: every one-shot pass after a real \
             step refused, zombies left",
        ),
        (
            Daemons,
            62,
            None,
            "a real step hidden inside the confirmation of a wrong reading's candidate, floored \
             at the candidate: collected while valid",
        ),
        (
            SingleCollector,
            1,
            None,
            "an operator's removal whose listing missed a data object: the object left under \
             the tombstone",
        ),
        (
            OneShot,
            1_002_741,
            None,
            "a removal's entry forgotten on a stale read while its remover's own check read it \
             stale too: left deleting (the late sweep now finishes a removal)",
        ),
        (
            Daemons,
            1_001_169,
            None,
            "a removal's entry, written again just now, judged by a listing's older stamp and \
             forgotten; its mark landed after: left deleting",
        ),
        (
            Daemons,
            50,
            None,
            "an operator's removal whose listing missed a data object: the object left under \
             the tombstone",
        ),
    ];
    let mut still = Vec::new();
    for (kind, seed, only, what) in cases {
        let o = run_with(seed, kind, only);
        if !o.violations.is_empty() {
            still.push(format!(
                "seed {seed} ({kind:?}, faults {only:?}; {what}): {:?}\n  reproduce: SIM_SEED={seed} \
                 SIM_KIND={} SIM_FAULTS={} cargo test --release -p banklease-gc-daemon --test simulation \
                 -- --nocapture safety",
                o.violations,
                kind_name(&kind),
                only.map_or("".to_owned(), |o| if o.is_empty() { "none".to_owned() } else { o.join(",") }),
            ));
        }
    }
    assert!(still.is_empty(), "still happening:\n{}", still.join("\n"));
}
