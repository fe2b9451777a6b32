//! The lease core: what owner leases and named locks share, written once.
//!
//! - [`record`](self::record): the versioned record and its bounded read;
//! - the one expiry judgement on the store's clock is [`crate::clock::expiry`];
//! - `holding`: the holder's state machine — commit (send-time expiry, a late answer does not
//!   count), reconcile (settle an ambiguous write by reading it back), Lost is final;
//! - `write`: the one conditional write (token, same-token retry, read-back, deadline) that
//!   leases, locks, tickets and decisions are written with;
//! - `renewal`: one renewal task for any holding (`owner/keeper.rs`: the owner's `Keeper`);
//! - `owner`: the owner lease (`leases/<owner_id>`), a thin user of the above, as is
//!   [`crate::lock`].

mod holding;
mod owner;
pub mod record;
mod renewal;
mod swift;
mod write;

pub use crate::windows::MAX_EXPIRE_WINDOW;
pub use holding::LeaseState;
pub use owner::Keeper;
pub use owner::OwnerLease;
pub use record::{read_lease, read_lease_at, LeaseRecord, LEASE_FORMAT, MAX_LEASE_BYTES};
pub use swift::SWIFT_TTL_SLACK;

pub(crate) use holding::{Held, Holding, Phase, Words};
pub(crate) use record::{encode, new_token, parse_versioned, read_bounded};
pub(crate) use renewal::{Cadence, Failure, Renewable, Running};
pub(crate) use write::{renew, CondWrite, Found, How, Landed, Renewed, Tokened, Written};

/// The target of a keeper's warnings about its own renewals and release (a renewal failed and
/// is retried, a release left to expiry): a daemon's log shows them; a supervisor that says its
/// own one `warning:` and `error:` line about the hold (the CLI's `run`, `lock run`) leaves them
/// out.
pub const RENEWAL_TARGET: &str = "banklease::renewal";
