//! # banklease-testkit
//!
//! Test support for banklease and the crates built on it, kept out of the product:
//!
//! - [`failing`]: `FailingStore<T>`, a wrapper that injects faults into any store — errors
//!   before the inner call or *after* it succeeded (the write landed, the caller saw an error),
//!   latency and timeouts on a mock clock, late answers, partitions, lagging listings;
//! - [`sim_store`]: `SimStore`, an in-memory store that stamps `last_modified` with its own
//!   clock (skewed, jumping), with switches for weaker stores (no If-Match, stale reads);
//! - [`gate`]: `GateStore<T>`, a wrapper that holds one chosen answer back after the store
//!   served it (a late answer), splits a create-if-absent as Swift does, or holds listings;
//! - [`port`]: `Port<S, H>`, one participant's connection to a store, paused, cut off or killed
//!   through its hooks (the GC simulation's owners and collectors);
//! - [`recording`]: `RecordingStore<T>`, a wrapper that logs every request, for the GC
//!   benchmark's replay of a pass's own requests (the store's floor);
//! - [`rgw`]: `RgwEtags<T>`, a store that compares `If-Match` with unquoted ETags (Ceph RGW);
//! - [`swift_proxy`]: a test's own `swift-proxy-server` in front of the local Swift, to kill,
//!   restart, pause and resume;
//! - [`backends`]: the backends a suite runs on (memory, file, and the servers CI configures),
//!   a fresh bank on each, and `each_backend`, which runs a suite on all of them.
//!
//! All of it uses only banklease's public API.

pub mod backends;
pub mod failing;
pub mod gate;
pub mod keystone;
pub mod port;
pub mod recording;
pub mod rgw;
pub mod sim_store;
pub mod stall;
pub mod swift_proxy;

use banklease::Bank;

/// A checkpoint id from a literal a test knows is valid.
pub fn cid(id: &str) -> banklease::CheckpointId {
    banklease::CheckpointId::parse(id).unwrap_or_else(|e| panic!("checkpoint id {id:?}: {e}"))
}

/// `bank`, made a bank (`banklease init`: its descriptor written), as every owner, command and
/// collector requires. For the in-process stores of this crate and `memory://`, which answer
/// without a runtime; a server's bank is made by [`backends::Backend::open`].
pub fn made(bank: Bank) -> Bank {
    futures::executor::block_on(banklease::layout::init(&bank))
        .unwrap_or_else(|e| panic!("init {}: {e}", bank.label()));
    bank
}

/// Make a `file:` bank in `dir` (created if missing), as `banklease --bank URL init` does, and
/// return its URL. For tests outside a runtime (it runs its own).
pub fn file_bank(dir: &std::path::Path) -> String {
    let url = format!("file://{}", dir.display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let bank = Bank::open_or_create(&url).unwrap_or_else(|e| panic!("open {url}: {e}"));
        banklease::layout::init(&bank)
            .await
            .unwrap_or_else(|e| panic!("init {url}: {e}"));
    });
    url
}
