//! `banklease lock ...`: named leases and locks on any key (library: `banklease::lock`).
//!
//! Locks need a bank that enforces create-if-absent and If-Match atomically (`file:`, S3 with
//! conditional writes, Azure); on other banks (Swift) every command fails with exit 2 and says
//! why, and `memory://` is refused (nothing would outlive the command). Expiry is judged on the
//! store's clock with `[lease] skew_margin`.
//!
//! Each process acquires in a session of its own: the holder written is `<owner>.<session>`
//! (see [`banklease::lock::session::session_holder`]), so the same `--owner` from two processes never
//! both hold a lock. `lock acquire` prints the session; `--session` acts in it again.
//!
//! Exit codes: `acquire` 0 acquired, 1 (or `-E CODE`) unavailable; `release` 0 released or
//! already free, 1 held by someone else; `show` 0 held, 1 free, expired or never used; `list` 0,
//! or 1 if some lock could not be read; `run` as [`run`] says; 128 + N when signal N stopped a
//! wait (the queue was left); 2 on any error.

pub(crate) mod hold;
mod put;
pub(crate) mod run;
mod view;

use std::time::Duration;

use anyhow::{bail, Result};
use banklease::lock::session::new_session;
use banklease::lock::session::session_holder;
use banklease::lock::{LockHolder, Locks, Release, Wait};
use banklease::Error;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::{human, ms, out_json, out_line, Ctx, Outcome};
use crate::child::{exit_code, Signals};

/// `banklease lock ...`
#[derive(Debug, Subcommand)]
pub(crate) enum LockCommand {
    /// Run COMMAND while holding KEY: acquire it (waiting forever unless told otherwise), renew
    /// it while COMMAND runs, release it when COMMAND exits, and exit with COMMAND's status.
    ///
    /// Exit status: COMMAND's own (128 + N when signal N ended it); 1 (or `-E CODE`) when the
    /// lock is held by someone else and the wait ran out; 75 when the lock could no longer be
    /// proved held and COMMAND was stopped (SIGTERM, then SIGKILL after --kill-after); 125 when
    /// `lock run` itself failed; 126 when COMMAND cannot be executed; 127 when it is not found;
    /// 128 + N when signal N came while waiting (nothing was run). COMMAND gets
    /// BANKLEASE_LOCK_KEY, BANKLEASE_LOCK_NAMESPACE, BANKLEASE_LOCK_TOKEN (the fencing token),
    /// BANKLEASE_LOCK_OWNER, BANKLEASE_LOCK_SESSION and BANKLEASE_BANK.
    ///
    /// The lock holds COMMAND's whole process tree, whatever group or session its processes
    /// move to (`timeout`, `setsid`, daemons): a guard is its parent and child subreaper, and
    /// where the host delegates a cgroup v2, COMMAND runs in a cgroup of its own
    /// (BANKLEASE_TREE=subreaper: no cgroup; =cgroup: refuse to run without one; --verbose says
    /// which holds it). Signals, a lost lock, ^Z and the death of `lock run` reach the whole
    /// tree; what COMMAND leaves running when it exits is stopped (SIGTERM, SIGKILL after
    /// --kill-after) before the lock is released.
    #[command(
        after_help = "Examples:\n  banklease lock run jobs/nightly -- ./nightly.sh\n  \
                            banklease lock run -n jobs/nightly -- ./nightly.sh   # do not wait\n  \
                            banklease lock run -w 30 -E 75 jobs/nightly -- ./nightly.sh"
    )]
    Run(run::RunArgs),
    /// Write OBJECT (relative to the bank) from FILE or `-` (stdin), fenced by KEY's token:
    /// exit 0 written, 1 refused because a newer token of KEY exists (nothing was written), 2
    /// error. Needs ETags that change on every write (`file:`, Azure; refused on S3).
    #[command(
        after_help = "Example, inside `banklease lock run jobs/nightly -- ...`:\n  \
                            ./report.sh | banklease lock put \"$BANKLEASE_LOCK_KEY\" \
                            --token \"$BANKLEASE_LOCK_TOKEN\" reports/nightly.json -"
    )]
    Put(put::PutArgs),
    /// Acquire KEY: exit 0 acquired, 1 (or `-E CODE`) unavailable (held by someone else, or
    /// promised to an earlier waiter), 2 error. The lock stays held for DURATION after this
    /// command exits (nothing renews it) unless released; use `lock run` to hold it for a
    /// command's life.
    Acquire {
        /// The lock key: `/`-separated segments, e.g. `jobs/nightly`.
        key: String,
        #[command(flatten)]
        who: Who,
        /// How long to hold the lock, e.g. `30s`.
        #[arg(long, value_name = "DURATION", value_parser = banklease::config::parse_duration)]
        duration: Duration,
        /// A small text anyone can read (at most 4 KiB).
        #[arg(long, value_name = "TEXT")]
        payload: Option<String>,
        #[command(flatten)]
        waiting: Waiting,
        #[command(flatten)]
        ns: Namespace,
    },
    /// Release KEY if OWNER (in SESSION) holds it, or, with --token alone, the holding whose
    /// fencing token that is: exit 0 released or already free, 1 held by someone else (or with
    /// another token) — or by a `lock run` that still runs (only its fencing token, --token,
    /// releases that one, and its COMMAND is then stopped), 2 error.
    Release {
        /// The lock key.
        key: String,
        /// The holding's fencing token (`lock show`, or BANKLEASE_LOCK_TOKEN inside `lock
        /// run`): names the holding on its own (without --owner and --session), and is needed
        /// to release a lock a running `lock run` holds, whose COMMAND is then stopped.
        #[arg(long, value_name = "TOKEN")]
        token: Option<u64>,
        /// The owner that holds it: the owner and `--session` printed by `lock acquire`, or the
        /// whole holder name (`BANKLEASE_LOCK_OWNER`) [default: $USER, else `banklease`].
        #[arg(long, value_name = "OWNER")]
        owner: Option<String>,
        /// The session printed by `lock acquire`.
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
        #[command(flatten)]
        ns: Namespace,
    },
    /// Show KEY: holder and session, time left (store clock), payload, fencing token, waiters.
    /// Exit 0 if held, 1 if free, expired or never used.
    Show {
        /// The lock key.
        key: String,
        #[command(flatten)]
        ns: Namespace,
    },
    /// List the namespace's held and expired locks (`--all`: free ones too). Exit 1 if some
    /// could not be read (each is named on stderr).
    List {
        #[command(flatten)]
        ns: Namespace,
        /// Also list free locks: every key ever used, since a lock object is never deleted (it
        /// keeps the fencing counter).
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct Namespace {
    /// The lock namespace (inside `lock run`, BANKLEASE_LOCK_NAMESPACE names the job's).
    #[arg(long, value_name = "NS", default_value = banklease::lock::DEFAULT_NAMESPACE,
          env = "BANKLEASE_LOCK_NAMESPACE")]
    namespace: String,
}

/// `run --lock`'s namespace.
#[derive(Debug, Args)]
pub(crate) struct LockNamespace {
    /// The --lock's namespace.
    #[arg(long = "lock-namespace", value_name = "NS", requires = "lock",
          default_value = banklease::lock::DEFAULT_NAMESPACE, env = "BANKLEASE_LOCK_NAMESPACE")]
    namespace: String,
}

impl LockNamespace {
    pub(crate) fn name(&self) -> &str {
        &self.namespace
    }
}

/// Who acquires: an owner name in a session.
#[derive(Debug, Args)]
pub(crate) struct Who {
    /// The owner name [default: $USER, else `banklease`]. Each process acquires in a session
    /// of its own, so two processes with the same owner never both hold a lock.
    #[arg(long, value_name = "OWNER")]
    owner: Option<String>,
    /// Act in this session (printed by `lock acquire`) instead of a new one: the same session
    /// may acquire again what it holds (a new fencing token).
    #[arg(long, value_name = "SESSION")]
    session: Option<String>,
}

impl Who {
    /// `owner` (or the default owner) in a new session.
    pub(crate) fn new(owner: Option<String>) -> Self {
        Self {
            owner,
            session: None,
        }
    }

    /// The owner, the session (a new one unless given) and the holder name
    /// `<owner>.<session>`.
    fn resolve(&self) -> Result<Holder> {
        let owner = self.owner.clone().unwrap_or_else(default_owner);
        let session = self.session.clone().unwrap_or_else(new_session);
        let name = session_holder(&owner, &session)?;
        Ok(Holder {
            owner,
            session,
            name,
        })
    }
}

/// Who holds a lock, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub owner: String,
    pub session: String,
    /// `<owner>.<session>`: what the lock record says.
    pub name: String,
}

/// `$USER` (or `$LOGNAME`) when it is an id, else `banklease`.
fn default_owner() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|u| banklease::id::validate_id("owner", u).is_ok())
        .unwrap_or_else(|| "banklease".to_owned())
}

/// How long to wait for a held lock, in the words of `flock(1)` as well.
#[derive(Debug, Args)]
pub(crate) struct Waiting {
    /// Wait for the lock, first come first served: a duration, `0` (do not wait) or `-1`
    /// (wait forever) [default: 0 for `acquire`, -1 for `run`].
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true,
          value_parser = parse_wait, conflicts_with_all = ["nonblock", "wait"])]
    block_for: Option<Wait>,
    /// Do not wait (as `flock -n`, `--nb`, `--nonblock`): `--block-for 0`.
    #[arg(short = 'n', long, visible_alias = "nb", conflicts_with = "wait")]
    nonblock: bool,
    /// Wait at most SECS seconds, fractions allowed (as `flock -w`, `--timeout`).
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "SECS",
          value_parser = parse_secs)]
    wait: Option<Wait>,
    /// Exit with CODE, 0 to 255, when the lock is held by someone else and the wait ran out
    /// (as `flock -E`; `-E 0`: a conflict is fine).
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = 1)]
    conflict_exit_code: u8,
}

impl Waiting {
    fn wait(&self, default: Wait) -> Wait {
        if self.nonblock {
            return Wait::No;
        }
        self.block_for.or(self.wait).unwrap_or(default)
    }
}

pub(crate) fn parse_secs(s: &str) -> Result<Wait, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("`{s}` is not a number of seconds from 0 to 1e9"));
    }
    let d = Duration::from_secs_f64(secs);
    Ok(if d.is_zero() { Wait::No } else { Wait::For(d) })
}

fn parse_wait(s: &str) -> Result<Wait, String> {
    s.parse()
}

/// Run one `lock` subcommand.
pub(crate) async fn run(ctx: &Ctx, command: LockCommand) -> Result<Outcome> {
    match &command {
        LockCommand::Run(args) => note_lock_file_key(args.key()),
        LockCommand::Put(args) => note_lock_file_key(args.key()),
        LockCommand::Acquire { key, .. }
        | LockCommand::Release { key, .. }
        | LockCommand::Show { key, .. } => note_lock_file_key(key),
        LockCommand::List { .. } => {}
    }
    match command {
        LockCommand::Run(args) => Ok(run::run(ctx, args).await),
        LockCommand::Put(args) => put::put(ctx, args).await,
        LockCommand::Acquire {
            key,
            who,
            duration,
            payload,
            waiting,
            ns,
        } => acquire(ctx, &ns, &key, &who, duration, payload.as_deref(), &waiting).await,
        LockCommand::Release {
            key,
            token,
            owner,
            session,
            ns,
        } => {
            // A token alone names the holding: no owner to guess.
            let holder = match (owner, session, token) {
                (None, None, Some(_)) => None,
                (owner, Some(session), _) => Some(session_holder(
                    &owner.unwrap_or_else(default_owner),
                    &session,
                )?),
                (owner, None, _) => Some(owner.unwrap_or_else(default_owner)),
            };
            release(ctx, &ns, &key, holder.as_deref(), token).await
        }
        LockCommand::Show { key, ns } => view::show(ctx, &ns, &key).await,
        LockCommand::List { ns, all } => view::list(ctx, &ns, all).await,
    }
}

/// A key written as the lock file it replaces (`backup.lock`, from `flock /var/lock/backup.lock`)
/// is a valid key, taken as given; one `note:` line says what was probably meant, since another
/// job that writes `backup` holds a different lock.
pub(crate) fn note_lock_file_key(key: &str) {
    // An invalid key is refused with its own hint (a leading `/`): one line, not two.
    if banklease::paths::validate_lock_key(key).is_err() {
        return;
    }
    if let Some(meant) = key.strip_suffix(".lock").filter(|m| !m.is_empty()) {
        eprintln!(
            "note: lock key `{key}` ends in `.lock`: a key names a lock, not a lock file; it is \
             taken as given, and a job that writes `{meant}` holds another lock"
        );
    }
}

/// The namespace's locks; `memory://` is refused, as nothing in it outlives the command.
fn locks(ctx: &Ctx, ns: &Namespace) -> Result<Locks> {
    locks_in(ctx, &ns.namespace)
}

/// [`locks_in`] for a command that acquires, releases or writes: its skew margin is first held
/// to the store's timestamp resolution, as the GC's is (a taker with a smaller margin could
/// judge a holder expired before the holder's own `valid_until`).
async fn writer_locks_in(ctx: &Ctx, ns: &str) -> Result<Locks> {
    let locks = locks_in(ctx, ns)?;
    banklease_gc::time::timing::check_skew_margin_kept(
        &ctx.bank,
        &ctx.clock,
        ctx.config.lease.skew_margin,
    )
    .await?;
    Ok(locks)
}

/// [`locks`] of the namespace named `ns`.
fn locks_in(ctx: &Ctx, ns: &str) -> Result<Locks> {
    if ctx.bank.label().starts_with("memory:") {
        bail!(
            "lock commands need a bank that outlives this process: bank=`{}` is in this \
             process's memory and its locks would vanish when the command exits; use a file:, \
             s3: or az: bank",
            ctx.bank.label()
        );
    }
    Ok(
        Locks::new(&ctx.bank, ns, ctx.clock.clone())?
            .with_skew_margin(ctx.config.lease.skew_margin),
    )
}

#[derive(Debug, Serialize)]
struct AcquireReport<'a> {
    key: &'a str,
    namespace: &'a str,
    /// The owner name, without the session.
    owner: &'a str,
    /// The session acquired in (`--session` acts in it again).
    session: Option<&'a str>,
    acquired: bool,
    /// The fencing token (null when not acquired).
    token: Option<u64>,
    /// Time left: ours when acquired (from the send time), else the holder's (store clock).
    remaining_ms: u64,
    /// The holder name: ours when acquired, else the current holder's.
    holder: Option<String>,
    payload: Option<&'a str>,
}

async fn acquire(
    ctx: &Ctx,
    ns: &Namespace,
    key: &str,
    who: &Who,
    duration: Duration,
    payload: Option<&str>,
    waiting: &Waiting,
) -> Result<Outcome> {
    let mut signals = Signals::new()?;
    let wanted = hold::Wanted {
        ns: &ns.namespace,
        key,
        who,
        duration,
        payload,
        wait: waiting.wait(Wait::No),
    };
    let outcome = hold::acquire(ctx, &wanted, &mut signals).await?;
    let namespace = ns.namespace.as_str();
    let refusal = outcome.refusal();
    match outcome {
        hold::Outcome::Held(held) => {
            let lock = held.lock();
            let remaining = lock.remaining();
            let full = lock.full_key();
            let (owner, session) = (&held.holder().owner, &held.holder().session);
            if ctx.json {
                out_json(&AcquireReport {
                    key,
                    namespace,
                    owner,
                    session: Some(session),
                    acquired: true,
                    token: Some(held.token()),
                    remaining_ms: ms(remaining),
                    holder: Some(lock.owner().to_owned()),
                    payload,
                })?;
            } else {
                out_line(&format!(
                    "acquired: key=`{full}` owner=`{owner}` session=`{session}` token={} for {}",
                    held.token(),
                    human(remaining)
                ))?;
            }
            Ok(Outcome::Yes)
        }
        hold::Outcome::Unavailable {
            holder, remaining, ..
        } => {
            if ctx.json {
                let owner = who.owner.clone().unwrap_or_else(default_owner);
                out_json(&AcquireReport {
                    key,
                    namespace,
                    owner: &owner,
                    session: None,
                    acquired: false,
                    token: None,
                    remaining_ms: ms(remaining),
                    holder: Some(holder.to_string()),
                    payload: None,
                })?;
            }
            eprintln!("error: {}", refusal.unwrap_or_default());
            Ok(Outcome::Exit(waiting.conflict_exit_code))
        }
        hold::Outcome::Interrupted(signal) => {
            eprintln!("error: {}", refusal.unwrap_or_default());
            Ok(Outcome::Exit(exit_code(
                std::os::unix::process::ExitStatusExt::from_raw(signal.as_raw()),
            )))
        }
    }
}

#[derive(Debug, Serialize)]
struct ReleaseReport<'a> {
    key: &'a str,
    namespace: &'a str,
    /// Who asked to release (null when by `--token` alone).
    owner: Option<&'a str>,
    /// The fencing token it was asked by, if any.
    token: Option<u64>,
    /// `released`, `free` or `held`.
    outcome: &'static str,
    holder: Option<String>,
    remaining_ms: u64,
}

async fn release(
    ctx: &Ctx,
    ns: &Namespace,
    key: &str,
    owner: Option<&str>,
    token: Option<u64>,
) -> Result<Outcome> {
    let locks = writer_locks_in(ctx, &ns.namespace).await?;
    let full = locks.full_key(key)?;
    let released = match (owner, token) {
        (Some(owner), Some(token)) => locks.release_token(key, owner, token).await,
        (None, Some(token)) => locks.release_holding(key, token).await,
        (Some(owner), None) => locks.release(key, owner).await,
        (None, None) => locks.release(key, &default_owner()).await,
    };
    // How the release named the holding, for the lines below.
    let asked = match (owner, token) {
        (Some(owner), _) => format!("owner=`{owner}`"),
        (None, Some(token)) => format!("token={token}"),
        (None, None) => String::new(),
    };
    let mut running = false;
    // The holder for a sentence: its name quoted once.
    let mut quoted = String::new();
    let (outcome, holder, remaining, exit) = match released {
        Ok(Release::Released) => ("released", None, Duration::ZERO, Outcome::Yes),
        Ok(Release::Free) => ("free", None, Duration::ZERO, Outcome::Yes),
        Err(Error::Unavailable {
            holder, remaining, ..
        }) => {
            running = matches!(holder, LockHolder::Running { .. });
            quoted = holder.quoted();
            ("held", Some(holder.to_string()), remaining, Outcome::No)
        }
        Err(e) => return Err(e.into()),
    };
    if ctx.json {
        out_json(&ReleaseReport {
            key,
            namespace: locks.namespace(),
            owner,
            token,
            outcome,
            holder,
            remaining_ms: ms(remaining),
        })?;
    } else {
        match (outcome, holder) {
            ("released", _) => out_line(&format!("released: key=`{full}` {asked}"))?,
            ("free", _) => out_line(&format!(
                "free: key=`{full}` was not held; nothing to release"
            ))?,
            _ if running => eprintln!(
                "error: not released: key=`{full}` is held by {quoted} ({} left); stop that \
                 process, or pass --token with its fencing token (`lock show`) to release it \
                 from under it (its COMMAND is then stopped)",
                human(remaining)
            ),
            _ => eprintln!(
                "error: not released: key=`{full}` is held by {quoted} ({} left), not by \
                 {asked}{}",
                human(remaining),
                match (owner, token) {
                    (Some(_), Some(_)) => " with that --token",
                    (None, Some(_)) => " (its token is another: `lock show` gives it)",
                    _ => "; pass --owner and --session as `lock acquire` printed them",
                }
            ),
        }
    }
    Ok(exit)
}
