//! `banklease-gc`: the garbage-collector daemon of a banklease bank.
//!
//! Runs passes on an interval while it holds the bank's single GC lease, standing by otherwise
//! (see `banklease_gc::daemon`). SIGTERM or SIGINT: no new passes, the pass in flight finishes,
//! the GC lease is released, exit 0. `--once`: one pass with the GC lease (refused, exit 75,
//! while another daemon is active, unless `--beside-daemon`), its report as one JSON line on stdout;
//! exit 0 clean, 1 the pass met errors or was braked, 2 failed.

use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use banklease::{Config, ErrorKind};
use banklease_gc::args::{Cli, LogFormat};
use banklease_gc::error::kind_of;
use banklease_gc::{Daemon, PassLease};
use clap::Parser as _;
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let once = cli.once;
    if let Err(e) = init_tracing(cli.log_format) {
        eprintln!("banklease-gc: {}", banklease_gc::logging::error_line(&e));
        return ExitCode::FAILURE;
    }
    let result = load_config(&cli).and_then(|config| {
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
            tracing::error!(error = %banklease_gc::logging::error_line(&e), "banklease-gc refused");
            ExitCode::from(EXIT_ACTIVE_ELSEWHERE)
        }
        Err(e) => {
            tracing::error!(error = %banklease_gc::logging::error_line(&e), "banklease-gc stopped on an error");
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

fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    // The one gate: the command line's overrides are applied before validation (its warnings
    // are logged there).
    // Its refusal is the library's one line, as every entry point prints it.
    Ok(Config::load_with(cli.config.as_deref(), |config| {
        cli.apply(config)
    })?)
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

fn init_tracing(format: LogFormat) -> anyhow::Result<()> {
    let filter = env_filter(std::env::var(EnvFilter::DEFAULT_ENV))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(banklease_gc::logging::stderr_colour())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

/// The log filter from `RUST_LOG`'s value: `info` when unset or empty; a typo is an error rather
/// than silently dropped directives.
fn env_filter(var: Result<String, std::env::VarError>) -> anyhow::Result<EnvFilter> {
    let directives = match var {
        Ok(directives) => directives,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(e) => return Err(e).context("invalid RUST_LOG"),
    };
    EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .parse(&directives)
        .with_context(|| format!("invalid RUST_LOG=`{directives}`"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;
    use std::time::Duration;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn overrides_replace_config_values() {
        let cli = Cli::try_parse_from([
            "banklease-gc",
            "--bank",
            "memory://",
            "--dry-run",
            "--interval",
            "90s",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
        let mut config = Config::default();
        cli.apply(&mut config);
        assert_eq!(config.bank.url, "memory://");
        assert!(config.gc.dry_run);
        assert_eq!(config.gc.interval, Duration::from_secs(90));
        assert_eq!(config.gc.metrics_addr.as_deref(), Some("127.0.0.1:0"));
    }

    #[test]
    fn no_flags_leave_the_config_alone() {
        let cli = Cli::try_parse_from(["banklease-gc"]).unwrap();
        let mut config = Config::default();
        config.gc.dry_run = true;
        cli.apply(&mut config);
        assert!(
            config.gc.dry_run,
            "--dry-run absent does not turn a dry run off"
        );
        assert_eq!(config.bank.url, Config::default().bank.url);
        assert_eq!(cli.log_format, LogFormat::Text);
    }

    #[test]
    fn log_filter_defaults_to_info_and_refuses_typos() {
        use std::env::VarError;
        let unset = env_filter(Err(VarError::NotPresent)).unwrap();
        assert_eq!(unset.max_level_hint(), Some(LevelFilter::INFO));
        let empty = env_filter(Ok(String::new())).unwrap();
        assert_eq!(empty.max_level_hint(), Some(LevelFilter::INFO));
        let debug = env_filter(Ok("banklease_gc=debug".into())).unwrap();
        assert_eq!(debug.max_level_hint(), Some(LevelFilter::DEBUG));
        let msg = format!(
            "{:#}",
            env_filter(Ok("banklease_gc=loud".into())).unwrap_err()
        );
        assert!(msg.contains("banklease_gc=loud"), "{msg}");
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Cli::try_parse_from(["banklease-gc", "--interval", "soon"]).is_err());
        assert!(Cli::try_parse_from(["banklease-gc", "--log-format", "xml"]).is_err());
    }
}
