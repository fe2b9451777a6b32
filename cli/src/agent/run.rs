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
//! Writes through the agent are refused from the instant validity ends, by the library. A
//! completion refused there leaves the checkpoint protecting for the GC: nothing written after
//! the validity ended is reported as completed. Members of COMMAND's group that ignored SIGTERM
//! are SIGKILLed too, even if COMMAND itself exited.
//!
//! At COMMAND's exit the agent is closed first (it waits for writes in flight, at most the
//! validity window, then refuses all), and only then is what is left protecting completed as
//! `error`, so the agent's own completion never races one of COMMAND's.
//!
//! If `run` itself is killed (SIGKILL), nothing is released: the lease runs out and the GC
//! collects the protecting checkpoints, as for any crashed owner; COMMAND's calls to the
//! agent fail from then on.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use banklease::checkpoint::Status;
use banklease::clock::{Jitter, SharedClock};
use banklease::error::error_chain;
use banklease::lock::Wait;
use banklease::OwnerLease;
use tokio_util::sync::CancellationToken;

use super::api::{AGENT_ENV, BANK_ENV, OWNER_ENV};
use super::server::{self, Agent};
use crate::child::overdue::{self, OneWarning};
use crate::child::{self, describe, exit_code, Ended, Proof, Signals};
use crate::lock::hold::{self, validity_margin, Kept};
use crate::lock::{LockNamespace, Who};
use crate::{human, Ctx, Outcome};

/// `run` exits with this when the lease stopped being valid and COMMAND was stopped
/// (EX_TEMPFAIL: try again later, with a new lease).
pub const EXIT_LEASE_LOST: u8 = child::EXIT_HOLD_LOST;
pub use crate::child::EXIT_RUN_FAILED;

/// How long a shut-down agent waits for requests still in flight before it drops them.
const SERVER_DRAIN: Duration = Duration::from_secs(2);

/// `banklease run`
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Checkpoint ids that COMMAND creates through the agent must start with PREFIX.
    #[arg(long, value_name = "PREFIX")]
    checkpoint_prefix: Option<String>,

    /// When the lease stops being valid, time between SIGTERM and SIGKILL to COMMAND's process
    /// group (with --lock: its whole tree) [default: half the owner's validity window, so that
    /// COMMAND is gone before the lease can expire].
    #[arg(long, value_name = "DURATION", value_parser = banklease::config::parse_duration)]
    kill_after: Option<Duration>,

    /// Hold the named lock KEY (`jobs/nightly`) as well as the owner lease, for COMMAND's whole
    /// life: acquired first (waiting as --lock-block-for says), released with the lease. Two
    /// `run --lock KEY` jobs never run at once. COMMAND also gets BANKLEASE_LOCK_KEY,
    /// BANKLEASE_LOCK_TOKEN and BANKLEASE_LOCK_OWNER. As under `lock run`, the lock holds
    /// COMMAND's whole process tree, and what COMMAND leaves running when it exits is stopped
    /// before the lock is released.
    #[arg(long, value_name = "KEY")]
    lock: Option<String>,

    /// Do not let a waiter on this host take the --lock as soon as the kernel shows `run` and
    /// COMMAND's tree gone (after `kill -9`): it waits for the lock's duration instead. For a
    /// COMMAND whose work goes on outside this host's processes (`docker run`'s container,
    /// `ssh`'s remote side), and for hosts cloned from one memory snapshot.
    #[arg(long, requires = "lock")]
    no_same_host_handoff: bool,

    /// How long each renewal of the --lock holds it.
    #[arg(long, value_name = "DURATION", default_value = "30s", requires = "lock",
          value_parser = banklease::config::parse_duration)]
    lock_duration: Duration,

    /// How long to wait for the --lock: a duration, `0` (do not wait) or `-1` (forever)
    /// [default: -1].
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, requires = "lock",
          value_parser = parse_wait, conflicts_with_all = ["nonblock", "wait"])]
    lock_block_for: Option<Wait>,

    /// Do not wait for the --lock (as `flock -n`, `--nb`, `--nonblock`): `--lock-block-for 0`.
    #[arg(
        short = 'n',
        long,
        visible_alias = "nb",
        requires = "lock",
        conflicts_with = "wait"
    )]
    nonblock: bool,

    /// Wait at most SECS seconds for the --lock, fractions allowed (as `flock -w`, `--timeout`).
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "SECS", requires = "lock",
          value_parser = crate::lock::parse_secs)]
    wait: Option<Wait>,

    #[command(flatten)]
    lock_namespace: LockNamespace,

    /// Exit with CODE (0 to 255), running nothing, when the --lock is held by someone else and
    /// the wait ran out (as `flock -E`; `-E 0`: a conflict is fine).
    #[arg(
        short = 'E',
        long,
        visible_alias = "conflict-exit-code",
        value_name = "CODE",
        default_value_t = 1,
        requires = "lock"
    )]
    lock_conflict_exit_code: u8,

    /// The command to run, and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

fn parse_wait(s: &str) -> Result<Wait, String> {
    s.parse()
}

impl RunArgs {
    /// How long to wait for the --lock: `-n`, `-w SECS` or `--lock-block-for`, else forever.
    fn lock_wait(&self) -> Wait {
        if self.nonblock {
            return Wait::No;
        }
        self.lock_block_for.or(self.wait).unwrap_or(Wait::Forever)
    }

    /// COMMAND as given.
    pub(crate) fn command(&self) -> &[OsString] {
        &self.command
    }
}

/// Run `banklease run`; never fails: every error is reported and becomes an exit status.
pub async fn run(ctx: &Ctx, args: RunArgs) -> Outcome {
    child::reported(supervise(ctx, args).await)
}

async fn supervise(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    // Its holds' warnings are its own one line (logging.rs).
    crate::logging::supervising();
    let windows = ctx.config.lease.windows;
    let kill_after = args.kill_after.unwrap_or(windows.validity_window / 2);
    if kill_after >= windows.validity_window {
        eprintln!(
            "warning: --kill-after={} is not shorter than the validity window ({}): COMMAND may \
             outlive the lease",
            human(kill_after),
            human(windows.validity_window)
        );
    }
    // Signals are taken over before anything is started, so none is lost or kills `run` with
    // the lease held.
    let mut signals = Signals::new().context("cannot install signal handlers")?;
    banklease::layout::check(&ctx.bank).await?;
    let owner = ctx.config.lease.new_owner_id(ctx.clock.system_now());
    if let Some(key) = &args.lock {
        crate::lock::note_lock_file_key(key);
    }
    // The named lock first: waiting for it holds no lease.
    let (mut lock, lock_env) = match &args.lock {
        None => (None, Vec::new()),
        Some(key) => match take_lock(ctx, &args, key, &owner, &mut signals).await? {
            Ok((kept, env)) => (Some(kept), env),
            Err(code) => return Ok(code),
        },
    };
    let lock_margin = validity_margin(args.lock_duration);
    let kill_after = match (&lock, args.kill_after) {
        (Some(_), None) => kill_after.min(lock_margin / 2),
        (Some(_), Some(given)) if given >= lock_margin => {
            eprintln!(
                "warning: --kill-after={} is not shorter than a quarter of --lock-duration ({}): \
                 COMMAND may outlive the lock",
                human(given),
                human(lock_margin)
            );
            given
        }
        _ => kill_after,
    };
    let acquired = OwnerLease::acquire(&ctx.bank, owner.clone(), windows, ctx.clock.clone())
        .await
        .with_context(|| {
            format!(
                "cannot acquire the owner lease of owner_id=`{owner}` on bank=`{}`",
                ctx.bank.label()
            )
        });
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) => {
            release_lock(&mut lock).await;
            return Err(e);
        }
    };
    let keeper = lease.spawn_keeper(Jitter::from_entropy(), ctx.config.lease.renew_jitter);
    tracing::info!(owner_id = %owner, bank = %ctx.bank.label(), "lease acquired");

    // A signal that came while the lease was being acquired: COMMAND is not started at all.
    if let Some(signal) = signals.pending() {
        eprintln!("error: signal {signal} before COMMAND was started; nothing was run");
        if let Err(e) = keeper.release().await {
            tracing::warn!(error = %error_chain(&e), "releasing the lease failed; it expires on its own");
        }
        release_lock(&mut lock).await;
        return Ok(exit_code(ExitStatus::from_raw(signal)));
    }
    // What COMMAND runs under: the lease, and the lock with --lock (then guarded, see child).
    let mut proof = Proof::default().lease(&lease, windows.validity_window);
    if let Some(kept) = &lock {
        proof = proof.lock(kept.lock(), lock_margin);
    }
    // A waiter on this host takes the lock as soon as the kernel proves this process and
    // COMMAND's tree gone, as with `lock run`. A write the agent had sent before it died may
    // still land (as one COMMAND had sent under `lock run`): this owner's checkpoints, which
    // the next job (another owner) never writes; what a late write must not overwrite is
    // written fenced (`lock put --token`). On a normal exit, the agent's writes are drained
    // before the release.
    let handoff = !args.no_same_host_handoff;
    let guarded = lock.is_some().then_some((&proof, kill_after, handoff));
    let started = start(ctx, &args, &lease, lock_env, guarded).await;
    if let Ok((.., child)) = &started {
        if let Some(to) = child.binding(handoff) {
            proof.bind_locks(&to);
        }
    }
    let (socket_dir, agent, server, cancel, mut child) = match started {
        Ok(s) => s,
        Err((code, e)) => {
            eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
            if let Err(e) = keeper.release().await {
                tracing::warn!(error = %error_chain(&e), "releasing the lease failed; it expires on its own");
            }
            // 75: what COMMAND started may live on; the lock runs out (see `lock run`).
            if code == EXIT_LEASE_LOST {
                if let Some(kept) = lock.take() {
                    kept.abandon().await;
                }
            } else {
                release_lock(&mut lock).await;
            }
            return Ok(code);
        }
    };

    // COMMAND is stopped when the lease or the lock can no longer be proved held; one
    // warning before, whichever of them it is about.
    let warning = OneWarning::default();
    if let Some(kept) = lock.as_mut() {
        kept.share_warning(&warning);
    }
    let hold_ended = async {
        let lock_ended = async {
            match lock.as_mut() {
                Some(kept) => format!("the lock {}", kept.ended().await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            reason = validity_ended(&lease, &ctx.clock, &warning) => reason,
            reason = lock_ended => reason,
        }
    };
    let ended = child::watch(
        &mut child,
        hold_ended,
        &proof,
        &ctx.clock,
        &mut signals,
        kill_after,
    )
    .await;

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
    // The lock goes with the lease, once COMMAND's writes in flight are done: on a normal exit
    // the next `run --lock` job starts after they landed. Until it is released, the
    // guard keeps what COMMAND left in the background from outliving it.
    if let Some(stuck) = child.left() {
        // Released, the lock would go to the next holder beside them (see `lock run`).
        if let Some(kept) = lock.take() {
            kept.abandon().await;
        }
        let key = args.lock.as_deref().unwrap_or_default();
        eprintln!("{}", child::left_to_run_out(&stuck, key));
        if let Err(e) = keeper.release().await {
            tracing::debug!(error = %error_chain(&e), "the lease was not released");
        }
        return Ok(EXIT_LEASE_LOST);
    }
    if let (Some(kept), Ok(Ended::Stopped { .. })) = (lock.as_mut(), &ended) {
        // The `error:` line below says the job was stopped: a release that cannot reach the
        // store adds nothing to it.
        kept.said_ended();
    }
    release_lock(&mut lock).await;
    // Unguarded, what COMMAND left running is not stopped: said once.
    let left = child.left_in_group();
    child.finish().await;

    match ended {
        Ok(Ended::Exited(status)) => {
            if !left.is_empty() {
                eprintln!("{}", child::left_running_note(&left));
            }
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
            let what = match &args.lock {
                Some(key) => format!("the lease of owner_id=`{owner}` or its lock key=`{key}`"),
                None => format!("the lease of owner_id=`{owner}`"),
            };
            eprintln!(
                "error: {what} stopped being valid ({reason}); COMMAND was stopped ({}); \
                 checkpoints it left protecting are left to the GC",
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
            eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
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
    child::Running,
);

/// Acquire `--lock KEY` for `owner` (in a session of its own) and keep it; `Err(code)` when it
/// was not taken (held by someone else, or a signal while waiting), already reported.
async fn take_lock(
    ctx: &Ctx,
    args: &RunArgs,
    key: &str,
    owner: &banklease::OwnerId,
    signals: &mut Signals,
) -> Result<Result<(Kept, Vec<(&'static str, OsString)>), u8>> {
    let wanted = hold::Wanted {
        ns: args.lock_namespace.name(),
        key,
        who: &Who::new(Some(owner.as_str().to_owned())),
        duration: args.lock_duration,
        payload: None,
        wait: args.lock_wait(),
    };
    let outcome = hold::acquire(ctx, &wanted, signals).await?;
    // A conflict the operator declared fine (`-E 0`) is silent, as flock's: cron mails whatever
    // a job prints. Any other run that runs nothing says why.
    let fine =
        matches!(outcome, hold::Outcome::Unavailable { .. }) && args.lock_conflict_exit_code == 0;
    if let Some(line) = outcome.refusal().filter(|_| !fine) {
        eprintln!("error: {line}; COMMAND was not run");
    }
    Ok(match outcome {
        hold::Outcome::Held(held) => {
            let env = held.env();
            Ok((held.keep(ctx), env))
        }
        hold::Outcome::Unavailable { .. } => Err(args.lock_conflict_exit_code),
        hold::Outcome::Interrupted(signal) => Err(exit_code(ExitStatus::from_raw(signal.as_raw()))),
    })
}

async fn release_lock(lock: &mut Option<Kept>) {
    if let Some(kept) = lock.take() {
        kept.release().await;
    }
}

/// The socket, the agent and COMMAND; on failure, the exit status to use and why.
async fn start(
    ctx: &Ctx,
    args: &RunArgs,
    lease: &OwnerLease,
    lock_env: Vec<(&'static str, OsString)>,
    guarded: Option<(&Proof, Duration, bool)>,
) -> Result<Started, (u8, anyhow::Error)> {
    let failed = |e: anyhow::Error| (EXIT_RUN_FAILED, e);
    let dir = super::dir::socket_dir().map_err(failed)?;
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

    let mut env = vec![
        (AGENT_ENV, socket.clone().into_os_string()),
        (OWNER_ENV, lease.owner_id().as_str().into()),
        (BANK_ENV, ctx.bank.label().into()),
    ];
    env.extend(lock_env);
    // With --lock, COMMAND must not outlive `run` (nothing else keeps it from running on
    // without the lock); without it, the agent's refusals fence COMMAND's writes.
    match child::spawn(&args.command, &env, guarded).await {
        Ok(child) => Ok((dir, agent, server, cancel, child)),
        Err(failed) => {
            cancel.cancel();
            Err(failed)
        }
    }
}

/// Completes when a write sent now would be refused for good reason: the lease is Lost or
/// released, or has less than `validity_window` left. Sends no request.
async fn validity_ended(lease: &OwnerLease, clock: &SharedClock, warning: &OneWarning) -> String {
    let validity = lease.windows().validity_window;
    let short = format!(
        "less than validity_window={} left before it runs out",
        human(validity)
    );
    let ended = child::hold_ended(
        lease.subscribe(),
        || lease.remaining(),
        validity,
        &short,
        clock,
    );
    let what = format!("the lease of owner_id=`{}`", lease.owner_id());
    let overdue = overdue::watch(
        &what,
        || lease.remaining(),
        lease.windows().renew_window,
        validity,
        || None,
        warning,
        clock,
    );
    tokio::select! {
        reason = ended => reason,
        never = overdue => match never {},
    }
}

/// Complete as `error` what COMMAND left protecting: it will never finish them.
async fn finish_protecting(agent: &Agent) {
    for checkpoint in agent.protecting() {
        match checkpoint.complete(Status::Error).await {
            Ok(()) => {
                agent.completed(checkpoint.id().as_str(), Status::Error);
                tracing::warn!(
                    checkpoint_id = %checkpoint.id(),
                    "COMMAND exited with this checkpoint protecting: completed as error"
                );
            }
            Err(e) => tracing::warn!(checkpoint_id = %checkpoint.id(), error = %error_chain(&e),
                "cannot complete a checkpoint COMMAND left protecting; the GC collects it once the lease is gone"),
        }
    }
}
