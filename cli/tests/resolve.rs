//! `banklease checkpoint resolve` on what the GC cannot handle: an unreadable
//! decision is rebuilt from the outcome index.json records, or — when no record states it —
//! collected only on the operator's `--as deleted` and only under a dead owner; an unreadable
//! index.json under its owner's decision is rebuilt from the decision. Every unreadable record
//! replaced is kept under `_banklease/set-aside/`; a live owner's checkpoint, a readable decision
//! and a newer release's record are never touched.

#![allow(clippy::disallowed_methods)] // real processes on real files, a real clock

use banklease_testkit::cid;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::Status;
use banklease::clock::SystemClock;
use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease};

mod common;

use common::{cli, dead_owner_bank, dying_owner, text};

const GARBAGE: &str = "{\"format\": 1, \"by\": \"gc\", \"outc";

/// The files kept under `_banklease/set-aside/`, with their contents.
fn kept(bank: &Path) -> Vec<(String, String)> {
    let dir = bank.join("_banklease/set-aside");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut kept: Vec<(String, String)> = entries
        .map(|e| {
            let path = e.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&path).unwrap(),
            )
        })
        .collect();
    kept.sort();
    kept
}

fn json(path: PathBuf) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One line on stderr, exit 1, and these words in it.
fn assert_refused(out: &std::process::Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}{}", text(&out.stdout));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for needle in needles {
        assert!(err.contains(needle), "wants `{needle}`: {err}");
    }
}

/// A bank whose owner completed `cp-done` (available, with data) and left `cp-zombie`
/// protecting, then died.
fn completed_and_zombie(dir: &Path) -> String {
    let url = dead_owner_bank(dir, &[]);
    dying_owner(&url, async |lease| {
        for id in ["cp-done", "cp-zombie"] {
            let cp = Checkpoint::create(lease, &cid(id)).await.unwrap();
            cp.put_data("blob", vec![7u8; 4096].into()).await.unwrap();
            if id == "cp-done" {
                cp.complete(Status::Available).await.unwrap();
            }
        }
    });
    url
}

#[test]
fn an_unreadable_decision_is_rebuilt_from_the_outcome_index_json_records() {
    let dir = tempfile::tempdir().unwrap();
    let url = completed_and_zombie(dir.path());
    let bank = dir.path().join("bank");
    std::fs::write(bank.join("decisions/cp-done"), GARBAGE).unwrap();

    // `--as deleted` never deletes what its owner completed.
    let out = cli(
        &url,
        &["checkpoint", "resolve", "cp-done", "--as", "deleted"],
    );
    assert_refused(
        &out,
        &["records its owner's `available`", "without `--as deleted`"],
    );
    assert!(kept(&bank).is_empty());

    let out = cli(&url, &["checkpoint", "resolve", "cp-done"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with(
            "resolved: checkpoint `cp-done`: its decision is rebuilt from index.json \
             (available, decided by owner); the unreadable bytes are kept at `"
        ),
        "{stdout}"
    );
    let kept = kept(&bank);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].0.ends_with(".decision.cp-done"), "{kept:?}");
    assert_eq!(kept[0].1, GARBAGE, "the unreadable bytes, as they were");
    let decision = json(bank.join("decisions/cp-done"));
    assert_eq!(decision["by"], "owner", "{decision}");
    assert_eq!(decision["outcome"], "available", "{decision}");
    // It says it was rebuilt, by whom and from what; its first time is not made up.
    assert_eq!(decision["rebuilt"]["operator"], "ci-operator", "{decision}");
    assert_eq!(decision["rebuilt"]["from"], "index.json", "{decision}");
    let explained = text(&cli(&url, &["checkpoint", "explain", "cp-done"]).stdout);
    for needle in [
        "its owner completed it as available (when is unknown: its decision was rebuilt)",
        "rebuilt      decision rebuilt from its index.json by ci-operator at ",
    ] {
        assert!(explained.contains(needle), "{needle}\n{explained}");
    }

    // The gc now passes clean: the zombie collected, the completed checkpoint and its data kept.
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(bank.join("checkpoints/cp-done/data/blob").exists());
    assert!(!bank.join("checkpoints/cp-zombie/data/blob").exists());
    // A decision that reads is never replaced.
    let out = cli(&url, &["checkpoint", "resolve", "cp-done"]);
    assert_refused(&out, &["its index.json and decision read"]);
}

#[test]
fn an_unreadable_decision_no_record_explains_is_collected_only_as_deleted_under_a_dead_owner() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-x"]);
    let bank = dir.path().join("bank");
    std::fs::create_dir_all(bank.join("decisions")).unwrap();
    std::fs::write(bank.join("decisions/cp-x"), GARBAGE).unwrap();

    // index.json says `protecting`: the decision may be its owner's `available`. Refused.
    let out = cli(&url, &["checkpoint", "resolve", "cp-x"]);
    assert_refused(
        &out,
        &[
            "its decision cannot be read",
            "it may record its owner's `available`",
            "banklease checkpoint resolve cp-x --as deleted",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(bank.join("decisions/cp-x")).unwrap(),
        GARBAGE
    );
    assert!(kept(&bank).is_empty());
    let explained = text(&cli(&url, &["checkpoint", "explain", "cp-x"]).stdout);
    assert!(explained.contains("--as deleted"), "{explained}");

    // The operator says it is garbage: collected with the gc's fencing, the bytes kept.
    let out = cli(
        &url,
        &[
            "checkpoint",
            "resolve",
            "cp-x",
            "--as",
            "deleted",
            "--operator",
            "alice",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with("resolved: checkpoint `cp-x` of owner `"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the unreadable bytes are kept at `"),
        "{stdout}"
    );
    let kept = kept(&bank);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].1, GARBAGE);
    let decision = json(bank.join("decisions/cp-x"));
    assert_eq!(decision["by"], "gc", "{decision}");
    assert_eq!(decision["outcome"], "deleted", "{decision}");
    assert_eq!(
        decision["evidence"]["collector"], "operator alice (checkpoint resolve)",
        "{decision}"
    );
    assert_eq!(
        json(bank.join("checkpoints/cp-x/index.json"))["status"],
        "deleted"
    );
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!bank.join("checkpoints/cp-x/data").exists());
}

#[test]
fn an_unreadable_index_under_its_owners_decision_is_rebuilt_from_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let url = completed_and_zombie(dir.path());
    let bank = dir.path().join("bank");
    let index = bank.join("checkpoints/cp-done/index.json");
    std::fs::write(&index, "{torn").unwrap();
    let out = cli(&url, &["checkpoint", "resolve", "cp-done"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with(
            "resolved: checkpoint `cp-done`: its index.json is rebuilt from its owner's \
             decision (available); the unreadable bytes are kept at `"
        ),
        "{stdout}"
    );
    let record = json(index.clone());
    assert_eq!(record["status"], "available", "{record}");
    assert_eq!(record["rebuilt"]["from"], "decision", "{record}");
    let kept = kept(&bank);
    assert_eq!(kept.len(), 1);
    assert!(kept[0].0.ends_with(".index.cp-done"), "{kept:?}");
    assert_eq!(kept[0].1, "{torn");
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(bank.join("checkpoints/cp-done/data/blob").exists());
    assert_eq!(
        json(index)["rebuilt"]["operator"],
        "ci-operator",
        "still says so after the gc finished its owner's move"
    );
}

/// What resolve says when there is nothing for it to do, in one line each, and in JSON too;
/// and that it will not run without knowing who resolves.
#[test]
fn resolve_says_what_is_there_and_who_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-ok"]);
    let out = cli(&url, &["checkpoint", "resolve", "nosuch"]);
    assert_refused(
        &out,
        &["it is not in the bank: no index.json, no decision, no marker"],
    );
    let out = cli(
        &url,
        &["checkpoint", "resolve", "nosuch", "--as", "deleted"],
    );
    assert_refused(&out, &["it has no decision: `--as deleted` is only for"]);
    let out = cli(&url, &["--json", "checkpoint", "resolve", "cp-ok"]);
    assert_refused(&out, &["its index.json and decision read"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["resolved"], false, "{json}");
    assert!(json["reason"].as_str().unwrap().contains("read"), "{json}");

    let mut cmd = std::process::Command::new(common::BIN);
    let out = cmd
        .args(["--bank", &url, "checkpoint", "resolve", "cp-ok"])
        .env_remove("USER")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("pass --operator NAME (or set USER)"), "{err}");
}

#[test]
fn a_record_a_newer_release_wrote_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-new"]);
    let bank = dir.path().join("bank");
    std::fs::create_dir_all(bank.join("decisions")).unwrap();
    let newer = r#"{"format": 99, "what": "a newer release's decision"}"#;
    std::fs::write(bank.join("decisions/cp-new"), newer).unwrap();
    let out = cli(
        &url,
        &["checkpoint", "resolve", "cp-new", "--as", "deleted"],
    );
    assert_refused(&out, &["format `99` is newer", "never replace it"]);
    assert_eq!(
        std::fs::read_to_string(bank.join("decisions/cp-new")).unwrap(),
        newer
    );
    assert!(kept(&bank).is_empty());
    assert_eq!(
        json(bank.join("checkpoints/cp-new/index.json"))["status"],
        "protecting"
    );
    let explained = text(&cli(&url, &["checkpoint", "explain", "cp-new"]).stdout);
    assert!(
        explained.contains("a newer banklease wrote this decision; upgrade banklease"),
        "{explained}"
    );
}

/// `checkpoint resolve` never takes a live owner's checkpoint, whatever its index.json or
/// decision, even `--as deleted`.
#[test]
fn resolve_refuses_a_live_owners_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("bank").display());
    assert_eq!(cli(&url, &["init"]).status.code(), Some(0));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lease = runtime.block_on(async {
        let bank = Bank::open(&url).unwrap();
        let windows = LeaseWindows::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(1),
        )
        .unwrap();
        let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
            .await
            .unwrap();
        Checkpoint::create(&lease, &cid("cp-live")).await.unwrap();
        lease
    });
    let index = dir.path().join("bank/checkpoints/cp-live/index.json");
    std::fs::write(&index, "{garbage").unwrap();
    let out = cli(&url, &["checkpoint", "resolve", "cp-live"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not dead past the grace (its lease is alive)"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&index).unwrap(), "{garbage");
    assert!(!dir.path().join("bank/decisions/cp-live").exists());
    // explain finds the owner by its marker and says it is alive.
    let explained = text(&cli(&url, &["checkpoint", "explain", "cp-live"]).stdout);
    let owner = lease.owner_id().to_string();
    assert!(
        explained.contains(&format!("owner        {owner}")),
        "{explained}"
    );
    assert!(explained.contains("its owner is alive"), "{explained}");

    let decision = dir.path().join("bank/decisions/cp-live");
    std::fs::create_dir_all(decision.parent().unwrap()).unwrap();
    std::fs::write(&decision, GARBAGE).unwrap();
    let out = cli(
        &url,
        &["checkpoint", "resolve", "cp-live", "--as", "deleted"],
    );
    assert_refused(&out, &["is not dead past the grace (its lease is alive)"]);
    assert_eq!(std::fs::read_to_string(&decision).unwrap(), GARBAGE);
    assert_eq!(std::fs::read_to_string(&index).unwrap(), "{garbage");
    assert!(kept(&dir.path().join("bank")).is_empty());
}

/// A dead owner's checkpoints `ids` (a small data object each), the first `complete` of them
/// available; returns the bank's URL and the owner's id.
fn dead_owner_with(dir: &Path, ids: &[&str], complete: usize) -> (String, String) {
    let url = dead_owner_bank(dir, &[]);
    let owner = std::sync::Mutex::new(String::new());
    dying_owner(&url, async |lease| {
        *owner.lock().unwrap() = lease.owner_id().to_string();
        for (i, id) in ids.iter().enumerate() {
            let cp = Checkpoint::create(lease, &cid(id)).await.unwrap();
            cp.put_data("blob", vec![7u8; 16].into()).await.unwrap();
            if i < complete {
                cp.complete(Status::Available).await.unwrap();
            }
        }
    });
    (url, owner.into_inner().unwrap())
}

/// An index.json that parses but names another checkpoint, and one larger than any record
/// banklease writes: the gc will not read either and says a human must act; resolve judged them
/// readable and refused ("it reads now"). It judges by the gc's rule, collects both zombies, and
/// the next gc passes clean.
#[test]
fn an_index_json_the_gc_will_not_read_is_resolved_never_refused_as_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = dead_owner_with(dir.path(), &["cp-named", "cp-big"], 0);
    let bank = dir.path().join("bank");
    let index = |id: &str| bank.join(format!("checkpoints/{id}/index.json"));
    let mut named = json(index("cp-named"));
    named["id"] = "cp-elsewhere".into();
    let named = serde_json::to_string(&named).unwrap();
    std::fs::write(index("cp-named"), &named).unwrap();
    let mut big = std::fs::read_to_string(index("cp-big")).unwrap();
    big.push_str(&" ".repeat(70 * 1024));
    std::fs::write(index("cp-big"), &big).unwrap();

    let out = cli(&url, &["gc"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for needle in ["it names id=`cp-elsewhere`", "exceeds 65536 bytes"] {
        let line = err.lines().find(|l| l.contains(needle));
        assert!(
            line.is_some_and(|l| l.contains("until a human acts")),
            "{needle}: {err}"
        );
    }

    for (id, bytes) in [("cp-named", &named), ("cp-big", &big)] {
        let out = cli(&url, &["checkpoint", "resolve", id]);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{id}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(
            stdout.starts_with(&format!("resolved: checkpoint `{id}` of owner `")),
            "{stdout}"
        );
        let kept = kept(&bank);
        assert!(
            kept.iter()
                .any(|(name, body)| name.ends_with(&format!(".index.{id}")) && body == bytes),
            "{id}: the bytes as they were: {:?}",
            kept.iter().map(|(name, _)| name).collect::<Vec<_>>()
        );
        assert_eq!(json(index(id))["status"], "deleted");
    }
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for id in ["cp-named", "cp-big"] {
        assert!(!bank.join(format!("checkpoints/{id}/data/blob")).exists());
    }
    assert!(!bank.join("checkpoints/cp-elsewhere").exists());
}

/// A completed checkpoint's decision that names another checkpoint, its marker still there (the
/// owner crashed before deleting it): the gc finished that other checkpoint's move instead,
/// writing an index.json for an id nobody created. Now it will not read the decision, says a
/// human must act, and resolve rebuilds it from index.json; the next gc finishes the move.
#[test]
fn a_decision_naming_another_checkpoint_is_never_acted_on_and_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let (url, owner) = dead_owner_with(dir.path(), &["cp-done"], 1);
    let bank = dir.path().join("bank");
    let decision = bank.join("decisions/cp-done");
    let mut named = json(decision.clone());
    named["checkpoint_id"] = "cp-elsewhere".into();
    let named = serde_json::to_string(&named).unwrap();
    std::fs::write(&decision, &named).unwrap();
    let marker = bank.join(format!("index/protecting/{owner}/cp-done"));
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    std::fs::write(&marker, "").unwrap();

    let out = cli(&url, &["gc"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().any(|l| l.contains("checkpoint `cp-done`")
            && l.contains("it names checkpoint_id=`cp-elsewhere`")
            && l.contains("until a human acts")),
        "{err}"
    );
    assert!(!bank.join("checkpoints/cp-elsewhere").exists());
    assert!(marker.exists());

    let out = cli(&url, &["checkpoint", "resolve", "cp-done"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with(
            "resolved: checkpoint `cp-done`: its decision is rebuilt from index.json \
             (available, decided by owner)"
        ),
        "{stdout}"
    );
    assert_eq!(json(decision)["checkpoint_id"], "cp-done");
    assert_eq!(kept(&bank)[0].1, named);
    let out = cli(&url, &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!marker.exists(), "the gc finished the owner's move");
    assert!(bank.join("checkpoints/cp-done/data/blob").exists());
    assert!(!bank.join("checkpoints/cp-elsewhere").exists());
}
