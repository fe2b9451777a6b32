//! `checkpoint delete` in-process: it never races an owner's completion — the decision object
//! decides — and what it refuses, it leaves whole.
#![allow(clippy::disallowed_methods)] // tests wait on real time: the store stamps real times

use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Status};
use banklease::clock::{MockClock, SharedClock, SystemClock};
use banklease::paths::{Key, Prefix};
use banklease::{Checkpoint, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::operator::delete::{delete, DeleteRequest, Deletion};
use banklease_gc::GcOptions;
use banklease_testkit::backends::{self, Backend};
use banklease_testkit::cid;
use banklease_testkit::failing::Strike;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};

fn request(available: bool) -> DeleteRequest {
    DeleteRequest {
        available,
        dry_run: false,
        operator: "alice".to_owned(),
        reason: None,
    }
}

/// An owner on `bank` whose lease expires 400 ms after its last renewal (its keeper is never
/// started: it dies unless the test renews it).
async fn short_lived_owner(bank: &banklease::Bank, clock: &SharedClock) -> OwnerLease {
    let windows = LeaseWindows::new(
        Duration::from_millis(100),
        Duration::from_millis(400),
        Duration::from_millis(50),
    )
    .unwrap();
    OwnerLease::acquire(bank, OwnerId::random(), windows, clock.clone())
        .await
        .unwrap()
}

/// Checkpoint `id` of `lease`, protecting, with one data object (5 bytes).
async fn checkpoint_with_data(lease: &OwnerLease, id: &banklease::CheckpointId) -> Checkpoint {
    let cp = Checkpoint::create(lease, id).await.unwrap();
    cp.put_data("disk0", PutPayload::from_static(b"whole"))
        .await
        .unwrap();
    cp
}

/// An `available` checkpoint named `name` (one data object) whose owner is gone.
async fn available_of_a_gone_owner(
    bank: &banklease::Bank,
    clock: &SharedClock,
    name: &str,
) -> banklease::CheckpointId {
    let lease = short_lived_owner(bank, clock).await;
    let id = cid(name);
    let cp = checkpoint_with_data(&lease, &id).await;
    cp.complete(Status::Available).await.unwrap();
    id
}

/// An owner completed its checkpoint (its decision landed) and died before finishing the move:
/// `index.json` still says protecting, the owner is dead past the grace. A deletion meets the
/// owner's decision, finishes its move and deletes nothing: the owner's `available` stands,
/// until asked for with --available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_loses_to_an_owners_completion_and_deletes_nothing() {
    let (bank, faults, _guard) = backends::faulty_bank(Backend::Memory, &MockClock::new()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let lease = short_lived_owner(&bank, &clock).await;
    let id = cid("race-1");
    let cp = checkpoint_with_data(&lease, &id).await;
    // The completion's decision lands; its index.json write does not (the owner crashes).
    faults.fail_next_put_to("race-1/index.json", Strike::Before);
    cp.complete(Status::Available).await.unwrap_err();
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Protecting);
    assert!(checkpoint::read_decision(&bank, &id)
        .await
        .unwrap()
        .is_some());
    drop(cp);
    drop(lease);
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .skew_margin(Duration::from_millis(50))
        .build();
    let refused = delete(&bank, &clock, &options, &id, &request(false))
        .await
        .unwrap();
    let Deletion::Refused { reason } = refused else {
        panic!("{refused:?}");
    };
    assert!(
        reason.contains("was completed by its owner as available just before"),
        "{reason}"
    );
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.status,
        Status::Available,
        "the owner's move is finished"
    );
    let data: Vec<_> = bank
        .store()
        .list(Some(&Prefix::Data(&id).path(&bank)))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(data.len(), 1, "nothing deleted");

    // Asked for, the available checkpoint goes; its owner's decision stays.
    let deleted = delete(&bank, &clock, &options, &id, &request(true))
        .await
        .unwrap();
    assert!(
        matches!(
            deleted,
            Deletion::Deleted {
                was: Status::Available,
                objects: 1,
                ..
            }
        ),
        "{deleted:?}"
    );
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Deleted);
    assert_eq!(record.removal.unwrap().name, "alice");
    bank.store()
        .head(&Key::Decision(id.clone()).path(&bank))
        .await
        .unwrap();
}

/// A completion whose marker was left (the owner crashed before deleting it), then deleted by
/// an operator: neither the deletion nor a later pass repairing the owner's move brings the
/// `available` record back over the tombstone, whose data is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_checkpoint_is_never_brought_back_by_its_owners_move() {
    let (bank, _faults, _guard) = backends::faulty_bank(Backend::Memory, &MockClock::new()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let lease = short_lived_owner(&bank, &clock).await;
    let owner = lease.owner_id().clone();
    let id = cid("left-marker");
    let cp = checkpoint_with_data(&lease, &id).await;
    cp.complete(Status::Available).await.unwrap();
    // The marker its move should have deleted, left behind (a crash just before).
    let marker = Key::marker(&owner, &id).path(&bank);
    bank.store()
        .put(&marker, PutPayload::default())
        .await
        .unwrap();
    drop(cp);
    drop(lease);

    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .skew_margin(Duration::from_millis(50))
        .build();
    let deleted = delete(&bank, &clock, &options, &id, &request(true))
        .await
        .unwrap();
    assert!(matches!(deleted, Deletion::Deleted { .. }), "{deleted:?}");
    // Its removal finished the owner's move first.
    assert!(matches!(
        bank.store().head(&marker).await,
        Err(object_store::Error::NotFound { .. })
    ));

    // And were the marker there again, the pass that repairs the owner's move keeps the
    // tombstone.
    bank.store()
        .put(&marker, PutPayload::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let report = banklease_gc::Collector::new(bank.clone(), clock.clone(), options.clone())
        .run_pass()
        .await
        .unwrap();
    assert_eq!(report.errors, 0, "{report:?}");
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Deleted, "{report:?}");
    assert_eq!(record.removal.unwrap().was, Status::Available);
    assert!(matches!(
        bank.store().head(&marker).await,
        Err(object_store::Error::NotFound { .. })
    ));
}

/// An operator's deletion of an `available` checkpoint killed after `index.json` said
/// `deleting` and its data went (the tombstone's write failed): the next pass finishes it, the
/// operator's trail kept, as it finishes a retirement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_deletion_is_finished_by_the_next_pass() {
    let (bank, faults, _guard) = backends::faulty_bank(Backend::Memory, &MockClock::new()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let id = available_of_a_gone_owner(&bank, &clock, "half-deleted").await;

    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .skew_margin(Duration::from_millis(50))
        .build();
    // The first write of index.json (`deleting`) lands; the second (the tombstone) fails.
    let index = format!("{}/index.json", id.as_str());
    faults.fail_put_to_after(&index, 1, Strike::Before);
    delete(&bank, &clock, &options, &id, &request(true))
        .await
        .expect_err("the tombstone's write failed");
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Deleting);

    let report = banklease_gc::Collector::new(bank.clone(), clock.clone(), options.clone())
        .run_pass()
        .await
        .unwrap();
    assert_eq!((report.errors, report.retired), (0, 1), "{report:?}");
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Deleted, "{report:?}");
    let removal = record.removal.unwrap();
    assert_eq!(
        (removal.by.as_str(), removal.name.as_str()),
        ("operator", "alice")
    );
    assert_eq!(removal.was, Status::Available);
    let data: Vec<_> = bank
        .store()
        .list(Some(&Prefix::Data(&id).path(&bank)))
        .try_collect()
        .await
        .unwrap();
    assert!(data.is_empty(), "{data:?}");
    assert!(matches!(
        bank.store()
            .head(&Key::Failed(id.clone()).path(&bank))
            .await,
        Err(object_store::Error::NotFound { .. })
    ));
}

/// A deletion killed between entering the checkpoint in `index/failed/` and marking it (its
/// first `index.json` write failed) began nothing: a pass within `gc.late_write_window` (at least
/// the store client's retry budget) leaves the entry (a slow deletion may still mark it), a pass
/// after it forgets the entry, and the checkpoint stays whole and `available`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_whose_deletion_never_began_is_forgotten_after_the_late_write_window_and_nothing_goes(
) {
    let (bank, faults, _guard) = backends::faulty_bank(Backend::Memory, &MockClock::new()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let id = available_of_a_gone_owner(&bank, &clock, "never-begun").await;

    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .late_write_window(Duration::from_millis(600))
        .skew_margin(Duration::from_millis(50))
        .build();
    let index = format!("{}/index.json", id.as_str());
    faults.fail_next_put_to(&index, Strike::Before);
    delete(&bank, &clock, &options, &id, &request(true))
        .await
        .expect_err("the mark's write failed");
    let entry = Key::Failed(id.clone()).path(&bank);
    assert!(bank.store().head(&entry).await.is_ok(), "entered first");

    let pass = || async {
        banklease_gc::Collector::new(bank.clone(), clock.clone(), options.clone())
            .run_pass()
            .await
            .unwrap()
    };
    let report = pass().await;
    assert_eq!((report.errors, report.retired), (0, 0), "{report:?}");
    assert!(
        bank.store().head(&entry).await.is_ok(),
        "left within gc.late_write_window"
    );

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let report = pass().await;
    assert_eq!((report.errors, report.retired), (0, 0), "{report:?}");
    assert!(matches!(
        bank.store().head(&entry).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Available);
    assert!(record.removal.is_none());
    let data: Vec<_> = bank
        .store()
        .list(Some(&Prefix::Data(&id).path(&bank)))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(data.len(), 1);
}

/// A pass finishing an owner's move reads `index.json` (`available`), an operator then deletes
/// the checkpoint whole, and only then does the pass write: its write was decided on a version
/// that is gone, so it reads again, sees the removal, and leaves the tombstone and its trail.
/// (The pass's read is held by a gate: no timing decides the order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_between_a_moves_read_and_its_write_is_never_undone() {
    let (bank, _faults, _guard) = backends::faulty_bank(Backend::Memory, &MockClock::new()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let lease = short_lived_owner(&bank, &clock).await;
    let owner = lease.owner_id().clone();
    let id = cid("raced");
    let cp = checkpoint_with_data(&lease, &id).await;
    cp.complete(Status::Available).await.unwrap();
    // The marker its move should have deleted, left behind (the owner crashed just before).
    let marker = Key::marker(&owner, &id).path(&bank);
    bank.store()
        .put(&marker, PutPayload::default())
        .await
        .unwrap();
    drop(cp);
    drop(lease);

    let gate = banklease_testkit::gate::GateStore::new(Arc::clone(bank.store()));
    let gated = bank.with_store(Arc::new(gate.clone()));
    let held = gate.hold_get(&format!("checkpoints/{id}/index.json"), 0);
    let decision = checkpoint::read_decision(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    let finishing = tokio::spawn({
        let gated = gated.clone();
        async move { banklease::collector::finish_owner_decision(&gated, &decision).await }
    });
    held.served.await.unwrap();

    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .skew_margin(Duration::from_millis(50))
        .build();
    let deleted = delete(&bank, &clock, &options, &id, &request(true))
        .await
        .unwrap();
    assert!(matches!(deleted, Deletion::Deleted { .. }), "{deleted:?}");
    held.release.send(()).unwrap();
    finishing.await.unwrap().unwrap();

    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.status,
        Status::Deleted,
        "the move's write undid the deletion: {record:?}"
    );
    assert_eq!(
        record.removal.as_ref().map(|r| r.name.as_str()),
        Some("alice")
    );
    let data: Vec<_> = bank
        .store()
        .list(Some(&Prefix::Data(&id).path(&bank)))
        .try_collect()
        .await
        .unwrap();
    assert!(data.is_empty(), "{data:?}");
    assert!(matches!(
        bank.store().head(&marker).await,
        Err(object_store::Error::NotFound { .. })
    ));
}

/// A removal slow between entering the checkpoint in `index/failed/` and marking `index.json`:
/// a pass past `gc.late_write_window` takes the entry for one whose removal never began and
/// forgets it; the
/// mark lands after, and the remover stops before it is done. The entry is back for the mark,
/// and the next pass finishes the removal instead of leaving it `deleting` for ever. (Found by
/// the simulation's operator, seed 17, one-shot; a gate holds the removal's read.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_removal_whose_entry_a_pass_forgot_is_still_finished() {
    let (bank, faults, _guard) = backends::faulty_bank(Backend::Memory, &MockClock::new()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let id = available_of_a_gone_owner(&bank, &clock, "slow-removal").await;
    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .late_write_window(Duration::from_millis(300))
        .skew_margin(Duration::from_millis(50))
        .build();
    let pass = || async {
        banklease_gc::Collector::new(bank.clone(), clock.clone(), options.clone())
            .run_pass()
            .await
            .unwrap()
    };
    // The bank's first pass on this host: later ones judge ages on readings compared with it.
    pass().await;

    let gate = banklease_testkit::gate::GateStore::new(Arc::clone(bank.store()));
    let gated = bank.with_store(Arc::new(gate.clone()));
    // The removal's own read of index.json, after the deletion's first look at it.
    let held = gate.hold_get(&format!("checkpoints/{id}/index.json"), 1);
    faults.refuse_deletes_of(&format!("checkpoints/{id}/data/"));
    let removing = tokio::spawn({
        let (clock, options, id) = (clock.clone(), options.clone(), id.clone());
        async move { delete(&gated, &clock, &options, &id, &request(true)).await }
    });
    held.served.await.unwrap();
    let entry = Key::Failed(id.clone()).path(&bank);
    assert!(bank.store().head(&entry).await.is_ok(), "entered first");

    // Past the grace, a pass forgets the entry: its record has no removal yet.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(pass().await.errors, 0);
    assert!(matches!(
        bank.store().head(&entry).await,
        Err(object_store::Error::NotFound { .. })
    ));

    // The mark lands now; the data cannot be deleted, and the remover gives up.
    held.release.send(()).unwrap();
    removing
        .await
        .unwrap()
        .expect_err("its data could not be deleted");
    faults.heal();

    let report = pass().await;
    assert_eq!(report.errors, 0, "{report:?}");
    let record = checkpoint::read_checkpoint(&bank, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Deleted, "left {record:?}");
    assert_eq!(record.removal.map(|r| r.name), Some("alice".to_owned()));
    let data: Vec<_> = bank
        .store()
        .list(Some(&Prefix::Data(&id).path(&bank)))
        .try_collect()
        .await
        .unwrap();
    assert!(data.is_empty(), "{data:?}");
}
