//! `banklease run -- COMMAND`: hold an owner lease while COMMAND runs.
//!
//! The supervisor acquires an owner lease, keeps it renewed, serves the agent on a private Unix
//! socket, and starts COMMAND in a process group of its own with `BANKLEASE_AGENT`,
//! `BANKLEASE_OWNER_ID` and `BANKLEASE_BANK` set. Then:
//!
//! - SIGTERM, SIGINT and SIGHUP are forwarded to COMMAND's process group;
//! - when COMMAND exits, the checkpoints it left protecting are completed as `error`, the lease
//!   is released, and `run` exits with COMMAND's status (128 + N if signal N ended it);
//! - when the lease stops being valid (less than `validity_window` left, or Lost), COMMAND's
//!   group gets SIGTERM, then SIGKILL after `--kill-after`, and `run` exits with
//!   [`EXIT_LEASE_LOST`]. Its protecting checkpoints stay for the GC.
//!
//! Invariant: **COMMAND is stopped before the lease can expire on the store.** Validity means
//! at least `validity_window` left before `valid_until` (send-time expiry, owner's clock, which
//! is never later than the store's expiry), so a SIGKILL sent `kill_after < validity_window`
//! after validity ended lands before the store lets the GC collect — when `run` runs on time.
//! After `run` was paused or the host suspended, it acts at most a second after it runs again.
//! Writes through the agent are refused from the instant validity ends, by the library.
//!
//! If `run` itself is killed (SIGKILL), nothing is released: the lease runs out and the GC
//! collects the protecting checkpoints, as for any crashed owner; COMMAND's calls to the
//! agent fail from then on.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use banklease::checkpoint::Status;
use banklease::clock::{Jitter, SharedClock};
use banklease::error_chain;
use banklease::{LeaseState, OwnerLease};
use rustix::process::{Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::api::{AGENT_ENV, BANK_ENV, OWNER_ENV};
use super::server::{self, Agent};
use crate::{human, Ctx, Outcome};

/// `run` exits with this when the lease stopped being valid and COMMAND was stopped
/// (EX_TEMPFAIL: try again later, with a new lease).
pub const EXIT_LEASE_LOST: u8 = 75;
/// `run` itself failed: bad configuration, no lease, no socket (as `env`, `timeout`).
pub const EXIT_RUN_FAILED: u8 = 125;
/// COMMAND was found but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// COMMAND was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// How long a shut-down agent waits for requests still in flight before it drops them.
const SERVER_DRAIN: Duration = Duration::from_secs(2);

/// `banklease run`
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Checkpoint ids that COMMAND creates through the agent must start with PREFIX.
    #[arg(long, value_name = "PREFIX")]
    checkpoint_prefix: Option<String>,

    /// When the lease stops being valid, time between SIGTERM and SIGKILL to COMMAND's process
    /// group [default: half the owner's validity window, so that COMMAND is gone before the
    /// lease can expire].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    kill_after: Option<Duration>,

    /// The command to run, and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// Run `banklease run`; never fails: every error is reported and becomes an exit status.
pub async fn run(ctx: &Ctx, args: RunArgs) -> Outcome {
    match supervise(ctx, args).await {
        Ok(code) => Outcome::Exit(code),
        Err(e) => {
            eprintln!("error: {}", banklease_gc::logging::error_line(&e));
            Outcome::Exit(EXIT_RUN_FAILED)
        }
    }
}

async fn supervise(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    let windows = ctx.config.lease.windows();
    let kill_after = args.kill_after.unwrap_or(windows.validity_window / 2);
    if kill_after >= windows.validity_window {
        tracing::warn!(kill_after = %human(kill_after), validity_window = %human(windows.validity_window),
            "--kill-after is not shorter than the validity window: COMMAND may outlive the lease");
    }
    // Signals are taken over before anything is started, so none is lost or kills `run` with
    // the lease held.
    let mut signals = Signals::new().context("cannot install signal handlers")?;
    banklease::layout::check(&ctx.bank).await?;
    let owner = ctx.config.lease.new_owner_id(ctx.clock.system_now());
    let lease = OwnerLease::acquire(&ctx.bank, owner.clone(), windows, ctx.clock.clone())
        .await
        .with_context(|| {
            format!(
                "cannot acquire the owner lease of owner_id=`{owner}` on bank=`{}`",
                ctx.bank.label()
            )
        })?;
    let keeper = lease.spawn_keeper(Jitter::from_entropy(), ctx.config.lease.renew_jitter);
    tracing::info!(owner_id = %owner, bank = %ctx.bank.label(), "lease acquired");

    // A signal that came while the lease was being acquired: COMMAND is not started at all.
    if let Some(signal) = signals.pending() {
        eprintln!("error: signal {signal} before COMMAND was started; nothing was run");
        if let Err(e) = keeper.release().await {
            tracing::warn!(error = %error_chain(&e), "releasing the lease failed; it expires on its own");
        }
        return Ok(exit_code(ExitStatus::from_raw(signal)));
    }
    let started = start(ctx, &args, &lease).await;
    let (socket_dir, agent, server, cancel, child) = match started {
        Ok(s) => s,
        Err((code, e)) => {
            eprintln!("error: {}", banklease_gc::logging::error_line(&e));
            if let Err(e) = keeper.release().await {
                tracing::warn!(error = %error_chain(&e), "releasing the lease failed; it expires on its own");
            }
            return Ok(code);
        }
    };

    let ended = watch(child, &lease, &ctx.clock, &mut signals, kill_after).await;

    // No write starts from here on; those in flight (a background process of COMMAND may still
    // be uploading) may finish, for at most the validity window. Only then are COMMAND's
    // checkpoints completed as `error`: never while one of its completions may still race.
    let drained = agent.close(windows.validity_window.max(SERVER_DRAIN)).await;
    cancel.cancel();
    let mut server = server;
    if tokio::time::timeout(SERVER_DRAIN, &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    drop(socket_dir);

    match ended {
        Ok(Ended::Exited(status)) => {
            if drained {
                finish_protecting(&agent).await;
            } else {
                tracing::warn!(
                    "requests to the agent were still writing at exit: the checkpoints COMMAND \
                     left protecting are left to the GC"
                );
            }
            if let Err(e) = keeper.release().await {
                tracing::warn!(owner_id = %owner, error = %error_chain(&e),
                    "releasing the lease failed; it expires on its own");
            }
            Ok(exit_code(status))
        }
        Ok(Ended::Stopped { status, reason }) => {
            eprintln!(
                "error: the lease of owner_id=`{owner}` stopped being valid ({reason}); COMMAND \
                 was stopped ({}); checkpoints it left protecting are left to the GC",
                describe(status)
            );
            // Released if it is still ours (a late renewal may have brought it back).
            if let Err(e) = keeper.release().await {
                tracing::debug!(error = %error_chain(&e), "the lost lease was not released");
            }
            Ok(EXIT_LEASE_LOST)
        }
        Err(e) => {
            // COMMAND's status cannot be told; it was not stopped by us.
            eprintln!("error: {}", banklease_gc::logging::error_line(&e));
            if let Err(e) = keeper.release().await {
                tracing::warn!(error = %error_chain(&e), "releasing the lease failed; it expires on its own");
            }
            Ok(EXIT_RUN_FAILED)
        }
    }
}

type Started = (
    tempfile::TempDir,
    Arc<Agent>,
    tokio::task::JoinHandle<std::io::Result<()>>,
    CancellationToken,
    tokio::process::Child,
);

/// The socket, the agent and COMMAND; on failure, the exit status to use and why.
async fn start(
    ctx: &Ctx,
    args: &RunArgs,
    lease: &OwnerLease,
) -> Result<Started, (u8, anyhow::Error)> {
    let failed = |e: anyhow::Error| (EXIT_RUN_FAILED, e);
    let dir = socket_dir().map_err(failed)?;
    let socket = dir.path().join("agent.sock");
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("cannot create the agent's socket=`{}`", socket.display()))
        .map_err(failed)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make socket=`{}` private", socket.display()))
        .map_err(failed)?;
    // SO_PEERCRED reports the peer's effective uid.
    let uid = rustix::process::geteuid().as_raw();
    let agent = Agent::new(lease.clone(), args.checkpoint_prefix.clone(), uid);
    let cancel = CancellationToken::new();
    let server = tokio::spawn(server::serve(
        listener,
        agent.clone(),
        cancel.clone().cancelled_owned(),
    ));

    let (program, rest) = args.command.split_first().expect("clap requires COMMAND");
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .env(AGENT_ENV, &socket)
        .env(OWNER_ENV, lease.owner_id().as_str())
        .env(BANK_ENV, ctx.bank.label())
        // A group of its own: signals reach every process of a shell pipeline, and a terminal's
        // ^C reaches COMMAND once (forwarded), not twice.
        .process_group(0);
    match command.spawn() {
        Ok(child) => Ok((dir, agent, server, cancel, child)),
        Err(e) => {
            cancel.cancel();
            let shown = program.to_string_lossy();
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => EXIT_CANNOT_EXECUTE,
                _ => EXIT_RUN_FAILED,
            };
            Err((
                code,
                anyhow::Error::new(e).context(format!("cannot start COMMAND=`{shown}`")),
            ))
        }
    }
}

/// A private directory for the socket: in `$XDG_RUNTIME_DIR` (per user, tmpfs) when there is
/// one, else in the temporary directory; mode 0700.
fn socket_dir() -> Result<tempfile::TempDir> {
    // A socket path holds at most 107 bytes (sun_path); a long $TMPDIR falls back to /tmp.
    let fits = |p: &PathBuf| p.as_os_str().len() + "/banklease-agent-XXXXXX/agent.sock".len() < 108;
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir() && fits(p))
        .or_else(|| Some(std::env::temp_dir()).filter(fits))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let dir = tempfile::Builder::new()
        .prefix("banklease-agent-")
        .tempdir_in(&base)
        .with_context(|| {
            format!(
                "cannot create a private directory for the agent's socket in `{}`",
                base.display()
            )
        })?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make `{}` private", dir.path().display()))?;
    Ok(dir)
}

enum Ended {
    /// COMMAND exited on its own (or by a signal it was sent by someone else).
    Exited(ExitStatus),
    /// The lease stopped being valid and COMMAND was stopped.
    Stopped { status: ExitStatus, reason: String },
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// A signal received and not yet handled, if any (without waiting).
    fn pending(&mut self) -> Option<i32> {
        use futures::FutureExt;
        [
            (self.term.recv().now_or_never(), Signal::TERM),
            (self.int.recv().now_or_never(), Signal::INT),
            (self.hup.recv().now_or_never(), Signal::HUP),
        ]
        .into_iter()
        .find_map(|(got, signal)| got.flatten().map(|()| signal.as_raw()))
    }

    fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Wait for COMMAND; forward signals; stop it when the lease stops being valid.
async fn watch(
    mut child: tokio::process::Child,
    lease: &OwnerLease,
    clock: &SharedClock,
    signals: &mut Signals,
    kill_after: Duration,
) -> Result<Ended> {
    let pid = child
        .id()
        .context("COMMAND exited before it could be watched")?;
    let group = Pid::from_raw(i32::try_from(pid).context("pid out of range")?)
        .context("COMMAND has pid 0")?;
    let lost = validity_ended(lease, clock);
    tokio::pin!(lost);
    let mut stopping: Option<String> = None;
    // On the owner's clock, which counts time the host was suspended; checked at least once a
    // second.
    let mut kill_at: Option<std::time::Instant> = None;
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
                        // COMMAND cannot be watched: it must not run on without its lease.
                        send(group, Signal::KILL);
                        return Err(anyhow::Error::new(e).context("cannot wait for COMMAND; it was killed"));
                    }
                };
                return Ok(match stopping {
                    Some(reason) => {
                        // Members of its group that ignored SIGTERM go too, before the lease can
                        // expire (the group outlives its leader while any member lives).
                        if kill_at.is_some() {
                            send(group, Signal::KILL);
                        }
                        Ended::Stopped { status, reason }
                    }
                    None => Ended::Exited(status),
                });
            }
            _ = signals.term.recv() => send(group, Signal::TERM),
            _ = signals.int.recv() => send(group, Signal::INT),
            _ = signals.hup.recv() => send(group, Signal::HUP),
            reason = &mut lost, if stopping.is_none() => {
                tracing::warn!(reason = %reason, kill_after = %human(kill_after),
                    "the lease stopped being valid: stopping COMMAND (SIGTERM now, SIGKILL after kill_after)");
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

/// Completes when a write sent now would be refused for good reason: the lease is Lost or
/// released, or has less than `validity_window` left. Sends no request.
async fn validity_ended(lease: &OwnerLease, clock: &SharedClock) -> String {
    let validity = lease.windows().validity_window;
    let mut states = lease.subscribe();
    let mut watching = true;
    loop {
        match lease.state() {
            LeaseState::Lost { reason } => return format!("lost: {reason}"),
            LeaseState::Released => return "released".to_owned(),
            LeaseState::Held { .. } if !lease.check_validity() => {
                return format!(
                    "less than validity_window={} left before it runs out",
                    human(validity)
                )
            }
            LeaseState::Held { .. } => {}
        }
        // Wake at the instant validity would end, on any state change, and at least once a
        // second (the owner's clock counts suspended time; tokio's timers do not).
        let until = lease
            .remaining()
            .saturating_sub(validity)
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

/// Complete as `error` what COMMAND left protecting: it will never finish them.
async fn finish_protecting(agent: &Agent) {
    for checkpoint in agent.protecting() {
        match checkpoint.complete(Status::Error).await {
            Ok(()) => {
                agent.completed(checkpoint.id(), Status::Error);
                tracing::warn!(
                    checkpoint_id = checkpoint.id(),
                    "COMMAND exited with this checkpoint protecting: completed as error"
                );
            }
            Err(e) => tracing::warn!(checkpoint_id = checkpoint.id(), error = %error_chain(&e),
                "cannot complete a checkpoint COMMAND left protecting; the GC collects it once the lease is gone"),
        }
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EXIT_RUN_FAILED),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(EXIT_RUN_FAILED),
        (None, None) => EXIT_RUN_FAILED,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => status.to_string(),
    }
}
