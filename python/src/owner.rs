//! The Python `OwnerLease` and `LeaseStatus` types and what both the lease and its keeper ask
//! of them (kept apart from their methods so that lease.rs and keeper.rs do not import each
//! other).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use banklease::LeaseState;
use pyo3::prelude::*;

use crate::errors::to_py;

/// A lease's state as its owner knows it: `name` is `"held"`, `"lost"` or `"released"`
/// (both final: a lost lease stays lost, even once released); `remaining` is the validity left in seconds (0 unless held);
/// `reason` says why a lease was lost.
#[pyclass(module = "banklease", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct LeaseStatus {
    name: &'static str,
    remaining: f64,
    reason: Option<String>,
}

impl LeaseStatus {
    pub(crate) fn of(state: &LeaseState, now: Instant) -> Self {
        match state {
            LeaseState::Held { valid_until } => Self {
                name: "held",
                remaining: valid_until.saturating_duration_since(now).as_secs_f64(),
                reason: None,
            },
            LeaseState::Lost { reason } => Self {
                name: "lost",
                remaining: 0.0,
                reason: Some(reason.clone()),
            },
            LeaseState::Released => Self {
                name: "released",
                remaining: 0.0,
                reason: None,
            },
        }
    }
}

#[pymethods]
impl LeaseStatus {
    /// True while the lease is held (it may still have too little validity left for an update;
    /// ask `OwnerLease.check_validity()` before each one).
    #[getter]
    fn held(&self) -> bool {
        self.name == "held"
    }

    pub(crate) fn __repr__(&self) -> String {
        match &self.reason {
            Some(reason) => format!("LeaseStatus(name='lost', reason={reason:?})"),
            None => format!(
                "LeaseStatus(name='{}', remaining={:.3})",
                self.name, self.remaining
            ),
        }
    }
}

/// An owner lease: one lease object per service instance in the bank.
///
/// Acquire it once per process (`OwnerLease.acquire`), keep it renewed (`keep()`), ask
/// `check_validity()` before every update of a checkpoint, and `release()` on orderly
/// shutdown. A lost lease (`LeaseLost`) is final: stop writing and start again under a new
/// owner id. Thread-safe: one lease may be used from many threads and tasks.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct OwnerLease {
    pub(crate) inner: banklease::OwnerLease,
    /// Whether a keeper runs for this lease (shared by every wrapper of it).
    pub(crate) kept: Arc<AtomicBool>,
}

impl OwnerLease {
    pub(crate) fn wrap(inner: banklease::OwnerLease) -> Self {
        Self {
            inner,
            kept: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// Release `lease`, unless it is lost: a lost lease has no object of ours to delete, and
/// releasing it would turn its state into Released and hide the loss. Lost stays final.
pub(crate) async fn release_unless_lost(lease: &banklease::OwnerLease) -> PyResult<()> {
    if matches!(lease.state(), LeaseState::Lost { .. }) {
        return Ok(());
    }
    lease.release().await.map_err(to_py)
}

/// At the end of a `with` block: the `LeaseLost` exception of a lost lease, unless another
/// exception is on its way (`quiet`) — the loss must not pass unnoticed. `Ok(false)`: the
/// block's own exception, if any, goes on.
pub(crate) fn raise_if_lost(lease: &banklease::OwnerLease, quiet: bool) -> PyResult<bool> {
    match lease.state() {
        LeaseState::Lost { reason } if !quiet => Err(to_py(lost(lease, reason))),
        _ => Ok(false),
    }
}

pub(crate) fn lost(lease: &banklease::OwnerLease, reason: String) -> banklease::Error {
    banklease::Error::LeaseLost {
        owner_id: lease.owner_id().clone(),
        reason,
    }
}
