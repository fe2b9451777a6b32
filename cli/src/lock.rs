//! `banklease lock ...`: named leases and locks on any key (library: `banklease::lock`).
//!
//! Locks need a bank that enforces create-if-absent and If-Match atomically (memory, files, S3
//! with conditional writes, Azure); on other banks (Swift) every command fails with exit 2 and
//! says why. Expiry is judged on the store's clock with `[lease] skew_margin`.
//!
//! Exit codes: `acquire` 0 acquired, 1 unavailable; `release` 0 released or already free, 1 held
//! by someone else; `show` 0 held, 1 free, expired or never used; `list` 0, or 1 if some lock
//! could not be read; 2 on any error.

use std::time::Duration;

use anyhow::Result;
use banklease::lock::{Blocking, LockInfo, LockState, Locks, Release, Term, Wait, Waiter};
use banklease::Error;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::{human, ms, out_json, out_line, out_table, Ctx, Outcome};

/// `banklease lock ...`
#[derive(Debug, Subcommand)]
pub(crate) enum LockCommand {
    /// Acquire KEY for OWNER: exit 0 acquired, 1 unavailable (held by someone else, or promised
    /// to an earlier waiter), 2 error. The lock stays held for DURATION after this command exits
    /// (nothing renews it) unless released.
    Acquire {
        /// The lock key.
        key: String,
        /// The owner to acquire for.
        #[arg(long, value_name = "OWNER")]
        owner: String,
        /// How long to hold the lock, e.g. `30s`.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// A small text anyone can read (at most 4 KiB).
        #[arg(long, value_name = "TEXT")]
        payload: Option<String>,
        /// Wait for the lock, first come first served: a duration, `0` (do not wait) or `-1`
        /// (wait forever).
        #[arg(long, value_name = "DURATION", default_value = "0", allow_hyphen_values = true,
              value_parser = parse_wait)]
        block_for: Wait,
        #[command(flatten)]
        ns: Namespace,
    },
    /// Release KEY if OWNER holds it: exit 0 released or already free, 1 held by someone else,
    /// 2 error.
    Release {
        /// The lock key.
        key: String,
        /// The owner that holds it.
        #[arg(long, value_name = "OWNER")]
        owner: String,
        #[command(flatten)]
        ns: Namespace,
    },
    /// Show KEY: holder, time left (store clock), payload, fencing token, waiters. Exit 0 if
    /// held, 1 if free, expired or never used.
    Show {
        /// The lock key.
        key: String,
        #[command(flatten)]
        ns: Namespace,
    },
    /// List every lock of the namespace. Exit 1 if some could not be read (each is named on
    /// stderr).
    List {
        #[command(flatten)]
        ns: Namespace,
    },
}

#[derive(Debug, Args)]
pub(crate) struct Namespace {
    /// The lock namespace.
    #[arg(long, value_name = "NS", default_value = banklease::lock::DEFAULT_NAMESPACE)]
    namespace: String,
}

fn parse_wait(s: &str) -> Result<Wait, String> {
    s.parse()
}

/// Run one `lock` subcommand.
pub(crate) async fn run(ctx: &Ctx, command: LockCommand) -> Result<Outcome> {
    match command {
        LockCommand::Acquire {
            key,
            owner,
            duration,
            payload,
            block_for,
            ns,
        } => {
            acquire(
                ctx,
                &ns,
                &key,
                &owner,
                duration,
                payload.as_deref(),
                block_for,
            )
            .await
        }
        LockCommand::Release { key, owner, ns } => release(ctx, &ns, &key, &owner).await,
        LockCommand::Show { key, ns } => show(ctx, &ns, &key).await,
        LockCommand::List { ns } => list(ctx, &ns).await,
    }
}

fn locks(ctx: &Ctx, ns: &Namespace) -> Result<Locks> {
    Ok(Locks::new(&ctx.bank, &ns.namespace, ctx.clock.clone())?
        .with_skew_margin(ctx.config.lease.skew_margin))
}

#[derive(Debug, Serialize)]
struct AcquireReport<'a> {
    key: &'a str,
    namespace: &'a str,
    owner: &'a str,
    acquired: bool,
    /// The fencing token (null when not acquired).
    token: Option<u64>,
    /// Time left: ours when acquired (from the send time), else the holder's (store clock).
    remaining_ms: u64,
    holder: Option<String>,
    payload: Option<&'a str>,
}

async fn acquire(
    ctx: &Ctx,
    ns: &Namespace,
    key: &str,
    owner: &str,
    duration: Duration,
    payload: Option<&str>,
    block_for: Wait,
) -> Result<Outcome> {
    let locks = locks(ctx, ns)?;
    let lock = locks.lock(key, owner)?;
    let term = Term::For(duration);
    let result = match block_for {
        Wait::No => lock.acquire(term, payload).await,
        wait => {
            lock.acquire_blocking(term, payload, &Blocking::new(wait))
                .await
        }
    };
    let full = locks.full_key(key);
    match result {
        Ok(acquired) => {
            let remaining = lock.remaining();
            if ctx.json {
                out_json(&AcquireReport {
                    key,
                    namespace: locks.namespace(),
                    owner,
                    acquired: true,
                    token: Some(acquired.fence.value),
                    remaining_ms: ms(remaining),
                    holder: Some(owner.to_owned()),
                    payload,
                })?;
            } else {
                out_line(&format!(
                    "acquired: key=`{full}` owner=`{owner}` token={} for {}",
                    acquired.fence.value,
                    human(remaining)
                ))?;
            }
            Ok(Outcome::Yes)
        }
        Err(Error::Unavailable {
            holder, remaining, ..
        }) => {
            if ctx.json {
                out_json(&AcquireReport {
                    key,
                    namespace: locks.namespace(),
                    owner,
                    acquired: false,
                    token: None,
                    remaining_ms: ms(remaining),
                    holder: Some(holder.clone()),
                    payload: None,
                })?;
            } else {
                out_line(&format!(
                    "unavailable: key=`{full}` is held by `{holder}` ({} left)",
                    human(remaining)
                ))?;
            }
            Ok(Outcome::No)
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Serialize)]
struct ReleaseReport<'a> {
    key: &'a str,
    namespace: &'a str,
    owner: &'a str,
    /// `released`, `free` or `held`.
    outcome: &'static str,
    holder: Option<String>,
    remaining_ms: u64,
}

async fn release(ctx: &Ctx, ns: &Namespace, key: &str, owner: &str) -> Result<Outcome> {
    let locks = locks(ctx, ns)?;
    let full = locks.full_key(key);
    let (outcome, holder, remaining, exit) = match locks.release(key, owner).await {
        Ok(Release::Released) => ("released", None, Duration::ZERO, Outcome::Yes),
        Ok(Release::Free) => ("free", None, Duration::ZERO, Outcome::Yes),
        Err(Error::Unavailable {
            holder, remaining, ..
        }) => ("held", Some(holder), remaining, Outcome::No),
        Err(e) => return Err(e.into()),
    };
    if ctx.json {
        out_json(&ReleaseReport {
            key,
            namespace: locks.namespace(),
            owner,
            outcome,
            holder,
            remaining_ms: ms(remaining),
        })?;
    } else {
        let line = match (outcome, holder) {
            ("released", _) => format!("released: key=`{full}` owner=`{owner}`"),
            ("free", _) => format!("free: key=`{full}` was not held; nothing to release"),
            (_, holder) => format!(
                "held: key=`{full}` is held by `{}` ({} left), not by `{owner}`",
                holder.unwrap_or_default(),
                human(remaining)
            ),
        };
        out_line(&line)?;
    }
    Ok(exit)
}

/// A lock as one line of `lock list --json` (keys always present, null when unknown).
#[derive(Debug, Serialize)]
struct LockRow {
    key: String,
    namespace: String,
    state: &'static str,
    /// The holder (the last holder when expired; null when free).
    owner: Option<String>,
    remaining_ms: u64,
    expired_since_ms: Option<u64>,
    payload: Option<String>,
    /// The fencing counter.
    token: u64,
    duration_ms: u64,
    last_modified: String,
}

fn row(ns: &str, info: &LockInfo) -> LockRow {
    let (owner, since) = match &info.state {
        LockState::Free => (None, None),
        LockState::Held { holder, .. } => (Some(holder.clone()), None),
        LockState::Expired { holder, since } => (Some(holder.clone()), Some(ms(*since))),
    };
    LockRow {
        key: info.key.clone(),
        namespace: ns.to_owned(),
        state: info.state.name(),
        owner,
        remaining_ms: ms(info.state.remaining()),
        expired_since_ms: since,
        payload: info.payload.clone(),
        token: info.fence,
        duration_ms: ms(info.duration),
        last_modified: info.last_modified.to_rfc3339(),
    }
}

fn human_state(state: &LockState) -> String {
    match state {
        LockState::Free => "free".to_owned(),
        LockState::Held { remaining, .. } => format!("held, {} left", human(*remaining)),
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

async fn show(ctx: &Ctx, ns: &Namespace, key: &str) -> Result<Outcome> {
    let locks = locks(ctx, ns)?;
    let full = locks.full_key(key);
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
        row: row(locks.namespace(), &info),
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
            ("key", full),
            ("state", human_state(&info.state)),
            ("owner", opt(report.row.owner.clone())),
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

async fn list(ctx: &Ctx, ns: &Namespace) -> Result<Outcome> {
    let locks = locks(ctx, ns)?;
    let snapshot = locks.snapshot().await?;
    let mut rows = Vec::new();
    for info in &snapshot.leases {
        let r = row(locks.namespace(), info);
        if ctx.json {
            out_json(&r)?;
        } else {
            rows.push(vec![
                r.key,
                human_state(&info.state),
                r.owner.unwrap_or_else(|| "-".to_owned()),
                r.token.to_string(),
                r.payload.unwrap_or_else(|| "-".to_owned()),
            ]);
        }
    }
    if !ctx.json {
        out_table(&["KEY", "STATE", "OWNER", "TOKEN", "PAYLOAD"], &rows)?;
    }
    for (key, error) in &snapshot.unreadable {
        eprintln!(
            "warning: lock `{}` is unreadable: {error}",
            locks.full_key(key)
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
