//! The agent's answers: a JSON body with its status, and errors as `{"error", "kind"}` with the
//! HTTP status their kind maps to.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use banklease::error::error_chain;
use banklease::{Error, ErrorKind};
use serde::Serialize;

use super::api::ErrorBody;

/// A JSON answer with its status.
#[derive(Debug)]
pub(super) struct Json<T>(pub StatusCode, pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.1) {
            Ok(body) => (
                self.0,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response(),
            Err(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("cannot encode the answer: {e}"),
            )
            .into_response(),
        }
    }
}

/// An error answer: `{"error", "kind"}` with an HTTP status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, kind: &str, error: String) -> Self {
        Self {
            status,
            body: ErrorBody {
                error,
                kind: kind.to_owned(),
            },
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, kind) = answer_for(&e);
        if status.is_server_error() {
            tracing::warn!(error = %error_chain(&e), "an agent request failed");
        }
        Self::new(status, kind, error_chain(&e))
    }
}

/// The HTTP status and the `kind` of the answer to a request that failed with `e`, from the
/// error's kind: the job's refusals (not valid, lost, fenced, exists) are 409, a bad request 400,
/// the store's failures 502.
fn answer_for(e: &Error) -> (StatusCode, &'static str) {
    match e.kind() {
        ErrorKind::NotValid => (StatusCode::CONFLICT, "not_valid"),
        ErrorKind::Lost => (StatusCode::CONFLICT, "lost"),
        ErrorKind::Fenced => (StatusCode::CONFLICT, "fenced"),
        ErrorKind::Unavailable => (StatusCode::CONFLICT, "conflict"),
        ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "bad_request"),
        // Not the kind alone: of the store's definite answers, one the store does not implement
        // (a multipart upload where it offers none) is the job's to work around.
        ErrorKind::Store
            if matches!(
                e,
                Error::Store {
                    source: object_store::Error::NotImplemented { .. },
                    ..
                }
            ) =>
        {
            (StatusCode::NOT_IMPLEMENTED, "unsupported")
        }
        ErrorKind::Transient
        | ErrorKind::Store
        | ErrorKind::RefusedByStore
        | ErrorKind::Corrupt => (StatusCode::BAD_GATEWAY, "store"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        Json(self.status, self.body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_agent_meets_keeps_its_status() {
        let owner = banklease::OwnerId::parse("svc-1").unwrap();
        let path = object_store::path::Path::from("checkpoints/cp-1/index.json");
        let id = || banklease::CheckpointId::parse("cp-1").unwrap();
        let store = |source| Error::store("put", &path, source);
        let cases = [
            (
                Error::ValidityTooShort {
                    owner_id: owner.clone(),
                    remaining: std::time::Duration::ZERO,
                    validity_window: std::time::Duration::from_secs(1),
                },
                409,
                "not_valid",
            ),
            (
                Error::LeaseLost {
                    owner_id: owner,
                    reason: "deleted".into(),
                },
                409,
                "lost",
            ),
            (
                Error::Fenced {
                    checkpoint_id: id(),
                    decided_by: banklease::checkpoint::Decider::Gc,
                    outcome: banklease::Status::Deleted,
                },
                409,
                "fenced",
            ),
            (
                Error::CheckpointExists {
                    checkpoint_id: id(),
                },
                409,
                "conflict",
            ),
            (
                Error::CheckpointAmbiguous {
                    checkpoint_id: id(),
                },
                409,
                "conflict",
            ),
            (
                banklease::id::validate_id("checkpoint", "a/b")
                    .unwrap_err()
                    .into(),
                400,
                "bad_request",
            ),
            (
                banklease::Error::from("done".parse::<banklease::Status>().unwrap_err()),
                400,
                "bad_request",
            ),
            (
                store(object_store::Error::NotImplemented {
                    operation: "multipart".into(),
                    implementer: "x".into(),
                }),
                501,
                "unsupported",
            ),
            (
                store(object_store::Error::Generic {
                    store: "S3",
                    source: "503 Service Unavailable".into(),
                }),
                502,
                "store",
            ),
            (
                store(object_store::Error::Precondition {
                    path: String::new(),
                    source: "etag".into(),
                }),
                502,
                "store",
            ),
            (
                Error::Corrupt {
                    path: path.clone(),
                    reason: "not json".into(),
                },
                502,
                "store",
            ),
        ];
        for (e, status, kind) in cases {
            assert_eq!(
                answer_for(&e),
                (StatusCode::from_u16(status).unwrap(), kind),
                "{e}"
            );
        }
    }
}
