//! Planning a pass: pure decisions from what was read.

use std::time::Duration;

use banklease::config::Config;
use serde::Serialize;

/// The knobs of a pass (from `[gc]` and `[lease].skew_margin`).
#[derive(Debug, Clone, Serialize)]
pub struct GcOptions {
    /// How long past expiry (after the skew margin) before an owner's checkpoints are collected.
    pub grace: Duration,
    /// Skew margin for judging leases on the store clock.
    pub skew_margin: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Most checkpoints collected per pass (0 = no limit).
    pub max_deletions: usize,
    /// Refuse a pass that would collect more than this fraction of protecting checkpoints ...
    pub brake_ratio: f64,
    /// ... once there are at least this many.
    pub brake_min: usize,
    /// Plan and report only.
    pub dry_run: bool,
    /// Collect even when the brake would refuse, and allow an empty bank prefix.
    pub force: bool,
    /// Delete lease objects of owners expired past grace with nothing left to collect.
    pub reap_leases: bool,
    /// How old a read's answer may be on this store; reads are judged this much before they
    /// were sent (`gc.read_staleness`).
    pub read_staleness: Duration,
    /// After this (plus the margin) a collected checkpoint's data is swept once more for late
    /// writes (`gc.late_write_window`).
    pub late_write_window: Duration,
    /// Without a recent store-clock reading to compare with (the first pass of a process, a
    /// standby that just took over), judge every stamp older than the pass's first reading as
    /// written at it: a store-clock step just before cannot be told from elapsed time otherwise.
    /// Holds collection back for one expire window + margin + grace. The daemon sets it; a
    /// one-shot pass (`banklease gc`) cannot, or it would never collect.
    pub floor_at_first_reading: bool,
}

impl Default for GcOptions {
    /// The options of the default configuration.
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

impl GcOptions {
    /// Options from a loaded configuration.
    pub fn from_config(config: &Config) -> Self {
        Self {
            grace: config.gc.grace,
            skew_margin: config.lease.skew_margin,
            concurrency: config.gc.concurrency,
            max_deletions: config.gc.max_deletions,
            brake_ratio: config.gc.brake_ratio,
            brake_min: config.gc.brake_min,
            dry_run: config.gc.dry_run,
            force: false,
            reap_leases: config.gc.reap_leases,
            read_staleness: config.gc.read_staleness,
            late_write_window: config.gc.late_write_window,
            floor_at_first_reading: false,
        }
    }
}

use banklease::{LeaseView, OwnerId};

/// What the pass does with one owner's protecting checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The lease is alive: leave everything.
    Alive,
    /// Expired, but not yet for `grace`: leave everything this pass.
    InGrace,
    /// The lease could not be read or judged: never delete on doubt.
    Unreadable(String),
    /// Expired for longer than `grace`: collect.
    Expired,
    /// The store says there is no lease: collect markers older than `grace` (store clock).
    Missing,
}

impl Verdict {
    /// Judge one owner from its lease view.
    pub fn of(view: &LeaseView, grace: Duration) -> Self {
        match view {
            LeaseView::Alive { .. } => Verdict::Alive,
            LeaseView::Expired { since, .. } if *since >= grace => Verdict::Expired,
            LeaseView::Expired { .. } => Verdict::InGrace,
            LeaseView::Missing => Verdict::Missing,
            LeaseView::Unreadable { error } => Verdict::Unreadable(error.clone()),
        }
    }

    /// True for the verdicts whose checkpoints are collected.
    pub fn is_dead(&self) -> bool {
        matches!(self, Verdict::Expired | Verdict::Missing)
    }
}

/// One owner as seen by the pass: how many protecting markers, and the verdict on its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerTally {
    /// The owner.
    pub owner: OwnerId,
    /// Its protecting markers in the listing.
    pub markers: u64,
    /// The verdict on its lease.
    pub verdict: Verdict,
}

/// The decision of a pass, before any deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Owners whose checkpoints are collected, in listing order.
    pub dead: Vec<OwnerTally>,
    /// Markers of dead owners (an upper bound on what is collected).
    pub candidates: u64,
    /// Most checkpoints to collect this pass (`None` = no limit).
    pub limit: Option<u64>,
    /// Why nothing is collected, when the brake refuses the pass.
    pub braked: Option<String>,
}

/// Decide a pass from the owners seen and `scanned` markers in all. Pure.
///
/// The brake looks at the share of protecting checkpoints the pass would collect: a sudden mass
/// of dead owners is more often a fault (a wrong clock, an unreachable lease prefix answered as
/// "not found", a misconfigured window) than a mass death, so it asks for `force`.
pub fn plan(owners: &[OwnerTally], scanned: u64, options: &GcOptions) -> Plan {
    let dead: Vec<OwnerTally> = owners
        .iter()
        .filter(|o| o.verdict.is_dead())
        .cloned()
        .collect();
    let candidates: u64 = dead.iter().map(|o| o.markers).sum();
    let limit = (options.max_deletions > 0).then_some(options.max_deletions as u64);
    let mut braked = None;
    if !options.force && scanned >= options.brake_min as u64 && scanned > 0 {
        let ratio = candidates as f64 / scanned as f64;
        if ratio > options.brake_ratio {
            braked = Some(format!(
                "safety brake: the pass would collect {candidates} of {scanned} protecting \
                 checkpoints (ratio {ratio:.2} > brake_ratio {}); check the clocks and the lease \
                 windows, then run again with --force if this is right",
                options.brake_ratio
            ));
        }
    }
    Plan {
        dead,
        candidates,
        limit,
        braked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> GcOptions {
        GcOptions {
            grace: Duration::from_secs(60),
            skew_margin: Duration::from_secs(2),
            concurrency: 4,
            max_deletions: 0,
            brake_ratio: 0.5,
            brake_min: 10,
            dry_run: false,
            force: false,
            reap_leases: true,
            ..GcOptions::default()
        }
    }

    fn tally(name: &str, markers: u64, verdict: Verdict) -> OwnerTally {
        OwnerTally {
            owner: OwnerId::parse(name).unwrap(),
            markers,
            verdict,
        }
    }

    #[test]
    fn verdicts_follow_the_view_and_grace() {
        let g = Duration::from_secs(60);
        assert_eq!(Verdict::of(&LeaseView::Missing, g), Verdict::Missing);
        assert_eq!(
            Verdict::of(&LeaseView::Unreadable { error: "x".into() }, g),
            Verdict::Unreadable("x".into())
        );
        assert!(!Verdict::Unreadable("x".into()).is_dead());
        assert!(!Verdict::Alive.is_dead());
        assert!(!Verdict::InGrace.is_dead());
    }

    #[test]
    fn only_dead_owners_are_planned() {
        let owners = vec![
            tally("a", 5, Verdict::Alive),
            tally("b", 2, Verdict::Expired),
            tally("c", 1, Verdict::Unreadable("boom".into())),
            tally("d", 3, Verdict::InGrace),
            tally("e", 1, Verdict::Missing),
        ];
        let p = plan(&owners, 12, &options());
        assert_eq!(p.dead.len(), 2);
        assert_eq!(p.candidates, 3);
        assert_eq!(p.braked, None);
        assert_eq!(p.limit, None);
    }

    #[test]
    fn brake_refuses_mass_collection_unless_forced() {
        let owners = vec![
            tally("a", 4, Verdict::Alive),
            tally("b", 8, Verdict::Expired),
        ];
        let p = plan(&owners, 12, &options());
        assert!(p.braked.as_deref().unwrap().contains("8 of 12"), "{p:?}");
        let mut forced = options();
        forced.force = true;
        assert_eq!(plan(&owners, 12, &forced).braked, None);
        // Small banks are exempt.
        let mut small = options();
        small.brake_min = 100;
        assert_eq!(plan(&owners, 12, &small).braked, None);
    }

    #[test]
    fn limit_comes_from_max_deletions() {
        let mut o = options();
        o.max_deletions = 7;
        assert_eq!(plan(&[], 0, &o).limit, Some(7));
    }
}
