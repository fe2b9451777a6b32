//! What the probes learnt about a bank's store (the record's type; `bank/learnt.rs` reads and
//! writes it), kept in the bank (`_banklease/store.json`) so
//! that every process finds it: the store's conditions ([`Capabilities`]), and whether it
//! keeps named locks and fenced writes (the races of [`crate::lock::support`], over a hundred
//! writes), and the resolution of its stamps (six requests). A process reads it once (one GET) instead of probing; `init` and `doctor` measure
//! again and rewrite it, and a conditional write the store refuses against it removes it, so
//! the next process measures afresh.
//!
//! Invariant: **a verdict is used only on the store it was measured on.** The record names the
//! store (its URL and the endpoint its client was configured with, never a credential): a bank
//! copied to another store, or reached through another endpoint, is measured again. A record
//! that is unreadable, of another format, or of another store is ignored, never an error.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::capability::Capabilities;

/// The record's body format.
pub(crate) const FORMAT: u32 = 1;

/// A verdict on one use of the store (named locks, fenced writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    Supported,
    Refused(String),
}

impl Verdict {
    /// This verdict as read back from `learnt`: a refusal says when and by whom it was
    /// measured, and how to measure again (the store may have changed since).
    pub(crate) fn as_kept(&self, learnt: &Learnt) -> Verdict {
        match self {
            Verdict::Supported => Verdict::Supported,
            Verdict::Refused(why) => Verdict::Refused(format!(
                "{why} (measured at {} by {}; `banklease init` measures the store again)",
                learnt
                    .learnt_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                learnt.learnt_by
            )),
        }
    }
}

/// The record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Learnt {
    pub format: u32,
    /// The store measured (see the module's invariant).
    pub store: String,
    pub capabilities: Capabilities,
    /// Named locks; `None` until a lock command measured them.
    #[serde(default)]
    pub locks: Option<Verdict>,
    /// Fenced writes; `None` until a fenced write measured them.
    #[serde(default)]
    pub fencing: Option<Verdict>,
    /// The resolution of the store's `last_modified` stamps, in milliseconds
    /// ([`Bank::stamp_resolution`]); `None` until measured.
    #[serde(default)]
    pub stamp_resolution_ms: Option<u64>,
    /// Whether the `Date` of the store's answers agrees with its stamps (within a second each
    /// way), as `init` found it: read commands judge by `Date` only where it does (a proxy
    /// that dates answers with its own clock does not); `None` until measured.
    #[serde(default)]
    pub date_agrees: Option<bool>,
    /// When, on the writer's wall clock (for humans: nothing is judged by it).
    pub learnt_at: DateTime<Utc>,
    /// Which release, host and process measured it, and by which command.
    pub learnt_by: String,
}

impl Learnt {
    /// A record of `capabilities` just measured on the store `identity` names, nothing else
    /// known yet.
    pub(crate) fn new(identity: &str, capabilities: Capabilities) -> Self {
        Self {
            format: FORMAT,
            store: identity.to_owned(),
            capabilities,
            locks: None,
            fencing: None,
            stamp_resolution_ms: None,
            date_agrees: None,
            learnt_at: Utc::now(),
            learnt_by: format!(
                "banklease {} on host {} (pid {}, {})",
                env!("CARGO_PKG_VERSION"),
                crate::id::local_hostname(),
                std::process::id(),
                std::env::args()
                    .next()
                    .as_deref()
                    .and_then(|a| std::path::Path::new(a)
                        .file_name()?
                        .to_str()
                        .map(str::to_owned))
                    .unwrap_or_default()
            ),
        }
    }
}
