//! A dead owner's zombie held back by the bank's clock floor (a store-clock step was seen after
//! its last renewal) is said to be held back, with until when — by `banklease gc`'s skip
//! reason and `--json`, by `checkpoint explain` — never that its owner is alive; and it is
//! collected once that time has passed.

#![allow(clippy::disallowed_methods)] // real processes on real files, a real clock

mod common;

use std::time::{Duration, SystemTime};

use common::{cli, dead_owner_bank, text};

#[test]
fn a_zombie_the_floor_holds_back_is_said_to_be_held_back_and_until_when() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["zombie-1"]);
    let bank = dir.path().join("bank");
    // The floor a confirmed step left, after the dead owner's last renewal: its lease is timed
    // from it (expire 1 s, margin 100 ms, grace 500 ms).
    let floor =
        chrono::DateTime::<chrono::Utc>::from(SystemTime::now() - Duration::from_millis(200));
    std::fs::create_dir_all(bank.join("gc")).unwrap();
    std::fs::write(
        bank.join("gc/clock-floor"),
        serde_json::json!({ "floor": floor }).to_string(),
    )
    .unwrap();

    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["alive"], 0, "{report}");
    assert_eq!(report["held_back"], 1, "{report}");
    assert_eq!(report["collected"], 0, "{report}");
    assert!(report["held_back_until"].is_string(), "{report}");
    assert!(
        report["oldest_zombie_age_ms"].as_u64() > Some(1_000),
        "{report}"
    );
    let reason = report["checkpoints"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("clock floor") && reason.contains("held back until"),
        "{reason}"
    );
    assert!(!reason.contains("is alive"), "{reason}");

    let out = cli(&url, &["checkpoint", "explain", "zombie-1"]);
    let explained = text(&out.stdout);
    assert!(
        explained.contains("held back: a store-clock step was seen at"),
        "{explained}"
    );

    // `lease show` times the lease as the gc does, and says why.
    let out = cli(&url, &["--json", "lease", "list"]);
    let row: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let owner = row["owner_id"].as_str().unwrap().to_owned();
    let out = cli(&url, &["lease", "show", &owner]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("held_back") && shown.contains("a store-clock step was seen at"),
        "{shown}"
    );
    let out = cli(&url, &["--json", "lease", "show", &owner]);
    let detail: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let held = detail["held_back_by"].as_str().expect("held_back_by");
    let from = detail["collectable_from"].as_str().unwrap();
    let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap();
    assert!(parse(from) > parse(held), "{detail}");

    // Past the floored lease's expiry, margin and grace: collected.
    std::thread::sleep(Duration::from_millis(2_000));
    let out = cli(&url, &["--json", "gc"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["collected"].as_u64(), report["held_back"].as_u64()),
        (Some(1), Some(0)),
        "{report}"
    );
}
