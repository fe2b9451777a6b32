//! Claims in namespaces, juju style: claim, extend, expire, and a snapshot of a namespace.
//!
//! These are stateless: the caller names the holder on every call, and gets back a [`Grant`]
//! saying until when (on its own monotonic clock) the lease is guaranteed.
//!
//! **Guarantee: a successful claim or extend holds for at least the requested duration from the
//! start of the call.** The store judges a lease from its `last_modified`, stamped after the write
//! was sent, which is after the call started; the grant's `valid_until` is the send time of the
//! write (or, when no write was needed, the start of the call) plus the duration.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};

use super::fence::Fence;
use super::info::{LockInfo, LockState};
use super::ops::info_of;
use super::record::{judge, read_record, update_of, write_record, Judged};
use super::take::{kept_by, new_record, take, unavailable, Mode, Spec};
use super::{support, LockHolder, Locks};
use crate::clock::store::LazyStoreTime;
use crate::error::{Error, Result};
use crate::id::OwnerId;
use crate::lease::{Landed, Written};
use crate::paths::Key;

/// Rounds of read-judge-write when the object keeps changing under us.
const CONTENTION_ROUNDS: usize = 8;
/// Lock objects read at once by a snapshot.
const SNAPSHOT_CONCURRENCY: usize = 16;

/// A claim or extension that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The holder.
    pub holder: String,
    /// The fencing token of the holding (an extension keeps it).
    pub fence: Fence,
    /// Held at least until then, on the caller's monotonic clock.
    pub valid_until: Instant,
    /// Whether a write was made (an extension that was already long enough makes none).
    pub wrote: bool,
}

/// Every lease of a namespace, read and judged against one reading of the store's clock.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The leases, by key.
    pub leases: Vec<LockInfo>,
    /// Objects that were listed but could not be read or parsed: `(key, error)`.
    pub unreadable: Vec<(String, String)>,
}

impl Locks {
    /// Claim `key` for `holder` for `duration`: succeeds only if nobody holds it (free, expired on
    /// the store's clock, or never used) — a lease held by the same holder makes the claim fail
    /// with [`Error::Unavailable`] too.
    pub async fn claim(&self, key: &str, holder: &str, duration: Duration) -> Result<Grant> {
        Self::validate_key(key)?;
        crate::id::validate_id("owner", holder)?;
        let duration = super::Term::For(duration).resolve(self, key)?;
        let spec = Spec {
            owner: holder,
            duration,
            payload: None,
            mode: Mode::Claim,
            ticket: None,
        };
        let granted = take(self, key, &spec).await?;
        Ok(Grant {
            holder: holder.to_owned(),
            fence: Fence {
                lock: self.name(key),
                value: granted.record.fence,
            },
            valid_until: granted.landed.t_send + duration,
            wrote: true,
        })
    }

    /// Extend `holder`'s lease on `key` so that it lasts at least `duration` from now.
    ///
    /// Never shortens: if the lease already lasts that long (store clock, margin deducted) nothing
    /// is written; otherwise the new record's duration is chosen so that it also ends no earlier
    /// than the old one. Racing extensions are benign: each is an If-Match write, a loser reads
    /// the winner's record and starts over from it. Fails with [`Error::LockLost`] when `holder`
    /// does not hold the key (it is free, or someone else's). A lease that ran out but that
    /// nobody has claimed or expired since may still be extended.
    pub async fn extend(&self, key: &str, holder: &str, duration: Duration) -> Result<Grant> {
        let t_start = self.clock.now();
        Self::validate_key(key)?;
        let owner = OwnerId::parse(holder)?;
        let duration = super::Term::For(duration).resolve(self, key)?;
        support::ensure_supported(&self.bank).await?;
        let path = self.lock_path(key);
        let lost = |reason: String| Error::LockLost {
            key: self.name(key),
            owner: owner.clone(),
            reason,
        };
        let mut sc = LazyStoreTime::new();
        let mut first_seen: Option<Option<String>> = None;
        for _ in 0..CONTENTION_ROUNDS {
            let Some((rec, meta)) = read_record(&self.bank, &path).await? else {
                return Err(lost("the key was never claimed".to_owned()));
            };
            match rec.holder.as_deref() {
                Some(h) if h == holder => {}
                Some(h) => return Err(lost(format!("the key is held by `{h}`"))),
                None => return Err(lost("the key is free".to_owned())),
            }
            let fence = Fence {
                lock: self.name(key),
                value: rec.fence,
            };
            match &first_seen {
                None => first_seen = Some(meta.e_tag.clone()),
                // A racing extension (or claim) by the same holder landed after this call
                // started, with at least our duration: it already holds for `duration` from the
                // start of this call. Benign: nothing more to write.
                Some(first) if *first != meta.e_tag && rec.duration() >= duration => {
                    return Ok(Grant {
                        holder: holder.to_owned(),
                        fence,
                        valid_until: t_start + duration,
                        wrote: false,
                    });
                }
                Some(_) => {}
            }
            let sc_now = sc.get(&self.bank, &self.clock).await?;
            let now = self.clock.now();
            let margin = chrono::Duration::from_std(self.margin).unwrap_or(chrono::Duration::MAX);
            let old = chrono::Duration::from_std(rec.duration()).unwrap_or(chrono::Duration::MAX);
            let ends = meta
                .last_modified
                .checked_add_signed(old)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            // Held for at least this long more: the store may be ahead of our lower bound.
            // An unverified reading bounds nothing from above: then nothing is left for sure.
            let left_at_least = sc_now
                .upper_at(now)
                .and_then(|upper| (ends - margin - upper).to_std().ok())
                .unwrap_or(Duration::ZERO);
            if left_at_least >= duration {
                return Ok(Grant {
                    holder: holder.to_owned(),
                    fence,
                    valid_until: now + left_at_least,
                    wrote: false,
                });
            }
            // Held for at most this long more: the new record must not end before it, the old
            // length's drift (`judge_expiry`) counted: a short extension of a long record would
            // otherwise bring the instant others may take it forward.
            let old_drift =
                chrono::Duration::from_std(crate::clock::drift::clock_drift_over(rec.duration()))
                    .unwrap_or(chrono::Duration::MAX);
            let left_at_most = (ends + old_drift + margin - sc_now.at_instant(now))
                .to_std()
                .unwrap_or(Duration::ZERO);
            let new_duration = duration.max(left_at_most);
            let record = new_record(
                self,
                key,
                Some(holder),
                rec.payload.as_deref(),
                new_duration,
                rec.fence,
                rec.generation.saturating_add(1),
            );
            match write_record(&self.bank, &self.clock, &path, &record, update_of(&meta)).await? {
                Written::Ours(Landed { t_send, .. }) => {
                    return Ok(Grant {
                        holder: holder.to_owned(),
                        fence,
                        // t_send is after the start of the call, and new_duration >= duration.
                        valid_until: t_send + new_duration,
                        wrote: true,
                    });
                }
                Written::Conflict(_) => continue,
            }
        }
        Err(kept_by(self, key, LockHolder::Contended, Duration::ZERO))
    }

    /// Expire `key`: succeeds only once the store's clock is past the lease's start (its
    /// `last_modified`) plus its duration plus the skew margin, and then frees the key (keeping
    /// its fencing counter). Returns the holder whose lease was expired, or `None` if the key was
    /// free or never used. Fails with [`Error::Unavailable`] while the lease is still running.
    pub async fn expire(&self, key: &str) -> Result<Option<String>> {
        let path = self.checked_path(key).await?;
        let mut sc = LazyStoreTime::new();
        for _ in 0..CONTENTION_ROUNDS {
            let sent = self.clock.now();
            let Some((rec, meta)) = read_record(&self.bank, &path).await? else {
                return Ok(None);
            };
            let Some(holder) = rec.holder.clone() else {
                return Ok(None);
            };
            let now = sc.lower_at(&self.bank, &self.clock, sent).await?;
            if let Judged::Held { remaining } = judge(&rec, meta.last_modified, now, self.margin) {
                return Err(unavailable(self, key, &holder, remaining));
            }
            let free = new_record(
                self,
                key,
                None,
                None,
                Duration::ZERO,
                rec.fence,
                rec.generation.saturating_add(1),
            );
            match write_record(&self.bank, &self.clock, &path, &free, update_of(&meta)).await? {
                Written::Ours(_) => return Ok(Some(holder)),
                Written::Conflict(_) => continue,
            }
        }
        Err(kept_by(self, key, LockHolder::Contended, Duration::ZERO))
    }

    /// Every lease of the namespace: the listing finds the lock objects, and each is then read
    /// and judged (a listed object that is gone when read is left out).
    pub async fn snapshot(&self) -> Result<Snapshot> {
        support::ensure_readable(&self.bank).await?;
        let dir = self.namespace_path();
        let listed = self
            .bank
            .store()
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| Error::store("list", &dir, e))?;
        let store_clock = self.bank.store_time(&self.clock).await?;
        // A listed name that is no lock key of this namespace is reported, by its name.
        let keys: Vec<(String, bool)> = listed
            .objects
            .iter()
            .filter_map(|m| match Key::parse(&self.bank, &m.location) {
                Some(Key::Lock { namespace, key }) if namespace == self.namespace => {
                    Some((key, true))
                }
                _ => m.location.filename().map(|n| (n.to_owned(), false)),
            })
            .collect();
        let reads = futures::stream::iter(keys.into_iter().map(|(key, valid)| async move {
            if !valid {
                let e = Self::validate_key(&key).err().map_or_else(
                    || "it is not a lock key of this namespace".to_owned(),
                    |e| e.to_string(),
                );
                return Ok::<_, Error>((key, Err(e)));
            }
            let sent = self.clock.now();
            let read = read_record(&self.bank, &self.lock_path(&key)).await;
            Ok((
                key,
                read.map(|r| r.map(|(rec, meta)| (rec, meta, sent)))
                    .map_err(|e| crate::error::error_chain(&e)),
            ))
        }))
        .buffered(SNAPSHOT_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
        let mut snapshot = Snapshot::default();
        for (key, read) in reads {
            match read {
                Ok(None) => {}
                Ok(Some((rec, meta, sent))) => {
                    let now = store_clock.at_send(sent, std::time::Duration::ZERO);
                    let state = match (
                        &rec.holder,
                        judge(&rec, meta.last_modified, now, self.margin),
                    ) {
                        (Some(h), Judged::Held { remaining }) => LockState::Held {
                            holder: h.clone(),
                            remaining,
                        },
                        (Some(h), Judged::Expired { since }) => LockState::Expired {
                            holder: h.clone(),
                            since,
                        },
                        _ => LockState::Free,
                    };
                    snapshot
                        .leases
                        .push(info_of(&key, state, rec, meta.last_modified));
                }
                Err(error) => snapshot.unreadable.push((key, error)),
            }
        }
        snapshot.leases.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(snapshot)
    }
}
