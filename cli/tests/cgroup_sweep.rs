//! Cgroups left behind by supervisors killed before they could remove them are swept by the
//! next `lock run` on the host, judged by what is in them: nested ones too, and those whose
//! name cannot say whether their supervisor lives (another pid namespace's, where pid 1 is a
//! supervisor; an older version's).

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::output_text as text;
use common::work::Env;

/// The directory `lock run` makes its cgroups in on this host (`None` without one).
fn cgroup_parent(env: &Env) -> Option<PathBuf> {
    let out = env.run(&["lock", "run", "--verbose", "probe", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let dir = err.split("held by cgroup `").nth(1)?.split('`').next()?;
    Some(Path::new(dir).parent()?.to_owned())
}

/// An empty cgroup at `dir`, modified `age` ago (`touch -d`).
fn leftover(dir: &Path, age: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    if let Some(age) = age {
        let touched = Command::new("touch")
            .arg("-d")
            .arg(age)
            .arg(dir)
            .status()
            .unwrap();
        assert!(touched.success());
    }
}

/// Before, only a cgroup named by a pid that no longer exists here was removed, and only at the
/// top: `banklease-1-…` (a supervisor that was pid 1 of its own pid namespace: pid 1 always
/// exists on the host) accumulated, and so did a nested `lock run`'s cgroup inside its outer
/// one's (a cgroup with a child cannot be removed).
#[test]
fn leftover_cgroups_are_swept_by_what_is_in_them() {
    let env = Env::new();
    let Some(parent) = cgroup_parent(&env) else {
        eprintln!("skipped: this host delegates no cgroup");
        return;
    };
    let named_pid_1 = parent.join("banklease-1-0badc0de");
    let outer = parent.join("banklease-999999999-0badc0de");
    let nested = outer.join("banklease-999999998-0badc0de");
    let foreign_old = parent.join("banklease-1.1-0badc0de");
    let foreign_fresh = parent.join("banklease-2.1-0badc0de");
    leftover(&named_pid_1, Some("2 hours ago"));
    leftover(&nested, Some("2 hours ago"));
    leftover(&outer, Some("2 hours ago"));
    leftover(&foreign_old, Some("2 hours ago"));
    // Just made, maybe by a live supervisor in another pid namespace whose COMMAND is about to
    // join it: kept.
    leftover(&foreign_fresh, None);

    let out = env.run(&["lock", "run", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let left: Vec<&PathBuf> = [&named_pid_1, &nested, &outer, &foreign_old]
        .into_iter()
        .filter(|d| d.exists())
        .collect();
    let kept = foreign_fresh.exists();
    // Whatever happened, leave nothing behind.
    for dir in [&nested, &outer, &named_pid_1, &foreign_old, &foreign_fresh] {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(kept, "a cgroup made moments ago was removed");
}
