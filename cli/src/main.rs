//! `banklease`: the admin command line for a bank.
//!
//! It judges owners' leases the way the GC does (on the store's clock, with the configured skew
//! margin), lists leases and checkpoints, and runs one GC pass with the daemon's engine.
//!
//! Exit codes, for scripts:
//! - `0`: done, and the answer is yes (the lease is valid long enough, the object exists, ...);
//! - `1`: done, and the answer is no (lease missing, expired or too short; lease or checkpoint
//!   missing; a listing met unreadable entries, which it names on stderr);
//! - `2`: error (bad configuration or arguments, invalid id, unreachable store, failed pass).
//!
//! **API boundary:** the CLI only reads the bank, except the commands that write (`gc`, `init`,
//! `run`, `lock` but `lock list`/`show`, `checkpoint resolve`, `doctor` but `--read-only`) and
//! the store-clock reading of the read commands, which rewrites one probe per host at most
//! (`_banklease/clock/host-…`, none on a `file:` bank; see [`banklease::Bank::reading_only`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use banklease::checkpoint::Status;
use banklease::clock::{SharedClock, SystemClock};
use banklease::{Bank, Config, ErrorKind, LeaseObserver, StoreTime};
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod agent;
mod checkpoint;
mod child;
mod doctor;
mod explain;
mod gc;
mod init;
mod lease;
mod lock;
mod output;
mod validity;

use output::{human, ms, out_json, out_line, out_table};

/// Reads (of leases, checkpoints, decisions) in flight at once while listing.
const LIST_CONCURRENCY: usize = 16;

/// Admin CLI for a banklease bank: owner leases, checkpoints, and the checkpoint GC.
///
/// Exit codes: 0 yes / done, 1 no (not valid, missing, or a listing met unreadable entries),
/// 2 error.
#[derive(Debug, Parser)]
#[command(name = "banklease", version)]
struct Cli {
    /// Configuration file (TOML); `BANKLEASE_<SECTION>__<KEY>` variables override it.
    #[arg(long, global = true, env = "BANKLEASE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Bank URL; overrides `[bank] url` (file:///path, s3://bucket/prefix, az://, gs://,
    /// swift://). There is no default bank; `init` makes one, every other command refuses a URL
    /// that holds none. Inside `banklease run` and `lock run`, BANKLEASE_BANK is the job's bank.
    #[arg(long, global = true, value_name = "URL", env = "BANKLEASE_BANK")]
    bank: Option<String>,

    /// Print JSON (one object per line) instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Judge an owner's lease on the store's clock: exit 0 if it is alive with at least the
    /// validity window left, 1 if not (missing, expired, too little left), 2 on error.
    ValidityCheck {
        /// The owner id.
        #[arg(long, value_name = "ID")]
        owner: String,
        /// Lease time that must be left, e.g. `500ms` [default: the validity window the owner
        /// declared in its lease; `[lease] validity_window` when there is no lease to read].
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        validity_window: Option<Duration>,
    },
    /// Owner leases.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Checkpoints and their status.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Named locks on any key (`jobs/nightly`): run a command under one, acquire, release, show,
    /// list. Needs a bank whose conditional writes are enforced and atomic (`file:`, S3, Azure);
    /// refused on others (Swift), with the reason, and on `memory://` (nothing outlives the
    /// command).
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// Run one GC pass: collect the protecting checkpoints of owners whose lease is dead.
    ///
    /// Uses the daemon's engine and the `[gc]` configuration. Exit 0 when the pass completed
    /// cleanly (even if it collected nothing), 1 when it completed but met errors (each object
    /// named on stderr, left for the next pass) or the safety brake refused collecting, 2 when
    /// it failed, 75 when a GC daemon is active (the pass would duplicate its work; see
    /// --beside-daemon).
    Gc {
        /// Plan and report only; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Collect even when the safety brake would refuse the pass.
        #[arg(long)]
        force: bool,
        /// Run the pass even while a GC daemon is active (beside it, without the GC lease)
        /// instead of refusing with 75.
        #[arg(long)]
        beside_daemon: bool,
    },
    /// Probe the bank and print its capability table and, per guarantee (owner lease,
    /// completion versus collection, named locks), whether it rests on an atomic primitive, on
    /// timing only, or is not given. Exit 0 when the bank supports owner leases and the GC, 1
    /// when it cannot or the configuration's windows are refused for it, 2 on error.
    Doctor {
        /// Rounds of 16 concurrent conditional writers raced on fresh keys.
        #[arg(long, value_name = "N", default_value_t = 8,
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        race_rounds: u32,
        /// Write nothing: check only what reading can (the descriptor, listings, the store's
        /// time, the configuration), for read-only credentials or a read-only directory.
        #[arg(long)]
        read_only: bool,
    },
    /// Run COMMAND as an owner: hold an owner lease while it runs, and answer its owner
    /// operations (`banklease agent …`) over a private Unix socket.
    ///
    /// Exit status: COMMAND's own (128 + N when signal N ended it); 75 when the lease (or the
    /// --lock) stopped being valid and COMMAND was stopped (SIGTERM, then SIGKILL after
    /// --kill-after); 125 when `run` itself failed (configuration, lease, socket); 126 when
    /// COMMAND cannot be executed; 127 when it is not found; with --lock, 1 (or
    /// --lock-conflict-exit-code) when the lock is held by someone else and the wait ran out, and
    /// 128 + N when signal N came while waiting for it (nothing was run). When COMMAND exits, the checkpoints it left protecting are
    /// completed as `error` and the lease is released.
    #[command(
        after_help = "Example:\n  banklease run --checkpoint-prefix nightly- -- ./backup.sh"
    )]
    Run(agent::run::RunArgs),
    /// Make the configured bank a bank: write its descriptor (`banklease.json`, the layout
    /// version) unless it has one. Refuses a prefix holding anything but a bank's objects; a
    /// bank made before `init` existed is adopted. Exit 0 done, 2 error.
    Init {
        /// Kept for scripts: on Swift `init` creates a missing container anyway (when the user
        /// may); for S3, Azure and GCS it names the provider's command that creates it.
        #[arg(long)]
        create_container: bool,
    },
    /// Internal: the guard `lock run` and `run --lock` start in COMMAND's process group.
    #[command(name = "__guard", hide = true)]
    Guard {
        /// The supervisor's pid.
        #[arg(long)]
        parent: i32,
        /// The first deadline, in ns on CLOCK_BOOTTIME; later ones come on stdin.
        #[arg(long)]
        deadline_ns: u64,
        /// Time between SIGTERM and SIGKILL when the deadline passes.
        #[arg(long, value_parser = humantime::parse_duration)]
        kill_after: Duration,
    },
    /// Owner operations for a command started by `banklease run`, sent to its agent (the Unix
    /// socket in `BANKLEASE_AGENT`). Exit 0 done, 1 refused (lease not valid or lost, checkpoint
    /// collected), 2 error.
    Agent(agent::client::AgentArgs),
}

#[derive(Debug, Subcommand)]
enum LeaseCommand {
    /// List every owner lease with its state on the store's clock. Exit 1 if some lease could
    /// not be read (each is named on stderr).
    List,
    /// Show one owner's lease in detail. Exit 1 if there is none.
    Show {
        /// The owner id.
        owner: String,
    },
}

#[derive(Debug, Subcommand)]
enum CheckpointCommand {
    /// List checkpoints. Exit 1 if some could not be read (each is named on stderr).
    List {
        /// Only checkpoints with this status (protecting, available, error, deleting, ...).
        #[arg(long, value_name = "STATUS", value_parser = parse_status)]
        status: Option<Status>,
        /// Only checkpoints of this owner.
        #[arg(long, value_name = "ID")]
        owner: Option<String>,
    },
    /// Show one checkpoint: its index, the decision taken on it, its objects. Exit 1 if its
    /// index.json does not exist (the status then says whether the GC deleted it).
    Show {
        /// The checkpoint id.
        id: String,
    },
    /// Explain a checkpoint's state: who decided it and on what evidence (for a collection: the
    /// owner's lease as read, the store time it was judged at, margin and grace, the collector
    /// and pass), its owner's lease now, and what happens next or what a human must do — also
    /// when its index.json or decision cannot be read. Exit 0 explained, 1 not in the bank.
    Explain {
        /// The checkpoint id.
        id: String,
    },
    /// Resolve a checkpoint the GC cannot handle: one whose index.json or decision cannot be
    /// read. An unreadable index.json under a dead owner is collected (the owner judged as the GC
    /// does, the GC's decision written create-if-absent with your name in its evidence,
    /// index.json a tombstone; the next pass deletes the data); under a decision, it is rebuilt
    /// from the decision. An unreadable decision is rebuilt from the outcome index.json records;
    /// when index.json does not say, it is refused unless `--as deleted`. Every unreadable
    /// record replaced is kept under `_banklease/set-aside/`. Never a live owner's, never over a
    /// readable decision. Exit 0 resolved, 1 refused (the one-line reason says what to do), 2
    /// error.
    Resolve {
        /// The checkpoint id.
        id: String,
        /// Who resolves, recorded in the decision [default: $USER].
        #[arg(long, value_name = "NAME", env = "USER")]
        operator: Option<String>,
        /// Say the data is garbage: an unreadable decision whose outcome no record states is
        /// replaced by the GC's (it may have recorded the owner's `available`: only if you
        /// know). The owner must still be dead, as the GC judges.
        #[arg(long = "as", value_name = "OUTCOME", value_parser = ["deleted"])]
        as_outcome: Option<String>,
    },
}

fn parse_status(s: &str) -> Result<Status, String> {
    // An argument, not the configuration: the bare reason.
    s.parse().map_err(|e: banklease::Error| match e {
        banklease::Error::Config { message } => message,
        other => other.to_string(),
    })
}

/// How a command ended, when it did not fail outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Exit 0.
    Yes,
    /// Exit 1.
    No,
    /// Exit 2, already reported.
    Failed,
    /// Exit with this status (`banklease run`).
    Exit(u8),
}

/// Blocking threads of the CLI's runtime.
const CLI_BLOCKING_THREADS: usize = 32;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `run` and `lock run` exit with COMMAND's status: their own usage errors must not
        // look like COMMAND's exit 2, so they are 125 ("the supervisor failed").
        Err(e) if e.use_stderr() && runs_a_command(std::env::args_os().skip(1)) => {
            let _ = e.print();
            return ExitCode::from(child::EXIT_RUN_FAILED);
        }
        Err(e) => e.exit(),
    };
    init_tracing();
    // Flat memory on file banks: every file call runs on the blocking pool, which would grow
    // up to 512 threads; `banklease gc` keeps `gc.concurrency` (16 by default) in flight.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(CLI_BLOCKING_THREADS)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(Outcome::Yes) => ExitCode::SUCCESS,
        Ok(Outcome::No) => ExitCode::from(1),
        Ok(Outcome::Failed) => ExitCode::from(2),
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        // Our stdout's reader went away (`banklease lease list | head`): nothing left to say.
        Err(e) if e.chain().any(|c| c.is::<output::StdoutClosed>()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", banklease_gc::logging::error_line(&e));
            ExitCode::from(failure_exit(
                banklease_gc::error::kind_of(&e),
                runs_a_command(std::env::args_os().skip(1)),
            ))
        }
    }
}

/// Someone else holds what the command needs; try again later (sysexits' EX_TEMPFAIL).
const EXIT_TEMPFAIL: u8 = 75;

/// The exit status of a command that failed with an error of `kind` (`None`: not a library or
/// GC error), as README's "Exit codes" says; `supervises`: the command is `run` or `lock run`.
///
/// The one place where an error's kind picks the status of a failed command:
/// - a supervisor's own failure is 125 whatever its kind, so that it never looks like COMMAND's
///   exit 2 (a lost hold is not an error there: the hold's watch stops COMMAND and exits 75);
/// - [`ErrorKind::Unavailable`]: someone else holds what was needed — for `banklease gc`, an
///   active GC daemon holds the GC lease — 75, as `banklease-gc --once` exits;
/// - every other kind is an error: 2.
///
/// Not here, because the kind alone does not decide them: the lock commands' refusals (`lock
/// acquire` and `lock run` exit 1 when the lock is held by someone else, or the `-E` code, as
/// flock(1) does; `lock release` 1; `lock put` 1 for a stale token), which print the holder or
/// the newer token from the error's fields and end as an [`Outcome`], not as a failure.
fn failure_exit(kind: Option<ErrorKind>, supervises: bool) -> u8 {
    match kind {
        _ if supervises => child::EXIT_RUN_FAILED,
        Some(ErrorKind::Unavailable) => EXIT_TEMPFAIL,
        _ => 2,
    }
}

/// Whether `command` only reads the bank: it leaves nothing new there (at most this host's
/// clock probe, rewritten in place) and works for a user who may only read.
fn reads_only(command: &Command) -> bool {
    use lock::LockCommand as L;
    matches!(
        command,
        Command::ValidityCheck { .. }
            | Command::Lease(_)
            | Command::Checkpoint(
                CheckpointCommand::List { .. }
                    | CheckpointCommand::Show { .. }
                    | CheckpointCommand::Explain { .. }
            )
            | Command::Lock(L::Show { .. } | L::List { .. })
            | Command::Doctor {
                read_only: true,
                ..
            }
            | Command::Gc { dry_run: true, .. }
    )
}

/// Whether the command line names `run` or `lock run` (global options and their values
/// skipped).
fn runs_a_command(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let mut words = Vec::new();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy().into_owned();
        if arg == "--" {
            break;
        }
        if matches!(arg.as_str(), "--bank" | "--config") {
            args.next();
        } else if !arg.starts_with('-') {
            words.push(arg);
            if words.len() == 2 {
                break;
            }
        }
    }
    match words.as_slice() {
        [first, ..] if first == "run" => true,
        [first, second] => first == "lock" && second == "run",
        _ => false,
    }
}

fn init_tracing() {
    // A pass's problems are printed from its report, one `error:` line each: not logged twice.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!("warn,{}=off", banklease_gc::report::PROBLEM_TARGET))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(banklease_gc::logging::stderr_colour())
        .with_writer(std::io::stderr)
        .init();
}

/// What every command needs: the loaded configuration, the bank, the clock.
struct Ctx {
    config: Config,
    bank: Bank,
    clock: SharedClock,
    json: bool,
}

impl Ctx {
    /// `create`: a `file:` bank's directory is made when missing (`init` only). `diagnosis`:
    /// the configuration's refusals are reported by `doctor`, not failed on.
    fn load(
        file: Option<&std::path::Path>,
        bank: Option<&str>,
        json: bool,
        create: bool,
        diagnosis: bool,
    ) -> Result<Self> {
        // The one gate: `--bank` is applied before the configuration is validated. The
        // library's errors already name the file, key or URL at fault.
        let apply = |config: &mut Config| {
            if let Some(url) = bank {
                config.bank.url = url.to_owned();
            }
        };
        let config = if diagnosis {
            Config::load_for_diagnosis(file, apply)?
        } else {
            Config::load_with(file, apply)?
        };
        // No bank given is said as such; the store client gets `[bank]`'s limits: the budget
        // the gate judged.
        config.bank_url()?;
        let bank = Bank::open_configured(&config.bank, create)?;
        Ok(Self {
            config,
            bank,
            clock: Arc::new(SystemClock),
            json,
        })
    }

    fn observer(&self) -> LeaseObserver {
        LeaseObserver::new(
            self.bank.clone(),
            self.clock.clone(),
            self.config.lease.skew_margin,
        )
        .with_read_staleness(self.config.gc.read_staleness)
    }

    /// One reading of the store's clock serves a whole command.
    async fn store_time(&self) -> Result<StoreTime> {
        self.observer().store_time().await.with_context(|| {
            format!(
                "cannot read the store's clock of bank=`{}`",
                self.bank.label()
            )
        })
    }
}

async fn run(cli: Cli) -> Result<Outcome> {
    let Cli {
        config,
        bank,
        json,
        command,
    } = cli;
    let diagnosis = matches!(command, Command::Doctor { .. });
    let load = || Ctx::load(config.as_deref(), bank.as_deref(), json, false, diagnosis);
    let ctx = match command {
        // The agent's client needs no configuration: it talks to the agent only.
        Command::Agent(args) => return agent::client::run(args, json).await,
        Command::Guard {
            parent,
            deadline_ns,
            kill_after,
        } => {
            let clock: SharedClock = Arc::new(SystemClock);
            return Ok(child::guard(parent, deadline_ns, kill_after, &clock).await);
        }
        Command::Run(args) => {
            return Ok(match load() {
                Ok(ctx) => agent::run::run(&ctx, args).await,
                Err(e) => {
                    eprintln!("error: {}", banklease_gc::logging::error_line(&e));
                    Outcome::Exit(agent::run::EXIT_RUN_FAILED)
                }
            })
        }
        Command::Init { create_container } => {
            let ctx = Ctx::load(config.as_deref(), bank.as_deref(), json, true, false)?;
            return init::init(&ctx, create_container).await;
        }
        _ => load()?,
    };
    // Commands that only read and judge leave nothing new in the bank and work for a user who
    // may only read. Never for a writer.
    let mut ctx = ctx;
    if reads_only(&command) {
        ctx.bank = ctx.bank.reading_only();
    }
    // Before anything else: a bank in a layout this release does not know is not touched, and
    // a URL that holds no bank is refused (a typo must not read as a healthy empty bank) —
    // except by `doctor`, which an operator runs on a store before making a bank in it.
    match banklease::layout::check(&ctx.bank).await {
        Err(e @ banklease::Error::NoBank { .. }) if matches!(command, Command::Doctor { .. }) => {
            eprintln!("note: {e}; doctor checks the store only");
        }
        checked => checked?,
    }
    match command {
        Command::ValidityCheck {
            owner,
            validity_window,
        } => validity::validity_check(&ctx, &owner, validity_window).await,
        Command::Lease(LeaseCommand::List) => lease::lease_list(&ctx).await,
        Command::Lease(LeaseCommand::Show { owner }) => lease::lease_show(&ctx, &owner).await,
        Command::Checkpoint(CheckpointCommand::List { status, owner }) => {
            checkpoint::checkpoint_list(&ctx, status, owner.as_deref()).await
        }
        Command::Checkpoint(CheckpointCommand::Show { id }) => {
            checkpoint::checkpoint_show(&ctx, &id).await
        }
        Command::Checkpoint(CheckpointCommand::Explain { id }) => explain::explain(&ctx, &id).await,
        Command::Checkpoint(CheckpointCommand::Resolve {
            id,
            operator,
            as_outcome,
        }) => {
            let assertion = match as_outcome.as_deref() {
                Some("deleted") => banklease_gc::resolve::Assertion::Deleted,
                _ => banklease_gc::resolve::Assertion::None,
            };
            let Some(operator) = operator.filter(|o| !o.trim().is_empty()) else {
                anyhow::bail!(
                    "checkpoint resolve records who resolved it: pass --operator NAME (or set \
                     USER)"
                );
            };
            explain::resolve(&ctx, &id, &operator, assertion).await
        }
        Command::Gc {
            dry_run,
            force,
            beside_daemon,
        } => gc::gc(&ctx, dry_run, force, beside_daemon).await,
        Command::Lock(command) => lock::run(&ctx, command).await,
        Command::Doctor {
            read_only: true, ..
        } => doctor::read_only(&ctx).await,
        Command::Doctor { race_rounds, .. } => doctor::run(&ctx, race_rounds).await,
        Command::Run(_) | Command::Agent(_) | Command::Init { .. } | Command::Guard { .. } => {
            unreachable!("dispatched above")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failures_exit_status_comes_from_its_kind() {
        // An active GC daemon (`banklease gc`): try again later.
        let active = anyhow::Error::new(banklease_gc::Error::from(banklease_gc::ActiveElsewhere {
            holder: banklease::OwnerId::parse("gc-1").unwrap(),
            holder_host: None,
            holder_pid: None,
            bank: "file:///b".into(),
        }));
        let kind = banklease_gc::error::kind_of(&active);
        assert_eq!(kind, Some(ErrorKind::Unavailable));
        assert_eq!(failure_exit(kind, false), 75);
        // Every other kind, and an error that is no library error, is 2.
        for kind in [
            Some(ErrorKind::Store),
            Some(ErrorKind::Transient),
            Some(ErrorKind::NotABank),
            Some(ErrorKind::InvalidInput),
            None,
        ] {
            assert_eq!(failure_exit(kind, false), 2, "{kind:?}");
        }
        // A supervisor's own failure never looks like COMMAND's status.
        for kind in [Some(ErrorKind::Unavailable), Some(ErrorKind::Store), None] {
            assert_eq!(failure_exit(kind, true), child::EXIT_RUN_FAILED, "{kind:?}");
        }
        // A context above the library's error does not hide its kind.
        let wrapped = anyhow::Error::new(banklease::Error::NoBankGiven).context("loading");
        assert_eq!(
            banklease_gc::error::kind_of(&wrapped),
            Some(ErrorKind::InvalidInput)
        );
    }
}
