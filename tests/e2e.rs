//! End to end, as separate processes: protection services (`examples/protection_service`) and the
//! admin CLI (`banklease`, built in the `banklease-gc` package) on one `file:` bank, with short
//! windows.
//!
//! The binaries are built first with `cargo build` (a no-op when they are fresh), because
//! `cargo test --test e2e` builds neither examples nor another package's binaries, and a stale
//! binary would test old code. Set `BANKLEASE_E2E_NO_BUILD=1` to use what is already in the
//! target directory (e.g. after `cargo test --workspace`).
#![allow(clippy::disallowed_methods)] // real processes on real time

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

// Owner windows: renew often; expire after a few renewals could have failed.
const RENEW_WINDOW: Duration = Duration::from_millis(300);
const EXPIRE_WINDOW: Duration = Duration::from_secs(2);
const VALIDITY_WINDOW: Duration = Duration::from_millis(100);
// Observer side (CLI and GC), given through the environment as an operator would.
const SKEW_MARGIN: Duration = Duration::from_millis(100);
const GRACE: Duration = Duration::from_millis(500);

/// Longest any single CLI command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a service may take to write its checkpoints and say so.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a service may take to shut down after a signal.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

// ---- binaries --------------------------------------------------------------------------------

#[derive(Debug)]
struct Bins {
    cli: PathBuf,
    service: PathBuf,
}

fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(locate_bins)
}

/// `target/<profile>/banklease` and `target/<profile>/examples/protection_service`, found from
/// this test's own path `target/<profile>/deps/e2e-<hash>`, built first unless told not to.
fn locate_bins() -> Bins {
    let exe = std::env::current_exe().expect("path of the test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps")
        .to_path_buf();
    let bins = Bins {
        cli: profile_dir.join("banklease"),
        service: profile_dir.join("examples").join("protection_service"),
    };
    if std::env::var_os("BANKLEASE_E2E_NO_BUILD").is_none() {
        build(&profile_dir);
    }
    for path in [&bins.cli, &bins.service] {
        assert!(
            path.is_file(),
            "`{}` is missing; run `cargo test --workspace` (which builds every binary and \
             example), or unset BANKLEASE_E2E_NO_BUILD",
            path.display()
        );
    }
    bins
}

/// Build both binaries into the target directory and profile this test was built for.
fn build(profile_dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let target_dir = profile_dir.parent().expect("target/<profile> has a parent");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .args(["-p", "banklease-cli", "--bin", "banklease"])
        .args(["-p", "banklease", "--example", "protection_service"]);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
        None => panic!("unexpected target layout: {}", profile_dir.display()),
    }
    let out = cmd
        .output()
        .expect("cannot run cargo to build the e2e binaries");
    assert!(
        out.status.success(),
        "building the e2e binaries failed ({:?}); run `cargo test --workspace` to see why:\n{}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- processes -------------------------------------------------------------------------------

/// A command's environment: nothing from the caller's BANKLEASE_* variables, short windows.
fn command(program: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("BANKLEASE_LEASE__SKEW_MARGIN", ms(SKEW_MARGIN))
        .env("BANKLEASE_LEASE__VALIDITY_WINDOW", ms(VALIDITY_WINDOW))
        .env("BANKLEASE_GC__GRACE", ms(GRACE))
        .env("RUST_LOG", "warn");
    cmd
}

/// Wait for `child` to exit, at most `timeout`.
fn wait_with_timeout(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {timeout:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a CLI command printed and how it exited.
#[derive(Debug)]
struct Run {
    args: Vec<String>,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The single JSON object printed.
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "{:?} did not print one JSON object ({e}): {self:#?}",
                self.args
            )
        })
    }

    /// One JSON object per line.
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{:?}: line {l:?} is not JSON ({e})", self.args))
            })
            .collect()
    }

    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "unexpected exit code: {self:#?}");
        self
    }
}

/// The bank under test, and how to run the CLI on it.
struct Bench {
    dir: tempfile::TempDir,
    url: String,
    /// Observer skew margin: S3 servers stamp `last_modified` in whole seconds.
    margin: Duration,
    /// Owners' expire window: on S3 it must dwarf the 1 s timestamps for "time left" to be
    /// meaningful.
    expire: Duration,
    /// The collectors' `gc.grace`.
    grace: Duration,
    /// The children's store client's request and retry timeouts, each (Swift), when set.
    budget: Option<&'static str>,
    /// The openrc the children run with (Keystone), replacing every `ST_*` and `OS_*`.
    openrc: Option<banklease_testkit::keystone::Vars>,
    /// The `AWS_*` the children run with instead of this process's (RGW; moto's are these).
    aws: Option<Vec<(String, String)>>,
}

/// Where a scenario's bank lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    File,
    Swift,
    S3,
    Azure,
    /// Swift through Keystone v3: the children get an openrc and no `ST_*`.
    Keystone,
    /// Ceph RGW's S3 API: the children get its `AWS_*` (from `.ci/start-rgw.sh`'s `RGW_*`).
    Rgw,
}

impl Bench {
    fn new() -> Self {
        Self::on(Store::File).expect("a file bank is always available")
    }

    /// A fresh bank on `store`, or `None` (with a note) when that server is not configured.
    /// The children inherit the `ST_*` / `AWS_*` variables that reach the server.
    fn on(store: Store) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let unique = format!("e2e-{}", std::process::id())
            + &format!("-{:?}", Instant::now())
                .chars()
                .filter(char::is_ascii_digit)
                .collect::<String>();
        let configured = |var: &str| std::env::var(var).as_deref() == Ok("1");
        let (url, margin) = match store {
            Store::File => (
                format!("file://{}", dir.path().join("bank").display()),
                SKEW_MARGIN,
            ),
            Store::Swift if configured("BANKLEASE_TEST_SWIFT") => {
                let c =
                    std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".into());
                (format!("swift://{c}/{unique}"), SKEW_MARGIN)
            }
            Store::S3 if configured("BANKLEASE_TEST_S3") => {
                let b = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".into());
                (
                    format!("s3://{b}/{unique}"),
                    SKEW_MARGIN + Duration::from_secs(1),
                )
            }
            Store::Azure if configured("BANKLEASE_TEST_AZURE") => {
                let c = std::env::var("AZURE_CONTAINER_NAME")
                    .unwrap_or_else(|_| "banklease-test".into());
                (
                    format!("az://{c}/{unique}"),
                    SKEW_MARGIN + Duration::from_secs(1),
                )
            }
            Store::Keystone if configured("BANKLEASE_TEST_KEYSTONE") => {
                let ks = banklease_testkit::keystone::KeystoneEnv::load().expect("configured");
                (format!("swift://{}/{unique}", ks.container()), SKEW_MARGIN)
            }
            Store::Rgw if configured("BANKLEASE_TEST_RGW") => {
                let b = std::env::var("RGW_BUCKET").unwrap_or_else(|_| "banklease-test".into());
                (
                    format!("s3://{b}/{unique}"),
                    SKEW_MARGIN + Duration::from_secs(1),
                )
            }
            _ => {
                eprintln!(
                    "skipping the {store:?} scenario: set BANKLEASE_TEST_SWIFT=1 / \
                     BANKLEASE_TEST_S3=1 / BANKLEASE_TEST_AZURE=1 / BANKLEASE_TEST_KEYSTONE=1 / \
                     BANKLEASE_TEST_RGW=1 (.ci/run starts the servers)"
                );
                return None;
            }
        };
        // Whole-second stamps: the expire window must dwarf them for "time left" to mean much.
        // Through Keystone, a renewal waits for the proxy to validate the service's token
        // (cached 2 s): a loaded Keystone answering slowly lapsed B's 2 s lease in CI, twice.
        let expire = if matches!(
            store,
            Store::S3 | Store::Azure | Store::Rgw | Store::Keystone
        ) {
            Duration::from_secs(5)
        } else {
            EXPIRE_WINDOW
        };
        let openrc = (store == Store::Keystone).then(|| {
            banklease_testkit::keystone::KeystoneEnv::load()
                .expect("configured")
                .password_vars()
        });
        // On Swift only timing decides `decisions/<id>`: the CLI's and the GC's client gets a
        // 4.5 s retry budget (2 s requests, 2 s of retries), which the configuration gate's rule
        // (c) lets land before the GC's decision with a 5 s grace (and the default 10m window).
        // Through Keystone every process authenticates and the proxy validates each new token
        // with Keystone: on a loaded 2-core runner one GET took over 2 s (CI here, three runs
        // of five), so its requests get 4 s, and the grace rule (c) then asks for 10 s.
        let (budget, grace) = match store {
            Store::Swift => (Some("2s"), Duration::from_secs(5)),
            Store::Keystone => (Some("4s"), Duration::from_secs(10)),
            _ => (None, GRACE),
        };
        let aws = (store == Store::Rgw).then(|| {
            let var = |name: &str| std::env::var(name).expect("the RGW_* of .ci/start-rgw.sh");
            [
                ("AWS_ENDPOINT", var("RGW_S3_ENDPOINT")),
                ("AWS_ACCESS_KEY_ID", var("RGW_ACCESS_KEY_ID")),
                ("AWS_SECRET_ACCESS_KEY", var("RGW_SECRET_ACCESS_KEY")),
                ("AWS_ALLOW_HTTP", "true".to_owned()),
                ("AWS_REGION", "us-east-1".to_owned()),
                ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".to_owned()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
        });
        let bench = Self {
            dir,
            url,
            margin,
            expire,
            grace,
            budget,
            openrc,
            aws,
        };
        // As an operator starts: the bank is made first; every command refuses a URL without one.
        let init = bench.cli(&["init"]);
        assert_eq!(init.code, 0, "banklease init: {init:?}");
        Some(bench)
    }

    /// [`command`] in the bench's directory, with its openrc (if any) as the only `ST_*`/`OS_*`.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = command(program, self.dir.path());
        cmd.env("BANKLEASE_GC__GRACE", ms(self.grace));
        if let Some(timeout) = self.budget {
            cmd.env("BANKLEASE_BANK__REQUEST_TIMEOUT", timeout)
                .env("BANKLEASE_BANK__RETRY_TIMEOUT", timeout);
        }
        if let Some(aws) = &self.aws {
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("AWS_") {
                    cmd.env_remove(&key);
                }
            }
            cmd.envs(aws.iter().map(|(k, v)| (k, v)));
        }
        if let Some(openrc) = &self.openrc {
            for (key, _) in std::env::vars_os() {
                let k = key.to_string_lossy();
                if k.starts_with("ST_") || k.starts_with("OS_") {
                    cmd.env_remove(&key);
                }
            }
            cmd.envs(openrc.iter().map(|(k, v)| (k, v)));
        }
        cmd
    }

    /// Run `banklease --bank <url> <args>`.
    fn cli(&self, args: &[&str]) -> Run {
        let mut all: Vec<String> = vec!["--bank".into(), self.url.clone()];
        all.extend(args.iter().map(|s| s.to_string()));
        self.cli_raw(&all)
    }

    /// Run `banklease <args>` with nothing added.
    fn cli_raw(&self, args: &[String]) -> Run {
        let mut child = self
            .command(&bins().cli)
            .env("BANKLEASE_LEASE__SKEW_MARGIN", ms(self.margin))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start banklease");
        // Drained on threads so a full pipe can never stall the child.
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                s
            })
        };
        let out = drain(Box::new(child.stdout.take().expect("stdout")));
        let err = drain(Box::new(child.stderr.take().expect("stderr")));
        let status = wait_with_timeout(&mut child, COMMAND_TIMEOUT, &format!("banklease {args:?}"));
        Run {
            args: args.to_vec(),
            code: status.code().unwrap_or(-1),
            stdout: out.join().expect("stdout reader"),
            stderr: err.join().expect("stderr reader"),
        }
    }

    fn gc(&self) -> Value {
        let run = self.cli(&["--json", "gc"]);
        run.expect_code(0);
        run.json()
    }

    fn validity(&self, owner: &str) -> (i32, Value) {
        let run = self.cli(&["--json", "validity-check", "--owner", owner]);
        (run.code, run.json())
    }

    /// `checkpoint show --json ID`: (exit code, object).
    fn checkpoint(&self, id: &str) -> (i32, Value) {
        let run = self.cli(&["--json", "checkpoint", "show", id]);
        (run.code, run.json())
    }

    /// `checkpoint list --json` with extra filters: id -> status.
    fn checkpoints(&self, filters: &[&str]) -> BTreeMap<String, String> {
        let mut args = vec!["--json", "checkpoint", "list"];
        args.extend_from_slice(filters);
        let run = self.cli(&args);
        run.expect_code(0);
        run.json_lines()
            .into_iter()
            .map(|v| (str_field(&v, "id"), str_field(&v, "status")))
            .collect()
    }

    fn start_service(&self, name: &str, checkpoints: usize, complete: usize) -> Service {
        let log_path = self.dir.path().join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).expect("service log");
        let mut child = self
            .command(&bins().service)
            .env("BANKLEASE_LEASE__SKEW_MARGIN", ms(self.margin))
            .args(["--bank", &self.url])
            .args(["--checkpoints", &checkpoints.to_string()])
            .args(["--complete", &complete.to_string()])
            .args(["--renew-window", &ms(RENEW_WINDOW)])
            .args(["--expire-window", &ms(self.expire)])
            .args(["--validity-window", &ms(VALIDITY_WINDOW)])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("cannot start protection_service");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut service = Service {
            name: name.to_owned(),
            child,
            log_path,
            owner_id: String::new(),
            protecting: Vec::new(),
            available: Vec::new(),
        };
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(line) if !line.trim().is_empty() => line,
            Ok(_) => panic!(
                "service {name} exited before announcing its checkpoints; its log:\n{}",
                service.log()
            ),
            Err(_) => panic!(
                "service {name} did not announce its checkpoints within {START_TIMEOUT:?}; its \
                 log:\n{}",
                service.log()
            ),
        };
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("service {name} printed {line:?}, not JSON: {e}"));
        let ids = |key: &str| -> Vec<String> {
            ready[key]
                .as_array()
                .unwrap_or_else(|| panic!("`{key}` is not a list in {ready}"))
                .iter()
                .map(|v| v.as_str().expect("checkpoint ids are strings").to_owned())
                .collect()
        };
        service.owner_id = str_field(&ready, "owner_id");
        service.protecting = ids("protecting");
        service.available = ids("available");
        assert_eq!(service.protecting.len(), checkpoints - complete, "{ready}");
        assert_eq!(service.available.len(), complete, "{ready}");
        service
    }
}

fn str_field(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string in {v}"))
        .to_owned()
}

fn u64_field(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

/// A running protection service; killed when dropped (a failing test leaves no process behind).
struct Service {
    name: String,
    child: Child,
    log_path: PathBuf,
    owner_id: String,
    protecting: Vec<String>,
    available: Vec<String>,
}

impl Service {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// SIGKILL: the owner dies without a word; its lease runs out on its own.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// SIGTERM, then wait for the orderly shutdown.
    fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("cannot run kill(1)");
        assert!(status.success(), "kill -TERM failed");
        wait_with_timeout(
            &mut self.child,
            STOP_TIMEOUT,
            &format!("service {}", self.name),
        )
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_with_timeout(&mut self.child, timeout, &format!("service {}", self.name))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn ids<'a>(a: &'a [String], b: &'a [String]) -> Vec<&'a String> {
    a.iter().chain(b).collect()
}

// ---- scenarios -------------------------------------------------------------------------------

/// The promise end to end: a killed owner's protecting checkpoints are collected exactly once
/// its lease expired past grace, and nothing else is touched; a terminated owner cleans up.
#[test]
fn killed_owner_is_collected_and_live_owner_is_untouched() {
    killed_owner_scenario(Bench::new());
}

#[test]
fn killed_owner_scenario_on_swift() {
    if let Some(bench) = Bench::on(Store::Swift) {
        killed_owner_scenario(bench);
    }
}

#[test]
fn killed_owner_scenario_on_swift_through_keystone() {
    if let Some(bench) = Bench::on(Store::Keystone) {
        killed_owner_scenario(bench);
    }
}

#[test]
fn killed_owner_scenario_on_s3() {
    if let Some(bench) = Bench::on(Store::S3) {
        killed_owner_scenario(bench);
    }
}

/// Ceph RGW's S3 API: renewals by If-Match in the unquoted form its probe finds.
#[test]
fn killed_owner_scenario_on_rgw() {
    if let Some(bench) = Bench::on(Store::Rgw) {
        killed_owner_scenario(bench);
    }
}

#[test]
fn killed_owner_scenario_on_azure() {
    if let Some(bench) = Bench::on(Store::Azure) {
        killed_owner_scenario(bench);
    }
}

fn killed_owner_scenario(bench: Bench) {
    let mut a = bench.start_service("A", 4, 2);
    let mut b = bench.start_service("B", 3, 1);

    let all = bench.checkpoints(&[]);
    assert_eq!(all.len(), 7, "{all:?}");
    for id in ids(&a.protecting, &b.protecting) {
        assert_eq!(all[id], "protecting", "{all:?}");
    }
    for id in ids(&a.available, &b.available) {
        assert_eq!(all[id], "available", "{all:?}");
    }

    a.kill();
    let killed = Instant::now();
    // A's last renewal was at most one renew window before the kill, so nothing of A may be
    // collected before expire + margin + grace after that.
    let earliest_collection = bench.expire + bench.margin + bench.grace - RENEW_WINDOW;
    let first = bench.gc();
    let elapsed = killed.elapsed();
    assert!(
        elapsed < earliest_collection,
        "the first gc pass ended {elapsed:?} after the kill, too late to show that a fresh \
         lease protects (limit {earliest_collection:?}); is the machine overloaded?"
    );
    assert_eq!(u64_field(&first, "collected"), 0, "{first}");
    assert_eq!(u64_field(&first, "scanned"), 4, "{first}");
    assert_eq!(u64_field(&first, "errors"), 0, "{first}");
    assert_eq!(first["dry_run"], Value::Bool(false), "{first}");

    let (code, v) = bench.validity(&b.owner_id);
    assert_eq!(code, 0, "B is alive: {v}");
    assert_eq!(v["ok"], Value::Bool(true), "{v}");
    // Right after the kill A's lease is still valid, or nearly out: yes or no, never an error.
    let (code, v) = bench.validity(&a.owner_id);
    assert!(code == 0 || code == 1, "A just after the kill: {code} {v}");

    // Wait until A's lease has been expired (store clock, margin deducted) for longer than the
    // grace, with some slack so that the next pass certainly judges A dead.
    let deadline = Instant::now() + bench.expire + bench.grace + Duration::from_secs(15);
    loop {
        let (code, v) = bench.validity(&a.owner_id);
        if v["state"] == "expired" {
            assert_eq!(code, 1, "an expired lease is not valid: {v}");
            assert_eq!(v["ok"], Value::Bool(false), "{v}");
            if u64_field(&v, "expired_since_ms")
                >= (bench.grace + Duration::from_millis(200)).as_millis() as u64
            {
                break;
            }
        } else {
            assert_eq!(v["state"], "alive", "A's lease before expiry: {v}");
        }
        assert!(
            Instant::now() < deadline,
            "A's lease did not expire past grace within {:?} of the kill: {v}",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let second = bench.gc();
    assert_eq!(
        u64_field(&second, "collected"),
        a.protecting.len() as u64,
        "exactly A's protecting checkpoints: {second}"
    );
    assert_eq!(u64_field(&second, "errors"), 0, "{second}");
    assert_eq!(u64_field(&second, "dead"), 1, "{second}");
    assert_eq!(
        u64_field(&second, "alive"),
        1,
        "B is alive: {second}\nB's log: {}",
        b.log()
    );

    for id in &a.protecting {
        let (code, v) = bench.checkpoint(id);
        // Collected: the GC leaves index.json as a `deleted` tombstone (so a paused owner's
        // late create of the id fails) and nothing else.
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["status"], "deleted", "{v}");
        assert_eq!(v["decided_by"], "gc", "{v}");
        assert_eq!(v["protecting_marker"], Value::Bool(false), "{v}");
        assert_eq!(
            u64_field(&v, "objects"),
            1,
            "only the tombstone is left: {v}"
        );
    }
    for id in &a.available {
        let (code, v) = bench.checkpoint(id);
        assert_eq!(code, 0, "{v}");
        assert_eq!(
            v["status"], "available",
            "a dead owner's completed work stays: {v}"
        );
        assert_eq!(
            u64_field(&v, "objects"),
            4,
            "index.json and 3 data objects: {v}"
        );
    }
    for (list, status) in [(&b.protecting, "protecting"), (&b.available, "available")] {
        for id in list {
            let (code, v) = bench.checkpoint(id);
            assert_eq!(code, 0, "{v}");
            assert_eq!(
                v["status"], status,
                "a live owner's checkpoint is untouched: {v}"
            );
            assert_eq!(u64_field(&v, "objects"), 4, "{v}");
        }
    }
    let mine = |s: &Service| -> Vec<String> {
        let mut v: Vec<String> = ids(&s.protecting, &s.available)
            .into_iter()
            .cloned()
            .collect();
        v.sort();
        v
    };
    // A's collected checkpoints stay listed as `deleted` tombstones.
    let of_a = bench.checkpoints(&["--owner", &a.owner_id]);
    assert_eq!(of_a.keys().cloned().collect::<Vec<_>>(), mine(&a));
    for id in &a.protecting {
        assert_eq!(of_a[id], "deleted", "{of_a:?}");
    }
    for id in &a.available {
        assert_eq!(of_a[id], "available", "{of_a:?}");
    }
    let of_b = bench.checkpoints(&["--owner", &b.owner_id]);
    assert_eq!(of_b.keys().cloned().collect::<Vec<_>>(), mine(&b));
    let protecting = bench.checkpoints(&["--status", "protecting"]);
    let mut expected = b.protecting.clone();
    expected.sort();
    assert_eq!(protecting.keys().cloned().collect::<Vec<_>>(), expected);

    let leases = bench.cli(&["--json", "lease", "list"]);
    leases.expect_code(0);
    let states: BTreeMap<String, String> = leases
        .json_lines()
        .iter()
        .map(|v| (str_field(v, "owner_id"), str_field(v, "state")))
        .collect();
    assert_eq!(
        states.get(&b.owner_id).map(String::as_str),
        Some("alive"),
        "{states:?}\nB's log: {}",
        b.log()
    );
    assert_ne!(
        states.get(&a.owner_id).map(String::as_str),
        Some("alive"),
        "{states:?}"
    );

    assert_eq!(bench.validity(&b.owner_id).0, 0);
    assert_eq!(bench.validity(&a.owner_id).0, 1);
    // More than B has left is asked for: a live lease, but no.
    let run = bench.cli(&[
        "--json",
        "validity-check",
        "--owner",
        &b.owner_id,
        "--validity-window",
        "1h",
    ]);
    run.expect_code(1);
    assert_eq!(run.json()["state"], "alive");

    let third = bench.gc();
    assert_eq!(
        u64_field(&third, "collected"),
        0,
        "nothing more to collect: {third}"
    );

    // Orderly shutdown of B: its unfinished checkpoints end as `error`, its lease is released.
    let status = b.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "B's shutdown; its log:\n{}",
        b.log()
    );
    for id in &b.protecting {
        let (code, v) = bench.checkpoint(id);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["status"], "error", "{v}");
        assert_eq!(v["decided_by"], "owner", "{v}");
    }
    for id in &b.available {
        assert_eq!(bench.checkpoint(id).1["status"], "available");
    }
    let run = bench.cli(&["--json", "lease", "show", &b.owner_id]);
    run.expect_code(1);
    assert_eq!(run.json()["state"], "missing");
    assert_eq!(bench.validity(&b.owner_id).0, 1);

    let last = bench.gc();
    assert_eq!(
        u64_field(&last, "scanned"),
        0,
        "nothing is protecting any more: {last}"
    );
    assert_eq!(u64_field(&last, "collected"), 0, "{last}");
}

/// A service whose lease object disappears learns it at its next renewal and stops at once.
#[test]
fn service_stops_with_exit_3_when_its_lease_is_lost() {
    let bench = Bench::new();
    let mut s = bench.start_service("S", 2, 1);
    let lease = bench
        .dir
        .path()
        .join("bank")
        .join("leases")
        .join(&s.owner_id);
    std::fs::remove_file(&lease).expect("the lease object is a file in a file: bank");
    let status = s.wait(RENEW_WINDOW + Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(3),
        "exit on a lost lease; log:\n{}",
        s.log()
    );
    assert!(s.log().contains("lease lost"), "log:\n{}", s.log());
}

/// Exit codes: 1 for "no", 2 for errors, with messages that say what is wrong.
#[test]
fn cli_says_no_with_1_and_errors_with_2() {
    let bench = Bench::new();
    let run = bench.cli(&["validity-check", "--owner", "nobody"]);
    run.expect_code(1);
    assert!(run.stdout.contains("no lease"), "{run:#?}");

    let run = bench.cli(&["validity-check", "--owner", "../etc"]);
    run.expect_code(2);
    assert!(run.stderr.contains("invalid owner id"), "{run:#?}");

    bench.cli(&["lease", "show", "nobody"]).expect_code(1);
    let run = bench.cli(&["--json", "checkpoint", "show", "cp-none"]);
    run.expect_code(1);
    assert_eq!(run.json()["status"], "missing");
    bench.cli(&["lease", "list"]).expect_code(0);
    bench.cli(&["checkpoint", "list"]).expect_code(0);

    let run = bench.cli_raw(&[
        "--bank".into(),
        "ftp://x".into(),
        "lease".into(),
        "list".into(),
    ]);
    run.expect_code(2);
    assert!(run.stderr.contains("unknown scheme"), "{run:#?}");

    let run = bench.cli_raw(&[
        "--config".into(),
        "/nonexistent/banklease.toml".into(),
        "lease".into(),
        "list".into(),
    ]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("/nonexistent/banklease.toml"),
        "{run:#?}"
    );

    let run = bench.cli(&["checkpoint", "list", "--status", "zombie"]);
    run.expect_code(2);
    assert!(run.stderr.contains("unknown checkpoint status"), "{run:#?}");

    // A stray object under leases/ is reported, never fatal.
    let leases = bench.dir.path().join("bank").join("leases");
    std::fs::create_dir_all(&leases).unwrap();
    std::fs::write(leases.join("broken"), b"not json").unwrap();
    let run = bench.cli(&["--json", "lease", "list"]);
    run.expect_code(1);
    assert!(run.stderr.contains("broken"), "{run:#?}");
    assert_eq!(run.json_lines()[0]["state"], "unreadable", "{run:#?}");
}
