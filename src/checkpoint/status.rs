//! A checkpoint's status and who decided it: leaf types, which the error module names
//! ([`crate::Error::Fenced`]) without an import circle, so parsing a status fails with its own
//! [`UnknownStatus`] (a [`crate::Error::Config`] once converted).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Checkpoint statuses, as in the original design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Being written by its owner.
    Protecting,
    /// Completed by its owner.
    Available,
    /// Failed; completed by its owner as failed.
    Error,
    /// Being deleted (by the GC, or by a service).
    Deleting,
    /// Deleted.
    Deleted,
    /// Deletion failed.
    ErrorDeleting,
}

impl Status {
    /// The status as written in JSON and on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Protecting => "protecting",
            Status::Available => "available",
            Status::Error => "error",
            Status::Deleting => "deleting",
            Status::Deleted => "deleted",
            Status::ErrorDeleting => "error-deleting",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, UnknownStatus> {
        Ok(match s {
            "protecting" => Status::Protecting,
            "available" => Status::Available,
            "error" => Status::Error,
            "deleting" => Status::Deleting,
            "deleted" => Status::Deleted,
            "error-deleting" => Status::ErrorDeleting,
            _ => {
                return Err(UnknownStatus {
                    given: s.to_owned(),
                })
            }
        })
    }
}

/// A status that is none of [`Status`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus {
    /// What was given.
    pub given: String,
}

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown checkpoint status `{}`; use protecting, available, error, deleting, deleted \
             or error-deleting",
            self.given
        )
    }
}

impl std::error::Error for UnknownStatus {}

/// Who took the decision on a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decider {
    /// The owner completed it (`available` or `error`).
    Owner,
    /// The GC collected it.
    Gc,
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Decider::Owner => "owner",
            Decider::Gc => "gc",
        })
    }
}
