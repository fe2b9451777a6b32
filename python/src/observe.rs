//! `LeaseObserver`: an admin's (or the GC's) judgement of an owner's lease.

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::{SharedClock, SystemClock};
use banklease::observe::WindowSource;
use banklease::OwnerId;
use pyo3::prelude::*;

use crate::bank::Bank;
use crate::errors::to_py;
use crate::runtime::{awaitable, block_on, opt_duration};

/// Judges owners' leases on the store's clock, as the GC and `banklease validity-check` do.
///
/// `skew_margin` (default 2 s) is deducted in the owner's favour and must cover the store's
/// timestamp resolution (the first `view` checks, `ConfigError` if not); `read_staleness`
/// (default 0) is how old a read's answer may be on this store (lagging replicas; the GC's
/// `gc.read_staleness`). The owner's own windows, as its lease declares them, are used.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct LeaseObserver {
    inner: banklease::LeaseObserver,
    bank: banklease::Bank,
    /// Set once the skew margin was found to cover the store's timestamp resolution.
    margin_checked: Arc<tokio::sync::OnceCell<()>>,
}

/// What an observer found: `state` is `"alive"`, `"expired"`, `"missing"` or `"unreadable"`.
///
/// `ok` answers "may this owner start an update now?": alive, with at least `validity_window`
/// seconds left (`remaining`) at the latest instant the answer may be acted on. Advisory: the
/// owner counts from the send time of its last renewal, the store stamps it a request's
/// latency later; the owner's own `check_validity()` is what its writes obey. Dead or alive
/// is `state`, not `ok` (a live owner with little time left is not ok, and not dead).
/// `window_source` says whose window that is: `"owner"` (declared in its lease), `"given"` or
/// `"default"`. `expired_since` (seconds) is set for expired leases, `error` for unreadable
/// ones, `record` (a dict) when the lease could be read.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct LeaseView {
    #[pyo3(get)]
    owner_id: String,
    #[pyo3(get)]
    state: &'static str,
    #[pyo3(get)]
    ok: bool,
    #[pyo3(get)]
    remaining: f64,
    #[pyo3(get)]
    validity_window: f64,
    #[pyo3(get)]
    window_source: &'static str,
    #[pyo3(get)]
    expired_since: Option<f64>,
    #[pyo3(get)]
    error: Option<String>,
    record_json: Option<String>,
}

#[pymethods]
impl LeaseView {
    /// The lease object's body (owner id, host, pid, windows in ms, generation, ...), or None.
    #[getter]
    fn record<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.record_json
            .as_ref()
            .map(|json| py.import("json")?.call_method1("loads", (json,)))
            .transpose()
    }

    /// A view has no truth value: ask `state` (is the owner dead?) or `ok` (may it start an
    /// update?), which differ for a live owner with little time left.
    fn __bool__(&self) -> PyResult<bool> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a LeaseView has no truth value: use view.state (\"alive\", \"expired\", \"missing\", \
             \"unreadable\") to tell whether the owner is dead, or view.ok for whether it may \
             start an update",
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "LeaseView(owner_id='{}', state='{}', ok={}, remaining={:.3}, validity_window={}, \
             window_source='{}')",
            self.owner_id,
            self.state,
            if self.ok { "True" } else { "False" },
            self.remaining,
            self.validity_window,
            self.window_source
        )
    }
}

async fn view(
    observer: LeaseObserver,
    owner: String,
    window: Option<Duration>,
) -> PyResult<LeaseView> {
    let owner = OwnerId::parse(&owner).map_err(|e| to_py(e.into()))?;
    // A margin below the store's stamp resolution would judge a live owner's truncated stamp
    // as older than it is: refused, as the GC refuses it (checked once per observer).
    observer
        .margin_checked
        .get_or_try_init(|| async {
            // First, before any write: a URL that holds no bank (a typo) must not answer
            // "missing" for a live owner, nor get a clock probe written into it.
            banklease::layout::check(&observer.bank)
                .await
                .map_err(to_py)?;
            let clock: SharedClock = Arc::new(SystemClock);
            banklease_gc::time::timing::check_skew_margin(
                &observer.bank,
                &clock,
                observer.inner.margin(),
            )
            .await
            .map_err(to_py)
        })
        .await?;
    let observer = observer.inner;
    let fallback = banklease::config::LeaseConfig::default()
        .windows
        .validity_window;
    let check = observer
        .validity_check(&owner, window, fallback)
        .await
        .map_err(to_py)?;
    let (expired_since, error, record) = match &check.view {
        banklease::LeaseView::Alive { record, .. } => (None, None, Some(record)),
        banklease::LeaseView::Expired { since, record } => {
            (Some(since.as_secs_f64()), None, Some(record))
        }
        banklease::LeaseView::Missing => (None, None, None),
        banklease::LeaseView::Unreadable { error } => (None, Some(error.clone()), None),
    };
    Ok(LeaseView {
        owner_id: owner.to_string(),
        state: check.view.name(),
        ok: check.ok,
        remaining: check.remaining.as_secs_f64(),
        validity_window: check.validity_window.as_secs_f64(),
        window_source: match check.window_source {
            WindowSource::Given => "given",
            WindowSource::Owner => "owner",
            WindowSource::Fallback => "default",
        },
        expired_since,
        error,
        record_json: record.and_then(|r| serde_json::to_string(r).ok()),
    })
}

#[pymethods]
impl LeaseObserver {
    #[new]
    #[pyo3(signature = (bank, skew_margin=None, read_staleness=None))]
    fn new(
        bank: &Bound<'_, Bank>,
        skew_margin: Option<&Bound<'_, PyAny>>,
        read_staleness: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let margin = opt_duration("skew_margin", skew_margin)?
            .unwrap_or(banklease::config::LeaseConfig::default().skew_margin);
        let staleness = opt_duration("read_staleness", read_staleness)?.unwrap_or_default();
        // A reader: it judges by the store's `Date` and writes nothing (README: read-only
        // access), as `validity-check` does.
        let bank = bank.get().inner.reading_only();
        let inner = banklease::LeaseObserver::new(bank.clone(), Arc::new(SystemClock), margin)
            .with_read_staleness(staleness);
        Ok(Self {
            inner,
            bank,
            margin_checked: Arc::default(),
        })
    }

    /// Read and judge `owner_id`'s lease, writing nothing (two requests: the store's `Date`,
    /// then the lease; the first view also checks that the URL holds a bank, raising
    /// `LayoutError` when it does not, and reads the store's timestamp resolution that
    /// `banklease init` measured). `validity_window`
    /// (seconds) overrides the owner's declared one. Raises `StoreError` only when the store's
    /// clock cannot be read; an unreadable lease is a view with `error`.
    #[pyo3(signature = (owner_id, validity_window=None))]
    fn view(
        &self,
        py: Python<'_>,
        owner_id: String,
        validity_window: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<LeaseView> {
        let window = opt_duration("validity_window", validity_window)?;
        block_on(py, view(self.clone(), owner_id, window))
    }

    /// `view`, awaitable.
    #[pyo3(signature = (owner_id, validity_window=None))]
    fn view_async<'py>(
        &self,
        py: Python<'py>,
        owner_id: String,
        validity_window: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let window = opt_duration("validity_window", validity_window)?;
        awaitable(py, view(self.clone(), owner_id, window))
    }
}
