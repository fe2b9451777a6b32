//! The narrowed promise README states for a `lock run` whose supervisor and guard are both
//! stopped (`kill -STOP` of each): nothing on its host acts for the lock, COMMAND runs on past
//! the lock's expiry, and a waiter on another host — here another pid namespace with another
//! boot id, so nothing of the holder's tree is visible to it — takes the lock at the expiry.
//! What protects the data then is fencing: the stale holder's `lock put --token` is refused
//! once the new holder has its token. Continued, the guard finds its deadline past and stops
//! the tree, and `lock run` exits 75. (A waiter on the holder's own host waits for the tree:
//! `tree.rs`.)

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::work::{guard_of, now_ns, signal, Env};
use common::{output_text as text, wait_child, wait_for, BIN};

/// `unshare`'s script: another boot id over the kernel's, then the binary.
const OTHER_BOOT: &str =
    r#"mount --bind "$FAKE_BOOT_ID" /proc/sys/kernel/random/boot_id && exec "$@""#;

/// `env`'s command run as from another host: in new mount and pid namespaces (`/proc` of its
/// own) with another boot id. `None` where this machine cannot make them (not root, no
/// `unshare`).
fn on_other_host(env: &Env, args: &[&str]) -> Option<Command> {
    let boot = env.work().join("other-boot-id");
    std::fs::write(&boot, format!("{}\n", uuid::Uuid::new_v4())).unwrap();
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--pid", "--fork"])
        .args(["--mount-proc", "--", "sh", "-c", OTHER_BOOT, "sh", "true"])
        .env("FAKE_BOOT_ID", &boot)
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("note: another host cannot be made here (unshare): {probe:?}");
        return None;
    }
    let inner = env.command(args);
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--pid", "--fork"])
        .args(["--mount-proc", "--", "sh", "-c", OTHER_BOOT, "sh", BIN])
        .args(inner.get_args())
        .env("FAKE_BOOT_ID", &boot);
    for (name, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    Some(cmd)
}

/// `lock put KEY --token TOKEN fenced -` with `body` on stdin.
fn put(env: &Env, key: &str, token: &str, body: &str) -> Output {
    let mut child = env
        .command(&["lock", "put", key, "--token", token, "fenced", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_stopped_pair_is_taken_over_at_expiry_from_another_host_and_its_fenced_writes_refused() {
    let env = Env::new();
    let key = "pair/k";
    let Some(mut waiter) = on_other_host(
        &env,
        &["lock", "acquire", key, "-w", "30", "--duration", "10s"],
    ) else {
        return;
    };
    let worker = env.work().join("worker.sh");
    std::fs::write(
        &worker,
        r#"echo "$BANKLEASE_LOCK_TOKEN" > "$WORK/old.token"
i=0
while [ $i -lt 600 ] && [ ! -e "$WORK/stop" ]; do date +%s%N >> "$WORK/old.ticks"; sleep 0.05; i=$((i+1)); done
"#,
    )
    .unwrap();
    let worker = worker.display().to_string();
    let mut sup = env.spawn(
        &["lock", "run", "--duration", "2s", key, "--", "sh", &worker],
        "old",
    );
    wait_for("the worker's first ticks", || env.ticks("old").len() >= 3);
    let old = env.read("old.token").trim().to_owned();
    assert_eq!(put(&env, key, &old, "old 1").status.code(), Some(0));
    let guard = Pid::from_raw(guard_of(sup.id()) as i32).unwrap();
    // The supervisor first: a stopped guard under a running supervisor is continued by it.
    signal(&sup, Signal::STOP);
    kill_process(guard, Signal::STOP).unwrap();
    let stopped = Instant::now();

    let out = waiter.output().unwrap();
    let taken_at = now_ns();
    let waited = stopped.elapsed();
    let acquired = text(&out);
    std::thread::sleep(Duration::from_millis(300));
    let ticked_beside = env.ticks("old").iter().filter(|&&t| t > taken_at).count();
    // Fencing: the stale holder's write is refused once the new token exists.
    let stale = put(&env, key, &old, "old 2");
    let new = acquired
        .split("token=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no token in: {acquired}"))
        .to_owned();
    let fresh = put(&env, key, &new, "new 1");

    let _ = kill_process(guard, Signal::CONT);
    signal(&sup, Signal::CONT);
    let status = wait_child(&mut sup);
    let ended = now_ns();
    std::thread::sleep(Duration::from_millis(300));
    let after_end = env.ticks("old").iter().filter(|&&t| t > ended).count();
    std::fs::write(env.work().join("stop"), "").unwrap();
    let err = env.read("old.err");

    assert_eq!(
        out.status.code(),
        Some(0),
        "the other host's waiter: {acquired}"
    );
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "the other host took the lock {waited:?} after the pair was stopped (a 2 s lock): \
         {acquired}"
    );
    // The narrowed promise, pinned: nothing stopped COMMAND meanwhile.
    assert!(
        ticked_beside > 0,
        "COMMAND did not run beside the other host's holder: has something on the host come \
         to stop a stopped pair's tree? Then README's promise can be widened"
    );
    assert_eq!(stale.status.code(), Some(1), "stale put: {}", text(&stale));
    assert_eq!(
        fresh.status.code(),
        Some(0),
        "new holder's put: {}",
        text(&fresh)
    );
    assert_eq!(status.code(), Some(75), "continued, the old holder: {err}");
    assert_eq!(
        after_end, 0,
        "the old tree ticked after `lock run` exited: {err}"
    );
}
