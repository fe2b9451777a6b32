//! What a `gc` pass says agrees with itself: its summary's counts are the lists it names (with
//! `gc.max_deletions` holding back collections and retirements alike), and a dry run's JSON
//! names what it would do as such.

#![allow(clippy::disallowed_methods)] // real processes

mod common;

use banklease::{Checkpoint, Status};
use banklease_testkit::cid;
use common::{cli, dead_owner_bank, text};

/// The count a summary line gives `what` (`skipped 6` → 6).
fn count(line: &str, what: &str) -> u64 {
    line.split(", ")
        .flat_map(|part| part.split("; "))
        .find_map(|part| part.trim().strip_prefix(&format!("{what} ")))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{what} N` in {line}"))
}

#[test]
fn summary_counts_are_the_named_lists_and_a_dry_run_says_would() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &[]);
    common::dying_owner(&url, async |lease| {
        for id in ["a", "b", "c", "d", "e"] {
            Checkpoint::create(lease, &cid(id)).await.unwrap();
        }
        for id in ["f1", "f2", "f3"] {
            let c = Checkpoint::create(lease, &cid(id)).await.unwrap();
            c.complete(Status::Error).await.unwrap();
        }
        let kept = Checkpoint::create(lease, &cid("ok")).await.unwrap();
        kept.complete(Status::Available).await.unwrap();
    });
    // A dry run's JSON: what it would do, under `would_*`; nothing under the done names.
    let out = cli(&url, &["--json", "gc", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["would_collect"], 5, "{report}");
    for done in ["collected", "retired", "repaired", "leases_reaped"] {
        assert!(report.get(done).is_none(), "{done} in a dry run: {report}");
    }
    // Two passes of one deletion each (the first also reads the clock that lets the second
    // retire): the second is over its limit for collections and retirements alike.
    for pass in 0..2 {
        let mut cmd = common::command(&url, &["gc", "-v"]);
        cmd.env("BANKLEASE_GC__MAX_DELETIONS", "1")
            .env("BANKLEASE_GC__KEEP_FAILED_FOR", "1ms");
        let out = cmd.output().unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        let summary = stdout.lines().next().unwrap();
        let named = |verb: &str| {
            stdout
                .lines()
                .filter(|l| l.starts_with(&format!("{verb} `")))
                .count() as u64
        };
        for what in ["collected", "skipped"] {
            assert_eq!(
                count(summary, what),
                named(what),
                "pass {pass}: `{what}` counted and named differ: {stdout}"
            );
        }
        if pass == 1 {
            assert!(named("skipped") >= 3 + 3, "{stdout}");
        }
    }
    // Who removed what: the gc's retirements, an operator's deletion, beside the owner's
    // decisions.
    let mut cmd = common::command(&url, &["gc"]);
    cmd.env("BANKLEASE_GC__KEEP_FAILED_FOR", "1ms");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = cli(
        &url,
        &[
            "checkpoint",
            "delete",
            "ok",
            "--available",
            "--operator",
            "alice",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = cli(&url, &["--json", "checkpoint", "list"]);
    let rows: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {rows:?}"))
    };
    for id in ["f1", "f2", "f3"] {
        assert_eq!(row(id)["decided_by"], "owner", "{rows:?}");
        assert_eq!(row(id)["removed_by"], "gc", "{rows:?}");
    }
    assert_eq!(row("ok")["removed_by"], "operator `alice`", "{rows:?}");
    assert!(row("a")["removed_by"].is_null(), "{rows:?}");
    let out = cli(&url, &["checkpoint", "list"]);
    let table = text(&out.stdout);
    assert!(
        table.lines().next().unwrap().contains("REMOVED_BY"),
        "{table}"
    );
}
