//! Building a bank fast: objects are written straight through the store — lease objects,
//! protecting markers, `index.json` and data objects — without the lease protocol (a million
//! `Checkpoint::create` calls would each check validity and write with create-if-absent).
//!
//! Layout of a bank with N checkpoints, M owners, D dead and k data objects per checkpoint:
//!
//! - owners `owner-0000` .. : owner `j` is dead when `j % (M/D) == M/D - 1` (the first D such),
//!   so the dead are spread over the listing;
//! - `leases/<owner>`: a [`LeaseRecord`]; alive owners declare a 1 h expire window, dead ones
//!   1 ms, so a dead owner is expired on the store's clock 1 ms after its lease was written;
//! - checkpoint `i` (`cp-00000000` ..) belongs to owner `i % M`: its marker
//!   `index/protecting/<owner>/<id>` (empty), `checkpoints/<id>/index.json` (status protecting)
//!   and `checkpoints/<id>/data/d<j>` (64 bytes each) — only dead owners' checkpoints get
//!   data objects with `data_dead_only`: on S3 and Swift a pass never lists or reads a live
//!   checkpoint's data, so their data changes nothing it does and only costs building time
//!   (on `file:` the temporaries sweep walks the tree, live data included).

use banklease_testkit::cid;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use banklease::checkpoint::{CheckpointRecord, Status, CHECKPOINT_FORMAT};
use banklease::clock::{Clock, SystemClock};
use banklease::lease::LEASE_FORMAT;
use banklease::paths::{Key, Prefix};
use banklease::{Bank, LeaseRecord, OwnerId};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

/// Alive owners' declared expire window.
const ALIVE_EXPIRE_MS: u64 = 3_600_000;
/// Dead owners' declared expire window: their lease is expired 1 ms after it was written.
const DEAD_EXPIRE_MS: u64 = 1;

/// The shape of a bank.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Layout {
    /// Protecting checkpoints (N).
    pub checkpoints: u64,
    /// Owners (M).
    pub owners: u64,
    /// Dead owners (D).
    pub dead: u64,
    /// Data objects per checkpoint (k).
    pub data: u64,
    /// Data objects only in dead owners' checkpoints (the ones a pass collects).
    #[serde(default)]
    pub data_dead_only: bool,
}

impl Layout {
    pub fn owner(&self, j: u64) -> OwnerId {
        OwnerId::parse(&format!("owner-{j:04}")).expect("valid owner id")
    }

    pub fn is_dead(&self, j: u64) -> bool {
        if self.dead == 0 {
            return false;
        }
        let stride = (self.owners / self.dead).max(1);
        j % stride == stride - 1 && j / stride < self.dead
    }

    /// Checkpoints of owner `j`.
    pub fn checkpoints_of(&self, j: u64) -> u64 {
        self.checkpoints / self.owners + u64::from(j < self.checkpoints % self.owners)
    }

    /// Checkpoints of dead owners: what one GC pass collects.
    pub fn dead_checkpoints(&self) -> u64 {
        (0..self.owners)
            .filter(|j| self.is_dead(*j))
            .map(|j| self.checkpoints_of(j))
            .sum()
    }

    /// Data objects in each checkpoint of owner `j`.
    pub fn data_of(&self, j: u64) -> u64 {
        if self.data_dead_only && !self.is_dead(j) {
            0
        } else {
            self.data
        }
    }

    /// Objects in the bank once built.
    pub fn objects(&self) -> u64 {
        self.owners
            + (0..self.owners)
                .map(|j| self.checkpoints_of(j) * (2 + self.data_of(j)))
                .sum::<u64>()
    }
}

/// What building took.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Built {
    pub objects: u64,
    pub secs: f64,
    /// Wall clock (ms since the epoch) when the last lease write was answered: every lease's
    /// `last_modified` is at or before it.
    pub leases_written_ms: u64,
}

fn json(value: &impl Serialize) -> PutPayload {
    PutPayload::from(serde_json::to_vec(value).expect("records serialise"))
}

fn lease_body(layout: &Layout, j: u64, now: DateTime<Utc>) -> PutPayload {
    let dead = layout.is_dead(j);
    json(&LeaseRecord {
        format: LEASE_FORMAT,
        owner_id: layout.owner(j),
        host: "bench".into(),
        pid: 0,
        renew_window_ms: if dead { 1 } else { ALIVE_EXPIRE_MS / 3 },
        expire_window_ms: if dead {
            DEAD_EXPIRE_MS
        } else {
            ALIVE_EXPIRE_MS
        },
        validity_window_ms: 1,
        // A memory bank's owners: no client, no retries.
        retry_budget_ms: Some(0),
        acquired_at: now,
        renewed_at: now,
        generation: 1,
        token: format!("bench-{j}"),
        process: None,
    })
}

/// The objects of checkpoint `i`, in write order (marker first, as `Checkpoint::create` does).
fn checkpoint_objects(
    bank: &Bank,
    layout: &Layout,
    i: u64,
    now: DateTime<Utc>,
) -> Vec<(Path, PutPayload)> {
    let owner = layout.owner(i % layout.owners);
    let data = layout.data_of(i % layout.owners);
    let id = format!("cp-{i:08}");
    let mut out = Vec::with_capacity(2 + data as usize);
    out.push((
        Key::marker(&owner, &cid(&id)).path(bank),
        PutPayload::default(),
    ));
    out.push((
        Key::Index(cid(&id)).path(bank),
        json(&CheckpointRecord {
            format: CHECKPOINT_FORMAT,
            rebuilt: None,
            id: cid(&id),
            owner_id: owner,
            status: Status::Protecting,
            created_at: now,
            retry_budget_ms: Some(0),
            removal: None,
        }),
    ));
    for d in 0..data {
        out.push((
            Prefix::Data(&cid(&id)).path(bank).join(format!("d{d}")),
            PutPayload::from(vec![0x5a_u8; 64]),
        ));
    }
    out
}

/// Write the whole bank with `concurrency` puts in flight.
pub async fn build(bank: &Bank, layout: &Layout, concurrency: usize) -> anyhow::Result<Built> {
    let clock = SystemClock;
    let started = clock.now();
    let now: DateTime<Utc> = clock.system_now().into();
    let store = Arc::clone(bank.store());
    let leases = (0..layout.owners).map(|j| {
        (
            bank.lease_path(&layout.owner(j)),
            lease_body(layout, j, now),
        )
    });
    futures::stream::iter(leases)
        .map(|(path, body)| {
            let store = Arc::clone(&store);
            async move { store.put(&path, body).await }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let leases_written_ms = clock
        .system_now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;

    let objects = futures::stream::iter(0..layout.checkpoints)
        .flat_map(|i| futures::stream::iter(checkpoint_objects(bank, layout, i, now)))
        .map(|(path, body)| {
            let store = Arc::clone(&store);
            async move { store.put(&path, body).await.map(|_| ()) }
        })
        .buffer_unordered(concurrency);
    let written = objects
        .try_fold(0_u64, |n, ()| async move { Ok(n + 1) })
        .await?;
    Ok(Built {
        objects: layout.owners + written,
        secs: clock.now().duration_since(started).as_secs_f64(),
        leases_written_ms,
    })
}

/// Sleep until every dead owner's lease is expired past `margin + grace` on the store's clock
/// (loopback servers share this host's clock; 1.5 s more covers stores that stamp whole seconds).
pub async fn wait_until_dead(leases_written_ms: u64, margin: Duration, grace: Duration) {
    let clock = SystemClock;
    let ready = Duration::from_millis(leases_written_ms + DEAD_EXPIRE_MS)
        + margin
        + grace
        + Duration::from_millis(1_500);
    let now = clock
        .system_now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    if let Some(wait) = ready.checked_sub(now) {
        clock.sleep(wait).await;
    }
}

/// Delete everything under the bank's prefix (servers and memory; files are removed as a
/// directory). Returns the objects deleted.
pub async fn wipe(bank: &Bank) -> anyhow::Result<u64> {
    let store = Arc::clone(bank.store());
    let locations = store
        .list(Some(bank.prefix()))
        .map_ok(|m| m.location)
        .boxed();
    let mut deleted = store.delete_stream(locations);
    let mut n = 0;
    while let Some(r) = deleted.next().await {
        match r {
            Ok(_) => n += 1,
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}
