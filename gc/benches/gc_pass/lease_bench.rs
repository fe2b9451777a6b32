//! Owner-lease costs: requests of acquire, renew, release and `check_validity` (counted with
//! `CountingStore`, and at the HTTP layer where there is one), and a keeper run — one process
//! keeping many leases with a short renew window — counting renewals and Lost states.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use banklease::clock::{Jitter, SharedClock, SystemClock};
use banklease::store::{Counters, CountingStore};
use banklease::{Bank, LeaseState, LeaseWindows, OwnerId, OwnerLease};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::backend::Opened;

/// Requests of one operation: object_store calls and HTTP requests.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpCost {
    pub calls: BTreeMap<String, u64>,
    pub http: BTreeMap<String, u64>,
}

impl OpCost {
    pub fn calls_total(&self) -> u64 {
        self.calls.values().sum()
    }
    pub fn http_total(&self) -> u64 {
        self.http
            .iter()
            .filter(|(k, _)| k.as_str() != "auth")
            .map(|(_, v)| v)
            .sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseOps {
    pub mechanism: String,
    pub acquire: OpCost,
    pub renew: OpCost,
    pub release: OpCost,
    /// Over `checks` calls of `check_validity`.
    pub check_validity: OpCost,
    pub checks: u64,
    /// The capability probe (once per bank and process, before the first acquire).
    pub probe: OpCost,
}

fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

struct Meter<'a> {
    calls: &'a Counters,
    opened: &'a Opened,
}

impl Meter<'_> {
    fn now(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        (self.calls.snapshot(), self.opened.http_snapshot())
    }
    fn since(&self, before: &(BTreeMap<String, u64>, BTreeMap<String, u64>)) -> OpCost {
        let after = self.now();
        OpCost {
            calls: delta(&before.0, &after.0),
            http: delta(&before.1, &after.1),
        }
    }
}

/// Measure acquire, renew, check_validity (`checks` times) and release of one fresh lease.
pub async fn lease_ops(opened: &Opened, checks: u64) -> anyhow::Result<LeaseOps> {
    let counting = CountingStore::new(Arc::clone(opened.bank.store()));
    let counters = Arc::clone(counting.counters());
    let bank = opened.bank.with_store(Arc::new(counting));
    let meter = Meter {
        calls: &counters,
        opened,
    };
    let clock: SharedClock = Arc::new(SystemClock);
    let windows = LeaseWindows::new(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_secs(5),
    )?;

    let before = meter.now();
    let mechanism = format!("{:?}", bank.capabilities().await?.renewal);
    let probe = meter.since(&before);

    let before = meter.now();
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, clock).await?;
    let acquire = meter.since(&before);

    let before = meter.now();
    lease.renew().await?;
    let renew = meter.since(&before);

    let before = meter.now();
    let mut valid = 0;
    for _ in 0..checks {
        valid += u64::from(lease.check_validity());
    }
    anyhow::ensure!(valid == checks, "the lease should be valid throughout");
    let check_validity = meter.since(&before);

    let before = meter.now();
    lease.release().await?;
    let release = meter.since(&before);
    Ok(LeaseOps {
        mechanism,
        acquire,
        renew,
        release,
        check_validity,
        checks,
        probe,
    })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeepersRun {
    pub leases: u64,
    pub acquired: u64,
    pub acquire_secs: f64,
    pub renew_ms: u64,
    pub expire_ms: u64,
    pub run_secs: f64,
    /// Renewals seen (Held states published after the acquiring one) during the run window.
    pub renewals: u64,
    pub renewals_per_sec: f64,
    /// The rate the windows ask for: leases / renew window.
    pub nominal_per_sec: f64,
    /// Leases that became Lost (none of them was touched by anybody else: all are spurious).
    pub lost: u64,
    pub lost_reasons: Vec<String>,
    /// Least lease time left seen at a renewal (ms), over all leases.
    pub min_remaining_ms: u64,
    pub released: u64,
    pub http: BTreeMap<String, u64>,
}

/// Keep `n` leases in one process for `run` with the given windows; count renewals and Lost.
pub async fn keepers(
    opened: &Opened,
    n: u64,
    renew: Duration,
    expire: Duration,
    run: Duration,
) -> anyhow::Result<KeepersRun> {
    let bank: &Bank = &opened.bank;
    let clock: SharedClock = Arc::new(SystemClock);
    let windows = LeaseWindows::new(renew, expire, (renew / 2).max(Duration::from_millis(100)))?;
    bank.capabilities().await?;
    let http_before = opened.http_snapshot();

    let renewals = Arc::new(AtomicU64::new(0));
    let min_remaining_ms = Arc::new(AtomicU64::new(u64::MAX));
    let counting = Arc::new(AtomicU64::new(0)); // 1 while the run window is open
    let lost_reasons = Arc::new(std::sync::Mutex::new(Vec::new()));

    let started = clock.now();
    let acquired: Vec<_> = futures::stream::iter(0..n)
        .map(|_| {
            let clock = Arc::clone(&clock);
            async move { OwnerLease::acquire(bank, OwnerId::random(), windows, clock).await }
        })
        .buffer_unordered(32)
        .filter_map(|r| futures::future::ready(r.ok()))
        .map(|lease| {
            let keeper = lease.spawn_keeper(Jitter::from_entropy(), 0.1);
            let mut state = keeper.state();
            let renewals = Arc::clone(&renewals);
            let counting = Arc::clone(&counting);
            let lost_reasons = Arc::clone(&lost_reasons);
            let watcher = tokio::spawn(async move {
                // Bounded: ends when the lease is Lost or Released, or the keeper is dropped.
                while state.changed().await.is_ok() {
                    let now_state = state.borrow_and_update().clone();
                    match now_state {
                        LeaseState::Held { .. } => {
                            if counting.load(Ordering::Relaxed) == 1 {
                                renewals.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        LeaseState::Lost { reason } => {
                            lost_reasons.lock().expect("lock").push(reason);
                            return true;
                        }
                        LeaseState::Released => return false,
                    }
                }
                false
            });
            (keeper, watcher)
        })
        .collect()
        .await;
    let acquire_secs = clock.now().duration_since(started).as_secs_f64();
    let count = acquired.len() as u64;

    counting.store(1, Ordering::Relaxed);
    let run_start = clock.now();
    // Sample the least time left across all leases once every 100 ms during the run.
    let leases: Vec<OwnerLease> = acquired.iter().map(|(k, _)| k.lease().clone()).collect();
    while clock.now().duration_since(run_start) < run {
        let least = leases
            .iter()
            .filter(|l| matches!(l.state(), LeaseState::Held { .. }))
            .map(|l| l.remaining().as_millis() as u64)
            .min()
            .unwrap_or(u64::MAX);
        min_remaining_ms.fetch_min(least, Ordering::Relaxed);
        clock.sleep(Duration::from_millis(100)).await;
    }
    counting.store(0, Ordering::Relaxed);
    let run_secs = clock.now().duration_since(run_start).as_secs_f64();

    let released = futures::stream::iter(acquired)
        .map(|(keeper, watcher)| async move {
            let ok = keeper.release().await.is_ok();
            let _ = watcher.await;
            ok
        })
        .buffer_unordered(32)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await as u64;
    let http_after = opened.http_snapshot();
    let lost_reasons = std::mem::take(&mut *lost_reasons.lock().expect("lock"));
    let renewals = renewals.load(Ordering::Relaxed);
    Ok(KeepersRun {
        leases: n,
        acquired: count,
        acquire_secs,
        renew_ms: renew.as_millis() as u64,
        expire_ms: expire.as_millis() as u64,
        run_secs,
        renewals,
        renewals_per_sec: renewals as f64 / run_secs,
        nominal_per_sec: count as f64 / renew.as_secs_f64(),
        lost: lost_reasons.len() as u64,
        lost_reasons: lost_reasons.into_iter().take(5).collect(),
        min_remaining_ms: min_remaining_ms.load(Ordering::Relaxed),
        released,
        http: delta(&http_before, &http_after),
    })
}
