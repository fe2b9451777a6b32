//! `banklease checkpoint delete` as an operator runs it: a failed checkpoint goes, an
//! available one only with --available, a live owner's protecting one never, a dead owner's
//! only as the GC would collect it; nothing of a refused one is touched, and `explain` shows
//! who deleted what and why.

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use std::process::Output;

use common::{cli, dead_owner_bank, output_text, path_with_bin, Killed};

/// `banklease run -- sh -c SCRIPT` on `url`.
fn run_job(url: &str, script: &str) -> Output {
    common::command(url, &["run", "--", "sh", "-c", script])
        .env("PATH", path_with_bin())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_operator_deletes_what_may_go_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    // A dead owner's protecting checkpoint, then a failed job, a completed one, a live one.
    let url = dead_owner_bank(dir.path(), &["dead-1"]);
    let bank = dir.path().join("bank");
    let out = run_job(
        &url,
        "banklease agent checkpoint create etc-1 && echo partial | \
         banklease agent checkpoint put etc-1 etc.tgz - && exit 3",
    );
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    let out = run_job(
        &url,
        "banklease agent checkpoint create etc-2 && echo whole | \
         banklease agent checkpoint put etc-2 etc.tgz - && \
         banklease agent checkpoint complete etc-2 available",
    );
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let ready = dir.path().join("ready");
    let _live = Killed(
        common::command(
            &url,
            &[
                "run",
                "--",
                "sh",
                "-c",
                &format!(
                    "banklease agent checkpoint create live-1 && touch '{}' && sleep 30",
                    ready.display()
                ),
            ],
        )
        .env("PATH", path_with_bin())
        .spawn()
        .unwrap(),
    );
    common::wait_for("the live job's checkpoint", || ready.exists());
    let data = |id: &str| bank.join(format!("checkpoints/{id}/data/etc.tgz"));

    // A dry run names it, deletes nothing.
    let out = cli(&url, &["checkpoint", "delete", "etc-1", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        stdout(&out).starts_with("would delete `etc-1` (was error, owner `"),
        "{}",
        output_text(&out)
    );
    assert!(data("etc-1").exists());

    // Refused, one line each, nothing touched: an ambiguous prefix, an available checkpoint
    // unasked, a live owner's protecting one.
    for (args, needle) in [
        (
            &["etc"][..],
            "not deleted: checkpoint id prefix `etc` is ambiguous: 2 start with it",
        ),
        (
            &["etc-2"][..],
            "is available (a completed backup); pass --available",
        ),
        (&["live-1"][..], "is protecting and its owner `"),
        (&["nothing-here"][..], "no checkpoint `nothing-here`"),
    ] {
        let mut full = vec!["checkpoint", "delete"];
        full.extend_from_slice(args);
        let out = cli(&url, &full);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            output_text(&out)
        );
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    assert!(stderr(&cli(&url, &["checkpoint", "delete", "live-1"])).contains("its lease is alive"));
    assert!(data("etc-2").exists());
    assert!(bank.join("checkpoints/live-1/index.json").exists());

    // Deleted, with who and why: data first, then its records.
    let out = common::command(
        &url,
        &[
            "checkpoint",
            "delete",
            "etc-1",
            "etc-2",
            "--available",
            "--operator",
            "alice",
            "--reason",
            "restored elsewhere",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let text = stdout(&out);
    assert!(
        text.contains("deleted `etc-1` (was error, owner `"),
        "{text}"
    );
    assert!(
        text.contains("deleted `etc-2` (was available, owner `"),
        "{text}"
    );
    assert!(
        text.contains(": 1 data object(s), then its records"),
        "{text}"
    );
    assert!(!data("etc-1").exists() && !data("etc-2").exists());
    assert!(!bank.join("index/failed/etc-1").exists());
    let explained = stdout(&cli(&url, &["checkpoint", "explain", "etc-1"]));
    for needle in [
        "status       deleted",
        "removed      deleted by operator `alice` at ",
        ": restored elsewhere; it was error",
        "next         nothing: it was removed",
    ] {
        assert!(explained.contains(needle), "{needle}\n{explained}");
    }
    // Again: it is gone already, which is no failure.
    let out = cli(&url, &["checkpoint", "delete", "etc-1"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(stdout(&out), "`etc-1` was deleted already\n");

    // A dead owner's protecting checkpoint: decided and collected as a pass would, with the
    // operator named in the decision's evidence.
    let out = cli(&url, &["--json", "checkpoint", "delete", "dead-1"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["checkpoint_id"], "dead-1", "{line}");
    assert_eq!(line["outcome"], "deleted", "{line}");
    assert_eq!(line["was"], "protecting", "{line}");
    assert_eq!(line["dry_run"], false, "{line}");
    let explained = stdout(&cli(&url, &["checkpoint", "explain", "dead-1"]));
    assert!(explained.contains("status       deleted"), "{explained}");
    assert!(
        explained.contains("operator ci-operator (checkpoint delete)"),
        "{explained}"
    );
    assert!(explained.contains("marker       absent"), "{explained}");
}

/// A name someone chose is given whole: `nightly-1`, which is not in the bank, never deletes
/// `nightly-12`, the one checkpoint whose id starts with it; the refusal names it.
#[test]
fn a_chosen_name_is_never_taken_for_the_start_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &[]);
    let out = run_job(
        &url,
        "banklease agent checkpoint create nightly-12 && echo partial | \
         banklease agent checkpoint put nightly-12 etc.tgz - && exit 3",
    );
    assert_eq!(out.status.code(), Some(3), "{}", output_text(&out));
    let out = cli(&url, &["checkpoint", "delete", "nightly-1", "--available"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no checkpoint `nightly-1`") && err.contains("`nightly-12` starts with it"),
        "{err}"
    );
    assert!(dir
        .path()
        .join("bank/checkpoints/nightly-12/data/etc.tgz")
        .exists());
}
