//! Retiring failed checkpoints past `gc.keep_failed_for`, on every available backend: data
//! first, then records; a pass killed between the two is resumed by the next; what is kept is
//! counted with its bytes; a dry run only names; `never` keeps them.
#![allow(clippy::disallowed_methods)] // tests wait on real time: the store stamps real times

use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Status};
use banklease::clock::SystemClock;
use banklease::paths::{Key, Prefix};
use banklease::{Bank, Checkpoint, CheckpointId, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Action, Collector, GcOptions, PassReport};
use banklease_testkit::backends;
use banklease_testkit::cid;
use banklease_testkit::failing::Strike;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};

const KEEP: Duration = Duration::from_secs(1);

fn options(margin: Duration, keep: Option<Duration>, dry_run: bool) -> GcOptions {
    GcOptions::builder()
        .grace(Duration::from_secs(600))
        .skew_margin(margin)
        .concurrency(4)
        .brake_ratio(1.0)
        .brake_min(1_000_000)
        .dry_run(dry_run)
        .keep_failed_for(keep)
        // A retirement also waits this long after the failure (an owner's late write).
        .late_write_window(Duration::from_millis(500))
        .collector("test-gc".to_owned())
        .build()
}

async fn pass(bank: &Bank, options: GcOptions) -> PassReport {
    Collector::new(bank.clone(), Arc::new(SystemClock), options)
        .run_pass()
        .await
        .unwrap()
}

async fn data(bank: &Bank, id: &CheckpointId) -> Vec<object_store::ObjectMeta> {
    bank.store()
        .list(Some(&Prefix::Data(id).path(bank)))
        .try_collect()
        .await
        .unwrap()
}

async fn exists(bank: &Bank, key: Key) -> bool {
    match bank.store().head(&key.path(bank)).await {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("{e}"),
    }
}

/// A live owner with a failed checkpoint (two data objects, 9 bytes) and an available one.
async fn owner_with_a_failure(bank: &Bank) -> (OwnerLease, CheckpointId, CheckpointId) {
    let windows = LeaseWindows::new(
        Duration::from_millis(100),
        Duration::from_secs(30),
        Duration::from_millis(50),
    )
    .unwrap();
    let lease = OwnerLease::acquire(bank, OwnerId::random(), windows, Arc::new(SystemClock))
        .await
        .unwrap();
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (failed, ok) = (cid(&format!("failed-{tag}")), cid(&format!("ok-{tag}")));
    for (id, outcome) in [(&failed, Status::Error), (&ok, Status::Available)] {
        let cp = Checkpoint::create(&lease, id).await.unwrap();
        cp.put_data("a", PutPayload::from_static(b"four"))
            .await
            .unwrap();
        cp.put_data("b", PutPayload::from_static(b"five!"))
            .await
            .unwrap();
        cp.complete(outcome).await.unwrap();
    }
    (lease, failed, ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_checkpoint_is_retired_data_first_and_a_killed_pass_is_resumed() {
    for backend in backends::backends() {
        let (bank, faults, _guard) =
            backends::faulty_bank(backend, &banklease::clock::MockClock::new()).await;
        let margin = Duration::from_millis(50) + backend.stamp_resolution();
        let (_lease, failed, ok) = owner_with_a_failure(&bank).await;
        assert!(
            exists(&bank, Key::Failed(failed.clone())).await,
            "{backend:?}"
        );
        assert!(!exists(&bank, Key::Failed(ok.clone())).await, "{backend:?}");

        // Young: kept, and counted with its bytes.
        let young = pass(&bank, options(margin, Some(KEEP), false)).await;
        assert_eq!(
            (young.retired, young.failed_kept, young.failed_kept_bytes),
            (0, 1, 9),
            "{backend:?}: {young:?}"
        );

        // Past the setting and the margin however the store's whole-second stamps (moto, RGW)
        // fall: its reading of the clock may lag by as much as the margin again.
        tokio::time::sleep(KEEP + margin * 2 + Duration::from_millis(300)).await;
        // A dry run names it and removes nothing.
        let dry = pass(&bank, options(margin, Some(KEEP), true)).await;
        assert_eq!(dry.retired, 1, "{backend:?}: {dry:?}");
        let named: Vec<_> = dry.named(Action::Retire).collect();
        assert_eq!(named.len(), 1, "{backend:?}: {dry:?}");
        assert_eq!(named[0].checkpoint_id, failed);
        assert!(
            named[0].reason.contains("past gc.keep_failed_for"),
            "{dry:?}"
        );
        assert_eq!(data(&bank, &failed).await.len(), 2, "{backend:?}");

        // Killed between its data and its records: the tombstone's write never lands.
        let index = format!("{failed}/index.json");
        faults.fail_put_to_after(&index, 1, Strike::Before);
        let killed = pass(&bank, options(margin, Some(KEEP), false)).await;
        assert_eq!(killed.errors, 1, "{backend:?}: {killed:?}");
        let record = checkpoint::read_checkpoint(&bank, &failed)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, Status::ErrorDeleting, "{backend:?}");
        assert!(
            data(&bank, &failed).await.is_empty(),
            "data first: {backend:?}"
        );
        assert!(
            exists(&bank, Key::Failed(failed.clone())).await,
            "{backend:?}"
        );

        // The next pass finishes it.
        let resumed = pass(&bank, options(margin, Some(KEEP), false)).await;
        assert_eq!(
            (resumed.retired, resumed.errors),
            (1, 0),
            "{backend:?}: {resumed:?}"
        );
        let record = checkpoint::read_checkpoint(&bank, &failed)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, Status::Deleted, "{backend:?}");
        let removal = record.removal.expect("the trail");
        assert_eq!(
            (removal.by.as_str(), removal.name.as_str(), removal.was),
            ("gc", "test-gc", Status::Error),
            "{backend:?}"
        );
        assert!(removal.pass.is_some(), "{backend:?}");
        assert!(
            !exists(&bank, Key::Failed(failed.clone())).await,
            "{backend:?}"
        );
        // Its owner's decision stays; the available checkpoint is untouched.
        assert!(
            exists(&bank, Key::Decision(failed.clone())).await,
            "{backend:?}"
        );
        let ok_record = checkpoint::read_checkpoint(&bank, &ok)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ok_record.status, Status::Available, "{backend:?}");
        assert_eq!(data(&bank, &ok).await.len(), 2, "{backend:?}");

        let after = pass(&bank, options(margin, Some(KEEP), false)).await;
        assert_eq!(
            (after.retired, after.failed_kept),
            (0, 0),
            "{backend:?}: {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_keeps_failed_checkpoints_and_counts_them() {
    let bank = Bank::open("memory://").unwrap();
    banklease::layout::init(&bank).await.unwrap();
    let (_lease, failed, _ok) = owner_with_a_failure(&bank).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = pass(&bank, options(Duration::from_millis(50), None, false)).await;
    assert_eq!(
        (kept.retired, kept.failed_kept, kept.failed_kept_bytes),
        (0, 1, 9),
        "{kept:?}"
    );
    assert_eq!(data(&bank, &failed).await.len(), 2);
}

/// `gc.max_deletions` bounds what a pass deletes, retirements included: with a limit of 1 and
/// two failed checkpoints due, one is retired and the other kept and named (skipped, over the
/// limit) for the next pass, which retires it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_deletions_bounds_retirements_and_the_next_pass_goes_on() {
    let bank = Bank::open("memory://").unwrap();
    banklease::layout::init(&bank).await.unwrap();
    let (_a, first, _) = owner_with_a_failure(&bank).await;
    let (_b, second, _) = owner_with_a_failure(&bank).await;
    let limited = || {
        let mut o = options(Duration::from_millis(50), Some(KEEP), false);
        o.max_deletions = 1;
        o
    };
    // The bank's first pass on this host: its reading of the store's clock has nothing earlier
    // to be compared with, and no retention ends on it (both are young anyway).
    assert_eq!(pass(&bank, limited()).await.retired, 0);
    tokio::time::sleep(KEEP + Duration::from_millis(300)).await;
    let report = pass(&bank, limited()).await;
    assert_eq!(
        (report.retired, report.failed_kept, report.failed_kept_bytes),
        (1, 1, 9),
        "{report:?}"
    );
    let deferred: Vec<_> = report
        .checkpoints
        .iter()
        .filter(|c| c.action == Action::Skip)
        .collect();
    assert_eq!(deferred.len(), 1, "{report:?}");
    assert!(
        deferred[0].reason.contains("gc.max_deletions"),
        "{report:?}"
    );
    let left = [&first, &second]
        .into_iter()
        .filter(|id| **id == deferred[0].checkpoint_id)
        .count();
    assert_eq!(left, 1, "the skipped one is one of the two: {report:?}");
    assert_eq!(data(&bank, &deferred[0].checkpoint_id).await.len(), 2);

    let report = pass(&bank, limited()).await;
    assert_eq!((report.retired, report.failed_kept), (1, 0), "{report:?}");
    assert!(data(&bank, &first).await.is_empty());
    assert!(data(&bank, &second).await.is_empty());
}
