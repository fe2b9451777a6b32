//! Large data objects: a checkpoint's data written in parts, each sent only while the lease is
//! valid.
//!
//! [`Checkpoint::put_data`] sends one object in one request, so it needs the whole object in
//! memory. [`Checkpoint::upload_data`] starts a multipart upload instead:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> banklease::Result<()> {
//! use std::{sync::Arc, time::Duration};
//! use banklease::{Bank, Checkpoint, LeaseWindows, OwnerId, OwnerLease, clock::SystemClock};
//!
//! let bank = Bank::open("memory://")?;
//! let windows = LeaseWindows::new(Duration::from_secs(1), Duration::from_secs(5), Duration::from_secs(1))?;
//! let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock)).await?;
//! let cp = Checkpoint::create(&lease, &"cp-big".parse()?).await?;
//!
//! let mut upload = cp.upload_data("volume-1").await?;
//! for _ in 0..3 {
//!     upload.put_part(vec![7u8; 5 << 20].into()).await?; // S3 wants parts of at least 5 MiB
//! }
//! assert_eq!(upload.complete().await?, 15 << 20);
//! # Ok(()) }
//! ```
//!
//! Invariant: **no part is sent, and no upload completed, unless the lease is valid at that
//! instant** ([`OwnerLease::ensure_valid`], zero requests), exactly as for `put_data`. A part
//! refused or failed leaves the upload open; [`DataUpload::abort`] removes what was sent (a
//! refused or failed completion aborts by itself). On S3, an upload never aborted (its process
//! died) keeps its parts until a bucket lifecycle rule (`AbortIncompleteMultipartUpload`)
//! removes them; on Swift its segments lie under the checkpoint's data prefix and go with it. The object itself appears only on
//! [`DataUpload::complete`], so a reader never sees half of it.

use std::fmt;

use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::id::validate_id;
use crate::lease::OwnerLease;

/// A data object being written in parts; see the [module documentation](self).
pub struct DataUpload {
    lease: OwnerLease,
    path: Path,
    upload: Box<dyn MultipartUpload>,
    parts: u64,
    bytes: u64,
}

impl fmt::Debug for DataUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataUpload")
            .field("path", &self.path)
            .field("parts", &self.parts)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Checkpoint {
    /// Start a multipart upload of data object `checkpoints/<id>/data/<name>`. Checks validity
    /// first. Fails with [`Error::Store`] (`NotImplemented` inside) on a store without
    /// multipart uploads.
    pub async fn upload_data(&self, name: &str) -> Result<DataUpload> {
        validate_id("data object", name)?;
        self.lease().ensure_valid()?;
        let bank = self.lease().bank();
        let path = crate::paths::Prefix::Data(self.id()).path(bank).join(name);
        let upload = bank
            .store()
            .put_multipart(&path)
            .await
            .map_err(|e| Error::store("put_multipart", &path, e))?;
        Ok(DataUpload {
            lease: self.lease().clone(),
            path,
            upload,
            parts: 0,
            bytes: 0,
        })
    }
}

impl DataUpload {
    /// The object's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Parts sent so far.
    pub fn parts(&self) -> u64 {
        self.parts
    }

    /// Bytes sent so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Send the next part, if the lease is valid now. Every part but the last must meet the
    /// store's minimum part size (5 MiB on S3).
    pub async fn put_part(&mut self, data: PutPayload) -> Result<()> {
        self.lease.ensure_valid()?;
        let len = data.content_length() as u64;
        self.upload
            .put_part(data)
            .await
            .map_err(|e| Error::store("put_part", &self.path, e))?;
        self.parts += 1;
        self.bytes += len;
        Ok(())
    }

    /// Make the object visible, if the lease is valid now. Returns its size. A refused or
    /// failed completion aborts the upload (best effort), so no parts are left behind.
    pub async fn complete(mut self) -> Result<u64> {
        let completed = match self.lease.ensure_valid() {
            Ok(()) => self
                .upload
                .complete()
                .await
                .map(|_| self.bytes)
                .map_err(|e| Error::store("complete_multipart", &self.path, e)),
            Err(e) => Err(e),
        };
        if completed.is_err() {
            if let Err(abort) = self.upload.abort().await {
                tracing::warn!(path = %self.path, error = %abort,
                    "aborting an upload whose completion failed failed; the store's expiry of \
                     incomplete uploads removes its parts");
            }
        }
        completed
    }

    /// Abandon the upload and remove the parts sent. Needs no validity: it writes no data.
    pub async fn abort(mut self) -> Result<()> {
        self.upload
            .abort()
            .await
            .map_err(|e| Error::store("abort_multipart", &self.path, e))
    }
}
