//! The library's error type.
//!
//! Every message is lowercase, says what went wrong and what to do next, and carries its details as
//! key=`value` pairs. The underlying cause is kept as `#[source]` and is not repeated in the message.

use std::time::Duration;

/// A specialised `Result` for banklease operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in banklease.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration could not be read or holds an invalid value.
    #[error("invalid configuration: {message}")]
    Config {
        /// What is wrong, naming the key and the file where known.
        message: String,
    },

    /// The lease windows break one of the ordering rules.
    #[error(
        "invalid lease windows: {rule} is violated ({detail}); change the windows (in a \
         configuration: lease.renew_window, lease.expire_window, lease.validity_window)"
    )]
    InvalidWindows {
        /// The rule that failed, e.g. `renew_window < expire_window`.
        rule: &'static str,
        /// The values and by how much the rule is missed.
        detail: String,
    },

    /// An identifier (owner id, checkpoint id, key) is not acceptable as part of an object path.
    #[error("invalid {kind} id=`{id}`: {reason}")]
    InvalidId {
        /// What kind of id: `owner`, `checkpoint`, ...
        kind: &'static str,
        /// The offending id, escaped and shortened for display.
        id: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// A bank URL could not be understood.
    #[error("invalid bank url=`{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it and what is accepted.
        reason: String,
    },

    /// A request to the object store failed.
    #[error(
        "store request failed: op=`{op}` path=`{path}`: {}",
        crate::store::cause::classify(.source)
    )]
    Store {
        /// The operation, e.g. `put`, `get`, `head`.
        op: &'static str,
        /// The object path.
        path: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },

    /// The bank's descriptor names a layout this release does not know.
    #[error(
        "bank=`{bank}` is in layout {found} (written by {created_by}), which this banklease \
         ({}) does not know (it knows layout {known}); use a release that knows layout {found}",
        env!("CARGO_PKG_VERSION")
    )]
    UnknownLayout {
        /// The bank.
        bank: String,
        /// The layout its descriptor names.
        found: u32,
        /// Who wrote the descriptor.
        created_by: String,
        /// The layout this release knows.
        known: u32,
    },

    /// The bank's prefix holds objects that are not a bank's (and no bank descriptor): every
    /// command, owner and collector refuses it, and `init` will not make it a bank.
    #[error(
        "refusing bank=`{bank}`: its prefix holds `{found}`, which is not a bank's; banklease \
         acts only on a bank or an empty prefix: choose an empty prefix (or the prefix of an \
         existing bank)"
    )]
    NotABank {
        /// The bank.
        bank: String,
        /// The first foreign name found.
        found: String,
    },

    /// Nothing at the bank's URL is a bank: no descriptor and no banklease object (a mistyped
    /// URL, or a bank not made yet). Every command, owner and collector refuses it, so that a
    /// typo never reads as a healthy empty bank.
    #[error(
        "no bank at bank=`{bank}`: {reason}; check the URL for a typo, or make a bank there \
         with `banklease --bank {bank} init`"
    )]
    NoBank {
        /// The bank.
        bank: String,
        /// What was found instead.
        reason: String,
    },

    /// A command needs the store's time with credentials that may only read, and the store
    /// gives it no other way: its answers carry no `Date`, or a `file:` bank's file system
    /// rounds its stamps.
    #[error(
        "read-only access to bank=`{bank}`: this command needs the store's time, which banklease \
         reads by writing a probe under `_banklease/clock/`, and the store refused the write \
         ({cause}); allow these credentials to write `_banklease/clock/`, or run the command with \
         credentials that may"
    )]
    ReadOnly {
        /// The bank.
        bank: String,
        /// The store's refusal, in one line.
        cause: String,
    },

    /// No bank URL was given: banklease has no default bank.
    #[error(
        "no bank given: pass --bank URL, set BANKLEASE_BANK=URL, or set [bank] url in the \
         configuration file (e.g. file:///var/lib/banklease; `banklease init` makes a new one)"
    )]
    NoBankGiven,

    /// The filesystem (or the store) refused an operation for lack of permission: the URL is
    /// fine, the user or the credentials may not do this.
    #[error(
        "permission denied on bank=`{bank}`: cannot {what}: {cause}; run as a user (or with \
         credentials) allowed to, or use a command that only reads"
    )]
    Permission {
        /// The bank.
        bank: String,
        /// What was refused, e.g. "create directory `/srv/bank`".
        what: String,
        /// The system's words.
        cause: String,
    },

    /// `acquire` found a lease object for this owner already in the bank.
    #[error(
        "lease already exists: owner_id=`{owner_id}`; owner ids must be unique per process, \
         do not reuse the id of another (possibly crashed) process"
    )]
    LeaseExists {
        /// The owner whose lease is present.
        owner_id: String,
    },

    /// The lease is lost: it was deleted or replaced, or its validity ran out before a renewal
    /// succeeded. Lost is final; the owner must stop updating its checkpoints.
    #[error(
        "lease lost: owner_id=`{owner_id}` reason=`{reason}`; stop updating checkpoints and \
         start again under a new owner id"
    )]
    LeaseLost {
        /// The owner whose lease is lost.
        owner_id: String,
        /// Why the lease is considered lost.
        reason: String,
    },

    /// Not enough validity is left on the owner's lease to start an update.
    #[error(
        "lease validity too short: owner_id=`{owner_id}` remaining=`{remaining:?}` \
         validity_window=`{validity_window:?}`; wait for the keeper to renew, or give up"
    )]
    ValidityTooShort {
        /// The owner.
        owner_id: String,
        /// The lease time left.
        remaining: Duration,
        /// The time that must be left to start an update.
        validity_window: Duration,
    },

    /// The bank cannot give a guarantee that the requested operation rests on.
    #[error("bank cannot be used for {usage}: bank=`{bank}`: {detail}")]
    Unsupported {
        /// The bank URL (without secrets).
        bank: String,
        /// What the bank was to be used for.
        usage: &'static str,
        /// What the store lacks, as measured.
        detail: String,
    },

    /// The checkpoint was already moved out of `protecting` by someone else (the GC collected
    /// it). The owner must not report it as available.
    #[error(
        "checkpoint fenced: checkpoint_id=`{checkpoint_id}` decided_by=`{decided_by}` \
         outcome=`{outcome}`; do not report it as available"
    )]
    Fenced {
        /// The checkpoint.
        checkpoint_id: String,
        /// Who won the decision: `gc` or `owner`.
        decided_by: String,
        /// The decided outcome.
        outcome: String,
    },

    /// A checkpoint with this id already exists.
    #[error("checkpoint already exists: checkpoint_id=`{checkpoint_id}`; use a new id")]
    CheckpointExists {
        /// The checkpoint.
        checkpoint_id: String,
    },

    /// A create's `index.json` write may have landed, but reading it back failed: whether the
    /// checkpoint is this owner's cannot be told. Its marker is kept.
    #[error(
        "checkpoint create is ambiguous: checkpoint_id=`{checkpoint_id}`: index.json exists but \
         could not be read back; call Checkpoint::adopt to take it up, or use a new id"
    )]
    CheckpointAmbiguous {
        /// The checkpoint.
        checkpoint_id: String,
    },

    /// The store's clock stepped between two readings by more than this host's monotonic clock
    /// allows: leases stamped before (forward) or after (backward, during a pass) the step would
    /// look older than they are.
    #[error(
        "store clock stepped {direction}: step=`{step:?}` at=`{at}`; the pass was aborted and \
         deleted nothing; check the store host's time service (NTP)"
    )]
    ClockStep {
        /// How far beyond (or short of) the elapsed real time the store's clock moved.
        step: std::time::Duration,
        /// `forward` or `backward`.
        direction: &'static str,
        /// The store time of the reading that saw the step.
        at: chrono::DateTime<chrono::Utc>,
    },

    /// The collector could not read the store's clock from its own probe: every read-back showed
    /// another version (a lagging replica). Its stamp bounds the store's time from neither side
    /// reliably enough to judge leases or to detect a step, so nothing was judged.
    #[error(
        "store clock not verified on bank=`{bank}`: the read-back of the clock probe showed \
         another version than the one just written in each of attempts=`{attempts}` (a lagging \
         replica, also after waiting gc.read_staleness when it is set); the pass judged nothing \
         and deleted nothing, and is tried again next time; if this repeats, raise \
         gc.read_staleness to the store's replica lag"
    )]
    ClockUnverified {
        /// The bank.
        bank: String,
        /// Probe attempts made.
        attempts: u32,
    },

    /// An object in the bank could not be parsed.
    #[error(
        "corrupt object: path=`{path}`: {reason}; inspect it (for a checkpoint's index.json or \
         decision, `banklease checkpoint explain ID` says what to do)"
    )]
    Corrupt {
        /// The object's path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A named lock (see [`crate::lock`]) is held by someone else — or, for a claim, by anyone;
    /// for an expire, it has not expired yet; for a blocking acquire, it stayed held (or promised
    /// to an earlier waiter) until the caller stopped waiting.
    #[error(
        "lock unavailable: key=`{key}` holder=`{holder}` remaining=`{remaining:?}`; wait for it \
         to be released or to expire, or use another key"
    )]
    Unavailable {
        /// The lock key (`<namespace>/<key>`; several keys are joined by `,`).
        key: String,
        /// Who holds it (or the first waiter it is promised to).
        holder: String,
        /// Its time left on the store's clock, as judged (zero when unknown).
        remaining: Duration,
    },

    /// The caller's hold on a named lock is gone: its time ran out, or another owner held the
    /// key in between (even if it has released it since), or it never held it.
    #[error(
        "lock lost: key=`{key}` owner=`{owner}` reason=`{reason}`; stop acting as its holder \
         and acquire it again"
    )]
    LockLost {
        /// The lock key (`<namespace>/<key>`).
        key: String,
        /// The owner that thought it held the lock.
        owner: String,
        /// Why the hold is considered gone.
        reason: String,
    },

    /// A lock payload is larger than the limit.
    #[error(
        "lock payload too large: key=`{key}` size=`{size}` limit=`{limit}`; keep large data \
         in its own object and put a reference in the payload"
    )]
    PayloadTooLarge {
        /// The lock key (`<namespace>/<key>`).
        key: String,
        /// The payload's size in bytes.
        size: usize,
        /// The largest payload accepted, in bytes.
        limit: usize,
    },

    /// A lock duration or end time cannot be used.
    #[error(
        "invalid lock term: key=`{key}`: {detail}; give a positive duration or a future end time"
    )]
    InvalidTerm {
        /// The lock key (`<namespace>/<key>`).
        key: String,
        /// What is wrong with it.
        detail: String,
    },

    /// A fenced write to an object guarded by another lock's tokens (tokens of different locks
    /// do not compare); nothing was written.
    #[error(
        "refused: path=`{path}` is guarded by lock=`{guarded_by}`, not lock=`{lock}`; write it \
         with a token of `{guarded_by}`, or to another object"
    )]
    OtherLock {
        /// The guarded object.
        path: String,
        /// The lock whose tokens guard it.
        guarded_by: String,
        /// The lock whose token was given.
        lock: String,
    },

    /// A fenced write named a token the lock never issued.
    #[error(
        "unknown fencing token: lock=`{lock}` token=`{fence}` counter=`{counter}`; use the token \
         printed by `lock acquire` or given to `lock run` as BANKLEASE_LOCK_TOKEN"
    )]
    UnknownFence {
        /// The lock (`<namespace>/<key>`).
        lock: String,
        /// The token given.
        fence: u64,
        /// The lock's counter: the highest token issued.
        counter: u64,
    },

    /// A fenced write was refused: a newer holder of the lock has already written there, or
    /// (with [`crate::lock::Locks::fenced_put`]) has acquired the lock.
    #[error(
        "stale fence: path=`{path}` lock=`{lock}` fence=`{fence}` highest_seen=`{seen}`; a newer \
         holder of the lock exists, stop writing"
    )]
    StaleFence {
        /// The guarded object.
        path: String,
        /// The lock whose fencing tokens guard it.
        lock: String,
        /// The fencing token of the refused write.
        fence: u64,
        /// The highest fencing token already seen by the object.
        seen: u64,
    },
}

impl Error {
    /// A failed store request `op` on `path`, keeping its cause.
    pub fn store(op: &'static str, path: impl ToString, source: object_store::Error) -> Self {
        Error::Store {
            op,
            path: path.to_string(),
            source,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config {
            message: message.into(),
        }
    }

    /// True when the error is a store error that may go away if the request is retried
    /// (as opposed to a definite answer such as NotFound or Precondition, a missing bucket or
    /// refused credentials — which a listing reports as a generic HTTP error, not as NotFound).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Store { source, .. } => {
                !matches!(
                    source,
                    object_store::Error::NotFound { .. }
                        | object_store::Error::AlreadyExists { .. }
                        | object_store::Error::Precondition { .. }
                        | object_store::Error::NotImplemented { .. }
                        | object_store::Error::NotSupported { .. }
                        | object_store::Error::InvalidPath { .. }
                        | object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                ) && !matches!(
                    crate::store::cause::classify(source),
                    crate::store::cause::StoreCause::ContainerMissing { .. }
                        | crate::store::cause::StoreCause::CredentialsRefused { .. }
                )
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_bucket_is_a_definite_answer_however_the_request_reports_it() {
        // A listing of a missing S3 bucket comes back as a generic 404, not as NotFound.
        let listed = Error::store(
            "list",
            object_store::path::Path::from("p"),
            object_store::Error::Generic {
                store: "S3",
                source: "Server returned non-2xx status code: 404 Not Found: \
                         <Code>NoSuchBucket</Code>"
                    .into(),
            },
        );
        assert!(!listed.is_transient(), "{listed}");
        let flaky = Error::store(
            "list",
            object_store::path::Path::from("p"),
            object_store::Error::Generic {
                store: "S3",
                source: "Server returned non-2xx status code: 503 Service Unavailable".into(),
            },
        );
        assert!(flaky.is_transient(), "{flaky}");
    }
}
