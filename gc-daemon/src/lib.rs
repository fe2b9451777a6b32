//! # banklease-gc-daemon
//!
//! The GC daemon (binary `banklease-gc`): one active collector per bank, any number on standby,
//! each pass run by the `banklease-gc` library. What only a daemon needs lives here: the standby
//! and interval loop ([`daemon`]), the Prometheus metrics and their HTTP endpoint ([`metrics`]),
//! the command line ([`args`], [`command`]) and its logging ([`logging`]).

pub mod args;
pub mod command;
pub mod daemon;
pub mod logging;
pub mod metrics;

pub use daemon::{run, run_once, Daemon};
pub use metrics::Metrics;
