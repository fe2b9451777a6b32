//! `LeaseWindows`, `OwnerLease`, `LeaseStatus` and `Keeper`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use banklease::clock::{Jitter, SharedClock, SystemClock};
use banklease::{LeaseState, OwnerId};
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::bank::Bank;
use crate::errors::{config_error, to_py};
use crate::runtime::{awaitable, block_on, opt_duration};

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

/// A lease's state as its owner knows it: `name` is `"held"`, `"lost"` or `"released"`
/// (the last two are final); `remaining` is the validity left in seconds (0 unless held);
/// `reason` says why a lease was lost.
#[pyclass(module = "banklease", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct LeaseStatus {
    name: &'static str,
    remaining: f64,
    reason: Option<String>,
}

impl LeaseStatus {
    fn of(state: &LeaseState, now: Instant) -> Self {
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

    fn __repr__(&self) -> String {
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
/// owner id.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct OwnerLease {
    pub(crate) inner: banklease::OwnerLease,
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
        Some(id) => OwnerId::parse(&id).map_err(to_py)?,
        None => OwnerId::for_this_process(clock.system_now()),
    };
    banklease::layout::check(&bank).await.map_err(to_py)?;
    let inner = banklease::OwnerLease::acquire(&bank, owner, windows, clock)
        .await
        .map_err(to_py)?;
    Ok(OwnerLease { inner })
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
    fn check_validity(&self) -> bool {
        self.inner.check_validity()
    }

    /// `check_validity()` as an exception that says why not: `NotValid` (too little time
    /// left: wait for the keeper) or `LeaseLost` (final).
    fn ensure_valid(&self) -> PyResult<()> {
        self.inner.ensure_valid().map_err(to_py)
    }

    /// Seconds of lease time left (0 once lost or released). Zero requests.
    fn remaining(&self) -> f64 {
        self.inner.remaining().as_secs_f64()
    }

    /// The lease's state (`LeaseStatus`).
    #[getter]
    fn state(&self) -> LeaseStatus {
        LeaseStatus::of(&self.inner.state(), self.inner.clock().now())
    }

    /// Renew once, now; returns the seconds of validity then left. A failed renewal raises
    /// (`StoreError`, or `LeaseLost` when the lease is gone); it is never swallowed.
    fn renew(&self, py: Python<'_>) -> PyResult<f64> {
        let lease = self.inner.clone();
        block_on(py, renew(lease))
    }

    /// `renew`, awaitable.
    fn renew_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, renew(self.inner.clone()))
    }

    /// Release the lease (delete its object). From the call on, `check_validity()` is False
    /// for good, even if the delete fails (the object then expires on the store's clock).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let lease = self.inner.clone();
        block_on(py, async move { lease.release().await.map_err(to_py) })
    }

    /// `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.inner.clone();
        awaitable(py, async move { lease.release().await.map_err(to_py) })
    }

    /// Start the background keeper: it renews every `renew_window` (shortened by a random
    /// fraction of up to `jitter`) on the module's runtime, whatever Python is doing.
    /// `on_lost(error)` is called once, from a background thread, with the `LeaseLost`
    /// exception if the lease is lost.
    #[pyo3(signature = (on_lost=None, jitter=0.1))]
    fn keep(&self, on_lost: Option<Py<PyAny>>, jitter: f64) -> PyResult<Keeper> {
        if !(0.0..=0.5).contains(&jitter) {
            return Err(config_error(format!(
                "jitter=`{jitter}` is out of range; give a fraction of renew_window between 0 and 0.5"
            )));
        }
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        let _entered = runtime.enter();
        let keeper = self.inner.spawn_keeper(Jitter::from_entropy(), jitter);
        let stopped = CancellationToken::new();
        if let Some(callback) = on_lost {
            let lease = self.inner.clone();
            let stopped = stopped.clone();
            runtime.spawn(async move {
                if let Some(reason) = wait_lost(&lease, &stopped).await {
                    let err = to_py(lost(&lease, reason));
                    // A callback may call blocking banklease methods: not on a runtime worker.
                    let _ = tokio::task::spawn_blocking(move || {
                        Python::attach(|py| {
                            let value = err.value(py).clone();
                            if let Err(e) = callback.call1(py, (value,)) {
                                e.write_unraisable(py, Some(callback.bind(py)));
                            }
                        })
                    })
                    .await;
                }
            });
        }
        Ok(Keeper {
            lease: self.inner.clone(),
            keeper: Mutex::new(Some(keeper)),
            stopped,
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block releases the lease.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        awaitable(py, async move { Ok(me) })
    }

    /// Leaving an `async with` block releases the lease.
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.inner.clone();
        awaitable(py, async move {
            lease.release().await.map_err(to_py)?;
            Ok(false)
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

fn lost(lease: &banklease::OwnerLease, reason: String) -> banklease::Error {
    banklease::Error::LeaseLost {
        owner_id: lease.owner_id().to_string(),
        reason,
    }
}

/// Wait until the lease is lost (its reason), released, or the keeper stopped (None).
///
/// A held lease whose validity runs out with no renewal is lost: `state()` says so once it is
/// asked, so the wait also wakes when the current validity ends.
async fn wait_lost(lease: &banklease::OwnerLease, stopped: &CancellationToken) -> Option<String> {
    let mut rx = lease.subscribe();
    let clock = lease.clock().clone();
    loop {
        let until = match lease.state() {
            LeaseState::Lost { reason } => return Some(reason),
            LeaseState::Released => return None,
            LeaseState::Held { valid_until } => valid_until,
        };
        let left = until.saturating_duration_since(clock.now());
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return None },
            () = clock.sleep(left + Duration::from_millis(1)) => {}
            () = stopped.cancelled() => return None,
        }
    }
}

/// A running keeper (`OwnerLease.keep()`). Use it as a context manager (`with`, `async with`)
/// to release the lease on the way out.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug)]
pub(crate) struct Keeper {
    lease: banklease::OwnerLease,
    keeper: Mutex<Option<banklease::Keeper>>,
    stopped: CancellationToken,
}

impl Keeper {
    fn take(&self) -> Option<banklease::Keeper> {
        let taken = self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.stopped.cancel();
        taken
    }
}

async fn stop(keeper: Option<banklease::Keeper>) {
    if let Some(keeper) = keeper {
        keeper.stop().await;
    }
}

async fn release(keeper: Option<banklease::Keeper>, lease: banklease::OwnerLease) -> PyResult<()> {
    stop(keeper).await;
    lease.release().await.map_err(to_py)
}

#[pymethods]
impl Keeper {
    /// The lease this keeper renews.
    #[getter]
    fn lease(&self) -> OwnerLease {
        OwnerLease {
            inner: self.lease.clone(),
        }
    }

    /// The lease's state now (`LeaseStatus`).
    #[getter]
    fn state(&self) -> LeaseStatus {
        LeaseStatus::of(&self.lease.state(), self.lease.clock().now())
    }

    /// Block until the lease is lost, then return the `LeaseLost` exception (not raised).
    /// Returns None when the lease is released, the keeper is stopped, or `timeout` seconds
    /// pass first.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let timeout = opt_duration("timeout", timeout)?;
        let lease = self.lease.clone();
        let stopped = self.stopped.clone();
        let reason = block_on(py, async move {
            let wait = wait_lost(&lease, &stopped);
            Ok(match timeout {
                Some(t) => tokio::select! {
                    r = wait => r,
                    () = lease.clock().sleep(t) => None,
                },
                None => wait.await,
            })
        })?;
        Ok(match reason {
            Some(reason) => to_py(lost(&self.lease, reason))
                .value(py)
                .clone()
                .into_any()
                .unbind(),
            None => py.None(),
        })
    }

    /// Awaitable: the `LeaseLost` exception once the lease is lost (not raised), or None when
    /// it is released or the keeper stopped. Wrap in `asyncio.wait_for` for a timeout.
    fn wait_lost_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.lease.clone();
        let stopped = self.stopped.clone();
        awaitable(py, async move {
            let reason = wait_lost(&lease, &stopped).await;
            Python::attach(|py| -> PyResult<Py<PyAny>> {
                Ok(match reason {
                    Some(reason) => to_py(lost(&lease, reason))
                        .value(py)
                        .clone()
                        .into_any()
                        .unbind(),
                    None => py.None(),
                })
            })
        })
    }

    /// Stop renewing (waits for a renewal in flight). The lease object stays and runs out on
    /// its own; prefer `release()` on orderly shutdown.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let keeper = self.take();
        block_on(py, async move {
            stop(keeper).await;
            Ok(())
        })
    }

    /// `stop`, awaitable.
    fn stop_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let keeper = self.take();
        awaitable(py, async move {
            stop(keeper).await;
            Ok(())
        })
    }

    /// Stop renewing and release the lease.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let keeper = self.take();
        block_on(py, release(keeper, self.lease.clone()))
    }

    /// `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let keeper = self.take();
        awaitable(py, release(keeper, self.lease.clone()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block stops the keeper and releases the lease.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        awaitable(py, async move { Ok(me) })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let keeper = self.take();
        let lease = self.lease.clone();
        awaitable(py, async move {
            release(keeper, lease).await?;
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<Keeper owner_id={} {}>",
            self.lease.owner_id(),
            self.state().__repr__()
        )
    }
}
