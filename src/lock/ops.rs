//! Operations on keys that need no handle: acquire-any, a stateless release, get-current and
//! inspect.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::info::{Current, LockInfo, LockState, Order, Release};
use super::named::Lock;
use super::record::{judge, read_record, update_of, write_record, Judged, LockRecord};
use super::take::{kept_by, new_record, running, unavailable, CONTENTION_ROUNDS};
use super::{LockHolder, LockNames, Locks, Term};
use crate::clock::store::LazyStoreTime;
use crate::clock::Jitter;
use crate::error::{Error, Result};
use crate::lease::Written;

impl Locks {
    /// Try `keys` in `order` and acquire the first one available. Fails with
    /// [`Error::Unavailable`] only if every key is held; if some key failed otherwise (a store
    /// error) and none could be acquired, that error is returned.
    pub async fn acquire_any(
        &self,
        keys: &[&str],
        owner: &str,
        term: Term,
        payload: Option<&str>,
        order: Order,
    ) -> Result<Lock> {
        let mut keys: Vec<&str> = keys.to_vec();
        if keys.is_empty() {
            return Err(Error::InvalidId {
                kind: "lock key",
                given: String::new(),
                reason: "no key was given".into(),
            });
        }
        if let Order::Random(jitter) = &order {
            shuffle(&mut keys, jitter);
        }
        let mut soonest: Option<(LockHolder, Duration)> = None;
        let mut other_error = None;
        for key in &keys {
            match self.acquire(key, owner, term, payload).await {
                Ok(lock) => return Ok(lock),
                Err(Error::Unavailable {
                    holder, remaining, ..
                }) => {
                    if soonest.as_ref().is_none_or(|(_, r)| remaining < *r) {
                        soonest = Some((holder, remaining));
                    }
                }
                Err(e) => {
                    tracing::warn!(namespace = %self.namespace, key, error = %e,
                        "acquire-any: key failed");
                    other_error = Some(e);
                }
            }
        }
        if let Some(e) = other_error {
            return Err(e);
        }
        let (holder, remaining) = soonest.expect("every key was unavailable");
        // Every key was found held: each is valid.
        let all: LockNames = keys.iter().map(|k| self.name(k)).collect();
        Err(Error::Unavailable {
            key: all,
            holder,
            remaining,
        })
    }

    /// Release `key` if `owner` holds it, without a handle (the CLI's release). Not an error when
    /// nobody holds the key; [`Error::Unavailable`] when someone else does — or when a
    /// `lock run` holds it under that name and its processes are not proved gone
    /// ([`LockHolder::Running`]): see [`Locks::release_token`].
    pub async fn release(&self, key: &str, owner: &str) -> Result<Release> {
        self.release_as(key, Some(owner), None).await
    }

    /// [`Locks::release`] of the holding whose fencing token is `token`, even one a running
    /// `lock run` holds (which then stops its COMMAND): an operator's deliberate act, or
    /// COMMAND's own (`BANKLEASE_LOCK_TOKEN`). [`Error::Unavailable`] when `owner` holds it
    /// with another token.
    pub async fn release_token(&self, key: &str, owner: &str, token: u64) -> Result<Release> {
        self.release_as(key, Some(owner), Some(token)).await
    }

    /// [`Locks::release_token`] by the token alone, whoever holds it: a fencing token names one
    /// holding of one key (every acquisition takes a new one). [`Error::Unavailable`] when the
    /// key is held with another token.
    pub async fn release_holding(&self, key: &str, token: u64) -> Result<Release> {
        self.release_as(key, None, Some(token)).await
    }

    async fn release_as(
        &self,
        key: &str,
        owner: Option<&str>,
        token: Option<u64>,
    ) -> Result<Release> {
        if let Some(owner) = owner {
            crate::id::validate_id("owner", owner)?;
        }
        // Without a name, the token alone says whose holding this is.
        let named = |h: &str| owner.is_none_or(|o| o == h);
        let path = self.checked_path(key).await?;
        let mut sc = LazyStoreTime::new();
        for _ in 0..CONTENTION_ROUNDS {
            let sent = self.clock.now();
            let Some((rec, meta)) = read_record(&self.bank, &path).await? else {
                return Ok(Release::Free);
            };
            match rec.holder.as_deref() {
                None => return Ok(Release::Free),
                Some(h) if named(h) && token.is_some_and(|t| t != rec.fence) => {
                    return Err(unavailable(self, key, h, Duration::ZERO));
                }
                Some(h) if named(h) => {
                    // Bound to processes of a `lock run` not proved gone — held and not all
                    // gone, or expired and its tree still running here: by name, never.
                    if let (None, Some(p)) = (token, rec.bound()) {
                        let now = sc.lower_at(&self.bank, &self.clock, sent).await?;
                        let judged = judge(&rec, meta.last_modified, now, self.margin);
                        let (live, remaining) = match judged {
                            Judged::Held { remaining } => (!p.gone(), remaining),
                            _ => (p.lingering().is_some(), Duration::ZERO),
                        };
                        if live {
                            return Err(running(self, key, &rec, remaining));
                        }
                    }
                    let mut free = new_record(self, key, None, None, Duration::ZERO, rec.fence, 0);
                    // Released from under a running holder by its token: its tree is named on,
                    // and a waiter on its host does not take the lock beside what is left of it
                    // (the holder stops it as soon as it reads its record).
                    if token.is_some() {
                        free.tree = rec.bound().cloned();
                    }
                    match write_record(&self.bank, &self.clock, &path, &free, update_of(&meta))
                        .await?
                    {
                        Written::Ours(_) => return Ok(Release::Released),
                        Written::Conflict(_) => continue,
                    }
                }
                Some(h) => {
                    let now = sc.lower_at(&self.bank, &self.clock, sent).await?;
                    return match judge(&rec, meta.last_modified, now, self.margin) {
                        Judged::Held { remaining } => Err(unavailable(self, key, h, remaining)),
                        _ => Ok(Release::Free),
                    };
                }
            }
        }
        Err(kept_by(self, key, LockHolder::Contended, Duration::ZERO))
    }

    /// Who holds `key` now (store clock): `None` when it is free, expired or never used.
    pub async fn current(&self, key: &str) -> Result<Option<Current>> {
        let Some(info) = self.inspect(key).await? else {
            return Ok(None);
        };
        Ok(match info.state {
            LockState::Held { holder, remaining } => Some(Current {
                key: self.name(key).to_string(),
                holder,
                payload: info.payload,
                remaining,
                fence: info.fence,
            }),
            _ => None,
        })
    }

    /// Everything about `key`'s lock object, judged on the store's clock; `None` if the key was
    /// never used.
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>> {
        Self::validate_key(key)?;
        super::support::ensure_readable(&self.bank).await?;
        let path = self.lock_path(key);
        let sent = self.clock.now();
        let Some((rec, meta)) = read_record(&self.bank, &path).await? else {
            return Ok(None);
        };
        let mut sc = LazyStoreTime::new();
        let state = match &rec.holder {
            None => LockState::Free,
            Some(h) => {
                let now = sc.lower_at(&self.bank, &self.clock, sent).await?;
                match judge(&rec, meta.last_modified, now, self.margin) {
                    Judged::Held { remaining } => LockState::Held {
                        holder: h.clone(),
                        remaining,
                    },
                    Judged::Expired { since } => LockState::Expired {
                        holder: h.clone(),
                        since,
                    },
                    Judged::Free => LockState::Free,
                }
            }
        };
        Ok(Some(info_of(key, state, rec, meta.last_modified)))
    }
}

pub(crate) fn info_of(
    key: &str,
    state: LockState,
    rec: LockRecord,
    last_modified: DateTime<Utc>,
) -> LockInfo {
    LockInfo {
        key: key.to_owned(),
        state,
        payload: rec.payload.clone(),
        fence: rec.fence,
        duration: rec.duration(),
        last_modified,
        record: rec,
    }
}

/// Fisher–Yates with uniform draws from the jitter source.
fn shuffle<T>(items: &mut [T], jitter: &Jitter) {
    for i in (1..items.len()).rev() {
        // `shorten(base, 1.0)` is uniform in [0, base]: a uniform draw in [0, 1].
        let u = jitter.shorten(Duration::from_secs(1), 1.0).as_secs_f64();
        let j = ((u * (i + 1) as f64) as usize).min(i);
        items.swap(i, j);
    }
}
