//! Every common failure, run as an operator runs it (no `RUST_LOG`): stderr is exactly one line
//! starting `error:`, saying what to do; log lines appear only with `-v` or `RUST_LOG`.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::process::{Command, Output};

mod common;

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::SystemClock;
use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease};
use common::{output_text as text, BIN};

/// `banklease args` with none of the caller's `BANKLEASE_*` nor `RUST_LOG`; `env` added.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("BANKLEASE_") || name == "RUST_LOG" {
            cmd.env_remove(&*name);
        }
    }
    cmd.args(args)
        .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Exactly one stderr line, starting `error: `; returned.
fn one_error_line(what: &str, out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.starts_with("error: ") && err.lines().count() == 1,
        "{what}: one `error:` line: {}",
        text(out)
    );
    err
}

/// What fails, its arguments and environment, its exit status, what its line must say.
type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, i32, &'a str);

#[test]
fn common_failures_are_one_error_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = banklease_testkit::file_bank(&bank);
    let path = bank.display().to_string();
    let config = dir.path().join("unitless.toml");
    std::fs::write(&config, "[lease]\nexpire_window = 600\n").unwrap();
    let config = config.display().to_string();
    let held = run(
        &["--bank", &url, "lock", "acquire", "k", "--duration", "1m"],
        &[],
    );
    assert_eq!(held.status.code(), Some(0), "{}", text(&held));

    let cases: [Case; 12] = [
        ("no bank", vec!["lease", "list"], vec![], 2, "no bank given"),
        (
            "a path for a URL",
            vec!["--bank", &path, "lease", "list"],
            vec![],
            2,
            "did you mean `file://",
        ),
        (
            "a unit-less duration in a file",
            vec!["--config", &config, "--bank", &url, "lease", "list"],
            vec![],
            2,
            "add a unit, e.g. `600s`",
        ),
        (
            "a unit-less duration in a variable",
            vec!["--bank", &url, "lease", "list"],
            vec![("BANKLEASE_LEASE__EXPIRE_WINDOW", "600")],
            2,
            "add a unit, e.g. `600s`",
        ),
        (
            "a unit-less duration in a flag",
            vec![
                "--bank",
                &url,
                "validity-check",
                "--owner",
                "o",
                "--validity-window",
                "5",
            ],
            vec![],
            2,
            "add a unit, e.g. `5s`",
        ),
        (
            "a unit-less duration in a lock run flag",
            vec![
                "--bank",
                &url,
                "lock",
                "run",
                "--duration",
                "30",
                "k2",
                "--",
                "true",
            ],
            vec![],
            125,
            "add a unit, e.g. `30s`",
        ),
        (
            "an unknown flag",
            vec!["--bank", &url, "lease", "list", "--nope"],
            vec![],
            2,
            "--nope",
        ),
        (
            "no bank there",
            vec!["--bank", "file:///nonexistent/bank", "lease", "list"],
            vec![],
            2,
            "banklease --bank file:///nonexistent/bank init",
        ),
        (
            "a lock held by someone else",
            vec!["--bank", &url, "lock", "acquire", "k", "--duration", "1m"],
            vec![],
            1,
            "key=`default/k` is held by `",
        ),
        (
            "a release of someone else's lock",
            vec!["--bank", &url, "lock", "release", "k", "--owner", "other"],
            vec![],
            1,
            "key=`default/k` is held by `",
        ),
        (
            "locks in memory",
            vec![
                "--bank",
                "memory://",
                "lock",
                "acquire",
                "k",
                "--duration",
                "1m",
            ],
            vec![],
            2,
            "use a file:, s3: or az: bank",
        ),
        (
            "run --lock held by someone else",
            vec![
                "--bank",
                &url,
                "run",
                "--lock",
                "k",
                "--lock-block-for",
                "0",
                "--",
                "true",
            ],
            vec![],
            1,
            "key=`default/k` is held by `",
        ),
    ];
    for (what, args, env, code, needle) in cases {
        let out = run(&args, &env);
        assert_eq!(out.status.code(), Some(code), "{what}: {}", text(&out));
        let line = one_error_line(what, &out);
        assert!(line.contains(needle), "{what}: `{needle}` in {line}");
    }
}

#[test]
fn log_lines_only_with_v_or_rust_log() {
    let dir = tempfile::tempdir().unwrap();
    let url = banklease_testkit::file_bank(&dir.path().join("bank"));
    // A held lock with a logged acquisition: nothing on stderr by default, the log with -v.
    let args = ["--bank", &url, "lock", "run", "k", "--", "true"];
    let out = run(&args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stderr.is_empty(), "{}", text(&out));
    let out = run(&[&["-v"], &args[..]].concat(), &[]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lock acquired"),
        "{}",
        text(&out)
    );
    let out = run(&args, &[("RUST_LOG", "info")]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lock acquired"),
        "{}",
        text(&out)
    );
}

#[test]
fn validity_check_takes_a_unique_short_id_and_refuses_an_ambiguous_one() {
    let dir = tempfile::tempdir().unwrap();
    let url = banklease_testkit::file_bank(&dir.path().join("bank"));
    // Two owners whose ids share a prefix, their leases still there (short-lived, dead).
    let owners = ["backup-host-1.4242", "backup-host-2.4242"];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let bank = Bank::open(&url).unwrap();
        let windows = LeaseWindows::new(
            Duration::from_millis(300),
            Duration::from_secs(1),
            Duration::from_millis(100),
        )
        .unwrap();
        for id in owners {
            let id = OwnerId::parse(id).unwrap();
            OwnerLease::acquire(&bank, id, windows, Arc::new(SystemClock))
                .await
                .unwrap();
        }
    });
    // Expired (1 s) past the skew margin: both owners are dead.
    std::thread::sleep(Duration::from_millis(1_500));
    let common = "backup-host-".len();
    // A unique prefix: judged as the full id.
    let short = &owners[0][..common + 1];
    let out = run(&["--bank", &url, "validity-check", "--owner", short], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("not ok: owner_id=`{}` ", owners[0])),
        "{}",
        text(&out)
    );
    // An ambiguous one: refused, naming both, exit 2.
    let out = run(
        &[
            "--bank",
            &url,
            "validity-check",
            "--owner",
            &owners[0][..common],
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let line = one_error_line("ambiguous", &out);
    assert!(
        line.contains(owners[0]) && line.contains(owners[1]),
        "{line}"
    );
}
