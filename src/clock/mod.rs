//! Time, in one place: the host's clocks behind a trait, the store's clock, how far clocks may
//! drift, and how a lease's expiry is judged from a reading. One path leads from a reading to a
//! verdict:
//!
//! 1. [`Bank::store_time`](crate::Bank::store_time) reads the store's clock (a probe written and
//!    read back, `src/bank/store_time.rs`) into a [`StoreTime`]: the store's time with bounds,
//!    carried forward on this host's monotonic [`Clock`] and judged at the instant a request
//!    was *sent* ([`StoreTime::at_send`]), never when its answer arrived.
//! 2. [`drift`] adds what two clocks may drift apart over a span (0.1 %, [`drift::clock_drift_over`]).
//! 3. [`expiry::judge_expiry`] turns a lease's stamp, its windows and that reading into an
//!    [`expiry::Expiry`]: alive, or expired since when.
//! 4. [`crate::observe::judge`] makes it a verdict on another owner's lease (`LeaseView`); the
//!    collector's own additions (step detection, the floor, the per-host record) are in
//!    `banklease-gc`'s `time` module.
//!
//! Time and randomness are behind traits so that tests control them.
//!
//! The library never reads the system clock or sleeps directly (clippy's `disallowed_methods`
//! enforces this outside this file). Owner-side lease expiry uses [`Clock::now`], a *monotonic*
//! instant, so wall-clock jumps on the owner's host cannot extend a lease.
//!
//! Invariant: **validity counts time the host spent suspended.** Rust's `Instant` is
//! `CLOCK_MONOTONIC` on Linux, which stops while the host is suspended, whereas the store's
//! clock and every observer's go on. [`SystemClock`]'s `now` adds the growth of
//! `CLOCK_BOOTTIME − CLOCK_MONOTONIC` since the process started, so an owner that wakes from a
//! suspend longer than its remaining validity finds its lease Lost instead of writing on.

pub mod drift;
pub mod expiry;
pub(crate) mod store;

pub use store::{add_saturating, sub_saturating, StoreTime};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rand::{Rng, SeedableRng};

/// A boxed sleep future.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The source of time for owners, keepers and the GC.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current monotonic instant. Never goes backwards.
    fn now(&self) -> Instant;
    /// The current wall-clock time, used only for human-readable fields.
    fn system_now(&self) -> SystemTime;
    /// A future that completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;
    /// This host's boot clock now, with the name of that clock; `None` where it cannot be told
    /// (the default). Unlike [`now`](Self::now), one process's reading means the same to every
    /// other on the host: a collector pairs it with a store-clock reading so that the next
    /// one-shot pass there can tell a step of the store's clock since.
    fn boot_instant(&self) -> Option<BootInstant> {
        None
    }
}

/// A reading of a host's boot clock (`CLOCK_BOOTTIME` on Linux): it never steps, counts time
/// spent suspended, and reads the same in every process of one boot and time namespace, which
/// `clock` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootInstant {
    /// The boot and time namespace the reading belongs to: readings compare only within one.
    pub clock: String,
    /// Time since boot.
    pub since_boot: Duration,
}

impl BootInstant {
    /// The instant of `clock_now` (read with this reading) at which the boot clock read
    /// `since_boot`: `None` when that is not earlier than this reading or before `clock_now`
    /// can count back to.
    pub fn instant_of(&self, clock_now: Instant, since_boot: Duration) -> Option<Instant> {
        clock_now.checked_sub(self.since_boot.checked_sub(since_boot)?)
    }

    /// The boot clock's reading at `instant` (not after `clock_now`, read with this reading).
    pub fn since_boot_at(&self, clock_now: Instant, instant: Instant) -> Option<Duration> {
        self.since_boot
            .checked_sub(clock_now.saturating_duration_since(instant))
    }
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock. Sleeps and instants go through tokio, so tokio's paused time
/// (`#[tokio::test(start_paused = true)]`) also controls it.
///
/// Invariant: **validity counts time the host spent suspended.** Rust's `Instant` (and tokio's)
/// is `CLOCK_MONOTONIC` on Linux, which stops while the host is suspended: an owner whose lease
/// had 30 s left when its laptop or VM was suspended for an hour would wake up believing it
/// still had 30 s, while the store's clock (and every observer) moved on. `now()` therefore adds
/// the time the host has spent suspended since this process first asked — the growth of
/// `CLOCK_BOOTTIME − CLOCK_MONOTONIC`, which only changes across a suspend. Sleeps still run on
/// tokio's timer (they may wake late after a resume: a keeper then finds its lease Lost rather
/// than renewing it in time); every judgement reads `now()`. Linux only: elsewhere no suspended
/// time is counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std() + suspend::suspended()
    }

    #[allow(clippy::disallowed_methods)]
    fn system_now(&self) -> SystemTime {
        SystemTime::now()
    }

    #[allow(clippy::disallowed_methods)]
    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }

    #[cfg(target_os = "linux")]
    fn boot_instant(&self) -> Option<BootInstant> {
        use rustix::time::{clock_gettime, ClockId};
        let clock = crate::process::boot_clock_name()?;
        let t = clock_gettime(ClockId::Boottime);
        Some(BootInstant {
            clock,
            since_boot: Duration::new(
                u64::try_from(t.tv_sec).ok()?,
                u32::try_from(t.tv_nsec).ok()?,
            ),
        })
    }
}

/// Time the host spent suspended, as seen by this process.
mod suspend {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    /// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` when this process first asked (a lower bound).
    static BASE: OnceLock<Duration> = OnceLock::new();
    /// The most suspended time ever returned, in ns: `now()` never goes back even when a
    /// preemption between two clock reads makes one estimate larger than the next.
    static MAX_NS: AtomicU64 = AtomicU64::new(0);
    /// Suspended time added by [`super::simulate_suspend`] (tests only).
    static SIMULATED_NS: AtomicU64 = AtomicU64::new(0);

    #[cfg(target_os = "linux")]
    fn ns(t: rustix::time::Timespec) -> Duration {
        Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    }

    /// Bounds on `CLOCK_BOOTTIME − CLOCK_MONOTONIC`: the boot-time read lies between the two
    /// monotonic reads, so `boot − mono_after ≤ gap ≤ boot − mono_before`. A preemption between
    /// the reads widens the bounds (by milliseconds on a busy machine, which would then be
    /// counted as suspended time), so the reads are repeated, a few times at most, and the
    /// tightest bounds kept: every attempt's bounds hold the same gap unless a suspend happens
    /// during the attempts, which the next call counts.
    #[cfg(target_os = "linux")]
    fn gap_bounds() -> (Duration, Duration) {
        use rustix::time::{clock_gettime, ClockId};
        /// A window this narrow is as good as the clocks' read cost allows.
        const TIGHT: Duration = Duration::from_micros(20);
        const ATTEMPTS: usize = 8;
        let (mut lower, mut upper) = (Duration::ZERO, Duration::MAX);
        for _ in 0..ATTEMPTS {
            let before = ns(clock_gettime(ClockId::Monotonic));
            let boot = ns(clock_gettime(ClockId::Boottime));
            let after = ns(clock_gettime(ClockId::Monotonic));
            lower = lower.max(boot.saturating_sub(after));
            upper = upper.min(boot.saturating_sub(before));
            if after.saturating_sub(before) <= TIGHT {
                break;
            }
        }
        (lower.min(upper), upper)
    }

    /// Elsewhere, no suspended time is counted (the invariant holds on Linux only).
    #[cfg(not(target_os = "linux"))]
    fn gap_bounds() -> (Duration, Duration) {
        (Duration::ZERO, Duration::ZERO)
    }

    /// Suspended time since this process first asked, counted generously (the upper bound of the
    /// gap now against the lower bound at start: the owner's validity may run out a few µs early,
    /// never late), and never decreasing.
    pub(super) fn suspended() -> Duration {
        let base = *BASE.get_or_init(|| gap_bounds().0);
        let estimate = gap_bounds().1.saturating_sub(base)
            + Duration::from_nanos(SIMULATED_NS.load(Ordering::SeqCst));
        let estimate_ns = u64::try_from(estimate.as_nanos()).unwrap_or(u64::MAX);
        let previous = MAX_NS.fetch_max(estimate_ns, Ordering::SeqCst);
        Duration::from_nanos(previous.max(estimate_ns))
    }

    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn simulate(by: Duration) {
        SIMULATED_NS.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

/// Pretend the host was just suspended for `by`: [`SystemClock::now`] jumps forward by `by` for
/// the whole process, as after a real suspend, while tokio's timers do not. For tests of
/// suspend handling; affects every `SystemClock` in the process.
#[cfg(any(test, feature = "test-util"))]
pub fn simulate_suspend(by: Duration) {
    suspend::simulate(by);
}

/// A clock that moves only when told to, for deterministic tests.
///
/// ```
/// use banklease::clock::{Clock, MockClock};
/// use std::time::Duration;
///
/// let clock = MockClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now() - t0, Duration::from_secs(5));
/// ```
#[derive(Clone)]
pub struct MockClock {
    inner: Arc<MockInner>,
}

struct MockInner {
    base: Instant,
    base_system: SystemTime,
    offset: tokio::sync::watch::Sender<Duration>,
}

impl fmt::Debug for MockClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockClock")
            .field("offset", &*self.inner.offset.borrow())
            .finish()
    }
}

impl Default for MockClock {
    fn default() -> Self {
        Self::new()
    }
}

impl MockClock {
    /// A mock clock starting at an arbitrary instant and at 2026-01-01T00:00:00Z.
    #[allow(clippy::disallowed_methods)]
    pub fn new() -> Self {
        let (offset, _) = tokio::sync::watch::channel(Duration::ZERO);
        Self {
            inner: Arc::new(MockInner {
                base: Instant::now(),
                base_system: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
                offset,
            }),
        }
    }

    /// Move time forward, waking every sleeper whose deadline has come.
    pub fn advance(&self, by: Duration) {
        self.inner.offset.send_modify(|o| *o += by);
    }

    /// How far this clock has been advanced since it was made.
    pub fn elapsed(&self) -> Duration {
        *self.inner.offset.borrow()
    }
}

impl Clock for MockClock {
    fn now(&self) -> Instant {
        self.inner.base + self.elapsed()
    }

    fn system_now(&self) -> SystemTime {
        self.inner.base_system + self.elapsed()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let deadline = self.elapsed() + duration;
        let mut rx = self.inner.offset.subscribe();
        Box::pin(async move {
            // `wait_for` checks the current value first, so an advance that happened before the
            // first poll is not missed. An error means the clock was dropped: never wake.
            if rx.wait_for(|o| *o >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// A seeded source of jitter, so that a test run is reproducible.
#[derive(Debug, Clone)]
pub struct Jitter {
    rng: Arc<Mutex<rand::rngs::StdRng>>,
}

impl Jitter {
    /// Jitter from a fixed seed.
    pub fn seeded(seed: u64) -> Self {
        Self {
            rng: Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))),
        }
    }

    /// Jitter seeded from the operating system's entropy.
    pub fn from_entropy() -> Self {
        Self {
            rng: Arc::new(Mutex::new(rand::rngs::StdRng::from_entropy())),
        }
    }

    /// `base` scaled by a uniform factor in `[1 - fraction, 1]`. Jitter only ever shortens a wait,
    /// so a renewal is never later than its window.
    pub fn shorten(&self, base: Duration, fraction: f64) -> Duration {
        let fraction = fraction.clamp(0.0, 1.0);
        let f: f64 = self
            .rng
            .lock()
            .expect("jitter rng poisoned")
            .gen_range(0.0..=fraction);
        base.mul_f64(1.0 - f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn mock_sleep_wakes_only_after_advance() {
        let clock = MockClock::new();
        let sleep = clock.sleep(Duration::from_secs(10));
        let handle = tokio::spawn(sleep);
        clock.advance(Duration::from_secs(9));
        tokio::task::yield_now().await;
        assert!(!handle.is_finished());
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(5), handle)
            .await
            .expect("sleep woke")
            .unwrap();
    }

    #[test]
    fn jitter_is_reproducible_and_only_shortens() {
        let a = Jitter::seeded(7);
        let b = Jitter::seeded(7);
        for _ in 0..100 {
            let x = a.shorten(Duration::from_secs(10), 0.2);
            assert_eq!(x, b.shorten(Duration::from_secs(10), 0.2));
            assert!(x <= Duration::from_secs(10) && x >= Duration::from_secs(8));
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod suspend_noise {
    /// Without a suspend, the counted suspended time must stay near zero however often it is
    /// read while the machine is busy: a preemption between the clock reads is not a suspend.
    #[test]
    fn preemption_is_not_counted_as_suspended_time() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hogs: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = x.wrapping_mul(31).wrapping_add(1);
                    }
                    x
                })
            })
            .collect();
        let readers: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..200_000 {
                        super::suspend::suspended();
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in hogs {
            h.join().unwrap();
        }
        let counted = super::suspend::suspended();
        assert!(
            counted < std::time::Duration::from_micros(200),
            "{counted:?} counted as suspended without any suspend"
        );
    }
}
