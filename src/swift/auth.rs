//! Authentication: TempAuth (v1) and Keystone v3 password, python-swiftclient style.
//!
//! An authentication yields a [`Session`]: a token and the storage URL (`.../v1/AUTH_account`)
//! that every object request goes to. The client re-authenticates once when Swift answers 401,
//! and ahead of time when the session says it expires within [`REFRESH_MARGIN`].
//!
//! **Invariant:** secrets live in [`Secret`], whose `Debug` prints `***` and which has no
//! `Display`; they leave it only as header values marked sensitive or inside a request body.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderValue, Method, StatusCode};
use object_store::client::{HttpRequest, HttpRequestBody, HttpResponse};
use serde::Deserialize;
use url::Url;

use super::error::{snippet, Error};

/// A session that expires within this margin is renewed before use.
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

/// Keystone v3 password credentials (`OS_*`).
#[derive(Clone, Debug)]
pub(crate) struct Keystone {
    pub(crate) auth_url: Url,
    pub(crate) username: String,
    pub(crate) password: Secret,
    pub(crate) user_domain_name: Option<String>,
    pub(crate) user_domain_id: Option<String>,
    pub(crate) project_name: Option<String>,
    pub(crate) project_id: Option<String>,
    pub(crate) project_domain_name: Option<String>,
    pub(crate) project_domain_id: Option<String>,
    pub(crate) region: Option<String>,
    /// `public`, `internal` or `admin` (swiftclient's `publicURL` etc. are normalised).
    pub(crate) interface: String,
}

/// A token and where to use it.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) token: Secret,
    pub(crate) storage_url: Url,
    /// When the server says the token expires, if it says.
    pub(crate) expires: Option<DateTime<Utc>>,
    /// Increases with every authentication, so that concurrent 401s re-authenticate once.
    pub(crate) generation: u64,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("token", &self.token)
            .field("storage_url", &self.storage_url.as_str())
            .field("expires", &self.expires)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Session {
    /// Whether the session should be renewed before use at `now`.
    pub(crate) fn expiring(&self, now: DateTime<Utc>) -> bool {
        let margin = chrono::Duration::from_std(REFRESH_MARGIN).unwrap_or(chrono::Duration::MAX);
        self.expires.is_some_and(|e| e - margin <= now)
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

    /// Turn the authentication response into a session (`generation` is filled by the caller).
    pub(crate) async fn session(
        &self,
        response: HttpResponse,
        now: DateTime<Utc>,
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
                status: parts.status,
                body: snippet(&body),
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
                    .map(|s| now + chrono::Duration::milliseconds((s * 1000.0) as i64));
                Ok(Session {
                    token,
                    storage_url,
                    expires,
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
                        })?;
                let expires = parsed
                    .token
                    .expires_at
                    .as_deref()
                    .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                    .map(|d| d.with_timezone(&Utc));
                Ok(Session {
                    token,
                    storage_url: parse_storage_url(endpoint)?,
                    expires,
                    generation: 0,
                })
            }
            Self::None => Err(Error::MissingCredentials),
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

impl Keystone {
    fn token_request(&self) -> serde_json::Value {
        let user_domain = domain(&self.user_domain_id, &self.user_domain_name);
        let mut project = serde_json::Map::new();
        if let Some(id) = &self.project_id {
            project.insert("id".into(), id.clone().into());
        } else if let Some(name) = &self.project_name {
            project.insert("name".into(), name.clone().into());
            project.insert(
                "domain".into(),
                domain(&self.project_domain_id, &self.project_domain_name),
            );
        }
        serde_json::json!({
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": self.username,
                            "domain": user_domain,
                            "password": self.password.expose(),
                        }
                    }
                },
                "scope": { "project": project }
            }
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn keystone(region: Option<&str>, interface: &str) -> Keystone {
        Keystone {
            auth_url: Url::parse("http://ks:5000/v3").unwrap(),
            username: "u".into(),
            password: Secret::new("hunter2"),
            user_domain_name: Some("Default".into()),
            user_domain_id: None,
            project_name: Some("p".into()),
            project_id: None,
            project_domain_name: None,
            project_domain_id: Some("default".into()),
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
            generation: 1,
        };
        assert!(!s.expiring(now));
        s.expires = Some(now + chrono::Duration::seconds(3600));
        assert!(!s.expiring(now));
        s.expires = Some(now + chrono::Duration::seconds(10));
        assert!(s.expiring(now));
    }
}
