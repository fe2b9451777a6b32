//! A `file:` bank in a scratch directory, and the binary run in it as an operator would: each
//! command's `$WORK` is the directory, so a COMMAND can leave its traces there.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::process::{kill_process, Pid, Signal};

use super::{output_text as text, BIN};

pub struct Env {
    pub dir: tempfile::TempDir,
    pub url: String,
    /// Variables every command of this env gets, over the defaults.
    vars: Vec<(String, String)>,
}

impl Env {
    /// With `RUST_LOG=error`: COMMAND's traces without the CLI's warnings.
    pub fn new() -> Self {
        Self::with_vars(&[("RUST_LOG", "error")])
    }

    /// With `vars` set on every command (and no `RUST_LOG` unless given: as an operator runs it).
    pub fn with_vars(vars: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("bank").display());
        let vars = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = Self { dir, url, vars };
        let out = env.run(&["init"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
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
