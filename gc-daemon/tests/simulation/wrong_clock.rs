//! Collectors' readings of the store's clock that are far ahead for a moment (a `file:` bank's
//! collector on a host whose clock was wrong until NTP synced: its reading is wrong, the stamps
//! the owners' writes got are not), and the broken collector that takes such a reading for a
//! floor: it holds every stamp older than the wrong reading back, so no zombie is collected
//! until the store's clock catches up with a reading it never had.

use super::*;

/// Schedule one wrong moment: collectors' readings `by` ahead at `at`, right `length` later. Drawn
/// from a generator of its own (`seed ^ …`), so every other draw of a seed stays what it was.
pub(crate) fn schedule_ahead_once(
    seed: u64,
    kind: GcKind,
    healthy: bool,
    events: &mut Vec<(Duration, Event)>,
) {
    let mut rng = Rng::new(seed ^ 0x0000_a4ea_d0c1_0c4e);
    // Not for one-shot passes: one without an earlier reading on its host (none recorded yet)
    // cannot tell a wrong first reading from the store's time, as it cannot tell a step before
    // the first pass of a boot (RELIABILITY.md, "Not covered").
    let wanted = if kind == GcKind::BrokenFloorFromStep {
        true
    } else {
        !healthy && !kind.is_broken() && kind != GcKind::OneShot && rng.chance(0.25)
    };
    if !wanted {
        return;
    }
    let at = rng.ms(500..RUN.as_millis() as u64 - 2_500);
    let by = rng.ms(2_000..60_000);
    // Shorter than the collectors' interval: a reading that is wrong once, not a timeline
    // that stays wrong over passes (that is a step, and judged as one).
    let length = rng.ms(50..INTERVAL.as_millis() as u64 - 50);
    events.push((at, Event::Ahead(by)));
    events.push((at + length, Event::Back));
}

/// BROKEN (`BrokenFloorFromStep`): a collector as releases before the fix kept the clock: it
/// compares each reading with its last, and a reading that stepped forward is written to the
/// bank as a floor (and taken as its last); every stamp older than the floor is judged as
/// written at it. Otherwise a plain collector: it judges at the send of each read, decides,
/// deletes and tombstones.
pub(crate) struct FloorFromStep {
    pub(crate) bank: Bank,
    pub(crate) clock: SimClock,
    last: Mutex<Option<banklease::clock::StoreTime>>,
}

impl FloorFromStep {
    pub(crate) fn new(bank: Bank, clock: SimClock) -> Self {
        Self {
            bank,
            clock,
            last: Mutex::new(None),
        }
    }

    fn floor_key(&self) -> Path {
        self.bank.path(&["gc", "broken-floor"])
    }

    pub(crate) async fn pass(&self) -> banklease::Result<()> {
        let shared: SharedClock = Arc::new(self.clock.clone());
        let now = self.bank.store_time(&shared).await?;
        let last = self.last.lock().unwrap().replace(now);
        if let Some(last) = last.filter(|_| now.verified) {
            if banklease_gc::time::timing::forward_step(&last, &now, MARGIN).is_some() {
                // BROKEN: the step's own reading is kept as the floor.
                let body = now.at.to_rfc3339();
                let _ = self
                    .bank
                    .store()
                    .put(&self.floor_key(), PutPayload::from(body.into_bytes()))
                    .await;
                return Ok(());
            }
        }
        let floor = match self.bank.store().get(&self.floor_key()).await {
            Ok(got) => {
                let bytes = got.bytes().await.unwrap_or_default();
                chrono::DateTime::parse_from_rfc3339(&String::from_utf8_lossy(&bytes))
                    .ok()
                    .map(|t| t.with_timezone(&chrono::Utc))
            }
            Err(_) => None,
        };
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
        for m in &markers {
            let Some((owner, id)) = parse_marker(&self.bank, &m.location) else {
                continue;
            };
            let sent = self.clock.now();
            let Ok(Some((record, meta))) = banklease::lease::read_lease(&self.bank, &owner).await
            else {
                continue;
            };
            let stamp = floor.map_or(meta.last_modified, |f| f.max(meta.last_modified));
            let judged_at = now.at_send(sent, Duration::ZERO);
            if !matches!(judge(record, stamp, judged_at, MARGIN),
                LeaseView::Expired { since, .. } if since >= GRACE)
            {
                continue;
            }
            if !gc_decides(&self.bank, &self.clock, &owner, &id, "broken-floor").await? {
                continue;
            }
            let data: Vec<ObjectMeta> = self
                .bank
                .store()
                .list(Some(&Prefix::Data(&id).path(&self.bank)))
                .try_collect()
                .await
                .unwrap_or_default();
            for d in data {
                let _ = self.bank.store().delete(&d.location).await;
            }
            let at = self.clock.system_now().into();
            write_tombstone(&self.bank, &id, &owner, None, at).await?;
            let _ = self
                .bank
                .store()
                .delete(&Key::marker(&owner, &id).path(&self.bank))
                .await;
        }
        Ok(())
    }
}

pub(crate) async fn floor_from_step_loop(world: Arc<World>, name: String, gc: FloorFromStep) {
    loop {
        if let Err(e) = gc.pass().await {
            world.trace(format_args!("{name} pass failed ({})", classify(&e)));
        }
        gc.clock.sleep(INTERVAL).await;
    }
}
