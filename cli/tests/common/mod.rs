//! What the CLI suites on a `file:` bank share: the binary run as an operator runs it, with
//! short windows, and a bank whose owner died.

#![allow(dead_code)] // each suite uses its part
// A harness of processes, timed by the wall clock it shares with them.
#![allow(clippy::disallowed_methods)]

pub mod work;

use banklease_testkit::cid;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use banklease::clock::SystemClock;
use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease};

pub const BIN: &str = env!("CARGO_BIN_EXE_banklease");

/// `banklease --bank url args` with short windows, a small margin and grace.
pub fn cli(url: &str, args: &[&str]) -> Output {
    command(url, args).output().unwrap()
}

/// The binary with none of the developer's `BANKLEASE_*` variables: what a suite then sets is
/// all the binary sees.
pub fn bare() -> Command {
    bare_via(&[])
}

/// [`bare`] run through `wrapper` (`["faketime", "-f", "+40s"]`): the wrapper's program with its
/// arguments, then the binary.
pub fn bare_via(wrapper: &[&str]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut cmd = Command::new(program);
            cmd.args(rest).arg(BIN);
            cmd
        }
        None => Command::new(BIN),
    };
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    // An S3 bank without keys asks the AWS chain, whose last source is the instance metadata
    // address: never from a test.
    cmd.env("AWS_EC2_METADATA_DISABLED", "true");
    cmd
}

/// [`cli`]'s command, not yet run.
pub fn command(url: &str, args: &[&str]) -> Command {
    command_via(&[], url, args)
}

/// [`command`] run through `wrapper` (`["faketime", "-f", "+40s"]`): the wrapper's program with
/// its arguments, then the binary with [`cli`]'s.
pub fn command_via(wrapper: &[&str], url: &str, args: &[&str]) -> Command {
    let mut cmd = bare_via(wrapper);
    cmd.args(["--bank", url])
        .args(args)
        .env("BANKLEASE_LEASE__RENEW_WINDOW", "300ms")
        .env("BANKLEASE_LEASE__EXPIRE_WINDOW", "1s")
        .env("BANKLEASE_LEASE__VALIDITY_WINDOW", "100ms")
        .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
        .env("BANKLEASE_GC__GRACE", "500ms")
        .env("BANKLEASE_GC__LATE_WRITE_WINDOW", "1s")
        .env("NO_COLOR", "1")
        .env("USER", "ci-operator")
        .env("RUST_LOG", "error");
    cmd
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A bank made by `init` in `dir/bank`, and an owner that wrote `checkpoints` protecting ones
/// and died (never renewed): its lease is expired past grace when this returns.
pub fn dead_owner_bank(dir: &Path, checkpoints: &[&str]) -> String {
    let url = format!("file://{}", dir.join("bank").display());
    let out = cli(&url, &["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    if !checkpoints.is_empty() {
        dying_owner(&url, async |lease| {
            for id in checkpoints {
                Checkpoint::create(lease, &cid(id)).await.unwrap();
            }
        });
    }
    url
}

/// An owner on `url` (windows 300 ms / 1 s / 100 ms, never renewed) that does `work`, then
/// dies: its lease is expired past the grace of [`cli`]'s configuration when this returns.
pub fn dying_owner(url: &str, work: impl AsyncFnOnce(&OwnerLease)) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bank = Bank::open(url).unwrap();
        let windows = LeaseWindows::new(
            Duration::from_millis(300),
            Duration::from_secs(1),
            Duration::from_millis(100),
        )
        .unwrap();
        let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
            .await
            .unwrap();
        work(&lease).await;
    });
    // expire 1 s + margin 100 ms + grace 500 ms, and some slack.
    std::thread::sleep(Duration::from_millis(2_200));
}

/// Every wait of the process-level suites is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(60);

/// An output's exit code and both streams, for an assertion's message.
pub fn output_text(out: &Output) -> String {
    format!(
        "rc={:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Poll `done` every 20 ms until it holds; fail after [`LIMIT`].
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for `child` to exit; kill it and fail after [`LIMIT`].
pub fn wait_child(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("a child did not exit within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `banklease-gc`, built next to `banklease` (a narrower `cargo test` builds only this
/// package's binary; a stale one would test old code).
pub fn gc_bin() -> std::path::PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let bin = Path::new(BIN).with_file_name("banklease-gc");
    BUILT.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let profile_dir = Path::new(BIN).parent().unwrap();
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "banklease-gc-daemon",
            "--bin",
            "banklease-gc",
        ])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
        .arg("--target-dir")
        .arg(profile_dir.parent().unwrap());
        if profile_dir.ends_with("release") {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("run cargo");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    bin
}

/// Copies the binary to `to`, ready to run. The copy's write descriptor can outlive the copy in
/// a child that another test thread forked meanwhile (until that child execs), and exec then
/// fails with ETXTBSY ("Text file busy"); so wait, bounded, until the copy runs.
pub fn copy_binary(to: &Path) {
    std::fs::copy(BIN, to).unwrap();
    for _ in 0..250 {
        match Command::new(to).arg("--version").output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("cannot run the copy {}: {e}", to.display()),
            Ok(_) => return,
        }
    }
    panic!("the copy {} stayed busy for 5 s", to.display());
}

/// `PATH` with the binary's directory first: what a job under `run` calls `banklease` by.
pub fn path_with_bin() -> std::ffi::OsString {
    let mut paths = vec![Path::new(BIN).parent().unwrap().to_path_buf()];
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap()));
    std::env::join_paths(paths).unwrap()
}

/// A child killed (and reaped) when the test ends, passed or failed.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
