//! What a pass did ([`PassReport`]): counted by every task of the pass, returned by
//! [`crate::Collector::run_pass`], exported as metrics by the daemon.

use std::collections::BTreeMap;

use banklease::{CheckpointId, OwnerId};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Errors a report names one by one; the rest are counted (`problems_omitted`).
pub const MAX_PROBLEMS: usize = 100;

/// Checkpoints a report names one by one ([`PassReport::checkpoints`]); the rest are counted
/// (`checkpoints_omitted`), so that memory stays bounded on a bank of any size.
pub const MAX_NAMED: usize = 100_000;

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
    /// Owners whose lease expired past the grace by its stamp, held back only by the clock
    /// floor (a store-clock step seen after the stamp): not alive, and not collected yet.
    pub held_back: u64,
    /// When the last of them is collectable, on the store's clock.
    pub held_back_until: Option<chrono::DateTime<chrono::Utc>>,
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
    /// Checkpoints left alone and named as skipped: protecting ones (live, doubtful, too
    /// young, or held back by limits) and failed ones due for retirement but over the pass's
    /// limit (those are in [`failed_kept`](Self::failed_kept) too).
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
    /// Failed checkpoints retired (past `gc.keep_failed_for`; with `dry_run`: that would be).
    pub retired: u64,
    /// Failed checkpoints kept (not failed for `gc.keep_failed_for` yet, or kept for ever) ...
    pub failed_kept: u64,
    /// ... and the bytes of their data: what the setting keeps.
    pub failed_kept_bytes: u64,
    /// How long the longest-failed of them has been failed, on the store's clock (0 when none
    /// is kept, and for one whose age no earlier reading of the clock vouches for).
    pub failed_oldest_age_ms: u64,
    /// Every checkpoint the pass collected, retired, repaired or skipped (with `dry_run`: would
    /// have), with its owner and why, the first [`MAX_NAMED`] of them: a skipped one is a
    /// protecting checkpoint left alone. Errors are in `problems` instead.
    pub checkpoints: Vec<NamedCheckpoint>,
    /// Checkpoints beyond the first [`MAX_NAMED`], counted only.
    pub checkpoints_omitted: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Why the brake refused the pass, if it did.
    pub braked: Option<String>,
    /// Owners (and checkpoints) held back past the collector's grace because what they
    /// declared needs longer (their retry budget on a store whose create-if-absent is timing
    /// only), one line each, the first [`MAX_PROBLEMS`]: counted in `in_grace` or `skipped`.
    pub waiting: Vec<String>,
    /// What the pass's clock checks found that an operator should know, one line each: a
    /// clock floor ahead of the store's verified clock dropped (it held collection back), a
    /// floor holding stamps back, a step confirmed by two readings.
    pub clock: Vec<String>,
    /// The step floor this pass judged by: every stamp older than it was judged as written at
    /// it (a store-clock step was seen there). `None`: no floor held anything back.
    pub clock_floor: Option<chrono::DateTime<chrono::Utc>>,
    /// What the pass met in the bank that banklease did not write, and left as it is: a
    /// symbolic link in a `file:` bank (never followed), a name in one of banklease's own
    /// folders that is not a key it writes. One line each, the first [`MAX_PROBLEMS`]; not
    /// an error (a pass never fails for them), but an operator should look.
    pub foreign: Vec<String>,
    /// Such entries beyond the first [`MAX_PROBLEMS`], counted only.
    pub foreign_omitted: u64,
    /// Requests made, by kind (`put`, `get`, `head`, `delete`, `list`).
    pub requests: BTreeMap<String, u64>,
    /// Wall time of the pass in milliseconds.
    pub duration_ms: u64,
    /// Protecting checkpoints seen, by their owner's state: `alive`, `in_grace`, `dead`,
    /// `unreadable`, `held_back`.
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
    /// A failed checkpoint kept, failed for `failed_for`: the oldest one's age.
    pub(crate) fn keep_oldest_failed(&mut self, failed_for: std::time::Duration) {
        let ms = u64::try_from(failed_for.as_millis()).unwrap_or(u64::MAX);
        self.failed_oldest_age_ms = self.failed_oldest_age_ms.max(ms);
    }

    /// Say why an owner or a checkpoint waits longer than the grace.
    pub(crate) fn wait(&mut self, why: String) {
        tracing::info!(%why, "held back past the grace");
        if self.waiting.len() < MAX_PROBLEMS && !self.waiting.contains(&why) {
            self.waiting.push(why);
        }
    }

    /// Name something met in the bank that banklease did not write, and kept (up to
    /// [`MAX_PROBLEMS`], each once).
    pub(crate) fn foreign(&mut self, what: String) {
        if self.foreign.contains(&what) {
            return;
        }
        if self.foreign.len() < MAX_PROBLEMS {
            self.foreign.push(what);
        } else {
            self.foreign_omitted += 1;
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

    /// Name what the pass did (or, dry run, would do) with one checkpoint.
    pub(crate) fn name(
        &mut self,
        checkpoint_id: CheckpointId,
        owner_id: OwnerId,
        action: Action,
        reason: impl Into<String>,
    ) {
        if self.checkpoints.len() < MAX_NAMED {
            self.checkpoints.push(NamedCheckpoint {
                checkpoint_id,
                owner_id,
                action,
                reason: reason.into(),
            });
        } else {
            self.checkpoints_omitted += 1;
        }
    }

    /// The checkpoints named with `action`.
    pub fn named(&self, action: Action) -> impl Iterator<Item = &NamedCheckpoint> {
        self.checkpoints.iter().filter(move |c| c.action == action)
    }

    /// One line naming the first `few` checkpoints of each action and counting the rest, e.g.
    /// ``collected 2: `cp-1`, `cp-2` (owner `a`); skipped 1: `cp-9` (owner `b`)``; empty when
    /// none was named.
    pub fn named_summary(&self, few: usize) -> String {
        self.named_lines(few, |owner| owner.to_string()).join("; ")
    }

    /// [`named_summary`](Self::named_summary) as one line per action (and one for what was
    /// not named), each owner id written by `owner` (a table's short form).
    pub fn named_lines(&self, few: usize, owner: impl Fn(&OwnerId) -> String) -> Vec<String> {
        let and_more = |shown: Vec<String>, all: usize| {
            let mut text = shown.join(", ");
            if all > shown.len() {
                text.push_str(&format!(" and {} more", all - shown.len()));
            }
            text
        };
        let mut lines = Vec::new();
        for action in Action::ALL {
            let named: Vec<&NamedCheckpoint> = self.named(action).collect();
            if named.is_empty() {
                continue;
            }
            let ids = named
                .iter()
                .take(few)
                .map(|c| format!("`{}`", c.checkpoint_id));
            let mut owners: Vec<&OwnerId> = named.iter().map(|c| &c.owner_id).collect();
            owners.sort();
            owners.dedup();
            let owners_text = and_more(
                owners
                    .iter()
                    .take(few)
                    .map(|o| format!("`{}`", owner(o)))
                    .collect(),
                owners.len(),
            );
            lines.push(format!(
                "{} {}: {} (owner{} {owners_text})",
                action.verb(self.dry_run),
                named.len(),
                and_more(ids.collect(), named.len()),
                if owners.len() == 1 { "" } else { "s" },
            ));
        }
        if self.checkpoints_omitted > 0 {
            lines.push(format!(
                "{} more checkpoint(s) not named (over {MAX_NAMED})",
                self.checkpoints_omitted
            ));
        }
        lines
    }

    /// [`failed`](Self::failed) for each of `problems`.
    pub(crate) fn failed_all(&mut self, problems: impl IntoIterator<Item = Problem>) {
        for problem in problems {
            self.failed(problem);
        }
    }
}

/// A duration in a report's words: to the millisecond below 10 s, else to the second.
pub(crate) fn duration_words(d: std::time::Duration) -> String {
    let d = if d.as_secs() >= 10 {
        std::time::Duration::from_secs(d.as_secs())
    } else {
        std::time::Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    humantime::format_duration(d).to_string()
}

/// What a pass did with a checkpoint (or, dry run, would have done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// A dead owner's protecting checkpoint: decided by the GC, its data and records removed.
    Collect,
    /// A failed (`error`) checkpoint past `gc.keep_failed_for`: its data and records removed.
    Retire,
    /// A move its owner decided but did not finish, finished; or a stray marker removed.
    Repair,
    /// Left alone: its owner alive or in grace, its lease unreadable, the brake, a limit, or
    /// what its owner declared needs longer.
    Skip,
}

impl Action {
    /// Every action, in the order reports list them.
    pub const ALL: [Action; 4] = [
        Action::Collect,
        Action::Retire,
        Action::Repair,
        Action::Skip,
    ];

    /// The action in words, as done (`collected`) or, in a dry run, as it would be.
    pub fn verb(self, dry_run: bool) -> &'static str {
        match (self, dry_run) {
            (Action::Collect, false) => "collected",
            (Action::Collect, true) => "would collect",
            (Action::Retire, false) => "retired",
            (Action::Retire, true) => "would retire",
            (Action::Repair, false) => "repaired",
            (Action::Repair, true) => "would repair",
            (Action::Skip, _) => "skipped",
        }
    }
}

/// One checkpoint a pass named, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedCheckpoint {
    /// The checkpoint.
    pub checkpoint_id: CheckpointId,
    /// Its owner (the marker's, for a protecting checkpoint).
    pub owner_id: OwnerId,
    /// What the pass did with it.
    pub action: Action,
    /// Why, in words: ``its owner's lease expired 12s ago (grace 1m 40s)``.
    pub reason: String,
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
