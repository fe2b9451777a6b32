//! Running the library's futures for Python: blocking (GIL released) or as awaitables.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use banklease::clock::{Clock, SystemClock};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDelta};

/// How often a blocking call looks for a pending signal (Ctrl-C) while it waits.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The process that started the module's runtime.
static RUNTIME_PID: OnceLock<u32> = OnceLock::new();

/// Whether this process was forked from the one that started the module's runtime: it holds
/// none of that process's leases (their keepers did not come along, and the lease is the
/// parent's), so a lease inherited in memory answers as not held.
pub(crate) fn forked() -> bool {
    RUNTIME_PID
        .get()
        .is_some_and(|pid| *pid != std::process::id())
}

/// The module's runtime, refused in a process forked from the one that started it: the fork
/// has none of its threads, so any call would hang.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    let pid = *RUNTIME_PID.get_or_init(std::process::id);
    if pid != std::process::id() {
        return Err(crate::errors::error(format!(
            "banklease cannot run in process pid=`{}`: it was forked from pid=`{pid}`, where \
             banklease had already started its threads; use the \"spawn\" or \"forkserver\" start \
             method of multiprocessing, or first use banklease after the fork",
            std::process::id()
        )));
    }
    Ok(pyo3_async_runtimes::tokio::get_runtime())
}

/// Run `fut` to completion on the module's runtime with the GIL released.
///
/// A signal handler that raises (Ctrl-C's KeyboardInterrupt) abandons the call: the future is
/// dropped where it stands, exactly as if the process had stopped there. Every write of the
/// library is designed to be safe to cut at any point (the GC finishes or collects what is
/// left), so nothing else is needed.
pub(crate) fn block_on<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    run(py, fut, true)
}

/// [`block_on`] for calls that must not be cut short: a renewal abandoned after its write was
/// sent would leave the lease's answer unknown, and the next renewal would take the landed
/// write for another writer's (a spurious Lost). Bounded by the store client's timeouts.
pub(crate) fn block_on_whole<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    run(py, fut, false)
}

fn run<F, T>(py: Python<'_>, fut: F, interruptible: bool) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let runtime = runtime()?;
    py.detach(|| {
        runtime.block_on(async {
            if !interruptible {
                return fut.await;
            }
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    result = &mut fut => return result,
                    () = SystemClock.sleep(SIGNAL_POLL) => {
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    })
}

/// `fut` as a Python awaitable, driven by the module's runtime.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    runtime()?;
    pyo3_async_runtimes::tokio::future_into_py(py, fut)
}

/// [`awaitable`] for calls that must not be cut short (see [`block_on_whole`]). Cancelling the
/// asyncio task that awaits a call drops the awaited future, and with it any request still in
/// flight; so `fut` runs as a task of its own, which that drop detaches instead of cancelling.
/// The await is cancelled at once; the call runs to its end and records its outcome (the lease
/// serialises renewals and releases, so the next one waits for it).
pub(crate) fn awaitable_whole<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let runtime = runtime()?;
    // Spawned on the first poll: an await cancelled before that has sent nothing.
    awaitable(py, async move {
        match runtime.spawn(fut).await {
            Ok(result) => result,
            // Reported as the panic of the awaited future itself (pyo3-async-runtimes' RustPanic).
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(crate::errors::error(format!(
                "the call did not finish: banklease's runtime is shutting down ({e})"
            ))),
        }
    })
}

/// A duration given as seconds (int or float) or a `datetime.timedelta`.
pub(crate) fn duration(what: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    if value.is_instance_of::<PyBool>() {
        return Err(crate::errors::config_error(format!(
            "{what}=`{}` is not a duration; give seconds (a number), a datetime.timedelta or a string such as `2s`",
            value.repr().map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    // The configuration's own form (`"2s"`, `"1m 30s"`, humantime), as the TOML takes it.
    if let Ok(text) = value.extract::<String>() {
        return humantime::parse_duration(text.trim()).map_err(|e| {
            crate::errors::config_error(format!(
                "{what}=`{text}` is not a duration ({e}); give seconds (a number), a \
                 datetime.timedelta or a duration as the configuration writes it (`2s`, `1m 30s`)"
            ))
        });
    }
    let secs: f64 = if let Ok(delta) = value.cast::<PyDelta>() {
        delta.call_method0("total_seconds")?.extract()?
    } else {
        value.extract().map_err(|_| {
            crate::errors::config_error(format!(
                "{what}=`{}` is not a duration; give seconds (a number) or a datetime.timedelta",
                value.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?
    };
    Duration::try_from_secs_f64(secs).map_err(|_| {
        crate::errors::config_error(format!(
            "{what}=`{secs}` is not a duration; give a finite number of seconds, zero or more"
        ))
    })
}

/// An optional duration argument.
pub(crate) fn opt_duration(
    what: &str,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    value
        .filter(|v| !v.is_none())
        .map(|v| duration(what, v))
        .transpose()
}
