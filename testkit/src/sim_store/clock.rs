//! [`StoreClock`]: the store's own wall clock, skewed and jumping relative to everyone else's.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use banklease::clock::{Clock, SharedClock};
use chrono::{DateTime, TimeDelta, Utc};

/// The store's wall clock: a simulated clock's wall time plus an offset that can be set (skew
/// relative to everyone else) and moved forward (a jump). Cheap to clone; clones share state.
#[derive(Clone)]
pub struct StoreClock {
    inner: Arc<StoreClockInner>,
}

struct StoreClockInner {
    source: SharedClock,
    offset: Mutex<TimeDelta>,
    jumped: Mutex<Duration>,
}

impl fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreClock")
            .field("now", &self.now())
            .field("skew", &self.skew())
            .finish()
    }
}

impl StoreClock {
    /// A store clock that follows `source`'s wall time (move `source` to move it), with no skew.
    pub fn new(source: impl Clock) -> Self {
        Self {
            inner: Arc::new(StoreClockInner {
                source: Arc::new(source),
                offset: Mutex::new(TimeDelta::zero()),
                jumped: Mutex::new(Duration::ZERO),
            }),
        }
    }

    /// Skew the store's wall clock by `skew` relative to its source (positive: the store is
    /// ahead). Owners never read the store's clock, so any skew must be harmless.
    pub fn with_skew(self, skew: TimeDelta) -> Self {
        *self.offset() = skew;
        self
    }

    /// The current offset relative to the source (the skew plus every jump so far).
    pub fn skew(&self) -> TimeDelta {
        *self.offset()
    }

    /// Move the store's clock forward by `by` at once, as a clock correction would.
    pub fn jump_forward(&self, by: Duration) {
        *self.offset() += TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
        *self.inner.jumped.lock().expect("store clock poisoned") += by;
    }

    /// Move the store's clock back by `by` at once: the correction of a clock that read ahead
    /// (a forward jump undone). Not counted in [`jumped`](Self::jumped).
    pub fn step_back(&self, by: Duration) {
        *self.offset() -= TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
    }

    /// The sum of every forward jump so far.
    pub fn jumped(&self) -> Duration {
        *self.inner.jumped.lock().expect("store clock poisoned")
    }

    /// The store's current wall time.
    pub fn now(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from(self.inner.source.system_now()) + self.skew()
    }

    /// The clock this store clock follows.
    pub fn source(&self) -> &SharedClock {
        &self.inner.source
    }

    fn offset(&self) -> std::sync::MutexGuard<'_, TimeDelta> {
        self.inner.offset.lock().expect("store clock poisoned")
    }
}
