//! The `banklease-gc` binary as a process: one active daemon per bank, failover after SIGKILL,
//! clean stop on SIGTERM, `--once`, start-up refusal.
//!
//! Every daemon runs on a `file:` bank in a tempdir with GC lease windows of a fraction of a
//! second, and serves `/metrics` on 127.0.0.1 only. Every wait is a bounded polling loop that
//! fails with what it waited for and the daemons' logs.
#![allow(clippy::disallowed_methods)] // tests measure and wait on the real clock

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const RENEW: Duration = Duration::from_millis(200);
const EXPIRE: Duration = Duration::from_secs(1);
const SKEW: Duration = Duration::from_millis(100);
/// Generous for a loaded 2-core CI machine; the waits return as soon as the condition holds.
const START_TIMEOUT: Duration = Duration::from_secs(15);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `banklease-gc`, killed if the test ends while it runs.
struct Daemon {
    name: &'static str,
    child: Child,
    port: u16,
    log: PathBuf,
    stdout: PathBuf,
}

impl Daemon {
    /// Start a daemon on `bank` with short GC lease windows, serving metrics on `port`.
    fn spawn(name: &'static str, dir: &Path, bank: &Path, port: u16, args: &[&str]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let stdout = dir.join(format!("{name}.out"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_banklease-gc"));
        // Only what the test sets: a developer's BANKLEASE_* must not leak in.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(key);
            }
        }
        cmd.args(args)
            .env("BANKLEASE_BANK__URL", format!("file://{}", bank.display()))
            .env("BANKLEASE_GC__LEASE_RENEW_WINDOW", "200ms")
            .env("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "1s")
            .env("BANKLEASE_GC__LEASE_VALIDITY_WINDOW", "100ms")
            .env("BANKLEASE_GC__INTERVAL", "300ms")
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
            .env("BANKLEASE_LEASE__OWNER_ID_SCHEME", "uuid")
            .env("BANKLEASE_GC__METRICS_ADDR", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info,banklease_gc=debug")
            // Colour is decided by the daemon (stderr is a file here: none), not the caller.
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            // Files, not pipes: an unread pipe would block the daemon once full.
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("start banklease-gc");
        Self {
            name,
            child,
            port,
            log,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(true)` when `/metrics` says active, `Some(false)` standby, `None` not answering.
    fn active(&self) -> Option<bool> {
        let (status, body) = http_get(self.port, "/metrics").ok()?;
        if status != 200 {
            return None;
        }
        sample(&body, "banklease_gc_active").map(|v| v == 1.0)
    }

    fn logs(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        format!("---- {} (pid {}) stderr ----\n{log}", self.name, self.pid())
    }

    /// Send SIGTERM (through kill(1): the crate forbids unsafe code, so no libc call).
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.pid());
    }

    /// Wait for the process to exit, at most `timeout`.
    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}\n{}",
                self.name,
                self.logs()
            );
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Ports free right now on 127.0.0.1, distinct (all bound at once, then released).
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

#[path = "common/metrics_http.rs"]
mod metrics_http;
use metrics_http::{http_get, sample};

/// Poll `probe` every 50 ms until it returns `Some`, at most `timeout`; fail with `what` and
/// the daemons' logs.
fn wait_for<T>(
    timeout: Duration,
    what: &str,
    daemons: &[&Daemon],
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = daemons.iter().map(|d| d.logs()).collect();
            panic!(
                "timed out after {timeout:?} waiting until {what}\n{}",
                logs.join("\n")
            );
        }
        sleep(Duration::from_millis(50));
    }
}

/// The pid recorded in the GC lease object, `None` when there is none.
fn lease_pid(bank: &Path) -> Option<u64> {
    let bytes = std::fs::read(bank.join("gc/active")).ok()?;
    let record: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    record["pid"].as_u64()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A bank made in `dir/bank` (as `banklease init` makes one).
fn bank_in(dir: &Path) -> PathBuf {
    let bank = dir.join("bank");
    banklease_testkit::file_bank(&bank);
    bank
}

#[test]
fn one_active_per_bank_failover_on_kill_and_clean_stop_on_term() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    let [pa, pb] = free_ports::<2>();
    let a = Daemon::spawn("a", dir.path(), &bank, pa, &[]);
    let b = Daemon::spawn("b", dir.path(), &bank, pb, &[]);

    let a_active = wait_for(
        START_TIMEOUT,
        "both daemons serve /metrics and exactly one is active",
        &[&a, &b],
        || match (a.active()?, b.active()?) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            _ => None,
        },
    );
    let (mut active, mut standby) = if a_active { (a, b) } else { (b, a) };

    // For several renew windows and passes: still exactly one, and the lease names it.
    let hold_until = Instant::now() + 8 * RENEW;
    while Instant::now() < hold_until {
        assert_eq!(
            (active.active(), standby.active()),
            (Some(true), Some(false)),
            "the roles must not change while both live\n{}\n{}",
            active.logs(),
            standby.logs()
        );
        sleep(Duration::from_millis(100));
    }
    assert_eq!(lease_pid(&bank), Some(u64::from(active.pid())));

    for (daemon, role) in [(&active, "active"), (&standby, "standby")] {
        let (status, body) = http_get(daemon.port, "/healthz").unwrap();
        assert_eq!(status, 200, "{}: /healthz", daemon.name);
        assert_eq!(
            body.trim(),
            format!("ok {role}"),
            "{}: /healthz",
            daemon.name
        );
    }

    // SIGKILL: no release. The standby must wait for the lease to expire on the store's clock,
    // then take over.
    let killed_at = Instant::now();
    active.child.kill().unwrap();
    active.child.wait().unwrap();
    let takeover_bound = EXPIRE + SKEW + 10 * RENEW + Duration::from_secs(3);
    wait_for(
        takeover_bound,
        "the standby takes over after the active daemon was killed",
        &[&standby, &active],
        || standby.active()?.then_some(()),
    );
    let took = killed_at.elapsed();
    // The killed daemon's last renewal was at most one renew window before the kill.
    assert!(
        took >= EXPIRE - RENEW - Duration::from_millis(100),
        "took over after {took:?}: before the killed daemon's lease (expire_window {EXPIRE:?}) \
         could have expired\n{}",
        standby.logs()
    );
    assert_eq!(lease_pid(&bank), Some(u64::from(standby.pid())));

    // SIGTERM: exit 0 in bounded time, GC lease released.
    standby.terminate();
    let status = standby.wait_exit(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", standby.logs());
    assert!(
        !bank.join("gc/active").exists(),
        "the gc lease must be released on SIGTERM\n{}",
        standby.logs()
    );
    assert!(standby.logs().contains("gc lease released"));
}

#[test]
fn a_standby_stops_without_disturbing_the_active_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    // Metrics ports by flag; the environment names other (unused) ports, which the flags must
    // override.
    let [pa, pb, env_a, env_b] = free_ports::<4>();
    let flags = |port: u16| {
        vec![
            "--interval".to_owned(),
            "250ms".to_owned(),
            "--metrics-addr".to_owned(),
            format!("127.0.0.1:{port}"),
        ]
    };
    let fa = flags(pa);
    let mut a = Daemon::spawn("a", dir.path(), &bank, env_a, &strs(&fa));
    a.port = pa;
    wait_for(START_TIMEOUT, "a is active", &[&a], || {
        a.active()?.then_some(())
    });
    let fb = flags(pb);
    let mut b = Daemon::spawn("b", dir.path(), &bank, env_b, &strs(&fb));
    b.port = pb;
    wait_for(
        START_TIMEOUT,
        "b serves /metrics as standby",
        &[&a, &b],
        || (!b.active()?).then_some(()),
    );

    b.terminate();
    let status = b.wait_exit(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", b.logs());
    assert_eq!(a.active(), Some(true), "{}", a.logs());
    assert_eq!(lease_pid(&bank), Some(u64::from(a.pid())));

    a.terminate();
    let status = a.wait_exit(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", a.logs());
    assert!(!bank.join("gc/active").exists(), "{}", a.logs());
}

#[test]
fn once_runs_a_single_pass_and_prints_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    let [port] = free_ports::<1>();
    let mut d = Daemon::spawn("once", dir.path(), &bank, port, &["--once", "--dry-run"]);
    let status = d.wait_exit(START_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", d.logs());
    let out = std::fs::read_to_string(&d.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line on stdout: {out:?}");
    let report: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(report["scanned"], 0, "an empty bank: {report}");
    assert_eq!(report["collected"], 0, "{report}");
    assert!(!bank.join("gc/active").exists(), "{}", d.logs());
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains("INFO"), "the daemon logged: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "no colour escapes into a log file: {log:?}"
    );
}

/// `work` done by owner `owner` of the `file:` bank at `bank` (short windows, never renewed).
fn with_owner(
    bank: &Path,
    owner: banklease::OwnerId,
    work: impl AsyncFnOnce(&banklease::OwnerLease),
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let b = banklease::Bank::open(&format!("file://{}", bank.display())).unwrap();
        let windows =
            banklease::LeaseWindows::new(RENEW, EXPIRE, Duration::from_millis(100)).unwrap();
        let clock = std::sync::Arc::new(banklease::clock::SystemClock);
        let lease = banklease::OwnerLease::acquire(&b, owner, windows, clock)
            .await
            .unwrap();
        work(&lease).await;
    });
}

/// Set `path`'s modification time (a `file:` bank's store stamp) to `age` (`touch -d`).
fn stamp_back(path: &Path, age: &str) {
    let touched = Command::new("touch")
        .args(["-m", "-d", age])
        .arg(path)
        .status()
        .unwrap();
    assert!(touched.success(), "touch -d {age} {}", path.display());
}

/// `--once` names every checkpoint it collects: in its JSON report (id, owner, action, why) and
/// in the pass's log line (the first few and a count).
#[test]
fn once_names_the_checkpoints_it_collects_in_its_report_and_its_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    // An owner that wrote two protecting checkpoints and died an hour ago (its lease's stamp,
    // the store's clock on a `file:` bank, moved back).
    let owner = banklease::OwnerId::random();
    with_owner(&bank, owner.clone(), async |lease| {
        for id in ["cp-x", "cp-y"] {
            banklease::Checkpoint::create(lease, &banklease_testkit::cid(id))
                .await
                .unwrap();
        }
    });
    stamp_back(&bank.join("leases").join(owner.as_str()), "1 hour ago");
    let [port] = free_ports::<1>();
    let mut d = Daemon::spawn("once", dir.path(), &bank, port, &["--once"]);
    let status = d.wait_exit(START_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", d.logs());
    let out = std::fs::read_to_string(&d.stdout).unwrap();
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["collected"], 2, "{report}");
    let named = report["checkpoints"].as_array().unwrap();
    let ids: Vec<&str> = named
        .iter()
        .map(|c| c["checkpoint_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["cp-x", "cp-y"], "{report}");
    for c in named {
        assert_eq!(c["owner_id"], owner.as_str(), "{report}");
        assert_eq!(c["action"], "collect", "{report}");
        let reason = c["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("its owner's lease expired ") && reason.contains(" ago (grace "),
            "{report}"
        );
    }
    let log = std::fs::read_to_string(&d.log).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("gc pass done"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains(&format!("collected 2: `cp-x`, `cp-y` (owner `{owner}`)")),
        "{line}"
    );
}

/// The daemon retires a failed checkpoint past `gc.keep_failed_for` (14 days by default; here
/// its failure is stamped 15 days ago), data first, and leaves a younger one.
#[test]
fn the_daemon_retires_a_failed_checkpoint_past_keep_failed_for() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    with_owner(&bank, banklease::OwnerId::random(), async |lease| {
        for id in ["old-failure", "new-failure"] {
            let cp = banklease::Checkpoint::create(lease, &banklease_testkit::cid(id))
                .await
                .unwrap();
            cp.put_data("part", object_store::PutPayload::from_static(b"partial"))
                .await
                .unwrap();
            cp.complete(banklease::Status::Error).await.unwrap();
        }
        lease.release().await.unwrap();
    });
    stamp_back(&bank.join("index/failed/old-failure"), "15 days ago");
    let [port] = free_ports::<1>();
    let d = Daemon::spawn("retire", dir.path(), &bank, port, &[]);
    let index = |id: &str| {
        std::fs::read_to_string(bank.join(format!("checkpoints/{id}/index.json"))).unwrap()
    };
    wait_for(START_TIMEOUT, "the old failure is retired", &[&d], || {
        index("old-failure")
            .contains("\"status\":\"deleted\"")
            .then_some(())
    });
    assert!(!bank.join("checkpoints/old-failure/data/part").exists());
    assert!(!bank.join("index/failed/old-failure").exists());
    assert!(index("old-failure").contains("\"by\":\"gc\""));
    assert!(index("new-failure").contains("\"status\":\"error\""));
    assert!(bank.join("checkpoints/new-failure/data/part").exists());
}

/// A single pass run with the daemon's own configuration (its metrics port
/// included) beside the active daemon is refused at once (75, naming the holder) instead of
/// failing on the port or waiting as a standby; `--beside-daemon` runs it beside the daemon, which stays
/// active; with no daemon, it takes the GC lease and releases it.
#[test]
fn a_single_pass_takes_the_gc_lease_or_refuses_beside_an_active_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    let [port] = free_ports::<1>();
    let mut active = Daemon::spawn("active", dir.path(), &bank, port, &[]);
    wait_for(START_TIMEOUT, "the daemon active", &[&active], || {
        (active.active() == Some(true)).then_some(())
    });
    let json = |d: &Daemon| -> serde_json::Value {
        let out = std::fs::read_to_string(&d.stdout).unwrap();
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}\n{}", d.logs()))
    };

    let mut once = Daemon::spawn("once", dir.path(), &bank, port, &["--once"]);
    let status = once.wait_exit(START_TIMEOUT);
    let logs = once.logs();
    assert_eq!(status.code(), Some(75), "{logs}");
    // The active daemon is named by its host and pid beside its id.
    let host = banklease::id::local_hostname();
    let named = format!("(host=`{host}`, pid=`{}`) is active on bank=", active.pid());
    for needle in [named.as_str(), "holder=`", "--beside-daemon"] {
        assert!(logs.contains(needle), "{needle}\n{logs}");
    }
    // It said who it is when it started; a single pass never says "standby".
    let started = active.logs();
    assert!(
        started.contains(&format!("pid={}", active.pid())) && started.contains("host="),
        "{started}"
    );
    assert!(!logs.contains("standby"), "{logs}");
    assert!(
        !logs.contains("address"),
        "the metrics port is not bound: {logs}"
    );

    let mut forced = Daemon::spawn(
        "forced",
        dir.path(),
        &bank,
        port,
        &["--once", "--beside-daemon"],
    );
    let status = forced.wait_exit(START_TIMEOUT);
    assert_eq!(status.code(), Some(0), "{}", forced.logs());
    let report = json(&forced);
    assert_eq!(report["gc_lease"], "beside", "{report}");
    assert!(report["holder"].is_string(), "{report}");
    assert_eq!(report["holder_pid"], active.pid(), "{report}");
    assert_eq!(report["holder_host"], host.as_str(), "{report}");
    assert!(!forced.logs().contains("standby"), "{}", forced.logs());
    assert_eq!(active.active(), Some(true), "{}", active.logs());

    active.terminate();
    assert!(
        active.wait_exit(STOP_TIMEOUT).success(),
        "{}",
        active.logs()
    );
    let mut alone = Daemon::spawn("alone", dir.path(), &bank, port, &["--once"]);
    let status = alone.wait_exit(START_TIMEOUT);
    assert_eq!(status.code(), Some(0), "{}", alone.logs());
    assert_eq!(json(&alone)["gc_lease"], "held");
    assert!(!alone.logs().contains("standby"), "{}", alone.logs());
    assert!(
        !bank.join("gc/active").exists(),
        "released\n{}",
        alone.logs()
    );
}

#[test]
fn refuses_to_start_on_an_unusable_bank() {
    let dir = tempfile::tempdir().unwrap();
    // A bank "directory" below a regular file cannot be created.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let bank = file.join("bank");
    let [port] = free_ports::<1>();
    let mut d = Daemon::spawn("bad", dir.path(), &bank, port, &[]);
    let status = d.wait_exit(START_TIMEOUT);
    assert!(!status.success(), "must fail to start\n{}", d.logs());
    let logs = d.logs();
    assert!(logs.contains("cannot open the bank"), "{logs}");
    assert!(logs.contains("not-a-dir"), "{logs}");
}

#[test]
fn refuses_a_bank_in_a_layout_it_does_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    std::fs::create_dir_all(&bank).unwrap();
    std::fs::write(
        bank.join("banklease.json"),
        r#"{"format":1,"layout":99,"created_by":"banklease 9.0.0","created_at":"2030-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    let [port] = free_ports::<1>();
    let mut d = Daemon::spawn("layout", dir.path(), &bank, port, &[]);
    let status = d.wait_exit(START_TIMEOUT);
    assert!(!status.success(), "must fail to start\n{}", d.logs());
    let logs = d.logs();
    assert!(logs.contains("refusing to start"), "{logs}");
    assert!(logs.contains("is in layout 99"), "{logs}");
    assert!(!bank.join("gc/active").exists(), "no GC lease taken");
}

/// A mistyped bank (a directory that does not exist, or an empty one) is refused at start,
/// naming the URL and `banklease init`, and left as it was: a daemon on a typo must not run with
/// healthy metrics while the real bank's zombies pile up.
#[test]
fn refuses_to_start_where_no_bank_is() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo-bank");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for (bank, reason) in [
        (&missing, "its directory does not exist"),
        (&empty, "no bank descriptor"),
    ] {
        for once in [true, false] {
            let [port] = free_ports::<1>();
            let args: &[&str] = if once { &["--once"] } else { &[] };
            let mut d = Daemon::spawn("typo", dir.path(), bank, port, args);
            let status = d.wait_exit(START_TIMEOUT);
            assert!(!status.success(), "must fail to start\n{}", d.logs());
            let logs = d.logs();
            let url = format!("file://{}", bank.display());
            for needle in [&format!("no bank at bank=`{url}`"), reason, "init"] {
                assert!(logs.contains(needle), "{needle}\n{logs}");
            }
        }
    }
    assert!(!missing.exists(), "the mistyped directory was created");
    let left: Vec<_> = std::fs::read_dir(&empty).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn refuses_a_directory_that_is_not_a_bank_and_touches_nothing_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    // A user's directory, with a file that looks like a staged temporary, old enough for any
    // sweep.
    std::fs::create_dir_all(bank.join("docs")).unwrap();
    let invoice = bank.join("docs/invoice#2024");
    std::fs::write(&invoice, "invoice").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&invoice)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3 * 24 * 3600))
        .unwrap();
    let [port] = free_ports::<1>();
    let mut d = Daemon::spawn("foreign", dir.path(), &bank, port, &["--once"]);
    let status = d.wait_exit(START_TIMEOUT);
    assert!(!status.success(), "must fail to start\n{}", d.logs());
    let logs = d.logs();
    assert!(logs.contains("which is not a bank's"), "{logs}");
    assert!(invoice.exists(), "a user's file was deleted\n{logs}");
    let mut left: Vec<String> = std::fs::read_dir(&bank)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["docs"], "nothing created beside the user's files");
}

/// Metric names in a PromQL expression: every `banklease_…` identifier.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("banklease_") {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[i + name.len()..];
        names.push(name);
    }
    names
}

#[test]
fn alert_rules_and_dashboard_use_only_metrics_a_live_daemon_serves() {
    let etc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../etc");
    // The alert rules: groups → rules, each with an expression, a severity and a summary.
    let text = std::fs::read_to_string(etc.join("prometheus/banklease-gc-alerts.yml")).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).expect("the alert rules are YAML");
    let mut exprs: Vec<(String, String)> = Vec::new();
    for group in docs[0]["groups"].as_vec().expect("groups") {
        for rule in group["rules"].as_vec().expect("rules") {
            let alert = rule["alert"]
                .as_str()
                .expect("every rule is an alert")
                .to_owned();
            let expr = rule["expr"].as_str().expect("expr").to_owned();
            assert!(
                rule["labels"]["severity"].as_str().is_some(),
                "{alert}: severity"
            );
            assert!(
                rule["annotations"]["summary"].as_str().is_some(),
                "{alert}: summary"
            );
            exprs.push((alert, expr));
        }
    }
    assert!(exprs.len() >= 6, "{exprs:?}");
    // The dashboard: every panel's targets.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(etc.join("grafana/banklease-gc-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title").to_owned();
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push((
                title.clone(),
                target["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }

    // A live daemon, after a pass: the series it serves.
    let dir = tempfile::tempdir().unwrap();
    let bank = bank_in(dir.path());
    let [port] = free_ports::<1>();
    let d = Daemon::spawn("metrics", dir.path(), &bank, port, &[]);
    let served = wait_for(START_TIMEOUT, "a pass recorded", &[&d], || {
        let (status, body) = http_get(port, "/metrics").ok()?;
        (status == 200 && sample(&body, "banklease_gc_last_success_timestamp_seconds")? > 0.0)
            .then_some(body)
    });
    let names: std::collections::HashSet<&str> = served
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for (what, expr) in &exprs {
        let used = metric_names(expr);
        assert!(
            !used.is_empty(),
            "{what}: `{expr}` uses no banklease metric"
        );
        for name in used {
            assert!(
                names.contains(name.as_str()),
                "{what}: `{name}` is not served:\n{served}"
            );
        }
    }
    for required in [
        "banklease_gc_last_success_timestamp_seconds",
        "banklease_gc_protecting_checkpoints",
        "banklease_gc_oldest_zombie_age_seconds",
        "banklease_gc_leases",
        "banklease_gc_requests_total",
        "banklease_gc_passes_total",
    ] {
        assert!(
            exprs
                .iter()
                .any(|(_, e)| metric_names(e).iter().any(|n| n == required)),
            "nothing watches {required}"
        );
    }
}
