//! The collector's and the owner's reads and writes judged at the right instant, on a store whose
//! clock the test drives (`SimStore` on a `MockClock`).
//!
//! A read's answer tells what the store held at some instant between the read's send and its
//! receipt: served at `t`, it may reach a paused or slow reader at `t + D` (`GateStore` holds an
//! answer after the store served it). Judged at its receipt, a lease renewed meanwhile looks `D`
//! older than it is, and a live owner looks dead; so every judgement takes the instant before the
//! read was sent. Likewise a write's answer may be lost after the write landed: the writer reads
//! back before it concludes anything, counts its validity from its first attempt's send, and
//! takes absence read back as doubt, never as proof. Each test sets up one such case, and each
//! failed on the code before the fix it guards (the comment on each says what went wrong there).

use banklease_testkit::cid;
use banklease_testkit::gate;

use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Status};
use banklease::clock::{MockClock, SharedClock};
use banklease::paths::Key;
use banklease::Checkpoint;
use banklease::{Bank, Error, LeaseObserver, LeaseView, LeaseWindows, OwnerId, OwnerLease};
use banklease_testkit::failing::{FailingStore, Op, Strike};
use banklease_testkit::made;
use banklease_testkit::sim_store::{SimStore, StoreClock};
use gate::GateStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

const MARGIN: Duration = Duration::from_secs(1);

fn windows() -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_secs(2),
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
    .unwrap()
}

struct World {
    clock: MockClock,
    shared: SharedClock,
    sim: SimStore,
    /// The owners' view of the store: direct.
    owner_bank: Bank,
    /// The collector's view: through a gate that can deliver an answer late.
    gate: GateStore<SimStore>,
    gc_bank: Bank,
}

fn world() -> World {
    let clock = MockClock::new();
    let sim = SimStore::new(StoreClock::new(clock.clone()));
    let gate = GateStore::new(sim.clone());
    World {
        shared: Arc::new(clock.clone()),
        owner_bank: made(Bank::from_store(Arc::new(sim.clone()), "", "sim")),
        gc_bank: Bank::from_store(Arc::new(gate.clone()), "", "sim"),
        clock,
        sim,
        gate,
    }
}

/// The observer read the lease at t=8 s, the answer arrived at t=13 s; the owner renewed
/// at t=9 s in between. Judged at the arrival instant, the old `last_modified` looked 13 s old
/// (expired); judged at the send instant it is 8 s old (alive).
#[tokio::test]
async fn observer_judges_a_late_answer_at_the_instant_it_was_sent() {
    let w = world();
    let owner = OwnerId::parse("owner-a").unwrap();
    let lease = OwnerLease::acquire(&w.owner_bank, owner.clone(), windows(), w.shared.clone())
        .await
        .unwrap();
    let observer = LeaseObserver::new(w.gc_bank.clone(), w.shared.clone(), MARGIN);
    let store_time = observer.store_time().await.unwrap();
    w.clock.advance(Duration::from_secs(8));

    let held = w.gate.hold_next_read(&format!("leases/{owner}"));
    let view = tokio::spawn({
        let owner = owner.clone();
        async move { observer.view(&owner, &store_time).await }
    });
    held.served.await.unwrap();
    w.clock.advance(Duration::from_secs(1));
    lease.renew().await.unwrap();
    w.clock.advance(Duration::from_secs(4));
    assert!(lease.check_validity(), "the owner is valid until t=19 s");
    held.release.send(()).unwrap();

    let view = view.await.unwrap();
    assert!(
        matches!(view, LeaseView::Alive { .. }),
        "a read sent at t=8 s of a lease written at t=0 s must be judged alive: {view:?}"
    );
}

/// Takeover: a standby judged the holder's lease on a late answer and, on a store without
/// If-Match, deleted the holder's freshly renewed lease and took its place.
#[tokio::test]
async fn take_over_judges_a_late_answer_at_the_instant_it_was_sent() {
    let w = world();
    w.sim.refuse_conditional_update(true);
    // A store that refuses If-Match from now on: a handle that has not probed it yet (the
    // world's owner bank probed at its `init`, when the store still took If-Match).
    let owner_bank = Bank::from_store(Arc::new(w.sim.clone()), "", "sim");
    let path = Path::from("gc/active");
    let holder = OwnerLease::acquire_at(
        &owner_bank,
        path.clone(),
        OwnerId::parse("holder").unwrap(),
        windows(),
        w.shared.clone(),
    )
    .await
    .unwrap();
    w.clock.advance(Duration::from_secs(8));

    // The standby's first read of `gc/active` is its acquire's read-back; the second is the one
    // it judges.
    let held = w.gate.hold_read("gc/active", 1);
    let standby = tokio::spawn({
        let (bank, clock, path) = (w.gc_bank.clone(), w.shared.clone(), path.clone());
        async move {
            OwnerLease::take_over_at(
                &bank,
                path,
                OwnerId::parse("standby").unwrap(),
                windows(),
                clock,
                MARGIN,
            )
            .await
        }
    });
    held.served.await.unwrap();
    w.clock.advance(Duration::from_secs(1));
    holder.renew().await.unwrap();
    w.clock.advance(Duration::from_secs(4));
    held.release.send(()).unwrap();

    let taken = standby.await.unwrap();
    assert!(
        matches!(taken, Err(Error::LeaseExists { .. })),
        "the holder renewed at t=9 s and is alive: {taken:?}"
    );
    holder
        .renew()
        .await
        .expect("the holder's lease is still its own");
}

/// The first acquire attempt landed but was answered with an error after 3 s; the retry
/// read back its own token. The validity must count from the first attempt's send time.
#[tokio::test]
async fn acquire_counts_from_the_first_attempt() {
    let clock = MockClock::new();
    let sim = SimStore::new(StoreClock::new(clock.clone()));
    let failing = FailingStore::new(sim).with_clock(clock.clone());
    let bank = made(Bank::from_store(Arc::new(failing.clone()), "", "sim"));
    // Probe the capabilities before the faults are set.
    bank.capabilities().await.unwrap();
    failing.set_latency(Op::Put, Duration::from_secs(3));
    failing.fail_next(Op::Put, Strike::After, 1);
    // The read-back that would recognise it at once fails too: only the retry can tell.
    failing.fail_next(Op::Get, Strike::Before, 1);
    let owner = OwnerId::parse("o").unwrap();
    // At its path, without the layout check, whose read would take the injected fault.
    let lease = OwnerLease::acquire_at(
        &bank,
        bank.lease_path(&owner),
        owner,
        windows(),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    // Sent at 0, landed at 3 but answered with an error, not read back, retried at 3, refused
    // at 6, read back.
    assert_eq!(clock.elapsed(), Duration::from_secs(6));
    assert_eq!(
        lease.remaining(),
        Duration::from_secs(4),
        "valid_until must be t_send(first attempt) + 10 s, not t_send(retry) + 10 s"
    );
}

/// A held lease whose validity ran out unnoticed is not ours to delete: after a
/// takeover it is the successor's object.
#[tokio::test]
async fn release_after_the_validity_ran_out_deletes_nothing() {
    let w = world();
    let path = Path::from("gc/active");
    let old = OwnerLease::acquire_at(
        &w.owner_bank,
        path.clone(),
        OwnerId::parse("old").unwrap(),
        windows(),
        w.shared.clone(),
    )
    .await
    .unwrap();
    w.clock.advance(Duration::from_secs(12));
    let successor = OwnerLease::take_over_at(
        &w.owner_bank,
        path.clone(),
        OwnerId::parse("new").unwrap(),
        windows(),
        w.shared.clone(),
        MARGIN,
    )
    .await
    .unwrap();
    old.release().await.unwrap();
    let (record, _) = banklease::lease::read_lease_at(&w.owner_bank, &path)
        .await
        .unwrap()
        .expect("the successor's lease must still be there");
    assert_eq!(record.owner_id.as_str(), "new");
    successor.renew().await.unwrap();
}

/// A create whose marker and index.json both landed, but whose index.json answer was an
/// error, then retried: the retry's read-back fails. The marker must stay (else: a protecting
/// checkpoint no pass will ever find), and the owner can adopt its checkpoint.
#[tokio::test]
async fn an_ambiguous_create_keeps_its_marker() {
    let clock = MockClock::new();
    let sim = SimStore::new(StoreClock::new(clock.clone()));
    let failing = FailingStore::new(sim.clone()).with_clock(clock.clone());
    let bank = made(Bank::from_store(Arc::new(failing.clone()), "", "sim"));
    let lease = OwnerLease::acquire(
        &bank,
        OwnerId::parse("o").unwrap(),
        windows(),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    // The first create call: its marker and index.json landed, but index.json's answer was lost.
    let marker = Key::marker(lease.owner_id(), &cid("cp1")).path(&bank);
    let index = Key::Index(cid("cp1")).path(&bank);
    let first = checkpoint::CheckpointRecord {
        format: checkpoint::CHECKPOINT_FORMAT,
        rebuilt: None,
        id: cid("cp1"),
        owner_id: lease.owner_id().clone(),
        status: Status::Protecting,
        created_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        retry_budget_ms: None,
        removal: None,
    };
    sim.put(&marker, object_store::PutPayload::default())
        .await
        .unwrap();
    sim.put(&index, serde_json::to_vec(&first).unwrap().into())
        .await
        .unwrap();
    // The retry: its read-back of index.json fails.
    failing.fail_next(Op::Get, Strike::Before, 1);
    let retry = Checkpoint::create(&lease, &cid("cp1")).await;
    assert!(retry.is_err(), "{retry:?}");
    assert!(
        sim.head(&marker).await.is_ok(),
        "the marker of a protecting index.json must never be deleted on doubt"
    );
    let record = checkpoint::read_checkpoint(&bank, &cid("cp1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Protecting);
    // The owner takes its checkpoint up again and completes it.
    let cp = Checkpoint::adopt(&lease, &cid("cp1")).await.unwrap();
    cp.complete(Status::Available).await.unwrap();
    assert!(
        sim.head(&marker).await.is_err(),
        "completed: marker removed"
    );
}

/// A release is an update: with less than `validity_window` left its DELETE could land after a
/// successor took the key over, so it sends none and lets the object expire.
#[tokio::test]
async fn release_with_less_than_the_validity_window_left_sends_no_delete() {
    let w = world();
    let lease = OwnerLease::acquire(
        &w.owner_bank,
        OwnerId::parse("late").unwrap(),
        windows(),
        w.shared.clone(),
    )
    .await
    .unwrap();
    w.clock.advance(Duration::from_millis(9_500));
    lease.release().await.unwrap();
    assert!(!lease.check_validity());
    assert!(
        banklease::lease::read_lease(&w.owner_bank, lease.owner_id())
            .await
            .unwrap()
            .is_some(),
        "the object is left to expire on the store clock"
    );
}

/// `adopt` over an id proven to be another owner's removes the marker the ambiguous create left,
/// which would otherwise sit on the GC's work list for ever.
#[tokio::test]
async fn adopt_of_another_owners_checkpoint_removes_our_marker() {
    let w = world();
    let lease = OwnerLease::acquire(
        &w.owner_bank,
        OwnerId::parse("me").unwrap(),
        windows(),
        w.shared.clone(),
    )
    .await
    .unwrap();
    let marker = Key::marker(lease.owner_id(), &cid("cp9")).path(&w.owner_bank);
    let theirs = checkpoint::CheckpointRecord {
        format: checkpoint::CHECKPOINT_FORMAT,
        rebuilt: None,
        id: cid("cp9"),
        owner_id: OwnerId::parse("them").unwrap(),
        status: Status::Protecting,
        created_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        retry_budget_ms: None,
        removal: None,
    };
    w.sim
        .put(&marker, object_store::PutPayload::default())
        .await
        .unwrap();
    w.sim
        .put(
            &Key::Index(cid("cp9")).path(&w.owner_bank),
            serde_json::to_vec(&theirs).unwrap().into(),
        )
        .await
        .unwrap();
    let err = Checkpoint::adopt(&lease, &cid("cp9")).await.unwrap_err();
    assert!(matches!(err, Error::CheckpointExists { .. }), "{err}");
    assert!(
        w.sim.head(&marker).await.is_err(),
        "our stray marker is gone"
    );
}

/// Found by the simulation (seed 1,000,198, stale reads): `adopt` read no index.json from a
/// lagging replica right after its create landed, and deleted its marker — a protecting
/// checkpoint no pass would ever find. Absence read back is doubt, not proof.
#[tokio::test]
async fn adopt_keeps_the_marker_when_index_json_reads_as_missing() {
    let w = world();
    let lease = OwnerLease::acquire(
        &w.gc_bank,
        OwnerId::parse("me").unwrap(),
        windows(),
        w.shared.clone(),
    )
    .await
    .unwrap();
    let marker = Key::marker(lease.owner_id(), &cid("cpa")).path(&w.gc_bank);
    let ours = checkpoint::CheckpointRecord {
        format: checkpoint::CHECKPOINT_FORMAT,
        rebuilt: None,
        id: cid("cpa"),
        owner_id: lease.owner_id().clone(),
        status: Status::Protecting,
        created_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        retry_budget_ms: None,
        removal: None,
    };
    w.sim
        .put(&marker, object_store::PutPayload::default())
        .await
        .unwrap();
    w.sim
        .put(
            &Key::Index(cid("cpa")).path(&w.gc_bank),
            serde_json::to_vec(&ours).unwrap().into(),
        )
        .await
        .unwrap();
    let lagging = w.gate.not_found_next("checkpoints/cpa/index.json");
    lagging.release.send(()).unwrap();
    let err = Checkpoint::adopt(&lease, &cid("cpa")).await.unwrap_err();
    assert!(matches!(err, Error::CheckpointAmbiguous { .. }), "{err}");
    assert!(w.sim.head(&marker).await.is_ok(), "the marker stays");
    // Once the index.json reads back, the owner adopts it.
    Checkpoint::adopt(&lease, &cid("cpa")).await.unwrap();
}

/// Found by the simulation (seed 1,000,704, stale reads): the store-clock probe's HEAD answered
/// with an older version than its PUT wrote, and the GC's step detection saw steps that never
/// happened. The probe tries again; a reading of another version is flagged unverified (still a
/// lower bound for judging, never compared for steps).
#[tokio::test]
async fn the_store_clock_probe_never_returns_a_stale_version() {
    let w = world();
    w.clock.advance(Duration::from_secs(60));
    let before = w.sim.clock().now();
    // Every read from a replica up to 30 s behind.
    w.sim.set_stale_reads(Duration::from_secs(30), 1.0, 7);
    w.clock.advance(Duration::from_secs(30));
    for _ in 0..20 {
        w.clock.advance(Duration::from_secs(1));
        let put_at = w.sim.clock().now();
        // A stale replica may also answer that the probe does not exist yet: an error.
        if let Ok(t) = w.owner_bank.store_time(&w.shared).await {
            assert!(
                !t.verified || t.at >= put_at,
                "a stale stamp passed as verified: {} < {put_at}",
                t.at
            );
        }
    }
    assert!(before < w.sim.clock().now());
}

/// A replica that lags every immediate read-back (the simulation's seed 1,000,820, kind daemons:
/// 49 % of reads stale by up to 316 ms): the collector's store-clock reading must wait the lag
/// out and read back once more, not stay unverified (which made every pass judge nothing for as
/// long as the lag lasted, leaving zombies). Real time: the wait is the store's lag.
#[tokio::test]
async fn a_lagging_replica_is_waited_out_before_the_clock_reading_is_judged() {
    #![allow(clippy::disallowed_methods)] // the store's lag passes on real time here
    let lag = Duration::from_millis(150);
    let sim = SimStore::new(StoreClock::new(banklease::clock::SystemClock));
    let bank = Bank::from_store(Arc::new(sim.clone()), "b", "sim://lagging");
    banklease::layout::init(&bank).await.unwrap();
    let clock: SharedClock = Arc::new(banklease::clock::SystemClock);
    bank.store_time(&clock).await.unwrap(); // the probe exists before the lag starts
    sim.set_stale_reads(lag, 1.0, 7);

    // Not knowing the lag, every attempt reads back an older version.
    let blind = bank.store_time(&clock).await.unwrap();
    assert!(!blind.verified, "{blind:?}");

    let observer =
        LeaseObserver::new(bank.clone(), Arc::clone(&clock), MARGIN).with_read_staleness(lag);
    let reading = observer.store_time().await.unwrap();
    assert!(reading.verified, "{reading:?}");
    // Wider, never wrong: the answer came at least the lag after the write was sent.
    assert!(reading.observed.duration_since(reading.sent) >= lag);
}

/// Every process on one host shares one store-clock probe, writers (a collector, an owner, a
/// lock holder) and read commands (`Bank::reading_only`) alike, rewritten in place: a hundred
/// of them leave one object, not a hundred. A prober whose read-back shows another's write in
/// its place never takes that stamp as its own (its ETag differs): it writes again.
#[tokio::test]
async fn every_process_on_one_host_shares_one_probe_and_never_takes_anothers_write_for_its_own() {
    let w = world();
    // A collector's handle, and a read command: another process on this host.
    let reader_a = w.gc_bank.clone();
    let reader_b = Bank::from_store(Arc::new(w.sim.clone()), "", "sim").reading_only();
    let probe = reader_a.own_clock_probe();
    assert_eq!(probe, reader_b.own_clock_probe());
    assert!(
        probe.as_ref().starts_with("_banklease/clock/host-"),
        "{probe}"
    );

    // A's write lands, and B writes over it before A reads it back.
    let held = w.gate.hold_next_write(probe.as_ref());
    let shared = w.shared.clone();
    let a = tokio::spawn(async move { reader_a.store_time(&shared).await });
    held.served.await.unwrap();
    w.clock.advance(Duration::from_secs(2));
    let b = reader_b.store_time(&w.shared).await.unwrap();
    assert!(b.verified, "{b:?}");
    held.release.send(()).unwrap();
    let a = a.await.unwrap().unwrap();
    assert!(a.verified, "{a:?}");
    assert!(a.sent <= a.observed && a.at >= b.at, "{a:?} {b:?}");

    for i in 0..100 {
        let bank = Bank::from_store(Arc::new(w.sim.clone()), "", "sim");
        let prober = if i % 2 == 0 {
            bank
        } else {
            bank.reading_only()
        };
        assert!(prober.store_time(&w.shared).await.unwrap().verified);
    }
    let probes: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(
        w.sim.list(Some(&w.gc_bank.clock_probe_prefix())),
    )
    .await
    .unwrap();
    let names: Vec<_> = probes.iter().map(|m| m.location.to_string()).collect();
    assert_eq!(names, [probe.to_string()]);
}

/// A pass forgets a probe a day old (`_banklease/clock/`); a read command that writes its host's
/// probe just then finds it gone when it reads it back, and writes it again rather than failing.
#[tokio::test]
async fn a_probe_forgotten_while_it_is_written_is_written_again() {
    let w = world();
    let reader = w.gc_bank.reading_only();
    let probe = reader.own_clock_probe();
    let held = w.gate.hold_next_write(probe.as_ref());
    let shared = w.shared.clone();
    let reading = tokio::spawn(async move { reader.store_time(&shared).await });
    held.served.await.unwrap();
    // The pass's deletion, between the write and its read-back.
    w.sim.delete(&probe).await.unwrap();
    held.release.send(()).unwrap();
    let reading = reading.await.unwrap().unwrap();
    assert!(reading.verified, "{reading:?}");
    w.sim.head(&probe).await.unwrap();
}
