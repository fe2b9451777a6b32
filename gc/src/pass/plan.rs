//! Planning a pass: pure decisions from what was read.

use std::time::Duration;

use banklease::{LeaseView, OwnerId};

pub use crate::pass::options::GcOptions;

/// The GC's one rule of time: what was stamped `elapsed` ago on the store clock (judged at the
/// instant its read was sent) is past `wait` only once `elapsed` covers `wait` **plus the skew
/// `margin`**: every doubt about the clocks counts in the owner's favour. A lease expired
/// for grace, a missing lease and its markers, a sweep marker's late-write window and an old
/// clock probe are all judged by it.
pub fn past(elapsed: Duration, wait: Duration, margin: Duration) -> bool {
    elapsed >= wait.saturating_add(margin)
}

/// How long a missing lease has been seen missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingFor {
    /// First seen now (the record was just written, or would be in a dry run).
    JustNow,
    /// Seen missing since at least this long (store clock, judged at the read's send instant).
    AtLeast(Duration),
}

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
    /// Judge one owner from its lease view. A missing lease is [`Verdict::Missing`] here, to
    /// be judged by how long it has been seen missing ([`Verdict::of_missing`]).
    pub fn of(view: &LeaseView, grace: Duration) -> Self {
        match view {
            LeaseView::Alive { .. } => Verdict::Alive,
            // `since` already has the margin deducted (banklease's observe.rs `judge`).
            LeaseView::Expired { since, .. } if past(*since, grace, Duration::ZERO) => {
                Verdict::Expired
            }
            LeaseView::Expired { .. } => Verdict::InGrace,
            LeaseView::Missing => Verdict::Missing,
            LeaseView::Unreadable { error } => Verdict::Unreadable(error.clone()),
        }
    }

    /// A missing lease, from how long it has been seen missing (`gc/missing/<owner>`, read or
    /// started by the pass): `Missing` (collect) once that is past `grace` plus the margin, with
    /// that duration; `InGrace` before; `Unreadable` if it cannot be told.
    pub(crate) fn of_missing(
        seen: Result<MissingFor, String>,
        grace: Duration,
        margin: Duration,
    ) -> (Self, Option<Duration>) {
        match seen {
            Ok(MissingFor::AtLeast(d)) if past(d, grace, margin) => (Verdict::Missing, Some(d)),
            Ok(_) => (Verdict::InGrace, None),
            Err(error) => (
                Verdict::Unreadable(format!(
                    "lease missing, but its missing-since record cannot be read: {error}"
                )),
                None,
            ),
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
    /// What a dead verdict rests on, recorded in each collection's decision.
    pub evidence: Option<banklease::checkpoint::Evidence>,
    /// The retry budget its lease declared, in milliseconds (`None`: none, or no lease).
    pub budget_ms: Option<u64>,
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

/// The same brake on reaping: `expired` of the `leases` listed would be deleted. A clock that
/// stepped where no comparison saw it makes every lease look expired at once, the live owners'
/// with no checkpoint too: reaping is refused past `brake_ratio` unless `force`. Pure.
pub fn reap_brake(expired: u64, leases: u64, options: &GcOptions) -> Option<String> {
    if options.force || leases < options.brake_min as u64 || leases == 0 {
        return None;
    }
    let ratio = expired as f64 / leases as f64;
    (ratio > options.brake_ratio).then(|| {
        format!(
            "safety brake: the pass would reap {expired} of {leases} leases (ratio {ratio:.2} > \
             brake_ratio {}); check the clocks and the lease windows, then run again with \
             --force if this is right",
            options.brake_ratio
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> GcOptions {
        GcOptions::builder()
            .grace(Duration::from_secs(60))
            .skew_margin(Duration::from_secs(2))
            .concurrency(4)
            .max_deletions(0)
            .brake_ratio(0.5)
            .brake_min(10)
            .dry_run(false)
            .force(false)
            .reap_leases(true)
            .build()
    }

    fn tally(name: &str, markers: u64, verdict: Verdict) -> OwnerTally {
        OwnerTally {
            owner: OwnerId::parse(name).unwrap(),
            markers,
            verdict,
            evidence: None,
            budget_ms: None,
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
    fn a_missing_lease_is_collected_only_past_grace_plus_margin() {
        let (g, m) = (Duration::from_secs(60), Duration::from_secs(2));
        let seen = |d| Ok(MissingFor::AtLeast(Duration::from_secs(d)));
        assert_eq!(Verdict::of_missing(seen(61), g, m).0, Verdict::InGrace);
        assert_eq!(
            Verdict::of_missing(seen(62), g, m),
            (Verdict::Missing, Some(Duration::from_secs(62)))
        );
        assert_eq!(
            Verdict::of_missing(Ok(MissingFor::JustNow), g, m).0,
            Verdict::InGrace
        );
        assert!(matches!(
            Verdict::of_missing(Err("boom".into()), g, m).0,
            Verdict::Unreadable(e) if e.contains("boom")
        ));
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
    fn the_brake_refuses_mass_reaping_unless_forced() {
        let o = options();
        assert!(reap_brake(8, 12, &o)
            .unwrap()
            .contains("reap 8 of 12 leases"));
        assert_eq!(reap_brake(6, 12, &o), None);
        let mut forced = options();
        forced.force = true;
        assert_eq!(reap_brake(8, 12, &forced), None);
        let mut small = options();
        small.brake_min = 100;
        assert_eq!(reap_brake(8, 12, &small), None);
    }

    #[test]
    fn limit_comes_from_max_deletions() {
        let mut o = options();
        o.max_deletions = 7;
        assert_eq!(plan(&[], 0, &o).limit, Some(7));
    }
}
