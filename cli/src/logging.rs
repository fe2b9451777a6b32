//! What `banklease` prints on stderr besides its own `error:` line.
//!
//! An operator (or cron, which mails whatever is printed) sees at most one line per thing to
//! know: a warning is one `warning:` line and a notice (read-only access, ...) one `note:`
//! line, each with its fields as key=`value`, no timestamp, no module path. Errors logged on the
//! way are not shown: the command says what failed in its one `error:` line. The log itself —
//! timestamps, levels, info and debug events — appears only with `-v` (info), `-vv` (debug),
//! `-vvv` (trace), or `RUST_LOG`, which overrides them.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// Set while a supervisor (`run`, `lock run`) keeps a hold: it says its own one warning and
/// `error:` line about it ([`crate::child::overdue`]), so the keepers' warnings
/// ([`banklease::lease::RENEWAL_TARGET`]) are left out of the one-line stderr. Other commands
/// (a `gc` pass's lease) show them.
static SUPERVISING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process supervises a job from now on (see [`SUPERVISING`]).
pub fn supervising() {
    SUPERVISING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Install stderr's subscriber for `-v` given `verbose` times.
pub fn init(verbose: u8) {
    // A pass's problems are printed from its report, one `error:` line each: not logged twice.
    let problems = banklease_gc::pass::report::PROBLEM_TARGET;
    let from_env = std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty());
    if from_env || verbose > 0 {
        let level = match verbose {
            0 | 1 => "info",
            2 => "debug",
            _ => "trace",
        };
        let filter = if from_env {
            EnvFilter::from_default_env()
        } else {
            EnvFilter::new(format!("{level},{problems}=off"))
        };
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(banklease_gc_daemon::logging::stderr_colour())
            .with_writer(std::io::stderr)
            .init();
        return;
    }
    let layer = tracing_subscriber::fmt::layer()
        .event_format(OneLine)
        .with_writer(std::io::stderr)
        .with_filter(filter_fn(move |meta| {
            // A hold's renewals: the supervisor says its own warning and error line.
            *meta.level() == Level::WARN
                && meta.target() != problems
                && !(meta.target() == banklease::lease::RENEWAL_TARGET
                    && SUPERVISING.load(std::sync::atomic::Ordering::Relaxed))
        }));
    tracing_subscriber::registry().with(layer).init();
}

/// A warning as one `warning:` line, a notice as one `note:` line.
struct OneLine;

impl<S, N> FormatEvent<S, N> for OneLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        writeln!(writer, "{}", line(event.metadata().target(), &fields))
    }
}

/// The line for an event of `target` with `fields`; never more than one line.
fn line(target: &str, fields: &Fields) -> String {
    let prefix = if target == banklease::NOTE_TARGET {
        "note"
    } else {
        "warning"
    };
    let mut line = format!("{prefix}: {}", fields.message);
    for (name, value) in &fields.rest {
        let _ = write!(line, " {name}=`{value}`");
    }
    line.replace(['\n', '\r'], " ")
}

/// An event's message and its other fields, in order.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = value;
        } else {
            self.rest.push((field.name(), value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_and_a_notice_are_one_line_each_with_their_fields() {
        let fields = Fields {
            message: "read-only access: the clock\nprobe cannot be written".to_owned(),
            rest: vec![("bank", "s3://b".to_owned())],
        };
        assert_eq!(
            line(banklease::NOTE_TARGET, &fields),
            "note: read-only access: the clock probe cannot be written bank=`s3://b`"
        );
        assert_eq!(
            line("banklease::config", &fields),
            "warning: read-only access: the clock probe cannot be written bank=`s3://b`"
        );
    }
}
