//! Credentials as each ecosystem hands them out, through the binaries as a cron job or a
//! daemon gets them: a crontab with only `AWS_PROFILE` (the shared files under its `HOME`), a
//! container endpoint, a daemon with only `OS_CLOUD` (`clouds.yaml`); and with no credentials
//! at all, one line naming every source tried. No test sends a request to the instance
//! metadata address: it is disabled, or pointed at a port on 127.0.0.1.
//!
//! On the S3 servers `BANKLEASE_TEST_S3=1` (moto) and `BANKLEASE_TEST_RGW=1` (Ceph RGW, which
//! checks signatures) turn on, and Keystone (`BANKLEASE_TEST_KEYSTONE=1`).

#![allow(clippy::disallowed_methods)] // real processes

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use banklease_testkit::keystone::KeystoneEnv;
use common::{gc_bin, BIN};

/// A crontab's environment: nothing but `HOME`, `PATH`, `LOGNAME`, `SHELL` and `vars`.
fn cron(program: &Path, home: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LOGNAME", "backup")
        .env("SHELL", "/bin/sh")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "error")
        .envs(vars.iter().copied())
        .args(args)
        .current_dir(home);
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status={:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// An S3 server of this run: (name, endpoint, access key, secret, bucket).
fn s3_servers() -> Vec<(&'static str, String, String, String, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let on = |flag: &str| std::env::var(flag).is_ok_and(|v| v == "1");
    let mut servers = Vec::new();
    if on("BANKLEASE_TEST_S3") {
        if let (Some(e), Some(k), Some(s)) = (
            var("AWS_ENDPOINT"),
            var("AWS_ACCESS_KEY_ID"),
            var("AWS_SECRET_ACCESS_KEY"),
        ) {
            let bucket = var("S3_BUCKET").unwrap_or_else(|| "banklease-test".to_owned());
            servers.push(("moto", e, k, s, bucket));
        }
    }
    if on("BANKLEASE_TEST_RGW") {
        if let (Some(e), Some(k), Some(s), Some(b)) = (
            var("RGW_S3_ENDPOINT"),
            var("RGW_ACCESS_KEY_ID"),
            var("RGW_SECRET_ACCESS_KEY"),
            var("RGW_BUCKET"),
        ) {
            servers.push(("rgw", e, k, s, b));
        }
    }
    servers
}

/// `~/.aws/credentials` and `~/.aws/config` with profile `nightly` (its region and endpoint
/// in the config file, as `aws configure` and a bucket on a private S3 server want them).
fn write_profile(home: &Path, endpoint: &str, key: &str, secret: &str) {
    let aws = home.join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        format!("[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n[nightly]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = us-east-1\nendpoint_url = {endpoint}\n\n\
             [profile nightly]\nregion = us-east-1\nendpoint_url = {endpoint}\n"
        ),
    )
    .unwrap();
}

#[test]
fn a_crontab_with_only_aws_profile_locks_and_runs() {
    let servers = s3_servers();
    if servers.is_empty() {
        eprintln!("note: no S3 server configured (BANKLEASE_TEST_S3=1 or BANKLEASE_TEST_RGW=1)");
        return;
    }
    for (name, endpoint, key, secret, bucket) in servers {
        let home = tempfile::tempdir().unwrap();
        write_profile(home.path(), &endpoint, &key, &secret);
        let url = format!("s3://{bucket}/cred-{}", uuid::Uuid::new_v4().simple());
        // A plain-HTTP test server: the one variable beyond the profile (a real endpoint is
        // https://).
        let vars = [
            ("AWS_PROFILE", "nightly"),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ];
        let bin = Path::new(BIN);
        let init = cron(bin, home.path(), &vars, &["--bank", &url, "init"]);
        assert_eq!(init.status.code(), Some(0), "{name}: {}", text(&init));
        let job = cron(
            bin,
            home.path(),
            &vars,
            &["--bank", &url, "lock", "run", "-n", "nightly", "--", "true"],
        );
        assert_eq!(job.status.code(), Some(0), "{name}: {}", text(&job));
        // The daemon's one pass, from the same environment.
        let pass = cron(&gc_bin(), home.path(), &vars, &["--bank", &url, "--once"]);
        assert_eq!(pass.status.code(), Some(0), "{name}: {}", text(&pass));
        if name == "rgw" {
            // RGW checks signatures: the profile's keys are the ones used (the default
            // profile's are refused).
            let wrong = cron(
                bin,
                home.path(),
                &[vars[1], vars[2]],
                &["--bank", &url, "lease", "list"],
            );
            let all = text(&wrong);
            assert_ne!(wrong.status.code(), Some(0), "{all}");
            assert!(all.contains("refused the credentials"), "{all}");
        }
    }
}

#[test]
fn with_no_credentials_the_line_names_every_source_tried() {
    let home = tempfile::tempdir().unwrap();
    let url = "s3://some-bucket/p";
    let base = [
        ("AWS_ENDPOINT", "http://127.0.0.1:1"),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
    ];
    // Instance metadata disabled.
    let mut vars = base.to_vec();
    vars.push(("AWS_EC2_METADATA_DISABLED", "true"));
    let out = cron(
        Path::new(BIN),
        home.path(),
        &vars,
        &["--bank", url, "lease", "list"],
    );
    let all = text(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{all}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{all}");
    let line = errors[0];
    let credentials = home.path().join(".aws/credentials");
    for part in [
        "no S3 credentials: tried AWS_ACCESS_KEY_ID (not set)",
        "profile `default` (AWS_PROFILE is not set)",
        &format!("`{}` (absent)", credentials.display()),
        "web identity",
        "the container endpoint",
        "disabled by AWS_EC2_METADATA_DISABLED",
        "set AWS_PROFILE",
    ] {
        assert!(line.contains(part), "{part:?} missing: {all}");
    }
    assert!(!line.contains("HTTP 403"), "{all}");
    // Instance metadata pointed at a closed port on 127.0.0.1: tried, and said so.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let imds = format!("http://127.0.0.1:{port}");
    let mut vars = base.to_vec();
    vars.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds));
    vars.push(("AWS_PROFILE", "nightly"));
    let out = cron(
        Path::new(BIN),
        home.path(),
        &vars,
        &["--bank", url, "lease", "list"],
    );
    let all = text(&out);
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains(&format!(
            "instance metadata at {imds} (no answer or no role)"
        )),
        "{all}"
    );
    assert!(all.contains("profile `nightly` (AWS_PROFILE)"), "{all}");
}

/// A stand-in for the container credentials endpoint (ECS, EKS Pod Identity) on 127.0.0.1: its
/// URL, and how many requests it answered (with `key`/`secret` and a session token, as the
/// endpoint hands out temporary credentials).
fn container_endpoint(key: String, secret: String) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/creds", listener.local_addr().unwrap());
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    // Detached: it ends with the test process (bounded by the requests the test makes).
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = format!(
                r#"{{"AccessKeyId":"{key}","SecretAccessKey":"{secret}","Token":"stand-in-session","Expiration":"2099-01-01T00:00:00Z"}}"#
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (url, served)
}

#[test]
fn a_container_endpoint_hands_out_the_keys() {
    let Some((name, endpoint, key, secret, bucket)) = s3_servers().into_iter().next() else {
        eprintln!("note: no S3 server configured (BANKLEASE_TEST_S3=1 or BANKLEASE_TEST_RGW=1)");
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let (creds, served) = container_endpoint(key, secret);
    let url = format!("s3://{bucket}/cred-{}", uuid::Uuid::new_v4().simple());
    let vars = [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds.as_str()),
    ];
    let init = cron(
        Path::new(BIN),
        home.path(),
        &vars,
        &["--bank", &url, "init"],
    );
    assert_eq!(init.status.code(), Some(0), "{name}: {}", text(&init));
    // One fetch for the whole process: the keys are kept until they near their expiry.
    assert_eq!(served.load(Ordering::SeqCst), 1);
}

/// `clouds.yaml` for `vars` (an openrc's `OS_*`), as `openstack` and openstacksdk read it.
fn clouds_yaml(vars: &[(String, String)]) -> String {
    let mut auth = String::new();
    let mut top = String::new();
    for (k, v) in vars {
        let Some(name) = k.strip_prefix("OS_") else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        let line = format!("      {name}: '{v}'\n");
        match name.as_str() {
            "region_name" | "interface" | "auth_type" | "cacert" => top.push_str(&line[2..]),
            _ => auth.push_str(&line),
        }
    }
    format!("clouds:\n  backups:\n    auth:\n{auth}{top}")
}

#[test]
fn a_daemon_with_only_os_cloud_finds_its_cloud() {
    let Some(ks) = KeystoneEnv::load() else {
        eprintln!("note: Keystone not configured (BANKLEASE_TEST_KEYSTONE=1)");
        return;
    };
    for (what, vars) in [
        ("password", ks.password_vars()),
        ("application credential", ks.app_cred_vars()),
    ] {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join(".config/openstack");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("clouds.yaml"), clouds_yaml(&vars)).unwrap();
        let url = format!(
            "swift://{}/cloud-{}",
            ks.container(),
            uuid::Uuid::new_v4().simple()
        );
        let env = [("OS_CLOUD", "backups")];
        let init = cron(Path::new(BIN), home.path(), &env, &["--bank", &url, "init"]);
        assert_eq!(init.status.code(), Some(0), "{what}: {}", text(&init));
        let pass = cron(&gc_bin(), home.path(), &env, &["--bank", &url, "--once"]);
        assert_eq!(pass.status.code(), Some(0), "{what}: {}", text(&pass));
        // A name clouds.yaml does not hold: one line naming the file.
        let wrong = cron(
            Path::new(BIN),
            home.path(),
            &[("OS_CLOUD", "prod")],
            &["--bank", &url, "lease", "list"],
        );
        let all = text(&wrong);
        assert_ne!(wrong.status.code(), Some(0), "{all}");
        assert!(
            all.contains("OS_CLOUD=`prod` names no cloud in")
                && all.contains(".config/openstack/clouds.yaml"),
            "{all}"
        );
    }
}

#[test]
fn os_cloud_without_a_clouds_yaml_says_where_it_looked() {
    let home = tempfile::tempdir().unwrap();
    let out = cron(
        Path::new(BIN),
        home.path(),
        &[("OS_CLOUD", "backups")],
        &["--bank", "swift://c/p", "lease", "list"],
    );
    let all = text(&out);
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains("OS_CLOUD=`backups` but no clouds.yaml was found"),
        "{all}"
    );
    assert!(all.contains("/etc/openstack/clouds.yaml"), "{all}");
    assert!(all.contains("OS_CLIENT_CONFIG_FILE"), "{all}");
}
