//! A store-clock reading made once per operation, on first use.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::store_time::StoreTime;
use crate::bank::Bank;
use crate::clock::SharedClock;
use crate::error::Result;

/// A store-clock reading made on first use and kept for the rest of one operation (two requests
/// at most per operation, none when nothing needs judging).
#[derive(Debug, Default)]
pub(crate) struct LazyStoreTime(Option<StoreTime>);

impl LazyStoreTime {
    pub(crate) fn new() -> Self {
        Self(None)
    }

    /// The reading, made now if it was not yet.
    pub(crate) async fn get(&mut self, bank: &Bank, clock: &SharedClock) -> Result<StoreTime> {
        if let Some(t) = self.0 {
            return Ok(t);
        }
        let t = bank.store_time(clock).await?;
        self.0 = Some(t);
        Ok(t)
    }

    /// The store's time, at least, at monotonic instant `sent`: the instant taken before the
    /// read being judged was sent.
    pub(crate) async fn lower_at(
        &mut self,
        bank: &Bank,
        clock: &SharedClock,
        sent: Instant,
    ) -> Result<DateTime<Utc>> {
        Ok(self.get(bank, clock).await?.at_send(sent, Duration::ZERO))
    }
}
