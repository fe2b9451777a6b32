//! `banklease lock show` and `lock list`: a lock as a row, its state in words, its waiters.

use std::time::Duration;

use anyhow::Result;
use banklease::lock::session::split_holder;
use banklease::lock::{LockInfo, LockState, Waiter};
use serde::Serialize;

use super::{locks, Namespace};
use crate::{human, ms, out_json, out_line, out_table, Ctx, Outcome};

/// A lock as one line of `lock list --json` (keys always present, null when unknown).
#[derive(Debug, Serialize)]
struct LockRow {
    key: String,
    namespace: String,
    state: &'static str,
    /// The holder's owner name (the last holder's when expired; null when free).
    owner: Option<String>,
    /// The holder's session, when it acquired in one.
    session: Option<String>,
    /// The whole holder name (`<owner>.<session>`), as `lock release --owner` takes it.
    holder: Option<String>,
    /// The holder's time left on the store's clock, the skew margin deducted in its favour.
    remaining_ms: u64,
    /// When others may take it: after `remaining_ms` and twice the skew margin (null unless
    /// held).
    free_for_others_in_ms: Option<u64>,
    expired_since_ms: Option<u64>,
    payload: Option<String>,
    /// The fencing counter.
    token: u64,
    duration_ms: u64,
    last_modified: String,
}

fn row(ns: &str, info: &LockInfo, margin: Duration) -> LockRow {
    let (holder, since) = match &info.state {
        LockState::Free => (None, None),
        LockState::Held { holder, .. } => (Some(holder.clone()), None),
        LockState::Expired { holder, since } => (Some(holder.clone()), Some(ms(*since))),
    };
    let (owner, session) = match holder.as_deref().map(split_holder) {
        Some((owner, session)) => (Some(owner.to_owned()), session.map(str::to_owned)),
        None => (None, None),
    };
    LockRow {
        key: info.key.clone(),
        namespace: ns.to_owned(),
        state: info.state.name(),
        owner,
        session,
        holder,
        remaining_ms: ms(info.state.remaining()),
        free_for_others_in_ms: free_for_others_in(&info.state, margin, info.duration).map(ms),
        expired_since_ms: since,
        payload: info.payload.clone(),
        token: info.fence,
        duration_ms: ms(info.duration),
        last_modified: info.last_modified.to_rfc3339(),
    }
}

/// A held lock is judged with the skew margin in its holder's favour on both sides: its holder
/// counts `remaining` (the margin deducted), others may take it only a margin after its end and
/// the drift of its length (`judge_expiry`).
fn free_for_others_in(state: &LockState, margin: Duration, length: Duration) -> Option<Duration> {
    match state {
        LockState::Held { remaining, .. } => {
            Some(*remaining + 2 * margin + banklease::clock::drift::clock_drift_over(length))
        }
        _ => None,
    }
}

fn human_state(state: &LockState, margin: Duration, length: Duration) -> String {
    match state {
        LockState::Free => "free".to_owned(),
        LockState::Held { remaining, .. } => format!(
            "held, {} left (free for others in {})",
            human(*remaining),
            human(free_for_others_in(state, margin, length).unwrap_or_default())
        ),
        LockState::Expired { since, .. } => format!("expired {} ago", human(*since)),
    }
}

#[derive(Debug, Serialize)]
struct WaiterRow {
    ticket: String,
    owner: String,
    live: bool,
    remaining_ms: u64,
}

#[derive(Debug, Serialize)]
struct ShowReport {
    #[serde(flatten)]
    row: LockRow,
    waiters: Vec<WaiterRow>,
}

pub(super) async fn show(ctx: &Ctx, ns: &Namespace, key: &str) -> Result<Outcome> {
    let locks = locks(ctx, ns)?;
    let full = locks.full_key(key)?;
    let Some(info) = locks.inspect(key).await? else {
        if ctx.json {
            out_json(&serde_json::json!({
                "key": key, "namespace": locks.namespace(), "state": "missing", "owner": null,
                "remaining_ms": 0, "payload": null,
            }))?;
        } else {
            out_line(&format!("missing: key=`{full}` was never used"))?;
        }
        return Ok(Outcome::No);
    };
    let waiters: Vec<Waiter> = locks.waiters(key).await?;
    let report = ShowReport {
        row: row(locks.namespace(), &info, locks.skew_margin()),
        waiters: waiters
            .iter()
            .map(|w| WaiterRow {
                ticket: w.ticket.clone(),
                owner: w.owner.clone(),
                live: w.live,
                remaining_ms: ms(w.remaining),
            })
            .collect(),
    };
    if ctx.json {
        out_json(&report)?;
    } else {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
        let queue = if waiters.is_empty() {
            "-".to_owned()
        } else {
            waiters
                .iter()
                .map(|w| {
                    let state = if w.live { "" } else { " (expired)" };
                    format!("{}{state}", w.owner)
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let lines = [
            ("key", full.to_string()),
            (
                "state",
                human_state(&info.state, locks.skew_margin(), info.duration),
            ),
            ("owner", opt(report.row.owner.clone())),
            ("session", opt(report.row.session.clone())),
            ("payload", opt(info.payload.clone())),
            ("token", info.fence.to_string()),
            ("duration", human(info.duration)),
            ("last_modified", report.row.last_modified.clone()),
            ("waiters", queue),
        ];
        for (k, v) in lines {
            out_line(&format!("{k:<14} {v}"))?;
        }
    }
    Ok(if matches!(info.state, LockState::Held { .. }) {
        Outcome::Yes
    } else {
        Outcome::No
    })
}

/// `all`: free locks too. A lock object is never deleted (it keeps the fencing counter), so
/// without this the list would grow with every key ever used.
pub(super) async fn list(ctx: &Ctx, ns: &Namespace, all: bool) -> Result<Outcome> {
    let locks = locks(ctx, ns)?;
    let snapshot = locks.snapshot().await?;
    let mut rows = Vec::new();
    let shown = snapshot
        .leases
        .iter()
        .filter(|info| all || !matches!(info.state, LockState::Free));
    for info in shown {
        let r = row(locks.namespace(), info, locks.skew_margin());
        if ctx.json {
            out_json(&r)?;
        } else {
            rows.push(vec![
                r.key,
                human_state(&info.state, locks.skew_margin(), info.duration),
                r.holder.unwrap_or_else(|| "-".to_owned()),
                r.token.to_string(),
                r.payload.unwrap_or_else(|| "-".to_owned()),
            ]);
        }
    }
    if !ctx.json {
        out_table(&["KEY", "STATE", "HOLDER", "TOKEN", "PAYLOAD"], &rows)?;
    }
    for (key, error) in &snapshot.unreadable {
        eprintln!(
            "warning: lock `{}` is unreadable: {error}",
            locks.full_key(key)?
        );
    }
    if !snapshot.unreadable.is_empty() {
        eprintln!(
            "warning: {} lock object(s) could not be read; see above",
            snapshot.unreadable.len()
        );
        return Ok(Outcome::No);
    }
    Ok(Outcome::Yes)
}
