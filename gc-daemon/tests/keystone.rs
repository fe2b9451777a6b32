//! The collector and the `banklease-gc` daemon on a Swift bank authenticated through the CI's
//! Keystone, whose second process hands out tokens that live `KEYSTONE_SHORT_TOKEN_LIFETIME`
//! seconds (20): both keep working through several token expiries (the collector also through
//! a revoked token), re-authenticating a few times, never before every request. Needs
//! `BANKLEASE_TEST_KEYSTONE=1` (`.ci/run`).
#![allow(clippy::disallowed_methods)] // real processes and real token lifetimes

use banklease_testkit::cid;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use banklease::checkpoint::{self, Status};
use banklease::clock::{Jitter, SystemClock};
use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease};
use banklease_gc::{Collector, GcOptions};
use banklease_testkit::keystone::{KeystoneEnv, TokenRecorder};
use object_store::PutPayload;

#[tokio::test]
async fn the_collector_reauthenticates_through_token_expiries_and_collects() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let recorder = TokenRecorder::default();
    // A client of short limits (a 4.5 s retry budget), which its owners declare: on Swift the
    // collector waits for each owner's own budget before deciding (rule (c), per owner).
    let limits = banklease_testkit::backends::SWIFT_TEST_LIMITS;
    let store = ks.store_with_limits(
        &ks.password_vars_at(&ks.short_auth_url()),
        Some(recorder.clone()),
        limits,
    );
    let admin = ks.admin().await;
    let prefix = format!("gc-ks-{}", uuid::Uuid::new_v4().simple());
    let label = format!("swift://{}/{prefix}", ks.container());
    let bank = Bank::from_swift(store.clone(), &prefix, &label).with_declared_limits(limits);
    banklease::layout::init(&bank).await.unwrap();

    // An owner that dies with a protecting checkpoint (its keeper stopped, its lease left to
    // expire), and one that lives through the whole run.
    let windows = LeaseWindows::new(
        Duration::from_millis(500),
        Duration::from_secs(3),
        Duration::from_millis(200),
    )
    .unwrap();
    let dead = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
        .await
        .unwrap();
    let zombie = Checkpoint::create(&dead, &cid("zombie")).await.unwrap();
    zombie
        .put_data("d", PutPayload::from_static(b"bytes"))
        .await
        .unwrap();
    let live = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
        .await
        .unwrap();
    let keeper = live.spawn_keeper(Jitter::seeded(3), 0.1);
    let working = Checkpoint::create(&live, &cid("working")).await.unwrap();
    drop(dead);

    let options = GcOptions::builder()
        .grace(Duration::from_millis(500))
        .skew_margin(Duration::from_millis(100))
        .dry_run(false)
        .build();
    let collector = Collector::new(bank.clone(), Arc::new(SystemClock), options);
    // Passes for three token lifetimes and a little: every one clean, through the expiries and
    // a revocation of the collector's token midway.
    let run = 3 * ks.short_token_lifetime() + Duration::from_secs(5);
    let started = Instant::now();
    let mut passes = 0;
    let mut collected = 0;
    let mut revoked = false;
    while started.elapsed() < run {
        if !revoked && started.elapsed() > ks.short_token_lifetime() / 2 {
            let token = recorder.tokens().pop().expect("the collector's token");
            admin.revoke(&token).await;
            revoked = true;
        }
        let report = collector.run_pass().await.expect("a pass through Keystone");
        assert_eq!(report.errors, 0, "pass {passes}: {report:?}");
        collected += report.collected;
        passes += 1;
        // The live owner keeps its lease. Its own renewals go through the same expiring and
        // revoked tokens, on a 3 s lease: one re-authentication slowed by a loaded Keystone can
        // leave it under its 200 ms validity window for a moment (CI saw it once), which its
        // next renewal ends; losing the lease is what must not happen.
        match live.ensure_valid() {
            Ok(()) => {}
            Err(banklease::Error::ValidityTooShort { remaining, .. }) => {
                eprintln!("pass {passes}: the live owner's validity ran short ({remaining:?} left)")
            }
            Err(e) => panic!("the live owner lost its lease: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(collected, 1, "the zombie, once");
    assert_ne!(
        checkpoint::read_checkpoint(&bank, &cid("zombie"))
            .await
            .unwrap()
            .map(|r| r.status),
        Some(Status::Protecting)
    );
    assert_eq!(
        checkpoint::read_checkpoint(&bank, &cid("working"))
            .await
            .unwrap()
            .map(|r| r.status),
        Some(Status::Protecting),
        "a live owner's checkpoint is never collected"
    );
    // Re-authenticated about once per three quarters of a lifetime (and once for the revoked
    // token), never per request.
    let auths = store.authentications();
    let most = run.as_secs() / (ks.short_token_lifetime().as_secs() * 3 / 4) + 4;
    assert!(
        (3..=most).contains(&auths),
        "{auths} authentications in {passes} passes over {run:?} with {:?} tokens",
        ks.short_token_lifetime()
    );
    assert!(
        matches!(live.state(), banklease::LeaseState::Held { .. }),
        "the live owner kept its lease: {:?}",
        live.state()
    );
    working.complete(Status::Available).await.unwrap();
    keeper.release().await.unwrap();
}

#[path = "common/metrics_http.rs"]
mod metrics_http;
use metrics_http::{http_get, sample};

#[test]
fn the_daemon_keeps_its_gc_lease_and_passes_through_token_expiries() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("gcd-ks-{}", uuid::Uuid::new_v4().simple());
    let url = format!("swift://{}/{prefix}", ks.container());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.path().join("gc.log");
    let cli = |cmd: &mut Command| {
        // As an operator's openrc sets it: no TempAuth, no developer's BANKLEASE_*.
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("BANKLEASE_") || k.starts_with("ST_") || k.starts_with("OS_") {
                cmd.env_remove(&key);
            }
        }
        cmd.envs(ks.password_vars_at(&ks.short_auth_url()));
    };
    // The bank, as `banklease init` makes it.
    let bank = Bank::from_swift(ks.store(&ks.password_vars(), None), &prefix, &url);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(banklease::layout::init(&bank))
        .unwrap();

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_banklease-gc"));
    cli(&mut cmd);
    let mut child = cmd
        .env("BANKLEASE_BANK__URL", &url)
        .env("BANKLEASE_GC__LEASE_RENEW_WINDOW", "1s")
        .env("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "5s")
        .env("BANKLEASE_GC__LEASE_VALIDITY_WINDOW", "500ms")
        .env("BANKLEASE_GC__INTERVAL", "2s")
        .env("BANKLEASE_GC__METRICS_ADDR", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "info,banklease=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let metric = |name: &str| {
        http_get(port, "/metrics")
            .ok()
            .and_then(|(s, body)| (s == 200).then(|| sample(&body, name)).flatten())
    };
    // Active within 30 s; then active at every look for three token lifetimes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric("banklease_gc_active") != Some(1.0) {
        assert!(Instant::now() < deadline, "never active:\n{}", logs());
        assert!(child.try_wait().unwrap().is_none(), "exited:\n{}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let start_passes = metric("banklease_gc_passes_total{outcome=\"ok\"}").unwrap_or(0.0);
    let until = Instant::now() + 3 * ks.short_token_lifetime() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(child.try_wait().unwrap().is_none(), "exited:\n{}", logs());
        assert_eq!(metric("banklease_gc_active"), Some(1.0), "{}", logs());
        std::thread::sleep(Duration::from_millis(500));
    }
    let passes = metric("banklease_gc_passes_total{outcome=\"ok\"}").unwrap_or(0.0) - start_passes;
    assert!(passes >= 10.0, "{passes} passes:\n{}", logs());
    assert_eq!(metric("banklease_gc_errors_total"), Some(0.0), "{}", logs());
    let text = logs();
    let reauths = text.matches("swift authenticated").count();
    assert!(
        (3..=10).contains(&reauths),
        "{reauths} authentications (debug log):\n{text}"
    );
    assert!(!text.contains(" ERROR "), "{text}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after TERM:\n{}", logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(exit.code(), Some(0), "{}", logs());
}
