//! What a failed store request means, in one line an operator can act on.
//!
//! object_store's errors nest the HTTP client's, which nest the connector's: the cause an
//! operator needs (the bucket is missing, the key is wrong, nothing listens on that port, the
//! endpoint speaks plain HTTP) is at the bottom, and each level repeats the one below. This
//! reads the whole chain once and names the cause, with the HTTP status when there is one.
//! The chain itself is kept as the error's source.
//!
//! ```
//! use banklease::store::{StoreCause, classify};
//!
//! let e = object_store::Error::Generic {
//!     store: "S3",
//!     source: "Server returned non-2xx status code: 404 Not Found: <Code>NoSuchBucket</Code>".into(),
//! };
//! assert_eq!(classify(&e), StoreCause::ContainerMissing { status: Some(404) });
//! ```

use std::fmt;

/// The cause of a failed store request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreCause {
    /// The bucket or container does not exist.
    ContainerMissing {
        /// The HTTP status, when the store answered.
        status: Option<u16>,
    },
    /// The store (or its auth service) refused the credentials.
    CredentialsRefused {
        /// The HTTP status, when the store answered.
        status: Option<u16>,
    },
    /// Authentication failed in a way the backend names in full (Swift: Keystone or TempAuth
    /// refused or could not be reached, no endpoint in the catalog, Swift refused the token).
    Auth {
        /// The backend's one-line message: who authenticated where, what was answered, what to
        /// check. Never a secret.
        message: String,
    },
    /// Nothing accepts connections at the endpoint.
    ConnectionRefused,
    /// The endpoint's host name does not resolve.
    UnknownHost,
    /// TLS failed: a certificate not trusted, expired or for another name, or `https://` to a
    /// plain-HTTP endpoint.
    Tls {
        /// Why, as far as the error tells.
        cause: TlsCause,
    },
    /// The endpoint is plain `http://`, which the client refuses unless allowed.
    HttpNotAllowed,
    /// The store did not answer in time.
    TimedOut,
    /// The object does not exist.
    NotFound,
    /// Something else; the innermost message, shortened to one line.
    Other {
        /// The HTTP status, when the store answered.
        status: Option<u16>,
        /// The innermost message.
        message: String,
    },
}

impl fmt::Display for StoreCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = |s: &Option<u16>| s.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
        match self {
            StoreCause::ContainerMissing { status: s } => write!(
                f,
                "the bucket or container does not exist{}; create it (Swift: `banklease init`; \
                 S3, Azure, GCS: the provider's tools, e.g. `aws s3 mb`, which `banklease init` \
                 names) or fix the bank url",
                status(s)
            ),
            StoreCause::CredentialsRefused { status: s } => write!(
                f,
                "the store refused the credentials{}; check the key, secret or token and their \
                 permissions on this bucket or container",
                status(s)
            ),
            StoreCause::Auth { message } => f.write_str(message),
            StoreCause::ConnectionRefused => write!(
                f,
                "connection refused; check that the store runs at the configured endpoint and port"
            ),
            StoreCause::UnknownHost => {
                write!(
                    f,
                    "the endpoint's host name does not resolve; check the endpoint"
                )
            }
            StoreCause::Tls { cause } => write!(f, "TLS failed: {cause} (not retried)"),
            StoreCause::HttpNotAllowed => write!(
                f,
                "the endpoint is plain http://, which the client refuses; for a local or test \
                 store set AWS_ALLOW_HTTP=true (AZURE_ALLOW_HTTP, GOOGLE_ALLOW_HTTP for those \
                 stores), or use an https:// endpoint"
            ),
            StoreCause::TimedOut => write!(
                f,
                "the store did not answer in time; check that it is reachable and not overloaded"
            ),
            StoreCause::NotFound => write!(f, "the object does not exist"),
            StoreCause::Other { status: s, message } => write!(f, "{message}{}", status(s)),
        }
    }
}

/// Where a private CA can be named, for every line that may need one.
const CA_PLACES: &str = "`[bank] ca_file` (any store), AWS_CA_BUNDLE (S3), OS_CACERT or a \
                         clouds.yaml cloud's `cacert` (Swift and Keystone)";

/// Why TLS failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsCause {
    /// The endpoint's certificate is signed by a CA this host does not trust.
    UnknownIssuer,
    /// The endpoint's certificate has expired.
    Expired,
    /// The endpoint's certificate is not valid yet.
    NotValidYet,
    /// The endpoint's certificate is for another host name.
    NameMismatch,
    /// `https://` to an endpoint that does not speak TLS.
    PlainHttp,
    /// Something else, in the TLS library's words.
    Other {
        /// Its message.
        message: String,
    },
}

impl fmt::Display for TlsCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsCause::UnknownIssuer => write!(
                f,
                "the endpoint's certificate is signed by a CA this host does not trust (unknown \
                 issuer); name that CA's certificate (PEM, not the server's own) in {CA_PLACES}"
            ),
            TlsCause::Expired => write!(
                f,
                "the endpoint's certificate has expired; renew it on the server, or check this \
                 host's clock"
            ),
            TlsCause::NotValidYet => write!(
                f,
                "the endpoint's certificate is not valid yet; check this host's clock"
            ),
            TlsCause::NameMismatch => write!(
                f,
                "the endpoint's certificate is not valid for the host name in its URL; use a \
                 name the certificate holds in the endpoint (AWS_ENDPOINT, OS_AUTH_URL, the \
                 catalog's URL), or reissue the certificate"
            ),
            TlsCause::PlainHttp => write!(
                f,
                "the endpoint does not speak TLS (`https://` to a plain-HTTP port); use \
                 `http://` there (S3: with AWS_ALLOW_HTTP=true)"
            ),
            TlsCause::Other { message } => write!(
                f,
                "{message}; check the endpoint's certificate (a private CA is named in \
                 {CA_PLACES})"
            ),
        }
    }
}

/// What a TLS library error says, if `error` is one (the HTTP clients' rustls, directly or in an
/// I/O error).
fn tls_cause(error: &(dyn std::error::Error + 'static)) -> Option<TlsCause> {
    use rustls::CertificateError as C;
    // The HTTP client nests it in I/O errors (`Other` around `InvalidData` around it), whose
    // `source()` skips what they hold.
    let mut inner: &(dyn std::error::Error + 'static) = error;
    let tls = loop {
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            break tls;
        }
        match inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(held) => inner = held,
            None => return None,
        }
    };
    Some(match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => TlsCause::UnknownIssuer,
            C::Expired | C::ExpiredContext { .. } => TlsCause::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => TlsCause::NotValidYet,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsCause::NameMismatch,
            other => TlsCause::Other {
                message: format!("the endpoint's certificate was refused: {other}"),
            },
        },
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            TlsCause::PlainHttp
        }
        other => TlsCause::Other {
            message: other.to_string(),
        },
    })
}

/// `text` without what names things — backticked spans and URLs — so that a word matched in
/// it is the error's, not a bucket's, path's or host's (`ssl-backups`, `certificate-store`).
fn without_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split('`').enumerate() {
        // Odd parts were between backticks.
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out.split_whitespace()
        .filter(|w| !w.contains("://"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the store refused a write for lack of permission (credentials that may only read, a
/// read-only directory or mount).
pub fn is_refused_write(error: &object_store::Error) -> bool {
    if matches!(
        error,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) {
        return true;
    }
    refused_io_kind(error).is_some()
        || matches!(
            classify(error),
            StoreCause::CredentialsRefused { status: Some(403) }
        )
}

/// The file system's refusal in `error`'s chain (permission denied, a read-only file system),
/// if there is one.
fn refused_io_kind(error: &object_store::Error) -> Option<std::io::ErrorKind> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) {
                return Some(io.kind());
            }
        }
        cause = c.source();
    }
    None
}

/// A write refused for lack of permission (a user or credentials that may only read, a
/// read-only file system), as opposed to credentials refused altogether.
pub(crate) fn is_write_permission(error: &object_store::Error) -> bool {
    is_refused_write(error) && !matches!(error, object_store::Error::Unauthenticated { .. })
}

/// The operator's refusal of a write to `bank` that [`is_write_permission`] recognised: one
/// line, whichever of banklease's own objects was being written.
pub(crate) fn write_refused(bank: &str, error: object_store::Error) -> crate::Error {
    crate::Error::Permission {
        bank: bank.to_owned(),
        what: "write to it (owners, the gc and locks write to the bank)".to_owned(),
        source: Box::new(error),
    }
}

/// A failed write to `bank`: the operator's permission line when the store refused it for lack
/// of permission, else the failed request (`op` on `path`).
pub(crate) fn write_failed(
    bank: &str,
    op: &'static str,
    path: &object_store::path::Path,
    error: object_store::Error,
) -> crate::Error {
    if is_write_permission(&error) {
        write_refused(bank, error)
    } else {
        crate::Error::store(op, path, error)
    }
}

/// A refused write in one line: what the file system refused (`permission denied`, a read-only
/// file system), never the internal path it was writing, else the store's answer as
/// [`classify`] names it.
pub(crate) fn refusal_line(error: &object_store::Error) -> String {
    match refused_io_kind(error) {
        // The kind only: a `file:` bank's error names the staged file it was writing.
        Some(kind) => std::io::Error::from(kind).to_string(),
        None => classify(error).to_string(),
    }
}

/// Name the cause of `error`; see the [module documentation](self).
pub fn classify(error: &object_store::Error) -> StoreCause {
    match classify_chain(error) {
        StoreCause::Other { .. } if matches!(error, object_store::Error::NotFound { .. }) => {
            StoreCause::NotFound
        }
        cause => cause,
    }
}

/// An authentication failure a backend (Swift) names in full: its message is the one line an
/// operator needs, and [`classify`] takes it as it is ([`StoreCause::Auth`]). The backend's own
/// error stays the source.
#[derive(Debug)]
pub(crate) struct AuthFailure(pub(crate) Box<dyn std::error::Error + Send + Sync + 'static>);

impl fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for AuthFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// What a transport failure (an HTTP client's error chain) means, in a few words, for a message
/// that already says where the request went: `connection refused`, `TLS failed (...)`.
pub(crate) fn transport_cause(error: &(dyn std::error::Error + 'static)) -> String {
    match classify_chain(error) {
        StoreCause::ConnectionRefused => "connection refused".to_owned(),
        StoreCause::UnknownHost => "its host name does not resolve".to_owned(),

        StoreCause::HttpNotAllowed => "plain http:// is not allowed".to_owned(),
        StoreCause::TimedOut => "no answer in time".to_owned(),
        other => other.to_string(),
    }
}

/// Whether a transport failure is TLS's (a certificate not trusted, `https://` on a plain
/// port): the same every time, so not retried ([`crate::store::tls::FailFast`]).
pub(crate) fn is_tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    matches!(classify_chain(error), StoreCause::Tls { .. })
}

/// [`classify`] on any error chain (the `NotFound` variant aside).
fn classify_chain(error: &(dyn std::error::Error + 'static)) -> StoreCause {
    let mut texts = Vec::new();
    let mut io_kind = None;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io_kind = Some(io.kind());
        }
        // A backend that already says in full what failed in its authentication.
        if let Some(auth) = c.downcast_ref::<AuthFailure>() {
            return StoreCause::Auth {
                message: auth.to_string(),
            };
        }
        if let Some(cause) = tls_cause(c) {
            return StoreCause::Tls { cause };
        }
        texts.push(c.to_string());
        cause = c.source();
    }
    let all = texts.join("\n").to_lowercase();
    // TLS's words are looked for only outside names (a bucket `ssl-backups`).
    let unnamed = without_names(&all);
    let tls_has = |needles: &[&str]| needles.iter().any(|n| unnamed.contains(n));
    let status = http_status(&all);
    let has = |needles: &[&str]| needles.iter().any(|n| all.contains(n));
    if io_kind == Some(std::io::ErrorKind::ConnectionRefused) || has(&["connection refused"]) {
        return StoreCause::ConnectionRefused;
    }
    if has(&[
        "dns error",
        "failed to lookup address",
        "name or service not known",
    ]) {
        return StoreCause::UnknownHost;
    }
    if has(&["url scheme is not allowed"]) {
        return StoreCause::HttpNotAllowed;
    }
    // The words of a TLS error that did not come as rustls's (another client's, a proxy's).
    if tls_has(&["invalidcontenttype", "wrong version number"]) {
        return StoreCause::Tls {
            cause: TlsCause::PlainHttp,
        };
    }
    if tls_has(&["unknownissuer", "unknown issuer"]) {
        return StoreCause::Tls {
            cause: TlsCause::UnknownIssuer,
        };
    }
    if tls_has(&[
        "invalid peer certificate",
        "certificate verify failed",
        "tls handshake",
        "ssl routines",
    ]) {
        return StoreCause::Tls {
            cause: TlsCause::Other {
                message: one_line(texts.last().map(String::as_str).unwrap_or_default(), 200),
            },
        };
    }
    if has(&[
        "nosuchbucket",
        "containernotfound",
        "the specified container does not exist",
        "bucket does not exist",
    ]) || (has(&["container `"]) && has(&["does not exist"]))
    {
        return StoreCause::ContainerMissing { status };
    }
    if matches!(status, Some(401 | 403))
        || has(&[
            "accessdenied",
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
            "authenticationfailed",
            "lacked valid authentication",
            "unauthorized",
        ])
    {
        return StoreCause::CredentialsRefused { status };
    }
    if io_kind == Some(std::io::ErrorKind::TimedOut) || has(&["timed out", "deadline has elapsed"])
    {
        return StoreCause::TimedOut;
    }
    let innermost = texts.last().map(String::as_str).unwrap_or_default();
    StoreCause::Other {
        status,
        message: one_line(innermost, 200),
    }
}

/// The first HTTP status (400–599) the chain names.
fn http_status(text: &str) -> Option<u16> {
    for marker in ["status code: ", "status=", "status ", "http "] {
        for (i, _) in text.match_indices(marker) {
            let digits: String = text[i + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(s) = digits.parse::<u16>() {
                if (400..600).contains(&s) {
                    return Some(s);
                }
            }
        }
    }
    None
}

fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.into(),
        }
    }

    #[test]
    fn plain_http_refused_by_the_client_says_which_variable_allows_it() {
        let e =
            generic("Error performing PUT http://127.0.0.1:9000/b/k: URL scheme is not allowed");
        assert_eq!(classify(&e), StoreCause::HttpNotAllowed);
        assert!(classify(&e).to_string().contains("AWS_ALLOW_HTTP=true"));
        let missing = StoreCause::ContainerMissing { status: Some(404) }.to_string();
        assert!(missing.contains("aws s3 mb"), "{missing}");
    }

    #[test]
    fn each_cause_is_named_with_its_status() {
        assert_eq!(
            classify(&generic("GET http://x: client error (Connect): tcp connect error: Connection refused (os error 111)")),
            StoreCause::ConnectionRefused
        );
        assert_eq!(
            classify(&generic(
                "client error (Connect): received corrupt message of type InvalidContentType"
            )),
            StoreCause::Tls {
                cause: TlsCause::PlainHttp
            }
        );
        assert_eq!(
            classify(&generic(
                "container `c` does not exist (status 404 on GET); create it first"
            )),
            StoreCause::ContainerMissing { status: Some(404) }
        );
        assert_eq!(
            classify(&generic(
                "authentication at url=`u` failed with status=401 Unauthorized"
            )),
            StoreCause::CredentialsRefused { status: Some(401) }
        );
        assert_eq!(
            classify(&generic("Server returned non-2xx status code: 403 Forbidden: <Code>SignatureDoesNotMatch</Code>")),
            StoreCause::CredentialsRefused { status: Some(403) }
        );
        assert_eq!(
            classify(&generic("after 10 retries, max_retries: 10, retry_timeout: 180s - 500 Internal Server Error: boom")),
            StoreCause::Other { status: None, message: "after 10 retries, max_retries: 10, retry_timeout: 180s - 500 Internal Server Error: boom".into() },
            "a retry budget named in the message is no timeout"
        );
        let missing = object_store::Error::NotFound {
            path: "p".into(),
            source: "404".into(),
        };
        assert_eq!(classify(&missing), StoreCause::NotFound);
    }

    #[test]
    fn a_word_in_a_name_is_not_the_errors() {
        // A bucket, path or host holding `ssl` or `certificate` is no TLS failure.
        let e = generic(
            "GET https://ssl-backups.example/certificate-store/x: path=`ssl/certificate`: \
             500 Internal Server Error",
        );
        assert!(
            !matches!(classify(&e), StoreCause::Tls { .. }),
            "{:?}",
            classify(&e)
        );
        // The error's own words still are.
        let e = generic("client error (Connect): invalid peer certificate: BadSignature");
        assert!(matches!(
            classify(&e),
            StoreCause::Tls {
                cause: TlsCause::Other { .. }
            }
        ));
        let e = generic("invalid peer certificate: UnknownIssuer");
        assert_eq!(
            classify(&e),
            StoreCause::Tls {
                cause: TlsCause::UnknownIssuer
            }
        );
    }

    #[test]
    fn a_rustls_error_nested_in_io_errors_is_read_for_its_cause() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let outer = std::io::Error::other(inner);
        let e = object_store::Error::Generic {
            store: "S3",
            source: Box::new(outer),
        };
        assert_eq!(
            classify(&e),
            StoreCause::Tls {
                cause: TlsCause::Expired
            }
        );
        assert!(classify(&e).to_string().contains("has expired"));
    }

    #[test]
    fn messages_stay_on_one_short_line() {
        let long = "x ".repeat(500) + "\n<xml>\n</xml>";
        let StoreCause::Other { message, .. } = classify(&generic(&long)) else {
            panic!()
        };
        assert!(!message.contains('\n'));
        assert!(message.chars().count() <= 201);
    }
}
