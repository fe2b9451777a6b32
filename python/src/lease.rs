//! `OwnerLease` (its type and methods; `keep()` is beside the `Keeper` it starts, in keeper.rs),
//! `LeaseStatus` and `LeaseWindows`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use banklease::clock::{SharedClock, SystemClock};
use banklease::{LeaseState, OwnerId};
use pyo3::prelude::*;

use crate::bank::Bank;
use crate::errors::to_py;
use crate::runtime::{awaitable, awaitable_whole, block_on, block_on_whole, opt_duration};

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

/// The three windows of an owner lease, in seconds.
///
/// - `renew_window`: how often the keeper renews;
/// - `expire_window`: how long after the *send time* of its last successful write the lease
///   still counts as held (observers judge this on the store's clock);
/// - `validity_window`: how much lease time must be left to start an update.
///
/// Rules: `validity_window <= renew_window < expire_window` (raises `ConfigError`). Each may
/// be given as seconds or a `datetime.timedelta`; missing ones take the
/// defaults of `[lease]` (120 s, 600 s, 100 s).
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseWindows {
    pub(crate) inner: banklease::LeaseWindows,
}

#[pymethods]
impl LeaseWindows {
    #[new]
    #[pyo3(signature = (renew_window=None, expire_window=None, validity_window=None))]
    fn new(
        renew_window: Option<&Bound<'_, PyAny>>,
        expire_window: Option<&Bound<'_, PyAny>>,
        validity_window: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let d = banklease::LeaseWindows::default();
        let inner = banklease::LeaseWindows::new(
            opt_duration("renew_window", renew_window)?.unwrap_or(d.renew_window),
            opt_duration("expire_window", expire_window)?.unwrap_or(d.expire_window),
            opt_duration("validity_window", validity_window)?.unwrap_or(d.validity_window),
        )
        .map_err(to_py)?;
        Ok(Self { inner })
    }

    /// Seconds between renewals.
    #[getter]
    fn renew_window(&self) -> f64 {
        self.inner.renew_window.as_secs_f64()
    }

    /// Seconds after the send time of the last successful write until the lease expires.
    #[getter]
    fn expire_window(&self) -> f64 {
        self.inner.expire_window.as_secs_f64()
    }

    /// Seconds of lease time that must be left to start an update.
    #[getter]
    fn validity_window(&self) -> f64 {
        self.inner.validity_window.as_secs_f64()
    }

    /// What these windows get wrong without being invalid (e.g. one failed renewal loses the
    /// lease).
    #[getter]
    fn warnings(&self) -> PyResult<Vec<String>> {
        self.inner.validate().map_err(to_py)
    }

    fn __repr__(&self) -> String {
        format!(
            "LeaseWindows(renew_window={}, expire_window={}, validity_window={})",
            self.renew_window(),
            self.expire_window(),
            self.validity_window()
        )
    }
}

fn clock() -> SharedClock {
    Arc::new(SystemClock)
}

async fn acquire(
    bank: banklease::Bank,
    owner: Option<String>,
    windows: banklease::LeaseWindows,
) -> PyResult<OwnerLease> {
    let clock = clock();
    let owner = match owner {
        Some(id) => OwnerId::parse(&id).map_err(|e| to_py(e.into()))?,
        None => OwnerId::for_this_process(clock.system_now()),
    };
    banklease::layout::check(&bank).await.map_err(to_py)?;
    let inner = banklease::OwnerLease::acquire(&bank, owner, windows, clock)
        .await
        .map_err(to_py)?;
    Ok(OwnerLease::wrap(inner))
}

fn acquire_args(
    bank: &Bound<'_, Bank>,
    windows: Option<&Bound<'_, LeaseWindows>>,
) -> (banklease::Bank, banklease::LeaseWindows) {
    (
        bank.get().inner.clone(),
        windows.map(|w| w.get().inner).unwrap_or_default(),
    )
}

#[pymethods]
impl OwnerLease {
    /// Acquire a new owner lease in `bank` (create-if-absent; `LeaseExists` if the id is
    /// taken). `owner_id` defaults to a hash of host name, pid and the time of the call; ids
    /// must be unique per process — never reuse a crashed process's id.
    #[staticmethod]
    #[pyo3(signature = (bank, windows=None, owner_id=None))]
    fn acquire(
        py: Python<'_>,
        bank: &Bound<'_, Bank>,
        windows: Option<&Bound<'_, LeaseWindows>>,
        owner_id: Option<String>,
    ) -> PyResult<Self> {
        let (bank, windows) = acquire_args(bank, windows);
        block_on(py, acquire(bank, owner_id, windows))
    }

    /// `acquire`, awaitable.
    #[staticmethod]
    #[pyo3(signature = (bank, windows=None, owner_id=None))]
    fn acquire_async<'py>(
        py: Python<'py>,
        bank: &Bound<'_, Bank>,
        windows: Option<&Bound<'_, LeaseWindows>>,
        owner_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (bank, windows) = acquire_args(bank, windows);
        awaitable(py, acquire(bank, owner_id, windows))
    }

    /// This owner's id (the lease object is `leases/<owner_id>` in the bank).
    #[getter]
    fn owner_id(&self) -> String {
        self.inner.owner_id().to_string()
    }

    /// The bank the lease lives in.
    #[getter]
    fn bank(&self) -> Bank {
        Bank {
            inner: self.inner.bank().clone(),
        }
    }

    /// The lease's windows.
    #[getter]
    fn windows(&self) -> LeaseWindows {
        LeaseWindows {
            inner: self.inner.windows(),
        }
    }

    /// May an update start now? At least `validity_window` of lease time is left. Zero
    /// requests: answered from memory, on a clock that counts time the host spent suspended.
    /// False in a process forked from the one that holds the lease: the lease is the parent's.
    fn check_validity(&self) -> bool {
        !crate::runtime::forked() && self.inner.check_validity()
    }

    /// `check_validity()` as an exception that says why not: `NotValid` (too little time
    /// left: wait for the keeper) or `LeaseLost` (final).
    fn ensure_valid(&self) -> PyResult<()> {
        crate::runtime::runtime()?;
        self.inner.ensure_valid().map_err(to_py)
    }

    /// Seconds of lease time left (0 once lost or released). Zero requests.
    fn remaining(&self) -> f64 {
        if crate::runtime::forked() {
            return 0.0;
        }
        self.inner.remaining().as_secs_f64()
    }

    /// The lease's state (`LeaseStatus`).
    #[getter]
    fn state(&self) -> LeaseStatus {
        LeaseStatus::of(&self.inner.state(), self.inner.clock().now())
    }

    /// Renew once, now; returns the seconds of validity then left. A failed renewal raises
    /// (`StoreError`, or `LeaseLost` when the lease is gone); it is never swallowed. Not cut
    /// short by Ctrl-C (its answer would be lost): it ends within the store's timeouts.
    fn renew(&self, py: Python<'_>) -> PyResult<f64> {
        block_on_whole(py, renew(self.inner.clone()))
    }

    /// `renew`, awaitable. Cancelling the awaiting task ends the await at once but not the
    /// renewal (its answer would be lost): it runs to its end and counts, and the next renewal
    /// or release waits for it.
    fn renew_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable_whole(py, renew(self.inner.clone()))
    }

    /// Release the lease (delete its object). From the call on, `check_validity()` is False
    /// for good, even if the delete fails (the object then expires on the store's clock). A
    /// running keeper stops once it sees the release. A lost lease is left as it is (lost).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let lease = self.inner.clone();
        block_on(py, async move { release_unless_lost(&lease).await })
    }

    /// `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.inner.clone();
        awaitable(py, async move { release_unless_lost(&lease).await })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block releases the lease; a lease lost inside the block raises
    /// `LeaseLost` here (unless another exception is on its way).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.release(py)?;
        raise_if_lost(&self.inner, !exc_type.is_none())
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        awaitable(py, async move { Ok(me) })
    }

    /// Leaving an `async with` block releases the lease (see `__exit__`).
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.inner.clone();
        let quiet = !exc_type.is_none();
        awaitable(py, async move {
            release_unless_lost(&lease).await?;
            raise_if_lost(&lease, quiet)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<OwnerLease owner_id={} bank={:?} {}>",
            self.inner.owner_id(),
            self.inner.bank().label(),
            self.state().__repr__()
        )
    }
}

async fn renew(lease: banklease::OwnerLease) -> PyResult<f64> {
    let valid_until = lease.renew().await.map_err(to_py)?;
    Ok(valid_until
        .saturating_duration_since(lease.clock().now())
        .as_secs_f64())
}
