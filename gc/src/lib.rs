//! # banklease-gc
//!
//! Collects checkpoints left `protecting` by owners whose lease is gone, and never one whose
//! owner is alive. This crate is the collector as a library: what the `banklease` CLI, the
//! Python package and the daemon (crate `banklease-gc-daemon`, binary `banklease-gc`) share. It
//! has no HTTP server, command line or log subscriber of its own.
//!
//! - [`pass`]: one pass. [`pass::plan`] is pure (it takes `now` and what was read, and decides);
//!   the rest of [`pass`] does the I/O around it as tasks that each take the pass's context:
//!   finding zombies, the late sweep, collecting, the GC's records, reaping and the `file:`
//!   temporaries sweep.
//! - [`time`]: how a pass reads and trusts the store's clock: the skew-margin check, step
//!   detection, the persisted floor and the per-host record.
//! - [`run`]: how a pass is run: the checks before the first one, the bank's single GC lease
//!   (`gc/active`) and a single pass under it ([`OnePass`]).
//! - [`operator`]: what an operator decides by hand (`checkpoint resolve`).

pub mod error;
pub mod operator;
pub mod pass;
pub mod run;
pub mod time;

pub use error::{Error, Result};
pub use pass::options::{GcOptions, GcOptionsBuilder};
pub use pass::report::{Action, NamedCheckpoint, PassReport, Problem, StagedUpload, MAX_PROBLEMS};
pub use pass::Collector;
pub use run::{ActiveElsewhere, OnePass, PassLease, Single};
