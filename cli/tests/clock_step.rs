//! One-shot collector commands after a forward step of the store's clock. On a `file:` bank the
//! store's clock is this host's wall clock, so an NTP step (here `faketime -f +40s`, which
//! moves the wall clock and, with `FAKETIME_DONT_FAKE_MONOTONIC=1`, leaves the monotonic and
//! boot clocks alone, as a real step does) is a step of the store's clock. A pass that ran
//! before on this host left its reading in the bank (`gc/clock-hosts/`); the next one-shot
//! pass, run as cron runs it, compares its own with that one, sees the step, and collects and
//! reaps nothing of the live owner.

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cli, command, command_via, output_text, text, wait_child, LIMIT};

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
fn one_shot_commands_after_a_forward_clock_step_collect_and_reap_nothing_of_a_live_owner() {
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

    // The cron job's pass, before the step: the owner is alive.
    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let report = json(&out);
    assert_eq!(report["alive"], 1, "{report}");

    // The same command after the host's clock stepped 40 s forward: the lease looks 39 s
    // expired on the stepped clock. Nothing of the owner is collected or reaped.
    let out = stepped("40s", &url, &["gc"]).output().unwrap();
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(err.contains("stepped"), "{}", output_text(&out));
    assert!(lease.exists(), "the live owner's lease was reaped");
    assert!(protecting(&bank, "cp-live"), "{}", output_text(&out));
    assert!(protecting(&bank, "cp-garbled"), "{}", output_text(&out));

    // `checkpoint resolve` on the stepped clock: refused, nothing replaced.
    let out = stepped("40s", &url, &["checkpoint", "resolve", "cp-garbled"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(protecting(&bank, "cp-garbled"), "{}", output_text(&out));
    assert!(lease.exists());

    // A pass on the host's own clock again: the floor the step left holds every older stamp.
    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(json(&out)["collected"], 0);
    assert!(protecting(&bank, "cp-live"));

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
