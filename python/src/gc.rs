//! One GC pass and doctor.

use std::path::PathBuf;
use std::sync::Arc;

use banklease::clock::{SharedClock, SystemClock};
use banklease::config::Config;
use banklease::doctor::DiagnoseOptions;
use banklease_gc::{Collector, GcOptions};
use pyo3::prelude::*;

use crate::bank::Bank;
use crate::errors::to_py;
use crate::runtime::{awaitable, block_on, opt_duration};

fn json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
}

/// The options of one pass, as the Python wrapper passes them: a dict with every key (`None`
/// where the caller gave nothing).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct PassArgs<'py> {
    config_file: Option<PathBuf>,
    dry_run: bool,
    force: bool,
    grace: Option<Bound<'py, PyAny>>,
    skew_margin: Option<Bound<'py, PyAny>>,
    read_staleness: Option<Bound<'py, PyAny>>,
    concurrency: Option<usize>,
    max_deletions: Option<usize>,
    reap_leases: Option<bool>,
}

impl PassArgs<'_> {
    /// The pass's options: the configuration file's (or the defaults), then the arguments.
    fn options(self) -> PyResult<GcOptions> {
        let config = match self.config_file {
            Some(path) => Config::load(Some(&path)).map_err(to_py)?,
            None => Config::default(),
        };
        let mut o = GcOptions::from_config(&config);
        o.dry_run |= self.dry_run;
        o.force = self.force;
        if let Some(d) = opt_duration("grace", self.grace.as_ref())? {
            o.grace = d;
        }
        if let Some(d) = opt_duration("skew_margin", self.skew_margin.as_ref())? {
            o.skew_margin = d;
        }
        if let Some(d) = opt_duration("read_staleness", self.read_staleness.as_ref())? {
            o.read_staleness = d;
        }
        if let Some(n) = self.concurrency {
            if n == 0 {
                return Err(crate::errors::config_error(
                    "concurrency=`0` cannot make progress; give at least 1".into(),
                ));
            }
            o.concurrency = n;
        }
        if let Some(n) = self.max_deletions {
            o.max_deletions = n;
        }
        if let Some(b) = self.reap_leases {
            o.reap_leases = b;
        }
        Ok(o)
    }
}

async fn pass(bank: banklease::Bank, options: GcOptions) -> PyResult<String> {
    let clock: SharedClock = Arc::new(SystemClock);
    banklease::layout::check(&bank).await.map_err(to_py)?;
    banklease_gc::timing::check_skew_margin(&bank, &clock, options.skew_margin)
        .await
        .map_err(to_py)?;
    let report = Collector::new(bank, clock, options)
        .run_pass()
        .await
        .map_err(to_py)?;
    json(&report)
}

/// One GC pass (the engine of the `banklease-gc` daemon), as JSON text; see the Python
/// wrapper `banklease.run_pass`.
#[pyfunction]
pub(crate) fn run_pass(
    py: Python<'_>,
    bank: &Bound<'_, Bank>,
    args: PassArgs<'_>,
) -> PyResult<String> {
    let options = args.options()?;
    block_on(py, pass(bank.get().inner.clone(), options))
}

/// `run_pass`, awaitable.
#[pyfunction]
pub(crate) fn run_pass_async<'py>(
    py: Python<'py>,
    bank: &Bound<'_, Bank>,
    args: PassArgs<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = args.options()?;
    awaitable(py, pass(bank.get().inner.clone(), options))
}

async fn diagnose(bank: banklease::Bank, race_rounds: Option<u32>) -> PyResult<String> {
    let clock: SharedClock = Arc::new(SystemClock);
    banklease::layout::check(&bank).await.map_err(to_py)?;
    let mut options = DiagnoseOptions::default();
    if let Some(rounds) = race_rounds {
        options.race_rounds = rounds;
    }
    let diagnosis = banklease::doctor::diagnose(&bank, &clock, &options)
        .await
        .map_err(to_py)?;
    let verdicts = diagnosis.verdicts();
    json(&serde_json::json!({
        "supported": verdicts.supports_leasing_and_gc(),
        "verdicts": verdicts,
        "diagnosis": diagnosis,
    }))
}

/// Measure what the bank's store enforces (`banklease doctor`), as JSON text; see the Python
/// wrapper `banklease.doctor`.
#[pyfunction]
#[pyo3(signature = (bank, *, race_rounds=None))]
pub(crate) fn doctor(
    py: Python<'_>,
    bank: &Bound<'_, Bank>,
    race_rounds: Option<u32>,
) -> PyResult<String> {
    block_on(py, diagnose(bank.get().inner.clone(), race_rounds))
}

/// `doctor`, awaitable.
#[pyfunction]
#[pyo3(signature = (bank, *, race_rounds=None))]
pub(crate) fn doctor_async<'py>(
    py: Python<'py>,
    bank: &Bound<'_, Bank>,
    race_rounds: Option<u32>,
) -> PyResult<Bound<'py, PyAny>> {
    awaitable(py, diagnose(bank.get().inner.clone(), race_rounds))
}
