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
//! - [`bank`]: opening a bank from a URL, the object layout, the store's clock;
//! - [`capability`]: what the store really enforces, probed once per bank;
//! - [`lease`]: the lease core (records, the expiry judgement, the store's clock, the holding
//!   state machine and its keeper) and the owner lease: acquire, renew, release and the
//!   zero-request validity check;
//! - [`checkpoint`]: checkpoints, the protecting index and the completion/collection decision;
//! - [`observe`]: the observer's (GC's, CLI's) judgement of a lease on the store's clock;
//! - [`config`], [`windows`], [`id`], [`clock`], [`error`].

pub mod bank;
pub mod capability;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod counting;
pub mod doctor;
pub mod error;
pub mod id;
pub mod layout;
pub mod lease;
pub mod local;
pub mod lock;
pub mod observe;
pub mod store_cause;
pub mod swift;
pub mod upload;
pub mod windows;

pub use bank::{Bank, StoreTime};
pub use capability::{Capabilities, Condition, RenewalMechanism};
pub use checkpoint::{Checkpoint, Status};
pub use config::Config;
pub use error::{Error, Result};
pub use id::OwnerId;
pub use lease::{Keeper, LeaseRecord, LeaseState, OwnerLease};
pub use observe::{LeaseObserver, LeaseView, ValidityCheck};
pub use windows::LeaseWindows;
