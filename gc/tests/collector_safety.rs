//! Collector-side safety: GC passes on a store whose clock the test drives
//! (`SimStore` on a `MockClock`), with answers delivered late, store-clock steps, Swift-style
//! backstop deletions, stray markers, unreadable metadata and late data; and later findings
//! (listings that fail partway).
//!
//! Each test here failed on the code before the fix it guards; the comment on each says what
//! went wrong there.

use banklease_testkit::cid;
use banklease_testkit::gate;

use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Status};
use banklease::clock::{Clock, MockClock, SharedClock};
use banklease::paths::Key;
use banklease::Checkpoint;
use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions, PassReport};
use banklease_testkit::failing::{FailingStore, Op, Strike};
use banklease_testkit::made;
use banklease_testkit::sim_store::{SimStore, StoreClock};
use gate::GateStore;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

const MARGIN: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(2);
const EXPIRE: Duration = Duration::from_secs(10);

fn windows() -> LeaseWindows {
    LeaseWindows::new(Duration::from_secs(2), EXPIRE, Duration::from_secs(1)).unwrap()
}

fn options(grace: Duration) -> GcOptions {
    GcOptions::builder()
        .grace(grace)
        .skew_margin(MARGIN)
        .build()
}

/// The store host's wall clock: follows the world's mock clock, and can be stepped back (an NTP
/// step, `date -s`), which `StoreClock::jump_forward` cannot do.
#[derive(Debug, Clone)]
struct Wall {
    world: MockClock,
    back: Arc<std::sync::Mutex<Duration>>,
}

impl Clock for Wall {
    fn now(&self) -> std::time::Instant {
        self.world.now()
    }
    fn system_now(&self) -> std::time::SystemTime {
        self.world.system_now() - *self.back.lock().unwrap()
    }
    fn sleep(&self, duration: Duration) -> banklease::clock::Sleep {
        self.world.sleep(duration)
    }
}

impl Wall {
    fn step_back(&self, by: Duration) {
        *self.back.lock().unwrap() += by;
    }
}

struct World {
    clock: MockClock,
    wall: Wall,
    shared: SharedClock,
    sim: SimStore,
    owner_bank: Bank,
    gate: GateStore<SimStore>,
    /// Faults on the GC's requests only (behind the gate).
    faults: FailingStore<GateStore<SimStore>>,
    gc_bank: Bank,
}

fn world() -> World {
    let clock = MockClock::new();
    let wall = Wall {
        world: clock.clone(),
        back: Arc::default(),
    };
    let sim = SimStore::new(StoreClock::new(wall.clone()));
    let gate = GateStore::new(sim.clone());
    let faults = FailingStore::new(gate.clone());
    World {
        wall,
        shared: Arc::new(clock.clone()),
        owner_bank: made(Bank::from_store(Arc::new(sim.clone()), "", "sim")),
        gc_bank: Bank::from_store(Arc::new(faults.clone()), "", "sim"),
        clock,
        sim,
        gate,
        faults,
    }
}

impl World {
    fn collector(&self, grace: Duration) -> Collector {
        Collector::new(self.gc_bank.clone(), self.shared.clone(), options(grace))
    }

    async fn owner(&self, name: &str) -> OwnerLease {
        OwnerLease::acquire(
            &self.owner_bank,
            OwnerId::parse(name).unwrap(),
            windows(),
            self.shared.clone(),
        )
        .await
        .unwrap()
    }

    async fn exists(&self, path: &Path) -> bool {
        match self.sim.head(path).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => panic!("{e}"),
        }
    }

    /// Advance in 1 s steps, renewing `lease` at each (a live owner).
    async fn live_for(&self, lease: &OwnerLease, total: Duration) {
        let mut left = total;
        while !left.is_zero() {
            let step = left.min(Duration::from_secs(1));
            self.clock.advance(step);
            left -= step;
            lease.renew().await.unwrap();
        }
    }
}

async fn pass(c: &Collector) -> PassReport {
    c.run_pass().await.unwrap()
}

/// A pass: the lease read was served at t=8 s and answered at t=15 s; the owner
/// renewed at t=9 s. Judged at the arrival instant its old stamp looked expired past grace and
/// its checkpoint was collected (the owner later Fenced).
#[tokio::test]
async fn a_late_lease_answer_never_collects_a_live_owner() {
    let w = world();
    let lease = w.owner("owner-a").await;
    let cp = Checkpoint::create(&lease, &cid("cp-a")).await.unwrap();
    let gc = w.collector(GRACE);
    w.clock.advance(Duration::from_secs(8));

    let held = w.gate.hold_next_read("leases/owner-a");
    let running = tokio::spawn(async move { gc.run_pass().await });
    held.served.await.unwrap();
    w.clock.advance(Duration::from_secs(1));
    lease.renew().await.unwrap();
    w.clock.advance(Duration::from_secs(6));
    assert!(lease.check_validity());
    held.release.send(()).unwrap();

    let report = running.await.unwrap().unwrap();
    assert_eq!(report.collected, 0, "{report:?}");
    cp.complete(Status::Available)
        .await
        .expect("the live owner completes its checkpoint");
}

/// The reaper: an owner with no protecting checkpoint is judged for reaping; a late
/// answer made its renewed lease look dead and the reaper deleted it.
#[tokio::test]
async fn a_late_lease_answer_never_reaps_a_live_owner() {
    let w = world();
    let lease = w.owner("owner-b").await;
    let gc = w.collector(GRACE);
    w.clock.advance(Duration::from_secs(8));

    let held = w.gate.hold_next_read("leases/owner-b");
    let running = tokio::spawn(async move { gc.run_pass().await });
    held.served.await.unwrap();
    w.clock.advance(Duration::from_secs(1));
    lease.renew().await.unwrap();
    w.clock.advance(Duration::from_secs(6));
    held.release.send(()).unwrap();

    let report = running.await.unwrap().unwrap();
    assert_eq!(report.leases_reaped, 0, "{report:?}");
    lease
        .renew()
        .await
        .expect("the live owner's lease is intact");
}

/// On Swift the lease object is removed by the server `expire + 60 s` after the last
/// renewal, so with a 10-minute grace an old checkpoint was collected ~60 s after expiry. A missing
/// lease must be timed from when a pass first saw it missing.
#[tokio::test]
async fn a_missing_lease_waits_grace_from_first_seen_missing() {
    let w = world();
    let grace = Duration::from_secs(600);
    let lease = w.owner("owner-c").await;
    let _cp = Checkpoint::create(&lease, &cid("cp-c")).await.unwrap();
    // A long-lived owner: its checkpoint is 20 minutes old when it dies.
    w.live_for(&lease, Duration::from_secs(1200)).await;
    drop(lease);
    // Swift's backstop: the object disappears expire + 60 s after the last renewal.
    w.clock.advance(EXPIRE + Duration::from_secs(60));
    w.sim.delete(&Path::from("leases/owner-c")).await.unwrap();
    let gc = w.collector(grace);
    let first = pass(&gc).await;
    assert_eq!(first.collected, 0, "first seen missing: {first:?}");
    w.clock.advance(grace / 2);
    let second = pass(&gc).await;
    assert_eq!(second.collected, 0, "grace not over: {second:?}");
    // Bounded: a few passes once the grace is over.
    w.clock.advance(grace / 2 + MARGIN + Duration::from_secs(1));
    let third = pass(&gc).await;
    assert_eq!(third.collected, 1, "grace over: {third:?}");
    // Nothing left of the owner: its missing-since record is gone too.
    assert!(!w.exists(&Path::from("gc/missing/owner-c")).await);
}

/// Under `gc/missing/` a pass removes only the empty records it wrote: a file with something
/// in it at a name that parses as an owner id is not the GC's, and stays.
#[tokio::test]
async fn a_missing_since_record_the_gc_did_not_write_is_never_removed() {
    use object_store::ObjectStoreExt as _;
    let w = world();
    let foreign = Path::from("gc/missing/old-entry");
    w.sim
        .put(&foreign, object_store::PutPayload::from_static(b"keep me"))
        .await
        .unwrap();
    let gc = w.collector(Duration::from_secs(600));
    pass(&gc).await;
    pass(&gc).await;
    assert!(
        w.exists(&foreign).await,
        "a file the GC did not write was removed"
    );
}

/// A marker beside an `available` index.json with no decision (pruned decisions, a
/// restored bank) was collected. Only a protecting checkpoint may be collected; the stray marker
/// is repaired (removed) and the checkpoint's data stays.
#[tokio::test]
async fn a_stray_marker_beside_an_available_checkpoint_is_repaired_not_collected() {
    let w = world();
    let lease = w.owner("owner-d").await;
    let cp = Checkpoint::create(&lease, &cid("cp-d")).await.unwrap();
    cp.put_data("vol", PutPayload::from_static(b"bytes"))
        .await
        .unwrap();
    cp.complete(Status::Available).await.unwrap();
    let marker = Key::marker(lease.owner_id(), &cid("cp-d")).path(&w.owner_bank);
    let decision = Key::Decision(cid("cp-d")).path(&w.owner_bank);
    let data = Path::from("checkpoints/cp-d/data/vol");
    w.sim.put(&marker, PutPayload::default()).await.unwrap();
    w.sim.delete(&decision).await.unwrap();
    drop(lease);
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));

    let report = pass(&w.collector(GRACE)).await;
    assert_eq!(report.collected, 0, "{report:?}");
    assert!(
        w.exists(&data).await,
        "an available checkpoint's data stays"
    );
    let record = checkpoint::read_checkpoint(&w.owner_bank, &cid("cp-d"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Available);
    assert!(!w.exists(&marker).await, "the stray marker is removed");
}

/// An owner's decision whose index.json is unreadable (here: a newer format) was
/// finished by overwriting index.json. Never overwrite what you cannot read.
#[tokio::test]
async fn an_unreadable_index_json_is_never_overwritten() {
    let w = world();
    let lease = w.owner("owner-e").await;
    let _cp = Checkpoint::create(&lease, &cid("cp-e")).await.unwrap();
    let decision = checkpoint::Decision {
        format: checkpoint::CHECKPOINT_FORMAT,
        rebuilt: None,
        checkpoint_id: cid("cp-e"),
        owner_id: lease.owner_id().clone(),
        by: checkpoint::Decider::Owner,
        outcome: Status::Available,
        token: "t".to_owned(),
        decided_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        evidence: None,
    };
    banklease::collector::decide(&w.owner_bank, decision)
        .await
        .unwrap();
    let index = Key::Index(cid("cp-e")).path(&w.owner_bank);
    let future = br#"{"format":99,"id":"cp-e","something":"new"}"#;
    w.sim
        .put(&index, PutPayload::from_static(future))
        .await
        .unwrap();
    drop(lease);
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));

    let report = pass(&w.collector(GRACE)).await;
    assert_eq!(report.repaired, 0, "{report:?}");
    assert_eq!(
        w.sim.peek(&index).unwrap().as_ref(),
        future,
        "index.json must be left as it was"
    );
    // The function the owner's `complete` and the GC's repair share refuses too.
    let decision = checkpoint::read_decision(&w.owner_bank, &cid("cp-e"))
        .await
        .unwrap()
        .unwrap();
    let finished = banklease::collector::finish_owner_decision(&w.owner_bank, &decision).await;
    assert!(finished.is_err(), "{finished:?}");
    assert_eq!(w.sim.peek(&index).unwrap().as_ref(), future);
}

/// A `put_data` sent before the owner's `valid_until` landed after the GC deleted the
/// data prefix; nothing listed that prefix again. A later sweep finds and deletes it.
#[tokio::test]
async fn late_data_under_a_collected_checkpoint_is_swept() {
    let w = world();
    let lease = w.owner("owner-f").await;
    let cp = Checkpoint::create(&lease, &cid("cp-f")).await.unwrap();
    cp.put_data("early", PutPayload::from_static(b"x"))
        .await
        .unwrap();
    drop(lease);
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
    let gc = w.collector(GRACE);
    let report = pass(&gc).await;
    assert_eq!(report.collected, 1, "{report:?}");
    // The paused owner's request lands now.
    let late = Path::from("checkpoints/cp-f/data/late");
    w.sim
        .put(&late, PutPayload::from_static(b"late"))
        .await
        .unwrap();
    // Passes at the default interval until the sweep is due (bounded).
    let mut swept = 0;
    for _ in 0..20 {
        w.clock.advance(Duration::from_secs(60));
        swept += pass(&gc).await.late_data_swept;
        if !w.exists(&late).await {
            break;
        }
    }
    assert!(!w.exists(&late).await, "late data must be swept");
    assert_eq!(swept, 1);
}

/// The store clock steps forward by an hour between two passes, before a live owner
/// renewed: its last stamp looks an hour old. The step is detected and nothing is collected.
#[tokio::test]
async fn a_store_clock_step_between_passes_collects_nothing() {
    let w = world();
    let lease = w.owner("owner-g").await;
    let cp = Checkpoint::create(&lease, &cid("cp-g")).await.unwrap();
    let gc = w.collector(GRACE);
    let first = pass(&gc).await;
    assert_eq!(first.collected, 0);
    w.live_for(&lease, Duration::from_secs(5)).await;
    w.sim.clock().jump_forward(Duration::from_secs(3600));
    assert!(lease.check_validity());
    let second = gc.run_pass().await;
    assert!(
        second.as_ref().map_or(true, |r| r.collected == 0),
        "{second:?}"
    );
    assert!(lease.check_validity());
    cp.complete(Status::Available)
        .await
        .expect("the live owner completes its checkpoint");
}

// ---- found by the review of the first fixes -------------------------------------------------

/// The store clock steps back an hour after the pass's first reading: the owner's renewal is
/// stamped an hour "earlier" and looks expired against that reading. The second reading, taken
/// before anything is deleted, sees the step and the pass deletes nothing.
#[tokio::test]
async fn a_backward_step_during_a_pass_collects_nothing() {
    let w = world();
    let lease = w.owner("owner-h").await;
    let cp = Checkpoint::create(&lease, &cid("cp-h")).await.unwrap();
    let gc = w.collector(GRACE);
    assert_eq!(pass(&gc).await.collected, 0);
    w.live_for(&lease, Duration::from_secs(3)).await;

    // Hold the answer to the pass's first clock reading (a HEAD of `_banklease/clock`).
    let held = w.gate.hold_next_read("_banklease/clock");
    let running = tokio::spawn({
        let gc = gc.clone();
        async move { gc.run_pass().await }
    });
    held.served.await.unwrap();
    w.wall.step_back(Duration::from_secs(3600));
    lease.renew().await.unwrap();
    held.release.send(()).unwrap();
    let report = running.await.unwrap();
    assert!(
        report
            .as_ref()
            .map_or(true, |r| r.collected == 0 && r.leases_reaped == 0),
        "{report:?}"
    );
    assert!(lease.check_validity());
    cp.complete(Status::Available)
        .await
        .expect("the live owner completes its checkpoint");
}

/// A step seen by one collector is remembered in the bank: a fresh collector (a restart, a
/// standby taking over, `banklease gc`) judges stamps older than the step from the step.
#[tokio::test]
async fn a_step_seen_once_is_remembered_by_the_next_collector() {
    let w = world();
    let lease = w.owner("owner-i").await;
    let cp = Checkpoint::create(&lease, &cid("cp-i")).await.unwrap();
    let first = w.collector(GRACE);
    assert_eq!(pass(&first).await.collected, 0);
    w.live_for(&lease, Duration::from_secs(2)).await;
    w.sim.clock().jump_forward(Duration::from_secs(3600));
    assert!(first.run_pass().await.is_err(), "the step is seen");
    // A new process, before the owner renewed again.
    let fresh = w.collector(GRACE);
    let report = fresh.run_pass().await;
    assert!(
        report.as_ref().map_or(true, |r| r.collected == 0),
        "{report:?}"
    );
    cp.complete(Status::Available).await.unwrap();
}

/// A false 404 on a live owner's lease (a lagging replica) writes a missing-since record. If the
/// record outlived the episode, the owner's real death years later would find it old and skip
/// the grace. Seen alive, the record is forgotten.
#[tokio::test]
async fn a_missing_since_record_does_not_outlive_its_episode() {
    let w = world();
    let grace = Duration::from_secs(600);
    let lease = w.owner("owner-j").await;
    let _cp = Checkpoint::create(&lease, &cid("cp-j")).await.unwrap();
    let gc = w.collector(grace);
    let false_404 = w.gate.not_found_next("leases/owner-j");
    false_404.release.send(()).unwrap();
    let r = pass(&gc).await;
    assert_eq!((r.collected, r.in_grace), (0, 1), "{r:?}");
    // The owner lives on for longer than the grace, judged alive by each pass.
    for _ in 0..12 {
        w.live_for(&lease, Duration::from_secs(60)).await;
        assert_eq!(pass(&gc).await.alive, 1);
    }
    // It dies; Swift's backstop removes its lease.
    drop(lease);
    w.clock.advance(EXPIRE + Duration::from_secs(60));
    w.sim.delete(&Path::from("leases/owner-j")).await.unwrap();
    let r = pass(&gc).await;
    assert_eq!(
        r.collected, 0,
        "grace starts now, not at the false 404: {r:?}"
    );
}

/// A GC decision beside an `available` index.json (a restored bank, a lost race on a store
/// without atomic create-if-absent): the checkpoint is not protecting, so nothing is deleted.
#[tokio::test]
async fn a_gc_decision_over_an_available_checkpoint_deletes_nothing() {
    let w = world();
    let lease = w.owner("owner-k").await;
    let cp = Checkpoint::create(&lease, &cid("cp-k")).await.unwrap();
    cp.put_data("vol", PutPayload::from_static(b"bytes"))
        .await
        .unwrap();
    cp.complete(Status::Available).await.unwrap();
    let decision_path = Key::Decision(cid("cp-k")).path(&w.owner_bank);
    w.sim.delete(&decision_path).await.unwrap();
    let gc_decision = checkpoint::Decision {
        format: checkpoint::CHECKPOINT_FORMAT,
        rebuilt: None,
        checkpoint_id: cid("cp-k"),
        owner_id: lease.owner_id().clone(),
        by: checkpoint::Decider::Gc,
        outcome: Status::Deleted,
        token: "t".to_owned(),
        decided_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        evidence: None,
    };
    banklease::collector::decide(&w.owner_bank, gc_decision)
        .await
        .unwrap();
    let marker = Key::marker(lease.owner_id(), &cid("cp-k")).path(&w.owner_bank);
    w.sim.put(&marker, PutPayload::default()).await.unwrap();
    drop(lease);
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
    let r = pass(&w.collector(GRACE)).await;
    assert_eq!(r.collected, 0, "{r:?}");
    assert!(w.exists(&Path::from("checkpoints/cp-k/data/vol")).await);
    let record = checkpoint::read_checkpoint(&w.owner_bank, &cid("cp-k"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Available);
}

/// A dead owner's marker for id X has no index.json; while the GC is deciding, a live owner
/// creates X. The GC must not collect the live owner's checkpoint under the dead one's marker.
#[tokio::test]
async fn a_marker_without_metadata_never_collects_a_checkpoint_created_meanwhile() {
    let w = world();
    let dead = w.owner("owner-l").await;
    let marker = Key::marker(dead.owner_id(), &cid("cp-x")).path(&w.owner_bank);
    w.sim.put(&marker, PutPayload::default()).await.unwrap();
    drop(dead);
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
    let live = w.owner("owner-m").await;
    let gc = w.collector(GRACE);
    // Hold the GC's read of X's index.json (served: not there yet).
    let held = w.gate.hold_next_read("checkpoints/cp-x/index.json");
    let running = tokio::spawn(async move { gc.run_pass().await });
    held.served.await.unwrap();
    let cp = Checkpoint::create(&live, &cid("cp-x")).await.unwrap();
    cp.put_data("vol", PutPayload::from_static(b"live"))
        .await
        .unwrap();
    held.release.send(()).unwrap();
    let r = running.await.unwrap().unwrap();
    assert_eq!(r.collected, 0, "{r:?}");
    assert!(w.exists(&Path::from("checkpoints/cp-x/data/vol")).await);
    cp.complete(Status::Available)
        .await
        .expect("the live owner's checkpoint is its own");
}

/// Found by the simulation (seed 1,000,036, daemons, steps): the store clock stepped forward
/// before a standby took over; with no earlier reading it could not see the step, judged a live
/// owner dead and reaped its lease. A daemon takes its first reading as a floor.
#[tokio::test]
async fn a_step_before_a_daemons_first_reading_collects_nothing() {
    let w = world();
    let lease = w.owner("owner-n").await;
    let cp = Checkpoint::create(&lease, &cid("cp-n")).await.unwrap();
    w.live_for(&lease, Duration::from_secs(2)).await;
    w.sim.clock().jump_forward(Duration::from_secs(3600));
    // A daemon that just started (or took over): its first pass has nothing to compare with.
    let daemon = Collector::new(
        w.gc_bank.clone(),
        w.shared.clone(),
        options(GRACE)
            .to_builder()
            .floor_at_first_reading(true)
            .build(),
    );
    let r = pass(&daemon).await;
    assert_eq!((r.collected, r.leases_reaped), (0, 0), "{r:?}");
    lease
        .renew()
        .await
        .expect("the live owner's lease is intact");
    cp.complete(Status::Available).await.unwrap();
}

/// The listing of the protecting index fails after its first entry (owner-o's marker): the pass
/// judged what it had seen, and the reaper took every owner it had not seen for one with no
/// checkpoint left, deleting owner-p's lease while owner-p's protecting checkpoint was still
/// there. An owner a failed listing did not show is unknown, not empty: nothing is reaped, and
/// the report says why.
#[tokio::test]
async fn a_pass_that_could_not_list_the_protecting_index_reaps_nothing() {
    let w = world();
    for name in ["owner-o", "owner-p"] {
        let lease = w.owner(name).await;
        let id = format!("cp-{}", &name[6..]);
        Checkpoint::create(&lease, &cid(&id)).await.unwrap();
    }
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
    let gc = w.collector(GRACE);
    // The pass's first listing is the protecting index's.
    w.faults.fail_next(Op::List, Strike::After, 1);
    let r = pass(&gc).await;
    assert_eq!((r.scanned, r.leases_reaped), (1, 0), "{r:?}");
    assert!(
        w.exists(&Path::from("leases/owner-p")).await,
        "an owner the listing did not show keeps its lease: {r:?}"
    );
    assert!(!w.exists(&Path::from("gc/reaped/owner-p")).await);
    assert!(w.exists(&Path::from("index/protecting/owner-p/cp-p")).await);
    let named: Vec<_> = r
        .problems
        .iter()
        .filter(|p| p.object.contains("index/protecting"))
        .collect();
    assert_eq!(named.len(), 1, "{:?}", r.problems);
    assert!(
        named[0].error.contains("no lease is reaped this pass"),
        "{:?}",
        named[0]
    );
    // Listed in full, both owners' checkpoints are gone and then their leases.
    let r = pass(&gc).await;
    assert_eq!((r.collected, r.leases_reaped, r.errors), (1, 2, 0), "{r:?}");
    assert!(!w.exists(&Path::from("leases/owner-p")).await);
}
