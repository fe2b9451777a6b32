//! `Checkpoint` and reading a checkpoint's index.

use banklease::checkpoint::Status;
use bytes::Bytes;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};

use crate::bank::Bank;
use crate::errors::to_py;
use crate::lease::OwnerLease;
use crate::runtime::{awaitable, block_on};

/// A checkpoint being written (`protecting`) under an owner lease.
///
/// Every call checks the lease's validity first (zero requests; `NotValid` or `LeaseLost`).
/// `complete()` raises `Fenced` when the GC collected the checkpoint first: it must then not
/// be reported as available.
#[pyclass(module = "banklease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    inner: banklease::Checkpoint,
}

fn parse_outcome(status: &str) -> PyResult<Status> {
    match status.parse::<Status>().map_err(|e| to_py(e.into()))? {
        s @ (Status::Available | Status::Error) => Ok(s),
        other => Err(crate::errors::config_error(format!(
            "status=`{other}` cannot complete a checkpoint; use \"available\" or \"error\""
        ))),
    }
}

/// Bytes-like data (bytes, bytearray, memoryview), copied for the upload.
fn payload(data: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(b) = data.cast::<PyByteArray>() {
        return Ok(Bytes::from(b.to_vec()));
    }
    if let Ok(view) = data.cast::<PyMemoryView>() {
        let b = view.call_method0("tobytes")?;
        return Ok(Bytes::copy_from_slice(b.cast::<PyBytes>()?.as_bytes()));
    }
    Err(PyTypeError::new_err(format!(
        "data must be bytes, bytearray or memoryview, not {}",
        data.get_type().name()?
    )))
}

/// `id` as a checkpoint id, or the library's refusal of it.
fn checkpoint_id(id: &str) -> PyResult<banklease::CheckpointId> {
    banklease::CheckpointId::parse(id).map_err(|e| to_py(e.into()))
}

async fn create(lease: banklease::OwnerLease, id: String) -> PyResult<Checkpoint> {
    let inner = banklease::Checkpoint::create(&lease, &checkpoint_id(&id)?)
        .await
        .map_err(to_py)?;
    Ok(Checkpoint { inner })
}

async fn adopt(lease: banklease::OwnerLease, id: String) -> PyResult<Checkpoint> {
    let inner = banklease::Checkpoint::adopt(&lease, &checkpoint_id(&id)?)
        .await
        .map_err(to_py)?;
    Ok(Checkpoint { inner })
}

#[pymethods]
impl Checkpoint {
    /// Create checkpoint `checkpoint_id` as `protecting`, owned by `lease`'s owner
    /// (`CheckpointExists` if the id is taken).
    #[staticmethod]
    fn create(
        py: Python<'_>,
        lease: &Bound<'_, OwnerLease>,
        checkpoint_id: String,
    ) -> PyResult<Self> {
        let lease = lease.get().inner.clone();
        block_on(py, create(lease, checkpoint_id))
    }

    /// `create`, awaitable.
    #[staticmethod]
    fn create_async<'py>(
        py: Python<'py>,
        lease: &Bound<'_, OwnerLease>,
        checkpoint_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lease = lease.get().inner.clone();
        awaitable(py, create(lease, checkpoint_id))
    }

    /// Take up checkpoint `checkpoint_id` again after an ambiguous `create`
    /// (`CheckpointAmbiguous`): succeeds only if it is this owner's and still protecting.
    #[staticmethod]
    fn adopt(
        py: Python<'_>,
        lease: &Bound<'_, OwnerLease>,
        checkpoint_id: String,
    ) -> PyResult<Self> {
        let lease = lease.get().inner.clone();
        block_on(py, adopt(lease, checkpoint_id))
    }

    /// `adopt`, awaitable.
    #[staticmethod]
    fn adopt_async<'py>(
        py: Python<'py>,
        lease: &Bound<'_, OwnerLease>,
        checkpoint_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let lease = lease.get().inner.clone();
        awaitable(py, adopt(lease, checkpoint_id))
    }

    /// The checkpoint id.
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
    }

    /// Write one data object, `checkpoints/<id>/data/<name>` (bytes-like `data`).
    fn put_data(&self, py: Python<'_>, name: String, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = payload(data)?;
        let cp = self.inner.clone();
        block_on(py, async move {
            cp.put_data(&name, data.into()).await.map_err(to_py)
        })
    }

    /// `put_data`, awaitable.
    fn put_data_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let cp = self.inner.clone();
        awaitable(py, async move {
            cp.put_data(&name, data.into()).await.map_err(to_py)
        })
    }

    /// Move the checkpoint out of `protecting`: `"available"` or `"error"`. Raises `Fenced`
    /// when the GC decided first.
    #[pyo3(signature = (status="available"))]
    fn complete(&self, py: Python<'_>, status: &str) -> PyResult<()> {
        let status = parse_outcome(status)?;
        let cp = self.inner.clone();
        block_on(py, async move { cp.complete(status).await.map_err(to_py) })
    }

    /// `complete`, awaitable.
    #[pyo3(signature = (status="available"))]
    fn complete_async<'py>(&self, py: Python<'py>, status: &str) -> PyResult<Bound<'py, PyAny>> {
        let status = parse_outcome(status)?;
        let cp = self.inner.clone();
        awaitable(py, async move { cp.complete(status).await.map_err(to_py) })
    }

    fn __repr__(&self) -> String {
        format!(
            "<Checkpoint id={} owner_id={}>",
            self.inner.id(),
            self.inner.lease().owner_id()
        )
    }
}

async fn read(bank: banklease::Bank, id: String) -> PyResult<Option<String>> {
    // A URL that holds no bank (a typo) must not answer "no such checkpoint".
    banklease::layout::check(&bank).await.map_err(to_py)?;
    let record = banklease::checkpoint::read_checkpoint(&bank, &checkpoint_id(&id)?)
        .await
        .map_err(to_py)?;
    record
        .map(|r| serde_json::to_string(&r))
        .transpose()
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
}

/// A checkpoint's `index.json` as JSON text, or None when there is none (see the Python
/// wrapper `banklease.read_checkpoint`).
#[pyfunction]
pub(crate) fn read_checkpoint(
    py: Python<'_>,
    bank: &Bound<'_, Bank>,
    checkpoint_id: String,
) -> PyResult<Option<String>> {
    let bank = bank.get().inner.clone();
    block_on(py, read(bank, checkpoint_id))
}

/// `read_checkpoint`, awaitable.
#[pyfunction]
pub(crate) fn read_checkpoint_async<'py>(
    py: Python<'py>,
    bank: &Bound<'_, Bank>,
    checkpoint_id: String,
) -> PyResult<Bound<'py, PyAny>> {
    let bank = bank.get().inner.clone();
    awaitable(py, read(bank, checkpoint_id))
}
