//! A lock holds COMMAND's whole process tree: whatever process group or session a process of
//! the tree moves to (`timeout`, `setsid`, a double-forking daemon, `nohup … &`), it is stopped
//! with the tree — by the guard when the supervisor is stopped or dies, by the supervisor when
//! the lock is lost or COMMAND exits — and a waiter on this host never takes the lock while one
//! of them runs, even past the lock's expiry.
//!
//! Each test runs the binary on a `file:` bank as an operator would. The tree's worker ignores
//! SIGTERM (only SIGKILL ends it) and ticks the host's time into a file every 50 ms, so "it ran
//! beside the next holder" is read off the ticks. Each case runs with the tree held by a cgroup
//! where the host delegates one, and by the guard as child subreaper alone
//! (`BANKLEASE_TREE=subreaper`).

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::work::{guard_of, now_ns, signal, state, Env};
use common::{output_text as text, wait_child, wait_for};

/// The worker: records its pid and the lock's holder name, ignores SIGTERM, ticks for a minute.
fn worker(env: &Env, name: &str) -> String {
    let script = env.work().join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!(
            r#"echo $$ >> "$WORK/{name}.pids"
echo "$BANKLEASE_LOCK_OWNER" > "$WORK/{name}.owner"
echo "$BANKLEASE_LOCK_TOKEN" > "$WORK/{name}.token"
trap '' TERM INT HUP
i=0
while [ $i -lt 1200 ]; do date +%s%N >> "$WORK/{name}.ticks"; sleep 0.05; i=$((i+1)); done
"#
        ),
    )
    .unwrap();
    script.display().to_string()
}

/// COMMAND shapes whose worker leaves the guard's process group, or outlives COMMAND
/// (`ends`: COMMAND itself exits after a second, leaving the worker).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    Timeout,
    Setsid,
    Daemon,
    Nohup,
    /// COMMAND starts a daemon and exits.
    Ends,
}

const SHAPES: [Shape; 4] = [Shape::Timeout, Shape::Setsid, Shape::Daemon, Shape::Nohup];

impl Shape {
    fn argv(self, script: &str) -> Vec<String> {
        let sh = |line: &str| vec!["sh".into(), "-c".into(), line.into(), script.into()];
        match self {
            Shape::Timeout => vec!["timeout".into(), "60".into(), "sh".into(), script.into()],
            Shape::Setsid => vec!["setsid".into(), "sh".into(), script.into()],
            // Double fork into a session of its own; COMMAND goes on.
            Shape::Daemon => sh(r#"(setsid sh "$0" >/dev/null 2>&1 &); exec sleep 600"#),
            Shape::Nohup => sh(r#"nohup sh "$0" >/dev/null 2>&1 & exec sleep 600"#),
            Shape::Ends => sh(r#"(setsid sh "$0" >/dev/null 2>&1 &); sleep 1"#),
        }
    }
}

/// `lock run` or `run --lock` on `key` with a lock of `secs`, running `argv`.
fn supervisor(which: &str, key: &str, secs: u32, argv: Vec<String>) -> Vec<String> {
    let duration = format!("{secs}s");
    let mut args: Vec<String> = match which {
        "lock-run" => vec!["lock", "run", "--duration", &duration, key],
        _ => vec!["run", "--lock", key, "--lock-duration", &duration],
    }
    .into_iter()
    .map(String::from)
    .collect();
    args.push("--".into());
    args.extend(argv);
    args
}

const SUPERVISORS: [&str; 2] = ["lock-run", "run-lock"];

/// The two ways the tree is held: a cgroup where the host delegates one, the subreaper alone.
fn modes() -> Vec<Env> {
    vec![
        Env::new(),
        Env::with_vars(&[("RUST_LOG", "error"), ("BANKLEASE_TREE", "subreaper")]),
    ]
}

fn mode(env: &Env) -> &'static str {
    if env.var("BANKLEASE_TREE").is_some() {
        "subreaper"
    } else {
        "default"
    }
}

/// The processes still running of those that ran `name`'s worker.
fn running_workers(env: &Env, name: &str) -> Vec<u32> {
    env.read(&format!("{name}.pids"))
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|&pid| state(pid).is_some_and(|s| s != 'Z'))
        .collect()
}

/// SIGKILL supervisor `sup` and its guard together (`pkill -9 banklease`), and reap `sup`.
/// Both are stopped first: otherwise the one killed second may see the other die and stop the
/// tree in the gap (what each is there to do when only one dies).
fn kill_both(sup: &mut std::process::Child) {
    let guard = Pid::from_raw(guard_of(sup.id()) as i32).unwrap();
    // The supervisor first: a stopped parent is nothing the guard sees at once (its deadline is
    // seconds away), while the supervisor would see its child stop.
    signal(sup, Signal::STOP);
    let _ = kill_process(guard, Signal::STOP);
    signal(sup, Signal::KILL);
    let _ = kill_process(guard, Signal::KILL);
    sup.wait().unwrap();
}

fn kill_workers(env: &Env, name: &str) {
    for pid in running_workers(env, name) {
        let _ = kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::KILL);
    }
}

/// The last tick of `name`'s worker, once ticks have had time to land (each within 50 ms).
fn last_tick(env: &Env, name: &str) -> u128 {
    std::thread::sleep(Duration::from_millis(300));
    *env.ticks(name).last().expect("the worker ticked")
}

fn after_ms(tick: u128, at: u128) -> u128 {
    tick.saturating_sub(at) / 1_000_000
}

/// Stopped outright (SIGSTOP), the supervisor renews nothing: its guard stops the whole tree
/// before the lock can lapse, wherever the worker went. (Before, only COMMAND's process group
/// was stopped: the worker of `timeout`, `setsid` and a daemon ran on beside the next holder.)
#[test]
fn a_stopped_supervisors_tree_never_runs_beside_the_next_holder() {
    for env in modes() {
        for which in SUPERVISORS {
            for shape in SHAPES {
                let name = format!("stop-{which}-{shape:?}-{}", mode(&env));
                let key = format!("stop/{which}/{shape:?}");
                let args = supervisor(which, &key, 2, shape.argv(&worker(&env, &name)));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut sup = env.spawn(&args, &name);
                wait_for("the worker's first ticks", || env.ticks(&name).len() >= 3);
                signal(&sup, Signal::STOP);
                let taken_at = env.take_over(&key);
                let last = last_tick(&env, &name);
                let escaped = running_workers(&env, &name);
                kill_workers(&env, &name);
                signal(&sup, Signal::CONT);
                let status = wait_child(&mut sup);
                assert!(
                    last < taken_at && escaped.is_empty(),
                    "{name}: the worker ticked {} ms after the next holder took the lock \
                     (still running: {escaped:?})",
                    after_ms(last, taken_at)
                );
                let err = env.read(&format!("{name}.err"));
                assert_eq!(status.code(), Some(75), "{name}: {err}");
            }
        }
    }
}

/// The lock taken away under a running `lock run` (an operator's `lock release --token`): the
/// whole tree is stopped, and `lock run` exits 75 no later than the lock's end + --kill-after.
/// (Before, only the group got the signals; the worker ran on beside the next holder, and the
/// supervisor waited for it for ever.)
#[test]
fn a_lost_lock_stops_the_whole_tree_and_exits_75_in_time() {
    for env in modes() {
        for shape in SHAPES {
            let name = format!("lost-{shape:?}-{}", mode(&env));
            let key = format!("lost/{shape:?}");
            let args = supervisor("lock-run", &key, 4, shape.argv(&worker(&env, &name)));
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            args.splice(2..2, ["--kill-after", "300ms"]);
            let mut sup = env.spawn(&args, &name);
            wait_for("the worker's first ticks", || env.ticks(&name).len() >= 3);
            let owner = env.read(&format!("{name}.owner"));
            let token = env.read(&format!("{name}.token"));
            let released = Instant::now();
            let out = env.run(&[
                "lock",
                "release",
                "--owner",
                owner.trim(),
                "--token",
                token.trim(),
                &key,
            ]);
            assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out));
            let status = wait_child(&mut sup);
            let took = released.elapsed();
            let exited_at = now_ns();
            let last = last_tick(&env, &name);
            let escaped = running_workers(&env, &name);
            kill_workers(&env, &name);
            let err = env.read(&format!("{name}.err"));
            assert_eq!(status.code(), Some(75), "{name}: {err}");
            assert!(
                took < Duration::from_millis(4_300),
                "{name}: exited {took:?} after the loss (a 4 s lock, --kill-after 300ms)"
            );
            assert!(
                last < exited_at && escaped.is_empty(),
                "{name}: the worker ticked {} ms after `lock run` exited (still running: \
                 {escaped:?})",
                after_ms(last, exited_at)
            );
        }
    }
}

/// `kill -9` of the supervisor: the guard stops the whole tree at once, and the waiter on this
/// host that takes the lock over never runs beside any of it.
#[test]
fn a_killed_supervisors_tree_is_gone_before_the_next_holder_runs() {
    for env in modes() {
        for shape in SHAPES {
            let name = format!("kill-{shape:?}-{}", mode(&env));
            let key = format!("kill/{shape:?}");
            let args = supervisor("lock-run", &key, 30, shape.argv(&worker(&env, &name)));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut sup = env.spawn(&args, &name);
            wait_for("the worker's first ticks", || env.ticks(&name).len() >= 3);
            signal(&sup, Signal::KILL);
            sup.wait().unwrap();
            let taken_at = env.take_over(&key);
            let last = last_tick(&env, &name);
            let escaped = running_workers(&env, &name);
            kill_workers(&env, &name);
            assert!(
                last < taken_at && escaped.is_empty(),
                "{name}: the worker ticked {} ms after the next holder took the lock (still \
                 running: {escaped:?})",
                after_ms(last, taken_at)
            );
        }
    }
}

/// COMMAND starts a daemon and exits: the rest of its tree is stopped before the lock is
/// released, and `lock run` says so in one line. (Before, the lock was released while the
/// daemon ran, and the next holder ran beside it.)
#[test]
fn commands_exit_ends_its_tree_before_the_lock_is_released() {
    for env in modes() {
        for which in SUPERVISORS {
            let name = format!("ends-{which}-{}", mode(&env));
            let key = format!("ends/{which}");
            let args = supervisor(which, &key, 4, Shape::Ends.argv(&worker(&env, &name)));
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            if which == "lock-run" {
                args.splice(2..2, ["--kill-after", "300ms"]);
            }
            let mut sup = env.spawn(&args, &name);
            let status = wait_child(&mut sup);
            let exited_at = now_ns();
            let last = last_tick(&env, &name);
            let escaped = running_workers(&env, &name);
            kill_workers(&env, &name);
            let err = env.read(&format!("{name}.err"));
            assert_eq!(
                status.code(),
                Some(0),
                "{name}: COMMAND's own status: {err}"
            );
            assert!(
                last < exited_at && escaped.is_empty(),
                "{name}: the daemon ticked {} ms after the lock was released (still running: \
                 {escaped:?})",
                after_ms(last, exited_at)
            );
            let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note: ")).collect();
            assert_eq!(notes.len(), 1, "{name}: one line says so: {err}");
            assert!(notes[0].contains("COMMAND exited"), "{name}: {err}");
        }
    }
}

/// Supervisor and guard killed together (`pkill -9 banklease`): what is left of the tree is
/// out of their reach, so a waiter on this host does not take the lock — even past its expiry —
/// while any of it runs, and takes it once it is gone. Needs the tree in a cgroup.
///
/// The tree must still run when both are killed: on a loaded machine a supervisor can miss its
/// renewals, and the guard then stops the tree at the lock's deadline, as it should, before the
/// kill. That run proves nothing about a dead pair, so it is said and made again (at most
/// three times per shape); the waiter's assertions are only ever made on a tree that outlived
/// its pair.
#[test]
fn a_waiter_never_takes_the_lock_beside_a_dead_holders_tree() {
    let env = Env::new();
    for shape in [Shape::Timeout, Shape::Daemon] {
        for attempt in 1..=3 {
            match dead_pair_beside_a_live_tree(&env, shape, attempt) {
                Attempt::Proved => break,
                Attempt::NoCgroup => return,
                Attempt::EndedBeforeTheKill if attempt < 3 => continue,
                Attempt::EndedBeforeTheKill => panic!(
                    "{shape:?}: in each of 3 attempts the tree had ended before supervisor and \
                     guard were killed (missed renewals on a loaded machine?)"
                ),
            }
        }
    }
}

enum Attempt {
    Proved,
    NoCgroup,
    EndedBeforeTheKill,
}

fn dead_pair_beside_a_live_tree(env: &Env, shape: Shape, attempt: u32) -> Attempt {
    let name = format!("both-{shape:?}-{attempt}");
    let key = format!("both/{shape:?}/{attempt}");
    let args = supervisor("lock-run", &key, 2, shape.argv(&worker(env, &name)));
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.splice(2..2, ["--verbose"]);
    let mut sup = env.spawn(&args, &name);
    wait_for("the worker's first ticks", || env.ticks(&name).len() >= 3);
    let err = env.read(&format!("{name}.err"));
    if err.contains("child subreaper") && !err.contains("cgroup") {
        eprintln!("skipped: this host delegates no cgroup ({err})");
        kill_workers(env, &name);
        let _ = sup.kill();
        sup.wait().unwrap();
        return Attempt::NoCgroup;
    }
    kill_both(&mut sup);
    if running_workers(env, &name).is_empty() {
        eprintln!(
            "{name}: the tree had ended before the kill: {}",
            env.read(&format!("{name}.err"))
        );
        return Attempt::EndedBeforeTheKill;
    }
    // Past the lock's expiry (2 s): the worker still runs, the lock is not taken.
    let out = env.run(&["lock", "run", "-w", "6", "--verbose", &key, "--", "true"]);
    let running = running_workers(env, &name);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{name}: taken beside the dead holder's tree ({running:?} running): {}",
        text(&out)
    );
    assert!(!running.is_empty(), "{name}: the worker was left running");
    let said = text(&out);
    assert!(
        running.iter().any(|p| said.contains(&p.to_string())),
        "{name}: the waiter names the pid it waits for ({running:?}): {said}"
    );
    let mut waiter = env.spawn(&["lock", "run", "-w", "20", &key, "--", "true"], "waiter");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "{name}: the waiter waits"
    );
    let killed = Instant::now();
    kill_workers(env, &name);
    let status = wait_child(&mut waiter);
    assert_eq!(status.code(), Some(0), "{}", env.read("waiter.err"));
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{name}: taken {:?} after the tree was gone",
        killed.elapsed()
    );
    Attempt::Proved
}

/// Without a cgroup, supervisor and guard killed together leave what COMMAND started outside
/// its process group beyond anyone's sight but the guard's, which is dead: a waiter on this
/// host does not take the lock over early (only the guard's word that it stopped the tree
/// hands it over before the expiry). (Before, the kernel showed supervisor, COMMAND and group
/// gone, and the lock was taken at once beside `timeout`'s worker.)
#[test]
fn without_a_cgroup_a_dead_pair_is_not_taken_over_early() {
    let env = Env::with_vars(&[("RUST_LOG", "error"), ("BANKLEASE_TREE", "subreaper")]);
    let name = "pair";
    let args = supervisor(
        "lock-run",
        "pair",
        30,
        Shape::Timeout.argv(&worker(&env, name)),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut sup = env.spawn(&args, name);
    wait_for("the worker's first ticks", || env.ticks(name).len() >= 3);
    kill_both(&mut sup);
    let out = env.run(&["lock", "run", "-w", "2", "pair", "--", "true"]);
    let running = running_workers(&env, name);
    kill_workers(&env, name);
    assert!(!running.is_empty(), "the worker was left running");
    assert_eq!(
        out.status.code(),
        Some(1),
        "taken over early beside the dead pair's worker ({running:?}): {}",
        text(&out)
    );
}

/// A COMMAND that leaves a hopping chain: each generation appends its number to a file, forks
/// the next and exits at once (a new pid every iteration, as daemons that re-daemonize do),
/// for 4,000 generations; COMMAND exits as soon as it started it. Before, without a cgroup, a
/// walk of `/proc` often missed the chain (one process at a time, each alive for a moment),
/// `lock run` released the lock beside it with no note, and it ran on after `lock run` exited.
/// Now the guard, the subreaper every orphan of the chain comes back to, answers for the tree:
/// it is empty only when the guard has no child at all, which the kernel says atomically.
#[test]
fn a_hopping_chain_is_stopped_before_the_lock_is_released() {
    let chain = r#"f() { [ "$1" -gt 4000 ] && exit 0; echo "$1" >> "$WORK/chain.ticks"; f $(($1 + 1)) & exit 0; }; f 0 & exit 0"#;
    for env in modes() {
        for which in SUPERVISORS {
            let name = format!("chain-{which}-{}", mode(&env));
            let _ = std::fs::remove_file(env.work().join("chain.ticks"));
            let key = format!("chain/{which}");
            let argv = vec!["sh".into(), "-c".into(), chain.to_owned()];
            let args = supervisor(which, &key, 10, argv);
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            if which == "lock-run" {
                args.splice(2..2, ["--kill-after", "300ms"]);
            }
            let mut sup = env.spawn(&args, &name);
            let status = wait_child(&mut sup);
            let at_exit = env.read("chain.ticks").lines().count();
            std::thread::sleep(Duration::from_millis(500));
            let later = env.read("chain.ticks").lines().count();
            let err = env.read(&format!("{name}.err"));
            assert_eq!(
                status.code(),
                Some(0),
                "{name}: COMMAND's own status: {err}"
            );
            assert!(
                at_exit > 0 && at_exit < 4000,
                "{name}: the chain did not run while held ({at_exit} generations): {err}"
            );
            assert_eq!(
                later,
                at_exit,
                "{name}: the chain went on for {} generations after the lock was released: {err}",
                later - at_exit
            );
        }
    }
}

/// Supervisor and guard stopped together (SIGSTOP to both, which only their user or root can
/// send): nothing on the host acts for the lock, and COMMAND runs on past its expiry — the
/// narrowed promise README states. A waiter on this host still does not take the lock while
/// COMMAND's tree runs (it names the pid it waits for); one on another host would, at the
/// expiry (fenced writes are the protection there). Continued, the guard finds its deadline
/// past and stops the tree, `lock run` exits 75, and the waiter takes the lock.
#[test]
fn a_stopped_supervisor_and_guard_keep_the_lock_on_this_host_while_the_tree_runs() {
    for env in modes() {
        let name = format!("frozen-pair-{}", mode(&env));
        let key = format!("frozen/{}", mode(&env));
        let args = supervisor(
            "lock-run",
            &key,
            2,
            Shape::Timeout.argv(&worker(&env, &name)),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut sup = env.spawn(&args, &name);
        wait_for("the worker's first ticks", || env.ticks(&name).len() >= 3);
        let guard = Pid::from_raw(guard_of(sup.id()) as i32).unwrap();
        signal(&sup, Signal::STOP);
        kill_process(guard, Signal::STOP).unwrap();
        // Past the lock's expiry (2 s): the worker still runs, the lock is not taken.
        let out = env.run(&["lock", "run", "-w", "4", &key, "--", "true"]);
        let running = running_workers(&env, &name);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: taken beside the stopped holder's tree ({running:?} running): {}",
            text(&out)
        );
        assert!(
            !running.is_empty(),
            "{name}: the worker runs on, as README says"
        );
        let mut waiter = env.spawn(&["lock", "run", "-w", "20", &key, "--", "true"], "waiter");
        kill_process(guard, Signal::CONT).unwrap();
        signal(&sup, Signal::CONT);
        let status = wait_child(&mut sup);
        let err = env.read(&format!("{name}.err"));
        assert_eq!(status.code(), Some(75), "{name}: {err}");
        let waited = wait_child(&mut waiter);
        assert_eq!(waited.code(), Some(0), "{name}: {}", env.read("waiter.err"));
        let left = running_workers(&env, &name);
        kill_workers(&env, &name);
        assert!(
            left.is_empty(),
            "{name}: the tree outlived `lock run`: {left:?}"
        );
    }
}

/// `kill -9` of the guard alone, under a COMMAND that leaves a hopping chain (each generation
/// appends its number, forks the next and exits): COMMAND dies with its guard, the chain's
/// orphans come to the supervisor (a subreaper too), and the supervisor must not release the
/// lock — nor exit — while any of the chain runs. A walk of `/proc` can miss a process that
/// forks and exits as fast as it is looked at; only "no child at all" proves the tree gone.
#[test]
fn a_killed_guards_hopping_chain_is_stopped_before_the_lock_is_released() {
    // Bounded: 200,000 generations, and a stop file the test leaves behind in any case.
    let chain = r#"f() { [ "$1" -gt 200000 ] || [ -e "$WORK/hop.stop" ] && exit 0; echo "$1" >> "$WORK/hop.ticks"; f $(($1 + 1)) & exit 0; }; f 0 & exec sleep 600"#;
    for env in modes() {
        for which in SUPERVISORS {
            for attempt in 0..2 {
                let name = format!("hop-guard-{which}-{}-{attempt}", mode(&env));
                let _ = std::fs::remove_file(env.work().join("hop.ticks"));
                let _ = std::fs::remove_file(env.work().join("hop.stop"));
                let key = format!("hop-guard/{which}/{}/{attempt}", mode(&env));
                let argv = vec!["sh".into(), "-c".into(), chain.to_owned()];
                let args = supervisor(which, &key, 10, argv);
                let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
                if which == "lock-run" {
                    args.splice(2..2, ["--kill-after", "300ms"]);
                }
                let mut sup = env.spawn(&args, &name);
                wait_for("the chain's first generations", || {
                    env.read("hop.ticks").lines().count() >= 50
                });
                let guard = Pid::from_raw(guard_of(sup.id()) as i32).unwrap();
                kill_process(guard, Signal::KILL).unwrap();
                let status = wait_child(&mut sup);
                let at_exit = env.read("hop.ticks").lines().count();
                std::thread::sleep(Duration::from_millis(500));
                let later = env.read("hop.ticks").lines().count();
                std::fs::write(env.work().join("hop.stop"), "").unwrap();
                let err = env.read(&format!("{name}.err"));
                assert_eq!(status.code(), Some(75), "{name}: {err}");
                assert_eq!(
                    later,
                    at_exit,
                    "{name}: the chain went on for {} generations after the supervisor exited: \
                     {err}",
                    later - at_exit
                );
                // The lock is free for the next holder on this host once the supervisor exited.
                let out = env.run(&["lock", "acquire", &key, "-n", "--duration", "2s"]);
                assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out));
            }
        }
    }
}
