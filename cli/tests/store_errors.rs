//! A store that cannot be used says why, in one line: the bucket or container is missing, the
//! credentials are refused, nothing listens, TLS fails. On Swift and S3 (moto; s3s-fs for
//! credentials, which moto does not check) when their servers run (`.ci/run` starts them).

mod common;

use std::process::Command;

use common::BIN;

fn on(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// `banklease --bank url lease list` with `env` changed; its exit code and stderr.
fn lease_list(url: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = common::bare();
    cmd.args(["--bank", url, "lease", "list"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_says(case: &str, (code, stderr): (Option<i32>, String), says: &str) {
    assert_eq!(code, Some(2), "{case}: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{case}: one line: {stderr}"
    );
    assert!(stderr.contains(says), "{case}: `{says}` in: {stderr}");
}

#[test]
fn swift_errors_name_their_cause() {
    if !on("BANKLEASE_TEST_SWIFT") {
        eprintln!("note: skipped: set BANKLEASE_TEST_SWIFT=1 (.ci/run does)");
        return;
    }
    let container = std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".into());
    let auth = std::env::var("ST_AUTH").unwrap();
    let url = format!("swift://{container}/errors");
    assert_says(
        "missing container",
        lease_list("swift://no-such-container-here/x", &[]),
        "the bucket or container does not exist (HTTP 404)",
    );
    let wrong_key = lease_list(&url, &[("ST_KEY", "not-the-key")]);
    assert!(wrong_key.1.contains("status=401"), "{}", wrong_key.1);
    assert_says(
        "wrong key",
        wrong_key,
        "authentication as user=`test:tester` at url=",
    );
    assert_says(
        "nothing listens",
        lease_list(&url, &[("ST_AUTH", "http://127.0.0.1:1/auth/v1.0")]),
        "cannot reach the auth service at url=`http://127.0.0.1:1/auth/v1.0` after 10 retries: \
         connection refused",
    );
    assert_says(
        "https to a plain-HTTP port",
        lease_list(&url, &[("ST_AUTH", &auth.replace("http://", "https://"))]),
        "TLS failed",
    );
}

#[test]
fn s3_errors_name_their_cause() {
    if !on("BANKLEASE_TEST_S3") {
        eprintln!("note: skipped: set BANKLEASE_TEST_S3=1 (.ci/run does)");
        return;
    }
    let bucket = std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".into());
    let endpoint = std::env::var("AWS_ENDPOINT").unwrap();
    let url = format!("s3://{bucket}/errors");
    assert_says(
        "missing bucket",
        lease_list("s3://no-such-bucket-here/x", &[]),
        "the bucket or container does not exist (HTTP 404)",
    );
    assert_says(
        "nothing listens",
        lease_list(&url, &[("AWS_ENDPOINT", "http://127.0.0.1:1")]),
        "connection refused",
    );
    assert_says(
        "https to a plain-HTTP port",
        lease_list(
            &url,
            &[("AWS_ENDPOINT", &endpoint.replace("http://", "https://"))],
        ),
        "TLS failed",
    );
    if !on("BANKLEASE_TEST_S3S") {
        eprintln!("note: credentials case skipped: set BANKLEASE_TEST_S3S=1 (s3s-fs checks them)");
        return;
    }
    let var = |k: &str| std::env::var(k).unwrap();
    let s3s_bucket = var("S3S_BUCKET");
    assert_says(
        "wrong secret",
        lease_list(
            &format!("s3://{s3s_bucket}/errors"),
            &[
                ("AWS_ENDPOINT", &var("S3S_ENDPOINT")),
                ("AWS_ACCESS_KEY_ID", &var("S3S_ACCESS_KEY_ID")),
                ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
                ("AWS_REGION", &var("S3S_REGION")),
            ],
        ),
        "the store refused the credentials (HTTP 403)",
    );
}

/// `banklease --bank url ARGS` with the environment as the test runs (the servers' variables).
fn cli(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["--bank", url])
        .args(args)
        .output()
        .unwrap()
}

/// Delete every object of a Swift bank's container, then the container (best effort: a
/// container listing may lag its deletions, 409).
fn remove_swift_container(url: &str) {
    let bank = banklease::Bank::open(url).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use futures::TryStreamExt;
        use object_store::ObjectStoreExt;
        let all: Vec<_> = bank
            .store()
            .list(None)
            .try_collect()
            .await
            .unwrap_or_default();
        for meta in all {
            let _ = bank.store().delete(&meta.location).await;
        }
        let _ = bank.swift().unwrap().delete_container().await;
    });
}

#[test]
fn init_creates_a_missing_swift_container_and_says_so() {
    if !on("BANKLEASE_TEST_SWIFT") {
        eprintln!("note: skipped: set BANKLEASE_TEST_SWIFT=1 (.ci/run does)");
        return;
    }
    let container = format!("banklease-init-{}", uuid::Uuid::new_v4().simple());
    let url = format!("swift://{container}/p");
    // Without any flag, as restic does: a PUT on the container.
    let out = cli(&url, &["init"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    remove_swift_container_after(&url, || {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stdout.contains(&format!("container created: container=`{container}`")),
            "{stdout}"
        );
        assert!(stdout.contains("bank created"), "{stdout}");
        assert_eq!(cli(&url, &["lease", "list"]).status.code(), Some(0));
        // Again: the container is there, nothing is created, nothing is said of it.
        let again = cli(&url, &["init", "--create-container"]);
        let again_out = String::from_utf8_lossy(&again.stdout).into_owned();
        assert_eq!(again.status.code(), Some(0), "{again_out}");
        assert!(!again_out.contains("container created"), "{again_out}");
        assert!(again_out.starts_with("already a bank"), "{again_out}");
    });
}

/// Run `check`, then remove the container of `url` whether it passed or not.
fn remove_swift_container_after(url: &str, check: impl FnOnce() + std::panic::UnwindSafe) {
    let result = std::panic::catch_unwind(check);
    remove_swift_container(url);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn init_names_the_command_that_makes_a_missing_s3_bucket() {
    if !on("BANKLEASE_TEST_S3") {
        eprintln!("note: skipped: set BANKLEASE_TEST_S3=1 (.ci/run does)");
        return;
    }
    let bucket = format!("banklease-init-{}", uuid::Uuid::new_v4().simple());
    for args in [&["init"][..], &["init", "--create-container"][..]] {
        let out = cli(&format!("s3://{bucket}/init"), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("`aws s3 mb s3://{bucket}`")),
            "{args:?}: {stderr}"
        );
    }
}
