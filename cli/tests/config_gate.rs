//! One configuration gate: the same unsafe configuration is refused with the same line whichever
//! way the bank is given (`[bank] url`, `BANKLEASE_BANK__URL`, `BANKLEASE_BANK`, `--bank`) and
//! by whichever binary (`banklease`, `banklease-gc`); `banklease-gc` takes `BANKLEASE_BANK`.

#![allow(clippy::disallowed_methods)] // real processes

use banklease_testkit::cid;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

const BIN: &str = env!("CARGO_BIN_EXE_banklease");

mod common;

use common::gc_bin;

/// `program args` with nothing from the caller's `BANKLEASE_*` but `env`.
fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "error")
        // No store is ever reached: a refusal comes before the bank is opened.
        .env("AWS_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .expect("run the binary")
}

fn text(out: &Output) -> String {
    format!(
        "rc={:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The refusal of rule (b), without the sources it names in parentheses at the end.
fn refusal(how: &str, out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("gc.late_write_window=`1m` needs"))
        .unwrap_or_else(|| panic!("{how}: no refusal of gc.late_write_window: {}", text(out)));
    let from = line.find("gc.late_write_window=`1m` needs").unwrap();
    let line = &line[from..];
    line.rsplit_once(" (")
        .map_or(line, |(rule, _)| rule)
        .to_owned()
}

#[test]
fn every_way_of_giving_the_bank_meets_the_same_refusal() {
    let late = ("BANKLEASE_GC__LATE_WRITE_WINDOW", "1m");
    let url = "s3://bucket/prefix";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("banklease.toml");
    std::fs::write(&file, format!("[bank]\nurl = \"{url}\"\n")).unwrap();
    let file = file.to_str().unwrap();
    let gc = gc_bin();
    let cases: Vec<(&str, Output)> = vec![
        (
            "banklease, [bank] url",
            run(Path::new(BIN), &["--config", file, "gc"], &[late]),
        ),
        (
            "banklease, BANKLEASE_BANK__URL",
            run(
                Path::new(BIN),
                &["gc"],
                &[late, ("BANKLEASE_BANK__URL", url)],
            ),
        ),
        (
            "banklease, BANKLEASE_BANK",
            run(Path::new(BIN), &["gc"], &[late, ("BANKLEASE_BANK", url)]),
        ),
        (
            "banklease --bank",
            run(Path::new(BIN), &["--bank", url, "gc"], &[late]),
        ),
        (
            "banklease --bank, lock list",
            run(Path::new(BIN), &["--bank", url, "lock", "list"], &[late]),
        ),
        (
            "banklease-gc --bank",
            run(&gc, &["--bank", url, "--once"], &[late]),
        ),
        (
            "banklease-gc, BANKLEASE_BANK",
            run(&gc, &["--once"], &[late, ("BANKLEASE_BANK", url)]),
        ),
    ];
    let expected = refusal(cases[0].0, &cases[0].1);
    for (how, out) in &cases {
        assert_eq!(out.status.code(), Some(2), "{how}: {}", text(out));
        assert_eq!(refusal(how, out), expected, "{how}");
    }
    // `run` and `lock run` refuse before anything runs, with their own status (125).
    let out = run(
        Path::new(BIN),
        &["--bank", url, "lock", "run", "k", "--", "touch", "ran"],
        &[late],
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    assert_eq!(refusal("lock run", &out), expected);
    assert!(!Path::new("ran").exists());
}

#[test]
fn banklease_gc_takes_the_bank_from_banklease_bank() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("bank").display());
    let out = run(Path::new(BIN), &["--bank", &url, "init"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(&gc_bin(), &["--once"], &[("BANKLEASE_BANK", &url)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["collected"], 0, "{report}");
}

/// Lock commands hold the skew margin to the store's timestamp resolution as the GC does: on S3
/// (`Last-Modified` to the second) a taker with a smaller margin could judge a holder expired
/// before the holder's own `valid_until`. (Before, only the daemon and Python checked.)
#[test]
fn lock_commands_refuse_a_skew_margin_below_the_stores_stamp_resolution() {
    use banklease_testkit::backends::Backend;
    if !Backend::S3.available() {
        eprintln!("skipped: set BANKLEASE_TEST_S3=1 (moto) to run");
        return;
    }
    let bank = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(Backend::S3.open_in("cli-gate"));
    let url = bank.bank.label().to_owned();
    let margin = [("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")];
    let s3: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .collect();
    let with_s3 = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(name);
            }
        }
        cmd.args(["--bank", &url])
            .args(args)
            .envs(margin)
            .envs(s3.iter().map(|(k, v)| (k, v)))
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "error")
            .output()
            .unwrap()
    };
    for (args, code) in [
        (&["lock", "acquire", "k", "--duration", "30s"][..], 2),
        (&["lock", "run", "k", "--", "true"][..], 125),
        (&["run", "--lock", "k", "--", "true"][..], 125),
    ] {
        let out = with_s3(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(
                "lease.skew_margin=`100ms` is below the store's timestamp resolution=`1s`"
            ),
            "{args:?}: {err}"
        );
    }
    let out = with_s3(&["--json", "lock", "show", "k"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"state\":\"missing\""),
        "nothing was acquired: {}",
        text(&out)
    );
}

/// A GC daemon on Swift with 2 s owner windows and a 5 s grace starts and collects when its
/// store client's retry budget lets an owner's retried decision land before the GC's (2 s
/// requests, 2 s of retries: 4.5 s), and is refused, naming both knobs, when it does not (10 s
/// of retries: 14.5 s). Before `[bank] retry_timeout` existed the budget was 11m 15s and no grace
/// of seconds could run on Swift.
#[test]
fn a_gc_daemon_on_swift_runs_with_short_windows_under_a_budget_that_fits() {
    use banklease::checkpoint::Status;
    use banklease::clock::SystemClock;
    use banklease::{Checkpoint, LeaseWindows, OwnerId, OwnerLease};
    use banklease_testkit::backends::Backend;
    use std::time::{Duration, Instant};

    if !Backend::Swift.available() {
        eprintln!("skipped: set BANKLEASE_TEST_SWIFT=1 to run");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bank = runtime
        .block_on(Backend::Swift.open_in("cli-gate-daemon"))
        .bank;
    let url = bank.label().to_owned();
    let windows = LeaseWindows::new(
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
    .unwrap();
    // An owner that writes one checkpoint and dies (never renews).
    runtime.block_on(async {
        let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
            .await
            .unwrap();
        Checkpoint::create(&lease, &cid("zombie")).await.unwrap();
    });
    let daemon = |retry: &str| {
        let mut cmd = Command::new(gc_bin());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(name);
            }
        }
        cmd.envs([
            ("BANKLEASE_BANK", url.as_str()),
            ("BANKLEASE_LEASE__RENEW_WINDOW", "1s"),
            ("BANKLEASE_LEASE__EXPIRE_WINDOW", "2s"),
            ("BANKLEASE_LEASE__VALIDITY_WINDOW", "500ms"),
            ("BANKLEASE_LEASE__SKEW_MARGIN", "100ms"),
            ("BANKLEASE_GC__GRACE", "5s"),
            ("BANKLEASE_GC__LATE_WRITE_WINDOW", "20s"),
            ("BANKLEASE_GC__INTERVAL", "300ms"),
            ("BANKLEASE_GC__LEASE_RENEW_WINDOW", "200ms"),
            ("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "3s"),
            ("BANKLEASE_GC__LEASE_VALIDITY_WINDOW", "100ms"),
            ("BANKLEASE_BANK__REQUEST_TIMEOUT", "2s"),
            ("BANKLEASE_BANK__RETRY_TIMEOUT", retry),
            ("NO_COLOR", "1"),
            ("RUST_LOG", "warn"),
        ]);
        cmd
    };

    let refused = daemon("10s").output().unwrap();
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("raise gc.grace to at least") && err.contains("bank.retry_timeout=`10s`"),
        "both knobs named: {err}"
    );

    let mut running = daemon("2s")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let collected = loop {
        let status = runtime
            .block_on(banklease::checkpoint::read_checkpoint(
                &bank,
                &cid("zombie"),
            ))
            .ok()
            .flatten()
            .map(|r| r.status);
        if status == Some(Status::Deleted) {
            break true;
        }
        if start.elapsed() > Duration::from_secs(60) || running.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(running.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    let out = running.wait_with_output().unwrap();
    assert!(collected, "the daemon did not collect: {}", text(&out));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
