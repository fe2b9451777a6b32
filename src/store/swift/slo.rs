//! Multipart uploads as Swift Static Large Objects (the `slo` middleware).
//!
//! Each part is a segment object `<key>.segments/<upload>/<part>` (zero-padded part number), so
//! a checkpoint's segments live under its `data/` prefix: whatever deletes that prefix (the GC,
//! its late-data sweep) deletes them too, and a crashed upload leaves nothing elsewhere.
//! `complete` PUTs the manifest (`?multipart-manifest=put`) listing every segment with its ETag
//! and size; the proxy checks each segment before it accepts the manifest, and only then does
//! `<key>` exist. A HEAD then checks that `<key>` is a large object (a proxy without `slo`
//! would have stored the manifest as data: deleted, and the upload fails). `abort` deletes the
//! segments written.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use http::header::CONTENT_LENGTH;
use http::{HeaderValue, Method};
use object_store::path::Path;
use object_store::{MultipartUpload, PutPayload, PutResult, Result, UploadPart};

use super::client::{Request, Target};
use super::{SwiftStore, SwiftWrite};

#[derive(Debug, Clone)]
struct Segment {
    path: Path,
    e_tag: Option<String>,
    size: usize,
}

/// One SLO upload; see the module documentation.
#[derive(Debug)]
pub(crate) struct SloUpload {
    store: SwiftStore,
    location: Path,
    prefix: String,
    segments: Arc<Mutex<Vec<Option<Segment>>>>,
}

impl SloUpload {
    pub(crate) fn new(store: SwiftStore, location: &Path) -> Self {
        let upload = uuid::Uuid::new_v4().simple().to_string();
        Self {
            prefix: format!("{location}.segments/{upload}"),
            store,
            location: location.clone(),
            segments: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn written(&self) -> Vec<Option<Segment>> {
        self.segments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl MultipartUpload for SloUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let index = {
            let mut segments = self.segments.lock().unwrap_or_else(|e| e.into_inner());
            segments.push(None);
            segments.len() - 1
        };
        let path = Path::from(format!("{}/{index:08}", self.prefix));
        let store = self.store.clone();
        let segments = self.segments.clone();
        Box::pin(async move {
            let size = data.content_length();
            let (write, _) = store.put_raw(&path, data, http::HeaderMap::new()).await?;
            let e_tag = write.e_tag.map(|t| t.trim_matches('"').to_owned());
            segments.lock().unwrap_or_else(|e| e.into_inner())[index] =
                Some(Segment { path, e_tag, size });
            Ok(())
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let container = &self.store.client.container;
        let mut manifest = Vec::new();
        for (i, segment) in self.written().into_iter().enumerate() {
            let Some(s) = segment else {
                return Err(object_store::Error::Generic {
                    store: super::error::STORE,
                    source: format!(
                        "part {i} of the upload of `{}` was not written; abort and start over",
                        self.location
                    )
                    .into(),
                });
            };
            manifest.push(serde_json::json!({
                "path": format!("/{container}/{}", s.path),
                "etag": s.e_tag,
                "size_bytes": s.size,
            }));
        }
        let body = serde_json::to_vec(&manifest).expect("a JSON array");
        let req = Request::new(Method::PUT, Target::Object(&self.location))
            .query("multipart-manifest", "put")
            .header(CONTENT_LENGTH, HeaderValue::from(body.len()))
            .body(PutPayload::from(body));
        let response = self.store.client.send(&req).await?;
        if !response.status().is_success() {
            return Err(self
                .store
                .client
                .status_error(&req.method, self.location.as_ref(), response)
                .await
                .into());
        }
        let write = SwiftWrite::from_headers(response.headers());
        // A proxy without `slo` in its pipeline (GET /info may come from another proxy of the
        // fleet) stores the manifest itself as the object: check, and never leave that behind.
        let head = Request::new(Method::HEAD, Target::Object(&self.location))
            .header(super::headers::X_NEWEST, HeaderValue::from_static("true"));
        let answer = self.store.client.send(&head).await?;
        if !answer.headers().contains_key("x-static-large-object") {
            let _ = object_store::ObjectStoreExt::delete(&self.store, &self.location).await;
            return Err(object_store::Error::NotImplemented {
                operation: format!(
                    "multipart upload of `{}`: the proxy stored the SLO manifest as plain data \
                     (no `slo` middleware in its pipeline); it was deleted",
                    self.location
                ),
                implementer: super::error::STORE.to_owned(),
            });
        }
        Ok(PutResult {
            e_tag: write.e_tag,
            version: None,
            extensions: Default::default(),
        })
    }

    async fn abort(&mut self) -> Result<()> {
        for segment in self.written().into_iter().flatten() {
            match object_store::ObjectStoreExt::delete(&self.store, &segment.path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
