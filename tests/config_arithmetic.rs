//! Configuration that would make the guarantees hold by luck is refused at load, naming the
//! keys, the numbers and the fix:
//!
//! - (a) an owner's clock may run 0.1 % slow (the rate the collector allows the store's clock,
//!   gc/src/time/timing.rs): `lease.skew_margin + gc.grace` must cover 0.1 % of `lease.expire_window`;
//! - (b) a write the store client retries can land up to its retry budget after it was sent:
//!   `gc.late_write_window` must cover that budget (plus 0.1 %);
//! - (c) on Swift create-if-absent is not atomic, so exclusion on `decisions/<id>` rests on timing:
//!   the retry budget (plus 0.1 % of what the owner's clock counts) must stay below
//!   `lease.validity_window + lease.skew_margin + gc.grace`.
//!
//! The store clients' budgets these numbers come from (object_store 0.14's defaults: a retry may
//! start until `retry_timeout` 3m + one backoff of at most 15s have passed, and takes up to the
//! 30s request timeout): 3m 45s on S3, Azure and GCS; three times that on Swift, whose client
//! re-authenticates once on a 401 (with the same budget) and sends the request again; none on
//! `file:` and `memory://` banks.

use std::io::Write;

use banklease::config::Config;

/// `Config::load_from` with `BANKLEASE_<key>` overrides and no file.
fn load(pairs: &[(&str, &str)]) -> banklease::Result<Config> {
    Config::load_from(
        None,
        pairs
            .iter()
            .map(|(k, v)| (format!("BANKLEASE_{k}"), (*v).to_owned())),
    )
}

fn refused(pairs: &[(&str, &str)]) -> String {
    match load(pairs) {
        Ok(c) => panic!("{pairs:?} must be refused; loaded {c:?}"),
        Err(e) => e.to_string(),
    }
}

fn contains_all(msg: &str, needles: &[&str]) {
    for needle in needles {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
}

#[test]
fn a_thirty_day_expire_window_with_a_minute_of_grace_is_refused_with_the_numbers() {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(
        b"[lease]\nexpire_window = \"30days\"\nskew_margin = \"2s\"\n[gc]\ngrace = \"60s\"\n",
    )
    .unwrap();
    let msg = Config::load_from(Some(f.path()), Vec::new())
        .expect_err("30 days of expiry with 62 s of margin and grace must be refused")
        .to_string();
    contains_all(
        &msg,
        &[
            "lease.expire_window=`30days`",
            "lease.skew_margin=`2s`",
            "gc.grace=`1m`",
            // 0.1 % of 30 days, against 2 s + 1 m.
            "43m 12s",
            "1m 2s",
            "raise gc.grace to at least 43m 10s",
            "shorten lease.expire_window to at most 17h 13m 20s",
            &f.path().display().to_string(),
        ],
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn the_expire_rate_rule_holds_at_its_boundary() {
    // 0.1 % of the default 10 m expire window is 600 ms.
    load(&[("LEASE__SKEW_MARGIN", "100ms"), ("GC__GRACE", "500ms")])
        .expect("100ms + 500ms covers 600ms");
    let msg = refused(&[("LEASE__SKEW_MARGIN", "100ms"), ("GC__GRACE", "499ms")]);
    contains_all(
        &msg,
        &[
            "lease.expire_window=`10m`",
            "600ms",
            "raise gc.grace to at least 500ms",
            "shorten lease.expire_window to at most 9m 59s",
        ],
    );
}

#[test]
fn the_gcs_own_lease_is_not_held_to_the_owner_rate_rule() {
    // The GC lease only keeps standbys from duplicating work; collection is decided per
    // checkpoint (decisions/<id>), so a slow clock under it costs duplicated passes, not safety.
    load(&[
        ("GC__LEASE_RENEW_WINDOW", "1h"),
        ("GC__LEASE_EXPIRE_WINDOW", "30days"),
        ("GC__LEASE_VALIDITY_WINDOW", "10s"),
    ])
    .expect("the GC's own lease windows are not judged by the owner rule");
}

#[test]
fn a_late_write_window_below_the_s3_clients_retry_budget_is_refused() {
    let msg = refused(&[
        ("BANK__URL", "s3://bucket/p"),
        ("GC__LATE_WRITE_WINDOW", "3m"),
    ]);
    contains_all(
        &msg,
        &[
            "gc.late_write_window=`3m`",
            "bank.url=`s3://bucket/p`",
            "retry budget",
            "3m 45s",
            "raise gc.late_write_window to at least 3m 45s 225ms",
        ],
    );
    // The boundary: the budget plus 0.1 % of it.
    load(&[
        ("BANK__URL", "s3://bucket/p"),
        ("GC__LATE_WRITE_WINDOW", "225225ms"),
    ])
    .expect("3m 45s 225ms covers the budget");
    refused(&[
        ("BANK__URL", "s3://bucket/p"),
        ("GC__LATE_WRITE_WINDOW", "225224ms"),
    ]);
    // Azure and GCS share object_store's client, and its budget.
    for url in ["az://c/p", "gs://b/p"] {
        let msg = refused(&[("BANK__URL", url), ("GC__LATE_WRITE_WINDOW", "1m")]);
        contains_all(&msg, &["gc.late_write_window=`1m`", "3m 45s"]);
    }
}

#[test]
fn local_banks_have_no_client_retries_to_wait_for() {
    for url in ["file:./bank", "memory://"] {
        load(&[("BANK__URL", url), ("GC__LATE_WRITE_WINDOW", "1s")])
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn swift_with_a_retry_budget_above_validity_margin_and_grace_is_refused() {
    // The old default grace: 1m 40s + 2s + 1m = 2m 42s, against the Swift client's 11m 15s.
    let msg = refused(&[("BANK__URL", "swift://c/p"), ("GC__GRACE", "1m")]);
    contains_all(
        &msg,
        &[
            "bank.url=`swift://c/p`",
            "decisions/<id>",
            "lease.validity_window=`1m 40s`",
            "lease.skew_margin=`2s`",
            "gc.grace=`1m`",
            "11m 15s",
            "2m 42s",
            "raise gc.grace to at least 9m 34s 176ms",
        ],
    );
    // The boundary: 11m 15s + 0.1 % of (10m − 1m 40s + 11m 15s) = 11m 16s 175ms must stay
    // strictly below 1m 40s + 2s + grace.
    load(&[("BANK__URL", "swift://c/p"), ("GC__GRACE", "574176ms")])
        .expect("a grace of 9m 34s 176ms is enough");
    refused(&[("BANK__URL", "swift://c/p"), ("GC__GRACE", "574175ms")]);
}

#[test]
fn every_violation_is_named_in_the_one_refusal() {
    let msg = refused(&[
        ("BANK__URL", "swift://c/p"),
        ("LEASE__EXPIRE_WINDOW", "30days"),
        ("GC__GRACE", "1m"),
        ("GC__LATE_WRITE_WINDOW", "1s"),
    ]);
    contains_all(
        &msg,
        &[
            "lease.expire_window=`30days`",
            "gc.late_write_window=`1s`",
            "bank.url=`swift://c/p`",
            "BANKLEASE_GC__LATE_WRITE_WINDOW",
        ],
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn the_defaults_pass_every_rule_on_every_kind_of_bank() {
    for url in [
        "file:./bank",
        "memory://",
        "s3://bucket/p",
        "az://c/p",
        "gs://b/p",
        "swift://c/p",
    ] {
        load(&[("BANK__URL", url)]).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
    Config::default().validate().expect("the defaults");
}
