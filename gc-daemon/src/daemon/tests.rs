use super::*;

use std::time::Duration;

use crate::metrics;
use banklease::paths::Key;

use banklease::clock::{Clock as _, SystemClock};
use banklease_testkit::failing::FailingStore;
use banklease_testkit::gate::{GateStore, ListGate};
use banklease_testkit::sim_store::{SimStore, StoreClock};
use object_store::memory::InMemory;
use object_store::ObjectStoreExt as _;

fn config() -> Config {
    let env = [
        ("BANKLEASE_GC__LEASE_RENEW_WINDOW", "100ms"),
        ("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "1s"),
        ("BANKLEASE_GC__LEASE_VALIDITY_WINDOW", "50ms"),
        ("BANKLEASE_GC__INTERVAL", "50ms"),
        ("BANKLEASE_LEASE__SKEW_MARGIN", "50ms"),
        ("BANKLEASE_LEASE__OWNER_ID_SCHEME", "uuid"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    Config::load_from(None, env).unwrap()
}

fn clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// Poll `cond` every 10 ms for at most `secs` seconds.
async fn eventually(secs: u64, what: &str, cond: impl Fn() -> bool) {
    for _ in 0..secs * 100 {
        if cond() {
            return;
        }
        SystemClock.sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out after {secs}s waiting until {what}");
}

#[test]
fn on_change_reports_only_new_values() {
    let mut c = OnChange::default();
    assert!(c.changed("a"));
    assert!(!c.changed("a"));
    assert!(c.changed("b"));
    c.reset();
    assert!(c.changed("b"));
}

#[tokio::test]
async fn refuses_to_start_when_the_probe_fails() {
    let store = FailingStore::new(InMemory::new());
    store.set_partitioned(true);
    let bank = Bank::from_store(Arc::new(store), "", "partitioned://");
    let daemon = Daemon::new(bank, clock(), config());
    let err = daemon
        .run(std::future::pending())
        .await
        .expect_err("a bank that cannot be probed is refused");
    let msg = banklease::error::error_chain(&err);
    assert!(msg.contains("refusing to start"), "{msg}");
    assert!(msg.contains("partitioned://"), "{msg}");
}

/// A store that stamps whole seconds (S3, Swift's Last-Modified) and a 50 ms margin: no
/// judgement could absorb the truncation, so the daemon refuses to start.
#[tokio::test]
async fn refuses_to_start_when_the_margin_is_below_the_stamp_resolution() {
    let world = banklease::clock::MockClock::new();
    // The mock clock's wall time starts on a whole second and is not advanced: every
    // stamp is a whole second.
    let store = SimStore::new(StoreClock::new(world.clone()));
    let bank = banklease_testkit::made(Bank::from_store(Arc::new(store), "", "whole-seconds://"));
    let daemon = Daemon::new(bank, Arc::new(world), config());
    // Bounded: a daemon that starts would run until shutdown.
    let err = tokio::time::timeout(Duration::from_secs(20), daemon.run(std::future::pending()))
        .await
        .expect("the daemon refuses to start instead of running")
        .expect_err("a margin below the stamp resolution is refused");
    let msg = banklease::error::error_chain(&err);
    assert!(msg.contains("lease.skew_margin=`50ms`"), "{msg}");
    assert!(msg.contains("resolution=`1s`"), "{msg}");
}

#[tokio::test]
async fn shutdown_before_the_probe_ends_cleanly() {
    let bank = Bank::open("memory://").unwrap();
    let result = Daemon::new(bank, clock(), config())
        .run_once(std::future::ready(()))
        .await
        .unwrap();
    assert!(result.is_none());
}

#[tokio::test]
async fn shutdown_waits_for_the_pass_in_flight_then_releases() {
    let store = GateStore::new(InMemory::new());
    let bank = banklease_testkit::made(Bank::from_store(Arc::new(store.clone()), "", "gated://"));
    // Each listing of a pass waits at the gate: the pass stays in flight until permits come.
    let ListGate { gate, entered } = store.gate_listings();
    let path = Key::GcActive.path(&bank);
    let daemon = Daemon::new(bank.clone(), clock(), config());
    let metrics = daemon.metrics().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(daemon.run(async move {
        let _ = stopped.await;
    }));

    tokio::time::timeout(Duration::from_secs(5), entered.notified())
        .await
        .expect("the first pass starts listing");
    stop.send(()).unwrap();
    // Many renew windows later: still waiting for the pass, still holding the lease (the
    // keeper renews it meanwhile, so no standby could start a pass).
    SystemClock.sleep(Duration::from_millis(400)).await;
    assert!(
        !run.is_finished(),
        "shutdown must wait for the pass in flight"
    );
    assert!(
        bank.store().head(&path).await.is_ok(),
        "lease kept during the pass"
    );
    assert!(metrics.is_active());

    // Open the gate for the rest of the pass (it lists the protecting index, then leases).
    gate.add_permits(16);
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the daemon stops once the pass ended")
        .unwrap()
        .unwrap();
    assert_eq!(
        metrics.passes(metrics::Outcome::Ok) + metrics.passes(metrics::Outcome::Failed),
        1,
        "the pass in flight finished and no new one started"
    );
    assert!(
        bank.store().head(&path).await.is_err(),
        "lease released after the pass"
    );
    assert!(!metrics.is_active());
}

#[tokio::test]
async fn one_active_per_bank_and_release_on_shutdown() {
    let bank = Bank::open("memory://").unwrap();
    let path = Key::GcActive.path(&bank);
    let a = Daemon::new(bank.clone(), clock(), config());
    let b = Daemon::new(bank.clone(), clock(), config());
    let (ma, mb) = (a.metrics().clone(), b.metrics().clone());
    let (stop_a, a_stopped) = tokio::sync::oneshot::channel::<()>();
    let (stop_b, b_stopped) = tokio::sync::oneshot::channel::<()>();
    let a = tokio::spawn(a.run(async move {
        let _ = a_stopped.await;
    }));
    let b = tokio::spawn(b.run(async move {
        let _ = b_stopped.await;
    }));

    eventually(5, "one daemon is active", || {
        ma.is_active() || mb.is_active()
    })
    .await;
    // Several renew windows: the other one must stay on standby.
    for _ in 0..30 {
        assert!(
            ma.is_active() != mb.is_active(),
            "exactly one daemon must be active"
        );
        SystemClock.sleep(Duration::from_millis(10)).await;
    }
    // Passes run (and, while the collector is not there yet, fail) without ending the
    // active spell.
    let (active_metrics, standby_metrics) = if ma.is_active() {
        (&ma, &mb)
    } else {
        (&mb, &ma)
    };
    eventually(5, "the active daemon runs passes", || {
        let m = active_metrics;
        m.passes(metrics::Outcome::Ok) + m.passes(metrics::Outcome::Failed) >= 2
    })
    .await;
    assert!(active_metrics.is_active());
    let standby_passes = standby_metrics.passes(metrics::Outcome::Ok)
        + standby_metrics.passes(metrics::Outcome::Failed);
    assert_eq!(standby_passes, 0, "a standby never runs a pass");

    // Stop the active one: it releases, so the standby takes over well before expiry.
    let (stop_active, active_task, standby_task, stop_standby) = if ma.is_active() {
        (stop_a, a, b, stop_b)
    } else {
        (stop_b, b, a, stop_a)
    };
    stop_active.send(()).unwrap();
    active_task.await.unwrap().unwrap();
    eventually(5, "the standby takes over", || standby_metrics.is_active()).await;
    assert!(!active_metrics.is_active());

    stop_standby.send(()).unwrap();
    standby_task.await.unwrap().unwrap();
    assert!(!standby_metrics.is_active());
    assert!(
        bank.store().head(&path).await.is_err(),
        "the gc lease is released on shutdown"
    );
}
