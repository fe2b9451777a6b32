//! `lock run` and `run --lock` give up releasing at the lock's `valid_until`: with the store
//! unreachable when COMMAND exits, they exit with COMMAND's status once the lock has run out on
//! its own, saying so in one line — not after the store client's whole retry budget, three
//! times over. On S3 (moto, `BANKLEASE_TEST_S3=1`) behind a proxy that stops forwarding.

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use banklease_testkit::backends::Backend;
use banklease_testkit::stall::StallingProxy;

use common::BIN;

#[test]
fn release_gives_up_at_the_locks_end_when_the_store_hangs() {
    if !Backend::S3.available() {
        eprintln!("skipped: set BANKLEASE_TEST_S3=1 (moto) to run");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bank = runtime.block_on(Backend::S3.open_in("cli-release"));
    let url = bank.bank.label().to_owned();
    let upstream = std::env::var("AWS_ENDPOINT").expect("AWS_ENDPOINT");
    let proxy = runtime.block_on(StallingProxy::start(upstream.trim_start_matches("http://")));
    let work = tempfile::tempdir().unwrap();
    let flag = work.path().join("done");

    for (name, head) in [
        (
            "lock-run",
            vec!["lock", "run", "--duration", "4s", "rel/a", "--"],
        ),
        (
            "run-lock",
            vec!["run", "--lock", "rel/b", "--lock-duration", "4s", "--"],
        ),
    ] {
        proxy.resume();
        let _ = std::fs::remove_file(&flag);
        let job = format!("touch '{}'; sleep 0.3; exit 7", flag.display());
        let mut cmd = Command::new(BIN);
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(var);
            }
        }
        let mut child = cmd
            .args(["--bank", &url])
            .args(&head)
            .args(["sh", "-c", &job])
            .env("AWS_ENDPOINT", proxy.url())
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "1100ms")
            // `run`'s owner lease gives up releasing at its own end: a short one.
            .env("BANKLEASE_LEASE__RENEW_WINDOW", "1s")
            .env("BANKLEASE_LEASE__EXPIRE_WINDOW", "4s")
            .env("BANKLEASE_LEASE__VALIDITY_WINDOW", "500ms")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while !flag.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name}: COMMAND never ran"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // COMMAND runs: from now on the store answers nothing.
        proxy.stall();
        let stalled_at = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if stalled_at.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{name}: still releasing 30 s after the store stopped answering");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = stalled_at.elapsed();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(7), "{name}: COMMAND's status: {err}");
        // The lock's 4 s from its last renewal, and some slack.
        assert!(
            took < Duration::from_secs(8),
            "{name}: exited after {took:?}: {err}"
        );
        // Its own lines (the library's log lines aside, which RUST_LOG governs).
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("warning: ") || l.starts_with("error: "))
            .collect();
        assert_eq!(lines.len(), 1, "{name}: one line: {err}");
        assert!(
            lines[0].contains("was not released") && lines[0].contains("rel/"),
            "{name}: {err}"
        );
    }
}
