//! `banklease checkpoint explain ID`: why a checkpoint is in its state, on what evidence it was
//! decided, and what happens next — even when its objects cannot be read.

use std::time::Duration;

use anyhow::Result;
use banklease::checkpoint::{self, CheckpointRecord, Decider, Decision, Evidence, Rebuilt, Status};
use banklease::error::error_chain;
use banklease::paths::Key;
use banklease::{LeaseView, OwnerId};
use object_store::ObjectStoreExt;
use serde::Serialize;

mod removal;

use crate::lease::advice;
use crate::output::to_second;
use crate::{human, out_json, out_line, Ctx, Outcome};

/// What `explain` found and concluded.
#[derive(Debug, Serialize)]
struct Explanation {
    checkpoint_id: String,
    /// `present`, `missing`, or `corrupt: …`.
    index: String,
    status: Option<String>,
    owner_id: Option<String>,
    /// `none`, `corrupt: …`, or who decided.
    decision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    decided: Option<Decision>,
    /// Set when an operator's `checkpoint resolve` rebuilt index.json.
    #[serde(skip_serializing_if = "Option::is_none")]
    index_rebuilt: Option<Rebuilt>,
    /// Who removed (or is removing) it after its owner finished it, when and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    removal: Option<banklease::checkpoint::Removal>,
    /// The protecting marker: present, absent, or unknown (no owner known).
    marker: Option<bool>,
    /// The owner's lease now, on the store's clock.
    owner_now: Option<String>,
    /// What this host can tell of the owner's process (advice only).
    owner_process: Option<String>,
    /// From when the gc may collect the checkpoint, if it is protecting and its owner does not
    /// renew (store clock; advice, the gc judges for itself).
    collectable_from: Option<String>,
    /// Partial uploads still staged for it once collected (`file:` banks), and when each goes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    staged: Vec<String>,
    /// Why it is in this state.
    why: String,
    /// What happens next, or what a human must do.
    next: String,
}

/// `banklease checkpoint explain ID`: exit 0 explained, 1 nothing of it is in the bank.
pub(crate) async fn explain(ctx: &Ctx, id: &str) -> Result<Outcome> {
    let id = &banklease::CheckpointId::parse(id).map_err(banklease::Error::from)?;
    let bank = &ctx.bank;
    let (index, decision) = futures::join!(
        checkpoint::read_checkpoint(bank, id),
        checkpoint::read_decision(bank, id)
    );
    let index_path = Key::Index(id.clone()).path(bank);
    let decision_path = Key::Decision(id.clone()).path(bank);
    let owner: Option<OwnerId> = match (&index, &decision) {
        (Ok(Some(r)), _) => Some(r.owner_id.clone()),
        (_, Ok(Some(d))) => Some(d.owner_id.clone()),
        // Neither record names it: the one owner whose protecting marker does, if one does.
        _ => match banklease_gc::operator::resolve::marker_owners(bank, id).await {
            Ok(owners) if owners.len() == 1 => owners.into_iter().next(),
            _ => None,
        },
    };
    let marker = match &owner {
        Some(o) => match bank.store().head(&Key::marker(o, id).path(bank)).await {
            Ok(_) => Some(true),
            Err(object_store::Error::NotFound { .. }) => Some(false),
            Err(_) => None,
        },
        None => None,
    };
    let (owner_now, read) = match &owner {
        Some(o) => {
            let t = ctx.store_time().await?;
            let (view, read) = ctx.observer().view_read(o, &t).await;
            (Some(view), Some(read))
        }
        None => (None, None),
    };
    let advice = match (&owner, &owner_now, &read) {
        (Some(o), Some(v), Some(r)) => {
            let declared = index
                .as_ref()
                .ok()
                .and_then(|i| i.as_ref()?.retry_budget_ms);
            advice::advise(ctx, o, v, r, declared).await
        }
        _ => None,
    };
    // An owner whose lease is gone may have been reaped; a reap record that cannot be read
    // only leaves that unsaid.
    let reaped = match (&owner, &owner_now) {
        (Some(o), Some(LeaseView::Missing)) => banklease_gc::pass::reaped::read(bank, o)
            .await
            .ok()
            .flatten(),
        _ => None,
    };
    if matches!((&index, &decision), (Ok(None), Ok(None))) {
        let message = format!(
            "checkpoint `{id}` is not in bank=`{}`: no index.json and no decision",
            bank.label()
        );
        if ctx.json {
            out_json(&serde_json::json!({ "checkpoint_id": id, "found": false }))?;
        } else {
            out_line(&message)?;
        }
        return Ok(Outcome::No);
    }
    let retire_next = match &index {
        Ok(Some(r)) => removal::retire_next(ctx, r).await,
        _ => None,
    };
    let (why, next) = conclude(
        ctx,
        id.as_str(),
        &index,
        &decision,
        Seen {
            owner_now: owner_now.as_ref(),
            marker,
            advice: advice.as_ref(),
            retire_next,
        },
    );
    let explanation = Explanation {
        checkpoint_id: id.to_string(),
        index: match &index {
            Ok(Some(_)) => "present".to_owned(),
            Ok(None) => "missing".to_owned(),
            Err(e) => format!("unreadable: {} ({index_path})", unreadable(e)),
        },
        status: index
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|r| r.status.to_string()),
        owner_id: owner.as_ref().map(ToString::to_string),
        decision: match &decision {
            Ok(Some(d)) => format!("{} decided {}", decider(d.by), d.outcome),
            Ok(None) => "none".to_owned(),
            Err(e) => format!("unreadable: {} ({decision_path})", unreadable(e)),
        },
        decided: decision.as_ref().ok().and_then(Option::as_ref).cloned(),
        index_rebuilt: index
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .and_then(|r| r.rebuilt.clone()),
        removal: index
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .and_then(|r| r.removal.clone()),
        marker,
        owner_now: owner_now.as_ref().map(|v| match (v, &reaped) {
            (LeaseView::Missing, Some(r)) => format!(
                "no lease: last reaped by the gc at {} (`banklease lease show {}` says why)",
                to_second(&r.reaped_at.to_rfc3339()),
                r.owner_id
            ),
            _ => lease_now(v, ctx),
        }),
        owner_process: advice.as_ref().and_then(|a| a.process.clone()),
        collectable_from: advice
            .as_ref()
            .and_then(|a| a.collectable_from)
            .map(|t| t.to_rfc3339()),
        staged: crate::gc::staged_for(ctx, id, &decision).await,
        why,
        next,
    };
    if ctx.json {
        out_json(&explanation)?;
    } else {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let mut lines = vec![
            ("checkpoint", explanation.checkpoint_id.clone()),
            ("status", opt(&explanation.status)),
            ("owner", opt(&explanation.owner_id)),
            ("index.json", explanation.index.clone()),
            ("decision", explanation.decision.clone()),
        ];
        if let Some(Decision {
            decided_at,
            evidence: Some(e),
            ..
        }) = &explanation.decided
        {
            lines.push(("decided_at", to_second(&decided_at.to_rfc3339())));
            lines.push(("collector", collector(e)));
        }
        let rebuilt = |what: &str, r: &Rebuilt, lost: &str| {
            format!(
                "{what} rebuilt from its {} by {} at {} ({lost} is unknown; the unreadable \
                 bytes are kept at `{}`)",
                r.from,
                r.operator,
                to_second(&r.at.to_rfc3339()),
                r.kept_at
            )
        };
        if let Some(r) = explanation
            .decided
            .as_ref()
            .and_then(|d| d.rebuilt.as_ref())
        {
            lines.push((
                "rebuilt",
                rebuilt("decision", r, "when it was first decided"),
            ));
        }
        if let Some(r) = &explanation.index_rebuilt {
            lines.push(("rebuilt", rebuilt("index.json", r, "when it was created")));
        }
        if let Some(r) = &explanation.removal {
            lines.push(("removed", removal::removal_line(r)));
        }
        lines.push((
            "marker",
            explanation.marker.map_or("-".to_owned(), |m| {
                if m { "present" } else { "absent" }.to_owned()
            }),
        ));
        lines.push(("owner now", opt(&explanation.owner_now)));
        if let Some(p) = &explanation.owner_process {
            lines.push(("process", p.clone()));
        }
        for staged in &explanation.staged {
            lines.push(("staged", staged.clone()));
        }
        lines.push(("why", explanation.why.clone()));
        lines.push(("next", explanation.next.clone()));
        for (key, value) in lines {
            out_line(&format!("{key:<12} {value}"))?;
        }
    }
    Ok(Outcome::Yes)
}

fn decider(by: Decider) -> &'static str {
    match by {
        Decider::Gc => "the gc",
        Decider::Owner => "its owner",
    }
}

fn lease_now(view: &LeaseView, ctx: &Ctx) -> String {
    let margin = ctx.config.lease.skew_margin;
    match view {
        LeaseView::Alive { remaining, .. } => format!("alive, {} left", human(*remaining)),
        LeaseView::Expired { since, .. } => format!(
            "expired {} ago (margin {} deducted)",
            human(*since),
            human(margin)
        ),
        LeaseView::Missing => "no lease".to_owned(),
        LeaseView::Unreadable { error } => format!("unreadable: {error}"),
    }
}

/// Why a record cannot be read, in words: a corrupt record's reason alone (what to do about it
/// is `next`'s), any other error whole.
fn unreadable(e: &banklease::Error) -> String {
    match e {
        banklease::Error::Corrupt { reason, .. } => reason.clone(),
        other => error_chain(other),
    }
}

/// Whether `e` says a newer release wrote the record (src/checkpoint.rs words it so).
fn newer_format(e: &banklease::Error) -> bool {
    matches!(e, banklease::Error::Corrupt { reason, .. }
        if reason.contains("is newer than this banklease understands"))
}

/// `ID on host `h`, pid 7 (pass P)`: who collected, host and pid beside the id when the
/// decision records them.
pub(crate) fn collector(e: &Evidence) -> String {
    let at = match (&e.collector_host, e.collector_pid) {
        (Some(h), Some(p)) => format!(" on host `{h}`, pid {p}"),
        _ => String::new(),
    };
    format!("{}{at} (pass {})", e.collector, e.pass)
}

/// What a collector judged an owner dead on (a collection's or a reap's evidence), in words.
pub(crate) fn judged_dead(e: &Evidence) -> String {
    let ms = |ms: u64| human(Duration::from_millis(ms));
    let stamp = match (e.lease_stamp, e.expire_window_ms) {
        (Some(s), Some(w)) => format!(
            "its lease, last written at {} with an expire window of {}, had expired",
            to_second(&s.to_rfc3339()),
            ms(w)
        ),
        _ => "its lease was missing".to_owned(),
    };
    format!(
        "{stamp}; judged at {} on the store's clock, the owner had been dead for {} (margin {} \
         in its favour), past the grace of {}",
        to_second(&e.judged_at.to_rfc3339()),
        ms(e.dead_for_ms),
        ms(e.skew_margin_ms),
        ms(e.grace_ms)
    )
}

/// What `conclude` judges by, besides the records.
struct Seen<'a> {
    owner_now: Option<&'a LeaseView>,
    marker: Option<bool>,
    advice: Option<&'a advice::Advice>,
    /// When the gc retires it, for a failed checkpoint.
    retire_next: Option<String>,
}

/// Why the checkpoint is in its state, and what comes next.
fn conclude(
    ctx: &Ctx,
    id: &str,
    index: &banklease::Result<Option<CheckpointRecord>>,
    decision: &banklease::Result<Option<Decision>>,
    seen: Seen<'_>,
) -> (String, String) {
    let Seen {
        owner_now,
        marker,
        advice,
        retire_next,
    } = seen;
    match decision {
        Err(e) => (
            format!("its decision cannot be read: {}", unreadable(e)),
            match index {
                _ if newer_format(e) => "needs a human: a newer banklease wrote this decision; \
                                         upgrade banklease (resolve never replaces it)"
                    .to_owned(),
                Ok(Some(r))
                    if matches!(
                        r.status,
                        Status::Available | Status::Error | Status::Deleted
                    ) =>
                {
                    format!(
                        "needs a human: the gc never acts on a decision it cannot read, every \
                         pass counts an error; index.json records its outcome `{}`, so \
                         `banklease checkpoint resolve {id}` rebuilds the decision from it (the \
                         unreadable bytes are kept under _banklease/set-aside/)",
                        r.status
                    )
                }
                Ok(Some(r)) if r.status != Status::Protecting => format!(
                    "needs a human: the gc never acts on a decision it cannot read, and \
                     index.json says `{}`, which no decision records: restore the decision",
                    r.status
                ),
                _ => format!(
                    "needs a human: the gc never acts on a decision it cannot read, every pass \
                     counts an error, and index.json does not say what it was (it may record \
                     its owner's `available`); restore it from a backup, or if the data is \
                     known to be garbage, `banklease checkpoint resolve {id} --as deleted` \
                     collects it once its owner is dead (the unreadable bytes are kept under \
                     _banklease/set-aside/)"
                ),
            },
        ),
        Ok(Some(d)) => {
            let why = match (&d.by, &d.evidence) {
                (Decider::Gc, Some(e)) if e.collector.starts_with("operator ") => format!(
                    "{} deleted it, as the gc collects: {}",
                    e.collector,
                    judged_dead(e)
                ),
                (Decider::Gc, Some(e)) => format!("the gc collected it: {}", judged_dead(e)),
                (Decider::Gc, None) => "the gc collected it (a release that recorded no \
                                        evidence in its decisions)"
                    .to_owned(),
                (Decider::Owner, _) if d.rebuilt.is_some() => format!(
                    "its owner completed it as {} (when is unknown: its decision was rebuilt)",
                    d.outcome
                ),
                (Decider::Owner, _) => format!(
                    "its owner completed it as {} at {}",
                    d.outcome,
                    to_second(&d.decided_at.to_rfc3339())
                ),
            };
            let finished = match index {
                Ok(Some(r)) => r.status == d.outcome || r.status == Status::Deleted,
                _ => false,
            };
            let next = match index {
                Err(e) if newer_format(e) => {
                    "needs a human: a newer banklease wrote its index.json; upgrade banklease \
                     (resolve never replaces it)"
                        .to_owned()
                }
                Err(e) => format!(
                    "needs a human: its index.json cannot be read ({}), so the decision cannot \
                     be finished and every gc pass counts an error; `banklease checkpoint \
                     resolve {id}` rebuilds it from the decision (the unreadable bytes are kept \
                     under _banklease/set-aside/)",
                    unreadable(e)
                ),
                Ok(Some(r)) if r.removal.is_some() && marker != Some(true) => retire_next
                    .or_else(|| removal::removal_next(r))
                    .unwrap_or_default(),
                _ if finished && marker != Some(true) => {
                    retire_next.unwrap_or_else(|| "nothing: the decision is finished".to_owned())
                }
                _ => "the next gc pass finishes the decision".to_owned(),
            };
            (why, next)
        }
        Ok(None) => match index {
            Err(e) => (
                format!("its index.json cannot be read: {}", unreadable(e)),
                if newer_format(e) {
                    "needs a human: a newer banklease wrote its index.json; upgrade banklease \
                     (resolve never replaces it)"
                        .to_owned()
                } else if matches!(owner_now, Some(LeaseView::Alive { .. })) {
                    "needs a human: its owner is alive, and resolve never takes a live owner's \
                     checkpoint; restore index.json from a backup, or once the owner has been \
                     dead for the grace, `banklease checkpoint resolve` collects it"
                        .to_owned()
                } else {
                    format!(
                        "needs a human: the gc never collects a checkpoint it cannot read; \
                         restore index.json, or run `banklease checkpoint resolve {id}` (it \
                         collects it once its owner is dead, as the gc judges; the unreadable \
                         bytes are kept under _banklease/set-aside/)"
                    )
                },
            ),
            Ok(Some(r)) if r.status == Status::Protecting => match owner_now {
                Some(LeaseView::Alive { .. }) => (
                    match advice.and_then(|a| a.process_gone.as_ref()) {
                        Some(gone) => format!(
                            "protecting: its owner's lease is alive, but {gone}: it will not \
                             complete this checkpoint"
                        ),
                        None => "protecting: its owner is alive and writing it".to_owned(),
                    },
                    match advice.map(|a| (a.process_gone.is_some(), &a.collectable_from_words)) {
                        Some((true, Some(from))) => format!(
                            "nothing can renew its lease any more: the gc may collect it from \
                             {from}"
                        ),
                        Some((false, Some(from))) => format!(
                            "nothing while its owner renews its lease; if it stops, the gc may \
                             collect it from {from}"
                        ),
                        _ => "nothing: its owner completes it".to_owned(),
                    },
                ),
                Some(LeaseView::Unreadable { .. }) => (
                    "protecting: its owner's lease cannot be read".to_owned(),
                    "needs a human: the gc never collects on doubt; look at the owner's lease"
                        .to_owned(),
                ),
                _ => (
                    "protecting, and its owner's lease is gone".to_owned(),
                    match advice.and_then(|a| a.collectable_from_words.as_ref().zip(Some(a))) {
                        Some((from, a)) => match &a.waiting {
                            Some(waiting) => format!(
                                "the gc collects it from {from}, at its first pass since: \
                                 {waiting}"
                            ),
                            None => match a.held_by {
                                Some(floor) => format!(
                                    "held back: a store-clock step was seen at {floor} (the \
                                     bank's clock floor), after its owner's last renewal, so the \
                                     lease is timed from it; the gc collects it from {from}, at \
                                     its first pass since"
                                ),
                                None => format!(
                                    "the gc collects it from {from} (its owner dead for the \
                                     grace of {} past the margin of {}), at its first pass since",
                                    human(ctx.config.gc.grace),
                                    human(ctx.config.lease.skew_margin)
                                ),
                            },
                        },
                        None => format!(
                            "the gc collects it once its owner has been dead for the grace ({}) \
                             past the margin ({}); a missing lease is timed from the first gc \
                             pass that finds it missing, which none has yet",
                            human(ctx.config.gc.grace),
                            human(ctx.config.lease.skew_margin)
                        ),
                    },
                ),
            },
            Ok(Some(r)) => (
                format!(
                    "{} without a decision (written by an older release)",
                    r.status
                ),
                "nothing".to_owned(),
            ),
            // Answered before: nothing of it is in the bank.
            Ok(None) => ("not in the bank".to_owned(), "nothing".to_owned()),
        },
    }
}

/// `banklease checkpoint resolve ID`: exit 0 resolved, 1 refused (the reason on stderr).
pub(crate) async fn resolve(
    ctx: &Ctx,
    id: &str,
    operator: &str,
    assertion: banklease_gc::operator::resolve::Assertion,
) -> Result<Outcome> {
    use banklease_gc::operator::resolve::Resolution;
    let options = banklease_gc::GcOptions::from_config(&ctx.config);
    let id = &banklease::CheckpointId::parse(id).map_err(banklease::Error::from)?;
    let resolution = banklease_gc::operator::resolve::resolve(
        &ctx.bank, &ctx.clock, &options, id, operator, assertion,
    )
    .await?;
    let (line, json) = match &resolution {
        Resolution::Collected { owner, kept } => (
            format!(
                "resolved: checkpoint `{id}` of owner `{owner}` is decided collected and its \
                 index.json is a tombstone; the next gc pass deletes its data{}",
                kept_note(kept)
            ),
            serde_json::json!({
                "checkpoint_id": id, "resolved": "collected", "owner_id": owner.as_str(),
                "kept": kept,
            }),
        ),
        Resolution::DecisionRestored {
            owner,
            by,
            outcome,
            kept,
        } => (
            format!(
                "resolved: checkpoint `{id}`: its decision is rebuilt from index.json \
                 ({outcome}, decided by {by}){}",
                kept_note(std::slice::from_ref(kept))
            ),
            serde_json::json!({
                "checkpoint_id": id, "resolved": "decision_restored", "owner_id": owner.as_str(),
                "by": by.to_string(), "outcome": outcome.as_str(), "kept": [kept],
            }),
        ),
        Resolution::OwnerDecisionFinished {
            owner,
            outcome,
            kept,
        } => (
            format!(
                "resolved: checkpoint `{id}`: its index.json is rebuilt from its owner's decision \
                 ({outcome}){}",
                kept_note(std::slice::from_ref(kept))
            ),
            serde_json::json!({
                "checkpoint_id": id, "resolved": "owner_decision_finished",
                "owner_id": owner.as_str(), "outcome": outcome.as_str(), "kept": [kept],
            }),
        ),
        Resolution::Refused(why) => {
            eprintln!("not resolved: checkpoint `{id}`: {why}");
            if ctx.json {
                out_json(&serde_json::json!({
                    "checkpoint_id": id, "resolved": false, "reason": why,
                }))?;
            }
            return Ok(Outcome::No);
        }
        _ => return Ok(Outcome::No),
    };
    if ctx.json {
        out_json(&json)?;
    } else {
        out_line(&line)?;
    }
    Ok(Outcome::Yes)
}

/// "; the unreadable bytes are kept at `…`" for what a resolve replaced.
fn kept_note(kept: &[String]) -> String {
    if kept.is_empty() {
        return String::new();
    }
    let paths: Vec<String> = kept.iter().map(|k| format!("`{k}`")).collect();
    format!("; the unreadable bytes are kept at {}", paths.join(" and "))
}
