//! Resolving a checkpoint the GC cannot handle on its own (`banklease checkpoint resolve ID`):
//! one whose `index.json` cannot be read, under a dead owner. The GC never overwrites what it
//! cannot read; an operator who has looked at it may, and this does it with the GC's own
//! fencing: the owner judged dead as a pass judges it (on the store's clock, stamps raised to
//! the step floor, margin and grace), then the one create-if-absent decision, then the
//! tombstone. The next pass deletes the data and the marker.
//!
//! Invariant: **resolve never takes a live owner's checkpoint, and never overwrites a
//! decision.** An owner alive, in grace, unreadable, or missing for less than the grace (as
//! the GC's missing-since record says) is refused; a decision that cannot be read is refused
//! (it may record its owner's `available`); a decision someone else won is left as it is.

use banklease::checkpoint::Evidence;
use banklease::checkpoint::{self, parse_marker, protecting_prefix, Decided, Decider, Decision};
use banklease::clock::SharedClock;
use banklease::paths::Key;
use banklease::{Bank, LeaseObserver, LeaseView, OwnerId, StoreTime};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;

use crate::options::GcOptions;
use crate::plan::past;

/// What [`resolve`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// The GC's decision was written (or found) and `index.json` rewritten as a tombstone: the
    /// next pass finishes the collection.
    Collected {
        /// The checkpoint's owner.
        owner: OwnerId,
    },
    /// Nothing was written, for this reason.
    Refused(String),
}

/// Resolve checkpoint `id`; `operator` names who, in the decision's evidence.
pub async fn resolve(
    bank: &Bank,
    clock: &SharedClock,
    options: &GcOptions,
    id: &str,
    operator: &str,
) -> banklease::Result<Resolution> {
    checkpoint::validate_checkpoint_id(id)?;
    let refused = |why: String| Ok(Resolution::Refused(why));
    let decision = match checkpoint::read_decision(bank, id).await {
        Ok(d) => d,
        Err(e) => {
            return refused(format!(
                "its decision cannot be read ({}); it may record its owner's `available`, so \
                 resolve never overwrites it: restore it, or remove it if it is known to be \
                 garbage",
                banklease::error_chain(&e)
            ))
        }
    };
    let index = checkpoint::read_checkpoint(bank, id).await;
    if index.is_ok() {
        return refused(
            "its index.json reads: the gc handles it (`checkpoint explain` says when)".to_owned(),
        );
    }
    let owner = match &decision {
        Some(d) if d.by == Decider::Owner => {
            return refused(format!(
                "its owner decided it `{}`: restore index.json from a backup; resolve never \
                 collects what its owner completed",
                d.outcome
            ))
        }
        Some(d) => d.owner_id.clone(),
        None => match marker_owner(bank, id).await? {
            Some(owner) => owner,
            None => {
                return refused(
                    "no protecting marker names its owner: nothing to judge it by".to_owned(),
                )
            }
        },
    };
    if decision.is_none() {
        let evidence = match dead(bank, clock, options, &owner, operator).await? {
            Ok(evidence) => evidence,
            Err(why) => return refused(why),
        };
        let decision = Decision::collect(id, &owner, clock.system_now().into(), Some(evidence));
        match banklease::collector::decide(bank, decision).await? {
            Decided::Won(_) => {}
            Decided::Lost(d) if d.by == Decider::Gc => {}
            Decided::Lost(d) => {
                return refused(format!(
                    "its owner decided it `{}` meanwhile: restore index.json",
                    d.outcome
                ))
            }
        }
    }
    banklease::collector::write_tombstone(bank, id, &owner, None, clock.system_now().into())
        .await?;
    tracing::info!(checkpoint_id = id, owner_id = %owner, operator, "resolved: collected");
    Ok(Resolution::Collected { owner })
}

/// The owner of `id`'s protecting marker, if one is listed.
async fn marker_owner(bank: &Bank, id: &str) -> banklease::Result<Option<OwnerId>> {
    let prefix = protecting_prefix(bank);
    let listed: Vec<_> = bank
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| banklease::Error::store("list", &prefix, e))?;
    Ok(listed
        .iter()
        .filter_map(|m| parse_marker(bank, &m.location))
        .find(|(_, checkpoint)| checkpoint == id)
        .map(|(owner, _)| owner))
}

/// The evidence that `owner` is dead as a pass would judge it, or why it is not.
async fn dead(
    bank: &Bank,
    clock: &SharedClock,
    options: &GcOptions,
    owner: &OwnerId,
    operator: &str,
) -> banklease::Result<Result<Evidence, String>> {
    let floor = crate::timing::read_floor(bank).await?;
    let observer = LeaseObserver::new(bank.clone(), clock.clone(), options.skew_margin)
        .with_read_staleness(options.read_staleness)
        .with_floor(floor);
    let now = observer.store_time().await?;
    if !now.verified {
        return Ok(Err(
            "the store's clock could not be read reliably (a lagging replica); run again"
                .to_owned(),
        ));
    }
    let (view, read) = observer.view_read(owner, &now).await;
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (lease, dead_for, expire_window_ms) = match &view {
        LeaseView::Expired { since, record } if past(*since, options.grace, Default::default()) => {
            ("expired", *since, Some(millis(record.expire_window())))
        }
        LeaseView::Missing => {
            let path = Key::GcMissing(owner.clone()).path(bank);
            let seen = match bank.store().head(&path).await {
                Ok(meta) => meta.last_modified,
                Err(object_store::Error::NotFound { .. }) => {
                    return Ok(Err(format!(
                        "its owner `{owner}` has no lease, but no gc pass has seen it missing \
                         yet; run `banklease gc`, then again after the grace"
                    )))
                }
                Err(e) => return Err(banklease::Error::store("head", &path, e)),
            };
            let seen = floor.map_or(seen, |f| f.max(seen));
            let missing_for = StoreTime::between(seen, read.judged_at);
            if !past(missing_for, options.grace, options.skew_margin) {
                return Ok(Err(format!(
                    "its owner `{owner}` has been seen without a lease for less than the grace; \
                     run again later"
                )));
            }
            ("missing", missing_for, None)
        }
        other => {
            return Ok(Err(format!(
                "its owner `{owner}` is not dead past the grace (its lease is {}): resolve never \
                 takes a live owner's checkpoint",
                other.name()
            )))
        }
    };
    Ok(Ok(Evidence {
        lease: lease.to_owned(),
        lease_stamp: read.stamp,
        expire_window_ms,
        judged_at: read.judged_at,
        dead_for_ms: millis(dead_for),
        skew_margin_ms: millis(options.skew_margin),
        grace_ms: millis(options.grace),
        collector: format!("operator {operator} (checkpoint resolve)"),
        pass: uuid::Uuid::new_v4().simple().to_string(),
    }))
}
