//! # banklease-gc
//!
//! Collects checkpoints left `protecting` by owners whose lease is gone, and never one whose
//! owner is alive.
//!
//! A pass is split in two: [`plan`] is pure (it takes `now` and what was read, and decides),
//! [`pass`] does the I/O around it as a sequence of tasks that each take the pass's context
//! (the bank, the store-clock reading, the options): finding zombies, the late sweep,
//! collecting, the GC's records, reaping and the `file:` temporaries sweep. The daemon
//! ([`daemon`]) runs passes on an interval while it holds the bank's single GC lease.

pub mod args;
pub mod batch;
mod collect;
mod context;
pub mod daemon;
pub mod declared;
mod delete;
pub mod error;
mod host_clock;
pub mod logging;
pub mod metrics;
pub mod options;
pub mod pass;
pub mod plan;
mod probe;
mod reap;
pub mod reaped;
mod records;
pub mod report;
pub mod resolve;
pub mod sweep;
mod temporaries;
pub mod timing;
mod zombies;

pub use daemon::{ActiveElsewhere, Daemon, PassLease, Single};
pub use error::{Error, Result};
pub use metrics::Metrics;
pub use options::{GcOptions, GcOptionsBuilder};
pub use pass::{Collector, PassReport, StagedUpload};
pub use report::{Problem, MAX_PROBLEMS};
