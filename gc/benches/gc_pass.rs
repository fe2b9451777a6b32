//! `gc_pass`: one GC pass at 10k .. 1M protecting checkpoints, measured side by side with a
//! Karbor-style scan of the same bank and with the store's floor (the pass's own requests
//! replayed raw), plus the owner lease's request costs and a many-leases keeper run.
//!
//! ```text
//! cargo bench -p banklease-gc --bench gc_pass                 # defaults: a few minutes
//! cargo bench -p banklease-gc --bench gc_pass -- --full       # adds N = 1M on memory and file
//! cargo bench -p banklease-gc --bench gc_pass -- --help
//! ```
//!
//! Every measured run is a child process of this binary (`--child`), so that its peak RSS
//! (`VmHWM` in /proc/self/status) is its own. A bank that outlives a process (file, S3, Swift)
//! is built by one child and measured by the next; an in-memory bank is built inside the child
//! that measures it (so its RSS includes the bank). BENCHMARKS.md explains every figure.

// The modules live in gc/benches/gc_pass/ (a bench root looks for them beside itself, and any
// other .rs file directly in benches/ would become a bench target of its own).
#[path = "gc_pass/backend.rs"]
mod backend;
#[path = "gc_pass/bank_builder.rs"]
mod bank_builder;
#[path = "gc_pass/http_count.rs"]
mod http_count;
#[path = "gc_pass/karbor.rs"]
mod karbor;
#[path = "gc_pass/lease_bench.rs"]
mod lease_bench;
#[path = "gc_pass/replay.rs"]
mod replay;
#[path = "gc_pass/report.rs"]
mod report;

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{bail, Context};
use banklease::clock::{Clock, SharedClock, SystemClock};
use banklease_gc::{Collector, GcOptions};
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::bank_builder::{Built, Layout};

/// The line a child prints its result on.
const RESULT_TAG: &str = "BENCH-RESULT ";

/// Skew margin and grace of every measured pass: short, so that the bank's dead owners (1 ms
/// expire window) are collectable a few seconds after it was built.
const MARGIN: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Parser)]
#[command(
    name = "gc_pass",
    about = "Benchmark one banklease GC pass against a Karbor-style scan and the store's floor"
)]
struct Args {
    /// Backends: memory, file, s3, swift. Default: memory and file, plus s3 when AWS_ENDPOINT
    /// is set and swift when BANKLEASE_TEST_SWIFT=1 and ST_AUTH are set.
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Checkpoint counts N on memory and file (k and M suffixes). Default 10k,100k.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Checkpoint counts on the loopback servers (s3, swift).
    #[arg(long, value_delimiter = ',', default_value = "10k")]
    server_sizes: Vec<String>,
    /// The 1M runs: sizes 10k,100k,1M on memory and file.
    #[arg(long)]
    full: bool,
    /// Owners M.
    #[arg(long, default_value_t = 100)]
    owners: u64,
    /// Dead owners D among them.
    #[arg(long, default_value_t = 10)]
    dead: u64,
    /// Data objects per checkpoint d; several (`1,16,256`) run side by side.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    data: Vec<u64>,
    /// Write data objects only in dead owners' checkpoints (the ones a pass collects): on S3
    /// and Swift a pass never touches a live checkpoint's data, so this only saves building
    /// time (on `file:` the temporaries sweep walks the whole tree, live data included).
    #[arg(long)]
    data_dead_only: bool,
    /// The pass's `gc.concurrency` (also the Karbor scan's and the replay's).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Puts in flight while building a bank.
    #[arg(long, default_value_t = 32)]
    build_concurrency: usize,
    /// Sections to run: gc, lease, keepers.
    #[arg(long, value_delimiter = ',', default_value = "gc,lease,keepers")]
    sections: Vec<String>,
    /// Skip the Karbor-style scan.
    #[arg(long)]
    no_karbor: bool,
    /// Skip the floor (replay) — it rebuilds the bank once more.
    #[arg(long)]
    no_floor: bool,
    /// Pass/floor pairs per configuration (each on freshly built banks); the time ratio is
    /// reported for each and as their median. The other figures come from the first.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Backends of the keeper run (needs a real server to mean anything).
    #[arg(long, value_delimiter = ',', default_value = "swift")]
    keeper_backends: Vec<String>,
    /// Leases kept by the keeper run.
    #[arg(long, default_value_t = 1000)]
    keeper_leases: u64,
    /// Keeper run: renew window.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    keeper_renew: Duration,
    /// Keeper run: expire window.
    #[arg(long, default_value = "45s", value_parser = humantime::parse_duration)]
    keeper_expire: Duration,
    /// Keeper run: how long to keep the leases once all are acquired.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    keeper_run: Duration,
    /// Directory for file banks and request logs (default: a new directory in $TMPDIR).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Also write every result as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the banks (file directories, server prefixes) instead of deleting them.
    #[arg(long)]
    keep: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// Internal: run one measurement in this (child) process.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: the child's job, as JSON.
    #[arg(long, hide = true)]
    spec: Option<String>,
}

/// What a child process is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    backend: Backend,
    location: String,
    layout: Layout,
    concurrency: usize,
    build_concurrency: usize,
    /// Set when another child built the (persistent) bank.
    leases_written_ms: Option<u64>,
    /// Request log: written by `gc`, read by `replay`.
    log: Option<String>,
    dry_run: bool,
    keeper_leases: u64,
    keeper_renew_ms: u64,
    keeper_expire_ms: u64,
    keeper_run_ms: u64,
}

/// A numeric field of /proc/self/status (0 if unreadable).
fn proc_status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Peak and current resident set of this process, KiB.
fn memory_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// The 1-minute load average: the machine is shared, so every timed run records it.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (digits, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1_000),
        Some('m' | 'M') => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    Ok(digits
        .parse::<u64>()
        .with_context(|| format!("size `{s}`"))?
        * mult)
}

/// The measured child's runtime, with the daemon's cap on blocking threads (a little above the
/// requests in flight; see gc-daemon/src/command.rs).
fn runtime(concurrency: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(concurrency.saturating_add(8))
        .build()?)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(kind) = &args.child {
        let job: Job = serde_json::from_str(args.spec.as_deref().context("--spec")?)?;
        let value =
            runtime(job.concurrency.max(job.build_concurrency))?.block_on(child(kind, &job))?;
        println!("{RESULT_TAG}{}", serde_json::to_string(&value)?);
        return Ok(());
    }
    parent(args)
}

// ---- children ------------------------------------------------------------------------------

fn options(concurrency: usize, dry_run: bool) -> GcOptions {
    GcOptions::builder()
        .grace(GRACE)
        .skew_margin(MARGIN)
        .concurrency(concurrency)
        .max_deletions(0)
        .brake_ratio(0.5)
        .brake_min(100)
        .dry_run(dry_run)
        .force(false)
        .reap_leases(true)
        .build()
}

/// Build the bank in this process if nobody did; then wait until the dead owners are dead.
async fn prepare(job: &Job, opened: &backend::Opened) -> anyhow::Result<Option<Built>> {
    let (built, written) = match job.leases_written_ms {
        Some(ms) => (None, ms),
        None => {
            let built =
                bank_builder::build(&opened.bank, &job.layout, job.build_concurrency).await?;
            let ms = built.leases_written_ms;
            (Some(built), ms)
        }
    };
    bank_builder::wait_until_dead(written, MARGIN, GRACE).await;
    Ok(built)
}

fn delta(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

async fn child(kind: &str, job: &Job) -> anyhow::Result<serde_json::Value> {
    let opened = backend::open(job.backend, &job.location)?;
    // A bank made as an operator makes one (`banklease init`): owners refuse a prefix without.
    banklease::layout::init(&opened.bank).await?;
    let clock: SharedClock = Arc::new(SystemClock);
    let value = match kind {
        "build" => serde_json::to_value(
            bank_builder::build(&opened.bank, &job.layout, job.build_concurrency).await?,
        )?,
        "wipe" => {
            let deleted: u64 = bank_builder::wipe(&opened.bank).await?;
            serde_json::json!({ "deleted": deleted })
        }
        "karbor" => {
            let built = prepare(job, &opened).await?;
            let (_, rss_before_kib) = memory_kib();
            let http_before = opened.http_snapshot();
            let failed_before = opened.http_failed();
            let scan = karbor::scan(&opened.bank, MARGIN, GRACE, job.concurrency).await?;
            let http = delta(&http_before, &opened.http_snapshot());
            let http_failed = opened.http_failed() - failed_before;
            let (hwm_kib, _) = memory_kib();
            serde_json::json!({ "built": built, "scan": scan, "http": http, "http_failed": http_failed,
                                "hwm_kib": hwm_kib, "rss_before_kib": rss_before_kib })
        }
        "gc" => {
            let built = prepare(job, &opened).await?;
            let recorder = match &job.log {
                Some(log) => Some(banklease_testkit::recording::RecordingStore::new(
                    Arc::clone(opened.bank.store()),
                    std::path::Path::new(log),
                    opened.bank.prefix(),
                )?),
                None => None,
            };
            let bank = match &recorder {
                Some(r) => opened.bank.with_store(Arc::new(r.clone())),
                None => opened.bank.clone(),
            };
            let collector = Collector::new(
                bank,
                Arc::clone(&clock),
                options(job.concurrency, job.dry_run),
            );
            let (_, rss_before_kib) = memory_kib();
            let http_before = opened.http_snapshot();
            let busy_before = opened.http_busy_secs();
            let failed_before = opened.http_failed();
            let by_kind_before = opened.http_busy_by_kind_us();
            let started = clock.now();
            let report = collector.run_pass().await?;
            let secs = clock.now().duration_since(started).as_secs_f64();
            let http = delta(&http_before, &opened.http_snapshot());
            let http_busy_secs = opened.http_busy_secs() - busy_before;
            let http_failed = opened.http_failed() - failed_before;
            let http_busy_us = delta(&by_kind_before, &opened.http_busy_by_kind_us());
            let log_lines = match &recorder {
                Some(r) => Some(r.finish()?),
                None => None,
            };
            let (hwm_kib, _) = memory_kib();
            let threads = proc_status_field("Threads:");
            serde_json::json!({ "built": built, "report": report, "secs": secs, "http": http,
                                "threads": threads,
                                "log_lines": log_lines, "hwm_kib": hwm_kib,
                                "rss_before_kib": rss_before_kib, "load": loadavg(),
                                "http_busy_secs": http_busy_secs, "http_failed": http_failed,
                                "http_busy_us": http_busy_us })
        }
        "replay" => {
            let built = prepare(job, &opened).await?;
            let log = replay::load(
                std::path::Path::new(job.log.as_deref().context("replay needs a log")?),
                opened.bank.prefix(),
            )?;
            let lines = log.lines;
            let http_before = opened.http_snapshot();
            let busy_before = opened.http_busy_secs();
            let failed_before = opened.http_failed();
            let by_kind_before = opened.http_busy_by_kind_us();
            let replayed =
                replay::replay(Arc::clone(opened.bank.store()), log, job.concurrency).await;
            let http = delta(&http_before, &opened.http_snapshot());
            let http_busy_secs = opened.http_busy_secs() - busy_before;
            let http_failed = opened.http_failed() - failed_before;
            let http_busy_us = delta(&by_kind_before, &opened.http_busy_by_kind_us());
            let (hwm_kib, _) = memory_kib();
            serde_json::json!({ "built": built, "replay": replayed, "http_failed": http_failed,
                                "http_busy_us": http_busy_us, "log_lines": lines,
                                "http": http, "hwm_kib": hwm_kib, "load": loadavg(),
                                "http_busy_secs": http_busy_secs })
        }
        "lease" => serde_json::to_value(lease_bench::lease_ops(&opened, 1_000).await?)?,
        "keepers" => serde_json::to_value(
            lease_bench::keepers(
                &opened,
                job.keeper_leases,
                Duration::from_millis(job.keeper_renew_ms),
                Duration::from_millis(job.keeper_expire_ms),
                Duration::from_millis(job.keeper_run_ms),
            )
            .await?,
        )?,
        other => bail!("unknown child job `{other}`"),
    };
    Ok(value)
}

// ---- parent --------------------------------------------------------------------------------

/// Run `kind` in a child process; its stderr passes through, its result line is parsed.
fn spawn(kind: &str, job: &Job) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--child", kind, "--spec", &serde_json::to_string(job)?])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut result = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        match line.strip_prefix(RESULT_TAG) {
            Some(json) => result = Some(serde_json::from_str(json)?),
            None => eprintln!("  [{kind}] {line}"),
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("child `{kind}` on {} failed: {status}", job.backend.name());
    }
    result.with_context(|| format!("child `{kind}` printed no result"))
}

fn backends(args: &Args) -> anyhow::Result<Vec<Backend>> {
    if args.backends.is_empty() {
        let mut out = vec![Backend::Memory, Backend::File];
        for b in [Backend::S3, Backend::Swift] {
            match b.available() {
                Ok(()) => out.push(b),
                Err(why) => eprintln!("gc_pass: skipping {}: {why}", b.name()),
            }
        }
        return Ok(out);
    }
    args.backends
        .iter()
        .map(|s| {
            let b = Backend::parse(s).with_context(|| format!("unknown backend `{s}`"))?;
            b.available()
                .map_err(|why| anyhow::anyhow!("{}: {why}", b.name()))?;
            Ok(b)
        })
        .collect()
}

fn log_step(what: &str) {
    let t = SystemClock
        .system_now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    eprintln!("gc_pass [{t}] {what}");
}

/// Build a persistent bank in a child (memory banks are built by the child that uses them).
fn build_bank(job: &mut Job, label: &str) -> anyhow::Result<Option<Built>> {
    if !job.backend.persistent() {
        return Ok(None);
    }
    log_step(&format!("{label}: building the bank"));
    let b: Built = serde_json::from_value(spawn("build", job)?)?;
    anyhow::ensure!(
        b.objects == job.layout.objects(),
        "{label}: built {} objects, expected {}",
        b.objects,
        job.layout.objects()
    );
    job.leases_written_ms = Some(b.leases_written_ms);
    Ok(Some(b))
}

/// The recorded pass on `job`'s (built) bank, then its floor on a bank built again.
fn pass_and_floor(
    args: &Args,
    mut job: Job,
    name: &str,
    label: &str,
    work: &std::path::Path,
) -> anyhow::Result<(serde_json::Value, Option<serde_json::Value>)> {
    log_step(&format!("{label}: GC pass (recorded)"));
    let log = work.join(format!("{name}.log"));
    job.log = Some(log.display().to_string());
    let gc = spawn("gc", &job)?;
    // One bank at a time on disk: the collected bank goes before the floor's is built.
    cleanup(args, &job)?;
    let floor = if args.no_floor {
        None
    } else {
        let mut again = job.clone();
        again.location = job.backend.location(work, &format!("{name}-floor"));
        again.leases_written_ms = None;
        build_bank(&mut again, &format!("{label} (floor)"))?;
        log_step(&format!(
            "{label}: floor (replaying the pass's requests raw)"
        ));
        let floor = spawn("replay", &again)?;
        cleanup(args, &again)?;
        Some(floor)
    };
    if !args.keep {
        let _ = std::fs::remove_file(&log);
    }
    Ok((gc, floor))
}

/// One (backend, N) configuration: build, Karbor scan, dry pass, pass; rebuild, replay; then
/// `--repeat - 1` more pass/floor pairs on fresh banks.
fn run_config(
    args: &Args,
    base: &Job,
    run_id: &str,
    work: &std::path::Path,
) -> anyhow::Result<report::ConfigResult> {
    let name = format!(
        "bench-{run_id}-{}-{}",
        base.backend.name(),
        base.layout.checkpoints
    );
    let mut job = base.clone();
    job.location = base.backend.location(work, &name);
    let label = format!("{} N={}", base.backend.name(), base.layout.checkpoints);
    let built = build_bank(&mut job, &label)?;
    let karbor = if args.no_karbor {
        None
    } else {
        log_step(&format!("{label}: Karbor-style scan (dry)"));
        Some(spawn("karbor", &job)?)
    };
    log_step(&format!("{label}: GC pass, dry run"));
    let mut dry = job.clone();
    dry.dry_run = true;
    let gc_dry = spawn("gc", &dry)?;
    let (gc, floor) = pass_and_floor(args, job, &name, &label, work)?;
    let secs = |v: &serde_json::Value, key: &str| v.pointer(key).and_then(|x| x.as_f64());
    let mut repeats = Vec::new();
    if let Some(fl) = &floor {
        repeats.push((
            secs(&gc, "/secs").unwrap_or(f64::NAN),
            secs(fl, "/replay/secs").unwrap_or(f64::NAN),
        ));
    }
    for rep in 1..args.repeat.max(1) {
        let name = format!("{name}-r{rep}");
        let label = format!("{label} (repetition {})", rep + 1);
        let mut job = base.clone();
        job.location = base.backend.location(work, &name);
        build_bank(&mut job, &label)?;
        let (gc, floor) = pass_and_floor(args, job, &name, &label, work)?;
        if let Some(fl) = &floor {
            repeats.push((
                secs(&gc, "/secs").unwrap_or(f64::NAN),
                secs(fl, "/replay/secs").unwrap_or(f64::NAN),
            ));
        }
    }
    Ok(report::ConfigResult {
        backend: base.backend,
        layout: base.layout,
        concurrency: base.concurrency,
        built,
        karbor,
        gc_dry,
        gc,
        floor,
        repeats,
    })
}

fn cleanup(args: &Args, job: &Job) -> anyhow::Result<()> {
    if args.keep {
        return Ok(());
    }
    match job.backend {
        Backend::Memory => {}
        Backend::File => {
            let _ = std::fs::remove_dir_all(&job.location);
        }
        Backend::S3 | Backend::Swift => {
            log_step(&format!("wiping {}", job.location));
            spawn("wipe", job)?;
        }
    }
    Ok(())
}

fn parent(args: Args) -> anyhow::Result<()> {
    let backends = backends(&args)?;
    let mut local_sizes: Vec<u64> = if args.sizes.is_empty() {
        if args.full {
            vec![10_000, 100_000, 1_000_000]
        } else {
            vec![10_000, 100_000]
        }
    } else {
        args.sizes
            .iter()
            .map(|s| parse_size(s))
            .collect::<anyhow::Result<_>>()?
    };
    local_sizes.dedup();
    let server_sizes: Vec<u64> = args
        .server_sizes
        .iter()
        .map(|s| parse_size(s))
        .collect::<anyhow::Result<_>>()?;
    if args.owners == 0 || args.dead > args.owners {
        bail!("need 0 < owners and dead <= owners");
    }
    let now = SystemClock
        .system_now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let run_id = format!("{now}-{}", std::process::id());
    let work = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("banklease-bench-{run_id}")),
    };
    std::fs::create_dir_all(&work)?;
    let section = |s: &str| args.sections.iter().any(|x| x == s);

    let mut results = report::Results {
        machine: report::Machine::probe(),
        date_unix: now,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        configs: Vec::new(),
        leases: Vec::new(),
        keepers: Vec::new(),
    };
    let base = |backend: Backend, n: u64, data: u64| Job {
        backend,
        location: String::new(),
        layout: Layout {
            checkpoints: n,
            owners: args.owners,
            dead: args.dead,
            data,
            data_dead_only: args.data_dead_only,
        },
        concurrency: args.concurrency,
        build_concurrency: args.build_concurrency,
        leases_written_ms: None,
        log: None,
        dry_run: false,
        keeper_leases: args.keeper_leases,
        keeper_renew_ms: args.keeper_renew.as_millis() as u64,
        keeper_expire_ms: args.keeper_expire.as_millis() as u64,
        keeper_run_ms: args.keeper_run.as_millis() as u64,
    };

    if section("gc") {
        for &backend in &backends {
            let sizes = if backend.persistent() && backend != Backend::File {
                &server_sizes
            } else {
                &local_sizes
            };
            for &n in sizes {
                for &data in &args.data {
                    let config = run_config(&args, &base(backend, n, data), &run_id, &work)?;
                    eprintln!("{}", report::config_line(&config));
                    results.configs.push(config);
                }
            }
        }
    }
    if section("lease") {
        for &backend in &backends {
            log_step(&format!("{}: lease operations", backend.name()));
            let mut job = base(backend, 0, 0);
            job.location = backend.location(&work, &format!("bench-{run_id}-lease"));
            let ops: lease_bench::LeaseOps = serde_json::from_value(spawn("lease", &job)?)?;
            cleanup(&args, &job)?;
            results.leases.push((backend, ops));
        }
    }
    if section("keepers") {
        for name in &args.keeper_backends {
            let backend = Backend::parse(name).with_context(|| format!("backend `{name}`"))?;
            if let Err(why) = backend.available() {
                eprintln!("gc_pass: skipping the keeper run on {name}: {why}");
                continue;
            }
            log_step(&format!(
                "{name}: keeping {} leases for {:?}",
                args.keeper_leases, args.keeper_run
            ));
            let mut job = base(backend, 0, 0);
            job.location = backend.location(&work, &format!("bench-{run_id}-keepers"));
            let run: lease_bench::KeepersRun = serde_json::from_value(spawn("keepers", &job)?)?;
            cleanup(&args, &job)?;
            results.keepers.push((backend, run));
        }
    }
    if !args.keep && args.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }

    println!("{}", report::markdown(&results));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)?;
    }
    Ok(())
}
