//! `banklease lock run KEY -- COMMAND`: run COMMAND while holding a named lock, as `flock(1)`,
//! `consul lock` and `etcdctl lock` do.
//!
//! Acquire KEY (waiting as asked; forever by default), start COMMAND under a guard that holds
//! its whole process tree (`crate::child`) with `BANKLEASE_LOCK_KEY`,
//! `BANKLEASE_LOCK_NAMESPACE`, `BANKLEASE_LOCK_TOKEN` and `BANKLEASE_LOCK_OWNER` set, renew the
//! lock while it runs, stop what it left of its tree when it exits, release the lock, and exit
//! with its status. Signals are forwarded to the tree.
//!
//! Invariant: **COMMAND's tree is stopped before the lock can expire.** The lock counts as held
//! while more than a quarter of its duration is left on the holder's clock (send-time expiry,
//! never later than the store's); when it is lost or no heartbeat succeeded by then, the tree
//! gets SIGTERM, then SIGKILL after `--kill-after` (less than that quarter), and `lock run`
//! exits 75.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{Context, Result};
use banklease::lock::Wait;

use super::hold::{self, validity_margin};
use super::{Namespace, Waiting, Who};
use crate::child::{
    self, describe, exit_code, Ended, Proof, Signals, EXIT_HOLD_LOST, EXIT_RUN_FAILED,
};
use crate::{human, ms, out_json, Ctx, Outcome};

/// `banklease lock run`
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The lock key: `/`-separated segments, e.g. `jobs/nightly`.
    key: String,
    #[command(flatten)]
    who: Who,
    /// How long each renewal holds the lock; it is renewed every half of it while COMMAND runs,
    /// and lapses this long after a crash of `lock run` (for a waiter on this host, as soon as
    /// `lock run` and COMMAND's whole tree are gone; see --no-same-host-handoff).
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = banklease::config::parse_duration)]
    duration: Duration,
    /// Do not let a waiter on this host take the lock as soon as the kernel shows `lock run`
    /// and COMMAND's tree gone: it waits for the duration instead. For a COMMAND whose work
    /// goes on outside this host's processes (`docker run`'s container, `ssh`'s remote side) or
    /// may still reach a server after it died, and for hosts cloned from one memory snapshot.
    #[arg(long)]
    no_same_host_handoff: bool,
    /// A small text anyone can read while the lock is held (at most 4 KiB).
    #[arg(long, value_name = "TEXT")]
    payload: Option<String>,
    #[command(flatten)]
    waiting: Waiting,
    /// When the lock can no longer be proved held, or COMMAND exited leaving processes of its
    /// tree running, time between SIGTERM and SIGKILL to the tree [default: an eighth of the
    /// duration, so that the tree is gone before the lock can expire].
    #[arg(long, value_name = "DURATION", value_parser = banklease::config::parse_duration)]
    kill_after: Option<Duration>,
    #[command(flatten)]
    ns: Namespace,
    /// Say why COMMAND was not run (held by whom, for how long), or how long getting the lock
    /// took, in one line on stderr (as `flock --verbose`); silent otherwise, as flock.
    #[arg(long = "verbose")]
    say_why: bool,
    /// Run CMD with `sh -c` instead of COMMAND (as `flock -c`): one command line, no arguments.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "CMD",
        conflicts_with = "command"
    )]
    shell: Option<OsString>,
    /// The command to run, and its arguments (after `--`).
    #[arg(
        required_unless_present = "shell",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

impl RunArgs {
    /// The lock key as given.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

impl RunArgs {
    /// COMMAND as given (empty with `-c`).
    pub(crate) fn command(&self) -> &[OsString] {
        &self.command
    }

    /// COMMAND's argv: `sh -c CMD` for `-c CMD`, as flock runs it.
    fn argv(&self) -> Vec<OsString> {
        match &self.shell {
            Some(line) => vec!["/bin/sh".into(), "-c".into(), line.clone()],
            None => self.command.clone(),
        }
    }
}

/// Run `banklease lock run`; never fails: every error is reported and becomes an exit status.
pub(crate) async fn run(ctx: &Ctx, args: RunArgs) -> Outcome {
    child::reported(supervise(ctx, args).await)
}

/// The shortest `--duration` a supervisor can keep: its heartbeat renews at half the duration,
/// and each renewal must be answered and proved to the guard (every [`child::PROVE_EVERY`])
/// before only a quarter is left, when the guard stops COMMAND. A quarter of 2 s leaves
/// 300 ms for the store's answer.
pub(crate) const MIN_DURATION: Duration = Duration::from_secs(2);

async fn supervise(ctx: &Ctx, args: RunArgs) -> Result<u8> {
    // Its holds' warnings are its own one line (logging.rs).
    crate::logging::supervising();
    if args.duration < MIN_DURATION {
        anyhow::bail!(
            "--duration={} is shorter than the {} a `lock run` can keep: it renews at half the \
             duration and must prove each renewal to COMMAND's guard before a quarter is left, \
             or the guard stops COMMAND; ask for --duration {} or more",
            human(args.duration),
            human(MIN_DURATION),
            human(MIN_DURATION)
        );
    }
    let margin = validity_margin(args.duration);
    let kill_after = args.kill_after.unwrap_or(margin / 2);
    if args.kill_after.is_some() && kill_after >= margin {
        eprintln!(
            "warning: --kill-after={} is not shorter than a quarter of the duration ({}): \
             COMMAND may outlive the lock",
            human(kill_after),
            human(margin)
        );
    }
    // Taken over before anything else: a ^C while waiting leaves the queue, and none kills
    // `lock run` with the lock held.
    let mut signals = Signals::new().context("cannot install signal handlers")?;
    let wanted = hold::Wanted {
        ns: &args.ns.namespace,
        key: &args.key,
        who: &args.who,
        duration: args.duration,
        payload: args.payload.as_deref(),
        wait: args.waiting.wait(Wait::Forever),
    };
    let started = ctx.clock.now();
    let outcome = hold::acquire(ctx, &wanted, &mut signals).await?;
    // A conflict is silent, as flock's (cron mails whatever a job prints), unless --verbose; a
    // signal while waiting is said.
    match (&outcome, outcome.refusal()) {
        (hold::Outcome::Unavailable { .. }, Some(_)) if !args.say_why => {}
        (_, Some(line)) => eprintln!("error: {line}; COMMAND was not run"),
        _ => {}
    }
    let took = ctx.clock.now().saturating_duration_since(started);
    if let (
        true,
        hold::Outcome::Unavailable {
            holder, remaining, ..
        },
    ) = (ctx.json, &outcome)
    {
        out_json(&serde_json::json!({
            "key": args.key, "namespace": args.ns.namespace, "acquired": false,
            "holder": holder.to_string(), "remaining_ms": ms(*remaining),
        }))?;
    }
    let held = match outcome {
        hold::Outcome::Held(held) => held,
        hold::Outcome::Unavailable { .. } => return Ok(args.waiting.conflict_exit_code),
        hold::Outcome::Interrupted(signal) => {
            return Ok(exit_code(ExitStatus::from_raw(signal.as_raw())))
        }
    };
    let full_key = held.lock().full_key();
    let token = held.token();
    tracing::info!(key = %full_key, owner = held.lock().owner(), token = held.token(), "lock acquired");
    let mut env = held.env();
    env.push((crate::agent::api::BANK_ENV, ctx.bank.label().into()));
    let proof = Proof::default().lock(held.lock(), margin);
    let mut kept = held.keep(ctx);

    let mut child = match child::spawn(
        &args.argv(),
        &env,
        Some((&proof, kill_after, !args.no_same_host_handoff)),
    )
    .await
    {
        Ok(child) => {
            if args.say_why {
                eprintln!(
                    "note: acquired key=`{full_key}` token={} after {}; running COMMAND, its \
                     tree held by {}",
                    token,
                    human(took),
                    child.held_by()
                );
            }
            if let Some(to) = child.binding(!args.no_same_host_handoff) {
                proof.bind_locks(&to);
            }
            child
        }
        Err((code, e)) => {
            eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
            // 75: what COMMAND started may live on (or nothing was left of the hold): the lock
            // runs out, its record naming the tree, rather than go to the next holder beside it.
            if code == EXIT_HOLD_LOST {
                kept.abandon().await;
            } else {
                kept.release().await;
            }
            return Ok(code);
        }
    };
    let ended = child::watch(
        &mut child,
        kept.ended(),
        &proof,
        &ctx.clock,
        &mut signals,
        kill_after,
    )
    .await;
    if let Some(stuck) = child.left() {
        // Released, the lock would go to the next holder beside them; its record names them,
        // so a waiter on this host waits for them, and one elsewhere for its expiry.
        kept.abandon().await;
        eprintln!("{}", child::left_to_run_out(&stuck, &full_key.to_string()));
        // The guard, left running, goes on killing them once this process is gone.
        return Ok(EXIT_HOLD_LOST);
    }
    kept.release().await;
    child.finish().await;
    match ended {
        Ok(Ended::Exited(status)) => Ok(exit_code(status)),
        Ok(Ended::Stopped { status, reason }) => {
            eprintln!(
                "error: the lock key=`{full_key}` could no longer be proved held ({reason}); \
                 COMMAND was stopped ({})",
                describe(status)
            );
            Ok(EXIT_HOLD_LOST)
        }
        Err(e) => {
            eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
            Ok(EXIT_RUN_FAILED)
        }
    }
}
