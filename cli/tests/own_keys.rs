//! banklease's own folders in a bank hold only what it writes, and its cleanups remove only
//! that: a user's note in `_banklease/clock/`, `index/failed/`, `gc/reaped/` or
//! `index/sweep/`, however old, is kept, named once per pass, and never fails a pass.

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use common::{cli, dead_owner_bank, text};

/// Write `body` at `rel` in the bank, last modified `days` ago.
fn plant(bank: &Path, rel: &str, body: &str, days: u64) {
    let path = bank.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, body).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(days * 24 * 3600))
        .unwrap();
}

const NOTES: [(&str, &str, u64); 6] = [
    ("gc/clock-hosts/README", "each host's clock readings", 31),
    ("_banklease/clock/README-ops.txt", "probes live here", 3),
    (
        "index/failed/README",
        "failed checkpoints are listed here",
        3,
    ),
    ("gc/reaped/README", "reaped leases are explained here", 31),
    ("index/sweep/README", "late data sweeps", 3),
    ("index/sweep/EMPTY", "", 3),
];

#[test]
fn a_users_files_in_banklease_folders_are_kept_named_and_fail_no_pass() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["zombie-1"]);
    let bank = dir.path().join("bank");
    for (rel, body, days) in NOTES {
        plant(&bank, rel, body, days);
    }
    // A record of a boot clock no pass has used for 31 days: banklease's, and removed.
    let gone = "gc/clock-hosts/0123456789abcdef0123456789abcdef-b0.000000000";
    plant(
        &bank,
        gone,
        r#"{"format":1,"host":"old","at":"2026-01-01T00:00:00Z","sent_boot_ns":1,"observed_boot_ns":2}"#,
        31,
    );
    for pass in 0..2 {
        let out = cli(&url, &["gc"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "pass {pass}: {stdout}{stderr}");
        for (rel, body, _) in NOTES {
            assert_eq!(
                std::fs::read_to_string(bank.join(rel)).ok().as_deref(),
                Some(body),
                "pass {pass}: `{rel}` was removed or changed\n{stdout}{stderr}"
            );
            assert_eq!(
                stderr.matches(&format!("`{rel}`")).count(),
                1,
                "pass {pass}: `{rel}` is named once\n{stderr}"
            );
        }
    }
    assert!(!bank.join(gone).exists(), "an old host record is removed");
    // The bank's own records go as before: the zombie was collected.
    let out = cli(&url, &["--json", "gc"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(
        report["foreign"].as_array().map(Vec::len),
        Some(NOTES.len()),
        "{report}"
    );
}
