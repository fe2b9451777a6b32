//! Every caller of the one conditional write (src/lease/write.rs) recognises its own write by
//! reading it back: owner acquire and renew, lock acquire, heartbeat, release, claim, extend and
//! expire, the queue's tickets, and the decision. Each write here lands but is answered with an
//! error (a store that fails *after* the inner call succeeded): the operation must succeed as
//! if answered, with exactly one PUT — not a second write, not a lost holding, not a conflict
//! with itself. Break the read-back rule once and each of these fails.

use banklease_testkit::cid;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{Decided, Decider, Decision, Status, CHECKPOINT_FORMAT};
use banklease::clock::{SharedClock, SystemClock};
use banklease::lock::{Blocking, Locks, Term, Wait};
use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease};
use banklease_testkit::failing::{FailingStore, Strike};
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::ObjectStore;

fn sys() -> SharedClock {
    Arc::new(SystemClock)
}

async fn fresh() -> (Bank, FailingStore<InMemory>) {
    let store = FailingStore::new(InMemory::new());
    let bank = Bank::from_store(Arc::new(store.clone()), "", "memory://conditional-write");
    banklease::layout::init(&bank).await.unwrap();
    // The writes made once per bank (the capability probe, the store clock's probe, a lock's
    // first use) are not what is under test.
    bank.capabilities().await.unwrap();
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    locks
        .acquire("warm-up", "a", Term::For(Duration::from_secs(30)), None)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    (bank, store)
}

/// Run `op` with its next PUT to `object` landing but answered with an error; it must send
/// exactly one PUT there.
async fn answer_lost<T>(
    store: &FailingStore<InMemory>,
    object: &str,
    op: impl Future<Output = T>,
) -> T {
    let before = store.puts_to(object);
    store.fail_next_put_to(object, Strike::After);
    let out = op.await;
    assert_eq!(
        store.puts_to(object) - before,
        1,
        "{object}: a write whose answer was lost must be recognised by reading it back, not \
         sent again"
    );
    out
}

fn windows() -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_secs(2),
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
    .unwrap()
}

async fn lease(bank: &Bank, id: &str) -> OwnerLease {
    OwnerLease::acquire(bank, OwnerId::parse(id).unwrap(), windows(), sys())
        .await
        .unwrap()
}

#[tokio::test]
async fn owner_acquire() {
    let (bank, store) = fresh().await;
    let acquired = answer_lost(&store, "leases/o", async {
        OwnerLease::acquire(&bank, OwnerId::parse("o").unwrap(), windows(), sys()).await
    })
    .await;
    let lease = acquired.expect("our own create, read back, is ours");
    assert!(lease.check_validity());
    let (record, _) = banklease::lease::read_lease(&bank, lease.owner_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.generation, 1);
}

#[tokio::test]
async fn owner_renew() {
    let (bank, store) = fresh().await;
    let lease = lease(&bank, "o").await;
    answer_lost(&store, "leases/o", lease.renew())
        .await
        .expect("our own renewal, read back, counts");
    let (record, _) = banklease::lease::read_lease(&bank, lease.owner_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.generation, 2);
}

#[tokio::test]
async fn lock_acquire_heartbeat_and_release() {
    let (bank, store) = fresh().await;
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    let term = Term::For(Duration::from_secs(30));
    let lock = answer_lost(&store, "locks/t/k", locks.acquire("k", "a", term, None))
        .await
        .expect("our own take, read back, is ours");
    assert_eq!(lock.fence().unwrap().value, 1);
    answer_lost(&store, "locks/t/k", lock.heartbeat())
        .await
        .expect("our own heartbeat, read back, counts");
    assert!(lock.am_owner());
    answer_lost(&store, "locks/t/k", lock.release())
        .await
        .expect("our own release, read back, is done");
    assert!(locks.current("k").await.unwrap().is_none());
}

#[tokio::test]
async fn lock_claim_extend_and_expire() {
    let (bank, store) = fresh().await;
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    let grant = answer_lost(
        &store,
        "locks/t/c",
        locks.claim("c", "u", Duration::from_secs(30)),
    )
    .await
    .expect("our own claim, read back, is ours");
    assert!(grant.wrote);
    answer_lost(
        &store,
        "locks/t/c",
        locks.extend("c", "u", Duration::from_secs(30)),
    )
    .await
    .expect("our own extension, read back, counts");
    locks
        .claim("e", "u", Duration::from_millis(10))
        .await
        .unwrap();
    // Past the holding and the skew margin, on the store's clock.
    sys()
        .sleep(locks.skew_margin() + Duration::from_millis(100))
        .await;
    let expired = answer_lost(&store, "locks/t/e", locks.expire("e"))
        .await
        .expect("our own free record, read back, is ours");
    assert_eq!(expired.as_deref(), Some("u"));
}

#[tokio::test]
async fn queue_ticket() {
    let (bank, store) = fresh().await;
    let locks = Locks::new(&bank, "t", sys()).unwrap();
    let holder = locks
        .acquire("q", "a", Term::For(Duration::from_secs(30)), None)
        .await
        .unwrap();
    let blocking = Blocking {
        ticket_lease: Some(Duration::from_secs(20)),
        ..Blocking::new(Wait::For(Duration::from_secs(20)))
    };
    let queue = locks.queue_path("q");
    let before = store.puts_to(queue.as_ref());
    store.fail_next_put_to(queue.as_ref(), Strike::After);
    let waiter = {
        let locks = locks.clone();
        let blocking = blocking.clone();
        tokio::spawn(async move {
            locks
                .acquire_blocking(
                    "q",
                    "w",
                    Term::For(Duration::from_secs(30)),
                    None,
                    &blocking,
                )
                .await
        })
    };
    for _ in 0..200 {
        let listed = bank
            .store()
            .list(Some(&queue))
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        if !listed.is_empty() {
            break;
        }
        sys().sleep(Duration::from_millis(10)).await;
    }
    // Give a waiter that took its own ticket for someone else's the time to take another.
    sys().sleep(Duration::from_millis(300)).await;
    let tickets: Vec<_> = bank
        .store()
        .list(Some(&queue))
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.location.to_string())
        .collect();
    assert_eq!(
        tickets.len(),
        1,
        "one ticket, recognised by reading back: {tickets:?}"
    );
    assert_eq!(
        store.puts_to(queue.as_ref()) - before,
        1,
        "the ticket's write whose answer was lost is not sent again"
    );
    holder.release().await.unwrap();
    let got = waiter
        .await
        .unwrap()
        .expect("the waiter takes the released lock");
    assert_eq!(got.holder().as_deref(), Some("w"));
}

#[tokio::test]
async fn decision() {
    let (bank, store) = fresh().await;
    let decision = Decision {
        format: CHECKPOINT_FORMAT,
        rebuilt: None,
        checkpoint_id: cid("c1"),
        owner_id: OwnerId::parse("o").unwrap(),
        by: Decider::Gc,
        outcome: Status::Deleted,
        token: "a-token-of-this-decision".to_owned(),
        decided_at: chrono::Utc::now(),
        evidence: None,
    };
    let decided = answer_lost(
        &store,
        "decisions/c1",
        banklease::collector::decide(&bank, decision.clone()),
    )
    .await
    .unwrap();
    assert!(
        matches!(&decided, Decided::Won(d) if d.token == decision.token),
        "our own decision, read back, is won: {decided:?}"
    );
}

/// A write for a holding is given up when the holding runs out: a heartbeat or a release to a
/// store that stopped answering returns at the lock's end, not after the client's budget.
#[tokio::test]
async fn a_write_for_a_holding_gives_up_when_it_runs_out() {
    let store = FailingStore::new(InMemory::new()).with_sleeping_clock(SystemClock);
    let bank = Bank::from_store(Arc::new(store.clone()), "", "memory://deadline");
    banklease::layout::init(&bank).await.unwrap();
    bank.capabilities().await.unwrap();
    let locks = Locks::new(&bank, "t", sys())
        .unwrap()
        .with_skew_margin(Duration::from_millis(100));
    let term = Term::For(Duration::from_secs(1));
    for release in [false, true] {
        let key = if release { "r" } else { "h" };
        let lock = locks.acquire(key, "a", term, None).await.unwrap();
        let left = lock.remaining();
        store.set_latency(banklease_testkit::failing::Op::Put, Duration::from_secs(30));
        let started = sys().now();
        let outcome = if release {
            lock.release().await
        } else {
            lock.heartbeat().await.map(drop)
        };
        let took = sys().now().saturating_duration_since(started);
        store.heal();
        store.set_latency(banklease_testkit::failing::Op::Put, Duration::ZERO);
        assert!(outcome.is_err(), "release={release}: {outcome:?}");
        assert!(
            took >= left.saturating_sub(Duration::from_millis(50))
                && took < left + Duration::from_secs(1),
            "release={release}: gave up after {took:?}, the lock had {left:?} left"
        );
        assert!(!lock.am_owner(), "release={release}");
    }
}
