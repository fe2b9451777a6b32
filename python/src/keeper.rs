//! `Keeper`: the background renewal of an owner lease, observable from Python, and
//! `OwnerLease.keep()`, which starts it (a second `#[pymethods]` block, so that lease.rs needs
//! nothing of this module).

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use banklease::clock::Jitter;
use banklease::LeaseState;
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::errors::config_error;
use crate::errors::to_py;
use crate::lease::{lost, raise_if_lost, release_unless_lost, LeaseStatus, OwnerLease};
use crate::runtime::{awaitable, block_on, opt_duration, runtime};

#[pymethods]
impl OwnerLease {
    /// Start the background keeper: it renews every `renew_window` (shortened by a random
    /// fraction of up to `jitter`, 0 to 0.5) on the package's runtime, whatever Python is
    /// doing, until the keeper or the lease is stopped or released, or the lease is lost —
    /// dropping the `Keeper` object does not stop it. `on_lost(error)` is called once, from a
    /// background thread, with the `LeaseLost` exception if the lease is lost while the keeper
    /// runs. One keeper per lease.
    #[pyo3(signature = (on_lost=None, jitter=0.1))]
    fn keep(&self, on_lost: Option<Py<PyAny>>, jitter: f64) -> PyResult<Keeper> {
        if !(0.0..=0.5).contains(&jitter) {
            return Err(config_error(format!(
                "jitter=`{jitter}` is out of range; give a fraction of renew_window between 0 \
                 and 0.5"
            )));
        }
        Keeper::start(self, on_lost, jitter)
    }
}

/// A running keeper (`OwnerLease.keep()`). Use it as a context manager (`with`, `async with`)
/// to release the lease on the way out; a lease lost inside the block raises `LeaseLost` there.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug)]
pub(crate) struct Keeper {
    lease: OwnerLease,
    keeper: Mutex<Option<banklease::Keeper>>,
    /// Cancelled by `stop()` / `release()`: waiters stop waiting.
    stopped: CancellationToken,
}

impl Keeper {
    pub(crate) fn start(
        lease: &OwnerLease,
        on_lost: Option<Py<PyAny>>,
        jitter: f64,
    ) -> PyResult<Self> {
        let runtime = runtime()?;
        if lease.kept.swap(true, Ordering::SeqCst) {
            return Err(crate::errors::error(format!(
                "a keeper already runs for owner_id=`{}`; keep() once per lease (stop() or \
                 release() the running one first)",
                lease.inner.owner_id()
            )));
        }
        let _entered = runtime.enter();
        let keeper = lease.inner.spawn_keeper(Jitter::from_entropy(), jitter);
        let stopped = CancellationToken::new();
        if let Some(callback) = on_lost {
            let lease = lease.inner.clone();
            let stopped = stopped.clone();
            runtime.spawn(async move {
                let Some(reason) = wait_lost(&lease, &stopped).await else {
                    return;
                };
                let err = to_py(lost(&lease, reason));
                // Not on a runtime worker: the callback may call blocking banklease methods.
                let _ = tokio::task::spawn_blocking(move || {
                    // Nothing to call once the interpreter is shutting down.
                    Python::try_attach(|py| {
                        let value = err.value(py).clone();
                        if let Err(e) = callback.call1(py, (value,)) {
                            e.write_unraisable(py, Some(callback.bind(py)));
                        }
                    })
                })
                .await;
            });
        }
        Ok(Keeper {
            lease: lease.clone(),
            keeper: Mutex::new(Some(keeper)),
            stopped,
        })
    }

    fn take(&self) -> Option<banklease::Keeper> {
        let taken = self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.stopped.cancel();
        self.lease.kept.store(false, Ordering::SeqCst);
        taken
    }
}

/// Dropping the Python object does not stop renewals (a bare `lease.keep()` statement would
/// otherwise lose the lease at once): the keeper runs on until the lease is released or lost.
impl Drop for Keeper {
    fn drop(&mut self) {
        let keeper = self
            .keeper
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(keeper) = keeper else {
            return;
        };
        let Ok(runtime) = runtime() else {
            return; // a forked process: the keeper's task is not in it
        };
        let lease = self.lease.inner.clone();
        let kept = self.lease.kept.clone();
        runtime.spawn(async move {
            until_final(&lease).await;
            keeper.stop().await;
            kept.store(false, Ordering::SeqCst);
        });
    }
}

/// Wait until the lease is lost or released.
async fn until_final(lease: &banklease::OwnerLease) {
    wait_lost(lease, &CancellationToken::new()).await;
}

/// Wait until the lease is lost (its reason), released, or the keeper stopped (None).
///
/// A held lease whose validity runs out with no renewal is lost: `state()` says so once it is
/// asked, so the wait also wakes when the current validity ends. A loss that comes with the
/// stop is still reported.
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
            biased;
            changed = rx.changed() => if changed.is_err() { return None },
            () = clock.sleep(left + Duration::from_millis(1)) => {}
            () = stopped.cancelled() => {
                return match lease.state() {
                    LeaseState::Lost { reason } => Some(reason),
                    _ => None,
                };
            }
        }
    }
}

fn lost_value(py: Python<'_>, lease: &banklease::OwnerLease, reason: Option<String>) -> Py<PyAny> {
    match reason {
        Some(reason) => to_py(lost(lease, reason))
            .value(py)
            .clone()
            .into_any()
            .unbind(),
        None => py.None(),
    }
}

async fn stop(keeper: Option<banklease::Keeper>) {
    if let Some(keeper) = keeper {
        keeper.stop().await;
    }
}

async fn release(keeper: Option<banklease::Keeper>, lease: banklease::OwnerLease) -> PyResult<()> {
    stop(keeper).await;
    release_unless_lost(&lease).await
}

#[pymethods]
impl Keeper {
    /// The lease this keeper renews.
    #[getter]
    fn lease(&self) -> OwnerLease {
        self.lease.clone()
    }

    /// The lease's state now (`LeaseStatus`).
    #[getter]
    fn state(&self) -> LeaseStatus {
        let lease = &self.lease.inner;
        LeaseStatus::of(&lease.state(), lease.clock().now())
    }

    /// Block until the lease is lost, then return the `LeaseLost` exception (not raised).
    /// Returns None when the lease is released, the keeper is stopped, or `timeout` seconds
    /// pass first. Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let timeout = opt_duration("timeout", timeout)?;
        let lease = self.lease.inner.clone();
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
        Ok(lost_value(py, &self.lease.inner, reason))
    }

    /// Awaitable: the `LeaseLost` exception once the lease is lost (not raised), or None when
    /// it is released or the keeper stopped. Wrap in `asyncio.wait_for` for a timeout.
    fn wait_lost_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.lease.inner.clone();
        let stopped = self.stopped.clone();
        awaitable(py, async move {
            let reason = wait_lost(&lease, &stopped).await;
            Python::attach(|py| Ok(lost_value(py, &lease, reason)))
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

    /// Stop renewing and release the lease (a lost lease stays lost).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let keeper = self.take();
        block_on(py, release(keeper, self.lease.inner.clone()))
    }

    /// `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let keeper = self.take();
        awaitable(py, release(keeper, self.lease.inner.clone()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block stops the keeper and releases the lease; a lease lost inside the
    /// block raises `LeaseLost` here (unless another exception is on its way).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.release(py)?;
        raise_if_lost(&self.lease.inner, !exc_type.is_none())
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        awaitable(py, async move { Ok(me) })
    }

    /// Leaving an `async with` block stops the keeper and releases the lease (see `__exit__`).
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let keeper = self.take();
        let lease = self.lease.inner.clone();
        let quiet = !exc_type.is_none();
        awaitable(py, async move {
            release(keeper, lease.clone()).await?;
            raise_if_lost(&lease, quiet)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<Keeper owner_id={} {}>",
            self.lease.inner.owner_id(),
            self.state().__repr__()
        )
    }
}
