use super::*;
use crate::clock::store::stamp_resolution_ms;

fn race(rounds: u32, bad: u32) -> CreateRace {
    CreateRace {
        rounds,
        writers: 16,
        rounds_with_several_winners: bad,
        max_winners: if bad > 0 { 2 } else { 1 },
    }
}

fn update_race(rounds: u32, bad: u32) -> UpdateRace {
    UpdateRace {
        rounds,
        writers: 16,
        rounds_with_several_winners: bad,
        max_winners: if bad > 0 { 16 } else { 1 },
    }
}

fn diagnosis(create: Condition, overwrite: Condition) -> Diagnosis {
    let now = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
    let stats = LatencyStats::of(vec![Duration::from_millis(1)]);
    let renewal = match (create, overwrite) {
        (Condition::Enforced, Condition::Enforced) => Some(RenewalMechanism::ConditionalUpdate),
        (Condition::Enforced, _) => Some(RenewalMechanism::VerifyThenOverwrite),
        _ => None,
    };
    Diagnosis {
        bank: "hand-made".to_owned(),
        create_if_absent: create,
        conditional_overwrite: overwrite,
        unquoted_etags: false,
        renewal,
        refused_for_leasing: None,
        create_race: Some(race(8, 0)),
        update_race: (overwrite == Condition::Enforced).then(|| update_race(8, 0)),
        expiry: Expiry::NotOffered,
        listing: Listing {
            shows_deleted: false,
            shows_expired: None,
        },
        clock_offset: ClockOffset {
            offset_ms: 0,
            uncertainty_ms: 0,
            store_resolution_ms: 0,
            store_time: now,
            host_time: now,
        },
        latency: Latency {
            put: stats,
            head: stats,
        },
        date_header: None,
        repeated_etag: None,
    }
}

fn bases(v: &Verdicts) -> [Basis; 3] {
    [
        v.owner_lease.basis,
        v.completion_vs_collection.basis,
        v.named_locks.basis,
    ]
}

/// Fenced writes need named locks and an ETag that changes on every write: a store whose
/// ETag is the content's hash (S3, RGW) has atomic named locks and refuses `lock put`.
#[test]
fn fenced_writes_are_refused_where_the_etag_is_the_contents_hash() {
    let mut d = diagnosis(Condition::Enforced, Condition::Enforced);
    assert_eq!(d.verdicts().fenced_writes.basis, Basis::Atomic);
    d.repeated_etag = Some("\"b23a43\"".to_owned());
    let v = d.verdicts();
    assert_eq!(v.named_locks.basis, Basis::Atomic);
    assert_eq!(v.fenced_writes.basis, Basis::Refused);
    assert!(
        v.fenced_writes.why.contains("hash of the content"),
        "{}",
        v.fenced_writes.why
    );
    assert!(
        v.fenced_writes.why.contains("\"b23a43\""),
        "{}",
        v.fenced_writes.why
    );
    let v = diagnosis(Condition::Enforced, Condition::Ignored).verdicts();
    assert_eq!(v.fenced_writes.basis, Basis::Refused);
    assert!(
        v.fenced_writes.why.contains("named locks are refused"),
        "{}",
        v.fenced_writes.why
    );
}

#[test]
fn atomic_store_is_atomic_everywhere() {
    let v = diagnosis(Condition::Enforced, Condition::Enforced).verdicts();
    assert_eq!(bases(&v), [Basis::Atomic; 3]);
    assert!(v.supports_leasing_and_gc());
}

#[test]
fn swift_like_store_rests_on_timing_and_refuses_locks() {
    // Swift: create enforced but racy, If-Match refused by the backend, HEAD+PUT renewal.
    let mut d = diagnosis(Condition::Enforced, Condition::Refused);
    d.renewal = Some(RenewalMechanism::SwiftPut);
    d.create_race = Some(race(40, 9));
    d.expiry = Expiry::Honoured { gone_after_ms: 900 };
    let v = d.verdicts();
    assert_eq!(bases(&v), [Basis::Timing, Basis::Timing, Basis::Refused]);
    assert!(v.completion_vs_collection.why.contains("9 of 40"), "{v:?}");
    assert!(v.owner_lease.why.contains("swift-put"), "{v:?}");
    assert!(v.supports_leasing_and_gc());

    // The same store in a lucky run: completion is atomic as far as measured, the lease
    // still rests on timing, locks are still refused (no conditional overwrite).
    d.create_race = Some(race(40, 0));
    let v = d.verdicts();
    assert_eq!(bases(&v), [Basis::Timing, Basis::Atomic, Basis::Refused]);
}

#[test]
fn local_files_renew_by_timing() {
    let v = diagnosis(Condition::Enforced, Condition::Refused).verdicts();
    assert_eq!(bases(&v), [Basis::Timing, Basis::Atomic, Basis::Refused]);
    assert!(v.owner_lease.why.contains("verify-then-overwrite"), "{v:?}");
    assert!(v
        .named_locks
        .why
        .contains("conditional overwrite is refused"));
}

#[test]
fn ignored_create_is_not_at_all() {
    let mut d = diagnosis(Condition::Ignored, Condition::Ignored);
    d.create_race = Some(race(8, 8));
    let v = d.verdicts();
    assert_eq!(
        bases(&v),
        [Basis::NotAtAll, Basis::NotAtAll, Basis::Refused]
    );
    assert!(v.owner_lease.why.contains("silently ignored"), "{v:?}");
    assert!(!v.supports_leasing_and_gc());

    let mut d = diagnosis(Condition::Refused, Condition::Refused);
    d.create_race = None;
    assert!(!d.verdicts().supports_leasing_and_gc());
}

#[test]
fn racy_if_match_demotes_lease_and_locks() {
    // s3s-fs: both conditions checked, neither atomic under a race.
    let mut d = diagnosis(Condition::Enforced, Condition::Enforced);
    d.create_race = Some(race(8, 1));
    d.update_race = Some(update_race(8, 8));
    let v = d.verdicts();
    assert_eq!(bases(&v), [Basis::Timing, Basis::Timing, Basis::Refused]);
    // Only the If-Match race failing still refuses locks and demotes the lease.
    d.create_race = Some(race(8, 0));
    let v = d.verdicts();
    assert_eq!(bases(&v), [Basis::Timing, Basis::Atomic, Basis::Refused]);
}

#[test]
fn unmeasured_races_are_not_atomic() {
    let mut d = diagnosis(Condition::Enforced, Condition::Enforced);
    d.create_race = Some(race(0, 0));
    d.update_race = Some(update_race(0, 0));
    let v = d.verdicts();
    assert_eq!(v.completion_vs_collection.basis, Basis::Timing);
    assert_eq!(v.named_locks.basis, Basis::Refused);
    d.create_race = None;
    assert_eq!(d.verdicts().completion_vs_collection.basis, Basis::Timing);
}

#[test]
fn cheap_owner_lease_verdict_follows_the_probe() {
    let caps = crate::capability::Capabilities {
        create_if_absent: Condition::Enforced,
        conditional_overwrite: Condition::Enforced,
        renewal: RenewalMechanism::ConditionalUpdate,
        unquoted_etags: false,
        server_side_expiry: false,
    };
    assert_eq!(owner_lease_verdict(&caps).basis, Basis::Atomic);
    let caps = crate::capability::Capabilities {
        conditional_overwrite: Condition::Refused,
        renewal: RenewalMechanism::VerifyThenOverwrite,
        ..caps
    };
    assert_eq!(owner_lease_verdict(&caps).basis, Basis::Timing);
    let caps = crate::capability::Capabilities {
        renewal: RenewalMechanism::SwiftPut,
        unquoted_etags: false,
        server_side_expiry: true,
        ..caps
    };
    let verdict = owner_lease_verdict(&caps);
    assert_eq!(verdict.basis, Basis::Timing);
    assert!(verdict.why.contains("swift-put"), "{verdict:?}");
    let caps = crate::capability::Capabilities {
        create_if_absent: Condition::Ignored,
        ..caps
    };
    assert_eq!(owner_lease_verdict(&caps).basis, Basis::NotAtAll);
}

#[test]
fn latency_percentiles_are_nearest_rank() {
    let ms = |v: &[u64]| v.iter().map(|&m| Duration::from_millis(m)).collect();
    let s = LatencyStats::of(ms(&[5, 1, 4, 2, 3, 6, 7, 8, 9, 10]));
    assert_eq!((s.median_us, s.p95_us, s.max_us), (5_000, 10_000, 10_000));
    let s = LatencyStats::of(ms(&[7]));
    assert_eq!((s.samples, s.median_us, s.p95_us), (1, 7_000, 7_000));
    assert_eq!(LatencyStats::of(Vec::new()).median_us, 0);
}

#[test]
fn refusals_include_a_501_behind_a_generic_error() {
    let generic = |msg: &str| object_store::Error::Generic {
        store: "S3",
        source: msg.to_owned().into(),
    };
    assert!(is_refusal(&generic(
        "Server returned non-2xx status code: 501 Not Implemented: <Error/>"
    )));
    assert!(!is_refusal(&generic(
        "Server returned non-2xx status code: 500 Internal Server Error"
    )));
    assert!(is_refusal(&object_store::Error::NotImplemented {
        operation: "put".to_owned(),
        implementer: "test".to_owned(),
    }));
    assert!(!is_refusal(&object_store::Error::Precondition {
        path: "p".to_owned(),
        source: "412".into(),
    }));
}

#[test]
fn stamp_resolution_is_the_coarsest_common_one() {
    let at = |s: i64, ns: u32| DateTime::<Utc>::from_timestamp(s, ns).unwrap();
    assert_eq!(stamp_resolution_ms([at(1, 0), at(2, 0)].into_iter()), 1000);
    assert_eq!(
        stamp_resolution_ms([at(1, 0), at(2, 5_000_000)].into_iter()),
        1
    );
    assert_eq!(stamp_resolution_ms([at(1, 0), at(2, 5_000)].into_iter()), 0);
}

#[test]
fn a_date_from_another_clock_than_the_stamps_is_a_disagreement() {
    let stamp = DateTime::from_timestamp(1_800_000_000, 730_000_000).unwrap();
    let sample = |dated: Option<DateTime<Utc>>| super::Sample {
        put: Duration::from_millis(40),
        head: Duration::from_millis(10),
        host_before: stamp,
        host_after: stamp,
        stamped: stamp,
        dated,
    };
    let at = |secs: i64, millis: u32| DateTime::from_timestamp(secs, millis * 1_000_000);
    // One clock: the Date is the stamp's second, or the next one when the answer crossed it.
    let same = [sample(at(1_800_000_000, 0)), sample(at(1_800_000_000, 0))];
    let h = super::date_agreement(&same, Duration::ZERO).unwrap();
    assert_eq!((h.disagreement_ms, h.offset_ms), (0, -730));
    // A front end whose clock is 5 s ahead of the store's.
    let ahead = [sample(at(1_800_000_000, 0)), sample(at(1_800_000_005, 0))];
    let h = super::date_agreement(&ahead, Duration::ZERO).unwrap();
    assert_eq!((h.disagreement_ms, h.offset_ms), (4_230, 4_270));
    // And 3 s behind.
    let behind = [sample(at(1_799_999_997, 0))];
    let h = super::date_agreement(&behind, Duration::ZERO).unwrap();
    assert_eq!((h.disagreement_ms, h.offset_ms), (2_690, -3_730));
    // A store whose answers carry no Date (in one of them) is not judged.
    assert_eq!(super::date_agreement(&[sample(None)], Duration::ZERO), None);
}
