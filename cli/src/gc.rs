//! `banklease gc`: one GC pass with the daemon's engine and the `[gc]` configuration.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::{human, out_json, out_line, Ctx, Outcome};

/// `banklease gc`: one pass of the engine the daemon runs (crate `banklease-gc`), with the
/// `[gc]` configuration; `--dry-run` and `--force` override it for this pass.
pub(crate) async fn gc(ctx: &Ctx, dry_run: bool, force: bool) -> Result<Outcome> {
    let mut options = banklease_gc::GcOptions::from_config(&ctx.config);
    options.dry_run |= dry_run;
    options.force = force;
    // As the daemon: a margin below the store's stamp resolution cannot absorb the truncation.
    banklease_gc::timing::check_skew_margin(&ctx.bank, &ctx.clock, options.skew_margin)
        .await
        .with_context(|| format!("refusing to collect on bank=`{}`", ctx.bank.label()))?;
    let collector = banklease_gc::Collector::new(ctx.bank.clone(), ctx.clock.clone(), options);
    let report: banklease_gc::PassReport = collector
        .run_pass()
        .await
        .with_context(|| format!("gc pass on bank=`{}` failed", ctx.bank.label()))?;
    if ctx.json {
        out_json(&report)?;
    } else {
        let verb = if report.dry_run {
            "would collect"
        } else {
            "collected"
        };
        out_line(&format!(
            "gc pass{}: scanned {} protecting checkpoint(s) of {} owner(s) ({} alive, {} in \
             grace, {} dead, {} unreadable); {verb} {}, repaired {}, skipped {}, errors {}, leases \
             reaped {} in {}",
            if report.dry_run { " (dry run)" } else { "" },
            report.scanned,
            report.owners,
            report.alive,
            report.in_grace,
            report.dead,
            report.unreadable,
            report.collected,
            report.repaired,
            report.skipped,
            report.errors,
            report.leases_reaped,
            human(Duration::from_millis(report.duration_ms)),
        ))?;
    }
    // The pass completed; say on stderr, one line each, what an operator must look at.
    for problem in &report.problems {
        eprintln!(
            "error: {}: {} (left for the next pass)",
            problem.object, problem.error
        );
    }
    if report.problems_omitted > 0 {
        eprintln!(
            "error: {} more error(s), not named here (see the log)",
            report.problems_omitted
        );
    }
    if let Some(reason) = &report.braked {
        eprintln!(
            "warning: the safety brake refused the pass: {reason}; rerun with --force if intended"
        );
    }
    Ok(pass_outcome(&report))
}

/// Exit 0 for a clean pass; 1 when it completed but left something an operator must look at
/// (errors, each named on stderr, or the brake refused collecting). A failed pass is exit 2.
fn pass_outcome(report: &banklease_gc::PassReport) -> Outcome {
    if report.errors > 0 || report.braked.is_some() {
        Outcome::No
    } else {
        Outcome::Yes
    }
}
