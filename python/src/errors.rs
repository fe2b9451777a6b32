//! The library's errors as Python exceptions.
//!
//! The classes live in `banklease/errors.py` (a hierarchy under `BankleaseError`, with
//! `ValueError` mixed in where the caller gave a bad value), chosen by the error's kind
//! (`banklease::ErrorKind`). Each exception keeps the library's message and gets its details as
//! attributes (`owner_id`, `checkpoint_id`, ...) and its kind as `error_kind`.

use std::time::Duration;

use pyo3::prelude::*;

/// Build an exception of class `name` from `banklease.errors` with `message` and `attrs`.
/// The attributes of a refusal that came before any one request: no `.op` or `.path`.
fn refused_before_a_request(bank: String, detail: String) -> Vec<(&'static str, Attr)> {
    vec![
        ("op", Attr::None),
        ("path", Attr::None),
        ("transient", Attr::Bool(false)),
        ("detail", Attr::Str(detail)),
        ("bank", Attr::Str(bank)),
    ]
}

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
            Attr::Int(n) => instance.setattr(*key, n)?,
            Attr::None => instance.setattr(*key, py.None())?,
        }
    }
    Ok(PyErr::from_value(instance))
}

enum Attr {
    Str(String),
    Secs(Duration),
    Bool(bool),
    Int(u32),
    None,
}

/// `BankleaseError`: a failure of the package itself.
pub(crate) fn error(message: String) -> PyErr {
    raise("BankleaseError", message, &[])
}

/// `ConfigError`: a bad value given by the caller.
pub(crate) fn config_error(message: String) -> PyErr {
    raise("ConfigError", message, &[])
}

/// A library error as its Python exception: the class is its kind's ([`class_of`]), the
/// message the library's, the details attributes, and `.error_kind` the kind's name
/// (`"transient"`, `"lost"`, ...; `InvalidId`'s `.kind` is the kind of id).
pub(crate) fn to_py(e: banklease::Error) -> PyErr {
    let kind = e.kind();
    let class = class_of(&e);
    let message = e.to_string();
    let mut attrs = details(e);
    attrs.push(("error_kind", Attr::Str(kind.as_str().to_owned())));
    raise(class, message, &attrs)
}

/// A collector's error as its Python exception: the library's as [`to_py`]; a pass refused
/// beside an active daemon as `CollectorActive` (`.holder`, `.holder_host`, `.holder_pid`).
pub(crate) fn gc_to_py(e: banklease_gc::Error) -> PyErr {
    use banklease_gc::Error as G;
    match e {
        G::Banklease(e) => to_py(e),
        G::Context(c) => to_py(c.source),
        G::ActiveElsewhere(a) => {
            let message = format!(
                "refusing a gc pass: the gc daemon holder=`{}`{} is active on bank=`{}` (it \
                 holds `gc/active`); let it collect, stop it first, or pass beside_daemon=True \
                 to run this pass beside it",
                a.holder,
                banklease_gc::run::host_pid(a.holder_host.as_deref(), a.holder_pid),
                a.bank
            );
            let opt = |v: Option<String>| v.map_or(Attr::None, Attr::Str);
            raise(
                "CollectorActive",
                message,
                &[
                    ("holder", Attr::Str(a.holder.to_string())),
                    ("holder_host", opt(a.holder_host)),
                    ("holder_pid", a.holder_pid.map_or(Attr::None, Attr::Int)),
                    ("error_kind", Attr::Str("unavailable".into())),
                ],
            )
        }
        G::LeasesUnsupported { .. } => raise("Unsupported", e.to_string(), &[]),
        other => error(other.to_string()),
    }
}

/// The class in `banklease/errors.py` of an error: the one its kind maps to; within a kind, the
/// subclass that names what failed where the Python hierarchy has one (`InvalidId`, and which
/// of a lease or a checkpoint exists).
fn class_of(e: &banklease::Error) -> &'static str {
    use banklease::{Error as E, ErrorKind as K};
    match e.kind() {
        K::InvalidInput => match e {
            E::InvalidId { .. } => "InvalidId",
            _ => "ConfigError",
        },
        K::NotABank => "LayoutError",
        // A definite answer, one that may go away (`.transient`), or a refusal of the
        // credentials: a store's answer each.
        K::Transient | K::Store | K::RefusedByStore => "StoreError",
        K::Lost => "LeaseLost",
        K::NotValid => "NotValid",
        K::Fenced => "Fenced",
        K::Unavailable => match e {
            E::LeaseExists { .. } => "LeaseExists",
            E::CheckpointExists { .. } => "CheckpointExists",
            E::CheckpointAmbiguous { .. } => "CheckpointAmbiguous",
            // A named lock held by someone else: locks are not in the Python API.
            _ => "BankleaseError",
        },
        K::Corrupt => "CorruptObject",
        K::Unsupported => "Unsupported",
        K::Clock => "ClockStep",
        // `Internal`, and kinds added later.
        _ => "BankleaseError",
    }
}

/// An error's details, as the attributes of its exception.
fn details(e: banklease::Error) -> Vec<(&'static str, Attr)> {
    use banklease::Error as E;
    let transient = e.is_transient();
    let s = |v: &str| Attr::Str(v.to_owned());
    let refusal = e.refusal();
    match e {
        E::InvalidUrl { url, .. } => vec![("url", Attr::Str(url))],
        E::InvalidId {
            kind,
            given,
            reason,
        } => vec![
            ("kind", s(kind)),
            ("id", Attr::Str(given)),
            ("reason", Attr::Str(reason.into_owned())),
        ],
        E::Store { op, path, source } => vec![
            ("op", s(op)),
            ("path", Attr::Str(path.to_string())),
            ("transient", Attr::Bool(transient)),
            ("detail", Attr::Str(banklease::error::error_chain(&source))),
        ],
        // Refused before any one request: no `.op` or `.path`.
        E::Permission { bank, .. } | E::ReadOnly { bank, .. } => {
            refused_before_a_request(bank, refusal.unwrap_or_default())
        }
        E::UnknownLayout { bank, .. }
        | E::NotABank { bank, .. }
        | E::NoDescriptor { bank, .. }
        | E::NoBank { bank, .. } => {
            vec![("bank", Attr::Str(bank))]
        }
        E::LeaseExists { owner_id, .. } => vec![("owner_id", Attr::Str(owner_id.to_string()))],
        E::LeaseLost { owner_id, reason } => vec![
            ("owner_id", Attr::Str(owner_id.to_string())),
            ("reason", Attr::Str(reason)),
        ],
        E::LockLost { key, owner, reason } => vec![
            ("key", Attr::Str(key.to_string())),
            ("owner", Attr::Str(owner.to_string())),
            ("reason", Attr::Str(reason)),
        ],
        E::ValidityTooShort {
            owner_id,
            remaining,
            validity_window,
        } => vec![
            ("owner_id", Attr::Str(owner_id.to_string())),
            ("remaining", Attr::Secs(remaining)),
            ("validity_window", Attr::Secs(validity_window)),
        ],
        E::Unsupported { bank, usage, .. } => {
            vec![("bank", Attr::Str(bank)), ("usage", s(usage))]
        }
        E::Fenced {
            checkpoint_id,
            decided_by,
            outcome,
        } => vec![
            ("checkpoint_id", Attr::Str(checkpoint_id.to_string())),
            ("decided_by", Attr::Str(decided_by.to_string())),
            ("outcome", Attr::Str(outcome.to_string())),
        ],
        E::CheckpointExists { checkpoint_id } | E::CheckpointAmbiguous { checkpoint_id } => {
            vec![("checkpoint_id", Attr::Str(checkpoint_id.to_string()))]
        }
        E::ClockStep {
            step, direction, ..
        } => vec![("step", Attr::Secs(step)), ("direction", s(direction))],
        E::ClockUnverified { bank, .. } => vec![("bank", Attr::Str(bank))],
        E::Corrupt { path, .. } => vec![("path", Attr::Str(path.to_string()))],
        _ => Vec::new(),
    }
}
