//! `banklease gc` as a script runs it: the exit code says whether the pass left something to
//! look at, and stderr names each object it could not handle.

#![allow(clippy::disallowed_methods)] // real processes on real files, a real clock

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::SystemClock;
use banklease::Bank;

mod common;

use common::{cli, dead_owner_bank, path_with_bin, text, Killed};

#[test]
fn a_pass_that_met_errors_exits_1_and_names_each_object() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-a", "cp-b", "cp-c"]);
    let bank = dir.path().join("bank");
    std::fs::write(bank.join("checkpoints/cp-a/index.json"), "{not json").unwrap();
    std::fs::create_dir_all(bank.join("decisions")).unwrap();
    std::fs::write(bank.join("decisions/cp-b"), "{not json either").unwrap();

    // A dry run names what the pass would meet, and acts on nothing.
    let out = cli(&url, &["gc", "--dry-run"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("errors 2"), "{stdout}");
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(bank.join("checkpoints/cp-c/index.json").exists());

    let out = cli(&url, &["gc"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("collected 1,"), "{stdout}");
    assert!(stdout.contains("errors 2"), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one line per object: {stderr}");
    for (id, path) in [
        ("cp-a", "checkpoints/cp-a/index.json"),
        ("cp-b", "decisions/cp-b"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.starts_with(&format!("error: checkpoint `{id}`: ")))
            .unwrap_or_else(|| panic!("{id} not named: {stderr}"));
        assert!(line.contains(path), "{line}");
        // A record that cannot be read does not heal by itself: the line says who acts.
        assert!(
            line.ends_with(
                "(every pass meets it until a human acts: `banklease checkpoint explain` says how)"
            ),
            "{line}"
        );
    }

    // The JSON report names them too, and the next pass meets them again.
    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["errors"], 2, "{report}");
    let objects: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["object"].as_str().unwrap())
        .collect();
    assert!(objects.contains(&"checkpoint `cp-a`"), "{report}");
    assert!(objects.contains(&"checkpoint `cp-b`"), "{report}");

    // `checkpoint explain` says why each is where it is, and what a human must do.
    let explain = |id: &str| {
        let out = cli(&url, &["checkpoint", "explain", id]);
        assert_eq!(out.status.code(), Some(0), "{id}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let collected = explain("cp-c");
    for needle in [
        "status       deleted",
        "the gc collected it: its lease, last written at ",
        "with an expire window of 1s, had expired; judged at ",
        "on the store's clock, the owner had been dead for ",
        "(margin 100ms in its favour), past the grace of 500ms",
        "next         nothing: the decision is finished",
    ] {
        assert!(collected.contains(needle), "{needle}\n{collected}");
    }
    let out = cli(&url, &["--json", "checkpoint", "explain", "cp-c"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let evidence = &json["decided"]["evidence"];
    assert_eq!(evidence["lease"], "expired", "{json}");
    assert_eq!(evidence["grace_ms"], 500, "{json}");
    assert_eq!(evidence["skew_margin_ms"], 100, "{json}");
    assert!(evidence["dead_for_ms"].as_u64().unwrap() >= 500, "{json}");
    assert!(
        !evidence["collector"].as_str().unwrap().is_empty(),
        "{json}"
    );
    assert!(!evidence["pass"].as_str().unwrap().is_empty(), "{json}");
    let corrupt_index = explain("cp-a");
    assert!(
        corrupt_index.contains("index.json   unreadable: not valid JSON"),
        "{corrupt_index}"
    );
    assert!(
        corrupt_index.contains(
            "next         needs a human: the gc never collects a checkpoint it cannot read"
        ),
        "{corrupt_index}"
    );
    let corrupt_decision = explain("cp-b");
    assert!(
        corrupt_decision.contains("why          its decision cannot be read"),
        "{corrupt_decision}"
    );
    assert!(
        corrupt_decision.contains("needs a human"),
        "{corrupt_decision}"
    );
    let out = cli(&url, &["checkpoint", "explain", "cp-none"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));

    // `checkpoint resolve`: the unreadable index.json of a dead owner's checkpoint is collected
    // with the gc's fencing; a decision that cannot be read is never overwritten.
    let out = cli(&url, &["checkpoint", "resolve", "cp-b"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("not resolved: checkpoint `cp-b`: its decision cannot be read"),
        "{err}"
    );
    let out = cli(
        &url,
        &["checkpoint", "resolve", "cp-a", "--operator", "alice"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("resolved: checkpoint `cp-a`"));
    let out = cli(&url, &["--json", "gc"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["collected"], 1, "cp-a, now: {report}");
    assert_eq!(report["errors"], 1, "cp-b only: {report}");
    let resolved = explain("cp-a");
    assert!(resolved.contains("status       deleted"), "{resolved}");
    assert!(
        resolved.contains("operator alice (checkpoint resolve)"),
        "{resolved}"
    );
    assert!(!bank.join("checkpoints/cp-a/data").exists());
}

#[test]
fn a_clean_pass_exits_0_and_says_nothing_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-a"]);
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("collected 1,"));
    assert_eq!(text(&out.stderr), "");
}

/// `banklease gc` beside the running daemon is refused (75, one line naming
/// the holder) unless `--beside-daemon`; with no daemon it takes the GC lease and releases it.
#[test]
fn a_manual_pass_takes_the_gc_lease_or_refuses_beside_an_active_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &[]);
    let active = dir.path().join("bank/gc/active");
    // The active daemon, in this process: short GC lease windows, no metrics.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut config = banklease::Config::default();
    config.lease.skew_margin = Duration::from_millis(100);
    config.gc.grace = Duration::from_millis(500);
    config.gc.late_write_window = Duration::from_secs(1);
    config.gc.interval = Duration::from_millis(300);
    config.gc.lease.renew_window = Duration::from_millis(200);
    config.gc.lease.expire_window = Duration::from_secs(1);
    config.gc.lease.validity_window = Duration::from_millis(100);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon =
        banklease_gc_daemon::Daemon::new(Bank::open(&url).unwrap(), Arc::new(SystemClock), config);
    let holder = daemon.owner_id().to_string();
    let running = runtime.spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    for _ in 0..300 {
        if active.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(active.exists(), "the daemon never became active");

    let out = cli(&url, &["gc"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Named by its host and pid beside its id (the daemon runs in this test's process).
    assert!(
        err.contains(&format!(
            "holder=`{holder}` (host=`{}`, pid=`{}`) is active",
            banklease::id::local_hostname(),
            std::process::id()
        )),
        "{err}"
    );
    assert!(err.contains("--beside-daemon"), "{err}");
    assert_eq!(text(&out.stdout), "");

    let out = cli(&url, &["gc", "--beside-daemon"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("ran beside the active gc daemon"), "{err}");
    assert!(text(&out.stdout).contains("; beside the active gc daemon"));

    // A dry run deletes nothing and needs no lease.
    let out = cli(&url, &["--json", "gc", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["gc_lease"], "not-needed", "{report}");

    stop.send(()).unwrap();
    runtime.block_on(running).unwrap().unwrap();
    assert!(!active.exists(), "the daemon released the gc lease");
    let out = cli(&url, &["--json", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["gc_lease"], "held", "{report}");
    assert!(!active.exists(), "the pass released the gc lease");
}

/// A reap's evidence outlives the lease it deleted. `lease show` and
/// `checkpoint explain` print why the owner's lease is gone, from `gc/reaped/<owner>`, which a
/// pass forgets after 30 days on the store's clock.
#[test]
fn a_reaped_lease_keeps_its_reason_for_30_days() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-r"]);
    let bank = dir.path().join("bank");
    let owner = std::fs::read_dir(bank.join("leases"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    let out = cli(&url, &["--json", "gc"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["leases_reaped"], 1, "{report}");

    let out = cli(&url, &["lease", "show", &owner]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "missing: {stdout}");
    for needle in [
        "state            missing",
        "reaped           last by the gc at ",
        ": its lease, last written at ",
        "with an expire window of 1s, had expired; judged at ",
        "past the grace of 500ms",
        "reaped_by        ",
        "reaped_lease     host ",
    ] {
        assert!(stdout.contains(needle), "{needle}\n{stdout}");
    }
    let out = cli(&url, &["--json", "lease", "show", &owner]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["reaped"]["evidence"]["lease"], "expired", "{json}");
    assert_eq!(
        json["reaped"]["lease"]["owner_id"],
        owner.as_str(),
        "{json}"
    );
    let explained = text(&cli(&url, &["checkpoint", "explain", "cp-r"]).stdout);
    assert!(
        explained.contains("no lease: last reaped by the gc at "),
        "{explained}"
    );

    // Kept for 30 days on the store's clock (a `file:` bank's is this host's), then forgotten.
    let record = bank.join("gc/reaped").join(&owner);
    // Another owner's record, as the gc wrote it a month ago (only what reads back as the
    // reap record of the owner its name says is the gc's to forget).
    let old = bank.join("gc/reaped/an-owner-reaped-long-ago");
    let mut body: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    body["owner_id"] = "an-owner-reaped-long-ago".into();
    std::fs::write(&old, serde_json::to_vec(&body).unwrap()).unwrap();
    let month_ago = std::time::SystemTime::now() - Duration::from_secs(31 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(month_ago)
        .unwrap();
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!old.exists(), "a record 31 days old is forgotten");
    assert!(record.exists(), "a fresh one is kept");
}

/// The GC names what it collects, would collect and skips: `gc --dry-run` the first few ids of
/// each and a count, `-v` every one with why, `--json` every one with its owner and reason —
/// and the pass itself too. A live owner's protecting checkpoint is named as skipped.
#[test]
fn the_gc_names_every_checkpoint_it_collects_or_skips() {
    let dir = tempfile::tempdir().unwrap();
    let dead: Vec<String> = (1..=7).map(|i| format!("cp-dead-{i}")).collect();
    let dead_refs: Vec<&str> = dead.iter().map(String::as_str).collect();
    let url = dead_owner_bank(dir.path(), &dead_refs);
    // A live owner: a job under `run` that left one checkpoint protecting and still runs.
    let ready = dir.path().join("ready");
    let path = path_with_bin();
    let script = format!(
        "banklease agent checkpoint create cp-live && echo \"$BANKLEASE_OWNER_ID\" > '{}' \
         && sleep 30",
        ready.display()
    );
    let _live = Killed(
        common::command(&url, &["run", "--", "sh", "-c", &script])
            .env("PATH", &path)
            .spawn()
            .unwrap(),
    );
    common::wait_for("the live job's checkpoint", || {
        std::fs::read_to_string(&ready).is_ok_and(|s| s.ends_with('\n'))
    });
    let live_owner = std::fs::read_to_string(&ready).unwrap().trim().to_owned();

    // Text: the first five of each action and a count; then how to see them all.
    let out = cli(&url, &["gc", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let would = stdout
        .lines()
        .find(|l| l.starts_with("would collect 7: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(would.matches("`cp-dead-").count(), 5, "{would}");
    assert!(would.contains(" and 2 more (owner `"), "{would}");
    // Owner ids as the tables show them: a generated one cut to 12.
    assert!(
        stdout.contains(&format!(
            "skipped 1: `cp-live` (owner `{}`)",
            &live_owner[..12]
        )),
        "{stdout}"
    );
    assert!(stdout.contains("-v names every checkpoint"), "{stdout}");

    // -v: every one, with why.
    let out = cli(&url, &["gc", "--dry-run", "-v"]);
    let stdout = text(&out.stdout);
    for id in &dead {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("would collect `{id}` (owner `")))
            .unwrap_or_else(|| panic!("{id} not named in: {stdout}"));
        assert!(line.contains("its owner's lease expired"), "{line}");
    }
    assert!(
        stdout.contains(&format!(
            "skipped `cp-live` (owner `{live_owner}`): its owner's lease is alive"
        )),
        "{stdout}"
    );

    // JSON, and the pass itself: every id with its owner, action and reason; then nothing of
    // the dead owner's is left, and the live one's is.
    for args in [&["gc", "--dry-run", "--json"][..], &["gc", "--json"][..]] {
        let out = cli(&url, args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let named = report["checkpoints"].as_array().unwrap();
        let mut collected: Vec<&str> = named
            .iter()
            .filter(|c| c["action"] == "collect")
            .map(|c| c["checkpoint_id"].as_str().unwrap())
            .collect();
        collected.sort();
        assert_eq!(collected, dead_refs, "{args:?}: {report}");
        let owners: std::collections::HashSet<&str> = named
            .iter()
            .filter(|c| c["action"] == "collect")
            .map(|c| c["owner_id"].as_str().unwrap())
            .collect();
        assert_eq!(owners.len(), 1, "{report}");
        assert!(!owners.contains(live_owner.as_str()), "{report}");
        let skipped: Vec<_> = named.iter().filter(|c| c["action"] == "skip").collect();
        assert_eq!(skipped.len(), 1, "{report}");
        assert_eq!(skipped[0]["checkpoint_id"], "cp-live");
        assert_eq!(skipped[0]["owner_id"], live_owner.as_str());
        assert_eq!(skipped[0]["reason"], "its owner's lease is alive");
        assert_eq!(report["checkpoints_omitted"], 0);
    }
    let left = cli(&url, &["checkpoint", "list", "--json"]);
    for line in text(&left.stdout).lines() {
        let status = if line.contains("\"cp-live\"") {
            "\"status\":\"protecting\""
        } else {
            "\"status\":\"deleted\""
        };
        assert!(line.contains(status), "{line}");
    }
}

/// A job that fails under `run` leaves its checkpoint `error` with its data: the gc keeps it,
/// counted with its bytes, and `explain` says when it goes; past `gc.keep_failed_for` a dry run
/// names it, the pass retires it (data first), and `explain` says by which pass.
#[test]
fn a_failed_jobs_checkpoint_is_kept_then_retired_and_explain_says_when_and_by_whom() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &[]);
    let job = "banklease agent checkpoint create etc-1 && head -c 200000 /dev/zero | \
               banklease agent checkpoint put etc-1 etc.tgz - && exit 3";
    let out = common::command(&url, &["run", "--", "sh", "-c", job])
        .env("PATH", path_with_bin())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let data = dir.path().join("bank/checkpoints/etc-1/data/etc.tgz");
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 200_000);

    // The default keeps it for 14 days: counted, with its bytes.
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("failed checkpoints: retired 0, kept 1 (195.3 KiB)"),
        "{stdout}"
    );
    let out = cli(&url, &["gc", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failed_kept"], 1, "{report}");
    assert_eq!(report["failed_kept_bytes"], 200_000, "{report}");
    let out = cli(&url, &["checkpoint", "explain", "etc-1"]);
    let explained = text(&out.stdout);
    assert!(
        explained.contains("the gc retires it, data first, once it has been failed for gc.keep_failed_for (14days)"),
        "{explained}"
    );

    // Past a 1 s setting: named by a dry run, retired by the pass.
    std::thread::sleep(Duration::from_millis(1_500));
    let short = |args: &[&str]| {
        common::command(&url, args)
            .env("BANKLEASE_GC__KEEP_FAILED_FOR", "1s")
            .output()
            .unwrap()
    };
    let out = short(&["gc", "--dry-run"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("would retire 1: `etc-1` (owner `"),
        "{stdout}"
    );
    assert!(data.exists());
    let out = short(&["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("retired 1: `etc-1` (owner `"), "{stdout}");
    assert!(!data.exists(), "its data is gone");
    let out = short(&["checkpoint", "explain", "etc-1"]);
    let explained = text(&out.stdout);
    for needle in [
        "status       deleted",
        "removed      retired by the gc (collector `",
        ", pass `",
        "past gc.keep_failed_for (1s); it was error",
        "next         nothing: it was removed",
    ] {
        assert!(explained.contains(needle), "{needle}\n{explained}");
    }
}
