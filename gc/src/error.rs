//! The GC library's error: the daemon's and a single pass's failures, typed.
//!
//! A pass itself ([`Collector::run_pass`](crate::Collector::run_pass)) and the GC's other
//! library calls fail with a [`banklease::Error`]; what the daemon adds — the context of a
//! library error, a refusal to start or to run beside an active daemon — is an [`Error`] here.
//! [`Error::kind`] is the library's [`ErrorKind`], the wrapped error's where there is one, so
//! callers (and the CLI's exit statuses) treat both alike. Messages are the library's: a context
//! is its own message and keeps the library error as its `#[source]`.

use banklease::ErrorKind;

pub use crate::run::ActiveElsewhere;

/// A specialised `Result` for the GC daemon's API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong running the GC daemon or a single pass.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A library error, as it is.
    #[error(transparent)]
    Banklease(#[from] banklease::Error),

    /// A library error, with what the daemon was doing when it failed (boxed: a `Result` stays
    /// small).
    #[error(transparent)]
    Context(Box<WithContext>),

    /// A single pass refused: another daemon is active.
    #[error(transparent)]
    ActiveElsewhere(#[from] ActiveElsewhere),

    /// The bank's store cannot keep owner leases (from its capability probe): the daemon does
    /// not start.
    #[error(
        "refusing to start: owner leases cannot be kept on bank=`{bank}`: {why}; run \
         `banklease doctor` for the full capability table"
    )]
    LeasesUnsupported {
        /// The bank.
        bank: String,
        /// Why, from the probe.
        why: String,
    },

    /// A single pass's GC lease was lost before its pass could run.
    #[error("the gc lease was lost before the pass could run ({reason}); nothing was collected")]
    LostBeforePass {
        /// Why the lease is considered lost.
        reason: String,
    },

    /// The task running a pass ended abnormally (it panicked).
    #[error("gc pass task ended abnormally: {0}")]
    PassAborted(String),

    /// The metrics endpoint could not be served.
    #[error("{context}")]
    Metrics {
        /// What failed, naming `gc.metrics_addr`.
        context: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// A library error with what the daemon was doing when it failed: the context is the message,
/// the library error its `#[source]`.
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct WithContext {
    /// What failed, e.g. "refusing to start on bank=`file:///b`".
    pub context: String,
    /// The library's error.
    #[source]
    pub source: banklease::Error,
}

impl Error {
    /// What kind of failure this is: the wrapped library error's kind, or the kind of the
    /// daemon's own refusal (an active daemon elsewhere is [`ErrorKind::Unavailable`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Banklease(e) => e.kind(),
            Error::Context(c) => c.source.kind(),
            Error::ActiveElsewhere(_) => ErrorKind::Unavailable,
            Error::LeasesUnsupported { .. } => ErrorKind::Unsupported,
            Error::LostBeforePass { .. } => ErrorKind::Lost,
            Error::PassAborted(_) => ErrorKind::Internal,
            // An address that cannot be listened on: change `gc.metrics_addr`.
            Error::Metrics { .. } => ErrorKind::InvalidInput,
        }
    }

    /// The library error inside, if any.
    pub fn banklease(&self) -> Option<&banklease::Error> {
        match self {
            Error::Banklease(e) => Some(e),
            Error::Context(c) => Some(&c.source),
            _ => None,
        }
    }
}

/// The kind of the first library or GC error in an `anyhow` chain (the binaries' edge), if any.
pub fn kind_of(error: &anyhow::Error) -> Option<ErrorKind> {
    error.chain().find_map(|cause| {
        cause.downcast_ref::<Error>().map(Error::kind).or_else(|| {
            cause
                .downcast_ref::<banklease::Error>()
                .map(banklease::Error::kind)
        })
    })
}

/// `.with_context(..)` for a library result: its error becomes [`Error::Context`].
pub trait Context<T> {
    /// The error, with what was being done when it happened.
    fn with_context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for banklease::Result<T> {
    fn with_context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| {
            Error::Context(Box::new(WithContext {
                context: context(),
                source,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_the_library_errors_or_the_daemons_own() {
        let config = banklease::Error::Config {
            message: "x".into(),
        };
        assert_eq!(Error::from(config).kind(), ErrorKind::InvalidInput);
        let wrapped: Result<()> = Err(banklease::Error::NoBankGiven).with_context(|| "ctx".into());
        let wrapped = wrapped.unwrap_err();
        assert_eq!(wrapped.kind(), ErrorKind::InvalidInput);
        assert_eq!(wrapped.to_string(), "ctx");
        assert!(wrapped.banklease().is_some());
        let active = Error::from(ActiveElsewhere {
            holder: banklease::OwnerId::parse("gc-1").unwrap(),
            holder_host: Some("h".into()),
            holder_pid: Some(7),
            bank: "file:///b".into(),
        });
        assert_eq!(active.kind(), ErrorKind::Unavailable);
        assert!(active
            .to_string()
            .starts_with("refusing a gc pass: the gc daemon holder=`gc-1` (host=`h`, pid=`7`)"));
        let cases = [
            (
                Error::LeasesUnsupported {
                    bank: "b".into(),
                    why: "w".into(),
                },
                ErrorKind::Unsupported,
            ),
            (
                Error::LostBeforePass { reason: "r".into() },
                ErrorKind::Lost,
            ),
            (Error::PassAborted("panic".into()), ErrorKind::Internal),
            (
                Error::Metrics {
                    context: "c".into(),
                    source: std::io::Error::other("in use"),
                },
                ErrorKind::InvalidInput,
            ),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e}");
        }
    }
}
