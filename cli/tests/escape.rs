//! A process of COMMAND's tree that moves itself out of the tree's cgroup (into the parent's,
//! whose `cgroup.procs` a user's processes can always write) is still of the tree: the guard,
//! its subreaper, stops it with the rest; and with supervisor and guard killed together, an
//! empty cgroup is no proof that the tree is gone: a waiter on this host does not take the lock
//! before its expiry.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::work::{guard_of, signal, state, Env};
use common::{wait_child, wait_for};

/// COMMAND: starts a daemon (its own session) that moves itself into the parent of its cgroup,
/// writes its pid, then ticks every 50 ms for a minute; COMMAND itself sleeps.
const ESCAPER: &str = r#"(setsid sh -c '
cg=$(sed -n "s/^0:://p" /proc/self/cgroup)
root=$(awk "\$9 == \"cgroup2\" { print \$5 }" /proc/self/mountinfo | tail -1)
echo $$ > "$root$(dirname "$cg")/cgroup.procs" || exit 3
echo $$ > "$WORK/escaped.pid"
trap "" TERM
i=0; while [ $i -lt 1200 ]; do date +%s%N >> "$WORK/escaped.ticks"; sleep 0.05; i=$((i+1)); done
' >/dev/null 2>&1 &); exec sleep 600"#;

fn escaped_pid(env: &Env) -> Option<u32> {
    env.read("escaped.pid").trim().parse().ok()
}

fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z')
}

fn kill(pid: u32) {
    let _ = kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::KILL);
}

/// Starts the escaper under `lock run --duration 10s`; `None` where the host delegates no
/// cgroup (nothing to escape from).
fn escaped_holder(env: &Env, key: &str) -> Option<std::process::Child> {
    let mut sup = env.spawn(
        &[
            "lock",
            "run",
            "--verbose",
            "--duration",
            "10s",
            key,
            "--",
            "sh",
            "-c",
            ESCAPER,
        ],
        "holder",
    );
    wait_for("the daemon to move out of the cgroup", || {
        escaped_pid(env).is_some() || sup.try_wait().unwrap().is_some()
    });
    if !env.read("holder.err").contains("cgroup `") {
        eprintln!("skipped: this host delegates no cgroup");
        if let Some(pid) = escaped_pid(env) {
            kill(pid);
        }
        let _ = sup.kill();
        sup.wait().unwrap();
        return None;
    }
    assert!(escaped_pid(env).is_some(), "{}", env.read("holder.err"));
    Some(sup)
}

/// The supervisor killed alone: its guard stops the whole tree, the escaped daemon too, before
/// it says the tree is gone; the next holder on this host takes the lock then, and never
/// beside the daemon.
#[test]
fn a_process_that_left_the_cgroup_is_stopped_with_the_tree() {
    let env = Env::new();
    let Some(mut sup) = escaped_holder(&env, "left") else {
        return;
    };
    let daemon = escaped_pid(&env).unwrap();
    signal(&sup, Signal::KILL);
    sup.wait().unwrap();
    let started = Instant::now();
    env.take_over("left");
    let took = started.elapsed();
    let beside = alive(daemon);
    kill(daemon);
    assert!(
        !beside,
        "the lock was taken beside the daemon that left the cgroup"
    );
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: not handed over early"
    );
}

/// Supervisor and guard killed together: the daemon that left the cgroup is beyond anyone's
/// sight, and the cgroup is empty. Before, the waiter on this host took the lock at once
/// beside it (19 s before the expiry); now, with no guard to say the tree is gone, it waits for
/// the lock's expiry, as on another host (README says what such a COMMAND can still do).
#[test]
fn an_empty_cgroup_after_a_killed_pair_hands_nothing_over_before_the_expiry() {
    let env = Env::new();
    let Some(mut sup) = escaped_holder(&env, "pair") else {
        return;
    };
    let daemon = escaped_pid(&env).unwrap();
    let guard = Pid::from_raw(guard_of(sup.id()) as i32).unwrap();
    signal(&sup, Signal::STOP);
    let _ = kill_process(guard, Signal::STOP);
    signal(&sup, Signal::KILL);
    let _ = kill_process(guard, Signal::KILL);
    let _ = wait_child(&mut sup);
    let out = env.run(&["lock", "acquire", "pair", "--duration", "5s", "-w", "3"]);
    let beside = alive(daemon);
    kill(daemon);
    assert!(
        beside,
        "the daemon was stopped after all (nothing to prove)"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "taken before the expiry beside the daemon that left the cgroup: {}",
        common::output_text(&out)
    );
}
