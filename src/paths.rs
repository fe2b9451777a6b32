//! Every key of the bank's layout, built and parsed here and nowhere else.
//!
//! Invariant: a path banklease writes or deletes comes from [`Key::path`] or [`Prefix::path`],
//! and a listed path is only acted on once [`Key::parse`] has read it back as the kind of key the
//! caller expects, with every id in it valid. So a stray object (someone else's file, a key with
//! one segment too many) is never mistaken for one of banklease's, and the layout can change in
//! one place. The property test below checks that every key round-trips.

use object_store::path::{Path, PathPart};

use crate::id::{validate_id, CheckpointId, InvalidId, OwnerId};

/// What the layout's keys live under: a [`crate::Bank`] (its root prefix), or a bare prefix.
pub trait Prefixed {
    /// The root every key is joined to.
    fn root(&self) -> &Path;
}

impl Prefixed for Path {
    fn root(&self) -> &Path {
        self
    }
}

/// The bank's descriptor (see [`crate::layout`]).
pub const DESCRIPTOR: &str = "banklease.json";

/// Top-level names of a bank's own objects: a prefix holding only these is a bank.
pub const BANK_ENTRIES: &[&str] = &[
    DESCRIPTOR,
    "leases",
    "index",
    "checkpoints",
    "decisions",
    "gc",
    "locks",
    "fenced",
    "_banklease",
];

/// What a lock's wait queue adds to its key (`locks/<namespace>/<key>.queue/`).
pub const QUEUE_SUFFIX: &str = ".queue";

/// The longest lock key, in bytes: one object name, whose wait queue directory adds `.queue`,
/// within the 255 bytes a file name may have on `file:` banks.
pub const MAX_LOCK_KEY_BYTES: usize = 240;

/// The length of a queue ticket's name: zero-padded decimal, so names sort as numbers.
pub(crate) const TICKET_DIGITS: usize = 20;

/// One object of the layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Key {
    /// `banklease.json`
    Descriptor,
    /// `leases/<owner>`
    Lease(OwnerId),
    /// `index/protecting/<owner>/<checkpoint>`: the owner's marker of a protecting checkpoint.
    Marker {
        owner: OwnerId,
        checkpoint: CheckpointId,
    },
    /// `index/sweep/<checkpoint>`: a collected checkpoint the late sweep visits again.
    SweepMarker(CheckpointId),
    /// `index/failed/<checkpoint>`: a checkpoint its owner completed as `error`, written when
    /// the move is finished; its stamp (the store's clock) starts `gc.keep_failed_for`.
    Failed(CheckpointId),
    /// `checkpoints/<checkpoint>/index.json`
    Index(CheckpointId),
    /// `checkpoints/<checkpoint>/data/<name>`
    Data {
        checkpoint: CheckpointId,
        name: String,
    },
    /// `decisions/<checkpoint>`
    Decision(CheckpointId),
    /// `gc/active`: the lease of the active collector.
    GcActive,
    /// `gc/clock-floor`: the highest store time a collector has seen.
    GcClockFloor,
    /// `gc/clock-steps`: the store-clock steps forward collectors confirmed, with their sizes,
    /// so that a retention measured on the store's clock (`gc.keep_failed_for`) does not count
    /// them.
    GcClockSteps,
    /// `gc/clock-hosts/<host>`: a collector's last store-clock reading on one host's boot clock
    /// (`<host>` names the boot and the time namespace), so that a one-shot pass there can tell
    /// a step since.
    GcClockHost(String),
    /// `gc/missing/<owner>`: when a collector first found `owner`'s lease missing.
    GcMissing(OwnerId),
    /// `gc/reaped/<owner>`: why a collector deleted `owner`'s lease (the evidence it judged).
    GcReaped(OwnerId),
    /// `_banklease/clock/<probe>`: a store-clock probe: one writer's bank handle's, or one
    /// host's read commands' (`host-<16 hex digits>`).
    ClockProbe(String),
    /// `_banklease/probe/<id>`: a capability probe's scratch object.
    Probe(String),
    /// `_banklease/store.json`: what the probes learnt about the store, for every process.
    Learnt,
    /// `_banklease/race/<id>`: a race probe's scratch object.
    Race(String),
    /// `_banklease/set-aside/<name>`: the bytes of a record an operator's repair replaced.
    SetAside(String),
    /// `locks/<namespace>/<key>`
    Lock { namespace: String, key: String },
    /// `locks/<namespace>/<key>.queue/<ticket>`
    Ticket {
        namespace: String,
        key: String,
        ticket: String,
    },
    /// `fenced/<object>`: an object written by a fenced write from a shell (`banklease lock
    /// put`); `<object>` is `/`-separated segments.
    Fenced(String),
}

/// A directory of the layout, for listings and cleanups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Prefix<'a> {
    /// `leases/`
    Leases,
    /// `index/protecting/`
    Protecting,
    /// `index/protecting/<owner>/`
    OwnerMarkers(&'a OwnerId),
    /// `index/sweep/`
    Sweep,
    /// `index/failed/`
    Failed,
    /// `checkpoints/`
    Checkpoints,
    /// `checkpoints/<checkpoint>/`
    Checkpoint(&'a CheckpointId),
    /// `checkpoints/<checkpoint>/data/`
    Data(&'a CheckpointId),
    /// `gc/missing/`
    GcMissing,
    /// `gc/reaped/`
    GcReaped,
    /// `gc/clock-hosts/`
    GcClockHosts,
    /// `_banklease/clock/`
    ClockProbes,
    /// `_banklease/doctor/<run>/`: one `doctor` run's scratch objects.
    Doctor(&'a str),
    /// `locks/<namespace>/`
    Locks(&'a str),
    /// `locks/<namespace>/<key>.queue/`
    Queue { namespace: &'a str, key: &'a str },
}

fn join<B: Prefixed + ?Sized>(bank: &B, parts: &[&str]) -> Path {
    let mut path = bank.root().clone();
    for part in parts {
        path = path.join(PathPart::from(*part));
    }
    path
}

fn queue_dir(key: &str) -> String {
    format!("{}{QUEUE_SUFFIX}", stored_lock_key(key))
}

impl Key {
    /// `index/protecting/<owner>/<checkpoint>`.
    pub fn marker(owner: &OwnerId, checkpoint: &CheckpointId) -> Key {
        Key::Marker {
            owner: owner.clone(),
            checkpoint: checkpoint.clone(),
        }
    }

    /// Where this object is in `bank`.
    pub fn path<B: Prefixed + ?Sized>(&self, bank: &B) -> Path {
        match self {
            Key::Descriptor => join(bank, &[DESCRIPTOR]),
            Key::Lease(owner) => join(bank, &["leases", owner.as_str()]),
            Key::Marker { owner, checkpoint } => join(
                bank,
                &["index", "protecting", owner.as_str(), checkpoint.as_str()],
            ),
            Key::SweepMarker(id) => join(bank, &["index", "sweep", id.as_str()]),
            Key::Failed(id) => join(bank, &["index", "failed", id.as_str()]),
            Key::Index(id) => join(bank, &["checkpoints", id.as_str(), "index.json"]),
            Key::Data { checkpoint, name } => {
                join(bank, &["checkpoints", checkpoint.as_str(), "data", name])
            }
            Key::Decision(id) => join(bank, &["decisions", id.as_str()]),
            Key::GcActive => join(bank, &["gc", "active"]),
            Key::GcClockFloor => join(bank, &["gc", "clock-floor"]),
            Key::GcClockSteps => join(bank, &["gc", "clock-steps"]),
            Key::GcClockHost(host) => join(bank, &["gc", "clock-hosts", host]),
            Key::GcMissing(owner) => join(bank, &["gc", "missing", owner.as_str()]),
            Key::GcReaped(owner) => join(bank, &["gc", "reaped", owner.as_str()]),
            Key::ClockProbe(probe) => join(bank, &["_banklease", "clock", probe]),
            Key::Probe(id) => join(bank, &["_banklease", "probe", id]),
            Key::Learnt => join(bank, &["_banklease", "store.json"]),
            Key::Race(id) => join(bank, &["_banklease", "race", id]),
            Key::SetAside(name) => join(bank, &["_banklease", "set-aside", name]),
            Key::Lock { namespace, key } => {
                join(bank, &["locks", namespace, &stored_lock_key(key)])
            }
            Key::Fenced(object) => {
                let mut parts = vec!["fenced"];
                parts.extend(object.split('/'));
                join(bank, &parts)
            }
            Key::Ticket {
                namespace,
                key,
                ticket,
            } => join(bank, &["locks", namespace, &queue_dir(key), ticket]),
        }
    }

    /// Read `path` back as a key of `bank`'s layout: `None` for anything else (outside the bank,
    /// an unknown directory, a segment too many or too few, an invalid id).
    pub fn parse<B: Prefixed + ?Sized>(bank: &B, path: &Path) -> Option<Key> {
        let rest: Vec<PathPart<'_>> = path.prefix_match(bank.root())?.collect();
        let parts: Vec<&str> = rest.iter().map(|p| p.as_ref()).collect();
        let id = |s: &str| CheckpointId::parse(s).ok();
        let owner = |s: &str| OwnerId::parse(s).ok();
        let key = match parts.as_slice() {
            [DESCRIPTOR] => Key::Descriptor,
            ["leases", o] => Key::Lease(owner(o)?),
            ["index", "protecting", o, c] => Key::Marker {
                owner: owner(o)?,
                checkpoint: id(c)?,
            },
            ["index", "sweep", c] => Key::SweepMarker(id(c)?),
            ["index", "failed", c] => Key::Failed(id(c)?),
            ["checkpoints", c, "index.json"] => Key::Index(id(c)?),
            ["checkpoints", c, "data", n] => Key::Data {
                checkpoint: id(c)?,
                name: validate_id("data object", n).ok().map(|()| n.to_string())?,
            },
            ["decisions", c] => Key::Decision(id(c)?),
            ["gc", "active"] => Key::GcActive,
            ["gc", "clock-floor"] => Key::GcClockFloor,
            ["gc", "clock-steps"] => Key::GcClockSteps,
            ["gc", "clock-hosts", h] => Key::GcClockHost(h.to_string()),
            ["gc", "missing", o] => Key::GcMissing(owner(o)?),
            ["gc", "reaped", o] => Key::GcReaped(owner(o)?),
            ["_banklease", "clock", p] => Key::ClockProbe(p.to_string()),
            ["_banklease", "probe", p] => Key::Probe(p.to_string()),
            ["_banklease", "store.json"] => Key::Learnt,
            ["_banklease", "race", p] => Key::Race(p.to_string()),
            ["_banklease", "set-aside", n] => Key::SetAside(n.to_string()),
            ["locks", ns, q, t] => {
                let key = valid_lock(ns, q.strip_suffix(QUEUE_SUFFIX)?)?;
                let ticket_ok = t.len() == TICKET_DIGITS && t.bytes().all(|b| b.is_ascii_digit());
                ticket_ok.then(|| Key::Ticket {
                    namespace: ns.to_string(),
                    key,
                    ticket: t.to_string(),
                })?
            }
            ["locks", ns, k] => Key::Lock {
                namespace: ns.to_string(),
                key: valid_lock(ns, k)?,
            },
            ["fenced", object @ ..] if !object.is_empty() => {
                let object = object.join("/");
                validate_fenced_object(&object).ok()?;
                Key::Fenced(object)
            }
            _ => return None,
        };
        Some(key)
    }
}

/// What stands for `/` in a lock key's stored name: one path segment per key, so `jobs` and
/// `jobs/nightly` are two objects side by side (not a file and a directory on `file:` banks),
/// and a character no key segment may hold, so the name reads back as exactly one key.
const KEY_SEPARATOR_STORED: char = '@';

/// A lock key's object name: `jobs/nightly` is stored as `jobs@nightly`.
fn stored_lock_key(key: &str) -> String {
    key.replace('/', &KEY_SEPARATOR_STORED.to_string())
}

/// A lock's namespace and key as [`crate::lock::Locks`] accepts them, from a listed object
/// name (`jobs@nightly`): the key (`jobs/nightly`), when valid.
fn valid_lock(namespace: &str, stored: &str) -> Option<String> {
    validate_id("lock namespace", namespace).ok()?;
    let key = stored.replace(KEY_SEPARATOR_STORED, "/");
    validate_lock_key(&key).ok()?;
    Some(key)
}

/// Check a lock key: one or more `/`-separated segments (`jobs/nightly`) of ASCII letters,
/// digits, `-`, `_` and `.`, none empty, `.` or `..`; at most [`MAX_LOCK_KEY_BYTES`]; not
/// ending with [`QUEUE_SUFFIX`]. Each key is one object (see [`KEY_SEPARATOR_STORED`]).
///
/// Fails with an [`InvalidId`] (not a [`crate::Error`], which it converts into) so that the
/// error module may name the lock names built on this check without an import circle.
pub fn validate_lock_key(key: &str) -> Result<(), InvalidId> {
    let segment_ok = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    let reason = if key.is_empty() {
        Some("it is empty")
    } else if key.starts_with('/') {
        // Written as the lock file it replaces (`/var/lock/backup.lock`): say what was meant.
        let meant = key.trim_matches('/');
        let meant = meant.strip_suffix(".lock").unwrap_or(meant);
        return Err(InvalidId {
            kind: "lock key",
            given: key.escape_debug().take(80).collect(),
            reason: format!(
                "it begins with `/`: a key names a lock, not a lock file; write it without the \
                 `/` (and without `.lock`), e.g. `{}`",
                meant.escape_debug().take(80).collect::<String>()
            )
            .into(),
        });
    } else if key.len() > MAX_LOCK_KEY_BYTES {
        Some("it is longer than 240 bytes")
    } else if key.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if key.split('/').any(str::is_empty) {
        Some("it has an empty segment (`//`, or a `/` at either end)")
    } else if key.split('/').any(|s| s == "." || s == "..") {
        Some("it has a `.` or `..` segment")
    } else if !key.split('/').all(segment_ok) {
        Some("each `/`-separated segment may hold only ASCII letters, digits, `-`, `_` and `.`")
    } else if key.ends_with(QUEUE_SUFFIX) {
        Some("it ends with `.queue`, which names wait queues")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(InvalidId {
            kind: "lock key",
            given: key.escape_debug().take(80).collect(),
            reason: reason.into(),
        }),
    }
}

/// Check the name of a fenced object (`reports/nightly.json`, stored as
/// `fenced/reports/nightly.json`): `/`-separated segments as lock keys have them, not ending
/// with `.fence` (which names a guarded object's sidecar).
pub fn validate_fenced_object(object: &str) -> Result<(), InvalidId> {
    let refuse = |reason: &'static str| InvalidId {
        kind: "object",
        given: object.escape_debug().take(80).collect(),
        reason: reason.into(),
    };
    validate_lock_key(object).map_err(|_| {
        refuse(
            "it must be `/`-separated segments of ASCII letters, digits, `-`, `_` and `.` (none \
             empty, `.` or `..`), at most 240 bytes",
        )
    })?;
    if object.ends_with(".fence") {
        return Err(refuse("`.fence` names the sidecar of a guarded object"));
    }
    Ok(())
}

impl Prefix<'_> {
    /// Where this directory is in `bank`.
    pub fn path<B: Prefixed + ?Sized>(&self, bank: &B) -> Path {
        match *self {
            Prefix::Leases => join(bank, &["leases"]),
            Prefix::Protecting => join(bank, &["index", "protecting"]),
            Prefix::OwnerMarkers(owner) => join(bank, &["index", "protecting", owner.as_str()]),
            Prefix::Sweep => join(bank, &["index", "sweep"]),
            Prefix::Failed => join(bank, &["index", "failed"]),
            Prefix::Checkpoints => join(bank, &["checkpoints"]),
            Prefix::Checkpoint(id) => join(bank, &["checkpoints", id.as_str()]),
            Prefix::Data(id) => join(bank, &["checkpoints", id.as_str(), "data"]),
            Prefix::GcMissing => join(bank, &["gc", "missing"]),
            Prefix::GcReaped => join(bank, &["gc", "reaped"]),
            Prefix::GcClockHosts => join(bank, &["gc", "clock-hosts"]),
            Prefix::ClockProbes => join(bank, &["_banklease", "clock"]),
            Prefix::Doctor(run) => join(bank, &["_banklease", "doctor", run]),
            Prefix::Locks(namespace) => join(bank, &["locks", namespace]),
            Prefix::Queue { namespace, key } => join(bank, &["locks", namespace, &queue_dir(key)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_-][A-Za-z0-9._-]{0,40}"
    }

    fn owner() -> impl Strategy<Value = OwnerId> {
        id().prop_map(|s| OwnerId::parse(&s).unwrap())
    }

    fn checkpoint() -> impl Strategy<Value = CheckpointId> {
        id().prop_map(|s| CheckpointId::parse(&s).unwrap())
    }

    /// Path-like keys: one to three `/`-separated segments.
    fn lock_key() -> impl Strategy<Value = String> {
        proptest::collection::vec("[A-Za-z0-9._-]{1,12}", 1..4)
            .prop_map(|segments| segments.join("/"))
            .prop_filter("valid", |k| validate_lock_key(k).is_ok())
    }

    fn key() -> impl Strategy<Value = Key> {
        prop_oneof![
            Just(Key::Descriptor),
            owner().prop_map(Key::Lease),
            (owner(), checkpoint())
                .prop_map(|(owner, checkpoint)| Key::Marker { owner, checkpoint }),
            checkpoint().prop_map(Key::SweepMarker),
            checkpoint().prop_map(Key::Failed),
            checkpoint().prop_map(Key::Index),
            (checkpoint(), id()).prop_map(|(checkpoint, name)| Key::Data { checkpoint, name }),
            checkpoint().prop_map(Key::Decision),
            Just(Key::GcActive),
            Just(Key::GcClockFloor),
            Just(Key::GcClockSteps),
            id().prop_map(Key::GcClockHost),
            owner().prop_map(Key::GcMissing),
            owner().prop_map(Key::GcReaped),
            id().prop_map(Key::ClockProbe),
            id().prop_map(Key::Probe),
            id().prop_map(Key::Race),
            id().prop_map(Key::SetAside),
            (id(), lock_key()).prop_map(|(namespace, key)| Key::Lock { namespace, key }),
            lock_key()
                .prop_filter("not a sidecar", |o| !o.ends_with(".fence"))
                .prop_map(Key::Fenced),
            (id(), lock_key(), 0u64..u64::MAX).prop_map(|(namespace, key, n)| Key::Ticket {
                namespace,
                key,
                ticket: format!("{n:0TICKET_DIGITS$}"),
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_key_round_trips(key in key(), prefix in "(|[a-z]{1,8}(/[a-z0-9]{1,8}){0,2})") {
            let bank = Path::from(prefix.as_str());
            let path = key.path(&bank);
            prop_assert_eq!(Key::parse(&bank, &path), Some(key.clone()));
            // Nothing outside the bank is read as one of its keys.
            let other = Path::from(format!("elsewhere/{prefix}"));
            prop_assert_eq!(Key::parse(&bank, &key.path(&other)), None);
        }

        #[test]
        fn a_key_is_inside_its_directory(owner in owner(), c in checkpoint(), ns in id(), k in lock_key()) {
            let bank = Path::from("b");
            let inside = |key: Key, prefix: Prefix<'_>| {
                key.path(&bank).prefix_match(&prefix.path(&bank)).map(|r| r.count())
            };
            prop_assert_eq!(inside(Key::Lease(owner.clone()), Prefix::Leases), Some(1));
            let marker = Key::Marker { owner: owner.clone(), checkpoint: c.clone() };
            prop_assert_eq!(inside(marker.clone(), Prefix::OwnerMarkers(&owner)), Some(1));
            prop_assert_eq!(inside(marker, Prefix::Protecting), Some(2));
            prop_assert_eq!(inside(Key::SweepMarker(c.clone()), Prefix::Sweep), Some(1));
            prop_assert_eq!(inside(Key::Failed(c.clone()), Prefix::Failed), Some(1));
            prop_assert_eq!(inside(Key::Index(c.clone()), Prefix::Checkpoint(&c)), Some(1));
            let data = Key::Data { checkpoint: c.clone(), name: k.clone() };
            prop_assert_eq!(inside(data, Prefix::Data(&c)), Some(1));
            prop_assert_eq!(inside(Key::GcMissing(owner.clone()), Prefix::GcMissing), Some(1));
            prop_assert_eq!(inside(Key::GcReaped(owner.clone()), Prefix::GcReaped), Some(1));
            prop_assert_eq!(inside(Key::ClockProbe(c.to_string()), Prefix::ClockProbes), Some(1));
            prop_assert_eq!(inside(Key::GcClockHost(c.to_string()), Prefix::GcClockHosts), Some(1));
            let lock = Key::Lock { namespace: ns.clone(), key: k.clone() };
            prop_assert_eq!(inside(lock, Prefix::Locks(&ns)), Some(1));
            let ticket = Key::Ticket { namespace: ns.clone(), key: k.clone(), ticket: "0".repeat(20) };
            prop_assert_eq!(inside(ticket, Prefix::Queue { namespace: &ns, key: &k }), Some(1));
        }
    }

    #[test]
    fn lock_keys_are_path_like_and_refused_with_the_rule_they_break() {
        for ok in [
            "nightly",
            "jobs/nightly",
            "backup/db-1",
            "a/b/c",
            ".hidden/x",
        ] {
            assert!(validate_lock_key(ok).is_ok(), "{ok}");
        }
        for (bad, rule) in [
            ("", "empty"),
            (
                "/jobs",
                "begins with `/`: a key names a lock, not a lock file",
            ),
            ("jobs/", "empty segment"),
            ("jobs//nightly", "empty segment"),
            ("jobs/./x", "`.` or `..`"),
            ("jobs/..", "`.` or `..`"),
            ("jobs/\tab", "control character"),
            ("a\u{7f}", "control character"),
            ("k.queue", "`.queue`"),
            ("jobs/a@b", "only ASCII letters"),
            ("é/x", "only ASCII letters"),
        ] {
            let e = validate_lock_key(bad).unwrap_err().to_string();
            assert!(e.contains(rule), "{bad:?}: {e}");
        }
        let long = "x".repeat(MAX_LOCK_KEY_BYTES + 1);
        assert!(validate_lock_key(&long)
            .unwrap_err()
            .to_string()
            .contains("240 bytes"));
        // Two locks, not a file and a directory: one path segment each.
        let bank = Path::from("b");
        let jobs = Key::Lock {
            namespace: "ns".into(),
            key: "jobs".into(),
        }
        .path(&bank);
        let nightly = Key::Lock {
            namespace: "ns".into(),
            key: "jobs/nightly".into(),
        }
        .path(&bank);
        assert_eq!(nightly.as_ref(), "b/locks/ns/jobs@nightly");
        assert!(nightly.prefix_match(&jobs).is_none());
    }

    #[test]
    fn strays_are_not_keys() {
        let bank = Path::from("b");
        for stray in [
            "b/leases",
            "b/leases/a/b",
            "b/leases/.hidden",
            "b/index/protecting/owner",
            "b/index/protecting/owner/c/extra",
            "b/checkpoints/c/index.json/x",
            "b/checkpoints/c/other.json",
            "b/decisions",
            "b/gc/missing",
            "b/gc/other",
            "b/locks/ns/k.queue/12",
            "b/locks/ns/k.queue",
            "b/notes.txt",
            "other/leases/x",
        ] {
            assert_eq!(Key::parse(&bank, &Path::from(stray)), None, "{stray}");
        }
        // Stored names that are no key: an empty or `..` segment, a `/` escaped by the store.
        for stray in [
            "b/locks/ns/a@@b",
            "b/locks/ns/@a",
            "b/locks/ns/a@..",
            "b/locks/ns/a%2Fb",
        ] {
            let path = Path::parse(stray).unwrap();
            assert_eq!(Key::parse(&bank, &path), None, "{stray}");
        }
    }
}
