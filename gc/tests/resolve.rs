//! The set-aside and conditional replacement `checkpoint resolve` repairs with, on every
//! backend: the unreadable bytes are kept before anything is written, and a record that changed
//! since it was kept is never replaced — by If-Match where the store enforces it, by a HEAD just
//! before on Swift (which has no If-Match).

#![allow(clippy::disallowed_methods)] // owners die on the real clock

use banklease::checkpoint::{self, Decider, Decision, Status};
use banklease::clock::SystemClock;
use banklease::collector::{replace_decision, set_aside};
use banklease::paths::Key;
use banklease::{Checkpoint, Error, OwnerId, OwnerLease};
use banklease_gc::operator::resolve::{resolve, Assertion, Resolution};
use banklease_gc::GcOptions;
use banklease_testkit::cid;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};

use banklease_testkit::backends;

#[tokio::test]
async fn an_unreadable_record_is_kept_then_replaced_only_in_the_version_kept() {
    for backend in backends::backends() {
        let (bank, _guard) = backends::plain_bank(backend).await;
        let id = "cp-torn";
        let path = Key::Decision(cid(id)).path(&bank);
        let read = |path: object_store::path::Path| {
            let bank = bank.clone();
            async move {
                let got = bank.store().get(&path).await.unwrap();
                String::from_utf8(got.bytes().await.unwrap().to_vec()).unwrap()
            }
        };
        bank.store().put(&path, "{torn".into()).await.unwrap();
        let decision = Decision {
            format: checkpoint::CHECKPOINT_FORMAT,
            rebuilt: None,
            checkpoint_id: cid(id),
            owner_id: OwnerId::random(),
            by: Decider::Owner,
            outcome: Status::Available,
            token: "restored".into(),
            decided_at: chrono::Utc::now(),
            evidence: None,
        };

        let first = set_aside(&bank, Key::Decision(cid(id)), &cid(id), chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(read(first.kept_at.clone()).await, "{torn", "{backend:?}");
        // Changed after it was kept (another operator): not replaced.
        bank.store()
            .put(&path, "{torn, differently".into())
            .await
            .unwrap();
        let err = replace_decision(&bank, &first, &decision)
            .await
            .expect_err("a record changed since it was kept is not replaced");
        assert!(
            matches!(&err, Error::Corrupt { reason, .. } if reason.contains("changed since it was read")),
            "{backend:?}: {err}"
        );
        assert_eq!(
            read(path.clone()).await,
            "{torn, differently",
            "{backend:?}"
        );

        // Kept again, in the version now there: replaced.
        let second = set_aside(&bank, Key::Decision(cid(id)), &cid(id), chrono::Utc::now())
            .await
            .unwrap();
        replace_decision(&bank, &second, &decision).await.unwrap();
        let now = checkpoint::read_decision(&bank, &cid(id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (now.by, now.outcome, now.token.as_str()),
            (Decider::Owner, Status::Available, "restored"),
            "{backend:?}"
        );
        // Both versions kept, under distinct names.
        let prefix = Key::SetAside("x".into()).path(&bank);
        let prefix =
            object_store::path::Path::from_iter(prefix.parts().take(prefix.parts().count() - 1));
        let kept: Vec<_> = bank
            .store()
            .list(Some(&prefix))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .unwrap();
        assert_eq!(kept.len(), 2, "{backend:?}: {kept:?}");
        assert_eq!(read(second.kept_at.clone()).await, "{torn, differently");
    }
}

/// A short-lived owner on the real clock that never renews: dead past `options()`'s grace
/// after [`DEAD_AFTER`].
async fn owner(bank: &banklease::Bank, id: &str, expire: std::time::Duration) -> OwnerLease {
    let windows = banklease::LeaseWindows::new(
        std::time::Duration::from_millis(300),
        expire,
        std::time::Duration::from_millis(100),
    )
    .unwrap();
    OwnerLease::acquire(
        bank,
        OwnerId::parse(id).unwrap(),
        windows,
        std::sync::Arc::new(SystemClock),
    )
    .await
    .unwrap()
}

/// 1 s expire window + 50 ms margin + 200 ms grace, and slack.
const DEAD_AFTER: std::time::Duration = std::time::Duration::from_millis(1_600);

fn options() -> GcOptions {
    GcOptions::builder()
        .grace(std::time::Duration::from_millis(200))
        .skew_margin(std::time::Duration::from_millis(50))
        .build()
}

fn clock() -> banklease::clock::SharedClock {
    std::sync::Arc::new(SystemClock)
}

/// A live owner's checkpoint whose index.json is torn, and a dead owner's marker left on the
/// same id (a create of it that failed, src/writer.rs): whichever marker a listing shows first,
/// resolve judges neither owner by it. The in-memory store lists in key order, so the dead
/// owner's `aaa-…` marker comes first.
#[tokio::test]
async fn markers_of_two_owners_on_one_id_are_refused_never_judged_by_the_first() {
    let bank = banklease::Bank::open("memory://").unwrap();
    let _dead = owner(&bank, "aaa-dead", std::time::Duration::from_secs(1)).await;
    let live = owner(&bank, "zzz-live", std::time::Duration::from_secs(60)).await;
    Checkpoint::create(&live, &cid("cp-dup")).await.unwrap();
    let dead_marker = Key::marker(&OwnerId::parse("aaa-dead").unwrap(), &cid("cp-dup")).path(&bank);
    bank.store()
        .put(&dead_marker, PutPayload::default())
        .await
        .unwrap();
    let index = Key::Index(cid("cp-dup")).path(&bank);
    bank.store().put(&index, "{torn".into()).await.unwrap();
    tokio::time::sleep(DEAD_AFTER).await;

    let r = resolve(
        &bank,
        &clock(),
        &options(),
        &cid("cp-dup"),
        "test",
        Assertion::None,
    )
    .await
    .unwrap();
    match r {
        Resolution::Refused(why) => {
            assert!(
                why.contains("aaa-dead") && why.contains("zzz-live"),
                "{why}"
            )
        }
        other => panic!("judged by one marker: {other:?}"),
    }
    assert!(checkpoint::read_decision(&bank, &cid("cp-dup"))
        .await
        .unwrap()
        .is_none());
    let got = bank
        .store()
        .get(&index)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&got[..], b"{torn");
}

/// `--as deleted` on an id whose index.json is missing: a live owner that creates the id while
/// resolve judges the dead one (every write of resolve's held 300 ms) keeps its checkpoint —
/// resolve's tombstone is create-if-absent, before the decision is replaced.
#[tokio::test]
async fn a_checkpoint_created_while_resolve_judges_is_never_tombstoned() {
    use banklease_testkit::failing::{FailingStore, Op};
    let inner = banklease::Bank::open("memory://").unwrap();
    let dead = owner(&inner, "dead-x", std::time::Duration::from_secs(1)).await;
    Checkpoint::create(&dead, &cid("cp-reused")).await.unwrap();
    let index = Key::Index(cid("cp-reused")).path(&inner);
    inner.store().delete(&index).await.unwrap();
    let decision = Key::Decision(cid("cp-reused")).path(&inner);
    inner.store().put(&decision, "{torn".into()).await.unwrap();
    tokio::time::sleep(DEAD_AFTER).await;

    let failing = std::sync::Arc::new(
        FailingStore::new(inner.store().clone()).with_sleeping_clock(SystemClock),
    );
    failing.set_latency(Op::Put, std::time::Duration::from_millis(300));
    let bank = inner.with_store(failing.clone());
    let resolving = tokio::spawn(async move {
        resolve(
            &bank,
            &clock(),
            &options(),
            &cid("cp-reused"),
            "test",
            Assertion::Deleted,
        )
        .await
    });
    for _ in 0..200 {
        if failing.calls(Op::Put) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(failing.calls(Op::Put) > 0, "resolve never wrote");
    // While resolve's first write is held: a live owner takes the id.
    let live = owner(&inner, "live-y", std::time::Duration::from_secs(60)).await;
    Checkpoint::create(&live, &cid("cp-reused")).await.unwrap();

    let r = resolving.await.unwrap().unwrap();
    assert!(matches!(r, Resolution::Refused(_)), "{r:?}");
    let now = checkpoint::read_checkpoint(&inner, &cid("cp-reused"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.owner_id.as_str(), now.status),
        ("live-y", Status::Protecting),
        "the live owner's checkpoint"
    );
}

/// An index.json a newer release wrote, no decision, a dead owner: refused before anything is
/// written — no decision for a newer GC to act on.
#[tokio::test]
async fn a_newer_releases_index_is_refused_before_anything_is_written() {
    let bank = banklease::Bank::open("memory://").unwrap();
    let dead = owner(&bank, "dead-n", std::time::Duration::from_secs(1)).await;
    Checkpoint::create(&dead, &cid("cp-newer")).await.unwrap();
    let index = Key::Index(cid("cp-newer")).path(&bank);
    bank.store()
        .put(&index, r#"{"format": 99}"#.into())
        .await
        .unwrap();
    tokio::time::sleep(DEAD_AFTER).await;
    let r = resolve(
        &bank,
        &clock(),
        &options(),
        &cid("cp-newer"),
        "test",
        Assertion::None,
    )
    .await
    .unwrap();
    match r {
        Resolution::Refused(why) => assert!(why.contains("upgrade banklease"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(checkpoint::read_decision(&bank, &cid("cp-newer"))
        .await
        .unwrap()
        .is_none());
}

/// What `checkpoint resolve` may replace is exactly what the GC will not read, for `index.json`
/// and decisions alike: torn, naming another checkpoint, larger than any record banklease
/// writes. A record the GC reads is never replaced ("it reads now"); one it cannot read was
/// refused as readable by resolve, stuck between the two.
#[tokio::test]
async fn resolve_calls_unreadable_exactly_what_the_gc_will_not_read() {
    use banklease::checkpoint::{CheckpointRecord, MAX_META_BYTES};
    let bank = banklease::Bank::open("memory://").unwrap();
    let owner = OwnerId::parse("owner-r").unwrap();
    let now = chrono::Utc::now();
    let index = |id: &str| {
        serde_json::to_vec(&CheckpointRecord::new(
            &cid(id),
            &owner,
            Status::Protecting,
            now,
        ))
    };
    let decision = |id: &str| serde_json::to_vec(&Decision::collect(&cid(id), &owner, now, None));
    // Valid JSON still: whitespace after the record.
    let padded = |mut body: Vec<u8>| {
        body.resize(MAX_META_BYTES as usize + 1, b' ');
        body
    };
    let id = "cp-1";
    let cases = [
        ("its own", index(id).unwrap(), decision(id).unwrap(), true),
        ("torn", b"{torn".to_vec(), b"{torn".to_vec(), false),
        (
            "another checkpoint's",
            index("cp-2").unwrap(),
            decision("cp-2").unwrap(),
            false,
        ),
        (
            "over 64 KiB",
            padded(index(id).unwrap()),
            padded(decision(id).unwrap()),
            false,
        ),
    ];
    for (what, index_body, decision_body, reads) in cases {
        let (index_key, decision_key) = (Key::Index(cid(id)), Key::Decision(cid(id)));
        let store = bank.store();
        store
            .put(&index_key.path(&bank), index_body.into())
            .await
            .unwrap();
        store
            .put(&decision_key.path(&bank), decision_body.into())
            .await
            .unwrap();
        let gc = [
            checkpoint::read_checkpoint(&bank, &cid(id)).await.map(drop),
            checkpoint::read_decision(&bank, &cid(id)).await.map(drop),
        ];
        for (key, gc) in [index_key, decision_key].into_iter().zip(gc) {
            let resolve = banklease::collector::check_replaceable(&bank, &key).await;
            assert!(
                gc.as_ref()
                    .map_or_else(|e| matches!(e, Error::Corrupt { .. }), |_| true),
                "{what} {key:?}: {gc:?}"
            );
            assert_eq!(
                gc.is_ok(),
                reads,
                "{what} {key:?}: the gc's reading: {gc:?}"
            );
            assert_eq!(
                resolve.is_err(),
                reads,
                "{what} {key:?}: resolve's reading must be the gc's: {resolve:?}"
            );
        }
    }
}

/// `checkpoint resolve` judges an owner as a pass does, so it holds the skew margin to the
/// store's stamp resolution as a pass does: on a store that stamps whole seconds (S3, Swift's
/// Last-Modified) a 50 ms margin is refused before anything is judged or written.
#[tokio::test]
async fn resolve_refuses_a_margin_below_the_stores_stamp_resolution() {
    use banklease::clock::MockClock;
    use banklease_testkit::sim_store::{SimStore, StoreClock};
    use std::sync::Arc;
    use std::time::Duration;
    // The mock clock's wall time starts on a whole second and is not advanced: every stamp is
    // a whole second.
    let world = MockClock::new();
    let store = SimStore::new(StoreClock::new(world.clone()));
    let bank = banklease_testkit::made(banklease::Bank::from_store(
        Arc::new(store),
        "",
        "whole-seconds://",
    ));
    let windows = banklease::LeaseWindows::new(
        Duration::from_millis(100),
        Duration::from_millis(400),
        Duration::from_millis(50),
    )
    .unwrap();
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(world.clone()))
        .await
        .unwrap();
    Checkpoint::create(&lease, &cid("cp-torn")).await.unwrap();
    let index = Key::Index(cid("cp-torn")).path(&bank);
    bank.store().put(&index, "{torn".into()).await.unwrap();
    let options = GcOptions::builder()
        .grace(Duration::from_millis(200))
        .skew_margin(Duration::from_millis(50))
        .build();
    let clock: banklease::clock::SharedClock = Arc::new(world);
    let err = resolve(
        &bank,
        &clock,
        &options,
        &cid("cp-torn"),
        "op",
        Assertion::None,
    )
    .await
    .expect_err("a margin below the stamp resolution is refused");
    let msg = banklease::error::error_chain(&err);
    assert!(msg.contains("lease.skew_margin=`50ms`"), "{msg}");
    assert!(msg.contains("resolution=`1s`"), "{msg}");
    let got = bank.store().get(&index).await.unwrap();
    assert_eq!(
        &got.bytes().await.unwrap()[..],
        b"{torn",
        "nothing was replaced"
    );
    assert!(bank
        .store()
        .head(&Key::Decision(cid("cp-torn")).path(&bank))
        .await
        .is_err());
}
