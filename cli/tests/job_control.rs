//! A supervisor (`lock run`, `run --lock`) that stops running — `kill -STOP`, a debugger, a
//! cgroup freeze of that one process, or Ctrl-Z (SIGTSTP) — must not leave COMMAND running
//! without the lock: the guard in COMMAND's group is a dead-man's switch that stops COMMAND at
//! the last deadline the supervisor proved, and job control stops and continues COMMAND with
//! its supervisor, re-proving the lock first.
//!
//! Each test runs the binary on a `file:` bank as an operator would; COMMAND ticks into a file
//! with the host's time, so "COMMAND ran after the next holder took the lock" is read off the
//! ticks.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::work::{signal, state, Env};
use common::{output_text as text, wait_child, wait_for};

/// A job that ignores SIGTERM (so only the SIGKILL after --kill-after ends it) and appends the
/// host's time in ns to `$WORK/<name>.ticks` every 50 ms, for `secs` seconds at most.
fn ticking_job(name: &str, secs: u32) -> String {
    let rounds = secs * 20;
    format!(
        r#"trap '' TERM INT HUP; i=0; while [ $i -lt {rounds} ]; do date +%s%N >> "$WORK/{name}.ticks"; sleep 0.05; i=$((i+1)); done"#
    )
}

/// The two supervisors that run COMMAND under a lock.
const SUPERVISORS: [&str; 2] = ["lock-run", "run-lock"];

/// `name`'s command line (`lock run` or `run --lock`) on KEY with a 2 s lock, running `job`.
fn supervisor(name: &str, key: &str, job: &str) -> Vec<String> {
    let head: &[&str] = match name {
        "lock-run" => &["lock", "run", "--duration", "2s", key],
        _ => &["run", "--lock", key, "--lock-duration", "2s"],
    };
    let mut args: Vec<String> = head.iter().map(|s| s.to_string()).collect();
    args.extend(["--", "sh", "-c", job].map(String::from));
    args
}

/// Stopped outright (SIGSTOP: no handler runs), the supervisor renews nothing; its guard stops
/// COMMAND before the lock can lapse, so the next holder never runs beside it; continued, the
/// supervisor exits 75 and says why in one line. (Before, COMMAND ran on beside the next
/// holder until the supervisor was continued.)
#[test]
fn a_stopped_supervisor_cannot_outlive_its_lock() {
    let env = Env::new();
    for name in SUPERVISORS {
        let ticks = format!("stop-{name}");
        let key = format!("stop/{name}");
        let args = supervisor(name, &key, &ticking_job(&ticks, 30));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut supervisor = env.spawn(&args, name);
        wait_for("COMMAND's first ticks", || env.ticks(&ticks).len() >= 3);
        signal(&supervisor, Signal::STOP);
        let taken_at = env.take_over(&key);
        // Ticks land within 50 ms of their stamp; give the last one time to be seen.
        std::thread::sleep(Duration::from_millis(300));
        let last = *env.ticks(&ticks).last().unwrap();
        assert!(
            last < taken_at,
            "{name}: COMMAND ticked {} ms after the next holder took the lock",
            (last - taken_at) / 1_000_000
        );
        signal(&supervisor, Signal::CONT);
        let status = wait_child(&mut supervisor);
        let err = env.read(&format!("{name}.err"));
        assert_eq!(status.code(), Some(75), "{name}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(lines.len(), 1, "{name}: one error line: {err}");
        assert!(lines[0].contains("COMMAND was stopped"), "{name}: {err}");
    }
}

/// Ctrl-Z (SIGTSTP to the supervisor, the terminal's foreground job) stops COMMAND's group
/// with it; `fg` (SIGCONT) re-proves the lock and continues COMMAND, which then finishes and
/// its status is passed on. (Before, the supervisor stopped and COMMAND ran on alone.)
#[test]
fn ctrl_z_stops_the_command_with_its_supervisor_and_fg_continues_both() {
    let env = Env::new();
    for name in SUPERVISORS {
        let ticks = format!("tstp-{name}");
        let key = format!("tstp/{name}");
        let args = supervisor(name, &key, &ticking_job(&ticks, 2));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut supervisor = env.spawn(&args, name);
        wait_for("COMMAND's first ticks", || env.ticks(&ticks).len() >= 3);
        signal(&supervisor, Signal::TSTP);
        wait_for("the supervisor stopped", || {
            state(supervisor.id()) == Some('T')
        });
        // Within the lock's proved time (2 s lock, 0.5 s margin): COMMAND must not tick.
        std::thread::sleep(Duration::from_millis(150));
        let stopped_at = env.ticks(&ticks).len();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            env.ticks(&ticks).len(),
            stopped_at,
            "{name}: COMMAND ticked while its supervisor was stopped by ^Z"
        );
        signal(&supervisor, Signal::CONT);
        let status = wait_child(&mut supervisor);
        let err = env.read(&format!("{name}.err"));
        assert_eq!(status.code(), Some(0), "{name}: COMMAND finished: {err}");
        assert_eq!(env.ticks(&ticks).len(), 40, "{name}: every tick, after fg");
    }
}

/// Ctrl-Z held past the lock: the next holder takes it; COMMAND, stopped, never runs again
/// (the guard kills it at the deadline), and `fg` ends the supervisor with 75.
#[test]
fn ctrl_z_past_the_lock_kills_the_command_and_fg_exits_75() {
    let env = Env::new();
    for name in SUPERVISORS {
        let ticks = format!("long-{name}");
        let key = format!("long/{name}");
        let args = supervisor(name, &key, &ticking_job(&ticks, 30));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut supervisor = env.spawn(&args, name);
        wait_for("COMMAND's first ticks", || env.ticks(&ticks).len() >= 3);
        signal(&supervisor, Signal::TSTP);
        let stopped = Instant::now();
        wait_for("the supervisor stopped", || {
            state(supervisor.id()) == Some('T')
        });
        let taken_at = env.take_over(&key);
        assert!(
            stopped.elapsed() >= Duration::from_millis(1_500),
            "the lock outlived no ^Z"
        );
        signal(&supervisor, Signal::CONT);
        let status = wait_child(&mut supervisor);
        std::thread::sleep(Duration::from_millis(300));
        let last = *env.ticks(&ticks).last().unwrap();
        assert!(
            last < taken_at,
            "{name}: COMMAND ticked {} ms after the next holder took the lock",
            (last - taken_at) / 1_000_000
        );
        let err = env.read(&format!("{name}.err"));
        assert_eq!(status.code(), Some(75), "{name}: {err}");
        // One line, which says the supervisor itself was stopped, and no warning that the
        // store failed (the log lines of `RUST_LOG=error` aside).
        let said = |prefix: &str| err.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(said("warning: "), 0, "{name}: no warning: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(lines.len(), 1, "{name}: one error line: {err}");
        assert!(lines[0].contains("COMMAND was stopped"), "{name}: {err}");
        assert!(
            lines[0].contains("this supervisor was stopped (^Z, SIGTSTP) for "),
            "{name}: {err}"
        );
    }
}

/// A supervisor whose binary is replaced on disk while it waits (an upgrade) still starts its
/// guard from the program it runs, and so runs COMMAND. (Before, it started the guard from the
/// binary's path, and exited 125 "cannot start the guard": No such file or directory.)
#[test]
fn a_supervisor_whose_binary_was_replaced_while_it_waited_still_guards_its_command() {
    let env = Env::new();
    let copy = env.work().join("banklease-old");
    common::copy_binary(&copy);
    let holder = env.run(&["lock", "acquire", "upgrade/k", "--duration", "2s"]);
    assert_eq!(holder.status.code(), Some(0), "{}", text(&holder));
    let cmd = env.command(&[
        "lock",
        "run",
        "-w",
        "30",
        "upgrade/k",
        "--",
        "sh",
        "-c",
        "echo ran > \"$WORK/ran\"",
    ]);
    let cmd = cmd.get_args().map(|a| a.to_owned()).collect::<Vec<_>>();
    let mut waiter = Command::new(&copy)
        .args(&cmd)
        .current_dir(env.work())
        .env("WORK", env.work())
        .env("RUST_LOG", "error")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The upgrade: the old file is gone, a new one stands in its place.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_file(&copy).unwrap();
    common::copy_binary(&copy);
    let status = wait_child(&mut waiter);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut waiter.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(env.read("ran").trim(), "ran", "{err}");
}

/// The guard fired while its supervisor was stopped (COMMAND ignores SIGTERM), and is itself
/// stopped before its SIGKILL: the continued supervisor, hearing that the deadline passed,
/// kills COMMAND's group itself. (Before, it only noted the reason, and COMMAND ran on.)
#[test]
fn a_supervisor_that_hears_its_guard_fired_kills_the_command_itself() {
    let env = Env::new();
    let job = r#"trap 'echo TERM >> "$WORK/fired.term"' TERM; i=0; while [ $i -lt 600 ]; do date +%s%N >> "$WORK/fired.ticks"; sleep 0.05; i=$((i+1)); done"#;
    let mut supervisor = env.spawn(
        &[
            "lock",
            "run",
            "--duration",
            "8s",
            "--kill-after",
            "1500ms",
            "fired/k",
            "--",
            "sh",
            "-c",
            job,
        ],
        "fired",
    );
    wait_for("COMMAND's first ticks", || env.ticks("fired").len() >= 3);
    let guard = guard_of(supervisor.id()).expect("a guard");
    signal(&supervisor, Signal::STOP);
    // The guard fires at the deadline (at most 6 s on): SIGTERM, which COMMAND notes.
    wait_for("the guard's SIGTERM", || !env.read("fired.term").is_empty());
    kill_process(Pid::from_raw(guard as i32).unwrap(), Signal::STOP).unwrap();
    signal(&supervisor, Signal::CONT);
    let status = wait_child(&mut supervisor);
    let err = env.read("fired.err");
    assert_eq!(status.code(), Some(75), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    let after = env.ticks("fired").len();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.ticks("fired").len(), after, "COMMAND still runs: {err}");
    let _ = kill_process(Pid::from_raw(guard as i32).unwrap(), Signal::KILL);
}

/// The pid of `supervisor`'s guard (`banklease __guard`), from /proc.
fn guard_of(supervisor: u32) -> Option<u32> {
    let children = std::fs::read_dir(format!("/proc/{supervisor}/task")).ok()?;
    children
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__guard"))
        })
}
