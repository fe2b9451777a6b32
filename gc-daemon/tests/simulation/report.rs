//! Outcomes of runs, their totals, and running many seeds.

use super::*;

/// What happened in one run.
#[derive(Debug, Default, Clone)]
pub(crate) struct Outcome {
    pub(crate) seed: u64,
    pub(crate) healthy: bool,
    pub(crate) violations: Vec<Violation>,
    pub(crate) faults: FaultCounts,
    pub(crate) pauses: u64,
    pub(crate) crashes: u64,
    pub(crate) gc_crashes: u64,
    pub(crate) isolations: u64,
    pub(crate) partitions: u64,
    pub(crate) jumps: u64,
    pub(crate) owners: u64,
    pub(crate) created: u64,
    pub(crate) completed: u64,
    pub(crate) fenced: u64,
    pub(crate) lost: u64,
    pub(crate) collected: u64,
    /// Data objects left under a checkpoint the GC collected (written after it, or missed by a
    /// lagging listing): storage leaked, not a correctness problem.
    pub(crate) orphan_data: u64,
    /// Longest time from a crash to the GC's decision on one of that owner's zombies.
    pub(crate) worst_liveness: Duration,
    /// Zombies (healthy store) collected later than `LIVENESS_ASKED` but within `LIVENESS`.
    pub(crate) over_asked: u64,
    /// ... and later than `LIVENESS_ASKED + skew_margin` (the bound before `PASS_ALLOWANCE`).
    pub(crate) over_margin_bound: u64,
    /// Collector pauses at request points, owner host suspends, large store-clock steps,
    /// restored markers, stale reads served, creates retried by owners and retries that met
    /// the owner's own landed create.
    pub(crate) gc_pauses: u64,
    pub(crate) suspends: u64,
    pub(crate) big_steps: u64,
    pub(crate) restores: u64,
    pub(crate) stale_reads: u64,
    /// Clock-probe read-backs answered with the probe's previous version (lagging probe reads).
    pub(crate) probe_lag_reads: u64,
    pub(crate) create_retries: u64,
    pub(crate) create_ambiguous: u64,
    pub(crate) known: BTreeMap<Known, u64>,
    pub(crate) trace: Vec<String>,
}

/// Totals over many runs.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) runs: u64,
    pub(crate) healthy: u64,
    pub(crate) failed_seeds: Vec<u64>,
    pub(crate) violations: BTreeMap<&'static str, u64>,
    pub(crate) faults: FaultCounts,
    pub(crate) pauses: u64,
    pub(crate) crashes: u64,
    pub(crate) gc_crashes: u64,
    pub(crate) isolations: u64,
    pub(crate) partitions: u64,
    pub(crate) jumps: u64,
    pub(crate) owners: u64,
    pub(crate) created: u64,
    pub(crate) completed: u64,
    pub(crate) fenced: u64,
    pub(crate) lost: u64,
    pub(crate) collected: u64,
    pub(crate) orphan_data: u64,
    pub(crate) worst_liveness: Duration,
    pub(crate) over_asked: u64,
    /// ... and later than `LIVENESS_ASKED + skew_margin` (the bound before `PASS_ALLOWANCE`).
    pub(crate) over_margin_bound: u64,
    /// Collector pauses at request points, owner host suspends, large store-clock steps,
    /// restored markers, stale reads served, creates retried by owners and retries that met
    /// the owner's own landed create.
    pub(crate) gc_pauses: u64,
    pub(crate) suspends: u64,
    pub(crate) big_steps: u64,
    pub(crate) restores: u64,
    pub(crate) stale_reads: u64,
    pub(crate) probe_lag_reads: u64,
    pub(crate) create_retries: u64,
    pub(crate) create_ambiguous: u64,
    /// Violations of safety (the others are of liveness).
    pub(crate) safety: u64,
    /// The first seeds showing each kind of violation.
    pub(crate) violation_seeds: BTreeMap<&'static str, Vec<u64>>,
    pub(crate) known: BTreeMap<Known, u64>,
    pub(crate) known_seeds: BTreeMap<Known, Vec<u64>>,
}

impl Totals {
    pub(crate) fn add(&mut self, o: &Outcome) {
        self.runs += 1;
        self.healthy += u64::from(o.healthy);
        if !o.violations.is_empty() {
            self.failed_seeds.push(o.seed);
        }
        for v in &o.violations {
            *self.violations.entry(v.kind()).or_default() += 1;
            self.safety += u64::from(v.is_safety());
            let seeds = self.violation_seeds.entry(v.kind()).or_default();
            if seeds.last() != Some(&o.seed) {
                seeds.push(o.seed);
            }
        }
        self.faults.add(&o.faults);
        self.gc_pauses += o.gc_pauses;
        self.suspends += o.suspends;
        self.big_steps += o.big_steps;
        self.restores += o.restores;
        self.stale_reads += o.stale_reads;
        self.probe_lag_reads += o.probe_lag_reads;
        self.create_retries += o.create_retries;
        self.create_ambiguous += o.create_ambiguous;
        self.pauses += o.pauses;
        self.crashes += o.crashes;
        self.gc_crashes += o.gc_crashes;
        self.isolations += o.isolations;
        self.partitions += o.partitions;
        self.jumps += o.jumps;
        self.owners += o.owners;
        self.created += o.created;
        self.completed += o.completed;
        self.fenced += o.fenced;
        self.lost += o.lost;
        self.collected += o.collected;
        self.orphan_data += o.orphan_data;
        if o.healthy {
            self.worst_liveness = self.worst_liveness.max(o.worst_liveness);
            self.over_asked += o.over_asked;
            self.over_margin_bound += o.over_margin_bound;
        }
        for (k, n) in &o.known {
            *self.known.entry(*k).or_default() += n;
            self.known_seeds.entry(*k).or_default().push(o.seed);
        }
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = &self.faults;
        writeln!(
            f,
            "runs={} (healthy store: {}) seeds with violations={} violations={:?} (of safety: {})",
            self.runs,
            self.healthy,
            self.failed_seeds.len(),
            self.violations,
            self.safety
        )?;
        let first: BTreeMap<_, _> = self
            .violation_seeds
            .iter()
            .map(|(k, v)| (k, v.iter().take(8).collect::<Vec<_>>()))
            .collect();
        writeln!(f, "first seeds by violation: {first:?}")?;
        writeln!(
            f,
            "store faults: errors_before={} errors_after={} timeouts_landed={} timeouts_lost={} \
             partitioned_calls={} listing_hidden={} listing_ghosts={} late_answers={} \
             ambiguous_creates={} (total {}); stale_reads_served={} lagging_probe_reads={}",
            x.errors_before,
            x.errors_after,
            x.timeouts_landed,
            x.timeouts_lost,
            x.partitioned,
            x.listing_hidden,
            x.listing_ghosts,
            x.late_answers,
            x.creates_ambiguous,
            x.total(),
            self.stale_reads,
            self.probe_lag_reads
        )?;
        writeln!(
            f,
            "collector side: gc_pauses={} owner_suspends={} big_store_clock_steps={} \
             restored_markers={} create_retries={} retries_meeting_own_create={}",
            self.gc_pauses,
            self.suspends,
            self.big_steps,
            self.restores,
            self.create_retries,
            self.create_ambiguous
        )?;
        writeln!(
            f,
            "scenario: partitions={} owner_isolations={} pauses={} owner_crashes={} gc_crashes={} \
             store_clock_jumps={}",
            self.partitions,
            self.isolations,
            self.pauses,
            self.crashes,
            self.gc_crashes,
            self.jumps
        )?;
        let first: BTreeMap<_, _> = self
            .known_seeds
            .iter()
            .map(|(k, v)| (k, v.iter().take(5).collect::<Vec<_>>()))
            .collect();
        writeln!(
            f,
            "known findings (not failed on): {:?}, first seeds {:?}",
            self.known, first
        )?;
        write!(
            f,
            "work: owners={} checkpoints={} completed={} fenced={} leases_lost={} collected={} \
             orphan_data_objects={} worst_crash_to_collected_healthy={:?} (bound {:?}; over \
             the bound asked for, {:?}: {}; over it plus the margin: {})",
            self.owners,
            self.created,
            self.completed,
            self.fenced,
            self.lost,
            self.collected,
            self.orphan_data,
            self.worst_liveness,
            LIVENESS,
            LIVENESS_ASKED,
            self.over_asked,
            self.over_margin_bound
        )
    }
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Run `seeds` on up to two threads, collecting totals; print the first failing seed's trace.
pub(crate) fn run_many(seeds: Range<u64>, kind: GcKind) -> (Totals, Vec<Outcome>) {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(2) as u64;
    let results: Vec<Vec<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = seeds.clone();
                s.spawn(move || {
                    seeds
                        .filter(|seed| seed % threads == t)
                        .map(|seed| {
                            let mut o = run(seed, kind);
                            if o.violations.is_empty() {
                                o.trace = Vec::new();
                            }
                            o
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut totals = Totals::default();
    let mut failed = Vec::new();
    for o in results.into_iter().flatten() {
        totals.add(&o);
        if !o.violations.is_empty() {
            failed.push(o);
        }
    }
    failed.sort_by_key(|o| o.seed);
    (totals, failed)
}

pub(crate) fn report_failure(kind: GcKind, o: &Outcome) -> String {
    let tail: Vec<&String> = o.trace.iter().rev().take(400).collect();
    let mut s = format!(
        "seed {} ({kind:?}) violated:\n  {}\nreproduce: SIM_SEED={} cargo test -p banklease-gc-daemon \
         --test simulation -- --nocapture\n--- trace (last {} lines) ---\n",
        o.seed,
        o.violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  "),
        o.seed,
        tail.len()
    );
    for line in tail.into_iter().rev() {
        s.push_str(line);
        s.push('\n');
    }
    s
}

pub(crate) fn check_seeds(seeds: Range<u64>) {
    // Real time, only to report how long the seeds took.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let mut all = Totals::default();
    let mut failures = Vec::new();
    for kind in GcKind::REAL {
        // Every seed with each real kind: two daemons, two bare collectors, one of each.
        let (totals, failed) = run_many(seeds.clone(), kind);
        println!("{kind:?}:\n{totals}\n");
        merge(&mut all, totals);
        failures.extend(failed.into_iter().map(|o| (kind, o)));
    }
    println!(
        "ALL: {} seeds × {} collector kinds in {:?}\n{all}",
        seeds.end - seeds.start,
        GcKind::REAL.len(),
        started.elapsed()
    );
    for (kind, o) in &failures {
        println!(
            "FAILED seed {} ({kind:?}): {:?}",
            o.seed,
            o.violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
        );
    }
    if let Some((kind, o)) = failures.first() {
        panic!(
            "{} run(s) violated an invariant; first:\n{}",
            failures.len(),
            report_failure(*kind, o)
        );
    }
}

pub(crate) fn merge(all: &mut Totals, t: Totals) {
    all.runs += t.runs;
    all.healthy += t.healthy;
    all.failed_seeds.extend(t.failed_seeds);
    for (k, v) in t.violations {
        *all.violations.entry(k).or_default() += v;
    }
    all.faults.add(&t.faults);
    all.gc_pauses += t.gc_pauses;
    all.suspends += t.suspends;
    all.big_steps += t.big_steps;
    all.restores += t.restores;
    all.stale_reads += t.stale_reads;
    all.probe_lag_reads += t.probe_lag_reads;
    all.create_retries += t.create_retries;
    all.create_ambiguous += t.create_ambiguous;
    for (k, v) in t.violation_seeds {
        all.violation_seeds.entry(k).or_default().extend(v);
    }
    all.pauses += t.pauses;
    all.crashes += t.crashes;
    all.gc_crashes += t.gc_crashes;
    all.isolations += t.isolations;
    all.partitions += t.partitions;
    all.jumps += t.jumps;
    all.owners += t.owners;
    all.created += t.created;
    all.completed += t.completed;
    all.fenced += t.fenced;
    all.lost += t.lost;
    all.collected += t.collected;
    all.orphan_data += t.orphan_data;
    all.worst_liveness = all.worst_liveness.max(t.worst_liveness);
    all.over_asked += t.over_asked;
    all.over_margin_bound += t.over_margin_bound;
    all.safety += t.safety;
    for (k, n) in t.known {
        *all.known.entry(k).or_default() += n;
    }
    for (k, v) in t.known_seeds {
        all.known_seeds.entry(k).or_default().extend(v);
    }
}
