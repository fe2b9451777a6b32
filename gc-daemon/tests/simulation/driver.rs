//! One run: the driver that owns time, starts and perturbs the participants, and checks.

use super::*;

// ---- one run -------------------------------------------------------------------------------

/// Run seed `seed` with collector `kind`.
pub(crate) fn run(seed: u64, kind: GcKind) -> Outcome {
    run_with(seed, kind, env_faults())
}

/// Run seed `seed` with collector `kind` and only the new faults `only` names (all: `None`).
pub(crate) fn run_with(seed: u64, kind: GcKind, only: Only) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(simulate(seed, kind, only))
}

pub(crate) async fn simulate(seed: u64, kind: GcKind, only: Only) -> Outcome {
    let mut rng = Rng::new(seed);
    let healthy = rng.chance(0.35);
    let conditional = rng.chance(0.5);

    let world_clock = SimClock::new(Duration::ZERO);
    let skew = chrono::TimeDelta::milliseconds(rng.range(0..10_000) as i64 - 5_000);
    let store_clock = StoreClock::new(world_clock.clone()).with_skew(skew);
    let sim = SimStore::new(store_clock.clone());
    sim.refuse_conditional_update(!conditional);
    for s in SENTINELS {
        sim.put(&Path::from(s), PutPayload::from_static(b"sentinel"))
            .await
            .unwrap();
    }
    let sentinels: Vec<_> = sim.objects(None);
    // The bank is made (its descriptor written) before anything runs, as `banklease init`.
    banklease::layout::init(&Bank::from_store(
        Arc::new(sim.clone()),
        PREFIX,
        "sim://bank",
    ))
    .await
    .unwrap();
    let faults = FailingStore::new(sim.clone())
        .with_sleeping_clock(world_clock.clone())
        .with_seed(rng.next());
    let jitter = if healthy { 4 } else { 20 };
    for op in Op::ALL {
        faults.set_latency_jitter(op, Duration::from_millis(jitter));
    }
    if !healthy {
        for op in Op::ALL {
            faults.set_error_rate(op, Strike::Before, rng.unit() * 0.05);
            faults.set_error_rate(op, Strike::After, rng.unit() * 0.03);
            faults.set_timeout(op, Some((Duration::from_millis(150), rng.unit() * 0.02)));
        }
        if rng.chance(0.6) {
            faults.set_listing_lag(rng.ms(10..400));
        }
    }
    // The collector-side faults draw from their own generator: with them all off, a seed
    // runs as it did before they existed.
    let mut frng = Rng::new(seed ^ 0x00c0_11ec_7000_0011);
    let extra = Faults::draw(&mut frng, kind, healthy, only);
    extra.apply(&mut frng, &sim, &faults);

    let world = Arc::new(World {
        world: world_clock.clone(),
        sim: sim.clone(),
        faults: faults.clone(),
        reg: Mutex::new(Registry::default()),
        activity: AtomicU64::new(0),
        probe_lag: AtomicBool::new(false),
        probe_before: Mutex::default(),
        probe_lag_reads: AtomicU64::new(0),
        probe_ahead: AtomicU64::new(0),
        // Drawn from a generator of its own: the other draws of a seed stay what they were.
        varied: {
            let mut vrng = Rng::new(seed ^ 0x0000_0a7e_5b0d_9e75);
            vrng.chance(0.5).then(|| vrng.range(0..u64::MAX / 2))
        },
        // Retirement of failed checkpoints in half the runs, racing the passes' collections
        // and the operator's deletions (a generator of its own, as above).
        keep_failed: {
            let mut krng = Rng::new(seed ^ 0x0000_4ee9_fa11_ed00);
            let keep = krng.chance(0.5).then(|| krng.ms(500..4_000));
            match kind {
                GcKind::BrokenRetiresEarly => Some(krng.ms(1_000..4_000)),
                _ => keep,
            }
        },
        store_clock: store_clock.clone(),
    });
    {
        let w = world.clone();
        sim.set_observer(Some(Arc::new(
            move |m: &Mutation<'_>, v: &StoreView<'_>| observe(&w, m, v),
        )));
    }
    world.trace(format_args!(
        "seed={seed} kind={kind:?} healthy={healthy} conditional_update={conditional} \
         store_skew={skew} {extra} varied_owners={} keep_failed={:?}",
        world.varied.is_some(),
        world.keep_failed
    ));

    // The collectors.
    let mut gc_clocks: Vec<Drifting> = Vec::new();
    let mut gc_tasks = Vec::new();
    let mut gc_ctls = Vec::new();
    for i in 0..kind.collectors() {
        let head_start = rng.ms(0..5_000);
        let drifting = Drifting::new(&mut rng, head_start);
        let clock = drifting.clock.clone();
        gc_clocks.push(drifting);
        let name = format!("gc{i}");
        let ctl = Ctl::new(&name, true, &world);
        *ctl.random.lock().unwrap() = extra.gc_pauses(&mut frng);
        gc_ctls.push(ctl.clone());
        let bank = port_bank(&world, &ctl);
        let staleness = extra.read_staleness();
        let task = match kind {
            GcKind::Daemons | GcKind::SingleDaemon => {
                let concurrency = rng.range(1..5) as usize;
                let config = daemon_config(concurrency, staleness, world.keep_failed);
                tokio::spawn(daemon_loop(world.clone(), name, bank, clock, config))
            }
            GcKind::OneShot | GcKind::BrokenOneShotNoBootClock => {
                if kind == GcKind::OneShot {
                    clock.boot_as(&format!("sim-host-{name}"));
                }
                // As `banklease gc`: no floor at a first reading (it would collect nothing).
                let options = gc_options(&mut rng, staleness)
                    .to_builder()
                    .floor_at_first_reading(false)
                    .keep_failed_for(world.keep_failed)
                    .build();
                tokio::spawn(one_shot_loop(world.clone(), name, bank, clock, options))
            }
            GcKind::BrokenFloorFromStep => tokio::spawn(floor_from_step_loop(
                world.clone(),
                name,
                FloorFromStep::new(bank, clock),
            )),
            GcKind::BrokenBlindRewrite => {
                let options = gc_options(&mut rng, staleness)
                    .to_builder()
                    .keep_failed_for(world.keep_failed)
                    .build();
                let seed = orng_seed(seed, i);
                tokio::spawn(blind_rewrite_loop(
                    world.clone(),
                    name,
                    bank,
                    clock,
                    options,
                    seed,
                ))
            }
            GcKind::Collectors
            | GcKind::SingleCollector
            | GcKind::SuspendStopsOwnerClock
            | GcKind::BrokenRetiresEarly => {
                // The broken kind retires what it lists: the bank's retention is not its own.
                let keep = match kind {
                    GcKind::BrokenRetiresEarly => Some(Duration::ZERO),
                    _ => world.keep_failed,
                };
                let options = gc_options(&mut rng, staleness)
                    .to_builder()
                    .keep_failed_for(keep)
                    .build();
                let collector = Collector::new(bank, Arc::new(clock.clone()), options);
                tokio::spawn(collector_loop(world.clone(), name, collector, clock))
            }
            GcKind::BrokenOwnClock
            | GcKind::BrokenNoDecision
            | GcKind::BrokenJudgeAtReceipt
            | GcKind::BrokenReaper
            | GcKind::BrokenNoTombstone => {
                let broken = Broken { bank, clock, kind };
                tokio::spawn(broken_loop(world.clone(), name, broken))
            }
        };
        gc_tasks.push(task);
    }

    // An operator deleting checkpoints by hand (`checkpoint delete`, with and without
    // `--available`) in half the seeds of the real kinds, and in every seed of the broken
    // blind-rewrite kind. From a generator of its own: every other draw of a seed stays what
    // it was.
    let mut orng = Rng::new(seed ^ 0x0000_09e7_a70e_0001);
    let mut operator_clock = None;
    let mut operator_task = None;
    if kind == GcKind::BrokenBlindRewrite || (!kind.is_broken() && orng.chance(0.5)) {
        let head_start = orng.ms(0..5_000);
        let drifting = Drifting::new(&mut orng, head_start);
        let clock = drifting.clock.clone();
        operator_clock = Some(drifting);
        let ctl = Ctl::new("operator", false, &world);
        let bank = port_bank(&world, &ctl);
        operator_task = Some(tokio::spawn(operator_loop(
            world.clone(),
            bank,
            clock,
            orng.next(),
        )));
        world.trace(format_args!("an operator deletes checkpoints by hand"));
    }

    // An operator resolving a torn index.json (`checkpoint resolve`) in half the faulty seeds
    // of the real kinds, from a generator of its own.
    let mut rrng = Rng::new(seed ^ 0x0000_4e50_1ed0_0001);
    let mut resolver_clock = None;
    let mut resolver_task = None;
    if !kind.is_broken() && !healthy && rrng.chance(0.5) {
        let head_start = rrng.ms(0..5_000);
        let drifting = Drifting::new(&mut rrng, head_start);
        let clock = drifting.clock.clone();
        resolver_clock = Some(drifting);
        let ctl = Ctl::new("resolver", false, &world);
        let bank = port_bank(&world, &ctl);
        resolver_task = Some(tokio::spawn(resolver_loop(
            world.clone(),
            bank,
            clock,
            extra.read_staleness(),
            rrng.next(),
        )));
        world.trace(format_args!("an operator resolves a torn index.json"));
    }

    // The scenario: events at world offsets.
    let mut events: Vec<(Duration, Event)> = Vec::new();
    for _ in 0..rng.range(3..6) {
        events.push((rng.ms(0..300), Event::StartOwner));
    }
    for _ in 0..rng.range(2..7) {
        events.push((
            rng.ms(300..RUN.as_millis() as u64 - 2_000),
            Event::StartOwner,
        ));
    }
    for _ in 0..rng.range(1..5) {
        events.push((rng.ms(200..RUN.as_millis() as u64 - 500), Event::CrashOwner));
    }
    let mut t = rng.ms(0..2_000);
    while t < RUN {
        events.push((t, Event::Jump));
        t += JUMP_SPACING + rng.ms(0..2_000);
    }
    if !healthy {
        for _ in 0..rng.range(0..3) {
            let at = rng.ms(0..RUN.as_millis() as u64 - 1_500);
            events.push((at, Event::Partition(true)));
            events.push((at + rng.ms(50..1_500), Event::Partition(false)));
        }
        for _ in 0..rng.range(0..3) {
            let at = rng.ms(0..RUN.as_millis() as u64 - 2_000);
            events.push((at, Event::Isolate(true)));
            events.push((at + rng.ms(100..2_000), Event::Isolate(false)));
        }
        if kind == GcKind::Daemons && rng.chance(0.3) {
            events.push((rng.ms(500..RUN.as_millis() as u64 - 1_000), Event::CrashGc));
        }
    }
    extra.schedule(&mut frng, &mut events);
    schedule_ahead_once(seed, kind, healthy, &mut events);
    events.sort_by_key(|(t, _)| *t);
    let mut events = events.into_iter().peekable();

    let mut outcome = Outcome {
        seed,
        healthy,
        ..Outcome::default()
    };
    let mut owner_clocks: BTreeMap<String, Drifting> = BTreeMap::new();
    let mut owner_tasks: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut isolated: Option<String> = None;
    let mut healed = false;
    let mut restarts: Vec<Duration> = Vec::new();
    let mut deferred_steps = 0u32;

    while world.now() < RUN + TAIL {
        let now = world.now();
        if now >= RUN && !healed {
            healed = true;
            faults.heal();
            world.probe_lag.store(false, Ordering::SeqCst);
            if let Some(name) = isolated.take() {
                set_isolated(&world, &name, false);
            }
            world.trace("faults healed");
        }
        let mut due = Vec::new();
        while let Some((at, _)) = events.peek() {
            if *at > now || now >= RUN {
                break;
            }
            due.push(events.next().unwrap().1);
        }
        restarts.retain(|at| {
            if *at <= now {
                due.push(Event::StartOwner);
                false
            } else {
                true
            }
        });
        for event in due {
            match event {
                Event::StartOwner => {
                    let index = owner_clocks.len();
                    if index >= MAX_OWNERS {
                        continue;
                    }
                    let name = owner_name(index);
                    let head_start = rng.ms(0..5_000);
                    let drifting = Drifting::new(&mut rng, head_start);
                    let ctl = Ctl::new(&name, false, &world);
                    if rng.chance(0.4) {
                        let length = EXPIRE.mul_f64(0.3 + rng.unit() * 2.7);
                        *ctl.pause.lock().unwrap() =
                            Some((rng.range(0..40) as u32, rng.chance(0.5), length));
                    }
                    world.reg().owners.insert(
                        name.clone(),
                        OwnerRec {
                            lease: None,
                            ctl: ctl.clone(),
                            crashed_at: None,
                            seen_final: false,
                        },
                    );
                    let plan = OwnerPlan {
                        index,
                        checkpoints: rng.range(1..6),
                        rng: rng.fork(),
                        clock: drifting.clock.clone(),
                    };
                    owner_clocks.insert(name.clone(), drifting);
                    owner_tasks.insert(
                        name.clone(),
                        tokio::spawn(owner_main(world.clone(), ctl, plan)),
                    );
                    outcome.owners += 1;
                    world.trace(format_args!("{name} started"));
                }
                Event::CrashOwner => {
                    // A running owner, chosen at random; then a restart under a new id.
                    let running: Vec<String> = owner_tasks
                        .iter()
                        .filter(|(_, t)| !t.is_finished())
                        .map(|(n, _)| n.clone())
                        .collect();
                    if running.is_empty() {
                        continue;
                    }
                    let name = running[rng.range(0..running.len() as u64) as usize].clone();
                    let ctl = world.reg().owners[&name].ctl.clone();
                    ctl.dead.store(true, Ordering::SeqCst);
                    owner_tasks[&name].abort();
                    world.reg().owners.get_mut(&name).unwrap().crashed_at = Some(now);
                    let marker_prefix = Path::from(format!("{PREFIX}/index/protecting/{name}"));
                    let ids: BTreeSet<String> = sim
                        .objects(Some(&marker_prefix))
                        .into_iter()
                        .filter_map(|(m, _)| m.location.filename().map(str::to_owned))
                        .collect();
                    world.reg().zombies.push((name.clone(), now, ids));
                    outcome.crashes += 1;
                    world.trace(format_args!("{name} CRASHED"));
                    // The service restarts under a new owner id.
                    let restart = now + rng.ms(50..1_000);
                    if restart + Duration::from_millis(1_000) < RUN {
                        restarts.push(restart);
                    }
                }
                Event::Isolate(on) => {
                    if on && isolated.is_none() {
                        let names: Vec<String> = owner_clocks.keys().cloned().collect();
                        if let Some(name) = names.last() {
                            set_isolated(&world, name, true);
                            isolated = Some(name.clone());
                            outcome.isolations += 1;
                        }
                    } else if !on {
                        if let Some(name) = isolated.take() {
                            set_isolated(&world, &name, false);
                        }
                    }
                }
                Event::Partition(on) => {
                    faults.set_partitioned(on);
                    outcome.partitions += u64::from(on);
                    world.trace(format_args!(
                        "store partition {}",
                        if on { "starts" } else { "ends" }
                    ));
                }
                Event::Jump => {
                    let by = rng.ms(1..MAX_JUMP.as_millis() as u64);
                    store_clock.jump_forward(by);
                    outcome.jumps += 1;
                    world.trace(format_args!("store clock jumps forward {by:?}"));
                }
                Event::CrashGc => {
                    let i = rng.range(0..2) as usize;
                    gc_ctls[i].dead.store(true, Ordering::SeqCst);
                    gc_tasks[i].abort();
                    outcome.gc_crashes += 1;
                    world.trace(format_args!("gc{i} CRASHED"));
                }
                Event::Suspend => {
                    let running: Vec<String> = owner_tasks
                        .iter()
                        .filter(|(_, t)| !t.is_finished())
                        .map(|(n, _)| n.clone())
                        .collect();
                    let time = extra.suspend_time;
                    if suspend_owner(&world, &mut frng, &running, &mut owner_clocks, time).is_some()
                    {
                        outcome.suspends += 1;
                    }
                }
                Event::Ahead(by) => {
                    world
                        .probe_ahead
                        .store(by.as_millis() as u64, Ordering::SeqCst);
                    world.reg().ahead_at.push((now, by));
                    world.trace(format_args!(
                        "collectors' clock readings {by:?} AHEAD (wrong)"
                    ));
                }
                Event::Back => {
                    world.probe_ahead.store(0, Ordering::SeqCst);
                    world.trace(format_args!("collectors' clock readings right again"));
                }
                Event::BigStep => deferred_steps += 1,
                Event::ProbeLag(on) => {
                    world.probe_lag.store(on, Ordering::SeqCst);
                    if !on {
                        world.probe_before.lock().unwrap().clear();
                    }
                    world.trace(format_args!(
                        "store-clock probe reads {}",
                        if on {
                            "LAG (previous version)"
                        } else {
                            "current again"
                        }
                    ));
                }
                Event::Restore => {
                    if restore_marker(&world, &mut frng).await.is_some() {
                        outcome.restores += 1;
                    }
                }
            }
        }

        // A one-shot host cannot see a step before its first recorded reading (README, RELIABILITY
        // "Not covered"): a step waits for that record, and is not played without one.
        let recorded = || {
            !world
                .sim
                .objects(Some(&Path::from(format!("{PREFIX}/gc/clock-hosts"))))
                .is_empty()
        };
        while deferred_steps > 0 && now < RUN && (kind != GcKind::OneShot || recorded()) {
            deferred_steps -= 1;
            let min = (MARGIN + GRACE).as_millis() as u64 + 50;
            let by = frng.ms(min..MAX_STEP.as_millis() as u64);
            store_clock.jump_forward(by);
            outcome.big_steps += 1;
            world.trace(format_args!("store clock STEPS forward {by:?}"));
        }

        // Advance time: the world, then everyone's own clock at its own rate (a suspended
        // owner's as its clock counts suspended time).
        let dt = rng.ms(1..11);
        world_clock.advance(dt);
        let after = world.now();
        for c in owner_clocks.values_mut() {
            c.advance(dt, after);
        }
        for c in &mut gc_clocks {
            c.advance(dt, after);
        }
        if let Some(c) = &mut operator_clock {
            c.advance(dt, after);
        }
        if let Some(c) = &mut resolver_clock {
            c.advance(dt, after);
        }
        settle(&world).await;
        // A pass that also retires failed checkpoints is longer by their requests, and the
        // next pass starts `interval` after it ended.
        let liveness = match world.keep_failed {
            Some(_) => kind.liveness() + RETIRE_ALLOWANCE,
            None => kind.liveness(),
        };
        sample(&world, healthy, liveness, &mut outcome);
    }

    finish(&world, &sentinels, &mut outcome);
    outcome.faults = faults.faults();
    outcome.stale_reads = sim.stale_reads();
    outcome.probe_lag_reads = world.probe_lag_reads.load(Ordering::SeqCst);
    for task in gc_tasks {
        task.abort();
    }
    if let Some(task) = operator_task {
        task.abort();
    }
    if let Some(task) = resolver_task {
        task.abort();
    }
    for (_, task) in owner_tasks {
        task.abort();
    }
    outcome
}

/// The seed of broken collector `i`'s own draws (apart from the seed's other draws).
fn orng_seed(seed: u64, i: usize) -> u64 {
    seed ^ 0x0b11_d0e5_0000_0000 ^ i as u64
}

pub(crate) fn set_isolated(world: &World, name: &str, on: bool) {
    let ctl = world.reg().owners.get(name).map(|o| o.ctl.clone());
    if let Some(ctl) = ctl {
        ctl.isolated.store(on, Ordering::SeqCst);
        world.trace(format_args!(
            "{name} {}",
            if on {
                "isolated from the store"
            } else {
                "reconnected"
            }
        ));
    }
}

/// Let every task run until nothing moves (bounded).
pub(crate) async fn settle(world: &World) {
    let mut last = world.activity();
    let mut quiet = 0;
    for _ in 0..2_000 {
        tokio::task::yield_now().await;
        let now = world.activity();
        if now == last {
            quiet += 1;
            if quiet >= 3 {
                return;
            }
        } else {
            quiet = 0;
            last = now;
        }
    }
}
