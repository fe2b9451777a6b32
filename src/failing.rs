//! `FailingStore<T>`: an [`ObjectStore`] wrapper that injects faults, for tests
//! (feature `test-util`).
//!
//! Faults are scripted per operation kind: added latency (on a [`MockClock`], so a "slow request"
//! is deterministic), errors *before* the inner call, errors *after* the inner call succeeded
//! (the write landed, the caller saw a failure), and partitions (every call fails until healed).
//!
//! For simulations, faults can also be drawn at random from a seeded generator, so that a run is
//! reproducible from its seed:
//!
//! - **error rates** per operation and [`Strike`] ([`FailingStore::set_error_rate`]);
//! - **timeouts**: a call whose latency reaches the timeout, or that stalls
//!   ([`FailingStore::set_timeout`]), fails once the timeout has passed on the mock clock, and
//!   its inner call may or may not have been made (a seeded coin) — the caller cannot tell;
//! - **random latency**, split before and after the inner call ([`FailingStore::set_latency_jitter`]);
//! - **late answers** ([`FailingStore::set_late_answers`]): the store serves the request at `t`
//!   and the caller receives the answer at `t + D` — a stalled reader (a paused process, a frozen
//!   VM, a slow network path back). Unlike latency, a late answer never becomes a timeout: the
//!   caller is not waiting, it is stopped;
//! - **ambiguous creates** ([`FailingStore::set_create_error_after`]): a create-if-absent put
//!   lands and is answered with an error, so that the caller's retry finds its own object
//!   (AlreadyExists) and must read it back;
//! - **eventually consistent listings** ([`FailingStore::set_listing_lag`]): an object written less
//!   than the lag ago (mock clock) is left out of listings, and a deleted one is still listed for
//!   the lag after its deletion.
//!
//! Latency either *advances* a mock clock ([`FailingStore::with_clock`], for single-task tests)
//! or *sleeps* on a clock ([`FailingStore::with_sleeping_clock`], for simulations in which a
//! driver owns time and many tasks share the store). Every injected fault is counted by kind
//! ([`FailingStore::faults`]). Every method is forwarded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::{Clock, MockClock, SharedClock};

/// Mixed into the seed of the generator for late answers and ambiguous creates.
const LATE_SEED: u64 = 0x6c61_7465_616e_7377;

/// The kinds of request a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put_opts` (every put mode).
    Put,
    /// `get_opts` without `head`.
    Get,
    /// `get_opts` with `head` set.
    Head,
    /// Each path of `delete_stream`.
    Delete,
    /// `list`, `list_with_offset`, `list_with_delimiter`.
    List,
    /// `copy_opts`, `rename_opts`.
    Copy,
}

impl Op {
    /// Every kind, in a fixed order.
    pub const ALL: [Op; 6] = [Op::Put, Op::Get, Op::Head, Op::Delete, Op::List, Op::Copy];
}

/// When an injected error strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// Fail without calling the inner store.
    Before,
    /// Call the inner store; if it succeeded, report a failure anyway.
    After,
}

/// How latency is spent.
#[derive(Debug, Clone)]
enum Timing {
    /// No clock: latency and timeouts take no time.
    None,
    /// The call advances this mock clock itself (one task, no driver).
    Advance(MockClock),
    /// The call sleeps on this clock until whoever drives it has moved it far enough.
    Sleep(SharedClock),
}

/// Faults injected so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Errors before the inner call (scripted or drawn), not counting partitions.
    pub errors_before: u64,
    /// Errors reported although the inner call succeeded.
    pub errors_after: u64,
    /// Calls that failed while partitioned.
    pub partitioned: u64,
    /// Timeouts whose inner call was made (the write may have landed).
    pub timeouts_landed: u64,
    /// Timeouts whose inner call was never made.
    pub timeouts_lost: u64,
    /// Listing entries left out because they were written too recently.
    pub listing_hidden: u64,
    /// Listing entries shown although they had been deleted.
    pub listing_ghosts: u64,
    /// Answers held back after the inner call (served at `t`, delivered at `t + D`).
    pub late_answers: u64,
    /// Create-if-absent puts that landed and were answered with an error.
    pub creates_ambiguous: u64,
}

impl FaultCounts {
    /// All injected faults.
    pub fn total(&self) -> u64 {
        self.errors_before
            + self.errors_after
            + self.partitioned
            + self.timeouts_landed
            + self.timeouts_lost
            + self.listing_hidden
            + self.listing_ghosts
            + self.late_answers
            + self.creates_ambiguous
    }

    /// Add `other` to these counts.
    pub fn add(&mut self, other: &FaultCounts) {
        self.errors_before += other.errors_before;
        self.errors_after += other.errors_after;
        self.partitioned += other.partitioned;
        self.timeouts_landed += other.timeouts_landed;
        self.timeouts_lost += other.timeouts_lost;
        self.listing_hidden += other.listing_hidden;
        self.listing_ghosts += other.listing_ghosts;
        self.late_answers += other.late_answers;
        self.creates_ambiguous += other.creates_ambiguous;
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Rates {
    before: f64,
    after: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Late {
    rate: f64,
    max: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Timeout {
    after: Duration,
    stall_rate: f64,
}

/// What the listing-lag model knows about paths (instants on the store's clock).
#[derive(Debug, Default)]
struct Consistency {
    lag: Duration,
    /// Paths known to exist (written through this wrapper, or found by a read before a write).
    present: HashSet<Path>,
    /// New paths written through this wrapper: listed from this instant on.
    visible_from: HashMap<Path, Instant>,
    /// Paths deleted through this wrapper: listed as they were until this instant.
    ghosts: BTreeMap<Path, (ObjectMeta, Instant)>,
}

#[derive(Debug)]
struct Script {
    latency: HashMap<Op, Duration>,
    jitter: HashMap<Op, Duration>,
    failures: HashMap<Op, Vec<Strike>>,
    rates: HashMap<Op, Rates>,
    timeouts: HashMap<Op, Timeout>,
    late: HashMap<Op, Late>,
    create_after: f64,
    partitioned: bool,
    ignore_conditions: bool,
    calls: HashMap<Op, u64>,
    rng: StdRng,
    /// A second generator for late answers and ambiguous creates, so that turning them on
    /// leaves every other draw of a seed as it was.
    rng_late: StdRng,
    counts: FaultCounts,
    consistency: Consistency,
    /// Deletions of paths containing one of these are refused (objects under retention).
    refused_deletes: Vec<String>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            latency: HashMap::new(),
            jitter: HashMap::new(),
            failures: HashMap::new(),
            rates: HashMap::new(),
            timeouts: HashMap::new(),
            late: HashMap::new(),
            create_after: 0.0,
            partitioned: false,
            ignore_conditions: false,
            calls: HashMap::new(),
            rng: StdRng::seed_from_u64(0),
            rng_late: StdRng::seed_from_u64(LATE_SEED),
            counts: FaultCounts::default(),
            consistency: Consistency::default(),
            refused_deletes: Vec::new(),
        }
    }
}

/// The fate of one call, decided when it enters.
#[derive(Debug, Default)]
struct Fate {
    strike: Option<Strike>,
    /// Latency spent before the inner call.
    before: Duration,
    /// Latency spent after the inner call.
    after: Duration,
    /// The call times out after this long; `true` if its inner call is made meanwhile.
    timeout: Option<(Duration, bool)>,
    /// The answer is held back this long after the inner call (never a timeout).
    late: Duration,
    /// A create-if-absent put that lands and is answered with an error.
    create_after: bool,
}

/// The fault-injecting wrapper.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use banklease::failing::{FailingStore, Op, Strike};
/// use object_store::{memory::InMemory, path::Path, ObjectStoreExt, PutPayload};
///
/// let store = FailingStore::new(InMemory::new());
/// store.fail_next(Op::Put, Strike::After, 1);
/// let p = Path::from("a");
/// assert!(store.put(&p, PutPayload::from_static(b"x")).await.is_err());
/// // ... but the write landed.
/// assert!(store.head(&p).await.is_ok());
/// # }
/// ```
///
/// Seeded random faults, reproducible from the seed:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use banklease::failing::{FailingStore, Op, Strike};
/// use object_store::{memory::InMemory, path::Path, ObjectStoreExt, PutPayload};
///
/// let run = |seed| async move {
///     let store = FailingStore::new(InMemory::new()).with_seed(seed);
///     store.set_error_rate(Op::Put, Strike::Before, 0.5);
///     let mut outcomes = Vec::new();
///     for i in 0..20 {
///         let p = Path::from(format!("k{i}"));
///         outcomes.push(store.put(&p, PutPayload::from_static(b"x")).await.is_ok());
///     }
///     (outcomes, store.faults().errors_before)
/// };
/// let (a, failed) = run(7).await;
/// assert_eq!(a, run(7).await.0);
/// assert!(failed > 0 && failed < 20);
/// # }
/// ```
pub struct FailingStore<T> {
    inner: Arc<T>,
    script: Arc<Mutex<Script>>,
    timing: Timing,
}

// Manual: a derive would demand `T: Clone`.
impl<T> Clone for FailingStore<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            script: Arc::clone(&self.script),
            timing: self.timing.clone(),
        }
    }
}

impl<T: ObjectStore> FailingStore<T> {
    /// Wrap `inner` with no faults scripted.
    pub fn new(inner: T) -> Self {
        Self {
            inner: Arc::new(inner),
            script: Arc::default(),
            timing: Timing::None,
        }
    }

    /// Latency advances this mock clock instead of sleeping.
    pub fn with_clock(mut self, clock: MockClock) -> Self {
        self.timing = Timing::Advance(clock);
        self
    }

    /// Latency (and timeouts) *sleep* on `clock`: the call waits until whoever drives the clock
    /// has moved it far enough. For simulations where many tasks share the store; the listing
    /// lag is measured on this clock too.
    pub fn with_sleeping_clock(mut self, clock: impl Clock) -> Self {
        self.timing = Timing::Sleep(Arc::new(clock));
        self
    }

    /// Seed the generator that random faults are drawn from (the default seed is 0).
    pub fn with_seed(self, seed: u64) -> Self {
        let mut s = self.script();
        s.rng = StdRng::seed_from_u64(seed);
        s.rng_late = StdRng::seed_from_u64(seed ^ LATE_SEED);
        drop(s);
        self
    }

    /// The inner store.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Every `op` request takes `latency` (advanced on the mock clock before the inner call).
    pub fn set_latency(&self, op: Op, latency: Duration) {
        self.script().latency.insert(op, latency);
    }

    /// Every `op` request takes a further random latency, uniform in `[0, max]`, split at
    /// random between before and after the inner call (so a write may land early and its answer
    /// arrive late). Drawn from the seeded generator.
    pub fn set_latency_jitter(&self, op: Op, max: Duration) {
        self.script().jitter.insert(op, max);
    }

    /// A fraction `rate` of `op` requests have their answer held back for a random delay,
    /// uniform in `[0, max]`, after the inner call: the store served the request at `t`, the
    /// caller receives the answer (success or error) at `t + D`. Models a caller that stalled
    /// with the answer on its way (SIGSTOP, a VM freeze, swap) rather than a slow store, so a
    /// late answer is never turned into a timeout. Drawn from the seeded generator.
    pub fn set_late_answers(&self, op: Op, rate: f64, max: Duration) {
        self.script().late.insert(
            op,
            Late {
                rate: rate.clamp(0.0, 1.0),
                max,
            },
        );
    }

    /// A fraction `rate` of create-if-absent puts (`PutMode::Create`) land in the inner store
    /// and are answered with an error anyway (a lost answer), so that a caller that retries
    /// meets its own object. Counted as `creates_ambiguous`, not as `errors_after`. Drawn from
    /// the seeded generator; scripted failures and the other rates come first.
    pub fn set_create_error_after(&self, rate: f64) {
        self.script().create_after = rate.clamp(0.0, 1.0);
    }

    /// The next `count` `op` requests fail, at `strike`.
    pub fn fail_next(&self, op: Op, strike: Strike, count: usize) {
        self.script()
            .failures
            .entry(op)
            .or_default()
            .extend(std::iter::repeat_n(strike, count));
    }

    /// Every deletion of a path containing `needle` is refused, before it reaches the store,
    /// as a store refuses to delete an object under retention (S3 Object Lock) or one it
    /// forbids (a 403): the same object fails on every attempt, until [`heal`](Self::heal).
    pub fn refuse_deletes_of(&self, needle: &str) {
        self.script().refused_deletes.push(needle.to_owned());
    }

    /// Each `op` request fails with probability `rate` at `strike`, drawn from the seeded
    /// generator. Scripted failures ([`fail_next`](Self::fail_next)) are used up first.
    pub fn set_error_rate(&self, op: Op, strike: Strike, rate: f64) {
        let rate = rate.clamp(0.0, 1.0);
        let mut s = self.script();
        let r = s.rates.entry(op).or_default();
        match strike {
            Strike::Before => r.before = rate,
            Strike::After => r.after = rate,
        }
    }

    /// `op` requests time out after `timeout` on the mock clock: those whose latency reaches
    /// it, and a fraction `stall_rate` of all (a stalled request never answers). A timed-out
    /// request fails with an error once `timeout` has passed; a seeded coin decides whether its
    /// inner call was made meanwhile (a write may have landed). `None` removes the timeout.
    pub fn set_timeout(&self, op: Op, timeout: Option<(Duration, f64)>) {
        let mut s = self.script();
        match timeout {
            Some((after, stall_rate)) => {
                s.timeouts.insert(
                    op,
                    Timeout {
                        after,
                        stall_rate: stall_rate.clamp(0.0, 1.0),
                    },
                );
            }
            None => {
                s.timeouts.remove(&op);
            }
        }
    }

    /// Make listings eventually consistent: an object written through this wrapper less than
    /// `lag` ago (mock clock) is left out, and one deleted through it less than `lag` ago is still
    /// listed as it was. Objects this wrapper never saw written are listed as the inner store
    /// lists them. Needs a mock clock; `Duration::ZERO` turns the lag off.
    pub fn set_listing_lag(&self, lag: Duration) {
        let mut s = self.script();
        s.consistency.lag = lag;
        if lag.is_zero() {
            s.consistency = Consistency::default();
        }
    }

    /// Remove every random fault (rates, timeouts, jitter, late answers, ambiguous creates,
    /// listing lag), the partition and the scripted failures; fixed latencies,
    /// `ignore_conditions` and the counters stay.
    pub fn heal(&self) {
        let mut s = self.script();
        s.jitter.clear();
        s.failures.clear();
        s.rates.clear();
        s.timeouts.clear();
        s.late.clear();
        s.create_after = 0.0;
        s.partitioned = false;
        s.consistency = Consistency::default();
        s.refused_deletes.clear();
    }

    /// While partitioned, every request fails before reaching the inner store.
    pub fn set_partitioned(&self, partitioned: bool) {
        self.script().partitioned = partitioned;
    }

    /// Turn every conditional put (create-if-absent, update-if-match) into a plain overwrite
    /// that reports success: a store that silently ignores conditions.
    pub fn set_ignore_conditions(&self, ignore: bool) {
        self.script().ignore_conditions = ignore;
    }

    /// How many `op` requests were made (including failed ones).
    pub fn calls(&self, op: Op) -> u64 {
        self.script().calls.get(&op).copied().unwrap_or(0)
    }

    /// The faults injected so far, by kind.
    pub fn faults(&self) -> FaultCounts {
        self.script().counts
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("fault script poisoned")
    }

    /// The clock's current instant, if there is a clock.
    fn now(&self) -> Option<Instant> {
        match &self.timing {
            Timing::None => None,
            Timing::Advance(clock) => Some(clock.now()),
            Timing::Sleep(clock) => Some(clock.now()),
        }
    }

    /// Spend `latency`: advance the mock clock, or sleep on the clock.
    async fn spend(&self, latency: Duration) {
        if latency.is_zero() {
            return;
        }
        match &self.timing {
            Timing::None => {}
            Timing::Advance(clock) => clock.advance(latency),
            Timing::Sleep(clock) => clock.sleep(latency).await,
        }
    }

    /// Count the call, decide its fate, and fail it at once if it fails before the inner call.
    /// `create`: the call is a create-if-absent put (subject to ambiguous creates).
    async fn enter(&self, op: Op, create: bool) -> Result<Fate> {
        let (fate, fixed, partitioned) = {
            let mut s = self.script();
            let s = &mut *s;
            *s.calls.entry(op).or_default() += 1;
            let mut fate = Fate {
                strike: s
                    .failures
                    .get_mut(&op)
                    .and_then(|v| (!v.is_empty()).then(|| v.remove(0))),
                ..Fate::default()
            };
            let fixed = s.latency.get(&op).copied().unwrap_or_default();
            // Draw every random decision on every call, so that one fault setting does not
            // shift the draws of the others.
            let rates = s.rates.get(&op).copied().unwrap_or_default();
            let before = s.rng.gen_bool(rates.before);
            let after = s.rng.gen_bool(rates.after);
            let jitter = s.jitter.get(&op).copied().unwrap_or_default();
            let extra = jitter.mul_f64(s.rng.gen_range(0.0..=1.0));
            let split: f64 = s.rng.gen_range(0.0..=1.0);
            let timeout = s.timeouts.get(&op).copied();
            let stalled = s.rng.gen_bool(timeout.map_or(0.0, |t| t.stall_rate));
            let landed = s.rng.gen_bool(0.5);
            let late = s.late.get(&op).copied().unwrap_or_default();
            let is_late = s.rng_late.gen_bool(late.rate);
            let late_by = late.max.mul_f64(s.rng_late.gen_range(0.0..=1.0));
            let create_after = s.rng_late.gen_bool(s.create_after);
            if fate.strike.is_none() {
                fate.strike = if before {
                    Some(Strike::Before)
                } else if after {
                    Some(Strike::After)
                } else {
                    None
                };
            }
            fate.create_after = create && create_after && fate.strike.is_none();
            if is_late {
                fate.late = late_by;
            }
            fate.before = extra.mul_f64(split);
            fate.after = extra - fate.before;
            if let Some(t) = timeout {
                if stalled || fixed + extra >= t.after {
                    fate.timeout = Some((t.after, landed));
                }
            }
            if s.partitioned {
                s.counts.partitioned += 1;
            } else if fate.strike == Some(Strike::Before) {
                s.counts.errors_before += 1;
            } else if let Some((_, landed)) = fate.timeout {
                if landed {
                    s.counts.timeouts_landed += 1;
                } else {
                    s.counts.timeouts_lost += 1;
                }
            }
            (fate, fixed, s.partitioned)
        };
        if fate.timeout.is_none() {
            self.spend(fixed).await;
        }
        if partitioned || fate.strike == Some(Strike::Before) {
            return Err(injected(op, "before"));
        }
        Ok(fate)
    }

    async fn run<R>(
        &self,
        op: Op,
        call: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        self.run_as(op, false, call).await
    }

    async fn run_as<R>(
        &self,
        op: Op,
        create: bool,
        call: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        let fate = self.enter(op, create).await?;
        if let Some((timeout, landed)) = fate.timeout {
            // The caller gives up after `timeout`; the request may still have reached the store
            // (half-way through, here).
            if landed {
                self.spend(timeout / 2).await;
                let _ = call.await;
                self.spend(timeout - timeout / 2).await;
            } else {
                self.spend(timeout).await;
            }
            return Err(injected(op, &format!("timed out after {timeout:?}")));
        }
        self.spend(fate.before).await;
        let result = call.await;
        self.spend(fate.after).await;
        self.deliver_late(fate.late).await;
        match (result, fate.strike) {
            (Ok(_), Some(Strike::After)) => {
                self.script().counts.errors_after += 1;
                Err(injected(op, "after the inner call succeeded"))
            }
            (Ok(_), _) if fate.create_after => {
                self.script().counts.creates_ambiguous += 1;
                Err(injected(
                    op,
                    "after the create landed (its answer was lost)",
                ))
            }
            (r, _) => r,
        }
    }

    /// Hold an answer back for `late` (served already; the caller is not listening yet).
    async fn deliver_late(&self, late: Duration) {
        if !late.is_zero() {
            self.script().counts.late_answers += 1;
            self.spend(late).await;
        }
    }

    /// Whether a write of `location` must first find out if the object exists (an overwrite of
    /// a listed object does not hide it).
    fn must_probe(&self, location: &Path) -> bool {
        self.lagging() && !self.script().consistency.present.contains(location)
    }

    /// Note a landed write of `location` (`existed`: it was there before), for the listing lag.
    fn wrote(&self, location: &Path, existed: bool) {
        let Some(now) = self.now() else { return };
        let mut s = self.script();
        let c = &mut s.consistency;
        if c.lag.is_zero() {
            return;
        }
        c.ghosts.remove(location);
        if c.present.insert(location.clone()) && !existed {
            let lag = c.lag;
            c.visible_from.insert(location.clone(), now + lag);
        }
    }

    /// Note a landed deletion of `location` (as `meta` was), for the listing lag.
    fn deleted(&self, location: &Path, meta: Option<ObjectMeta>) {
        let Some(now) = self.now() else { return };
        let mut s = self.script();
        let c = &mut s.consistency;
        if c.lag.is_zero() {
            return;
        }
        c.present.remove(location);
        c.visible_from.remove(location);
        if let Some(meta) = meta {
            let lag = c.lag;
            c.ghosts.insert(location.clone(), (meta, now + lag));
        }
    }

    fn lagging(&self) -> bool {
        !matches!(self.timing, Timing::None) && !self.script().consistency.lag.is_zero()
    }
}

fn injected(op: Op, when: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FailingStore",
        source: format!("injected fault: op={op:?} {when}").into(),
    }
}

impl<T: ObjectStore> fmt::Debug for FailingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore({})", self.inner)
    }
}

impl<T: ObjectStore> fmt::Display for FailingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for FailingStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> Result<PutResult> {
        let create = matches!(opts.mode, object_store::PutMode::Create);
        if self.script().ignore_conditions {
            opts.mode = object_store::PutMode::Overwrite;
        }
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.run_as(Op::Put, create, async move {
            let existed = this.must_probe(location) && inner.head(location).await.is_ok();
            let result = inner.put_opts(location, payload, opts).await;
            if result.is_ok() {
                this.wrote(location, existed);
            }
            result
        })
        .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.run(Op::Put, self.inner.put_multipart_opts(location, opts))
            .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        self.run(op, self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.run(Op::Get, self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .then(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    let refused = {
                        let text = location.as_ref();
                        this.script()
                            .refused_deletes
                            .iter()
                            .any(|n| text.contains(n.as_str()))
                    };
                    if refused {
                        return Err(object_store::Error::PermissionDenied {
                            path: location.to_string(),
                            source: "deletion refused (object under retention)".into(),
                        });
                    }
                    let inner = this.inner.clone();
                    let loc = location.clone();
                    let tracker = this.clone();
                    this.run(Op::Delete, async move {
                        // What a lagging listing keeps showing after the deletion.
                        let before = if tracker.lagging() {
                            inner.head(&loc).await.ok()
                        } else {
                            None
                        };
                        let mut s =
                            inner.delete_stream(futures::stream::iter([Ok(loc.clone())]).boxed());
                        let result = match s.next().await {
                            Some(r) => r.map(|_| ()),
                            None => Ok(()),
                        };
                        if result.is_ok() {
                            tracker.deleted(&loc, before);
                        }
                        result
                    })
                    .await
                    .map(|_| location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_faulty(prefix, None, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.list_faulty(
            prefix,
            Some(offset),
            self.inner.list_with_offset(prefix, offset),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut result = self
            .run(Op::List, self.inner.list_with_delimiter(prefix))
            .await?;
        if self.lagging() {
            // Objects only; common prefixes are listed as the inner store has them.
            let objects = std::mem::take(&mut result.objects);
            result.objects = self.apply_lag(prefix, None, objects, Some(prefix));
        }
        Ok(result)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.run(Op::Copy, async move {
            let existed = this.must_probe(to) && inner.head(to).await.is_ok();
            let result = inner.copy_opts(from, to, options).await;
            if result.is_ok() {
                this.wrote(to, existed);
            }
            result
        })
        .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let this = self.clone();
        self.run(Op::Copy, async move {
            let before = if this.lagging() {
                inner.head(from).await.ok()
            } else {
                None
            };
            let existed = this.must_probe(to) && inner.head(to).await.is_ok();
            let result = inner.rename_opts(from, to, options).await;
            if result.is_ok() {
                this.wrote(to, existed);
                this.deleted(from, before);
            }
            result
        })
        .await
    }
}

impl<T: ObjectStore> FailingStore<T> {
    fn list_faulty(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
        inner: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let this = self.clone();
        let prefix = prefix.cloned();
        let offset = offset.cloned();
        futures::stream::once(async move {
            let fate = match this.enter(Op::List, false).await {
                Err(e) => return futures::stream::iter([Err(e)]).boxed(),
                Ok(fate) => fate,
            };
            if let Some((timeout, _)) = fate.timeout {
                this.spend(timeout).await;
                let e = injected(Op::List, &format!("timed out after {timeout:?}"));
                return futures::stream::iter([Err(e)]).boxed();
            }
            this.spend(fate.before + fate.after).await;
            this.deliver_late(fate.late).await;
            let inner = if this.lagging() {
                // Read the whole inner listing, then show it as a lagging store would.
                let mut items = Vec::new();
                let mut error = None;
                let mut inner = inner;
                while let Some(item) = inner.next().await {
                    match item {
                        Ok(meta) => items.push(meta),
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                let shown = this.apply_lag(prefix.as_ref(), offset.as_ref(), items, None);
                futures::stream::iter(shown.into_iter().map(Ok).chain(error.map(Err))).boxed()
            } else {
                inner
            };
            match fate.strike {
                // A listing struck "after" fails once its first entry has been seen.
                Some(Strike::After) => {
                    this.script().counts.errors_after += 1;
                    inner
                        .take(1)
                        .chain(futures::stream::iter([Err(injected(
                            Op::List,
                            "after the first entry",
                        ))]))
                        .boxed()
                }
                _ => inner,
            }
        })
        .flatten()
        .boxed()
    }

    /// Hide entries written too recently and add those deleted too recently, in path order.
    /// `delimited` is `Some(prefix)` for a listing with delimiter: ghosts must then be direct
    /// children of the prefix.
    fn apply_lag(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
        items: Vec<ObjectMeta>,
        delimited: Option<Option<&Path>>,
    ) -> Vec<ObjectMeta> {
        let Some(now) = self.now() else { return items };
        let mut s = self.script();
        let s = &mut *s;
        let c = &mut s.consistency;
        c.ghosts.retain(|_, (_, until)| *until > now);
        c.visible_from.retain(|_, from| *from > now);
        let root = Path::default();
        let prefix = prefix.unwrap_or(&root);
        let mut hidden = 0;
        let mut shown: BTreeMap<Path, ObjectMeta> = BTreeMap::new();
        for meta in items {
            if c.visible_from.contains_key(&meta.location) {
                hidden += 1;
            } else {
                shown.insert(meta.location.clone(), meta);
            }
        }
        let mut ghosts = 0;
        for (path, (meta, _)) in &c.ghosts {
            let Some(mut rest) = path.prefix_match(prefix) else {
                continue;
            };
            let depth_ok = match delimited {
                Some(_) => rest.next().is_some() && rest.next().is_none(),
                None => rest.next().is_some(),
            };
            if !depth_ok || offset.is_some_and(|o| path <= o) || shown.contains_key(path) {
                continue;
            }
            shown.insert(path.clone(), meta.clone());
            ghosts += 1;
        }
        s.counts.listing_hidden += hidden;
        s.counts.listing_ghosts += ghosts;
        shown.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::memory::InMemory;

    fn p(s: &str) -> Path {
        Path::from(s)
    }

    async fn listed(store: &FailingStore<InMemory>) -> Vec<String> {
        let v: Vec<ObjectMeta> = store.list(None).try_collect().await.unwrap();
        v.into_iter().map(|m| m.location.to_string()).collect()
    }

    #[tokio::test]
    async fn error_rates_are_seeded_and_after_strikes_land() {
        let outcomes = |seed| async move {
            let store = FailingStore::new(InMemory::new()).with_seed(seed);
            store.set_error_rate(Op::Put, Strike::After, 0.5);
            let mut v = Vec::new();
            for i in 0..40 {
                v.push(store.put(&p(&format!("k{i}")), "x".into()).await.is_ok());
            }
            // Every write landed, failed or not.
            assert_eq!(listed(&store).await.len(), 40);
            (v, store.faults())
        };
        let (a, faults) = outcomes(3).await;
        assert_eq!(a, outcomes(3).await.0);
        assert_ne!(a, outcomes(4).await.0);
        assert_eq!(
            faults.errors_after,
            a.iter().filter(|ok| !**ok).count() as u64
        );
        assert!(
            faults.errors_after > 5 && faults.errors_after < 35,
            "{faults:?}"
        );
    }

    #[tokio::test]
    async fn timeouts_fail_after_the_timeout_and_may_have_landed() {
        let clock = MockClock::new();
        let store = FailingStore::new(InMemory::new())
            .with_clock(clock.clone())
            .with_seed(11);
        store.set_timeout(Op::Put, Some((Duration::from_secs(2), 1.0)));
        for i in 0..40 {
            let before = clock.elapsed();
            let err = store.put(&p(&format!("k{i}")), "x".into()).await;
            assert!(err.unwrap_err().to_string().contains("timed out"));
            assert_eq!(clock.elapsed() - before, Duration::from_secs(2));
        }
        let f = store.faults();
        let landed = listed(&store).await.len() as u64;
        assert_eq!((f.timeouts_landed, f.timeouts_lost), (landed, 40 - landed));
        assert!(landed > 5 && landed < 35, "{f:?}");
        // A latency that reaches the timeout times out too; one below it does not.
        store.set_timeout(Op::Put, Some((Duration::from_secs(2), 0.0)));
        store.set_latency(Op::Put, Duration::from_secs(2));
        assert!(store.put(&p("slow"), "x".into()).await.is_err());
        store.set_latency(Op::Put, Duration::from_secs(1));
        assert!(store.put(&p("fast"), "x".into()).await.is_ok());
    }

    #[tokio::test]
    async fn sleeping_latency_waits_for_the_driver() {
        let clock = MockClock::new();
        let store = FailingStore::new(InMemory::new()).with_sleeping_clock(clock.clone());
        store.set_latency(Op::Put, Duration::from_secs(1));
        let s = store.clone();
        let call = tokio::spawn(async move { s.put(&p("a"), "x".into()).await });
        tokio::task::yield_now().await;
        assert!(!call.is_finished());
        assert_eq!(
            clock.elapsed(),
            Duration::ZERO,
            "sleeping never advances the clock"
        );
        clock.advance(Duration::from_secs(1));
        call.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn late_answers_arrive_after_the_store_served_them() {
        let clock = MockClock::new();
        let store = FailingStore::new(InMemory::new())
            .with_clock(clock.clone())
            .with_seed(5);
        // A timeout shorter than the delays: a late answer is never turned into one.
        store.set_timeout(Op::Get, Some((Duration::from_millis(10), 0.0)));
        store.set_late_answers(Op::Get, 1.0, Duration::from_secs(4));
        store.put(&p("a"), "1".into()).await.unwrap();
        let mut waited = Vec::new();
        for _ in 0..20 {
            let before = clock.elapsed();
            let got = store.get(&p("a")).await.unwrap().bytes().await.unwrap();
            assert_eq!(&got[..], b"1");
            waited.push(clock.elapsed() - before);
        }
        assert!(waited.iter().all(|w| *w <= Duration::from_secs(4)));
        assert!(
            waited.iter().any(|w| *w > Duration::from_secs(1)),
            "{waited:?}"
        );
        assert_eq!(store.faults().late_answers, 20);
        assert_eq!(
            store.faults().timeouts_landed + store.faults().timeouts_lost,
            0
        );
    }

    #[tokio::test]
    async fn ambiguous_creates_land_and_fail_and_a_retry_meets_its_own_object() {
        let store = FailingStore::new(InMemory::new()).with_seed(9);
        store.set_create_error_after(1.0);
        let err = store
            .put_opts(&p("c"), "mine".into(), object_store::PutMode::Create.into())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("create landed"), "{err}");
        // The create landed; a retry is refused as AlreadyExists and must read back.
        let retry = store
            .put_opts(&p("c"), "mine".into(), object_store::PutMode::Create.into())
            .await;
        assert!(matches!(
            retry,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        let body = store.get(&p("c")).await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], b"mine");
        // Plain overwrites are not creates.
        store.put(&p("o"), "x".into()).await.unwrap();
        let f = store.faults();
        assert_eq!((f.creates_ambiguous, f.errors_after), (1, 0), "{f:?}");
    }

    #[tokio::test]
    async fn listings_lag_behind_writes_and_deletes() {
        let clock = MockClock::new();
        let store = FailingStore::new(InMemory::new()).with_clock(clock.clone());
        store.put(&p("old"), "x".into()).await.unwrap();
        store.put(&p("kept"), "x".into()).await.unwrap();
        store.set_listing_lag(Duration::from_secs(5));
        store.put(&p("a/new"), "x".into()).await.unwrap();
        store.delete(&p("old")).await.unwrap();
        // Overwriting a listed object does not hide it.
        store.put(&p("kept"), "y".into()).await.unwrap();
        // The new object is hidden, the deleted one still shown.
        assert_eq!(listed(&store).await, ["kept", "old"]);
        let delimited = store.list_with_delimiter(None).await.unwrap();
        assert_eq!(delimited.objects.len(), 2);
        // A read is not a listing: it sees the truth.
        assert!(store.head(&p("a/new")).await.is_ok());
        assert!(store.head(&p("old")).await.is_err());
        clock.advance(Duration::from_secs(5));
        assert_eq!(listed(&store).await, ["a/new", "kept"]);
        let f = store.faults();
        assert_eq!((f.listing_hidden, f.listing_ghosts), (1, 2), "{f:?}");
        store.heal();
        store.put(&p("b"), "x".into()).await.unwrap();
        assert_eq!(listed(&store).await, ["a/new", "b", "kept"]);
    }

    #[tokio::test]
    async fn conformance_without_faults() {
        use object_store::integration::*;
        let store = FailingStore::new(InMemory::new());
        put_get_delete_list(&store).await;
        list_with_offset_exclusivity(&store).await;
        get_opts(&store).await;
        list_uses_directories_correctly(&store).await;
        list_with_delimiter(&store).await;
        rename_and_copy(&store).await;
        copy_if_not_exists(&store).await;
        stream_get(&store).await;
        put_opts(&store, true).await;
    }
}
