//! A directory that is not a bank is refused by every command, with `init`'s message, and left
//! exactly as it was: no file deleted (however much it looks like a temporary, a lease or a
//! marker), none created (no lock files, no `_banklease/`).

#![allow(clippy::disallowed_methods)] // real processes on real files

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

const BIN: &str = env!("CARGO_BIN_EXE_banklease");

/// A user's directory: documents, one of which looks like a staged temporary, and names that
/// look like a bank's own (a lease, a protecting marker) beside them. Old enough for any sweep.
fn plant(root: &Path) {
    let old = SystemTime::now() - Duration::from_secs(3 * 24 * 3600);
    for (name, body) in [
        ("docs/invoice#2024", "invoice"),
        ("docs/report.txt", "report"),
        ("leases/owner-1", "{\"not\": \"a lease\"}"),
        ("index/protecting/owner-1/cp-1", ""),
        ("notes#1", "a note"),
    ] {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
}

/// Every file and directory under `root`, with file contents.
fn snapshot(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path);
                out.insert(name, None);
            } else {
                out.insert(name, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn cli(url: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    cmd.args(["--bank", url])
        .args(args)
        .env("BANKLEASE_GC__LATE_WRITE_WINDOW", "1s")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn every_command_refuses_a_directory_that_is_not_a_bank_and_changes_nothing_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("home");
    plant(&root);
    let before = snapshot(&root);
    let url = format!("file://{}", root.display());
    let commands: &[(&[&str], i32)] = &[
        (&["gc"], 2),
        (&["gc", "--dry-run"], 2),
        (&["lease", "list"], 2),
        (&["lease", "show", "owner-1"], 2),
        (&["checkpoint", "list"], 2),
        (&["checkpoint", "show", "cp-1"], 2),
        (&["validity-check", "--owner", "owner-1"], 2),
        (&["lock", "list"], 2),
        (&["doctor"], 2),
        (&["run", "--", "true"], 125),
        (&["init"], 2),
    ];
    let mut wrong = Vec::new();
    for (args, code) in commands {
        let out = cli(&url, args);
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or_default();
        let refused = first.starts_with("error: ")
            && first.contains("which is not a bank's")
            && err.lines().count() == 1;
        if out.status.code() != Some(*code) || !refused {
            wrong.push(format!(
                "{args:?}: exit {:?}, stderr `{err}`, stdout `{}`",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let after = snapshot(&root);
        if after != before {
            let gone: Vec<_> = before.keys().filter(|k| !after.contains_key(*k)).collect();
            let made: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
            panic!("{args:?} changed the directory: removed {gone:?}, created {made:?}");
        }
    }
    assert!(wrong.is_empty(), "not refused:\n{}", wrong.join("\n"));
}

/// An owner embedding the library is refused the same way: no lease is written.
#[test]
fn an_owner_cannot_acquire_a_lease_in_a_directory_that_is_not_a_bank() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("home");
    plant(&root);
    let before = snapshot(&root);
    let bank = banklease::Bank::open(&format!("file://{}", root.display())).unwrap();
    let windows = banklease::LeaseWindows::new(
        Duration::from_secs(2),
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
    .unwrap();
    let acquired = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(banklease::OwnerLease::acquire(
            &bank,
            banklease::OwnerId::random(),
            windows,
            std::sync::Arc::new(banklease::clock::SystemClock),
        ));
    let Err(err) = acquired else {
        panic!("a lease was acquired in a directory that is not a bank");
    };
    assert!(matches!(err, banklease::Error::NotABank { .. }), "{err}");
    assert_eq!(snapshot(&root), before);
}
