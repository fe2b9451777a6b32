//! `SimStore`: an in-memory [`ObjectStore`] on a simulated *store clock*, for deterministic
//! simulations.
//!
//! `object_store`'s `InMemory` stamps `last_modified` with the real `Utc::now()`, so a test that
//! drives time with a [`MockClock`] cannot make a lease look old to an observer. `SimStore` stamps
//! every write with its [`StoreClock`] instead: a wall clock that follows a simulated clock (a
//! [`MockClock`] or any [`Clock`] a driver moves), can be skewed by any offset relative to the
//! owners' clocks, and can jump forward (as a store's NTP correction would), which is what the
//! skew margin of [`banklease::observe::judge`] must absorb.
//!
//! Like `InMemory`, it keeps a `BTreeMap` under a mutex, so create-if-absent and If-Match (the
//! ETag is a counter) are atomic, and listings are sorted by path. Two switches model weaker
//! stores: [`SimStore::refuse_conditional_update`] (like Swift's native backend: If-Match is not
//! implemented, so owners renew by verify-then-overwrite), and [`SimStore::set_stale_reads`]
//! (like a replicated store whose reads may come from a replica that lags by up to a bound:
//! a GET or HEAD may answer with the version that was current at some instant within that
//! bound before the read was served; writes and their conditions always see the latest
//! version). An [`Observer`] sees each mutation at the instant it takes effect, for checkers
//! that must judge "who was alive when this happened".
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! use banklease::clock::MockClock;
//! use banklease_testkit::sim_store::{SimStore, StoreClock};
//! use object_store::{path::Path, ObjectStoreExt};
//!
//! let world = MockClock::new();
//! let clock = StoreClock::new(world.clone()).with_skew(chrono::TimeDelta::hours(-3));
//! let store = SimStore::new(clock.clone());
//! let p = Path::from("lease");
//! store.put(&p, "x".into()).await.unwrap();
//! let written = store.head(&p).await.unwrap().last_modified;
//! assert_eq!(written, clock.now());
//!
//! world.advance(Duration::from_secs(10));
//! clock.jump_forward(Duration::from_millis(500));
//! assert_eq!((clock.now() - written).num_milliseconds(), 10_500);
//! // The object itself is unchanged: only time moved.
//! assert_eq!(store.head(&p).await.unwrap().last_modified, written);
//! # }
//! ```
//!
//! The store and its forwarding are in `store`, its clock in `clock`, the objects and their
//! version history (for stale reads) in `state`, what an [`Observer`] sees in `observer`.
//!
//! [`ObjectStore`]: object_store::ObjectStore
//! [`MockClock`]: banklease::clock::MockClock
//! [`Clock`]: banklease::clock::Clock

mod clock;
mod observer;
mod state;
mod store;
#[cfg(test)]
mod tests;

pub use clock::StoreClock;
pub use observer::{Mutation, MutationKind, Observer, StoreView};
pub use store::SimStore;
