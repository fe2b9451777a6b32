//! A key's wait queue as read: its tickets, `locks/<ns>/<key>.queue/<ticket>`, each judged on
//! the store's clock like a lock (see [`super::queue`] for the protocol).

use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use super::record::{judge, read_record, Judged};
use super::{support, Locks};
use crate::clock::store::LazyStoreTime;
use crate::error::{Error, Result};
use crate::paths::Key;

pub(crate) use crate::paths::TICKET_DIGITS;

/// A waiter in a key's queue, as read and judged on the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The ticket (its position: lower is served first).
    pub ticket: String,
    /// Who waits.
    pub owner: String,
    /// Time left on its ticket lease (zero when expired).
    pub remaining: Duration,
    /// Whether the ticket is live (not expired on the store's clock).
    pub live: bool,
}

/// A ticket of `key`'s queue (`None` for anything else listed there).
fn parse_ticket(locks: &Locks, key: &str, path: &Path) -> Option<(u64, String)> {
    match Key::parse(&locks.bank, path)? {
        Key::Ticket {
            namespace,
            key: k,
            ticket,
        } if namespace == locks.namespace && k == key => Some((ticket.parse().ok()?, ticket)),
        _ => None,
    }
}

/// Ticket names under the key's queue, ascending. A listing: used to find tickets only.
pub(crate) async fn list_tickets(locks: &Locks, key: &str) -> Result<Vec<(u64, String)>> {
    let dir = locks.queue_path(key);
    let mut found: Vec<(u64, String)> = locks
        .bank
        .store()
        .list(Some(&dir))
        .try_filter_map(|m| async move { Ok(parse_ticket(locks, key, &m.location)) })
        .try_collect()
        .await
        .map_err(|e| Error::store("list", &dir, e))?;
    found.sort();
    Ok(found)
}

/// The first live ticket of `key`'s queue that comes before `before` (every ticket when `None`).
/// Expired tickets met on the way are deleted (best effort).
pub(crate) async fn first_live(
    locks: &Locks,
    key: &str,
    before: Option<&str>,
    sc: &mut LazyStoreTime,
) -> Result<Option<Waiter>> {
    for (_, name) in list_tickets(locks, key).await? {
        if before.is_some_and(|b| name.as_str() >= b) {
            break;
        }
        let path = locks.ticket_path(key, &name);
        // Absence is trusted only from a read; a read error stops the check.
        let sent = locks.clock.now();
        let Some((rec, meta)) = read_record(&locks.bank, &path).await? else {
            continue;
        };
        let Some(owner) = rec.holder.clone() else {
            continue;
        };
        let now = sc.lower_at(&locks.bank, &locks.clock, sent).await?;
        match judge(&rec, meta.last_modified, now, locks.margin) {
            Judged::Held { remaining } => {
                return Ok(Some(Waiter {
                    ticket: name,
                    owner,
                    remaining,
                    live: true,
                }))
            }
            _ => {
                // Its waiter judged it lost before this (send-time expiry, and a renewal counts
                // only if answered in time), so it will never be renewed: safe to remove.
                tracing::info!(ticket = %path, owner = %owner, "removing an expired queue ticket");
                if let Err(e) = locks.bank.store().delete(&path).await {
                    tracing::debug!(ticket = %path, error = %e, "could not remove an expired ticket");
                }
            }
        }
    }
    Ok(None)
}

impl Locks {
    /// The waiters queued for `key`, in order, each read and judged (expired ones included, with
    /// `live: false`; nothing is deleted).
    pub async fn waiters(&self, key: &str) -> Result<Vec<Waiter>> {
        Self::validate_key(key)?;
        support::ensure_readable(&self.bank).await?;
        let mut sc = LazyStoreTime::new();
        let mut waiters = Vec::new();
        for (_, name) in list_tickets(self, key).await? {
            let path = self.ticket_path(key, &name);
            let sent = self.clock.now();
            let Some((rec, meta)) = read_record(&self.bank, &path).await? else {
                continue;
            };
            let Some(owner) = rec.holder.clone() else {
                continue;
            };
            let now = sc.lower_at(&self.bank, &self.clock, sent).await?;
            let judged = judge(&rec, meta.last_modified, now, self.margin);
            waiters.push(Waiter {
                ticket: name,
                owner,
                remaining: match judged {
                    Judged::Held { remaining } => remaining,
                    _ => Duration::ZERO,
                },
                live: matches!(judged, Judged::Held { .. }),
            });
        }
        Ok(waiters)
    }
}
