//! A store outage under a running job, as cron mails it: one `warning:` line (the hold is not
//! being renewed, with the time it has left and when COMMAND is stopped) and one `error:` line
//! (COMMAND was stopped), nothing else, for `lock run`, `run --lock` and `run`, exit 75. On S3
//! (moto, `BANKLEASE_TEST_S3=1`) behind a proxy that stops forwarding while COMMAND runs.

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use banklease_testkit::backends::Backend;
use banklease_testkit::stall::StallingProxy;

#[test]
fn an_outage_mails_one_warning_and_one_error() {
    if !Backend::S3.available() {
        eprintln!("skipped: set BANKLEASE_TEST_S3=1 (moto) to run");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bank = runtime.block_on(Backend::S3.open_in("cli-outage"));
    let url = bank.bank.label().to_owned();
    let upstream = std::env::var("AWS_ENDPOINT").expect("AWS_ENDPOINT");
    let proxy = runtime.block_on(StallingProxy::start(upstream.trim_start_matches("http://")));
    let work = tempfile::tempdir().unwrap();
    let flag = work.path().join("running");

    for (name, head, warned_about) in [
        (
            "lock-run",
            vec!["lock", "run", "--duration", "4s", "out/a", "--"],
            "the lock key=`default/out/a`",
        ),
        (
            "run-lock",
            vec!["run", "--lock", "out/b", "--lock-duration", "8s", "--"],
            "the lease of owner_id=",
        ),
        ("run", vec!["run", "--"], "the lease of owner_id="),
    ] {
        proxy.resume();
        let _ = std::fs::remove_file(&flag);
        let job = format!("touch '{}'; sleep 60", flag.display());
        // As an operator runs it: no `RUST_LOG`, so stderr is the one-line kind.
        let mut cmd = common::bare();
        cmd.env_remove("RUST_LOG");
        let mut child = cmd
            .args(["--bank", &url])
            .args(&head)
            .args(["sh", "-c", &job])
            .env("AWS_ENDPOINT", proxy.url())
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "1100ms")
            .env("BANKLEASE_LEASE__RENEW_WINDOW", "1s")
            .env("BANKLEASE_LEASE__EXPIRE_WINDOW", "6s")
            .env("BANKLEASE_LEASE__VALIDITY_WINDOW", "1s")
            .env("NO_COLOR", "1")
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
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{name}: still running 60 s into the outage");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(75), "{name}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{name}: {stderr}");
        assert!(
            lines[0].starts_with(&format!("warning: {warned_about}"))
                && lines[0].contains("has not been renewed")
                && lines[0].contains("more, and COMMAND is stopped in"),
            "{name}: {stderr}"
        );
        assert!(
            lines[1].starts_with("error: ") && lines[1].contains("COMMAND was stopped"),
            "{name}: {stderr}"
        );
    }
    proxy.resume();
}
