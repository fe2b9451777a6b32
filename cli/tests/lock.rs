//! `banklease lock` as a user of `flock(1)`, `consul lock` or `etcdctl lock` runs it: real
//! processes, exit codes, the one-line messages, and what is left in the bank.
//!
//! On `file:` always; on S3 (moto) and Azure (Azurite) too with `BANKLEASE_TEST_S3=1` /
//! `BANKLEASE_TEST_AZURE=1` (started by `.ci/run`).

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use banklease_testkit::backends::{Backend, TestBank};
use rustix::process::{kill_process, Pid, Signal};

mod common;

use common::{output_text as text, wait_child, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_banklease");

/// The lock-capable backends configured here.
fn backends() -> Vec<Backend> {
    [Backend::File, Backend::S3, Backend::Azure]
        .into_iter()
        .filter(|b| b.available())
        .collect()
}

/// moto checks a condition and then writes without a lock: under load its race probe can see two
/// winners and refuse the bank (as it should). Scenarios on S3 run one at a time, as in
/// tests/lock.rs.
static S3_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Env {
    bank: TestBank,
    work: tempfile::TempDir,
    _serial: Option<std::sync::MutexGuard<'static, ()>>,
}

impl Env {
    fn new(backend: Backend) -> Self {
        let serial =
            (backend == Backend::S3).then(|| S3_SERIAL.lock().unwrap_or_else(|e| e.into_inner()));
        Self {
            bank: tokio::runtime::Runtime::new()
                .expect("a runtime")
                .block_on(backend.open_in("cli-lock")),
            work: tempfile::tempdir().unwrap(),
            _serial: serial,
        }
    }

    fn url(&self) -> &str {
        self.bank.bank.label()
    }

    /// The skew margin: the store's stamp resolution and a little.
    fn margin(&self) -> Duration {
        self.bank.backend.stamp_resolution() + Duration::from_millis(100)
    }

    /// `banklease --bank URL [args]`, nothing from the caller's `BANKLEASE_*`; the CLI is on
    /// PATH as `banklease` for jobs.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(name);
            }
        }
        let bin_dir = Path::new(BIN).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.current_dir(self.work.path())
            .args(["--bank", self.url()])
            .args(args)
            .env(
                "BANKLEASE_LEASE__SKEW_MARGIN",
                format!("{}ms", self.margin().as_millis()),
            )
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .env("PATH", path)
            .env("WORK", self.work.path());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run the CLI")
    }

    fn spawn(&self, args: &[&str], name: &str) -> Child {
        let file = |suffix: &str| {
            Stdio::from(
                std::fs::File::create(self.work.path().join(format!("{name}.{suffix}"))).unwrap(),
            )
        };
        self.command(args)
            .stdout(file("out"))
            .stderr(file("err"))
            .spawn()
            .unwrap()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.work.path().join(name)).unwrap_or_default()
    }

    /// `lock show --json KEY`, parsed.
    fn show(&self, key: &str) -> serde_json::Value {
        let out = self.run(&["--json", "lock", "show", key]);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("lock show {key}: {e}: {}", text(&out)))
    }

    /// Start `args` as job a, and as job b once a holds `key`; both must exit 0 (a job that
    /// found the other inside exits 99).
    fn one_after_the_other(&self, args: &[&str], key: &str) {
        let mut a = self.spawn(args, "a");
        self.wait_held(key);
        let mut b = self.spawn(args, "b");
        let (sa, sb) = (wait_child(&mut a), wait_child(&mut b));
        assert_eq!(
            (sa.code(), sb.code()),
            (Some(0), Some(0)),
            "{:?}: a: {} b: {}",
            self.bank.backend,
            self.read("a.err"),
            self.read("b.err")
        );
    }

    /// Wait until `key` is held (by anyone).
    fn wait_held(&self, key: &str) {
        wait_for(&format!("{key} held"), || self.show(key)["state"] == "held");
    }
}

fn signal(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(child.id() as i32).unwrap();
    kill_process(pid, signal).unwrap();
}

#[test]
fn lock_run_holds_the_lock_for_the_commands_life_and_exits_with_its_status() {
    for backend in backends() {
        let env = Env::new(backend);
        // The job sees its lock, and the CLI inside it finds the job's bank without --bank.
        let job = r#"echo "$BANKLEASE_LOCK_KEY $BANKLEASE_LOCK_NAMESPACE $BANKLEASE_LOCK_TOKEN $BANKLEASE_LOCK_OWNER"
banklease --json lock show "$BANKLEASE_LOCK_KEY" > "$WORK/inside.json"
exit 7"#;
        let out = env.run(&[
            "lock",
            "run",
            "jobs/nightly",
            "--owner",
            "cron",
            "--duration",
            "10s",
            "--",
            "sh",
            "-c",
            job,
        ]);
        assert_eq!(out.status.code(), Some(7), "{backend:?}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let fields: Vec<&str> = stdout.split_whitespace().collect();
        assert_eq!(fields[..3], ["jobs/nightly", "default", "1"], "{stdout}");
        assert!(fields[3].starts_with("cron."), "{stdout}");
        let inside: serde_json::Value = serde_json::from_str(&env.read("inside.json"))
            .unwrap_or_else(|e| panic!("{backend:?}: {e}: {}", env.read("inside.json")));
        assert_eq!(inside["state"], "held", "{inside}");
        assert_eq!(inside["holder"], fields[3], "{inside}");
        assert_eq!(inside["owner"], "cron", "{inside}");
        // Released when the job exited.
        assert_eq!(env.show("jobs/nightly")["state"], "free", "{backend:?}");

        // A second run gets the next fencing token; a signal death is 128 + N.
        let out = env.run(&[
            "lock",
            "run",
            "jobs/nightly",
            "--",
            "sh",
            "-c",
            r#"echo "$BANKLEASE_LOCK_TOKEN"; kill -TERM $$"#,
        ]);
        assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");

        // Not found, cannot execute: 127, 126, and the lock is released.
        let out = env.run(&["lock", "run", "k", "--", "./no-such-command"]);
        assert_eq!(out.status.code(), Some(127), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot start COMMAND"),
            "{}",
            text(&out)
        );
        std::fs::write(env.work.path().join("noexec"), "echo hi\n").unwrap();
        let out = env.run(&["lock", "run", "k", "--", "./noexec"]);
        assert_eq!(out.status.code(), Some(126), "{}", text(&out));
        assert_eq!(env.show("k")["state"], "free");
    }
}

#[test]
fn a_held_lock_refuses_at_once_with_n_and_the_chosen_code_with_e() {
    for backend in backends() {
        let env = Env::new(backend);
        let mut holder = env.spawn(
            &["lock", "run", "k", "--duration", "20s", "--", "sleep", "30"],
            "holder",
        );
        env.wait_held("k");
        let started = Instant::now();
        // Silent, as flock; --verbose says why in one `error:` line.
        let out = env.run(&["lock", "run", "-n", "k", "--", "touch", "ran"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(out.stderr.is_empty(), "{}", text(&out));
        let out = env.run(&["lock", "run", "--verbose", "-n", "k", "--", "touch", "ran"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("error: not acquired: key=`default/k` is held by `"),
            "{stderr}"
        );
        assert!(stderr.contains("COMMAND was not run"), "{stderr}");
        assert!(!env.work.path().join("ran").exists());
        let out = env.run(&["lock", "run", "-n", "-E", "42", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(42), "{}", text(&out));
        let out = env.run(&["--json", "lock", "run", "-n", "k", "--", "true"]);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(
            (j["acquired"].as_bool(), j["key"].as_str()),
            (Some(false), Some("k")),
            "{j}"
        );
        let out = env.run(&["lock", "acquire", "k", "--duration", "5s", "-E", "3"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        // -w SECS: waits about that long, then gives up with the conflict code.
        let waited = Instant::now();
        let out = env.run(&["lock", "run", "-w", "0.5", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(waited.elapsed() >= Duration::from_millis(500));
        // Nobody is left in the queue.
        assert_eq!(env.show("k")["waiters"], serde_json::json!([]));
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the holder still holds"
        );
        signal(&holder, Signal::TERM);
        let status = wait_child(&mut holder);
        assert_eq!(
            status.code(),
            Some(128 + 15),
            "the job's own status: killed by SIGTERM"
        );
        assert_eq!(env.show("k")["state"], "free");
    }
}

/// Two cron jobs given the same owner: each runs in a session of its own, so they never hold
/// the lock together (before sessions, the second "acquired again" and both ran).
#[test]
fn the_same_owner_from_two_processes_never_holds_a_lock_twice() {
    for backend in backends() {
        let env = Env::new(backend);
        let job = r#"mkdir "$WORK/inside" || exit 99; sleep 1; rmdir "$WORK/inside""#;
        let args = [
            "lock",
            "run",
            "--owner",
            "cron",
            "--duration",
            "10s",
            "nightly",
            "--",
            "sh",
            "-c",
            job,
        ];
        // b starts once a holds: with the same owner, it must wait, not "acquire again".
        env.one_after_the_other(&args, "nightly");

        // `lock acquire` prints its session; only that session releases.
        let out = env.run(&[
            "--json",
            "lock",
            "acquire",
            "k",
            "--owner",
            "cron",
            "--duration",
            "30s",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let session = j["session"].as_str().unwrap().to_owned();
        let again = env.run(&[
            "lock",
            "acquire",
            "k",
            "--owner",
            "cron",
            "--duration",
            "30s",
        ]);
        assert_eq!(again.status.code(), Some(1), "{}", text(&again));
        let same = env.run(&[
            "--json",
            "lock",
            "acquire",
            "k",
            "--owner",
            "cron",
            "--session",
            &session,
            "--duration",
            "30s",
        ]);
        assert_eq!(
            same.status.code(),
            Some(0),
            "re-entry by the same session: {}",
            text(&same)
        );
        let j: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
        assert_eq!(j["token"], 2, "a re-entry takes a new fencing token: {j}");
        let shown = env.run(&["lock", "show", "k"]);
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        assert!(
            shown.contains(&format!("session        {session}")),
            "{shown}"
        );
        let out = env.run(&["lock", "release", "k", "--owner", "cron"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let out = env.run(&[
            "lock",
            "release",
            "k",
            "--owner",
            "cron",
            "--session",
            &session,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
}

/// The lock object vanishes under a running job (someone deleted it by hand): the heartbeat
/// cannot prove the lock held, the job gets one SIGTERM and `--kill-after` to finish before
/// SIGKILL, and `lock run` exits 75.
#[test]
fn a_lock_that_can_no_longer_be_proved_held_stops_the_command_with_75() {
    let env = Env::new(Backend::File);
    // The trap takes 150 ms of the 1 s allowed; a second SIGTERM would cut its sleep short
    // (143), an early SIGKILL would leave no `slept` line.
    let job = r#"trap 'echo TERM >> "$WORK/stopped"; sleep 0.15; echo "slept $?" >> "$WORK/stopped"; exit 0' TERM; : > "$WORK/ready"; sleep 60 & wait"#;
    let mut run = env.spawn(
        &[
            "lock",
            "run",
            "k",
            "--duration",
            "6s",
            "--kill-after",
            "1s",
            "--",
            "sh",
            "-c",
            job,
        ],
        "run",
    );
    env.wait_held("k");
    // Under the job, once its trap is set (a SIGTERM before would end it at once, rightly).
    wait_for("the job's trap", || env.work.path().join("ready").exists());
    let object = Path::new(env.url().strip_prefix("file://").unwrap()).join("locks/default/k");
    std::fs::remove_file(&object).unwrap();
    let status = wait_child(&mut run);
    assert_eq!(status.code(), Some(75), "{}", env.read("run.err"));
    let err = env.read("run.err");
    assert!(
        err.contains("error: the lock key=`default/k` could no longer be proved held"),
        "{err}"
    );
    assert_eq!(
        env.read("stopped"),
        "TERM\nslept 0\n",
        "COMMAND got one SIGTERM and its --kill-after to finish: {err}"
    );
}

/// A waiter stopped with ^C (or SIGTERM) leaves the queue at once: the next waiter is not kept
/// behind its ticket.
#[test]
fn a_waiter_stopped_by_a_signal_leaves_the_queue_at_once() {
    for backend in backends() {
        let env = Env::new(backend);
        let holder = env.run(&["lock", "acquire", "k", "--duration", "60s"]);
        assert_eq!(holder.status.code(), Some(0), "{}", text(&holder));
        for (sig, name) in [(Signal::INT, "int"), (Signal::TERM, "term")] {
            let mut waiter = env.spawn(
                &[
                    "lock",
                    "acquire",
                    "k",
                    "--duration",
                    "10s",
                    "--block-for",
                    "-1",
                ],
                name,
            );
            wait_for("the waiter's ticket", || {
                if let Some(status) = waiter.try_wait().unwrap() {
                    panic!(
                        "{backend:?} {name}: the waiter ended ({status}) before its ticket showed: {}",
                        env.read(&format!("{name}.err"))
                    );
                }
                let shown = env.show("k");
                eprintln!("{backend:?} {name}: waiters={}", shown["waiters"]);
                shown["waiters"].as_array().is_some_and(|w| w.len() == 1)
            });
            signal(&waiter, sig);
            let status = wait_child(&mut waiter);
            assert_eq!(
                status.code(),
                Some(128 + sig.as_raw()),
                "{}",
                env.read(&format!("{name}.err"))
            );
            assert!(env
                .read(&format!("{name}.err"))
                .contains("left the wait queue"));
            assert_eq!(
                env.show("k")["waiters"],
                serde_json::json!([]),
                "{backend:?} {name}"
            );
        }
    }
}

/// A waiter takes a released lock well within a second or two (the waiter HEADs the lock object
/// every 250 ms); before, a waiter on a 60 s lock looked every 15 s. The handoff's figures are
/// `cargo bench`'s (BENCHMARKS.md); this bound only catches a return to slow polling.
#[test]
fn a_waiter_takes_a_released_lock_promptly() {
    for backend in backends() {
        let env = Env::new(backend);
        let mut holder = env.spawn(
            &[
                "lock",
                "run",
                "k",
                "--duration",
                "60s",
                "--",
                "sh",
                "-c",
                r#"while [ ! -e "$WORK/go" ]; do sleep 0.05; done; date +%s.%N > "$WORK/released""#,
            ],
            "holder",
        );
        env.wait_held("k");
        let mut waiter = env.spawn(
            &[
                "lock",
                "run",
                "k",
                "--duration",
                "60s",
                "--",
                "sh",
                "-c",
                r#"date +%s.%N > "$WORK/taken""#,
            ],
            "waiter",
        );
        wait_for("the waiter's ticket", || {
            env.show("k")["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == 1)
        });
        std::fs::write(env.work.path().join("go"), "").unwrap();
        assert_eq!(
            wait_child(&mut holder).code(),
            Some(0),
            "{}",
            env.read("holder.err")
        );
        assert_eq!(
            wait_child(&mut waiter).code(),
            Some(0),
            "{}",
            env.read("waiter.err")
        );
        let at = |name: &str| env.read(name).trim().parse::<f64>().unwrap();
        let handoff = at("taken") - at("released");
        assert!(handoff < 5.0, "{backend:?}: handoff took {handoff:.2} s");
    }
}

/// A duration `lock run` cannot keep is refused before anything is taken, with the reason and
/// what to ask for. Before, `--duration 100ms` was accepted and every run exited 75 asking
/// whether the supervisor was stopped (and 500 ms most runs).
#[test]
fn a_duration_too_short_to_keep_is_refused_with_the_reason() {
    let env = Env::new(Backend::File);
    for (short, said) in [
        ("100ms", "100ms"),
        ("500ms", "500ms"),
        ("1999ms", "1s 999ms"),
    ] {
        let out = env.run(&[
            "lock",
            "run",
            "--duration",
            short,
            "k",
            "--",
            "sh",
            "-c",
            r#": > "$WORK/ran""#,
        ]);
        assert_eq!(out.status.code(), Some(125), "{short}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains(&format!("--duration={said} "))
                && stderr.contains("2s")
                && stderr.contains("quarter"),
            "{stderr}"
        );
        assert!(!env.work.path().join("ran").exists(), "COMMAND ran");
        assert_eq!(
            env.show("k")["state"],
            "missing",
            "{short}: nothing was taken"
        );
    }
    let out = env.run(&["lock", "run", "--duration", "2s", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn keys_are_paths_and_bad_keys_are_refused_with_the_rule() {
    for backend in backends() {
        let env = Env::new(backend);
        for key in ["jobs", "jobs/nightly", "backup/db-1"] {
            let out = env.run(&["lock", "acquire", key, "--duration", "30s"]);
            assert_eq!(out.status.code(), Some(0), "{key}: {}", text(&out));
        }
        let out = env.run(&["--json", "lock", "list"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["key"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        keys.sort();
        assert_eq!(keys, ["backup/db-1", "jobs", "jobs/nightly"], "{backend:?}");
        for (bad, rule) in [
            ("jobs//x", "empty segment"),
            ("/jobs", "e.g. `jobs`"),
            ("jobs/../x", "`.` or `..` segment"),
            ("jobs/\u{1b}x", "control character"),
            ("x.queue", "`.queue`"),
        ] {
            let out = env.run(&["lock", "acquire", bad, "--duration", "30s"]);
            assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            assert!(
                stderr.contains("invalid lock key") && stderr.contains(rule),
                "{bad:?}: {stderr}"
            );
        }
        let long = "a/".repeat(200) + "b";
        let out = env.run(&["lock", "show", &long]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    }
}

#[test]
fn memory_banks_are_refused_for_locks() {
    let out = Command::new(BIN)
        .args([
            "--bank",
            "memory://",
            "lock",
            "acquire",
            "k",
            "--duration",
            "1h",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("outlives this process"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// `run --lock KEY`: the job holds the named lock as well as its owner lease, so two such jobs
/// never run at once (before, README called `run` "like flock" and two ran together); both
/// are released when the job exits.
#[test]
fn run_with_lock_excludes_a_second_job_and_releases_both() {
    for backend in backends() {
        let env = Env::new(backend);
        let job = r#"mkdir "$WORK/inside" || exit 99
echo "$BANKLEASE_LOCK_KEY $BANKLEASE_LOCK_TOKEN $BANKLEASE_OWNER_ID" >> "$WORK/seen"
sleep 1; rmdir "$WORK/inside""#;
        let args = [
            "run",
            "--lock",
            "backup/etc",
            "--checkpoint-prefix",
            "etc-",
            "--",
            "sh",
            "-c",
            job,
        ];
        env.one_after_the_other(&args, "backup/etc");
        let seen = env.read("seen");
        let mut tokens: Vec<&str> = seen.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
        tokens.sort();
        assert_eq!(tokens, ["1", "2"], "{seen}");
        assert!(seen.lines().all(|l| l.starts_with("backup/etc ")), "{seen}");
        assert_eq!(env.show("backup/etc")["state"], "free");
        let leases = env.run(&["--json", "lease", "list"]);
        let live = String::from_utf8_lossy(&leases.stdout)
            .lines()
            .filter(|l| l.contains("\"state\":\"alive\""))
            .count();
        assert_eq!(live, 0, "no lease left held: {}", text(&leases));

        // Held elsewhere and not waited for: nothing runs, no lease is taken.
        let holder = env.run(&["lock", "acquire", "backup/etc", "--duration", "30s"]);
        assert_eq!(holder.status.code(), Some(0), "{}", text(&holder));
        let out = env.run(&[
            "run",
            "--lock",
            "backup/etc",
            "--lock-block-for",
            "0",
            "--lock-conflict-exit-code",
            "75",
            "--",
            "touch",
            "ran",
        ]);
        assert_eq!(out.status.code(), Some(75), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("COMMAND was not run"));
        assert!(!env.work.path().join("ran").exists());
    }
}

/// The object's bytes, read from the store (`None` when absent).
fn object(env: &Env, name: &str) -> Option<Vec<u8>> {
    use object_store::ObjectStoreExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bank = &env.bank.bank;
    let path = banklease::paths::Key::Fenced(name.to_owned()).path(bank);
    rt.block_on(async {
        match bank.store().get(&path).await {
            Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("get {path}: {e}"),
        }
    })
}

/// `lock put`: the fenced write from a shell. It lands under the lock's current token, and is
/// refused (writing nothing) once a newer token exists, even before the newer holder wrote.
#[test]
fn lock_put_writes_under_the_current_token_and_refuses_a_stale_one() {
    for backend in backends() {
        let env = Env::new(backend);
        let job = r#"printf 'report 1\n' | banklease lock put "$BANKLEASE_LOCK_KEY" --token "$BANKLEASE_LOCK_TOKEN" reports/nightly.json -"#;
        let out = env.run(&[
            "lock",
            "run",
            "--namespace",
            "jobs",
            "nightly",
            "--",
            "sh",
            "-c",
            job,
        ]);
        if backend == Backend::S3 {
            // S3's ETag is the content's MD5: fenced writes are refused there, with the reason.
            assert_eq!(out.status.code(), Some(2), "{}", text(&out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("fenc"),
                "{}",
                text(&out)
            );
            assert_eq!(object(&env, "reports/nightly.json"), None);
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{backend:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout)
                .starts_with("written: object=`reports/nightly.json` bytes=9"),
            "{}",
            text(&out)
        );
        assert_eq!(
            object(&env, "reports/nightly.json").as_deref(),
            Some(&b"report 1\n"[..])
        );

        // A newer holder acquires (token 2) and has not written yet: token 1 is refused.
        let newer = env.run(&[
            "lock",
            "acquire",
            "--namespace",
            "jobs",
            "nightly",
            "--duration",
            "30s",
        ]);
        assert_eq!(newer.status.code(), Some(0), "{}", text(&newer));
        let body = env.work.path().join("late.json");
        std::fs::write(&body, "late\n").unwrap();
        let body = body.to_str().unwrap();
        let put = |token: &str, object: &str| {
            env.run(&[
                "lock",
                "put",
                "--namespace",
                "jobs",
                "nightly",
                "--token",
                token,
                object,
                body,
            ])
        };
        let out = put("1", "reports/nightly.json");
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .starts_with("error: refused: object=`reports/nightly.json` was not written"),
            "{}",
            text(&out)
        );
        assert_eq!(
            object(&env, "reports/nightly.json").as_deref(),
            Some(&b"report 1\n"[..])
        );
        let out = put("2", "reports/nightly.json");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert_eq!(
            object(&env, "reports/nightly.json").as_deref(),
            Some(&b"late\n"[..])
        );
        // Once token 2 wrote, token 1 stays refused.
        assert_eq!(put("1", "reports/nightly.json").status.code(), Some(1));
        // Another lock's token: refused in one line that names the guarding lock (it said
        // "corrupt object… remove it by hand" before).
        let other = env.run(&[
            "lock",
            "acquire",
            "--namespace",
            "jobs",
            "other",
            "--duration",
            "30s",
        ]);
        assert_eq!(other.status.code(), Some(0), "{}", text(&other));
        let out = env.run(&[
            "lock",
            "put",
            "--namespace",
            "jobs",
            "other",
            "--token",
            "1",
            "reports/nightly.json",
            body,
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is guarded by lock=`jobs/nightly`") && stderr.lines().count() == 1,
            "{stderr}"
        );
        assert_eq!(
            object(&env, "reports/nightly.json").as_deref(),
            Some(&b"late\n"[..])
        );
        // A token never issued, an object in banklease's layout, a missing file: errors.
        for (token, object, says) in [
            ("9", "reports/x", "unknown fencing token"),
            ("2", "reports/x.fence", "sidecar"),
            ("2", "reports/../x", "invalid object"),
        ] {
            let out = put(token, object);
            assert_eq!(out.status.code(), Some(2), "{object}: {}", text(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(says) && stderr.lines().count() == 1,
                "{object}: {stderr}"
            );
        }
        let out = env.run(&[
            "lock",
            "put",
            "--namespace",
            "jobs",
            "nightly",
            "--token",
            "2",
            "reports/y",
            "/no/such/file",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert_eq!(object(&env, "reports/y"), None);
    }
}

/// `lock run` (and `run --lock`) killed outright must not leave COMMAND running without the
/// lock: a guard in COMMAND's process group kills it. (Before, COMMAND ran on, and a second
/// holder ran beside it once the lock lapsed.)
#[test]
fn a_supervisor_killed_outright_takes_its_command_with_it() {
    let env = Env::new(Backend::File);
    for (name, args) in [
        (
            "lock-run",
            vec!["lock", "run", "--duration", "5s", "k", "--"],
        ),
        (
            "run-lock",
            vec!["run", "--lock", "k", "--lock-duration", "5s", "--"],
        ),
    ] {
        let ticks = format!("{name}.ticks");
        let job = format!(
            r#"trap '' TERM INT HUP; while :; do echo tick >> "$WORK/{ticks}"; sleep 0.1; done"#
        );
        let mut args = args.clone();
        args.extend(["sh", "-c", &job]);
        let mut supervisor = env.spawn(&args, name);
        wait_for("the job's first ticks", || {
            env.read(&ticks).lines().count() >= 3
        });
        signal(&supervisor, Signal::KILL);
        wait_child(&mut supervisor);
        // The guard looks every 50 ms; then nothing ticks any more.
        std::thread::sleep(Duration::from_millis(500));
        let after_kill = env.read(&ticks).lines().count();
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(
            env.read(&ticks).lines().count(),
            after_kill,
            "{name}: COMMAND still runs"
        );
    }
}
