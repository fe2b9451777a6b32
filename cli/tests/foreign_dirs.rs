//! A directory that is not a bank is refused by every command, with `init`'s message, and left
//! exactly as it was: no file deleted (however much it looks like a temporary, a lease or a
//! marker), none created (no lock files, no `_banklease/`).

#![allow(clippy::disallowed_methods)] // real processes on real files

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

const BIN: &str = env!("CARGO_BIN_EXE_banklease");

mod common;

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

/// Every entry under `root`, `root` itself included (as ""), with its contents (none for a
/// directory) and its modification time: a file created and removed again still changes the
/// mtime of its directory.
fn exact_snapshot(root: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mtime = |p: &Path| std::fs::symlink_metadata(p).unwrap().modified().unwrap();
    out.insert(String::new(), (None, mtime(root)));
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                out.insert(name, (None, mtime(&path)));
                dirs.push(path);
            } else {
                out.insert(name, (Some(std::fs::read(&path).unwrap()), mtime(&path)));
            }
        }
    }
    out
}

type Snapshot = BTreeMap<String, (Option<Vec<u8>>, SystemTime)>;

/// What differs between two snapshots of a directory, in words.
fn changes(before: &Snapshot, after: &Snapshot) -> String {
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, _)| if k.is_empty() { "." } else { k.as_str() })
        .collect();
    let made: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    format!("changed the directory: changed or removed {changed:?}, created {made:?}")
}

/// Every command an operator points at a bank, each with an argument where it needs one.
const EVERY_COMMAND: &[&[&str]] = &[
    &["lease", "list"],
    &["lease", "show", "owner-1"],
    &["validity-check", "--owner", "owner-1"],
    &["checkpoint", "list"],
    &["checkpoint", "show", "cp-1"],
    &["checkpoint", "explain", "cp-1"],
    &["lock", "list"],
    &["lock", "show", "jobs/nightly"],
    &["lock", "acquire", "jobs/nightly", "--duration", "1m"],
    &["lock", "run", "-n", "jobs/nightly", "--", "true"],
    &["gc"],
    &["gc", "--dry-run"],
    &["doctor", "--race-rounds", "1"],
    &["doctor", "--read-only"],
    &["run", "--", "true"],
    &["init"],
];

/// Runs every command on `root` and says what went wrong: a command not refused as a
/// directory that is not a bank's (in one line), or anything changed — a byte, a name, or the
/// modification time of any file or directory, `root`'s own included.
fn every_command_refuses_and_changes_nothing(root: &Path) -> Vec<String> {
    let url = format!("file://{}", root.display());
    let mut before = exact_snapshot(root);
    let mut wrong = Vec::new();
    for args in EVERY_COMMAND {
        // Two stamps apart by more than any file system's rounding would be told apart.
        std::thread::sleep(Duration::from_millis(20));
        let out = cli(&url, args);
        let err = String::from_utf8_lossy(&out.stderr);
        let refused = err.lines().count() == 1
            && err.starts_with("error: ")
            && err.contains("which is not a bank's");
        if out.status.success() || !refused {
            wrong.push(format!(
                "{args:?} was not refused: exit {:?}, stderr `{err}`, stdout `{}`",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let after = exact_snapshot(root);
        if after != before {
            wrong.push(format!("{args:?} {}", changes(&before, &after)));
            // Each command's own changes are named: the next is compared with this state.
            before = after;
        }
    }
    wrong
}

/// A user's directory named as a bank: every command refuses it, and afterwards every name,
/// byte and modification time in it is as it was (the directory's own mtime too: a scratch
/// file made and removed at open changed it).
#[test]
fn every_command_leaves_a_directory_that_is_not_a_bank_as_it_was_to_the_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("home");
    plant(&root);
    std::fs::write(root.join("photo#1"), "a photo").unwrap();
    let wrong = every_command_refuses_and_changes_nothing(&root);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Files whose names end in `#<digits>` are hidden from object_store's listings: a directory
/// holding only such files looked empty, `init` made it a bank and `lease list` called it one
/// with "no lease, checkpoint or lock".
#[test]
fn a_directory_of_files_named_with_hash_is_not_a_bank_and_init_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("photos");
    std::fs::create_dir(&root).unwrap();
    for (name, body) in [("photo#1", "a photo"), ("invoice#2024", "an invoice")] {
        std::fs::write(root.join(name), body).unwrap();
    }
    let wrong = every_command_refuses_and_changes_nothing(&root);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(!root.join("banklease.json").exists());
}

/// Runs `program` (the CLI, or `banklease-gc` with `BANKLEASE_BANK`) on `root` and says what
/// went wrong: a command that did not refuse the URL for holding no bank descriptor, in one
/// line, or anything it changed, to the modification time.
fn refuses_with_no_descriptor(root: &Path, runs: &[(&Path, &[&str])]) -> Vec<String> {
    let url = format!("file://{}", root.display());
    let mut before = exact_snapshot(root);
    let mut wrong = Vec::new();
    for (program, args) in runs {
        std::thread::sleep(Duration::from_millis(20));
        let mut cmd = Command::new(program);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BANKLEASE_") {
                cmd.env_remove(name);
            }
        }
        let out = cmd
            .args(["--bank", &url])
            .args(*args)
            .env("BANKLEASE_BANK", &url)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // The daemon says it in its log's one line; the CLI in one `error:` line.
        let refused = err.lines().count() == 1
            && (err.starts_with("error: ") || !program.ends_with("banklease"))
            && err.contains("but no bank descriptor");
        if out.status.success() || !refused {
            wrong.push(format!(
                "{program:?} {args:?} was not refused: exit {:?}, stderr `{err}`",
                out.status.code()
            ));
        }
        let after = exact_snapshot(root);
        if after != before {
            wrong.push(format!("{program:?} {args:?} {}", changes(&before, &after)));
            before = after;
        }
    }
    wrong
}

/// Only `init` makes a bank: a directory whose names merely look like a bank's — a user's file
/// `index`, a `locks/` of lock files, a `gc/` with notes and a `gc/missing/old-entry` — is
/// refused by every command and
/// by the daemon, and left as it was. (Before, the first writer adopted it: `lock acquire`
/// wrote `banklease.json`, `_banklease/`, lock stripes and `locks/`, and `banklease-gc --once`
/// deleted the user's `gc/missing/old-entry`.)
#[test]
fn a_directory_that_only_looks_like_a_bank_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let gc = common::gc_bin();
    let cli_runs: Vec<(&Path, &[&str])> = EVERY_COMMAND
        .iter()
        .filter(|a| a[0] != "init")
        .map(|a| (Path::new(BIN), *a))
        .collect();
    for (name, files) in [
        ("index-only", &[("index", "my index")][..]),
        ("locks-dir", &[("locks/backup.lock", "")][..]),
        (
            "gc-notes",
            &[
                ("gc/notes.txt", "notes"),
                ("gc/missing/old-entry", "keep me"),
            ][..],
        ),
    ] {
        let root = dir.path().join(name);
        for (file, body) in files {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, body).unwrap();
        }
        let mut runs = cli_runs.clone();
        let once: &[&str] = &["--once"];
        runs.push((gc.as_path(), once));
        let wrong = refuses_with_no_descriptor(&root, &runs);
        assert!(wrong.is_empty(), "{name}:\n{}", wrong.join("\n"));
    }
}

/// A `file:` bank moved away (or its disk unmounted) while `lock run` holds a lock there: `lock
/// run` stops COMMAND and exits 75, and nothing is made at the bank's old path. (Before, its
/// heartbeat made `bank/` again, with a lock stripe and `_banklease/staging`.)
#[test]
fn a_bank_that_vanished_under_lock_run_is_not_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = format!("file://{}", bank.display());
    let out = cli(&url, &["init"]);
    assert!(out.status.success(), "{out:?}");
    let mut run = Command::new(BIN)
        .args(["--bank", &url])
        .args(["lock", "run", "--duration", "2s", "k", "--", "sleep", "30"])
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "error")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::rename(&bank, dir.path().join("moved")).unwrap();
    let mut status = None;
    for _ in 0..200 {
        status = run.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some(status) = status else {
        let _ = run.kill();
        run.wait().unwrap();
        panic!("lock run did not exit within 10 s of its bank vanishing (a 2 s lock)");
    };
    assert_eq!(status.code(), Some(75));
    assert!(!bank.exists(), "the bank's directory was made again");
}
