//! The baseline: a Karbor-style scan on the same bank, in dry mode.
//!
//! OpenStack Karbor kept no index of protecting checkpoints, so a collector has to look at
//! every checkpoint: list everything under `checkpoints/`, GET each `index.json` to find the
//! protecting ones, then read each protecting checkpoint's owner lease (one GET per checkpoint,
//! no cache across checkpoints — the original design checks the owner's lease object per
//! checkpoint). The lease is judged exactly as the GC judges it (store clock read once: 2
//! requests, counted). Nothing is deleted; the deletions the scan *would* make are added at
//! [`KARBOR_REQUESTS_PER_DELETION`] requests per dead checkpoint, an estimate of the original
//! design's per-checkpoint deletion.

use banklease_testkit::cid;
use std::sync::Arc;
use std::time::Duration;

use banklease::checkpoint::{read_checkpoint, Status};
use banklease::clock::{SharedClock, SystemClock};
use banklease::store::CountingStore;
use banklease::{Bank, LeaseObserver};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use banklease_gc::pass::plan::Verdict;

/// Requests per collected checkpoint in the original design (an estimate, not measured here).
pub const KARBOR_REQUESTS_PER_DELETION: u64 = 8;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KarborScan {
    /// Objects seen under `checkpoints/`.
    pub listed: u64,
    /// `index.json` read.
    pub index_reads: u64,
    /// Checkpoints found protecting.
    pub protecting: u64,
    /// Checkpoints whose owner is dead (expired past grace, or missing).
    pub dead_checkpoints: u64,
    /// Reads that failed.
    pub errors: u64,
    /// Requests of the scan, by kind (object_store calls).
    pub requests: std::collections::BTreeMap<String, u64>,
    /// Estimated requests of the deletions: dead checkpoints × 8.
    pub deletion_requests_estimate: u64,
    pub secs: f64,
}

/// Scan `bank` with `concurrency` reads in flight.
pub async fn scan(
    bank: &Bank,
    margin: Duration,
    grace: Duration,
    concurrency: usize,
) -> anyhow::Result<KarborScan> {
    let counting = CountingStore::new(Arc::clone(bank.store()));
    let counters = Arc::clone(counting.counters());
    let bank = bank.with_store(Arc::new(counting));
    let clock: SharedClock = Arc::new(SystemClock);
    let started = clock.now();
    let observer = LeaseObserver::new(bank.clone(), Arc::clone(&clock), margin);
    let store_time = observer.store_time().await?;

    let prefix = bank.path(&["checkpoints"]);
    let listing = bank.store().list(Some(&prefix));
    let mut listed = 0_u64;
    let ids = listing.filter_map(|item| {
        listed += 1;
        let id = item.ok().and_then(|meta| {
            let mut parts = meta.location.prefix_match(&prefix)?;
            let id = parts.next()?;
            let file = parts.next()?;
            (file.as_ref() == "index.json" && parts.next().is_none())
                .then(|| id.as_ref().to_owned())
        });
        futures::future::ready(id)
    });
    #[derive(Default)]
    struct Tally {
        index_reads: u64,
        protecting: u64,
        dead: u64,
        errors: u64,
    }
    let mut tally = Tally::default();
    let mut results = ids
        .map(|id| {
            let bank = &bank;
            let observer = &observer;
            let store_time = &store_time;
            async move {
                match read_checkpoint(bank, &cid(&id)).await {
                    Ok(Some(record)) if record.status == Status::Protecting => {
                        let view = observer.view(&record.owner_id, store_time).await;
                        Ok(Some(Verdict::of(&view, grace).is_dead()))
                    }
                    Ok(_) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(concurrency);
    while let Some(r) = results.next().await {
        tally.index_reads += 1;
        match r {
            Ok(Some(dead)) => {
                tally.protecting += 1;
                tally.dead += u64::from(dead);
            }
            Ok(None) => {}
            Err(_) => tally.errors += 1,
        }
    }
    drop(results);
    Ok(KarborScan {
        listed,
        index_reads: tally.index_reads,
        protecting: tally.protecting,
        dead_checkpoints: tally.dead,
        errors: tally.errors,
        requests: counters.snapshot(),
        deletion_requests_estimate: tally.dead * KARBOR_REQUESTS_PER_DELETION,
        secs: clock.now().duration_since(started).as_secs_f64(),
    })
}
