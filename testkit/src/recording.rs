//! `RecordingStore<T>`: forwards every call and appends one line per request to a log file,
//! so that the GC pass's requests can be replayed raw against an identical bank (the store's
//! floor, see gc/benches/gc_pass/replay.rs). The log is streamed through a buffered writer, so
//! recording keeps memory flat.
//!
//! Line format (tab-separated): `kind  group  mode  size  path`, where `path` is relative to the
//! bank's prefix; `kind` is `put`, `get`, `head`, `delete`, `list`, `list_delim`, `copy`,
//! `rename` or `multipart`; `group` numbers the `delete_stream` calls (a group is replayed as
//! one call, so that S3's bulk delete sees the same chunks); `mode` is the put mode
//! (`overwrite`, `create`, `update`) and `size` the payload bytes.

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

#[derive(Debug)]
struct Log {
    out: Mutex<BufWriter<File>>,
    prefix: String,
    groups: AtomicU64,
    lines: AtomicU64,
}

impl Log {
    fn write(&self, kind: &str, group: u64, mode: &str, size: usize, path: Option<&Path>) {
        let path = path.map(|p| p.as_ref()).unwrap_or("");
        let rel = if self.prefix.is_empty() {
            path
        } else if path == self.prefix {
            ""
        } else {
            path.strip_prefix(&self.prefix)
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(path)
        };
        let mut out = self.out.lock().expect("log lock");
        // A failed write makes the replay incomplete; it is detected by the line count.
        if writeln!(out, "{kind}\t{group}\t{mode}\t{size}\t{rel}").is_ok() {
            self.lines.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The recording wrapper.
#[derive(Clone)]
pub struct RecordingStore<T> {
    inner: T,
    log: Arc<Log>,
}

impl<T: ObjectStore> RecordingStore<T> {
    /// Wrap `inner`, logging to `file` paths relative to `prefix`.
    pub fn new(inner: T, file: &std::path::Path, prefix: &Path) -> std::io::Result<Self> {
        Ok(Self {
            inner,
            log: Arc::new(Log {
                out: Mutex::new(BufWriter::new(File::create(file)?)),
                prefix: prefix.as_ref().to_owned(),
                groups: AtomicU64::new(0),
                lines: AtomicU64::new(0),
            }),
        })
    }

    /// Flush the log; returns the lines written.
    pub fn finish(&self) -> std::io::Result<u64> {
        self.log.out.lock().expect("log lock").flush()?;
        Ok(self.log.lines.load(Ordering::Relaxed))
    }
}

impl<T: ObjectStore> fmt::Debug for RecordingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordingStore({})", self.inner)
    }
}

impl<T: ObjectStore> fmt::Display for RecordingStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordingStore({})", self.inner)
    }
}

fn mode_name(mode: &PutMode) -> &'static str {
    match mode {
        PutMode::Overwrite => "overwrite",
        PutMode::Create => "create",
        PutMode::Update(_) => "update",
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for RecordingStore<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.log.write(
            "put",
            0,
            mode_name(&opts.mode),
            payload.content_length(),
            Some(location),
        );
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.log.write("multipart", 0, "-", 0, Some(location));
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let kind = if options.head { "head" } else { "get" };
        self.log.write(kind, 0, "-", 0, Some(location));
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.log.write("get", 0, "-", 0, Some(location));
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let log = Arc::clone(&self.log);
        let group = log.groups.fetch_add(1, Ordering::Relaxed) + 1;
        let recorded = locations
            .inspect(move |item| {
                if let Ok(path) = item {
                    log.write("delete", group, "-", 0, Some(path));
                }
            })
            .boxed();
        self.inner.delete_stream(recorded)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.log.write("list", 0, "-", 0, prefix);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.log.write("list", 0, "-", 0, prefix);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.log.write("list_delim", 0, "-", 0, prefix);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.log.write("copy", 0, "-", 0, Some(from));
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.log.write("rename", 0, "-", 0, Some(from));
        self.inner.rename_opts(from, to, options).await
    }
}
