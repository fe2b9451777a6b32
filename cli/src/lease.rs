//! `banklease lease list` and `lease show`: owner leases judged on the store's clock.

pub(crate) mod advice;

use std::time::Duration;

use anyhow::{Context, Result};
use banklease::clock::StoreTime;
use banklease::error::error_chain;
use banklease::lease::read_lease;
use banklease::observe::judge;
use banklease::paths::{Key, Prefix};
use banklease::{LeaseView, OwnerId};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;

use crate::output::{short_ids, to_second};
use crate::{human, ms, out_json, out_line, out_table, Ctx, Outcome, LIST_CONCURRENCY};

/// One lease as read and judged: the view, and the object's metadata when it was read.
pub(crate) struct JudgedLease {
    owner_id: String,
    view: LeaseView,
    meta: Option<ObjectMeta>,
    /// The store's time the lease was judged at.
    judged_at: DateTime<Utc>,
}

/// Read `owner`'s lease and judge it against `t`, like [`LeaseObserver::view`] but keeping the
/// object's metadata for display.
pub(crate) async fn judge_lease(ctx: &Ctx, owner: &OwnerId, t: &StoreTime) -> JudgedLease {
    // Judged at the instant before the read was sent (see `StoreTime::at_send`).
    let sent = ctx.clock.now();
    let store_now = t.at_send(sent, ctx.config.gc.read_staleness);
    let (view, meta) = match read_lease(&ctx.bank, owner).await {
        Ok(None) => (LeaseView::Missing, None),
        Ok(Some((record, meta))) => {
            let view = judge(
                record,
                meta.last_modified,
                store_now,
                ctx.config.lease.skew_margin,
            );
            (view, Some(meta))
        }
        Err(e) => (
            LeaseView::Unreadable {
                error: error_chain(&e),
            },
            None,
        ),
    };
    JudgedLease {
        owner_id: owner.to_string(),
        view,
        meta,
        judged_at: store_now,
    }
}

/// A lease as one line of `lease list --json`. Keys are always present (null when unknown) so
/// that consumers need not probe for them.
#[derive(Debug, Serialize)]
pub(crate) struct LeaseRow {
    owner_id: String,
    state: &'static str,
    remaining_ms: u64,
    expired_since_ms: Option<u64>,
    host: Option<String>,
    pid: Option<u32>,
    generation: Option<u64>,
    expire_window_ms: Option<u64>,
    error: Option<String>,
}

/// `lease show --json`: the row plus the whole record.
#[derive(Debug, Serialize)]
pub(crate) struct LeaseDetail {
    #[serde(flatten)]
    row: LeaseRow,
    path: String,
    renew_window_ms: Option<u64>,
    validity_window_ms: Option<u64>,
    /// The retry budget the owner's store client declared (`null`: none declared; the gc then
    /// judges it by the store's longest default, `judged_budget_ms`).
    retry_budget_ms: Option<u64>,
    /// The budget the gc judges this owner by.
    judged_budget_ms: Option<u64>,
    /// The grace the gc gives this owner: `gc.grace`, or longer where its own rules need it.
    grace_ms: Option<u64>,
    acquired_at: Option<String>,
    renewed_at: Option<String>,
    /// Stamped by the store; expiry is judged from this, not from the owner's clock.
    last_modified: Option<String>,
    format: Option<u32>,
    /// What this host can tell of the owner's process (advice only).
    process: Option<String>,
    /// Until when the lease counts (store clock): its expiry, the owner's drift and the margin.
    counts_until: Option<String>,
    /// From when the gc may collect the owner's protecting checkpoints if the lease is not
    /// renewed: `counts_until` plus the grace (store clock).
    collectable_from: Option<String>,
    /// The bank's clock floor, when it is later than the lease's stamp: a store-clock step was
    /// seen after the last renewal, and the gc times the lease from the floor (`counts_until`
    /// and `collectable_from` are from it).
    held_back_by: Option<String>,
}

impl JudgedLease {
    fn row(&self) -> LeaseRow {
        let (remaining, since, record, error) = match &self.view {
            LeaseView::Alive { remaining, record } => (*remaining, None, Some(record), None),
            LeaseView::Expired { since, record } => {
                (Duration::ZERO, Some(*since), Some(record), None)
            }
            LeaseView::Missing => (Duration::ZERO, None, None, None),
            LeaseView::Unreadable { error } => (Duration::ZERO, None, None, Some(error.clone())),
        };
        LeaseRow {
            owner_id: self.owner_id.clone(),
            state: self.view.name(),
            remaining_ms: ms(remaining),
            expired_since_ms: since.map(ms),
            host: record.map(|r| r.host.clone()),
            pid: record.map(|r| r.pid),
            generation: record.map(|r| r.generation),
            expire_window_ms: record.map(|r| r.expire_window_ms),
            error,
        }
    }

    fn detail(&self, ctx: &Ctx, floor: Option<DateTime<Utc>>) -> LeaseDetail {
        let advice = self.advice(ctx, floor);
        let record = match &self.view {
            LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } => Some(record),
            _ => None,
        };
        LeaseDetail {
            row: self.row(),
            path: self.meta.as_ref().map_or_else(
                || {
                    OwnerId::parse(&self.owner_id)
                        .map(|o| ctx.bank.lease_path(&o).to_string())
                        .unwrap_or_default()
                },
                |m| m.location.to_string(),
            ),
            renew_window_ms: record.map(|r| r.renew_window_ms),
            validity_window_ms: record.map(|r| r.validity_window_ms),
            retry_budget_ms: record.and_then(|r| r.retry_budget_ms),
            judged_budget_ms: record.map(|r| {
                ms(banklease_gc::pass::declared::OwnerRules::of(&ctx.bank)
                    .budget(r.retry_budget_ms)
                    .budget)
            }),
            grace_ms: record.map(|r| ms(self.grace(ctx, r).0)),
            acquired_at: record.map(|r| r.acquired_at.to_rfc3339()),
            renewed_at: record.map(|r| r.renewed_at.to_rfc3339()),
            last_modified: self.meta.as_ref().map(|m| m.last_modified.to_rfc3339()),
            format: record.map(|r| r.format),
            counts_until: advice.as_ref().map(|a| a.counts_until.to_rfc3339()),
            collectable_from: advice.as_ref().map(|a| a.collectable_from.to_rfc3339()),
            held_back_by: advice
                .as_ref()
                .and_then(|a| a.held_by.map(|f| f.to_rfc3339())),
            process: advice.map(|a| a.process),
        }
    }

    /// Until when the lease counts, from when its owner's checkpoints may be collected, and
    /// its process as this host sees it: for a lease that was read. As the gc judges it: a
    /// clock `floor` later than the lease's stamp times the lease from the floor.
    fn advice(&self, ctx: &Ctx, floor: Option<DateTime<Utc>>) -> Option<Advice> {
        let record = match &self.view {
            LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } => record,
            _ => return None,
        };
        let meta = self.meta.as_ref()?;
        let held_by = floor.filter(|f| *f > meta.last_modified);
        let counts_until = advice::counts_until(
            record,
            held_by.unwrap_or(meta.last_modified),
            ctx.config.lease.skew_margin,
        );
        Some(Advice {
            process: advice::process(record, counts_until, self.judged_at),
            counts_until,
            collectable_from: banklease::clock::add_saturating(
                counts_until,
                self.grace(ctx, record).0,
            ),
            held_by,
        })
    }

    /// The grace the gc gives this owner, and why when it is longer than `gc.grace`: what the
    /// owner declared may need longer on this store.
    fn grace(&self, ctx: &Ctx, record: &banklease::LeaseRecord) -> (Duration, Option<String>) {
        let options = banklease_gc::GcOptions::from_config(&ctx.config);
        banklease_gc::pass::declared::OwnerRules::of(&ctx.bank).grace_for(record, &options)
    }

    /// "alive, 1s 200ms left" and the like.
    fn human_state(&self) -> String {
        match &self.view {
            LeaseView::Alive { remaining, .. } => format!("alive, {} left", human(*remaining)),
            LeaseView::Expired { since, .. } => format!("expired {} ago", human(*since)),
            LeaseView::Missing => "missing".to_owned(),
            LeaseView::Unreadable { .. } => "unreadable".to_owned(),
        }
    }
}

/// The owner `given` names: itself when it has a lease, else the one owner with a lease whose
/// id starts with it (as `lease list` shows ids), else the one owner with a reap record whose id
/// starts with it, else itself (its lease is missing). Two or more are refused, naming them.
/// For `lease show` and `validity-check`, which judges the owner found, by its full id.
pub(crate) async fn resolve_prefix(ctx: &Ctx, given: OwnerId) -> Result<OwnerId> {
    let bank = &ctx.bank;
    let path = bank.lease_path(&given);
    match bank.store().head(&path).await {
        Ok(_) => return Ok(given),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(banklease::Error::store("head", &path, e).into()),
    }
    for listed in [Listed::Leases, Listed::Reaped] {
        let mut matches = owners_starting_with(ctx, listed, &given).await?;
        match matches.len() {
            0 => continue,
            1 => return Ok(matches.remove(0)),
            n => {
                let names: Vec<&str> = matches.iter().map(OwnerId::as_str).collect();
                anyhow::bail!(
                    "owner id prefix `{given}` is ambiguous: {n} {} start with it ({}); give \
                     more of the id",
                    listed.what(),
                    names.join(", ")
                )
            }
        }
    }
    Ok(given)
}

/// Where owner ids are listed from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listed {
    /// `leases/`
    Leases,
    /// `gc/reaped/`
    Reaped,
}

impl Listed {
    fn what(self) -> &'static str {
        match self {
            Listed::Leases => "leases",
            Listed::Reaped => "reap records",
        }
    }
}

/// The owners listed under `listed` whose id starts with `given` and is longer.
pub(crate) async fn owners_starting_with(
    ctx: &Ctx,
    listed: Listed,
    given: &OwnerId,
) -> Result<Vec<OwnerId>> {
    let bank = &ctx.bank;
    let prefix = match listed {
        Listed::Leases => Prefix::Leases.path(bank),
        Listed::Reaped => Prefix::GcReaped.path(bank),
    };
    let metas: Vec<ObjectMeta> = bank
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .with_context(|| format!("cannot list `{prefix}` in bank=`{}`", bank.label()))?;
    Ok(metas
        .iter()
        .filter_map(|meta| match (listed, Key::parse(bank, &meta.location)) {
            (Listed::Leases, Some(Key::Lease(owner)))
            | (Listed::Reaped, Some(Key::GcReaped(owner)))
                if owner.as_str().starts_with(given.as_str()) && owner != *given =>
            {
                Some(owner)
            }
            _ => None,
        })
        .collect())
}

/// What [`JudgedLease::advice`] tells.
struct Advice {
    process: String,
    counts_until: DateTime<Utc>,
    collectable_from: DateTime<Utc>,
    /// The floor the lease is timed from, when it is later than the lease's stamp.
    held_by: Option<DateTime<Utc>>,
}

/// `banklease lease list`
pub(crate) async fn lease_list(ctx: &Ctx) -> Result<Outcome> {
    let prefix = Prefix::Leases.path(&ctx.bank);
    let mut listed: Vec<ObjectMeta> = ctx
        .bank
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .with_context(|| format!("cannot list `{prefix}` in bank=`{}`", ctx.bank.label()))?;
    listed.sort_by(|a, b| a.location.cmp(&b.location));

    let mut unreadable = 0u64;
    let mut owners = Vec::new();
    for meta in &listed {
        // Only `leases/<owner_id>`: anything else is not a lease this version wrote.
        match Key::parse(&ctx.bank, &meta.location) {
            Some(Key::Lease(owner)) => owners.push(owner),
            _ => {
                unreadable += 1;
                eprintln!(
                    "warning: skipping `{}`: not of the form leases/<owner_id> with a valid id",
                    meta.location
                );
            }
        }
    }

    let t = ctx.store_time().await?;
    let leases: Vec<JudgedLease> = futures::stream::iter(&owners)
        .map(|owner| judge_lease(ctx, owner, &t))
        .buffered(LIST_CONCURRENCY)
        .collect()
        .await;

    let mut rows = Vec::new();
    for lease in &leases {
        match &lease.view {
            // Released or deleted between the listing and the read: no longer there.
            LeaseView::Missing => continue,
            LeaseView::Unreadable { error } => {
                unreadable += 1;
                eprintln!(
                    "warning: lease of owner_id=`{}` is unreadable: {error}",
                    lease.owner_id
                );
            }
            _ => {}
        }
        if ctx.json {
            out_json(&lease.row())?;
        } else {
            let row = lease.row();
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
            rows.push(vec![
                row.owner_id,
                lease.human_state(),
                opt(row.host),
                opt(row.pid.map(|p| p.to_string())),
                opt(row.generation.map(|g| g.to_string())),
                opt(row
                    .expire_window_ms
                    .map(|w| human(Duration::from_millis(w)))),
            ]);
        }
    }
    if !ctx.json {
        let owners: Vec<String> = rows.iter().map(|r| r[0].clone()).collect();
        for (row, owner) in rows.iter_mut().zip(short_ids(&owners)) {
            row[0] = owner;
        }
        out_table(
            &[
                "OWNER",
                "STATE",
                "HOST",
                "PID",
                "GENERATION",
                "EXPIRE_WINDOW",
            ],
            &rows,
        )?;
    }
    if unreadable > 0 {
        eprintln!("warning: {unreadable} lease object(s) could not be read; see above");
        return Ok(Outcome::No);
    }
    Ok(Outcome::Yes)
}

/// `banklease lease show ID`
pub(crate) async fn lease_show(ctx: &Ctx, owner: &str) -> Result<Outcome> {
    let owner = resolve_prefix(ctx, OwnerId::parse(owner)?).await?;
    let t = ctx.store_time().await?;
    let lease = judge_lease(ctx, &owner, &t).await;
    // What the gc judges by: the bank's clock floor (said without it, and warned, when it
    // cannot be read).
    let floor = match banklease_gc::time::timing::read_floor(&ctx.bank).await {
        Ok(floor) => floor,
        Err(e) => {
            eprintln!(
                "warning: cannot read the bank's clock floor `gc/clock-floor`: {}; the times \
                 below do not count a store-clock step it may hold",
                error_chain(&e)
            );
            None
        }
    };
    let detail = lease.detail(ctx, floor);
    // A lease that is gone may have been reaped: the collector's reason is kept beside it.
    // A record that cannot be read only leaves the reason unsaid: the lease is still missing.
    let reaped = match lease.view {
        LeaseView::Missing => match banklease_gc::pass::reaped::read(&ctx.bank, &owner).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "warning: cannot read the reap record of owner_id=`{owner}`: {}",
                    error_chain(&e)
                );
                None
            }
        },
        _ => None,
    };
    if ctx.json {
        let mut json = serde_json::to_value(&detail)?;
        json["reaped"] = serde_json::to_value(&reaped)?;
        out_json(&json)?;
    } else {
        let mut lines = vec![
            ("owner_id", detail.row.owner_id.clone()),
            ("state", lease.human_state()),
            ("path", detail.path.clone()),
        ];
        let mut push = |key: &'static str, value: Option<String>| {
            if let Some(v) = value {
                lines.push((key, v));
            }
        };
        push("host", detail.row.host.clone());
        push("pid", detail.row.pid.map(|p| p.to_string()));
        if let Some(a) = lease.advice(ctx, floor) {
            push("process", Some(a.process));
            push(
                "held_back",
                a.held_by.map(|f| {
                    format!(
                        "a store-clock step was seen at {f}, after its last renewal: the gc \
                         times the lease from then, not from its stamp"
                    )
                }),
            );
            let from = advice::instant(a.collectable_from, lease.judged_at);
            push(
                "collectable",
                Some({
                    let longer = match &lease.view {
                        LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } => {
                            lease.grace(ctx, record)
                        }
                        _ => (ctx.config.gc.grace, None),
                    };
                    let why = longer.1.map(|w| format!("; {w}")).unwrap_or_default();
                    match lease.view {
                        LeaseView::Alive { .. } => format!(
                            "its protecting checkpoints, from {from} unless it is renewed (the \
                             grace of {} after the lease stops counting{why})",
                            human(longer.0)
                        ),
                        _ => format!("its protecting checkpoints, from {from}{why}"),
                    }
                }),
            );
        }
        push("generation", detail.row.generation.map(|g| g.to_string()));
        let window = |w: Option<u64>| w.map(|w| human(Duration::from_millis(w)));
        push("renew_window", window(detail.renew_window_ms));
        push("expire_window", window(detail.row.expire_window_ms));
        push("validity_window", window(detail.validity_window_ms));
        push(
            "retry_budget",
            detail.judged_budget_ms.map(|b| {
                let b = human(Duration::from_millis(b));
                match detail.retry_budget_ms {
                    Some(_) => format!("{b} (declared by its store client)"),
                    None => format!(
                        "not declared (a release before declarations): judged as {b}, the \
                         store's longest default"
                    ),
                }
            }),
        );
        push("acquired_at", detail.acquired_at.clone());
        push("renewed_at", detail.renewed_at.clone());
        push("last_modified", detail.last_modified.clone());
        push("error", detail.row.error.clone());
        if let Some(r) = &reaped {
            lines.push((
                "reaped",
                format!(
                    "last by the gc at {}: {}",
                    to_second(&r.reaped_at.to_rfc3339()),
                    crate::explain::judged_dead(&r.evidence)
                ),
            ));
            lines.push(("reaped_by", crate::explain::collector(&r.evidence)));
            if let Some(l) = &r.lease {
                lines.push((
                    "reaped_lease",
                    format!(
                        "host {}, pid {}, generation {}, acquired at {}",
                        l.host,
                        l.pid,
                        l.generation,
                        to_second(&l.acquired_at.to_rfc3339())
                    ),
                ));
            }
        }
        for (key, value) in lines {
            out_line(&format!("{key:<16} {value}"))?;
        }
    }
    Ok(match lease.view {
        LeaseView::Alive { .. } | LeaseView::Expired { .. } => Outcome::Yes,
        LeaseView::Missing => Outcome::No,
        LeaseView::Unreadable { error } => {
            eprintln!("error: cannot read the lease of owner_id=`{owner}`: {error}");
            Outcome::Failed
        }
    })
}
