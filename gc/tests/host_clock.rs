//! One-shot passes and this host's last store-clock reading (`gc/clock-hosts/<clock>`), on a
//! mock clock with a boot clock: what the record holds, when it is written, and what a pass
//! does with it.

use banklease_testkit::cid;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use banklease::checkpoint::{self, Status};
use banklease::clock::{BootInstant, Clock, MockClock, SharedClock, Sleep};
use banklease::paths::Key;
use banklease::{Bank, Checkpoint, Error, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions};
use banklease_testkit::failing::{FailingStore, Op};
use banklease_testkit::sim_store::{SimStore, StoreClock};
use object_store::ObjectStoreExt;

/// The mock clock, with a boot clock that reads its elapsed time (one host, one boot).
#[derive(Debug, Clone)]
struct Host(MockClock);

/// Another host on the same mock time: its own boot clock, `test-boot-1`.
#[derive(Debug, Clone)]
struct OtherHost(MockClock);

impl Clock for OtherHost {
    fn now(&self) -> Instant {
        self.0.now()
    }
    fn system_now(&self) -> SystemTime {
        self.0.system_now()
    }
    fn sleep(&self, d: Duration) -> Sleep {
        self.0.sleep(d)
    }
    fn boot_instant(&self) -> Option<BootInstant> {
        Some(BootInstant {
            clock: "test-boot-1".to_owned(),
            since_boot: Duration::from_secs(500) + self.0.elapsed(),
        })
    }
}

impl Clock for Host {
    fn now(&self) -> Instant {
        self.0.now()
    }
    fn system_now(&self) -> SystemTime {
        self.0.system_now()
    }
    fn sleep(&self, d: Duration) -> Sleep {
        self.0.sleep(d)
    }
    fn boot_instant(&self) -> Option<BootInstant> {
        Some(BootInstant {
            clock: "test-boot-0".to_owned(),
            since_boot: Duration::from_secs(100) + self.0.elapsed(),
        })
    }
}

struct World {
    mock: MockClock,
    store_clock: StoreClock,
    faults: FailingStore<SimStore>,
    bank: Bank,
}

fn world() -> World {
    let mock = MockClock::new();
    let store_clock = StoreClock::new(mock.clone());
    let sim = SimStore::new(store_clock.clone());
    let faults = FailingStore::new(sim).with_clock(mock.clone());
    let bank = banklease_testkit::made(Bank::from_store(Arc::new(faults.clone()), "bank", "m"));
    World {
        mock,
        store_clock,
        faults,
        bank,
    }
}

fn options() -> GcOptions {
    GcOptions::builder()
        .grace(Duration::from_secs(2))
        .skew_margin(Duration::from_millis(100))
        .brake_ratio(1.0)
        .brake_min(1_000_000)
        .build()
}

/// A pass as `banklease gc` runs one: a new collector, no reading of its own.
async fn one_shot(w: &World) -> banklease::Result<banklease_gc::PassReport> {
    let clock: SharedClock = Arc::new(Host(w.mock.clone()));
    Collector::new(w.bank.clone(), clock, options())
        .run_pass()
        .await
}

async fn record(w: &World) -> Option<serde_json::Value> {
    let path = Key::GcClockHost("test-boot-0".to_owned()).path(&w.bank);
    let got = w.bank.store().get(&path).await.ok()?;
    Some(serde_json::from_slice(&got.bytes().await.unwrap()).unwrap())
}

async fn floor(w: &World) -> Option<serde_json::Value> {
    let path = Key::GcClockFloor.path(&w.bank);
    let got = w.bank.store().get(&path).await.ok()?;
    Some(serde_json::from_slice(&got.bytes().await.unwrap()).unwrap())
}

/// A live owner (its lease renewed by hand on the mock clock) with one protecting checkpoint.
async fn live_owner(w: &World) -> OwnerLease {
    let windows = LeaseWindows::new(
        Duration::from_secs(3),
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
    .unwrap();
    let lease = OwnerLease::acquire(
        &w.bank,
        OwnerId::random(),
        windows,
        Arc::new(w.mock.clone()),
    )
    .await
    .unwrap();
    Checkpoint::create(&lease, &cid("cp-live")).await.unwrap();
    lease
}

async fn status(w: &World) -> Option<Status> {
    checkpoint::read_checkpoint(&w.bank, &cid("cp-live"))
        .await
        .unwrap()
        .map(|r| r.status)
}

/// The record pairs the probe's own send and answer with the boot clock: a probe that took 3 s
/// is recorded as taking 3 s. (Converted with the boot reading taken before the probe, both
/// instants came out as that earlier reading, and the next pass over-estimated the real time
/// since the stamp by the probe's round trip: a step up to that long went unseen.)
#[tokio::test]
async fn the_record_holds_the_probes_own_send_and_answer() {
    let w = world();
    w.faults.set_latency(Op::Put, Duration::from_secs(3));
    one_shot(&w).await.unwrap();
    let r = record(&w)
        .await
        .expect("the first pass of a boot starts the record");
    let sent = r["sent_boot_ns"].as_u64().unwrap();
    let observed = r["observed_boot_ns"].as_u64().unwrap();
    assert!(observed - sent >= 3_000_000_000, "the probe took 3 s: {r}");
}

/// A forward step between two one-shot passes is seen by the second, which collects nothing of
/// the live owner and keeps the step as a candidate; the pass after it confirms the step and
/// judges from its floor.
#[tokio::test]
async fn a_one_shot_pass_sees_a_step_since_the_last_pass_on_its_host() {
    let w = world();
    let lease = live_owner(&w).await;
    assert_eq!(one_shot(&w).await.unwrap().alive, 1);
    w.mock.advance(Duration::from_secs(1));
    lease.renew().await.unwrap();
    w.store_clock.jump_forward(Duration::from_secs(40));
    let err = one_shot(&w).await.expect_err("a step is refused");
    assert!(matches!(err, Error::ClockStep { .. }), "{err}");
    let kept = floor(&w).await.expect("the step is kept in the bank");
    assert!(
        kept["step"].is_string(),
        "as a candidate, not a floor: {kept}"
    );
    assert_eq!(status(&w).await, Some(Status::Protecting));
    // The next one-shot pass is still at or past the step's reading: the step is confirmed, and
    // stamps older than it are judged from it. By its stamp the owner's lease expired; the
    // floor holds it back (it is not said to be alive: that cannot be told).
    w.mock.advance(Duration::from_secs(1));
    let report = one_shot(&w).await.unwrap();
    assert_eq!(
        (report.collected, report.alive, report.held_back),
        (0, 0, 1),
        "{report:?}"
    );
    assert!(lease.check_validity());
}

/// A record that cannot be read is doubt: the pass floors at its reading (kept in the bank),
/// collects nothing older, and replaces the record; without the floor, a step before it would
/// go unseen.
#[tokio::test]
async fn an_unreadable_record_floors_the_pass() {
    let w = world();
    let lease = live_owner(&w).await;
    let path = Key::GcClockHost("test-boot-0".to_owned()).path(&w.bank);
    w.bank.store().put(&path, "{garbage".into()).await.unwrap();
    w.store_clock.jump_forward(Duration::from_secs(40));
    let report = one_shot(&w).await.unwrap();
    assert_eq!((report.collected, report.dead), (0, 0), "{report:?}");
    assert_eq!(status(&w).await, Some(Status::Protecting));
    assert!(floor(&w).await.is_some(), "the floor is kept in the bank");
    assert!(record(&w).await.is_some(), "the record was replaced");
    assert!(lease.check_validity());
}

/// A store error on the record fails the pass: a step only the record would show may have
/// happened, and the pass judges nothing without it.
#[tokio::test]
async fn a_record_that_cannot_be_read_fails_the_pass() {
    let w = world();
    live_owner(&w).await;
    one_shot(&w).await.unwrap();
    w.faults
        .fail_next(Op::Get, banklease_testkit::failing::Strike::Before, 1);
    let err = one_shot(&w).await.expect_err("the pass fails");
    assert!(err.to_string().contains("clock-hosts"), "{err}");
    assert_eq!(status(&w).await, Some(Status::Protecting));
}

/// A daemon's first reading without a reference floors it; that floor is kept in the bank
/// before the reading is recorded, so a pass comparing with the reading later still judges
/// from it.
#[tokio::test]
async fn a_floor_raised_without_a_step_is_kept_before_the_reading_is_recorded() {
    let w = world();
    let clock: SharedClock = Arc::new(Host(w.mock.clone()));
    let daemon_like = options().to_builder().floor_at_first_reading(true).build();
    Collector::new(w.bank.clone(), clock, daemon_like)
        .run_pass()
        .await
        .unwrap();
    assert!(
        floor(&w).await.is_some(),
        "the first-reading floor is in the bank"
    );
    assert!(record(&w).await.is_some());
}

/// An owner that dies at once, with one protecting checkpoint `cp-dead`.
async fn dead_owner(w: &World) {
    let windows = LeaseWindows::new(
        Duration::from_secs(3),
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
    .unwrap();
    let lease = OwnerLease::acquire(
        &w.bank,
        OwnerId::random(),
        windows,
        Arc::new(w.mock.clone()),
    )
    .await
    .unwrap();
    Checkpoint::create(&lease, &cid("cp-dead")).await.unwrap();
}

async fn dead_status(w: &World) -> Option<Status> {
    checkpoint::read_checkpoint(&w.bank, &cid("cp-dead"))
        .await
        .unwrap()
        .map(|r| r.status)
}

/// The store's clock read an hour (then a year) ahead for one pass and was then put right.
/// That pass refused, as it must; but its reading was no floor: the next pass, on the good
/// clock, collects the dead owner's zombie at once, and says why nothing holds it back.
#[tokio::test]
async fn a_clock_ahead_for_one_pass_never_stalls_collection() {
    for ahead in [
        Duration::from_secs(3600),
        Duration::from_secs(365 * 24 * 3600),
    ] {
        let w = world();
        one_shot(&w).await.unwrap();
        dead_owner(&w).await;
        w.mock.advance(Duration::from_secs(1));
        w.store_clock.jump_forward(ahead);
        let err = one_shot(&w).await.expect_err("the reading ahead is a step");
        assert!(matches!(err, Error::ClockStep { .. }), "{err}");
        assert_eq!(dead_status(&w).await, Some(Status::Protecting));
        let kept = floor(&w).await;
        assert!(
            kept.as_ref().is_none_or(|f| f["spent"] == true),
            "a step's reading was kept as a floor: {kept:?}"
        );

        w.store_clock.step_back(ahead);
        w.mock.advance(Duration::from_secs(20));
        let report = one_shot(&w).await.unwrap();
        assert_eq!(
            (report.collected, report.alive),
            (1, 0),
            "{ahead:?}: {report:?}"
        );
        assert!(
            report
                .clock
                .iter()
                .any(|n| n.contains("ahead of the store's clock")),
            "{report:?}"
        );
        assert_eq!(dead_status(&w).await, Some(Status::Deleted));
        // Settled: the next pass says nothing of it.
        w.mock.advance(Duration::from_secs(1));
        assert_eq!(one_shot(&w).await.unwrap().clock, Vec::<String>::new());
    }
}

/// One-shot passes from two hosts, after a step one of them confirmed. The other host's record
/// predates the step: its next pass drops it and floors at its reading, as it must. Before,
/// that floor (raised for doubt, not for a step) also dropped the first host's record, whose
/// pass floored in turn, and so on: each pass held every stamp back to itself, and a dead
/// owner's zombie was never collected while both hosts ran passes (simulation, OneShot seed
/// 1,004,760: the `gc` and `checkpoint resolve` of one operator). A floor only drops a record
/// older than a step some collector confirmed.
#[tokio::test]
async fn one_shot_passes_on_two_hosts_do_not_hold_each_other_back_for_ever() {
    let w = world();
    let a: SharedClock = Arc::new(Host(w.mock.clone()));
    let b: SharedClock = Arc::new(OtherHost(w.mock.clone()));
    let pass = |clock: &SharedClock| Collector::new(w.bank.clone(), clock.clone(), options());
    pass(&a).run_pass().await.unwrap();
    pass(&b).run_pass().await.unwrap();
    dead_owner(&w).await;
    w.mock.advance(Duration::from_secs(1));
    w.store_clock.jump_forward(Duration::from_secs(40));
    let err = pass(&a).run_pass().await.expect_err("a step");
    assert!(matches!(err, Error::ClockStep { .. }), "{err}");
    w.mock.advance(Duration::from_secs(1));
    pass(&a).run_pass().await.expect("the step confirmed");
    // The lease's stamp is judged as written at the step: 10 s expiry, 2 s grace, and margins.
    let mut rounds = 0;
    while dead_status(&w).await == Some(Status::Protecting) {
        rounds += 1;
        assert!(
            rounds <= 30,
            "the dead owner's zombie is still there 60 s after the step: {:?}",
            floor(&w).await
        );
        for host in [&b, &a] {
            w.mock.advance(Duration::from_secs(1));
            pass(host).run_pass().await.unwrap();
        }
    }
    assert!(rounds <= 8, "collected only after {rounds} rounds of 2 s");
}

/// The store's clock stepped back, one host's pass saw it (its reading behind its reference:
/// it floors), an owner renewed in the meantime, and the clock was put right. The other host's
/// record predates the step back: compared with it, the correction nets out to nothing, and
/// the live owner's renewal, stamped 30 s low, looked expired. A floor raised on evidence of a
/// step (a reading behind its reference, or one a step could hide in) drops older records as
/// a confirmed step's does; only one raised for want of a reference does not. (The review of
/// the change that kept records behind doubt floors found it.)
#[tokio::test]
async fn a_step_back_one_host_saw_drops_the_other_hosts_older_record() {
    let w = world();
    let a: SharedClock = Arc::new(Host(w.mock.clone()));
    let b: SharedClock = Arc::new(OtherHost(w.mock.clone()));
    let pass = |clock: &SharedClock| Collector::new(w.bank.clone(), clock.clone(), options());
    pass(&a).run_pass().await.unwrap();
    pass(&b).run_pass().await.unwrap();
    let lease = live_owner(&w).await;
    w.mock.advance(Duration::from_secs(1));
    w.store_clock.step_back(Duration::from_secs(30));
    lease.renew().await.unwrap();
    w.mock.advance(Duration::from_millis(500));
    let seen = pass(&b).run_pass().await;
    assert!(seen.is_ok(), "{seen:?}");
    w.mock.advance(Duration::from_secs(1));
    w.store_clock.jump_forward(Duration::from_secs(30));
    w.mock.advance(Duration::from_millis(500));
    let _ = pass(&a).run_pass().await;
    assert_eq!(
        status(&w).await,
        Some(Status::Protecting),
        "a live owner's checkpoint was collected: {:?}",
        floor(&w).await
    );
    drop(lease);
}

/// A floor an older release kept from a reading that was an hour ahead: the first pass whose
/// reading compares cleanly with this host's last retires it, says so, and collects.
#[tokio::test]
async fn a_kept_floor_ahead_of_the_store_clock_is_retired_within_one_pass() {
    let w = world();
    one_shot(&w).await.unwrap();
    dead_owner(&w).await;
    let ahead = w.store_clock.now() + chrono::TimeDelta::hours(1);
    w.bank
        .store()
        .put(
            &Key::GcClockFloor.path(&w.bank),
            serde_json::to_vec(&serde_json::json!({ "floor": ahead }))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    w.mock.advance(Duration::from_secs(20));
    let report = one_shot(&w).await.unwrap();
    assert_eq!((report.collected, report.alive), (1, 0), "{report:?}");
    assert!(
        report.clock.iter().any(|n| n.contains("gc/clock-floor")),
        "{report:?}"
    );
    assert_eq!(floor(&w).await.unwrap()["spent"], true);
}

/// Every read-back of this host's shared clock-probe key shows another process's version, as
/// when `lease show` loops on the host keep rewriting it between a pass's PUT and its HEAD.
#[derive(Debug)]
struct BusyReaders {
    /// The host's shared probe key, as every reading command writes it.
    readers_key: String,
}

impl banklease_testkit::port::PortHooks for BusyReaders {
    fn name(&self) -> &str {
        "gc"
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
    fn before(
        &self,
        _: &object_store::path::Path,
    ) -> impl std::future::Future<Output = object_store::Result<u32>> + Send {
        std::future::ready(Ok(0))
    }
    fn after(
        &self,
        _: u32,
        _: &object_store::path::Path,
    ) -> impl std::future::Future<Output = ()> + Send {
        std::future::ready(())
    }
    fn serve<R: Send>(
        &self,
        call: impl std::future::Future<Output = R> + Send,
    ) -> impl std::future::Future<Output = R> + Send {
        call
    }
    fn answer_get(
        &self,
        location: &object_store::path::Path,
        answer: &mut object_store::Result<object_store::GetResult>,
    ) {
        if location.as_ref() == self.readers_key {
            if let Ok(got) = answer {
                got.meta.e_tag = Some("\"a reader's version\"".to_owned());
            }
        }
    }
    fn note(&self, _: &str, _: &object_store::path::Path, _: Duration, _: &dyn std::fmt::Display) {}
    fn gone(&self, why: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "test",
            source: why.to_owned().into(),
        }
    }
}

/// Readers on the host (`lease show`, `validity-check`) rewrite the host's shared probe key all
/// the time; a pass reads the clock on a key of its own, so its reading is verified and it
/// never fails for an unverified clock.
#[tokio::test]
async fn busy_readers_on_the_host_never_fail_a_pass() {
    let w = world();
    let readers_key = w.bank.own_clock_probe().as_ref().to_owned();
    let port =
        banklease_testkit::port::Port::new(w.faults.clone(), Arc::new(BusyReaders { readers_key }));
    let bank = banklease_testkit::made(Bank::from_store(Arc::new(port), "bank", "m"));
    let clock: SharedClock = Arc::new(Host(w.mock.clone()));
    for _ in 0..3 {
        Collector::new(bank.clone(), clock.clone(), options())
            .run_pass()
            .await
            .expect("a pass reads the clock on its own key");
        w.mock.advance(Duration::from_secs(1));
    }
}

/// A real step of the store's clock, confirmed by the next reading: a dead owner whose last
/// renewal was stamped before it is held back by the floor. The report says so — not "alive":
/// the owner counts as held back, the oldest zombie's age is its age by its stamp, and the skip
/// reason says until when — and once that passes, the zombie goes.
#[tokio::test]
async fn an_owner_held_back_by_the_floor_is_said_to_be_held_back_not_alive() {
    let w = world();
    one_shot(&w).await.unwrap();
    dead_owner(&w).await;
    w.mock.advance(Duration::from_secs(1));
    w.store_clock.jump_forward(Duration::from_secs(40));
    assert!(matches!(one_shot(&w).await, Err(Error::ClockStep { .. })));
    w.mock.advance(Duration::from_secs(1));
    let report = one_shot(&w).await.unwrap();
    assert_eq!(
        (report.alive, report.held_back, report.collected),
        (0, 1, 0),
        "{report:?}"
    );
    assert!(report.oldest_zombie_age_ms >= 25_000, "{report:?}");
    assert!(report.held_back_until.is_some(), "{report:?}");
    let skipped = &report.checkpoints[0].reason;
    assert!(
        skipped.contains("clock floor") && skipped.contains("held back until"),
        "{skipped}"
    );
    assert_eq!(report.protecting.get("held_back"), Some(&1), "{report:?}");

    // Past the floored lease's expiry and the grace: collected.
    w.mock.advance(Duration::from_secs(15));
    let report = one_shot(&w).await.unwrap();
    assert_eq!((report.collected, report.held_back), (1, 0), "{report:?}");
}

/// A failed checkpoint's retention (`gc.keep_failed_for`) is measured on the store's clock; a
/// step forward of that clock that passes confirmed is not counted in it. Before, a 40 s step
/// retired a checkpoint kept for 60 s after 27 s.
#[tokio::test]
async fn a_confirmed_step_does_not_shorten_a_retention() {
    let w = world();
    let keep = Duration::from_secs(60);
    let pass = || {
        let clock: SharedClock = Arc::new(Host(w.mock.clone()));
        let options = GcOptions::builder()
            .grace(Duration::from_secs(2))
            .skew_margin(Duration::from_millis(100))
            .brake_ratio(1.0)
            .brake_min(1_000_000)
            .keep_failed_for(Some(keep))
            .late_write_window(Duration::from_secs(1))
            .build();
        let bank = w.bank.clone();
        async move { Collector::new(bank, clock, options).run_pass().await }
    };
    pass().await.unwrap();
    let lease = live_owner(&w).await;
    let failed = Checkpoint::create(&lease, &cid("cp-failed")).await.unwrap();
    failed.complete(Status::Error).await.unwrap();

    w.mock.advance(Duration::from_secs(1));
    w.store_clock.jump_forward(Duration::from_secs(40));
    let err = pass().await.expect_err("a step is refused");
    assert!(matches!(err, Error::ClockStep { .. }), "{err}");
    w.mock.advance(Duration::from_secs(1));
    let confirming = pass().await.unwrap();
    assert!(
        confirming
            .clock
            .iter()
            .any(|n| n.contains("keep their retention without the step")),
        "{confirming:?}"
    );

    // 67 s on the store's clock, 27 s of them without the step: kept.
    w.mock.advance(Duration::from_secs(25));
    let kept = pass().await.unwrap();
    assert_eq!((kept.retired, kept.failed_kept), (0, 1), "{kept:?}");
    // Past 60 s without the step: retired.
    w.mock.advance(Duration::from_secs(35));
    let due = pass().await.unwrap();
    assert_eq!((due.retired, due.failed_kept), (1, 0), "{due:?}");
}

/// The first pass of a boot has no earlier reading to compare its own with: a store clock that
/// reads a year ahead then (a `file:` bank's host booted with a wrong RTC) is not told from the
/// truth, and no retention ends on it. Before, that pass retired every failed checkpoint.
#[tokio::test]
async fn a_first_reading_a_year_ahead_ends_no_retention() {
    let w = world();
    let pass = || {
        let clock: SharedClock = Arc::new(Host(w.mock.clone()));
        let options = GcOptions::builder()
            .grace(Duration::from_secs(2))
            .skew_margin(Duration::from_millis(100))
            .brake_ratio(1.0)
            .brake_min(1_000_000)
            .keep_failed_for(Some(Duration::from_secs(60)))
            .late_write_window(Duration::from_secs(1))
            .build();
        let bank = w.bank.clone();
        async move { Collector::new(bank, clock, options).run_pass().await }
    };
    let lease = live_owner(&w).await;
    let failed = Checkpoint::create(&lease, &cid("cp-failed")).await.unwrap();
    failed.complete(Status::Error).await.unwrap();

    let year = Duration::from_secs(365 * 24 * 3600);
    w.store_clock.jump_forward(year);
    let first = pass().await.unwrap();
    assert_eq!((first.retired, first.failed_kept), (0, 1), "{first:?}");
    assert!(
        first
            .clock
            .iter()
            .any(|n| n.contains("no earlier one to be compared with")),
        "{first:?}"
    );
    // Put right: the next pass's reading is behind the last (doubt: nothing retired either),
    // and the one after judges by the good clock, by which the checkpoint is young.
    w.store_clock.step_back(year);
    for _ in 0..2 {
        w.mock.advance(Duration::from_secs(1));
        let report = pass().await.unwrap();
        assert_eq!((report.retired, report.failed_kept), (0, 1), "{report:?}");
    }
}
