//! The library's error type.
//!
//! Every message is lowercase, says what went wrong and what to do next, and carries its details as
//! key=`value` pairs. The underlying cause is kept as `#[source]` and is not repeated in the message.
//!
//! [`Error::kind`] sorts the variants into the few [`ErrorKind`]s a caller acts on (not a bank,
//! refused by the store, lost, fenced, invalid input, unavailable, transient, ...): match on the
//! kind to decide what to do, on the variant for its details.

use std::time::Duration;

use object_store::path::Path;

use crate::checkpoint::status::{Decider, Status, UnknownStatus};
use crate::id::{CheckpointId, OwnerId};
use crate::lock::name::{LockHolder, LockName, LockNames};

/// An error and its sources on one line, each said once.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        // A message that names its cause (a refusal in one line) is not followed by it again.
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}

impl From<UnknownStatus> for Error {
    fn from(e: UnknownStatus) -> Self {
        Error::config(e.to_string())
    }
}

/// `: <cause>` after a message whose cause is its source, or nothing.
struct Because<'a>(Option<&'a (dyn std::error::Error + Send + Sync + 'static)>);

impl std::fmt::Display for Because<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(cause) => write!(f, ": {cause}"),
            None => Ok(()),
        }
    }
}

/// A refusal in one line: a store's error as banklease classifies it, anything else as it
/// reads.
struct Refusal<'a>(&'a (dyn std::error::Error + Send + Sync + 'static));

impl std::fmt::Display for Refusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.downcast_ref::<object_store::Error>() {
            Some(store) => f.write_str(&crate::store::cause::refusal_line(store)),
            None => write!(f, "{}", self.0),
        }
    }
}

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
    #[error("invalid {kind} id=`{given}`: {reason}")]
    InvalidId {
        /// What kind of id: `owner`, `checkpoint`, ...
        kind: &'static str,
        /// The text given as the id (not a valid id), escaped and shortened for display.
        given: String,
        /// Which rule it breaks, and what was probably meant where that can be told.
        reason: std::borrow::Cow<'static, str>,
    },

    /// A bank URL could not be understood, or its store could not be set up from it.
    #[error("invalid bank url=`{url}`: {reason}{}", Because(.source.as_deref()))]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it and what is accepted.
        reason: String,
        /// What refused it (the file system, the store's client), when something did.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A request to the object store failed.
    #[error(
        "store request failed: op=`{op}` path=`{path}`: {}",
        crate::store::cause::classify(.source)
    )]
    Store {
        /// The operation, e.g. `put`, `get`, `head`.
        op: &'static str,
        /// The object path (or the listed prefix).
        path: Path,
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

    /// The bank's prefix holds names a bank's own could have (`index`, `locks/`, `gc/`) but no
    /// bank descriptor: no proof that banklease made them, so every command, owner and
    /// collector refuses it, writing nothing; `init` adopts it, by someone who knows it is a
    /// bank made before descriptors.
    #[error(
        "refusing bank=`{bank}`: its prefix holds `{found}` but no bank descriptor \
         (banklease.json), so nothing proves banklease made it; if it is a bank made before \
         descriptors, adopt it once with `banklease --bank {bank} init`, else choose an empty \
         prefix"
    )]
    NoDescriptor {
        /// The bank.
        bank: String,
        /// The first name found.
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
         ({}; {why}); allow these credentials to write `_banklease/clock/`, or run the command \
         with credentials that may",
        crate::store::cause::refusal_line(.source)
    )]
    ReadOnly {
        /// The bank.
        bank: String,
        /// Why no other way to the store's time serves here.
        why: &'static str,
        /// The store's refusal of the probe's write.
        #[source]
        source: object_store::Error,
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
        "permission denied on bank=`{bank}`: cannot {what}: {}; run as a user (or with \
         credentials) allowed to, or use a command that only reads",
        Refusal(.source.as_ref())
    )]
    Permission {
        /// The bank.
        bank: String,
        /// What was refused, e.g. "create directory `/srv/bank`".
        what: String,
        /// The refusal: the file system's (`std::io::Error`) or the store's
        /// (`object_store::Error`).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// `acquire` found a lease object for this owner already in the bank.
    #[error(
        "lease already exists: owner_id=`{owner_id}`; owner ids must be unique per process, \
         do not reuse the id of another (possibly crashed) process"
    )]
    LeaseExists {
        /// The owner whose lease is present.
        owner_id: OwnerId,
        /// The host its lease names, when it was read (for humans).
        host: Option<String>,
        /// The process id its lease names, when it was read (for humans).
        pid: Option<u32>,
    },

    /// The lease is lost: it was deleted or replaced, or its validity ran out before a renewal
    /// succeeded. Lost is final; the owner must stop updating its checkpoints.
    #[error(
        "lease lost: owner_id=`{owner_id}` reason=`{reason}`; stop updating checkpoints and \
         start again under a new owner id"
    )]
    LeaseLost {
        /// The owner whose lease is lost.
        owner_id: OwnerId,
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
        owner_id: OwnerId,
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
        checkpoint_id: CheckpointId,
        /// Who won the decision.
        decided_by: Decider,
        /// The decided outcome.
        outcome: Status,
    },

    /// A checkpoint with this id already exists.
    #[error("checkpoint already exists: checkpoint_id=`{checkpoint_id}`; use a new id")]
    CheckpointExists {
        /// The checkpoint.
        checkpoint_id: CheckpointId,
    },

    /// A create's `index.json` write may have landed, but reading it back failed: whether the
    /// checkpoint is this owner's cannot be told. Its marker is kept.
    #[error(
        "checkpoint create is ambiguous: checkpoint_id=`{checkpoint_id}`: index.json exists but \
         could not be read back; call Checkpoint::adopt to take it up, or use a new id"
    )]
    CheckpointAmbiguous {
        /// The checkpoint.
        checkpoint_id: CheckpointId,
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
        path: Path,
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
        /// The lock (`<namespace>/<key>`), or every key of an acquire-any (printed joined by
        /// `,`).
        key: LockNames,
        /// Who holds it, or the first waiter it is promised to, or that it was contended.
        holder: LockHolder,
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
        /// The lock (`<namespace>/<key>`).
        key: LockName,
        /// The holder that thought it held the lock (an owner name, with its session for
        /// `lock run`).
        owner: OwnerId,
        /// Why the hold is considered gone.
        reason: String,
    },

    /// A lock payload is larger than the limit.
    #[error(
        "lock payload too large: key=`{key}` size=`{size}` limit=`{limit}`; keep large data \
         in its own object and put a reference in the payload"
    )]
    PayloadTooLarge {
        /// The lock (`<namespace>/<key>`).
        key: LockName,
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
        /// The lock (`<namespace>/<key>`).
        key: LockName,
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
        path: Path,
        /// The lock whose tokens guard it (`<namespace>/<key>`).
        guarded_by: LockName,
        /// The lock whose token was given (`<namespace>/<key>`).
        lock: LockName,
    },

    /// A fenced write named a token the lock never issued.
    #[error(
        "unknown fencing token: lock=`{lock}` token=`{fence}` counter=`{counter}`; use the token \
         printed by `lock acquire` or given to `lock run` as BANKLEASE_LOCK_TOKEN"
    )]
    UnknownFence {
        /// The lock (`<namespace>/<key>`).
        lock: LockName,
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
        path: Path,
        /// The lock whose fencing tokens guard it (`<namespace>/<key>`).
        lock: LockName,
        /// The fencing token of the refused write.
        fence: u64,
        /// The highest fencing token already seen by the object.
        seen: u64,
    },
}

/// What kind of failure an [`Error`] is: what a caller should do about it, whatever the
/// variant. [`Error::kind`] gives it; the CLI's exit statuses and the Python package's exception
/// classes are derived from it.
///
/// `#[non_exhaustive]`: a later release may add kinds, so a `match` needs a `_` arm (treat an
/// unknown kind as [`ErrorKind::Store`]: a failure not worth retrying unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller gave something unusable: the configuration, lease windows, an id, a URL, a
    /// lock term or payload, a fencing token of another (or no) lock. Retrying unchanged fails
    /// the same way: fix the input.
    InvalidInput,
    /// The URL holds no bank this release can act on: nothing there, a prefix holding other
    /// objects, or a layout it does not know. Check the URL, make a bank (`banklease init`), or
    /// use a release that knows the layout.
    NotABank,
    /// The store (or the file system) refused these credentials: permission denied,
    /// unauthenticated, credentials refused, or only allowed to read where a write is needed.
    /// Run with credentials allowed to, or use something that only reads.
    RefusedByStore,
    /// A hold is gone for good: an owner lease or a named lock was lost. Final: stop acting as
    /// its holder at once; start again under a new owner id, or acquire the lock again.
    Lost,
    /// The owner lease is held, but too little validity is left to start an update: wait for
    /// the keeper's next renewal, or give up.
    NotValid,
    /// Someone else decided first: the GC collected the checkpoint, or a newer holder of the
    /// lock wrote. Stop writing; never report the work as done.
    Fenced,
    /// What was asked for is someone else's now: a lease or checkpoint id that exists (or may,
    /// after an unclear create), a lock held by another holder. Wait and try again, or use
    /// another id or key.
    Unavailable,
    /// A store request failed in a way that may go away: a timeout, a refused connection, a
    /// 5xx. Retrying the same request may succeed ([`Error::is_transient`]).
    Transient,
    /// A store request got a definite answer that retrying will not change: not found, a
    /// failed condition, a missing bucket, an operation the store does not implement. The
    /// message names the cause.
    Store,
    /// An object in the bank cannot be read: unparseable, or written by a newer release.
    /// Inspect it (`banklease checkpoint explain ID` says what to do about a checkpoint's).
    Corrupt,
    /// The bank's store cannot give a guarantee the operation rests on: run `banklease doctor`,
    /// or use another store.
    Unsupported,
    /// The store's clock cannot be trusted for this judgement: it stepped, or the collector's
    /// probe could not be read back. Nothing was judged or deleted; the next pass tries again.
    /// Check the store host's time service, or `gc.read_staleness`.
    Clock,
    /// A fault of banklease itself (a task that panicked): report it. No [`Error`] variant has
    /// this kind; the GC crate's error uses it for a pass whose task ended abnormally.
    Internal,
}

impl ErrorKind {
    /// The kind's name in `snake_case` (`not_a_bank`, `refused_by_store`, ...), as the Python
    /// exceptions carry it in `.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::NotABank => "not_a_bank",
            ErrorKind::RefusedByStore => "refused_by_store",
            ErrorKind::Lost => "lost",
            ErrorKind::NotValid => "not_valid",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Transient => "transient",
            ErrorKind::Store => "store",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Clock => "clock",
            ErrorKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<crate::id::InvalidId> for Error {
    fn from(e: crate::id::InvalidId) -> Self {
        Error::InvalidId {
            kind: e.kind,
            given: e.given,
            reason: e.reason,
        }
    }
}

impl Error {
    /// A failed store request `op` on `path`, keeping its cause.
    pub fn store(op: &'static str, path: &Path, source: object_store::Error) -> Self {
        Error::Store {
            op,
            path: path.clone(),
            source,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config {
            message: message.into(),
        }
    }

    /// What kind of failure this is, and so what a caller should do about it (see
    /// [`ErrorKind`]). Every variant has exactly one kind; a store error's depends on its cause.
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        // Exhaustive on purpose: a new variant does not compile until it is given a kind.
        match self {
            Error::Config { .. }
            | Error::InvalidWindows { .. }
            | Error::InvalidId { .. }
            | Error::InvalidUrl { .. }
            | Error::NoBankGiven
            | Error::PayloadTooLarge { .. }
            | Error::InvalidTerm { .. }
            | Error::OtherLock { .. }
            | Error::UnknownFence { .. } => K::InvalidInput,
            Error::UnknownLayout { .. }
            | Error::NotABank { .. }
            | Error::NoDescriptor { .. }
            | Error::NoBank { .. } => K::NotABank,
            Error::ReadOnly { .. } | Error::Permission { .. } => K::RefusedByStore,
            Error::Store { source, .. } => store_kind(source),
            Error::LeaseLost { .. } | Error::LockLost { .. } => K::Lost,
            Error::ValidityTooShort { .. } => K::NotValid,
            Error::Fenced { .. } | Error::StaleFence { .. } => K::Fenced,
            Error::LeaseExists { .. }
            | Error::CheckpointExists { .. }
            | Error::CheckpointAmbiguous { .. }
            | Error::Unavailable { .. } => K::Unavailable,
            Error::Corrupt { .. } => K::Corrupt,
            Error::Unsupported { .. } => K::Unsupported,
            Error::ClockStep { .. } | Error::ClockUnverified { .. } => K::Clock,
        }
    }

    /// A refusal's cause in one line, as its message gives it: for [`Error::Permission`] and
    /// [`Error::ReadOnly`] (the refusal, and for the latter why no other way serves); `None`
    /// for the other variants.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Error::Permission { source, .. } => Some(Refusal(source.as_ref()).to_string()),
            Error::ReadOnly { why, source, .. } => Some(format!(
                "{}; {why}",
                crate::store::cause::refusal_line(source)
            )),
            _ => None,
        }
    }

    /// True when the error is a store error that may go away if the request is retried
    /// (as opposed to a definite answer such as NotFound or Precondition, a missing bucket or
    /// refused credentials — which a listing reports as a generic HTTP error, not as NotFound):
    /// exactly when [`Error::kind`] is [`ErrorKind::Transient`].
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }
}

/// The kind of a failed store request: refused credentials, a definite answer, or a failure
/// that may go away.
fn store_kind(source: &object_store::Error) -> ErrorKind {
    use crate::store::cause::StoreCause;
    match source {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => return ErrorKind::RefusedByStore,
        object_store::Error::NotFound { .. }
        | object_store::Error::AlreadyExists { .. }
        | object_store::Error::Precondition { .. }
        | object_store::Error::NotImplemented { .. }
        | object_store::Error::NotSupported { .. }
        | object_store::Error::InvalidPath { .. } => return ErrorKind::Store,
        _ => {}
    }
    // A listing reports a missing bucket or refused credentials as a generic HTTP error.
    match crate::store::cause::classify(source) {
        StoreCause::CredentialsRefused { .. } => ErrorKind::RefusedByStore,
        StoreCause::ContainerMissing { .. } => ErrorKind::Store,
        // A CA that is missing or a leaf given as one fails the same way every time: retrying
        // (a Python retry loop on `.transient`) would spin on a configuration mistake.
        StoreCause::Tls { .. } => ErrorKind::Store,
        _ => ErrorKind::Transient,
    }
}

#[cfg(test)]
mod tests;
