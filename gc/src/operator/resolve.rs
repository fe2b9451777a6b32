//! Resolving a checkpoint the GC cannot handle on its own (`banklease checkpoint resolve ID`):
//! one whose `index.json` or decision cannot be read. The GC never overwrites what it cannot
//! read; an operator who has looked at it may, and this does it with the GC's own fencing and
//! without losing a byte (`banklease::collector::set_aside`: the unreadable record is kept under
//! `_banklease/set-aside/` and replaced only if it is still the version kept):
//!
//! - an unreadable `index.json` under a dead owner and no decision: the owner judged dead as a
//!   pass judges it (on the store's clock, stamps raised to the step floor, margin and grace),
//!   then the one create-if-absent decision, then the tombstone;
//! - an unreadable `index.json` under a decision: the decision says what it must say — its
//!   owner's outcome (`available`, `error`), or the GC's tombstone;
//! - an unreadable decision whose `index.json` records its outcome (the decider writes the
//!   decision first, then `index.json`): the decision is rebuilt from it;
//! - an unreadable decision whose `index.json` does not say (`protecting`, missing, unreadable):
//!   it may record its owner's `available`, so it is refused — unless the operator says the data
//!   is garbage (`--as deleted`), and then only under a dead owner, fenced as above.
//!
//! The next pass deletes a collected checkpoint's data and marker.
//!
//! Invariant: **resolve never takes a live owner's checkpoint, never overwrites a readable
//! decision, and never guesses an outcome.** An owner alive, in grace, unreadable, or missing for
//! less than the grace (as the GC's missing-since record says) is refused; an outcome is taken
//! from a record that states it, or from the operator's `--as deleted`, never inferred; a record
//! a newer release wrote is refused, never replaced.

use banklease::checkpoint::{self, parse_marker, Decided, Decider, Decision};
use banklease::checkpoint::{CheckpointRecord, Evidence, Rebuilt, Status, CHECKPOINT_FORMAT};
use banklease::clock::SharedClock;
use banklease::clock::StoreTime;
use banklease::collector::SetAside;
use banklease::paths::{Key, Prefix};
use banklease::CheckpointId;
use banklease::{Bank, LeaseObserver, LeaseView, OwnerId};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;

use crate::pass::options::GcOptions;
use crate::pass::plan::past;

/// The command named in a resolution's evidence and refusals.
const RESOLVE: &str = "checkpoint resolve";

/// What [`resolve`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// The GC's decision was written (or found) and `index.json` rewritten as a tombstone: the
    /// next pass finishes the collection.
    Collected {
        /// The checkpoint's owner.
        owner: OwnerId,
        /// Where the unreadable records it replaced are kept.
        kept: Vec<String>,
    },
    /// An unreadable decision was rebuilt from the outcome `index.json` records.
    DecisionRestored {
        /// The checkpoint's owner.
        owner: OwnerId,
        /// Who had decided, as the outcome says (the owner for `available`/`error`).
        by: Decider,
        /// The outcome.
        outcome: Status,
        /// Where the unreadable decision is kept.
        kept: String,
    },
    /// An unreadable `index.json` under its owner's decision was rebuilt from the decision and
    /// the move finished (the marker deleted).
    OwnerDecisionFinished {
        /// The checkpoint's owner.
        owner: OwnerId,
        /// The owner's outcome.
        outcome: Status,
        /// Where the unreadable `index.json` is kept.
        kept: String,
    },
    /// Nothing was replaced, for this reason (when a copy was already kept under
    /// `_banklease/set-aside/`, the reason says where).
    Refused(String),
}

/// What the operator asserts beyond what the records say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Assertion {
    /// Nothing: resolve only what the records and the GC's fencing decide.
    #[default]
    None,
    /// The data is garbage: a decision that cannot be read and whose outcome no record states
    /// may be replaced by the GC's (its owner still judged dead first).
    Deleted,
}

/// Resolve checkpoint `id`; `operator` names who, in the decision's evidence.
pub async fn resolve(
    bank: &Bank,
    clock: &SharedClock,
    options: &GcOptions,
    id: &CheckpointId,
    operator: &str,
    assertion: Assertion,
) -> banklease::Result<Resolution> {
    let r = Resolver {
        bank,
        clock,
        options,
        id,
        operator,
        now: clock.system_now().into(),
    };
    let decision = match checkpoint::read_decision(bank, id).await {
        Ok(d) => d,
        Err(banklease::Error::Corrupt { reason, .. }) => {
            return r.unreadable_decision(&reason, assertion).await
        }
        Err(e) => return Err(e),
    };
    if assertion == Assertion::Deleted {
        return refused(match decision {
            Some(_) => {
                "its decision reads: `--as deleted` is only for a decision that cannot be \
                        read"
            }
            None => {
                "it has no decision: `--as deleted` is only for a decision that cannot be \
                     read"
            }
        });
    }
    let index_reason =
        match checkpoint::read_checkpoint(bank, id).await {
            Ok(Some(_)) => return refused(
                "its index.json and decision read: the gc handles it (`checkpoint explain` says \
                 when)",
            ),
            Ok(None) if decision.is_some() => {
                return refused("it has no index.json, and the next gc pass finishes its decision")
            }
            Ok(None) if marker_owners(bank, id).await?.is_empty() => {
                return refused("it is not in the bank: no index.json, no decision, no marker")
            }
            Ok(None) => {
                return refused(
                    "it has a protecting marker but no index.json: the gc collects it once its \
                 owner is dead (`checkpoint explain` says when)",
                )
            }
            Err(banklease::Error::Corrupt { reason, .. }) => reason,
            Err(e) => return Err(e),
        };
    // A newer release's index.json (or one repaired meanwhile) is refused before anything is
    // written: no decision is left for a newer GC to act on.
    if let Err(why) = r.check(Key::Index(id.to_owned())).await? {
        return refused(why);
    }
    let owner = match &decision {
        Some(d) if d.by == Decider::Owner => return r.finish_owner_decision(d).await,
        Some(d) => d.owner_id.clone(),
        None => match r.sole_marker_owner(Some(&index_reason)).await? {
            Ok(owner) => owner,
            Err(why) => return refused(why),
        },
    };
    if decision.is_none() {
        let evidence = match dead(bank, clock, options, &owner, operator, RESOLVE, None).await? {
            Ok(evidence) => evidence,
            Err(why) => return refused(why),
        };
        let decision = Decision::collect(id, &owner, r.now, Some(evidence));
        match banklease::collector::decide(bank, decision).await? {
            Decided::Won(_) => {}
            Decided::Lost(d) if d.by == Decider::Gc => {}
            Decided::Lost(d) => {
                return refused(format!(
                    "its owner decided it `{}` meanwhile: run again",
                    d.outcome
                ))
            }
        }
    }
    let kept = match r.keep(Key::Index(id.to_owned())).await? {
        Ok(kept) => kept,
        Err(why) => return refused(why),
    };
    let mut tombstone = CheckpointRecord::new(id, &owner, Status::Deleted, r.now);
    tombstone.rebuilt = Some(r.rebuilt("decision", &kept));
    banklease::collector::replace_index(bank, &kept, &tombstone).await?;
    tracing::info!(checkpoint_id = %id, owner_id = %owner, operator, kept = %kept.kept_at,
        "resolved: collected");
    Ok(Resolution::Collected {
        owner,
        kept: vec![kept.kept_at.to_string()],
    })
}

fn refused(why: impl Into<String>) -> banklease::Result<Resolution> {
    Ok(Resolution::Refused(why.into()))
}

/// A refusal of the repair primitives (a newer format, a record that changed, reads by now or
/// is too large) as the reason to print; other errors stay errors.
fn refusal<T>(result: banklease::Result<T>) -> banklease::Result<std::result::Result<T, String>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(banklease::Error::Corrupt { path, reason }) => Ok(Err(format!("`{path}`: {reason}"))),
        Err(e) => Err(e),
    }
}

/// One `resolve` call's context.
struct Resolver<'a> {
    bank: &'a Bank,
    clock: &'a SharedClock,
    options: &'a GcOptions,
    id: &'a CheckpointId,
    operator: &'a str,
    now: chrono::DateTime<chrono::Utc>,
}

impl Resolver<'_> {
    /// What a record this call rebuilds says of itself.
    fn rebuilt(&self, from: &str, kept: &SetAside) -> Rebuilt {
        Rebuilt {
            operator: self.operator.to_owned(),
            at: self.now,
            from: from.to_owned(),
            kept_at: kept.kept_at.to_string(),
        }
    }

    /// Whether the unreadable record at `key` may be replaced (nothing written).
    async fn check(&self, key: Key) -> banklease::Result<std::result::Result<(), String>> {
        refusal(banklease::collector::check_replaceable(self.bank, &key).await)
    }

    /// Keep the unreadable record at `key` aside, before it is replaced.
    async fn keep(&self, key: Key) -> banklease::Result<std::result::Result<SetAside, String>> {
        refusal(banklease::collector::set_aside(self.bank, key, self.id, self.now).await)
    }

    /// The one owner whose protecting marker names this checkpoint. Markers of two owners (a
    /// create of the same id that failed leaves its marker, src/writer.rs) leave the owner
    /// unknown: judging whichever a listing shows first could take a live owner's checkpoint.
    async fn sole_marker_owner(
        &self,
        index_reason: Option<&str>,
    ) -> banklease::Result<std::result::Result<OwnerId, String>> {
        let owners = marker_owners(self.bank, self.id).await?;
        // `None`: there is no index.json at all.
        let index = match index_reason {
            Some(reason) => format!("its index.json cannot be read ({reason})"),
            None => "it has no index.json".to_owned(),
        };
        Ok(match owners.as_slice() {
            [owner] => Ok(owner.clone()),
            [] => Err(format!(
                "{index} and no protecting marker names its owner: nothing to judge it by; \
                 restore index.json"
            )),
            several => Err(format!(
                "{index} and protecting markers of several owners name it ({}): which one wrote \
                 it is unknown; restore index.json",
                several
                    .iter()
                    .map(|o| format!("`{o}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        })
    }

    /// An unreadable `index.json` under its owner's decision `d`: index.json only restates the
    /// decision, so it is rebuilt from it (`created_at`, for humans, is lost with the unreadable
    /// bytes: the decision's time) and the move finished.
    async fn finish_owner_decision(&self, d: &Decision) -> banklease::Result<Resolution> {
        let kept = match self.keep(Key::Index(self.id.to_owned())).await? {
            Ok(kept) => kept,
            Err(why) => return refused(why),
        };
        let mut record = CheckpointRecord::new(self.id, &d.owner_id, d.outcome, d.decided_at);
        record.rebuilt = Some(self.rebuilt("decision", &kept));
        banklease::collector::replace_index(self.bank, &kept, &record).await?;
        banklease::collector::finish_owner_decision(self.bank, d).await?;
        tracing::info!(checkpoint_id = %self.id, owner_id = %d.owner_id, operator = self.operator,
            outcome = %d.outcome, kept = %kept.kept_at,
            "resolved: index.json rebuilt from its owner's decision");
        Ok(Resolution::OwnerDecisionFinished {
            owner: d.owner_id.clone(),
            outcome: d.outcome,
            kept: kept.kept_at.to_string(),
        })
    }

    /// The decision cannot be read (`reason`).
    async fn unreadable_decision(
        &self,
        reason: &str,
        assertion: Assertion,
    ) -> banklease::Result<Resolution> {
        let (bank, id, now) = (self.bank, self.id, self.now);
        // A newer release's decision: only it may read or replace it, with or without `--as`.
        if let Err(why) = self.check(Key::Decision(id.to_owned())).await? {
            return refused(why);
        }
        let index = match checkpoint::read_checkpoint(bank, id).await {
            Ok(index) => Ok(index),
            Err(banklease::Error::Corrupt { reason, .. }) => Err(reason),
            Err(e) => return Err(e),
        };
        // index.json states the outcome once a decision was carried out: rebuild from it.
        if let Ok(Some(record)) = &index {
            if record.status != Status::Protecting {
                return self.restore_decision(reason, record, assertion).await;
            }
        }
        if assertion != Assertion::Deleted {
            return refused(format!(
                "its decision cannot be read ({reason}) and index.json does not say what it \
                 was (the decider writes its decision first): it may record its owner's \
                 `available`; restore it from a backup, or if its data is known to be garbage, \
                 run `banklease checkpoint resolve {id} --as deleted` (its owner must be dead, \
                 as the gc judges)"
            ));
        }
        let owner = match &index {
            Ok(Some(record)) => record.owner_id.clone(),
            Ok(None) => match self.sole_marker_owner(None).await? {
                Ok(owner) => owner,
                Err(why) => return refused(why),
            },
            Err(index_reason) => {
                if let Err(why) = self.check(Key::Index(id.to_owned())).await? {
                    return refused(why);
                }
                match self.sole_marker_owner(Some(index_reason)).await? {
                    Ok(owner) => owner,
                    Err(why) => return refused(why),
                }
            }
        };
        let evidence = match dead(
            bank,
            self.clock,
            self.options,
            &owner,
            self.operator,
            RESOLVE,
            None,
        )
        .await?
        {
            Ok(evidence) => evidence,
            Err(why) => return refused(why),
        };
        // No index.json: ours is created first, if absent, so that a checkpoint another owner
        // creates under this id meanwhile keeps it (its create fails, or ours does and this
        // stops) — what a pass does for a marker without metadata.
        if let Ok(None) = &index {
            // Read back whether ours was created or not: on a store whose create-if-absent is
            // not atomic (Swift) a racing create may have won too.
            banklease::collector::create_tombstone(bank, id, &owner, now).await?;
            {
                match checkpoint::read_checkpoint(bank, id).await {
                    Ok(Some(r)) if r.owner_id == owner && r.status == Status::Deleted => {}
                    _ => {
                        return refused(
                            "an index.json appeared while it was judged (another owner took \
                             the id?); nothing was replaced; run `checkpoint explain` and again",
                        )
                    }
                }
            }
        }
        let kept_decision = match self.keep(Key::Decision(id.to_owned())).await? {
            Ok(kept) => kept,
            Err(why) => return refused(why),
        };
        let kept_index = match &index {
            Err(_) => match self.keep(Key::Index(id.to_owned())).await? {
                Ok(kept) => Some(kept),
                Err(why) => {
                    return refused(format!(
                        "{why} (the decision's bytes are kept at `{}`)",
                        kept_decision.kept_at
                    ))
                }
            },
            Ok(_) => None,
        };
        let decision = Decision::collect(id, &owner, now, Some(evidence));
        banklease::collector::replace_decision(bank, &kept_decision, &decision).await?;
        match (&index, &kept_index) {
            (_, Some(kept)) => {
                let mut tombstone = CheckpointRecord::new(id, &owner, Status::Deleted, now);
                tombstone.rebuilt = Some(self.rebuilt("decision", kept));
                banklease::collector::replace_index(bank, kept, &tombstone).await?;
            }
            // Protecting, its owner dead: nobody else may create the id while it exists.
            (Ok(Some(record)), None) => {
                let created_at = Some(record.created_at);
                banklease::collector::write_tombstone(bank, id, &owner, created_at, now).await?;
            }
            // Missing: the tombstone was created above.
            _ => {}
        }
        let kept: Vec<String> = [Some(&kept_decision), kept_index.as_ref()]
            .into_iter()
            .flatten()
            .map(|k| k.kept_at.to_string())
            .collect();
        tracing::info!(checkpoint_id = %id, owner_id = %owner, operator = self.operator,
            kept = ?kept, "resolved: collected (--as deleted)");
        Ok(Resolution::Collected { owner, kept })
    }

    /// An unreadable decision whose outcome `record` states: rebuilt from it.
    async fn restore_decision(
        &self,
        reason: &str,
        record: &CheckpointRecord,
        assertion: Assertion,
    ) -> banklease::Result<Resolution> {
        let by = match record.status {
            Status::Available | Status::Error => Decider::Owner,
            Status::Deleted => Decider::Gc,
            other => {
                return refused(format!(
                    "its decision cannot be read ({reason}) and index.json says `{other}`, \
                     which no decision records: restore the decision"
                ))
            }
        };
        if assertion == Assertion::Deleted && record.status != Status::Deleted {
            return refused(format!(
                "index.json records its owner's `{}`: the decision is rebuilt from it without \
                 `--as deleted`; resolve never deletes what its owner completed",
                record.status
            ));
        }
        let kept = match self.keep(Key::Decision(self.id.to_owned())).await? {
            Ok(kept) => kept,
            Err(why) => return refused(why),
        };
        let decision = Decision {
            format: CHECKPOINT_FORMAT,
            rebuilt: Some(self.rebuilt("index.json", &kept)),
            checkpoint_id: self.id.to_owned(),
            owner_id: record.owner_id.clone(),
            by,
            outcome: record.status,
            token: uuid::Uuid::new_v4().to_string(),
            decided_at: self.now,
            evidence: None,
        };
        banklease::collector::replace_decision(self.bank, &kept, &decision).await?;
        tracing::info!(checkpoint_id = %self.id, owner_id = %record.owner_id,
            operator = self.operator, outcome = %record.status, kept = %kept.kept_at,
            "resolved: decision rebuilt from index.json");
        Ok(Resolution::DecisionRestored {
            owner: record.owner_id.clone(),
            by,
            outcome: record.status,
            kept: kept.kept_at.to_string(),
        })
    }
}

/// The owners whose protecting markers name checkpoint `id`, sorted.
pub async fn marker_owners(bank: &Bank, id: &CheckpointId) -> banklease::Result<Vec<OwnerId>> {
    let prefix = Prefix::Protecting.path(bank);
    let listed: Vec<_> = bank
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| banklease::Error::store("list", &prefix, e))?;
    let mut owners: Vec<OwnerId> = listed
        .iter()
        .filter_map(|m| parse_marker(bank, &m.location))
        .filter(|(_, checkpoint)| checkpoint == id)
        .map(|(owner, _)| owner)
        .collect();
    owners.sort();
    owners.dedup();
    Ok(owners)
}

/// The evidence that `owner` is dead as a pass would judge it, or why it is not; `command`
/// (`checkpoint resolve`, `checkpoint delete`) is named in the evidence and the refusal.
pub(crate) async fn dead(
    bank: &Bank,
    clock: &SharedClock,
    options: &GcOptions,
    owner: &OwnerId,
    operator: &str,
    command: &str,
    declared_ms: Option<u64>,
) -> banklease::Result<Result<Evidence, String>> {
    // The rules of a pass: a margin the store's stamps can honour, and the store's clock read
    // as a pass reads it (checked against this host's last reading and the bank's floor).
    crate::time::timing::check_skew_margin(bank, clock, options.skew_margin).await?;
    let collector = bank.for_collector();
    let probe = crate::time::probe::ClockProbe::new(collector.clone(), clock.clone(), options);
    let observer = LeaseObserver::new(collector, clock.clone(), options.skew_margin)
        .with_read_staleness(options.read_staleness);
    let now = probe.start(&observer).await?;
    let floor = probe.floor();
    let observer = observer.with_floor(floor);
    let (view, read) = observer.view_read(owner, &now).await;
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    // Judged as a pass judges it: by the grace the owner's own declarations need.
    let rules = crate::pass::declared::OwnerRules::of(bank);
    let grace;
    let (lease, dead_for, expire_window_ms) = match &view {
        LeaseView::Expired { since, record } => {
            let (needed, why) = rules.grace_for(record, options);
            grace = needed;
            if !past(*since, grace, Default::default()) {
                return Ok(Err(format!(
                    "its owner `{owner}` is not dead past the grace (its lease is expired, {}); \
                     run again later",
                    why.unwrap_or_else(|| "within the grace".to_owned())
                )));
            }
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
            // As a pass waits: by the budget the owner declared (`resolve`'s records are
            // unreadable: none).
            let (needed, why) = rules.wait_missing(owner, declared_ms, options);
            grace = needed;
            if !past(missing_for, grace, options.skew_margin) {
                return Ok(Err(format!(
                    "its owner `{owner}` has been seen without a lease for less than the grace{}; \
                     run again later",
                    why.map(|w| format!(" ({w})")).unwrap_or_default()
                )));
            }
            ("missing", missing_for, None)
        }
        other => {
            return Ok(Err(format!(
                "its owner `{owner}` is not dead past the grace (its lease is {}): {command} never \
                 takes a live owner's checkpoint; run again once the owner has been dead for the \
                 grace (stop its job if it hangs){}",
                other.name(),
                if command == RESOLVE {
                    ", or restore the record from a backup"
                } else {
                    ""
                }
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
        grace_ms: millis(grace),
        collector: format!("operator {operator} ({command})"),
        collector_host: Some(banklease::id::local_hostname()),
        collector_pid: Some(std::process::id()),
        pass: uuid::Uuid::new_v4().simple().to_string(),
    }))
}
