//! Reading the store's clock: a probe written and read back, or, for a reading-only handle,
//! what leaves nothing new in the bank (see [`Bank::reading_only`]).
//!
//! **One probe per host, each reading its own.** Every command, agent and collector on a host
//! rewrites the host's one key in place (so a hundred commands leave one object, not a
//! hundred), and takes a read-back as its own when the ETag is that of its own write. Every
//! probe's body names the host's boot clock and its reading when the write was sent: a
//! read-back showing a version another prober on the same boot clock sent at or after this
//! one was stamped between this write's send and the read-back's answer, exactly as this
//! write was, and serves as well (so probers on one host that keep overwriting each other,
//! on a store whose replicas lag, still read the clock). Any other version (older, or of
//! another boot or time namespace) costs a fresh attempt. A reading that never saw such a
//! version is *unverified*: its stamp may come from after a step no comparison saw, so the
//! GC judges nothing on it.
//!
//! Invariant: **a read command writes nothing.** A reading-only handle reads the store's time
//! without a write: on a `file:` bank on a local file system the host's clock (which stamps
//! every write there), on a server the `Date` of its answer to one read (to the second: the
//! reading is widened by [`DATE_RESOLUTION`](crate::clock::store::DATE_RESOLUTION)). Only
//! where neither serves (a `file:` bank whose file system rounds stamps or is a network one, a
//! store whose answers carry no `Date`) does it rewrite its host's one probe, and where that
//! write is refused the command is refused as [`Error::ReadOnly`], naming the write to allow.

use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

use crate::bank::Bank;
use crate::clock::store::StoreTime;
use crate::clock::{BootInstant, SharedClock};
use crate::error::{Error, Result};
use crate::paths::{Key, Prefix};

impl Bank {
    /// The store's current time, read by writing a small probe object and reading back its
    /// `last_modified`. See [`StoreTime`].
    pub async fn store_time(&self, clock: &SharedClock) -> Result<StoreTime> {
        self.store_time_with_lag(clock, Duration::ZERO).await
    }

    /// [`store_time`](Self::store_time) on a store whose replicas may lag by up to `lag`: when a
    /// read-back shows another version, it is read back once more after waiting `lag`, by when
    /// every replica holds this write. The reading keeps the write's send instant and takes the
    /// late answer's as `observed`, so it is only wider (a lower bound lower, an upper bound as
    /// before) — never wrong. Without this, a replica that lags every immediate read-back left
    /// every reading unverified, and a collector judged nothing for as long as the lag lasted.
    pub async fn store_time_with_lag(
        &self,
        clock: &SharedClock,
        lag: Duration,
    ) -> Result<StoreTime> {
        if self.is_reading_only() {
            if let Some(reading) = self.store_time_without_probe(clock) {
                return Ok(reading);
            }
            // A server dates its answers: one read, nothing written, to the second — unless
            // `init` found its `Date` disagreeing with its stamps (a proxy's own clock).
            let date_disagrees = self
                .learnt()
                .await?
                .is_some_and(|l| l.date_agrees == Some(false));
            if self.local().is_none() && !date_disagrees {
                if let Some(reading) = self.store_time_from_date(clock).await? {
                    return Ok(reading);
                }
            }
        }
        // One key per host: a read-back of another version is a lagging replica's (an older
        // version, which only ever understates the store's time) or another prober's on this
        // host, and is never taken as ours (its ETag differs). The GC removes the keys of hosts
        // that have not read the clock for a day (`clock_probe_prefix`).
        let path = self.own_clock_probe();
        // The HEAD must read back this PUT's version: a lagging replica may answer with an
        // older one, whose stamp (still a lower bound) would look like a clock step to the GC's
        // step detection. Bounded: a few fresh attempts, then an error.
        let mut last = None;
        for attempt in 1..=CLOCK_PROBE_ATTEMPTS {
            let sent = clock.now();
            // Read after `sent`: never earlier than the write's send on the boot clock.
            let boot = clock.boot_instant();
            let body = probe_body(boot.as_ref());
            let put = match self
                .store()
                .put(&path, PutPayload::from(body.into_bytes()))
                .await
            {
                Ok(put) => put,
                Err(e) if self.is_reading_only() && crate::store::cause::is_refused_write(&e) => {
                    return self.store_time_read_only(clock, e).await;
                }
                // The first write of most commands: refused, it is the operator's permission
                // line, not a failed request on one of banklease's own objects.
                Err(e) => {
                    return Err(crate::store::cause::write_failed(
                        self.label(),
                        "put",
                        &path,
                        e,
                    ))
                }
            };
            let head = || self.store().head(&path);
            let ours =
                |meta: &object_store::ObjectMeta| put.e_tag.is_none() || meta.e_tag == put.e_tag;
            // A lagging replica may not hold the probe at all yet (a new handle's first write):
            // that too is waited out, like another version.
            let meta = match head().await {
                Ok(meta) if ours(&meta) || lag.is_zero() => meta,
                // Gone at once: a pass forgot the key as a day old just as this wrote it
                // (a host's key is written only when one of its reads runs). Written afresh.
                Err(object_store::Error::NotFound { .. })
                    if lag.is_zero() && attempt < CLOCK_PROBE_ATTEMPTS =>
                {
                    continue
                }
                Err(e) if lag.is_zero() || !matches!(e, object_store::Error::NotFound { .. }) => {
                    return Err(Error::store("head", &path, e))
                }
                _ => {
                    clock.sleep(lag).await;
                    head().await.map_err(|e| Error::store("head", &path, e))?
                }
            };
            let (meta, verified) = if ours(&meta) {
                (meta, true)
            } else if let Some(boot) = &boot {
                // Another version: whose, and sent when, is in its body.
                match self.store().get(&path).await {
                    Ok(got) => {
                        let meta = got.meta.clone();
                        let body = got
                            .bytes()
                            .await
                            .map_err(|e| Error::store("get", &path, e))?;
                        let later = ours(&meta) || sent_at_or_after(&body, boot);
                        (meta, later)
                    }
                    Err(object_store::Error::NotFound { .. }) => (meta, false),
                    Err(e) => return Err(Error::store("get", &path, e)),
                }
            } else {
                (meta, false)
            };
            let observed = clock.now();
            let reading = StoreTime {
                at: meta.last_modified,
                sent,
                observed,
                verified,
            };
            if verified || attempt == CLOCK_PROBE_ATTEMPTS {
                // Another version's stamp is still a lower bound on the store's time (fine for
                // judging); it is only unfit for step detection, which skips it.
                return Ok(reading);
            }
            last = Some(reading);
        }
        Ok(last.expect("at least one attempt"))
    }
}

impl Bank {
    /// The store's time read without a write, where that is exact: a `file:` bank's clock is
    /// this host's (every write there is stamped with it), so a reading is the host's clock
    /// taken between two instants, as a probe's stamp would be. Not where the file system
    /// rounds stamps, which a probe's stamp would share with the leases it is compared with,
    /// and not on a network file system, whose server stamps every write with its own clock.
    fn store_time_without_probe(&self, clock: &SharedClock) -> Option<StoreTime> {
        let local = self.local()?;
        if !local.keeps_exact_mtime() || local.file_system().network {
            return None;
        }
        let sent = clock.now();
        let at = crate::store::local::store_clock().into();
        Some(StoreTime {
            at,
            sent,
            observed: clock.now(),
            verified: true,
        })
    }

    /// The store's time for a user who may only read, after the probe's write was refused.
    ///
    /// An object store stamps every answer with its `Date`, to the second
    /// ([`store_time_from_date`](Self::store_time_from_date)): the judgement goes on, saying
    /// once where the time came from. Without a `Date`, and on a `file:` bank (reached only
    /// where its file system rounds stamps or is a network one: elsewhere the host's clock
    /// served without a probe, [`store_time_without_probe`](Self::store_time_without_probe)),
    /// the refusal is labelled as a permission to ask for.
    async fn store_time_read_only(
        &self,
        clock: &SharedClock,
        refused: object_store::Error,
    ) -> Result<StoreTime> {
        let read_only = |why, source| Error::ReadOnly {
            bank: self.label().to_owned(),
            why,
            source,
        };
        if let Some(local) = self.local() {
            // A network file system's stamps are its server's; elsewhere the host's exact
            // clock would make stamps the file system rounded look older.
            let fs = local.file_system();
            return Err(read_only(
                if fs.network {
                    "this is a network file system, whose server stamps every write: this \
                     host's clock cannot stand for its stamps"
                } else {
                    "this file system rounds modification times, so this host's clock cannot \
                     stand for its stamps"
                },
                refused,
            ));
        }
        let Some(reading) = self.store_time_from_date(clock).await? else {
            return Err(read_only(
                "its answers carry no Date header to judge by instead",
                refused,
            ));
        };
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(target: crate::NOTE_TARGET, bank = self.label(), path = %self.own_clock_probe(),
                "read-only access: the clock probe cannot be written; the store's time is the \
                 Date header of its answers, to the second (the second is added to every \
                 uncertainty)");
        });
        Ok(reading)
    }

    /// The store's time from the `Date` of its answer to one read (a HEAD of the descriptor),
    /// writing nothing; `None` when the answer carries no `Date`. The stamp was made between
    /// the read's send and its answer, and the store's true time then was less than
    /// [`DATE_RESOLUTION`](crate::clock::store::DATE_RESOLUTION) above it: the reading is taken
    /// as sent that much earlier, which keeps both of its bounds true.
    pub async fn store_time_from_date(&self, clock: &SharedClock) -> Result<Option<StoreTime>> {
        let path = Key::Descriptor.path(self);
        let sent = clock.now();
        let (answer, date) = crate::clock::store::dated(self.store().head(&path)).await;
        let observed = clock.now();
        match answer {
            // A bank made before descriptors existed has none: its answer is dated too.
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(Error::store("head", &path, e)),
        }
        let sent = sent.checked_sub(crate::clock::store::DATE_RESOLUTION);
        Ok(date.zip(sent).map(|(at, sent)| StoreTime {
            at,
            sent,
            observed,
            verified: true,
        }))
    }

    /// Measure afresh what commands would otherwise measure of this bank's store — its
    /// conditions, whether it keeps named locks and fenced writes (over a hundred racing
    /// writes), the resolution of its stamps — and keep it in the bank for every later process
    /// (`banklease init` does, so that no job pays for it). A bank made on a caller's store
    /// keeps nothing: only its conditions are measured.
    pub async fn measure(&self, clock: &SharedClock) -> Result<()> {
        self.measure_capabilities().await?;
        if self.keeps_learnt() {
            crate::lock::support::measure(self).await?;
            self.measure_stamp_resolution(clock).await?;
            if self.local().is_none() {
                let agrees = self.date_agrees_with_stamps(clock).await?;
                self.learn(|l| l.date_agrees = agrees).await;
            }
        }
        Ok(())
    }

    /// Whether the `Date` of a read's answer agrees with the stamp of a probe written just
    /// before (a second each way for the truncation of both): `None` when answers carry no
    /// `Date`.
    async fn date_agrees_with_stamps(&self, clock: &SharedClock) -> Result<Option<bool>> {
        let probe = self.store_time(clock).await?;
        let Some(dated) = self.store_time_from_date(clock).await? else {
            return Ok(None);
        };
        let second = chrono::Duration::seconds(1);
        let elapsed =
            chrono::Duration::from_std(dated.observed.saturating_duration_since(probe.sent))
                .unwrap_or_else(|_| chrono::Duration::seconds(60));
        let agrees = dated.at >= probe.at - second && dated.at <= probe.at + elapsed + second * 2;
        if !agrees {
            tracing::warn!(bank = self.label(), stamp = %probe.at, date = %dated.at,
                "the store's Date disagrees with its stamps (a proxy dating answers with its own clock?): read commands write this host's clock probe instead");
        }
        Ok(Some(agrees))
    }

    /// The resolution of the store's `last_modified` stamps, measured from three clock probes
    /// (six requests): 1 s, 1 ms, or zero when finer. A skew margin below it cannot absorb the
    /// truncation of every stamp.
    ///
    /// A bank opened by URL keeps it in the bank, beside what the capability probe learnt: a
    /// later process reads it instead (see [`Bank::capabilities`]).
    pub async fn stamp_resolution(&self, clock: &SharedClock) -> Result<Duration> {
        if let Some(ms) = self.learnt().await?.and_then(|l| l.stamp_resolution_ms) {
            return Ok(Duration::from_millis(ms));
        }
        self.measure_stamp_resolution(clock).await
    }

    /// [`stamp_resolution`](Self::stamp_resolution) measured afresh (what a collector or a
    /// decider rests its margin on), and kept.
    pub async fn measure_stamp_resolution(&self, clock: &SharedClock) -> Result<Duration> {
        let mut stamps = Vec::with_capacity(3);
        for _ in 0..3 {
            stamps.push(self.store_time(clock).await?.at);
        }
        let ms = crate::clock::store::stamp_resolution_ms(stamps.into_iter());
        self.learn(|l| l.stamp_resolution_ms = Some(ms)).await;
        Ok(Duration::from_millis(ms))
    }
}

/// A clock probe's body: the boot clock's name and its reading (in nanoseconds) when the write
/// was sent, where the host has one, then a random tag, so that every write differs.
fn probe_body(boot: Option<&BootInstant>) -> String {
    let tag = uuid::Uuid::new_v4();
    match boot {
        Some(b) => format!("{}\n{}\n{tag}", b.clock, b.since_boot.as_nanos()),
        None => tag.to_string(),
    }
}

/// Whether `body` is a probe written on `ours`'s boot clock and sent no earlier than `ours`
/// was read (which was after our own write's send): its stamp then bounds the store's time
/// exactly as our own write's would. Anything unparsable is not.
fn sent_at_or_after(body: &[u8], ours: &BootInstant) -> bool {
    let Ok(text) = std::str::from_utf8(body) else {
        return false;
    };
    let mut lines = text.lines();
    let (Some(clock), Some(ns)) = (lines.next(), lines.next()) else {
        return false;
    };
    clock == ours.clock
        && ns
            .parse::<u128>()
            .is_ok_and(|ns| ns >= ours.since_boot.as_nanos())
}

/// Fresh attempts of the store-clock probe whose read-back shows another version (see
/// [`Error::ClockUnverified`] for what a collector does when all of them do).
pub const CLOCK_PROBE_ATTEMPTS: usize = 3;

impl Bank {
    /// `_banklease/clock/`: the store-clock probes, one key per host that read the clock.
    pub fn clock_probe_prefix(&self) -> Path {
        Prefix::ClockProbes.path(self)
    }

    /// This host's store-clock probe key, `host-<16 hex digits>` (a hash of its hostname and
    /// machine id), shared by every command, agent and collector on the host and rewritten in
    /// place; a collector's cleanup never removes its own.
    /// A collector's handle ([`Bank::for_collector`]) has the host's collectors' key,
    /// `host-<16 hex digits>-gc`.
    pub fn own_clock_probe(&self) -> Path {
        let host = crate::id::host_probe_name();
        let name = if self.collector {
            format!("{host}-gc")
        } else {
            host.to_owned()
        };
        Key::ClockProbe(name).path(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn store_time_reads_last_modified() {
        let bank = Bank::open("memory://").unwrap();
        let clock: SharedClock = Arc::new(crate::clock::SystemClock);
        let t = bank.store_time(&clock).await.unwrap();
        let later = t.at_instant(t.observed + Duration::from_secs(3));
        assert_eq!(StoreTime::between(t.at, later), Duration::from_secs(3));
    }
}
