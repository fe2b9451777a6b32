//! `banklease validity-check`: may this owner start an update, judged on the store's clock?

use std::time::Duration;

use anyhow::{Context, Result};
use banklease::observe::WindowSource;
use banklease::{LeaseView, OwnerId, ValidityCheck};
use serde::Serialize;

use crate::{human, ms, out_json, out_line, Ctx, Outcome};

#[derive(Debug, Serialize)]
pub(crate) struct ValidityReport<'a> {
    owner_id: &'a str,
    state: &'static str,
    remaining_ms: u64,
    validity_window_ms: u64,
    /// `the owner's` (declared in its lease), `--validity-window` or `configured`.
    validity_window_source: &'static str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    expired_since_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// `banklease validity-check`: the observer's answer to "may this owner start an update?".
pub(crate) async fn validity_check(
    ctx: &Ctx,
    owner: &str,
    window: Option<Duration>,
) -> Result<Outcome> {
    // A short id, as `lease list` prints it, names the one owner whose id starts with it (as
    // `lease show` takes it); two or more are refused, naming them: an owner is never judged
    // by a guess.
    let owner = crate::lease::resolve_prefix(ctx, OwnerId::parse(owner)?).await?;
    // The owner's own validity window, as its lease declares it, unless one is given: the
    // admin's configuration describes the admin's owners, not necessarily this one.
    let check = ctx
        .observer()
        .validity_check(&owner, window, ctx.config.lease.windows.validity_window)
        .await
        .with_context(|| {
            format!(
                "cannot read the store's clock of bank=`{}`",
                ctx.bank.label()
            )
        })?;
    let ValidityCheck {
        view,
        remaining,
        validity_window: window,
        window_source,
        ok,
    } = check;
    let window_source = match window_source {
        WindowSource::Given => "--validity-window",
        WindowSource::Owner => "the owner's",
        WindowSource::Fallback => "configured",
    };
    if let LeaseView::Alive { record, .. } | LeaseView::Expired { record, .. } = &view {
        let slack = record.expire_window().saturating_sub(window);
        if ctx.config.lease.skew_margin >= slack {
            eprintln!(
                "warning: no observer with skew_margin=`{}` can call this lease valid: the \
                 owner's expire_window=`{}` leaves only `{}` beyond validity_window=`{}`; lower \
                 [lease] skew_margin or give the owner a longer expire window",
                human(ctx.config.lease.skew_margin),
                human(record.expire_window()),
                human(slack),
                human(window)
            );
        }
    }
    let (since, error) = match &view {
        LeaseView::Expired { since, .. } => (Some(*since), None),
        LeaseView::Unreadable { error } => (None, Some(error.as_str())),
        _ => (None, None),
    };
    if ctx.json {
        out_json(&ValidityReport {
            owner_id: owner.as_str(),
            state: view.name(),
            remaining_ms: ms(remaining),
            validity_window_ms: ms(window),
            validity_window_source: window_source,
            ok,
            expired_since_ms: since.map(ms),
            error,
        })?;
    } else {
        let verdict = if ok { "ok" } else { "not ok" };
        let detail = match &view {
            LeaseView::Alive { .. } if ok => format!(
                "lease alive, {} left >= {window_source} validity window {}",
                human(remaining),
                human(window)
            ),
            LeaseView::Alive { .. } => format!(
                "lease alive but only {} left < {window_source} validity window {}",
                human(remaining),
                human(window)
            ),
            LeaseView::Expired { since, .. } => format!("lease expired {} ago", human(*since)),
            LeaseView::Missing => "no lease".to_owned(),
            // No answer, only the error below.
            LeaseView::Unreadable { .. } => String::new(),
        };
        if !detail.is_empty() {
            out_line(&format!("{verdict}: owner_id=`{owner}` {detail}"))?;
        }
    }
    Ok(match view {
        LeaseView::Unreadable { error } => {
            eprintln!("error: cannot judge the lease of owner_id=`{owner}`: {error}");
            Outcome::Failed
        }
        _ if ok => Outcome::Yes,
        _ => Outcome::No,
    })
}
