//! What an [`Observer`] is told of each mutation, at the instant it takes effect.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;

use super::state::{under, Entry};

/// What a mutation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationKind {
    /// An unconditional put (or a completed multipart upload).
    Overwrite,
    /// A create-if-absent put that created the object.
    Create,
    /// An If-Match put that matched.
    Update,
    /// A deletion of an object that existed.
    Delete,
    /// The target of a copy (or of a rename).
    Copy,
}

/// One mutation, at the instant it took effect.
#[derive(Debug)]
pub struct Mutation<'a> {
    /// What happened.
    pub kind: MutationKind,
    /// The object.
    pub path: &'a Path,
    /// Its new content (`None` for a deletion).
    pub data: Option<&'a Bytes>,
    /// Its content before the mutation (`None` if it did not exist).
    pub previous: Option<&'a Bytes>,
    /// The store clock's time of the mutation (the new `last_modified`).
    pub at: DateTime<Utc>,
}

/// The store's objects as an [`Observer`] sees them (after the mutation).
pub struct StoreView<'a> {
    pub(super) map: &'a BTreeMap<Path, Entry>,
}

impl fmt::Debug for StoreView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreView")
            .field("objects", &self.map.len())
            .finish()
    }
}

impl StoreView<'_> {
    /// The content of `path`, if it exists.
    pub fn get(&self, path: &Path) -> Option<&Bytes> {
        self.map.get(path).map(|e| &e.data)
    }

    /// The paths under `prefix` (segment-wise, like a listing), in order.
    pub fn paths_under(&self, prefix: &Path) -> Vec<&Path> {
        under(self.map, Some(prefix))
            .map(|(path, _)| path)
            .collect()
    }
}

/// Called with each mutation at the instant it takes effect, under the store's lock: it must
/// not call the store (use the [`StoreView`]), and should be quick.
pub type Observer = Arc<dyn Fn(&Mutation<'_>, &StoreView<'_>) + Send + Sync>;
