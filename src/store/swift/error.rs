//! The Swift backend's private error, mapped into [`object_store::Error`] at the API boundary.
//!
//! **Invariant:** no variant carries a secret. Tokens, keys and passwords never reach a message:
//! URLs in messages are auth or storage endpoints (no credentials in them), response bodies are
//! Swift's or Keystone's own error pages, shortened.

use http::{Method, StatusCode};
use object_store::client::HttpError;

use crate::store::cause::AuthFailure;

/// `store` in [`object_store::Error::Generic`].
pub(crate) const STORE: &str = "Swift";

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("swift answered status={status} to {method} path=`{path}`: {body}{hint}")]
    Status {
        method: Method,
        path: String,
        status: StatusCode,
        body: String,
        /// What to check, when the status says (`; ...`), else empty.
        hint: &'static str,
    },

    #[error("{method} path=`{path}` failed after {retries} retries")]
    Request {
        method: Method,
        path: String,
        retries: usize,
        #[source]
        source: HttpError,
    },

    #[error("reading the response to {method} path=`{path}` failed")]
    Body {
        method: Method,
        path: String,
        #[source]
        source: HttpError,
    },

    #[error("authentication as {who} at url=`{url}` failed with status={status}: {body}; {hint}")]
    AuthStatus {
        url: String,
        /// Names and ids, never a secret.
        who: String,
        status: StatusCode,
        body: String,
        hint: &'static str,
    },

    #[error(
        "cannot reach the auth service at url=`{url}`{}: {}; check {variable} and that the \
         service runs there",
        retried(*.retries),
        crate::store::cause::transport_cause(.source)
    )]
    AuthUnreachable {
        url: String,
        retries: usize,
        /// `OS_AUTH_URL` or `ST_AUTH`: where the URL came from.
        variable: &'static str,
        #[source]
        source: HttpError,
    },

    #[error("authentication at url=`{url}` answered without header `{header}`")]
    AuthMissingHeader { url: String, header: &'static str },

    #[error("the keystone token response from url=`{url}` is not valid JSON")]
    TokenResponse {
        url: String,
        #[source]
        source: serde_json::Error,
    },

    #[error(
        "the keystone catalog from url=`{url}` has no object-store endpoint for \
         interface=`{interface}` region=`{region}`: {catalog}; check OS_INTERFACE and \
         OS_REGION_NAME (or set OS_STORAGE_URL)"
    )]
    NoEndpoint {
        url: String,
        interface: String,
        region: String,
        catalog: String,
    },

    // The parser's refusal is the reason itself, not a source: `classify` names a failed
    // request by its innermost cause, which must still say which URL.
    #[error("invalid {what} url=`{url}`: {reason}")]
    InvalidUrl {
        what: &'static str,
        url: String,
        reason: String,
    },

    #[error(
        "no Swift credentials: set ST_AUTH, ST_USER and ST_KEY (TempAuth), or OS_AUTH_URL, \
         OS_USERNAME, OS_PASSWORD and OS_PROJECT_NAME (Keystone v3), or OS_AUTH_TOKEN and \
         OS_STORAGE_URL (pre-authenticated)"
    )]
    MissingCredentials,

    #[error("incomplete {kind} credentials: {missing} is not set")]
    IncompleteCredentials {
        kind: &'static str,
        missing: &'static str,
    },

    #[error(
        "no container configured; use SwiftBuilder::with_container or swift://container/prefix"
    )]
    MissingContainer,

    #[error("unknown Swift configuration key `{key}`")]
    UnknownConfigKey { key: String },

    #[error(
        "container `{container}` does not exist (status 404 on {method}); create it first, \
         e.g. with `swift post {container}`"
    )]
    ContainerNotFound { container: String, method: Method },

    #[error("invalid header `{name}` in the response to {method} path=`{path}`: {reason}")]
    InvalidHeader {
        method: Method,
        path: String,
        name: &'static str,
        reason: String,
    },

    #[error("the listing of container `{container}` is not valid JSON")]
    InvalidListing {
        container: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("object name=`{name}` in container `{container}` is not a valid object_store path")]
    InvalidName {
        container: String,
        name: String,
        #[source]
        source: object_store::path::Error,
    },

    #[error("invalid range for path=`{path}`: {reason}")]
    InvalidRange { path: String, reason: String },

    #[error(
        "swift answered 200 with the whole object to a range request for path=`{path}`; \
         ranges are not supported by this server"
    )]
    RangeIgnored { path: String },

    #[error("invalid argument: {reason}")]
    InvalidArgument { reason: String },

    #[error("building the {method} request for path=`{path}` failed")]
    BuildRequest {
        method: Method,
        path: String,
        #[source]
        source: http::Error,
    },
}

impl Error {
    /// Whether this is the auth service's (or the credentials') fault, with a message that says
    /// so in full: the one line an operator needs.
    pub(crate) fn is_auth(&self) -> bool {
        matches!(
            self,
            Self::AuthStatus { .. }
                | Self::AuthUnreachable { .. }
                | Self::AuthMissingHeader { .. }
                | Self::TokenResponse { .. }
                | Self::NoEndpoint { .. }
                | Self::MissingCredentials
                | Self::IncompleteCredentials { .. }
        ) || matches!(self, Self::Status { hint, .. } if !hint.is_empty())
    }

    /// The HTTP status, if Swift answered with an error status.
    pub(crate) fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl From<Error> for object_store::Error {
    /// The general mapping. Operations that give a status a more specific meaning (412 on a
    /// create-if-absent PUT is `AlreadyExists`, 404 on a PUT is a missing container) map it
    /// before this is reached.
    fn from(err: Error) -> Self {
        let path = match &err {
            Error::Status { path, .. } => path.clone(),
            _ => String::new(),
        };
        let status = err.status();
        let auth_status = match &err {
            Error::AuthStatus { status, .. } => Some(*status),
            _ => None,
        };
        // An authentication failure says in full what failed: classified as it is.
        let source: Box<dyn std::error::Error + Send + Sync> = if err.is_auth() {
            Box::new(AuthFailure(Box::new(err)))
        } else {
            Box::new(err)
        };
        if let Some(status) = auth_status {
            // Rejected credentials are the caller's to fix; anything else is the server's.
            return match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    Self::Unauthenticated { path, source }
                }
                _ => Self::Generic {
                    store: STORE,
                    source,
                },
            };
        }
        match status {
            Some(StatusCode::NOT_FOUND) => Self::NotFound { path, source },
            Some(StatusCode::PRECONDITION_FAILED) => Self::Precondition { path, source },
            Some(StatusCode::NOT_MODIFIED) => Self::NotModified { path, source },
            Some(StatusCode::UNAUTHORIZED) => Self::Unauthenticated { path, source },
            Some(StatusCode::FORBIDDEN) => Self::PermissionDenied { path, source },
            _ => Self::Generic {
                store: STORE,
                source,
            },
        }
    }
}

/// A response body shortened for an error message (Swift's error pages are small HTML).
pub(crate) fn snippet(body: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(body);
    // One line: an HTML error page's lines and indentation become single spaces.
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.as_str();
    if text.chars().count() <= MAX {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(MAX).collect();
    s.push('…');
    s
}

/// ` after N retries`, or nothing when the first attempt was the last (a TLS failure).
fn retried(retries: usize) -> String {
    if retries == 0 {
        String::new()
    } else {
        format!(" after {retries} retries")
    }
}
