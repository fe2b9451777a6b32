//! A test's own `swift-proxy-server` (gc/tests/swift_faults.rs, gc/tests/swift_replicas.rs): a copy
//! of the running single-node Swift's proxy (`.ci/start-swift.sh`) on a free port, with
//! `workers = 0` (one process, so one signal stops it all), optional extra settings, and the
//! faults the tests inject: kill (`SIGKILL`), restart on the same port, pause (`SIGSTOP`) and
//! resume (`SIGCONT`). Killed when dropped, even on panic.

// Real time: it waits for, and signals, a real server process.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the proxy may take to become ready (it takes 2–4 s here).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A `swift-proxy-server` owned by one test; killed when dropped, even on panic.
#[derive(Debug)]
pub struct Proxy {
    child: Option<Child>,
    pub port: u16,
    bin: PathBuf,
    conf: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proxy {
    /// Start a proxy from the shared SAIO's configuration (under `SWIFT_ROOT`) on a free port;
    /// panics (fails the test) if it cannot be started.
    pub async fn start() -> Proxy {
        let root = std::env::var("SWIFT_ROOT")
            .unwrap_or_else(|_| "/tmp/banklease-stores/swift".to_owned());
        Self::start_with(std::path::Path::new(&root), &[]).await
    }

    /// [`start`](Self::start) from the configuration under `root`, with `extra` settings
    /// appended to its `[app:proxy-server]` section.
    pub async fn start_with(root: &std::path::Path, extra: &[&str]) -> Proxy {
        let source = root.join("etc/proxy-server.conf");
        let text = std::fs::read_to_string(&source).unwrap_or_else(|e| {
            panic!(
                "BANKLEASE_TEST_SWIFT=1 but the proxy configuration `{}` cannot be read ({e}); \
                 set SWIFT_ROOT to the directory .ci/start-swift.sh used",
                source.display()
            )
        });
        let port = free_port();
        let mut lines = Vec::new();
        let (mut port_set, mut workers_set) = (false, false);
        for line in text.lines() {
            match line.split('=').next().map(str::trim) {
                Some("bind_port") if !port_set => {
                    lines.push(format!("bind_port = {port}"));
                    port_set = true;
                }
                // One process: one signal stops it all, no worker outlives a kill.
                Some("workers") if !workers_set => {
                    lines.push("workers = 0".to_owned());
                    workers_set = true;
                }
                _ => lines.push(line.to_owned()),
            }
            if line.trim() == "[app:proxy-server]" {
                lines.extend(extra.iter().map(|s| (*s).to_owned()));
            }
        }
        assert!(port_set, "no bind_port in `{}`", source.display());
        if !workers_set {
            let at = lines
                .iter()
                .position(|l| l.trim() == "[DEFAULT]")
                .unwrap_or(0);
            lines.insert(at + 1, "workers = 0".to_owned());
        }
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("proxy-server.conf");
        std::fs::write(&conf, lines.join("\n") + "\n").unwrap();
        let bin = std::env::var("SWIFT_PROXY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from("/usr/bin/swift-proxy-server"));
        let mut proxy = Proxy {
            child: None,
            port,
            bin,
            conf,
            log: dir.path().join("proxy.log"),
            _dir: dir,
        };
        let took = proxy.launch().await;
        eprintln!("test proxy on 127.0.0.1:{port} ready in {took:?}");
        proxy
    }

    pub fn auth_url(&self) -> String {
        format!("http://127.0.0.1:{}/auth/v1.0", self.port)
    }

    /// Spawn the process and wait (bounded) until its healthcheck answers. A process that exits
    /// early (the port still held by a killed predecessor) is tried again, three times at most.
    pub async fn launch(&mut self) -> Duration {
        let started = Instant::now();
        for attempt in 1..=3 {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .unwrap();
            let child = Command::new(&self.bin)
                .arg(&self.conf)
                .arg("-v")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "BANKLEASE_TEST_SWIFT=1 but `{}` cannot be started ({e}); set \
                         SWIFT_PROXY_BIN",
                        self.bin.display()
                    )
                });
            self.child = Some(child);
            let deadline = Instant::now() + READY_WITHIN;
            while Instant::now() < deadline {
                if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                    self.child = None;
                    if attempt < 3 {
                        eprintln!("test proxy exited at start ({status}); trying again");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        break;
                    }
                    panic!(
                        "the test proxy exited at start ({status}); its log:\n{}",
                        self.log_tail()
                    );
                }
                if healthy(self.port).await {
                    return started.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if self.child.is_some() {
                panic!(
                    "the test proxy was not ready within {READY_WITHIN:?}; its log:\n{}",
                    self.log_tail()
                );
            }
        }
        unreachable!("every attempt either returns or panics")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the proxy is running").id()
    }

    /// `kill -9`: every connection is cut at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Start again after [`kill`](Self::kill), on the same port. Returns how long it took.
    pub async fn restart(&mut self) -> Duration {
        assert!(self.child.is_none(), "restart a killed proxy only");
        self.launch().await
    }

    /// `SIGSTOP`: the kernel still accepts connections, nothing answers.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    /// `SIGCONT`: the proxy carries on with the requests that waited.
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }

    pub fn log_tail(&self) -> String {
        let mut file = match std::fs::File::open(&self.log) {
            Ok(f) => f,
            Err(e) => return format!("(no log: {e})"),
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(3000)));
        let mut tail = String::new();
        let _ = file.read_to_string(&mut tail);
        tail
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        self.kill();
    }
}

pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}: {status}");
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One bounded `GET /healthcheck`.
pub async fn healthy(port: u16) -> bool {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"GET /healthcheck HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.ok()?;
        Some(answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Some(true))
    )
}
