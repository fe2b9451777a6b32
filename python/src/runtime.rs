//! Running the library's futures for Python: blocking (GIL released) or as awaitables.

use std::future::Future;
use std::time::Duration;

use banklease::clock::{Clock, SystemClock};
use pyo3::prelude::*;
use pyo3::types::PyDelta;

/// How often a blocking call looks for a pending signal (Ctrl-C) while it waits.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

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
    let runtime = pyo3_async_runtimes::tokio::get_runtime();
    py.detach(|| {
        runtime.block_on(async {
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
    pyo3_async_runtimes::tokio::future_into_py(py, fut)
}

/// A duration given as seconds (int or float) or a `datetime.timedelta`.
pub(crate) fn duration(what: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
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
