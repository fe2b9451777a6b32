//! Collection in bulk across checkpoints and owners (gc/src/pass/batch.rs): each checkpoint's order
//! (data, then tombstone, then marker) holds whatever its neighbours in a batch do, and a batch
//! that fails is resumed by the next pass. On a store whose clock the test drives.

use banklease_testkit::cid;
use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Status};
use banklease::clock::{MockClock, SharedClock};
use banklease::Checkpoint;
use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::pass::batch::{DATA_BATCH, LISTED_MAX};
use banklease_gc::{Collector, GcOptions, PassReport};
use banklease_testkit::failing::{FailingStore, Op, Strike};
use banklease_testkit::made;
use banklease_testkit::sim_store::{SimStore, StoreClock};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

const MARGIN: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(2);
const EXPIRE: Duration = Duration::from_secs(10);

struct World {
    clock: MockClock,
    owner_bank: Bank,
    failing: FailingStore<SimStore>,
    gc_bank: Bank,
}

fn world() -> World {
    let clock = MockClock::new();
    let sim = SimStore::new(StoreClock::new(clock.clone()));
    let failing = FailingStore::new(sim.clone());
    World {
        owner_bank: made(Bank::from_store(Arc::new(sim), "", "sim")),
        gc_bank: Bank::from_store(Arc::new(failing.clone()), "", "sim"),
        failing,
        clock,
    }
}

impl World {
    fn collector(&self) -> Collector {
        self.collector_with(GcOptions::default().concurrency)
    }

    fn collector_with(&self, concurrency: usize) -> Collector {
        let clock: SharedClock = Arc::new(self.clock.clone());
        let options = GcOptions::builder()
            .grace(GRACE)
            .skew_margin(MARGIN)
            .brake_ratio(1.0)
            .concurrency(concurrency)
            .build();
        Collector::new(self.gc_bank.clone(), clock, options)
    }

    /// An owner that never renews (it dies once the clock passes its expiry).
    async fn owner(&self, name: &str) -> OwnerLease {
        let windows =
            LeaseWindows::new(Duration::from_secs(2), EXPIRE, Duration::from_secs(1)).unwrap();
        OwnerLease::acquire(
            &self.owner_bank,
            OwnerId::parse(name).unwrap(),
            windows,
            Arc::new(self.clock.clone()),
        )
        .await
        .unwrap()
    }

    /// `owners` dead owners with `per_owner` protecting checkpoints of `data` objects each
    /// (`cp-<owner>-<n>`, objects `d000`, `d001`, ...: listed in numeric order).
    async fn dead_owners(&self, owners: usize, per_owner: usize, data: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for o in 0..owners {
            let lease = self.owner(&format!("owner-{o}")).await;
            for c in 0..per_owner {
                let id = format!("cp-{o}-{c}");
                let cp = Checkpoint::create(&lease, &cid(&id)).await.unwrap();
                for d in 0..data {
                    cp.put_data(&format!("d{d:03}"), PutPayload::from_static(b"x"))
                        .await
                        .unwrap();
                }
                ids.push(id);
            }
        }
        self.clock
            .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
        ids
    }

    async fn status(&self, id: &str) -> Option<Status> {
        checkpoint::read_checkpoint(&self.owner_bank, &cid(id))
            .await
            .unwrap()
            .map(|r| r.status)
    }

    async fn exists(&self, path: &str) -> bool {
        match self.owner_bank.store().head(&Path::from(path)).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => panic!("{e}"),
        }
    }

    async fn count(&self, prefix: &str) -> usize {
        let v: Vec<_> = self
            .owner_bank
            .store()
            .list(Some(&Path::from(prefix)))
            .try_collect()
            .await
            .unwrap();
        v.len()
    }
}

async fn pass(c: &Collector) -> PassReport {
    c.run_pass().await.unwrap()
}

/// Every deletion of a pass is reported failed although it took effect (the answer was lost):
/// no tombstone may be written, since the data deletion was not seen to succeed, and every
/// marker stays; the next pass resumes every checkpoint and finishes it.
#[tokio::test]
async fn a_data_deletion_not_seen_to_succeed_holds_back_every_tombstone_of_its_batch() {
    let w = world();
    let ids = w.dead_owners(3, 4, 3).await;
    w.failing.set_error_rate(Op::Delete, Strike::After, 1.0);
    let gc = w.collector();
    let first = pass(&gc).await;
    assert_eq!(first.collected, 0, "{first:?}");
    assert!(first.errors >= ids.len() as u64, "{first:?}");
    for id in &ids {
        assert_eq!(
            w.status(id).await,
            Some(Status::Protecting),
            "{id}: no tombstone"
        );
    }
    assert_eq!(
        w.count("index/protecting").await,
        ids.len(),
        "every marker stays"
    );

    w.failing.heal();
    let second = pass(&gc).await;
    assert_eq!(second.collected, ids.len() as u64, "{second:?}");
    assert_eq!(second.errors, 0, "{second:?}");
    for id in &ids {
        assert_eq!(w.status(id).await, Some(Status::Deleted), "{id}");
        assert_eq!(w.count(&format!("checkpoints/{id}/data")).await, 0, "{id}");
    }
    assert_eq!(w.count("index/protecting").await, 0);
}

/// Data deletions refused before they reach the store: the data stays, nothing is tombstoned,
/// and the next pass deletes it and finishes.
#[tokio::test]
async fn a_refused_data_deletion_leaves_its_batch_for_the_next_pass() {
    let w = world();
    let ids = w.dead_owners(2, 3, 2).await;
    w.failing.set_error_rate(Op::Delete, Strike::Before, 1.0);
    let gc = w.collector();
    let first = pass(&gc).await;
    assert_eq!(first.collected, 0, "{first:?}");
    for id in &ids {
        assert_eq!(w.status(id).await, Some(Status::Protecting), "{id}");
        assert_eq!(w.count(&format!("checkpoints/{id}/data")).await, 2, "{id}");
    }
    w.failing.heal();
    let second = pass(&gc).await;
    assert_eq!(second.collected, ids.len() as u64, "{second:?}");
    assert_eq!(
        w.count("checkpoints").await,
        ids.len(),
        "only the tombstones are left"
    );
}

/// More data than one batch, and a checkpoint with more objects than a batch holds for it:
/// everything is deleted, every checkpoint tombstoned, nothing left behind.
#[tokio::test]
async fn batches_larger_than_the_limits_finish_every_checkpoint() {
    let w = world();
    // 12 checkpoints of 100 objects: more than DATA_BATCH in all.
    let ids = w.dead_owners(3, 4, 100).await;
    assert!(ids.len() * 100 > DATA_BATCH);
    // And one checkpoint of an owner of its own with more than LISTED_MAX objects.
    let big = {
        let lease = w.owner("owner-big").await;
        let cp = Checkpoint::create(&lease, &cid("cp-big")).await.unwrap();
        for d in 0..LISTED_MAX + 5 {
            cp.put_data(&format!("d{d:04}"), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        w.clock
            .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
        "cp-big".to_owned()
    };
    let report = pass(&w.collector()).await;
    assert_eq!(report.collected, ids.len() as u64 + 1, "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    for id in ids.iter().chain([&big]) {
        assert_eq!(w.status(id).await, Some(Status::Deleted), "{id}");
        assert_eq!(w.count(&format!("checkpoints/{id}/data")).await, 0, "{id}");
    }
    assert_eq!(w.count("index/protecting").await, 0);
}

/// One object the store refuses to delete (under retention) in a checkpoint whose data spans
/// two batches: that checkpoint is held back — although the first batch, with the rest of its
/// data, succeeded — and its owner's lease is kept; its neighbours in both batches are
/// collected, and the other owner's lease is reaped. Pass after pass, until the object goes.
#[tokio::test]
async fn an_object_that_cannot_be_deleted_holds_back_its_own_checkpoint_only() {
    let w = world();
    // One at a time, in listing order: cp-0-0 .. cp-0-3 with 300 objects each fill the first
    // batch of 1,000 with cp-0-3's first 100; its other 200 go in the second, with owner-1's.
    let mut ids = w.dead_owners(1, 4, 300).await;
    assert_eq!(
        DATA_BATCH, 1000,
        "the layout above assumes batches of 1,000"
    );
    let other = w.owner("owner-other").await;
    Checkpoint::create(&other, &cid("cp-other")).await.unwrap();
    drop(other);
    ids.push("cp-other".to_owned());
    w.clock
        .advance(EXPIRE + MARGIN + GRACE + Duration::from_secs(1));
    w.failing.refuse_deletes_of("checkpoints/cp-0-3/data/d250");

    let gc = w.collector_with(1);
    for round in 0..2 {
        let report = pass(&gc).await;
        assert_eq!(report.errors, 1, "round {round}: {report:?}");
        for id in ids.iter().filter(|id| *id != "cp-0-3") {
            assert_eq!(
                w.status(id).await,
                Some(Status::Deleted),
                "round {round}: {id}"
            );
        }
        assert_eq!(
            w.status("cp-0-3").await,
            Some(Status::Protecting),
            "round {round}"
        );
        assert_eq!(w.count("index/protecting").await, 1, "round {round}");
        assert!(
            w.exists("leases/owner-0").await,
            "round {round}: lease kept"
        );
        assert!(
            !w.exists("leases/owner-other").await,
            "round {round}: lease reaped"
        );
    }
    assert_eq!(
        w.count("checkpoints/cp-0-3/data").await,
        1,
        "only the refused object is left"
    );

    w.failing.heal();
    let report = pass(&gc).await;
    assert_eq!((report.collected, report.errors), (1, 0), "{report:?}");
    assert_eq!(w.status("cp-0-3").await, Some(Status::Deleted));
    assert_eq!(w.count("checkpoints/cp-0-3/data").await, 0);
}
