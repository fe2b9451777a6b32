//! What an installation ships besides the binaries, checked as an operator meets it: the script
//! `banklease completions SHELL` prints loads in bash and completes subcommands, and the
//! packaging step (`banklease __share DIR`) writes a man page for every subcommand `--help`
//! lists and the completion scripts of both binaries where Debian's shells look.

#![allow(clippy::disallowed_methods)] // the shared helpers time real processes

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{text, BIN};

fn banklease(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("BANKLEASE_CONFIG")
        .env_remove("BANKLEASE_BANK")
        .output()
        .unwrap()
}

/// What bash's completion offers for `words` (the last one being completed) with `script`
/// loaded, as one sorted line each: the function `complete -p` names for the command is called
/// as readline calls it.
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let command = words[0];
    let line = words.join(" ");
    let program = format!(
        r#"set -e
source "$1"
fn=$(complete -p {command} | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
[ -n "$fn" ] || {{ echo "no completion function for {command}" >&2; exit 3; }}
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE='{line}'
COMP_POINT=${{#COMP_LINE}}
"$fn" {command} '{last}' '{previous}'
printf '%s\n' "${{COMPREPLY[@]}}""#,
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
        last = words[words.len() - 1],
        previous = words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program, "bash"])
        .arg(script)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash could not complete {words:?} with {}: {}",
        script.display(),
        text(&out.stderr)
    );
    let mut offered: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    offered.sort();
    offered
}

#[test]
fn the_bash_completion_script_loads_and_completes_subcommands() {
    let out = banklease(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("banklease");
    std::fs::write(&script, &out.stdout).unwrap();

    assert_eq!(bash_completes(&script, &["banklease", "lo"]), ["lock"]);
    assert_eq!(
        bash_completes(&script, &["banklease", "lock", "r"]),
        ["release", "run"]
    );
    let first = bash_completes(&script, &["banklease", ""]);
    for sub in [
        "checkpoint",
        "completions",
        "gc",
        "lease",
        "run",
        "validity-check",
    ] {
        assert!(first.contains(&sub.to_owned()), "{sub} not in {first:?}");
    }
    // Internal subcommands are not offered.
    assert!(
        first.iter().all(|w| !w.starts_with("__")),
        "hidden subcommands offered: {first:?}"
    );
}

#[test]
fn zsh_and_fish_scripts_name_the_subcommands() {
    for (shell, marker) in [
        ("zsh", "#compdef banklease"),
        ("fish", "complete -c banklease"),
    ] {
        let out = banklease(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("validity-check"), "{shell}: {script}");
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let out = banklease(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("invalid value 'tcsh'") && stderr.contains("bash"),
        "{stderr}"
    );
}

/// Every subcommand path below `path` that `banklease PATH --help` lists, `help` left out.
fn listed_subcommands(path: &[String]) -> Vec<Vec<String>> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let out = banklease(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        text(&out.stderr)
    );
    let help = text(&out.stdout);
    let mut found = Vec::new();
    let Some((_, listing)) = help.split_once("Commands:\n") else {
        return found;
    };
    for line in listing.lines().take_while(|l| !l.trim().is_empty()) {
        // A command's line is indented by two; a wrapped description by more.
        let Some(name) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) else {
            continue;
        };
        let name = name.split_whitespace().next().unwrap().to_owned();
        if name == "help" {
            continue;
        }
        let mut sub = path.to_vec();
        sub.push(name);
        found.extend(listed_subcommands(&sub));
        found.push(sub);
    }
    found
}

#[test]
fn the_packaging_step_writes_a_man_page_per_subcommand_and_both_binaries_completions() {
    let dir = tempfile::tempdir().unwrap();
    let share = dir.path().join("share");
    let out = banklease(&["__share", share.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let man = share.join("man/man1");
    let subcommands = listed_subcommands(&[]);
    assert!(
        subcommands.contains(&vec!["lock".to_owned(), "run".to_owned()]),
        "{subcommands:?}"
    );
    let mut pages = vec![("banklease".to_owned(), Vec::new())];
    pages.extend(
        subcommands
            .into_iter()
            .map(|path| (format!("banklease-{}", path.join("-")), path)),
    );
    for (title, path) in &pages {
        let file = man.join(format!("{title}.1"));
        let page = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("no man page for {path:?} at {}: {e}", file.display()));
        assert!(
            page.lines()
                .any(|l| l.starts_with(&format!(".TH {title} 1 "))),
            "{title}: {page}"
        );
    }
    let written: Vec<String> = std::fs::read_dir(&man)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        written.len(),
        pages.len(),
        "pages for hidden commands? {written:?}"
    );
    // `banklease gc` has banklease-gc(1); the daemon's page is in section 8, for daemons.
    let pass_page = std::fs::read_to_string(man.join("banklease-gc.1")).unwrap();
    assert!(pass_page.contains("beside\\-daemon"), "{pass_page}");
    assert!(!pass_page.contains("metrics"), "{pass_page}");
    let daemon_page = std::fs::read_to_string(share.join("man/man8/banklease-gc.8")).unwrap();
    assert!(
        daemon_page.contains(".TH banklease-gc 8 ") && daemon_page.contains("metrics\\-addr"),
        "{daemon_page}"
    );

    for name in ["banklease", "banklease-gc"] {
        for file in [
            format!("bash-completion/completions/{name}"),
            format!("zsh/vendor-completions/_{name}"),
            format!("fish/vendor_completions.d/{name}.fish"),
        ] {
            let script = std::fs::read_to_string(share.join(&file))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(script.contains(name), "{file}: {script}");
        }
    }
    let gc_bash = share.join("bash-completion/completions/banklease-gc");
    assert_eq!(
        bash_completes(&gc_bash, &["banklease-gc", "--on"]),
        ["--once"]
    );
}

/// For an operator who installed with `cargo install`: `banklease man DIR` writes the man pages
/// of both binaries below DIR (`man1`, `man8`), so that `MANPATH=DIR man banklease-lock-run`
/// finds them; nothing else is written there.
#[test]
fn banklease_man_writes_both_binaries_pages_for_manpath() {
    let dir = tempfile::tempdir().unwrap();
    let out = banklease(&["man", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for page in [
        "man1/banklease.1",
        "man1/banklease-lock-run.1",
        "man1/banklease-gc.1",
        "man8/banklease-gc.8",
    ] {
        assert!(dir.path().join(page).is_file(), "{page} missing");
    }
    let mut top: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["man1", "man8"], "only the man sections");
    // The page says where it came from: `banklease man` is listed by `--help`.
    let help = text(&banklease(&["--help"]).stdout);
    assert!(help.contains("man "), "{help}");
}

/// `banklease-gc completions SHELL` prints the daemon's completion script, as `banklease
/// completions` does for the CLI; it needs no bank or configuration.
#[test]
fn banklease_gc_prints_its_completions() {
    let out = Command::new(common::gc_bin())
        .args(["completions", "bash"])
        .env_remove("BANKLEASE_CONFIG")
        .env_remove("BANKLEASE_BANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    assert!(script.contains("--once"), "{script}");
    assert!(script.contains("banklease-gc"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("banklease-gc");
    std::fs::write(&path, &script).unwrap();
    assert_eq!(
        bash_completes(&path, &["banklease-gc", "--on"]),
        ["--once"],
        "bash completes from the printed script"
    );
}
