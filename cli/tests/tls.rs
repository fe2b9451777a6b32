//! TLS with a private CA, as clouds run it: Ceph RGW's TLS endpoint (`.ci/start-rgw.sh` signs
//! its certificate with a CA of its own and exports `RGW_TLS_ENDPOINT`, `RGW_TLS_CA`), and
//! Keystone with its Swift behind a TLS front (`.ci/start-keystone.sh`, `KEYSTONE_TLS_*`). The
//! variable an operator's tools already read adds that CA to the system's trust for the store
//! (`AWS_CA_BUNDLE` for S3, `OS_CACERT` for Swift and Keystone); without it a command fails at
//! once, in one line naming the variable, never after retries.

#![allow(clippy::disallowed_methods)] // real processes, a real clock

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{bare, output_text};

/// RGW's TLS endpoint and its CA, when `.ci/start-rgw.sh` made them.
fn tls() -> Option<(String, String)> {
    let endpoint = std::env::var("RGW_TLS_ENDPOINT").ok()?;
    let ca = std::env::var("RGW_TLS_CA").ok()?;
    Some((endpoint, ca))
}

fn skip(what: &str) {
    eprintln!(
        "note: {what} skipped: RGW_TLS_ENDPOINT and RGW_TLS_CA unset (.ci/start-rgw.sh sets them)"
    );
}

/// The binary with none of the caller's variables that start with one of `prefixes`, nor its
/// `BANKLEASE_*` ([`bare`]).
fn without(prefixes: &[&str]) -> Command {
    let mut cmd = bare();
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if prefixes.iter().any(|p| name.starts_with(p)) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// The binary on RGW's S3 API over TLS, with none of the caller's AWS_* or CA variables.
fn s3_over_tls(endpoint: &str) -> Command {
    let mut cmd = without(&["AWS_", "SSL_CERT_FILE", "OS_CACERT"]);
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    cmd.env("AWS_ENDPOINT", endpoint)
        .env("AWS_ACCESS_KEY_ID", var("RGW_ACCESS_KEY_ID"))
        .env("AWS_SECRET_ACCESS_KEY", var("RGW_SECRET_ACCESS_KEY"))
        .env("AWS_REGION", "us-east-1")
        .env("BANKLEASE_LEASE__SKEW_MARGIN", "1100ms")
        .env("NO_COLOR", "1")
        .env("USER", "tls-test");
    cmd
}

fn bank_url() -> String {
    let bucket = std::env::var("RGW_BUCKET").unwrap_or_else(|_| "banklease-test".to_owned());
    format!(
        "s3://{bucket}/tls-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

fn run(mut cmd: Command, args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = cmd.args(args).output().unwrap();
    (out, started.elapsed())
}

/// Without `AWS_CA_BUNDLE` the private CA's certificate is not trusted: one line naming the
/// variable, at once; with it, `init`, an owner's lease (`run`) and a GC pass work; a bundle that
/// cannot be read is refused naming it.
#[test]
fn s3_over_tls_trusts_the_ca_aws_ca_bundle_names_and_only_then() {
    let Some((endpoint, ca)) = tls() else {
        return skip("S3 over TLS");
    };
    let url = bank_url();

    let (out, took) = run(s3_over_tls(&endpoint), &["--bank", &url, "init"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("TLS failed") && err.contains("AWS_CA_BUNDLE"),
        "{err}"
    );
    // Not retried: the client's default budget would retry for minutes.
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");

    let mut cmd = s3_over_tls(&endpoint);
    cmd.env("AWS_CA_BUNDLE", dir_missing());
    let (out, _) = run(cmd, &["--bank", &url, "init"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        err.contains("AWS_CA_BUNDLE=`") && err.contains("cannot read it"),
        "{err}"
    );

    for args in [&["init"][..], &["run", "--", "true"], &["gc"]] {
        let mut cmd = s3_over_tls(&endpoint);
        cmd.env("AWS_CA_BUNDLE", &ca);
        let mut all = vec!["--bank", url.as_str()];
        all.extend_from_slice(args);
        let (out, _) = run(cmd, &all);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            output_text(&out)
        );
    }
}

/// `[bank] ca_file` (here `BANKLEASE_BANK__CA_FILE`) trusts a CA for any store, from the
/// configuration; a file that cannot be read is refused naming the key.
#[test]
fn the_configurations_ca_file_is_trusted_too() {
    let Some((endpoint, ca)) = tls() else {
        return skip("[bank] ca_file");
    };
    let url = bank_url();
    for args in [&["init"][..], &["run", "--", "true"]] {
        let mut cmd = s3_over_tls(&endpoint);
        cmd.env("BANKLEASE_BANK__CA_FILE", &ca);
        let mut all = vec!["--bank", url.as_str()];
        all.extend_from_slice(args);
        let (out, _) = run(cmd, &all);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            output_text(&out)
        );
    }
    let mut cmd = s3_over_tls(&endpoint);
    cmd.env("BANKLEASE_BANK__CA_FILE", dir_missing());
    let (out, _) = run(cmd, &["--bank", &url, "run", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        err.contains("bank.ca_file=`") && err.contains("cannot read it"),
        "{err}"
    );
}

/// A path that names no file.
fn dir_missing() -> String {
    format!("/nonexistent-{}/ca.pem", uuid::Uuid::new_v4().simple())
}

/// The binary on RGW's Swift API over TLS (v1 auth and storage both on the TLS endpoint), with
/// none of the caller's ST_*, OS_* or CA variables.
fn swift_over_tls(endpoint: &str) -> Command {
    let mut cmd = without(&["ST_", "OS_", "SSL_CERT_FILE"]);
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    cmd.env("ST_AUTH", format!("{endpoint}/auth/1.0"))
        .env("ST_USER", var("RGW_SWIFT_USER"))
        .env("ST_KEY", var("RGW_SWIFT_KEY"))
        .env("OS_STORAGE_URL", format!("{endpoint}/swift/v1"))
        .env("NO_COLOR", "1")
        .env("USER", "tls-test");
    cmd
}

/// `OS_CACERT`, as an openrc sets it, is what Swift (and Keystone) trust a private CA by:
/// without it `doctor` fails at once in one line naming it; with it `doctor` reaches the store
/// and judges it (RGW's Swift API: NOT supported, for its ignored create-if-absent), nothing
/// about TLS.
#[test]
fn swift_over_tls_trusts_the_ca_os_cacert_names_and_only_then() {
    let Some((endpoint, ca)) = tls() else {
        return skip("Swift over TLS");
    };
    // The bucket the S3 API made is the Swift API's container.
    let url = bank_url().replacen("s3://", "swift://", 1);
    let (out, took) = run(swift_over_tls(&endpoint), &["--bank", &url, "doctor"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("TLS failed") && err.contains("OS_CACERT"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");

    let mut cmd = swift_over_tls(&endpoint);
    cmd.env("OS_CACERT", &ca);
    let (out, _) = run(cmd, &["--bank", &url, "doctor"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!text.contains("TLS failed"), "{text}");
    assert!(text.contains("NOT supported"), "{text}");
}

/// Keystone and its Swift proxy behind a TLS front, as OpenStack deployments terminate TLS
/// (`.ci/start-keystone.sh`: HAProxy with a certificate of a CA it makes; the catalog's
/// object-store endpoint in region `KEYSTONE_TLS_REGION` is the front), with the CI's tester's
/// openrc pointed at them.
fn keystone_over_tls() -> Option<(banklease_testkit::keystone::KeystoneEnv, Vars, String)> {
    let ks = banklease_testkit::keystone::KeystoneEnv::load()?;
    let (Ok(auth_url), Ok(region), Ok(ca)) = (
        std::env::var("KEYSTONE_TLS_AUTH_URL"),
        std::env::var("KEYSTONE_TLS_REGION"),
        std::env::var("KEYSTONE_TLS_CA"),
    ) else {
        eprintln!(
            "note: Keystone over TLS skipped: KEYSTONE_TLS_AUTH_URL, KEYSTONE_TLS_REGION and \
             KEYSTONE_TLS_CA unset (.ci/start-keystone.sh sets them when its TLS front answers)"
        );
        return None;
    };
    let mut vars = ks.password_vars_at(&auth_url);
    vars.retain(|(k, _)| k != "OS_REGION_NAME");
    vars.push(("OS_REGION_NAME".to_owned(), region));
    Some((ks, vars, ca))
}

type Vars = banklease_testkit::keystone::Vars;

/// The binary with only `vars` of an openrc: none of the caller's ST_*, OS_* or CA variables.
fn openstack(vars: &Vars) -> Command {
    let mut cmd = without(&["ST_", "OS_", "SSL_CERT_FILE", "AWS_"]);
    cmd.envs(vars.iter().map(|(k, v)| (k, v)))
        .env("NO_COLOR", "1")
        .env("USER", "tls-test");
    cmd
}

/// Without `OS_CACERT`, an openrc whose Keystone is behind a private CA's certificate fails at
/// once in one line naming it, and so does one whose Keystone is plain but whose catalog's
/// Swift is behind TLS (the storage's client trusts what the auth's does); with it, `init`, an
/// owner's lease (`run`) and a GC pass work, the Swift store reached through the catalog.
#[test]
fn keystone_and_swift_over_tls_trust_the_ca_os_cacert_names_and_only_then() {
    let Some((ks, vars, ca)) = keystone_over_tls() else {
        return;
    };
    let url = format!(
        "swift://{}/tls-ks-{}",
        ks.container(),
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut plain_auth = vars.clone();
    plain_auth.retain(|(k, _)| k != "OS_AUTH_URL");
    plain_auth.push(("OS_AUTH_URL".to_owned(), ks.auth_url()));
    for (what, vars) in [("keystone", &vars), ("the catalog's swift", &plain_auth)] {
        let (out, took) = run(openstack(vars), &["--bank", &url, "init"]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{what}: {}", output_text(&out));
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(
            err.contains("TLS failed") && err.contains("OS_CACERT"),
            "{what}: {err}"
        );
        assert!(
            took < Duration::from_secs(10),
            "{what}: took {took:?}: {err}"
        );
    }

    for args in [&["init"][..], &["run", "--", "true"], &["gc"], &["doctor"]] {
        let mut cmd = openstack(&vars);
        cmd.env("OS_CACERT", &ca);
        let mut all = vec!["--bank", url.as_str()];
        all.extend_from_slice(args);
        let (out, _) = run(cmd, &all);
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {text}");
        assert!(!text.contains("TLS"), "{args:?}: {text}");
    }
}
