use super::*;

fn generic(message: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: message.to_owned().into(),
    }
}

fn owner() -> OwnerId {
    OwnerId::parse("svc-1").unwrap()
}

#[test]
fn every_variant_has_the_kind_a_caller_acts_on() {
    use ErrorKind as K;
    let path = Path::from("leases/svc-1");
    let store = |source| Error::store("put", &path, source);
    let s = String::new;
    let cp = || CheckpointId::parse("cp").unwrap();
    let lock = || LockName::new("t", "k").unwrap();
    let cases = [
        (Error::config("x"), K::InvalidInput),
        (Error::InvalidWindows { rule: "r", detail: s() }, K::InvalidInput),
        (Error::InvalidId { kind: "owner", given: s(), reason: "r".into() }, K::InvalidInput),
        (Error::InvalidUrl { url: s(), reason: s(), source: None }, K::InvalidInput),
        (Error::NoBankGiven, K::InvalidInput),
        (Error::PayloadTooLarge { key: lock(), size: 2, limit: 1 }, K::InvalidInput),
        (Error::InvalidTerm { key: lock(), detail: s() }, K::InvalidInput),
        (
            Error::OtherLock { path: path.clone(), guarded_by: lock(), lock: lock() },
            K::InvalidInput,
        ),
        (Error::UnknownFence { lock: lock(), fence: 1, counter: 0 }, K::InvalidInput),
        (
            Error::UnknownLayout { bank: s(), found: 9, created_by: s(), known: 1 },
            K::NotABank,
        ),
        (Error::NotABank { bank: s(), found: s() }, K::NotABank),
        (Error::NoDescriptor { bank: s(), found: s() }, K::NotABank),
        (Error::NoBank { bank: s(), reason: s() }, K::NotABank),
        (Error::ReadOnly { bank: s(), why: "w", source: object_store::Error::NotFound { path: s(), source: s().into() } }, K::RefusedByStore),
        (Error::Permission { bank: s(), what: s(), source: s().into() }, K::RefusedByStore),
        (Error::LeaseLost { owner_id: owner(), reason: s() }, K::Lost),
        (Error::LockLost { key: lock(), owner: owner(), reason: s() }, K::Lost),
        (
            Error::ValidityTooShort {
                owner_id: owner(),
                remaining: Duration::ZERO,
                validity_window: Duration::ZERO,
            },
            K::NotValid,
        ),
        (
            Error::Fenced { checkpoint_id: cp(), decided_by: crate::checkpoint::Decider::Gc, outcome: crate::checkpoint::Status::Deleted },
            K::Fenced,
        ),
        (
            Error::StaleFence { path: path.clone(), lock: lock(), fence: 1, seen: 2 },
            K::Fenced,
        ),
        (
            Error::LeaseExists {
                owner_id: owner(),
                host: None,
                pid: None,
            },
            K::Unavailable,
        ),
        (Error::CheckpointExists { checkpoint_id: cp() }, K::Unavailable),
        (Error::CheckpointAmbiguous { checkpoint_id: cp() }, K::Unavailable),
        (
            Error::Unavailable {
                key: lock().into(),
                holder: LockHolder::Contended,
                remaining: Duration::ZERO,
            },
            K::Unavailable,
        ),
        (Error::Corrupt { path: path.clone(), reason: s() }, K::Corrupt),
        (Error::Unsupported { bank: s(), usage: "leases", detail: s() }, K::Unsupported),
        (
            Error::ClockStep {
                step: Duration::ZERO,
                direction: "forward",
                at: chrono::DateTime::UNIX_EPOCH,
            },
            K::Clock,
        ),
        (Error::ClockUnverified { bank: s(), attempts: 3 }, K::Clock),
        // A store error's kind is its cause's.
        (store(generic("503 Service Unavailable")), K::Transient),
        (store(object_store::Error::NotFound { path: s(), source: "gone".into() }), K::Store),
        (
            store(object_store::Error::Precondition { path: s(), source: "etag".into() }),
            K::Store,
        ),
        (
            store(object_store::Error::NotImplemented { operation: s(), implementer: s() }),
            K::Store,
        ),
        (
            store(object_store::Error::PermissionDenied { path: s(), source: "no".into() }),
            K::RefusedByStore,
        ),
        (
            store(object_store::Error::Unauthenticated { path: s(), source: "no".into() }),
            K::RefusedByStore,
        ),
        (
            store(generic("Server returned non-2xx status code: 403 Forbidden: <Code>InvalidAccessKeyId</Code>")),
            K::RefusedByStore,
        ),
        (
            store(generic("Server returned non-2xx status code: 404 Not Found: <Code>NoSuchBucket</Code>")),
            K::Store,
        ),
    ];
    for (error, kind) in cases {
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.is_transient(), kind == K::Transient, "{error}");
    }
}

#[test]
fn typed_fields_print_as_the_strings_they_replace() {
    let e = Error::Corrupt {
        path: Path::from("index/protecting/svc-1/cp-1"),
        reason: "not json".into(),
    };
    assert!(e
        .to_string()
        .starts_with("corrupt object: path=`index/protecting/svc-1/cp-1`: not json;"));
    let e = Error::LeaseLost {
        owner_id: owner(),
        reason: "deleted".into(),
    };
    assert!(e
        .to_string()
        .starts_with("lease lost: owner_id=`svc-1` reason=`deleted`;"));
    assert_eq!(ErrorKind::RefusedByStore.to_string(), "refused_by_store");
}

#[test]
fn lock_names_and_holders_print_as_the_strings_they_replace() {
    let lock = |k| LockName::new("t", k).unwrap();
    let both: LockNames = [lock("k1"), lock("k2")].into_iter().collect();
    let e = Error::Unavailable {
        key: both,
        holder: LockHolder::Promised(owner()),
        remaining: Duration::ZERO,
    };
    assert_eq!(
        e.to_string(),
        "lock unavailable: key=`t/k1,t/k2` holder=`svc-1 (first in the wait queue)` \
         remaining=`0ns`; wait for it to be released or to expire, or use another key"
    );
    let e = Error::Unavailable {
        key: lock("k").into(),
        holder: LockHolder::Held(owner()),
        remaining: Duration::from_secs(3),
    };
    assert!(e
        .to_string()
        .starts_with("lock unavailable: key=`t/k` holder=`svc-1` remaining=`3s`;"));
    let e = Error::LockLost {
        key: lock("jobs/nightly"),
        owner: owner(),
        reason: "expired".into(),
    };
    assert!(e
        .to_string()
        .starts_with("lock lost: key=`t/jobs/nightly` owner=`svc-1` reason=`expired`;"));
    let e = Error::OtherLock {
        path: Path::from("fenced/r"),
        guarded_by: lock("a"),
        lock: lock("b"),
    };
    assert!(e
        .to_string()
        .starts_with("refused: path=`fenced/r` is guarded by lock=`t/a`, not lock=`t/b`;"));
}

#[test]
fn a_missing_bucket_is_a_definite_answer_however_the_request_reports_it() {
    // A listing of a missing S3 bucket comes back as a generic 404, not as NotFound.
    let listed = Error::store(
        "list",
        &Path::from("p"),
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
        &Path::from("p"),
        object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 503 Service Unavailable".into(),
        },
    );
    assert!(flaky.is_transient(), "{flaky}");
}

/// A TLS failure (a CA missing, a leaf given as the CA) is the same on every retry: not
/// transient, so that a retry loop on `.transient` (Python's) does not spin on it.
#[test]
fn a_tls_failure_is_a_definite_answer() {
    let untrusted = Error::store(
        "get",
        &Path::from("p"),
        object_store::Error::Generic {
            store: "S3",
            source: "error sending request: client error (Connect): invalid peer certificate: \
                     UnknownIssuer"
                .into(),
        },
    );
    assert_eq!(untrusted.kind(), crate::ErrorKind::Store, "{untrusted}");
    assert!(!untrusted.is_transient(), "{untrusted}");
}

/// A message that names its cause keeps it as the source too; the one line says it once, and a
/// source with more to say is still appended.
#[test]
fn a_chain_says_each_cause_once() {
    let denied = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "Permission denied");
    let permission = Error::Permission {
        bank: "file:///srv/bank".into(),
        what: "create directory `/srv/bank`".into(),
        source: Box::new(denied),
    };
    let line = error_chain(&permission);
    assert_eq!(line.matches("Permission denied").count(), 1, "{line}");
    assert_eq!(line, permission.to_string());

    let invalid = Error::InvalidUrl {
        url: "s3://".into(),
        reason: "cannot configure S3 from AWS_* variables".into(),
        source: Some(Box::new(generic("Missing bucket name"))),
    };
    let line = error_chain(&invalid);
    assert_eq!(line.matches("Missing bucket name").count(), 1, "{line}");
}
