//! The library's errors as Python exceptions.
//!
//! The classes live in `banklease/errors.py` (a hierarchy under `BankleaseError`, with
//! `ValueError` mixed in where the caller gave a bad value). Each exception keeps the library's
//! message and gets its details as attributes (`owner_id`, `checkpoint_id`, ...).

use std::time::Duration;

use pyo3::prelude::*;

/// Build an exception of class `name` from `banklease.errors` with `message` and `attrs`.
fn raise(name: &str, message: String, attrs: &[(&str, Attr)]) -> PyErr {
    Python::attach(|py| match build(py, name, &message, attrs) {
        Ok(err) => err,
        // The Python half of the package is missing or broken: still say what failed.
        Err(e) => pyo3::exceptions::PyRuntimeError::new_err(format!(
            "{message} (and banklease.errors.{name} could not be raised: {e})"
        )),
    })
}

fn build(py: Python<'_>, name: &str, message: &str, attrs: &[(&str, Attr)]) -> PyResult<PyErr> {
    let class = py.import("banklease.errors")?.getattr(name)?;
    let instance = class.call1((message,))?;
    for (key, value) in attrs {
        match value {
            Attr::Str(s) => instance.setattr(*key, s)?,
            Attr::Secs(d) => instance.setattr(*key, d.as_secs_f64())?,
            Attr::Bool(b) => instance.setattr(*key, b)?,
        }
    }
    Ok(PyErr::from_value(instance))
}

enum Attr {
    Str(String),
    Secs(Duration),
    Bool(bool),
}

/// `BankleaseError`: a failure of the package itself.
pub(crate) fn error(message: String) -> PyErr {
    raise("BankleaseError", message, &[])
}

/// `ConfigError`: a bad value given by the caller.
pub(crate) fn config_error(message: String) -> PyErr {
    raise("ConfigError", message, &[])
}

/// A library error as its Python exception.
pub(crate) fn to_py(e: banklease::Error) -> PyErr {
    use banklease::Error as E;
    let message = e.to_string();
    let transient = e.is_transient();
    match e {
        E::Config { .. } | E::InvalidWindows { .. } => raise("ConfigError", message, &[]),
        E::InvalidUrl { url, .. } => raise("ConfigError", message, &[("url", Attr::Str(url))]),
        E::InvalidId {
            kind,
            given,
            reason,
        } => raise(
            "InvalidId",
            message,
            &[
                ("kind", Attr::Str(kind.into())),
                ("id", Attr::Str(given)),
                ("reason", Attr::Str(reason.into())),
            ],
        ),
        E::Store { op, path, source } => {
            let detail = banklease::error_chain(&source);
            raise(
                "StoreError",
                message,
                &[
                    ("op", Attr::Str(op.into())),
                    ("path", Attr::Str(path.to_string())),
                    ("transient", Attr::Bool(transient)),
                    ("detail", Attr::Str(detail)),
                ],
            )
        }
        E::UnknownLayout { bank, .. } | E::NotABank { bank, .. } | E::NoBank { bank, .. } => {
            raise("LayoutError", message, &[("bank", Attr::Str(bank))])
        }
        E::LeaseExists { owner_id } => raise(
            "LeaseExists",
            message,
            &[("owner_id", Attr::Str(owner_id.to_string()))],
        ),
        E::LeaseLost { owner_id, reason } => raise(
            "LeaseLost",
            message,
            &[
                ("owner_id", Attr::Str(owner_id.to_string())),
                ("reason", Attr::Str(reason)),
            ],
        ),
        E::ValidityTooShort {
            owner_id,
            remaining,
            validity_window,
        } => raise(
            "NotValid",
            message,
            &[
                ("owner_id", Attr::Str(owner_id.to_string())),
                ("remaining", Attr::Secs(remaining)),
                ("validity_window", Attr::Secs(validity_window)),
            ],
        ),
        E::Unsupported { bank, usage, .. } => raise(
            "Unsupported",
            message,
            &[
                ("bank", Attr::Str(bank)),
                ("usage", Attr::Str(usage.into())),
            ],
        ),
        E::Fenced {
            checkpoint_id,
            decided_by,
            outcome,
        } => raise(
            "Fenced",
            message,
            &[
                ("checkpoint_id", Attr::Str(checkpoint_id)),
                ("decided_by", Attr::Str(decided_by)),
                ("outcome", Attr::Str(outcome)),
            ],
        ),
        E::CheckpointExists { checkpoint_id } => raise(
            "CheckpointExists",
            message,
            &[("checkpoint_id", Attr::Str(checkpoint_id))],
        ),
        E::CheckpointAmbiguous { checkpoint_id } => raise(
            "CheckpointAmbiguous",
            message,
            &[("checkpoint_id", Attr::Str(checkpoint_id))],
        ),
        E::ClockStep {
            step, direction, ..
        } => raise(
            "ClockStep",
            message,
            &[
                ("step", Attr::Secs(step)),
                ("direction", Attr::Str(direction.into())),
            ],
        ),
        E::Corrupt { path, .. } => raise(
            "CorruptObject",
            message,
            &[("path", Attr::Str(path.to_string()))],
        ),
        // Named locks are not in the Python API; any later variant lands here too.
        _ => raise("BankleaseError", message, &[]),
    }
}
