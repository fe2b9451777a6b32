//! `banklease._banklease`: the extension module behind the Python package `banklease`.
//!
//! Every I/O call comes in two styles: blocking (`acquire`, `renew`, ...), which releases the
//! GIL and runs on the module's tokio runtime, and asyncio (`acquire_async`, ...), which returns
//! an awaitable driven by the same runtime (pyo3-async-runtimes). The Python layer
//! (`banklease/__init__.py`) adds the exception classes, the report dataclasses and the
//! compatibility layer with the seed design's bank-plugin names.
//!
//! Invariant: **a Python owner is held to the same checks as a Rust one.** The module wraps the
//! library's `OwnerLease` and `Checkpoint` and adds no state of its own: every create, data
//! write and completion goes through the library's `ensure_valid`, renewal failures are raised
//! (from the keeper, through `on_lost` and `wait_lost` with `LeaseLost`), and a GC pass runs the
//! GC crate's `OnePass` after the same layout, capability and skew-margin checks as
//! `banklease gc`. The compatibility layer's `check_lease_existence` answers False only for a
//! lease read as missing or expired past the margin, and raises on doubt.

use pyo3::prelude::*;

mod bank;
mod checkpoint;
mod errors;
mod gc;
mod keeper;
mod lease;
mod observe;
mod runtime;

/// The HTTP requests this process has sent to stores, by method, with `total` and `writes`
/// (every request but GET and HEAD): what an embedder's calls cost.
#[pyfunction]
fn requests_sent() -> std::collections::BTreeMap<&'static str, u64> {
    let sent = banklease::store::requests_sent();
    let mut counts: std::collections::BTreeMap<_, _> = sent.by_method().into_iter().collect();
    counts.insert("total", sent.total());
    counts.insert("writes", sent.writes());
    counts
}

/// Blocking threads of the module's runtime: `file:` banks run every call there; a GC pass keeps
/// `gc.concurrency` (16 by default) in flight.
const BLOCKING_THREADS: usize = 32;

#[pymodule]
fn _banklease(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(2)
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_name("banklease")
        .enable_all();
    pyo3_async_runtimes::tokio::init(builder);

    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<bank::Bank>()?;
    m.add_class::<lease::LeaseWindows>()?;
    m.add_class::<lease::OwnerLease>()?;
    m.add_class::<lease::LeaseStatus>()?;
    m.add_class::<keeper::Keeper>()?;
    m.add_class::<checkpoint::Checkpoint>()?;
    m.add_class::<observe::LeaseObserver>()?;
    m.add_class::<observe::LeaseView>()?;
    m.add_function(wrap_pyfunction!(checkpoint::read_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::read_checkpoint_async, m)?)?;
    m.add_function(wrap_pyfunction!(gc::run_pass, m)?)?;
    m.add_function(wrap_pyfunction!(gc::delete_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(gc::run_pass_async, m)?)?;
    m.add_function(wrap_pyfunction!(gc::doctor, m)?)?;
    m.add_function(wrap_pyfunction!(gc::doctor_async, m)?)?;
    m.add_function(wrap_pyfunction!(requests_sent, m)?)?;
    Ok(())
}
