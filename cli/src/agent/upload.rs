//! Streaming a request's body into a data object: one write when it fits in a part, else a
//! multipart upload whose parts grow with its size.

use axum::body::Body;
use axum::http::StatusCode;
use banklease::error::error_chain;
use banklease::{Checkpoint, DataUpload, Error};
use futures::StreamExt;
use object_store::PutPayload;

use super::answer::ApiError;

/// Data up to this size is sent in one request; larger data as a multipart upload of parts of
/// at least this size (above S3's 5 MiB minimum), each sent only while the lease is valid.
pub const PART_SIZE: usize = 8 << 20;
/// Parts grow (×2 every this many parts, up to [`MAX_PART_SIZE`]) so that large objects stay
/// within the stores' part limits (Swift's 1,000 segments by default: about 89 GiB; S3's
/// 10,000 parts: over a TiB) while small ones keep small buffers.
const PARTS_PER_SIZE: u64 = 100;
/// The largest part, and so the most memory one upload holds.
const MAX_PART_SIZE: usize = 128 << 20;
/// The size of part `n` (0-based) of a multipart upload.
pub fn part_size(n: u64) -> usize {
    let doublings = u32::try_from(n / PARTS_PER_SIZE).unwrap_or(u32::MAX).min(8);
    (PART_SIZE << doublings).min(MAX_PART_SIZE)
}

/// Stream `body` into data object `name`: one write when it fits in a part, else a multipart
/// upload, aborted on any failure so that nothing half-written becomes visible.
pub(super) async fn upload(
    checkpoint: &Checkpoint,
    name: &str,
    body: Body,
) -> Result<(u64, u64), ApiError> {
    let mut stream = body.into_data_stream();
    // Room for a part and the chunk that overflows it, so a buffer is never reallocated to
    // twice its size (bodies arrive in chunks of at most about 1 MiB).
    const SLACK: usize = 2 << 20;
    let mut buffer: Vec<u8> = Vec::with_capacity(PART_SIZE + SLACK);
    let mut multipart = None;
    let mut failure = None;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                failure = Some(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("the upload's body was cut short ({e}); nothing was written"),
                ));
                break;
            }
        };
        buffer.extend_from_slice(&chunk);
        loop {
            let size = part_size(multipart.as_ref().map_or(0, |u: &DataUpload| u.parts()));
            // More than one part's worth: send a part (exactly one part's worth, at the end,
            // may still be the whole object, sent in one request).
            if buffer.len() <= size {
                break;
            }
            let next = part_size(multipart.as_ref().map_or(0, |u: &DataUpload| u.parts()) + 1);
            let mut rest = Vec::with_capacity(next + SLACK);
            rest.extend_from_slice(&buffer[size..]);
            buffer.truncate(size);
            let part = std::mem::replace(&mut buffer, rest);
            let sent = async {
                if multipart.is_none() {
                    multipart = Some(checkpoint.upload_data(name).await.map_err(|e| {
                        no_multipart(&e, checkpoint, name).unwrap_or_else(|| e.into())
                    })?);
                }
                let upload = multipart.as_mut().expect("started above");
                upload.put_part(PutPayload::from(part)).await?;
                Ok::<(), ApiError>(())
            }
            .await;
            if let Err(e) = sent {
                failure = Some(e);
                break;
            }
        }
        if failure.is_some() {
            break;
        }
    }
    match (multipart, failure) {
        (None, None) => {
            let len = buffer.len() as u64;
            checkpoint.put_data(name, PutPayload::from(buffer)).await?;
            Ok((len, 1))
        }
        (Some(mut upload), None) => {
            if !buffer.is_empty() {
                if let Err(e) = upload.put_part(PutPayload::from(buffer)).await {
                    abort(upload).await;
                    return Err(e.into());
                }
            }
            let parts = upload.parts();
            // A refused or failed completion aborts the upload itself.
            let bytes = upload.complete().await?;
            Ok((bytes, parts))
        }
        (upload, Some(e)) => {
            if let Some(upload) = upload {
                abort(upload).await;
            }
            Err(e)
        }
    }
}

async fn abort(upload: DataUpload) {
    if let Err(e) = upload.abort().await {
        tracing::warn!(error = %error_chain(&e),
            "aborting a failed multipart upload failed; on S3 a lifecycle rule \
             (AbortIncompleteMultipartUpload) removes its parts, on Swift they go with the \
             checkpoint's data");
    }
}

/// The answer for data too large for one request on a store without multipart uploads.
fn no_multipart(e: &Error, checkpoint: &Checkpoint, name: &str) -> Option<ApiError> {
    matches!(
        e,
        Error::Store {
            source: object_store::Error::NotImplemented { .. },
            ..
        }
    )
    .then(|| {
        let cause = error_chain(e);
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "unsupported",
            format!(
                "data object name=`{name}` of checkpoint_id=`{}` is larger than {} MiB, which \
                 takes a multipart upload, and bank=`{}` offers none ({cause}); nothing was \
                 written; split the data into objects of at most {} MiB",
                checkpoint.id(),
                PART_SIZE >> 20,
                checkpoint.lease().bank().label(),
                PART_SIZE >> 20
            ),
        )
    })
}
