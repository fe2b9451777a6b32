//! Named leases and locks (`banklease::lock`): every semantic, on `memory://`, on `file:` banks
//! and — with `BANKLEASE_TEST_S3=1` and the variables `.ci/start-s3.sh` prints (`AWS_ENDPOINT`,
//! `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `S3_BUCKET`) — on
//! S3 (moto); the refusal on stores that ignore or refuse conditions; and the CLI.
//!
//! Holder-side time runs on a `MockClock` where a test needs it frozen or stepped (a "paused"
//! holder, slow requests); expiry on the store's clock needs real time, so those tests use short
//! durations on the system clock and poll until the store says the lock has expired.
#![allow(clippy::disallowed_methods)] // real time: expiry is judged on the store's clock

use banklease_testkit::gate;

use std::path::{Path as FsPath, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use banklease::clock::{Clock, Jitter, MockClock, SharedClock, SystemClock};
use banklease::lock::fence::fence_path;
use banklease::lock::fence::guarded_put;
use banklease::lock::fence::Fence;
use banklease::lock::{
    Blocking, LockHolder, LockState, Locks, Order, Release, Term, Wait, MAX_PAYLOAD_BYTES,
};
use banklease::{Bank, Error};
use banklease_testkit::backends::{Backend, TestBank};
use banklease_testkit::failing::{FailingStore, Op, Strike};
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};

// ---- environments ----------------------------------------------------------------------------

/// A bank under test, with durations fit for its store.
#[derive(Clone)]
struct Env {
    bank: Bank,
    /// A lock duration short enough to wait out.
    short: Duration,
    /// The skew margin: must cover the store's timestamp resolution (1 s on S3).
    margin: Duration,
    /// Queue ticket lease for waiters.
    ticket_lease: Duration,
    /// The store's `last_modified` resolution (S3: whole seconds).
    resolution: Duration,
    /// The fresh bank (a `file:` bank's directory is removed when the last clone goes).
    _bank: TestBank,
}

/// S3 tests run one at a time. moto checks a conditional write and then performs it without a
/// lock (a check-then-act race in its threaded server), so under the load of many concurrent
/// tests the capability probe can catch two winners of one race — and then, rightly, refuses
/// the bank. One test at a time keeps moto's window closed in practice.
fn s3_serial() -> &'static tokio::sync::Mutex<()> {
    static SERIAL: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    SERIAL.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// On S3, hold [`s3_serial`] for the test; elsewhere nothing.
async fn one_at_a_time(backend: Backend) -> Option<tokio::sync::MutexGuard<'static, ()>> {
    match backend {
        Backend::S3 => Some(s3_serial().lock().await),
        _ => None,
    }
}

fn sys() -> SharedClock {
    Arc::new(SystemClock)
}

impl Env {
    /// A fresh bank on `backend` (under `lock-tests/` on the servers), or `None` (after saying
    /// so) when `backend` is not configured. On `file:` conditional overwrites are atomic
    /// (`banklease::local`).
    async fn on(backend: Backend) -> Option<Env> {
        if !backend.available() {
            return None;
        }
        let fresh = backend.open_in("lock-tests").await;
        let resolution = backend.stamp_resolution();
        let (short, margin, ticket_lease) = if resolution.is_zero() {
            (
                Duration::from_millis(300),
                Duration::from_millis(50),
                Duration::from_secs(1),
            )
        } else {
            // A server that stamps `last_modified` in whole seconds (S3, Azure).
            (
                Duration::from_secs(2),
                Duration::from_millis(1100),
                Duration::from_secs(4),
            )
        };
        Some(Env {
            bank: fresh.bank.clone(),
            short,
            margin,
            ticket_lease,
            resolution,
            _bank: fresh,
        })
    }

    fn locks(&self, clock: SharedClock) -> Locks {
        Locks::new(&self.bank, "t", clock)
            .unwrap()
            .with_skew_margin(self.margin)
    }

    fn sys(&self) -> Locks {
        self.locks(sys())
    }

    fn long(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn blocking(&self, wait: Wait) -> Blocking {
        Blocking {
            ticket_lease: Some(self.ticket_lease),
            retry_interval: Duration::from_millis(20),
            ..Blocking::new(wait)
        }
    }
}

/// A memory bank behind a fault-injecting store (latency on `clock` when given).
fn failing(clock: Option<&MockClock>) -> (Bank, FailingStore<InMemory>) {
    let mut store = FailingStore::new(InMemory::new());
    if let Some(clock) = clock {
        store = store.with_clock(clock.clone());
    }
    let bank = Bank::from_store(Arc::new(store.clone()), "", "memory://failing");
    (bank, store)
}

/// Poll until the store's clock says `key` is no longer held.
async fn wait_expired(locks: &Locks, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = locks.inspect(key).await.unwrap();
        if !matches!(info.map(|i| i.state), Some(LockState::Held { .. })) {
            return;
        }
        assert!(Instant::now() < deadline, "{key} did not expire");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll until `key` has `n` waiters.
async fn wait_waiters(locks: &Locks, key: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while locks.waiters(key).await.unwrap().len() != n {
        assert!(Instant::now() < deadline, "{key}: never {n} waiters");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The one who keeps the key, as an [`Error::Unavailable`] names it (holder or promised waiter).
fn unavailable_holder(err: &Error) -> &LockHolder {
    match err {
        Error::Unavailable { holder, .. } => holder,
        other => panic!("expected Unavailable, got {other}"),
    }
}

/// The holder of the key, as an [`Error::Unavailable`] for a held key names it.
fn held_by(err: &Error) -> String {
    match unavailable_holder(err) {
        LockHolder::Held(owner) => owner.to_string(),
        other => panic!("expected a holder, got {other:?}: {err}"),
    }
}

/// Run each semantic on memory (`memory::name`), on files (`file::name`), on S3 (`s3::name`)
/// and on Azure (`azure::name`; both skipped unless configured).
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        on_store!(memory, Memory, $($name),*);
        on_store!(file, File, $($name),*);
        on_store!(s3, S3, $($name),*);
        on_store!(azure, Azure, $($name),*);
    };
}

/// Run each semantic on one backend, as tests in module `$module`.
macro_rules! on_store {
    ($module:ident, $backend:ident, $($name:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(env) = super::Env::on(super::Backend::$backend).await else { return };
                    let _one_at_a_time = super::one_at_a_time(super::Backend::$backend).await;
                    super::$name(&env).await
                }
            )*
        }
    };
}

on_every_store!(
    acquire_succeeds_when_free_expired_or_already_ours,
    acquire_any_fails_only_if_every_key_is_held,
    heartbeat_fails_if_another_owner_held_the_key_even_after_releasing,
    release_is_ok_when_free_and_unavailable_when_held_by_another,
    get_current_reports_holder_payload_and_store_clock_remaining,
    background_heartbeat_keeps_the_lock_and_reports_failures,
    claim_fails_while_held_even_by_the_same_holder,
    extend_never_shortens_and_racing_extensions_are_benign,
    expire_succeeds_only_after_start_plus_duration_on_the_store_clock,
    snapshot_lists_every_lease_of_the_namespace,
    a_claim_holds_for_its_duration_from_the_start_of_the_call,
    blocking_acquire_waits_gives_up_and_times_out,
    waiters_are_served_in_arrival_order,
    a_dead_waiters_ticket_expires_and_a_newcomer_cannot_jump_the_queue,
    a_ticket_that_cannot_be_read_is_never_skipped,
    an_expired_holder_does_not_jump_the_queue,
    payload_is_readable_by_anyone_and_size_limited,
    fencing_tokens_strictly_increase_across_holders,
    a_paused_holders_late_write_is_rejected,
    guarded_writes_racing_keep_the_highest_fence,
);

// ---- 1. acquire / acquire-any / heartbeat / release / get-current ----------------------------

async fn acquire_succeeds_when_free_expired_or_already_ours(env: &Env) {
    let locks = env.sys();
    let a = locks
        .acquire("k", "alice", Term::For(env.long()), Some("p1"))
        .await
        .unwrap();
    assert!(a.am_owner());
    let f1 = a.fence().unwrap().value;

    let err = locks
        .acquire("k", "bob", Term::For(env.long()), None)
        .await
        .unwrap_err();
    assert_eq!(held_by(&err), "alice");
    assert!(matches!(err, Error::Unavailable { remaining, .. } if remaining > Duration::ZERO));

    // The same owner replaces its holding (new payload, new fencing token); the old handle's
    // holding is gone.
    let a2 = locks
        .acquire("k", "alice", Term::For(env.short), Some("p2"))
        .await
        .unwrap();
    let f2 = a2.fence().unwrap().value;
    assert!(f2 > f1);
    assert_eq!(
        locks
            .current("k")
            .await
            .unwrap()
            .unwrap()
            .payload
            .as_deref(),
        Some("p2")
    );
    assert!(matches!(a.heartbeat().await, Err(Error::LockLost { .. })));

    // Expired on the store's clock: another owner takes it over.
    wait_expired(&locks, "k").await;
    let b = locks
        .acquire("k", "bob", Term::For(env.long()), None)
        .await
        .unwrap();
    assert!(b.fence().unwrap().value > f2);
    assert_eq!(locks.current("k").await.unwrap().unwrap().holder, "bob");
}

async fn acquire_any_fails_only_if_every_key_is_held(env: &Env) {
    let locks = env.sys();
    let long = Term::For(env.long());
    for k in ["k1", "k2"] {
        locks.acquire(k, "x", long, None).await.unwrap();
    }
    let got = locks
        .acquire_any(&["k1", "k2", "k3"], "y", long, None, Order::AsGiven)
        .await
        .unwrap();
    assert_eq!(got.key(), "k3");
    let err = locks
        .acquire_any(&["k1", "k2", "k3"], "z", long, None, Order::AsGiven)
        .await
        .unwrap_err();
    match &err {
        Error::Unavailable { key, .. } => {
            assert_eq!(key.names().len(), 3);
            assert_eq!(key.to_string(), "t/k1,t/k2,t/k3");
        }
        other => panic!("{other}"),
    }

    // Random order: reproducible from the seed, and it does spread.
    let keys = ["a", "b", "c", "d"];
    let mut picks = Vec::new();
    for seed in 0..8u64 {
        let mut picked = Vec::new();
        for round in 0..2 {
            let ns = Locks::new(&env.bank, &format!("r{seed}-{round}"), sys())
                .unwrap()
                .with_skew_margin(env.margin);
            let lock = ns
                .acquire_any(&keys, "w", long, None, Order::Random(Jitter::seeded(seed)))
                .await
                .unwrap();
            picked.push(lock.key().to_owned());
        }
        assert_eq!(picked[0], picked[1], "seed {seed} is not reproducible");
        picks.push(picked[0].clone());
    }
    picks.dedup();
    assert!(picks.len() > 1, "random order never varied: {picks:?}");
}

async fn heartbeat_fails_if_another_owner_held_the_key_even_after_releasing(env: &Env) {
    // Alice's clock is frozen: she believes she still holds the lock.
    let frozen = MockClock::new();
    let alice_locks = env.locks(Arc::new(frozen.clone()));
    let bob_locks = env.sys();
    let alice = alice_locks
        .acquire("k", "alice", Term::For(env.short), None)
        .await
        .unwrap();
    let before = alice.expires().unwrap();
    frozen.advance(env.short / 4);
    let until = alice.heartbeat().await.unwrap();
    assert!(until > before, "a heartbeat extends from its send time");

    wait_expired(&bob_locks, "k").await;
    let bob = bob_locks
        .acquire("k", "bob", Term::For(env.long()), None)
        .await
        .unwrap();
    bob.release().await.unwrap();
    assert!(
        bob_locks.current("k").await.unwrap().is_none(),
        "free again"
    );

    assert!(alice.am_owner(), "her own clock says she holds it");
    let err = alice.heartbeat().await.unwrap_err();
    match &err {
        Error::LockLost { reason, .. } => {
            assert!(reason.contains("another owner held the key"), "{reason}")
        }
        other => panic!("{other}"),
    }
    assert!(!alice.am_owner());
    // And it stays free: the failed heartbeat wrote nothing.
    assert!(bob_locks.current("k").await.unwrap().is_none());
}

async fn release_is_ok_when_free_and_unavailable_when_held_by_another(env: &Env) {
    let locks = env.sys();
    assert_eq!(locks.release("k", "alice").await.unwrap(), Release::Free);
    let alice = locks
        .acquire("k", "alice", Term::For(env.long()), None)
        .await
        .unwrap();
    let err = locks.release("k", "bob").await.unwrap_err();
    assert_eq!(held_by(&err), "alice");
    let bob = locks.lock("k", "bob").unwrap();
    assert_eq!(held_by(&bob.release().await.unwrap_err()), "alice");

    alice.release().await.unwrap();
    assert!(!alice.am_owner());
    assert!(locks.current("k").await.unwrap().is_none());
    alice.release().await.unwrap(); // again: nobody holds it
    assert_eq!(locks.release("k", "alice").await.unwrap(), Release::Free);

    // Stateless release by the holder (the CLI's); the fencing counter survives it.
    let again = locks
        .acquire("k", "alice", Term::For(env.long()), None)
        .await
        .unwrap();
    let f = again.fence().unwrap().value;
    assert_eq!(
        locks.release("k", "alice").await.unwrap(),
        Release::Released
    );
    let next = locks
        .acquire("k", "carol", Term::For(env.long()), None)
        .await
        .unwrap();
    assert_eq!(next.fence().unwrap().value, f + 1);
}

async fn get_current_reports_holder_payload_and_store_clock_remaining(env: &Env) {
    let locks = env.sys();
    let d = env.long();
    locks
        .acquire("k", "alice", Term::For(d), Some("host-a:4000"))
        .await
        .unwrap();
    let c = locks.current("k").await.unwrap().unwrap();
    assert_eq!(c.holder, "alice");
    assert_eq!(c.key, "t/k");
    assert_eq!(c.payload.as_deref(), Some("host-a:4000"));
    assert!(c.remaining <= d - env.margin, "{c:?}");
    assert!(
        c.remaining > d - env.margin - Duration::from_secs(5),
        "{c:?}"
    );

    // Another owner's handle learns the holder and remembers it.
    let bob = locks.lock("k", "bob").unwrap();
    assert!(!bob.is_owned());
    bob.current().await.unwrap().unwrap();
    assert!(bob.is_owned());
    assert!(!bob.am_owner());
    assert_eq!(bob.holder().as_deref(), Some("alice"));
    assert_eq!(bob.payload().as_deref(), Some("host-a:4000"));
    assert!(bob.seconds_left() > 0.0);
    assert_eq!(bob.seconds_to_renew(), 0.0);
    assert!(locks.current("never-used").await.unwrap().is_none());
}

async fn background_heartbeat_keeps_the_lock_and_reports_failures(env: &Env) {
    let locks = env.sys();
    // Long enough that a loaded machine does not miss a heartbeat.
    let length = env.short.max(Duration::from_secs(1));
    let lock = locks
        .acquire("k", "alice", Term::For(length), None)
        .await
        .unwrap();
    let (heartbeat, mut failures) = lock.spawn_heartbeat(Jitter::seeded(1), 0.1);
    tokio::time::sleep(length * 3).await;
    assert!(lock.am_owner(), "kept alive past three lengths");
    assert_eq!(
        locks.current("k").await.unwrap().unwrap().holder,
        "alice",
        "held on the store's clock too"
    );
    assert!(failures.try_recv().is_err(), "no failure so far");

    // Someone releases it on alice's behalf (the CLI's stateless release) and bob acquires it:
    // the next heartbeat finds another owner's holding and reports the lock lost.
    assert_eq!(
        locks.release("k", "alice").await.unwrap(),
        Release::Released
    );
    locks
        .acquire("k", "bob", Term::For(env.long()), None)
        .await
        .unwrap();
    let failure = tokio::time::timeout(length * 4, failures.recv())
        .await
        .expect("a failure is reported")
        .expect("channel open");
    assert!(failure.lost, "{:?}", failure.error);
    assert!(matches!(failure.error, Error::LockLost { .. }));
    assert!(!lock.am_owner());
    heartbeat.stop().await;
}

/// Store errors are reported (not lost) and retried; running out of time is reported as lost.
#[tokio::test]
async fn background_heartbeat_reports_store_errors_then_loss() {
    let (bank, store) = failing(None);
    let locks = Locks::new(&bank, "t", sys())
        .unwrap()
        .with_skew_margin(Duration::from_millis(50));
    let lock = locks
        .acquire("k", "alice", Term::For(Duration::from_millis(400)), None)
        .await
        .unwrap();
    let (heartbeat, mut failures) = lock.spawn_heartbeat(Jitter::seeded(2), 0.0);
    store.set_partitioned(true);
    let first = tokio::time::timeout(Duration::from_secs(5), failures.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(!first.lost, "a store error is retried: {:?}", first.error);
    assert!(first.error.is_transient());
    let last = loop {
        let f = tokio::time::timeout(Duration::from_secs(5), failures.recv())
            .await
            .unwrap()
            .unwrap();
        if f.lost {
            break f;
        }
    };
    assert!(
        matches!(last.error, Error::LockLost { .. }),
        "{:?}",
        last.error
    );
    assert!(!lock.am_owner());
    heartbeat.stop().await;
}

/// A heartbeat that hangs past the end of the hold (a paused server) is abandoned: the loss is
/// reported when the time runs out, not when the request finally returns.
#[tokio::test]
async fn background_heartbeat_reports_loss_on_time_while_a_heartbeat_hangs() {
    let store = FailingStore::new(InMemory::new()).with_sleeping_clock(SystemClock);
    let bank = Bank::from_store(Arc::new(store.clone()), "", "memory://failing");
    let locks = Locks::new(&bank, "t", sys())
        .unwrap()
        .with_skew_margin(Duration::from_millis(50));
    let lock = locks
        .acquire("k", "alice", Term::For(Duration::from_millis(600)), None)
        .await
        .unwrap();
    let until = Instant::now() + lock.remaining();
    store.set_latency(Op::Put, Duration::from_secs(30));
    let (heartbeat, mut failures) = lock.spawn_heartbeat(Jitter::seeded(3), 0.0);
    let failure = tokio::time::timeout(Duration::from_secs(5), failures.recv())
        .await
        .expect("the loss is reported within the hold plus a little, not after the 30 s request")
        .unwrap();
    assert!(failure.lost, "{:?}", failure.error);
    assert!(
        matches!(failure.error, Error::LockLost { .. }),
        "{:?}",
        failure.error
    );
    assert!(
        Instant::now() >= until,
        "not reported before the time ran out"
    );
    assert!(!lock.am_owner());
    heartbeat.stop().await;
}

// ---- 2. claims in namespaces -----------------------------------------------------------------

async fn claim_fails_while_held_even_by_the_same_holder(env: &Env) {
    let locks = env.sys();
    let g = locks.claim("leader", "u0", env.short).await.unwrap();
    assert!(g.wrote);
    let err = locks.claim("leader", "u0", env.short).await.unwrap_err();
    assert_eq!(held_by(&err), "u0");
    let err = locks.claim("leader", "u1", env.short).await.unwrap_err();
    assert_eq!(held_by(&err), "u0");
    wait_expired(&locks, "leader").await;
    let g2 = locks.claim("leader", "u1", env.long()).await.unwrap();
    assert!(g2.fence.value > g.fence.value);
}

async fn extend_never_shortens_and_racing_extensions_are_benign(env: &Env) {
    let locks = env.sys();
    let thirty = Duration::from_secs(30);
    let claimed = locks.claim("k", "u0", thirty).await.unwrap();
    let remaining = || async { locks.current("k").await.unwrap().unwrap().remaining };

    // Shorter than what is left: nothing written, nothing shortened.
    let before = remaining().await;
    let g = locks
        .extend("k", "u0", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(!g.wrote);
    assert!(remaining().await + Duration::from_secs(2) >= before);
    assert!(g.valid_until >= Instant::now() + Duration::from_secs(1));

    // Longer: extended.
    let g = locks
        .extend("k", "u0", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(g.wrote);
    assert_eq!(
        g.fence, claimed.fence,
        "an extension keeps the fencing token"
    );
    assert!(remaining().await > thirty);

    // Racing extensions all succeed and the lease lasts at least as long as each asked.
    let ninety = Duration::from_secs(90);
    let start = Instant::now();
    let results = futures::future::join_all((0..8).map(|_| locks.extend("k", "u0", ninety))).await;
    for r in &results {
        let g = r.as_ref().expect("every racing extension succeeds");
        assert!(g.valid_until >= start + ninety);
    }
    assert!(remaining().await + env.margin * 2 + Duration::from_secs(3) >= ninety);
    // A slightly longer extension right after never shortens the store-side lease.
    let before = remaining().await;
    locks
        .extend("k", "u0", ninety + Duration::from_millis(10))
        .await
        .unwrap();
    assert!(remaining().await + Duration::from_secs(2) >= before);

    // Only the holder extends.
    assert!(matches!(
        locks.extend("k", "u1", ninety).await,
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(
        locks.extend("free", "u0", ninety).await,
        Err(Error::LockLost { .. })
    ));
}

async fn expire_succeeds_only_after_start_plus_duration_on_the_store_clock(env: &Env) {
    let locks = env.sys();
    assert_eq!(locks.expire("k").await.unwrap(), None, "nothing to expire");
    let start = Instant::now();
    let g = locks.claim("k", "u0", env.short).await.unwrap();
    let err = locks.expire("k").await.unwrap_err();
    assert_eq!(held_by(&err), "u0");
    let deadline = start + Duration::from_secs(30);
    let expired = loop {
        match locks.expire("k").await {
            Ok(holder) => break holder,
            Err(Error::Unavailable { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        start.elapsed() + env.resolution >= env.short + env.margin,
        "expired after {:?}",
        start.elapsed()
    );
    assert_eq!(expired.as_deref(), Some("u0"));
    assert!(locks.current("k").await.unwrap().is_none());
    assert_eq!(locks.expire("k").await.unwrap(), None);
    let next = locks.claim("k", "u1", env.long()).await.unwrap();
    assert_eq!(next.fence.value, g.fence.value + 1);
}

async fn snapshot_lists_every_lease_of_the_namespace(env: &Env) {
    let locks = env.sys();
    locks.claim("a", "u0", env.long()).await.unwrap();
    locks.claim("b", "u1", env.short).await.unwrap();
    locks
        .acquire("c", "u2", Term::For(env.long()), Some("pay"))
        .await
        .unwrap();
    locks.release("c", "u2").await.unwrap();
    let other = Locks::new(&env.bank, "other", sys()).unwrap();
    other.claim("x", "u9", env.long()).await.unwrap();
    // A waiter on `a`: its queue must not show up as a lease.
    let waiter = {
        let locks = locks.clone();
        let blocking = env.blocking(Wait::For(Duration::from_secs(60)));
        tokio::spawn(async move {
            let _ = locks
                .acquire_blocking("a", "w", Term::For(Duration::from_secs(1)), None, &blocking)
                .await;
        })
    };
    wait_waiters(&locks, "a", 1).await;
    wait_expired(&locks, "b").await;

    let snap = locks.snapshot().await.unwrap();
    assert!(snap.unreadable.is_empty(), "{:?}", snap.unreadable);
    let keys: Vec<&str> = snap.leases.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c"]);
    assert_eq!(snap.leases[0].state.holder(), Some("u0"));
    assert!(matches!(&snap.leases[1].state, LockState::Expired { holder, .. } if holder == "u1"));
    assert_eq!(snap.leases[2].state, LockState::Free);
    waiter.abort();
}

async fn a_claim_holds_for_its_duration_from_the_start_of_the_call(env: &Env) {
    // On the store's clock: a competitor cannot claim before start + duration.
    let locks = env.sys();
    let start = Instant::now();
    let g = locks.claim("k", "u0", env.short).await.unwrap();
    assert!(g.valid_until >= start + env.short);
    let deadline = start + Duration::from_secs(30);
    loop {
        match locks.claim("k", "u1", env.short).await {
            Ok(_) => break,
            Err(Error::Unavailable { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        start.elapsed() >= env.short,
        "taken after {:?}",
        start.elapsed()
    );
    // An extension too: it holds at least its duration from its start.
    let start = Instant::now();
    let g = locks.extend("k", "u1", env.short * 2).await.unwrap();
    assert!(g.valid_until >= start + env.short * 2);
}

/// With slow requests (on a mock clock): the grant counts from the send time, so it is the start
/// of the call plus the duration, never the end of the call plus the duration.
#[tokio::test]
async fn claim_and_extend_count_from_the_send_time() {
    let clock = MockClock::new();
    let (bank, store) = failing(Some(&clock));
    let locks = Locks::new(&bank, "t", Arc::new(clock.clone())).unwrap();
    locks.snapshot().await.unwrap(); // probe the store first
    store.set_latency(Op::Put, Duration::from_secs(3));
    let start = clock.now();
    let g = locks
        .claim("k", "u0", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(g.valid_until, start + Duration::from_secs(10));
    assert!(clock.now() >= start + Duration::from_secs(3));
    let start = clock.now();
    let g = locks
        .extend("k", "u0", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(g.valid_until >= start + Duration::from_secs(60));
    assert!(g.valid_until <= clock.now() + Duration::from_secs(60));
}

/// A slow acquire shortens the holder's view; it never lengthens it.
#[tokio::test]
async fn a_slow_acquire_shortens_the_hold() {
    let clock = MockClock::new();
    let (bank, store) = failing(Some(&clock));
    let locks = Locks::new(&bank, "t", Arc::new(clock.clone())).unwrap();
    locks.snapshot().await.unwrap();
    store.set_latency(Op::Put, Duration::from_secs(3));
    let lock = locks
        .acquire("k", "a", Term::For(Duration::from_secs(10)), None)
        .await
        .unwrap();
    assert_eq!(lock.remaining(), Duration::from_secs(7));
    assert_eq!(lock.seconds_to_renew(), 2.0);
}

// ---- 3. blocking and the fair queue ----------------------------------------------------------

async fn blocking_acquire_waits_gives_up_and_times_out(env: &Env) {
    let locks = env.sys();
    locks
        .acquire("k", "alice", Term::For(env.short), None)
        .await
        .unwrap();
    // block_for 0: one attempt, no ticket left behind.
    let err = locks
        .acquire_blocking(
            "k",
            "bob",
            Term::For(env.short),
            None,
            &env.blocking(Wait::No),
        )
        .await
        .unwrap_err();
    assert_eq!(held_by(&err), "alice");
    assert!(locks.waiters("k").await.unwrap().is_empty());

    // Waits until alice's lock expires on the store's clock.
    let bob = locks
        .acquire_blocking(
            "k",
            "bob",
            Term::For(env.long()),
            None,
            &env.blocking(Wait::For(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    assert!(bob.am_owner());
    assert!(
        locks.waiters("k").await.unwrap().is_empty(),
        "ticket removed"
    );

    // block_for runs out.
    let start = Instant::now();
    let wait = env.short;
    let err = locks
        .acquire_blocking(
            "k",
            "carol",
            Term::For(env.short),
            None,
            &env.blocking(Wait::For(wait)),
        )
        .await
        .unwrap_err();
    assert_eq!(held_by(&err), "bob");
    assert!(start.elapsed() >= wait);
    assert!(
        locks.waiters("k").await.unwrap().is_empty(),
        "ticket removed"
    );

    // The obtention timeout bounds even a wait forever.
    let start = Instant::now();
    let blocking = Blocking {
        timeout: Some(env.short),
        ..env.blocking(Wait::Forever)
    };
    let err = locks
        .acquire_blocking("k", "dave", Term::For(env.short), None, &blocking)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(start.elapsed() >= env.short);
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn blocking_acquire_retries_store_errors() {
    let (bank, store) = failing(None);
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    locks.snapshot().await.unwrap(); // probe first
    let blocking = Blocking {
        retries: 3,
        retry_interval: Duration::from_millis(5),
        ..Blocking::new(Wait::For(Duration::from_secs(10)))
    };
    store.fail_next(Op::Get, Strike::Before, 2);
    let lock = locks
        .acquire_blocking("k", "a", Term::For(Duration::from_secs(5)), None, &blocking)
        .await
        .unwrap();
    assert!(lock.am_owner());

    store.fail_next(Op::Get, Strike::Before, 10);
    let gets = store.calls(Op::Get);
    let err = locks
        .acquire_blocking(
            "k2",
            "a",
            Term::For(Duration::from_secs(5)),
            None,
            &Blocking {
                retries: 2,
                ..blocking
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(
        store.calls(Op::Get) - gets,
        3,
        "one attempt and two retries"
    );
}

async fn waiters_are_served_in_arrival_order(env: &Env) {
    let locks = env.sys();
    let holder = locks
        .acquire("k", "holder", Term::For(env.long()), None)
        .await
        .unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (waiter, served) = (locks.clone(), served.clone());
        let blocking = env.blocking(Wait::For(Duration::from_secs(120)));
        let hold = env.short;
        tasks.push(tokio::spawn(async move {
            let lock = waiter
                .acquire_blocking("k", &format!("w{i}"), Term::For(hold * 4), None, &blocking)
                .await
                .unwrap();
            served.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(50)).await;
            lock.release().await.unwrap();
        }));
        // Arrival order: each waiter is queued before the next one starts.
        wait_waiters(&locks, "k", i + 1).await;
    }
    let queue = locks.waiters("k").await.unwrap();
    let owners: Vec<&str> = queue.iter().map(|w| w.owner.as_str()).collect();
    assert_eq!(owners, ["w0", "w1", "w2", "w3"]);
    assert!(queue.windows(2).all(|w| w[0].ticket < w[1].ticket));
    holder.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), [0, 1, 2, 3]);
    assert!(locks.waiters("k").await.unwrap().is_empty());
}

async fn a_dead_waiters_ticket_expires_and_a_newcomer_cannot_jump_the_queue(env: &Env) {
    let locks = env.sys();
    let holder = locks
        .acquire("k", "holder", Term::For(env.long()), None)
        .await
        .unwrap();
    let blocking = env.blocking(Wait::For(Duration::from_secs(120)));
    let dead = {
        let (locks, blocking) = (locks.clone(), blocking.clone());
        tokio::spawn(async move {
            let _ = locks
                .acquire_blocking("k", "dead", Term::For(env_hold()), None, &blocking)
                .await;
        })
    };
    wait_waiters(&locks, "k", 1).await;
    dead.abort(); // dies in the queue: its ticket stays, unrenewed
    let died = Instant::now();
    let live = {
        let (locks, blocking) = (locks.clone(), blocking.clone());
        tokio::spawn(async move {
            locks
                .acquire_blocking("k", "live", Term::For(env_hold()), None, &blocking)
                .await
                .unwrap()
        })
    };
    wait_waiters(&locks, "k", 2).await;
    holder.release().await.unwrap();

    // Free, but promised to the first live waiter: a newcomer does not get it.
    let err = locks
        .acquire("k", "newcomer", Term::For(env.short), None)
        .await
        .unwrap_err();
    assert!(unavailable_holder(&err).is_promised(), "{err}");

    let lock = live.await.unwrap();
    assert!(lock.am_owner());
    // Its last renewal was at most half a ticket lease before it died.
    assert!(
        died.elapsed() >= env.ticket_lease / 2,
        "served before the dead ticket expired"
    );
    assert!(
        locks.waiters("k").await.unwrap().is_empty(),
        "dead ticket removed"
    );
}

async fn an_expired_holder_does_not_jump_the_queue(env: &Env) {
    let locks = env.sys();
    let holder = locks
        .acquire("k", "h", Term::For(env.short), None)
        .await
        .unwrap();
    let waiter = {
        let locks = locks.clone();
        let blocking = env.blocking(Wait::For(Duration::from_secs(60)));
        tokio::spawn(async move {
            locks
                .acquire_blocking("k", "w", Term::For(env_hold()), None, &blocking)
                .await
                .unwrap()
        })
    };
    wait_waiters(&locks, "k", 1).await;
    // Until h's holding ran out (the waiter may take the key at once: then it holds it).
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(LockState::Held { holder, .. }) =
        locks.inspect("k").await.unwrap().map(|i| i.state)
    {
        if holder != "h" {
            break;
        }
        assert!(Instant::now() < deadline, "k did not expire");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its own holding ran out: re-acquiring is a new acquisition, behind the waiter.
    let err = holder
        .acquire(Term::For(env.short), None)
        .await
        .unwrap_err();
    let who = unavailable_holder(&err).owner().map(|o| o.as_str());
    assert_eq!(who, Some("w"), "{err}");
    assert!(waiter.await.unwrap().am_owner());
}

fn env_hold() -> Duration {
    Duration::from_secs(2)
}

async fn a_ticket_that_cannot_be_read_is_never_skipped(env: &Env) {
    let locks = env.sys();
    let ticket = locks.queue_path("k").join("00000000000000000001");
    env.bank
        .store()
        .put(&ticket, PutPayload::from_static(b"not json"))
        .await
        .unwrap();
    // The key is free, but a listed ticket could not be judged: no acquisition on doubt.
    let err = locks
        .acquire("k", "x", Term::For(env.short), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(
        locks.inspect("k").await.unwrap().is_none(),
        "nothing written"
    );
}

// ---- 4. payload and answers from memory ------------------------------------------------------

async fn payload_is_readable_by_anyone_and_size_limited(env: &Env) {
    let locks = env.sys();
    let big = "x".repeat(MAX_PAYLOAD_BYTES + 1);
    let err = locks
        .acquire("k", "a", Term::For(env.long()), Some(&big))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::PayloadTooLarge { size, limit, .. } if size == MAX_PAYLOAD_BYTES + 1 && limit == MAX_PAYLOAD_BYTES),
        "{err}"
    );
    assert!(
        locks.inspect("k").await.unwrap().is_none(),
        "nothing written"
    );

    let max = "y".repeat(MAX_PAYLOAD_BYTES);
    locks
        .acquire("k", "a", Term::For(env.long()), Some(&max))
        .await
        .unwrap();
    // Anyone, with another clock and no handle.
    let reader = env.locks(Arc::new(MockClock::new()));
    assert_eq!(
        reader.current("k").await.unwrap().unwrap().payload,
        Some(max.clone())
    );
    assert_eq!(
        reader.inspect("k").await.unwrap().unwrap().payload,
        Some(max)
    );
}

#[tokio::test]
async fn holder_answers_from_memory_while_the_store_is_unreachable() {
    let clock = MockClock::new();
    let (bank, store) = failing(Some(&clock));
    let locks = Locks::new(&bank, "t", Arc::new(clock.clone())).unwrap();
    let t0 = clock.now();
    let lock = locks
        .acquire("k", "a", Term::For(Duration::from_secs(10)), Some("p"))
        .await
        .unwrap();
    assert!(lock.am_owner() && lock.is_owned());
    assert_eq!(lock.expires(), Some(t0 + Duration::from_secs(10)));
    assert_eq!(lock.seconds_left(), 10.0);
    assert_eq!(lock.seconds_to_renew(), 5.0);

    store.set_partitioned(true);
    let calls = |s: &FailingStore<InMemory>| {
        [Op::Get, Op::Head, Op::Put, Op::List]
            .map(|op| s.calls(op))
            .iter()
            .sum::<u64>()
    };
    let before = calls(&store);
    clock.advance(Duration::from_secs(4));
    assert!(lock.am_owner() && lock.is_owned());
    assert_eq!(lock.seconds_left(), 6.0);
    assert_eq!(lock.seconds_to_renew(), 1.0);
    assert_eq!(lock.payload().as_deref(), Some("p"));
    assert_eq!(lock.holder().as_deref(), Some("a"));
    assert_eq!(calls(&store), before, "answered without a request");

    let err = lock.heartbeat().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        lock.am_owner(),
        "a failed heartbeat loses nothing while time remains"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(lock.seconds_to_renew(), 0.0);
    assert_eq!(lock.seconds_left(), 4.0);
    clock.advance(Duration::from_secs(4));
    assert!(!lock.am_owner() && !lock.is_owned());
    assert_eq!(lock.seconds_left(), 0.0);
    assert!(matches!(
        lock.heartbeat().await,
        Err(Error::LockLost { .. })
    ));
}

// ---- 5. fencing ------------------------------------------------------------------------------

async fn fencing_tokens_strictly_increase_across_holders(env: &Env) {
    let locks = env.sys();
    let long = Term::For(env.long());
    let mut tokens = Vec::new();
    let a = locks.acquire("k", "alice", long, None).await.unwrap();
    tokens.push(a.fence().unwrap().value);
    a.release().await.unwrap();
    let b = locks.acquire("k", "bob", long, None).await.unwrap();
    tokens.push(b.fence().unwrap().value);
    let b2 = locks
        .acquire("k", "bob", Term::For(env.short), None)
        .await
        .unwrap();
    tokens.push(b2.fence().unwrap().value);
    wait_expired(&locks, "k").await;
    let c = locks
        .acquire("k", "carol", Term::For(env.short), None)
        .await
        .unwrap();
    tokens.push(c.fence().unwrap().value);
    wait_expired(&locks, "k").await;
    locks.expire("k").await.unwrap();
    tokens.push(
        locks
            .claim("k", "dave", env.long())
            .await
            .unwrap()
            .fence
            .value,
    );
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(tokens[0], 1);
}

/// Fenced writes are refused where the store's ETag is a hash of the content (S3, moto): there
/// the suites of guarded writes check only that refusal (tests/fence.rs has the scenario).
async fn fenced_writes_refused(env: &Env) -> bool {
    let fence = Fence {
        lock: "t/probe".parse().unwrap(),
        value: 1,
    };
    let path = env.bank.path(&["fence-probe"]);
    match guarded_put(&env.bank, &fence, &path, PutPayload::from_static(b"x")).await {
        Ok(_) => false,
        Err(Error::Unsupported {
            usage: "fenced writes",
            detail,
            ..
        }) => {
            assert!(detail.contains("hash of the content"), "{detail}");
            true
        }
        Err(e) => panic!("{e}"),
    }
}

async fn a_paused_holders_late_write_is_rejected(env: &Env) {
    if fenced_writes_refused(env).await {
        return;
    }
    let paused = MockClock::new();
    let alice_locks = env.locks(Arc::new(paused.clone()));
    let bob_locks = env.sys();
    let report = env.bank.path(&["reports", "nightly.json"]);

    let alice = alice_locks
        .acquire("k", "alice", Term::For(env.short), None)
        .await
        .unwrap();
    let fa = alice.fence().unwrap();
    guarded_put(&env.bank, &fa, &report, PutPayload::from_static(b"alice-1"))
        .await
        .unwrap();

    // Alice is paused past her lease; bob takes the lock over and writes.
    wait_expired(&bob_locks, "k").await;
    let bob = bob_locks
        .acquire("k", "bob", Term::For(env.long()), None)
        .await
        .unwrap();
    let fb = bob.fence().unwrap();
    assert!(fb.value > fa.value);
    guarded_put(&env.bank, &fb, &report, PutPayload::from_static(b"bob-1"))
        .await
        .unwrap();

    // Alice wakes up, still believing she holds the lock, and writes: refused.
    assert!(alice.am_owner());
    let err = guarded_put(&env.bank, &fa, &report, PutPayload::from_static(b"alice-2"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::StaleFence { fence, seen, .. } if fence == fa.value && seen == fb.value),
        "{err}"
    );
    let content = env
        .bank
        .store()
        .get(&report)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&content[..], b"bob-1");
    assert!(matches!(
        alice.heartbeat().await,
        Err(Error::LockLost { .. })
    ));

    // Bob writes again with the same token; a token of another lock does not compare.
    guarded_put(&env.bank, &fb, &report, PutPayload::from_static(b"bob-2"))
        .await
        .unwrap();
    let other = Fence {
        lock: "t/other".parse().unwrap(),
        value: 1_000,
    };
    assert!(matches!(
        guarded_put(&env.bank, &other, &report, PutPayload::from_static(b"x")).await,
        Err(Error::OtherLock { guarded_by, .. }) if guarded_by == "t/k"
    ));
    assert!(env.bank.store().head(&fence_path(&report)).await.is_ok());
}

async fn guarded_writes_racing_keep_the_highest_fence(env: &Env) {
    if fenced_writes_refused(env).await {
        return;
    }
    let path = env.bank.path(&["guarded", "obj"]);
    let writes = (1..=8u64).map(|value| {
        let (bank, path) = (env.bank.clone(), path.clone());
        async move {
            let fence = Fence {
                lock: "t/k".parse().unwrap(),
                value,
            };
            let r = guarded_put(&bank, &fence, &path, PutPayload::from(value.to_string())).await;
            (value, r)
        }
    });
    let results = futures::future::join_all(writes).await;
    let mut landed = Vec::new();
    for (value, r) in results {
        match r {
            Ok(_) => landed.push(value),
            Err(Error::StaleFence { .. }) | Err(Error::Store { .. }) => {}
            Err(e) => panic!("{value}: {e}"),
        }
    }
    let content = env
        .bank
        .store()
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let last: u64 = std::str::from_utf8(&content).unwrap().parse().unwrap();
    assert_eq!(Some(&last), landed.iter().max(), "landed: {landed:?}");
}

// ---- ambiguity, ids, terms -------------------------------------------------------------------

#[tokio::test]
async fn ambiguous_writes_are_resolved_by_reading_back() {
    let (bank, store) = failing(None);
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    locks.snapshot().await.unwrap();
    // The acquiring write lands, but the caller sees an error: read back, recognised as ours.
    store.fail_next(Op::Put, Strike::After, 1);
    let lock = locks
        .acquire("k", "a", Term::For(Duration::from_secs(30)), None)
        .await
        .unwrap();
    assert!(lock.am_owner());
    assert_eq!(lock.fence().unwrap().value, 1);
    // Same for a heartbeat and a release.
    store.fail_next(Op::Put, Strike::After, 1);
    lock.heartbeat().await.unwrap();
    // A heartbeat whose every attempt failed before reaching the store: an error, still held.
    store.fail_next(Op::Put, Strike::Before, 3);
    assert!(lock.heartbeat().await.unwrap_err().is_transient());
    assert!(lock.am_owner());
    lock.heartbeat().await.unwrap();
    store.fail_next(Op::Put, Strike::After, 1);
    lock.release().await.unwrap();
    assert!(locks.current("k").await.unwrap().is_none());
    // A stateless claim whose answer was lost.
    store.fail_next(Op::Put, Strike::After, 1);
    locks
        .claim("c", "u", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(locks.current("c").await.unwrap().unwrap().holder, "u");
}

#[tokio::test]
async fn bad_ids_and_terms_are_refused() {
    let bank = Bank::open("memory://").unwrap();
    assert!(matches!(
        Locks::new(&bank, "../x", sys()),
        Err(Error::InvalidId { .. })
    ));
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    // Keys are paths (`a/b` is one), but not empty, `.`/`..` or empty segments.
    locks.lock("a/b", "o").unwrap();
    for key in ["", "a//b", "/a", "a/../b", "..", "x.queue", "a b", "a@b"] {
        assert!(
            matches!(locks.lock(key, "o"), Err(Error::InvalidId { .. })),
            "{key:?}"
        );
    }
    assert!(matches!(
        locks.lock("k", "o/x"),
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(
        locks.claim("k", "o", Duration::ZERO).await,
        Err(Error::InvalidTerm { .. })
    ));

    let clock = MockClock::new();
    let locks = Locks::new(&bank, "t", Arc::new(clock.clone())).unwrap();
    let end = clock.system_now() + Duration::from_secs(10);
    let lock = locks
        .acquire("k", "o", Term::Until(end), None)
        .await
        .unwrap();
    assert_eq!(lock.remaining(), Duration::from_secs(10));
    let past = clock.system_now() - Duration::from_secs(1);
    assert!(matches!(
        locks.acquire("k2", "o", Term::Until(past), None).await,
        Err(Error::InvalidTerm { .. })
    ));
}

// ---- 6. refusal where the semantics cannot be kept -------------------------------------------

async fn assert_every_operation_refused(bank: &Bank, needle: &str) {
    let locks = Locks::new(bank, "t", sys()).unwrap();
    let d = Duration::from_secs(5);
    let mut errors = vec![
        locks
            .acquire("k", "a", Term::For(d), None)
            .await
            .unwrap_err(),
        locks.release("k", "a").await.unwrap_err(),
        locks.current("k").await.unwrap_err(),
        locks.claim("k", "a", d).await.unwrap_err(),
        locks.extend("k", "a", d).await.unwrap_err(),
        locks.expire("k").await.unwrap_err(),
        locks.snapshot().await.unwrap_err(),
        locks
            .acquire_blocking("k", "a", Term::For(d), None, &Blocking::new(Wait::For(d)))
            .await
            .unwrap_err(),
    ];
    let fence = Fence {
        lock: "t/k".parse().unwrap(),
        value: 1,
    };
    errors.push(
        guarded_put(
            bank,
            &fence,
            &bank.path(&["x"]),
            PutPayload::from_static(b"x"),
        )
        .await
        .unwrap_err(),
    );
    for err in errors {
        match &err {
            Error::Unsupported { usage, detail, .. } => {
                assert_eq!(*usage, "named locks");
                assert!(detail.contains(needle), "{err}");
            }
            other => panic!("expected Unsupported, got {other}"),
        }
    }
    // Nothing was written under locks/.
    let listed: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(
        bank.store().list(Some(&bank.path(&["locks"]))),
    )
    .await
    .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

#[tokio::test]
async fn locks_are_refused_when_the_store_ignores_conditions() {
    let (bank, store) = failing(None);
    store.set_ignore_conditions(true);
    assert_every_operation_refused(&bank, "create-if-absent").await;
}

/// Swift ignores If-Match and its creates are not atomic: refused. Runs with
/// `BANKLEASE_TEST_SWIFT=1` and the variables `.ci/start-swift.sh` prints (as `.ci/run` does).
#[tokio::test]
async fn locks_are_refused_on_swift() {
    if !Backend::Swift.available() {
        return;
    }
    let container = format!("bl-lock-{}", uuid::Uuid::new_v4().simple());
    let store = banklease::store::SwiftBuilder::from_env()
        .with_container(container.as_str())
        .build()
        .expect("configure Swift from ST_AUTH/ST_USER/ST_KEY");
    store.create_container().await.expect("create a container");
    let bank = Bank::open(&format!("swift://{container}/locks")).unwrap();
    assert_every_operation_refused(&bank, "If-Match").await;
    // Best effort: the probes delete their keys; then the container.
    let _ = store.delete_container().await;
}

#[tokio::test]
async fn the_verdict_is_cached_per_store() {
    let (bank, store) = failing(None);
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    locks.current("k").await.unwrap();
    let puts = store.calls(Op::Put);
    // Another bank on the same store (another prefix) and another namespace: no new probe.
    let again = Bank::from_store(bank.store().clone(), "other", "memory://failing/other");
    let locks = Locks::new(&again, "u", sys()).unwrap();
    locks.current("k").await.unwrap();
    assert_eq!(store.calls(Op::Put), puts, "no probe write");
}

// ---- the CLI ---------------------------------------------------------------------------------

/// `target/<profile>/banklease`, built first (it belongs to the `banklease-cli` package) unless
/// `BANKLEASE_E2E_NO_BUILD` is set.
fn cli() -> &'static PathBuf {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(FsPath::parent).unwrap().to_path_buf();
        if std::env::var_os("BANKLEASE_E2E_NO_BUILD").is_none() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet", "--manifest-path"])
                .arg(FsPath::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
                .arg("--target-dir")
                .arg(profile_dir.parent().unwrap())
                .args(["-p", "banklease-cli", "--bin", "banklease"]);
            if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
                cmd.arg("--release");
            }
            let out = cmd.output().expect("run cargo build");
            assert!(
                out.status.success(),
                "building the CLI failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let cli = profile_dir.join("banklease");
        assert!(cli.is_file(), "`{}` is missing", cli.display());
        cli
    })
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {self:#?}"))
    }
}

fn run_cli(bank: &str, margin: Duration, args: &[&str]) -> Run {
    let mut cmd = Command::new(cli());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .env(
            "BANKLEASE_LEASE__SKEW_MARGIN",
            format!("{}ms", margin.as_millis()),
        )
        .env("RUST_LOG", "warn")
        .arg("--bank")
        .arg(bank)
        .args(args)
        .output()
        .expect("run the CLI");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn cli_acquire_release_show_list_on_s3() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(env) = runtime.block_on(Env::on(Backend::S3)) else {
        return;
    };
    let _one_at_a_time = s3_serial().blocking_lock();
    cli_acquire_release_show_list(env.bank.label(), env.margin);
}

#[test]
fn cli_acquire_release_show_list_on_azure() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(env) = runtime.block_on(Env::on(Backend::Azure)) else {
        return;
    };
    cli_acquire_release_show_list(env.bank.label(), env.margin);
}

#[test]
fn cli_acquire_release_show_list_on_file_banks() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let init = run_cli(&url, Duration::from_millis(50), &["init"]);
    assert_eq!(init.code, 0, "{init:#?}");
    cli_acquire_release_show_list(&url, Duration::from_millis(50));
    assert!(dir.path().join("locks").exists());
}

/// `banklease lock` end to end, with the documented exit codes (0 done, 1 held or not ours,
/// 2 usage).
fn cli_acquire_release_show_list(url: &str, m: Duration) {
    let url = url.to_owned();
    let acq = run_cli(
        &url,
        m,
        &[
            "--json",
            "lock",
            "acquire",
            "job",
            "--owner",
            "a",
            "--duration",
            "60s",
            "--payload",
            "hello",
        ],
    );
    assert_eq!(acq.code, 0, "{acq:#?}");
    assert!(!acq.stderr.contains("cannot be used"), "{acq:#?}");
    let j = acq.json();
    assert_eq!(j["key"], "job");
    assert_eq!(j["owner"], "a");
    assert_eq!(j["token"], 1);
    // Acquired in a session of its own: releasing needs it (or the whole holder name).
    let session = j["session"].as_str().expect("a session").to_owned();
    assert_eq!(j["holder"], format!("a.{session}"));
    assert!(j["remaining_ms"].as_u64().unwrap() > 50_000, "{j}");

    let busy = run_cli(
        &url,
        m,
        &[
            "lock",
            "acquire",
            "job",
            "--owner",
            "b",
            "--duration",
            "60s",
        ],
    );
    assert_eq!(busy.code, 1, "{busy:#?}");
    assert!(
        busy.stderr.starts_with("error: ") && busy.stderr.contains("held by `a."),
        "one error line on stderr: {busy:#?}"
    );
    assert!(busy.stdout.is_empty(), "{busy:#?}");
    let waited = run_cli(
        &url,
        m,
        &[
            "lock",
            "acquire",
            "job",
            "--owner",
            "b",
            "--duration",
            "60s",
            "--block-for",
            "500ms",
        ],
    );
    assert_eq!(waited.code, 1, "{waited:#?}");

    let show = run_cli(&url, m, &["--json", "lock", "show", "job"]);
    assert_eq!(show.code, 0, "{show:#?}");
    let j = show.json();
    assert_eq!(j["owner"], "a");
    assert_eq!(j["payload"], "hello");
    assert_eq!(j["waiters"], serde_json::json!([]));
    let text = run_cli(&url, m, &["lock", "show", "job"]);
    assert!(text.stdout.contains("held,"), "{text:#?}");

    run_cli(
        &url,
        m,
        &[
            "lock",
            "acquire",
            "other",
            "--owner",
            "c",
            "--duration",
            "60s",
        ],
    );
    let list = run_cli(&url, m, &["--json", "lock", "list"]);
    assert_eq!(list.code, 0, "{list:#?}");
    let rows: Vec<serde_json::Value> = list
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{list:#?}");
    for row in &rows {
        for field in ["key", "owner", "remaining_ms", "payload"] {
            assert!(row.get(field).is_some(), "{field} missing: {row}");
        }
    }
    assert_eq!(rows[0]["key"], "job");
    assert_eq!(rows[0]["payload"], "hello");

    assert_eq!(
        run_cli(&url, m, &["lock", "release", "job", "--owner", "b"]).code,
        1
    );
    // The same owner in another session does not hold it.
    assert_eq!(
        run_cli(&url, m, &["lock", "release", "job", "--owner", "a"]).code,
        1
    );
    let release = [
        "lock",
        "release",
        "job",
        "--owner",
        "a",
        "--session",
        &session,
    ];
    assert_eq!(run_cli(&url, m, &release).code, 0);
    let again = run_cli(&url, m, &release);
    assert_eq!(again.code, 0, "{again:#?}");
    assert!(again.stdout.contains("free"), "{again:#?}");
    assert_eq!(run_cli(&url, m, &["lock", "show", "job"]).code, 1);
    let b = run_cli(
        &url,
        m,
        &[
            "--json",
            "lock",
            "acquire",
            "job",
            "--owner",
            "b",
            "--duration",
            "60s",
            "--block-for",
            "5s",
        ],
    );
    assert_eq!(b.code, 0, "{b:#?}");
    assert_eq!(b.json()["token"], 2);
    // Another namespace is separate.
    let ns = run_cli(
        &url,
        m,
        &["--json", "lock", "list", "--namespace", "other-ns"],
    );
    assert_eq!(ns.code, 0);
    assert!(ns.stdout.trim().is_empty(), "{ns:#?}");
    let bad = run_cli(&url, m, &["lock", "show", "../x"]);
    assert_eq!(bad.code, 2, "{bad:#?}");
}

/// Locks of namespace `t` on a memory bank behind a [`gate::GateStore`].
fn gated_locks() -> (gate::GateStore<InMemory>, Locks) {
    let gate = gate::GateStore::new(InMemory::new());
    let bank = Bank::open("memory://")
        .unwrap()
        .with_store(Arc::new(gate.clone()));
    let locks = Locks::new(&bank, "t", sys())
        .unwrap()
        .with_skew_margin(Duration::from_millis(50));
    (gate, locks)
}

/// A waiter stopped while its write of the lock is in flight lets the write finish and gives
/// the lock back: the write lands, `stop` completes, then the answer arrives. (Before, the
/// in-flight acquire was dropped at `stop`: the write had landed, nobody held a handle on it, and
/// the key stayed taken until the lock ran out.)
#[tokio::test]
async fn a_waiter_stopped_while_its_write_is_in_flight_gives_the_lock_back() {
    let (gate, locks) = gated_locks();
    let held = gate.hold_next_write("locks/t/k");
    let lock = locks.lock("k", "w").unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let waiter = tokio::spawn(async move {
        let stop = async {
            let _ = stop_rx.await;
        };
        lock.acquire_blocking_or(
            Term::For(Duration::from_secs(60)),
            None,
            &Blocking::new(Wait::Forever),
            stop,
        )
        .await
    });
    held.served.await.unwrap(); // the lock is written; its answer is held
    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // (Dropped, not sent, when the waiter abandoned its write.)
    let _ = held.release.send(());
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the stopped waiter returns")
        .unwrap()
        .unwrap();
    assert!(got.is_none(), "stopped: nothing is returned as held");
    assert_eq!(
        locks.current("k").await.unwrap(),
        None,
        "the lock was given back"
    );
    assert!(locks.waiters("k").await.unwrap().is_empty());
}

/// A release that lands between a waiter's read of the lock and its next look is seen at that
/// look: the waiter remembers the object's version from *before* its read. (Before, it HEADed
/// after the read, remembered the released version as the holding it had judged, and slept
/// until the old holder's time would have run out: 60 s here.)
#[tokio::test]
async fn a_release_between_a_waiters_read_and_its_next_look_is_seen() {
    let (gate, locks) = gated_locks();
    let holder = locks
        .acquire("k", "h", Term::For(Duration::from_secs(60)), None)
        .await
        .unwrap();
    // The waiter's first GET of the lock (its attempt without a ticket) goes through; the
    // answer of its second (its first look once queued) is held until the holder released.
    let held = gate.hold_get("locks/t/k", 1);
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let blocking = Blocking::new(Wait::For(Duration::from_secs(30)));
            let started = Instant::now();
            locks
                .acquire_blocking(
                    "k",
                    "w",
                    Term::For(Duration::from_secs(60)),
                    None,
                    &blocking,
                )
                .await
                .map(|_| started.elapsed())
        })
    };
    held.served.await.unwrap(); // the waiter's read says: held by h, 60 s left
    holder.release().await.unwrap();
    let _ = held.release.send(());
    let waited = tokio::time::timeout(Duration::from_secs(40), waiter)
        .await
        .expect("the waiter returns")
        .unwrap()
        .expect("the waiter took the released lock");
    assert!(waited < Duration::from_secs(5), "took {waited:?}");
}
