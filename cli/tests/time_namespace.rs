//! A host's store-clock record is named by what makes two readings comparable: the boot and
//! the time namespace's offsets. The kernel reuses a time namespace's inode for the next one,
//! with other offsets; passes in two such namespaces must never compare with each other's
//! record (a 50 s boot-clock offset would hide a 50 s step of the store's clock).

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use std::process::Command;

use common::{output_text, BIN};

fn have_time_namespaces() -> bool {
    let ok = Command::new("unshare")
        .args(["--time", "--boottime", "1", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: unshare --time is not available here (needs root and Linux 5.6)");
    }
    ok
}

/// `banklease gc` in a new time namespace whose boot clock is `boottime` seconds ahead.
fn gc_in_namespace(url: &str, boottime: u32) -> std::process::Output {
    let mut cmd = Command::new("unshare");
    cmd.args(["--time", "--boottime", &boottime.to_string(), "--fork", BIN])
        .args(["--bank", url, "gc"])
        .env("NO_COLOR", "1");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    cmd.output().unwrap()
}

#[test]
fn passes_in_time_namespaces_with_other_offsets_keep_separate_records() {
    if !have_time_namespaces() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = banklease_testkit::file_bank(&bank);
    // Two namespaces one after the other: the kernel gives the second the first's inode.
    for boottime in [50, 0, 50] {
        let out = gc_in_namespace(&url, boottime);
        assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    }
    let mut records: Vec<String> = std::fs::read_dir(bank.join("gc/clock-hosts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.contains('#'))
        .collect();
    records.sort();
    assert_eq!(
        records.len(),
        2,
        "one record per boot clock (offsets 0 and 50 s): {records:?}"
    );
}
