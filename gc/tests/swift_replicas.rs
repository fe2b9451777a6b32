//! Leases and GC passes on a 3-replica Swift whose object servers disagree.
//!
//! `SWIFT_REPLICAS=3 .ci/start-swift.sh` (what `.ci/run` starts) runs three object servers,
//! one device each, under a 3-replica object ring, with no replicator: an object server that
//! was down while objects changed serves its old copies until they are written again. The test
//! stops one of them while an owner renews its lease, completes a checkpoint, and GC passes
//! run; starts it again; and then shows, reading through the library, that
//!
//! - lease reads (`banklease::lease::read_lease`, `LeaseObserver::view`) never return the
//!   stale lease (compared with the oldest `X-Timestamp` of the two servers that stayed up,
//!   read directly before each read is sent), nor `index.json`/decision reads the stale
//!   checkpoint, nor a HEAD the marker that the stale server still holds;
//! - GC passes during and after the outage collect nothing of the live owner (its markers,
//!   `index.json`, data, decision and lease are all still there, read object by object —
//!   never a listing for absence) while they do collect a dead owner's checkpoints, and the
//!   live owner's keeper never loses its lease.
//!
//! The test is not vacuous: it checks on each object server directly (HEAD
//! `/<device>/<partition>/<account>/<container>/<object>`, partitions from the ring) that the
//! restarted server holds the stale lease, the stale `index.json` and the deleted marker, and
//! it counts (and prints) how often the proxy serves the stale copies to raw requests without
//! `X-Newest`, and with it.
//!
//! Two proxies of the test's own (copies of the shared one's configuration, as in
//! `swift_faults.rs`, started on free ports), so that the shared proxy (`ST_AUTH`) never
//! meets the outage and keeps no error-limit state beyond the test:
//! - the owners' proxy error-limits the stopped server from its first refused connection for
//!   the rest of the test (`error_suppression_limit = 0`, `error_suppression_interval = 600`),
//!   as every Swift proxy does for 60 s after 10 errors: the owner's renewals after the
//!   restart keep missing that server, so its stale copy stays stale while the test reads;
//! - the readers' proxy (GC, observers, raw requests) never error-limits, so it asks the
//!   restarted server as soon as it answers.
//!
//! Needs `BANKLEASE_TEST_SWIFT=1` and the 3-replica exports of `.ci/start-swift.sh`
//! (`SWIFT_REPLICAS=3`, `SWIFT_OBJECT_CTL`, `SWIFT_OBJECT_PORTS`, `SWIFT_ROOT`), plus `ST_*`
//! and `SWIFT_CONTAINER`; otherwise it says that it skips.
#![allow(clippy::disallowed_methods)] // a real server and a real outage: real time

use banklease_testkit::backends;
use banklease_testkit::cid;
use banklease_testkit::swift_proxy;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use banklease::checkpoint::{self, Decider, Status};
use banklease::clock::{Jitter, MockClock, SystemClock};
use banklease::paths::{Key, Prefix};
use banklease::store::SwiftBuilder;
use banklease::Checkpoint;
use banklease::CheckpointId;
use banklease::{Bank, LeaseState, LeaseWindows, OwnerId, OwnerLease};
use banklease::{LeaseObserver, LeaseView};
use banklease_gc::{Collector, GcOptions, PassReport};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use swift_proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TEST: &str = "swift_replicas";
/// The live owner's windows: it renews every second, and rides out a few slow renewals on a
/// loaded machine.
const RENEW: Duration = Duration::from_secs(1);
const EXPIRE: Duration = Duration::from_secs(6);
const VALIDITY: Duration = Duration::from_millis(500);
/// The GC's skew margin (Swift's `Last-Modified` has whole seconds) and grace.
const MARGIN: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_millis(500);
/// Long enough that the lease copy the stopped server keeps looks expired past grace: a GC
/// that judged it would collect the live owner.
const OUTAGE: Duration = Duration::from_millis(6000 + 1000 + 500 + 2000);
/// Rounds of reads once the stale server is back.
const ROUNDS: usize = 40;
/// A GC pass every this many rounds.
const PASS_EVERY: usize = 8;
/// The object server the test stops (1-based, as `.ci/swift-object.sh` counts).
const STOPPED: usize = 2;
const DATA: [&str; 2] = ["d0", "d1"];

// ---- environment --------------------------------------------------------------------------

/// The 3-replica Swift started by `SWIFT_REPLICAS=3 .ci/start-swift.sh`.
#[derive(Debug, Clone)]
struct Replicas {
    /// `.ci/swift-object.sh`: `stop|start N`.
    ctl: PathBuf,
    /// The object servers' ports, server 1 first.
    ports: Vec<u16>,
    root: PathBuf,
}

impl Replicas {
    /// `None` (after saying why) when the test must skip.
    fn from_env() -> Option<Replicas> {
        if !backends::backends().contains(&backends::Backend::Swift) {
            eprintln!(
                "{TEST}: skipped: needs BANKLEASE_TEST_SWIFT=1 and a 3-replica Swift \
                 (SWIFT_REPLICAS=3 .ci/start-swift.sh; .ci/run starts it)"
            );
            return None;
        }
        if std::env::var("SWIFT_REPLICAS").as_deref() != Ok("3") {
            eprintln!(
                "{TEST}: skipped: BANKLEASE_TEST_SWIFT=1 but SWIFT_REPLICAS is not 3: start \
                 Swift with `SWIFT_REPLICAS=3 .ci/start-swift.sh` and eval its export line \
                 (.ci/run does)"
            );
            return None;
        }
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("SWIFT_REPLICAS=3 but {name} is not set: eval the export line of .ci/start-swift.sh")
            })
        };
        let ports: Vec<u16> = var("SWIFT_OBJECT_PORTS")
            .split(',')
            .map(|p| p.trim().parse().expect("SWIFT_OBJECT_PORTS: ports"))
            .collect();
        assert_eq!(ports.len(), 3, "SWIFT_OBJECT_PORTS: three ports");
        Some(Replicas {
            ctl: PathBuf::from(var("SWIFT_OBJECT_CTL")),
            ports,
            root: PathBuf::from(
                std::env::var("SWIFT_ROOT")
                    .unwrap_or_else(|_| "/tmp/banklease-stores/swift".to_owned()),
            ),
        })
    }

    /// `swift-object.sh <action> <n>`, bounded; panics when it fails.
    async fn ctl(&self, action: &str, n: usize) -> Duration {
        let started = Instant::now();
        let run = tokio::process::Command::new("bash")
            .arg(&self.ctl)
            .arg(action)
            .arg(n.to_string())
            .env("SWIFT_ROOT", &self.root)
            .stdin(Stdio::null())
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .unwrap_or_else(|_| panic!("`{} {action} {n}` took over 60 s", self.ctl.display()))
            .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", self.ctl.display()));
        assert!(
            out.status.success(),
            "`{} {action} {n}`: {}\n{}{}",
            self.ctl.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    }

    /// Stop object server `n`; it is started again when the returned guard is dropped, even
    /// on panic (the shared Swift must be whole for the next suites).
    async fn stop(&self, n: usize) -> Stopped {
        self.ctl("stop", n).await;
        Stopped {
            replicas: self.clone(),
            n,
            running: false,
        }
    }

    /// For each object, where each server keeps it: `(server index 0..3, path)` with the
    /// path `/<device>/<partition>/<account>/<container>/<object>`, from the object ring.
    async fn locate(
        &self,
        account: &str,
        container: &str,
        objects: &[Path],
    ) -> Vec<Vec<(usize, String)>> {
        const SCRIPT: &str = r#"
import sys
from swift.common.ring import Ring
ring = Ring(sys.argv[1])
for obj in sys.argv[4:]:
    part, nodes = ring.get_nodes(sys.argv[2], sys.argv[3], obj)
    print(' '.join('%d:%s:%d' % (n['port'], n['device'], part) for n in nodes))
"#;
        let ring = self.root.join("etc/object.ring.gz");
        let out = tokio::process::Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(SCRIPT)
            .arg(&ring)
            .arg(account)
            .arg(container)
            .args(objects.iter().map(|p| p.as_ref().to_owned()))
            .stdin(Stdio::null())
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out)
            .await
            .expect("the ring lookup took over 60 s")
            .expect("run /usr/bin/python3 (the Debian packages' Swift modules read the ring)");
        assert!(
            out.status.success(),
            "ring lookup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), objects.len(), "ring lookup: {text}");
        lines
            .iter()
            .zip(objects)
            .map(|(line, object)| {
                let mut at: Vec<(usize, String)> = line
                    .split_whitespace()
                    .map(|node| {
                        let mut f = node.split(':');
                        let port: u16 = f.next().unwrap().parse().unwrap();
                        let device = f.next().unwrap();
                        let part = f.next().unwrap();
                        let server = self
                            .ports
                            .iter()
                            .position(|p| *p == port)
                            .unwrap_or_else(|| panic!("ring names port {port}, not exported"));
                        (
                            server,
                            format!("/{device}/{part}/{account}/{container}/{object}"),
                        )
                    })
                    .collect();
                at.sort();
                assert_eq!(at.len(), 3, "{object}: every server holds a replica");
                at
            })
            .collect()
    }

    /// HEAD one object on every object server directly (no proxy, no `X-Newest`).
    async fn direct(&self, at: &[(usize, String)]) -> [Replica; 3] {
        let mut out = [Replica::Missing, Replica::Missing, Replica::Missing];
        for (server, path) in at {
            let answer = http(self.ports[*server], "HEAD", path, &[]).await;
            out[*server] = Replica::of(&answer);
        }
        out
    }
}

/// An object server stopped by [`Replicas::stop`].
struct Stopped {
    replicas: Replicas,
    n: usize,
    running: bool,
}

impl Stopped {
    /// Start it again; how long it took to answer.
    async fn restart(&mut self) -> Duration {
        let took = self.replicas.ctl("start", self.n).await;
        self.running = true;
        took
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.running {
            let _ = std::process::Command::new("bash")
                .arg(&self.replicas.ctl)
                .arg("start")
                .arg(self.n.to_string())
                .env("SWIFT_ROOT", &self.replicas.root)
                .stdin(Stdio::null())
                .status();
        }
    }
}

/// What one object server holds of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Replica {
    Missing,
    /// Its `X-Timestamp` (10 µs units: whole µs here) and the data file's timestamp.
    Present {
        x_timestamp: i64,
        data: i64,
    },
}

impl Replica {
    fn of(answer: &Answer) -> Replica {
        if answer.status != 200 {
            return Replica::Missing;
        }
        let x_timestamp = answer.micros("x-timestamp").expect("X-Timestamp");
        Replica::Present {
            x_timestamp,
            data: answer
                .micros("x-backend-data-timestamp")
                .unwrap_or(x_timestamp),
        }
    }

    fn x_timestamp(self) -> Option<i64> {
        match self {
            Replica::Present { x_timestamp, .. } => Some(x_timestamp),
            Replica::Missing => None,
        }
    }
}

// ---- raw HTTP on 127.0.0.1 ----------------------------------------------------------------

#[derive(Debug)]
struct Answer {
    status: u16,
    /// Lowercase names.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    /// A Swift timestamp header (`1795425979.47698`) in µs since the epoch.
    fn micros(&self, name: &str) -> Option<i64> {
        swift_micros(self.headers.get(name)?)
    }
}

fn swift_micros(s: &str) -> Option<i64> {
    let s = s.split('_').next()?.trim();
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut frac = frac.to_owned();
    frac.truncate(6);
    while frac.len() < 6 {
        frac.push('0');
    }
    Some(secs.parse::<i64>().ok()? * 1_000_000 + frac.parse::<i64>().ok()?)
}

/// One HTTP/1.0 request to 127.0.0.1:`port`, bounded by 10 s; panics on a transport error.
async fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let mut req = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} 127.0.0.1:{port}{path}: no answer within 10 s"))
        .unwrap_or_else(|e| panic!("{method} 127.0.0.1:{port}{path}: {e}"));
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} 127.0.0.1:{port}{path}: no header end"));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} 127.0.0.1:{port}{path}: bad status line"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    }
}

// ---- the test's proxies ---------------------------------------------------------------------

// The test's proxies (testkit's swift_proxy), started with `Proxy::start_with(root, extra)`:
// the shared one's configuration with `extra` settings for `[app:proxy-server]`.

/// A bank on `prefix` through `proxy` (the client options `Bank::open` uses).
fn proxy_bank(proxy: &Proxy, prefix: &str) -> Bank {
    let store = SwiftBuilder::new()
        .with_tempauth(
            format!("http://127.0.0.1:{}/auth/v1.0", proxy.port),
            std::env::var("ST_USER").unwrap_or_else(|_| "test:tester".to_owned()),
            std::env::var("ST_KEY").unwrap_or_else(|_| "testing".to_owned()),
        )
        .with_container(container())
        .build()
        .unwrap();
    Bank::from_swift(store, prefix, &format!("swift via :{}", proxy.port))
}

/// A TempAuth token and the account (`AUTH_test`) through `proxy`, for raw requests.
async fn proxy_token(proxy: &Proxy) -> (String, String) {
    let user = std::env::var("ST_USER").unwrap_or_else(|_| "test:tester".to_owned());
    let key = std::env::var("ST_KEY").unwrap_or_else(|_| "testing".to_owned());
    let a = http(
        proxy.port,
        "GET",
        "/auth/v1.0",
        &[("X-Auth-User", &user), ("X-Auth-Key", &key)],
    )
    .await;
    assert_eq!(a.status, 200, "tempauth: {a:?}");
    let token = a.headers["x-auth-token"].clone();
    let url = &a.headers["x-storage-url"];
    let account = url.rsplit('/').next().unwrap().to_owned();
    (token, account)
}

fn container() -> String {
    std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".to_owned())
}

// ---- owners, passes, checks -----------------------------------------------------------------

/// `n` protecting checkpoints of `lease`'s owner with [`DATA`] each.
async fn protecting(lease: &OwnerLease, tag: &str, n: usize) -> Vec<Checkpoint> {
    futures::stream::iter(0..n)
        .map(|i| async move {
            let cp = Checkpoint::create(lease, &cid(&format!("{tag}-{i:02}")))
                .await
                .unwrap();
            for d in DATA {
                cp.put_data(d, PutPayload::from_static(b"bytes"))
                    .await
                    .unwrap();
            }
            cp
        })
        .buffered(4)
        .collect()
        .await
}

async fn exists(bank: &Bank, path: &Path) -> bool {
    match bank.store().head(path).await {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("HEAD {path}: {e}"),
    }
}

fn gc_options() -> GcOptions {
    GcOptions::builder()
        .grace(GRACE)
        .skew_margin(MARGIN)
        .concurrency(4)
        .max_deletions(0)
        .brake_ratio(1.0)
        .brake_min(1_000_000)
        .dry_run(false)
        .force(false)
        .reap_leases(true)
        .build()
}

/// What the test saw, reported in full when it fails.
#[derive(Debug, Default)]
struct Seen {
    lease_reads: usize,
    /// Lease reads through the library older than what both up-to-date servers held before
    /// the read was sent: (round, X-Timestamp read, oldest up-to-date X-Timestamp).
    stale_lease_reads: Vec<(usize, i64, i64)>,
    /// `LeaseObserver::view` answers other than Alive: (round, view).
    not_alive: Vec<(usize, String)>,
    /// `index.json` / decision / marker reads that returned the stale server's copy.
    stale_checkpoint_reads: Vec<String>,
    /// Raw proxy GETs of the lease that returned the stale server's copy, without and with
    /// `X-Newest`.
    raw_stale_lease: [usize; 2],
    /// Raw proxy GETs of `index.json` that returned the stale copy, without and with.
    raw_stale_index: [usize; 2],
    /// Raw proxy HEADs of the deleted marker answered 200, without and with.
    raw_resurrected_marker: [usize; 2],
    raw_rounds: usize,
    passes: Vec<PassReport>,
    /// When the live owner's lease was found deleted (a pass reaped it).
    lease_gone: Option<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_object_server_is_never_read_and_passes_collect_nothing_of_the_live_owner() {
    let Some(replicas) = Replicas::from_env() else {
        return;
    };
    let started = Instant::now();
    let (owners_proxy, readers_proxy) = tokio::join!(
        Proxy::start_with(
            &replicas.root,
            &[
                "error_suppression_limit = 0",
                "error_suppression_interval = 600",
            ]
        ),
        Proxy::start_with(&replicas.root, &["error_suppression_limit = 1000000"]),
    );
    let prefix = format!("replicas-{}", uuid::Uuid::new_v4().simple());
    let owners = proxy_bank(&owners_proxy, &prefix);
    let readers = proxy_bank(&readers_proxy, &prefix);
    // Made a bank first, as an operator does (`banklease init`).
    banklease::layout::init(&owners).await.unwrap();
    let (token, account) = proxy_token(&readers_proxy).await;
    eprintln!("{TEST}: proxies ready in {:?}", started.elapsed());

    // The live owner: a keeper renews every second through the owners' proxy.
    let lease = OwnerLease::acquire(
        &owners,
        OwnerId::random(),
        LeaseWindows::new(RENEW, EXPIRE, VALIDITY).unwrap(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let owner = lease.owner_id().clone();
    let keeper = lease.spawn_keeper(Jitter::seeded(11), 0.1);
    // Every state the keeper published, and when (since `started`).
    let history = Arc::new(Mutex::new(Vec::<(Duration, LeaseState)>::new()));
    {
        let mut rx = keeper.state();
        let history = Arc::clone(&history);
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let state = rx.borrow_and_update().clone();
                let last = !matches!(state, LeaseState::Held { .. });
                history.lock().unwrap().push((started.elapsed(), state));
                if last {
                    return;
                }
            }
        });
    }
    let lost = || {
        history.lock().unwrap().iter().find_map(|(at, s)| match s {
            LeaseState::Lost { reason } => Some(format!("at {at:?}: {reason}")),
            _ => None,
        })
    };
    let mut live = protecting(&lease, "live", 4).await;
    // Completed during the outage: the stopped server keeps it protecting, with its marker.
    let done = live.pop().unwrap();
    let live_ids: Vec<CheckpointId> = live.iter().map(|c| c.id().to_owned()).collect();
    let done_id = done.id().to_owned();
    // A dead owner: its clock is frozen and nothing renews its lease; the positive control.
    let dead = OwnerLease::acquire(
        &owners,
        OwnerId::random(),
        LeaseWindows::new(RENEW, Duration::from_secs(2), VALIDITY).unwrap(),
        Arc::new(MockClock::new()),
    )
    .await
    .unwrap();
    let dead_ids: Vec<CheckpointId> = protecting(&dead, "dead", 4)
        .await
        .iter()
        .map(|c| c.id().to_owned())
        .collect();
    let (acquired, _) = banklease::lease::read_lease(&readers, &owner)
        .await
        .unwrap()
        .expect("the live lease");

    let lease_path = readers.lease_path(&owner);
    let index_path = Key::Index(done_id.clone()).path(&readers);
    let marker_path = Key::marker(&owner, &done_id).path(&readers);
    let located = replicas
        .locate(
            &account,
            &container(),
            &[lease_path.clone(), index_path.clone(), marker_path.clone()],
        )
        .await;
    let (lease_at, index_at, marker_at) = (&located[0], &located[1], &located[2]);
    let stopped_ix = STOPPED - 1;
    let up: Vec<usize> = (0..3).filter(|i| *i != stopped_ix).collect();
    let observer = LeaseObserver::new(readers.clone(), Arc::new(SystemClock), MARGIN);
    let collector = Collector::new(readers.clone(), Arc::new(SystemClock), gc_options());
    let mut seen = Seen::default();
    eprintln!("{TEST}: owners ready at {:?}", started.elapsed());

    // 1. The outage: object server STOPPED is down while the owner renews and completes a
    //    checkpoint, and GC passes run.
    let mut stopped = replicas.stop(STOPPED).await;
    let down = Instant::now();
    eprintln!(
        "{TEST}: object server {STOPPED} stopped at {:?}",
        started.elapsed()
    );
    done.complete(Status::Available).await.unwrap_or_else(|e| {
        panic!(
            "{TEST}: completing a checkpoint during the outage: {e}; the keeper published \
             {:?}",
            history.lock().unwrap()
        )
    });
    while down.elapsed() < OUTAGE {
        seen.passes.push(
            collector
                .run_pass()
                .await
                .expect("a pass during the outage"),
        );
        let store_time = observer.store_time().await.unwrap();
        let view = observer.view(&owner, &store_time).await;
        if !matches!(view, LeaseView::Alive { .. }) {
            seen.not_alive.push((0, format!("{view:?}")));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let restart = stopped.restart().await;
    eprintln!(
        "{TEST}: object server {STOPPED} down for {:?} (restart took {restart:?})",
        down.elapsed()
    );

    // 2. The restarted server holds stale copies: checked on each server directly.
    let lease_copies = replicas.direct(lease_at).await;
    let index_copies = replicas.direct(index_at).await;
    let marker_copies = replicas.direct(marker_at).await;
    eprintln!(
        "{TEST}: lease copies {lease_copies:?}, index.json copies {index_copies:?}, marker \
         copies {marker_copies:?} (server {STOPPED} was down)"
    );
    let stale_lease = lease_copies[stopped_ix]
        .x_timestamp()
        .expect("the stopped server keeps the lease");
    let fresh_lease = up
        .iter()
        .map(|i| lease_copies[*i].x_timestamp().expect("an up-to-date lease"))
        .min()
        .unwrap();
    assert!(
        stale_lease + 1_000_000 < fresh_lease,
        "the restarted server's lease copy ({stale_lease}) is not older than the others' \
         ({fresh_lease}): the test would prove nothing"
    );
    let stale_index = index_copies[stopped_ix]
        .x_timestamp()
        .expect("the stopped server keeps index.json");
    let fresh_index = up
        .iter()
        .map(|i| {
            index_copies[*i]
                .x_timestamp()
                .expect("an up-to-date index.json")
        })
        .min()
        .unwrap();
    assert!(
        stale_index < fresh_index,
        "the restarted server's index.json is not stale: the test would prove nothing"
    );
    assert!(
        marker_copies[stopped_ix] != Replica::Missing
            && up.iter().all(|i| marker_copies[*i] == Replica::Missing),
        "the restarted server does not hold the deleted marker alone: {marker_copies:?}"
    );

    // 3. Reads through the library (X-Newest) and raw ones, while the stale copies stay.
    let auth = [("X-Auth-Token", token.as_str())];
    let auth_newest = [("X-Auth-Token", token.as_str()), ("X-Newest", "true")];
    let proxy_path = |p: &Path| format!("/v1/{account}/{}/{p}", container());
    for round in 1..=ROUNDS {
        let before = replicas.direct(lease_at).await;
        let Some(fresh) = up.iter().map(|i| before[*i].x_timestamp()).min().flatten() else {
            seen.lease_gone = Some(format!("before round {round}: {before:?}"));
            break;
        };
        let Some((record, meta)) = banklease::lease::read_lease(&readers, &owner)
            .await
            .unwrap()
        else {
            seen.lease_gone = Some(format!("read in round {round}"));
            break;
        };
        // `read_lease` checks the owner; a renewal rewrites the body with the next generation.
        assert!(
            record.generation >= acquired.generation,
            "round {round}: generation {} after {}",
            record.generation,
            acquired.generation
        );
        seen.lease_reads += 1;
        let read = meta.last_modified.timestamp_micros();
        // Both up-to-date servers held `fresh` or newer before the read was sent.
        if read + 100_000 < fresh {
            seen.stale_lease_reads.push((round, read, fresh));
        }
        let store_time = observer.store_time().await.unwrap();
        let view = observer.view(&owner, &store_time).await;
        if !matches!(view, LeaseView::Alive { .. }) {
            seen.not_alive.push((round, format!("{view:?}")));
        }
        match checkpoint::read_checkpoint(&readers, &done_id)
            .await
            .unwrap()
        {
            Some(r) if r.status == Status::Available => {}
            other => seen
                .stale_checkpoint_reads
                .push(format!("round {round}: index.json {other:?}")),
        }
        match checkpoint::read_decision(&readers, &done_id).await.unwrap() {
            Some(d) if d.by == Decider::Owner => {}
            other => seen
                .stale_checkpoint_reads
                .push(format!("round {round}: decision {other:?}")),
        }
        if exists(&readers, &marker_path).await {
            seen.stale_checkpoint_reads
                .push(format!("round {round}: the deleted marker exists"));
        }

        // Raw proxy requests: how often the stale server answers, without and with X-Newest.
        for (i, headers) in [&auth[..], &auth_newest[..]].into_iter().enumerate() {
            let a = http(readers_proxy.port, "GET", &proxy_path(&lease_path), headers).await;
            assert_eq!(a.status, 200, "raw GET lease: {a:?}");
            if a.micros("x-timestamp").unwrap() + 100_000 < fresh {
                seen.raw_stale_lease[i] += 1;
            }
            let a = http(readers_proxy.port, "GET", &proxy_path(&index_path), headers).await;
            assert_eq!(a.status, 200, "raw GET index.json: {a:?}");
            if a.micros("x-timestamp").unwrap() < fresh_index {
                seen.raw_stale_index[i] += 1;
                assert!(
                    String::from_utf8_lossy(&a.body).contains("protecting"),
                    "the stale index.json"
                );
            }
            let a = http(
                readers_proxy.port,
                "HEAD",
                &proxy_path(&marker_path),
                headers,
            )
            .await;
            if a.status == 200 {
                seen.raw_resurrected_marker[i] += 1;
            }
        }
        seen.raw_rounds += 1;
        if round % PASS_EVERY == 0 {
            seen.passes.push(
                collector
                    .run_pass()
                    .await
                    .expect("a pass after the restart"),
            );
        }
    }
    // The stale copy was there all along (the owners' proxy skips the restarted server), unless
    // a pass deleted the lease.
    let after = replicas.direct(lease_at).await;
    assert!(
        seen.lease_gone.is_some() || after[stopped_ix].x_timestamp() == Some(stale_lease),
        "the restarted server's lease copy changed during the reads: {after:?}"
    );

    // 4. The live owner: its keeper never lost the lease, and nothing of it was collected.
    let lost = lost();
    let held = lease.check_validity();
    let mut missing = Vec::new();
    for id in &live_ids {
        let status = checkpoint::read_checkpoint(&readers, &cid(id.as_str()))
            .await
            .unwrap()
            .map(|r| r.status);
        if status != Some(Status::Protecting) {
            missing.push(format!("{id}: index.json {status:?}"));
        }
        if let Some(d) = checkpoint::read_decision(&readers, &cid(id.as_str()))
            .await
            .unwrap()
        {
            missing.push(format!("{id}: decision by {:?}", d.by));
        }
        if !exists(
            &readers,
            &Key::marker(&owner, &cid(id.as_str())).path(&readers),
        )
        .await
        {
            missing.push(format!("{id}: marker"));
        }
        for d in DATA {
            if !exists(
                &readers,
                &Prefix::Data(&cid(id.as_str())).path(&readers).join(d),
            )
            .await
            {
                missing.push(format!("{id}: {d}"));
            }
        }
    }
    for d in DATA {
        if !exists(&readers, &Prefix::Data(&done_id).path(&readers).join(d)).await {
            missing.push(format!("{done_id}: {d}"));
        }
    }
    // The positive control: the dead owner's checkpoints were collected.
    let mut not_collected = Vec::new();
    for id in &dead_ids {
        let status = checkpoint::read_checkpoint(&readers, &cid(id.as_str()))
            .await
            .unwrap()
            .map(|r| r.status);
        if status != Some(Status::Deleted) {
            not_collected.push(format!("{id}: {status:?}"));
        }
    }
    let _ = keeper.release().await;

    let collected: u64 = seen.passes.iter().map(|p| p.collected).sum();
    eprintln!(
        "{TEST}: {} lease reads through the library after the restart, {} stale; {} views not \
         alive; {} stale checkpoint reads; {} passes collected {collected}",
        seen.lease_reads,
        seen.stale_lease_reads.len(),
        seen.not_alive.len(),
        seen.stale_checkpoint_reads.len(),
        seen.passes.len(),
    );
    eprintln!(
        "{TEST}: raw proxy requests, {} rounds, without / with X-Newest: stale lease {} / {}, \
         stale index.json {} / {}, deleted marker answered 200 {} / {}",
        seen.raw_rounds,
        seen.raw_stale_lease[0],
        seen.raw_stale_lease[1],
        seen.raw_stale_index[0],
        seen.raw_stale_index[1],
        seen.raw_resurrected_marker[0],
        seen.raw_resurrected_marker[1],
    );
    eprintln!("{TEST}: took {:?}", started.elapsed());

    let mut violations = Vec::new();
    if let Some(when) = &seen.lease_gone {
        violations.push(format!("the live owner's lease was deleted ({when})"));
    }
    if !seen.stale_lease_reads.is_empty() {
        violations.push(format!(
            "{} of {} lease reads returned the restarted server's stale lease although they \
             send X-Newest (Swift ranks replicas by their data file: a renewal that does not \
             write a new one, a POST, stays invisible; see src/swift/mod.rs) (round, read, \
             up-to-date before the read, µs): {:?}",
            seen.stale_lease_reads.len(),
            seen.lease_reads,
            seen.stale_lease_reads
        ));
    }
    if !seen.not_alive.is_empty() {
        violations.push(format!(
            "the live owner was not judged alive: {:?}",
            seen.not_alive
        ));
    }
    if !seen.stale_checkpoint_reads.is_empty() {
        violations.push(format!(
            "stale checkpoint reads: {:?}",
            seen.stale_checkpoint_reads
        ));
    }
    if !missing.is_empty() {
        violations.push(format!(
            "the live owner's objects were collected: {missing:?}"
        ));
    }
    if let Some(reason) = lost {
        violations.push(format!(
            "the live owner's keeper lost its lease {reason}; it published {:?}",
            history.lock().unwrap()
        ));
    } else if !held {
        violations.push("the live owner's lease is not valid".to_owned());
    }
    // Deterministic: every copy differs from the stale one by its data file (PUT, DELETE).
    if seen.raw_stale_lease[1] + seen.raw_stale_index[1] + seen.raw_resurrected_marker[1] != 0 {
        violations.push(
            "raw requests with X-Newest returned the stale lease or index.json, or the deleted \
             marker"
                .to_owned(),
        );
    }
    if !not_collected.is_empty() {
        violations.push(format!(
            "the dead owner's checkpoints were not collected (the passes did nothing?): \
             {not_collected:?}"
        ));
    }
    let passes: Vec<String> = seen
        .passes
        .iter()
        .map(|p| {
            format!(
                "alive {} dead {} collected {} leases reaped {}",
                p.alive, p.dead, p.collected, p.leases_reaped
            )
        })
        .collect();
    assert!(
        violations.is_empty(),
        "{TEST}:\n{}\npasses (the first {} during the outage): {passes:#?}",
        violations.join("\n"),
        seen.passes.len() - ROUNDS.min(seen.raw_rounds) / PASS_EVERY
    );
}
