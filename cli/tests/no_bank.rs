//! A URL that holds no bank (a typo, a bank not made yet) and a command given no bank at all are
//! refused by every command with one line that names the URL and `banklease init`, and nothing
//! is created: a typo must never read as a healthy, empty bank.

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use std::path::Path;
use std::process::Output;

use common::BIN;

/// `banklease args` in `cwd`, with only the given `BANKLEASE_*` variables.
fn cli(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = common::bare();
    cmd.current_dir(cwd)
        .args(args)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every command an operator or a script points at a bank, with the exit code it must refuse
/// with (`run` reports its own failures as 125).
const COMMANDS: &[(&[&str], i32)] = &[
    (&["lease", "list"], 2),
    (&["lease", "show", "owner-1"], 2),
    (&["checkpoint", "list"], 2),
    (&["checkpoint", "show", "cp-1"], 2),
    (&["validity-check", "--owner", "owner-1"], 2),
    (&["gc"], 2),
    (&["gc", "--dry-run"], 2),
    (&["lock", "list"], 2),
    (&["lock", "show", "jobs/nightly"], 2),
    (&["run", "--", "true"], 125),
];

/// Runs each command on `url` and returns what was wrong: not refused with `code`, or not with
/// exactly one line holding every `needle`.
fn refusals(cwd: &Path, url: &str, needles: &[&str]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (args, code) in COMMANDS {
        let mut all = vec!["--bank", url];
        all.extend_from_slice(args);
        let out = cli(cwd, &[], &all);
        let err = text(&out.stderr);
        let one_line = err.lines().count() == 1 && err.starts_with("error: ");
        if out.status.code() != Some(*code) || !one_line || needles.iter().any(|n| !err.contains(n))
        {
            wrong.push(format!(
                "{args:?}: exit {:?}, stderr `{err}`, stdout `{}`",
                out.status.code(),
                text(&out.stdout)
            ));
        }
    }
    wrong
}

#[test]
fn a_mistyped_bank_directory_is_refused_by_every_command_and_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo-bank");
    let url = format!("file://{}", typo.display());
    let init_hint = format!("banklease --bank {url} init");
    let wrong = refusals(
        dir.path(),
        &url,
        &[
            &format!("no bank at bank=`{url}`"),
            "its directory does not exist",
            &init_hint,
        ],
    );
    assert!(wrong.is_empty(), "not refused:\n{}", wrong.join("\n"));
    assert!(!typo.exists(), "a command created the mistyped directory");
    // `init` is the one command that makes it.
    let out = cli(dir.path(), &[], &["--bank", &url, "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(typo.join("banklease.json").is_file());
    let out = cli(dir.path(), &[], &["--bank", &url, "lease", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn an_empty_directory_is_no_bank_and_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let url = format!("file://{}", empty.display());
    let wrong = refusals(
        dir.path(),
        &url,
        &[
            &format!("no bank at bank=`{url}`"),
            "no bank descriptor (banklease.json), and no lease, checkpoint or lock",
            "init",
        ],
    );
    assert!(wrong.is_empty(), "not refused:\n{}", wrong.join("\n"));
    let left: Vec<_> = std::fs::read_dir(&empty).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // `doctor` checks a store before a bank is made in it: it runs, and says there is none.
    let out = cli(
        dir.path(),
        &[],
        &["--bank", &url, "doctor", "--race-rounds", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("note: no bank at bank="),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn without_a_bank_every_command_says_how_to_give_one_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (args, code) in COMMANDS {
        let out = cli(dir.path(), &[], args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(
                "no bank given: pass --bank URL, set BANKLEASE_BANK=URL, or set [bank] url"
            ),
            "{args:?}: {err}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "created in the working directory: {left:?}"
    );
}

#[test]
fn a_variable_with_one_underscore_is_named_with_the_key_meant() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("bank").display());
    let out = cli(
        dir.path(),
        &[
            ("BANKLEASE_BANK_URL", &url),
            ("BANKLEASE_LEASE_SKEW_MARGIN", "1s"),
        ],
        &["lease", "list"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "`BANKLEASE_BANK_URL` is not a banklease setting and is ignored; did you mean \
         `BANKLEASE_BANK__URL` (bank.url)?",
        "`BANKLEASE_LEASE_SKEW_MARGIN` is not a banklease setting and is ignored; did you mean \
         `BANKLEASE_LEASE__SKEW_MARGIN` (lease.skew_margin)?",
        "no bank given",
    ] {
        assert!(err.contains(needle), "{needle}\n{err}");
    }
}

#[test]
fn a_percent_escaped_file_url_names_the_decoded_directory() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/b%C3%A4nk%20pct", dir.path().display());
    let out = cli(dir.path(), &[], &["--bank", &url, "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.path().join("bänk pct/banklease.json").is_file());
    assert!(!dir.path().join("b%C3%A4nk%20pct").exists());
    // Messages name the bank by a URL that can be pasted back.
    let out = cli(
        dir.path(),
        &[],
        &["--bank", &url.replace("pct", "typo"), "lease", "list"],
    );
    let err = text(&out.stderr);
    assert!(err.contains("b%C3%A4nk%20typo init`"), "{err}");
}

/// Every directory under `root` that holds nothing (the staging directory aside).
fn empty_dirs(root: &Path) -> Vec<String> {
    let mut empty = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            entries += 1;
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            }
        }
        let name = dir.strip_prefix(root).unwrap().display().to_string();
        if entries == 0 && dir != root && name != "_banklease/staging" {
            empty.push(name);
        }
    }
    empty.sort();
    empty
}

/// A `file:` bank keeps no empty directory behind what it removed — doctor's
/// scratch keys, a completed checkpoint's protecting marker, a lock's queue.
#[test]
fn a_file_bank_leaves_no_empty_directories_behind() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = format!("file://{}", bank.display());
    let ok = |args: &[&str]| {
        let mut all = vec!["--bank", url.as_str()];
        all.extend_from_slice(args);
        let out = cli(
            dir.path(),
            &[("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")],
            &all,
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    };
    ok(&["init"]);
    ok(&["doctor", "--race-rounds", "2"]);
    let job = format!(
        "{BIN} agent checkpoint create cp-1 && {BIN} agent checkpoint complete cp-1 available"
    );
    ok(&["run", "--", "sh", "-c", &job]);
    ok(&["lock", "run", "-n", "jobs/nightly", "--", "true"]);
    assert_eq!(empty_dirs(&bank), Vec::<String>::new());
}

/// A URL whose scheme is misspelt or has one slash too few (`s3:/bucket`, `fiel:///…`, `S3://`)
/// is refused by every command with the URL it probably meant.
#[test]
fn a_misspelt_scheme_gets_a_did_you_mean() {
    let dir = tempfile::tempdir().unwrap();
    for (url, meant) in [
        ("s3:/bucket/prefix", "s3://bucket/prefix"),
        ("fiel:///srv/bank", "file:///srv/bank"),
        ("S3://bucket", "s3://bucket"),
        ("swift:/container", "swift://container"),
        ("file//srv/bank", "file:///srv/bank"),
        ("gcs://bucket", "gs://bucket"),
    ] {
        let wrong = refusals(dir.path(), url, &[&format!("did you mean `{meant}`?")]);
        assert!(wrong.is_empty(), "{url}:\n{}", wrong.join("\n"));
    }
}

/// A lock key written as the lock file it replaces gets a hint, not only the rule it breaks.
#[test]
fn a_key_written_as_a_lock_file_gets_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let url = banklease_testkit::file_bank(&dir.path().join("bank"));
    for args in [
        &["lock", "run", "/var/lock/backup.lock", "--", "true"][..],
        &["run", "--lock", "/var/lock/backup.lock", "--", "true"],
        &[
            "lock",
            "acquire",
            "/var/lock/backup.lock",
            "--duration",
            "1m",
        ],
    ] {
        let mut all = vec!["--bank", url.as_str()];
        all.extend_from_slice(args);
        let out = cli(dir.path(), &[], &all);
        let err = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("not a lock file"), "{args:?}: {err}");
        assert!(err.contains("`var/lock/backup`"), "{args:?}: {err}");
    }
}

/// A valid key that ends in `.lock` (`flock backup.lock …` rewritten) is taken as given, and one
/// `note:` line says that it names another lock than the key without `.lock`.
#[test]
fn a_valid_key_ending_in_dot_lock_is_taken_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let url = banklease_testkit::file_bank(&dir.path().join("bank"));
    for args in [
        &["lock", "run", "backup.lock", "--", "true"][..],
        &["run", "--lock", "backup.lock", "--", "true"],
        &["lock", "show", "backup.lock"],
    ] {
        let mut all = vec!["--bank", url.as_str()];
        all.extend_from_slice(args);
        let out = cli(dir.path(), &[], &all);
        let err = text(&out.stderr);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{args:?}: {err}");
        assert_eq!(
            err,
            "note: lock key `backup.lock` ends in `.lock`: a key names a lock, not a lock file; \
             it is taken as given, and a job that writes `backup` holds another lock\n",
            "{args:?}"
        );
    }
}
