//! # banklease-testkit
//!
//! Test support for banklease and the crates built on it, kept out of the product:
//!
//! - [`failing`]: `FailingStore<T>`, a wrapper that injects faults into any store — errors
//!   before the inner call or *after* it succeeded (the write landed, the caller saw an error),
//!   latency and timeouts on a mock clock, late answers, partitions, lagging listings;
//! - [`sim_store`]: `SimStore`, an in-memory store that stamps `last_modified` with its own
//!   clock (skewed, jumping), with switches for weaker stores (no If-Match, stale reads);
//! - [`backends`]: the backends a suite runs on (memory, file, and the servers CI configures),
//!   a fresh bank on each, and `each_backend`, which runs a suite on all of them.
//!
//! All of it uses only banklease's public API.

pub mod backends;
pub mod failing;
pub mod sim_store;
