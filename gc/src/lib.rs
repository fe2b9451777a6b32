//! # banklease-gc
//!
//! Collects checkpoints left `protecting` by owners whose lease is gone, and never one whose
//! owner is alive.
//!
//! A pass is split in two: [`plan`] is pure (it takes `now` and what was read, and decides),
//! [`pass`] does the I/O around it. The daemon ([`daemon`]) runs passes on an interval while it
//! holds the bank's single GC lease.

pub mod batch;
pub mod daemon;
pub mod logging;
pub mod metrics;
pub mod pass;
pub mod plan;
pub mod sweep;
pub mod timing;

pub use daemon::Daemon;
pub use metrics::Metrics;
pub use pass::{Collector, PassReport};
pub use plan::GcOptions;
