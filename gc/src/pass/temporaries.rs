//! The temporaries sweep (`file:` banks only): staged files of writers killed between writing
//! and publishing, in `_banklease/staging/`, older than `late_write_window` and held by no
//! writer, are removed ([`banklease::store::LocalStore::sweep_temporaries_step`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use banklease::checkpoint::{read_decision, Decider};
use banklease::paths::Key;
use banklease::store::SweepWalk;
use banklease::CheckpointId;
use chrono::{DateTime, Utc};

use crate::pass::context::PassContext;
use crate::pass::report::{Problem, StagedUpload};

/// Entries of a `file:` bank's staging directory a pass reads at most looking for stale staged
/// files (it holds one per write in flight or crashed, so one pass almost always reads it all).
pub const TEMPORARY_SWEEP_BUDGET: usize = 50_000;

/// The sweep's state across passes; clones of a collector share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TemporarySweep {
    /// When the last walk ended (monotonic).
    last_done: Arc<Mutex<Option<Instant>>>,
    /// That walk, while it goes on across passes.
    walk: Arc<Mutex<SweepWalk>>,
}

impl TemporarySweep {
    /// On a `file:` bank, remove what writers killed between writing and publishing left
    /// (staged files in `_banklease/staging/` that no writer holds, older than
    /// `late_write_window`). Each pass goes on with the walk for at most
    /// [`TEMPORARY_SWEEP_BUDGET`] entries, and a new walk starts at most once per window after
    /// the last one ended. Returns what it swept, and what failed.
    pub(crate) async fn sweep(&self, ctx: &PassContext) -> (u64, Option<Problem>) {
        let bank = &ctx.bank;
        let Some(local) = bank.local() else {
            return (0, None);
        };
        let window = ctx.options.late_write_window;
        let now = ctx.clock.now();
        {
            let walking = {
                let walk = self.walk.lock().expect("not poisoned");
                walk.is_started() && !walk.is_done()
            };
            let last = self.last_done.lock().expect("not poisoned");
            if !walking && last.is_some_and(|t| now.saturating_duration_since(t) < window) {
                return (0, None);
            }
        }
        let step = local
            .sweep_temporaries_step(
                &self.walk,
                TEMPORARY_SWEEP_BUDGET,
                window,
                ctx.options.dry_run,
            )
            .await;
        match step {
            Ok(swept) => {
                if swept.done {
                    *self.last_done.lock().expect("not poisoned") = Some(now);
                    *self.walk.lock().expect("not poisoned") = SweepWalk::default();
                }
                if swept.stale > 0 {
                    tracing::info!(
                        bank = bank.label(),
                        stale = swept.stale,
                        removed = swept.removed,
                        "swept temporaries left by crashed writers"
                    );
                }
                let found = if ctx.options.dry_run {
                    swept.stale
                } else {
                    swept.removed
                };
                (found, None)
            }
            Err(e) => {
                // Start over next time: the walk may be stuck on what failed.
                *self.walk.lock().expect("not poisoned") = SweepWalk::default();
                tracing::warn!(target: crate::pass::report::PROBLEM_TARGET, bank = bank.label(), error = %e,
                    "cannot sweep stale temporaries; will retry next pass");
                let problem = Problem::new(
                    "`_banklease/staging/`",
                    format!("sweeping crashed writers' temporaries failed: {e}"),
                );
                (0, Some(problem))
            }
        }
    }
}

/// The partial uploads staged for checkpoints the GC collected (`file:` banks; others stage
/// nothing). For the report only: what goes is decided by the sweep alone.
pub(crate) async fn staged_of_collected(ctx: &PassContext) -> (Vec<StagedUpload>, Option<Problem>) {
    let bank = &ctx.bank;
    let Some(local) = bank.local() else {
        return (Vec::new(), None);
    };
    let staged = match local.staged_writes(TEMPORARY_SWEEP_BUDGET).await {
        Ok(staged) => staged,
        Err(e) => {
            let problem = Problem::new(
                "`_banklease/staging/`",
                format!("cannot list the staged writes: {e}"),
            );
            return (Vec::new(), Some(problem));
        }
    };
    let mut found = Vec::new();
    let mut collected: std::collections::HashMap<CheckpointId, bool> = Default::default();
    for write in staged {
        let Some(key) = write.key else { continue };
        let Some(Key::Data { checkpoint, .. }) = Key::parse(bank, &key.as_str().into()) else {
            continue;
        };
        if !collected.contains_key(&checkpoint) {
            // A decision that cannot be read leaves the upload unnamed here (the pass counts
            // that decision's problem where it meets it).
            let by_gc = matches!(read_decision(bank, &checkpoint).await,
                Ok(Some(d)) if d.by == Decider::Gc);
            collected.insert(checkpoint.clone(), by_gc);
        }
        if collected[&checkpoint] {
            found.push(StagedUpload {
                checkpoint_id: checkpoint,
                key,
                bytes: write.bytes,
                held: write.held,
                goes_from: (!write.held).then(|| {
                    banklease::clock::add_saturating(
                        DateTime::<Utc>::from(write.modified),
                        ctx.options.late_write_window,
                    )
                }),
            });
        }
    }
    if !found.is_empty() {
        tracing::info!(
            bank = bank.label(),
            staged = found.len(),
            "partial uploads of collected checkpoints are staged until the temporaries sweep"
        );
    }
    (found, None)
}
