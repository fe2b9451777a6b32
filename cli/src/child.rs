//! COMMAND under a hold: start it in a process group of its own, forward signals to the group,
//! and stop it (SIGTERM, then SIGKILL) when the hold it runs under stops being valid.
//!
//! Shared by `banklease run` (an owner lease) and `banklease lock run` (a named lock): the two
//! differ only in what they hold, given to [`watch`] as the future that completes when the hold
//! can no longer be proved.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use banklease::clock::SharedClock;
use banklease::LeaseState;
use rustix::process::{Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};

use crate::human;

/// The hold stopped being valid and COMMAND was stopped (EX_TEMPFAIL: try again later).
pub const EXIT_HOLD_LOST: u8 = 75;
/// The supervisor itself failed: bad configuration, no lease or lock, no socket (as `env`,
/// `timeout`).
pub const EXIT_RUN_FAILED: u8 = 125;
/// COMMAND was found but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// COMMAND was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// How COMMAND ended.
#[derive(Debug)]
pub enum Ended {
    /// COMMAND exited on its own (or by a signal it was sent by someone else).
    Exited(ExitStatus),
    /// The hold stopped being valid and COMMAND was stopped.
    Stopped { status: ExitStatus, reason: String },
}

/// SIGTERM, SIGINT and SIGHUP, taken over from the default action (which would end the
/// supervisor with its hold kept).
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// A signal received and not yet handled, if any (without waiting).
    pub fn pending(&mut self) -> Option<i32> {
        use futures::FutureExt;
        [
            (self.term.recv().now_or_never(), Signal::TERM),
            (self.int.recv().now_or_never(), Signal::INT),
            (self.hup.recv().now_or_never(), Signal::HUP),
        ]
        .into_iter()
        .find_map(|(got, signal)| got.flatten().map(|()| signal.as_raw()))
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::TERM,
            _ = self.int.recv() => Signal::INT,
            _ = self.hup.recv() => Signal::HUP,
        }
    }
}

/// COMMAND, and the guard that kills its group if the supervisor dies.
#[derive(Debug)]
pub struct Running {
    child: tokio::process::Child,
    guard: Option<tokio::process::Child>,
}

/// How often a guard looks whether its supervisor is still there.
const GUARD_POLL: Duration = Duration::from_millis(50);

/// Start COMMAND (`argv`) with `env` added, in a process group of its own; on failure, the exit
/// status to use (127 not found, 126 cannot be executed, 125 otherwise) and why.
///
/// With `guarded`, a guard (`banklease __guard`, this binary) joins COMMAND's group and kills
/// the group with SIGKILL as soon as this process is gone: a supervisor killed outright must
/// not leave COMMAND running without the lock it ran under. The guard ignores the signals
/// forwarded to the group, and is killed when COMMAND exits.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, OsString)],
    guarded: bool,
) -> Result<Running, (u8, anyhow::Error)> {
    let child = spawn_command(argv, env)?;
    let guard = if guarded {
        let failed = |e: anyhow::Error| (EXIT_RUN_FAILED, e);
        match spawn_guard(&child) {
            Ok(guard) => Some(guard),
            Err(e) => {
                let mut child = child;
                // Not run unguarded: stopped at once (it has barely started).
                if let Some(group) = child.id().and_then(|p| Pid::from_raw(p as i32)) {
                    send(group, Signal::KILL);
                }
                let _ = child.start_kill();
                return Err(failed(e));
            }
        }
    } else {
        None
    };
    Ok(Running { child, guard })
}

fn spawn_guard(child: &tokio::process::Child) -> Result<tokio::process::Child> {
    let group = child
        .id()
        .context("COMMAND exited before it could be guarded")?;
    let me = std::env::current_exe().context("cannot find this binary to start its guard")?;
    tokio::process::Command::new(me)
        .args(["__guard", "--parent"])
        .arg(std::process::id().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .process_group(i32::try_from(group).context("pid out of range")?)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the guard of COMMAND's process group")
}

/// `banklease __guard --parent PID` (hidden): in COMMAND's process group, kill the group when
/// PID is no longer this process's parent (it died and this process was re-parented).
pub async fn guard(parent: i32, clock: &SharedClock) -> crate::Outcome {
    // The group's forwarded signals are COMMAND's, not ours.
    let _ignored = Signals::new();
    let group = rustix::process::getpgrp();
    loop {
        let parent_now = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        if parent_now != parent {
            send(group, Signal::KILL);
            return crate::Outcome::Exit(EXIT_HOLD_LOST);
        }
        clock.sleep(GUARD_POLL).await;
    }
}

fn spawn_command(
    argv: &[OsString],
    env: &[(&str, OsString)],
) -> Result<tokio::process::Child, (u8, anyhow::Error)> {
    let (program, rest) = argv.split_first().expect("clap requires COMMAND");
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        // A group of its own: signals reach every process of a shell pipeline, and a terminal's
        // ^C reaches COMMAND once (forwarded), not twice.
        .process_group(0);
    let spawned = match command.spawn() {
        // No `#!` line: run it with /bin/sh, as execvp(3) and flock(1) do.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOEXEC.raw_os_error()) => {
            let script = resolve(program).unwrap_or_else(|| program.into());
            let mut sh = tokio::process::Command::new("/bin/sh");
            sh.arg(script)
                .args(rest)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .process_group(0);
            sh.spawn()
        }
        spawned => spawned,
    };
    spawned.map_err(|e| {
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
    })
}

/// Where `program` is: itself when it names a path, else the first executable file of that
/// name in `PATH` (the search the failed exec made).
fn resolve(program: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
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

/// Wait for COMMAND; forward signals to its group; when `lost` completes (with the reason),
/// send the group SIGTERM, then SIGKILL after `kill_after`.
pub async fn watch(
    running: Running,
    lost: impl Future<Output = String>,
    clock: &SharedClock,
    signals: &mut Signals,
    kill_after: Duration,
) -> Result<Ended> {
    let Running { child, guard } = running;
    let ended = watch_child(child, lost, clock, signals, kill_after).await;
    if let Some(mut guard) = guard {
        // COMMAND is gone: the guard's work is done.
        let _ = guard.start_kill();
        let _ = guard.wait().await;
    }
    ended
}

async fn watch_child(
    mut child: tokio::process::Child,
    lost: impl Future<Output = String>,
    clock: &SharedClock,
    signals: &mut Signals,
    kill_after: Duration,
) -> Result<Ended> {
    let pid = child
        .id()
        .context("COMMAND exited before it could be watched")?;
    let group = Pid::from_raw(i32::try_from(pid).context("pid out of range")?)
        .context("COMMAND has pid 0")?;
    tokio::pin!(lost);
    let mut stopping: Option<String> = None;
    // On the holder's clock, which counts time the host was suspended; checked at least once a
    // second.
    let mut kill_at: Option<Instant> = None;
    loop {
        let kill_wait = kill_at.map(|at| {
            at.saturating_duration_since(clock.now())
                .min(Duration::from_secs(1))
        });
        tokio::select! {
            status = child.wait() => {
                let status = match status {
                    Ok(s) => s,
                    Err(e) => {
                        // COMMAND cannot be watched: it must not run on without its hold.
                        send(group, Signal::KILL);
                        return Err(anyhow::Error::new(e).context("cannot wait for COMMAND; it was killed"));
                    }
                };
                return Ok(match stopping {
                    Some(reason) => {
                        // Members of its group that ignored SIGTERM go too, before the hold can
                        // expire (the group outlives its leader while any member lives).
                        if kill_at.is_some() {
                            send(group, Signal::KILL);
                        }
                        Ended::Stopped { status, reason }
                    }
                    None => Ended::Exited(status),
                });
            }
            signal = signals.recv() => send(group, signal),
            reason = &mut lost, if stopping.is_none() => {
                tracing::warn!(reason = %reason, kill_after = %human(kill_after),
                    "the hold stopped being valid: stopping COMMAND (SIGTERM now, SIGKILL after kill_after)");
                send(group, Signal::TERM);
                kill_at = Some(clock.now() + kill_after);
                stopping = Some(reason);
            }
            () = clock.sleep(kill_wait.unwrap_or_default()), if kill_wait.is_some() => {
                if kill_at.is_some_and(|at| clock.now() >= at) {
                    tracing::warn!("COMMAND outlived --kill-after: SIGKILL");
                    send(group, Signal::KILL);
                    kill_at = None;
                }
            }
        }
    }
}

/// Completes, with the reason, when a hold (an owner lease, a named lock) can no longer be
/// proved: Lost, released, or less than `margin` of it left on the holder's clock (send-time
/// expiry, never later than the store's), which then says `short`. Sends no request; wakes on
/// every change of state, when the margin would be reached, and at least once a second (the
/// holder's clock counts suspended time; tokio's timers do not).
pub async fn hold_ended(
    mut states: tokio::sync::watch::Receiver<LeaseState>,
    remaining: impl Fn() -> Duration,
    margin: Duration,
    short: &str,
    clock: &SharedClock,
) -> String {
    let mut watching = true;
    loop {
        let state = states.borrow_and_update().clone();
        match state {
            LeaseState::Lost { reason } => return format!("lost: {reason}"),
            LeaseState::Released => return "released".to_owned(),
            LeaseState::Held { .. } if remaining() < margin => return short.to_owned(),
            LeaseState::Held { .. } => {}
        }
        let until = remaining()
            .saturating_sub(margin)
            .min(Duration::from_secs(1))
            + Duration::from_millis(1);
        tokio::select! {
            changed = states.changed(), if watching => watching = changed.is_ok(),
            () = clock.sleep(until) => {}
        }
    }
}

fn send(group: Pid, signal: Signal) {
    match rustix::process::kill_process_group(group, signal) {
        Ok(()) => {}
        // The group is gone: COMMAND's exit is about to be seen.
        Err(rustix::io::Errno::SRCH) => {}
        Err(e) => {
            tracing::warn!(error = %e, signal = signal.as_raw(), "cannot signal COMMAND's process group")
        }
    }
}

/// A supervisor's exit status: its own, or [`EXIT_RUN_FAILED`] after reporting why it failed.
pub fn reported(result: Result<u8>) -> crate::Outcome {
    match result {
        Ok(code) => crate::Outcome::Exit(code),
        Err(e) => {
            eprintln!("error: {}", banklease_gc::logging::error_line(&e));
            crate::Outcome::Exit(EXIT_RUN_FAILED)
        }
    }
}

/// The exit status a supervisor passes on: COMMAND's code, or 128 + N for signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EXIT_RUN_FAILED),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(EXIT_RUN_FAILED),
        (None, None) => EXIT_RUN_FAILED,
    }
}

/// How COMMAND ended, for a message.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => status.to_string(),
    }
}
