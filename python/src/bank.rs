//! `Bank`: where checkpoints and leases live.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::to_py;
use crate::runtime::{awaitable, block_on, opt_duration};

/// A bank: the object-store prefix that holds a protection service's checkpoints and leases.
///
/// Open one from a URL: `memory://` (this process only), `file:///var/lib/bank`,
/// `s3://bucket/prefix`, `swift://container/prefix`, `az://container/prefix`,
/// `gs://bucket/prefix`. Credentials and endpoints come from the environment, as for the
/// `banklease` CLI (`AWS_*`, `ST_AUTH`/`ST_USER`/`ST_KEY` or `OS_*`, `AZURE_*`,
/// `GOOGLE_*`). Opening sends no request.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct Bank {
    pub(crate) inner: banklease::Bank,
}

#[pymethods]
impl Bank {
    /// Open the bank at `url` (no request is sent). A `file:` bank's directory must exist
    /// (`LayoutError` otherwise) unless `create` is true, for a bank about to be `init`ed.
    /// `request_timeout` and `retry_timeout` (seconds) bound its store client as `[bank]
    /// request_timeout` and `retry_timeout` do (left out, the configuration's apply, where it
    /// sets them); its owners declare the budget they give, and a GC pass judges them by it.
    /// `credentials` (a dict) replaces the environment's: `{"access_key_id": ...,
    /// "secret_access_key": ..., "session_token": ...}` for an `s3://` bank; `{"cloud":
    /// "name"}` (a cloud of `clouds.yaml`) or a cloud's options (`{"auth_url": ...,
    /// "username": ..., "password": ..., "project_name": ..., "region_name": ...}`, or with
    /// them under `"auth"` as `clouds.yaml` holds them) for a `swift://` bank.
    #[staticmethod]
    #[pyo3(signature = (url, *, create = false, request_timeout = None, retry_timeout = None, credentials = None))]
    fn open(
        url: &str,
        create: bool,
        request_timeout: Option<Bound<'_, PyAny>>,
        retry_timeout: Option<Bound<'_, PyAny>>,
        credentials: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // What the caller leaves out, the configuration sets where it sets it (the file
        // `BANKLEASE_CONFIG` names, `BANKLEASE_BANK__*`): the budget declared is the client's.
        let configured = banklease::config::BankConfig::configured().map_err(to_py)?;
        let config = banklease::config::BankConfig {
            url: url.to_owned(),
            request_timeout: opt_duration("request_timeout", request_timeout.as_ref())?
                .or(configured.request_timeout),
            retry_timeout: opt_duration("retry_timeout", retry_timeout.as_ref())?
                .or(configured.retry_timeout),
            ca_file: configured.ca_file,
            credentials: credentials.as_ref().map(to_credentials).transpose()?,
        };
        banklease::Bank::open_configured(&config, create)
            .map(|inner| Bank { inner })
            .map_err(to_py)
    }

    /// Make this bank a bank, as `banklease init` does: write its descriptor unless it has one.
    /// Returns `"created"`, `"adopted"` (a bank made before descriptors existed) or `"already"`;
    /// raises `LayoutError` for a prefix holding anything but a bank's objects. Every owner,
    /// GC pass and doctor refuses a prefix that holds no bank. Like `banklease init`, it then
    /// measures the store once (its conditions, named locks, the resolution of its stamps) and
    /// keeps that in the bank, so that no later process pays for it.
    fn init(&self, py: Python<'_>) -> PyResult<&'static str> {
        let bank = self.inner.clone();
        block_on(py, async move { init(&bank).await })
    }

    /// `init`, awaitable.
    fn init_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let bank = self.inner.clone();
        awaitable(py, async move { init(&bank).await })
    }

    /// The bank's URL, without secrets.
    #[getter]
    fn label(&self) -> String {
        self.inner.label().to_owned()
    }

    /// Refuse a bank whose descriptor (`banklease.json`) names a layout this release does not
    /// know, a prefix that is not a bank, and one that holds no bank at all (`LayoutError`);
    /// banks made before descriptors existed are accepted. Acquiring a lease, a GC pass and
    /// doctor check this themselves.
    fn check_layout(&self, py: Python<'_>) -> PyResult<()> {
        let bank = self.inner.clone();
        block_on(py, async move {
            banklease::layout::check(&bank).await.map_err(to_py)
        })
    }

    /// `check_layout`, awaitable.
    fn check_layout_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let bank = self.inner.clone();
        awaitable(py, async move {
            banklease::layout::check(&bank).await.map_err(to_py)
        })
    }

    fn __repr__(&self) -> String {
        format!("Bank.open({:?})", self.inner.label())
    }
}

async fn init(bank: &banklease::Bank) -> PyResult<&'static str> {
    use banklease::layout::Initialised;
    let outcome = banklease::layout::init(bank).await.map_err(to_py)?;
    // As `banklease init`: what every later process would otherwise measure, measured once.
    let clock: banklease::clock::SharedClock = std::sync::Arc::new(banklease::clock::SystemClock);
    bank.measure(&clock).await.map_err(to_py)?;
    Ok(match outcome {
        Initialised::Created => "created",
        Initialised::Adopted => "adopted",
        Initialised::Already => "already",
    })
}

/// `Bank.open`'s `credentials` dict as [`banklease::Credentials`].
fn to_credentials(given: &Bound<'_, PyDict>) -> PyResult<banklease::Credentials> {
    let bad = |why: String| pyo3::exceptions::PyValueError::new_err(format!("credentials: {why}"));
    let mut options = std::collections::BTreeMap::new();
    for (key, value) in given.iter() {
        let key: String = key
            .extract()
            .map_err(|_| bad("keys are strings".to_owned()))?;
        if key == "auth" {
            let auth = value
                .cast::<PyDict>()
                .map_err(|_| bad("`auth` is a dict, as in clouds.yaml".to_owned()))?;
            for (k, v) in auth.iter() {
                let k: String = k
                    .extract()
                    .map_err(|_| bad("keys are strings".to_owned()))?;
                let v: String = v.str()?.extract()?;
                options.insert(k, v);
            }
            continue;
        }
        if value.is_none() {
            continue;
        }
        let value: String = value.str()?.extract()?;
        options.insert(key, value);
    }
    if let Some(name) = options.get("cloud") {
        if options.len() > 1 {
            return Err(bad(
                "`cloud` names a cloud of clouds.yaml; give it alone, or the options without it"
                    .to_owned(),
            ));
        }
        return Ok(banklease::Credentials::Cloud { name: name.clone() });
    }
    if options.contains_key("access_key_id") || options.contains_key("secret_access_key") {
        let mut take = |k: &str| options.remove(k);
        let (Some(access_key_id), Some(secret_access_key)) =
            (take("access_key_id"), take("secret_access_key"))
        else {
            return Err(bad(
                "S3 credentials need both `access_key_id` and `secret_access_key`".to_owned(),
            ));
        };
        let session_token = take("session_token");
        if let Some(extra) = options.keys().next() {
            return Err(bad(format!(
                "`{extra}` is not an S3 credential (access_key_id, secret_access_key, \
                 session_token)"
            )));
        }
        return Ok(banklease::Credentials::S3 {
            access_key_id,
            secret_access_key,
            session_token,
        });
    }
    if options.is_empty() {
        return Err(bad("the dict is empty".to_owned()));
    }
    Ok(banklease::Credentials::OpenStack { options })
}
