//! The owner lease protocol on memory and file banks, under a controlled clock and injected
//! faults.
#![allow(clippy::disallowed_methods)] // tests may wait on real time

use std::sync::Arc;
use std::time::Duration;

use banklease::capability::RenewalMechanism;
use banklease::clock::{Clock, Jitter, MockClock, SystemClock};
use banklease::{
    Bank, Error, LeaseObserver, LeaseState, LeaseView, LeaseWindows, OwnerId, OwnerLease,
};
use banklease_testkit::backends::{
    each_backend, each_backend_where, each_plain_backend, Backend, Faults,
};
use banklease_testkit::failing::{Op, Strike};
use object_store::{ObjectStoreExt, PutPayload};

/// Why the fault suites skip Swift: its lease layer talks to the Swift store directly
/// (X-Delete-After, POST), below the `FailingStore`.
const UNREACHED: &str = "injected faults do not reach its lease writes";

fn windows() -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_secs(5),
    )
    .unwrap()
}

fn owner(name: &str) -> OwnerId {
    OwnerId::parse(name).unwrap()
}

async fn acquire(b: &Bank, clock: &MockClock, name: &str) -> OwnerLease {
    OwnerLease::acquire(b, owner(name), windows(), Arc::new(clock.clone()))
        .await
        .unwrap()
}

#[tokio::test]
async fn mechanism_follows_the_store() {
    each_backend(async |backend, b, _, clock| {
        let expected = match backend {
            // Local files: atomic If-Match through `banklease::local`; RGW through the unquoted
            // form its probe found.
            Backend::Memory | Backend::File | Backend::S3 | Backend::Azure | Backend::Rgw => {
                RenewalMechanism::ConditionalUpdate
            }
            Backend::Swift | Backend::Keystone => RenewalMechanism::SwiftPut,
        };
        assert_eq!(acquire(&b, &clock, "o1").await.mechanism(), expected);
    })
    .await;
}

#[tokio::test]
async fn acquire_twice_fails() {
    each_backend(async |backend, b, _, clock| {
        let _first = acquire(&b, &clock, "o1").await;
        let err = OwnerLease::acquire(&b, owner("o1"), windows(), Arc::new(clock.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::LeaseExists { .. }),
            "{backend:?}: {err}"
        );
        // A different owner is unaffected.
        acquire(&b, &clock, "o2").await;
    })
    .await;
}

#[tokio::test]
async fn renew_extends_from_send_time_and_generation_grows() {
    each_backend(async |backend, b, _, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        assert_eq!(lease.remaining(), Duration::from_secs(30));
        clock.advance(Duration::from_secs(10));
        assert_eq!(lease.remaining(), Duration::from_secs(20));
        lease.renew().await.unwrap();
        assert_eq!(lease.remaining(), Duration::from_secs(30));
        let (record, _) = banklease::lease::read_lease(&b, lease.owner_id())
            .await
            .unwrap()
            .unwrap();
        // Every backend rewrites the body on renewal (on Swift: HEAD + PUT).
        assert_eq!(record.generation, 2, "{backend:?}");
        assert_eq!(record.expire_window(), Duration::from_secs(30));
    })
    .await;
}

#[tokio::test]
async fn slow_request_shortens_validity() {
    each_backend_where(
        Backend::faults_reach_lease_writes,
        UNREACHED,
        async |backend, b, store, clock| {
            // Probe the capabilities first, so the latency applies to lease writes only.
            b.capabilities().await.unwrap();
            store.set_latency(Op::Put, Duration::from_secs(4));
            let lease = acquire(&b, &clock, "o1").await;
            // Sent at t0, answered at t0+4: valid until t0+30, so 26 s are left, not 30.
            assert_eq!(lease.remaining(), Duration::from_secs(26), "{backend:?}");
            lease.renew().await.unwrap();
            assert_eq!(lease.remaining(), Duration::from_secs(26), "{backend:?}");
            // A write slower than the whole expire window never counts.
            store.set_latency(Op::Put, Duration::from_secs(31));
            let err = lease.renew().await.unwrap_err();
            assert!(matches!(err, Error::LeaseLost { .. }), "{backend:?}: {err}");
            assert!(!lease.check_validity());
        },
    )
    .await;
}

#[tokio::test]
async fn check_validity_makes_no_request_and_respects_the_window() {
    each_backend(async |_, b, store, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        let before: u64 = [Op::Put, Op::Get, Op::Head, Op::Delete, Op::List]
            .iter()
            .map(|op| store.calls(*op))
            .sum();
        assert!(lease.check_validity());
        clock.advance(Duration::from_secs(25));
        assert!(lease.check_validity(), "exactly 5 s left = validity_window");
        clock.advance(Duration::from_millis(1));
        assert!(!lease.check_validity());
        assert!(matches!(
            lease.ensure_valid(),
            Err(Error::ValidityTooShort { .. })
        ));
        let after: u64 = [Op::Put, Op::Get, Op::Head, Op::Delete, Op::List]
            .iter()
            .map(|op| store.calls(*op))
            .sum();
        assert_eq!(before, after, "check_validity made requests");
    })
    .await;
}

#[tokio::test]
async fn renew_after_replacement_is_lost() {
    each_backend(async |backend, b, _, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        // Someone else writes the same key (a duplicate owner, an operator).
        let (mut record, _) = banklease::lease::read_lease(&b, lease.owner_id())
            .await
            .unwrap()
            .unwrap();
        record.token = "someone-else".into();
        record.generation = 99;
        b.store()
            .put(
                &b.lease_path(lease.owner_id()),
                PutPayload::from(serde_json::to_vec(&record).unwrap()),
            )
            .await
            .unwrap();
        let err = lease.renew().await.unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{backend:?}: {err}");
        assert!(!lease.check_validity());
        assert!(matches!(lease.state(), LeaseState::Lost { .. }));
        // Lost is final: another renew does not even try.
        assert!(matches!(
            lease.renew().await.unwrap_err(),
            Error::LeaseLost { .. }
        ));
        // The other writer's object is untouched.
        let (now, _) = banklease::lease::read_lease(&b, lease.owner_id())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now.token, "someone-else");
        // Releasing a lost lease leaves the other writer's object alone.
        lease.release().await.unwrap();
        assert!(b
            .store()
            .head(&b.lease_path(lease.owner_id()))
            .await
            .is_ok());
    })
    .await;
}

/// A replica that lags answers a renewal's read-back with an earlier write of the owner's own:
/// that says nothing of the object now, so the owner neither loses its lease nor writes on
/// it; it tries again. Before, such an answer read as "replaced by another writer" and a live
/// owner stopped on any store whose reads lag (found by the simulation's stale reads).
#[tokio::test]
async fn a_lagging_replica_showing_an_earlier_write_of_ours_does_not_lose_the_lease() {
    use banklease_testkit::sim_store::{SimStore, StoreClock};
    for conditional in [false, true] {
        let clock = MockClock::new();
        let sim = SimStore::new(StoreClock::new(clock.clone()));
        // Without If-Match the renewal verifies with a HEAD, then overwrites.
        sim.refuse_conditional_update(!conditional);
        let b = Bank::from_store(Arc::new(sim.clone()), "bank", "sim://bank");
        banklease::layout::init(&b).await.unwrap();
        let lease = acquire(&b, &clock, "o1").await;
        // Every read is answered as of an instant up to 15 s back: one renew window and a
        // half, so an answer is our last write or the one before it, never the absence.
        sim.set_stale_reads(Duration::from_secs(15), 1.0, 7);
        let (mut renewed, mut lagging) = (0, 0);
        for round in 0..20 {
            clock.advance(Duration::from_secs(5));
            match lease.renew().await {
                Ok(_) => renewed += 1,
                Err(e) => {
                    assert!(
                        !matches!(e, Error::LeaseLost { .. }),
                        "conditional={conditional} round {round}: {e}"
                    );
                    assert!(e.to_string().contains("earlier write"), "{e}");
                    lagging += 1;
                }
            }
            assert!(
                lease.check_validity(),
                "conditional={conditional} round {round}"
            );
        }
        // Renewals got through; verifying by a HEAD, the seed's answers included earlier writes
        // (with If-Match the renewal reads nothing, and nothing lags).
        assert!(
            renewed > 0 && (conditional || lagging > 0),
            "conditional={conditional} renewed={renewed} lagging={lagging}"
        );
        // The object is the owner's last write, never another's.
        sim.set_stale_reads(Duration::ZERO, 0.0, 0);
        let (record, _) = banklease::lease::read_lease(&b, lease.owner_id())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.generation, 1 + renewed as u64);
    }
}

#[tokio::test]
async fn renew_after_delete_is_lost_and_does_not_recreate() {
    each_backend(async |backend, b, _, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        let path = b.lease_path(lease.owner_id());
        b.store().delete(&path).await.unwrap();
        let err = lease.renew().await.unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{backend:?}: {err}");
        assert!(
            matches!(
                b.store().head(&path).await,
                Err(object_store::Error::NotFound { .. })
            ),
            "{backend:?}: the lease was re-created"
        );
    })
    .await;
}

#[tokio::test]
async fn validity_running_out_is_lost_even_if_the_object_is_intact() {
    each_backend(async |_, b, _, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        clock.advance(Duration::from_secs(30));
        assert!(matches!(lease.state(), LeaseState::Lost { .. }));
        assert!(matches!(
            lease.renew().await.unwrap_err(),
            Error::LeaseLost { .. }
        ));
    })
    .await;
}

#[tokio::test]
async fn ambiguous_acquire_is_resolved_by_reading_back() {
    each_backend_where(
        Backend::faults_reach_lease_writes,
        UNREACHED,
        async |backend, b, store, clock| {
            b.capabilities().await.unwrap();
            // The create lands, but the caller sees an error; the retry then gets AlreadyExists.
            store.fail_next(Op::Put, Strike::After, 1);
            let lease = acquire(&b, &clock, "o1").await;
            assert!(lease.check_validity(), "{backend:?}");
            lease.renew().await.unwrap();
        },
    )
    .await;
}

#[tokio::test]
async fn renewal_whose_answer_was_lost_is_adopted_not_lost() {
    each_backend_where(
        Backend::faults_reach_lease_writes,
        UNREACHED,
        async |backend, b, store, clock| {
            let lease = acquire(&b, &clock, "o1").await;
            clock.advance(Duration::from_secs(10));
            // The write lands, its answer is lost, and so is the read-back that would tell.
            store.fail_next(Op::Put, Strike::After, 1);
            store.fail_next(Op::Get, Strike::Before, 1);
            let err = lease.renew().await.unwrap_err();
            assert!(
                !matches!(err, Error::LeaseLost { .. }),
                "{backend:?}: {err}"
            );
            // Not renewed as far as the owner knows: validity still counts from the acquire.
            assert_eq!(lease.remaining(), Duration::from_secs(20));
            clock.advance(Duration::from_secs(1));
            // The next attempt finds our own landed write and adopts it, then carries on.
            lease.renew().await.unwrap();
            assert!(lease.check_validity());
            lease.renew().await.unwrap();
            let (record, _) = banklease::lease::read_lease(&b, lease.owner_id())
                .await
                .unwrap()
                .unwrap();
            assert!(record.generation >= 3, "{backend:?}: {record:?}");
            // Answer lost, read-back answered: recognised as ours at once, counted from its send.
            clock.advance(Duration::from_secs(2));
            store.fail_next(Op::Put, Strike::After, 1);
            lease.renew().await.unwrap();
            assert_eq!(lease.remaining(), Duration::from_secs(30), "{backend:?}");
        },
    )
    .await;
}

#[tokio::test]
async fn release_deletes_and_is_final() {
    each_backend(async |_, b, _, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        lease.release().await.unwrap();
        assert_eq!(lease.state(), LeaseState::Released);
        assert!(!lease.check_validity());
        assert!(b
            .store()
            .head(&b.lease_path(lease.owner_id()))
            .await
            .is_err());
        assert!(lease.renew().await.is_err());
        lease.release().await.unwrap();
    })
    .await;
}

async fn wait_for_lost(rx: &mut tokio::sync::watch::Receiver<LeaseState>) {
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|s| matches!(s, LeaseState::Lost { .. })),
    )
    .await
    .expect("keeper reported Lost")
    .unwrap();
}

/// Advance the mock clock in small steps, letting the keeper run between them, and never while
/// a request is in flight: a real server's latency (seconds, through a loaded Keystone) would
/// otherwise pass as mock time and stretch the keeper's cadence or expire its lease.
async fn advance(
    backend: Backend,
    clock: &MockClock,
    (b, store): (&Bank, &Faults),
    total: Duration,
    step: Duration,
) {
    let pause = match backend {
        Backend::Memory | Backend::File => Duration::from_millis(1),
        Backend::Swift | Backend::S3 | Backend::Azure | Backend::Rgw | Backend::Keystone => {
            Duration::from_millis(20)
        }
    };
    let mut done = Duration::ZERO;
    while done < total {
        clock.advance(step);
        done += step;
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(pause).await;
        let waited = std::time::Instant::now();
        // The Swift renewal's HEAD and PUT go to the Swift client directly, past the faults.
        while store.in_flight() + b.swift().map_or(0, |s| s.in_flight()) > 0 {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "{backend:?}: a request has been in flight for 60 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test]
async fn keeper_renews_and_reports_loss_within_one_renew_window() {
    each_backend(async |backend, b, store, clock| {
        let lease = acquire(&b, &clock, "o1").await;
        let keeper = lease.spawn_keeper(Jitter::seeded(1), 0.1);
        let mut rx = keeper.state();
        // Run well past the expire window: the keeper keeps the lease.
        advance(
            backend,
            &clock,
            (&b, &store),
            Duration::from_secs(95),
            Duration::from_millis(500),
        )
        .await;
        assert!(lease.check_validity(), "{backend:?}: {:?}", lease.state());
        let (record, _) = banklease::lease::read_lease(&b, lease.owner_id())
            .await
            .unwrap()
            .unwrap();
        assert!(record.generation >= 9, "{backend:?}: {record:?}");
        // Now the lease object disappears (an operator, or a GC that judged it dead).
        b.store()
            .delete(&b.lease_path(lease.owner_id()))
            .await
            .unwrap();
        advance(
            backend,
            &clock,
            (&b, &store),
            Duration::from_secs(10),
            Duration::from_millis(500),
        )
        .await;
        wait_for_lost(&mut rx).await;
        assert!(!lease.check_validity());
        keeper.stop().await;
    })
    .await;
}

#[tokio::test]
async fn keeper_retries_through_a_short_partition_and_loses_a_long_one() {
    each_backend_where(
        Backend::faults_reach_lease_writes,
        UNREACHED,
        async |backend, b, store, clock| {
            let lease = acquire(&b, &clock, "o1").await;
            let keeper = lease.spawn_keeper(Jitter::seeded(2), 0.1);
            let mut rx = keeper.state();
            store.set_partitioned(true);
            advance(
                backend,
                &clock,
                (&b, &store),
                Duration::from_secs(15),
                Duration::from_millis(250),
            )
            .await;
            store.set_partitioned(false);
            advance(
                backend,
                &clock,
                (&b, &store),
                Duration::from_secs(5),
                Duration::from_millis(250),
            )
            .await;
            assert!(lease.check_validity(), "{backend:?}: {:?}", lease.state());
            store.set_partitioned(true);
            advance(
                backend,
                &clock,
                (&b, &store),
                Duration::from_secs(31),
                Duration::from_millis(250),
            )
            .await;
            wait_for_lost(&mut rx).await;
            // Healing the partition does not bring a lost lease back.
            store.set_partitioned(false);
            advance(
                backend,
                &clock,
                (&b, &store),
                Duration::from_secs(20),
                Duration::from_millis(500),
            )
            .await;
            assert!(matches!(lease.state(), LeaseState::Lost { .. }));
            keeper.stop().await;
        },
    )
    .await;
}

#[tokio::test]
async fn keeper_release_deletes_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let b =
        banklease_testkit::made(Bank::open(&format!("file://{}", dir.path().display())).unwrap());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let w = LeaseWindows::new(
        Duration::from_millis(100),
        Duration::from_millis(400),
        Duration::from_millis(50),
    )
    .unwrap();
    let lease = OwnerLease::acquire(&b, OwnerId::random(), w, clock)
        .await
        .unwrap();
    let keeper = lease.spawn_keeper(Jitter::seeded(3), 0.1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(lease.check_validity());
    keeper.release().await.unwrap();
    assert!(!dir
        .path()
        .join("leases")
        .join(lease.owner_id().as_str())
        .exists());
}

#[tokio::test]
async fn capability_probe_refuses_a_store_that_ignores_create_if_absent() {
    let clock = MockClock::new();
    let memory = Backend::Memory.open().await;
    let (b, store) = memory.with_faults(&clock);
    store.set_ignore_conditions(true);
    let err = OwnerLease::acquire(&b, owner("o1"), windows(), Arc::new(clock.clone()))
        .await
        .unwrap_err();
    match err {
        Error::Unsupported { detail, .. } => assert!(detail.contains("ignored"), "{detail}"),
        e => panic!("{e}"),
    }
}

/// Windows, skew margin and a wait past expiry for real-time tests on `backend`. S3 servers
/// and Azure stamp `last_modified` in whole seconds, so the margin must cover a second there.
fn real_time(backend: Backend) -> (LeaseWindows, Duration, Duration) {
    let resolution = backend.stamp_resolution();
    let windows = LeaseWindows::new(
        Duration::from_millis(100),
        Duration::from_millis(300),
        Duration::from_millis(50),
    )
    .unwrap();
    let margin = Duration::from_millis(50) + resolution;
    let past_expiry = Duration::from_millis(500) + 2 * resolution;
    (windows, margin, past_expiry)
}

#[tokio::test]
async fn observer_judges_on_the_store_clock() {
    each_plain_backend(async |backend, b| {
        // The store stamps real `last_modified` times: expiry on its clock needs real time.
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (w, margin, past_expiry) = real_time(backend);
        let observer = LeaseObserver::new(b.clone(), clock.clone(), margin);
        let lease = OwnerLease::acquire(&b, OwnerId::random(), w, clock.clone())
            .await
            .unwrap();
        let t = observer.store_time().await.unwrap();
        match observer.view(lease.owner_id(), &t).await {
            LeaseView::Alive { remaining, .. } => {
                assert!(remaining <= Duration::from_millis(300), "{remaining:?}")
            }
            v => panic!("{backend:?}: {v:?}"),
        }
        tokio::time::sleep(past_expiry).await;
        let t = observer.store_time().await.unwrap();
        assert!(
            matches!(
                observer.view(lease.owner_id(), &t).await,
                LeaseView::Expired { .. }
            ),
            "{backend:?}"
        );
        assert_eq!(
            observer.view(&OwnerId::random(), &t).await,
            LeaseView::Missing
        );
        // Garbage in the lease object: unreadable, never expired.
        let bad = OwnerId::random();
        b.store()
            .put(&b.lease_path(&bad), PutPayload::from_static(b"{not json"))
            .await
            .unwrap();
        assert!(matches!(
            observer.view(&bad, &t).await,
            LeaseView::Unreadable { .. }
        ));
    })
    .await;
}

#[tokio::test]
async fn take_over_only_an_expired_lease_and_only_once_on_atomic_stores() {
    each_plain_backend(async |backend, b| {
        // The store stamps real `last_modified` times: expiry on its clock needs real time.
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (w, margin, past_expiry) = real_time(backend);
        let path = b.path(&["gc", "active"]);
        let first =
            OwnerLease::take_over_at(&b, path.clone(), owner("gc-a"), w, clock.clone(), margin)
                .await
                .unwrap();
        // Alive: nobody takes it over.
        let err =
            OwnerLease::take_over_at(&b, path.clone(), owner("gc-b"), w, clock.clone(), margin)
                .await
                .unwrap_err();
        assert!(
            matches!(err, Error::LeaseExists { .. }),
            "{backend:?}: {err}"
        );
        // The holder dies (no renewals); after expiry + margin a standby takes over.
        tokio::time::sleep(past_expiry).await;
        let (b1, b2) = tokio::join!(
            OwnerLease::take_over_at(&b, path.clone(), owner("gc-b"), w, clock.clone(), margin),
            OwnerLease::take_over_at(&b, path.clone(), owner("gc-c"), w, clock.clone(), margin),
        );
        let winners = [&b1, &b2].iter().filter(|r| r.is_ok()).count();
        match backend {
            // If-Match takeover (atomic on files too, `banklease::local`, and on RGW, which
            // doctor races): exactly one of two racing standbys wins.
            Backend::Memory | Backend::File | Backend::Azure | Backend::Rgw => {
                assert_eq!(winners, 1, "{b1:?} {b2:?}")
            }
            // Delete-then-create (Swift): at least one wins; a second learns it lost at
            // renewal. moto checks If-Match and writes without a lock between, so it too can
            // (rarely) let both through: `banklease doctor` measures this per bank.
            Backend::Swift | Backend::S3 | Backend::Keystone => {
                assert!(winners >= 1, "{b1:?} {b2:?}")
            }
        }
        // The old holder is lost for good.
        assert!(first.renew().await.is_err());
    })
    .await;
}

/// A renewal that hangs past the validity (a paused server) is abandoned: the keeper publishes
/// Lost when the validity runs out, not when the request finally returns, and the late write
/// never lands. On a real clock; the store's writes take 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeper_reports_lost_on_time_while_a_renewal_hangs() {
    for backend in [Backend::Memory, Backend::File] {
        let fresh = backend.open().await;
        let plain = fresh.bank.clone();
        let failing = banklease_testkit::failing::FailingStore::new(Arc::clone(plain.store()))
            .with_sleeping_clock(SystemClock);
        let b = plain.with_store(Arc::new(failing.clone()));
        let short = LeaseWindows::new(
            Duration::from_millis(200),
            Duration::from_millis(800),
            Duration::from_millis(100),
        )
        .unwrap();
        let lease = OwnerLease::acquire(&b, owner("o1"), short, Arc::new(SystemClock))
            .await
            .unwrap();
        let written = b.store().head(&b.lease_path(&owner("o1"))).await.unwrap();
        failing.set_latency(Op::Put, Duration::from_secs(30));
        let keeper = lease.spawn_keeper(Jitter::seeded(4), 0.0);
        let mut rx = keeper.state();
        let started = std::time::Instant::now();
        wait_for_lost(&mut rx).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{backend:?}: Lost published when the validity ran out, not after the request"
        );
        assert!(!lease.check_validity(), "{backend:?}");
        // The abandoned write was dropped with its future: the object is as acquired.
        let now = plain
            .store()
            .head(&b.lease_path(&owner("o1")))
            .await
            .unwrap();
        assert_eq!(now.e_tag, written.e_tag, "{backend:?}: no write after Lost");
        drop(keeper);
    }
}

/// Swift: renewals send `X-Delete-At` on a grid, so most of them leave the object server's
/// expirer queue alone (each change of the value updates it), and never earlier than
/// `X-Delete-After` would have: the expire window plus `SWIFT_TTL_SLACK` after the write.
#[tokio::test]
async fn swift_renewals_share_a_delete_at_and_never_shorten_it() {
    if !Backend::Swift.available() {
        return;
    }
    let fresh = Backend::Swift.open().await;
    let b = fresh.bank.clone();
    let w = LeaseWindows::new(
        Duration::from_millis(500),
        Duration::from_secs(3),
        Duration::from_millis(200),
    )
    .unwrap();
    let lease = OwnerLease::acquire(&b, OwnerId::random(), w, Arc::new(SystemClock))
        .await
        .unwrap();
    let swift = b.swift().unwrap().clone();
    let path = b.lease_path(lease.owner_id());
    let mut seen = std::collections::BTreeSet::new();
    let renewals = 8;
    for _ in 0..renewals {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        lease.renew().await.unwrap();
        let head = swift.head_swift(&path).await.unwrap();
        let delete_at = head.delete_at.expect("a lease object carries X-Delete-At");
        let written = head.x_timestamp.unwrap();
        let needed = w.expire_window + banklease::lease::SWIFT_TTL_SLACK;
        assert!(
            delete_at - written >= chrono::Duration::from_std(needed).unwrap(),
            "X-Delete-At {delete_at} only {} after the write at {written}",
            delete_at - written
        );
        seen.insert(delete_at);
    }
    // 8 renewals over ~9 s cross at most one 60 s grid line; with X-Delete-After each one
    // would have sent its own value.
    assert!(
        seen.len() <= 2,
        "{} distinct X-Delete-At in {renewals} renewals: {seen:?}",
        seen.len()
    );
    lease.release().await.unwrap();
}

/// A bank made before descriptors (a lease in it, no `banklease.json`) is refused by readers
/// and writers alike, naming `banklease init` — its names are no proof that it is a bank (a
/// user's `index` or `gc/` look the same) — and `init` adopts it, once, without touching what
/// is in it.
#[tokio::test]
async fn a_bank_made_before_descriptors_is_refused_until_init_adopts_it() {
    let dir = tempfile::tempdir().unwrap();
    let b =
        banklease_testkit::made(Bank::open(&format!("file://{}", dir.path().display())).unwrap());
    let clock: banklease::clock::SharedClock = Arc::new(SystemClock);
    let first = OwnerLease::acquire(&b, owner("legacy-1"), windows(), clock.clone())
        .await
        .unwrap();
    let descriptor = dir.path().join("banklease.json");
    std::fs::remove_file(&descriptor).unwrap();
    for refused in [
        banklease::layout::check(&b.reading_only()).await,
        OwnerLease::acquire(&b, owner("legacy-2"), windows(), clock.clone())
            .await
            .map(drop),
    ] {
        let err = refused.unwrap_err();
        assert!(
            matches!(err, banklease::Error::NoDescriptor { .. }),
            "{err}"
        );
        assert!(err.to_string().contains(" init`"), "{err}");
    }
    assert!(
        !descriptor.exists(),
        "a refused command wrote the descriptor"
    );
    assert_eq!(
        banklease::layout::init(&b).await.unwrap(),
        banklease::layout::Initialised::Adopted
    );
    let second = OwnerLease::acquire(&b, owner("legacy-2"), windows(), clock)
        .await
        .unwrap();
    first.release().await.unwrap();
    second.release().await.unwrap();
    banklease::layout::check(&b).await.unwrap();
}
