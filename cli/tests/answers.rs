//! What `lease show` and `checkpoint explain` tell an operator about an owner, on a `file:`
//! bank: the owner's process as this host sees it (running, or exited while its lease still
//! counts), and the clock time (UTC and local) from which its checkpoints may be collected.

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_banklease");
/// Every wait of these tests is bounded by this.
const LIMIT: Duration = Duration::from_secs(60);

/// A `file:` bank in a directory of its own, which also holds the job's files and `run`'s
/// private directories (`TMPDIR`, `XDG_RUNTIME_DIR`): nothing is left in /tmp.
struct Env {
    dir: tempfile::TempDir,
    url: String,
    grace: &'static str,
}

impl Env {
    fn new() -> Self {
        Self::with_grace("10m")
    }

    fn with_grace(grace: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        let url = format!("file://{}", dir.path().join("bank").display());
        let env = Self { dir, url, grace };
        let init = env.command(&["init"]).output().unwrap();
        assert!(init.status.success(), "banklease init: {init:?}");
        env
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `banklease --bank URL args`: an owner that renews every second and counts 6 s, the
    /// env's grace (10 minutes unless told); nothing from the caller's `BANKLEASE_*`.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(name);
            }
        }
        let cli_dir = Path::new(BIN).parent().unwrap().to_owned();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![cli_dir];
        dirs.extend(std::env::split_paths(&path));
        cmd.current_dir(self.dir.path())
            .args(["--bank", &self.url])
            .args(args)
            .env("BANKLEASE_LEASE__RENEW_WINDOW", "1s")
            .env("BANKLEASE_LEASE__EXPIRE_WINDOW", "6s")
            .env("BANKLEASE_LEASE__VALIDITY_WINDOW", "1s")
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
            .env("BANKLEASE_GC__GRACE", self.grace)
            .env("BANKLEASE_GC__LATE_WRITE_WINDOW", "1h")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .env("TZ", "UTC")
            .env("TMPDIR", self.path("tmp"))
            .env("XDG_RUNTIME_DIR", self.path("tmp"))
            .env("PATH", std::env::join_paths(dirs).unwrap())
            .env("WORK", self.dir.path());
        cmd
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `banklease run -- bash job.sh`: a job that creates a protecting checkpoint `cp`, says
    /// `ready`, and waits (bounded) for `go`.
    fn start_job(&self, cp: &str) -> Child {
        self.start_script(
            cp,
            "banklease agent checkpoint create \"$CP\" || exit 9\n\
             echo \"$BANKLEASE_OWNER_ID\" > owner\n\
             touch ready\n\
             for _ in $(seq 1 600); do [ -e go ] && exit 0; sleep 0.1; done\n\
             exit 8\n",
        )
    }

    /// `banklease run -- bash job.sh` with `script` as job.sh, `CP` set to `cp`.
    fn start_script(&self, cp: &str, script: &str) -> Child {
        let job = self.path("job.sh");
        std::fs::write(&job, format!("set -u\ncd \"$WORK\"\n{script}")).unwrap();
        self.command(&["run", "--", "bash", job.to_str().unwrap()])
            .env("CP", cp)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.path("run.err")).unwrap(),
            ))
            .spawn()
            .unwrap()
    }

    fn wait_for_file(&self, run: &mut Child, name: &str) {
        let start = Instant::now();
        while !self.path(name).exists() {
            if let Some(status) = run.try_wait().unwrap() {
                panic!(
                    "`run` exited ({status}) before `{name}`: {}",
                    std::fs::read_to_string(self.path("run.err")).unwrap_or_default()
                );
            }
            assert!(start.elapsed() < LIMIT, "`{name}` never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A `run` that is killed if the test ends early (its job then ends within 60 s by itself).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn stdout_of(what: &str, out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `YYYY-MM-DD HH:MM:SS UTC (YYYY-MM-DD HH:MM:SS +00:00 local), …` somewhere in `line` (the
/// tests run with `TZ=UTC`).
fn has_instant(line: &str) -> bool {
    line.contains(" UTC (") && line.contains(" +00:00 local), ")
}

fn line_of<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{out}"))
}

#[test]
fn a_killed_owners_process_is_named_exited_and_the_collection_has_a_clock_time() {
    let env = Env::new();
    let mut run = Running(env.start_job("cp-z"));
    env.wait_for_file(&mut run.0, "ready");
    let owner = std::fs::read_to_string(env.path("owner"))
        .unwrap()
        .trim()
        .to_owned();
    let pid = run.0.id();

    // Alive, and its process runs here.
    let show = stdout_of("lease show", &env.cli(&["lease", "show", &owner]));
    assert!(
        line_of(&show, "process").contains(&format!("its process {pid} runs on this host")),
        "{show}"
    );
    let collectable = line_of(&show, "collectable");
    assert!(has_instant(collectable), "{show}");

    // Killed as the kernel's OOM killer would: no handler runs. The job is told to go.
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    std::fs::write(env.path("go"), "").unwrap();

    let show = stdout_of("lease show", &env.cli(&["lease", "show", &owner]));
    assert!(show.contains("alive"), "{show}");
    let process = line_of(&show, "process");
    assert!(
        process.contains(&format!(
            "its process {pid} on this host has exited; the lease still counts until "
        )),
        "{show}"
    );
    assert!(has_instant(process), "{show}");

    let explain = stdout_of("explain", &env.cli(&["checkpoint", "explain", "cp-z"]));
    assert!(
        !explain.contains("its owner is alive and writing it"),
        "a dead process is not an owner writing: {explain}"
    );
    assert!(
        line_of(&explain, "why").contains(&format!("its process {pid} on this host has exited")),
        "{explain}"
    );
    let next = line_of(&explain, "next");
    assert!(
        next.contains("the gc may collect it from ") && has_instant(next),
        "{explain}"
    );

    // Once the lease has run out (6 s, a renewal at most 1 s before the kill), the answer
    // still has a clock time, about ten minutes ahead.
    let start = Instant::now();
    let explain = loop {
        let out = stdout_of("explain", &env.cli(&["checkpoint", "explain", "cp-z"]));
        if line_of(&out, "owner now").contains("expired") {
            break out;
        }
        assert!(start.elapsed() < LIMIT, "the lease never expired: {out}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let next = line_of(&explain, "next");
    assert!(
        next.contains("the gc collects it from ") && has_instant(next) && next.contains(", in 9m"),
        "{explain}"
    );
    let json = env.cli(&["--json", "checkpoint", "explain", "cp-z"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(json["collectable_from"].is_string(), "{json}");
}

/// The collector that decided is named by its host and pid beside its id.
#[test]
fn a_collection_names_its_collectors_host_and_pid() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::dead_owner_bank(dir.path(), &["cp-dead"]);
    let gc = common::command(&url, &["gc"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = gc.id();
    let out = gc.wait_with_output().unwrap();
    assert!(stdout_of("gc", &out).contains("collected 1"), "{out:?}");
    let explain = stdout_of(
        "explain",
        &common::cli(&url, &["checkpoint", "explain", "cp-dead"]),
    );
    let host = banklease::id::local_hostname();
    assert!(
        line_of(&explain, "collector").contains(&format!("on host `{host}`, pid {pid} (pass ")),
        "{explain}"
    );
}

/// The `banklease-agent-*` directories in `env`'s temporary directory.
fn agent_dirs(env: &Env) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(env.path("tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("banklease-agent-"))
        .collect();
    dirs.sort();
    dirs
}

/// Send `signal` to `pid` through kill(1) (the suites use no unsafe code).
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

#[test]
fn run_removes_its_agent_directory_on_every_exit_it_sees() {
    let env = Env::new();
    for (what, script, code) in [
        ("exit 0", "true", Some(0)),
        ("COMMAND failing", "exit 3", Some(3)),
    ] {
        let out = env.cli(&["run", "--", "bash", "-c", script]);
        assert_eq!(out.status.code(), code, "{what}: {}", text(&out.stderr));
        assert_eq!(agent_dirs(&env), Vec::<String>::new(), "{what}");
    }
    let out = env.cli(&["run", "--", "no-such-command-here"]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(agent_dirs(&env), Vec::<String>::new(), "COMMAND not found");
    for sig in ["TERM", "INT", "HUP"] {
        let _ = std::fs::remove_file(env.path("ready"));
        let _ = std::fs::remove_file(env.path("go"));
        let mut run = Running(env.start_job(&format!("cp-{sig}")));
        env.wait_for_file(&mut run.0, "ready");
        assert_eq!(agent_dirs(&env).len(), 1, "SIG{sig}: the agent's directory");
        signal(run.0.id(), sig);
        std::fs::write(env.path("go"), "").unwrap();
        let start = Instant::now();
        while run.0.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < LIMIT, "SIG{sig}: run never exited");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(agent_dirs(&env), Vec::<String>::new(), "SIG{sig}");
    }
}

#[test]
fn a_later_run_removes_the_directory_of_a_killed_run_and_never_a_live_ones() {
    let env = Env::new();
    // A run killed outright leaves its directory.
    let mut killed = Running(env.start_job("cp-killed"));
    env.wait_for_file(&mut killed.0, "ready");
    let left = agent_dirs(&env);
    assert_eq!(left.len(), 1);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    std::fs::write(env.path("go"), "").unwrap();
    assert_eq!(
        agent_dirs(&env),
        left,
        "SIGKILL: nothing can remove it then"
    );

    // The next run of the same user removes it as it starts.
    std::fs::remove_file(env.path("ready")).unwrap();
    std::fs::remove_file(env.path("go")).unwrap();
    let mut live = Running(env.start_job("cp-live"));
    env.wait_for_file(&mut live.0, "ready");
    let live_dir = agent_dirs(&env);
    assert_eq!(live_dir.len(), 1, "{live_dir:?}");
    assert!(!live_dir.contains(&left[0]), "{live_dir:?}");

    // A later run never removes the directory of a run that lives.
    let out = env.cli(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(agent_dirs(&env), live_dir, "{}", text(&out.stderr));
    std::fs::write(env.path("go"), "").unwrap();
    let start = Instant::now();
    while live.0.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < LIMIT, "the live run never exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(agent_dirs(&env), Vec::<String>::new());
}

#[test]
fn staged_partial_uploads_of_a_collected_checkpoint_are_named_with_when_they_go() {
    let env = Env::with_grace("500ms");
    // A job killed in the middle of a large upload: 20 MB sent, the rest never comes.
    let mut run = Running(env.start_script(
        "cp-s",
        "banklease agent checkpoint create \"$CP\" || exit 9\n\
         { head -c 20000000 /dev/zero; touch ready; \
           for _ in $(seq 1 600); do [ -e go ] && break; sleep 0.1; done; } \
           | banklease agent checkpoint put \"$CP\" big - \n\
         exit 0\n",
    ));
    env.wait_for_file(&mut run.0, "ready");
    // Until the agent has staged most of it (bounded).
    let staging = env.path("bank/_banklease/staging");
    let start = Instant::now();
    while std::fs::read_dir(&staging)
        .map(|d| {
            d.flatten()
                .map(|e| e.metadata().unwrap().len())
                .sum::<u64>()
        })
        .unwrap_or(0)
        < 10_000_000
    {
        assert!(start.elapsed() < LIMIT, "nothing was staged");
        std::thread::sleep(Duration::from_millis(50));
    }
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    std::fs::write(env.path("go"), "").unwrap();

    // Once the owner is dead past the grace, a pass collects it and names what is staged.
    let start = Instant::now();
    let report = loop {
        let out = env.cli(&["--json", "gc"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
        if report["collected"] == 1 {
            break report;
        }
        assert!(start.elapsed() < LIMIT, "never collected: {report}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let staged = &report["staged_uploads"];
    assert_eq!(staged.as_array().map(Vec::len), Some(1), "{report}");
    assert_eq!(staged[0]["checkpoint_id"], "cp-s", "{report}");
    assert!(
        staged[0]["key"]
            .as_str()
            .unwrap()
            .ends_with("cp-s/data/big"),
        "{report}"
    );
    assert!(
        staged[0]["bytes"].as_u64().unwrap() >= 10_000_000,
        "{report}"
    );
    assert_eq!(staged[0]["held"], false, "{report}");
    assert!(staged[0]["goes_from"].is_string(), "{report}");

    // The text report and explain say it too, with the clock time it goes.
    let out = env.cli(&["gc"]);
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("staged"))
        .unwrap_or_else(|| panic!("no staged line: {stderr}"));
    assert!(line.contains("`cp-s`") && has_instant(line), "{stderr}");
    let explain = stdout_of("explain", &env.cli(&["checkpoint", "explain", "cp-s"]));
    let line = line_of(&explain, "staged");
    assert!(line.contains("goes from") && has_instant(line), "{explain}");
}

/// Asked from another time namespace (`unshare -T`, as CRIU restores into), where `/proc` shows
/// start times shifted by that namespace's boot-time offset: a live owner's process is not
/// called exited (its pid "now belonging to a process started later"), which would invite an
/// operator to break a live lease; the answer proves nothing instead. Skipped where
/// `unshare -T` cannot run.
#[test]
fn a_live_owner_asked_about_from_another_time_namespace_is_not_called_exited() {
    let probe = Command::new("unshare")
        .args(["-T", "--boottime", "100000", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: `unshare -T` cannot run here");
        return;
    }
    let env = Env::new();
    let mut run = Running(env.start_job("cp-t"));
    env.wait_for_file(&mut run.0, "ready");
    let owner = std::fs::read_to_string(env.path("owner"))
        .unwrap()
        .trim()
        .to_owned();
    let pid = run.0.id();
    let plain = env.command(&["lease", "show", &owner]);
    let mut shifted = Command::new("unshare");
    shifted
        .args(["-T", "--boottime", "100000", "--"])
        .arg(plain.get_program())
        .args(plain.get_args())
        .current_dir(plain.get_current_dir().unwrap())
        .envs(plain.get_envs().filter_map(|(k, v)| Some((k, v?))));
    for (name, value) in plain.get_envs() {
        if value.is_none() {
            shifted.env_remove(name);
        }
    }
    let show = stdout_of("lease show", &shifted.output().unwrap());
    let process = line_of(&show, "process");
    assert!(
        !process.contains("has exited") && !process.contains("started later"),
        "a live owner's process {pid} called exited from another time namespace: {show}"
    );
    std::fs::write(env.path("go"), "").unwrap();
    run.0.wait().unwrap();
}
