//! # banklease-testkit
//!
//! Test support for banklease and the crates built on it, kept out of the product:
//!
//! - [`failing`]: `FailingStore<T>`, a wrapper that injects faults into any store — errors
//!   before the inner call or *after* it succeeded (the write landed, the caller saw an error),
//!   latency and timeouts on a mock clock, late answers, partitions, lagging listings;
//! - [`sim_store`]: `SimStore`, an in-memory store that stamps `last_modified` with its own
//!   clock (skewed, jumping), with switches for weaker stores (no If-Match, stale reads).
//!
//! Both use only banklease's public API (its [`clock`](banklease::clock)).

pub mod failing;
pub mod sim_store;
