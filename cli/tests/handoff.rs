//! A holder that died on this host is proved dead by the kernel: when `lock run`'s supervisor
//! and every process of COMMAND's group are gone, the next waiter on this host takes the lock
//! at once instead of at its expiry — and never while one of them lives, nor for a hold that
//! outlives its process (`lock acquire`).
//!
//! Each test runs the binary as an operator would, on a `file:` bank, and on moto's and Ceph
//! RGW's S3 API where the caller turns them on (`BANKLEASE_TEST_S3=1`, `BANKLEASE_TEST_RGW=1`):
//! the proof is the host's, whatever store keeps the lock.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::time::{Duration, Instant};

use rustix::process::Signal;

mod common;

use common::work::{now_ns, signal, state, Env, Store};
use common::{output_text as text, wait_child, wait_for};

/// The start time of process `pid`, in clock ticks after boot (field 22 of `/proc/PID/stat`).
fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// A COMMAND that writes its pid to `$WORK/<name>.pid`, then sleeps.
fn sleeper(name: &str) -> String {
    format!(r#"echo $$ > "$WORK/{name}.pid"; exec sleep 60"#)
}

/// A COMMAND that writes when it started (`$WORK/witness-at`, ns) and says whether process
/// `$WORK/<of>.pid` still lives (a zombie does not).
fn witness(of: &str) -> String {
    format!(
        r#"date +%s%N > "$WORK/witness-at"; p=$(cat "$WORK/{of}.pid"); s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); if [ -n "$s" ] && [ "$s" != Z ]; then echo overlap; else echo alone; fi > "$WORK/witness""#
    )
}

/// `lock run --duration 30s k -- sh -c JOB`, its output in `$WORK/<name>.out|err`.
fn on_k_for_30s(env: &Env, job: &str, name: &str) -> std::process::Child {
    let args = [
        "lock",
        "run",
        "--duration",
        "30s",
        "k",
        "--",
        "sh",
        "-c",
        job,
    ];
    env.spawn(&args, name)
}

/// How long a lock that must not be taken within a short wait is held: on S3 every new process
/// first measures the store (the named-lock races, a second or more on a loaded server), which
/// must not outlast the lock.
fn held_for(env: &Env) -> &'static str {
    match env.store {
        Store::File => "3s",
        Store::S3 | Store::Rgw => "15s",
    }
}

fn pid_in(env: &Env, name: &str) -> u32 {
    let file = format!("{name}.pid");
    wait_for("COMMAND to start", || !env.read(&file).trim().is_empty());
    env.read(&file).trim().parse().unwrap()
}

#[test]
fn a_holder_killed_on_this_host_hands_over_at_once_and_never_beside_its_command() {
    for store in Store::configured() {
        killed_holder_hands_over(&Env::on(store), "lock-run");
    }
}

/// `run --lock` as `lock run`: its agent's writes are its owner's checkpoints, which the next
/// job (another owner) never touches, so a waiter need not wait out the lock's duration.
#[test]
fn a_killed_run_lock_hands_over_as_fast_as_lock_run() {
    for store in Store::configured() {
        killed_holder_hands_over(&Env::on(store), "run-lock");
    }
}

/// The holder (`lock run` or `run --lock`, a 30 s lock on `k`) is killed; the waiter queued
/// behind it takes over within a second, never beside its COMMAND.
fn killed_holder_hands_over(env: &Env, how: &str) {
    let store = env.store;
    let job = sleeper("first");
    let mut holder = match how {
        "lock-run" => on_k_for_30s(env, &job, "first"),
        _ => env.spawn(
            &[
                "run",
                "--lock",
                "k",
                "--lock-duration",
                "30s",
                "--",
                "sh",
                "-c",
                &job,
            ],
            "first",
        ),
    };
    let command = pid_in(env, "first");

    let check = witness("first");
    let mut waiter = on_k_for_30s(env, &check, "waiter");
    // Queued behind the holder (its ticket written) before the holder dies; on S3 after the
    // waiter measured the store. (A waiter not yet queued takes over the same way.)
    std::thread::sleep(match store {
        Store::File => Duration::from_millis(500),
        Store::S3 | Store::Rgw => Duration::from_secs(3),
    });
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "{store:?}: the waiter waits"
    );

    let killed = now_ns();
    let supervisor = holder.id();
    signal(&holder, Signal::KILL);
    let status = wait_child(&mut waiter);
    // From the kill to the next holder's COMMAND starting (not its own release and exit).
    let started: u128 = env
        .read("witness-at")
        .trim()
        .parse()
        .expect("the waiter's COMMAND ran");
    let took = Duration::from_nanos(started.saturating_sub(killed) as u64);
    holder.wait().unwrap();
    // The guard's word served its one reader: the next holder removed it.
    let words: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("banklease-tree-{supervisor}-")))
                .collect()
        })
        .unwrap_or_default();
    assert!(words.is_empty(), "{store:?}: left in /dev/shm: {words:?}");
    assert_eq!(
        status.code(),
        Some(0),
        "{store:?}: {}",
        env.read("waiter.err")
    );
    assert_eq!(
        env.read("witness").trim(),
        "alone",
        "{store:?}: the next COMMAND ran beside the first"
    );
    assert!(
        took < Duration::from_secs(1),
        "{store:?} {how}: the next holder waited {took:?} after the holder was killed (a 30 s \
         lock)"
    );
    assert!(state(command).is_none_or(|s| s == 'Z'), "COMMAND is gone");
}

/// Holders whose work may go on after `lock run` died, or that asked for it: a waiter on this
/// host waits for the lock's duration, as on any other host. (A COMMAND that left its process
/// group is no longer one: the guard stops the whole tree, see tests/tree.rs.)
#[test]
fn a_holder_whose_work_may_go_on_is_not_taken_over_early() {
    for store in Store::configured() {
        work_that_may_go_on_is_waited_for(&Env::on(store));
    }
}

fn work_that_may_go_on_is_waited_for(env: &Env) {
    let store = env.store;
    // `HEAD -- sh -c JOB`: the supervisor's words, then the job.
    let line = |head: &str, job: String| -> Vec<String> {
        let mut args: Vec<String> = head.split(' ').map(String::from).collect();
        args.extend(["--".into(), "sh".into(), "-c".into(), job]);
        args
    };
    let cases = [
        // `run --lock`, asked not to.
        (
            "run-lock",
            line(
                &format!(
                    "run --lock rl --no-same-host-handoff --lock-duration {}",
                    held_for(env)
                ),
                sleeper("run-lock"),
            ),
        ),
        // Asked not to.
        (
            "asked",
            line(
                &format!(
                    "lock run --no-same-host-handoff --duration {} asked",
                    held_for(env)
                ),
                sleeper("asked"),
            ),
        ),
    ];
    for (name, args) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut holder = env.spawn(&args, name);
        let command = pid_in(env, name);
        signal(&holder, Signal::KILL);
        holder.wait().unwrap();
        let key = if name == "run-lock" { "rl" } else { name };
        let out = env.run(&["lock", "run", "-w", "1", key, "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{store:?} {name}: taken over within 1 s of a {} lock: {}",
            held_for(env),
            text(&out)
        );
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(command as i32).unwrap(),
            Signal::KILL,
        );
    }
}

/// Writes, as a dead supervisor would have left it, a record of `key` held for 30 s whose
/// COMMAND group is `group`.
fn held_by_a_dead_supervisor(env: &Env, key: &str, group: u32) {
    use std::os::unix::fs::MetadataExt;
    // A pid that is surely gone: a child that exited and was reaped.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let pid_ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    let time_ns = std::fs::metadata("/proc/self/ns/time").unwrap().ino();
    let record = serde_json::json!({
        "format": 1, "key": format!("default/{key}"), "holder": "gone.vm.1.0badf00d",
        "duration_ms": 30_000, "fence": 7, "generation": 2, "token": "t", "host": "vm",
        "pid": gone.id(), "written_at": "2026-11-26T00:00:00Z",
        "process": { "boot_id": boot_id.trim(), "pid_ns": pid_ns, "time_ns": time_ns,
                     "pid": gone.id(),
                     "start_ticks": 1, "group": group, "command": group,
                     "command_start_ticks": start_ticks(group) },
    });
    let dir = env.work().join("bank/locks/default");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(key), record.to_string()).unwrap();
}

/// On `file:` only: it writes the dead supervisor's record into the bank's directory itself.
#[test]
fn a_dead_supervisor_whose_command_group_lives_is_waited_out() {
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    // COMMAND's group outliving its supervisor (its guard could not stop it).
    let mut command = std::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap();
    held_by_a_dead_supervisor(&env, "k", command.id());
    let out = env.run(&["lock", "run", "-w", "1", "k", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "taken while COMMAND's group lives: {}",
        text(&out)
    );
    command.kill().unwrap();
    // Reaped: a zombie still counts as a member of its group.
    command.wait().unwrap();
    let started = Instant::now();
    let out = env.run(&["lock", "run", "-w", "10", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    command.wait().unwrap();
    let out = env.run(&["lock", "show", "k", "--json"]);
    assert!(
        text(&out).contains("\"token\":8"),
        "taken over with the next token: {}",
        text(&out)
    );
}

#[test]
fn a_lock_that_outlives_its_process_is_not_taken_when_the_process_exits() {
    for store in Store::configured() {
        let env = Env::on(store);
        let out = env.run(&["lock", "acquire", "k", "--duration", held_for(&env)]);
        assert_eq!(out.status.code(), Some(0), "{store:?}: {}", text(&out));
        let started = Instant::now();
        let out = env.run(&["lock", "run", "-w", "2", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(1), "{store:?}: {}", text(&out));
        assert!(started.elapsed() >= Duration::from_secs(2), "{store:?}");
    }
}
