//! The command line of `banklease` (clap): every subcommand, flag and its help, for `main`'s
//! dispatch and for the man pages and completions (`share.rs`).

use std::path::PathBuf;
use std::time::Duration;

use banklease::checkpoint::Status;
use clap::{Parser, Subcommand};

use crate::{agent, lock};

/// Admin CLI for a banklease bank: owner leases, checkpoints, and the checkpoint GC.
///
/// Exit codes: 0 yes / done, 1 no (not valid, missing, or a listing met unreadable entries),
/// 2 error; 75 unavailable (a lock held, a GC daemon active: try later). `run` and `lock run`
/// exit with COMMAND's status, 75 when their hold was lost and COMMAND stopped, and 125 when
/// they failed themselves (126, 127: COMMAND cannot be executed, not found).
#[derive(Debug, Parser)]
#[command(name = "banklease", version)]
pub(crate) struct Cli {
    /// Configuration file (TOML); `BANKLEASE_<SECTION>__<KEY>` variables override it.
    #[arg(long, global = true, env = "BANKLEASE_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Bank URL; overrides `[bank] url` (file:///path, s3://bucket/prefix, az://, gs://,
    /// swift://). There is no default bank; `init` makes one, every other command refuses a URL
    /// that holds none. Inside `banklease run` and `lock run`, BANKLEASE_BANK is the job's bank.
    #[arg(long, global = true, value_name = "URL", env = "BANKLEASE_BANK")]
    pub(crate) bank: Option<String>,

    /// Print JSON (one object per line) instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// Show the log on stderr: `-v` info, `-vv` debug, `-vvv` trace (RUST_LOG overrides).
    /// Without it, a warning or a note is one line and an error only the command's `error:`
    /// line.
    #[arg(short = 'v', global = true, action = clap::ArgAction::Count)]
    pub(crate) verbosity: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Judge an owner's lease on the store's clock: exit 0 if it is alive with at least the
    /// validity window left, 1 if not (missing, expired, too little left), 2 on error.
    ValidityCheck {
        /// The owner id.
        #[arg(long, value_name = "ID")]
        owner: String,
        /// Lease time that must be left, e.g. `500ms` [default: the validity window the owner
        /// declared in its lease; `[lease] validity_window` when there is no lease to read].
        #[arg(long, value_name = "DURATION", value_parser = banklease::config::parse_duration)]
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
    /// Internal: the guard `lock run` and `run --lock` start; it starts COMMAND and holds its
    /// tree.
    #[command(name = "__guard", hide = true)]
    Guard {
        /// The supervisor's pid.
        #[arg(long)]
        parent: i32,
        /// The first deadline, in ns on CLOCK_BOOTTIME; later ones come on the socket.
        #[arg(long)]
        deadline_ns: u64,
        /// Time between SIGTERM and SIGKILL when the deadline passes.
        #[arg(long, value_parser = humantime::parse_duration)]
        kill_after: Duration,
        /// The supervisor's Unix socket (in a directory only its user may enter).
        #[arg(long)]
        socket: PathBuf,
        /// COMMAND's cgroup.
        #[arg(long)]
        cgroup: Option<PathBuf>,
        /// Where to say the tree was proved gone after the supervisor died.
        #[arg(long)]
        done: Option<PathBuf>,
        /// COMMAND and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: what the guard starts in COMMAND's place (dies with the guard, joins the
    /// cgroup, then becomes COMMAND).
    #[command(name = "__exec", hide = true)]
    Exec {
        /// The guard's pid.
        #[arg(long)]
        parent: i32,
        /// COMMAND's cgroup.
        #[arg(long)]
        cgroup: Option<PathBuf>,
        /// COMMAND and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Owner operations for a command started by `banklease run`, sent to its agent (the Unix
    /// socket in `BANKLEASE_AGENT`). Exit 0 done, 1 refused (lease not valid or lost, checkpoint
    /// collected), 2 error.
    Agent(agent::client::AgentArgs),
    /// Print the completion script of banklease for SHELL on stdout. Exit 0 done, 2 error.
    #[command(after_help = "Example (bash, for your user):\n  \
        mkdir -p ~/.local/share/bash-completion/completions\n  \
        banklease completions bash > ~/.local/share/bash-completion/completions/banklease")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages of banklease (section 1, one per subcommand) and banklease-gc
    /// (section 8) below DIR, for `MANPATH=DIR man banklease` after `cargo install`. Exit 0
    /// done, 2 error.
    #[command(after_help = "Example (for your user):\n  \
        banklease man ~/.local/share/man   # then: man banklease-lock-run")]
    Man {
        /// The directory (`man1` and `man8` are made in it).
        dir: PathBuf,
    },
    /// Internal: write the man pages (every subcommand's too; banklease-gc's in section 8) and
    /// the bash, zsh and fish completion scripts of banklease and banklease-gc below DIR, laid
    /// out as /usr/share.
    #[command(name = "__share", hide = true)]
    Share {
        /// The directory, made if missing.
        dir: PathBuf,
    },
}

impl Command {
    /// The first word of a `run` or `lock run` COMMAND when it looks like an option (`-x`,
    /// `--bogus`): an option of the supervisor's mistyped or put after the key, not a program
    /// anyone means to run; and whether a `--` follows it (then it was meant as an option).
    pub(crate) fn leading_option(&self) -> Option<(&std::ffi::OsStr, bool)> {
        let command = match self {
            Command::Run(args) => args.command(),
            Command::Lock(lock::LockCommand::Run(args)) => args.command(),
            _ => return None,
        };
        let (first, rest) = command.split_first()?;
        first
            .to_string_lossy()
            .starts_with('-')
            .then(|| (first.as_os_str(), rest.iter().any(|w| w == "--")))
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
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
pub(crate) enum CheckpointCommand {
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
    /// Delete checkpoints by id (or unique prefix): a failed (`error`) one, an `available` one
    /// with --available, and a `protecting` one only once its owner is proved dead, as the GC
    /// judges (then it is decided and collected as a pass collects it: an owner's completion
    /// racing it wins or loses whole). Data first, then records; `checkpoint explain` shows who
    /// deleted it and why. Exit 0 when each was deleted (or already was), 1 when one was
    /// refused (nothing of it deleted), 2 on an error.
    Delete {
        /// The checkpoint ids (or unique prefixes).
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        /// Delete `available` checkpoints too (completed backups).
        #[arg(long)]
        available: bool,
        /// Say what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Who deletes, recorded with it [default: $USER, else $LOGNAME, else the uid].
        #[arg(long, value_name = "NAME", env = "USER")]
        operator: Option<String>,
        /// Why, recorded with it.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
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
    s.parse()
        .map_err(|e: banklease::checkpoint::UnknownStatus| e.to_string())
}
