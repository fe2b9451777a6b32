//! README's flock table and `lock` exit-code table, row by row, through the binary on a `file:`
//! bank: what a user of `flock(1)` types, the status they get, what stderr says (flock is silent
//! on a conflict), and whether COMMAND ran.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::path::Path;
use std::process::Output;

use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::work::Env;
use common::{output_text as text, wait_child, wait_for};

/// What the flock rows ask of the bank beyond running the binary.
trait Rows {
    fn ran(&self) -> bool;
    fn state(&self, key: &str) -> String;
    fn hold(&self, key: &str) -> String;
}

/// A `file:` bank with a skew margin a `file:` bank allows, as an operator runs the binary.
fn env() -> Env {
    Env::with_vars(&[
        ("BANKLEASE_LEASE__SKEW_MARGIN", "100ms"),
        ("USER", "ci-operator"),
    ])
}

impl Rows for Env {
    fn ran(&self) -> bool {
        self.work().join("ran").exists()
    }

    fn state(&self, key: &str) -> String {
        let out = self.run(&["--json", "lock", "show", key]);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("lock show {key}: {e}: {}", text(&out)));
        j["state"].as_str().unwrap_or_default().to_owned()
    }

    /// `key` held by `lock acquire` for 60 s; its whole holder name.
    fn hold(&self, key: &str) -> String {
        // Waiting: a key released from under a `lock run` by its token is taken once what is
        // left of that holder's tree is gone.
        let out = self.run(&[
            "--json",
            "lock",
            "acquire",
            key,
            "--duration",
            "60s",
            "-w",
            "20",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        j["holder"].as_str().unwrap().to_owned()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exactly one line on stderr, starting `error: `.
fn one_error_line(out: &Output) -> String {
    let err = stderr(out);
    assert!(
        err.starts_with("error: ") && err.lines().count() == 1,
        "one `error:` line: {}",
        text(out)
    );
    err
}

#[test]
fn each_row_of_the_flock_table() {
    let env = env();
    env.hold("held");
    let touch = ["--", "touch", "ran"];
    // -n, --nb, --nonblock; -w, --wait, --timeout: a conflict exits 1, silent, as flock.
    for flags in [
        &["-n"][..],
        &["--nb"],
        &["--nonblock"],
        &["-w", "0.3"],
        &["--wait", "0.3"],
        &["--timeout", "0.3"],
        &["--block-for", "300ms"],
    ] {
        let args = [&["lock", "run"], flags, &["held"], &touch[..]].concat();
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {}", text(&out));
        assert_eq!(
            stderr(&out),
            "",
            "{flags:?}: silent on a conflict, as flock"
        );
        assert!(!env.ran(), "{flags:?}: COMMAND ran");
    }
    // -E CODE: 0 to 255, as flock; 0 is "a conflict is fine".
    for code in ["0", "75", "255"] {
        let out = env.run(&[&["lock", "run", "-n", "-E", code, "held"], &touch[..]].concat());
        assert_eq!(
            out.status.code(),
            Some(code.parse().unwrap()),
            "-E {code}: {}",
            text(&out)
        );
        assert_eq!(stderr(&out), "", "-E {code}");
    }
    let out = env.run(&[&["lock", "run", "-n", "-E", "256", "held"], &touch[..]].concat());
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    one_error_line(&out);
    // --verbose says why, in one line.
    let out = env.run(&[&["lock", "run", "--verbose", "-n", "held"], &touch[..]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = one_error_line(&out);
    assert!(
        err.contains("key=`default/held` is held by `ci-operator."),
        "{err}"
    );
    assert!(!env.ran());
    // --verbose on success says how long getting the lock took, as flock.
    let out = env.run(&["lock", "run", "--verbose", "free", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stderr(&out).starts_with("note: acquired key=`default/free`")
            && stderr(&out).lines().count() == 1,
        "{}",
        text(&out)
    );

    // -c CMD, --command CMD: `sh -c CMD`, after the key or before it.
    for args in [
        &["lock", "run", "k", "-c", "echo \"$0\" >ran; exit 4"][..],
        &["lock", "run", "-c", "echo \"$0\" >ran; exit 4", "k"],
        &["lock", "run", "k", "--command", "echo \"$0\" >ran; exit 4"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", text(&out));
        assert_eq!(env.read("ran").trim(), "/bin/sh", "{args:?}");
        std::fs::remove_file(env.work().join("ran")).unwrap();
    }
    // -c takes exactly one command, as flock: a usage error, nothing run.
    let out = env.run(&["lock", "run", "k", "-c", "touch ran", "extra"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    one_error_line(&out);
    assert!(!env.ran());
    // Waiting without -n/-w: forever, first come first served (the holder releases).
    let holder = env.hold("soon");
    let mut waiter = env.spawn(&["lock", "run", "soon", "--", "touch", "ran"], "waiter");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (owner, session) = holder.split_once('.').unwrap();
    let out = env.run(&[
        "lock",
        "release",
        "soon",
        "--owner",
        owner,
        "--session",
        session,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        wait_child(&mut waiter).code(),
        Some(0),
        "{}",
        env.read("waiter.err")
    );
    assert!(env.ran());
}

#[test]
fn each_row_of_the_lock_exit_code_table() {
    let env = env();
    // lock run: COMMAND's own status, 128 + N for a signal.
    let out = env.run(&["lock", "run", "k", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let out = env.run(&["lock", "run", "k", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out));
    // 1 and -E: in the flock table. 125: lock run itself failed — usage, a bad duration,
    // memory://, no bank — in one line.
    for args in [
        &["lock", "run", "k"][..],
        &["lock", "run", "--no-such-flag", "k", "--", "true"],
        &["lock", "run", "--duration", "30", "k", "--", "true"],
        &["--bank", "memory://", "lock", "run", "k", "--", "true"],
        &[
            "--bank",
            "file:///nonexistent/bank",
            "lock",
            "run",
            "k",
            "--",
            "true",
        ],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", text(&out));
        one_error_line(&out);
    }
    // 126, 127: COMMAND cannot be executed, not found.
    std::fs::write(env.work().join("noexec"), "x").unwrap();
    let out = env.run(&["lock", "run", "k", "--", "./noexec"]);
    assert_eq!(out.status.code(), Some(126), "{}", text(&out));
    one_error_line(&out);
    let out = env.run(&["lock", "run", "k", "--", "./no-such-command"]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    one_error_line(&out);
    // 75: the lock could no longer be proved held (taken by someone else): COMMAND stopped, one
    // line.
    let mut job = env.spawn(
        &[
            "lock",
            "run",
            "--duration",
            "4s",
            "lost",
            "--",
            "sh",
            "-c",
            "echo \"$BANKLEASE_LOCK_TOKEN\" >token; echo \"$BANKLEASE_LOCK_OWNER\" >owner; sleep 30",
        ],
        "lost",
    );
    wait_for("the job's holder name", || {
        env.read("owner").ends_with('\n')
    });
    let out = env.run(&[
        "lock",
        "release",
        "lost",
        "--owner",
        env.read("owner").trim(),
        "--token",
        env.read("token").trim(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    env.hold("lost");
    let status = wait_child(&mut job);
    assert_eq!(status.code(), Some(75), "{}", env.read("lost.err"));
    let err = env.read("lost.err");
    assert!(
        err.starts_with("error: the lock key=`default/lost` could no longer be proved held")
            && err.lines().count() == 1,
        "one `error:` line: {err}"
    );
    // 128 + N: a signal while waiting; the queue is left, nothing run.
    let mut waiter = env.spawn(&["lock", "run", "lost", "--", "touch", "ran"], "waiter");
    wait_for("a waiter's ticket", || {
        let out = env.run(&["--json", "lock", "show", "lost"]);
        String::from_utf8_lossy(&out.stdout).contains("\"live\":true")
    });
    kill_process(Pid::from_raw(waiter.id() as i32).unwrap(), Signal::TERM).unwrap();
    assert_eq!(wait_child(&mut waiter).code(), Some(128 + 15));
    assert!(!env.ran());
    assert!(
        env.read("waiter.err").starts_with("error: ")
            && env.read("waiter.err").lines().count() == 1,
        "{}",
        env.read("waiter.err")
    );

    // lock acquire: 0 acquired; 1 (or -E) held by someone else, one `error:` line; 2 error.
    let out = env.run(&["lock", "acquire", "a", "--duration", "30s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.run(&["lock", "acquire", "a", "--duration", "30s"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(one_error_line(&out).contains("is held by `ci-operator."));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let out = env.run(&["lock", "acquire", "a", "--duration", "30s", "-E", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.run(&["lock", "acquire", "a//b", "--duration", "30s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    one_error_line(&out);
    // lock release: 0 released or free; 1 held by someone else, one `error:` line; 2 error.
    let out = env.run(&["lock", "release", "a", "--owner", "someone-else"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(one_error_line(&out).contains("is held by `ci-operator."));
    let out = env.run(&["lock", "release", "never-used"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.run(&["lock", "release", "a//b"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    one_error_line(&out);
    // lock show: 0 held, 1 free or never used, 2 error.
    assert_eq!(env.run(&["lock", "show", "a"]).status.code(), Some(0));
    assert_eq!(
        env.run(&["lock", "show", "never-used"]).status.code(),
        Some(1)
    );
    let out = env.run(&["lock", "show", "a//b"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    one_error_line(&out);
    // lock put: 0 written, 1 a newer token exists (one `error:` line), 2 error.
    std::fs::write(env.work().join("body"), "x").unwrap();
    let token = |key: &str| -> String {
        let out = env.run(&["--json", "lock", "show", key]);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        j["token"].to_string()
    };
    let t = token("a");
    let out = env.run(&["lock", "put", "a", "--token", &t, "obj", "body"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.run(&["lock", "put", "a", "--token", "0", "obj", "body"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    one_error_line(&out);
    let out = env.run(&["lock", "put", "a", "--token", &t, "obj", "no-such-file"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    one_error_line(&out);
    // lock list: 0 listed; 1 some lock unreadable (each named on stderr).
    assert_eq!(env.run(&["lock", "list"]).status.code(), Some(0));
    let bank = Path::new(env.url.strip_prefix("file://").unwrap());
    std::fs::write(bank.join("locks/default/garbage"), "not a lock").unwrap();
    let out = env.run(&["lock", "list"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("garbage"), "{}", text(&out));
    assert_eq!(env.state("a"), "held");
}

#[test]
fn lock_list_shows_free_locks_only_with_all() {
    let env = env();
    for key in ["done-1", "done-2"] {
        let out = env.run(&["lock", "run", key, "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    env.hold("busy");
    let keys = |args: &[&str]| -> Vec<String> {
        let out = env.run(&[&["--json", "lock", "list"], args].concat());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["key"].to_string())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&[]), ["\"busy\""]);
    assert_eq!(keys(&["--all"]), ["\"busy\"", "\"done-1\"", "\"done-2\""]);
    let out = env.run(&["lock", "list"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("busy") && !table.contains("done-1"),
        "{table}"
    );
}

/// `run --lock` takes flock's flags as `lock run` does: `-n`, `-w SECS`, `-E CODE` (and their
/// long forms). A free lock runs COMMAND (exit 0); a held one exits 1, or CODE, and runs
/// nothing, saying why in one line — unless CODE is 0: a conflict declared fine is silent.
#[test]
fn run_lock_takes_flocks_flags() {
    let env = env();
    let out = env.run(&["run", "--lock", "free", "-n", "--", "touch", "ran"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(env.ran(), "COMMAND ran on a free lock");
    std::fs::remove_file(env.work().join("ran")).unwrap();

    env.hold("held");
    let touch = ["--", "touch", "ran"];
    for flags in [
        &["-n"][..],
        &["--nb"],
        &["--nonblock"],
        &["-w", "0.3"],
        &["--wait", "0.3"],
        &["--timeout", "0.3"],
        &["--lock-block-for", "300ms"],
    ] {
        let args = [&["run", "--lock", "held"], flags, &touch[..]].concat();
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {}", text(&out));
        let err = one_error_line(&out);
        assert!(err.contains("is held by"), "{flags:?}: {err}");
        assert!(!env.ran(), "{flags:?}: COMMAND ran");
    }
    for (flags, code) in [
        (&["-n", "-E", "75"][..], 75),
        (&["-n", "--conflict-exit-code", "0"], 0),
        (&["-n", "--lock-conflict-exit-code", "9"], 9),
    ] {
        let args = [&["run", "--lock", "held"], flags, &touch[..]].concat();
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {}", text(&out));
        assert!(!env.ran(), "{flags:?}: COMMAND ran");
        // A conflict declared fine is silent, as `flock -n -E 0` is (cron mails any output);
        // any other code says why.
        if code == 0 {
            assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{flags:?}");
        } else {
            one_error_line(&out);
        }
    }
    // flock's flags mean nothing without a lock: a usage error, nothing run.
    let out = env.run(&["run", "-n", "--", "touch", "ran"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    one_error_line(&out);
    assert!(!env.ran());
}

/// An option the command does not know, where COMMAND begins, is a usage error (125, one line
/// naming it), not a COMMAND that cannot be found (127): for `run` and `lock run` alike.
#[test]
fn a_command_that_looks_like_an_option_is_a_usage_error() {
    let env = env();
    for args in [
        &["run", "--lock", "k", "-x", "--", "touch", "ran"][..],
        &["run", "--bogus", "--", "touch", "ran"],
        &["lock", "run", "k", "--bogus", "--", "touch", "ran"],
        &["lock", "run", "k", "--", "-x"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", text(&out));
        let err = one_error_line(&out);
        assert!(
            err.contains("-x") || err.contains("--bogus"),
            "{args:?}: names the option: {err}"
        );
        assert!(!err.contains("cannot start"), "{args:?}: {err}");
        // Before a `--`, it was meant as an option: it is called unknown, not misplaced.
        if args.ends_with(&["--", "touch", "ran"]) {
            assert!(err.contains("unknown option `"), "{args:?}: {err}");
        } else {
            assert!(err.contains("where COMMAND begins"), "{args:?}: {err}");
        }
        assert!(!env.ran(), "{args:?}: COMMAND ran");
    }
}

/// `lock run --verbose` and `lock show` say the same time left on a held lock (the holder's
/// remaining time, not the later instant it is free for others), under the default skew margin.
#[test]
fn verbose_and_show_say_the_same_time_left() {
    let env = Env::with_vars(&[("USER", "ci-operator")]);
    env.hold("held");
    let show = env.run(&["--json", "lock", "show", "held"]);
    let out = env.run(&["lock", "run", "--verbose", "-n", "held", "--", "true"]);
    let j: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    let (left, free) = (
        j["remaining_ms"].as_u64().unwrap(),
        j["free_for_others_in_ms"].as_u64().unwrap(),
    );
    assert!(free > left + 3_000, "a 2 s margin on each side: {j}");
    let err = one_error_line(&out);
    // `(27s 960ms left)`: seconds and milliseconds.
    let said = err
        .split(" left)")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .unwrap_or_else(|| panic!("no time left in: {err}"));
    let ms: u64 = said
        .split_whitespace()
        .map(|part| {
            let n = |suffix: &str| {
                part.strip_suffix(suffix)
                    .and_then(|v| v.parse::<u64>().ok())
            };
            n("ms").or_else(|| n("s").map(|s| s * 1000)).unwrap_or(0)
        })
        .sum();
    assert!(
        ms <= left && left - ms < 2_000,
        "verbose says {said} left, show {left} ms (free for others in {free} ms): {err}"
    );
}
