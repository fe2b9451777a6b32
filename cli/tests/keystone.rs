//! The CLI on a Swift bank behind a real Keystone v3, as an operator runs it after sourcing an
//! openrc: it works with a password and with an application credential, and each way Keystone
//! or Swift can refuse ends in one `error:` line (exit 2) that says who was refused where and
//! what to check, with no secret in it even at `RUST_LOG=trace`. Needs
//! `BANKLEASE_TEST_KEYSTONE=1` (`.ci/run`).

#![allow(clippy::disallowed_methods)] // real processes

mod common;

use banklease_testkit::cid;
use std::net::TcpListener;
use std::process::{Command, Output};

use banklease_testkit::keystone::{KeystoneEnv, Vars};

use common::BIN;

/// `banklease --bank url args` with only `vars` from an openrc: no TempAuth `ST_*`, no other
/// `OS_*`, no developer's `BANKLEASE_*`.
fn cli(vars: &Vars, url: &str, args: &[&str], log: &str) -> Output {
    let mut cmd = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("BANKLEASE_") || k.starts_with("ST_") || k.starts_with("OS_") {
            cmd.env_remove(&key);
        }
    }
    cmd.envs(vars.iter().map(|(k, v)| (k, v)))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", log)
        .arg("--bank")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn set(mut vars: Vars, key: &str, value: &str) -> Vars {
    vars.retain(|(k, _)| k != key);
    vars.push((key.to_owned(), value.to_owned()));
    vars
}

fn url(ks: &KeystoneEnv) -> String {
    format!(
        "swift://{}/cli-ks-{}",
        ks.container(),
        uuid::Uuid::new_v4().simple()
    )
}

#[test]
fn an_operator_with_an_openrc_makes_and_checks_a_bank() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    for (what, vars) in [
        ("password", ks.password_vars()),
        ("application credential", ks.app_cred_vars()),
    ] {
        let url = url(&ks);
        let init = cli(&vars, &url, &["init"], "warn");
        assert_eq!(init.status.code(), Some(0), "{what}: {init:?}");
        let list = cli(&vars, &url, &["lease", "list"], "warn");
        assert_eq!(list.status.code(), Some(0), "{what}: {list:?}");
        let doctor = cli(&vars, &url, &["doctor"], "warn");
        let out = text(&doctor.stdout);
        assert_eq!(doctor.status.code(), Some(0), "{what}: {doctor:?}");
        assert!(
            out.contains("lease renewal                     swift-put"),
            "{out}"
        );
        assert!(out.contains("verdict: supported"), "{out}");
    }
}

/// Through Keystone, as with TempAuth, `init` makes a missing container (a PUT on it, as restic
/// does) and says so; a second `init` finds it there.
#[test]
fn init_through_keystone_creates_a_missing_container() {
    use banklease::store::{SwiftBuilder, SwiftConfigKey};
    use object_store::{ObjectStore, ObjectStoreExt};

    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let vars = ks.password_vars();
    let container = format!("cli-ks-init-{}", uuid::Uuid::new_v4().simple());
    let url = format!("swift://{container}/p");
    let init = cli(&vars, &url, &["init"], "warn");
    let again = cli(&vars, &url, &["init"], "warn");
    // Remove what the test made before judging it.
    let mut b = SwiftBuilder::new().with_container(&container);
    for (k, v) in &vars {
        if let Ok(key) = k.parse::<SwiftConfigKey>() {
            b = b.with_config(key, v);
        }
    }
    let store = b.build().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use futures::TryStreamExt;
        let all: Vec<_> = store.list(None).try_collect().await.unwrap_or_default();
        for meta in all {
            let _ = store.delete(&meta.location).await;
        }
        let _ = store.delete_container().await;
    });
    assert_eq!(init.status.code(), Some(0), "{}", text(&init.stderr));
    assert!(
        text(&init.stdout).contains(&format!("container created: container=`{container}`")),
        "{}",
        text(&init.stdout)
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).starts_with("already a bank"),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn each_refusal_is_one_line_naming_the_cause_and_no_secret() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let url = url(&ks);
    let good = ks.password_vars();
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cases: Vec<(&str, Vars, Vec<String>)> = vec![
        (
            "wrong password",
            set(good.clone(), "OS_PASSWORD", "not-the-password-7d1"),
            vec![
                "authentication as user=`tester`".into(),
                "status=401".into(),
                "check OS_PASSWORD".into(),
            ],
        ),
        (
            "unknown project",
            set(good.clone(), "OS_PROJECT_NAME", "no-such-project"),
            vec!["project=`no-such-project`".into(), "status=401".into()],
        ),
        (
            "no object-store endpoint in the catalog",
            set(good.clone(), "OS_PROJECT_NAME", &ks.get("no_swift.project_name")),
            vec!["no object-store service at all (it lists: identity)".into()],
        ),
        (
            "an endpoint for another region",
            set(good.clone(), "OS_REGION_NAME", "RegionTwo"),
            vec![
                "region=`RegionTwo`".into(),
                "offers object-store at public/RegionOne".into(),
                "OS_REGION_NAME".into(),
            ],
        ),
        (
            "keystone unreachable",
            set(
                good.clone(),
                "OS_AUTH_URL",
                &format!("http://127.0.0.1:{closed}/v3"),
            ),
            vec![
                format!("cannot reach the auth service at url=`http://127.0.0.1:{closed}/v3/auth/tokens`"),
                "onnection refused".into(),
            ],
        ),
        (
            "swift refusing the token (403)",
            set(
                set(good.clone(), "OS_USERNAME", &ks.get("auditor.username")),
                "OS_PASSWORD",
                &ks.get("auditor.password"),
            ),
            vec![
                "status=403".into(),
                "keystone accepted the credentials but swift refused the token".into(),
            ],
        ),
        (
            "a wrong application credential secret",
            set(
                ks.app_cred_vars(),
                "OS_APPLICATION_CREDENTIAL_SECRET",
                "not-the-secret-5e2",
            ),
            vec![
                format!("application_credential_id=`{}`", ks.get("app_cred.id")),
                "status=401".into(),
                "OS_APPLICATION_CREDENTIAL_SECRET".into(),
            ],
        ),
    ];
    let secrets = [
        ks.get("tester.password"),
        ks.get("auditor.password"),
        ks.get("app_cred.secret"),
        "not-the-password-7d1".to_owned(),
        "not-the-secret-5e2".to_owned(),
    ];
    for (what, vars, wants) in cases {
        let out = cli(&vars, &url, &["lease", "list"], "warn");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: one line: {err}");
        assert!(lines[0].starts_with("error: "), "{what}: {err}");
        for want in &wants {
            assert!(err.contains(want.as_str()), "{what}: wants `{want}`: {err}");
        }
        // Secrets: neither in the error nor anywhere in the most verbose log.
        let traced = cli(&vars, &url, &["lease", "list"], "trace");
        let all = text(&traced.stderr) + &text(&traced.stdout);
        for s in &secrets {
            assert!(!all.contains(s.as_str()), "{what}: a secret in the output");
        }
    }
}

/// Every object under the bank's prefix with its ETag, as the bank's writer lists it.
async fn objects(bank: &banklease::Bank) -> Vec<(String, Option<String>)> {
    use futures::TryStreamExt;
    let mut all: Vec<_> = bank
        .store()
        .list(Some(bank.prefix()))
        .map_ok(|m| (m.location.to_string(), m.e_tag))
        .try_collect()
        .await
        .unwrap();
    all.sort();
    all
}

/// A user with OpenStack's reader role (Swift lets it read, never write): listing and showing
/// leases and checkpoints, `validity-check`, `checkpoint explain` and `doctor --read-only` work,
/// judged on the `Date` of the store's answers, and write nothing; a live owner is alive and a
/// dead one expired, as the writer sees them. What must write is refused with Swift's 403.
#[test]
fn a_reader_judges_by_the_date_of_the_stores_answers_and_writes_nothing() {
    use std::sync::Arc;
    use std::time::Duration;

    use banklease::clock::SystemClock;
    use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease};

    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let url = url(&ks);
    let writer = ks.password_vars();
    let out = cli(&writer, &url, &["init"], "warn");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let prefix = url["swift://".len()..]
        .split_once('/')
        .unwrap()
        .1
        .to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bank = Bank::from_swift(ks.store(&writer, None), &prefix, &url);
    // A live owner (60 s, not renewed: nothing changes while the reader reads) and a dead one
    // (1 s), each with a protecting checkpoint.
    let (live, dead) = runtime.block_on(async {
        let mut ids = Vec::new();
        for (expire, cp) in [(60, "cp-live"), (1, "cp-dead")] {
            let windows = LeaseWindows::new(
                Duration::from_millis(300),
                Duration::from_secs(expire),
                Duration::from_millis(100),
            )
            .unwrap();
            let lease =
                OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
                    .await
                    .unwrap();
            Checkpoint::create(&lease, &cid(cp)).await.unwrap();
            ids.push(lease.owner_id().to_string());
        }
        (ids[0].clone(), ids[1].clone())
    });
    // The dead owner's 1 s, the default 2 s margin, the Date's second, and slack.
    std::thread::sleep(Duration::from_secs(5));
    let before = runtime.block_on(objects(&bank));

    let reader = set(
        set(writer.clone(), "OS_USERNAME", &ks.get("watcher.username")),
        "OS_PASSWORD",
        &ks.get("watcher.password"),
    );
    for (args, code, needle) in [
        (vec!["lease", "list"], 0, "alive"),
        (vec!["lease", "list"], 0, "expired"),
        (vec!["lease", "show", &live], 0, "alive"),
        (vec!["lease", "show", &dead], 0, "expired"),
        (vec!["validity-check", "--owner", &live], 0, "ok: "),
        (vec!["validity-check", "--owner", &dead], 1, "not ok: "),
        (vec!["checkpoint", "list"], 0, "cp-dead"),
        (
            vec!["checkpoint", "explain", "cp-live"],
            0,
            "its owner is alive",
        ),
        (
            vec!["checkpoint", "explain", "cp-dead"],
            0,
            "its owner's lease is gone",
        ),
        (
            vec!["doctor", "--read-only"],
            0,
            "the Date header of the store's answers",
        ),
    ] {
        let out = cli(&reader, &url, &args, "warn");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stdout}{stderr}");
        assert!(
            stdout.contains(needle),
            "{args:?}: wants `{needle}`: {stdout}"
        );
        // The read-only note, and for the dead owner's 1 s window (shorter than the 2 s margin)
        // the warning that no observer can call it valid.
        for line in stderr.lines() {
            assert!(
                line.contains("the store's time is the Date header of its answers")
                    || line.starts_with("warning: no observer with skew_margin="),
                "{args:?}: only the read-only note on stderr: {stderr}"
            );
        }
    }
    // What must write is refused in one line, with Swift's answer.
    // (`run` exits 125 when it cannot start the job, as `flock` and `env` do.)
    for (args, code) in [(vec!["gc"], 2), (vec!["run", "--", "true"], 125)] {
        let out = cli(&reader, &url, &args, "warn");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(stderr.contains("status=403"), "{args:?}: {stderr}");
    }
    assert_eq!(
        runtime.block_on(objects(&bank)),
        before,
        "the reader wrote to the bank"
    );
}
