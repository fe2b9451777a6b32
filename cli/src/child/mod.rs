//! COMMAND under a hold: start it in a process group of its own, forward signals to the group,
//! and stop it (SIGTERM, then SIGKILL) when the hold it runs under stops being valid.
//!
//! Shared by `banklease run` (an owner lease) and `banklease lock run` (a named lock): the two
//! differ only in what they hold, given to [`watch`] as the future that completes when the hold
//! can no longer be proved and as the [`Proof`] the guard and job control use.
//!
//! Job control: a ^Z (SIGTSTP) to the supervisor stops COMMAND's group and then the supervisor;
//! continued (SIGCONT, `fg`), the supervisor re-proves every hold with a request sent then,
//! *before* it continues COMMAND, and when it cannot, kills the stopped group and exits 75.

mod guard;
mod proof;

pub use guard::run as guard;
pub use proof::Proof;

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

/// COMMAND, and the guard that stops its group when the supervisor can no longer.
#[derive(Debug)]
pub struct Running {
    child: tokio::process::Child,
    guard: Option<guard::Guard>,
    /// COMMAND's process group: the guard's pid when guarded (it leads the group), else
    /// COMMAND's.
    group: Pid,
}

impl Running {
    /// COMMAND's process group and COMMAND's pid (`None` once COMMAND was waited for).
    pub fn ids(&self) -> Option<(u32, u32)> {
        let group = self.group.as_raw_nonzero().get().unsigned_abs();
        Some((group, self.child.id()?))
    }

    /// After COMMAND's hold was released: stop the guard. Until then it has kept its last
    /// deadline for what COMMAND left running in the background (the group outlives its leader);
    /// dropped without this, it sees its stdin close and kills the whole group.
    pub async fn finish(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.stop().await;
        }
    }
}

/// Start COMMAND (`argv`) with `env` added, in a process group of its own; on failure, the exit
/// status to use (127 not found, 126 cannot be executed, 75 nothing left of the hold, 125
/// otherwise) and why.
///
/// With `guarded` (the proof COMMAND runs under, and `kill_after`), the guard (`banklease
/// __guard`, this binary; see [`guard`]) is started first, leading a new process group, and
/// COMMAND joins that group only once the guard says it is armed: no instant in which COMMAND
/// runs unguarded, nor one in which a signal forwarded to the group finds the guard without its
/// handlers. COMMAND is not started at all when its holds prove no time left.
pub async fn spawn(
    argv: &[OsString],
    env: &[(&str, OsString)],
    guarded: Option<(&Proof, Duration)>,
) -> Result<Running, (u8, anyhow::Error)> {
    let Some((proof, kill_after)) = guarded else {
        let child = spawn_command(argv, env, 0)?;
        let group = child
            .id()
            .and_then(|p| Pid::from_raw(i32::try_from(p).ok()?))
            .context("COMMAND exited before it could be watched")
            .map_err(|e| (EXIT_RUN_FAILED, e))?;
        return Ok(Running {
            child,
            guard: None,
            group,
        });
    };
    if proof.left().is_zero() {
        return Err((
            EXIT_HOLD_LOST,
            anyhow::anyhow!(
                "{}; COMMAND was not started",
                proof
                    .what_ran_out()
                    .unwrap_or_else(|| "nothing is held".to_owned())
            ),
        ));
    }
    let failed = |e: anyhow::Error| (EXIT_RUN_FAILED, e);
    let mut guard = guard::Guard::spawn(|| proof.left(), kill_after).map_err(failed)?;
    if let Err(e) = guard.armed().await {
        guard.stop().await;
        return Err(failed(e));
    }
    let group = guard.group();
    match spawn_command(argv, env, group.as_raw_nonzero().get()) {
        Ok(child) => Ok(Running {
            child,
            guard: Some(guard),
            group,
        }),
        Err(e) => {
            guard.stop().await;
            Err(e)
        }
    }
}

/// COMMAND in process group `group` (0: a new one it leads).
fn spawn_command(
    argv: &[OsString],
    env: &[(&str, OsString)],
    group: i32,
) -> Result<tokio::process::Child, (u8, anyhow::Error)> {
    let (program, rest) = argv.split_first().expect("clap requires COMMAND");
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        // A group of its own (with its guard): signals reach every process of a shell
        // pipeline, and a terminal's ^C reaches COMMAND once (forwarded), not twice.
        .process_group(group);
    let spawned = match command.spawn() {
        // No `#!` line: run it with /bin/sh, as execvp(3) and flock(1) do.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOEXEC.raw_os_error()) => {
            let script = resolve(program).unwrap_or_else(|| program.into());
            let mut sh = tokio::process::Command::new("/bin/sh");
            sh.arg(script)
                .args(rest)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .process_group(group);
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

/// How often the supervisor hands the guard the deadline its holds now prove.
const PROVE_EVERY: Duration = Duration::from_millis(200);

/// Wait for COMMAND; forward signals to its group; when `lost` completes (with the reason),
/// send the group SIGTERM, then SIGKILL after `kill_after`. Keeps the guard's deadline moving
/// with `proof`, and stops and continues COMMAND with this process (job control).
pub async fn watch(
    running: &mut Running,
    lost: impl Future<Output = String>,
    proof: &Proof,
    clock: &SharedClock,
    signals: &mut Signals,
    kill_after: Duration,
) -> Result<Ended> {
    let group = running.group;
    let jobs = match JobControl::new() {
        Ok(jobs) => jobs,
        Err(e) => {
            // Unwatched, COMMAND must not run on.
            send(group, Signal::KILL);
            return Err(anyhow::Error::new(e)
                .context("cannot install the job-control signal handlers; COMMAND was killed"));
        }
    };
    let watched = Watched {
        proof,
        clock,
        kill_after,
    };
    watched
        .watch_child(
            &mut running.child,
            group,
            running.guard.as_mut(),
            lost,
            signals,
            jobs,
        )
        .await
}

/// SIGTSTP and SIGCONT, for job control.
struct JobControl {
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl JobControl {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            tstp: signal(SignalKind::from_raw(Signal::TSTP.as_raw()))?,
            cont: signal(SignalKind::from_raw(Signal::CONT.as_raw()))?,
        })
    }
}

struct Watched<'a> {
    proof: &'a Proof,
    clock: &'a SharedClock,
    kill_after: Duration,
}

/// The guard fired while the supervisor could not act.
const GUARD_FIRED: &str = "COMMAND outlived the deadline its supervisor last proved (was the \
                           supervisor stopped?): the guard stopped it";

impl Watched<'_> {
    async fn watch_child(
        &self,
        child: &mut tokio::process::Child,
        group: Pid,
        mut guard: Option<&mut guard::Guard>,
        lost: impl Future<Output = String>,
        signals: &mut Signals,
        mut jobs: JobControl,
    ) -> Result<Ended> {
        let clock = self.clock;
        tokio::pin!(lost);
        let mut stopping: Option<String> = None;
        // On the holder's clock, which counts time the host was suspended; checked at least
        // once a second.
        let mut kill_at: Option<Instant> = None;
        let mut guarded = guard.is_some();
        loop {
            let kill_wait = kill_at.map(|at| {
                at.saturating_duration_since(clock.now())
                    .min(Duration::from_secs(1))
            });
            let heard = async {
                match guard.as_deref_mut() {
                    Some(g) => g.heard().await,
                    None => std::future::pending().await,
                }
            };
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
                    if stopping.is_none() {
                        if let Some(g) = guard.as_deref_mut() {
                            if g.settle().await {
                                stopping = Some(GUARD_FIRED.to_owned());
                            }
                        }
                    }
                    return Ok(match stopping {
                        Some(reason) => {
                            // Members of its group that ignored SIGTERM go too, before the hold
                            // can expire (the group outlives its leader while any member lives).
                            send(group, Signal::KILL);
                            Ended::Stopped { status, reason }
                        }
                        None => Ended::Exited(status),
                    });
                }
                signal = signals.recv() => send(group, signal),
                Some(()) = jobs.tstp.recv() => {
                    if let Err(reason) = self.suspend(group, guard.as_deref()).await {
                        if stopping.is_none() {
                            // Stopped, and never continued without its hold: killed where it
                            // stands.
                            send(group, Signal::KILL);
                            stopping = Some(reason);
                        }
                    }
                }
                // Continued after a stop not ours (SIGSTOP): the deadline moves only if the
                // keepers renew again.
                Some(()) = jobs.cont.recv() => {}
                heard = heard, if guarded => {
                    guarded = false;
                    // The guard backing up our own SIGTERM: it kills at the same instant we
                    // do, and COMMAND keeps its `kill_after` to finish.
                    let backing_up = heard == guard::Heard::Fired && kill_at.is_some();
                    if !backing_up {
                        // Past the deadline the guard fired at (this process may hear it
                        // late), or with no switch left should this process be paused next.
                        send(group, Signal::KILL);
                        kill_at = None;
                    }
                    if stopping.is_none() {
                        stopping = Some(match heard {
                            guard::Heard::Fired => GUARD_FIRED.to_owned(),
                            guard::Heard::Gone => {
                                "the guard of COMMAND's process group exited".to_owned()
                            }
                        });
                    }
                }
                () = clock.sleep(PROVE_EVERY), if guarded && stopping.is_none() => {
                    if let Some(g) = guard.as_deref() {
                        g.prove(|| self.proof.left());
                    }
                }
                reason = &mut lost, if stopping.is_none() => {
                    // Logged (-v) only: the supervisor's one `error:` line says it at the end.
                    tracing::info!(reason = %reason, kill_after = %human(self.kill_after),
                        "the hold stopped being valid: stopping COMMAND (SIGTERM now, SIGKILL after kill_after)");
                    // The guard backs this up from now, should this process stop: it kills when
                    // we would, without a second SIGTERM.
                    send(group, Signal::TERM);
                    if let Some(g) = guard.as_deref() {
                        g.termed();
                    }
                    kill_at = Some(clock.now() + self.kill_after);
                    stopping = Some(reason);
                }
                () = clock.sleep(kill_wait.unwrap_or_default()), if kill_wait.is_some() => {
                    if kill_at.is_some_and(|at| clock.now() >= at) {
                        tracing::info!("COMMAND outlived --kill-after: SIGKILL");
                        send(group, Signal::KILL);
                        kill_at = None;
                    }
                }
            }
        }
    }

    /// ^Z: stop COMMAND's group, then this process. Continued, re-prove every hold before
    /// COMMAND continues; `Err(reason)` (COMMAND left stopped) when that fails.
    async fn suspend(&self, group: Pid, guard: Option<&guard::Guard>) -> Result<(), String> {
        send(group, Signal::TSTP);
        // The guard keeps its deadline while we are stopped: it stops COMMAND if we are not
        // back in time.
        if let Err(e) = rustix::process::kill_process(rustix::process::getpid(), Signal::STOP) {
            tracing::warn!(error = %e, "cannot stop the supervisor");
        }
        // Continued: whatever the holds were proved for was before the stop.
        let proved =
            self.proof
                .reprove(self.clock)
                .await
                .and_then(|()| match self.proof.what_ran_out() {
                    Some(reason) => Err(reason),
                    None => Ok(()),
                });
        if proved.is_ok() {
            if let Some(g) = guard {
                g.prove(|| self.proof.left());
            }
            send(group, Signal::CONT);
        }
        proved.map_err(|reason| format!("after a stop, {reason}"))
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
