//! Becoming COMMAND: `banklease __exec --parent PID [--cgroup DIR] -- COMMAND…` (hidden), what
//! the guard starts in COMMAND's place, and the exec rules both it and an unguarded `run`
//! follow.
//!
//! Before it becomes COMMAND, it asks the kernel to kill it when the guard dies
//! (`PR_SET_PDEATHSIG`, kept across exec, but cleared when COMMAND execs a setuid or
//! file-capability program) — then checks the guard did not die before that — and joins
//! COMMAND's cgroup: from its first instruction, COMMAND is within the tree's reach (the guard's
//! descendants, and its cgroup).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use rustix::process::Signal;

use super::tree::Cgroup;
use super::{EXIT_CANNOT_EXECUTE, EXIT_HOLD_LOST, EXIT_NOT_FOUND, EXIT_RUN_FAILED};
use crate::Outcome;

/// `banklease __exec`: never returns but on failure, reported on stderr in one line.
pub fn run(parent: i32, cgroup: Option<PathBuf>, argv: &[OsString]) -> Outcome {
    let failed = |code: u8, e: anyhow::Error| {
        eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
        Outcome::Exit(code)
    };
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        return failed(
            EXIT_RUN_FAILED,
            anyhow::Error::new(e).context("cannot ask to die with COMMAND's guard"),
        );
    }
    // The guard died before the death signal was asked for: COMMAND must not run unguarded.
    let parent_now = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    if parent_now != parent {
        return Outcome::Exit(EXIT_HOLD_LOST);
    }
    if let Some(dir) = cgroup {
        if let Err(e) = Cgroup::at(dir).join() {
            return failed(
                EXIT_RUN_FAILED,
                e.context(
                    "COMMAND was not started (BANKLEASE_TREE=subreaper runs without a cgroup)",
                ),
            );
        }
    }
    let Some((program, rest)) = argv.split_first() else {
        return failed(EXIT_RUN_FAILED, anyhow::anyhow!("no COMMAND to run"));
    };
    let e = std::process::Command::new(program).args(rest).exec();
    let e = if e.raw_os_error() == Some(rustix::io::Errno::NOEXEC.raw_os_error()) {
        // No `#!` line: run it with /bin/sh, as execvp(3) and flock(1) do.
        let script = resolve(program).unwrap_or_else(|| program.into());
        std::process::Command::new("/bin/sh")
            .arg(script)
            .args(rest)
            .exec()
    } else {
        e
    };
    let (code, e) = cannot_start(program, e);
    failed(code, e)
}

/// The exit status and error for a COMMAND that could not be started: 127 not found, 126
/// cannot be executed, 125 otherwise.
pub fn cannot_start(program: &OsStr, e: std::io::Error) -> (u8, anyhow::Error) {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        std::io::ErrorKind::PermissionDenied => EXIT_CANNOT_EXECUTE,
        _ => EXIT_RUN_FAILED,
    };
    let shown = program.to_string_lossy();
    (
        code,
        anyhow::Error::new(e).context(format!("cannot start COMMAND=`{shown}`")),
    )
}

/// Where `program` is: itself when it names a path, else the first executable file of that
/// name in `PATH` (the search the failed exec made).
pub fn resolve(program: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(program.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
