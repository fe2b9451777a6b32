//! An operator's `checkpoint delete` racing the collectors and the owners, and what the checker
//! asks of it: a deletion is never undone (an `available` checkpoint without its data, a lost
//! trail), and what it refuses it leaves whole.

use super::*;

use banklease_gc::operator::delete::{delete, DeleteRequest, Deletion};

/// What the operator did to a checkpoint, for the final check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removed {
    /// `Deleted`: the checkpoint must end a tombstone with its removal's trail.
    Done,
    /// An error part way (a store fault): it may have begun; a begun removal is finished by
    /// the next pass, and one that never began leaves the checkpoint whole.
    Maybe,
}

/// `banklease checkpoint delete` from a shell during the fault window: every 150–600 ms, a
/// completed checkpoint (sometimes a protecting one) picked at random, deleted with
/// `--available` three times in four.
pub(crate) async fn operator_loop(world: Arc<World>, bank: Bank, clock: SimClock, seed: u64) {
    let mut rng = Rng::new(seed);
    let shared: SharedClock = Arc::new(clock.clone());
    let options = gc_options(&mut rng, Duration::ZERO);
    while world.now() < RUN {
        clock.sleep(rng.ms(150..600)).await;
        let candidates: Vec<String> = {
            let reg = world.reg();
            let mut ids: Vec<String> = reg.completed.keys().cloned().collect();
            if rng.chance(0.2) {
                ids.extend(reg.zombies.iter().flat_map(|(_, _, z)| z.iter().cloned()));
            }
            ids
        };
        if candidates.is_empty() {
            continue;
        }
        let id = candidates[rng.range(0..candidates.len() as u64) as usize].clone();
        let Ok(cid) = banklease::CheckpointId::parse(&id) else {
            continue;
        };
        let request = DeleteRequest {
            available: rng.chance(0.75),
            dry_run: false,
            operator: "sim-operator".to_owned(),
            reason: None,
        };
        let outcome = delete(&bank, &shared, &options, &cid, &request).await;
        let removed = match &outcome {
            Ok(Deletion::Deleted { .. }) => Some(Removed::Done),
            Ok(_) => None,
            Err(_) => Some(Removed::Maybe),
        };
        world.trace(format_args!(
            "operator delete {id} (available={}): {}",
            request.available,
            match &outcome {
                Ok(d) => format!("{d:?}"),
                Err(e) => format!("error ({})", classify(e)),
            }
        ));
        if let Some(removed) = removed {
            let mut reg = world.reg();
            let entry = reg.removed.entry(id).or_insert(removed);
            if removed == Removed::Done {
                *entry = Removed::Done;
            }
        }
    }
}

/// After healing: a checkpoint the operator deleted is a tombstone that keeps its removal, with
/// no data; one it may have begun to delete is either that or whole. Returns the ids checked
/// here, which the completed-checkpoint check leaves alone.
pub(crate) fn check_removals(world: &World) -> BTreeSet<String> {
    let removed = world.reg().removed.clone();
    let mut checked = BTreeSet::new();
    for (id, how) in &removed {
        let index = world
            .sim
            .peek(&Path::from(index_path_str(id)))
            .and_then(|b| serde_json::from_slice::<CheckpointRecord>(&b).ok());
        let data = world
            .sim
            .objects(Some(&Path::from(format!("{PREFIX}/checkpoints/{id}/data"))))
            .len();
        let tombstone = index
            .as_ref()
            .is_some_and(|r| r.status == Status::Deleted && r.removal.is_some());
        // Begun by the operator (a retirement's mark is the gc's, judged with the retirements).
        let begun = index
            .as_ref()
            .is_some_and(|r| r.removal.as_ref().is_some_and(|x| x.by != "gc"));
        match how {
            Removed::Done if !tombstone || data > 0 => world.violate(Violation::RemovalUndone {
                checkpoint: id.clone(),
                what: format!(
                    "the operator's deletion succeeded, but index.json says {:?} (removal: {}) \
                     with {data} data object(s)",
                    index.as_ref().map(|r| r.status),
                    begun
                ),
            }),
            Removed::Maybe if begun && (!tombstone || data > 0) => {
                world.violate(Violation::RemovalUndone {
                    checkpoint: id.clone(),
                    what: format!(
                        "a begun removal was not finished: index.json says {:?} with {data} \
                         data object(s)",
                        index.as_ref().map(|r| r.status)
                    ),
                })
            }
            _ => {}
        }
        if *how == Removed::Done || begun {
            checked.insert(id.clone());
        }
    }
    checked
}

/// BROKEN (`BrokenBlindRewrite`): real collector passes, and between them the repair of every
/// owner's move as releases before the fix made it — `index.json` read, then (a pass's worth of
/// work later) overwritten with the owner's outcome whatever is there by then. An operator's
/// deletion landing in between is undone: an `available` record over a checkpoint whose data is
/// gone, without its removal's trail.
pub(crate) async fn blind_rewrite_loop(
    world: Arc<World>,
    name: String,
    bank: Bank,
    clock: SimClock,
    options: GcOptions,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let collector = Collector::new(bank.clone(), Arc::new(clock.clone()), options);
    loop {
        if let Err(e) = collector.run_pass().await {
            world.trace(format_args!("{name} pass failed ({})", classify(&e)));
        }
        let decisions: Vec<ObjectMeta> = bank
            .store()
            .list(Some(&bank.path(&["decisions"])))
            .try_collect()
            .await
            .unwrap_or_default();
        for meta in decisions {
            let Some(id) = meta.location.filename().map(str::to_owned) else {
                continue;
            };
            let Ok(cid) = banklease::CheckpointId::parse(&id) else {
                continue;
            };
            let Ok(Some(d)) = banklease::checkpoint::read_decision(&bank, &cid).await else {
                continue;
            };
            if d.by != Decider::Owner {
                continue;
            }
            let Ok(Some(read)) = banklease::checkpoint::read_checkpoint(&bank, &cid).await else {
                continue;
            };
            if read.removal.is_some() {
                continue;
            }
            clock.sleep(rng.ms(20..250)).await;
            // BROKEN: written whatever is there now.
            let record = CheckpointRecord::new(&cid, &d.owner_id, d.outcome, read.created_at);
            let body = serde_json::to_vec(&record).expect("a record");
            let _ = bank
                .store()
                .put(&Key::Index(cid.clone()).path(&bank), PutPayload::from(body))
                .await;
        }
        clock.sleep(INTERVAL).await;
    }
}

/// `banklease checkpoint resolve` from a shell: once in the run, a crashed owner's protecting
/// checkpoint gets an unreadable `index.json` (a torn write, a disk's error), which no pass
/// touches; the operator resolves it every 150–400 ms, until resolve says what it did or the
/// faults heal. Its
/// decision is judged as a collection's (the caller is `resolver`): never while the owner's
/// lease is valid.
pub(crate) async fn resolver_loop(
    world: Arc<World>,
    bank: Bank,
    clock: SimClock,
    read_staleness: Duration,
    seed: u64,
) {
    use banklease_gc::operator::resolve::{resolve, Assertion, Resolution};
    let mut rng = Rng::new(seed);
    let shared: SharedClock = Arc::new(clock.clone());
    // As the command runs: a process of its own, no floor at its first reading (which would
    // judge every owner alive), its host's last reading compared with (a boot clock).
    let options = gc_options(&mut rng, read_staleness)
        .to_builder()
        .floor_at_first_reading(false)
        .build();
    clock.boot_as("sim-host-resolver");
    // The operator's host has read the store's clock before (a `banklease gc` there, which
    // records its reading): a step before a host's first reading is not covered
    // (RELIABILITY.md).
    // That first pass floors at its own reading (a step just before it cannot be seen, so it
    // judges nothing older than it: as the daemon's first).
    let looked = Collector::new(
        bank.clone(),
        Arc::clone(&shared),
        options.to_builder().floor_at_first_reading(true).build(),
    );
    // Until its reading is recorded (a pass can succeed without: its floor's write failed).
    let record = Path::from(format!("{PREFIX}/gc/clock-hosts/sim-host-resolver"));
    while world.sim.peek(&record).is_none() {
        if world.now() >= RUN {
            return;
        }
        let _ = looked.run_pass().await;
        clock.sleep(rng.ms(50..150)).await;
    }
    clock
        .sleep(rng.ms(1_000..RUN.as_millis() as u64 - 2_000))
        .await;
    // A crashed owner's protecting checkpoint with an index.json: never one that completed (a
    // restore can bring its marker back): with its decision pruned and its index.json torn, no
    // record would say it completed, and no command could tell.
    let target = loop {
        if world.now() >= RUN - Duration::from_millis(1_500) {
            return;
        }
        let crashed: Vec<String> = world
            .reg()
            .owners
            .iter()
            .filter(|(_, o)| o.crashed_at.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        let found = crashed.iter().find_map(|owner| {
            let markers = world.sim.objects(Some(&Path::from(format!(
                "{PREFIX}/index/protecting/{owner}"
            ))));
            markers.into_iter().find_map(|(m, _)| {
                let id = m.location.filename()?.to_owned();
                let completed = world.reg().completed.contains_key(&id);
                (!completed && world.sim.peek(&Path::from(index_path_str(&id))).is_some())
                    .then_some(id)
            })
        });
        match found {
            Some(id) => break id,
            None => clock.sleep(rng.ms(100..300)).await,
        }
    };
    world
        .sim
        .put(
            &Path::from(index_path_str(&target)),
            PutPayload::from_static(b"{\"torn"),
        )
        .await
        .unwrap();
    world.trace(format_args!("CORRUPT: {target}'s index.json is torn"));
    world.reg().torn.insert(target.clone());
    let Ok(cid) = banklease::CheckpointId::parse(&target) else {
        return;
    };
    // Like the operator's deletions, only while the faults last: in the healing that follows
    // nothing new starts (a first judgement on a host floors, which holds collection an expire
    // window). A torn record left unresolved then is counted (`Known::TornUnresolved`).
    while world.now() < RUN {
        clock.sleep(rng.ms(150..400)).await;
        match resolve(
            &bank,
            &shared,
            &options,
            &cid,
            "sim-operator",
            Assertion::None,
        )
        .await
        {
            Ok(Resolution::Refused(why)) => {
                world.trace(format_args!("resolver: {target} refused: {why}"));
            }
            Ok(done) => {
                world.reg().torn.remove(&target);
                // Its kind only: the set-aside copy's name is random.
                let what = format!("{done:?}");
                let what = what.split([' ', '(', '{']).next().unwrap_or_default();
                world.trace(format_args!("resolver: {target} resolved: {what}"));
                return;
            }
            Err(e) => world.trace(format_args!("resolver: {target} failed ({})", classify(&e))),
        }
    }
}
