//! A bank (a `file:` one in a scratch directory, or a fresh prefix of moto's or Ceph RGW's S3
//! bucket), and the binary run on it as an operator would: each command's `$WORK` is the scratch
//! directory, so a COMMAND can leave its traces there.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::process::{kill_process, Pid, Signal};

use super::{output_text as text, BIN};

/// Where an [`Env`]'s bank lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    File,
    /// moto (`.ci/start-s3.sh`), with `BANKLEASE_TEST_S3=1`.
    S3,
    /// Ceph RGW's S3 API (`.ci/start-rgw.sh`), with `BANKLEASE_TEST_RGW=1`.
    Rgw,
}

impl Store {
    /// `file:`, and each S3 server the caller's variables turn on.
    pub fn configured() -> Vec<Store> {
        let on = |var: &str| std::env::var(var).as_deref() == Ok("1");
        let mut stores = vec![Store::File];
        if on("BANKLEASE_TEST_S3") {
            stores.push(Store::S3);
        }
        if on("BANKLEASE_TEST_RGW") {
            stores.push(Store::Rgw);
        }
        stores
    }

    /// The bank's URL (a fresh prefix on S3) and the variables its commands need.
    fn bank(self, dir: &Path) -> (String, Vec<(String, String)>) {
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
        let (bucket, endpoint, key, secret) = match self {
            Store::File => return (format!("file://{}", dir.join("bank").display()), Vec::new()),
            Store::S3 => (
                "S3_BUCKET",
                "AWS_ENDPOINT",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
            ),
            Store::Rgw => (
                "RGW_BUCKET",
                "RGW_S3_ENDPOINT",
                "RGW_ACCESS_KEY_ID",
                "RGW_SECRET_ACCESS_KEY",
            ),
        };
        let bucket = std::env::var(bucket).unwrap_or_else(|_| "banklease-test".to_owned());
        let url = format!("s3://{bucket}/work-{}", uuid::Uuid::new_v4().simple());
        let vars = [
            ("AWS_ENDPOINT", var(endpoint)),
            ("AWS_ACCESS_KEY_ID", var(key)),
            ("AWS_SECRET_ACCESS_KEY", var(secret)),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            // S3 stamps whole seconds: the margin must cover one.
            ("BANKLEASE_LEASE__SKEW_MARGIN", "1100ms".to_owned()),
        ];
        (url, vars.map(|(k, v)| (k.to_owned(), v)).into())
    }
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub store: Store,
    /// Variables every command of this env gets, over the defaults.
    vars: Vec<(String, String)>,
}

impl Env {
    /// With `RUST_LOG=error`: COMMAND's traces without the CLI's warnings.
    pub fn new() -> Self {
        Self::on(Store::File)
    }

    /// [`Env::new`] on `store`.
    pub fn on(store: Store) -> Self {
        Self::on_with_vars(store, &[("RUST_LOG", "error")])
    }

    /// With `vars` set on every command (and no `RUST_LOG` unless given: as an operator runs it).
    pub fn with_vars(vars: &[(&str, &str)]) -> Self {
        Self::on_with_vars(Store::File, vars)
    }

    /// [`Env::with_vars`] on `store`.
    pub fn on_with_vars(store: Store, vars: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (url, mut all) = store.bank(dir.path());
        all.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let env = Self {
            dir,
            url,
            store,
            vars: all,
        };
        let out = env.run(&["init"]);
        assert_eq!(out.status.code(), Some(0), "{store:?}: {}", text(&out));
        env
    }

    /// The value this env gives variable `name`, if it sets it.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn work(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("BANKLEASE_") || name == "RUST_LOG" {
                cmd.env_remove(&*name);
            }
        }
        cmd.current_dir(self.work())
            .args(["--bank", &self.url])
            .args(args)
            .env("NO_COLOR", "1")
            .env("WORK", self.work())
            // `run`'s private directory goes with the test's, even from a `run` killed outright.
            .env("TMPDIR", self.work())
            .env("XDG_RUNTIME_DIR", self.work())
            .envs(self.vars.iter().map(|(k, v)| (k, v)));
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run the CLI")
    }

    pub fn spawn(&self, args: &[&str], name: &str) -> Child {
        let file = |suffix: &str| {
            Stdio::from(
                std::fs::File::create(self.work().join(format!("{name}.{suffix}"))).unwrap(),
            )
        };
        self.command(args)
            .stdout(file("out"))
            .stderr(file("err"))
            .spawn()
            .unwrap()
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.work().join(name)).unwrap_or_default()
    }

    /// The times (ns since the epoch) COMMAND `name` ticked at.
    pub fn ticks(&self, name: &str) -> Vec<u128> {
        self.read(&format!("{name}.ticks"))
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// `lock acquire KEY` for 10 s, waiting up to 30 s; the host's time (ns) when it returned.
    pub fn take_over(&self, key: &str) -> u128 {
        let out = self.run(&["lock", "acquire", key, "--duration", "10s", "-w", "30"]);
        let at = now_ns();
        assert_eq!(
            out.status.code(),
            Some(0),
            "the next holder: {}",
            text(&out)
        );
        at
    }
}

pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

pub fn signal(child: &Child, signal: Signal) {
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), signal).unwrap();
}

/// The state letter of process `pid` (`T` stopped, `S` sleeping, ...), `None` once it is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    // `pid (comm) S ...`: comm may hold spaces and parentheses; the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The guard's pid: the supervisor's child running `__guard`.
pub fn guard_of(supervisor: u32) -> u32 {
    let mut found = None;
    super::wait_for("the guard", || {
        found = std::fs::read_dir("/proc").unwrap().find_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (ppid == supervisor && String::from_utf8_lossy(&cmdline).contains("__guard"))
                .then_some(pid)
        });
        found.is_some()
    });
    found.unwrap()
}
