//! An agent's refusal always reaches the job: `banklease agent checkpoint put` exits non-zero
//! with the agent's reason, whatever the body's size and however fast it is piped in, and a
//! closed pipe counts as success only when it is our own stdout whose reader went away.
//!
//! Run as an operator would: a bash job under `banklease run` pipes bodies of 0 B, 1 MiB and
//! 64 MiB into refused puts, fast (`head -c`) and slow (half, a pause, the rest).

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
/// Every wait of these tests is bounded by this.
const LIMIT: Duration = Duration::from_secs(120);

struct Env {
    dir: tempfile::TempDir,
    url: String,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("bank").display());
        let init = Command::new(BIN)
            .args(["--bank", &url, "init"])
            .output()
            .unwrap();
        assert!(init.status.success(), "banklease init: {init:?}");
        Self { dir, url }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::bare();
        let cli_dir = Path::new(BIN).parent().unwrap().to_path_buf();
        let mut paths = vec![cli_dir];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        cmd.current_dir(self.dir.path())
            .args(["--bank", &self.url])
            .args(args)
            .env("BANKLEASE_LEASE__RENEW_WINDOW", "1s")
            .env("BANKLEASE_LEASE__EXPIRE_WINDOW", "20s")
            .env("BANKLEASE_LEASE__VALIDITY_WINDOW", "1s")
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .env("PATH", std::env::join_paths(paths).unwrap())
            .env("WORK", self.dir.path())
            // `run`'s private directory goes with the test's, even from a `run` killed outright.
            .env("TMPDIR", self.dir.path())
            .env("XDG_RUNTIME_DIR", self.dir.path());
        cmd
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .trim()
            .to_owned()
    }
}

const SIZES: [u64; 3] = [0, 1 << 20, 64 << 20];
/// Fast puts are repeated: the defect showed in about half of the tries.
const FAST_TRIES: usize = 4;

#[test]
fn a_refused_put_exits_non_zero_with_the_agents_reason_whatever_the_body() {
    let env = Env::new();
    let sizes = SIZES.map(|s| s.to_string()).join(" ");
    // `put` with its stdin from a producer; `$?` is put's own status (no pipefail needed).
    let script = format!(
        r#"set -u
cd "$WORK"
banklease agent checkpoint create cp-open || exit 9
banklease agent checkpoint create cp-done || exit 9
banklease agent checkpoint complete cp-done available || exit 9
fast() {{ head -c "$1" /dev/zero; }}
slow() {{ head -c $(($1 / 2)) /dev/zero; sleep 0.3; head -c $(($1 - $1 / 2)) /dev/zero; }}
for size in {sizes}; do
  for try in $(seq 1 {FAST_TRIES}); do
    fast $size | banklease agent checkpoint put cp-open 'bad#name' - >out-name-fast-$size-$try 2>err-name-fast-$size-$try
    echo $? > rc-name-fast-$size-$try
    fast $size | banklease agent checkpoint put cp-done vol - >out-done-fast-$size-$try 2>err-done-fast-$size-$try
    echo $? > rc-done-fast-$size-$try
  done
  slow $size | banklease agent checkpoint put cp-open 'bad#name' - >out-name-slow-$size-1 2>err-name-slow-$size-1
  echo $? > rc-name-slow-$size-1
  slow $size | banklease agent checkpoint put cp-done vol - >out-done-slow-$size-1 2>err-done-slow-$size-1
  echo $? > rc-done-slow-$size-1
done
"#
    );
    std::fs::write(env.path("job.sh"), script).unwrap();
    let mut child = env
        .command(&["run", "--", "bash", "job.sh"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("the job did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "the job itself ran through");

    let mut wrong = Vec::new();
    for size in SIZES {
        for (speed, tries) in [("fast", FAST_TRIES), ("slow", 1)] {
            for t in 1..=tries {
                // A refused name is a bad request (exit 2); a completed checkpoint is a
                // conflict (exit 2 as well: it is the job's mistake, not a lost lease).
                for (case, reason) in [
                    ("name", "bad#name"),
                    ("done", "already completed as `available`"),
                ] {
                    let tag = format!("{case}-{speed}-{size}-{t}");
                    let rc = env.read(&format!("rc-{tag}"));
                    let err = env.read(&format!("err-{tag}"));
                    let out = env.read(&format!("out-{tag}"));
                    let first = err.lines().next().unwrap_or_default();
                    if rc == "0" || !first.starts_with("error: ") || !err.contains(reason) {
                        wrong.push(format!("{tag}: exit {rc}, stdout `{out}`, stderr `{err}`"));
                    }
                    if !out.is_empty() {
                        wrong.push(format!("{tag}: printed `{out}` on a refusal"));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "refusals reported as success or without the agent's reason:\n{}",
        wrong.join("\n")
    );
}

/// `banklease … | head -0`: the reader of our stdout went away; that is not an error.
#[test]
fn a_reader_that_closes_our_stdout_is_not_an_error() {
    let env = Env::new();
    let out = env.command(&["init"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mut child = env
        .command(&["lease", "list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the command writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "{out:?}");
}
