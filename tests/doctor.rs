//! `banklease doctor` and its library, `banklease::doctor`: capability tables and verdicts on
//! memory, local files and a store that ignores conditions, and on live servers when their
//! variables are set:
//!
//! - `BANKLEASE_TEST_SWIFT=1`: Swift from `.ci/start-swift.sh` (`ST_AUTH`, `ST_USER`, `ST_KEY`,
//!   `SWIFT_CONTAINER`);
//! - `BANKLEASE_TEST_S3=1`: moto from `.ci/start-s3.sh` (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`,
//!   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `S3_BUCKET`);
//! - `BANKLEASE_TEST_S3S=1`: s3s-fs from `.ci/start-s3s.sh` (`S3S_ENDPOINT`, `S3S_ACCESS_KEY_ID`,
//!   `S3S_SECRET_ACCESS_KEY`, `S3S_REGION`, `S3S_BUCKET`);
//! - `BANKLEASE_TEST_AZURE=1`: Azurite from `.ci/start-azurite.sh` (`AZURE_*`, `AZURITE_*`);
//! - `BANKLEASE_TEST_GCS=1`: fake-gcs-server from `.ci/start-gcs.sh` (`GOOGLE_*`).
//!
//! Each live test works under its own fresh prefix. The CLI test builds the `banklease` binary
//! first, as tests/e2e.rs does (`BANKLEASE_E2E_NO_BUILD=1` skips that).
#![allow(clippy::disallowed_methods)] // live stores and processes run on real time

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use banklease::capability::Condition;
use banklease::capability::RenewalMechanism;
use banklease::clock::{SharedClock, SystemClock};
use banklease::doctor::{self, Basis, DiagnoseOptions, Diagnosis, Expiry, Verdicts};
use banklease::Bank;
use banklease_testkit::failing::FailingStore;

fn clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// Whether the live test behind `var` runs; says so when it does not.
fn enabled(var: &str, starts: &str) -> bool {
    if std::env::var(var).as_deref() == Ok("1") {
        return true;
    }
    eprintln!("skipping: set {var}=1 (after `eval \"$(bash .ci/{starts} | grep ^export)\"`)");
    false
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set for this live test"))
}

fn fresh_prefix() -> String {
    format!("doctor-{}", uuid::Uuid::new_v4().simple())
}

async fn diagnose(bank: &Bank, options: &DiagnoseOptions) -> (Diagnosis, Verdicts) {
    let d = doctor::diagnose(bank, &clock(), options)
        .await
        .unwrap_or_else(|e| panic!("diagnose {}: {e:?}", bank.label()));
    let v = d.verdicts();
    eprintln!("{}: {d:#?}\n{v:#?}", bank.label());
    (d, v)
}

fn bases(v: &Verdicts) -> [Basis; 3] {
    [
        v.owner_lease.basis,
        v.completion_vs_collection.basis,
        v.named_locks.basis,
    ]
}

/// What every diagnosis must hold whatever the store.
fn check_common(d: &Diagnosis, samples: u32) {
    assert_eq!(d.latency.put.samples, samples);
    assert_eq!(d.latency.head.samples, samples);
    assert!(d.latency.put.median_us <= d.latency.put.p95_us);
    assert!(d.latency.put.p95_us <= d.latency.put.max_us);
    // Same host: the store's clock is this host's, up to the measurement's own error.
    let c = &d.clock_offset;
    assert!(
        c.offset_ms.unsigned_abs() <= c.uncertainty_ms + 50,
        "clock offset {} ± {} ms on one host",
        c.offset_ms,
        c.uncertainty_ms
    );
}

/// A real server dates its answers on the clock that stamps its objects: what read-only judging
/// takes for the store's time (`Bank::store_time_from_date`) agrees with the stamps.
fn check_dated(d: &Diagnosis) {
    let h = d.date_header.expect("a server's answers carry a Date");
    assert_eq!(h.disagreement_ms, 0, "Date minus stamp {} ms", h.offset_ms);
}

/// Nothing of the doctor's scratch objects is left listed (what it measured is kept, in
/// `_banklease/store.json`, for every later process).
async fn assert_clean(bank: &Bank) {
    use futures::TryStreamExt;
    let prefix = bank.path(&["_banklease"]);
    let left: Vec<_> = bank
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .unwrap();
    let kept = banklease::paths::Key::Learnt.path(bank);
    let left: Vec<_> = left
        .iter()
        .filter(|m| m.location != kept)
        .map(|m| m.location.to_string())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test]
async fn memory_is_atomic_everywhere() {
    let bank = Bank::open("memory://").unwrap();
    let (d, v) = diagnose(&bank, &DiagnoseOptions::default()).await;
    assert_eq!(d.create_if_absent, Condition::Enforced);
    assert_eq!(d.conditional_overwrite, Condition::Enforced);
    assert_eq!(d.renewal, Some(RenewalMechanism::ConditionalUpdate));
    assert!(d.create_race.unwrap().looked_atomic());
    assert!(d.update_race.unwrap().looked_atomic());
    assert_eq!(d.expiry, Expiry::NotOffered);
    assert!(!d.listing.can_show_gone());
    check_common(&d, DiagnoseOptions::default().latency_samples);
    assert_eq!(
        d.date_header, None,
        "an in-process store has no answers to date"
    );
    assert_eq!(bases(&v), [Basis::Atomic; 3]);
    assert_eq!(v.fenced_writes.basis, Basis::Atomic, "{v:?}");
    assert!(v.supports_leasing_and_gc());
    assert_clean(&bank).await;
}

#[tokio::test]
async fn local_files_enforce_conditional_overwrite_atomically() {
    // `banklease::local`: If-Match under a per-key lock, so the same verdicts as an atomic store.
    let dir = tempfile::tempdir().unwrap();
    let bank = Bank::open(&format!("file://{}", dir.path().display())).unwrap();
    let (d, v) = diagnose(&bank, &DiagnoseOptions::default()).await;
    assert_eq!(d.create_if_absent, Condition::Enforced);
    assert_eq!(d.conditional_overwrite, Condition::Enforced);
    assert_eq!(d.renewal, Some(RenewalMechanism::ConditionalUpdate));
    assert!(d.create_race.unwrap().looked_atomic());
    assert!(d.update_race.unwrap().looked_atomic());
    assert!(!d.listing.shows_deleted);
    check_common(&d, DiagnoseOptions::default().latency_samples);
    assert_eq!(bases(&v), [Basis::Atomic; 3]);
    assert_eq!(v.fenced_writes.basis, Basis::Atomic, "{v:?}");
    assert!(v.supports_leasing_and_gc());
    assert_clean(&bank).await;
}

#[tokio::test]
async fn a_store_ignoring_conditions_is_not_at_all() {
    let store = FailingStore::new(object_store::memory::InMemory::new());
    store.set_ignore_conditions(true);
    let bank = Bank::from_store(Arc::new(store), "", "ignoring");
    let options = DiagnoseOptions {
        race_rounds: 2,
        ..DiagnoseOptions::default()
    };
    let (d, v) = diagnose(&bank, &options).await;
    assert_eq!(d.create_if_absent, Condition::Ignored);
    assert_eq!(d.conditional_overwrite, Condition::Ignored);
    assert_eq!(d.renewal, None);
    assert!(
        d.refused_for_leasing
            .as_deref()
            .is_some_and(|r| r.contains("ignored")),
        "{d:?}"
    );
    let race = d.create_race.unwrap();
    assert_eq!(race.max_winners, options.race_writers, "{race:?}");
    assert_eq!(
        bases(&v),
        [Basis::NotAtAll, Basis::NotAtAll, Basis::Refused]
    );
    assert!(v.owner_lease.why.contains("silently ignored"), "{v:?}");
    assert!(!v.supports_leasing_and_gc());
    assert_clean(&bank).await;
}

// ---- live servers ----------------------------------------------------------------------------

#[tokio::test]
async fn swift_rests_on_timing_expires_and_lists_expired_objects() {
    if !enabled("BANKLEASE_TEST_SWIFT", "start-swift.sh") {
        return;
    }
    let url = format!("swift://{}/{}", env("SWIFT_CONTAINER"), fresh_prefix());
    let d = swift_rests_on_timing(&Bank::open(&url).unwrap()).await;
    check_dated(&d);
}

#[tokio::test]
async fn swift_through_keystone_measures_as_swift_through_tempauth() {
    let Some(ks) = banklease_testkit::keystone::KeystoneEnv::load() else {
        return;
    };
    let prefix = fresh_prefix();
    let bank = Bank::from_swift(
        ks.store(&ks.password_vars(), None),
        &prefix,
        &format!("swift://{}/{prefix}", ks.container()),
    );
    swift_rests_on_timing(&bank).await;
}

async fn swift_rests_on_timing(bank: &Bank) -> Diagnosis {
    // Racing is probabilistic (two winners in about one round in four): enough rounds to see it
    // most of the time, and either outcome is accepted below.
    let options = DiagnoseOptions {
        race_rounds: 40,
        ..DiagnoseOptions::default()
    };
    let (d, v) = diagnose(bank, &options).await;
    assert_eq!(d.create_if_absent, Condition::Enforced);
    // The native backend refuses If-Match (Swift would silently ignore it).
    assert_eq!(d.conditional_overwrite, Condition::Refused);
    assert_eq!(d.update_race, None);
    let race = d.create_race.unwrap();
    eprintln!(
        "swift create race: {} of {} rounds had several winners (at most {})",
        race.rounds_with_several_winners, race.rounds, race.max_winners
    );
    let expected_completion = if race.looked_atomic() {
        Basis::Atomic
    } else {
        Basis::Timing
    };
    match d.expiry {
        Expiry::Honoured { gone_after_ms } => {
            assert!(gone_after_ms <= 3_100, "expired after {gone_after_ms} ms")
        }
        other => panic!("Swift honours X-Delete-After: {other:?}"),
    }
    assert_eq!(d.listing.shows_expired, Some(true));
    assert!(!d.listing.shows_deleted);
    assert!(d.listing.can_show_gone());
    check_common(&d, options.latency_samples);
    assert_eq!(v.owner_lease.basis, Basis::Timing);
    assert_eq!(v.completion_vs_collection.basis, expected_completion);
    assert_eq!(v.named_locks.basis, Basis::Refused);
    assert!(v.supports_leasing_and_gc());
    // Even the expired object: deleting it dropped its listing entry.
    assert_clean(bank).await;
    d
}

#[tokio::test]
async fn azurite_enforces_conditions_atomically() {
    if !enabled("BANKLEASE_TEST_AZURE", "start-azurite.sh") {
        return;
    }
    let url = format!("az://{}/{}", env("AZURE_CONTAINER_NAME"), fresh_prefix());
    let bank = Bank::open(&url).unwrap();
    let (d, v) = diagnose(&bank, &DiagnoseOptions::default()).await;
    assert_eq!(d.create_if_absent, Condition::Enforced);
    assert_eq!(d.conditional_overwrite, Condition::Enforced);
    assert_eq!(d.renewal, Some(RenewalMechanism::ConditionalUpdate));
    assert!(d.create_race.unwrap().looked_atomic(), "{d:?}");
    assert!(d.update_race.unwrap().looked_atomic(), "{d:?}");
    assert_eq!(d.expiry, Expiry::NotOffered);
    assert!(!d.listing.shows_deleted);
    check_common(&d, DiagnoseOptions::default().latency_samples);
    check_dated(&d);
    assert_eq!(bases(&v), [Basis::Atomic; 3]);
    // Azure's ETag changes on every write, the same bytes' too.
    assert_eq!(v.fenced_writes.basis, Basis::Atomic, "{v:?}");
    assert_clean(&bank).await;
}

/// fake-gcs-server answers object_store's object PUT (the XML API) with 400 and ignores
/// generation preconditions elsewhere: nothing about conditions can be proved there, so the
/// bank must be refused, with an error naming the failed write, and nothing left behind.
#[tokio::test]
async fn a_gcs_emulator_that_cannot_take_conditional_writes_is_refused() {
    if !enabled("BANKLEASE_TEST_GCS", "start-gcs.sh") {
        return;
    }
    let url = format!("gs://{}/{}", env("GOOGLE_BUCKET"), fresh_prefix());
    let bank = Bank::open(&url).unwrap();
    let err = doctor::diagnose(&bank, &clock(), &DiagnoseOptions::default())
        .await
        .expect_err("a store that cannot prove its conditions is refused");
    let msg = format!("{err:#}");
    assert!(msg.contains("put"), "{msg}");
    let err = bank.capabilities().await.expect_err("refused for leasing");
    assert!(format!("{err}").contains("_banklease/probe"), "{err}");
    let lease = banklease::OwnerLease::acquire(
        &bank,
        banklease::OwnerId::random(),
        banklease::LeaseWindows::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(5),
        )
        .unwrap(),
        clock(),
    )
    .await;
    assert!(lease.is_err(), "no owner lease on a refused bank");
    use futures::TryStreamExt;
    let left: Vec<_> = bank
        .store()
        .list(Some(bank.prefix()))
        .try_collect()
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn moto_enforces_conditions_and_the_verdicts_follow_its_races() {
    if !enabled("BANKLEASE_TEST_S3", "start-s3.sh") {
        return;
    }
    let bank = Bank::open(&format!("s3://{}/{}", env("S3_BUCKET"), fresh_prefix())).unwrap();
    let (d, v) = diagnose(&bank, &DiagnoseOptions::default()).await;
    assert_eq!(d.create_if_absent, Condition::Enforced);
    assert_eq!(d.conditional_overwrite, Condition::Enforced);
    assert!(!d.listing.can_show_gone());
    // moto stamps whole seconds.
    assert_eq!(d.clock_offset.store_resolution_ms, 1000);
    check_common(&d, DiagnoseOptions::default().latency_samples);
    check_dated(&d);
    // moto checks a condition and then writes without a lock between (moto/s3/responses.py),
    // so a race can, rarely and under load, see two winners. On an idle server every round had
    // one; either way the verdicts must follow what was measured.
    let create = d.create_race.unwrap();
    let update = d.update_race.unwrap();
    // Its ETag is the content's MD5: fenced writes are refused whatever the races.
    assert!(d.repeated_etag.is_some(), "{d:?}");
    assert_eq!(v.fenced_writes.basis, Basis::Refused, "{v:?}");
    if create.looked_atomic() && update.looked_atomic() {
        assert_eq!(bases(&v), [Basis::Atomic; 3]);
    } else {
        eprintln!("note: moto lost a race this run: create {create:?} update {update:?}");
        assert_ne!(
            bases(&v)[2],
            Basis::Atomic,
            "named locks need both races atomic"
        );
    }
    assert_clean(&bank).await;
}

#[tokio::test]
async fn s3s_conditions_are_flagged_not_atomic() {
    if !enabled("BANKLEASE_TEST_S3S", "start-s3s.sh") {
        return;
    }
    // Built here rather than by `Bank::open`, which reads AWS_* (moto's, in CI).
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(env("S3S_ENDPOINT"))
        .with_allow_http(true)
        .with_access_key_id(env("S3S_ACCESS_KEY_ID"))
        .with_secret_access_key(env("S3S_SECRET_ACCESS_KEY"))
        .with_region(env("S3S_REGION"))
        .with_bucket_name(env("S3S_BUCKET"))
        .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
        .with_http_connector(banklease::store::DateRecorder::default())
        .build()
        .unwrap();
    let bank = Bank::from_store(Arc::new(store), &fresh_prefix(), "s3s-fs");
    // Racing is probabilistic: several winners showed in a third to a half of the rounds of
    // each race here, so 16 rounds of two races miss both only by a long chance.
    let options = DiagnoseOptions {
        race_rounds: 16,
        ..DiagnoseOptions::default()
    };
    let (d, v) = diagnose(&bank, &options).await;
    // Each condition is checked one request at a time...
    assert_eq!(d.create_if_absent, Condition::Enforced);
    assert_eq!(d.conditional_overwrite, Condition::Enforced);
    assert_eq!(d.renewal, Some(RenewalMechanism::ConditionalUpdate));
    // ... but not atomically, and the doctor says so.
    let (create, update) = (d.create_race.unwrap(), d.update_race.unwrap());
    assert!(
        !create.looked_atomic() || !update.looked_atomic(),
        "{create:?} {update:?}"
    );
    assert_eq!(v.named_locks.basis, Basis::Refused);
    let expected_lease = if update.looked_atomic() {
        Basis::Atomic
    } else {
        Basis::Timing
    };
    assert_eq!(v.owner_lease.basis, expected_lease);
    assert!(!d.listing.can_show_gone());
    check_common(&d, options.latency_samples);
    check_dated(&d);
    assert!(v.supports_leasing_and_gc());
    assert_clean(&bank).await;
}

#[tokio::test]
async fn swift_s3api_refuses_or_races_conditions() {
    if !enabled("BANKLEASE_TEST_SWIFT", "start-swift.sh") {
        return;
    }
    // The same Swift through its S3 API on the same port (start-swift.sh puts s3api in the
    // pipeline; the TempAuth user and key are the S3 access key and secret).
    let auth = env("ST_AUTH");
    let endpoint = auth.strip_suffix("/auth/v1.0").unwrap_or(&auth).to_owned();
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_access_key_id(env("ST_USER"))
        .with_secret_access_key(env("ST_KEY"))
        .with_region("us-east-1")
        .with_bucket_name(env("SWIFT_CONTAINER"))
        .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
        .with_http_connector(banklease::store::DateRecorder::default())
        .build()
        .unwrap();
    let bank = Bank::from_store(Arc::new(store), &fresh_prefix(), "swift-s3api");
    let (d, v) = diagnose(&bank, &DiagnoseOptions::default()).await;
    // If-Match is never kept: 2.30 answers 501, 2.38 too.
    assert_eq!(d.conditional_overwrite, Condition::Refused);
    assert_eq!(v.named_locks.basis, Basis::Refused);
    match d.create_if_absent {
        // Swift 2.30: `501 Not Implemented` for every conditional PUT.
        Condition::Refused => {
            assert!(d.refused_for_leasing.is_some(), "{d:?}");
            assert_eq!(v.owner_lease.basis, Basis::NotAtAll);
            assert!(!v.supports_leasing_and_gc());
        }
        // Swift 2.38: If-None-Match accepted, not atomic.
        Condition::Enforced => {
            assert_eq!(v.owner_lease.basis, Basis::Timing);
            assert!(v.supports_leasing_and_gc());
        }
        Condition::Ignored => panic!("s3api ignored create-if-absent: {d:?}"),
    }
    check_common(&d, DiagnoseOptions::default().latency_samples);
    check_dated(&d);
    assert_clean(&bank).await;
}

// ---- the command line ------------------------------------------------------------------------

/// `target/<profile>/banklease`, built first unless `BANKLEASE_E2E_NO_BUILD` is set.
fn cli() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let bin = profile_dir.join("banklease");
    if std::env::var_os("BANKLEASE_E2E_NO_BUILD").is_none() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(profile_dir.parent().expect("target/<profile> has a parent"))
            .args(["-p", "banklease-cli", "--bin", "banklease"]);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(profile) => {
                cmd.args(["--profile", profile]);
            }
            None => panic!("unexpected target layout: {}", profile_dir.display()),
        }
        let out = cmd
            .output()
            .expect("run cargo to build the banklease binary");
        assert!(
            out.status.success(),
            "building banklease failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(bin.is_file(), "`{}` is missing", bin.display());
    bin
}

/// Run `banklease doctor ARGS` with nothing of the caller's BANKLEASE_* variables, at most
/// `timeout` long.
fn run_doctor(args: &[&str], timeout: Duration) -> (Option<i32>, String, String) {
    run_doctor_with(args, &[], timeout)
}

/// [`run_doctor`] with `vars` set over the caller's.
fn run_doctor_with(
    args: &[&str],
    vars: &[(&str, String)],
    timeout: Duration,
) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(cli());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BANKLEASE_") {
            cmd.env_remove(name);
        }
    }
    let mut child = cmd
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .arg("doctor")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start banklease");
    let deadline = std::time::Instant::now() + timeout;
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("banklease doctor {args:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_prints_a_table_or_one_json_object_and_exits_by_verdict() {
    let limit = Duration::from_secs(120);
    let (code, out, err) = run_doctor(&["--bank", "memory://", "--json"], limit);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["supported"], true);
    assert_eq!(json["create_if_absent"], "enforced");
    assert_eq!(json["verdicts"]["owner_lease"]["basis"], "atomic");
    assert_eq!(json["verdicts"]["named_locks"]["basis"], "atomic");
    assert_eq!(json["verdicts"]["fenced_writes"]["basis"], "atomic");
    assert_eq!(json["create_race"]["rounds"], 8);
    assert_eq!(json["expiry"]["state"], "not-offered");
    assert!(json["clock_offset"]["offset_ms"].is_i64(), "{json}");

    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let (code, out, err) = run_doctor(&["--bank", &url, "--race-rounds", "2"], limit);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    for needle in [
        "CAPABILITY",
        "create-if-absent",
        "looked atomic: one winner of 16 in each of 2 rounds",
        "conditional overwrite (If-Match)  enforced",
        "conditional-update",
        "GUARANTEE",
        "owner lease               atomic",
        "named locks               atomic",
        "fenced writes (lock put)  atomic",
        "verdict: supported: owner leases and the GC rest on atomic primitives",
    ] {
        assert!(out.contains(needle), "missing `{needle}` in:\n{out}");
    }

    // A store where owner leases rest on timing: Swift (If-Match ignored).
    if std::env::var("BANKLEASE_TEST_SWIFT").as_deref() == Ok("1") {
        let container =
            std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".to_owned());
        let url = format!(
            "swift://{container}/doctor-{}",
            uuid::Uuid::new_v4().simple()
        );
        let (code, out, err) = run_doctor(&["--bank", &url, "--race-rounds", "2"], limit);
        assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
        for needle in [
            "swift-put",
            "timing",
            "named locks",
            "refused",
            "verdict: supported, partly on timing only",
        ] {
            assert!(out.contains(needle), "missing `{needle}` in:\n{out}");
        }
    }

    // Errors exit 2: a bad argument, an unusable bank.
    let (code, _, err) = run_doctor(&["--bank", "memory://", "--race-rounds", "0"], limit);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = run_doctor(&["--bank", "ftp://nowhere"], limit);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown scheme"), "{err}");
}

/// A variable `.ci/start-rgw.sh` prints.
fn rgw_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} (.ci/start-rgw.sh)"))
}

/// The binary's variables for RGW's S3 API (the caller's `AWS_*` are moto's).
fn rgw_vars() -> [(&'static str, String); 6] {
    [
        ("AWS_ENDPOINT", rgw_var("RGW_S3_ENDPOINT")),
        ("AWS_ACCESS_KEY_ID", rgw_var("RGW_ACCESS_KEY_ID")),
        ("AWS_SECRET_ACCESS_KEY", rgw_var("RGW_SECRET_ACCESS_KEY")),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("NO_COLOR", "1".to_owned()),
    ]
}

/// Ceph RGW's S3 API, as an operator runs `doctor` on it: conditional overwrite enforced in the
/// unquoted form (found, raced and sent), owner leases and named locks atomic, the bank
/// supported (exit 0); fenced writes refused, its ETag being the content's hash.
#[test]
fn rgw_s3_api_is_atomic_in_the_unquoted_form_and_refuses_fenced_writes() {
    if !banklease_testkit::backends::Backend::Rgw.available() {
        return;
    }
    let vars = rgw_vars();
    let url = format!("s3://{}/{}", rgw_var("RGW_BUCKET"), fresh_prefix());
    let (code, out, err) = run_doctor_with(&["--bank", &url], &vars, Duration::from_secs(180));
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    for needle in [
        "conditional overwrite (If-Match)  enforced (the store rejects its own quoted ETag; the \
         unquoted form is honoured, and sent)",
        "owner lease               atomic",
        "completion vs collection  atomic",
        "named locks               atomic",
        "fenced writes (lock put)  refused",
        "hash of the content",
        "verdict: supported: owner leases and the GC rest on atomic primitives",
    ] {
        assert!(out.contains(needle), "missing `{needle}` in:\n{out}");
    }
    assert!(!out.contains("use memory://"), "{out}");
}

/// A Ceph RGW bucket with versioning on keeps a second create as a new version: create-if-absent
/// is silently ignored there, so `doctor` judges it NOT supported (exit 1) and `init` refuses
/// it, each saying why.
#[test]
fn an_rgw_bucket_with_versioning_is_judged_not_supported() {
    if !banklease_testkit::backends::Backend::Rgw.available() {
        return;
    }
    let vars = rgw_vars();
    let url = format!(
        "s3://{}/{}",
        rgw_var("RGW_VERSIONED_BUCKET"),
        fresh_prefix()
    );
    let (code, out, err) = run_doctor_with(
        &["--bank", &url, "--race-rounds", "2"],
        &vars,
        Duration::from_secs(180),
    );
    assert_eq!(code, Some(1), "stdout: {out}\nstderr: {err}");
    for needle in [
        "create-if-absent                  IGNORED (silently)",
        "verdict: NOT supported",
    ] {
        assert!(out.contains(needle), "missing `{needle}` in:\n{out}");
    }
    let init = Command::new(cli())
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .args(["--bank", &url, "init"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&init.stderr);
    assert_eq!(init.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("create-if-absent is silently ignored"),
        "{stderr}"
    );
}

/// Ceph RGW's Swift API silently ignores create-if-absent: `doctor` judges it NOT supported,
/// saying why; `init` refuses it and writes nothing; and its RFC 3339 listing times are read.
#[tokio::test]
async fn rgw_swift_api_is_judged_not_supported_and_init_refuses_it() {
    if !banklease_testkit::backends::Backend::Rgw.available() {
        return;
    }
    use banklease::store::{SwiftBuilder, SwiftConfigKey};
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    let var =
        |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} (.ci/start-rgw.sh)"));
    let store = SwiftBuilder::new()
        .with_config(SwiftConfigKey::AuthUrl, var("RGW_SWIFT_AUTH"))
        .with_config(SwiftConfigKey::User, var("RGW_SWIFT_USER"))
        .with_config(SwiftConfigKey::Key, var("RGW_SWIFT_KEY"))
        .with_container(var("RGW_BUCKET"))
        .build()
        .unwrap();
    let prefix = format!("t-{}", uuid::Uuid::new_v4().simple());
    let url = format!("swift://{}/{prefix}", var("RGW_BUCKET"));
    let bank = Bank::from_swift(store, &prefix, &url);

    let err = banklease::layout::init(&bank)
        .await
        .expect_err("init refuses a store that ignores create-if-absent");
    assert!(
        err.to_string()
            .contains("create-if-absent is silently ignored"),
        "{err}"
    );
    // Nothing is left under the prefix, and a listing (of RFC 3339 times) reads.
    let left: Vec<_> = bank
        .store()
        .list(Some(&object_store::path::Path::from(prefix.as_str())))
        .try_collect()
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    let probe = object_store::path::Path::from(format!("{prefix}/listed"));
    bank.store().put(&probe, "x".into()).await.unwrap();
    let listed: Vec<_> = bank
        .store()
        .list(Some(&object_store::path::Path::from(prefix.as_str())))
        .try_collect()
        .await
        .expect("a listing of RGW's Swift API reads");
    assert_eq!(listed.len(), 1);
    bank.store().delete(&probe).await.unwrap();

    let options = DiagnoseOptions {
        race_rounds: 2,
        ..DiagnoseOptions::default()
    };
    let d = doctor::diagnose(&bank, &clock(), &options).await.unwrap();
    assert_eq!(d.create_if_absent, Condition::Ignored, "{d:?}");
    let verdicts = d.verdicts();
    assert!(!verdicts.supports_leasing_and_gc(), "{verdicts:?}");
    assert!(
        d.refused_for_leasing
            .as_deref()
            .is_some_and(|why| why.contains("create-if-absent")),
        "{d:?}"
    );
}
