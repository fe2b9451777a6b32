//! `banklease doctor` on a `file:` bank says what file system it is on and what that means for
//! the store's clock, and names every link planted in the bank (kept, never followed).

#![allow(clippy::disallowed_methods)] // real processes on real files

mod common;

use common::{cli, dead_owner_bank, text};

#[test]
fn doctor_names_the_file_system_and_every_link_in_a_file_bank() {
    let dir = tempfile::tempdir().unwrap();
    let url = dead_owner_bank(dir.path(), &["cp-1"]);
    let bank = dir.path().join("bank");
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "not the bank's").unwrap();
    let link = bank.join("checkpoints/cp-1/data/planted");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&outside, &link).unwrap();

    let out = cli(&url, &["--json", "doctor"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(report["file_system"]["network"], false, "{report}");
    assert_eq!(report["file_system"]["kind"], "local", "{report}");
    assert!(
        report["file_system"]["means"]
            .as_str()
            .is_some_and(|m| m.contains("this host's clock")),
        "{report}"
    );
    let links = report["links"].as_array().unwrap();
    assert_eq!(links.len(), 1, "{report}");
    assert!(
        links[0]
            .as_str()
            .is_some_and(|l| l.contains("checkpoints/cp-1/data/planted")),
        "{report}"
    );

    let out = cli(&url, &["doctor"]);
    let said = text(&out.stdout);
    assert!(said.contains("file system: local"), "{said}");
    assert!(
        said.contains("kept and never followed (1)") && said.contains("planted"),
        "{said}"
    );
    // Looked at, never followed.
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "not the bank's");
}
