//! The participants: owners running the real library, and collectors (real and broken).

use super::*;
use banklease_testkit::cid;

// ---- owners --------------------------------------------------------------------------------

pub(crate) struct OwnerPlan {
    pub(crate) index: usize,
    pub(crate) checkpoints: u64,
    pub(crate) rng: Rng,
    pub(crate) clock: SimClock,
}

pub(crate) fn owner_name(index: usize) -> String {
    format!("o{index:03}")
}

pub(crate) fn classify(e: &Error) -> &'static str {
    match e {
        Error::LeaseLost { .. } => "lost",
        Error::ValidityTooShort { .. } => "validity",
        Error::Fenced { .. } => "fenced",
        Error::Store { .. } => "store",
        Error::CheckpointExists { .. } => "exists",
        Error::CheckpointAmbiguous { .. } => "ambiguous",
        Error::LeaseExists { .. } => "lease-exists",
        _ => "other",
    }
}

pub(crate) async fn owner_main(world: Arc<World>, ctl: Arc<Ctl>, plan: OwnerPlan) {
    let OwnerPlan {
        index,
        checkpoints,
        mut rng,
        clock,
    } = plan;
    let name = owner_name(index);
    let mut bank = port_bank(&world, &ctl);
    let shared: SharedClock = Arc::new(clock.clone());
    let mut windows = LeaseWindows::new(RENEW, EXPIRE, VALIDITY).unwrap();
    if let Some(seed) = world.varied {
        // Each owner its own windows and client limits (a declared budget of 225 ms or 675 ms:
        // 100 ms or 300 ms requests and retries), from a draw of its own.
        let mut vrng = Rng::new(seed ^ index as u64);
        let ms = Duration::from_millis;
        windows = match vrng.range(0..3) {
            0 => LeaseWindows::new(RENEW, EXPIRE, VALIDITY),
            1 => LeaseWindows::new(ms(200), ms(800), ms(150)),
            _ => LeaseWindows::new(ms(300), ms(1_400), ms(100)),
        }
        .unwrap();
        let limit = ms(if vrng.chance(0.5) { 100 } else { 300 });
        bank = bank.with_declared_limits(banklease::config::ClientLimits {
            request_timeout: Some(limit),
            retry_timeout: Some(limit),
        });
        world.trace(format_args!(
            "{name} windows {:?}/{:?}/{:?}, declared budget {:?}",
            windows.renew_window,
            windows.expire_window,
            windows.validity_window,
            bank.retry_budget()
        ));
    }
    let id = OwnerId::parse(&name).unwrap();
    let mut lease = None;
    for attempt in 0..3 {
        match OwnerLease::acquire(&bank, id.clone(), windows, shared.clone()).await {
            Ok(l) => {
                lease = Some(l);
                break;
            }
            Err(e) => {
                world.trace(format_args!("{name} acquire failed ({})", classify(&e)));
                if !e.is_transient() || attempt == 2 {
                    return;
                }
                clock.sleep(rng.ms(20..80)).await;
            }
        }
    }
    let Some(lease) = lease else { return };
    world.trace(format_args!("{name} acquired"));
    {
        let mut reg = world.reg();
        if let Some(o) = reg.owners.get_mut(&name) {
            o.lease = Some(lease.clone());
        }
    }
    // Watch every published state: after Lost or Released, never Held again.
    tokio::spawn(watch_states(world.clone(), name.clone(), lease.clone()));
    let keeper = lease.spawn_keeper(Jitter::seeded(rng.next()), 0.1);

    'work: for k in 0..checkpoints {
        let cp_id = format!("{name}-c{k}");
        // Wait (bounded) for enough validity to start.
        for _ in 0..20 {
            if lease.check_validity() || !matches!(lease.state(), LeaseState::Held { .. }) {
                break;
            }
            clock.sleep(Duration::from_millis(20)).await;
        }
        let Some(cp) = create_checkpoint(&world, &name, &lease, &cp_id, &clock, &mut rng).await
        else {
            if !matches!(lease.state(), LeaseState::Held { .. }) {
                break 'work;
            }
            continue;
        };
        let mut written = Vec::new();
        for d in 0..rng.range(0..4) {
            clock.sleep(rng.ms(5..80)).await;
            let data = format!("d{d}");
            match cp
                .put_data(&data, PutPayload::from(format!("{cp_id}/{d}").into_bytes()))
                .await
            {
                Ok(()) => written.push(data),
                Err(e) => {
                    world.trace(format_args!(
                        "{name} put_data {cp_id}/{data} failed ({})",
                        classify(&e)
                    ));
                    if matches!(e, Error::LeaseLost { .. }) {
                        break 'work;
                    }
                }
            }
        }
        clock.sleep(rng.ms(5..150)).await;
        let roll = rng.unit();
        if roll < 0.05 {
            // Left protecting: a zombie once this owner is gone.
            world.trace(format_args!("{name} leaves {cp_id} protecting"));
            continue;
        }
        let outcome = if roll < 0.85 {
            Status::Available
        } else {
            Status::Error
        };
        for _ in 0..3 {
            match cp.complete(outcome).await {
                Ok(()) => {
                    world.trace(format_args!("{name} completed {cp_id} as {outcome}"));
                    let collected = {
                        let mut reg = world.reg();
                        reg.completed
                            .insert(cp_id.clone(), (outcome, written.clone()));
                        reg.collected.contains_key(&cp_id)
                    };
                    if collected {
                        world.violate(Violation::CompletedAndCollected {
                            checkpoint: cp_id.clone(),
                        });
                    }
                    break;
                }
                Err(e) => {
                    world.trace(format_args!(
                        "{name} complete {cp_id} failed ({})",
                        classify(&e)
                    ));
                    match e {
                        Error::Fenced { .. } => {
                            world.reg().fenced += 1;
                            break;
                        }
                        Error::LeaseLost { .. } => break 'work,
                        Error::ValidityTooShort { .. } => break,
                        _ => clock.sleep(rng.ms(5..50)).await,
                    }
                }
            }
        }
        clock.sleep(rng.ms(5..200)).await;
    }
    if !matches!(lease.state(), LeaseState::Held { .. }) {
        world.reg().lost += 1;
        world.trace(format_args!("{name} lost its lease; gives up"));
    }
    // Let a keeper woken in this same instant run first: releasing (which cancels the keeper)
    // while its renewal timer is also due would leave the choice to `tokio::select!`, which
    // picks at random, and the seed would not replay.
    tokio::task::yield_now().await;
    world.reg().releasing.insert(name.clone());
    match keeper.release().await {
        Ok(()) => world.trace(format_args!("{name} released")),
        Err(e) => {
            world.trace(format_args!("{name} release failed ({})", classify(&e)));
        }
    }
}

/// `Checkpoint::create`, retried like a service would on a transient error: the first
/// attempt may have landed (an ambiguous answer), so a retry may meet the owner's own
/// `index.json`.
async fn create_checkpoint(
    world: &World,
    name: &str,
    lease: &OwnerLease,
    cp_id: &str,
    clock: &SimClock,
    rng: &mut Rng,
) -> Option<Checkpoint> {
    for attempt in 0..3 {
        let e = match Checkpoint::create(lease, &cid(cp_id)).await {
            Ok(cp) => {
                world.reg().created += 1;
                world.trace(format_args!("{name} created {cp_id}"));
                return Some(cp);
            }
            Err(e) => e,
        };
        world.trace(format_args!(
            "{name} create {cp_id} failed ({})",
            classify(&e)
        ));
        match e {
            Error::Store { .. } if e.is_transient() && attempt < 2 => {
                world.reg().create_retries += 1;
                clock.sleep(rng.ms(5..50)).await;
            }
            Error::CheckpointExists { .. } if attempt > 0 => {
                // Our own earlier attempt landed: take the checkpoint up again.
                world.reg().create_ambiguous += 1;
                return adopt_checkpoint(world, name, lease, cp_id, clock, rng).await;
            }
            Error::CheckpointAmbiguous { .. } => {
                // The read-back could not tell whose index.json it met: maybe ours.
                world.reg().create_ambiguous += 1;
                return adopt_checkpoint(world, name, lease, cp_id, clock, rng).await;
            }
            _ => return None,
        }
    }
    None
}

/// `Checkpoint::adopt` after an ambiguous create, retried on transient errors. The checkpoint
/// (and its marker) is otherwise left protecting, for the GC once this owner is gone.
async fn adopt_checkpoint(
    world: &World,
    name: &str,
    lease: &OwnerLease,
    cp_id: &str,
    clock: &SimClock,
    rng: &mut Rng,
) -> Option<Checkpoint> {
    for _ in 0..3 {
        match Checkpoint::adopt(lease, &cid(cp_id)).await {
            Ok(cp) => {
                world.reg().created += 1;
                world.trace(format_args!("{name} adopted {cp_id}"));
                return Some(cp);
            }
            Err(e) => {
                world.trace(format_args!(
                    "{name} adopt {cp_id} failed ({})",
                    classify(&e)
                ));
                if !e.is_transient() {
                    return None;
                }
                clock.sleep(rng.ms(5..50)).await;
            }
        }
    }
    None
}

pub(crate) async fn watch_states(world: Arc<World>, name: String, lease: OwnerLease) {
    let mut rx = lease.subscribe();
    loop {
        note_state(&world, &name, &rx.borrow_and_update().clone());
        if rx.changed().await.is_err() {
            return;
        }
    }
}

pub(crate) fn note_state(world: &World, name: &str, state: &LeaseState) {
    let revived = {
        let mut reg = world.reg();
        let Some(o) = reg.owners.get_mut(name) else {
            return;
        };
        match state {
            LeaseState::Held { .. } => o.seen_final,
            _ => {
                o.seen_final = true;
                false
            }
        }
    };
    if revived {
        world.violate(Violation::LostRevived {
            owner: name.to_owned(),
        });
    }
}

// ---- collectors ----------------------------------------------------------------------------

/// A bare collector's options; `read_staleness` is the run's replica-lag bound.
pub(crate) fn gc_options(rng: &mut Rng, read_staleness: Duration) -> GcOptions {
    GcOptions::builder()
        .grace(GRACE)
        .skew_margin(MARGIN)
        .concurrency(rng.range(1..5) as usize)
        .max_deletions(0)
        .brake_ratio(1.0)
        .brake_min(1_000_000)
        .dry_run(false)
        .force(false)
        .reap_leases(true)
        .read_staleness(read_staleness)
        .late_write_window(LATE_WRITE_WINDOW)
        // As the daemon: a step before this collector's first reading holds it back a window.
        .floor_at_first_reading(true)
        .build()
}

/// A daemon's configuration; `read_staleness` is the run's replica-lag bound, `keep_failed`
/// its `gc.keep_failed_for`.
pub(crate) fn daemon_config(
    concurrency: usize,
    read_staleness: Duration,
    keep_failed: Option<Duration>,
) -> Config {
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    let env = [
        (
            "BANKLEASE_GC__KEEP_FAILED_FOR",
            keep_failed.map_or_else(|| "never".to_owned(), ms),
        ),
        ("BANKLEASE_GC__READ_STALENESS", ms(read_staleness)),
        ("BANKLEASE_GC__LATE_WRITE_WINDOW", ms(LATE_WRITE_WINDOW)),
        ("BANKLEASE_GC__LEASE_RENEW_WINDOW", ms(GC_RENEW)),
        ("BANKLEASE_GC__LEASE_EXPIRE_WINDOW", ms(GC_EXPIRE)),
        ("BANKLEASE_GC__LEASE_VALIDITY_WINDOW", ms(GC_VALIDITY)),
        ("BANKLEASE_GC__INTERVAL", ms(INTERVAL)),
        ("BANKLEASE_GC__GRACE", ms(GRACE)),
        ("BANKLEASE_GC__CONCURRENCY", concurrency.to_string()),
        ("BANKLEASE_GC__BRAKE_MIN", "1000000".to_owned()),
        ("BANKLEASE_LEASE__SKEW_MARGIN", ms(MARGIN)),
        // The windows the simulation's owners use: the configuration is refused if its owners'
        // expire window could drift by more than margin + grace (the default 10m would).
        ("BANKLEASE_LEASE__RENEW_WINDOW", ms(RENEW)),
        ("BANKLEASE_LEASE__EXPIRE_WINDOW", ms(EXPIRE)),
        ("BANKLEASE_LEASE__VALIDITY_WINDOW", ms(VALIDITY)),
        ("BANKLEASE_LEASE__RENEW_JITTER", "0".to_owned()),
        ("BANKLEASE_LEASE__OWNER_ID_SCHEME", "uuid".to_owned()),
    ]
    .map(|(k, v)| (k.to_owned(), v));
    Config::load_from(None, env).expect("simulation config")
}

/// A deliberately broken collector, to prove the checker catches what it must. Every kind but
/// `BrokenOwnClock` judges a lease on the store clock *at the instant its answer arrived* (the
/// rule it breaks: an answer served at `t` and received at `t + D` is judged as if the lease
/// were `D` older), and every kind but `BrokenJudgeAtReceipt` deletes `index.json` instead of
/// leaving a tombstone and never sweeps late data.
/// A broken collector's decision on checkpoint `id` of `owner`: `true` when the GC holds it
/// (won now or before); `false` when the owner decided, whose move is then finished.
pub(crate) async fn gc_decides(
    bank: &Bank,
    clock: &SimClock,
    owner: &OwnerId,
    id: &banklease::CheckpointId,
    token: &str,
) -> banklease::Result<bool> {
    let decision = Decision {
        format: CHECKPOINT_FORMAT,
        rebuilt: None,
        checkpoint_id: id.clone(),
        owner_id: owner.clone(),
        by: Decider::Gc,
        outcome: Status::Deleted,
        token: format!("{token}-{id}"),
        decided_at: clock.system_now().into(),
        evidence: None,
    };
    match decide(bank, decision).await? {
        Decided::Won(_) => Ok(true),
        Decided::Lost(d) if d.by == Decider::Gc => Ok(true),
        Decided::Lost(d) => {
            finish_owner_decision(bank, &d).await?;
            Ok(false)
        }
    }
}

#[derive(Debug)]
pub(crate) struct Broken {
    pub(crate) bank: Bank,
    pub(crate) clock: SimClock,
    pub(crate) kind: GcKind,
}

impl Broken {
    pub(crate) async fn pass(&self) -> banklease::Result<()> {
        let shared: SharedClock = Arc::new(self.clock.clone());
        let store_time = self.bank.store_time(&shared).await?;
        if self.kind == GcKind::BrokenReaper {
            return self.reap(&store_time).await;
        }
        let markers: Vec<ObjectMeta> = self
            .bank
            .store()
            .list(Some(&Prefix::Protecting.path(&self.bank)))
            .try_collect()
            .await
            .map_err(|e| banklease::Error::Store {
                op: "list",
                path: PREFIX.into(),
                source: e,
            })?;
        let mut by_owner: BTreeMap<OwnerId, Vec<String>> = BTreeMap::new();
        for m in &markers {
            if let Some((owner, id)) = parse_marker(&self.bank, &m.location) {
                by_owner.entry(owner).or_default().push(id.to_string());
            }
        }
        for (owner, ids) in by_owner {
            let Ok(Some((record, meta))) = banklease::lease::read_lease(&self.bank, &owner).await
            else {
                continue;
            };
            let dead = match self.kind {
                GcKind::BrokenOwnClock => {
                    // BROKEN: the lease's store stamp against this host's wall clock.
                    let now: chrono::DateTime<chrono::Utc> = self.clock.system_now().into();
                    let age = (now - meta.last_modified).to_std().unwrap_or_default();
                    age >= record.expire_window() + MARGIN + GRACE
                }
                _ => {
                    let store_now = store_time.at_instant(self.clock.now());
                    matches!(judge(record, meta.last_modified, store_now, MARGIN),
                        LeaseView::Expired { since, .. } if since >= GRACE)
                }
            };
            if !dead {
                continue;
            }
            for id in ids {
                if self.kind != GcKind::BrokenNoDecision
                    && !gc_decides(&self.bank, &self.clock, &owner, &cid(&id), "broken").await?
                {
                    continue;
                }
                // BROKEN (NoDecision): straight to the deletions.
                let data: Vec<ObjectMeta> = self
                    .bank
                    .store()
                    .list(Some(&Prefix::Data(&cid(&id)).path(&self.bank)))
                    .try_collect()
                    .await
                    .unwrap_or_default();
                for d in data {
                    let _ = self.bank.store().delete(&d.location).await;
                }
                if self.kind == GcKind::BrokenJudgeAtReceipt {
                    let now = self.clock.system_now().into();
                    write_tombstone(&self.bank, &cid(&id), &owner, None, now).await?;
                } else {
                    // BROKEN: no tombstone; a paused owner's late create lands as a zombie.
                    let _ = self
                        .bank
                        .store()
                        .delete(&Key::Index(cid(&id)).path(&self.bank))
                        .await;
                }
                let _ = self
                    .bank
                    .store()
                    .delete(&Key::marker(&owner, &cid(&id)).path(&self.bank))
                    .await;
            }
        }
        Ok(())
    }

    /// BROKEN (`BrokenReaper`): delete every lease judged expired past grace, on the store
    /// clock at the instant the read's answer arrived.
    async fn reap(&self, store_time: &banklease::clock::StoreTime) -> banklease::Result<()> {
        let prefix = self.bank.path(&["leases"]);
        let leases: Vec<ObjectMeta> = self
            .bank
            .store()
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| banklease::Error::Store {
                op: "list",
                path: prefix.clone(),
                source: e,
            })?;
        for meta in leases {
            let Some(owner) = meta
                .location
                .filename()
                .and_then(|f| OwnerId::parse(f).ok())
            else {
                continue;
            };
            let Ok(Some((record, meta))) = banklease::lease::read_lease(&self.bank, &owner).await
            else {
                continue;
            };
            let store_now = store_time.at_instant(self.clock.now());
            if matches!(judge(record, meta.last_modified, store_now, MARGIN),
                LeaseView::Expired { since, .. } if since >= GRACE)
            {
                let _ = self.bank.store().delete(&meta.location).await;
            }
        }
        Ok(())
    }
}

pub(crate) async fn collector_loop(
    world: Arc<World>,
    name: String,
    collector: Collector,
    clock: SimClock,
) {
    loop {
        match collector.run_pass().await {
            Ok(r) => {
                for n in r
                    .checkpoints
                    .iter()
                    .filter(|n| n.action == banklease_gc::Action::Skip)
                {
                    world.trace(format_args!(
                        "{name} skipped {}: {}",
                        n.checkpoint_id, n.reason
                    ));
                }
                if r.collected + r.repaired + r.leases_reaped > 0 {
                    world.trace(format_args!(
                        "{name} pass: collected={} repaired={} reaped={} errors={}",
                        r.collected, r.repaired, r.leases_reaped, r.errors
                    ));
                }
            }
            Err(e) => world.trace(format_args!("{name} pass failed ({}): {e}", classify(&e))),
        }
        clock.sleep(INTERVAL).await;
    }
}

/// `banklease gc` run from cron every `INTERVAL`: a new collector for every pass, which knows
/// nothing of the one before but what the bank holds.
pub(crate) async fn one_shot_loop(
    world: Arc<World>,
    name: String,
    bank: Bank,
    clock: SimClock,
    options: GcOptions,
) {
    loop {
        let collector = Collector::new(bank.clone(), Arc::new(clock.clone()), options.clone());
        match collector.run_pass().await {
            Ok(r) => {
                for n in r
                    .checkpoints
                    .iter()
                    .filter(|n| n.action == banklease_gc::Action::Skip)
                {
                    world.trace(format_args!(
                        "{name} skipped {}: {}",
                        n.checkpoint_id, n.reason
                    ));
                }
                if r.collected + r.repaired + r.leases_reaped > 0 {
                    world.trace(format_args!(
                        "{name} one-shot pass: collected={} repaired={} reaped={} errors={}",
                        r.collected, r.repaired, r.leases_reaped, r.errors
                    ));
                }
            }
            Err(e) => world.trace(format_args!(
                "{name} one-shot pass failed ({}): {e}",
                classify(&e)
            )),
        }
        clock.sleep(INTERVAL).await;
    }
}

/// A daemon under a supervisor (systemd's `Restart=`): one that stops on an error (it refuses
/// to start when the bank's probe fails) is started again a little later.
pub(crate) async fn daemon_loop(
    world: Arc<World>,
    name: String,
    bank: Bank,
    clock: SimClock,
    config: Config,
) {
    loop {
        let daemon = Daemon::new(bank.clone(), Arc::new(clock.clone()), config.clone());
        if daemon.run(std::future::pending()).await.is_err() {
            world.trace(format_args!("{name} stopped on an error; restarting"));
        }
        clock.sleep(Duration::from_millis(300)).await;
    }
}

pub(crate) async fn broken_loop(world: Arc<World>, name: String, broken: Broken) {
    loop {
        if let Err(e) = broken.pass().await {
            world.trace(format_args!("{name} pass failed ({})", classify(&e)));
        }
        broken.clock.sleep(INTERVAL).await;
    }
}
