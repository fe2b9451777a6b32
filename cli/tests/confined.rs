//! A `file:` bank is confined to itself: links that a user who may write into the bank plants
//! in it (in a zombie's data, in a failed or available checkpoint an operator or the gc
//! removes, in `_banklease/clock/`) never lead a deletion out of it. The bank belongs to an
//! unprivileged user, as a service's bank does, and the gc runs as whoever runs these tests
//! (root in CI, as the daemon usually runs). Each link is kept, and reported.

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{cli, dead_owner_bank, path_with_bin, text};

/// `nobody`: the bank's owner in these tests, who plants the links.
const NOBODY: u32 = 65_534;

/// Files outside the bank that a link will point at, three days old (older than any sweep's
/// threshold): `outside/victim.txt`, `outside/sub/deep.bin` and its directory.
fn victims(dir: &Path) -> PathBuf {
    let outside = dir.join("outside");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    let old = SystemTime::now() - Duration::from_secs(3 * 24 * 3600);
    for name in [
        "victim.txt",
        "sub/deep.bin",
        "w-0123456789abcdef0123456789abcdef#0",
    ] {
        let path = outside.join(name);
        std::fs::write(&path, "not the bank's").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    outside
}

fn assert_untouched(outside: &Path) {
    for name in [
        "victim.txt",
        "sub/deep.bin",
        "w-0123456789abcdef0123456789abcdef#0",
    ] {
        let path = outside.join(name);
        assert_eq!(
            std::fs::read(&path).ok().as_deref(),
            Some(&b"not the bank's"[..]),
            "`{}` was deleted or changed through a link in the bank",
            path.display()
        );
    }
    assert!(outside.join("sub").is_dir());
}

/// A link at `at` to `to`, owned by the bank's unprivileged owner, as they would plant it.
fn plant(at: &Path, to: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    symlink(to, at).unwrap();
    std::os::unix::fs::lchown(at, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// Whether these tests run as root (CI does): only root can give a bank to `nobody`.
fn as_root(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let root = std::fs::metadata(dir).is_ok_and(|m| m.uid() == 0);
    if !root {
        eprintln!("skipped: giving the bank to another user needs root");
    }
    root
}

/// Give the whole bank to `nobody`, as a service's bank belongs to the service's user.
fn give_away(bank: &Path) {
    let mut dirs = vec![bank.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        std::os::unix::fs::lchown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            std::os::unix::fs::lchown(entry.path(), Some(NOBODY), Some(NOBODY)).unwrap();
            if kind.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[test]
fn links_in_a_zombies_data_never_lead_the_gc_out_of_the_bank() {
    let dir = tempfile::tempdir().unwrap();
    if !as_root(dir.path()) {
        return;
    }
    let outside = victims(dir.path());
    // Two zombies: one with links among its data, one whose data directory is a link.
    let url = dead_owner_bank(dir.path(), &["zombie-1", "zombie-2"]);
    let bank = dir.path().join("bank");
    std::fs::create_dir_all(bank.join("checkpoints/zombie-1/data")).unwrap();
    std::fs::write(bank.join("checkpoints/zombie-1/data/part-1"), "data").unwrap();
    plant(
        &bank.join("checkpoints/zombie-1/data/to-file"),
        &outside.join("victim.txt"),
    );
    plant(&bank.join("checkpoints/zombie-1/data/to-dir"), &outside);
    plant(
        &bank.join("checkpoints/zombie-2/data"),
        &outside.join("sub"),
    );
    give_away(&bank);

    let out = cli(&url, &["gc"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_untouched(&outside);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("collected 2"), "{stdout}");
    // The bank's own data went; the links are kept, and named.
    assert!(!bank.join("checkpoints/zombie-1/data/part-1").exists());
    for link in [
        "checkpoints/zombie-1/data/to-file",
        "checkpoints/zombie-1/data/to-dir",
        "checkpoints/zombie-2/data",
    ] {
        assert!(is_link(&bank.join(link)), "{link} was removed");
        assert!(
            stdout.contains(link) || stderr.contains(link),
            "{link} not reported\n{stdout}{stderr}"
        );
    }

    // The next pass meets them again and still fails nothing.
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_untouched(&outside);
}

#[test]
fn links_in_a_checkpoint_an_operator_deletes_or_the_gc_retires_stay_links() {
    let dir = tempfile::tempdir().unwrap();
    if !as_root(dir.path()) {
        return;
    }
    let outside = victims(dir.path());
    let url = dead_owner_bank(dir.path(), &[]);
    let bank = dir.path().join("bank");
    let job = |id: &str, end: &str| {
        let script = format!(
            "banklease agent checkpoint create {id} && echo whole | \
             banklease agent checkpoint put {id} etc.tgz - && {end}"
        );
        let out = common::command(&url, &["run", "--", "sh", "-c", &script])
            .env("PATH", path_with_bin())
            .output()
            .unwrap();
        assert!(out.status.code().is_some(), "{}", text(&out.stderr));
    };
    job(
        "done-1",
        "banklease agent checkpoint complete done-1 available",
    );
    job("failed-1", "exit 3");
    plant(
        &bank.join("checkpoints/done-1/data/to-file"),
        &outside.join("victim.txt"),
    );
    plant(&bank.join("checkpoints/done-1/data/to-dir"), &outside);
    plant(&bank.join("checkpoints/failed-1/data/to-dir"), &outside);
    plant(
        &bank.join("checkpoints/failed-1/data/to-file"),
        &outside.join("victim.txt"),
    );
    give_away(&bank);

    let out = cli(&url, &["checkpoint", "delete", "done-1", "--available"]);
    assert_untouched(&outside);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!bank.join("checkpoints/done-1/data/etc.tgz").exists());
    assert!(is_link(&bank.join("checkpoints/done-1/data/to-dir")));

    // A first pass on this host records its reading of the store's clock: no retention ends
    // on a first reading, which nothing earlier vouches for.
    let out = cli(&url, &["gc"]);
    assert_untouched(&outside);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(1_200));
    let out = common::command(&url, &["gc"])
        .env("BANKLEASE_GC__KEEP_FAILED_FOR", "1s")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_untouched(&outside);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("retired 1"), "{stdout}");
    assert!(!bank.join("checkpoints/failed-1/data/etc.tgz").exists());
    assert!(is_link(&bank.join("checkpoints/failed-1/data/to-file")));
}

#[test]
fn a_link_in_the_clock_folder_or_for_a_folder_of_the_bank_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    if !as_root(dir.path()) {
        return;
    }
    let outside = victims(dir.path());
    let url = dead_owner_bank(dir.path(), &[]);
    let bank = dir.path().join("bank");
    // The clock probes' folder holds a link to a directory of old files, one of them named as
    // the sweep names its own staged files, and a link to an old file.
    plant(&bank.join("_banklease/clock/elsewhere"), &outside);
    plant(
        &bank.join("_banklease/clock/file"),
        &outside.join("victim.txt"),
    );
    give_away(&bank);
    for _ in 0..2 {
        let out = cli(&url, &["gc"]);
        assert_untouched(&outside);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    assert!(is_link(&bank.join("_banklease/clock/elsewhere")));
    assert!(is_link(&bank.join("_banklease/clock/file")));

    // The staging directory made a link: nothing is written through it, the pass says why,
    // and the link and what it points at are left as they are.
    let staging = bank.join("_banklease/staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).unwrap();
    }
    plant(&staging, &outside);
    let out = cli(&url, &["gc"]);
    let stderr = text(&out.stderr);
    assert_untouched(&outside);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("_banklease/staging") && stderr.contains("symbolic link"),
        "{stderr}"
    );
    assert!(is_link(&staging));
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 3);
}
