//! Secrets never leak: run the library and both binaries with known secrets (S3 keys and session
//! token, a Swift TempAuth key, a Keystone password, a Keystone application credential's secret,
//! a pre-authenticated token) against closed
//! ports on 127.0.0.1, and search everything they print — errors with `{}`, `{:?}` and their
//! source chains, `Debug` of banks, stores and builders, `tracing` output at TRACE, and the
//! processes' stdout and stderr with `RUST_LOG=trace`.
//!
//! The binaries are found next to this test (`target/<profile>/banklease` and `banklease-gc`);
//! `cargo test --workspace` builds them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use banklease::store::SwiftBuilder;
use banklease::{Bank, LeaseObserver, LeaseWindows, OwnerId, OwnerLease};
use object_store::{BackoffConfig, ObjectStore, RetryConfig};

const S3_SECRET: &str = "sekrit-s3-5f1d9c2e7a";
const S3_TOKEN: &str = "sekrit-s3tok-81be44d0c3";
const ST_KEY: &str = "sekrit-st-3c7e19aa42";
const OS_PASSWORD: &str = "sekrit-os-d94b0e6f15";
const OS_TOKEN: &str = "sekrit-ostok-6a2f8e1b90";
const OS_APP_SECRET: &str = "sekrit-osapp-0c5d2e9f47";

const SECRETS: [&str; 6] = [
    S3_SECRET,
    S3_TOKEN,
    ST_KEY,
    OS_PASSWORD,
    OS_TOKEN,
    OS_APP_SECRET,
];

/// Every test that sets the environment holds this.
static ENV: Mutex<()> = Mutex::new(());

/// A port on 127.0.0.1 with nothing listening: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

struct Case {
    name: &'static str,
    url: &'static str,
    env: Vec<(&'static str, String)>,
}

fn cases(port: u16) -> Vec<Case> {
    let at = |path: &str| format!("http://127.0.0.1:{port}{path}");
    vec![
        Case {
            name: "s3",
            url: "s3://bkt/pfx",
            env: vec![
                ("AWS_ACCESS_KEY_ID", "AKIASECRETSTEST".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", S3_SECRET.to_owned()),
                ("AWS_SESSION_TOKEN", S3_TOKEN.to_owned()),
                ("AWS_ENDPOINT", at("")),
                ("AWS_ALLOW_HTTP", "true".to_owned()),
                ("AWS_REGION", "us-east-1".to_owned()),
            ],
        },
        Case {
            name: "swift-tempauth",
            url: "swift://ctr/pfx",
            env: vec![
                ("ST_AUTH", at("/auth/v1.0")),
                ("ST_USER", "test:tester".to_owned()),
                ("ST_KEY", ST_KEY.to_owned()),
            ],
        },
        Case {
            name: "swift-keystone",
            url: "swift://ctr/pfx",
            env: vec![
                ("OS_AUTH_URL", at("/v3")),
                ("OS_USERNAME", "admin".to_owned()),
                ("OS_PASSWORD", OS_PASSWORD.to_owned()),
                ("OS_PROJECT_NAME", "demo".to_owned()),
            ],
        },
        Case {
            name: "swift-keystone-application-credential",
            url: "swift://ctr/pfx",
            env: vec![
                ("OS_AUTH_URL", at("/v3")),
                ("OS_AUTH_TYPE", "v3applicationcredential".to_owned()),
                (
                    "OS_APPLICATION_CREDENTIAL_ID",
                    "ac-id-not-secret".to_owned(),
                ),
                ("OS_APPLICATION_CREDENTIAL_SECRET", OS_APP_SECRET.to_owned()),
            ],
        },
        Case {
            name: "swift-token",
            url: "swift://ctr/pfx",
            env: vec![
                ("OS_AUTH_TOKEN", OS_TOKEN.to_owned()),
                ("OS_STORAGE_URL", at("/v1/AUTH_test")),
            ],
        },
    ]
}

const CREDENTIAL_VARS: [&str; 20] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT",
    "AWS_ALLOW_HTTP",
    "AWS_REGION",
    "ST_AUTH",
    "ST_USER",
    "ST_KEY",
    "OS_AUTH_URL",
    "OS_USERNAME",
    "OS_PASSWORD",
    "OS_PROJECT_NAME",
    "OS_AUTH_TOKEN",
    "OS_STORAGE_URL",
    "OS_PROJECT_ID",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "OS_AUTH_TYPE",
    "OS_APPLICATION_CREDENTIAL_ID",
    "OS_APPLICATION_CREDENTIAL_SECRET",
];

/// Where a secret shows up in `text`, if it does: the whole secret or its distinctive tail
/// (which survives truncation and most escaping).
fn leaks(text: &str) -> Vec<&'static str> {
    SECRETS
        .iter()
        .copied()
        .filter(|s| {
            let tail = &s[s.len() - 10..];
            text.contains(s) || text.contains(tail)
        })
        .collect()
}

fn assert_clean(what: &str, text: &str) {
    let found = leaks(text);
    assert!(
        found.is_empty(),
        "{what} leaks {found:?}; the offending text:\n{text}"
    );
}

/// `{}`, `{:?}`, `{:#}`-like chain of an error.
fn render(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = format!("display: {e}\ndebug: {e:?}\nchain:");
    let mut source = Some(e);
    while let Some(err) = source {
        out.push_str(&format!(" -> {err}"));
        source = err.source();
    }
    out
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Retries cut short so that a request against a closed port fails within a second.
fn fast_retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(10),
            base: 2.0,
        },
        max_retries: 1,
        retry_timeout: Duration::from_secs(2),
    }
}

/// The same store `Bank::open` makes for `case`, with short retries.
fn fast_store(case: &Case) -> Arc<dyn ObjectStore> {
    if case.name == "s3" {
        Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name("bkt")
                .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
                .with_retry(fast_retry())
                .build()
                .unwrap(),
        )
    } else {
        Arc::new(
            SwiftBuilder::from_env()
                .with_container("ctr")
                .with_retry(fast_retry())
                .build()
                .unwrap(),
        )
    }
}

/// Everything the library prints for `case`, in-process.
async fn library_output(case: &Case) -> String {
    let mut out = String::new();
    // Opening makes no request: the bank and its store must print without secrets.
    let bank = Bank::open(case.url).unwrap_or_else(|e| panic!("{}: {}", case.name, render(&e)));
    out.push_str(&format!(
        "{bank:?}\n{:?}\n{}\n{}\n",
        bank.store(),
        bank.store(),
        bank.label()
    ));
    if case.name != "s3" {
        out.push_str(&format!("{:?}\n", SwiftBuilder::from_env()));
        let built = SwiftBuilder::from_env()
            .with_container("ctr")
            .build()
            .unwrap();
        out.push_str(&format!("{built:?}\n{built}\n"));
    }
    // Requests: every one fails against the closed port.
    let bank = Bank::from_store(fast_store(case), "pfx", case.url);
    let err = bank
        .capabilities()
        .await
        .expect_err("nothing listens on the port");
    let text = render(&err);
    assert!(
        text.contains("127.0.0.1") || text.to_lowercase().contains("connect"),
        "{}: not a connection error: {text}",
        case.name
    );
    out.push_str(&text);
    let windows = LeaseWindows::default();
    let clock: banklease::clock::SharedClock = Arc::new(banklease::clock::SystemClock);
    let err = OwnerLease::acquire(&bank, OwnerId::random(), windows, clock.clone())
        .await
        .expect_err("acquire fails");
    out.push_str(&render(&err));
    let observer = LeaseObserver::new(bank.clone(), clock.clone(), Duration::from_secs(1));
    match observer.store_time().await {
        Ok(t) => panic!("{}: store time read from a closed port: {t:?}", case.name),
        Err(e) => out.push_str(&render(&e)),
    }
    let err = bank
        .store()
        .list_with_delimiter(None)
        .await
        .expect_err("listing fails");
    out.push_str(&render(&err));
    out
}

fn set_case_env(case: &Case) {
    for var in CREDENTIAL_VARS {
        std::env::remove_var(var);
    }
    for (k, v) in &case.env {
        std::env::set_var(k, v);
    }
}

#[test]
fn the_library_prints_no_secret() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let port = closed_port();
    for case in cases(port) {
        set_case_env(&case);
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = tracing::subscriber::with_default(subscriber, || {
            runtime.block_on(library_output(&case))
        });
        let logs = captured.text();
        assert!(!logs.is_empty(), "{}: tracing captured nothing", case.name);
        assert_clean(&format!("{}: library errors and Debug", case.name), &out);
        assert_clean(&format!("{}: tracing at TRACE", case.name), &logs);
    }
    for var in CREDENTIAL_VARS {
        std::env::remove_var(var);
    }
}

/// `target/<profile>/<name>`, from this test's own path `target/<profile>/deps/secrets-<hash>`.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries with `cargo test --workspace` (or `cargo build \
         --workspace`) first",
        path.display()
    );
    path
}

/// Run `bin args` with only `env` (and `RUST_LOG=trace`), for at most `limit`; its output.
fn run_for(bin: &Path, args: &[&str], env: &[(&str, String)], limit: Duration) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_clear()
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child: Child = cmd.spawn().unwrap();
    // Bounded: poll every 50 ms until it exits or `limit` has passed, then kill it. Against a
    // closed port the binaries retry for a while; every attempt is logged at TRACE.
    let polls = limit.as_millis() / 50;
    let mut status = None;
    for _ in 0..polls {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    format!("--- exit: {status:?}\n--- stdout\n{out}\n--- stderr\n{err}")
}

#[test]
fn the_binaries_print_no_secret() {
    let cli = binary("banklease");
    let gc = binary("banklease-gc");
    let port = closed_port();
    let runs: Vec<(String, String)> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for case in cases(port) {
            for (bin, args) in [
                (&cli, vec!["--bank", case.url, "lease", "list"]),
                (&cli, vec!["--bank", case.url, "gc", "--dry-run"]),
                (&gc, vec!["--bank", case.url, "--once"]),
            ] {
                let env = case.env.clone();
                let what = format!("{} {}", bin.display(), args.join(" "));
                let args: Vec<&str> = args.clone();
                handles.push(s.spawn(move || {
                    let out = run_for(bin, &args, &env, Duration::from_secs(8));
                    (what, out)
                }));
            }
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (what, out) in &runs {
        // Not vacuous: each run got far enough to try the store.
        assert!(
            out.contains("127.0.0.1"),
            "{what}: never tried the store, so there is little to search:\n{out}"
        );
        assert_clean(what, out);
    }
}

#[test]
fn a_leak_would_be_found() {
    // The search itself: a secret anywhere, whole or as its tail, is found.
    assert_eq!(leaks(&format!("x-auth-key: {ST_KEY}")), [ST_KEY]);
    assert_eq!(
        leaks(&format!("password=\"…{}\"", &OS_PASSWORD[6..])),
        [OS_PASSWORD]
    );
    assert!(leaks("x-auth-key: ***").is_empty());
}
