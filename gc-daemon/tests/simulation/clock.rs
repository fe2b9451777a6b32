//! Time and randomness of the simulation: deterministic clocks and a seeded generator.

use super::*;

// ---- a deterministic clock -----------------------------------------------------------------

/// A simulated clock that wakes its sleepers in deadline order (ties: in the order they went to
/// sleep), so that a seed replays exactly. `MockClock` wakes through a `tokio::sync::watch`,
/// whose waiters are spread over notify shards chosen at random, so the tasks it wakes run in a
/// different order on every run.
#[derive(Clone)]
pub(crate) struct SimClock {
    pub(crate) inner: Arc<SimClockInner>,
}

pub(crate) struct SimClockInner {
    pub(crate) base: Instant,
    pub(crate) base_system: SystemTime,
    pub(crate) state: Mutex<Timers>,
    /// The name of this host's boot clock, when the clock has one (`Clock::boot_instant`).
    pub(crate) boot: std::sync::OnceLock<String>,
}

#[derive(Default)]
pub(crate) struct Timers {
    pub(crate) elapsed: Duration,
    pub(crate) next: u64,
    pub(crate) sleepers: BTreeMap<(Duration, u64), Waker>,
    /// While set (a suspended host), time may move but no sleeper is woken: nothing of the
    /// host runs until it resumes.
    pub(crate) held: bool,
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimClock({:?})", self.elapsed())
    }
}

impl SimClock {
    /// A clock whose wall time starts `head_start` after 2026-01-01T00:00:00Z.
    pub(crate) fn new(head_start: Duration) -> Self {
        // A `MockClock` lends a base instant without touching the system clock here.
        let origin = MockClock::new();
        Self {
            inner: Arc::new(SimClockInner {
                base: origin.now(),
                base_system: origin.system_now() + head_start,
                state: Mutex::new(Timers::default()),
                boot: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Give this clock a boot clock named `name`: the host's, read the same by every process
    /// on it (here, every collector made on this clock).
    pub(crate) fn boot_as(&self, name: &str) {
        let _ = self.inner.boot.set(name.to_owned());
    }

    pub(crate) fn timers(&self) -> std::sync::MutexGuard<'_, Timers> {
        self.inner.state.lock().expect("clock poisoned")
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.timers().elapsed
    }

    /// Move forward, waking every sleeper whose deadline has come, earliest first (none while
    /// held).
    pub(crate) fn advance(&self, by: Duration) {
        let due: Vec<Waker> = {
            let mut t = self.timers();
            t.elapsed += by;
            if t.held {
                return;
            }
            let cut = (t.elapsed + Duration::from_nanos(1), 0);
            let later = t.sleepers.split_off(&cut);
            std::mem::replace(&mut t.sleepers, later)
                .into_values()
                .collect()
        };
        for waker in due {
            waker.wake();
        }
    }

    /// Hold (a host suspends) or release (it resumes: every sleeper now due is woken) wakeups.
    pub(crate) fn hold(&self, held: bool) {
        self.timers().held = held;
        if !held {
            self.advance(Duration::ZERO);
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.inner.base + self.elapsed()
    }

    fn system_now(&self) -> SystemTime {
        self.inner.base_system + self.elapsed()
    }

    fn boot_instant(&self) -> Option<banklease::clock::BootInstant> {
        Some(banklease::clock::BootInstant {
            clock: self.inner.boot.get()?.clone(),
            // Booted a second before the run: a boot clock reads more than zero.
            since_boot: Duration::from_secs(1) + self.elapsed(),
        })
    }

    fn sleep(&self, duration: Duration) -> banklease::clock::Sleep {
        Box::pin(SimSleep {
            clock: self.clone(),
            deadline: self.elapsed() + duration,
            key: None,
        })
    }
}

pub(crate) struct SimSleep {
    pub(crate) clock: SimClock,
    pub(crate) deadline: Duration,
    pub(crate) key: Option<(Duration, u64)>,
}

impl Future for SimSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let clock = self.clock.clone();
        let mut t = clock.timers();
        if t.elapsed >= self.deadline {
            if let Some(key) = self.key.take() {
                t.sleepers.remove(&key);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(key) => key,
            None => {
                t.next += 1;
                let key = (self.deadline, t.next);
                self.key = Some(key);
                key
            }
        };
        t.sleepers.insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.clock.timers().sleepers.remove(&key);
        }
    }
}

// ---- a small seeded generator (splitmix64), so the test needs no extra dependency ----------

#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub(crate) fn range(&mut self, r: Range<u64>) -> u64 {
        r.start + self.next() % (r.end - r.start).max(1)
    }

    pub(crate) fn ms(&mut self, r: Range<u64>) -> Duration {
        Duration::from_millis(self.range(r))
    }

    pub(crate) fn fork(&mut self) -> Rng {
        Rng::new(self.next())
    }
}

// ---- clocks with drift ---------------------------------------------------------------------

/// Which time an owner's clock counts while its host is suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SuspendTime {
    /// `CLOCK_BOOTTIME`: suspended time counts (what `SystemClock` must use).
    Counted,
    /// `CLOCK_MONOTONIC` on Linux: the clock stops while the host sleeps (broken for leases).
    Stopped,
}

/// A participant's clock: advanced with the world, at its own rate.
#[derive(Debug)]
pub(crate) struct Drifting {
    pub(crate) clock: SimClock,
    pub(crate) rate: f64,
    pub(crate) carry_ns: f64,
    /// The host is suspended until this world instant: nothing of it runs, and its clock
    /// advances or not as `SuspendTime` says.
    pub(crate) suspended: Option<(Duration, SuspendTime)>,
}

impl Drifting {
    pub(crate) fn new(rng: &mut Rng, head_start: Duration) -> Self {
        // A different wall clock: owners' and GCs' wall times never matter to the protocol.
        let clock = SimClock::new(head_start);
        Self {
            clock,
            rate: 1.0 + (rng.unit() * 2.0 - 1.0) * MAX_DRIFT,
            carry_ns: 0.0,
            suspended: None,
        }
    }

    /// Suspend the host until world instant `until`.
    pub(crate) fn suspend(&mut self, until: Duration, time: SuspendTime) {
        self.suspended = Some((until, time));
        self.clock.hold(true);
    }

    /// Advance by `dt` of world time, the world being at `now` afterwards.
    pub(crate) fn advance(&mut self, dt: Duration, now: Duration) {
        match self.suspended {
            Some((until, time)) if now < until => {
                if time == SuspendTime::Counted {
                    self.tick(dt);
                }
            }
            Some((until, time)) => {
                // Resumes within this step: the part of it after `until` always counts.
                let after = now - until;
                let during = dt.saturating_sub(after);
                if time == SuspendTime::Counted {
                    self.tick(during);
                }
                self.suspended = None;
                self.clock.hold(false);
                self.tick(after.min(dt));
            }
            None => self.tick(dt),
        }
    }

    fn tick(&mut self, dt: Duration) {
        let ns = dt.as_nanos() as f64 * self.rate + self.carry_ns;
        let whole = ns.floor();
        self.carry_ns = ns - whole;
        self.clock.advance(Duration::from_nanos(whole as u64));
    }
}
