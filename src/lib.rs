//! # banklease
//!
//! Owner leases, checkpoint indexes and a safe garbage collector for protection (backup) services
//! that keep their checkpoints in object storage.
//!
//! A protection service writes checkpoints into a *bank*. While a checkpoint is being written its
//! status is `protecting`. Each running instance of the service is an *owner* and keeps one lease
//! object in the bank; as long as the lease lives its `protecting` checkpoints are in progress.
//! Once the lease is gone they are zombies that the GC (crate `banklease-gc`) may collect.
//!
//! ## Embedding the lease in a protection service
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use banklease::{Bank, LeaseState, LeaseWindows, OwnerId, OwnerLease};
//! use banklease::clock::{Clock, Jitter, SystemClock};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> banklease::Result<()> {
//! // The bank: here in memory; in production `file:///var/lib/bank`, `s3://bucket/prefix`, ...
//! let bank = Bank::open("memory://")?;
//! let clock: Arc<dyn Clock> = Arc::new(SystemClock);
//!
//! // One owner id per process: sha256 of hostname, pid and start time.
//! let owner = OwnerId::for_this_process(clock.system_now());
//! let windows = LeaseWindows::new(
//!     Duration::from_millis(200), // renew_window
//!     Duration::from_secs(1),     // expire_window
//!     Duration::from_millis(150), // validity_window
//! )?;
//!
//! // Acquire (create-if-absent) and keep it renewed in the background.
//! let lease = OwnerLease::acquire(&bank, owner, windows, clock.clone()).await?;
//! let keeper = lease.spawn_keeper(Jitter::from_entropy(), 0.1);
//! let mut state = keeper.state();
//!
//! // Before every update of a checkpoint: zero requests, answered from memory.
//! assert!(lease.check_validity());
//! lease.ensure_valid()?; // the same, as an error that says why not
//!
//! // Keepers publish every renewal; a Lost lease means: stop writing, now.
//! tokio::time::sleep(Duration::from_millis(450)).await;
//! assert!(matches!(*state.borrow_and_update(), LeaseState::Held { .. }));
//!
//! // Orderly shutdown: stop renewing and delete the lease object.
//! keeper.release().await?;
//! assert!(!lease.check_validity());
//! # Ok(())
//! # }
//! ```
//!
//! ## Where things are
//!
//! The crate root holds what a protection service embeds: [`Bank`], [`OwnerLease`] and its
//! [`Keeper`], [`Checkpoint`], [`LeaseObserver`] for judging others' leases, [`LeaseWindows`],
//! [`Config`], [`Error`]. What the GC, the CLI and tools need beside it is in named modules:
//!
//! - [`checkpoint`]: checkpoints, the protecting index, the records an observer reads;
//! - [`clock`]: time in one home: the `Clock` trait, the store's clock ([`clock::StoreTime`]),
//!   drift ([`clock::drift`]) and expiry ([`clock::expiry`]);
//! - [`config`]: the configuration file and its environment overrides;
//! - [`lease`]: owner leases, their records ([`lease::read_lease`]) and limits;
//! - [`observe`]: judging a lease from outside ([`observe::judge`]);
//! - [`error`]: the error, its kinds, [`error::error_chain`];
//! - [`id`]: owner and checkpoint ids, host names;
//! - [`capability`]: what a store enforces, as a bank's probe found it;
//! - [`process`]: the kernel's word on processes (for the CLI's supervisor of a tree);
//! - [`lock`]: named leases and locks on any key; fencing in [`lock::fence`], the processes and
//!   sessions a holder binds in [`lock::process`] and [`lock::session`];
//! - [`paths`]: every key of the bank's layout, built and parsed;
//! - [`layout`]: the bank descriptor (`banklease init`);
//! - [`doctor`]: what a store really enforces, and the verdicts on it;
//! - [`store`]: the stores banklease adds (`file:`, Swift) and the request counter;
//! - `collector` (feature `collector`, enabled by the GC crate only): the operations only a
//!   collector may do — decide on another owner's checkpoint, tombstone it. An owner's build
//!   does not have them: without the feature this does not compile (checked by
//!   `cargo test -p banklease --doc`, which builds the library without the feature):
//!
#![cfg_attr(not(feature = "collector"), doc = "```compile_fail")]
#![cfg_attr(feature = "collector", doc = "```no_run")]
//! # async fn f(bank: banklease::Bank, owner: banklease::OwnerId) -> banklease::Result<()> {
//! let id: banklease::CheckpointId = "someone-elses-checkpoint".parse()?;
//! banklease::collector::write_tombstone(&bank, &id, &owner, None, chrono::Utc::now()).await
//! # }
//! ```

mod bank;
pub mod capability;
pub mod checkpoint;
pub mod clock;
#[cfg(feature = "collector")]
pub mod collector;
pub mod config;
pub mod credentials;
pub mod doctor;
pub mod error;
pub mod id;
pub mod layout;
mod learnt;
pub mod lease;
pub mod lock;
pub mod observe;
pub mod paths;
pub mod process;
mod race;
pub mod store;
mod windows;

/// The `tracing` target of notices: what an operator should know about how a command works
/// (read-only access judged by the store's `Date`), not a problem. A command line shows them
/// as one `note:` line; a daemon logs them as warnings.
pub const NOTE_TARGET: &str = "banklease::note";

pub use bank::Bank;
pub use capability::Capabilities;
pub use checkpoint::upload::DataUpload;
pub use checkpoint::{Checkpoint, Status};
pub use config::Config;
pub use credentials::Credentials;
pub use error::{Error, ErrorKind, Result};
pub use id::{CheckpointId, OwnerId};
pub use lease::{Keeper, LeaseRecord, LeaseState, OwnerLease};
pub use observe::{LeaseObserver, LeaseView, ValidityCheck};
pub use windows::LeaseWindows;
