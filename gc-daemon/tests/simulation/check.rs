//! The checker: the run's shared registry, the store observer that judges every mutation at
//! the instant it takes effect, and the checks made after every step and at the end.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    CollectedWhileValid {
        checkpoint: String,
        owner: String,
        remaining: Duration,
        how: &'static str,
    },
    CompletedAndCollected {
        checkpoint: String,
    },
    AvailableCollected {
        checkpoint: String,
        status: String,
    },
    OutsidePrefix {
        path: String,
        by: String,
    },
    LostRevived {
        owner: String,
    },
    CompletedDamaged {
        checkpoint: String,
        what: String,
    },
    ZombieLate {
        owner: String,
        markers: usize,
        since_crash: Duration,
    },
    ZombieLeft {
        checkpoint: String,
        owner: String,
        marker: bool,
    },
    /// An owner's lease object deleted or replaced by someone else while the owner's lease was
    /// valid from its own point of view (the reaper, a takeover).
    LeaseDeletedWhileValid {
        owner: String,
        by: String,
        remaining: Duration,
        how: &'static str,
    },
    /// A checkpoint an operator deleted that is not a tombstone with its removal's trail (an
    /// `available` record brought back over it, data gone), or a begun removal left unfinished.
    RemovalUndone {
        checkpoint: String,
        what: String,
    },
    /// A failed checkpoint retired before `gc.keep_failed_for` had passed since it failed, by
    /// more than any step forward of the store's clock in between could explain.
    RetiredEarly {
        checkpoint: String,
        failed_for: Duration,
        stepped: Duration,
    },
    /// A retirement begun long before the end and not finished: no tombstone, or data left.
    RetirementUnfinished {
        checkpoint: String,
        what: String,
    },
    /// Data left under a collected checkpoint long after any write in flight at the collection
    /// must have landed: no pass will ever find it.
    OrphanData {
        checkpoint: String,
        objects: usize,
        since_collected: Duration,
    },
}

impl Violation {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Violation::CollectedWhileValid { .. } => "collected-while-valid",
            Violation::CompletedAndCollected { .. } => "completed-and-collected",
            Violation::AvailableCollected { .. } => "available-collected",
            Violation::OutsidePrefix { .. } => "outside-prefix",
            Violation::LostRevived { .. } => "lost-revived",
            Violation::CompletedDamaged { .. } => "completed-damaged",
            Violation::ZombieLate { .. } => "zombie-late",
            Violation::ZombieLeft { marker: true, .. } => "zombie-left",
            // A protecting index.json without a marker: no pass will ever find it.
            Violation::ZombieLeft { marker: false, .. } => "zombie-unmarked",
            Violation::LeaseDeletedWhileValid { .. } => "lease-deleted-while-valid",
            Violation::OrphanData { .. } => "orphan-data",
            Violation::RemovalUndone { .. } => "removal-undone",
            Violation::RetiredEarly { .. } => "retired-early",
            Violation::RetirementUnfinished { .. } => "retirement-unfinished",
        }
    }

    pub(crate) fn is_safety(&self) -> bool {
        !matches!(
            self,
            Violation::ZombieLate { .. }
                | Violation::ZombieLeft { .. }
                | Violation::OrphanData { .. }
                | Violation::RetirementUnfinished { .. }
        )
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {self:?}", self.kind())
    }
}

// ---- shared state of one run ---------------------------------------------------------------

#[derive(Debug)]
pub(crate) struct OwnerRec {
    pub(crate) lease: Option<OwnerLease>,
    pub(crate) ctl: Arc<Ctl>,
    pub(crate) crashed_at: Option<Duration>,
    pub(crate) seen_final: bool,
}

/// A violation whose root cause is known: counted, for the regression test of the simulation's
/// first two findings (`known_findings_are_fixed`). Both are fixed; they are violations too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Known {
    /// `OwnerLease::release` sent its DELETE, which landed, but the lease stays `Held` until the
    /// answer arrives — and for good if the answer is an error (or never comes: a crash): the
    /// lease object is gone while `check_validity()` is still true, and the GC collects the
    /// owner's checkpoints as those of a missing lease meanwhile.
    ReleaseAmbiguous,
    /// `Checkpoint::create`'s `index.json` write, sent while the lease was valid, landed after
    /// the GC had collected the checkpoint: a `protecting` index.json with no marker, which no
    /// GC pass ever finds.
    IndexAfterCollection,
    /// A restore brought a completed checkpoint's marker back and pruned its decision while a
    /// collector was between its read of the checkpoint (then protecting) and its decision:
    /// the decision is the fence, and a restore that removes it is outside what the protocol
    /// guards (RELIABILITY.md, "Not covered"). Counted, not failed on.
    RestoredDecision,
    /// A collector whose first readings after a start were wrong (ahead) for a moment compared
    /// a second wrong reading with the first, found them consistent, and retired a failed
    /// checkpoint early by as much: two readings that agree are the store's time (RELIABILITY.md,
    /// "Not covered"). Collection is held by the first reading's floor; a retention is not.
    RetiredOnWrongReadings,
    /// A torn `index.json` the operator's `checkpoint resolve` had not resolved by the end: it
    /// waits as a pass would (an owner missing for the store's longest retry budget where its
    /// declarations cannot be read). Its zombie is counted, not failed on: the GC never acts on
    /// a record it cannot read.
    TornUnresolved,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) owners: BTreeMap<String, OwnerRec>,
    /// Owners that called `release` (whatever its outcome).
    pub(crate) releasing: BTreeSet<String>,
    pub(crate) known: BTreeSet<(Known, String)>,
    /// Zombie checkpoints of crashed owners: (owner, crash instant, checkpoint ids).
    pub(crate) zombies: Vec<(String, Duration, BTreeSet<String>)>,
    pub(crate) completed: BTreeMap<String, (Status, Vec<String>)>,
    pub(crate) collected: BTreeMap<String, Duration>,
    /// The last decision or deletion of the GC on each collected checkpoint.
    pub(crate) gc_touched: BTreeMap<String, Duration>,
    /// The last write of each checkpoint's index.json: after its owner crashed, the GC
    /// finishing the owner's decision (a repair).
    pub(crate) index_written: BTreeMap<String, Duration>,
    pub(crate) violations: Vec<Violation>,
    /// Checkpoints an operator's `checkpoint delete` removed, or may have begun to.
    pub(crate) removed: BTreeMap<String, Removed>,
    /// When each failed checkpoint's `index/failed/` entry was created (world time), with the
    /// store clock's forward jumps so far.
    pub(crate) failed_at: BTreeMap<String, (Duration, Duration)>,
    /// Checkpoints whose `index.json` the resolver tore and has not resolved yet.
    pub(crate) torn: BTreeSet<String>,
    /// When collectors' readings came back wrong (ahead), and by how much.
    pub(crate) ahead_at: Vec<(Duration, Duration)>,
    /// Completed checkpoints a restore gave their marker back and took their decision from.
    pub(crate) restored: BTreeSet<String>,
    /// Failed checkpoints a pass began to retire, and when (world time).
    pub(crate) retiring: BTreeMap<String, Duration>,
    pub(crate) trace: Vec<String>,
    pub(crate) created: u64,
    pub(crate) fenced: u64,
    pub(crate) lost: u64,
    pub(crate) pauses: u64,
    /// Pauses of the collectors, drawn at their request points.
    pub(crate) gc_pauses: u64,
    /// Creates retried by an owner after a failure (the first attempt may have landed).
    pub(crate) create_retries: u64,
    /// Retried creates answered "exists": the owner's own earlier attempt had landed.
    pub(crate) create_ambiguous: u64,
}

/// Everything the tasks of one run share.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) world: SimClock,
    pub(crate) sim: SimStore,
    pub(crate) faults: FailingStore<SimStore>,
    pub(crate) reg: Mutex<Registry>,
    pub(crate) activity: AtomicU64,
    /// Lagging probe reads are on: a read-back of a store-clock probe key returns the version
    /// before the one just written (see `Port`).
    pub(crate) probe_lag: AtomicBool,
    /// Per probe key, the version before its latest write, while lagging probe reads are on.
    pub(crate) probe_before: Mutex<BTreeMap<Path, ObjectMeta>>,
    pub(crate) probe_lag_reads: AtomicU64,
    /// While not zero, every collector's reading of the store's clock comes back this many ms
    /// ahead (a reading that is wrong once; owners' stamps are the store's own).
    pub(crate) probe_ahead: AtomicU64,
    /// Owners of different windows and declared retry budgets, on a bank whose create-if-absent
    /// the collectors' rules take as timing only (a `swift://` label): each owner is judged by
    /// its own rule (c). `None`: every owner has the model's windows, on `sim://`. The value
    /// seeds each owner's draw.
    pub(crate) varied: Option<u64>,
    /// `gc.keep_failed_for` of every collector of the run (`None`: failed checkpoints are kept).
    pub(crate) keep_failed: Option<Duration>,
    /// The store's clock, for the size of its forward jumps.
    pub(crate) store_clock: StoreClock,
}

impl World {
    /// How much longer than the model's bound a crashed owner's zombies may take: its own
    /// expire window and the grace its rule (c) asks, past the model's.
    pub(crate) fn owner_extra(&self, owner: &str) -> Duration {
        if self.varied.is_none() {
            return Duration::ZERO;
        }
        let Some(lease) = self.reg().owners.get(owner).and_then(|o| o.lease.clone()) else {
            return Duration::ZERO;
        };
        let w = lease.windows();
        let rule = banklease::config::swift_rule(
            lease.bank().retry_budget(),
            w.expire_window,
            w.validity_window,
            MARGIN,
        );
        w.expire_window.saturating_sub(EXPIRE) + rule.shortest_grace.saturating_sub(GRACE)
    }

    pub(crate) fn now(&self) -> Duration {
        self.world.elapsed()
    }

    pub(crate) fn reg(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.reg.lock().expect("registry poisoned")
    }

    pub(crate) fn trace(&self, line: impl fmt::Display) {
        let now = self.now();
        self.reg()
            .trace
            .push(format!("{:>6}ms {line}", now.as_millis()));
    }

    pub(crate) fn violate(&self, v: Violation) {
        self.trace(format_args!("VIOLATION {v}"));
        self.reg().violations.push(v);
    }

    pub(crate) fn bump(&self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn activity(&self) -> u64 {
        self.activity.load(Ordering::Relaxed) + self.sim.requests()
    }
}

// ---- the store observer: judges each collection at the instant it takes effect --------------

pub(crate) fn checkpoint_of(path: &Path) -> Option<String> {
    let mut parts = path.parts();
    if parts.next()?.as_ref() != PREFIX {
        return None;
    }
    match parts.next()?.as_ref() {
        "checkpoints" | "decisions" => Some(parts.next()?.as_ref().to_owned()),
        _ => None,
    }
}

pub(crate) fn owner_of_checkpoint(id: &str) -> String {
    id.split('-').next().unwrap_or_default().to_owned()
}

pub(crate) fn observe(world: &World, m: &Mutation<'_>, view: &StoreView<'_>) {
    world.bump();
    let path = m.path.as_ref();
    if !in_prefix(m.path) {
        world.violate(Violation::OutsidePrefix {
            path: path.to_owned(),
            by: "a store mutation".to_owned(),
        });
        return;
    }
    if let Some(owner) = path.strip_prefix(&format!("{PREFIX}/leases/")) {
        observe_lease(world, m, owner);
        return;
    }
    if let Some(id) = path.strip_prefix(&format!("{PREFIX}/index/failed/")) {
        if m.kind == MutationKind::Create {
            let at = (world.now(), world.store_clock.jumped());
            world.reg().failed_at.entry(id.to_owned()).or_insert(at);
        }
        return;
    }
    let Some(id) = checkpoint_of(m.path) else {
        return;
    };
    observe_retirement(world, m, &id);
    // An operator's removal (and a pass finishing one it began) is judged at the end
    // (`check_removals`), not as a collection.
    if caller().is_some_and(|c| c.starts_with("operator")) {
        return;
    }
    let removing = view
        .get(&Path::from(index_path_str(&id).as_str()))
        .and_then(|b| serde_json::from_slice::<CheckpointRecord>(b).ok())
        .is_some_and(|r| r.removal.is_some());
    // A removed (or being removed) checkpoint is no longer the owner's completed one: what a
    // pass does to it (finishing the removal, a stray marker's decision) is no collection.
    if removing {
        return;
    }
    let is_decision = path.starts_with(&format!("{PREFIX}/decisions/"));
    if matches!(m.kind, MutationKind::Overwrite | MutationKind::Update)
        && path == index_path_str(&id)
    {
        let now = world.now();
        let mut reg = world.reg();
        reg.index_written.insert(id.clone(), now);
        // The GC's tombstone ends (this attempt at) a collection.
        if reg.collected.contains_key(&id) && caller().is_some_and(|c| c.starts_with("gc")) {
            reg.gc_touched.insert(id.clone(), now);
        }
    }
    let how = match (m.kind, is_decision) {
        // The GC's decision: the instant of collection.
        (MutationKind::Create, true) => {
            let decision: Option<Decision> = m.data.and_then(|d| serde_json::from_slice(d).ok());
            match decision {
                Some(d) if d.by == Decider::Gc => "gc decision",
                _ => return,
            }
        }
        // Only a GC deletes anything under checkpoints/.
        (MutationKind::Delete, false) => "gc deletion",
        _ => return,
    };
    let owner = owner_of_checkpoint(&id);
    let (remaining, state) = {
        let reg = world.reg();
        match reg.owners.get(&owner).and_then(|o| o.lease.clone()) {
            Some(lease) => (lease.remaining(), format!("{:?}", short_state(&lease))),
            None => (Duration::ZERO, "never acquired".to_owned()),
        }
    };
    let lease_gone = view
        .get(&Path::from(format!("{PREFIX}/leases/{owner}")))
        .is_none();
    if remaining > Duration::ZERO && lease_gone && world.reg().releasing.contains(&owner) {
        world.trace(format_args!(
            "KNOWN release-ambiguous: {id} collected, {owner} still holds {remaining:?}"
        ));
        world
            .reg()
            .known
            .insert((Known::ReleaseAmbiguous, format!("{owner}/{id}")));
    }
    // A known finding is still a violation: the findings are fixed, and the classification
    // must not hide a new cause of the same symptom.
    if remaining > Duration::ZERO {
        world.violate(Violation::CollectedWhileValid {
            checkpoint: id.clone(),
            owner: owner.clone(),
            remaining,
            how,
        });
    }
    {
        // What the checkpoint was when the GC decided it or deleted part of it: only a
        // protecting checkpoint may be collected.
        let index = index_path_str(&id);
        let status = if path == index {
            m.previous
        } else {
            view.get(&Path::from(index.as_str()))
        };
        let status = status
            .and_then(|b| serde_json::from_slice::<CheckpointRecord>(b).ok())
            .map(|r| r.status);
        let owner_decided = view
            .get(&Path::from(format!("{PREFIX}/decisions/{id}")))
            .and_then(|b| serde_json::from_slice::<Decision>(b).ok())
            .is_some_and(|d| d.by == Decider::Owner);
        let restored = world.reg().restored.contains(&id);
        if restored && matches!(status, Some(Status::Available | Status::Error)) {
            world.trace(format_args!(
                "KNOWN restored-decision: {id} ({status:?}) decided by a collector after a \
                 restore pruned its decision ({how})"
            ));
            world
                .reg()
                .known
                .insert((Known::RestoredDecision, id.clone()));
        } else if matches!(status, Some(Status::Available | Status::Error)) || owner_decided {
            world.violate(Violation::AvailableCollected {
                checkpoint: id.clone(),
                status: format!("{status:?} owner_decided={owner_decided} ({how})"),
            });
        }
    }
    let first = {
        let mut reg = world.reg();
        let now = world.now();
        reg.gc_touched.insert(id.clone(), now);
        let first = !reg.collected.contains_key(&id);
        if first {
            let now = world.now();
            reg.collected.insert(id.clone(), now);
        }
        first && reg.completed.contains_key(&id) && !reg.restored.contains(&id)
    };
    if first {
        world.violate(Violation::CompletedAndCollected {
            checkpoint: id.clone(),
        });
    }
    world.trace(format_args!(
        "collect {id} ({how} {}) owner={owner} remaining={remaining:?} state={state}",
        m.path
    ));
}

/// How long after a retirement began the end may find it unfinished: its pass may have been
/// stopped (a store error, a stale read), and the next ones finish it.
const RETIREMENT_FINISHED: Duration = Duration::from_millis(3_000);

/// A pass marking a failed checkpoint for retirement (its `index.json` given a removal by the
/// GC): not before `keep_failed_for` has passed since the checkpoint failed, less the steps
/// forward of the store's clock in between (a retention is measured on the store's clock; a
/// step no pass could confirm before the retirement shortens it, and is counted, not failed).
fn observe_retirement(world: &World, m: &Mutation<'_>, id: &str) {
    let Some(keep) = world.keep_failed else {
        return;
    };
    // A rewrite on the version read: If-Match, or an overwrite after a HEAD compare.
    if !matches!(m.kind, MutationKind::Overwrite | MutationKind::Update) {
        return;
    }
    if m.path.as_ref() != index_path_str(id) || !caller().is_some_and(|c| c.starts_with("gc")) {
        return;
    }
    let record = |b: Option<&bytes_alias::Bytes>| {
        b.and_then(|b| serde_json::from_slice::<CheckpointRecord>(b).ok())
    };
    let (Some(now), before) = (record(m.data), record(m.previous)) else {
        return;
    };
    let marks = now.removal.as_ref().is_some_and(|r| r.by == "gc")
        && before.is_none_or(|b| b.removal.is_none());
    if !marks {
        return;
    }
    let mut reg = world.reg();
    let now_world = world.now();
    reg.retiring.entry(id.to_owned()).or_insert(now_world);
    let Some((failed_at, jumped_then)) = reg.failed_at.get(id).copied() else {
        return;
    };
    let failed_for = world.now().saturating_sub(failed_at);
    let stepped = world.store_clock.jumped().saturating_sub(jumped_then);
    let ahead = reg
        .ahead_at
        .iter()
        .filter(|(at, _)| *at + INTERVAL >= failed_at)
        .map(|(_, by)| *by)
        .max()
        .unwrap_or_default();
    drop(reg);
    let why = now
        .removal
        .as_ref()
        .map(|r| r.reason.clone())
        .unwrap_or_default();
    world.trace(format_args!("retiring {id}: {why}"));
    if failed_for + stepped < keep && failed_for + stepped + ahead >= keep {
        world.trace(format_args!(
            "KNOWN retired-on-wrong-readings: {id} retired {failed_for:?} after it failed (kept \
             for {keep:?}); collectors' readings were {ahead:?} ahead meanwhile"
        ));
        world
            .reg()
            .known
            .insert((Known::RetiredOnWrongReadings, id.to_owned()));
    } else if failed_for + stepped < keep {
        world.violate(Violation::RetiredEarly {
            checkpoint: id.to_owned(),
            failed_for,
            stepped,
        });
    } else if failed_for < keep {
        world.trace(format_args!(
            "KNOWN retired-by-a-step: {id} retired {failed_for:?} after it failed (kept for \
             {keep:?}); the store's clock stepped {stepped:?} meanwhile"
        ));
    } else {
        world.trace(format_args!("retire {id} {failed_for:?} after it failed"));
    }
}

/// A mutation of `leases/<owner>`: only the owner itself may delete or replace its lease
/// while it is valid from its own point of view. (Its own release leaves `Held` before the
/// DELETE is sent, so its remaining time is then zero.)
fn observe_lease(world: &World, m: &Mutation<'_>, owner: &str) {
    let by = caller().unwrap_or_else(|| "the driver".to_owned());
    if by == owner {
        return;
    }
    let how = match m.kind {
        MutationKind::Delete => "deleted",
        MutationKind::Create => return,
        _ => "replaced",
    };
    let lease = world.reg().owners.get(owner).and_then(|o| o.lease.clone());
    let Some(lease) = lease else { return };
    let remaining = lease.remaining();
    if remaining > Duration::ZERO {
        world.violate(Violation::LeaseDeletedWhileValid {
            owner: owner.to_owned(),
            by: by.clone(),
            remaining,
            how,
        });
    }
    world.trace(format_args!(
        "lease of {owner} {how} by {by}; remaining={remaining:?} state={}",
        short_state(&lease)
    ));
}

pub(crate) fn index_path_str(id: &str) -> String {
    format!("{PREFIX}/checkpoints/{id}/index.json")
}

pub(crate) fn short_state(lease: &OwnerLease) -> &'static str {
    match &*lease.subscribe().borrow() {
        LeaseState::Held { .. } => "held",
        LeaseState::Lost { .. } => "lost",
        LeaseState::Released => "released",
    }
}

/// Checks made after every step; `liveness` is the bound a zombie must be decided within on a
/// healthy store.
pub(crate) fn sample(world: &World, healthy: bool, liveness: Duration, outcome: &mut Outcome) {
    let now = world.now();
    let leases: Vec<(String, OwnerLease)> = world
        .reg()
        .owners
        .iter()
        .filter_map(|(n, o)| o.lease.clone().map(|l| (n.clone(), l)))
        .collect();
    for (name, lease) in leases {
        note_state(world, &name, &lease.subscribe().borrow().clone());
    }
    // Liveness: each zombie of a crashed owner is collected (the GC's decision) or otherwise
    // resolved (its marker gone: an owner decision the GC finished) within the bound.
    let zombies = std::mem::take(&mut world.reg().zombies);
    let mut pending = Vec::new();
    for (owner, crashed_at, ids) in zombies {
        // An owner of longer windows or a longer rule (c) is measured against its own bound.
        let extra = world.owner_extra(&owner);
        let mut left = BTreeSet::new();
        for id in ids {
            let decided = {
                let reg = world.reg();
                let repaired = reg
                    .index_written
                    .get(&id)
                    .copied()
                    .filter(|at| *at > crashed_at);
                reg.collected.get(&id).copied().or(repaired)
            };
            let marker = Path::from(format!("{PREFIX}/index/protecting/{owner}/{id}"));
            match decided {
                Some(at) => {
                    let took = at.saturating_sub(crashed_at).saturating_sub(extra);
                    outcome.worst_liveness = outcome.worst_liveness.max(took);
                    outcome.over_asked += u64::from(took > LIVENESS_ASKED);
                    outcome.over_margin_bound += u64::from(took > LIVENESS_ASKED + MARGIN);
                }
                None if world.sim.peek(&marker).is_none() => {
                    let took = (now - crashed_at).saturating_sub(extra);
                    outcome.worst_liveness = outcome.worst_liveness.max(took);
                    outcome.over_asked += u64::from(took > LIVENESS_ASKED);
                    outcome.over_margin_bound += u64::from(took > LIVENESS_ASKED + MARGIN);
                }
                None => {
                    left.insert(id);
                }
            }
        }
        if left.is_empty() {
            continue;
        }
        if healthy && now > crashed_at + liveness + extra {
            world.violate(Violation::ZombieLate {
                owner,
                markers: left.len(),
                since_crash: now - crashed_at,
            });
        } else {
            pending.push((owner, crashed_at, left));
        }
    }
    world.reg().zombies.extend(pending);
}

/// Checks made once at the end, after the tail.
pub(crate) fn finish(
    world: &World,
    sentinels: &[(ObjectMeta, bytes_alias::Bytes)],
    outcome: &mut Outcome,
) {
    // Nothing outside the prefix changed.
    let now: BTreeMap<Path, (ObjectMeta, bytes_alias::Bytes)> = world
        .sim
        .objects(None)
        .into_iter()
        .filter(|(m, _)| !in_prefix(&m.location))
        .map(|(m, d)| (m.location.clone(), (m, d)))
        .collect();
    let before: BTreeMap<Path, (ObjectMeta, bytes_alias::Bytes)> = sentinels
        .iter()
        .map(|(m, d)| (m.location.clone(), (m.clone(), d.clone())))
        .collect();
    if now != before {
        world.violate(Violation::OutsidePrefix {
            path: format!("{:?}", now.keys().collect::<Vec<_>>()),
            by: "someone: the objects outside the prefix changed".to_owned(),
        });
    }
    let live: BTreeSet<String> = world
        .reg()
        .owners
        .iter()
        .filter(|(_, o)| {
            o.crashed_at.is_none()
                && o.lease
                    .as_ref()
                    .is_some_and(|l| matches!(l.state(), LeaseState::Held { .. }))
        })
        .map(|(n, _)| n.clone())
        .collect();
    // No zombie left: every marker belongs to a live owner, and every protecting index.json
    // has a marker (whoever its owner: without one no pass will ever find it) and belongs to a
    // live owner.
    let objects = world.sim.objects(Some(&Path::from(PREFIX)));
    let mut protecting = BTreeSet::new();
    for (meta, _) in &objects {
        let path = meta.location.as_ref();
        if let Some(rest) = path.strip_prefix(&format!("{PREFIX}/index/protecting/")) {
            let (owner, id) = rest.split_once('/').unwrap_or((rest, ""));
            if !live.contains(owner) && world.reg().torn.contains(id) {
                world.trace(format_args!(
                    "KNOWN torn-unresolved: {id}'s index.json is torn and not resolved yet"
                ));
                world
                    .reg()
                    .known
                    .insert((Known::TornUnresolved, id.to_owned()));
            } else if !live.contains(owner) {
                world.violate(Violation::ZombieLeft {
                    checkpoint: id.to_owned(),
                    owner: owner.to_owned(),
                    marker: true,
                });
            }
            protecting.insert(id.to_owned());
        }
    }
    for (meta, data) in &objects {
        let path = meta.location.as_ref();
        if path.ends_with("/index.json") {
            if let Ok(r) = serde_json::from_slice::<CheckpointRecord>(data) {
                let gc_decided = world
                    .sim
                    .peek(&Path::from(format!("{PREFIX}/decisions/{}", r.id)))
                    .and_then(|b| serde_json::from_slice::<Decision>(&b).ok())
                    .is_some_and(|d| d.by == Decider::Gc);
                if r.status == Status::Protecting
                    && !protecting.contains(r.id.as_str())
                    && gc_decided
                {
                    world.trace(format_args!(
                        "KNOWN index-after-collection: {} is protecting, has no marker, and \
                         the gc decided it",
                        r.id
                    ));
                    world
                        .reg()
                        .known
                        .insert((Known::IndexAfterCollection, r.id.to_string()));
                }
                if r.status == Status::Protecting
                    && (!protecting.contains(r.id.as_str()) || !live.contains(r.owner_id.as_str()))
                {
                    world.violate(Violation::ZombieLeft {
                        checkpoint: r.id.to_string(),
                        owner: r.owner_id.to_string(),
                        marker: protecting.contains(r.id.as_str()),
                    });
                }
            }
        }
    }
    // What an operator removed is a tombstone with its trail; every other completed
    // checkpoint is intact: its outcome, its decision, its data.
    let removed = check_removals(world);
    let completed = world.reg().completed.clone();
    // A restored checkpoint a collector decided is a known finding (`Known::RestoredDecision`).
    let known_restored: BTreeSet<String> = world
        .reg()
        .known
        .iter()
        .filter(|(k, _)| *k == Known::RestoredDecision)
        .map(|(_, id)| id.clone())
        .collect();
    for (id, (status, data)) in completed
        .iter()
        .filter(|(id, _)| !removed.contains(*id) && !known_restored.contains(*id))
    {
        let index = world
            .sim
            .peek(&Path::from(index_path_str(id)))
            .and_then(|b| serde_json::from_slice::<CheckpointRecord>(&b).ok());
        // Retired: only a failed checkpoint (its age checked when it was marked); a retirement
        // begun is finished by the next passes (a tombstone, no data) unless it began too close
        // to the end for one.
        if let Some((r, removal)) = index
            .as_ref()
            .and_then(|r| r.removal.as_ref().filter(|x| x.by == "gc").map(|x| (r, x)))
        {
            if *status != Status::Error || removal.was != Status::Error {
                world.violate(Violation::CompletedDamaged {
                    checkpoint: id.clone(),
                    what: format!(
                        "retired by the gc as a failed checkpoint: it completed as {status:?}, \
                         the removal says it was {:?}",
                        removal.was
                    ),
                });
            }
            let data_left = world
                .sim
                .objects(Some(&Path::from(format!("{PREFIX}/checkpoints/{id}/data"))))
                .len();
            let begun = world.reg().retiring.get(id.as_str()).copied();
            let finished = r.status == Status::Deleted && data_left == 0;
            if !finished && begun.is_none_or(|at| at + RETIREMENT_FINISHED < world.now()) {
                world.violate(Violation::RetirementUnfinished {
                    checkpoint: id.clone(),
                    what: format!(
                        "index.json says {:?} with {data_left} data object(s), begun at {begun:?}",
                        r.status
                    ),
                });
            }
            continue;
        }
        if index.as_ref().map(|r| r.status) != Some(*status) {
            world.violate(Violation::CompletedDamaged {
                checkpoint: id.clone(),
                what: format!("index.json says {:?}", index.map(|r| r.status)),
            });
        }
        for d in data {
            let p = Path::from(format!("{PREFIX}/checkpoints/{id}/data/{d}"));
            if world.sim.peek(&p).is_none() {
                world.violate(Violation::CompletedDamaged {
                    checkpoint: id.clone(),
                    what: format!("data `{d}` is gone"),
                });
            }
        }
    }
    // Late data: every collected checkpoint's data prefix is swept once more after any write
    // in flight at the collection has landed. Data found under one whose collection ended
    // longer ago than that bound is a leak no pass will find; younger ones are only counted.
    let end = world.now();
    let touched = world.reg().gc_touched.clone();
    for (id, at) in &touched {
        let prefix = Path::from(format!("{PREFIX}/checkpoints/{id}/data"));
        let left = world.sim.objects(Some(&prefix)).len();
        outcome.orphan_data += left as u64;
        // A torn record the operator's resolve had not finished with: no pass acts on it (its
        // decision may be taken, its tombstone not yet written); counted, not failed on.
        if left > 0 && world.reg().torn.contains(id) {
            world
                .reg()
                .known
                .insert((Known::TornUnresolved, id.clone()));
            continue;
        }
        if left > 0 && end.saturating_sub(*at) > ORPHAN_BOUND {
            world.violate(Violation::OrphanData {
                checkpoint: id.clone(),
                objects: left,
                since_collected: end - *at,
            });
        }
    }
    let reg = world.reg();
    outcome.violations = reg.violations.clone();
    outcome.created = reg.created;
    outcome.completed = reg.completed.len() as u64;
    outcome.fenced = reg.fenced;
    outcome.lost = reg.lost;
    outcome.collected = reg.collected.len() as u64;
    outcome.pauses = reg.pauses;
    outcome.gc_pauses = reg.gc_pauses;
    outcome.create_retries = reg.create_retries;
    outcome.create_ambiguous = reg.create_ambiguous;
    for (k, _) in &reg.known {
        *outcome.known.entry(*k).or_default() += 1;
    }
    outcome.trace = reg.trace.clone();
}
