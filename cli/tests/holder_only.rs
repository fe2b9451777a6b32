//! A lock a running `lock run` holds is taken or released only by its holder: another process
//! that names the same owner and session neither re-enters it nor releases it by name while
//! the holder's processes live; the fencing token (`--token`) releases it deliberately, and the
//! holder then stops its COMMAND and exits 75.
//!
//! Each test runs the binary on a `file:` bank as an operator would.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::time::{Duration, Instant};

mod common;

use common::work::Env;
use common::{output_text as text, wait_child, wait_for};

/// `lock run --owner o --session s --duration 20s k`, its COMMAND writing its token and then
/// sleeping.
fn holder(env: &Env) -> std::process::Child {
    let job = r#"echo "$BANKLEASE_LOCK_TOKEN" > "$WORK/token"; exec sleep 60"#;
    let args = [
        "lock",
        "run",
        "--owner",
        "o",
        "--session",
        "s",
        "--duration",
        "20s",
        "k",
        "--",
        "sh",
        "-c",
        job,
    ];
    let child = env.spawn(&args, "holder");
    wait_for("the holder's COMMAND", || {
        !env.read("token").trim().is_empty()
    });
    child
}

/// (Before, a second `lock run` or `lock acquire` in the holder's session replaced the held
/// record, and both COMMANDs ran side by side until the first one's next heartbeat.)
#[test]
fn the_holders_own_name_does_not_take_a_running_lock_run_s_lock() {
    let env = Env::new();
    let mut first = holder(&env);
    let out = env.run(&[
        "lock",
        "run",
        "--owner",
        "o",
        "--session",
        "s",
        "-n",
        "--verbose",
        "k",
        "--",
        "touch",
        "second",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        !env.work().join("second").exists(),
        "a second COMMAND ran beside the first"
    );
    assert!(
        text(&out).contains(&format!("pid {}", first.id())),
        "names the running holder: {}",
        text(&out)
    );
    let out = env.run(&[
        "lock",
        "acquire",
        "--owner",
        "o",
        "--session",
        "s",
        "--duration",
        "5s",
        "k",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(first.try_wait().unwrap().is_none(), "the holder runs on");
    let _ = first.kill();
    first.wait().unwrap();
}

/// Released by name while `lock run` holds it: refused, saying what would release it; with the
/// fencing token: released, and `lock run` stops its COMMAND and exits 75 within moments, not
/// at its next heartbeat. (Before, the name alone released it, and a waiting holder ran beside
/// the first until that heartbeat.)
#[test]
fn a_release_by_name_is_refused_and_the_token_releases_it_from_under_lock_run() {
    let env = Env::new();
    let mut first = holder(&env);
    let out = env.run(&["lock", "release", "--owner", "o", "--session", "s", "k"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("--token") && said.contains(&format!("pid {}", first.id())),
        "{said}"
    );
    // One level of backticks: the holder's name quoted, not `lock run` inside it.
    assert!(
        said.contains("` (its lock run, pid") && !said.contains("`lock run`, pid"),
        "{said}"
    );
    assert!(first.try_wait().unwrap().is_none(), "the holder runs on");

    let token = env.read("token").trim().to_owned();
    let wrong = (token.parse::<u64>().unwrap() + 1).to_string();
    let out = env.run(&[
        "lock",
        "release",
        "--owner",
        "o",
        "--session",
        "s",
        "--token",
        &wrong,
        "k",
    ]);
    assert_eq!(out.status.code(), Some(1), "another token: {}", text(&out));
    let out = env.run(&["lock", "release", "--token", &wrong, "k"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "another token alone: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("its token is another"),
        "{}",
        text(&out)
    );

    // The token alone names the holding (before, the holder's name was also needed).
    let released = Instant::now();
    let out = env.run(&["lock", "release", "--token", &token, "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("released: key=`default/k` token={token}")),
        "{}",
        text(&out)
    );
    let status = wait_child(&mut first);
    assert_eq!(status.code(), Some(75), "{}", env.read("holder.err"));
    // It watches the record (every 2 s for a 20 s lock), not only its heartbeat (every 10 s).
    assert!(
        released.elapsed() < Duration::from_secs(6),
        "exited {:?} after the release (a 20 s lock)",
        released.elapsed()
    );
}

/// Released from under `lock run` by its token, the lock is not taken on this host beside what
/// is left of the holder's tree: its COMMAND ignores SIGTERM and lives until the SIGKILL after
/// `--kill-after`, and the next holder starts only then. (Before, the free record named no
/// processes, and a waiter took it at once, beside the old COMMAND.)
#[test]
fn a_lock_released_by_its_token_is_not_taken_beside_what_is_left_of_its_tree() {
    let env = Env::new();
    let job = r#"echo "$BANKLEASE_LOCK_TOKEN" > "$WORK/token"; echo $$ > "$WORK/first.pid"; trap '' TERM; exec sleep 60"#;
    let args = [
        "lock",
        "run",
        "--owner",
        "o",
        "--session",
        "s",
        "--duration",
        "20s",
        "--kill-after",
        "2s",
        "k",
        "--",
        "sh",
        "-c",
        job,
    ];
    let mut first = env.spawn(&args, "first");
    wait_for("the holder's COMMAND", || {
        !env.read("token").trim().is_empty() && !env.read("first.pid").trim().is_empty()
    });
    let pid = env.read("first.pid").trim().to_owned();
    let witness = format!(
        r#"s=$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1); if [ -n "$s" ] && [ "$s" != Z ]; then echo overlap; else echo alone; fi > "$WORK/witness""#
    );
    let token = env.read("token").trim().to_owned();
    let out = env.run(&[
        "lock",
        "release",
        "--owner",
        "o",
        "--session",
        "s",
        "--token",
        &token,
        "k",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.run(&["lock", "run", "-w", "15", "k", "--", "sh", "-c", &witness]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        env.read("witness").trim(),
        "alone",
        "the next holder ran beside the old COMMAND"
    );
    let status = wait_child(&mut first);
    assert_eq!(status.code(), Some(75), "{}", env.read("first.err"));
}

/// From COMMAND's first instant, the lock is bound to the running `lock run`: a release by its
/// name, sent by COMMAND itself as the first thing it does, is refused. (Before, the binding was
/// written only after COMMAND started, and a release by name in that window succeeded — 4 of 6
/// in a review — after which `lock run` exited 75.)
#[test]
fn a_release_by_name_is_refused_from_commands_first_instant() {
    let env = Env::new();
    let bin = env!("CARGO_BIN_EXE_banklease");
    for round in 0..5 {
        let job = format!(
            r#""{bin}" lock release --owner o --session s k >/dev/null 2>&1; echo $? > "$WORK/released.{round}""#
        );
        let out = env.run(&[
            "lock",
            "run",
            "--owner",
            "o",
            "--session",
            "s",
            "--duration",
            "20s",
            "k",
            "--",
            "sh",
            "-c",
            &job,
        ]);
        let rc = env.read(&format!("released.{round}"));
        assert_eq!(
            rc.trim(),
            "1",
            "round {round}: COMMAND's release by name: {}",
            text(&out)
        );
        assert_eq!(out.status.code(), Some(0), "round {round}: {}", text(&out));
    }
}
