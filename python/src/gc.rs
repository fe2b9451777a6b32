//! One GC pass and doctor.

use std::path::PathBuf;
use std::sync::Arc;

use banklease::clock::{SharedClock, SystemClock};
use banklease::config::Config;
use banklease::doctor::DiagnoseOptions;
use pyo3::prelude::*;

use crate::bank::Bank;
use crate::errors::{gc_to_py, to_py};
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
    beside_daemon: bool,
}

/// A pass as `banklease gc` runs it: its configuration, `force` and `beside_daemon`.
pub(crate) struct PassPlan {
    config: Config,
    force: bool,
    beside: bool,
}

impl PassArgs<'_> {
    /// The pass's options for `bank`: the configuration file's (or the defaults), the
    /// `BANKLEASE_*` variables, then the arguments, with the bank given — validated by the one
    /// gate every entry point uses, so an argument can never make a pass the daemon refuses.
    fn plan(self, bank: &banklease::Bank) -> PyResult<PassPlan> {
        let grace = opt_duration("grace", self.grace.as_ref())?;
        let skew_margin = opt_duration("skew_margin", self.skew_margin.as_ref())?;
        let read_staleness = opt_duration("read_staleness", self.read_staleness.as_ref())?;
        if self.concurrency == Some(0) {
            return Err(crate::errors::config_error(
                "concurrency=`0` cannot make progress; give at least 1".into(),
            ));
        }
        let config = Config::gate(self.config_file.as_deref(), std::env::vars(), |c| {
            // The bank given, and the limits its client was opened with: what is judged.
            c.bank.url = bank.label().to_owned();
            let limits = bank.client_limits();
            c.bank.request_timeout = limits.request_timeout;
            c.bank.retry_timeout = limits.retry_timeout;
            c.gc.dry_run |= self.dry_run;
            if let Some(d) = grace {
                c.gc.grace = d;
            }
            if let Some(d) = skew_margin {
                c.lease.skew_margin = d;
            }
            if let Some(d) = read_staleness {
                c.gc.read_staleness = d;
            }
            if let Some(n) = self.concurrency {
                c.gc.concurrency = n;
            }
            if let Some(n) = self.max_deletions {
                c.gc.max_deletions = n;
            }
            if let Some(b) = self.reap_leases {
                c.gc.reap_leases = b;
            }
        })
        .map_err(to_py)?;
        Ok(PassPlan {
            config,
            force: self.force,
            beside: self.beside_daemon,
        })
    }
}

/// One pass with the engine and the rules of `banklease gc`: the layout and skew-margin checks,
/// the capability probe, and `gc/active` taken for the pass (refused while a daemon holds it,
/// unless `beside_daemon`; a dry run takes none), so that its evidence names this collector.
async fn pass(bank: banklease::Bank, plan: PassPlan) -> PyResult<String> {
    let clock: SharedClock = Arc::new(SystemClock);
    let single = banklease_gc::OnePass::new(bank, clock, plan.config)
        .with_force(plan.force)
        .beside_daemon(plan.beside)
        .run(std::future::pending::<()>())
        .await
        .map_err(gc_to_py)?
        .ok_or_else(|| crate::errors::error("the pass was interrupted before it started".into()))?;
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(flatten)]
        report: &'a banklease_gc::PassReport,
        #[serde(flatten)]
        lease: &'a banklease_gc::PassLease,
    }
    json(&Line {
        report: &single.report,
        lease: &single.lease,
    })
}

/// One GC pass (the engine of the `banklease-gc` daemon), as JSON text; see the Python
/// wrapper `banklease.run_pass`.
#[pyfunction]
pub(crate) fn run_pass(
    py: Python<'_>,
    bank: &Bound<'_, Bank>,
    args: PassArgs<'_>,
) -> PyResult<String> {
    let bank = bank.get().inner.clone();
    let plan = args.plan(&bank)?;
    block_on(py, pass(bank, plan))
}

/// `run_pass`, awaitable.
#[pyfunction]
pub(crate) fn run_pass_async<'py>(
    py: Python<'py>,
    bank: &Bound<'_, Bank>,
    args: PassArgs<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let bank = bank.get().inner.clone();
    let plan = args.plan(&bank)?;
    awaitable(py, pass(bank, plan))
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

/// `banklease checkpoint delete ID` for one checkpoint, as JSON text (`checkpoint_id`,
/// `outcome`: `deleted`, `already_deleted` or `refused`, and its details); see the Python
/// wrapper `banklease.delete_checkpoint`. The owner of a protecting checkpoint is judged with
/// `config_file`'s rules (or the defaults), as a pass would.
#[pyfunction]
#[pyo3(signature = (bank, checkpoint_id, available, dry_run, operator, reason, config_file))]
#[allow(clippy::too_many_arguments)] // the Python keyword arguments, one by one
pub(crate) fn delete_checkpoint(
    py: Python<'_>,
    bank: &Bound<'_, Bank>,
    checkpoint_id: &str,
    available: bool,
    dry_run: bool,
    operator: String,
    reason: Option<String>,
    config_file: Option<PathBuf>,
) -> PyResult<String> {
    let bank = bank.get().inner.clone();
    let id = banklease::CheckpointId::parse(checkpoint_id)
        .map_err(|e| to_py(banklease::Error::from(e)))?;
    let config = Config::gate(config_file.as_deref(), std::env::vars(), |c| {
        c.bank.url = bank.label().to_owned();
    })
    .map_err(to_py)?;
    let options = banklease_gc::GcOptions::from_config(&config);
    let request = banklease_gc::operator::delete::DeleteRequest {
        available,
        dry_run,
        operator,
        reason,
    };
    block_on(py, async move {
        let clock: SharedClock = Arc::new(SystemClock);
        let deletion =
            banklease_gc::operator::delete::delete(&bank, &clock, &options, &id, &request)
                .await
                .map_err(to_py)?;
        #[derive(serde::Serialize)]
        struct Line<'a> {
            checkpoint_id: &'a str,
            #[serde(flatten)]
            deletion: &'a banklease_gc::operator::delete::Deletion,
            dry_run: bool,
        }
        json(&Line {
            checkpoint_id: id.as_str(),
            deletion: &deletion,
            dry_run,
        })
    })
}
