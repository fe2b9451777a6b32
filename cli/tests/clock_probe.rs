//! The store-clock probes: one per host for its commands, rewritten in place by every command
//! that reads the store's clock, writing or reading, and one for its collectors (a pass's
//! reading is never made unverified by a command rewriting the commands' key).

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use std::path::Path;

use common::{bare, output_text};

/// The keys under `_banklease/clock/` of the bank in `dir`.
fn probes(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir.join("_banklease/clock")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.') && !name.contains('#'))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

/// A hundred writing commands on one host (locks run, GC passes, the owner leases of `run`)
/// leave two store-clock probes, this host's commands' and its collectors', each rewritten in
/// place. Before, each bank handle wrote `_banklease/clock/<random>`: 12 after six `lock run`
/// and six `gc`.
#[test]
fn a_hundred_writing_commands_on_one_host_leave_two_clock_probes() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = banklease_testkit::file_bank(&bank);
    let writes: [&[&str]; 5] = [
        &["lock", "run", "jobs/nightly", "--", "true"],
        &["gc"],
        &["lock", "run", "-n", "jobs/other", "--", "true"],
        &["run", "--lock", "jobs/third", "--", "true"],
        &["run", "--", "true"],
    ];
    for round in 0..20 {
        for args in writes {
            let out = bare()
                .args(["--bank", &url])
                .args(args)
                .env("USER", "tester")
                .env("NO_COLOR", "1")
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?} (round {round}): {}",
                output_text(&out)
            );
        }
    }
    let mut probes = probes(&bank);
    probes.sort();
    assert!(
        probes.len() == 2
            && probes[0].starts_with("host-")
            && probes[1] == format!("{}-gc", probes[0]),
        "100 writing commands left these clock probes: {probes:?}"
    );
}

/// A GC pass removes the probes of hosts that stopped using the bank (not rewritten for a day,
/// by the store's clock) and keeps the others, its host's two among them.
#[test]
fn a_gc_pass_removes_the_probes_of_hosts_gone_for_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    let url = banklease_testkit::file_bank(&bank);
    let clock = bank.join("_banklease/clock");
    std::fs::create_dir_all(&clock).unwrap();
    for (name, age) in [
        ("host-00000000000000aa", "25 hours ago"),
        ("0123456789abcdef0123456789abcdef", "3 days ago"), // an older release's
        ("host-00000000000000bb", "23 hours ago"),
    ] {
        let path = clock.join(name);
        std::fs::write(&path, b"probe").unwrap();
        let touch = std::process::Command::new("touch")
            .args(["-m", "-d", age])
            .arg(&path)
            .status()
            .unwrap();
        assert!(touch.success());
    }
    let out = bare()
        .args(["--bank", &url, "gc"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let mut left = probes(&bank);
    left.sort();
    assert_eq!(left.len(), 3, "{left:?}");
    assert_eq!(left[0], "host-00000000000000bb", "{left:?}");
    assert!(left[1].starts_with("host-"), "{left:?}");
    assert_eq!(left[2], format!("{}-gc", left[1]), "{left:?}");
}
