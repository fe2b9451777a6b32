//! The admin CLI as an operator meets it: which window `validity-check` judges with, warnings
//! about windows no observer can judge, and logs without colour escapes where no person reads.

#![allow(clippy::disallowed_methods)] // real processes on real time

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use banklease::clock::{Jitter, SystemClock};
use banklease::{Bank, LeaseWindows, OwnerId, OwnerLease};

use common::BIN;

/// `banklease --bank url args` with only the given `BANKLEASE_*` variables.
fn cli(url: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = common::bare();
    cmd.args(["--bank", url]).args(args).env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A live owner with short windows (renew 300 ms, expire 2 s, validity 100 ms), kept renewed
/// on its own runtime for as long as the returned guard lives.
fn short_window_owner(url: &str) -> (tokio::runtime::Runtime, OwnerId) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bank = Bank::open(url).unwrap();
    let owner = OwnerId::random();
    let windows = LeaseWindows::new(
        Duration::from_millis(300),
        Duration::from_secs(2),
        Duration::from_millis(100),
    )
    .unwrap();
    let lease = rt
        .block_on(OwnerLease::acquire(
            &bank,
            owner.clone(),
            windows,
            Arc::new(SystemClock),
        ))
        .unwrap();
    let keeper = rt.block_on(async { lease.spawn_keeper(Jitter::seeded(1), 0.0) });
    std::mem::forget(keeper); // renews until the runtime is dropped
    (rt, owner)
}

#[test]
fn validity_check_judges_with_the_owners_declared_window_and_says_so() {
    let (_dir, url) = made_bank();
    let (_owner_runtime, owner) = short_window_owner(&url);
    // The admin's configuration keeps its defaults (validity window 1m40s): it describes the
    // admin's own owners, not this one. A small margin, as a file bank allows.
    let env = [("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")];
    let out = cli(&url, &env, &["validity-check", "--owner", owner.as_str()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("the owner's validity window 100ms"),
        "{stdout}"
    );
    let out = cli(
        &url,
        &env,
        &["--json", "validity-check", "--owner", owner.as_str()],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["validity_window_ms"], 100);
    assert_eq!(json["validity_window_source"], "the owner's");
    // An explicit window still wins.
    let out = cli(
        &url,
        &env,
        &[
            "validity-check",
            "--owner",
            owner.as_str(),
            "--validity-window",
            "1h",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("< --validity-window validity window 1h"));
}

#[test]
fn a_margin_no_observer_can_judge_under_is_warned_about_by_validity_check_config_and_doctor() {
    let (_dir, url) = made_bank();
    let (_owner_runtime, owner) = short_window_owner(&url);
    // The default margin (2 s) against the owner's 2 s expire window: never valid.
    let out = cli(&url, &[], &["validity-check", "--owner", owner.as_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no observer with skew_margin=`2s` can call this lease valid"),
        "{stderr}"
    );
    // The same windows in the admin's own configuration: warned at load, reported by doctor.
    let env = [
        ("BANKLEASE_LEASE__RENEW_WINDOW", "300ms"),
        ("BANKLEASE_LEASE__EXPIRE_WINDOW", "2s"),
        ("BANKLEASE_LEASE__VALIDITY_WINDOW", "100ms"),
    ];
    let out = cli(&url, &env, &["--json", "doctor", "--race-rounds", "1"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("lease.skew_margin=`2s` is not shorter"),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let warnings = json["config_warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("skew_margin")),
        "{json}"
    );
}

/// Without `-v` a warning is one plain `warning:` line; the log (`-v`) that goes to a file, a
/// pipe or journald carries no colour escapes; at a terminal it does, unless `NO_COLOR` is set.
#[test]
fn logs_are_coloured_only_at_a_terminal_without_no_color() {
    let (_dir, url) = made_bank();
    // A job that leaves a checkpoint protecting: `run` warns when it completes it as error.
    let job = [
        "run",
        "--",
        "sh",
        "-c",
        "banklease agent checkpoint create cp-1",
    ];
    let path = {
        let mut paths = vec![Path::new(BIN).parent().unwrap().to_path_buf()];
        paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap()));
        std::env::join_paths(paths).unwrap()
    };
    let windows = [
        ("BANKLEASE_LEASE__SKEW_MARGIN", "100ms"),
        ("PATH", path.to_str().unwrap()),
    ];
    let out = cli(&url, &windows, &job);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr,
        "warning: COMMAND exited with this checkpoint protecting: completed as error \
         checkpoint_id=`cp-1`\n"
    );
    let job = [
        "-v",
        "run",
        "--",
        "sh",
        "-c",
        "banklease agent checkpoint create cp-4",
    ];
    let out = cli(&url, &windows, &job);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("WARN"), "a warning is logged: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "no escapes into a pipe: {stderr:?}"
    );

    // At a terminal: script(1) runs the command on a pseudo-terminal.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("note: script(1) missing; the terminal half of this test is skipped");
        return;
    }
    let at_terminal = |no_color: Option<&str>| {
        let id = if no_color.is_some() { "cp-3" } else { "cp-2" };
        let line = format!(
            "'{BIN}' -v --bank '{url}' run -- sh -c 'banklease agent checkpoint create {id}' 2>&1"
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .env("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")
            .env("PATH", &path)
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stdout));
        text(&out.stdout)
    };
    let coloured = at_terminal(None);
    assert!(coloured.contains("WARN"), "{coloured}");
    assert!(
        coloured.contains('\u{1b}'),
        "colours at a terminal: {coloured:?}"
    );
    let plain = at_terminal(Some("1"));
    assert!(plain.contains("WARN"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR honoured: {plain:?}");
}

/// A URL where no bank is yet (`<tempdir>/bank`, not created).
fn file_bank() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("bank").display());
    (dir, url)
}

/// A bank made as an operator makes one: `banklease --bank URL init`.
fn made_bank() -> (tempfile::TempDir, String) {
    let (dir, url) = file_bank();
    let out = cli(&url, &[], &["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    (dir, url)
}

#[test]
fn init_creates_adopts_or_refuses_and_says_which() {
    let (dir, url) = file_bank();
    let env = [("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")];
    let out = cli(&url, &env, &["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("bank created: "),
        "{}",
        text(&out.stdout)
    );
    let descriptor: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("bank/banklease.json")).unwrap())
            .unwrap();
    assert_eq!(descriptor["layout"], 1);
    assert!(descriptor["created_by"]
        .as_str()
        .unwrap()
        .starts_with("banklease "));
    let out = cli(&url, &env, &["--json", "init", "--create-container"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "already");

    // A bank made before `init` existed (a lease in it, no descriptor) is adopted.
    let (dir, url) = made_bank();
    let (_owner_runtime, _owner) = short_window_owner(&url);
    std::fs::remove_file(dir.path().join("bank/banklease.json")).unwrap();
    let out = cli(&url, &env, &["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("adopted"),
        "{}",
        text(&out.stdout)
    );
    assert!(dir.path().join("bank/banklease.json").exists());

    // Anything else under the prefix: refused, nothing written.
    let (dir, url) = file_bank();
    std::fs::create_dir_all(dir.path().join("bank")).unwrap();
    std::fs::write(dir.path().join("bank/notes.txt"), "mine").unwrap();
    let out = cli(&url, &env, &["init"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("its prefix holds `notes.txt`, which is not a bank's"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.path().join("bank/banklease.json").exists());
}

#[test]
fn a_bank_in_an_unknown_layout_is_refused_by_every_command_and_left_untouched() {
    let (dir, url) = file_bank();
    let env = [("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")];
    assert_eq!(cli(&url, &env, &["init"]).status.code(), Some(0));
    let descriptor = dir.path().join("bank/banklease.json");
    std::fs::write(
        &descriptor,
        r#"{"format":1,"layout":99,"created_by":"banklease 9.0.0","created_at":"2030-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    let before = list_files(&dir.path().join("bank"));
    let says = "is in layout 99 (written by banklease 9.0.0), which this banklease";
    for args in [
        &["lease", "list"][..],
        &["checkpoint", "list"],
        &["validity-check", "--owner", "o1"],
        &["gc"],
        &["doctor"],
        &["lock", "list"],
        &["init"],
    ] {
        let out = cli(&url, &env, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(says) && stderr.contains("knows layout 1"),
            "{args:?}: {stderr}"
        );
    }
    let out = cli(&url, &env, &["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(says));
    assert_eq!(
        list_files(&dir.path().join("bank")),
        before,
        "nothing written"
    );
}

fn list_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Each message names what is at fault, once.
#[test]
fn messages_name_the_keys_at_fault_once() {
    let (dir, url) = made_bank();
    // A bad [gc] lease window names [gc]'s keys, not [lease]'s.
    let out = cli(
        &url,
        &[("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", "5s")],
        &["lease", "list"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("gc.lease_expire_window"), "{err}");
    assert!(!err.contains("[lease]"), "{err}");
    // The windows' warning is said once, though the configuration and the lease both check it.
    let out = cli(
        &url,
        &[
            ("BANKLEASE_LEASE__EXPIRE_WINDOW", "3m"),
            ("BANKLEASE_LEASE__SKEW_MARGIN", "100ms"),
        ],
        &["run", "--", "true"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("less than 2 × renew_window").count(),
        1,
        "{err}"
    );
    // A bad argument is not "invalid configuration".
    let out = cli(&url, &[], &["checkpoint", "list", "--status", "bogus"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown checkpoint status `bogus`"), "{err}");
    assert!(!err.contains("invalid configuration"), "{err}");
    // A later layout's descriptor, whatever fields it has, is a layout this release does not
    // know — not a corrupt object.
    std::fs::write(dir.path().join("bank/banklease.json"), r#"{"layout": 99}"#).unwrap();
    let out = cli(&url, &[], &["lease", "list"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is in layout 99"), "{err}");
    assert!(!err.contains("corrupt"), "{err}");
}

/// Tables show generated ids by their shortest unique prefix (at least 12 characters,
/// as git shows commits), `lease show` takes such a prefix, `--json` keeps full ids.
#[test]
fn tables_show_short_ids_that_lease_show_takes_back() {
    let (_dir, url) = made_bank();
    let (_a, a) = short_window_owner(&url);
    let (_b, b) = short_window_owner(&url);
    let env = [("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")];
    let out = cli(&url, &env, &["lease", "list"]);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    for owner in [&a, &b] {
        let full = owner.as_str();
        assert!(full.len() >= 32, "a generated id: {full}");
        assert!(
            !table.contains(full),
            "the full id is not in the table: {table}"
        );
        let shown = table
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap())
            .find(|id| full.starts_with(id))
            .unwrap_or_else(|| panic!("{full} not shown: {table}"));
        assert!((12..=16).contains(&shown.len()), "{shown}");
        let out = cli(&url, &env, &["lease", "show", shown]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(full), "{}", text(&out.stdout));
        // A judgement takes a shown id too, and judges the owner it names, by its full id —
        // never "no lease" (which a monitoring script would read as a dead owner).
        let out = cli(&url, &env, &["validity-check", "--owner", shown]);
        let stdout = text(&out.stdout);
        assert_ne!(out.status.code(), Some(2), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains(&format!("owner_id=`{full}`")), "{stdout}");
        assert!(!stdout.contains("no lease"), "{stdout}");
    }
    let out = cli(&url, &env, &["--json", "lease", "list"]);
    assert!(text(&out.stdout).contains(a.as_str()));
    // A prefix both share is refused, naming both.
    let common: String = a
        .as_str()
        .chars()
        .zip(b.as_str().chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    if !common.is_empty() {
        let out = cli(&url, &env, &["lease", "show", &common]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains("is ambiguous"),
            "{}",
            text(&out.stderr)
        );
    }
}

/// Each owner's declarations as the gc judges them: `lease show` prints the retry budget its
/// store client declared and the grace its checkpoints get, `doctor` each owner's.
#[test]
fn lease_show_and_doctor_print_what_each_owner_declared() {
    let (_dir, url) = made_bank();
    let (_owner_runtime, owner) = short_window_owner(&url);
    let env = [("BANKLEASE_LEASE__SKEW_MARGIN", "100ms")];
    let out = cli(&url, &env, &["lease", "show", owner.as_str()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    // A file: bank has no store client: nothing to retry, nothing to wait for.
    assert!(
        stdout.contains("retry_budget") && stdout.contains("0s (declared by its store client)"),
        "{stdout}"
    );
    let out = cli(&url, &env, &["--json", "lease", "show", owner.as_str()]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["retry_budget_ms"], 0, "{json}");
    assert_eq!(json["grace_ms"], 600_000, "gc.grace's default: {json}");

    let out = cli(&url, &env, &["--json", "doctor", "--race-rounds", "1"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let owners = json["owners"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{json}");
    assert_eq!(owners[0]["owner_id"], owner.as_str());
    assert_eq!(owners[0]["retry_budget_ms"], 0);
    assert_eq!(owners[0]["grace_ms"], 600_000);
    let out = cli(&url, &env, &["doctor", "--race-rounds", "1"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "owner {owner}: declares a 0s retry budget; grace 10m"
        )),
        "{stdout}"
    );
}
