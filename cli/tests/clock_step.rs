//! Processes whose view of the time is wrong, on a `file:` bank. The store's clock there is the
//! file system's: every write is stamped by the kernel, and every reading of the clock asks
//! the kernel, never the process's C library. So `faketime` (which moves what a process's C
//! library says the time is, and with `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves the monotonic and
//! boot clocks alone) changes nothing a judgement rests on: a collector an hour or a year
//! ahead collects a dead owner's zombie and nothing of a live owner, leaves no floor, and
//! stalls no later pass; an owner whose clock is behind is judged alive. (A step of the store's
//! clock itself is detected by every pass: gc/tests/host_clock.rs and collector_safety.rs step
//! a simulated store's clock.)

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cli, command, command_via, output_text, wait_child, LIMIT};

/// `faketime` with a wall clock `ahead` of this host's and the monotonic clocks untouched.
fn stepped(ahead: &str, url: &str, args: &[&str]) -> Command {
    let offset = format!("+{ahead}");
    let mut cmd = command_via(&["faketime", "-f", &offset], url, args);
    cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

fn have_faketime() -> bool {
    let found = Command::new("faketime")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        // CI installs it and says so (.ci/run); a developer's machine may not have it.
        assert!(
            std::env::var_os("BANKLEASE_TEST_FAKETIME").is_none(),
            "faketime(1) is needed (apt-get install faketime)"
        );
        eprintln!("skipped: faketime(1) is not installed (apt-get install faketime)");
    }
    found
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", output_text(out)))
}

fn protecting(bank: &Path, id: &str) -> bool {
    !bank.join("decisions").join(id).exists()
        && std::fs::read_to_string(bank.join("checkpoints").join(id).join("index.json"))
            .map(|s| s.contains("\"protecting\"") || s == "{garbage")
            .unwrap_or(false)
}

#[test]
fn a_collector_whose_clock_is_ahead_collects_and_reaps_nothing_of_a_live_owner() {
    if !have_faketime() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = format!("file://{}", bank.display());
    assert_eq!(cli(&url, &["init"]).status.code(), Some(0));

    // A live owner: `banklease run` with a job that made two checkpoints and waits.
    let ready = dir.path().join("ready");
    let go = dir.path().join("go");
    let job = format!(
        "banklease agent checkpoint create cp-live || exit 9\n\
         banklease agent checkpoint create cp-garbled || exit 9\n\
         echo \"$BANKLEASE_OWNER_ID\" > {owner}\n\
         touch {ready}\n\
         for _ in $(seq 1 600); do [ -e {go} ] && exit 0; sleep 0.1; done\n\
         exit 8\n",
        owner = dir.path().join("owner").display(),
        ready = ready.display(),
        go = go.display(),
    );
    let bin_dir = Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut run = command(&url, &["run", "--", "bash", "-c", &job])
        .env("PATH", path)
        .env("TMPDIR", dir.path())
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("run.err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready.exists() {
        if let Some(status) = run.try_wait().unwrap() {
            panic!(
                "`run` exited ({status}): {}",
                std::fs::read_to_string(dir.path().join("run.err")).unwrap_or_default()
            );
        }
        assert!(started.elapsed() < LIMIT, "the job never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let owner = std::fs::read_to_string(dir.path().join("owner"))
        .unwrap()
        .trim()
        .to_owned();
    let lease = bank.join("leases").join(&owner);
    // What `checkpoint resolve` is for: an index.json the GC cannot read.
    std::fs::write(bank.join("checkpoints/cp-garbled/index.json"), "{garbage").unwrap();

    // The cron job's pass: the owner is alive.
    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let report = json(&out);
    assert_eq!(report["alive"], 1, "{report}");

    // The same command from a process whose clock reads 40 s ahead: the lease would look 39 s
    // expired on that clock, but the store's clock is the file system's. Nothing of the owner
    // is collected or reaped, and nothing is taken for a step.
    let out = stepped("40s", &url, &["--json", "gc"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let report = json(&out);
    assert_eq!(
        (report["alive"].as_u64(), report["collected"].as_u64()),
        (Some(1), Some(0)),
        "{report}"
    );
    assert!(lease.exists(), "the live owner's lease was reaped");
    assert!(protecting(&bank, "cp-live"), "{}", output_text(&out));
    assert!(protecting(&bank, "cp-garbled"), "{}", output_text(&out));
    assert!(!bank.join("gc/clock-floor").exists(), "a floor was written");

    // `checkpoint resolve` from that process: the owner is alive, nothing is replaced.
    let out = stepped("40s", &url, &["checkpoint", "resolve", "cp-garbled"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(protecting(&bank, "cp-garbled"), "{}", output_text(&out));
    assert!(lease.exists());

    // The owner never noticed: its job finishes and `run` exits with its status.
    std::fs::write(&go, "").unwrap();
    let status = wait_child(&mut run);
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(dir.path().join("run.err")).unwrap_or_default()
    );
}

/// A one-shot pass from a process whose clock reads an hour (then a year) ahead, as a cron
/// job started before its clock was right: it judges by the file system's clock, so it
/// collects the dead owner's zombie itself, leaves no floor, and the passes after it are clean.
#[test]
fn a_pass_from_a_clock_that_was_wrong_once_never_stalls_collection() {
    if !have_faketime() {
        return;
    }
    for ahead in ["1h", "365d"] {
        let dir = tempfile::tempdir().unwrap();
        let bank = dir.path().join("bank");
        let url = common::dead_owner_bank(dir.path(), &[]);
        // The cron job's pass before anything went wrong: this host's reading is recorded.
        let out = cli(&url, &["--json", "gc"]);
        assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
        common::dying_owner(&url, async |lease| {
            for id in ["zombie-1", "zombie-2"] {
                banklease::Checkpoint::create(lease, &banklease_testkit::cid(id))
                    .await
                    .unwrap();
            }
        });

        let out = stepped(ahead, &url, &["--json", "gc"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{ahead}: {}", output_text(&out));
        assert_eq!(json(&out)["collected"], 2, "{ahead}: {}", output_text(&out));
        assert!(
            !bank.join("gc/clock-floor").exists(),
            "{ahead}: a floor was written"
        );

        // The clock is good again: whatever is left goes at once, and no pass is held back.
        let out = cli(&url, &["--json", "gc"]);
        assert_eq!(out.status.code(), Some(0), "{ahead}: {}", output_text(&out));
        let report = json(&out);
        assert_eq!(report["alive"], 0, "{ahead}: {report}");
        assert_eq!(report["clock"], serde_json::json!([]), "{ahead}: {report}");
        assert!(!protecting(&bank, "zombie-1") && !protecting(&bank, "zombie-2"));
    }
}

/// An owner whose own clock is 30 s behind: its lease is stamped by the file system, not by its
/// clock, so a normal pass judges it alive and leaves its checkpoint and lease alone.
#[test]
fn an_owner_whose_clock_is_behind_is_judged_alive() {
    if !have_faketime() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = common::dead_owner_bank(dir.path(), &[]);
    let ready = dir.path().join("ready");
    let go = dir.path().join("go");
    let job = format!(
        "banklease agent checkpoint create cp-behind || exit 9\n\
         touch {ready}\n\
         for _ in $(seq 1 600); do [ -e {go} ] && exit 0; sleep 0.1; done\n\
         exit 8\n",
        ready = ready.display(),
        go = go.display(),
    );
    let mut run = command_via(
        &["faketime", "-f", "-30s"],
        &url,
        &["run", "--", "bash", "-c", &job],
    )
    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    .env("PATH", common::path_with_bin())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let started = Instant::now();
    while !ready.exists() {
        assert!(run.try_wait().unwrap().is_none(), "`run` exited early");
        assert!(started.elapsed() < LIMIT, "the job never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past its expire window on its own renewals: only a live renewer is alive now.
    std::thread::sleep(Duration::from_millis(1_500));
    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let report = json(&out);
    assert_eq!(
        (report["alive"].as_u64(), report["collected"].as_u64()),
        (Some(1), Some(0)),
        "{report}"
    );
    assert!(protecting(&bank, "cp-behind"));
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_child(&mut run).code(), Some(0));
}
