//! Authentication: TempAuth (v1), Keystone v3 password and Keystone v3 application credentials,
//! python-swiftclient and openrc style.
//!
//! An authentication yields a [`Session`]: a token and the storage URL (`.../v1/AUTH_account`)
//! that every object request goes to. The client re-authenticates once when Swift answers 401,
//! and ahead of time when the session is close to its expiry ([`Session::expiring`]).
//!
//! **Invariant:** a token's expiry is judged on this host's clock only: the lifetime the server
//! states (Keystone's `expires_at - issued_at`, TempAuth's seconds left) counted from when the
//! authentication request was sent. Keystone's clock never meets ours, so a host whose clock
//! runs ahead of Keystone's neither re-authenticates before every request nor keeps a token
//! Keystone has expired.
//!
//! **Invariant:** secrets live in [`Secret`], whose `Debug` prints `***` and which has no
//! `Display`; they leave it only as header values marked sensitive or inside a request body.
//!
//! Just over 600 lines, on purpose: the three ways to authenticate share the session, the
//! catalog lookup and the secret handling, and splitting them would spread the one invariant
//! above over several files.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderValue, Method, StatusCode};
use object_store::client::{HttpRequest, HttpRequestBody, HttpResponse};
use serde::Deserialize;
use url::Url;

use super::error::{snippet, Error};

/// A session is renewed before use once it is this close to its expiry, or a quarter of its
/// lifetime when that is shorter (a 20 s token is renewed after 15 s, not before every request).
pub(crate) const REFRESH_MARGIN: Duration = Duration::from_secs(30);

/// A secret string (key, password, token). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// As a header value that `http` marks sensitive (hidden from its own `Debug`).
    pub(crate) fn header_value(&self) -> Result<HeaderValue, Error> {
        let mut v = HeaderValue::from_str(&self.0).map_err(|_| Error::InvalidArgument {
            reason: "a credential or token contains characters not allowed in a header".into(),
        })?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How to (re-)authenticate.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// `GET auth_url` with `X-Auth-User`/`X-Auth-Key` → `X-Storage-Url` + `X-Auth-Token`.
    TempAuth {
        auth_url: Url,
        user: String,
        key: Secret,
    },
    /// `POST {auth_url}/auth/tokens` (password method, project scope) → `X-Subject-Token`, and
    /// the `object-store` endpoint from the catalog.
    Keystone(Box<Keystone>),
    /// Only a pre-authenticated token: nothing to renew it with.
    None,
}

/// Keystone v3 credentials (`OS_*`): how to prove who we are, and which endpoint to use.
#[derive(Clone, Debug)]
pub(crate) struct Keystone {
    pub(crate) auth_url: Url,
    pub(crate) method: KeystoneMethod,
    pub(crate) region: Option<String>,
    /// `public`, `internal` or `admin` (swiftclient's `publicURL` etc. are normalised).
    pub(crate) interface: String,
}

/// A Keystone user, by id or by name in a domain (by id, else by name, else `default`).
#[derive(Clone, Debug, Default)]
pub(crate) struct KeystoneUser {
    pub(crate) id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) domain_name: Option<String>,
    pub(crate) domain_id: Option<String>,
}

/// How Keystone is asked for a token (`OS_AUTH_TYPE`).
#[derive(Clone, Debug)]
pub(crate) enum KeystoneMethod {
    /// `password` (or `v3password`): a user's password, scoped to a project.
    Password {
        user: KeystoneUser,
        password: Secret,
        project_name: Option<String>,
        project_id: Option<String>,
        project_domain_name: Option<String>,
        project_domain_id: Option<String>,
    },
    /// `v3applicationcredential`: an application credential by id, or by name with its user.
    /// Its project and roles are fixed when it is made, so no scope is sent.
    ApplicationCredential {
        id: Option<String>,
        name: Option<String>,
        user: KeystoneUser,
        secret: Secret,
    },
}

/// A token and where to use it.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) token: Secret,
    pub(crate) storage_url: Url,
    /// When the token expires on this host's clock (see the module's invariant), if the server
    /// says.
    pub(crate) expires: Option<DateTime<Utc>>,
    /// When the authentication that made it was sent, on this host's clock.
    pub(crate) issued: DateTime<Utc>,
    /// Increases with every authentication, so that concurrent 401s re-authenticate once.
    pub(crate) generation: u64,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("token", &self.token)
            .field("storage_url", &self.storage_url.as_str())
            .field("expires", &self.expires)
            .field("issued", &self.issued)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Session {
    /// Whether the session should be renewed before use at `now`: within [`REFRESH_MARGIN`]
    /// of its expiry, or within a quarter of its lifetime when that is shorter.
    pub(crate) fn expiring(&self, now: DateTime<Utc>) -> bool {
        let Some(expires) = self.expires else {
            return false;
        };
        let margin = chrono::Duration::from_std(REFRESH_MARGIN).unwrap_or(chrono::Duration::MAX);
        let quarter = (expires - self.issued) / 4;
        expires - margin.min(quarter) <= now
    }
}

/// A storage URL must be an absolute http(s) URL that can take path segments.
pub(crate) fn parse_storage_url(url: &str) -> Result<Url, Error> {
    let bad = |reason: &str| Error::InvalidUrl {
        what: "storage",
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.cannot_be_a_base() {
        return Err(bad("not an http(s) URL"));
    }
    Ok(parsed)
}

impl Credentials {
    pub(crate) fn can_authenticate(&self) -> bool {
        !matches!(self, Self::None)
    }

    /// The endpoint the credentials go to (for messages; holds no secret).
    pub(crate) fn endpoint(&self) -> String {
        match self {
            Self::TempAuth { auth_url, .. } => auth_url.to_string(),
            Self::Keystone(k) => tokens_url(&k.auth_url).to_string(),
            Self::None => String::new(),
        }
    }

    /// The method of the authentication request (for messages).
    pub(crate) fn method(&self) -> Method {
        match self {
            Self::Keystone(_) => Method::POST,
            _ => Method::GET,
        }
    }

    /// The authentication request. Built afresh for every attempt.
    pub(crate) fn request(&self) -> Result<HttpRequest, Error> {
        let build = |b: http::request::Builder, body: HttpRequestBody| {
            b.body(body).map_err(|source| Error::BuildRequest {
                method: self.method(),
                path: self.endpoint(),
                source,
            })
        };
        match self {
            Self::TempAuth {
                auth_url,
                user,
                key,
            } => {
                let b = http::Request::builder()
                    .method(Method::GET)
                    .uri(auth_url.as_str())
                    .header("X-Auth-User", user.as_str())
                    .header("X-Auth-Key", key.header_value()?);
                build(b, HttpRequestBody::empty())
            }
            Self::Keystone(k) => {
                let body =
                    serde_json::to_vec(&k.token_request()).map_err(|e| Error::InvalidArgument {
                        reason: format!("cannot encode the keystone request: {e}"),
                    })?;
                let b = http::Request::builder()
                    .method(Method::POST)
                    .uri(tokens_url(&k.auth_url).as_str())
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .header(http::header::ACCEPT, "application/json");
                build(b, HttpRequestBody::from(Bytes::from(body)))
            }
            Self::None => Err(Error::MissingCredentials),
        }
    }

    /// Who authenticates, for messages (names and ids; never a secret).
    pub(crate) fn who(&self) -> String {
        match self {
            Self::TempAuth { user, .. } => format!("user=`{user}`"),
            Self::Keystone(k) => k.who(),
            Self::None => "a pre-authenticated token".to_owned(),
        }
    }

    /// Turn the authentication response into a session (`generation` is filled by the caller).
    /// `sent`: when the request that got `response` was sent, on this host's clock.
    pub(crate) async fn session(
        &self,
        response: HttpResponse,
        sent: DateTime<Utc>,
    ) -> Result<Session, Error> {
        let url = self.endpoint();
        let (parts, body) = response.into_parts();
        let body = body.bytes().await.map_err(|source| Error::Body {
            method: self.method(),
            path: url.clone(),
            source,
        })?;
        if !parts.status.is_success() {
            return Err(Error::AuthStatus {
                url,
                who: self.who(),
                status: parts.status,
                body: keystone_message(&body).unwrap_or_else(|| snippet(&body)),
                hint: self.refusal_hint(parts.status),
            });
        }
        let header = |name: &'static str| -> Result<String, Error> {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| Error::AuthMissingHeader {
                    url: url.clone(),
                    header: name,
                })
        };
        match self {
            Self::TempAuth { .. } => {
                let token = Secret::new(header("X-Auth-Token")?);
                let storage_url = parse_storage_url(&header("X-Storage-Url")?)?;
                let expires = parts
                    .headers
                    .get("X-Auth-Token-Expires")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(|s| sent + chrono::Duration::milliseconds((s * 1000.0) as i64));
                Ok(Session {
                    token,
                    storage_url,
                    expires,
                    issued: sent,
                    generation: 0,
                })
            }
            Self::Keystone(k) => {
                let token = Secret::new(header("X-Subject-Token")?);
                let parsed: TokenResponse =
                    serde_json::from_slice(&body).map_err(|source| Error::TokenResponse {
                        url: url.clone(),
                        source,
                    })?;
                let endpoint =
                    k.select_endpoint(&parsed.token.catalog)
                        .ok_or_else(|| Error::NoEndpoint {
                            url: url.clone(),
                            interface: k.interface.clone(),
                            region: k.region.clone().unwrap_or_else(|| "(any)".into()),
                            catalog: catalog_summary(&parsed.token.catalog),
                        })?;
                let stamp = |s: &Option<String>| {
                    s.as_deref()
                        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                        .map(|d| d.with_timezone(&Utc))
                };
                // The lifetime Keystone states, counted on our clock from the send.
                let expires = match (
                    stamp(&parsed.token.issued_at),
                    stamp(&parsed.token.expires_at),
                ) {
                    (Some(issued), Some(expires)) if expires >= issued => {
                        Some(sent + (expires - issued))
                    }
                    // No issued_at (not Keystone v3 as documented): nothing to count from,
                    // so renew on every 401 only.
                    _ => None,
                };
                Ok(Session {
                    token,
                    storage_url: parse_storage_url(endpoint)?,
                    expires,
                    issued: sent,
                    generation: 0,
                })
            }
            Self::None => Err(Error::MissingCredentials),
        }
    }

    /// The variable the auth URL comes from, for messages.
    pub(crate) fn url_variable(&self) -> &'static str {
        match self {
            Self::TempAuth { .. } => "ST_AUTH",
            _ => "OS_AUTH_URL",
        }
    }

    /// What to check when the auth service refused with `status`.
    fn refusal_hint(&self, status: StatusCode) -> &'static str {
        let refused = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
        if status.is_client_error() && !refused && status != StatusCode::TOO_MANY_REQUESTS {
            return match self {
                Self::TempAuth { .. } => "check ST_AUTH (TempAuth's URL, e.g. .../auth/v1.0)",
                _ => {
                    "check OS_AUTH_URL (Keystone's v3 URL, e.g. https://keystone:5000/v3) and \
                     OS_AUTH_TYPE"
                }
            };
        }
        match self {
            Self::Keystone(k) if refused => match k.method {
                KeystoneMethod::Password { .. } => {
                    "check OS_PASSWORD, the user (OS_USERNAME or OS_USER_ID, OS_USER_DOMAIN_*), \
                     the project (OS_PROJECT_NAME or OS_PROJECT_ID, OS_PROJECT_DOMAIN_*) and that \
                     the user is enabled and has a role on the project"
                }
                KeystoneMethod::ApplicationCredential { .. } => {
                    "check OS_APPLICATION_CREDENTIAL_ID (or _NAME with the user) and \
                     OS_APPLICATION_CREDENTIAL_SECRET, that the credential has not expired or been \
                     deleted, and that its user is enabled"
                }
            },
            Self::TempAuth { .. } if refused => "check ST_USER and ST_KEY",
            _ => "the auth service failed; retry later or ask its operator",
        }
    }

    /// Whether a failed authentication is worth retrying (the server's fault, not ours).
    pub(crate) fn retryable(status: StatusCode) -> bool {
        status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
    }
}

/// `{auth_url}/auth/tokens`, adding `/v3` unless the URL already names a version, as
/// python-swiftclient users write both `http://keystone:5000` and `http://keystone:5000/v3`.
fn tokens_url(auth_url: &Url) -> Url {
    let mut url = auth_url.clone();
    let has_version = url
        .path_segments()
        .and_then(|mut s| s.rfind(|seg| !seg.is_empty()))
        .is_some_and(|last| last == "v3");
    if let Ok(mut segs) = url.path_segments_mut() {
        segs.pop_if_empty();
        if !has_version {
            segs.push("v3");
        }
        segs.push("auth").push("tokens");
    }
    url
}

/// swiftclient accepts `publicURL`/`internalURL`/`adminURL` (v2 names) as well.
pub(crate) fn normalise_interface(interface: &str) -> String {
    let i = interface.trim();
    i.strip_suffix("URL").unwrap_or(i).to_ascii_lowercase()
}

impl KeystoneUser {
    /// `{"id": ...}`, or `{"name": ..., "domain": ...}`.
    fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut user = serde_json::Map::new();
        if let Some(id) = &self.id {
            user.insert("id".into(), id.clone().into());
        } else {
            user.insert("name".into(), self.name.clone().unwrap_or_default().into());
            user.insert("domain".into(), domain(&self.domain_id, &self.domain_name));
        }
        user
    }

    fn who(&self) -> String {
        match (&self.id, &self.name) {
            (Some(id), _) => format!("user_id=`{id}`"),
            (None, name) => format!(
                "user=`{}` user_domain=`{}`",
                name.as_deref().unwrap_or(""),
                self.domain_id
                    .as_deref()
                    .or(self.domain_name.as_deref())
                    .unwrap_or("default")
            ),
        }
    }
}

impl Keystone {
    fn token_request(&self) -> serde_json::Value {
        match &self.method {
            KeystoneMethod::Password {
                user,
                password,
                project_name,
                project_id,
                project_domain_name,
                project_domain_id,
            } => {
                let mut project = serde_json::Map::new();
                if let Some(id) = project_id {
                    project.insert("id".into(), id.clone().into());
                } else if let Some(name) = project_name {
                    project.insert("name".into(), name.clone().into());
                    project.insert(
                        "domain".into(),
                        domain(project_domain_id, project_domain_name),
                    );
                }
                let mut user = user.to_json();
                user.insert("password".into(), password.expose().into());
                serde_json::json!({
                    "auth": {
                        "identity": {
                            "methods": ["password"],
                            "password": { "user": user }
                        },
                        "scope": { "project": project }
                    }
                })
            }
            KeystoneMethod::ApplicationCredential {
                id,
                name,
                user,
                secret,
            } => {
                let mut credential = serde_json::Map::new();
                if let Some(id) = id {
                    credential.insert("id".into(), id.clone().into());
                } else {
                    credential.insert("name".into(), name.clone().unwrap_or_default().into());
                    credential.insert("user".into(), user.to_json().into());
                }
                credential.insert("secret".into(), secret.expose().into());
                serde_json::json!({
                    "auth": {
                        "identity": {
                            "methods": ["application_credential"],
                            "application_credential": credential
                        }
                    }
                })
            }
        }
    }

    /// Who asks, for messages: names and ids, never the password or secret.
    fn who(&self) -> String {
        match &self.method {
            KeystoneMethod::Password {
                user,
                project_name,
                project_id,
                project_domain_name,
                project_domain_id,
                ..
            } => {
                let project = match (project_id, project_name) {
                    (Some(id), _) => format!("project_id=`{id}`"),
                    (None, name) => format!(
                        "project=`{}` project_domain=`{}`",
                        name.as_deref().unwrap_or(""),
                        project_domain_id
                            .as_deref()
                            .or(project_domain_name.as_deref())
                            .unwrap_or("default")
                    ),
                };
                format!("{} {project}", user.who())
            }
            KeystoneMethod::ApplicationCredential { id, name, user, .. } => match (id, name) {
                (Some(id), _) => format!("application_credential_id=`{id}`"),
                (None, name) => format!(
                    "application_credential=`{}` {}",
                    name.as_deref().unwrap_or(""),
                    user.who()
                ),
            },
        }
    }

    fn select_endpoint<'a>(&self, catalog: &'a [CatalogEntry]) -> Option<&'a str> {
        catalog
            .iter()
            .filter(|e| e.kind == "object-store")
            .flat_map(|e| e.endpoints.iter())
            .filter(|ep| ep.interface == self.interface)
            .find(|ep| match &self.region {
                None => true,
                Some(r) => ep.region.as_deref() == Some(r) || ep.region_id.as_deref() == Some(r),
            })
            .map(|ep| ep.url.as_str())
    }
}

/// A domain by id if given, else by name, else keystone's default domain.
fn domain(id: &Option<String>, name: &Option<String>) -> serde_json::Value {
    match (id, name) {
        (Some(id), _) => serde_json::json!({ "id": id }),
        (None, Some(name)) => serde_json::json!({ "name": name }),
        (None, None) => serde_json::json!({ "id": "default" }),
    }
}

#[derive(Deserialize)]
struct TokenResponse {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    issued_at: Option<String>,
    expires_at: Option<String>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
struct Endpoint {
    interface: String,
    region: Option<String>,
    region_id: Option<String>,
    url: String,
}

/// What the catalog offers for object storage, for the message that says none fits:
/// `public/RegionOne, internal/RegionOne`, or why there is nothing.
fn catalog_summary(catalog: &[CatalogEntry]) -> String {
    let offered: Vec<String> = catalog
        .iter()
        .filter(|e| e.kind == "object-store")
        .flat_map(|e| e.endpoints.iter())
        .map(|ep| {
            let region = ep.region_id.as_deref().or(ep.region.as_deref());
            format!("{}/{}", ep.interface, region.unwrap_or("(no region)"))
        })
        .collect();
    if !offered.is_empty() {
        return format!("the catalog offers object-store at {}", offered.join(", "));
    }
    let kinds: Vec<&str> = catalog.iter().map(|e| e.kind.as_str()).collect();
    format!(
        "the catalog has no object-store service at all (it lists: {}); Swift is not registered \
         in this Keystone, or this project's catalog is filtered",
        if kinds.is_empty() {
            "nothing".to_owned()
        } else {
            kinds.join(", ")
        }
    )
}

/// Keystone's own explanation from an error body (`{"error": {"message": ...}}`), if it is one.
fn keystone_message(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let message = v.get("error")?.get("message")?.as_str()?;
    Some(snippet(message.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keystone(region: Option<&str>, interface: &str) -> Keystone {
        Keystone {
            auth_url: Url::parse("http://ks:5000/v3").unwrap(),
            method: KeystoneMethod::Password {
                user: KeystoneUser {
                    name: Some("u".into()),
                    domain_name: Some("Default".into()),
                    ..KeystoneUser::default()
                },
                password: Secret::new("hunter2"),
                project_name: Some("p".into()),
                project_id: None,
                project_domain_name: None,
                project_domain_id: Some("default".into()),
            },
            region: region.map(Into::into),
            interface: normalise_interface(interface),
        }
    }

    #[test]
    fn tokens_url_adds_v3_only_when_missing() {
        for (given, want) in [
            ("http://ks:5000", "http://ks:5000/v3/auth/tokens"),
            ("http://ks:5000/", "http://ks:5000/v3/auth/tokens"),
            ("http://ks:5000/v3", "http://ks:5000/v3/auth/tokens"),
            ("http://ks:5000/v3/", "http://ks:5000/v3/auth/tokens"),
            ("http://ks/identity/v3", "http://ks/identity/v3/auth/tokens"),
        ] {
            assert_eq!(tokens_url(&Url::parse(given).unwrap()).as_str(), want);
        }
    }

    #[test]
    fn catalog_endpoint_is_chosen_by_type_interface_and_region() {
        let catalog: Vec<CatalogEntry> = serde_json::from_value(serde_json::json!([
            {"type": "identity", "endpoints": [
                {"interface": "public", "region": "r1", "url": "http://ks"}]},
            {"type": "object-store", "endpoints": [
                {"interface": "internal", "region": "r1", "url": "http://int1/v1/AUTH_p"},
                {"interface": "public", "region": "r1", "url": "http://pub1/v1/AUTH_p"},
                {"interface": "public", "region_id": "r2", "url": "http://pub2/v1/AUTH_p"}]}
        ]))
        .unwrap();
        let pick = |r: Option<&str>, i: &str| keystone(r, i).select_endpoint(&catalog);
        assert_eq!(pick(None, "public"), Some("http://pub1/v1/AUTH_p"));
        assert_eq!(pick(Some("r2"), "publicURL"), Some("http://pub2/v1/AUTH_p"));
        assert_eq!(pick(Some("r1"), "internal"), Some("http://int1/v1/AUTH_p"));
        assert_eq!(pick(Some("r3"), "public"), None);
        assert_eq!(pick(None, "admin"), None);
    }

    #[test]
    fn token_request_scopes_the_project_and_holds_the_password_only_in_the_body() {
        let k = keystone(None, "public");
        let v = k.token_request();
        assert_eq!(
            v["auth"]["identity"]["password"]["user"]["password"],
            "hunter2"
        );
        assert_eq!(v["auth"]["scope"]["project"]["name"], "p");
        assert_eq!(v["auth"]["scope"]["project"]["domain"]["id"], "default");
        assert_eq!(
            v["auth"]["identity"]["password"]["user"]["domain"]["name"],
            "Default"
        );
        let shown = format!("{:?}", Credentials::Keystone(Box::new(k)));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("AUTH_tk123");
        assert_eq!(format!("{s:?}"), "***");
        assert!(s.header_value().unwrap().is_sensitive());
        let session = Session {
            token: s,
            storage_url: Url::parse("http://x/v1/AUTH_t").unwrap(),
            expires: None,
            issued: DateTime::<Utc>::from_timestamp(0, 0).unwrap(),
            generation: 1,
        };
        assert!(!format!("{session:?}").contains("tk123"));
    }

    #[test]
    fn sessions_are_renewed_shortly_before_they_expire() {
        let now = DateTime::<Utc>::from_timestamp(1_000_000, 0).unwrap();
        let mut s = Session {
            token: Secret::new("t"),
            storage_url: Url::parse("http://x/v1/AUTH_t").unwrap(),
            expires: None,
            issued: now - chrono::Duration::seconds(3000),
            generation: 1,
        };
        assert!(!s.expiring(now));
        s.expires = Some(now + chrono::Duration::seconds(3600));
        assert!(!s.expiring(now));
        s.expires = Some(now + chrono::Duration::seconds(10));
        assert!(s.expiring(now));
        // A 20 s token: renewed after three quarters of its life, not before every request.
        s.issued = now;
        s.expires = Some(now + chrono::Duration::seconds(20));
        assert!(!s.expiring(now));
        assert!(!s.expiring(now + chrono::Duration::seconds(14)));
        assert!(s.expiring(now + chrono::Duration::seconds(15)));
    }

    fn token_response(issued: &str, expires: &str) -> HttpResponse {
        let body = serde_json::json!({"token": {
            "issued_at": issued, "expires_at": expires,
            "catalog": [{"type": "object-store", "endpoints": [
                {"interface": "public", "region_id": "r1", "url": "http://s/v1/AUTH_p"}]}]}});
        http::Response::builder()
            .status(201)
            .header("X-Subject-Token", "tok")
            .body(object_store::client::HttpResponseBody::from(Bytes::from(
                body.to_string(),
            )))
            .unwrap()
    }

    #[tokio::test]
    async fn a_token_expires_by_its_stated_lifetime_on_this_hosts_clock() {
        // Keystone's clock says 2030; ours says 1970 + 10^6 s. The token lives 3600 s either way.
        let creds = Credentials::Keystone(Box::new(keystone(None, "public")));
        let sent = DateTime::<Utc>::from_timestamp(1_000_000, 0).unwrap();
        let response = token_response("2030-01-01T00:00:00.000000Z", "2030-01-01T01:00:00.000000Z");
        let s = creds.session(response, sent).await.unwrap();
        assert_eq!(s.expires, Some(sent + chrono::Duration::seconds(3600)));
        assert!(!s.expiring(sent + chrono::Duration::seconds(3500)));
        assert!(s.expiring(sent + chrono::Duration::seconds(3571)));
    }

    #[test]
    fn an_application_credential_sends_no_scope_and_keeps_its_secret_in_the_body() {
        let mut k = keystone(None, "public");
        k.method = KeystoneMethod::ApplicationCredential {
            id: Some("ac1".into()),
            name: None,
            user: KeystoneUser::default(),
            secret: Secret::new("s3cr3t"),
        };
        let v = k.token_request();
        assert_eq!(
            v["auth"]["identity"]["methods"][0],
            "application_credential"
        );
        assert_eq!(v["auth"]["identity"]["application_credential"]["id"], "ac1");
        assert_eq!(
            v["auth"]["identity"]["application_credential"]["secret"],
            "s3cr3t"
        );
        assert!(v["auth"].get("scope").is_none());
        assert_eq!(k.who(), "application_credential_id=`ac1`");
        let shown = format!("{:?}", Credentials::Keystone(Box::new(k)));
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }

    #[test]
    fn an_error_page_is_quoted_on_one_line() {
        let page = b"<html>\n  <h1>502 Bad Gateway</h1>\n</html>\n";
        assert_eq!(snippet(page), "<html> <h1>502 Bad Gateway</h1> </html>");
        let k = Credentials::Keystone(Box::new(keystone(None, "public")));
        assert!(k
            .refusal_hint(StatusCode::NOT_FOUND)
            .starts_with("check OS_AUTH_URL"));
        assert!(k
            .refusal_hint(StatusCode::BAD_GATEWAY)
            .contains("retry later"));
    }

    #[test]
    fn a_user_by_id_is_sent_without_a_domain() {
        let mut k = keystone(None, "public");
        if let KeystoneMethod::Password { user, .. } = &mut k.method {
            user.id = Some("uid1".into());
        }
        let v = k.token_request();
        let user = &v["auth"]["identity"]["password"]["user"];
        assert_eq!(user["id"], "uid1");
        assert!(user.get("domain").is_none() && user.get("name").is_none());
    }

    #[test]
    fn no_endpoint_names_what_the_catalog_offers() {
        let catalog: Vec<CatalogEntry> = serde_json::from_value(serde_json::json!([
            {"type": "identity", "endpoints": []},
            {"type": "object-store", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "http://s"}]}
        ]))
        .unwrap();
        assert_eq!(
            catalog_summary(&catalog),
            "the catalog offers object-store at public/RegionOne"
        );
        assert!(catalog_summary(&catalog[..1])
            .contains("no object-store service at all (it lists: identity)"));
    }
}
