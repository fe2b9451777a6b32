//! Nothing is left behind: runs of `lock run` and `run --lock` on one key, over every COMMAND
//! shape (a daemon, `setsid`, `timeout`, `nohup … &`, a hopping chain, a worker that moves
//! itself out of the tree's cgroup, one that COMMAND leaves running as it exits), each ended
//! normally, by `kill -9` of the supervisor, of its guard, or by a loss (`lock release
//! --token`), leave no process of theirs, no cgroup, no `/dev/shm` marker and no guard socket
//! directory once the next `lock run` on the host has run. (`kill -9` of supervisor and guard
//! together is the documented exception: what COMMAND started runs on, and nothing on the host
//! is left to stop it.)
//!
//! `LEFTOVER_RUNS` runs of each shape and ending (default 1; RELIABILITY.md gives the figures
//! of 50):
//!
//!     LEFTOVER_RUNS=50 cargo test -p banklease-cli --test leftovers -- --nocapture

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::work::{guard_of, signal, Env};
use common::{output_text as text, wait_child, wait_for};

/// The worker: one tick file per run, until its stop file shows (bounded: 30 s).
const WORKER: &str = r#"echo "$BANKLEASE_LOCK_TOKEN" > "$WORK/token-$RUN"
i=0
while [ $i -lt 600 ] && [ ! -e "$WORK/stop-$RUN" ]; do date +%s%N >> "$WORK/ticks-$RUN"; sleep 0.05; i=$((i+1)); done
"#;

/// A chain whose every generation ticks, forks the next and exits, until the stop file shows.
const HOP: &str = r#"echo "$BANKLEASE_LOCK_TOKEN" > "$WORK/token-$RUN"; f() { [ "$1" -gt 600 ] || [ -e "$WORK/stop-$RUN" ] && exit 0; date +%s%N >> "$WORK/ticks-$RUN"; sleep 0.05; f $(($1 + 1)) & exit 0; }; f 0 & wait"#;

/// Writes its pid into the parent of its cgroup's `cgroup.procs`, then works.
const ESCAPE: &str = r#"cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
mnt=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break } }' /proc/self/mountinfo)
if [ -n "$cg" ] && [ "$cg" != / ] && [ -n "$mnt" ]; then echo $$ > "$mnt${cg%/*}/cgroup.procs" 2>/dev/null || true; fi
"#;

#[derive(Clone, Copy, Debug)]
enum Shape {
    Plain,
    Timeout,
    Setsid,
    Daemon,
    Nohup,
    /// COMMAND starts a daemon and exits.
    Ends,
    Hopping,
    Escaper,
}

const SHAPES: [Shape; 8] = [
    Shape::Plain,
    Shape::Timeout,
    Shape::Setsid,
    Shape::Daemon,
    Shape::Nohup,
    Shape::Ends,
    Shape::Hopping,
    Shape::Escaper,
];

impl Shape {
    fn argv(self, worker: &Path) -> Vec<String> {
        let w = worker.display().to_string();
        let sh = |line: String| vec!["sh".to_owned(), "-c".to_owned(), line];
        match self {
            Shape::Plain => sh(format!("sh {w}")),
            Shape::Timeout => ["timeout", "60", "sh", &w].map(String::from).to_vec(),
            Shape::Setsid => ["setsid", "sh", &w].map(String::from).to_vec(),
            Shape::Daemon => sh(format!(
                "(setsid sh {w} >/dev/null 2>&1 &); while [ ! -e \"$WORK/stop-$RUN\" ]; do sleep 0.05; done"
            )),
            Shape::Nohup => sh(format!("nohup sh {w} >/dev/null 2>&1 & wait")),
            Shape::Ends => sh(format!("(setsid sh {w} >/dev/null 2>&1 &); sleep 0.3")),
            Shape::Hopping => sh(HOP.to_owned()),
            Shape::Escaper => sh(format!("{ESCAPE}sh {w}")),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Ending {
    /// The worker is told to stop; COMMAND exits (what it left running is stopped).
    Normal,
    KillSupervisor,
    KillGuard,
    /// `lock release --token`: the supervisor stops the tree and exits 75.
    Lost,
}

const ENDINGS: [Ending; 4] = [
    Ending::Normal,
    Ending::KillSupervisor,
    Ending::KillGuard,
    Ending::Lost,
];

/// Every process whose environment holds `LEFTOVER_MARK=mark`.
fn marked(mark: &str) -> Vec<u32> {
    let needle = format!("LEFTOVER_MARK={mark}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .filter(|pid| common::work::state(*pid).is_some_and(|s| s != 'Z'))
        .collect()
}

/// Directories under `dir` (to `depth` levels) whose name `wanted` picks.
fn dirs_under(dir: &Path, depth: u32, wanted: &dyn Fn(&str) -> bool, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if wanted(&entry.file_name().to_string_lossy()) {
            found.push(path.clone());
        }
        if depth > 0 {
            dirs_under(&path, depth - 1, wanted, found);
        }
    }
}

/// The cgroup v2 mount, if any.
fn cgroup_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(point))
    })
}

#[test]
fn runs_of_every_shape_and_ending_leave_nothing_behind() {
    let runs: u32 = std::env::var("LEFTOVER_RUNS")
        .ok()
        .map(|v| v.parse().expect("LEFTOVER_RUNS is a number"))
        .unwrap_or(1);
    let mark = uuid::Uuid::new_v4().simple().to_string();
    // The search finds what it is for.
    let mut probe = std::process::Command::new("sleep")
        .arg("30")
        .env("LEFTOVER_MARK", format!("{mark}-probe"))
        .spawn()
        .unwrap();
    // A process's environment reads empty until its exec has set it up, which may be after
    // `spawn` returned (a vfork parent resumes first): wait for it.
    wait_for("the probe's environment", || {
        marked(&format!("{mark}-probe")) == [probe.id()]
    });
    probe.kill().unwrap();
    probe.wait().unwrap();
    let env = Env::with_vars(&[("RUST_LOG", "error"), ("LEFTOVER_MARK", &mark)]);
    let worker = env.work().join("worker.sh");
    std::fs::write(&worker, WORKER).unwrap();
    let key = "leftovers/k";
    let mut supervisors = Vec::new();
    let started = Instant::now();
    let mut n = 0u32;
    for round in 0..runs {
        for shape in SHAPES {
            for ending in ENDINGS {
                n += 1;
                let run = n.to_string();
                let which = if n.is_multiple_of(3) {
                    "run-lock"
                } else {
                    "lock-run"
                };
                let name = format!("{which}-{shape:?}-{ending:?}-{round}");
                let mut args: Vec<String> = match which {
                    "lock-run" => ["lock", "run", "--duration", "4s", "--kill-after", "300ms"]
                        .map(String::from)
                        .to_vec(),
                    _ => ["run", "--lock-duration", "4s", "--lock"]
                        .map(String::from)
                        .to_vec(),
                };
                args.extend([key.to_owned(), "--".to_owned()]);
                args.extend(shape.argv(&worker));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut cmd = env.command(&args);
                let file = |suffix: &str| {
                    std::fs::File::create(env.work().join(format!("{name}.{suffix}"))).unwrap()
                };
                let mut sup = cmd
                    .env("RUN", &run)
                    .stdout(file("out"))
                    .stderr(file("err"))
                    .spawn()
                    .unwrap();
                supervisors.push(sup.id());
                wait_for("the worker's first tick", || {
                    !env.read(&format!("ticks-{run}")).is_empty()
                });
                let stop = env.work().join(format!("stop-{run}"));
                match ending {
                    Ending::Normal => std::fs::write(&stop, "").unwrap(),
                    Ending::KillSupervisor => signal(&sup, Signal::KILL),
                    Ending::KillGuard => {
                        let guard = guard_of(sup.id());
                        kill_process(Pid::from_raw(guard as i32).unwrap(), Signal::KILL).unwrap();
                    }
                    Ending::Lost => {
                        let token = env.read(&format!("token-{run}"));
                        let out = env.run(&["lock", "release", "--token", token.trim(), key]);
                        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out));
                    }
                }
                let status = wait_child(&mut sup);
                // What the worker may still do is told to stop; whatever runs on is found below.
                std::fs::write(&stop, "").unwrap();
                let err = env.read(&format!("{name}.err"));
                // COMMAND of these two has exited by the worker's first tick, or soon after:
                // its own status may be what the supervisor ends with.
                let early = matches!(shape, Shape::Ends | Shape::Hopping);
                let expected: &[i32] = match (ending, early) {
                    (Ending::Normal, _) => &[0],
                    (Ending::KillSupervisor, _) => &[],
                    (Ending::KillGuard | Ending::Lost, false) => &[75],
                    (Ending::KillGuard | Ending::Lost, true) => &[0, 75],
                };
                if !expected.is_empty() {
                    assert!(
                        status.code().is_some_and(|c| expected.contains(&c)),
                        "{name}: {status:?}: {err}"
                    );
                }
            }
        }
    }
    // The next holder on the host takes over what a killed one left and sweeps.
    let out = env.run(&["lock", "run", "-w", "30", key, "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the last holder: {}",
        text(&out)
    );
    // Two empty searches 100 ms apart: a process in the middle of an exec reads an empty
    // environment for a moment.
    let mut left = Vec::new();
    let mut empty_in_a_row = 0;
    for _ in 0..60 {
        left = marked(&mark);
        empty_in_a_row = if left.is_empty() {
            empty_in_a_row + 1
        } else {
            0
        };
        if empty_in_a_row == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let pids: Vec<String> = supervisors.iter().map(u32::to_string).collect();
    let mut markers = Vec::new();
    let of_ours = |name: &str, sep: &str| pids.iter().any(|p| name.contains(&format!("{sep}{p}-")));
    dirs_under(
        Path::new("/dev/shm"),
        0,
        &|n| n.starts_with("banklease-tree-") && of_ours(n, "tree-"),
        &mut markers,
    );
    assert!(markers.is_empty(), "markers left behind: {markers:?}");
    let mut sockets = Vec::new();
    dirs_under(
        &env.work(),
        0,
        &|n| n.starts_with("banklease-guard-"),
        &mut sockets,
    );
    assert!(
        sockets.is_empty(),
        "guard socket directories left: {sockets:?}"
    );
    if let Some(mount) = cgroup_mount() {
        let mut cgroups = Vec::new();
        dirs_under(
            &mount,
            4,
            &|n| n.starts_with("banklease-") && of_ours(n, "."),
            &mut cgroups,
        );
        assert!(cgroups.is_empty(), "cgroups left behind: {cgroups:?}");
    }
    eprintln!(
        "{} runs ({runs} of each of {} shapes × {} endings), {:.1?}: nothing left behind",
        n,
        SHAPES.len(),
        ENDINGS.len(),
        started.elapsed()
    );
}
