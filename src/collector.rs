//! What only a collector may do (feature `collector`, which the GC crate enables): decide on
//! another owner's checkpoint, carry out an owner's decision it left unfinished, tombstone a
//! collected checkpoint. Built on [`paths`](crate::paths) and the records of
//! [`checkpoint`](crate::checkpoint).

pub use crate::bank::CLOCK_PROBE_ATTEMPTS;
pub use crate::checkpoint::decision::{
    create_tombstone, decide, finish_owner_decision, write_tombstone,
};
pub use crate::checkpoint::removal::{
    ensure_entry, forget_failed, remove_finished, REMOVING_ENTRY,
};
pub use crate::checkpoint::repair::{
    check_replaceable, replace_decision, replace_index, set_aside, SetAside, MAX_SET_ASIDE_BYTES,
};
pub use crate::checkpoint::Decided;
