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

/// A short description of an answer, for the trace.
fn answer<T>(r: &object_store::Result<T>, detail: impl Fn(&T) -> String) -> String {
    match r {
        Ok(v) => detail(v),
        Err(object_store::Error::NotFound { .. }) => "not found".to_owned(),
        Err(object_store::Error::AlreadyExists { .. }) => "already exists".to_owned(),
        Err(object_store::Error::Precondition { .. }) => "precondition failed".to_owned(),
        Err(e) => format!(
            "error ({})",
            e.to_string().chars().take(60).collect::<String>()
        ),
    }
}

/// Reads whose answer is judged against a clock: a pause between the store serving them and
/// the judgement is what a collector must survive.
fn judged_read(path: &Path) -> bool {
    let p = path.as_ref();
    p.contains("/leases/") || p.contains("/_banklease/clock") || p.ends_with("/gc/active")
}

/// A store-clock probe key (`_banklease/clock/<handle>`).
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

    pub(crate) fn gone(&self, why: &str) -> object_store::Error {
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

    pub(crate) async fn before(&self, path: &Path) -> object_store::Result<u32> {
        self.world.bump();
        if self.gc && !in_prefix(path) {
            self.world.violate(Violation::OutsidePrefix {
                path: path.to_string(),
                by: self.name.clone(),
            });
        }
        if self.dead.load(Ordering::SeqCst) {
            return Err(self.gone("crashed"));
        }
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        self.maybe_pause(n, false, path);
        self.wait_unpaused().await;
        if self.dead.load(Ordering::SeqCst) {
            return Err(self.gone("crashed"));
        }
        if self.isolated.load(Ordering::SeqCst) {
            return Err(self.gone("isolated from the store"));
        }
        Ok(n)
    }

    pub(crate) async fn after(&self, n: u32, path: &Path) {
        self.world.bump();
        self.maybe_pause(n, true, path);
        self.wait_unpaused().await;
    }

    /// Serve `call` on behalf of this participant (see [`CALLER`]).
    pub(crate) async fn serve<R>(&self, call: impl Future<Output = R>) -> R {
        CALLER.scope(self.name.clone(), call).await
    }

    /// Trace a request sent at `sent` whose answer (`what`) is being delivered now: every
    /// request with `SIM_VERBOSE=1`, and a collector's judged read whose answer took long (a
    /// late answer or a pause: the judgement sees it later than the store served it).
    pub(crate) fn note(&self, op: &str, path: &Path, sent: Duration, what: impl fmt::Display) {
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

#[derive(Debug)]
pub(crate) struct Port {
    pub(crate) inner: FailingStore<SimStore>,
    pub(crate) ctl: Arc<Ctl>,
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Port({}, {})", self.ctl.name, self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for Port {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let sent = self.ctl.world.now();
        let n = self.ctl.before(location).await?;
        let world = &self.ctl.world;
        if clock_probe(location) && world.probe_lag.load(Ordering::SeqCst) {
            // What a lagging replica will answer the read-back with (no request: the driver's
            // view of the store).
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
        let mode = format!("PUT({:?})", opts.mode);
        let r = self
            .ctl
            .serve(self.inner.put_opts(location, payload, opts))
            .await;
        self.ctl.after(n, location).await;
        self.ctl.note(
            &mode,
            location,
            sent,
            answer(&r, |p| format!("ok {:?}", p.e_tag)),
        );
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let n = self.ctl.before(location).await?;
        let r = self.inner.put_multipart_opts(location, opts).await;
        self.ctl.after(n, location).await;
        r
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let sent = self.ctl.world.now();
        let n = self.ctl.before(location).await?;
        let op = if options.head { "HEAD" } else { "GET" };
        let mut r = self.inner.get_opts(location, options).await;
        let world = &self.ctl.world;
        if clock_probe(location) && world.probe_lag.load(Ordering::SeqCst) {
            if let (Ok(got), Some(before)) =
                (r.as_mut(), world.probe_before.lock().unwrap().get(location))
            {
                got.meta = before.clone();
                got.range = 0..before.size;
                world.probe_lag_reads.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.ctl.after(n, location).await;
        self.ctl.note(
            op,
            location,
            sent,
            answer(&r, |g| {
                format!(
                    "last_modified={} e_tag={:?}",
                    g.meta.last_modified.format("%H:%M:%S%.3f"),
                    g.meta.e_tag
                )
            }),
        );
        r
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<bytes_alias::Bytes>> {
        let n = self.ctl.before(location).await?;
        let r = self.inner.get_ranges(location, ranges).await;
        self.ctl.after(n, location).await;
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = self.inner.clone();
        let ctl = self.ctl.clone();
        locations
            .then(move |location| {
                let inner = inner.clone();
                let ctl = ctl.clone();
                async move {
                    let location = location?;
                    let sent = ctl.world.now();
                    let n = ctl.before(&location).await?;
                    let r = ctl
                        .serve(
                            inner
                                .delete_stream(
                                    futures::stream::iter([Ok(location.clone())]).boxed(),
                                )
                                .next(),
                        )
                        .await
                        .unwrap_or_else(|| Err(ctl.gone("no answer")));
                    ctl.after(n, &location).await;
                    ctl.note("DELETE", &location, sent, answer(&r, |_| "ok".to_owned()));
                    r
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let ctl = self.ctl.clone();
        let prefix = prefix.cloned();
        futures::stream::once(async move {
            let at = prefix.clone().unwrap_or_default();
            match ctl.before(&at).await {
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
                Ok(n) => {
                    let items: Vec<_> = inner.list(prefix.as_ref()).collect().await;
                    ctl.after(n, &at).await;
                    futures::stream::iter(items).boxed()
                }
            }
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let ctl = self.ctl.clone();
        let prefix = prefix.cloned();
        let offset = offset.clone();
        futures::stream::once(async move {
            let at = prefix.clone().unwrap_or_default();
            match ctl.before(&at).await {
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
                Ok(n) => {
                    let items: Vec<_> = inner
                        .list_with_offset(prefix.as_ref(), &offset)
                        .collect()
                        .await;
                    ctl.after(n, &at).await;
                    futures::stream::iter(items).boxed()
                }
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let at = prefix.cloned().unwrap_or_default();
        let n = self.ctl.before(&at).await?;
        let r = self.inner.list_with_delimiter(prefix).await;
        self.ctl.after(n, &at).await;
        r
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.ctl.before(from).await?;
        let n = self.ctl.before(to).await?;
        let r = self
            .ctl
            .serve(self.inner.copy_opts(from, to, options))
            .await;
        self.ctl.after(n, to).await;
        r
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.ctl.before(from).await?;
        let n = self.ctl.before(to).await?;
        let r = self
            .ctl
            .serve(self.inner.rename_opts(from, to, options))
            .await;
        self.ctl.after(n, to).await;
        r
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
    let port = Port {
        inner: world.faults.clone(),
        ctl: ctl.clone(),
    };
    // With varied owners, a Swift bank as far as the rules go (each owner's rule (c)).
    let label = if world.varied.is_some() {
        "swift://sim/bank"
    } else {
        "sim://bank"
    };
    Bank::from_store(Arc::new(port), PREFIX, label)
}
