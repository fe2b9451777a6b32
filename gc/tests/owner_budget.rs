//! Each owner is judged by what it declared: its store client's retry budget and its windows.
//!
//! On a store whose create-if-absent is a check and a write (Swift), only timing keeps an
//! owner's completion of `decisions/<id>` and the GC's collection from both landing: every
//! retry of the owner's write must have landed before the GC's create. How long that takes is
//! the *owner's* client's retry budget, which the collector's configuration does not know. Here
//! the store is the memory store behind a gate that splits the owner's create as Swift does,
//! and holds its write for as long as its client may retry it.

#![allow(clippy::disallowed_methods)] // a real clock: the store stamps real time

use banklease_testkit::cid;
use banklease_testkit::gate;

use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{self, Decider, Status};
use banklease::clock::SystemClock;
use banklease::config::ClientLimits;
use banklease::paths::Prefix;
use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions};
use gate::GateStore;
use object_store::memory::InMemory;
use object_store::ObjectStoreExt;

const MARGIN: Duration = Duration::from_millis(100);
const GRACE: Duration = Duration::from_millis(200);

fn windows() -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_millis(300),
        Duration::from_secs(1),
        Duration::from_millis(100),
    )
    .unwrap()
}

/// A collector configured for a short budget: its own grace is all its configuration asks.
fn options() -> GcOptions {
    GcOptions::builder()
        .grace(GRACE)
        .skew_margin(MARGIN)
        .concurrency(4)
        .max_deletions(0)
        .brake_ratio(1.0)
        .brake_min(1_000_000)
        .dry_run(false)
        .force(false)
        .reap_leases(true)
        .build()
}

#[tokio::test]
async fn the_gc_waits_for_each_owners_declared_retry_budget_before_deciding() {
    let gate = GateStore::new(InMemory::new());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(gate.clone());
    // A Swift bank, as far as the rules go: create-if-absent is timing only.
    let bank = banklease_testkit::made(Bank::from_store(
        Arc::clone(&store),
        "bank",
        "swift://c/bank",
    ));
    // An owner opened as `Bank::open(url)` opens it: the client's default limits, 11m 15s on
    // Swift. It completes its checkpoint while its lease is valid; its write is sent then, and
    // its client is still retrying it (the gate) when the GC judges the owner dead.
    let slow = OwnerLease::acquire(&bank, OwnerId::random(), windows(), Arc::new(SystemClock))
        .await
        .unwrap();
    let cp = Checkpoint::create(&slow, &cid("cp-slow")).await.unwrap();
    // An owner whose client gives up within 2.25 s, and says so.
    let quick_bank = bank.with_declared_limits(ClientLimits {
        request_timeout: Some(Duration::from_secs(1)),
        retry_timeout: Some(Duration::from_secs(1)),
    });
    assert_eq!(quick_bank.retry_budget(), Duration::from_millis(2_250));
    let quick = OwnerLease::acquire(
        &quick_bank,
        OwnerId::random(),
        windows(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    Checkpoint::create(&quick, &cid("cp-quick")).await.unwrap();

    let held = gate.split_next_create("decisions/cp-slow");
    let completing = tokio::spawn(async move { cp.complete(Status::Available).await });
    held.served.await.unwrap();

    // Past both owners' expiry, margin, the collector's grace and the quick owner's rule:
    // 2.25 s + 0.1 % of (1 s − 100 ms + 2.25 s) − 100 ms − 100 ms ≈ 2.05 s of grace.
    tokio::time::sleep(Duration::from_millis(1_000 + 100 + 2_060 + 300)).await;
    let collector = Collector::new(bank.clone(), Arc::new(SystemClock), options());
    let report = collector.run_pass().await.unwrap();
    assert_eq!(
        (report.collected, report.dead, report.in_grace),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(
        checkpoint::read_checkpoint(&bank, &cid("cp-quick"))
            .await
            .unwrap()
            .map(|r| r.status),
        Some(Status::Deleted)
    );
    let waiting = report.waiting.join("\n");
    assert!(
        waiting.contains(&format!("owner `{}`", slow.owner_id()))
            && waiting.contains("11m 15s retry budget"),
        "{report:?}"
    );
    assert!(
        checkpoint::read_decision(&bank, &cid("cp-slow"))
            .await
            .unwrap()
            .is_none(),
        "the gc decided on the slow owner's checkpoint while its write could still land"
    );

    // The owner's write lands: it alone decided.
    held.release.send(()).unwrap();
    completing.await.unwrap().unwrap();
    let decision = checkpoint::read_decision(&bank, &cid("cp-slow"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decision.by, Decider::Owner);
    assert_eq!(
        checkpoint::read_checkpoint(&bank, &cid("cp-slow"))
            .await
            .unwrap()
            .map(|r| r.status),
        Some(Status::Available)
    );
    // Its lease declared the budget; `lease show` and the GC read it from there.
    let (record, _) = banklease::lease::read_lease(&bank, slow.owner_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.retry_budget_ms, Some(675_000));
}

/// An owner whose lease is gone (deleted by Swift's expiry) is judged by the budget its
/// `index.json` declared, from when a pass first saw the lease missing; and a collected
/// checkpoint's late-data sweep waits for its owner's budget when that is longer than the
/// collector's window.
#[tokio::test]
async fn a_gone_lease_is_judged_by_its_checkpoints_declared_budget_and_so_is_the_sweep() {
    let bank = banklease_testkit::made(Bank::from_store(
        Arc::new(InMemory::new()),
        "bank",
        "swift://c/bank",
    ));
    let slow = OwnerLease::acquire(&bank, OwnerId::random(), windows(), Arc::new(SystemClock))
        .await
        .unwrap();
    Checkpoint::create(&slow, &cid("cp-slow")).await.unwrap();
    let quick_bank = bank.with_declared_limits(ClientLimits {
        request_timeout: Some(Duration::from_secs(1)),
        retry_timeout: Some(Duration::from_secs(1)),
    });
    let quick = OwnerLease::acquire(
        &quick_bank,
        OwnerId::random(),
        windows(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let cp = Checkpoint::create(&quick, &cid("cp-quick")).await.unwrap();
    cp.put_data("d", object_store::PutPayload::from_static(b"bytes"))
        .await
        .unwrap();
    for owner in [slow.owner_id(), quick.owner_id()] {
        bank.store().delete(&bank.lease_path(owner)).await.unwrap();
    }
    let options = options()
        .to_builder()
        .late_write_window(Duration::from_secs(1))
        .build();
    let collector = Collector::new(bank.clone(), Arc::new(SystemClock), options);
    // The first pass sees both leases missing.
    let first = collector.run_pass().await.unwrap();
    assert_eq!(first.collected, 0, "{first:?}");
    // 2.25 s + 0.1 % after that the quick owner's writes have all landed; the slow owner's
    // may land for 11m 15s.
    tokio::time::sleep(Duration::from_millis(2_253 + 100 + 200)).await;
    let report = collector.run_pass().await.unwrap();
    assert_eq!(report.collected, 1, "{report:?}");
    assert!(
        report
            .waiting
            .iter()
            .any(|w| w.contains(slow.owner_id().as_str())
                && w.contains("declared 11m 15s retry budget")),
        "{report:?}"
    );
    assert_eq!(
        checkpoint::read_checkpoint(&bank, &cid("cp-slow"))
            .await
            .unwrap()
            .map(|r| r.status),
        Some(Status::Protecting)
    );
    // The sweep marker asks for the quick owner's 2.25 s (and drift), not the collector's 1 s.
    let marker = banklease_gc::pass::sweep::sweep_path(&bank, &cid("cp-quick"));
    let body = bank
        .store()
        .get(&marker)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let record: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(record["late_write_window_ms"], 2_253);
    // A late write of the quick owner's lands after the collection.
    let late = Prefix::Data(&cid("cp-quick")).path(&bank).join("late");
    bank.store()
        .put(&late, object_store::PutPayload::from_static(b"late"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let early = collector.run_pass().await.unwrap();
    assert_eq!(
        early.late_data_swept, 0,
        "past the collector's window only: {early:?}"
    );
    assert!(bank.store().head(&late).await.is_ok());
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let swept = collector.run_pass().await.unwrap();
    assert_eq!(swept.late_data_swept, 1, "{swept:?}");
}
