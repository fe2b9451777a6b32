//! Typed names of locks and of who keeps them, as errors and fencing tokens carry them.
//!
//! Needs nothing of the error module (which names these types): failures are
//! [`InvalidId`]s, which convert into [`crate::Error::InvalidId`].

use std::fmt;

use crate::id::{validate_id, InvalidId, OwnerId};
use crate::paths::validate_lock_key;

/// A lock's name: its namespace and its key, printed `<namespace>/<key>` (`jobs/nightly/db`
/// is key `nightly/db` in namespace `jobs`: a namespace holds no `/`). Both parts are valid
/// (see [`LockName::new`]); serialised as the printed string.
///
/// ```
/// use banklease::lock::LockName;
/// let name = LockName::new("jobs", "nightly/db").unwrap();
/// assert_eq!(name.to_string(), "jobs/nightly/db");
/// assert_eq!(LockName::parse("jobs/nightly/db").unwrap(), name);
/// assert!(LockName::parse("jobs").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName {
    namespace: String,
    key: String,
}

impl LockName {
    /// The lock `key` of `namespace`: the namespace an id (see [`validate_id`]), the key as
    /// [`validate_lock_key`] accepts it.
    pub fn new(namespace: &str, key: &str) -> Result<Self, InvalidId> {
        validate_id("namespace", namespace)?;
        validate_lock_key(key)?;
        Ok(Self::of_valid(namespace, key))
    }

    /// A name whose parts the caller has already validated.
    pub(crate) fn of_valid(namespace: &str, key: &str) -> Self {
        debug_assert!(validate_id("namespace", namespace).is_ok(), "{namespace}");
        debug_assert!(validate_lock_key(key).is_ok(), "{key}");
        Self {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
        }
    }

    /// Parse `<namespace>/<key>`, as printed.
    pub fn parse(name: &str) -> Result<Self, InvalidId> {
        match name.split_once('/') {
            Some((namespace, key)) => Self::new(namespace, key),
            None => Err(InvalidId {
                kind: "lock name",
                given: name.escape_debug().take(80).collect(),
                reason: "it is not `<namespace>/<key>`".into(),
            }),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The key, without the namespace.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.key)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockName({self})")
    }
}

impl std::str::FromStr for LockName {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<Self, InvalidId> {
        Self::parse(s)
    }
}

impl PartialEq<str> for LockName {
    fn eq(&self, other: &str) -> bool {
        other.split_once('/') == Some((self.namespace.as_str(), self.key.as_str()))
    }
}

impl PartialEq<&str> for LockName {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl serde::Serialize for LockName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for LockName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        LockName::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The locks an operation was about: one, or every key of an acquire-any, in the order tried.
/// Printed joined by `,` (`t/k1,t/k2`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockNames(Vec<LockName>);

impl LockNames {
    /// The names, in order.
    pub fn names(&self) -> &[LockName] {
        &self.0
    }
}

impl From<LockName> for LockNames {
    fn from(name: LockName) -> Self {
        Self(vec![name])
    }
}

impl FromIterator<LockName> for LockNames {
    fn from_iter<I: IntoIterator<Item = LockName>>(names: I) -> Self {
        Self(names.into_iter().collect())
    }
}

impl fmt::Display for LockNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}")?;
        }
        Ok(())
    }
}

/// Who keeps a lock from the caller, as [`crate::Error::Unavailable`] says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockHolder {
    /// Held by this holder (an owner name, with its session for `lock run`; see
    /// [`crate::lock::session::session_holder`]). Printed as the name.
    Held(OwnerId),
    /// Free, but promised to this waiter, the first live one in the key's wait queue. Printed as
    /// `<waiter> (first in the wait queue)`.
    Promised(OwnerId),
    /// The lock object kept changing for several rounds, and who holds it was not seen. Printed
    /// as `(contended)`.
    Contended,
    /// The wait queue kept changing for several rounds, and no ticket could be taken. Printed
    /// as `(wait queue contended)`.
    QueueContended,
    /// Held by a `lock run` whose processes are not proved gone: not taken over nor released
    /// by the holder's name, only by its fencing token. Printed as `<holder> (its `lock run`,
    /// pid PID on host HOST, still runs)`.
    Running {
        holder: OwnerId,
        /// The supervisor's pid.
        pid: u32,
        /// The supervisor's host.
        host: String,
    },
    /// Free — released from under its holder by its token — but a process of that holder's
    /// tree still runs on this host: the lock is not taken beside it. Printed as `(released;
    /// its last holder's process PID still runs on this host)`.
    Freed {
        /// The process waited for.
        pid: u32,
    },
    /// Expired, but a process of this holder's tree still runs on this host: the lock is not
    /// taken beside it. Printed as `<holder> (expired; its process PID still runs on this
    /// host)`.
    Lingering {
        holder: OwnerId,
        /// The process waited for.
        pid: u32,
    },
}

impl LockHolder {
    /// The holder, or the waiter the lock is promised to; `None` when contended.
    pub fn owner(&self) -> Option<&OwnerId> {
        match self {
            LockHolder::Held(o)
            | LockHolder::Promised(o)
            | LockHolder::Running { holder: o, .. }
            | LockHolder::Lingering { holder: o, .. } => Some(o),
            LockHolder::Contended | LockHolder::QueueContended | LockHolder::Freed { .. } => None,
        }
    }

    /// Whether the lock is free but promised to an earlier waiter (rather than held).
    pub fn is_promised(&self) -> bool {
        matches!(self, LockHolder::Promised(_))
    }
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockHolder::Held(o) => write!(f, "{o}"),
            LockHolder::Promised(o) => write!(f, "{o} (first in the wait queue)"),
            LockHolder::Contended => f.write_str("(contended)"),
            LockHolder::QueueContended => f.write_str("(wait queue contended)"),
            LockHolder::Running { holder, pid, host } => write!(
                f,
                "{holder} (its `lock run`, pid {pid} on host {host}, still runs)"
            ),
            LockHolder::Freed { pid } => write!(
                f,
                "(released; its last holder's process {pid} still runs on this host)"
            ),
            LockHolder::Lingering { holder, pid } => write!(
                f,
                "{holder} (expired; its process {pid} still runs on this host)"
            ),
        }
    }
}

impl LockHolder {
    /// As [`Display`](fmt::Display), with the holder's name in backticks (and nothing else:
    /// one level of quotes in a message's `key=\`value\`` style).
    pub fn quoted(&self) -> String {
        match self {
            LockHolder::Held(o) => format!("`{o}`"),
            LockHolder::Promised(o) => format!("`{o}` (first in the wait queue)"),
            LockHolder::Running { holder, pid, host } => {
                format!("`{holder}` (its lock run, pid {pid} on host {host}, still runs)")
            }
            LockHolder::Lingering { holder, pid } => {
                format!("`{holder}` (expired; its process {pid} still runs on this host)")
            }
            other => other.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_quoted_once() {
        let o = OwnerId::parse("o.s").unwrap();
        let running = LockHolder::Running {
            holder: o.clone(),
            pid: 7,
            host: "h".into(),
        };
        assert_eq!(
            running.quoted(),
            "`o.s` (its lock run, pid 7 on host h, still runs)"
        );
        assert_eq!(LockHolder::Held(o).quoted(), "`o.s`");
        assert_eq!(LockHolder::Contended.quoted(), "(contended)");
    }

    #[test]
    fn a_lock_name_prints_parses_and_serialises_as_namespace_slash_key() {
        let name = LockName::new("jobs", "nightly/db").unwrap();
        assert_eq!(name.to_string(), "jobs/nightly/db");
        assert_eq!((name.namespace(), name.key()), ("jobs", "nightly/db"));
        assert_eq!(LockName::parse("jobs/nightly/db").unwrap(), name);
        assert!(name == "jobs/nightly/db");
        assert!(name != "jobs/nightly");
        let json = serde_json::to_string(&name).unwrap();
        assert_eq!(json, "\"jobs/nightly/db\"");
        assert_eq!(serde_json::from_str::<LockName>(&json).unwrap(), name);
        for bad in [
            "jobs",
            "/k",
            "jobs/",
            "jo bs/k",
            "jobs/a//b",
            "jobs/k.queue",
        ] {
            assert!(LockName::parse(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<LockName>(&format!("\"{bad}\"")).is_err());
        }
        assert!(LockName::new("a/b", "k").is_err());
        let all: LockNames = ["k1", "k2"]
            .iter()
            .map(|k| LockName::new("t", k).unwrap())
            .collect();
        assert_eq!(all.to_string(), "t/k1,t/k2");
        assert_eq!(LockNames::from(name).to_string(), "jobs/nightly/db");
    }

    #[test]
    fn a_holder_prints_as_the_text_it_replaces() {
        let w = OwnerId::parse("w-1").unwrap();
        assert_eq!(LockHolder::Held(w.clone()).to_string(), "w-1");
        let promised = LockHolder::Promised(w.clone());
        assert_eq!(promised.to_string(), "w-1 (first in the wait queue)");
        assert!(promised.is_promised() && !LockHolder::Held(w.clone()).is_promised());
        assert_eq!(promised.owner(), Some(&w));
        assert_eq!(LockHolder::Contended.to_string(), "(contended)");
        assert_eq!(
            LockHolder::QueueContended.to_string(),
            "(wait queue contended)"
        );
        assert_eq!(LockHolder::Contended.owner(), None);
    }
}
