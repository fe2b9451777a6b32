//! The store's clock: the one clock every judgement of a holding is made on.
//!
//! - `date`: the `Date` header of a store's answers, recorded per request ([`dated`],
//!   [`DateRecorder`]);
//! - `store_time`: [`StoreTime`], one reading of the store's clock, carried forward on the
//!   holder's monotonic clock and judged at the instant its request was sent;
//! - `probe`: how a [`Bank`](crate::Bank) reads it (`Bank::store_time`: a probe object's
//!   `last_modified`, one per host; the `Date` of a read for who may only read; `file:` banks
//!   read the host's clock);
//! - `lazy`: [`LazyStoreTime`], a reading taken at most once per operation, when first needed.

mod date;
mod lazy;
mod store_time;

pub use date::{dated, DateRecorder, DATE_RESOLUTION};
pub(crate) use lazy::LazyStoreTime;
pub(crate) use store_time::stamp_resolution_ms;
pub use store_time::{add_saturating, sub_saturating, StoreTime};
