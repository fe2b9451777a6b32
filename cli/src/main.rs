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

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use banklease::clock::StoreTime;
use banklease::clock::{SharedClock, SystemClock};
use banklease::{Bank, Config, ErrorKind, LeaseObserver};
use clap::{CommandFactory as _, Parser};

mod agent;
mod args;
mod checkpoint;
mod child;
mod doctor;
mod explain;
mod gc;
mod init;
mod lease;
mod lock;
mod logging;
mod output;
mod share;
mod validity;

use args::{CheckpointCommand, Cli, Command, LeaseCommand};
use output::{human, ms, out_json, out_line, out_table};

/// Reads (of leases, checkpoints, decisions) in flight at once while listing.
const LIST_CONCURRENCY: usize = 16;

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
        // A usage error is one line, as every error. `run` and `lock run` exit with COMMAND's
        // status: their own usage errors must not look like COMMAND's exit 2, so they are 125
        // ("the supervisor failed").
        Err(e) if e.use_stderr() => {
            eprintln!("{}", usage_line(&e));
            return ExitCode::from(if runs_a_command(std::env::args_os().skip(1)) {
                child::EXIT_RUN_FAILED
            } else {
                2
            });
        }
        // --help, --version.
        Err(e) => e.exit(),
    };
    if let Some((word, dashes_after)) = cli.command.leading_option() {
        // Before a `--` of its own, it was meant as an option, and is one this command lacks.
        eprintln!(
            "error: {}; see --help",
            if dashes_after {
                format!("unknown option `{}`", word.to_string_lossy())
            } else {
                format!(
                    "unexpected argument `{}` where COMMAND begins: options go before COMMAND \
                     (and `--`)",
                    word.to_string_lossy()
                )
            }
        );
        return ExitCode::from(child::EXIT_RUN_FAILED);
    }
    logging::init(cli.verbosity);
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
    let outcome = runtime.block_on(run(cli));
    // What the command cost, for an operator weighing it (BENCHMARKS.md's request table).
    if std::env::var_os("BANKLEASE_COUNT_REQUESTS").is_some_and(|v| v == "1") {
        eprintln!("note: {}", banklease::store::requests_sent());
    }
    match outcome {
        Ok(Outcome::Yes) => ExitCode::SUCCESS,
        Ok(Outcome::No) => ExitCode::from(1),
        Ok(Outcome::Failed) => ExitCode::from(2),
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        // Our stdout's reader went away (`banklease lease list | head`): nothing left to say.
        Err(e) if e.chain().any(|c| c.is::<output::StdoutClosed>()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
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

/// Whether `command` only reads the bank: it writes nothing there (the store's time is the
/// `Date` of a read) and works for a user who may only read.
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
                    | CheckpointCommand::Delete { dry_run: true, .. }
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

/// clap's usage error as one `error:` line: its message, the argument it names and its tip;
/// not the usage, which `--help` shows.
fn usage_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut parts = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty());
    let first = parts.next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let rest: Vec<&str> = parts.collect();
    let joined = if rest.is_empty() {
        first.to_owned()
    } else {
        format!("{} {}", first, rest.join("; "))
    };
    format!("error: {joined}; see --help")
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
        verbosity,
    } = cli;
    let diagnosis = matches!(command, Command::Doctor { .. });
    let load = || Ctx::load(config.as_deref(), bank.as_deref(), json, false, diagnosis);
    let ctx = match command {
        // Both describe the command line only: no configuration, no bank.
        Command::Completions { shell } => {
            share::print_completions(shell, Cli::command())?;
            return Ok(Outcome::Yes);
        }
        Command::Man { dir } => {
            let cmds = vec![
                (Cli::command(), "1"),
                (banklease_gc_daemon::args::Cli::command(), "8"),
            ];
            for path in share::write_man(&dir, cmds)? {
                out_line(&path.display().to_string())?;
            }
            return Ok(Outcome::Yes);
        }
        Command::Share { dir } => {
            let cmds = vec![
                (Cli::command(), "1"),
                (banklease_gc_daemon::args::Cli::command(), "8"),
            ];
            for path in share::write_share(&dir, cmds)? {
                out_line(&path.display().to_string())?;
            }
            return Ok(Outcome::Yes);
        }
        // The agent's client needs no configuration: it talks to the agent only.
        Command::Agent(args) => return agent::client::run(args, json).await,
        Command::Guard {
            parent,
            deadline_ns,
            kill_after,
            socket,
            cgroup,
            done,
            command,
        } => {
            let clock: SharedClock = Arc::new(SystemClock);
            let args = child::GuardArgs {
                parent,
                deadline_ns,
                kill_after,
                socket,
                cgroup,
                done,
                argv: command,
            };
            return Ok(child::guard(args, &clock).await);
        }
        Command::Exec {
            parent,
            cgroup,
            command,
        } => return Ok(child::exec(parent, cgroup, &command)),
        Command::Run(args) => {
            return Ok(match load() {
                Ok(ctx) => agent::run::run(&ctx, args).await,
                Err(e) => {
                    eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
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
        Command::Checkpoint(CheckpointCommand::Delete {
            ids,
            available,
            dry_run,
            operator,
            reason,
        }) => {
            // Cron sets LOGNAME, not always USER; failing both, the uid still names someone.
            let operator = operator
                .filter(|o| !o.trim().is_empty())
                .or_else(|| {
                    std::env::var("LOGNAME")
                        .ok()
                        .filter(|o| !o.trim().is_empty())
                })
                .unwrap_or_else(|| format!("uid {}", rustix::process::getuid().as_raw()));
            let request = banklease_gc::operator::delete::DeleteRequest {
                available,
                dry_run,
                operator,
                reason,
            };
            checkpoint::delete::checkpoint_delete(&ctx, &ids, &request).await
        }
        Command::Checkpoint(CheckpointCommand::Resolve {
            id,
            operator,
            as_outcome,
        }) => {
            let assertion = match as_outcome.as_deref() {
                Some("deleted") => banklease_gc::operator::resolve::Assertion::Deleted,
                _ => banklease_gc::operator::resolve::Assertion::None,
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
        } => gc::gc(&ctx, dry_run, force, beside_daemon, verbosity > 0).await,
        Command::Lock(command) => lock::run(&ctx, command).await,
        Command::Doctor {
            read_only: true, ..
        } => doctor::read_only(&ctx).await,
        Command::Doctor { race_rounds, .. } => {
            doctor::run(&ctx, race_rounds).await.map_err(|e| {
                // Refused a write: the doctor that only reads is the one this user can run.
                let refused = e.chain().any(|c| {
                    matches!(
                        c.downcast_ref::<banklease::Error>(),
                        Some(banklease::Error::Permission { .. })
                    )
                });
                if refused {
                    anyhow::anyhow!(
                        "{}; `banklease doctor --read-only` checks what a user who may only read \
                         can do (doctor writes its probes)",
                        banklease_gc_daemon::logging::error_line(&e)
                    )
                } else {
                    e
                }
            })
        }
        Command::Run(_)
        | Command::Agent(_)
        | Command::Init { .. }
        | Command::Guard { .. }
        | Command::Exec { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::Share { .. } => {
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
