//! `banklease gc`: one GC pass with the daemon's engine and the `[gc]` configuration.

use std::time::Duration;

use anyhow::{bail, Result};
use banklease::clock::add_saturating;
use chrono::{DateTime, Utc};

use crate::{human, out_json, out_line, Ctx, Outcome};

/// `banklease gc`: one pass of the engine the daemon runs (crate `banklease-gc`), with the
/// `[gc]` configuration; `--dry-run` and `--force` override it for this pass. Like
/// `banklease-gc --once`, it takes the GC lease for its pass, and refuses (exit 75) while a
/// daemon is active unless `--beside-daemon`; a dry run takes no lease.
pub(crate) async fn gc(
    ctx: &Ctx,
    dry_run: bool,
    force: bool,
    beside: bool,
    verbose: bool,
) -> Result<Outcome> {
    let mut config = ctx.config.clone();
    config.gc.dry_run |= dry_run;
    // The port is the running daemon's.
    config.gc.metrics_addr = None;
    let pass = banklease_gc::OnePass::new(ctx.bank.clone(), ctx.clock.clone(), config)
        .with_force(force)
        .beside_daemon(beside);
    let shutdown = async {
        // No signal handler (an error) means no early stop: the pass runs to its end.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let single = match pass.run(shutdown).await {
        Ok(Some(single)) => single,
        Ok(None) => bail!("interrupted before the pass could start; nothing was collected"),
        // A refusal names the active daemon itself; its kind (unavailable) exits 75.
        Err(e @ banklease_gc::Error::ActiveElsewhere(_)) => return Err(e.into()),
        Err(e) => {
            return Err(anyhow::Error::new(e)
                .context(format!("gc pass on bank=`{}` failed", ctx.bank.label())))
        }
    };
    let report = &single.report;
    if let banklease_gc::PassLease::Beside {
        holder,
        holder_host,
        holder_pid,
    } = &single.lease
    {
        eprintln!(
            "warning: --beside-daemon: this pass ran beside the active gc daemon \
             holder=`{holder}`{}, without the gc lease",
            banklease_gc::run::host_pid(holder_host.as_deref(), *holder_pid)
        );
    }
    if ctx.json {
        #[derive(serde::Serialize)]
        struct Line<'a> {
            #[serde(flatten)]
            report: &'a banklease_gc::PassReport,
            #[serde(flatten)]
            lease: &'a banklease_gc::PassLease,
        }
        let mut line = serde_json::to_value(Line {
            report,
            lease: &single.lease,
        })?;
        if report.dry_run {
            dry_run_names(&mut line);
        }
        out_json(&line)?;
    } else {
        let verb = if report.dry_run {
            "would collect"
        } else {
            "collected"
        };
        out_line(&format!(
            "gc pass{}: scanned {} protecting checkpoint(s) of {} owner(s) ({} alive, {} in \
             grace, {} dead, {} unreadable); {verb} {}, repaired {}, skipped {}, errors {}, leases \
             reaped {}; failed checkpoints: {} {}, kept {} ({}) in {}{}",
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
            banklease_gc::Action::Retire.verb(report.dry_run),
            report.retired,
            report.failed_kept,
            bytes(report.failed_kept_bytes),
            human(Duration::from_millis(report.duration_ms)),
            match &single.lease {
                banklease_gc::PassLease::Held => "; held the gc lease",
                banklease_gc::PassLease::Beside { .. } => "; beside the active gc daemon",
                _ => "",
            },
        ))?;
        // What happened to which checkpoint: all of them with -v, else the first few of each.
        if verbose {
            for c in &report.checkpoints {
                out_line(&format!(
                    "{} `{}` (owner `{}`): {}",
                    c.action.verb(report.dry_run),
                    c.checkpoint_id,
                    c.owner_id,
                    c.reason
                ))?;
            }
            if report.checkpoints_omitted > 0 {
                out_line(&format!(
                    "{} more checkpoint(s) not named (over {})",
                    report.checkpoints_omitted,
                    banklease_gc::pass::report::MAX_NAMED
                ))?;
            }
        } else {
            let owners: Vec<String> = report
                .checkpoints
                .iter()
                .map(|c| c.owner_id.to_string())
                .collect();
            let short: std::collections::HashMap<&str, String> = owners
                .iter()
                .map(String::as_str)
                .zip(crate::output::short_ids(&owners))
                .collect();
            let lines = report.named_lines(NAMED_IN_TEXT, |owner| {
                short
                    .get(owner.as_str())
                    .cloned()
                    .unwrap_or_else(|| owner.to_string())
            });
            let cut = banklease_gc::Action::ALL
                .iter()
                .any(|a| report.named(*a).count() > NAMED_IN_TEXT);
            for line in &lines {
                out_line(line)?;
            }
            if cut {
                out_line("(-v names every checkpoint and why; --json too)")?;
            }
        }
    }
    // Space still taken by collected checkpoints: where, and when it is given back.
    let now = DateTime::<Utc>::from(ctx.clock.system_now());
    for staged in &report.staged_uploads {
        eprintln!(
            "note: {}",
            staged_line(staged, now, ctx.config.gc.late_write_window)
        );
    }
    // What the store-clock checks found: a floor dropped or holding stamps back, a step.
    for note in &report.clock {
        eprintln!("note: {note}");
    }
    // What is in the bank but not banklease's: kept, and said, not an error.
    for foreign in &report.foreign {
        eprintln!("note: kept {foreign}: not banklease's, left as it is");
    }
    if report.foreign_omitted > 0 {
        eprintln!(
            "note: {} more entries that are not banklease's, kept, not named here",
            report.foreign_omitted
        );
    }
    // The pass completed; say on stderr, one line each, what an operator must look at.
    for problem in &report.problems {
        eprintln!(
            "error: {}: {} ({})",
            problem.object,
            problem.error,
            if problem.needs_human {
                "every pass meets it until a human acts: `banklease checkpoint explain` says how"
            } else {
                "left for the next pass"
            }
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
    Ok(pass_outcome(report))
}

/// A byte count in words: `215 B`, `12.3 KiB`, `4.0 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Checkpoints of each action the text names without -v.
const NAMED_IN_TEXT: usize = 5;

/// Exit 0 for a clean pass; 1 when it completed but left something an operator must look at
/// (errors, each named on stderr, or the brake refused collecting). A failed pass is exit 2.
fn pass_outcome(report: &banklease_gc::PassReport) -> Outcome {
    if report.errors > 0 || report.braked.is_some() {
        Outcome::No
    } else {
        Outcome::Yes
    }
}

/// One staged partial upload of a collected checkpoint, and when it goes, in words.
pub(crate) fn staged_line(
    staged: &banklease_gc::StagedUpload,
    now: DateTime<Utc>,
    window: Duration,
) -> String {
    let goes = match staged.goes_from {
        Some(t) => format!(
            "it goes from {}, at the gc's first temporaries sweep since",
            crate::lease::advice::instant(t, now)
        ),
        None => format!(
            "its writer still holds it (a live process): it goes {} after that writer lets go",
            human(window)
        ),
    };
    format!(
        "a partial upload of collected checkpoint `{}` is staged in `_banklease/staging/` \
         (key=`{}`, {} bytes); {goes}",
        staged.checkpoint_id, staged.key, staged.bytes
    )
}

/// The partial uploads staged for `id` once the gc collected it (`file:` banks), in words.
pub(crate) async fn staged_for(
    ctx: &Ctx,
    id: &banklease::CheckpointId,
    decision: &banklease::Result<Option<banklease::checkpoint::Decision>>,
) -> Vec<String> {
    let (Some(local), Ok(Some(d))) = (ctx.bank.local(), decision) else {
        return Vec::new();
    };
    if d.by != banklease::checkpoint::Decider::Gc {
        return Vec::new();
    }
    let prefix = banklease::paths::Prefix::Data(id).path(&ctx.bank);
    let window = ctx.config.gc.late_write_window;
    let now = DateTime::<Utc>::from(ctx.clock.system_now());
    let staged = local
        .staged_writes(banklease_gc::pass::TEMPORARY_SWEEP_BUDGET)
        .await
        .unwrap_or_default();
    staged
        .into_iter()
        .filter_map(|w| {
            let key = w.key?;
            key.starts_with(&format!("{prefix}/")).then(|| {
                let upload = banklease_gc::StagedUpload {
                    checkpoint_id: id.to_owned(),
                    key,
                    bytes: w.bytes,
                    held: w.held,
                    goes_from: (!w.held)
                        .then(|| add_saturating(DateTime::<Utc>::from(w.modified), window)),
                };
                staged_line(&upload, now, window)
            })
        })
        .collect()
}

/// A dry run's JSON names what it would do as such: `would_collect`, not `collected` (nothing
/// was).
fn dry_run_names(line: &mut serde_json::Value) {
    let Some(fields) = line.as_object_mut() else {
        return;
    };
    for (done, would) in [
        ("collected", "would_collect"),
        ("repaired", "would_repair"),
        ("retired", "would_retire"),
        ("leases_reaped", "would_reap_leases"),
    ] {
        if let Some(value) = fields.remove(done) {
            fields.insert(would.to_owned(), value);
        }
    }
}
