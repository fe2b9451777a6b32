//! The stores banklease adds to object_store's, and what it says about store errors.
//!
//! - `local`: `file:` banks ([`LocalStore`]): atomic conditional writes on a POSIX file system,
//!   and the sweep of their temporaries;
//! - `swift`: the native OpenStack Swift client ([`SwiftStore`]);
//! - `counting`: [`CountingStore`], a wrapper that counts requests by kind;
//! - `sent`: [`requests_sent`], the HTTP requests this process sent, by method;
//! - `cause`: [`classify`], what a store error means for an operator ([`StoreCause`]).

pub(crate) mod aws_chain;
pub(crate) mod cause;
mod counting;
mod etag;
pub(crate) mod local;
pub(crate) mod sent;
pub(crate) mod swift;
pub(crate) mod tls;

pub use crate::capability::is_refusal;
pub use crate::clock::store::{dated, DateRecorder, DATE_RESOLUTION};
pub use cause::{classify, StoreCause, TlsCause};
pub use counting::{Counters, CountingStore};
pub(crate) use etag::unquoted;
pub use etag::{EtagAdapter, EtagForm};
pub use local::{FileSystem, LocalStore, StagedWrite, SweepWalk, TemporarySweep};
pub use sent::{requests_sent, RequestsSent};
pub use swift::{
    SwiftBuilder, SwiftConfigKey, SwiftHead, SwiftStore, SwiftWrite, DEFAULT_LIST_LIMIT,
};
