//! What the binaries' logs look like: colour only for a person at a terminal.

use std::ffi::OsStr;
use std::io::IsTerminal;

use anyhow::Context as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

use crate::args::LogFormat;

/// Whether text logs on stderr get ANSI colours: only when stderr is a terminal and `NO_COLOR`
/// is unset or empty (<https://no-color.org>). Files, pipes and journald get plain text.
pub fn stderr_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// The rule of [`stderr_colour`], for given facts.
pub fn colour(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// An error as one line for stderr: each context, then the library's error — which names the
/// cause, e.g. "the bucket or container does not exist (HTTP 404)" — or a store's error,
/// classified the same way, and nothing of the chain below, where every level repeats the one
/// beneath (the chain is kept for `{:?}` and debug logs). A GC [`Error`](banklease_gc::Error) that is
/// a library error as it is (or the GC's own refusal) ends the line as the library error would.
pub fn error_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        // A store's own error, met before any library error: its cause, named.
        if let Some(store) = cause.downcast_ref::<object_store::Error>() {
            parts.push(banklease::store::classify(store).to_string());
            break;
        }
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        if cause.downcast_ref::<banklease::Error>().is_some()
            || cause
                .downcast_ref::<banklease_gc::Error>()
                .is_some_and(|e| !matches!(e, banklease_gc::Error::Context(_)))
        {
            break;
        }
    }
    parts.join(": ")
}

/// Log to stderr as `format` says, filtered by `RUST_LOG` (`info` when unset).
pub fn init_tracing(format: LogFormat) -> anyhow::Result<()> {
    let filter = env_filter(std::env::var(EnvFilter::DEFAULT_ENV))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(stderr_colour())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_line_stops_at_the_library_error_and_repeats_nothing() {
        let store = object_store::Error::Generic {
            store: "S3",
            source: "404 Not Found: <Code>NoSuchBucket</Code>".into(),
        };
        let e = anyhow::Error::new(banklease::Error::store("list", &"b/leases".into(), store))
            .context("cannot list `b/leases` in bank=`s3://b`")
            .context("cannot list `b/leases` in bank=`s3://b`");
        assert_eq!(
            error_line(&e),
            "cannot list `b/leases` in bank=`s3://b`: store request failed: op=`list` \
             path=`b/leases`: the bucket or container does not exist; create it (Swift: \
             `banklease init`; S3, Azure, GCS: the provider's tools, e.g. `aws s3 mb`, which \
             `banklease init` names) or fix the bank url"
        );
    }

    #[test]
    fn a_gc_error_reads_as_the_library_error_it_wraps() {
        let store = || object_store::Error::Generic {
            store: "S3",
            source: "503 Service Unavailable".into(),
        };
        let lib = || banklease::Error::store("get", &"b/gc/active".into(), store());
        let direct = anyhow::Error::new(lib()).context("cannot start");
        let typed = anyhow::Error::new(banklease_gc::Error::from(lib())).context("cannot start");
        assert_eq!(error_line(&typed), error_line(&direct));
        let with_context: banklease_gc::Result<()> =
            banklease_gc::error::Context::with_context(Err(lib()), || "gc pass failed".to_owned());
        let direct = anyhow::Error::new(lib()).context("gc pass failed");
        assert_eq!(
            error_line(&anyhow::Error::new(with_context.unwrap_err())),
            error_line(&direct)
        );
    }

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None), "a file, a pipe or journald");
        assert!(!colour(false, Some(OsStr::new("1"))));
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
}
