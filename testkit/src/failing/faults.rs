//! The fault script of a [`FailingStore`] and the fate of each call: what is configured
//! (scripted failures, seeded rates, latency, timeouts, late answers, partitions) and how a call
//! spends it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use banklease::clock::{Clock, MockClock, SharedClock};
use object_store::{ObjectStore, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Consistency, FailingStore, FaultCounts, Op, Strike};

/// Mixed into the seed of the generator for late answers and ambiguous creates.
pub(super) const LATE_SEED: u64 = 0x6c61_7465_616e_7377;

/// How latency is spent.
#[derive(Debug, Clone)]
pub(super) enum Timing {
    /// No clock: latency and timeouts take no time.
    None,
    /// The call advances this mock clock itself (one task, no driver).
    Advance(MockClock),
    /// The call sleeps on this clock until whoever drives it has moved it far enough.
    Sleep(SharedClock),
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

#[derive(Debug)]
pub(super) struct Script {
    latency: HashMap<Op, Duration>,
    jitter: HashMap<Op, Duration>,
    failures: HashMap<Op, Vec<Strike>>,
    rates: HashMap<Op, Rates>,
    timeouts: HashMap<Op, Timeout>,
    late: HashMap<Op, Late>,
    create_after: f64,
    partitioned: bool,
    pub(super) ignore_conditions: bool,
    pub(super) refuse_updates: bool,
    calls: HashMap<Op, u64>,
    /// Calls started and not yet answered (or given up on).
    in_flight: usize,
    pub(super) rng: StdRng,
    /// A second generator for late answers and ambiguous creates, so that turning them on
    /// leaves every other draw of a seed as it was.
    pub(super) rng_late: StdRng,
    pub(super) counts: FaultCounts,
    pub(super) consistency: Consistency,
    /// Deletions of paths containing one of these are refused (objects under retention).
    pub(super) refused_deletes: Vec<String>,
    /// The PUT to a path containing the first part, after the second many such PUTs went
    /// through, fails at the third.
    targeted_puts: Vec<(String, usize, Strike)>,
    targeted_gets: Vec<(String, Strike)>,
    /// PUTs sent, by path.
    puts_by_path: HashMap<String, u64>,
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
            refuse_updates: false,
            calls: HashMap::new(),
            in_flight: 0,
            rng: StdRng::seed_from_u64(0),
            rng_late: StdRng::seed_from_u64(LATE_SEED),
            counts: FaultCounts::default(),
            consistency: Consistency::default(),
            refused_deletes: Vec::new(),
            targeted_puts: Vec::new(),
            targeted_gets: Vec::new(),
            puts_by_path: HashMap::new(),
        }
    }
}

impl Script {
    /// A PUT to `path` is about to enter: count it, and make the first targeted failure that
    /// names it the next scripted one.
    pub(super) fn put_to(&mut self, path: &str) {
        *self.puts_by_path.entry(path.to_owned()).or_default() += 1;
        if let Some(i) = self
            .targeted_puts
            .iter()
            .position(|(needle, _, _)| path.contains(needle.as_str()))
        {
            if self.targeted_puts[i].1 > 0 {
                self.targeted_puts[i].1 -= 1;
                return;
            }
            let (_, _, strike) = self.targeted_puts.remove(i);
            self.failures.entry(Op::Put).or_default().insert(0, strike);
        }
    }
}

impl Script {
    /// A GET of `path` is about to enter: the first targeted failure that names it becomes the
    /// next scripted one.
    pub(super) fn get_of(&mut self, path: &str) {
        if let Some(i) = self
            .targeted_gets
            .iter()
            .position(|(needle, _)| path.contains(needle.as_str()))
        {
            let (_, strike) = self.targeted_gets.remove(i);
            self.failures.entry(Op::Get).or_default().insert(0, strike);
        }
    }
}

/// The fate of one call, decided when it enters.
#[derive(Debug, Default)]
pub(super) struct Fate {
    pub(super) strike: Option<Strike>,
    /// Latency spent before the inner call.
    pub(super) before: Duration,
    /// Latency spent after the inner call.
    pub(super) after: Duration,
    /// The call times out after this long; `true` if its inner call is made meanwhile.
    pub(super) timeout: Option<(Duration, bool)>,
    /// The answer is held back this long after the inner call (never a timeout).
    pub(super) late: Duration,
    /// A create-if-absent put that lands and is answered with an error.
    create_after: bool,
}

impl<T: ObjectStore> FailingStore<T> {
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

    /// The next PUT to a path containing `needle` fails at `strike`; other PUTs go through.
    pub fn fail_next_put_to(&self, needle: &str, strike: Strike) {
        self.fail_put_to_after(needle, 0, strike);
    }

    /// The PUT to a path containing `needle` after `skip` such PUTs went through fails at
    /// `strike` (a crash between two writes of one object); other PUTs go through.
    pub fn fail_put_to_after(&self, needle: &str, skip: usize, strike: Strike) {
        self.script()
            .targeted_puts
            .push((needle.to_owned(), skip, strike));
    }

    /// The next GET (not a HEAD) of a path containing `needle` fails at `strike`; other GETs go
    /// through.
    pub fn fail_next_get_of(&self, needle: &str, strike: Strike) {
        self.script()
            .targeted_gets
            .push((needle.to_owned(), strike));
    }

    /// PUTs sent so far to paths containing `needle` (each attempt counts, whatever its fate).
    pub fn puts_to(&self, needle: &str) -> u64 {
        self.script()
            .puts_by_path
            .iter()
            .filter(|(path, _)| path.contains(needle))
            .map(|(_, n)| n)
            .sum()
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
        s.targeted_puts.clear();
        s.targeted_gets.clear();
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

    /// Answer every update-if-match put `NotImplemented`, as a store whose software stopped
    /// keeping the condition (Swift's native backend answers so): what a bank learnt of it
    /// must then be forgotten.
    pub fn set_refuse_updates(&self, refuse: bool) {
        self.script().refuse_updates = refuse;
    }

    /// Puts, gets, heads, copies and renames started and not yet answered (or given up on);
    /// deletes and listings are not counted. A test driving a mock clock waits for none before
    /// moving it, so that a real server's latency does not pass as mock time.
    pub fn in_flight(&self) -> usize {
        self.script().in_flight
    }

    /// How many `op` requests were made (including failed ones).
    pub fn calls(&self, op: Op) -> u64 {
        self.script().calls.get(&op).copied().unwrap_or(0)
    }

    /// The faults injected so far, by kind.
    pub fn faults(&self) -> FaultCounts {
        self.script().counts
    }

    pub(super) fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("fault script poisoned")
    }

    /// The clock's current instant, if there is a clock.
    pub(super) fn now(&self) -> Option<Instant> {
        match &self.timing {
            Timing::None => None,
            Timing::Advance(clock) => Some(clock.now()),
            Timing::Sleep(clock) => Some(clock.now()),
        }
    }

    /// Spend `latency`: advance the mock clock, or sleep on the clock.
    pub(super) async fn spend(&self, latency: Duration) {
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
    pub(super) async fn enter(&self, op: Op, create: bool) -> Result<Fate> {
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

    pub(super) async fn run<R>(
        &self,
        op: Op,
        call: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        self.run_as(op, false, call).await
    }

    pub(super) async fn run_as<R>(
        &self,
        op: Op,
        create: bool,
        call: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        let _flying = InFlight::enter(self);
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
    pub(super) async fn deliver_late(&self, late: Duration) {
        if !late.is_zero() {
            self.script().counts.late_answers += 1;
            self.spend(late).await;
        }
    }
}

/// Counts a call in flight until it is answered or dropped (a caller that gives up).
struct InFlight<'a, T>(&'a FailingStore<T>);

impl<'a, T> InFlight<'a, T> {
    fn enter(store: &'a FailingStore<T>) -> Self {
        store
            .script
            .lock()
            .expect("fault script poisoned")
            .in_flight += 1;
        Self(store)
    }
}

impl<T> Drop for InFlight<'_, T> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.script.lock() {
            s.in_flight -= 1;
        }
    }
}

pub(super) fn injected(op: Op, when: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FailingStore",
        source: format!("injected fault: op={op:?} {when}").into(),
    }
}
