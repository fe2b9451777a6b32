//! Read-only access: another user on a bank they may only read — listing and
//! showing leases, checkpoints and locks, `validity-check`, `checkpoint explain` and `doctor
//! --read-only` work and write nothing; a command that must write is refused, labelled as a
//! permission.

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use banklease_testkit::cid;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use banklease::clock::SystemClock;
use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease};

use common::BIN;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether this process runs as root (then the reader is `nobody`, through setpriv).
fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `banklease --bank url args` as a user who may only read the bank.
fn as_reader(url: &str, args: &[&str]) -> Output {
    let mut cmd = if root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    cmd.args(["--bank", url])
        .args(args)
        .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// Every file under `root` with its contents, and every directory.
fn snapshot(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                dirs.push(path);
                out.insert(name, None);
            } else {
                out.insert(name, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// Make every file readable by all and writable by its owner only (or by nobody, when the
/// test is not root and reads as itself).
fn read_only_for_others(root: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut paths = vec![root.to_path_buf()];
    let mut i = 0;
    while i < paths.len() {
        let path = paths[i].clone();
        i += 1;
        let dir = path.is_dir();
        if dir {
            for entry in std::fs::read_dir(&path).unwrap() {
                paths.push(entry.unwrap().path());
            }
        }
        let mode = match (dir, root_user()) {
            (true, true) => 0o755,
            (false, true) => 0o644,
            (true, false) => 0o555,
            (false, false) => 0o444,
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn root_user() -> bool {
    root()
}

/// On `url`, made by the bank's writer: a live owner (30 s) with a protecting checkpoint `cp-1`
/// and, with `lock`, the lock `jobs/nightly` held for 10 minutes. Returns the owner's id.
fn live_owner_and_lock(url: &str, lock: bool) -> String {
    let owner = with_owner(url, async |lease| {
        Checkpoint::create(lease, &cid("cp-1")).await.unwrap();
        lease.owner_id().to_string()
    });
    if lock {
        let out = Command::new(BIN)
            .args(["--bank", url])
            .args(["lock", "acquire", "jobs/nightly", "--duration", "10m"])
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    owner
}

/// A checkpoint `id` its owner completed as failed, with data.
fn failed_checkpoint(url: &str, id: &str) {
    with_owner(url, async |lease| {
        let cp = Checkpoint::create(lease, &cid(id)).await.unwrap();
        cp.put_data("part", object_store::PutPayload::from_static(b"partial"))
            .await
            .unwrap();
        cp.complete(banklease::Status::Error).await.unwrap();
    });
}

/// What `work` returns, done by a new owner of `url` (windows 10 s / 30 s / 1 s, never
/// renewed: it stays alive for the test).
fn with_owner<T>(url: &str, work: impl AsyncFnOnce(&OwnerLease) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bank = Bank::open(url).unwrap();
        let windows = LeaseWindows::new(
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(1),
        )
        .unwrap();
        let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
            .await
            .unwrap();
        work(&lease).await
    })
}

#[test]
fn a_reader_lists_shows_and_judges_without_writing_and_is_refused_writes_as_a_permission() {
    let dir = tempfile::tempdir().unwrap();
    let bank_dir = dir.path().join("bank");
    let url = banklease_testkit::file_bank(&bank_dir);
    let owner = live_owner_and_lock(&url, true);
    // The tempdir is private to its creator: let the reader in, read-only.
    read_only_for_others(dir.path());
    let before = snapshot(&bank_dir);

    for (args, code, needle) in [
        (&["lease", "list"][..], 0, "alive"),
        (&["lease", "show", owner.as_str()][..], 0, "alive"),
        (&["checkpoint", "list"][..], 0, "cp-1"),
        (&["checkpoint", "show", "cp-1"][..], 0, "protecting"),
        (
            &["checkpoint", "explain", "cp-1"][..],
            0,
            "its owner is alive",
        ),
        (&["validity-check", "--owner", owner.as_str()][..], 0, "ok"),
        (&["lock", "list"][..], 0, "nightly"),
        (&["lock", "show", "jobs/nightly"][..], 0, "held"),
        (&["doctor", "--read-only"][..], 0, "judging works read-only"),
        // A dry run deletes nothing, so it needs no write either.
        (&["gc", "--dry-run"][..], 0, "gc pass (dry run)"),
    ] {
        let out = as_reader(&url, args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stdout}{stderr}");
        assert!(stdout.contains(needle), "{args:?}: {needle}: {stdout}");
        for line in stderr.lines() {
            assert!(
                line.contains("read-only access: the clock probe cannot be written"),
                "{args:?}: only the read-only note on stderr: {stderr}"
            );
        }
    }
    // What must write is refused, and says it is a permission.
    for args in [
        &["gc"][..],
        &["lock", "acquire", "other", "--duration", "1m"][..],
    ] {
        let out = as_reader(&url, args);
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            stderr.to_lowercase().contains("permission denied"),
            "{args:?}: {stderr}"
        );
    }
    // `gc` in one line that says so first, not as a bank that cannot keep leases.
    let out = as_reader(&url, &["gc"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("permission denied on bank=`{url}")),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot keep owner leases"), "{stderr}");
    assert_eq!(snapshot(&bank_dir), before, "a reader changed the bank");
}

/// Every object of the bank at `url` with its bytes, as the store lists them.
fn objects(url: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    use futures::TryStreamExt as _;
    use object_store::ObjectStoreExt as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bank = Bank::open(url).unwrap();
        let listed: Vec<_> = bank
            .store()
            .list(Some(bank.prefix()))
            .try_collect()
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for meta in listed {
            let bytes = bank.store().get(&meta.location).await.unwrap().bytes();
            out.insert(
                meta.location.to_string(),
                Some(bytes.await.unwrap().to_vec()),
            );
        }
        out
    })
}

/// The banks this suite runs on: `file:` always (every file, hidden ones included), S3 (moto)
/// with `BANKLEASE_TEST_S3=1` (every object listed).
fn banks(dir: &Path) -> Vec<(String, Option<std::path::PathBuf>)> {
    let mut out = vec![];
    let bank_dir = dir.join("bank");
    out.push((banklease_testkit::file_bank(&bank_dir), Some(bank_dir)));
    if std::env::var("BANKLEASE_TEST_S3").as_deref() == Ok("1") {
        let bucket = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".into());
        let url = format!("s3://{bucket}/reads-{}", uuid::Uuid::new_v4().simple());
        let out_init = Command::new(BIN)
            .args(["--bank", &url, "init"])
            .output()
            .unwrap();
        assert!(out_init.status.success(), "{}", text(&out_init.stderr));
        out.push((url, None));
    } else {
        eprintln!("note: S3 skipped: set BANKLEASE_TEST_S3=1 (.ci/run does)");
    }
    out
}

/// Read commands leave nothing new in the bank: a hundred of them, by a user who may write,
/// leave at most one store-clock probe for this host, rewritten in place. Before, each wrote
/// `_banklease/clock/<random>` (21 in an afternoon) and, on `file:`, the lock file of its
/// stripe; `gc --dry-run` probed the bank's conditional writes too.
#[test]
fn a_hundred_read_commands_leave_at_most_one_clock_probe_per_host() {
    let dir = tempfile::tempdir().unwrap();
    for (url, bank_dir) in banks(dir.path()) {
        let owner = live_owner_and_lock(&url, bank_dir.is_some());
        let contents = || match &bank_dir {
            Some(d) => snapshot(d),
            None => objects(&url),
        };
        let before = contents();
        let reads: [&[&str]; 10] = [
            &["lease", "list"],
            &["lease", "show", &owner],
            &["checkpoint", "list"],
            &["checkpoint", "show", "cp-1"],
            &["checkpoint", "explain", "cp-1"],
            &["validity-check", "--owner", &owner],
            &["lock", "list"],
            &["lock", "show", "jobs/nightly"],
            &["doctor", "--read-only"],
            &["gc", "--dry-run"],
        ];
        for round in 0..10 {
            for args in reads {
                let out = Command::new(BIN)
                    .args(["--bank", &url])
                    .args(args)
                    .env("BANKLEASE_LEASE__SKEW_MARGIN", "1100ms")
                    .env("NO_COLOR", "1")
                    .output()
                    .unwrap();
                assert!(
                    matches!(out.status.code(), Some(0 | 1)),
                    "{url} {args:?} (round {round}): {}",
                    text(&out.stderr)
                );
            }
        }
        let after = contents();
        let new: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
        let gone: Vec<_> = before.keys().filter(|k| !after.contains_key(*k)).collect();
        let changed: Vec<_> = before
            .iter()
            .filter(|(k, v)| after.get(*k).is_some_and(|a| a != *v))
            .map(|(k, _)| k)
            .collect();
        let probes = new
            .iter()
            .chain(&changed)
            .filter(|k| k.contains("_banklease/clock/"))
            .count();
        let others: Vec<_> = new
            .iter()
            .chain(&changed)
            .filter(|k| !k.contains("_banklease/clock/") && !k.ends_with("_banklease/clock"))
            .collect();
        assert!(
            probes <= 1 && others.is_empty() && gone.is_empty(),
            "{url}: 100 read commands wrote {probes} clock probe(s); also new or changed: \
             {others:?}; removed: {gone:?}"
        );
    }
}

/// Every command that must write, run by a user who may only read the bank, is refused with the
/// operator's one line — permission denied on the bank, what to do — never a store request
/// about one of banklease's own objects, and the bank is left as it was.
#[test]
fn every_writing_command_is_refused_as_a_permission_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bank_dir = dir.path().join("bank");
    let url = banklease_testkit::file_bank(&bank_dir);
    live_owner_and_lock(&url, false);
    failed_checkpoint(&url, "cp-failed");
    read_only_for_others(dir.path());
    let before = snapshot(&bank_dir);
    let file = dir.path().join("report.json");
    std::fs::write(&file, b"{}").unwrap();
    let file = file.to_str().unwrap();
    for args in [
        &["lock", "run", "jobs/backup", "--", "true"][..],
        &["lock", "acquire", "jobs/backup", "--duration", "1m"][..],
        &["lock", "release", "jobs/backup", "--owner", "someone"][..],
        &[
            "lock",
            "put",
            "jobs/backup",
            "reports/r.json",
            file,
            "--token",
            "1",
        ][..],
        &["run", "--", "true"][..],
        &["run", "--lock", "jobs/backup", "--", "true"][..],
        &["gc"][..],
        &["doctor"][..],
        &["checkpoint", "delete", "cp-failed", "--operator", "me"][..],
    ] {
        let out = as_reader(&url, args);
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.contains(&format!("permission denied on bank=`{url}`")),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("run as a user (or with credentials) allowed to"),
            "{args:?}: {stderr}"
        );
        if args == ["doctor"] {
            assert!(
                stderr.contains("`banklease doctor --read-only`"),
                "{stderr}"
            );
        }
        for internal in ["_banklease/", "store request failed", "staging"] {
            assert!(
                !stderr.contains(internal),
                "{args:?}: names `{internal}`: {stderr}"
            );
        }
    }
    assert_eq!(snapshot(&bank_dir), before, "a reader changed the bank");

    // `checkpoint resolve` writes only where a record is unreadable: a dead owner's, torn.
    let torn_dir = tempfile::tempdir().unwrap();
    let torn_bank = torn_dir.path().join("bank");
    let torn_url = common::dead_owner_bank(torn_dir.path(), &["cp-torn"]);
    std::fs::write(torn_bank.join("checkpoints/cp-torn/index.json"), b"{torn").unwrap();
    read_only_for_others(torn_dir.path());
    let before = snapshot(&torn_bank);
    let out = as_reader(
        &torn_url,
        &["checkpoint", "resolve", "cp-torn", "--operator", "me"],
    );
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "resolve: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "resolve: one line: {stderr}");
    assert!(
        stderr.contains(&format!("permission denied on bank=`{torn_url}`")),
        "resolve: {stderr}"
    );
    assert!(!stderr.contains("_banklease/"), "resolve: {stderr}");
    assert_eq!(snapshot(&torn_bank), before, "a reader changed the bank");
}

/// On a `file:` bank whose file system keeps exact stamps, `doctor` (run by its writer) and
/// `doctor --read-only` (run by a reader) agree that a reader can judge: the row about the
/// `Date` header does not say a reader cannot, since a reader of a `file:` bank judges by this
/// host's clock, which stamps its writes.
#[test]
fn doctor_and_doctor_read_only_agree_on_read_only_judging() {
    let dir = tempfile::tempdir().unwrap();
    let url = banklease_testkit::file_bank(&dir.path().join("bank"));
    let out = common::cli(&url, &["doctor"]);
    let stdout = text(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.contains("Date header (read-only judging)"))
        .unwrap_or_else(|| panic!("no Date header row: {stdout}"));
    assert!(!row.contains("cannot judge"), "{row}");
    assert!(row.contains("this host's clock"), "{row}");
    read_only_for_others(dir.path());
    let out = as_reader(&url, &["doctor", "--read-only"]);
    assert!(
        text(&out.stdout).contains("judging works read-only"),
        "{}",
        text(&out.stdout)
    );
}
