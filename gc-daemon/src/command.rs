//! The `banklease-gc` command: start-up, signals, exit codes, and `--once`'s report line.

use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use banklease::{Config, ErrorKind};
use banklease_gc::error::kind_of;
use banklease_gc::PassLease;
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;

use crate::args::{Cli, GcCommand};
use crate::daemon::Daemon;
use crate::logging::error_line;

/// The `banklease-gc` command: `cli` already parsed.
pub fn main(cli: Cli) -> ExitCode {
    // Describes the command line only: no configuration, no bank, no log.
    if let Some(GcCommand::Completions { shell }) = cli.command {
        use clap::CommandFactory as _;
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "banklease-gc", &mut script);
        let mut stdout = std::io::stdout().lock();
        return match stdout.write_all(&script).and_then(|()| stdout.flush()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write the completion script to stdout: {e}");
                ExitCode::from(2)
            }
        };
    }
    let once = cli.once;
    if let Err(e) = crate::logging::init_tracing(cli.log_format) {
        eprintln!("banklease-gc: {}", error_line(&e));
        return ExitCode::FAILURE;
    }
    let result = cli.load_config().and_then(|config| {
        // Flat memory: a file bank runs every call on the blocking pool, which would otherwise
        // grow a thread (and its memory) whenever none is idle, up to 512. A little above the
        // requests in flight is all a pass uses.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .max_blocking_threads(blocking_threads(config.gc.concurrency))
            .build()
            .context("cannot start the async runtime")?;
        runtime.block_on(run(cli, config))
    });
    match result {
        Ok(code) => code,
        // Refused, not failed: another daemon is active (`--once`).
        Err(e) if kind_of(&e) == Some(ErrorKind::Unavailable) => {
            tracing::error!(error = %error_line(&e), "banklease-gc refused");
            ExitCode::from(EXIT_ACTIVE_ELSEWHERE)
        }
        Err(e) => {
            tracing::error!(error = %error_line(&e), "banklease-gc stopped on an error");
            // A single pass reports as `banklease gc` does: 2 failed; the daemon exits 1.
            if once {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// `--once` refused because another daemon is active (sysexits' EX_TEMPFAIL: try later): the
/// GC error's kind is [`ErrorKind::Unavailable`], as `banklease gc` exits for it.
const EXIT_ACTIVE_ELSEWHERE: u8 = 75;

/// Blocking threads for `concurrency` requests in flight (plus the daemon's own: the GC
/// lease's keeper, the metrics endpoint, the clock watch).
fn blocking_threads(concurrency: usize) -> usize {
    concurrency.saturating_add(8)
}

async fn run(cli: Cli, config: Config) -> anyhow::Result<ExitCode> {
    // First, so that a signal during start-up is a shutdown request, not an abrupt kill.
    let shutdown = shutdown_signals()?;
    let daemon = Daemon::open(config)?
        .with_force(cli.force)
        .beside_daemon(cli.beside_daemon);
    if !cli.once {
        daemon.run(shutdown).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let single = daemon
        .run_single(shutdown)
        .await?
        .context("shut down before a pass could run; nothing was collected")?;
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(flatten)]
        report: &'a banklease_gc::PassReport,
        #[serde(flatten)]
        lease: &'a PassLease,
    }
    let line = serde_json::to_string(&Line {
        report: &single.report,
        lease: &single.lease,
    })
    .context("cannot encode the pass report")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .context("cannot write the pass report to stdout")?;
    let report = &single.report;
    Ok(if report.errors > 0 || report.braked.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A future that completes at the first SIGTERM or SIGINT.
fn shutdown_signals() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate()).context("cannot install a SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot install a SIGINT handler")?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!(signal = name, "shutting down");
    })
}
