//! `banklease checkpoint list` and `checkpoint show`: checkpoints with their effective status.

pub(crate) mod delete;

use anyhow::{anyhow, Context, Result};
use banklease::checkpoint::{self, CheckpointRecord, Decider, Decision, Status};
use banklease::paths::{Key, Prefix};
use banklease::{Bank, OwnerId};
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;

use crate::output::{short_ids, to_second};
use crate::{out_json, out_line, out_table, Ctx, Outcome, LIST_CONCURRENCY};

/// A checkpoint as one line of `checkpoint list --json`; keys always present.
#[derive(Debug, Serialize)]
pub(crate) struct CheckpointRow {
    id: String,
    owner_id: Option<String>,
    /// A [`Status`], or `missing` when nothing at all is known of the id.
    status: String,
    created_at: Option<String>,
    /// `owner` or `gc`, once the checkpoint left `protecting`.
    decided_by: Option<String>,
    /// What the decision said: `available`, `error` (owner) or `deleted` (gc).
    outcome: Option<String>,
    decided_at: Option<String>,
    /// Who removed (or is removing) a checkpoint after its owner decided it: `gc` (the
    /// retention of failed checkpoints) or ``operator `name` `` (`checkpoint delete`).
    removed_by: Option<String>,
}

/// `checkpoint show --json`: the row plus what is in the bank for it.
#[derive(Debug, Serialize)]
pub(crate) struct CheckpointDetail {
    #[serde(flatten)]
    row: CheckpointRow,
    /// Whether `checkpoints/<id>/index.json` exists.
    index: bool,
    /// Whether the owner's protecting marker exists (the GC finds checkpoints through it).
    protecting_marker: Option<bool>,
    /// Objects under `checkpoints/<id>/`, index included.
    objects: u64,
    bytes: u64,
}

/// The status a reader should believe, from `index.json`, the decision, and whether any object
/// is left under `checkpoints/<id>/`.
///
/// The decision is the single source of truth once taken (see [`banklease::checkpoint`]): a
/// protecting index with a GC decision is being deleted; one with an owner decision is complete
/// and waiting for its index to be rewritten. `None` when nothing consistent can be said.
pub(crate) fn effective_status(
    index: Option<&CheckpointRecord>,
    decision: Option<&Decision>,
    objects_left: bool,
) -> Option<Status> {
    match (index, decision) {
        (Some(i), Some(d)) if i.status == Status::Protecting => Some(match d.by {
            Decider::Gc => Status::Deleting,
            Decider::Owner => d.outcome,
        }),
        (Some(i), _) => Some(i.status),
        (None, Some(d)) if d.by == Decider::Gc => Some(if objects_left {
            Status::Deleting
        } else {
            Status::Deleted
        }),
        // An owner decision without index.json, or objects without either: not a state any
        // writer leaves behind.
        (None, _) => None,
    }
}

pub(crate) fn checkpoint_row(
    id: &str,
    index: Option<&CheckpointRecord>,
    decision: Option<&Decision>,
    status: &str,
) -> CheckpointRow {
    CheckpointRow {
        id: id.to_owned(),
        owner_id: index
            .map(|i| i.owner_id.to_string())
            .or_else(|| decision.map(|d| d.owner_id.to_string())),
        status: status.to_owned(),
        created_at: index.map(|i| i.created_at.to_rfc3339()),
        decided_by: decision.map(|d| d.by.to_string()),
        outcome: decision.map(|d| d.outcome.to_string()),
        decided_at: decision.map(|d| d.decided_at.to_rfc3339()),
        removed_by: index
            .and_then(|i| i.removal.as_ref())
            .map(|r| match r.by.as_str() {
                "gc" => "gc".to_owned(),
                by => format!("{by} `{}`", r.name),
            }),
    }
}

/// Read index.json and the decision of `id` together.
pub(crate) async fn read_checkpoint_state(
    bank: &Bank,
    id: &banklease::CheckpointId,
) -> Result<(Option<CheckpointRecord>, Option<Decision>)> {
    let (index, decision) = futures::join!(
        checkpoint::read_checkpoint(bank, id),
        checkpoint::read_decision(bank, id)
    );
    Ok((index?, decision?))
}

/// A checkpoint found by listing `checkpoints/`.
pub(crate) struct ListedCheckpoint {
    index: Option<CheckpointRecord>,
    decision: Option<Decision>,
}

/// Read a listed checkpoint: `None` when no object is left under `checkpoints/<id>/`.
///
/// A local filesystem lists the empty directories a collected checkpoint leaves behind, so
/// without `index.json` the listing is not taken as proof that objects remain: one more listing
/// of that checkpoint says (rare: only checkpoints being or having been deleted).
pub(crate) async fn read_listed_checkpoint(
    bank: &Bank,
    id: &banklease::CheckpointId,
) -> Result<Option<ListedCheckpoint>> {
    let (index, decision) = read_checkpoint_state(bank, id).await?;
    if index.is_none() {
        let dir = Prefix::Checkpoint(id).path(bank);
        let first = bank.store().list(Some(&dir)).next().await.transpose();
        if first
            .with_context(|| format!("cannot list `{dir}`"))?
            .is_none()
        {
            return Ok(None);
        }
    }
    Ok(Some(ListedCheckpoint { index, decision }))
}

/// `banklease checkpoint list`
pub(crate) async fn checkpoint_list(
    ctx: &Ctx,
    status: Option<Status>,
    owner: Option<&str>,
) -> Result<Outcome> {
    let owner = owner.map(OwnerId::parse).transpose()?;
    let prefix = Prefix::Checkpoints.path(&ctx.bank);
    // One common prefix per checkpoint: `checkpoints/<id>/`.
    let listing = ctx
        .bank
        .store()
        .list_with_delimiter(Some(&prefix))
        .await
        .with_context(|| format!("cannot list `{prefix}` in bank=`{}`", ctx.bank.label()))?;
    let mut ids: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    ids.sort();

    let mut unreadable = 0u64;
    let bank = &ctx.bank;
    let entries: Vec<(String, Result<Option<ListedCheckpoint>>)> = futures::stream::iter(ids)
        .map(|id| async move {
            let state = match banklease::CheckpointId::parse(&id) {
                Ok(cid) => read_listed_checkpoint(bank, &cid).await,
                Err(e) => Err(banklease::Error::from(e).into()),
            };
            (id, state)
        })
        .buffered(LIST_CONCURRENCY)
        .collect()
        .await;

    let mut rows = Vec::new();
    for (id, state) in entries {
        let (index, decision) = match state {
            Ok(Some(listed)) => (listed.index, listed.decision),
            // Nothing left under checkpoints/<id>/: gone (only the filesystem lists it).
            Ok(None) => continue,
            Err(e) => {
                unreadable += 1;
                eprintln!(
                    "warning: checkpoint `{id}` is unreadable: {}",
                    banklease_gc_daemon::logging::error_line(&e)
                );
                continue;
            }
        };
        let Some(st) = effective_status(index.as_ref(), decision.as_ref(), true) else {
            unreadable += 1;
            eprintln!(
                "warning: checkpoint `{id}` has objects but no index.json{}; inspect it with \
                 `banklease checkpoint show {id}`",
                match &decision {
                    Some(d) => format!(" (decided by {} as {})", d.by, d.outcome),
                    None => " and no decision".to_owned(),
                }
            );
            continue;
        };
        let row = checkpoint_row(&id, index.as_ref(), decision.as_ref(), st.as_str());
        if status.is_some_and(|s| s != st) {
            continue;
        }
        if let Some(o) = &owner {
            if row.owner_id.as_deref() != Some(o.as_str()) {
                continue;
            }
        }
        if ctx.json {
            out_json(&row)?;
        } else {
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
            rows.push(vec![
                row.id,
                row.status,
                opt(row.owner_id),
                opt(row.created_at),
                opt(row.decided_by),
                opt(row.removed_by),
            ]);
        }
    }
    if !ctx.json {
        let owners: Vec<String> = rows.iter().map(|r| r[2].clone()).collect();
        for (row, owner) in rows.iter_mut().zip(short_ids(&owners)) {
            row[2] = owner;
            row[3] = to_second(&row[3]);
        }
        out_table(
            &[
                "ID",
                "STATUS",
                "OWNER",
                "CREATED_AT",
                "DECIDED_BY",
                "REMOVED_BY",
            ],
            &rows,
        )?;
    }
    if unreadable > 0 {
        eprintln!("warning: {unreadable} checkpoint(s) could not be read; see above");
        return Ok(Outcome::No);
    }
    Ok(Outcome::Yes)
}

/// `banklease checkpoint show ID`
pub(crate) async fn checkpoint_show(ctx: &Ctx, id: &str) -> Result<Outcome> {
    let id = &banklease::CheckpointId::parse(id).map_err(banklease::Error::from)?;
    let bank = &ctx.bank;
    let (index, decision) = read_checkpoint_state(bank, id)
        .await
        .with_context(|| format!("cannot read checkpoint `{id}`"))?;
    let dir = Prefix::Checkpoint(id).path(bank);
    let objects: Vec<ObjectMeta> = bank
        .store()
        .list(Some(&dir))
        .try_collect()
        .await
        .with_context(|| format!("cannot list `{dir}`"))?;
    let owner = index
        .as_ref()
        .map(|i| i.owner_id.clone())
        .or_else(|| decision.as_ref().map(|d| d.owner_id.clone()));
    let protecting_marker = match &owner {
        Some(o) => {
            let marker = Key::marker(o, id).path(bank);
            match bank.store().head(&marker).await {
                Ok(_) => Some(true),
                Err(object_store::Error::NotFound { .. }) => Some(false),
                Err(e) => {
                    return Err(anyhow!(e)).with_context(|| format!("cannot read `{marker}`"))
                }
            }
        }
        None => None,
    };
    let status = effective_status(index.as_ref(), decision.as_ref(), !objects.is_empty())
        .map_or("missing", |s| s.as_str());
    let detail = CheckpointDetail {
        row: checkpoint_row(id.as_str(), index.as_ref(), decision.as_ref(), status),
        index: index.is_some(),
        protecting_marker,
        objects: objects.len() as u64,
        bytes: objects.iter().map(|o| o.size).sum(),
    };
    if ctx.json {
        out_json(&detail)?;
    } else {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
        let lines = [
            ("id", detail.row.id.clone()),
            ("status", detail.row.status.clone()),
            ("owner_id", opt(&detail.row.owner_id)),
            ("created_at", opt(&detail.row.created_at)),
            ("decided_by", opt(&detail.row.decided_by)),
            ("outcome", opt(&detail.row.outcome)),
            ("decided_at", opt(&detail.row.decided_at)),
            ("removed_by", opt(&detail.row.removed_by)),
            ("index.json", yes_no(detail.index)),
            (
                "marker",
                detail.protecting_marker.map_or("-".to_owned(), yes_no),
            ),
            (
                "objects",
                format!("{} ({} bytes)", detail.objects, detail.bytes),
            ),
        ];
        for (key, value) in lines {
            out_line(&format!("{key:<12} {value}"))?;
        }
    }
    Ok(if detail.index {
        Outcome::Yes
    } else {
        Outcome::No
    })
}
