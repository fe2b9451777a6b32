//! Ports: each participant's connection to the store, which the driver can pause, cut off
//! or kill.

use super::*;

// ---- ports: each participant's view of the store -------------------------------------------

tokio::task_local! {
    /// The participant whose request the store is serving: set around every inner call of a
    /// port, read by the store observer to tell who made a mutation.
    pub(crate) static CALLER: String;
}

/// The participant that made the mutation being observed (`None`: the driver itself).
pub(crate) fn caller() -> Option<String> {
    CALLER.try_with(Clone::clone).ok()
}

/// Random stop-the-world pauses at every request point of a participant (the collectors):
/// before a request is sent, and after its answer arrived but before the caller sees it (the
/// store served it at `t`, the caller acts on it at `t + D`).
#[derive(Debug)]
pub(crate) struct RandomPauses {
    /// Chance of a pause at each request point.
    pub(crate) rate: f64,
    /// Chance of a pause after the answer of a read that is judged on time (a lease, the
    /// store-clock probe), before the judgement.
    pub(crate) read_rate: f64,
    /// Longest pause.
    pub(crate) max: Duration,
    pub(crate) rng: Rng,
}

/// `SIM_VERBOSE=1`: trace every request of every participant.
fn verbose() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SIM_VERBOSE").is_ok_and(|v| v == "1"))
}

/// Reads whose answer is judged against a clock: a pause between the store serving them and
/// the judgement is what a collector must survive.
fn judged_read(path: &Path) -> bool {
    let p = path.as_ref();
    p.contains("/leases/") || p.contains("/_banklease/clock") || p.ends_with("/gc/active")
}

/// A store-clock probe key (`_banklease/clock/host-<hex>`).
fn clock_probe(path: &Path) -> bool {
    path.as_ref().contains("/_banklease/clock/")
}

/// One owner's or GC's connection: it can be paused (stop-the-world), suspended (the host
/// sleeps), cut off (isolated), or killed (crash: nothing is sent any more).
#[derive(Debug)]
pub(crate) struct Ctl {
    pub(crate) name: String,
    pub(crate) gc: bool,
    pub(crate) world: Arc<World>,
    pub(crate) dead: AtomicBool,
    pub(crate) isolated: AtomicBool,
    pub(crate) requests: AtomicU32,
    /// A pause starting at request `at` (before it is sent, or after it landed), for `length`.
    pub(crate) pause: Mutex<Option<(u32, bool, Duration)>>,
    /// Pauses drawn at every request point.
    pub(crate) random: Mutex<Option<RandomPauses>>,
    pub(crate) paused_until: Mutex<Option<Duration>>,
}

impl Ctl {
    pub(crate) fn new(name: &str, gc: bool, world: &Arc<World>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            gc,
            world: world.clone(),
            dead: AtomicBool::new(false),
            isolated: AtomicBool::new(false),
            requests: AtomicU32::new(0),
            pause: Mutex::new(None),
            random: Mutex::new(None),
            paused_until: Mutex::new(None),
        })
    }

    pub(crate) fn paused(&self) -> bool {
        self.paused_until
            .lock()
            .unwrap()
            .is_some_and(|u| self.world.now() < u)
    }

    /// The host sleeps for `length`: no request is sent and no answer received meanwhile
    /// (its clock is the driver's business, see `Drifting::suspend`).
    pub(crate) fn suspend(&self, length: Duration) {
        let until = self.world.now() + length;
        let mut paused = self.paused_until.lock().unwrap();
        *paused = Some(paused.map_or(until, |u| u.max(until)));
        drop(paused);
        self.world
            .trace(format_args!("{} host SUSPENDED for {length:?}", self.name));
    }

    fn refusal(&self, why: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "SimPort",
            source: format!("{}: {why}", self.name).into(),
        }
    }

    pub(crate) fn maybe_pause(&self, n: u32, landed: bool, path: &Path) {
        let mut plan = self.pause.lock().unwrap();
        if let Some((at, after, length)) = *plan {
            // Only pauses that end before the run does: the tail is for healing.
            if at == n && after == landed && self.world.now() + length < RUN {
                *plan = None;
                let until = self.world.now() + length;
                let mut paused = self.paused_until.lock().unwrap();
                *paused = Some(paused.map_or(until, |u| u.max(until)));
                drop(paused);
                self.world.reg().pauses += 1;
                self.world.trace(format_args!(
                    "{} paused for {length:?} {} request {n}",
                    self.name,
                    if landed { "after" } else { "before" }
                ));
                return;
            }
        }
        drop(plan);
        let mut random = self.random.lock().unwrap();
        let Some(r) = random.as_mut() else { return };
        let rate = if landed && judged_read(path) {
            r.read_rate
        } else {
            r.rate
        };
        if !r.rng.chance(rate) {
            return;
        }
        let length = if r.rng.chance(0.5) {
            r.rng.ms(5..300)
        } else {
            r.rng.ms(300..r.max.as_millis() as u64)
        };
        drop(random);
        if self.paused() || self.world.now() + length >= RUN {
            return;
        }
        *self.paused_until.lock().unwrap() = Some(self.world.now() + length);
        self.world.reg().gc_pauses += 1;
        self.world.trace(format_args!(
            "{} paused for {length:?} {} request {n} ({path})",
            self.name,
            if landed {
                "after the answer to"
            } else {
                "before"
            }
        ));
    }

    pub(crate) async fn wait_unpaused(&self) {
        // Bounded: every step of the driver moves the world clock forward.
        loop {
            let until = *self.paused_until.lock().unwrap();
            match until {
                Some(u) if self.world.now() < u => {
                    self.world.world.sleep(u - self.world.now()).await
                }
                Some(_) => {
                    *self.paused_until.lock().unwrap() = None;
                    self.world.trace(format_args!("{} resumed", self.name));
                }
                None => return,
            }
        }
    }

    async fn before_request(&self, path: &Path) -> object_store::Result<u32> {
        self.world.bump();
        if self.gc && !in_prefix(path) {
            self.world.violate(Violation::OutsidePrefix {
                path: path.to_string(),
                by: self.name.clone(),
            });
        }
        if self.dead.load(Ordering::SeqCst) {
            return Err(self.refusal("crashed"));
        }
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        self.maybe_pause(n, false, path);
        self.wait_unpaused().await;
        if self.dead.load(Ordering::SeqCst) {
            return Err(self.refusal("crashed"));
        }
        if self.isolated.load(Ordering::SeqCst) {
            return Err(self.refusal("isolated from the store"));
        }
        Ok(n)
    }

    async fn after_answer(&self, n: u32, path: &Path) {
        self.world.bump();
        self.maybe_pause(n, true, path);
        self.wait_unpaused().await;
    }

    /// Trace a request sent at `sent` whose answer (`what`) is being delivered now: every
    /// request with `SIM_VERBOSE=1`, and a collector's judged read whose answer took long (a
    /// late answer or a pause: the judgement sees it later than the store served it).
    fn trace_answer(&self, op: &str, path: &Path, sent: Duration, what: &dyn fmt::Display) {
        let took = self.world.now().saturating_sub(sent);
        let slow_read = self.gc && judged_read(path) && took > Duration::from_millis(50);
        if verbose() || slow_read {
            self.world.trace(format_args!(
                "{} {op} {path} sent at {}ms, answer delivered after {took:?}: {what}",
                self.name,
                sent.as_millis()
            ));
        }
    }
}

impl PortHooks for Ctl {
    fn name(&self) -> &str {
        &self.name
    }

    fn now(&self) -> Duration {
        self.world.now()
    }

    fn before(&self, path: &Path) -> impl Future<Output = object_store::Result<u32>> + Send {
        self.before_request(path)
    }

    fn after(&self, n: u32, path: &Path) -> impl Future<Output = ()> + Send {
        self.after_answer(n, path)
    }

    /// Serve `call` on behalf of this participant (see [`CALLER`]).
    fn serve<R: Send>(
        &self,
        call: impl Future<Output = R> + Send,
    ) -> impl Future<Output = R> + Send {
        CALLER.scope(self.name.clone(), call)
    }

    /// With lagging probe reads on, remember what a lagging replica will answer the read-back
    /// of a clock probe with (no request: the driver's view of the store).
    fn before_put(&self, location: &Path) {
        let world = &self.world;
        if !(clock_probe(location) && world.probe_lag.load(Ordering::SeqCst)) {
            return;
        }
        let parent = Path::from_iter(location.parts().take(location.parts().count() - 1));
        let previous = world
            .sim
            .objects(Some(&parent))
            .into_iter()
            .map(|(meta, _)| meta)
            .find(|meta| &meta.location == location);
        let mut before = world.probe_before.lock().unwrap();
        match previous {
            Some(meta) => before.insert(location.clone(), meta),
            None => before.remove(location),
        };
    }

    /// With lagging probe reads on, a clock probe's read-back answers its previous version;
    /// while a collector's reading is wrong (`probe_ahead`), its read-back carries a stamp that
    /// far ahead.
    fn answer_get(&self, location: &Path, answer: &mut object_store::Result<GetResult>) {
        let world = &self.world;
        let ahead = world.probe_ahead.load(Ordering::SeqCst);
        if ahead > 0 && self.gc && clock_probe(location) {
            if let Ok(got) = answer.as_mut() {
                got.meta.last_modified += chrono::TimeDelta::milliseconds(ahead as i64);
            }
        }
        if !(clock_probe(location) && world.probe_lag.load(Ordering::SeqCst)) {
            return;
        }
        if let (Ok(got), Some(before)) = (
            answer.as_mut(),
            world.probe_before.lock().unwrap().get(location),
        ) {
            got.meta = before.clone();
            got.range = 0..before.size;
            world.probe_lag_reads.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn note(&self, op: &str, path: &Path, sent: Duration, what: &dyn fmt::Display) {
        self.trace_answer(op, path, sent, what)
    }

    fn gone(&self, why: &str) -> object_store::Error {
        self.refusal(why)
    }
}

/// `bytes` is not a dependency of this crate; name its type through `object_store`'s API.
pub(crate) mod bytes_alias {
    pub type Bytes = <object_store::PutPayload as IntoIterator>::Item;
}

pub(crate) fn in_prefix(path: &Path) -> bool {
    path.parts().next().is_some_and(|p| p.as_ref() == PREFIX)
}

pub(crate) fn port_bank(world: &Arc<World>, ctl: &Arc<Ctl>) -> Bank {
    let port = Port::new(world.faults.clone(), ctl.clone());
    // With varied owners, a Swift bank as far as the rules go (each owner's rule (c)).
    let label = if world.varied.is_some() {
        "swift://sim/bank"
    } else {
        "sim://bank"
    };
    Bank::from_store(Arc::new(port), PREFIX, label)
}
