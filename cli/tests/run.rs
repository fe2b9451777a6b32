//! `banklease run -- COMMAND` and its agent, process by process: a bash "backup job" under
//! `run`, and what happens when the agent, the job or the lease dies.
//!
//! On `file:` always; on Swift and S3 too with `BANKLEASE_TEST_SWIFT=1` / `BANKLEASE_TEST_S3=1`
//! (started by `.ci/run`).

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use banklease_testkit::cid;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use banklease::checkpoint::{read_checkpoint, Status};
use banklease::paths::Prefix;
use banklease::{Bank, OwnerId};
use object_store::ObjectStoreExt;

use common::BIN;
const RENEW: &str = "1s";
/// Renewals may stall for EXPIRE − VALIDITY (7 s) before `run` stops the job: room for a
/// loaded CI disk (4 s, i.e. 3 s of room, once was not).
const EXPIRE: Duration = Duration::from_secs(8);
const VALIDITY: &str = "1s";
/// Every wait of these tests is bounded by this.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    File,
    Swift,
    S3,
}

/// One scenario's bank and working directory.
struct Env {
    dir: tempfile::TempDir,
    url: String,
    margin: Duration,
    /// Requests that outlast a pause of `run` (see [`Env::budget`]).
    long_requests: bool,
}

fn stores() -> Vec<Store> {
    let on = |v: &str| std::env::var(v).as_deref() == Ok("1");
    let mut out = vec![Store::File];
    if on("BANKLEASE_TEST_SWIFT") {
        out.push(Store::Swift);
    } else {
        eprintln!("note: Swift scenarios skipped: set BANKLEASE_TEST_SWIFT=1 (.ci/run does)");
    }
    if on("BANKLEASE_TEST_S3") {
        out.push(Store::S3);
    } else {
        eprintln!("note: S3 scenarios skipped: set BANKLEASE_TEST_S3=1 (.ci/run does)");
    }
    out
}

impl Env {
    fn new(store: Store, name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let unique = format!(
            "run-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let (url, margin) = match store {
            Store::File => (
                format!("file://{}", dir.path().join("bank").display()),
                Duration::from_millis(100),
            ),
            Store::Swift => {
                let c =
                    std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".into());
                (format!("swift://{c}/{unique}"), Duration::from_millis(100))
            }
            Store::S3 => {
                let b = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".into());
                (format!("s3://{b}/{unique}"), Duration::from_millis(1100))
            }
        };
        let env = Self {
            dir,
            url,
            margin,
            long_requests: false,
        };
        // As an operator starts: the bank is made first; every command refuses a URL without one.
        let init = env.command(&["init"]).output().unwrap();
        assert!(init.status.success(), "banklease init: {init:?}");
        env
    }

    /// Grace, late-write window and the store client's limits that pass the configuration
    /// gate: on a server, a budget of 5.5 s (2 s of retries, a backoff of 0.5 s, a 3 s request)
    /// that rule (c) lets land before the GC's decision with a 5 s grace.
    fn budget(&self) -> Vec<(&'static str, &'static str)> {
        if self.url.starts_with("file:") {
            vec![
                ("BANKLEASE_GC__GRACE", "500ms"),
                ("BANKLEASE_GC__LATE_WRITE_WINDOW", "1s"),
            ]
        } else if self.long_requests {
            // A request in flight when `run` is paused for seconds must still be answered, not
            // time out: 20 s requests (a 22.5 s budget), and a grace that covers it.
            vec![
                ("BANKLEASE_GC__GRACE", "30s"),
                ("BANKLEASE_GC__LATE_WRITE_WINDOW", "30s"),
                ("BANKLEASE_BANK__RETRY_TIMEOUT", "2s"),
                ("BANKLEASE_BANK__REQUEST_TIMEOUT", "20s"),
            ]
        } else {
            vec![
                ("BANKLEASE_GC__GRACE", "5s"),
                ("BANKLEASE_GC__LATE_WRITE_WINDOW", "6s"),
                ("BANKLEASE_BANK__RETRY_TIMEOUT", "2s"),
                ("BANKLEASE_BANK__REQUEST_TIMEOUT", "3s"),
            ]
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn bank(&self) -> Bank {
        Bank::open(&self.url).unwrap()
    }

    /// `banklease [args]` with this bank and short windows; nothing from the caller's
    /// `BANKLEASE_*`.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::bare();
        cmd.current_dir(self.dir.path())
            .args(["--bank", &self.url])
            .args(args)
            .env("BANKLEASE_LEASE__RENEW_WINDOW", RENEW)
            .env(
                "BANKLEASE_LEASE__EXPIRE_WINDOW",
                format!("{}ms", EXPIRE.as_millis()),
            )
            .env("BANKLEASE_LEASE__VALIDITY_WINDOW", VALIDITY)
            .env(
                "BANKLEASE_LEASE__SKEW_MARGIN",
                format!("{}ms", self.margin.as_millis()),
            )
            .envs(self.budget())
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            // The job finds the CLI as `banklease` and talks to the test through files.
            .env("PATH", path_with_cli())
            .env("WORK", self.dir.path())
            // `run`'s private directory goes with the test's, even from a `run` killed outright.
            .env("TMPDIR", self.dir.path())
            .env("XDG_RUNTIME_DIR", self.dir.path());
        cmd
    }

    /// Start `banklease run [run_args] -- bash job.sh` with `script` as job.sh.
    fn start(&self, run_args: &[&str], script: &str) -> Child {
        let job = self.path("job.sh");
        std::fs::write(&job, format!("set -u\ncd \"$WORK\"\n{script}")).unwrap();
        let mut args = vec!["run"];
        args.extend_from_slice(run_args);
        args.extend(["--", "bash", job.to_str().unwrap()]);
        self.command(&args)
            .stdout(Stdio::from(
                std::fs::File::create(self.path("run.out")).unwrap(),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(self.path("run.err")).unwrap(),
            ))
            .spawn()
            .unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("run.err")).unwrap_or_default()
    }

    /// Wait for the job to create `name`; fails at once if `run` exits first.
    fn wait_for_file(&self, run: &mut Child, name: &str) {
        let start = Instant::now();
        while !self.path(name).exists() {
            if let Some(status) = run.try_wait().unwrap() {
                panic!(
                    "`run` exited ({status}) before `{name}`; stderr:\n{}",
                    self.stderr()
                );
            }
            assert!(
                start.elapsed() < LIMIT,
                "`{name}` never appeared; run's stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn status_of(&self, id: &str) -> Option<Status> {
        block(read_checkpoint(&self.bank(), &cid(id)))
            .unwrap()
            .map(|r| r.status)
    }

    fn data_of(&self, id: &str) -> Vec<(String, Vec<u8>)> {
        let bank = self.bank();
        let prefix = Prefix::Data(&cid(id)).path(&bank);
        block(async {
            let mut out = Vec::new();
            let listed: Vec<_> =
                futures::TryStreamExt::try_collect::<Vec<_>>(bank.store().list(Some(&prefix)))
                    .await
                    .unwrap();
            for meta in listed {
                let bytes = bank.store().get(&meta.location).await.unwrap();
                let name = meta
                    .location
                    .prefix_match(&prefix)
                    .unwrap()
                    .map(|p| p.as_ref().to_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((name, bytes.bytes().await.unwrap().to_vec()));
            }
            out.sort();
            out
        })
    }

    fn lease_exists(&self, owner: &str) -> bool {
        let owner = OwnerId::parse(owner).unwrap();
        block(banklease::lease::read_lease(&self.bank(), &owner))
            .unwrap()
            .is_some()
    }
}

fn path_with_cli() -> std::ffi::OsString {
    let dir = Path::new(BIN).parent().unwrap();
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn wait(child: &mut Child, env: &Env) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("`banklease run` did not exit; stderr:\n{}", env.stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

fn read(env: &Env, name: &str) -> String {
    std::fs::read_to_string(env.path(name))
        .unwrap_or_else(|e| panic!("{name}: {e}; run's stderr:\n{}", env.stderr()))
        .trim()
        .to_owned()
}

/// The backup job: three checkpoints with data from stdin, two completed, the third left
/// protecting; then it says `ready` and waits for `go`.
fn backup_job() -> String {
    // 20 MB: a multipart upload of three parts (on Swift an SLO with three segments).
    let big = "head -c 20000000 /dev/urandom > big.bin\n\
         banklease agent checkpoint put cp-a big big.bin || exit 9\n\
         banklease agent checkpoint put cp-c big big.bin || exit 9\n";
    format!(
        r#"echo "$BANKLEASE_OWNER_ID" > owner
echo "$BANKLEASE_AGENT" > socket
banklease agent valid > valid.out; echo $? > valid.exit
for cp in cp-a cp-b cp-c; do
  banklease agent checkpoint create $cp || exit 9
  echo "volume of $cp" | banklease agent checkpoint put $cp vol1 - || exit 9
  printf 'second of %s' $cp | banklease agent checkpoint put $cp vol2 || exit 9
done
{big}banklease agent checkpoint complete cp-a available || exit 9
banklease agent checkpoint complete cp-b available || exit 9
banklease --json agent status > status.json
touch ready
for _ in $(seq 1 600); do [ -e go ] && exit 0; sleep 0.1; done
exit 8
"#
    )
}

fn assert_two_completed(env: &Env) {
    for cp in ["cp-a", "cp-b"] {
        assert_eq!(env.status_of(cp), Some(Status::Available), "{cp}");
        // Swift keeps a large object's segments beside it (`<name>.segments/…`).
        let data: Vec<_> = env
            .data_of(cp)
            .into_iter()
            .filter(|(n, _)| !n.contains(".segments/"))
            .collect();
        let names: Vec<&str> = data.iter().map(|(n, _)| n.as_str()).collect();
        let expect: &[&str] = if cp == "cp-a" {
            &["big", "vol1", "vol2"]
        } else {
            &["vol1", "vol2"]
        };
        assert_eq!(names, expect, "{cp}");
        let vol1 = data.iter().find(|(n, _)| n == "vol1").unwrap();
        assert_eq!(vol1.1, format!("volume of {cp}\n").as_bytes());
        if cp == "cp-a" {
            let big = data.iter().find(|(n, _)| n == "big").unwrap();
            assert_eq!(big.1, std::fs::read(env.path("big.bin")).unwrap());
        }
    }
}

#[test]
fn a_backup_job_completes_two_and_run_completes_the_third_as_error_on_exit() {
    for store in stores() {
        let env = Env::new(store, "job");
        std::fs::write(env.path("go"), "").unwrap();
        let mut run = env.start(&[], &backup_job());
        let status = wait(&mut run, &env);
        assert_eq!(status.code(), Some(0), "{store:?}: {}", env.stderr());
        assert_eq!(read(&env, "valid.exit"), "0");
        assert!(read(&env, "valid.out").starts_with("valid: "));
        let json: serde_json::Value = serde_json::from_str(&read(&env, "status.json")).unwrap();
        assert_eq!(json["state"], "held");
        assert_eq!(json["valid"], true);
        assert_eq!(json["owner_id"], read(&env, "owner").as_str());
        let listed: Vec<(String, String)> = json["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().into(),
                    c["status"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("cp-a", "available"),
                ("cp-b", "available"),
                ("cp-c", "protecting")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        assert_two_completed(&env);
        assert_eq!(env.status_of("cp-c"), Some(Status::Error), "{store:?}");
        assert!(
            !env.lease_exists(&read(&env, "owner")),
            "{store:?}: released"
        );
        assert!(
            !Path::new(&read(&env, "socket")).exists(),
            "the socket is removed on exit"
        );
    }
}

#[test]
fn an_agent_killed_leaves_the_lease_to_expire_and_the_gc_collects_only_the_protecting_one() {
    for store in stores() {
        let env = Env::new(store, "agentkill");
        // cp-c holds a multipart object too (on Swift: an SLO and its segments).
        let mut run = env.start(&[], &backup_job());
        env.wait_for_file(&mut run, "ready");
        run.kill().unwrap(); // SIGKILL: nothing is released
        run.wait().unwrap();
        let owner = read(&env, "owner");
        assert!(env.lease_exists(&owner));
        std::fs::write(env.path("go"), "").unwrap(); // the orphaned job ends
        let start = Instant::now();
        while env.status_of("cp-c") != Some(Status::Deleted) {
            assert!(start.elapsed() < LIMIT, "{store:?}: cp-c never collected");
            let out = env.command(&["gc"]).output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        assert!(
            start.elapsed() + Duration::from_secs(1) >= EXPIRE / 2,
            "collected before the lease could expire"
        );
        assert!(env.data_of("cp-c").is_empty(), "{store:?}: cp-c's data");
        assert_two_completed(&env);
    }
}

#[test]
fn a_job_killed_gets_its_protecting_checkpoints_completed_as_error_and_the_lease_released() {
    for store in stores() {
        let env = Env::new(store, "jobkill");
        let mut run = env.start(
            &[],
            "echo $$ > job.pid\necho \"$BANKLEASE_OWNER_ID\" > owner\n\
             banklease agent checkpoint create cp-k || exit 9\n\
             echo data | banklease agent checkpoint put cp-k vol1 || exit 9\n\
             touch ready\nsleep 60\n",
        );
        env.wait_for_file(&mut run, "ready");
        let job: u32 = read(&env, "job.pid").parse().unwrap();
        signal(job, rustix::process::Signal::KILL);
        let status = wait(&mut run, &env);
        assert_eq!(status.code(), Some(128 + 9), "{store:?}: {}", env.stderr());
        assert_eq!(env.status_of("cp-k"), Some(Status::Error), "{store:?}");
        assert!(!env.lease_exists(&read(&env, "owner")));
    }
}

#[test]
fn signals_are_forwarded_and_run_exits_with_the_jobs_status() {
    let env = Env::new(Store::File, "signals");
    let mut run = env.start(
        &[],
        "trap 'echo TERM > got; exit 143' TERM\n\
         banklease agent checkpoint create cp-s || exit 9\n\
         touch ready\nfor _ in $(seq 1 600); do sleep 0.1; done\nexit 8\n",
    );
    env.wait_for_file(&mut run, "ready");
    signal(run.id(), rustix::process::Signal::TERM);
    let status = wait(&mut run, &env);
    assert_eq!(status.code(), Some(143), "{}", env.stderr());
    assert_eq!(read(&env, "got"), "TERM");
    assert_eq!(env.status_of("cp-s"), Some(Status::Error));
}

#[test]
fn a_lease_lost_while_the_job_writes_stops_the_job_and_refuses_its_writes() {
    for store in stores() {
        let mut env = Env::new(store, "lost");
        env.long_requests = true;
        // The job ignores SIGTERM, so only SIGKILL after --kill-after ends it.
        let mut run = env.start(
            &["--kill-after", "1500ms"],
            r#"trap '' TERM
banklease agent checkpoint create cp-l || exit 9
touch ready
for i in $(seq 1 2000); do
  echo "part $i" | banklease agent checkpoint put cp-l "p$i" -; rc=$?
  if [ $rc -ne 0 ]; then
    echo $rc > refused
    banklease agent checkpoint complete cp-l available; echo $? > complete.exit
    sleep 60
  fi
  sleep 0.02
done
exit 8
"#,
        );
        env.wait_for_file(&mut run, "ready");
        std::thread::sleep(Duration::from_millis(300));
        // The agent pauses past its lease's expiry, as in a VM freeze.
        signal(run.id(), rustix::process::Signal::STOP);
        std::thread::sleep(EXPIRE + Duration::from_secs(1));
        signal(run.id(), rustix::process::Signal::CONT);
        let status = wait(&mut run, &env);
        let stderr = env.stderr();
        assert_eq!(status.code(), Some(75), "{store:?}: {stderr}");
        assert!(stderr.contains("stopped being valid"), "{stderr}");
        assert!(
            stderr.contains("signal 9"),
            "SIGKILL after --kill-after: {stderr}"
        );
        assert_eq!(
            read(&env, "refused"),
            "1",
            "{store:?}: the write was refused"
        );
        assert_eq!(
            read(&env, "complete.exit"),
            "1",
            "{store:?}: completion refused"
        );
        assert_eq!(env.status_of("cp-l"), Some(Status::Protecting), "{store:?}");
    }
}

/// Raw HTTP to the agent: the answer's status line and body.
fn raw(socket: &Path, request: &[u8]) -> (String, String) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

fn http(method: &str, path: &str, body: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: agent\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn hostile_or_malformed_requests_get_clear_errors_and_change_nothing() {
    let env = Env::new(Store::File, "hostile");
    let mut run = env.start(
        &["--checkpoint-prefix", "job-"],
        "echo \"$BANKLEASE_AGENT\" > socket\n\
         banklease agent checkpoint create job-1 || exit 9\n\
         banklease agent checkpoint create other-1; echo $? > prefix.exit\n\
         touch ready\nfor _ in $(seq 1 600); do [ -e go ] && exit 0; sleep 0.1; done\nexit 8\n",
    );
    env.wait_for_file(&mut run, "ready");
    assert_eq!(read(&env, "prefix.exit"), "2");
    let socket = PathBuf::from(read(&env, "socket"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);

    let cases: &[(&[u8], &str, &str)] = &[
        (b"this is not http\r\n\r\n", "400", ""),
        (
            &http("POST", "/v1/checkpoints", "{not json"),
            "400",
            "not the JSON expected",
        ),
        (
            &http("POST", "/v1/checkpoints", r#"{"id":"job-2","x":1}"#),
            "400",
            "unknown field",
        ),
        (
            &http("POST", "/v1/checkpoints", r#"{"id":"job-../x"}"#),
            "400",
            "invalid checkpoint id",
        ),
        (
            &http("POST", "/v1/checkpoints", r#"{"id":"job-1"}"#),
            "409",
            "already exists",
        ),
        (
            &http("PUT", "/v1/checkpoints/job-9/data/v", "x"),
            "404",
            "not created through this agent",
        ),
        (
            &http("PUT", "/v1/checkpoints/job-1/data/..", "x"),
            "400",
            "invalid data object id",
        ),
        (
            &http(
                "POST",
                "/v1/checkpoints/job-1/complete",
                r#"{"status":"deleted"}"#,
            ),
            "400",
            "`available` or `error`",
        ),
        (
            &http("DELETE", "/v1/checkpoints/job-1", ""),
            "404",
            "no such request",
        ),
        (
            &http("GET", "/../../etc/passwd", ""),
            "404",
            "no such request",
        ),
    ];
    for (request, status, says) in cases {
        let (line, body) = raw(&socket, request);
        assert!(line.contains(status), "{line} {body}");
        if !says.is_empty() {
            let json: serde_json::Value =
                serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
            assert!(json["error"].as_str().unwrap().contains(says), "{body}");
        }
    }
    // Nothing changed: one checkpoint, protecting, no data; the lease still valid.
    let (_, body) = raw(&socket, &http("GET", "/v1/status", ""));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["valid"], true, "{body}");
    assert_eq!(json["checkpoints"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(json["checkpoints"][0]["data_objects"], 0, "{body}");
    for id in ["job-2", "other-1", "job-9"] {
        assert_eq!(env.status_of(id), None, "{id}");
    }
    assert!(env.data_of("job-1").is_empty());
    std::fs::write(env.path("go"), "").unwrap();
    assert_eq!(wait(&mut run, &env).code(), Some(0), "{}", env.stderr());
}

#[test]
fn run_exits_127_126_and_125_and_leaves_no_lease() {
    let env = Env::new(Store::File, "codes");
    let out = env
        .command(&["run", "--", "/no/such/command"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot start COMMAND=`/no/such/command`")
    );
    let not_exec = env.path("plain.txt");
    std::fs::write(&not_exec, "x").unwrap();
    let out = env
        .command(&["run", "--", not_exec.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    let leases = env.dir.path().join("bank/leases");
    let left = std::fs::read_dir(&leases).map_or(0, |d| d.count());
    assert_eq!(left, 0, "every lease released");
    let out = env
        .command(&["run", "--", "true"])
        .env("BANKLEASE_LEASE__VALIDITY_WINDOW", "1h")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid lease windows"));
    let out = env.command(&["agent", "valid"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("BANKLEASE_AGENT"));
}

/// An executable script without a `#!` line runs with /bin/sh (as flock and
/// execvp run it; it was exit 125 "Exec format error"), from a path and from `PATH`; and
/// `run`'s own usage errors exit 125, never the 2 a job may exit with.
#[test]
fn a_script_without_a_shebang_runs_with_sh_and_usage_errors_exit_125() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::new(Store::File, "shebang");
    let script = env.path("no-shebang.sh");
    std::fs::write(
        &script,
        "echo \"ran with $# args: $1\" > \"$WORK/out\"\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env
        .command(&["run", "--", script.to_str().unwrap(), "one"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(env.path("out")).unwrap(),
        "ran with 1 args: one\n"
    );
    let path = format!(
        "{}:{}",
        env.dir.path().display(),
        path_with_cli().to_string_lossy()
    );
    let out = env
        .command(&["run", "--", "no-shebang.sh", "two"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(env.path("out")).unwrap(),
        "ran with 1 args: two\n"
    );
    for args in [
        &["run", "--lock-duration"][..],
        &["run", "--lock-duration", "soon", "--", "true"][..],
        &["lock", "run", "--duration", "soon", "k", "--", "true"][..],
        &["--bank", "file:///x", "lock", "run", "-w"][..],
    ] {
        let out = env.command(args).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {out:?}");
    }
    // Elsewhere a usage error stays clap's 2.
    let out = env.command(&["lease", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// README's "Wrapping an existing backup job" script, as written there.
fn readme_script() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let after = readme
        .split("runs this script -->\n```sh\n")
        .nth(1)
        .expect("README's backup-job script");
    after.split("\n```").next().unwrap().to_owned()
}

#[test]
fn the_readme_backup_job_runs_as_written() {
    let env = Env::new(Store::File, "readme");
    let source = env.path("source");
    std::fs::create_dir_all(source.join("sub")).unwrap();
    std::fs::write(source.join("a.conf"), "a = 1\n").unwrap();
    std::fs::write(source.join("sub/b.conf"), "b = 2\n").unwrap();
    let script = env.path("backup-etc.sh");
    std::fs::write(&script, readme_script()).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env
        .command(&[
            "run",
            "--checkpoint-prefix",
            "etc-",
            "--",
            "./backup-etc.sh",
        ])
        .env("SOURCE", &source)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("created ")?.strip_suffix(" (protecting)"))
        .unwrap_or_else(|| panic!("no checkpoint created: {stdout}"))
        .to_owned();
    assert!(id.starts_with("etc-"), "{id}");
    assert_eq!(env.status_of(&id), Some(Status::Available));
    let data = env.data_of(&id);
    let names: Vec<&str> = data.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["etc.tgz", "files.txt"]);
    let files = String::from_utf8_lossy(&data[1].1);
    assert!(
        files.contains("a.conf") && files.contains("sub/b.conf"),
        "{files}"
    );
    assert!(data[0].1.starts_with(&[0x1f, 0x8b]), "a gzip archive");
}

#[test]
fn a_checkpoint_is_not_completed_while_one_of_its_uploads_runs() {
    let env = Env::new(Store::File, "inflight");
    let mut run = env.start(
        &[],
        "echo \"$BANKLEASE_AGENT\" > socket\n\
         banklease agent checkpoint create cp-u || exit 9\n\
         touch ready\nfor _ in $(seq 1 600); do [ -e go ] && exit 0; sleep 0.1; done\nexit 8\n",
    );
    env.wait_for_file(&mut run, "ready");
    let socket = PathBuf::from(read(&env, "socket"));
    // An upload whose body is half sent.
    let mut upload = UnixStream::connect(&socket).unwrap();
    upload
        .write_all(
            b"PUT /v1/checkpoints/cp-u/data/v HTTP/1.1\r\nhost: agent\r\nconnection: close\r\n\
              content-length: 10\r\n\r\nhalf-",
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let complete = http(
        "POST",
        "/v1/checkpoints/cp-u/complete",
        r#"{"status":"available"}"#,
    );
    let (line, body) = raw(&socket, &complete);
    assert!(line.contains("409"), "{line} {body}");
    assert!(body.contains("upload(s) still running"), "{body}");
    // The upload ends; then the completion goes through, with the data.
    upload.write_all(b"done!").unwrap();
    upload
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = upload.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let (line, body) = raw(&socket, &complete);
    assert!(line.contains("200"), "{line} {body}");
    assert_eq!(env.status_of("cp-u"), Some(Status::Available));
    assert_eq!(
        env.data_of("cp-u"),
        [("v".to_owned(), b"half-done!".to_vec())]
    );
    std::fs::write(env.path("go"), "").unwrap();
    assert_eq!(wait(&mut run, &env).code(), Some(0), "{}", env.stderr());
}

#[test]
fn members_of_the_jobs_group_that_ignore_sigterm_are_killed_when_the_lease_ends() {
    let env = Env::new(Store::File, "members");
    // The job itself exits on SIGTERM; a process of its group ignores it.
    let mut run = env.start(
        &["--kill-after", "300ms"],
        "trap 'exit 143' TERM\n\
         (trap '' TERM; for _ in $(seq 1 3000); do sleep 0.1; done) &\n\
         echo $! > member.pid\n\
         touch ready\nfor _ in $(seq 1 600); do sleep 0.1; done\nexit 8\n",
    );
    env.wait_for_file(&mut run, "ready");
    let member: u32 = read(&env, "member.pid").parse().unwrap();
    signal(run.id(), rustix::process::Signal::STOP);
    std::thread::sleep(EXPIRE + Duration::from_secs(1));
    signal(run.id(), rustix::process::Signal::CONT);
    let status = wait(&mut run, &env);
    assert_eq!(status.code(), Some(75), "{}", env.stderr());
    // Killed with the group (and reaped by init, as an orphan): gone within a moment.
    let alive = || {
        let pid = rustix::process::Pid::from_raw(member as i32).unwrap();
        rustix::process::test_kill_process(pid).is_ok()
            && !std::fs::read_to_string(format!("/proc/{member}/stat"))
                .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"))
    };
    let start = Instant::now();
    while alive() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a member of the job's group outlived the lease"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
