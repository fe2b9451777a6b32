//! `RgwEtags<T>`: a store that compares `If-Match` on PUT as Ceph RGW's S3 API does. RGW keeps
//! an object's ETag unquoted and compares the header byte for byte with it, while it answers
//! with the quoted form (as HTTP says): a client that sends back the ETag it was given gets 412
//! however current it is, and only the unquoted form is honoured. Every method but `put_opts`
//! is forwarded; `inner` must answer with quoted ETags and compare them quoted (`InMemory`).

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
    UpdateVersion,
};

/// A store comparing `If-Match` with its unquoted ETags, as RGW does.
#[derive(Debug, Clone)]
pub struct RgwEtags<T> {
    inner: T,
}

impl<T: ObjectStore> RgwEtags<T> {
    /// `inner`, its `If-Match` compared as RGW compares it.
    pub fn new(inner: T) -> Self {
        Self { inner }
    }
}

impl<T: ObjectStore> fmt::Display for RgwEtags<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RgwEtags({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for RgwEtags<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> Result<PutResult> {
        if let PutMode::Update(v) = &opts.mode {
            match v.e_tag.as_deref() {
                // The stored form is unquoted: a quoted header never equals it.
                Some(tag) if tag.starts_with('"') => {
                    return Err(object_store::Error::Precondition {
                        path: location.to_string(),
                        source: format!(
                            "rgw: If-Match `{tag}` compared byte for byte with the stored, \
                             unquoted ETag"
                        )
                        .into(),
                    })
                }
                Some(tag) => {
                    opts.mode = PutMode::Update(UpdateVersion {
                        e_tag: Some(format!("\"{tag}\"")),
                        version: v.version.clone(),
                    })
                }
                None => {}
            }
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
