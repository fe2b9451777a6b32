//! The command line of the `banklease-gc` daemon.
//!
//! In the library, not the binary, so that `banklease`'s man page and completion generator
//! (`banklease completions`, the packaging step) describes this binary from the same definition.

use std::path::PathBuf;
use std::time::Duration;

use banklease::Config;
use clap::{Parser, Subcommand, ValueEnum};

/// Collects checkpoints left `protecting` by dead banklease owners. One daemon per bank is
/// active; others stand by and take over when it dies.
#[derive(Debug, Parser)]
#[command(name = "banklease-gc", version, about, long_about = None)]
pub struct Cli {
    /// Configuration file (TOML); `BANKLEASE_<SECTION>__<KEY>` variables override it.
    #[arg(long, value_name = "FILE", env = banklease::config::CONFIG_ENV)]
    pub config: Option<PathBuf>,
    /// Bank URL, overriding `bank.url` (file:///path, s3://bucket/prefix, az://, gs://,
    /// swift://).
    #[arg(long, value_name = "URL", env = banklease::config::BANK_ENV)]
    pub bank: Option<String>,
    /// Run a single pass with the GC lease (taken at once, released after), print its report
    /// as one JSON line and exit: 0 clean, 1 the pass met errors (each in `problems`) or the
    /// brake refused it, 2 failed, 75 refused because another daemon is active. Serves no
    /// metrics. A dry run takes no lease.
    #[arg(long)]
    pub once: bool,
    /// With --once: collect even when the safety brake would refuse.
    #[arg(long, requires = "once")]
    pub force: bool,
    /// With --once: run the pass even while another daemon is active (beside it, without the
    /// GC lease) instead of refusing with 75.
    #[arg(long, requires = "once")]
    pub beside_daemon: bool,
    /// Plan and report only; delete nothing (sets `gc.dry_run`).
    #[arg(long)]
    pub dry_run: bool,
    /// Time between passes, e.g. `5m` (overrides `gc.interval`).
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    pub interval: Option<Duration>,
    /// Serve `/metrics` and `/healthz` on this address, e.g. `127.0.0.1:9187`
    /// (overrides `gc.metrics_addr`).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Log line format on stderr; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Option<GcCommand>,
}

/// What `banklease-gc` does instead of collecting.
#[derive(Debug, Subcommand)]
pub enum GcCommand {
    /// Print the completion script of banklease-gc for SHELL on stdout. Exit 0 done, 2 error.
    #[command(after_help = "Example (bash, for your user):\n  \
        banklease-gc completions bash > ~/.local/share/bash-completion/completions/banklease-gc")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
    /// Apply the command-line overrides to a loaded configuration.
    pub fn apply(&self, config: &mut Config) {
        if let Some(url) = &self.bank {
            config.bank.url = url.clone();
        }
        if self.dry_run {
            config.gc.dry_run = true;
        }
        if let Some(interval) = self.interval {
            config.gc.interval = interval;
        }
        if let Some(addr) = &self.metrics_addr {
            config.gc.metrics_addr = Some(addr.clone());
        }
    }

    /// The configuration: file, environment, then this command line's overrides, validated
    /// once.
    pub fn load_config(&self) -> anyhow::Result<Config> {
        // The one gate: the command line's overrides are applied before validation (its warnings
        // are logged there).
        // Its refusal is the library's one line, as every entry point prints it.
        Ok(Config::load_with(self.config.as_deref(), |config| {
            self.apply(config)
        })?)
    }
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
    fn bad_values_are_refused() {
        assert!(Cli::try_parse_from(["banklease-gc", "--interval", "soon"]).is_err());
        assert!(Cli::try_parse_from(["banklease-gc", "--log-format", "xml"]).is_err());
    }
}
