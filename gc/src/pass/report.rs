//! What a pass did ([`PassReport`]): counted by every task of the pass, returned by
//! [`crate::Collector::run_pass`], exported as metrics by the daemon.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Errors a report names one by one; the rest are counted (`problems_omitted`).
pub const MAX_PROBLEMS: usize = 100;

/// The tracing target of the log line each [`Problem`] also gets: a daemon's log names every
/// problem there; `banklease gc` prints the report's instead and filters this target out, so
/// that each problem is said once.
pub const PROBLEM_TARGET: &str = "banklease_gc::problem";

/// One thing a pass could not handle; it is left for the next pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What: `checkpoint `cp-1``, `lease `owner``, a marker's or listing's path.
    pub object: String,
    /// Why, with its causes (a corrupt object's path and what is wrong with it).
    pub error: String,
    /// Whether only a human can clear it (a record that cannot be read): a later pass meets it
    /// again, unlike a store error that may pass.
    pub needs_human: bool,
}

impl Problem {
    pub(crate) fn new(object: impl Into<String>, error: impl std::fmt::Display) -> Self {
        Self {
            object: object.into(),
            error: error.to_string(),
            needs_human: false,
        }
    }

    /// A problem from a library error: a corrupt record needs a human.
    pub(crate) fn of(object: impl Into<String>, error: &banklease::Error) -> Self {
        Self {
            needs_human: matches!(error, banklease::Error::Corrupt { .. }),
            ..Self::new(object, banklease::error::error_chain(error))
        }
    }
}

/// What a pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassReport {
    /// Protecting markers seen.
    pub scanned: u64,
    /// Distinct owners among them.
    pub owners: u64,
    /// Owners whose lease is alive.
    pub alive: u64,
    /// Owners whose lease expired, but less than `grace` ago.
    pub in_grace: u64,
    /// Owners whose lease is expired past grace, or missing.
    pub dead: u64,
    /// Owners whose lease could not be read or judged (never collected).
    pub unreadable: u64,
    /// Checkpoints collected (or, with `dry_run`, that would have been).
    pub collected: u64,
    /// Checkpoints found already decided by their owner, whose move the GC finished.
    pub repaired: u64,
    /// Protecting checkpoints left alone (live, doubtful, too young, or held back by limits).
    pub skipped: u64,
    /// Errors met (each one leaves its checkpoint for the next pass).
    pub errors: u64,
    /// What could not be handled, one per error, the first [`MAX_PROBLEMS`] of them: the object
    /// (a checkpoint, a lease, a marker, a listing) and why. `banklease gc` prints each.
    pub problems: Vec<Problem>,
    /// Errors beyond the first [`MAX_PROBLEMS`], counted only.
    pub problems_omitted: u64,
    /// Data objects found (and deleted) under collected checkpoints by the late sweep: writes
    /// of paused owners that landed after the collection.
    pub late_data_swept: u64,
    /// Lease objects of dead owners deleted (expired past grace, nothing left to collect).
    pub leases_reaped: u64,
    /// `file:` banks: temporaries of writers killed before publishing, older than
    /// `late_write_window`, removed (or, dry run, found). Swept at most once per that window.
    pub temporaries_swept: u64,
    /// `file:` banks: partial uploads still staged for checkpoints the GC collected, and when
    /// each goes (the sweep decides; this only names them).
    pub staged_uploads: Vec<StagedUpload>,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Why the brake refused the pass, if it did.
    pub braked: Option<String>,
    /// Owners (and checkpoints) held back past the collector's grace because what they
    /// declared needs longer (their retry budget on a store whose create-if-absent is timing
    /// only), one line each, the first [`MAX_PROBLEMS`]: counted in `in_grace` or `skipped`.
    pub waiting: Vec<String>,
    /// Requests made, by kind (`put`, `get`, `head`, `delete`, `list`).
    pub requests: BTreeMap<String, u64>,
    /// Wall time of the pass in milliseconds.
    pub duration_ms: u64,
    /// Protecting checkpoints seen, by their owner's state: `alive`, `in_grace`, `dead`,
    /// `unreadable`.
    pub protecting: BTreeMap<String, u64>,
    /// Owner leases judged, by state (`alive`, `expired`, `missing`, `unreadable`): the owners
    /// of protecting checkpoints, and — when leases are reaped (not in a dry run) — every other
    /// lease of the bank.
    pub leases: BTreeMap<String, u64>,
    /// How long the longest-dead owner whose protecting checkpoints this pass left behind
    /// (braked, limited, dry run, errors) has been dead, in milliseconds; 0 when none is left.
    pub oldest_zombie_age_ms: u64,
}

impl PassReport {
    /// Say why an owner or a checkpoint waits longer than the grace.
    pub(crate) fn wait(&mut self, why: String) {
        tracing::info!(%why, "held back past the grace");
        if self.waiting.len() < MAX_PROBLEMS && !self.waiting.contains(&why) {
            self.waiting.push(why);
        }
    }

    /// Count an error and name it (up to [`MAX_PROBLEMS`]).
    pub(crate) fn failed(&mut self, problem: Problem) {
        self.errors += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(problem);
        } else {
            self.problems_omitted += 1;
        }
    }

    /// [`failed`](Self::failed) for each of `problems`.
    pub(crate) fn failed_all(&mut self, problems: impl IntoIterator<Item = Problem>) {
        for problem in problems {
            self.failed(problem);
        }
    }
}

/// A partial upload still staged (`file:` banks, `_banklease/staging/`) for a checkpoint the GC
/// collected: the data a collected job was writing when it died, which the sweep removes once
/// no writer holds it and `late_write_window` has passed since its last write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StagedUpload {
    /// The collected checkpoint.
    pub checkpoint_id: banklease::CheckpointId,
    /// The data object it was to become.
    pub key: String,
    /// Bytes staged.
    pub bytes: u64,
    /// Whether a live writer still holds it (a paused owner): it stays until that writer lets
    /// go, then `late_write_window` more.
    pub held: bool,
    /// When no writer holds it: from when the sweep removes it (its last write plus
    /// `late_write_window`, store clock), at the gc's first temporaries sweep since.
    pub goes_from: Option<DateTime<Utc>>,
}
