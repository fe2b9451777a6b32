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
//! **API boundary:** the CLI only reads the bank, except `gc` (which collects) and the store-clock
//! probe every lease judgement makes (`_banklease/clock`, see [`banklease::Bank::store_time`]).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use banklease::checkpoint::{self, CheckpointRecord, Decider, Decision, Status};
use banklease::clock::{SharedClock, SystemClock};
use banklease::lease::read_lease;
use banklease::observe::{error_chain, judge};
use banklease::{Bank, Config, LeaseObserver, LeaseView, OwnerId, StoreTime};
use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;
use tracing_subscriber::EnvFilter;

mod agent;
mod doctor;
mod lock;

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

    /// Bank URL; overrides `[bank] url` (file:///path, memory://, s3://bucket/prefix).
    #[arg(long, global = true, value_name = "URL")]
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
        /// Lease time that must be left [default: `[lease] validity_window`], e.g. `500ms`.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        validity_window: Option<Duration>,
    },
    /// Owner leases.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Checkpoints and their status.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Named leases and locks on any key (`locks/<namespace>/<key>`): acquire, release, show,
    /// list. Needs a bank with atomic conditional writes (memory, S3); refused on others.
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// Run one GC pass: collect the protecting checkpoints of owners whose lease is dead.
    ///
    /// Uses the daemon's engine and the `[gc]` configuration. Exit 0 when the pass completed
    /// (even if it collected nothing or was braked), 2 when it failed.
    Gc {
        /// Plan and report only; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Collect even when the safety brake would refuse the pass.
        #[arg(long)]
        force: bool,
    },
    /// Probe the bank and print its capability table and, per guarantee (owner lease,
    /// completion versus collection, named locks), whether it rests on an atomic primitive, on
    /// timing only, or is not given. Exit 0 when the bank supports owner leases and the GC, 1
    /// when it cannot, 2 on error.
    Doctor {
        /// Rounds of 16 concurrent conditional writers raced on fresh keys.
        #[arg(long, value_name = "N", default_value_t = 8,
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        race_rounds: u32,
    },
    /// Run COMMAND as an owner: hold an owner lease while it runs, and answer its owner
    /// operations (`banklease agent …`) over a private Unix socket.
    ///
    /// Exit status: COMMAND's own (128 + N when signal N ended it); 75 when the lease stopped
    /// being valid and COMMAND was stopped (SIGTERM, then SIGKILL after --kill-after); 125 when
    /// `run` itself failed (configuration, lease, socket); 126 when COMMAND cannot be executed;
    /// 127 when it is not found. When COMMAND exits, the checkpoints it left protecting are
    /// completed as `error` and the lease is released.
    #[command(
        after_help = "Example:\n  banklease run --checkpoint-prefix nightly- -- ./backup.sh"
    )]
    Run(agent::run::RunArgs),
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
}

fn parse_status(s: &str) -> Result<Status, String> {
    s.parse().map_err(|e: banklease::Error| e.to_string())
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
    let cli = Cli::parse();
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
        // The reader went away (`banklease lease list | head`): nothing left to say.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// What every command needs: the loaded configuration, the bank, the clock.
struct Ctx {
    config: Config,
    bank: Bank,
    clock: SharedClock,
    json: bool,
}

impl Ctx {
    fn load(file: Option<&std::path::Path>, bank: Option<&str>, json: bool) -> Result<Self> {
        // The library's errors already name the file, key or URL at fault.
        let mut config = Config::load(file)?;
        if let Some(url) = bank {
            config.bank.url = url.to_owned();
        }
        let bank = Bank::open(&config.bank.url)?;
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
    let load = || Ctx::load(config.as_deref(), bank.as_deref(), json);
    let ctx = match command {
        // The agent's client needs no configuration: it talks to the agent only.
        Command::Agent(args) => return agent::client::run(args, json).await,
        Command::Run(args) => {
            return Ok(match load() {
                Ok(ctx) => agent::run::run(&ctx, args).await,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    Outcome::Exit(agent::run::EXIT_RUN_FAILED)
                }
            })
        }
        _ => load()?,
    };
    match command {
        Command::ValidityCheck {
            owner,
            validity_window,
        } => validity_check(&ctx, &owner, validity_window).await,
        Command::Lease(LeaseCommand::List) => lease_list(&ctx).await,
        Command::Lease(LeaseCommand::Show { owner }) => lease_show(&ctx, &owner).await,
        Command::Checkpoint(CheckpointCommand::List { status, owner }) => {
            checkpoint_list(&ctx, status, owner.as_deref()).await
        }
        Command::Checkpoint(CheckpointCommand::Show { id }) => checkpoint_show(&ctx, &id).await,
        Command::Gc { dry_run, force } => gc(&ctx, dry_run, force).await,
        Command::Lock(command) => lock::run(&ctx, command).await,
        Command::Doctor { race_rounds } => doctor::run(&ctx, race_rounds).await,
        Command::Run(_) | Command::Agent(_) => unreachable!("dispatched above"),
    }
}

// ---- output helpers --------------------------------------------------------------------------

fn out_line(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

fn out_json<T: Serialize>(value: &T) -> Result<()> {
    out_line(&serde_json::to_string(value)?)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration for humans, to the millisecond (`1s 250ms`).
fn human(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(ms(d))).to_string()
}

/// Print `rows` as a table with a header, columns padded to their widest cell.
fn out_table(header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(&format!("{cell:<width$}", width = widths[i]));
        }
        s.trim_end().to_owned()
    };
    out_line(&line(&mut header.iter().copied()))?;
    for row in rows {
        out_line(&line(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}

// ---- validity-check --------------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct ValidityReport<'a> {
    owner_id: &'a str,
    state: &'static str,
    remaining_ms: u64,
    validity_window_ms: u64,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    expired_since_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// `banklease validity-check`: the observer's answer to "may this owner start an update?".
async fn validity_check(ctx: &Ctx, owner: &str, window: Option<Duration>) -> Result<Outcome> {
    let owner = OwnerId::parse(owner)?;
    let window = window.unwrap_or(ctx.config.lease.validity_window);
    let t = ctx.store_time().await?;
    let sent = ctx.clock.now();
    let view = ctx.observer().view(&owner, &t).await;
    let received = ctx.clock.now();
    // The view is judged at a *lower* bound of the store's time (right for "is it dead?"). For
    // "may it start an update?" the answer must hold at an *upper* bound: at receipt, with the
    // probe stamped as early as it could have been. The difference is both round trips plus the
    // read staleness the lower bound deducted.
    let uncertainty = received.saturating_duration_since(sent)
        + t.observed.saturating_duration_since(t.sent)
        + ctx.config.gc.read_staleness;
    let remaining = match &view {
        LeaseView::Alive { remaining, .. } => remaining.saturating_sub(uncertainty),
        _ => Duration::ZERO,
    };
    let ok = matches!(view, LeaseView::Alive { .. }) && remaining >= window;
    let (since, error) = match &view {
        LeaseView::Expired { since, .. } => (Some(*since), None),
        LeaseView::Unreadable { error } => (None, Some(error.as_str())),
        _ => (None, None),
    };
    if ctx.json {
        out_json(&ValidityReport {
            owner_id: owner.as_str(),
            state: view.name(),
            remaining_ms: ms(remaining),
            validity_window_ms: ms(window),
            ok,
            expired_since_ms: since.map(ms),
            error,
        })?;
    } else {
        let verdict = if ok { "ok" } else { "not ok" };
        let detail = match &view {
            LeaseView::Alive { .. } if ok => format!(
                "lease alive, {} left >= validity window {}",
                human(remaining),
                human(window)
            ),
            LeaseView::Alive { .. } => format!(
                "lease alive but only {} left < validity window {}",
                human(remaining),
                human(window)
            ),
            LeaseView::Expired { since, .. } => format!("lease expired {} ago", human(*since)),
            LeaseView::Missing => "no lease".to_owned(),
            // No answer, only the error below.
            LeaseView::Unreadable { .. } => String::new(),
        };
        if !detail.is_empty() {
            out_line(&format!("{verdict}: owner_id=`{owner}` {detail}"))?;
        }
    }
    Ok(match view {
        LeaseView::Unreadable { error } => {
            eprintln!("error: cannot judge the lease of owner_id=`{owner}`: {error}");
            Outcome::Failed
        }
        _ if ok => Outcome::Yes,
        _ => Outcome::No,
    })
}

// ---- lease list / show -----------------------------------------------------------------------

/// One lease as read and judged: the view, and the object's metadata when it was read.
struct JudgedLease {
    owner_id: String,
    view: LeaseView,
    meta: Option<ObjectMeta>,
}

/// Read `owner`'s lease and judge it against `t`, like [`LeaseObserver::view`] but keeping the
/// object's metadata for display.
async fn judge_lease(ctx: &Ctx, owner: &OwnerId, t: &StoreTime) -> JudgedLease {
    // Judged at the instant before the read was sent (see `StoreTime::at_send`).
    let sent = ctx.clock.now();
    let (view, meta) = match read_lease(&ctx.bank, owner).await {
        Ok(None) => (LeaseView::Missing, None),
        Ok(Some((record, meta))) => {
            let store_now = t.at_send(sent, ctx.config.gc.read_staleness);
            let view = judge(
                record,
                meta.last_modified,
                store_now,
                ctx.config.lease.skew_margin,
            );
            (view, Some(meta))
        }
        Err(e) => (
            LeaseView::Unreadable {
                error: error_chain(&e),
            },
            None,
        ),
    };
    JudgedLease {
        owner_id: owner.to_string(),
        view,
        meta,
    }
}

/// A lease as one line of `lease list --json`. Keys are always present (null when unknown) so
/// that consumers need not probe for them.
#[derive(Debug, Serialize)]
struct LeaseRow {
    owner_id: String,
    state: &'static str,
    remaining_ms: u64,
    expired_since_ms: Option<u64>,
    host: Option<String>,
    pid: Option<u32>,
    generation: Option<u64>,
    expire_window_ms: Option<u64>,
    error: Option<String>,
}

/// `lease show --json`: the row plus the whole record.
#[derive(Debug, Serialize)]
struct LeaseDetail {
    #[serde(flatten)]
    row: LeaseRow,
    path: String,
    renew_window_ms: Option<u64>,
    validity_window_ms: Option<u64>,
    acquired_at: Option<String>,
    renewed_at: Option<String>,
    /// Stamped by the store; expiry is judged from this, not from the owner's clock.
    last_modified: Option<String>,
    format: Option<u32>,
}

impl JudgedLease {
    fn row(&self) -> LeaseRow {
        let (remaining, since, record, error) = match &self.view {
            LeaseView::Alive { remaining, record } => (*remaining, None, Some(record), None),
            LeaseView::Expired { since, record } => {
                (Duration::ZERO, Some(*since), Some(record), None)
            }
            LeaseView::Missing => (Duration::ZERO, None, None, None),
            LeaseView::Unreadable { error } => (Duration::ZERO, None, None, Some(error.clone())),
        };
        LeaseRow {
            owner_id: self.owner_id.clone(),
            state: self.view.name(),
            remaining_ms: ms(remaining),
            expired_since_ms: since.map(ms),
            host: record.map(|r| r.host.clone()),
            pid: record.map(|r| r.pid),
            generation: record.map(|r| r.generation),
            expire_window_ms: record.map(|r| r.expire_window_ms),
            error,
        }
    }

    fn detail(&self, ctx: &Ctx) -> LeaseDetail {
        let record = match &self.view {
            LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } => Some(record),
            _ => None,
        };
        LeaseDetail {
            row: self.row(),
            path: self.meta.as_ref().map_or_else(
                || {
                    OwnerId::parse(&self.owner_id)
                        .map(|o| ctx.bank.lease_path(&o).to_string())
                        .unwrap_or_default()
                },
                |m| m.location.to_string(),
            ),
            renew_window_ms: record.map(|r| r.renew_window_ms),
            validity_window_ms: record.map(|r| r.validity_window_ms),
            acquired_at: record.map(|r| r.acquired_at.to_rfc3339()),
            renewed_at: record.map(|r| r.renewed_at.to_rfc3339()),
            last_modified: self.meta.as_ref().map(|m| m.last_modified.to_rfc3339()),
            format: record.map(|r| r.format),
        }
    }

    /// "alive, 1s 200ms left" and the like.
    fn human_state(&self) -> String {
        match &self.view {
            LeaseView::Alive { remaining, .. } => format!("alive, {} left", human(*remaining)),
            LeaseView::Expired { since, .. } => format!("expired {} ago", human(*since)),
            LeaseView::Missing => "missing".to_owned(),
            LeaseView::Unreadable { .. } => "unreadable".to_owned(),
        }
    }
}

/// `banklease lease list`
async fn lease_list(ctx: &Ctx) -> Result<Outcome> {
    let prefix = ctx.bank.path(&["leases"]);
    let mut listed: Vec<ObjectMeta> = ctx
        .bank
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .with_context(|| {
            format!(
                "cannot list `{prefix}` in bank=`{}`; check that the bank is reachable",
                ctx.bank.label()
            )
        })?;
    listed.sort_by(|a, b| a.location.cmp(&b.location));

    let mut unreadable = 0u64;
    let mut owners = Vec::new();
    for meta in &listed {
        // Only `leases/<owner_id>`: anything else is not a lease this version wrote.
        let parts: Vec<_> = meta
            .location
            .prefix_match(&prefix)
            .map(|p| p.collect())
            .unwrap_or_default();
        match parts.as_slice() {
            [name] => match OwnerId::parse(name.as_ref()) {
                Ok(owner) => owners.push(owner),
                Err(e) => {
                    unreadable += 1;
                    eprintln!("warning: skipping `{}`: {e}", meta.location);
                }
            },
            _ => {
                unreadable += 1;
                eprintln!(
                    "warning: skipping `{}`: not of the form leases/<owner_id>",
                    meta.location
                );
            }
        }
    }

    let t = ctx.store_time().await?;
    let leases: Vec<JudgedLease> = futures::stream::iter(&owners)
        .map(|owner| judge_lease(ctx, owner, &t))
        .buffered(LIST_CONCURRENCY)
        .collect()
        .await;

    let mut rows = Vec::new();
    for lease in &leases {
        match &lease.view {
            // Released or deleted between the listing and the read: no longer there.
            LeaseView::Missing => continue,
            LeaseView::Unreadable { error } => {
                unreadable += 1;
                eprintln!(
                    "warning: lease of owner_id=`{}` is unreadable: {error}",
                    lease.owner_id
                );
            }
            _ => {}
        }
        if ctx.json {
            out_json(&lease.row())?;
        } else {
            let row = lease.row();
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
            rows.push(vec![
                row.owner_id,
                lease.human_state(),
                opt(row.host),
                opt(row.pid.map(|p| p.to_string())),
                opt(row.generation.map(|g| g.to_string())),
                opt(row
                    .expire_window_ms
                    .map(|w| human(Duration::from_millis(w)))),
            ]);
        }
    }
    if !ctx.json {
        out_table(
            &[
                "OWNER",
                "STATE",
                "HOST",
                "PID",
                "GENERATION",
                "EXPIRE_WINDOW",
            ],
            &rows,
        )?;
    }
    if unreadable > 0 {
        eprintln!("warning: {unreadable} lease object(s) could not be read; see above");
        return Ok(Outcome::No);
    }
    Ok(Outcome::Yes)
}

/// `banklease lease show ID`
async fn lease_show(ctx: &Ctx, owner: &str) -> Result<Outcome> {
    let owner = OwnerId::parse(owner)?;
    let t = ctx.store_time().await?;
    let lease = judge_lease(ctx, &owner, &t).await;
    let detail = lease.detail(ctx);
    if ctx.json {
        out_json(&detail)?;
    } else {
        let mut lines = vec![
            ("owner_id", detail.row.owner_id.clone()),
            ("state", lease.human_state()),
            ("path", detail.path.clone()),
        ];
        let mut push = |key: &'static str, value: Option<String>| {
            if let Some(v) = value {
                lines.push((key, v));
            }
        };
        push("host", detail.row.host.clone());
        push("pid", detail.row.pid.map(|p| p.to_string()));
        push("generation", detail.row.generation.map(|g| g.to_string()));
        let window = |w: Option<u64>| w.map(|w| human(Duration::from_millis(w)));
        push("renew_window", window(detail.renew_window_ms));
        push("expire_window", window(detail.row.expire_window_ms));
        push("validity_window", window(detail.validity_window_ms));
        push("acquired_at", detail.acquired_at.clone());
        push("renewed_at", detail.renewed_at.clone());
        push("last_modified", detail.last_modified.clone());
        push("error", detail.row.error.clone());
        for (key, value) in lines {
            out_line(&format!("{key:<16} {value}"))?;
        }
    }
    Ok(match lease.view {
        LeaseView::Alive { .. } | LeaseView::Expired { .. } => Outcome::Yes,
        LeaseView::Missing => Outcome::No,
        LeaseView::Unreadable { error } => {
            eprintln!("error: cannot read the lease of owner_id=`{owner}`: {error}");
            Outcome::Failed
        }
    })
}

// ---- checkpoint list / show ------------------------------------------------------------------

/// A checkpoint as one line of `checkpoint list --json`; keys always present.
#[derive(Debug, Serialize)]
struct CheckpointRow {
    id: String,
    owner_id: Option<String>,
    /// A [`Status`], or `missing` when nothing at all is known of the id.
    status: String,
    created_at: Option<String>,
    /// `owner` or `gc`, once the checkpoint left `protecting`.
    decided_by: Option<String>,
    /// What the decision said: `available`, `error` (owner) or `deleted` (gc).
    outcome: Option<String>,
    decided_at: Option<String>,
}

/// `checkpoint show --json`: the row plus what is in the bank for it.
#[derive(Debug, Serialize)]
struct CheckpointDetail {
    #[serde(flatten)]
    row: CheckpointRow,
    /// Whether `checkpoints/<id>/index.json` exists.
    index: bool,
    /// Whether the owner's protecting marker exists (the GC finds checkpoints through it).
    protecting_marker: Option<bool>,
    /// Objects under `checkpoints/<id>/`, index included.
    objects: u64,
    bytes: u64,
}

/// The status a reader should believe, from `index.json`, the decision, and whether any object
/// is left under `checkpoints/<id>/`.
///
/// The decision is the single source of truth once taken (see [`banklease::checkpoint`]): a
/// protecting index with a GC decision is being deleted; one with an owner decision is complete
/// and waiting for its index to be rewritten. `None` when nothing consistent can be said.
fn effective_status(
    index: Option<&CheckpointRecord>,
    decision: Option<&Decision>,
    objects_left: bool,
) -> Option<Status> {
    match (index, decision) {
        (Some(i), Some(d)) if i.status == Status::Protecting => Some(match d.by {
            Decider::Gc => Status::Deleting,
            Decider::Owner => d.outcome,
        }),
        (Some(i), _) => Some(i.status),
        (None, Some(d)) if d.by == Decider::Gc => Some(if objects_left {
            Status::Deleting
        } else {
            Status::Deleted
        }),
        // An owner decision without index.json, or objects without either: not a state any
        // writer leaves behind.
        (None, _) => None,
    }
}

fn checkpoint_row(
    id: &str,
    index: Option<&CheckpointRecord>,
    decision: Option<&Decision>,
    status: &str,
) -> CheckpointRow {
    CheckpointRow {
        id: id.to_owned(),
        owner_id: index
            .map(|i| i.owner_id.to_string())
            .or_else(|| decision.map(|d| d.owner_id.to_string())),
        status: status.to_owned(),
        created_at: index.map(|i| i.created_at.to_rfc3339()),
        decided_by: decision.map(|d| d.by.to_string()),
        outcome: decision.map(|d| d.outcome.to_string()),
        decided_at: decision.map(|d| d.decided_at.to_rfc3339()),
    }
}

/// Read index.json and the decision of `id` together.
async fn read_checkpoint_state(
    bank: &Bank,
    id: &str,
) -> Result<(Option<CheckpointRecord>, Option<Decision>)> {
    let (index, decision) = futures::join!(
        checkpoint::read_checkpoint(bank, id),
        checkpoint::read_decision(bank, id)
    );
    Ok((index?, decision?))
}

/// A checkpoint found by listing `checkpoints/`.
struct ListedCheckpoint {
    index: Option<CheckpointRecord>,
    decision: Option<Decision>,
}

/// Read a listed checkpoint: `None` when no object is left under `checkpoints/<id>/`.
///
/// A local filesystem lists the empty directories a collected checkpoint leaves behind, so
/// without `index.json` the listing is not taken as proof that objects remain: one more listing
/// of that checkpoint says (rare: only checkpoints being or having been deleted).
async fn read_listed_checkpoint(bank: &Bank, id: &str) -> Result<Option<ListedCheckpoint>> {
    let (index, decision) = read_checkpoint_state(bank, id).await?;
    if index.is_none() {
        let dir = bank.path(&["checkpoints", id]);
        let first = bank.store().list(Some(&dir)).next().await.transpose();
        if first
            .with_context(|| format!("cannot list `{dir}`; check that the bank is reachable"))?
            .is_none()
        {
            return Ok(None);
        }
    }
    Ok(Some(ListedCheckpoint { index, decision }))
}

/// `banklease checkpoint list`
async fn checkpoint_list(
    ctx: &Ctx,
    status: Option<Status>,
    owner: Option<&str>,
) -> Result<Outcome> {
    let owner = owner.map(OwnerId::parse).transpose()?;
    let prefix = ctx.bank.path(&["checkpoints"]);
    // One common prefix per checkpoint: `checkpoints/<id>/`.
    let listing = ctx
        .bank
        .store()
        .list_with_delimiter(Some(&prefix))
        .await
        .with_context(|| {
            format!(
                "cannot list `{prefix}` in bank=`{}`; check that the bank is reachable",
                ctx.bank.label()
            )
        })?;
    let mut ids: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    ids.sort();

    let mut unreadable = 0u64;
    let bank = &ctx.bank;
    let entries: Vec<(String, Result<Option<ListedCheckpoint>>)> = futures::stream::iter(ids)
        .map(|id| async move {
            let state = read_listed_checkpoint(bank, &id).await;
            (id, state)
        })
        .buffered(LIST_CONCURRENCY)
        .collect()
        .await;

    let mut rows = Vec::new();
    for (id, state) in entries {
        let (index, decision) = match state {
            Ok(Some(listed)) => (listed.index, listed.decision),
            // Nothing left under checkpoints/<id>/: gone (only the filesystem lists it).
            Ok(None) => continue,
            Err(e) => {
                unreadable += 1;
                eprintln!("warning: checkpoint `{id}` is unreadable: {e:#}");
                continue;
            }
        };
        let Some(st) = effective_status(index.as_ref(), decision.as_ref(), true) else {
            unreadable += 1;
            eprintln!(
                "warning: checkpoint `{id}` has objects but no index.json{}; inspect it with \
                 `banklease checkpoint show {id}`",
                match &decision {
                    Some(d) => format!(" (decided by {} as {})", d.by, d.outcome),
                    None => " and no decision".to_owned(),
                }
            );
            continue;
        };
        let row = checkpoint_row(&id, index.as_ref(), decision.as_ref(), st.as_str());
        if status.is_some_and(|s| s != st) {
            continue;
        }
        if let Some(o) = &owner {
            if row.owner_id.as_deref() != Some(o.as_str()) {
                continue;
            }
        }
        if ctx.json {
            out_json(&row)?;
        } else {
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
            rows.push(vec![
                row.id,
                row.status,
                opt(row.owner_id),
                opt(row.created_at),
                opt(row.decided_by),
            ]);
        }
    }
    if !ctx.json {
        out_table(
            &["ID", "STATUS", "OWNER", "CREATED_AT", "DECIDED_BY"],
            &rows,
        )?;
    }
    if unreadable > 0 {
        eprintln!("warning: {unreadable} checkpoint(s) could not be read; see above");
        return Ok(Outcome::No);
    }
    Ok(Outcome::Yes)
}

/// `banklease checkpoint show ID`
async fn checkpoint_show(ctx: &Ctx, id: &str) -> Result<Outcome> {
    checkpoint::validate_checkpoint_id(id)?;
    let bank = &ctx.bank;
    let (index, decision) = read_checkpoint_state(bank, id)
        .await
        .with_context(|| format!("cannot read checkpoint `{id}`"))?;
    let dir = bank.path(&["checkpoints", id]);
    let objects: Vec<ObjectMeta> = bank
        .store()
        .list(Some(&dir))
        .try_collect()
        .await
        .with_context(|| format!("cannot list `{dir}`; check that the bank is reachable"))?;
    let owner = index
        .as_ref()
        .map(|i| i.owner_id.clone())
        .or_else(|| decision.as_ref().map(|d| d.owner_id.clone()));
    let protecting_marker = match &owner {
        Some(o) => {
            let marker = checkpoint::marker_path(bank, o, id);
            match bank.store().head(&marker).await {
                Ok(_) => Some(true),
                Err(object_store::Error::NotFound { .. }) => Some(false),
                Err(e) => {
                    return Err(anyhow!(e)).with_context(|| format!("cannot read `{marker}`"))
                }
            }
        }
        None => None,
    };
    let status = effective_status(index.as_ref(), decision.as_ref(), !objects.is_empty())
        .map_or("missing", |s| s.as_str());
    let detail = CheckpointDetail {
        row: checkpoint_row(id, index.as_ref(), decision.as_ref(), status),
        index: index.is_some(),
        protecting_marker,
        objects: objects.len() as u64,
        bytes: objects.iter().map(|o| o.size).sum(),
    };
    if ctx.json {
        out_json(&detail)?;
    } else {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
        let lines = [
            ("id", detail.row.id.clone()),
            ("status", detail.row.status.clone()),
            ("owner_id", opt(&detail.row.owner_id)),
            ("created_at", opt(&detail.row.created_at)),
            ("decided_by", opt(&detail.row.decided_by)),
            ("outcome", opt(&detail.row.outcome)),
            ("decided_at", opt(&detail.row.decided_at)),
            ("index.json", yes_no(detail.index)),
            (
                "marker",
                detail.protecting_marker.map_or("-".to_owned(), yes_no),
            ),
            (
                "objects",
                format!("{} ({} bytes)", detail.objects, detail.bytes),
            ),
        ];
        for (key, value) in lines {
            out_line(&format!("{key:<12} {value}"))?;
        }
    }
    Ok(if detail.index {
        Outcome::Yes
    } else {
        Outcome::No
    })
}

// ---- gc --------------------------------------------------------------------------------------

/// `banklease gc`: one pass of the engine the daemon runs (crate `banklease-gc`), with the
/// `[gc]` configuration; `--dry-run` and `--force` override it for this pass.
async fn gc(ctx: &Ctx, dry_run: bool, force: bool) -> Result<Outcome> {
    let mut options = banklease_gc::GcOptions::from_config(&ctx.config);
    options.dry_run |= dry_run;
    options.force = force;
    // As the daemon: a margin below the store's stamp resolution cannot absorb the truncation.
    let resolution = ctx
        .bank
        .stamp_resolution(&ctx.clock)
        .await
        .with_context(|| format!("cannot read the store clock of bank=`{}`", ctx.bank.label()))?;
    if options.skew_margin < resolution {
        anyhow::bail!(
            "refusing to collect: lease.skew_margin=`{}` is below the store's timestamp \
             resolution=`{}` on bank=`{}`; set lease.skew_margin to at least the resolution",
            humantime::format_duration(options.skew_margin),
            humantime::format_duration(resolution),
            ctx.bank.label()
        );
    }
    let collector = banklease_gc::Collector::new(ctx.bank.clone(), ctx.clock.clone(), options);
    let report: banklease_gc::PassReport = collector
        .run_pass()
        .await
        .with_context(|| format!("gc pass on bank=`{}` failed", ctx.bank.label()))?;
    if ctx.json {
        out_json(&report)?;
    } else {
        let verb = if report.dry_run {
            "would collect"
        } else {
            "collected"
        };
        out_line(&format!(
            "gc pass{}: scanned {} protecting checkpoint(s) of {} owner(s) ({} alive, {} in \
             grace, {} dead, {} unreadable); {verb} {}, repaired {}, skipped {}, errors {}, leases \
             reaped {} in {}",
            if report.dry_run { " (dry run)" } else { "" },
            report.scanned,
            report.owners,
            report.alive,
            report.in_grace,
            report.dead,
            report.unreadable,
            report.collected,
            report.repaired,
            report.skipped,
            report.errors,
            report.leases_reaped,
            human(Duration::from_millis(report.duration_ms)),
        ))?;
    }
    // The pass completed; say loudly on stderr what an operator must look at.
    if let Some(reason) = &report.braked {
        eprintln!(
            "warning: the safety brake refused the pass: {reason}; rerun with --force if intended"
        );
    }
    if report.errors > 0 {
        eprintln!(
            "warning: {} error(s) during the pass; their checkpoints are left for the next pass \
             (see the log above)",
            report.errors
        );
    }
    Ok(Outcome::Yes)
}
