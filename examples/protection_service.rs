//! A small protection service embedding a banklease owner lease, as a real one would.
//!
//! It acquires its owner lease, keeps it renewed in the background, writes `--checkpoints N`
//! checkpoints of three small data objects each, completes the first `--complete M` of them as
//! `available`, and leaves the others `protecting`. Then it prints one JSON line on stdout,
//!
//! ```text
//! {"owner_id": "...", "protecting": ["cp-..."], "available": ["cp-..."]}
//! ```
//!
//! and keeps its lease alive until SIGTERM or SIGINT, when it completes its still-protecting
//! checkpoints as `error` and releases its lease (exit 0). If the lease is lost meanwhile it stops
//! at once with exit 3: its checkpoints may already be collected.
//!
//! The end-to-end tests drive it; by hand:
//!
//! ```text
//! cargo run --example protection_service -- --bank file:///tmp/bank --checkpoints 4 --complete 2 \
//!     --renew-window 2s --expire-window 10s --validity-window 1s
//! ```

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use banklease::clock::{Jitter, SharedClock, SystemClock};
use banklease::{Bank, CheckpointId, LeaseState, LeaseWindows, OwnerId, OwnerLease};
use banklease::{Checkpoint, Status};
use clap::Parser;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

/// Exit code when the lease was lost while the service ran.
const EXIT_LEASE_LOST: u8 = 3;
/// Data objects per checkpoint.
const OBJECTS_PER_CHECKPOINT: usize = 3;

/// A toy protection service: writes checkpoints under an owner lease, then holds the lease
/// until SIGTERM/SIGINT.
#[derive(Debug, Parser)]
#[command(name = "protection_service", about)]
struct Args {
    /// Bank URL (file:///path, s3://bucket/prefix, ...).
    #[arg(long, value_name = "URL")]
    bank: String,
    /// Checkpoints to create.
    #[arg(long, value_name = "N")]
    checkpoints: usize,
    /// How many of them (the first ones) to complete as available; the rest stay protecting.
    #[arg(long, value_name = "M")]
    complete: usize,
    /// Time between lease renewals.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration)]
    renew_window: Duration,
    /// Lease lifetime after the last successful renewal.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    expire_window: Duration,
    /// Lease time that must be left to start an update.
    #[arg(long, value_name = "DURATION", default_value = "100s", value_parser = humantime::parse_duration)]
    validity_window: Duration,
}

/// The line printed once the checkpoints are written.
#[derive(Debug, Serialize)]
struct Ready<'a> {
    owner_id: &'a str,
    protecting: Vec<&'a str>,
    available: Vec<&'a str>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode> {
    if args.complete > args.checkpoints {
        bail!(
            "--complete {} is more than --checkpoints {}",
            args.complete,
            args.checkpoints
        );
    }
    // Installed before anything is announced, so a signal sent as soon as the ready line is
    // read is handled rather than killing the process with checkpoints left protecting.
    let mut sigterm = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;

    let windows = LeaseWindows::new(args.renew_window, args.expire_window, args.validity_window)?;
    let bank = Bank::open(&args.bank)?;
    let clock: SharedClock = Arc::new(SystemClock);
    let owner = OwnerId::for_this_process(clock.system_now());
    let lease = OwnerLease::acquire(&bank, owner.clone(), windows, clock.clone())
        .await
        .with_context(|| format!("cannot acquire the lease of owner_id=`{owner}`"))?;
    let keeper = lease.spawn_keeper(Jitter::from_entropy(), 0.1);
    let mut state = keeper.state();
    tracing::info!(owner_id = %owner, bank = %bank.label(), "lease acquired");

    // Owner ids are 64 hex digits; a prefix keeps checkpoint ids readable and still distinct.
    let short: String = owner.as_str().chars().take(12).collect();
    let mut protecting = Vec::new();
    let mut available = Vec::new();
    for i in 0..args.checkpoints {
        let id: CheckpointId = format!("cp-{short}-{i}").parse()?;
        let cp = Checkpoint::create(&lease, &id)
            .await
            .with_context(|| format!("cannot create checkpoint `{id}`"))?;
        for part in 0..OBJECTS_PER_CHECKPOINT {
            let bytes = format!("checkpoint {id} part {part}\n").into_bytes();
            cp.put_data(&format!("part-{part}"), bytes.into())
                .await
                .with_context(|| format!("cannot write data of checkpoint `{id}`"))?;
        }
        if i < args.complete {
            cp.complete(Status::Available)
                .await
                .with_context(|| format!("cannot complete checkpoint `{id}`"))?;
            available.push(cp);
        } else {
            protecting.push(cp);
        }
    }

    let ready = Ready {
        owner_id: owner.as_str(),
        protecting: protecting.iter().map(|c| c.id().as_str()).collect(),
        available: available.iter().map(|c| c.id().as_str()).collect(),
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", serde_json::to_string(&ready)?)?;
    stdout.flush()?;
    drop(stdout);

    // Hold the lease, like a service in the middle of long backups.
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            changed = state.changed() => {
                if changed.is_err() {
                    bail!("the lease state channel closed unexpectedly");
                }
                let current = state.borrow_and_update().clone();
                match current {
                    LeaseState::Held { .. } => {}
                    LeaseState::Lost { reason } => {
                        // Stop writing at once: a GC may already have collected our checkpoints.
                        tracing::error!(owner_id = %owner, %reason, "lease lost; stopping");
                        return Ok(ExitCode::from(EXIT_LEASE_LOST));
                    }
                    LeaseState::Released => bail!("the lease was released by someone else"),
                }
            }
        }
    }

    tracing::info!(owner_id = %owner, "shutting down");
    // Orderly shutdown: unfinished checkpoints end as `error` rather than waiting for the GC.
    let mut failed = 0usize;
    for cp in &protecting {
        match cp.complete(Status::Error).await {
            Ok(()) => tracing::info!(checkpoint_id = %cp.id(), "marked error"),
            Err(e) => {
                failed += 1;
                tracing::error!(checkpoint_id = %cp.id(), error = %e, "cannot mark checkpoint error");
            }
        }
    }
    keeper
        .release()
        .await
        .with_context(|| format!("cannot release the lease of owner_id=`{owner}`"))?;
    tracing::info!(owner_id = %owner, "lease released");
    if failed > 0 {
        bail!("{failed} checkpoint(s) could not be marked error; the GC will collect them now that the lease is released");
    }
    Ok(ExitCode::SUCCESS)
}
