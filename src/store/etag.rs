//! `EtagAdapter<T>`: the one place a read version becomes the condition of a conditional
//! overwrite. Every method is forwarded; an overwrite's `If-Match` is sent in the form the
//! store honours, which the capability probe measures ([`EtagForm`]).
//!
//! Ceph RGW (and DigitalOcean Spaces, also RGW) keeps ETags unquoted and compares `If-Match` on
//! PUT byte for byte with it: the quoted ETag it returns itself (and that object_store sends
//! back, as HTTP says it should) gets 412 even when it matches, while the unquoted form is
//! honoured (and atomic: one winner of 16 racing writers in every round). Stores that compare
//! correctly are left alone: the form switches only when the probe saw a matching quoted ETag
//! refused and the unquoted one honoured.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
    UpdateVersion,
};

/// Which form of an ETag a store honours in `If-Match`, shared by every handle on one bank.
/// Once the unquoted form is measured it stays: nothing is ever sent quoted again, so no
/// writer meets a refusal of a condition that held.
#[derive(Debug, Clone, Default)]
pub struct EtagForm {
    unquoted: Arc<AtomicBool>,
}

impl EtagForm {
    /// Whether conditions are sent unquoted.
    pub fn is_unquoted(&self) -> bool {
        self.unquoted.load(Ordering::SeqCst)
    }

    /// Send every condition unquoted from now on (the probe saw the quoted form refused and
    /// the unquoted one honoured).
    pub(crate) fn use_unquoted(&self) {
        self.unquoted.store(true, Ordering::SeqCst);
    }

    /// `version` as this store honours it.
    pub fn condition(&self, version: UpdateVersion) -> UpdateVersion {
        if !self.is_unquoted() {
            return version;
        }
        unquoted(version)
    }
}

/// `version` with its ETag's surrounding quotes (and a weak `W/` prefix) removed.
pub(crate) fn unquoted(version: UpdateVersion) -> UpdateVersion {
    UpdateVersion {
        e_tag: version.e_tag.map(|t| {
            let t = t.trim();
            let t = t.strip_prefix("W/").unwrap_or(t);
            t.strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(t)
                .to_owned()
        }),
        version: version.version,
    }
}

/// A store whose overwrites' conditions are sent in the form [`EtagForm`] says.
#[derive(Clone)]
pub struct EtagAdapter<T> {
    inner: T,
    form: EtagForm,
}

impl<T: ObjectStore> EtagAdapter<T> {
    /// `inner`, its conditions sent as `form` says.
    pub fn new(inner: T, form: EtagForm) -> Self {
        Self { inner, form }
    }
}

impl<T: ObjectStore> fmt::Debug for EtagAdapter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

impl<T: ObjectStore> fmt::Display for EtagAdapter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for EtagAdapter<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> Result<PutResult> {
        if let PutMode::Update(version) = opts.mode {
            opts.mode = PutMode::Update(self.form.condition(version));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_surrounding_quotes_go() {
        let v = |t: &str| UpdateVersion {
            e_tag: Some(t.to_owned()),
            version: Some("7".to_owned()),
        };
        let form = EtagForm::default();
        assert_eq!(form.condition(v("\"abc\"")).e_tag.unwrap(), "\"abc\"");
        form.use_unquoted();
        assert_eq!(form.condition(v("\"abc\"")).e_tag.unwrap(), "abc");
        assert_eq!(form.condition(v("W/\"abc\"")).e_tag.unwrap(), "abc");
        assert_eq!(form.condition(v("abc")).e_tag.unwrap(), "abc");
        assert_eq!(form.condition(v("\"a\"b\"")).e_tag.unwrap(), "a\"b");
        assert_eq!(form.condition(v("\"x\"")).version.unwrap(), "7");
    }
}
