//! What a bank really offers, measured, and what each of banklease's guarantees rests on there.
//!
//! [`diagnose`] probes a bank: which conditions the store enforces ([`Bank::capabilities`]),
//! whether they hold under concurrent races, whether the store expires objects by itself
//! (native Swift only), whether a listing can show an object that is gone, how far the store's
//! clock is from this host's, and how long requests take. [`Diagnosis::verdicts`] then says, per
//! guarantee, whether the bank gives it by an atomic primitive, by timing only, or not at all.
//! `banklease doctor` prints both.
//!
//! The verdicts are pure functions of the measurements, so they are tested on hand-made
//! diagnoses; [`owner_lease_verdict`] is the part that needs only the capability probe, which the
//! GC daemon checks at start without running any race.
//!
//! Invariant: **a guarantee is called atomic only when measured so.** Each race round sets 16
//! writers on a fresh key; one round with several winners makes the guarantee *timing* (owner
//! leases, completion versus collection) or *refused* (named locks, which have no timing
//! fallback), and a race that could not be measured never counts as atomic.
//!
//! Scratch objects live under `_banklease/doctor/<uuid>/` and are deleted afterwards (best
//! effort). On Swift that includes the expired one: its DELETE answers 404 but drops the listing
//! entry that would otherwise stay until Swift's expirer ran.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Serialize;

use crate::bank::Bank;
use crate::capability::{is_refusal, Condition, RenewalMechanism};
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::paths::Prefix;

pub use crate::race::{probe_create_race, probe_update_race, CreateRace, Race, UpdateRace};
use crate::store::swift::SwiftStore;
pub use verdicts::{owner_lease_verdict, Basis, Verdict, Verdicts};

/// How much [`diagnose`] measures.
#[derive(Debug, Clone)]
pub struct DiagnoseOptions {
    /// Concurrent writers per race round.
    pub race_writers: u32,
    /// Race rounds (one fresh key each), for create-if-absent and for If-Match. Races are
    /// probabilistic: more rounds catch a non-atomic store more often. 0 measures nothing, and
    /// an unmeasured race never counts as atomic.
    pub race_rounds: u32,
    /// PUT/HEAD pairs timed for latency and the clock offset (at least 1 is made).
    pub latency_samples: u32,
    /// How long an object written with a 1 s TTL may still be served before server-side expiry
    /// counts as not honoured (native Swift banks only, see [`Bank::swift`]).
    pub expiry_timeout: Duration,
}

impl Default for DiagnoseOptions {
    fn default() -> Self {
        Self {
            race_writers: 16,
            race_rounds: 8,
            latency_samples: 10,
            expiry_timeout: Duration::from_secs(3),
        }
    }
}

/// Whether the store removes an object by itself once a deadline passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Expiry {
    /// Not a feature banklease can use on this backend (everything but native Swift).
    NotOffered,
    /// An object written with `X-Delete-After: 1` answered 404 to HEAD this long after the
    /// write was sent.
    Honoured {
        /// Milliseconds from sending the write to the first 404.
        gone_after_ms: u64,
    },
    /// The object was still served when the timeout ran out.
    NotHonoured {
        /// Milliseconds waited.
        waited_ms: u64,
    },
}

/// Whether a listing can show an object that is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// An object deleted (and the delete answered) was still listed right after.
    pub shows_deleted: bool,
    /// An object past its expiry (HEAD 404) was still listed; `None` when expiry is not offered
    /// or not honoured.
    pub shows_expired: Option<bool>,
}

impl Listing {
    /// True when a listing was seen to show a deleted or an expired object.
    pub fn can_show_gone(&self) -> bool {
        self.shows_deleted || self.shows_expired == Some(true)
    }
}

/// The store's clock against this host's wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockOffset {
    /// Store time minus host time, in milliseconds: positive when the store's clock is ahead of
    /// this host's, negative when it is behind.
    pub offset_ms: i64,
    /// The offset is known to ± this many milliseconds: half the round trip of the best sample
    /// plus the store's timestamp resolution.
    pub uncertainty_ms: u64,
    /// The resolution the store's `last_modified` stamps appeared to have, in milliseconds
    /// (0: finer than a millisecond).
    pub store_resolution_ms: u64,
    /// The store's stamp of the best sample (the `last_modified` expiry is judged on).
    pub store_time: DateTime<Utc>,
    /// This host's wall clock at the midpoint of that sample's write.
    pub host_time: DateTime<Utc>,
}

/// Latency of one kind of request, over sequential samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencyStats {
    /// Requests timed.
    pub samples: u32,
    /// Median, in microseconds.
    pub median_us: u64,
    /// 95th percentile (nearest rank), in microseconds.
    pub p95_us: u64,
    /// Slowest, in microseconds.
    pub max_us: u64,
}

impl LatencyStats {
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let us = |d: Option<&Duration>| {
            d.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        };
        let n = samples.len();
        // Nearest rank: the smallest sample with at least p% of samples at or below it.
        let rank = |p: usize| (n * p).div_ceil(100).max(1) - 1;
        Self {
            samples: u32::try_from(n).unwrap_or(u32::MAX),
            median_us: us(samples.get(rank(50))),
            p95_us: us(samples.get(rank(95))),
            max_us: us(samples.last()),
        }
    }
}

/// Request latency: sequential overwriting PUTs of a small object, each followed by a HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Latency {
    /// PUT (overwrite, 64 bytes).
    pub put: LatencyStats,
    /// HEAD.
    pub head: LatencyStats,
}

/// Everything [`diagnose`] measured on one bank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnosis {
    /// The bank's label (its URL, without secrets).
    pub bank: String,
    /// `PutMode::Create` on an existing key.
    pub create_if_absent: Condition,
    /// `PutMode::Update` with a stale ETag.
    pub conditional_overwrite: Condition,
    /// The store refused its own (quoted) ETag and honoured the unquoted form, atomically
    /// (Ceph RGW): every condition is sent unquoted.
    pub unquoted_etags: bool,
    /// How owners renew their leases here; `None` when the bank is refused for leasing.
    pub renewal: Option<RenewalMechanism>,
    /// Why the capability probe refused the bank for leasing, if it did.
    pub refused_for_leasing: Option<String>,
    /// Concurrent create-if-absent writers on fresh keys; `None` when create-if-absent is
    /// refused (nothing to race).
    pub create_race: Option<CreateRace>,
    /// Concurrent If-Match overwriters holding the same ETag; `None` unless conditional
    /// overwrite is enforced.
    pub update_race: Option<UpdateRace>,
    /// Server-side expiry of objects.
    pub expiry: Expiry,
    /// Whether listings can show objects that are gone.
    pub listing: Listing,
    /// The store's clock against this host's.
    pub clock_offset: ClockOffset,
    /// Request latency.
    pub latency: Latency,
    /// The `Date` of the store's answers against its stamps; `None` when its answers carry no
    /// `Date` (an in-process store, a `file:` bank).
    pub date_header: Option<DateHeader>,
    /// The ETag of a first write whose condition still held after the same bytes were written
    /// again (the store conditions on a hash of the content: S3 and RGW, versioned buckets
    /// too): fenced writes are refused there. `None` when the stale condition was refused, or
    /// conditional overwrite is not enforced (nothing to try).
    pub repeated_etag: Option<String>,
}

/// The `Date` header of the store's answers against its `last_modified` stamps. Read-only
/// judging takes the `Date` for the store's time ([`Bank::store_time_from_date`]), which is
/// sound only when one clock makes both — a front end (a reverse proxy) that dates answers with
/// its own clock would shift every read-only judgement by its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DateHeader {
    /// How far the `Date` of a PUT's answer fell outside what one clock allows (within the
    /// PUT's duration of the stamp, give or take the Date's second and the stamp's resolution),
    /// in milliseconds, at most over the samples: 0 when they agree.
    pub disagreement_ms: u64,
    /// `Date` minus stamp of the sample with the largest disagreement, in milliseconds.
    pub offset_ms: i64,
}

/// Measure `bank`. Makes a few dozen requests plus `2 × race_rounds × race_writers` racing
/// writes, and on Swift waits up to `expiry_timeout` for an object to expire.
///
/// Errors only when the store fails a request (unreachable, denied ...). A store that refuses or
/// ignores conditions is a finding, not an error.
pub async fn diagnose(
    bank: &Bank,
    clock: &SharedClock,
    options: &DiagnoseOptions,
) -> Result<Diagnosis> {
    let run = uuid::Uuid::new_v4().to_string();
    let dir = Prefix::Doctor(&run).path(bank);
    let mut unquoted_etags = false;
    let (create_if_absent, conditional_overwrite, renewal, refused_for_leasing) =
        // Measured afresh, and kept in the bank for every later process.
        match bank.measure_capabilities().await {
            Ok(caps) => (
                caps.create_if_absent,
                caps.conditional_overwrite,
                Some(caps.renewal),
                {
                    unquoted_etags = caps.unquoted_etags;
                    None
                },
            ),
            // The probe stops at the first missing condition; measure both for the table.
            Err(Error::Unsupported { detail, .. }) => {
                let (create, overwrite) = probe_conditions(bank.store().as_ref(), &dir).await?;
                (create, overwrite, None, Some(detail))
            }
            // A refusal the capability probe cannot recognise (an HTTP 501 reported as a
            // generic error) is a finding too.
            Err(Error::Store { source, .. }) if is_refusal(&source) => {
                let (create, overwrite) = probe_conditions(bank.store().as_ref(), &dir).await?;
                let detail = "a conditional write was answered `501 Not Implemented` (after \
                              object_store's retries): the store does not implement it"
                    .to_owned();
                (create, overwrite, None, Some(detail))
            }
            Err(e) => return Err(e),
        };

    let create_race = if create_if_absent == Condition::Refused {
        None
    } else {
        Some(probe_create_race(bank, options.race_writers, options.race_rounds).await?)
    };
    let update_race = if conditional_overwrite == Condition::Enforced {
        Some(probe_update_race(bank, options.race_writers, options.race_rounds).await?)
    } else {
        None
    };

    // Only where a condition can be tried: elsewhere named locks, and so fenced writes, are
    // refused on the conditions alone.
    let repeated_etag = if conditional_overwrite == Condition::Enforced {
        crate::lock::support::stale_condition_holds(
            bank.store().as_ref(),
            &dir.clone().join("fencing"),
        )
        .await?
    } else {
        None
    };
    let shows_deleted = probe_listing_after_delete(bank.store().as_ref(), &dir).await?;
    let (expiry, shows_expired) = match bank.swift() {
        Some(swift) => probe_swift_expiry(swift, &dir, clock, options.expiry_timeout).await?,
        None => (Expiry::NotOffered, None),
    };
    let (clock_offset, latency, date_header) =
        probe_clock_and_latency(bank.store().as_ref(), &dir, clock, options.latency_samples)
            .await?;

    let diagnosis = Diagnosis {
        bank: bank.label().to_owned(),
        create_if_absent,
        conditional_overwrite,
        unquoted_etags,
        renewal,
        refused_for_leasing,
        create_race,
        update_race,
        expiry,
        listing: Listing {
            shows_deleted,
            shows_expired,
        },
        clock_offset,
        latency,
        date_header,
        repeated_etag,
    };
    tracing::debug!(bank = bank.label(), ?diagnosis, "diagnosed bank");
    Ok(diagnosis)
}

/// Classify both conditions on a store the capability probe refused (it stops at the first
/// missing one): create twice, then overwrite with a stale ETag.
async fn probe_conditions(store: &dyn ObjectStore, dir: &Path) -> Result<(Condition, Condition)> {
    let path = dir.clone().join("conditions");
    let put = |body: &'static [u8], mode: PutMode| {
        store.put_opts(&path, PutPayload::from_static(body), PutOptions::from(mode))
    };
    let result = async {
        let create = match put(b"1", PutMode::Create).await {
            Err(e) if is_refusal(&e) => Condition::Refused,
            Err(e) => return Err(e),
            Ok(_) => match put(b"2", PutMode::Create).await {
                Err(object_store::Error::AlreadyExists { .. }) => Condition::Enforced,
                Ok(_) => Condition::Ignored,
                Err(e) => return Err(e),
            },
        };
        if create == Condition::Refused {
            // A stale ETag on a missing object would fail for the wrong reason.
            put(b"3", PutMode::Overwrite).await?;
        }
        let stale = UpdateVersion {
            e_tag: Some("\"banklease-stale-etag\"".to_owned()),
            // GCS matches the generation (object_store's `version`), not the ETag, and refuses an
            // update without one; no real object has generation 1 (generations are µs stamps).
            version: Some("1".to_owned()),
        };
        let overwrite = match put(b"4", PutMode::Update(stale)).await {
            Err(object_store::Error::Precondition { .. }) => Condition::Enforced,
            Ok(_) => Condition::Ignored,
            Err(e) if is_refusal(&e) => Condition::Refused,
            Err(e) => return Err(e),
        };
        Ok((create, overwrite))
    }
    .await;
    let _ = store.delete(&path).await;
    result.map_err(|e| Error::store("put", &path, e))
}

async fn is_listed(store: &dyn ObjectStore, prefix: &Path, path: &Path) -> Result<bool> {
    let listed: Vec<_> = store
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| Error::store("list", prefix, e))?;
    Ok(listed.iter().any(|m| &m.location == path))
}

/// Write an object, delete it, and list its prefix at once.
async fn probe_listing_after_delete(store: &dyn ObjectStore, dir: &Path) -> Result<bool> {
    let prefix = dir.clone().join("deleted");
    let path = prefix.clone().join("object");
    store
        .put(&path, PutPayload::from_static(b"deleted"))
        .await
        .map_err(|e| Error::store("put", &path, e))?;
    store
        .delete(&path)
        .await
        .map_err(|e| Error::store("delete", &path, e))?;
    is_listed(store, &prefix, &path).await
}

/// Write an object with `X-Delete-After: 1`, poll HEAD until it answers 404 (at most
/// `timeout`), then see whether a listing still shows it.
async fn probe_swift_expiry(
    swift: &SwiftStore,
    dir: &Path,
    clock: &SharedClock,
    timeout: Duration,
) -> Result<(Expiry, Option<bool>)> {
    const POLL: Duration = Duration::from_millis(100);
    let prefix = dir.clone().join("expired");
    let path = prefix.clone().join("object");
    let sent = clock.now();
    swift
        .put_with_delete_after(&path, PutPayload::from_static(b"expires"), 1, false)
        .await
        .map_err(|e| Error::store("put", &path, e))?;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    // Bounded by the poll count as well as by elapsed time, whatever the clock does.
    let max_polls = timeout.as_millis() / POLL.as_millis() + 1;
    let mut gone = None;
    for _ in 0..max_polls {
        clock.sleep(POLL).await;
        match swift.head(&path).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => {
                gone = Some(clock.now().saturating_duration_since(sent));
                break;
            }
            Err(e) => return Err(Error::store("head", &path, e)),
        }
        if clock.now().saturating_duration_since(sent) > timeout {
            break;
        }
    }
    let Some(gone) = gone else {
        let _ = swift.delete(&path).await;
        let waited = clock.now().saturating_duration_since(sent);
        return Ok((
            Expiry::NotHonoured {
                waited_ms: ms(waited),
            },
            None,
        ));
    };
    let listed = is_listed(swift, &prefix, &path).await?;
    // Swift answers 404 to the DELETE of an expired object but still drops its listing entry
    // (measured on 2.30), so the scratch object does not wait for the expirer.
    let _ = swift.delete(&path).await;
    Ok((
        Expiry::Honoured {
            gone_after_ms: ms(gone),
        },
        Some(listed),
    ))
}

/// One timed PUT + HEAD pair of the clock sample.
struct Sample {
    put: Duration,
    head: Duration,
    /// This host's wall clock just before the PUT and when its answer arrived.
    host_before: DateTime<Utc>,
    host_after: DateTime<Utc>,
    stamped: DateTime<Utc>,
    /// The `Date` of the PUT's answer, if it had one.
    dated: Option<DateTime<Utc>>,
}

/// Sequential PUT + HEAD pairs: their durations, and from the stamp each PUT got, the store's
/// clock against this host's. The stamp lies between sending the PUT and its answer, so the
/// sample with the shortest PUT bounds the offset best (as NTP picks its best sample). The
/// `Date` of each PUT's answer is compared with the stamp it gave.
async fn probe_clock_and_latency(
    store: &dyn ObjectStore,
    dir: &Path,
    clock: &SharedClock,
    samples: u32,
) -> Result<(ClockOffset, Latency, Option<DateHeader>)> {
    let path = dir.clone().join("latency");
    let wall = |clock: &SharedClock| DateTime::<Utc>::from(clock.system_now());
    let mut taken = Vec::new();
    for _ in 0..samples.max(1) {
        let host_before = wall(clock);
        let t0 = clock.now();
        let (put, dated) =
            crate::clock::store::dated(store.put(&path, PutPayload::from(vec![b'x'; 64]))).await;
        let put = put.map_err(|e| Error::store("put", &path, e));
        let t1 = clock.now();
        let host_after = wall(clock);
        let head = match put {
            Ok(_) => store
                .head(&path)
                .await
                .map_err(|e| Error::store("head", &path, e)),
            Err(e) => Err(e),
        };
        let t2 = clock.now();
        let meta = match head {
            Ok(meta) => meta,
            Err(e) => {
                let _ = store.delete(&path).await;
                return Err(e);
            }
        };
        taken.push(Sample {
            put: t1.saturating_duration_since(t0),
            head: t2.saturating_duration_since(t1),
            host_before,
            host_after,
            stamped: meta.last_modified,
            dated,
        });
    }
    let _ = store.delete(&path).await;

    let resolution_ms = crate::clock::store::stamp_resolution_ms(taken.iter().map(|s| s.stamped));
    let best = taken
        .iter()
        .min_by_key(|s| s.host_after - s.host_before)
        .expect("at least one sample was taken");
    let half = (best.host_after - best.host_before) / 2;
    let host_mid = best.host_before + half;
    let clock_offset = ClockOffset {
        offset_ms: (best.stamped - host_mid).num_milliseconds(),
        uncertainty_ms: u64::try_from(half.num_milliseconds())
            .unwrap_or(0)
            .saturating_add(resolution_ms),
        store_resolution_ms: resolution_ms,
        store_time: best.stamped,
        host_time: host_mid,
    };
    let latency = Latency {
        put: LatencyStats::of(taken.iter().map(|s| s.put).collect()),
        head: LatencyStats::of(taken.iter().map(|s| s.head).collect()),
    };
    let date_header = date_agreement(&taken, Duration::from_millis(resolution_ms));
    Ok((clock_offset, latency, date_header))
}

/// One clock makes the stamp and the `Date` while the PUT is in flight, both truncated (the
/// `Date` to the second, the stamp to `resolution`), in either order (a front end may date the
/// answer as the request arrives): `stamp − 1 s − PUT duration <= Date < stamp + resolution +
/// PUT duration`. `None` unless every sample's answer had a `Date`.
fn date_agreement(taken: &[Sample], resolution: Duration) -> Option<DateHeader> {
    let mut worst: Option<DateHeader> = None;
    for sample in taken {
        let dated = sample.dated?;
        let slack = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        let low = sample.stamped - slack(crate::clock::store::DATE_RESOLUTION + sample.put);
        let high = sample.stamped + slack(sample.put + resolution);
        let outside = if dated < low {
            low - dated
        } else if dated > high {
            dated - high
        } else {
            chrono::Duration::zero()
        };
        let this = DateHeader {
            disagreement_ms: u64::try_from(outside.num_milliseconds()).unwrap_or(0),
            offset_ms: (dated - sample.stamped).num_milliseconds(),
        };
        if worst.is_none_or(|w| this.disagreement_ms >= w.disagreement_ms) {
            worst = Some(this);
        }
    }
    worst
}

#[cfg(test)]
mod tests;
mod verdicts;
