//! `FailingStore<T>`: an [`ObjectStore`] wrapper that injects faults, for tests.
//!
//! Faults are scripted per operation kind: added latency (on a [`MockClock`], so a "slow request"
//! is deterministic), errors *before* the inner call, errors *after* the inner call succeeded
//! (the write landed, the caller saw a failure), and partitions (every call fails until healed).
//!
//! For simulations, faults can also be drawn at random from a seeded generator, so that a run is
//! reproducible from its seed:
//!
//! - **error rates** per operation and [`Strike`] ([`FailingStore::set_error_rate`]);
//! - **timeouts**: a call whose latency reaches the timeout, or that stalls
//!   ([`FailingStore::set_timeout`]), fails once the timeout has passed on the mock clock, and
//!   its inner call may or may not have been made (a seeded coin) — the caller cannot tell;
//! - **random latency**, split before and after the inner call ([`FailingStore::set_latency_jitter`]);
//! - **late answers** ([`FailingStore::set_late_answers`]): the store serves the request at `t`
//!   and the caller receives the answer at `t + D` — a stalled reader (a paused process, a frozen
//!   VM, a slow network path back). Unlike latency, a late answer never becomes a timeout: the
//!   caller is not waiting, it is stopped;
//! - **ambiguous creates** ([`FailingStore::set_create_error_after`]): a create-if-absent put
//!   lands and is answered with an error, so that the caller's retry finds its own object
//!   (AlreadyExists) and must read it back;
//! - **eventually consistent listings** ([`FailingStore::set_listing_lag`]): an object written less
//!   than the lag ago (mock clock) is left out of listings, and a deleted one is still listed for
//!   the lag after its deletion.
//!
//! Latency either *advances* a mock clock ([`FailingStore::with_clock`], for single-task tests)
//! or *sleeps* on a clock ([`FailingStore::with_sleeping_clock`], for simulations in which a
//! driver owns time and many tasks share the store). Every injected fault is counted by kind
//! ([`FailingStore::faults`]). Every method is forwarded.
//!
//! The wrapper and its forwarding are in `store`, the fault script and the fate of each call in
//! `faults`, the eventually consistent listings in `listing`.
//!
//! [`ObjectStore`]: object_store::ObjectStore
//! [`MockClock`]: banklease::clock::MockClock

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::ObjectMeta;

mod faults;
mod listing;
mod store;
#[cfg(test)]
mod tests;

pub use store::FailingStore;

/// The kinds of request a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put_opts` (every put mode).
    Put,
    /// `get_opts` without `head`.
    Get,
    /// `get_opts` with `head` set.
    Head,
    /// Each path of `delete_stream`.
    Delete,
    /// `list`, `list_with_offset`, `list_with_delimiter`.
    List,
    /// `copy_opts`, `rename_opts`.
    Copy,
}

impl Op {
    /// Every kind, in a fixed order.
    pub const ALL: [Op; 6] = [Op::Put, Op::Get, Op::Head, Op::Delete, Op::List, Op::Copy];
}

/// When an injected error strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// Fail without calling the inner store.
    Before,
    /// Call the inner store; if it succeeded, report a failure anyway.
    After,
}

/// Faults injected so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Errors before the inner call (scripted or drawn), not counting partitions.
    pub errors_before: u64,
    /// Errors reported although the inner call succeeded.
    pub errors_after: u64,
    /// Calls that failed while partitioned.
    pub partitioned: u64,
    /// Timeouts whose inner call was made (the write may have landed).
    pub timeouts_landed: u64,
    /// Timeouts whose inner call was never made.
    pub timeouts_lost: u64,
    /// Listing entries left out because they were written too recently.
    pub listing_hidden: u64,
    /// Listing entries shown although they had been deleted.
    pub listing_ghosts: u64,
    /// Answers held back after the inner call (served at `t`, delivered at `t + D`).
    pub late_answers: u64,
    /// Create-if-absent puts that landed and were answered with an error.
    pub creates_ambiguous: u64,
}

impl FaultCounts {
    /// All injected faults.
    pub fn total(&self) -> u64 {
        self.errors_before
            + self.errors_after
            + self.partitioned
            + self.timeouts_landed
            + self.timeouts_lost
            + self.listing_hidden
            + self.listing_ghosts
            + self.late_answers
            + self.creates_ambiguous
    }

    /// Add `other` to these counts.
    pub fn add(&mut self, other: &FaultCounts) {
        self.errors_before += other.errors_before;
        self.errors_after += other.errors_after;
        self.partitioned += other.partitioned;
        self.timeouts_landed += other.timeouts_landed;
        self.timeouts_lost += other.timeouts_lost;
        self.listing_hidden += other.listing_hidden;
        self.listing_ghosts += other.listing_ghosts;
        self.late_answers += other.late_answers;
        self.creates_ambiguous += other.creates_ambiguous;
    }
}

/// What the listing-lag model knows about paths (instants on the store's clock).
#[derive(Debug, Default)]
pub(crate) struct Consistency {
    pub(crate) lag: Duration,
    /// Paths known to exist (written through this wrapper, or found by a read before a write).
    pub(crate) present: HashSet<Path>,
    /// New paths written through this wrapper: listed from this instant on.
    pub(crate) visible_from: HashMap<Path, Instant>,
    /// Paths deleted through this wrapper: listed as they were until this instant.
    pub(crate) ghosts: BTreeMap<Path, (ObjectMeta, Instant)>,
}
