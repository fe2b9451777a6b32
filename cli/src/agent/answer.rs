//! The agent's answers: a JSON body with its status, and errors as `{"error", "kind"}` with the
//! HTTP status their kind maps to.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use banklease::{error_chain, Error};
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
        let (status, kind) = match &e {
            Error::ValidityTooShort { .. } => (StatusCode::CONFLICT, "not_valid"),
            Error::LeaseLost { .. } => (StatusCode::CONFLICT, "lost"),
            Error::Fenced { .. } => (StatusCode::CONFLICT, "fenced"),
            Error::CheckpointExists { .. } | Error::CheckpointAmbiguous { .. } => {
                (StatusCode::CONFLICT, "conflict")
            }
            Error::InvalidId { .. } | Error::Config { .. } => {
                (StatusCode::BAD_REQUEST, "bad_request")
            }
            Error::Store {
                source: object_store::Error::NotImplemented { .. },
                ..
            } => (StatusCode::NOT_IMPLEMENTED, "unsupported"),
            Error::Store { .. } | Error::Unavailable { .. } | Error::Corrupt { .. } => {
                (StatusCode::BAD_GATEWAY, "store")
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        if status.is_server_error() {
            tracing::warn!(error = %error_chain(&e), "an agent request failed");
        }
        Self::new(status, kind, error_chain(&e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        Json(self.status, self.body).into_response()
    }
}
