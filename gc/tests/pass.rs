//! GC passes in-process on memory and file banks: the dead owner's protecting checkpoints go,
//! everything else stays — under faults too.
#![allow(clippy::disallowed_methods)] // tests wait on real time: the store stamps real times

use banklease::CheckpointId;
use banklease_testkit::cid;
use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Decided, Decider, Decision, Status};
use banklease::clock::{Clock, MockClock, SharedClock, SystemClock};
use banklease::paths::{Key, Prefix};
use banklease::Checkpoint;
use banklease::{Bank, Error, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions, PassReport};
use banklease_testkit::failing::{FailingStore, Op, Strike};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const EXPIRE: Duration = Duration::from_millis(400);
const GRACE: Duration = Duration::from_millis(200);
const MARGIN: Duration = Duration::from_millis(50);
const VALIDITY: Duration = Duration::from_millis(50);

use banklease_testkit::backends;

/// One backend's bank for a test, behind a fault-injecting wrapper.
struct Fixture {
    bank: Bank,
    faults: FailingStore<Arc<dyn ObjectStore>>,
    /// Skew margin: S3 servers stamp `last_modified` in whole seconds.
    margin: Duration,
    /// Owners' expire window: longer on real servers, where setting up an owner takes a while.
    expire: Duration,
    /// The collector's grace: `GRACE`, and on Swift what rule (c) asks for the test banks'
    /// declared budget.
    grace: Duration,
    _guard: backends::TestBank,
}

impl Fixture {
    fn options(&self) -> GcOptions {
        GcOptions::builder()
            .grace(self.grace)
            .skew_margin(self.margin)
            .concurrency(4)
            .max_deletions(0)
            .brake_ratio(1.0)
            .brake_min(1_000_000)
            .dry_run(false)
            .force(false)
            .reap_leases(true)
            .build()
    }

    /// Long enough for the store to judge an owner dead: its store-time reading may lag by up
    /// to the timestamp resolution (1 s on S3) on top of the margin.
    fn past_expiry(&self) -> Duration {
        let resolution = self.margin - MARGIN;
        self.expire + self.grace + self.margin + resolution + Duration::from_millis(150)
    }

    fn windows(&self) -> LeaseWindows {
        LeaseWindows::new(Duration::from_millis(100), self.expire, VALIDITY).unwrap()
    }
}

/// A live owner's windows: only dead owners' expiry is under test here, so a live owner gets an
/// expire window no loaded CI machine can starve its keeper through (with the fixture's 400 ms a
/// busy 2-core runner once went without a renewal long enough to lose the lease).
fn live_windows() -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_millis(100),
        Duration::from_secs(30),
        Duration::from_millis(50),
    )
    .unwrap()
}

/// A fresh bank on every available backend (memory, file; Swift and S3 when configured).
async fn fixtures() -> Vec<(String, Fixture)> {
    let mut fixtures = Vec::new();
    for backend in backends::backends() {
        let (bank, faults, guard) = backends::faulty_bank(backend, &MockClock::new()).await;
        let margin = MARGIN + backend.stamp_resolution();
        let expire = if backend.is_server() {
            Duration::from_secs(2)
        } else {
            EXPIRE
        };
        let grace = backend.collector_grace(GRACE, expire, VALIDITY, margin);
        fixtures.push((
            format!("{backend:?}"),
            Fixture {
                bank,
                faults,
                margin,
                expire,
                grace,
                _guard: guard,
            },
        ));
    }
    fixtures
}

/// An owner with `n` checkpoints (3 data objects each), the first `complete` of them available,
/// and its keeper (which never wakes on a frozen mock clock: such an owner dies on the store).
async fn owner_with(
    f: &Fixture,
    clock: SharedClock,
    n: usize,
    complete: usize,
) -> (OwnerLease, Vec<Checkpoint>, banklease::Keeper) {
    owner_with_windows(f, f.windows(), clock, n, complete).await
}

/// A live owner on the real clock, with `n` checkpoints, the first `complete` available.
async fn live_owner(
    f: &Fixture,
    n: usize,
    complete: usize,
) -> (OwnerLease, Vec<Checkpoint>, banklease::Keeper) {
    owner_with_windows(f, live_windows(), Arc::new(SystemClock), n, complete).await
}

async fn owner_with_windows(
    f: &Fixture,
    windows: LeaseWindows,
    clock: SharedClock,
    n: usize,
    complete: usize,
) -> (OwnerLease, Vec<Checkpoint>, banklease::Keeper) {
    let lease = OwnerLease::acquire(&f.bank, OwnerId::random(), windows, clock)
        .await
        .unwrap();
    let keeper = lease.spawn_keeper(banklease::clock::Jitter::seeded(1), 0.1);
    let mut cps = Vec::new();
    for i in 0..n {
        let id = format!("cp-{}-{i}", &lease.owner_id().as_str()[..8]);
        let cp = Checkpoint::create(&lease, &cid(&id)).await.unwrap();
        for d in 0..3 {
            cp.put_data(&format!("d{d}"), PutPayload::from_static(b"bytes"))
                .await
                .unwrap();
        }
        if i < complete {
            cp.complete(Status::Available).await.unwrap();
        }
        cps.push(cp);
    }
    (lease, cps, keeper)
}

async fn status(bank: &Bank, id: &CheckpointId) -> Option<Status> {
    checkpoint::read_checkpoint(bank, id)
        .await
        .unwrap()
        .map(|r| r.status)
}

async fn data_count(bank: &Bank, id: &CheckpointId) -> usize {
    use futures::TryStreamExt;
    let v: Vec<_> = bank
        .store()
        .list(Some(&Prefix::Data(id).path(bank)))
        .try_collect()
        .await
        .unwrap();
    v.len()
}

fn collector(bank: &Bank, options: GcOptions) -> Collector {
    Collector::new(bank.clone(), Arc::new(SystemClock), options)
}

async fn pass(bank: &Bank, options: GcOptions) -> PassReport {
    collector(bank, options).run_pass().await.unwrap()
}

#[tokio::test]
async fn collects_exactly_the_dead_owners_protecting_checkpoints() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        // The live owner keeps its lease (set up first: the dead owner's expiry starts later).
        let (live, live_cps, keeper) = live_owner(&f, 3, 1).await;
        // The dead owner: its clock is frozen and it never renews, so the store sees it expire.
        let (dead, dead_cps, _keeper) = owner_with(&f, Arc::new(MockClock::new()), 4, 1).await;

        // Before expiry: nothing is collected.
        let r = pass(b, f.options()).await;
        assert_eq!(r.collected, 0, "{name}: {r:?}");
        assert_eq!(r.scanned, 5, "{name}: {r:?}");
        assert_eq!(r.alive, 2, "{name}: {r:?}");
        let counts = |pairs: &[(&str, u64)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert_eq!(r.protecting, counts(&[("alive", 5)]), "{name}");
        assert_eq!(r.leases, counts(&[("alive", 2)]), "{name}");
        assert_eq!(r.oldest_zombie_age_ms, 0, "{name}");

        tokio::time::sleep(f.past_expiry()).await;
        // A dry run leaves the dead owner's checkpoints: zombies, aged since the expiry.
        let mut dry = f.options();
        dry.dry_run = true;
        let r = pass(b, dry).await;
        assert_eq!(r.protecting, counts(&[("alive", 2), ("dead", 3)]), "{name}");
        assert_eq!(r.leases, counts(&[("alive", 1), ("expired", 1)]), "{name}");
        assert!(r.oldest_zombie_age_ms > 0, "{name}: {r:?}");
        let r = pass(b, f.options()).await;
        assert_eq!(r.oldest_zombie_age_ms, 0, "{name}: all collected: {r:?}");
        assert_eq!(r.collected, 3, "{name}: {r:?}");
        assert_eq!(r.dead, 1, "{name}: {r:?}");
        assert_eq!(r.errors, 0, "{name}: {r:?}");
        assert!(
            // Per collected checkpoint: 3 data objects and the marker deleted; the decision and
            // the tombstone written.
            r.requests["list"] >= 1 && r.requests["delete"] >= 3 * 4 && r.requests["put"] >= 3 * 2,
            "{name}: {r:?}"
        );

        assert_eq!(status(b, dead_cps[0].id()).await, Some(Status::Available));
        assert_eq!(data_count(b, dead_cps[0].id()).await, 3);
        for cp in &dead_cps[1..] {
            assert_eq!(status(b, cp.id()).await, Some(Status::Deleted), "{name}");
            assert_eq!(data_count(b, cp.id()).await, 0, "{name}");
            let d = checkpoint::read_decision(b, cp.id())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(d.by, Decider::Gc);
        }
        assert_eq!(status(b, live_cps[0].id()).await, Some(Status::Available));
        for cp in &live_cps[1..] {
            assert_eq!(status(b, cp.id()).await, Some(Status::Protecting), "{name}");
            assert_eq!(data_count(b, cp.id()).await, 3, "{name}");
        }

        // The live owner never noticed: its lease is valid from its own point of view.
        assert!(live.check_validity(), "{name}: {:?}", live.state());
        // The dead owner, which still believes its lease (frozen clock), is fenced.
        assert!(dead.check_validity());
        let err = dead_cps[1].complete(Status::Available).await.unwrap_err();
        assert!(matches!(err, Error::Fenced { .. }), "{name}: {err}");

        // A second pass has nothing left to do.
        let r = pass(b, f.options()).await;
        assert_eq!((r.collected, r.scanned), (0, 2), "{name}: {r:?}");
        keeper.release().await.unwrap();
    }
}

#[tokio::test]
async fn missing_lease_is_collected_unreadable_lease_never() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let frozen: SharedClock = Arc::new(MockClock::new());
        // Released without completing: its protecting checkpoints are zombies.
        let (gone, gone_cps, _keeper) = owner_with(&f, frozen.clone(), 2, 0).await;
        gone.release().await.unwrap();
        // A garbage lease body: doubt, so never collected.
        let (garbled, garbled_cps, _keeper) = owner_with(&f, frozen.clone(), 2, 0).await;
        b.store()
            .put(
                &b.lease_path(garbled.owner_id()),
                PutPayload::from_static(b"\x00garbage"),
            )
            .await
            .unwrap();
        tokio::time::sleep(f.past_expiry()).await;
        // A missing lease is timed from when a pass first saw it missing: grace starts now.
        let r = pass(b, f.options()).await;
        assert_eq!((r.collected, r.in_grace), (0, 1), "{name}: {r:?}");
        assert_eq!(r.unreadable, 1, "{name}: {r:?}");
        tokio::time::sleep(f.past_expiry()).await;
        let r = pass(b, f.options()).await;
        assert_eq!(r.collected, 2, "{name}: {r:?}");
        assert_eq!(r.unreadable, 1, "{name}: {r:?}");
        for cp in &gone_cps {
            assert_eq!(status(b, cp.id()).await, Some(Status::Deleted));
        }
        for cp in &garbled_cps {
            assert_eq!(status(b, cp.id()).await, Some(Status::Protecting));
        }
    }
}

#[tokio::test]
async fn dry_run_brake_and_limit() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let (_dead, cps, _keeper) = owner_with(&f, Arc::new(MockClock::new()), 5, 0).await;
        tokio::time::sleep(f.past_expiry()).await;

        let dry = f.options().to_builder().dry_run(true).build();
        let r = pass(b, dry).await;
        assert_eq!((r.collected, r.dry_run), (5, true), "{name}: {r:?}");
        assert_eq!(r.requests.get("delete"), None, "{name}: {r:?}");
        assert_eq!(status(b, cps[0].id()).await, Some(Status::Protecting));

        let braking = f
            .options()
            .to_builder()
            .brake_ratio(0.5)
            .brake_min(2)
            .build();
        let r = pass(b, braking.clone()).await;
        assert_eq!(r.collected, 0, "{name}: {r:?}");
        assert!(
            r.braked.as_deref().unwrap().contains("5 of 5"),
            "{name}: {r:?}"
        );

        let limited = braking.to_builder().max_deletions(2).force(true).build();
        let r = pass(b, limited).await;
        assert_eq!((r.collected, r.skipped), (2, 3), "{name}: {r:?}");
        let r = pass(b, f.options()).await;
        assert_eq!(r.collected, 3, "{name}: {r:?}");
    }
}

#[tokio::test]
async fn owner_decision_interrupted_is_finished_not_collected() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let (dead, cps, _keeper) = owner_with(&f, Arc::new(MockClock::new()), 1, 0).await;
        // The owner won the decision, then crashed before writing index.json and the marker.
        let decided = banklease::collector::decide(
            b,
            Decision {
                format: checkpoint::CHECKPOINT_FORMAT,
                rebuilt: None,
                checkpoint_id: cps[0].id().to_owned(),
                owner_id: dead.owner_id().clone(),
                by: Decider::Owner,
                outcome: Status::Available,
                token: "t".into(),
                decided_at: chrono::Utc::now(),
                evidence: None,
            },
        )
        .await
        .unwrap();
        assert!(matches!(decided, Decided::Won(_)));
        tokio::time::sleep(f.past_expiry()).await;
        let r = pass(b, f.options()).await;
        assert_eq!((r.collected, r.repaired), (0, 1), "{name}: {r:?}");
        assert_eq!(status(b, cps[0].id()).await, Some(Status::Available));
        assert_eq!(data_count(b, cps[0].id()).await, 3);
    }
}

#[tokio::test]
async fn interrupted_collection_resumes_on_the_next_pass() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let (_dead, cps, _keeper) = owner_with(&f, Arc::new(MockClock::new()), 3, 0).await;
        tokio::time::sleep(f.past_expiry()).await;
        // Deletions fail: some after the delete really happened.
        f.faults.fail_next(Op::Delete, Strike::After, 2);
        f.faults.fail_next(Op::Delete, Strike::Before, 2);
        let r = pass(b, f.options().to_builder().concurrency(1).build()).await;
        assert!(r.errors >= 1, "{name}: {r:?}");
        assert!(r.collected < 3, "{name}: {r:?}");
        // Each later pass resumes what is left; the scripted faults run out within a few.
        let mut collected = r.collected;
        let mut passes = 1;
        loop {
            let r = pass(b, f.options()).await;
            collected += r.collected;
            passes += 1;
            if r.scanned == 0 {
                assert_eq!(r.errors, 0, "{name}: {r:?}");
                break;
            }
            assert!(passes < 6, "{name}: faults never drained: {r:?}");
        }
        assert_eq!(collected, 3, "{name}");
        for cp in &cps {
            assert_eq!(status(b, cp.id()).await, Some(Status::Deleted));
            assert_eq!(data_count(b, cp.id()).await, 0);
        }
    }
}

#[tokio::test]
async fn store_errors_on_lease_reads_never_collect() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let (_dead, cps, _keeper) = owner_with(&f, Arc::new(MockClock::new()), 2, 0).await;
        tokio::time::sleep(f.past_expiry()).await;
        // The clock probe's put and head succeed; the lease read fails.
        f.faults.fail_next_get_of("leases/", Strike::Before);
        let r = pass(b, f.options()).await;
        assert_eq!((r.collected, r.unreadable), (0, 1), "{name}: {r:?}");
        assert_eq!(status(b, cps[0].id()).await, Some(Status::Protecting));
        // A partition makes the pass fail as a whole (no store clock), deleting nothing.
        f.faults.set_partitioned(true);
        assert!(collector(b, f.options()).run_pass().await.is_err());
        f.faults.set_partitioned(false);
        assert_eq!(pass(b, f.options()).await.collected, 2, "{name}");
    }
}

#[tokio::test]
async fn only_objects_under_the_prefix_are_touched() {
    let faults: FailingStore<Arc<dyn ObjectStore>> =
        FailingStore::new(Arc::new(object_store::memory::InMemory::new()));
    let f = Fixture {
        bank: banklease_testkit::made(Bank::from_store(Arc::new(faults.clone()), "bank", "memory")),
        faults,
        margin: MARGIN,
        expire: EXPIRE,
        grace: GRACE,
        _guard: backends::plain_bank(backends::Backend::Memory).await.1,
    };
    let outside = object_store::path::Path::from("elsewhere/index/protecting/x/y");
    f.faults
        .put(&outside, PutPayload::from_static(b""))
        .await
        .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(MockClock::new());
    let (_dead, _cps, _keeper) = owner_with(&f, clock, 2, 0).await;
    tokio::time::sleep(f.past_expiry()).await;
    assert_eq!(pass(&f.bank, f.options()).await.collected, 2);
    assert!(f.faults.head(&outside).await.is_ok());
}

#[tokio::test]
async fn malformed_index_entries_are_counted_and_dangling_markers_collected() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let (_dead, _cps, _keeper) = owner_with(&f, Arc::new(MockClock::new()), 1, 0).await;
        let dead_owner = _dead.owner_id().clone();
        // Entries no valid marker looks like: too deep, too shallow, bad ids.
        for bad in [
            b.path(&["index", "protecting", "only-owner"]),
            b.path(&["index", "protecting", "o", "cp", "extra"]),
            b.path(&["index", "protecting", ".hidden", "cp"]),
        ] {
            let path = bad;
            f.faults
                .put(&path, PutPayload::from_static(b""))
                .await
                .unwrap();
        }
        // A marker of the dead owner pointing at a checkpoint that has no metadata or data.
        f.faults
            .put(
                &Key::marker(&dead_owner, &cid("dangling")).path(b),
                PutPayload::from_static(b""),
            )
            .await
            .unwrap();
        tokio::time::sleep(f.past_expiry()).await;
        let r = pass(b, f.options()).await;
        assert_eq!(r.collected, 2, "{name}: {r:?}");
        assert!(r.skipped >= 2, "{name}: {r:?}");
        assert_eq!(r.errors, 0, "{name}: {r:?}");
        // The malformed entries are left for a human: the GC deletes only what it understands.
        let r = pass(b, f.options()).await;
        assert_eq!(r.collected, 0, "{name}: {r:?}");
    }
}

#[tokio::test]
async fn dead_owners_leases_are_reaped_once_nothing_is_left() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let frozen: SharedClock = Arc::new(MockClock::new());
        let (dead, _, _keeper) = owner_with(&f, frozen.clone(), 2, 0).await;
        // A dead owner that never created a checkpoint, and one whose lease is garbage.
        let (idle, _, _keeper) = owner_with(&f, frozen.clone(), 0, 0).await;
        let (live, _, keeper) = live_owner(&f, 1, 0).await;
        tokio::time::sleep(f.past_expiry()).await;

        // A dry run reaps nothing.
        let dry = f.options().to_builder().dry_run(true).build();
        assert_eq!(pass(b, dry).await.leases_reaped, 0, "{name}");

        let r = pass(b, f.options()).await;
        assert_eq!((r.collected, r.leases_reaped), (2, 2), "{name}: {r:?}");
        for gone in [&dead, &idle] {
            assert!(
                banklease::lease::read_lease(b, gone.owner_id())
                    .await
                    .unwrap()
                    .is_none(),
                "{name}"
            );
            // Its reason is kept beside it: the lease as read and what it was judged on.
            let record = banklease_gc::pass::reaped::read(b, gone.owner_id())
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: no reap record"));
            let e = &record.evidence;
            assert_eq!(e.lease, "expired", "{name}");
            assert_eq!(
                e.expire_window_ms,
                Some(f.expire.as_millis() as u64),
                "{name}"
            );
            assert!(e.dead_for_ms >= f.grace.as_millis() as u64, "{name}: {e:?}");
            assert!(e.lease_stamp.unwrap() < e.judged_at, "{name}: {e:?}");
            assert_eq!(
                record.lease.as_ref().map(|l| &l.owner_id),
                Some(gone.owner_id()),
                "{name}"
            );
        }
        assert!(
            banklease_gc::pass::reaped::read(b, live.owner_id())
                .await
                .unwrap()
                .is_none(),
            "{name}: a live owner has no reap record"
        );
        assert!(live.check_validity(), "{name}: {:?}", live.state());
        assert!(banklease::lease::read_lease(b, live.owner_id())
            .await
            .unwrap()
            .is_some());
        // With reaping off, nothing is reaped.
        let (_late, _, _keeper) = owner_with(&f, frozen.clone(), 0, 0).await;
        tokio::time::sleep(f.past_expiry()).await;
        let off = f.options().to_builder().reap_leases(false).build();
        assert_eq!(pass(b, off).await.leases_reaped, 0, "{name}");
        keeper.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_file_banks_crashed_writers_temporaries_are_swept_once_per_window() {
    let dir = tempfile::tempdir().unwrap();
    let bank =
        banklease_testkit::made(Bank::open(&format!("file://{}", dir.path().display())).unwrap());
    // What a writer killed between writing and publishing leaves: its staged file, never
    // listed. And a file that only looks like one (an old release's, a user's): never swept.
    let staging = dir.path().join("_banklease/staging");
    let old = staging.join(format!("w-{:032x}#0", 1));
    let young = staging.join(format!("w-{:032x}#0", 2));
    let lookalike = dir.path().join("checkpoints/cp-1/index.json#1");
    for (path, age) in [
        (&old, Duration::from_secs(3600)),
        (&young, Duration::ZERO),
        (&lookalike, Duration::from_secs(3600)),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let f = std::fs::File::create(path).unwrap();
        f.set_modified(std::time::SystemTime::now() - age).unwrap();
    }
    let options = GcOptions::builder()
        .late_write_window(Duration::from_secs(600))
        .build();
    let dry = collector(&bank, options.clone().to_builder().dry_run(true).build());
    assert_eq!(dry.run_pass().await.unwrap().temporaries_swept, 1);
    assert!(old.exists(), "a dry run removes nothing");

    let gc = collector(&bank, options);
    let r = gc.run_pass().await.unwrap();
    assert_eq!((r.temporaries_swept, r.errors), (1, 0), "{r:?}");
    assert!(!old.exists());
    assert!(
        young.exists(),
        "a young temporary may belong to a live writer"
    );
    assert!(lookalike.exists(), "only what the store staged is swept");
    // A walk of the staging directory: not again within the window.
    std::fs::File::create(&old)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    assert_eq!(gc.run_pass().await.unwrap().temporaries_swept, 0);
    assert!(old.exists());
    // Other banks have no temporaries to sweep.
    let memory = Bank::open("memory://").unwrap();
    assert_eq!(
        pass(&memory, GcOptions::default()).await.temporaries_swept,
        0
    );
}

/// A pass deletes each object it removes once: on `file:` as on memory, N collected checkpoints
/// of one data object each cost N data deletions, N marker deletions and one per reaped lease
/// (the `file:` pass once sent two deletes per removed object).
#[tokio::test]
async fn a_pass_deletes_each_removed_object_once() {
    // More than one data batch (DATA_BATCH = 1,000): a flush at the boundary must not repeat.
    const N: usize = 1100;
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "memory://".to_owned(),
        format!("file://{}", dir.path().display()),
    ] {
        let bank = Bank::open(&url).unwrap();
        banklease::layout::init(&bank).await.unwrap();
        let windows = LeaseWindows::new(
            Duration::from_millis(100),
            EXPIRE,
            Duration::from_millis(50),
        )
        .unwrap();
        // A frozen clock: the owner never renews, so the store sees it expire.
        let lease = OwnerLease::acquire(
            &bank,
            OwnerId::random(),
            windows,
            Arc::new(MockClock::new()),
        )
        .await
        .unwrap();
        for i in 0..N {
            let cp = Checkpoint::create(&lease, &cid(&format!("cp-{i}")))
                .await
                .unwrap();
            cp.put_data("d0", PutPayload::from_static(b"bytes"))
                .await
                .unwrap();
        }
        tokio::time::sleep(EXPIRE + GRACE + MARGIN + Duration::from_millis(300)).await;
        let options = GcOptions::builder()
            .grace(GRACE)
            .skew_margin(MARGIN)
            .brake_ratio(1.0)
            .build();
        let r = pass(&bank, options).await;
        assert_eq!(
            (r.collected, r.leases_reaped, r.errors),
            (N as u64, 1, 0),
            "{url}: {r:?}"
        );
        let removed = 2 * N as u64 + r.leases_reaped;
        assert_eq!(
            r.requests.get("delete").copied(),
            Some(removed),
            "{url}: {r:?}"
        );
    }
}

/// A clock step no comparison saw makes every lease look expired at once, a live owner's with
/// no checkpoint too: reaping is under the same brake as collection.
#[tokio::test]
async fn mass_reaping_is_braked_like_mass_collection() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let frozen: SharedClock = Arc::new(MockClock::new());
        let mut idle = Vec::new();
        for _ in 0..3 {
            idle.push(owner_with(&f, frozen.clone(), 0, 0).await);
        }
        let (live, _, keeper) = live_owner(&f, 0, 0).await;
        tokio::time::sleep(f.past_expiry()).await;

        let braking = f
            .options()
            .to_builder()
            .brake_ratio(0.5)
            .brake_min(2)
            .build();
        let r = pass(b, braking.clone()).await;
        assert_eq!(r.leases_reaped, 0, "{name}: {r:?}");
        let reason = r.braked.as_deref().unwrap_or_default();
        assert!(reason.contains("reap 3 of 4 leases"), "{name}: {r:?}");
        for (lease, _, _) in &idle {
            assert!(banklease::lease::read_lease(b, lease.owner_id())
                .await
                .unwrap()
                .is_some());
        }
        let forced = braking.to_builder().force(true).build();
        let r = pass(b, forced).await;
        assert_eq!(
            (r.leases_reaped, r.braked.clone()),
            (3, None),
            "{name}: {r:?}"
        );
        assert!(live.check_validity(), "{name}");
        keeper.release().await.unwrap();
    }
}

/// A dead owner's marker on an id whose `index.json` another owner won (a crash between the
/// marker and its create of `index.json`, which lost to the other's): the marker is removed
/// and counted, the other owner's checkpoint is untouched, and the dead owner's lease, with
/// nothing protecting left, is reaped.
#[tokio::test]
async fn a_dead_owners_stray_marker_on_another_owners_checkpoint_is_removed() {
    for (name, f) in fixtures().await {
        let b = &f.bank;
        let frozen: SharedClock = Arc::new(MockClock::new());
        let (dead, _, _keeper) = owner_with(&f, frozen.clone(), 0, 0).await;
        let (live, cps, keeper) = live_owner(&f, 1, 0).await;
        let id = cps[0].id().to_owned();
        let stray = Key::marker(dead.owner_id(), &id).path(b);
        b.store().put(&stray, PutPayload::default()).await.unwrap();
        tokio::time::sleep(f.past_expiry()).await;

        let r = pass(b, f.options()).await;
        assert_eq!(
            (r.repaired, r.collected, r.errors),
            (1, 0, 0),
            "{name}: {r:?}"
        );
        assert!(
            matches!(
                b.store().head(&stray).await,
                Err(object_store::Error::NotFound { .. })
            ),
            "{name}: the stray marker is still there"
        );
        assert_eq!(status(b, &id).await, Some(Status::Protecting), "{name}");
        assert_eq!(data_count(b, &id).await, 3, "{name}");
        assert!(
            checkpoint::read_decision(b, &id).await.unwrap().is_none(),
            "{name}: nothing was decided on the live owner's checkpoint"
        );
        assert!(Key::marker(live.owner_id(), &id).path(b) != stray);
        assert!(
            banklease::lease::read_lease(b, dead.owner_id())
                .await
                .unwrap()
                .is_none(),
            "{name}: the dead owner's lease, nothing protecting left, is reaped"
        );
        assert_eq!(r.oldest_zombie_age_ms, 0, "{name}: {r:?}");
        assert!(live.check_validity(), "{name}");
        keeper.release().await.unwrap();
    }
}
