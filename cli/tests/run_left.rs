//! Plain `run` (no `--lock`) holds COMMAND's process group only while COMMAND runs: what
//! COMMAND leaves running in it as it exits is not stopped, and `run` says so in one `note:`
//! (`run --lock` and `lock run` stop it: tests/leftovers.rs).

#![allow(clippy::disallowed_methods)] // real processes

mod common;

use common::output_text as text;
use common::work::Env;

#[test]
fn plain_run_names_what_its_command_left_running() {
    let env = Env::new();
    let out = env.run(&[
        "run",
        "--",
        "sh",
        "-c",
        r#"sleep 300 >/dev/null 2>&1 & echo $! > "$WORK/left.pid""#,
    ]);
    let all = text(&out);
    let left: i32 = env
        .read("left.pid")
        .trim()
        .parse()
        .expect("the pid COMMAND left");
    let still = rustix::process::Pid::from_raw(left)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
    // Not stopped: plain `run` holds the group only while COMMAND runs.
    if let Some(p) = rustix::process::Pid::from_raw(left) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(still, "the process COMMAND left was stopped: {all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{all}");
    assert!(
        notes[0].contains(&format!("pid {left} `sleep`")) && notes[0].contains("run --lock"),
        "{all}"
    );
    // A COMMAND that leaves nothing: no note.
    let out = env.run(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("note:"),
        "{}",
        text(&out)
    );
}
