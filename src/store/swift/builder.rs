//! [`SwiftBuilder`]: configuration from the environment (python-swiftclient's variables) or
//! code, in the manner of object_store's `AmazonS3Builder`.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use object_store::client::{HttpConnector, ReqwestConnector};
use object_store::{ClientOptions, RetryConfig};
use url::Url;

use super::auth::{
    normalise_interface, parse_storage_url, Credentials, Keystone, KeystoneMethod, KeystoneUser,
    Secret, Session,
};
use super::client::SwiftClient;
use super::error::Error;
use super::SwiftStore;
use crate::clock::{Jitter, SharedClock, SystemClock};

/// Swift's own page size limit; also the default here.
pub const DEFAULT_LIST_LIMIT: usize = 10_000;

/// A configuration key, named after the environment variable that sets it.
///
/// ```
/// use banklease::store::SwiftConfigKey;
/// let key: SwiftConfigKey = "ST_AUTH".parse().unwrap();
/// assert_eq!(key, SwiftConfigKey::AuthUrl);
/// assert_eq!(key.as_ref(), "ST_AUTH");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SwiftConfigKey {
    /// `ST_AUTH`: TempAuth URL, e.g. `http://127.0.0.1:8080/auth/v1.0`.
    AuthUrl,
    /// `ST_USER`: TempAuth user, `account:user`.
    User,
    /// `ST_KEY`: TempAuth key (secret).
    Key,
    /// `OS_AUTH_URL`: Keystone URL (`/v3` is added if missing).
    OsAuthUrl,
    /// `OS_USERNAME`
    OsUsername,
    /// `OS_PASSWORD` (secret)
    OsPassword,
    /// `OS_PROJECT_NAME`
    OsProjectName,
    /// `OS_PROJECT_ID` (wins over the name)
    OsProjectId,
    /// `OS_USER_DOMAIN_NAME`
    OsUserDomainName,
    /// `OS_USER_DOMAIN_ID` (wins over the name)
    OsUserDomainId,
    /// `OS_PROJECT_DOMAIN_NAME`
    OsProjectDomainName,
    /// `OS_PROJECT_DOMAIN_ID` (wins over the name)
    OsProjectDomainId,
    /// `OS_REGION_NAME`: the catalog endpoint's region.
    OsRegionName,
    /// `OS_INTERFACE`: `public` (default), `internal` or `admin`.
    OsInterface,
    /// `OS_STORAGE_URL`: use this storage URL instead of the one authentication returns.
    StorageUrl,
    /// `OS_AUTH_TOKEN`: a pre-authenticated token (secret), used until Swift refuses it.
    AuthToken,
    /// `OS_USER_ID` (wins over `OS_USERNAME` and the user's domain)
    OsUserId,
    /// `OS_AUTH_TYPE`: `password` (default) or `v3applicationcredential`.
    OsAuthType,
    /// `OS_APPLICATION_CREDENTIAL_ID`
    OsApplicationCredentialId,
    /// `OS_APPLICATION_CREDENTIAL_NAME` (with the user: `OS_USER_ID`, or `OS_USERNAME` and its
    /// domain)
    OsApplicationCredentialName,
    /// `OS_APPLICATION_CREDENTIAL_SECRET` (secret)
    OsApplicationCredentialSecret,
}

impl SwiftConfigKey {
    const ALL: [Self; 21] = [
        Self::AuthUrl,
        Self::User,
        Self::Key,
        Self::OsAuthUrl,
        Self::OsUsername,
        Self::OsPassword,
        Self::OsProjectName,
        Self::OsProjectId,
        Self::OsUserDomainName,
        Self::OsUserDomainId,
        Self::OsProjectDomainName,
        Self::OsProjectDomainId,
        Self::OsRegionName,
        Self::OsInterface,
        Self::StorageUrl,
        Self::AuthToken,
        Self::OsUserId,
        Self::OsAuthType,
        Self::OsApplicationCredentialId,
        Self::OsApplicationCredentialName,
        Self::OsApplicationCredentialSecret,
    ];
}

impl AsRef<str> for SwiftConfigKey {
    fn as_ref(&self) -> &str {
        match self {
            Self::AuthUrl => "ST_AUTH",
            Self::User => "ST_USER",
            Self::Key => "ST_KEY",
            Self::OsAuthUrl => "OS_AUTH_URL",
            Self::OsUsername => "OS_USERNAME",
            Self::OsPassword => "OS_PASSWORD",
            Self::OsProjectName => "OS_PROJECT_NAME",
            Self::OsProjectId => "OS_PROJECT_ID",
            Self::OsUserDomainName => "OS_USER_DOMAIN_NAME",
            Self::OsUserDomainId => "OS_USER_DOMAIN_ID",
            Self::OsProjectDomainName => "OS_PROJECT_DOMAIN_NAME",
            Self::OsProjectDomainId => "OS_PROJECT_DOMAIN_ID",
            Self::OsRegionName => "OS_REGION_NAME",
            Self::OsInterface => "OS_INTERFACE",
            Self::StorageUrl => "OS_STORAGE_URL",
            Self::AuthToken => "OS_AUTH_TOKEN",
            Self::OsUserId => "OS_USER_ID",
            Self::OsAuthType => "OS_AUTH_TYPE",
            Self::OsApplicationCredentialId => "OS_APPLICATION_CREDENTIAL_ID",
            Self::OsApplicationCredentialName => "OS_APPLICATION_CREDENTIAL_NAME",
            Self::OsApplicationCredentialSecret => "OS_APPLICATION_CREDENTIAL_SECRET",
        }
    }
}

impl FromStr for SwiftConfigKey {
    type Err = object_store::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_ref().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::UnknownConfigKey { key: s.to_owned() }.into())
    }
}

/// Configures a [`SwiftStore`].
///
/// Authentication, first match wins:
///
/// 1. TempAuth when `ST_AUTH` is set (`ST_USER`, `ST_KEY` required);
/// 2. Keystone v3 when `OS_AUTH_URL` is set, as an openrc file sets it:
///    - password (`OS_AUTH_TYPE` unset, `password` or `v3password`): `OS_USERNAME` (or
///      `OS_USER_ID`), `OS_PASSWORD`, and `OS_PROJECT_NAME` or `OS_PROJECT_ID` required;
///      domains default to keystone's `default`;
///    - application credential (`OS_AUTH_TYPE=v3applicationcredential`, or unset with
///      `OS_APPLICATION_CREDENTIAL_SECRET` and no `OS_PASSWORD`):
///      `OS_APPLICATION_CREDENTIAL_ID` (or `_NAME` with the user) and `_SECRET`;
///
///    the endpoint is the catalog's `object-store` one for `OS_INTERFACE` (default `public`)
///    and `OS_REGION_NAME` (default: the first);
/// 3. only a pre-authenticated `OS_AUTH_TOKEN` with `OS_STORAGE_URL`, never renewed.
///
/// A pre-authenticated token may also accompany 1 or 2: it is used until Swift answers 401,
/// then the credentials take over. Plain `http://` is allowed when the auth or storage URL
/// uses it (the credentials already travel in clear then); otherwise [`ClientOptions`] decide.
///
/// ```no_run
/// # fn main() -> object_store::Result<()> {
/// use banklease::store::SwiftBuilder;
/// // ST_AUTH=http://127.0.0.1:8080/auth/v1.0 ST_USER=test:tester ST_KEY=testing
/// let store = SwiftBuilder::from_env().with_container("bank").build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct SwiftBuilder {
    auth_url: Option<String>,
    user: Option<String>,
    key: Option<Secret>,
    os_auth_url: Option<String>,
    os_username: Option<String>,
    os_password: Option<Secret>,
    os_project_name: Option<String>,
    os_project_id: Option<String>,
    os_user_domain_name: Option<String>,
    os_user_domain_id: Option<String>,
    os_project_domain_name: Option<String>,
    os_project_domain_id: Option<String>,
    os_region_name: Option<String>,
    os_interface: Option<String>,
    os_user_id: Option<String>,
    os_auth_type: Option<String>,
    os_app_cred_id: Option<String>,
    os_app_cred_name: Option<String>,
    os_app_cred_secret: Option<Secret>,
    storage_url: Option<String>,
    token: Option<Secret>,
    container: Option<String>,
    client_options: ClientOptions,
    retry_config: RetryConfig,
    one_cutoff: bool,
    http_connector: Option<Arc<dyn HttpConnector>>,
    clock: Option<SharedClock>,
    list_limit: Option<usize>,
}

impl fmt::Debug for SwiftBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets are `Secret`s (printed as `***`); the rest is configuration.
        f.debug_struct("SwiftBuilder")
            .field("auth_url", &self.auth_url)
            .field("user", &self.user)
            .field("key", &self.key)
            .field("os_auth_url", &self.os_auth_url)
            .field("os_username", &self.os_username)
            .field("os_password", &self.os_password)
            .field("os_project_name", &self.os_project_name)
            .field("os_project_id", &self.os_project_id)
            .field("os_region_name", &self.os_region_name)
            .field("os_interface", &self.os_interface)
            .field("os_user_id", &self.os_user_id)
            .field("os_auth_type", &self.os_auth_type)
            .field("os_app_cred_id", &self.os_app_cred_id)
            .field("os_app_cred_name", &self.os_app_cred_name)
            .field("os_app_cred_secret", &self.os_app_cred_secret)
            .field("storage_url", &self.storage_url)
            .field("token", &self.token)
            .field("container", &self.container)
            .field("retry_config", &self.retry_config)
            .field("one_cutoff", &self.one_cutoff)
            .field("list_limit", &self.list_limit)
            .finish_non_exhaustive()
    }
}

impl SwiftBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder filled from the environment variables of [`SwiftConfigKey`] (empty values are
    /// ignored). The container is not taken from the environment.
    pub fn from_env() -> Self {
        Self::new().with_env()
    }

    /// This builder with the environment variables of [`SwiftConfigKey`] set over it (empty
    /// values are ignored): the variables beside a `clouds.yaml` cloud win, as with the
    /// `openstack` CLI.
    pub fn with_env(self) -> Self {
        let mut builder = self;
        for (name, value) in std::env::vars_os() {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
                continue;
            };
            if value.is_empty() {
                continue;
            }
            if let Ok(key) = name.parse::<SwiftConfigKey>() {
                builder = builder.with_config(key, value);
            }
        }
        builder
    }

    /// Set one configuration value.
    pub fn with_config(mut self, key: SwiftConfigKey, value: impl Into<String>) -> Self {
        let v = value.into();
        match key {
            SwiftConfigKey::AuthUrl => self.auth_url = Some(v),
            SwiftConfigKey::User => self.user = Some(v),
            SwiftConfigKey::Key => self.key = Some(Secret::new(v)),
            SwiftConfigKey::OsAuthUrl => self.os_auth_url = Some(v),
            SwiftConfigKey::OsUsername => self.os_username = Some(v),
            SwiftConfigKey::OsPassword => self.os_password = Some(Secret::new(v)),
            SwiftConfigKey::OsProjectName => self.os_project_name = Some(v),
            SwiftConfigKey::OsProjectId => self.os_project_id = Some(v),
            SwiftConfigKey::OsUserDomainName => self.os_user_domain_name = Some(v),
            SwiftConfigKey::OsUserDomainId => self.os_user_domain_id = Some(v),
            SwiftConfigKey::OsProjectDomainName => self.os_project_domain_name = Some(v),
            SwiftConfigKey::OsProjectDomainId => self.os_project_domain_id = Some(v),
            SwiftConfigKey::OsRegionName => self.os_region_name = Some(v),
            SwiftConfigKey::OsInterface => self.os_interface = Some(v),
            SwiftConfigKey::StorageUrl => self.storage_url = Some(v),
            SwiftConfigKey::AuthToken => self.token = Some(Secret::new(v)),
            SwiftConfigKey::OsUserId => self.os_user_id = Some(v),
            SwiftConfigKey::OsAuthType => self.os_auth_type = Some(v),
            SwiftConfigKey::OsApplicationCredentialId => self.os_app_cred_id = Some(v),
            SwiftConfigKey::OsApplicationCredentialName => self.os_app_cred_name = Some(v),
            SwiftConfigKey::OsApplicationCredentialSecret => {
                self.os_app_cred_secret = Some(Secret::new(v))
            }
        }
        self
    }

    /// Where this builder's client goes first, for naming the store (never a secret): the
    /// storage URL when given, else the Keystone or TempAuth URL; empty when none is set.
    pub(crate) fn endpoint(&self) -> String {
        [&self.storage_url, &self.os_auth_url, &self.auth_url]
            .into_iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or_default()
    }

    /// TempAuth credentials (`ST_AUTH`, `ST_USER`, `ST_KEY`).
    pub fn with_tempauth(
        self,
        auth_url: impl Into<String>,
        user: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        self.with_config(SwiftConfigKey::AuthUrl, auth_url)
            .with_config(SwiftConfigKey::User, user)
            .with_config(SwiftConfigKey::Key, key)
    }

    /// The container every path lives in.
    pub fn with_container(mut self, container: impl Into<String>) -> Self {
        self.container = Some(container.into());
        self
    }

    /// Use this storage URL (`.../v1/AUTH_account`) instead of the one authentication returns.
    pub fn with_storage_url(self, url: impl Into<String>) -> Self {
        self.with_config(SwiftConfigKey::StorageUrl, url)
    }

    /// Start with this token instead of authenticating; with a storage URL it needs no
    /// authentication at all until Swift refuses it (401), when configured credentials (if any)
    /// take over.
    pub fn with_token(self, token: impl Into<String>) -> Self {
        self.with_config(SwiftConfigKey::AuthToken, token)
    }

    /// HTTP client options (timeouts, TLS, proxies, default content types).
    pub fn with_client_options(mut self, options: ClientOptions) -> Self {
        self.client_options = options;
        self
    }

    /// Trust `root` (a private CA) beside the system's roots, for Keystone and Swift alike.
    pub fn with_root_certificate(mut self, root: object_store::Certificate) -> Self {
        self.client_options = self.client_options.with_root_certificate(root);
        self
    }

    /// Retries of transport errors, 5xx and 429.
    pub fn with_retry(mut self, retry_config: RetryConfig) -> Self {
        self.retry_config = retry_config;
        self
    }

    /// How long one HTTP request may take (the other client options kept).
    pub fn with_request_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.client_options = self.client_options.with_timeout(timeout);
        self
    }

    /// Count a re-authentication after a 401, and the request sent again, against the retry
    /// budget of the request that met the 401: no attempt of any of them starts later than
    /// `retry_timeout + max_backoff` after the request's first ([`crate::config::ClientLimits`]).
    /// Without it each of the three runs its own retry loop.
    pub fn with_one_retry_cutoff(mut self) -> Self {
        self.one_cutoff = true;
        self
    }

    /// The [`HttpConnector`] (default: reqwest), e.g. to add middleware.
    pub fn with_http_connector<C: HttpConnector>(mut self, connector: C) -> Self {
        self.http_connector = Some(Arc::new(connector));
        self
    }

    /// The clock that retry backoff sleeps on and token expiry is judged by.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Objects per listing request (Swift caps it at 10,000, the default).
    pub fn with_list_limit(mut self, limit: usize) -> Self {
        self.list_limit = Some(limit.clamp(1, DEFAULT_LIST_LIMIT));
        self
    }

    /// Check the configuration and make the store. Does not contact Swift.
    pub fn build(self) -> object_store::Result<SwiftStore> {
        Ok(self.build_inner()?)
    }

    fn build_inner(self) -> Result<SwiftStore, Error> {
        let container = self
            .container
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or(Error::MissingContainer)?;
        if container.contains('/') {
            return Err(Error::InvalidArgument {
                reason: format!("container name `{container}` contains `/`"),
            });
        }
        let credentials = self.credentials()?;
        let storage_url = self
            .storage_url
            .as_deref()
            .map(parse_storage_url)
            .transpose()?;
        let preauth = match (&self.token, &storage_url) {
            (Some(token), Some(url)) => Some(Arc::new(Session {
                token: token.clone(),
                storage_url: url.clone(),
                expires: None,
                issued: DateTime::<Utc>::MIN_UTC,
                generation: 0,
            })),
            (Some(_), None) if !credentials.can_authenticate() => {
                return Err(Error::IncompleteCredentials {
                    kind: "pre-authenticated",
                    missing: "OS_STORAGE_URL",
                })
            }
            _ => None,
        };

        let plain_http = [
            self.auth_url.as_deref(),
            self.os_auth_url.as_deref(),
            self.storage_url.as_deref(),
        ]
        .into_iter()
        .flatten()
        .any(|u| u.trim_start().to_ascii_lowercase().starts_with("http://"));
        let mut client_options = self.client_options;
        if plain_http {
            client_options = client_options.with_allow_http(true);
        }
        let connector: Arc<dyn HttpConnector> = match self.http_connector {
            Some(c) => c,
            None => Arc::new(ReqwestConnector::default()),
        };
        let http = connector
            .connect(&client_options)
            .map_err(|e| Error::InvalidArgument {
                reason: format!("cannot make the HTTP client: {e}"),
            })?;

        Ok(SwiftStore {
            client: Arc::new(SwiftClient {
                bulk_delete_limit: tokio::sync::OnceCell::new(),
                http,
                credentials,
                storage_url_override: storage_url,
                container,
                retry: self.retry_config,
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                jitter: Jitter::from_entropy(),
                list_limit: self.list_limit.unwrap_or(DEFAULT_LIST_LIMIT),
                client_options,
                session: tokio::sync::Mutex::new(preauth),
                authentications: AtomicU64::new(0),
                in_flight: AtomicUsize::new(0),
                one_cutoff: self.one_cutoff,
            }),
        })
    }

    fn credentials(&self) -> Result<Credentials, Error> {
        fn auth_url(what: &'static str, s: &str) -> Result<Url, Error> {
            let bad = |reason: String| Error::InvalidUrl {
                what,
                url: s.to_owned(),
                reason,
            };
            let url = Url::parse(s).map_err(|e| bad(e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
                return Err(bad("not an http(s) URL".into()));
            }
            if !url.username().is_empty() || url.password().is_some() {
                return Err(bad("credentials in the URL are not accepted".into()));
            }
            Ok(url)
        }
        if let Some(url) = &self.auth_url {
            let missing = |m| Error::IncompleteCredentials {
                kind: "TempAuth",
                missing: m,
            };
            return Ok(Credentials::TempAuth {
                auth_url: auth_url("ST_AUTH", url)?,
                user: self.user.clone().ok_or_else(|| missing("ST_USER"))?,
                key: self.key.clone().ok_or_else(|| missing("ST_KEY"))?,
            });
        }
        if let Some(url) = &self.os_auth_url {
            let missing = |m| Error::IncompleteCredentials {
                kind: "Keystone",
                missing: m,
            };
            let user = KeystoneUser {
                id: self.os_user_id.clone(),
                name: self.os_username.clone(),
                domain_name: self.os_user_domain_name.clone(),
                domain_id: self.os_user_domain_id.clone(),
            };
            let auth_type = self
                .os_auth_type
                .as_deref()
                .map(|t| t.trim().to_ascii_lowercase().replace(['-', '_'], ""));
            let app_cred = match auth_type.as_deref() {
                None => self.os_app_cred_secret.is_some() && self.os_password.is_none(),
                Some("password" | "v3password") => false,
                Some("v3applicationcredential" | "applicationcredential") => true,
                Some(_) => {
                    return Err(Error::InvalidArgument {
                        reason: format!(
                            "OS_AUTH_TYPE=`{}` is not supported; use `password` or \
                             `v3applicationcredential`",
                            self.os_auth_type.as_deref().unwrap_or_default()
                        ),
                    })
                }
            };
            let method = if app_cred {
                let kind = "Keystone application";
                let missing = |m| Error::IncompleteCredentials { kind, missing: m };
                if self.os_app_cred_id.is_none() {
                    if self.os_app_cred_name.is_none() {
                        return Err(missing(
                            "OS_APPLICATION_CREDENTIAL_ID (or OS_APPLICATION_CREDENTIAL_NAME)",
                        ));
                    }
                    if user.id.is_none() && user.name.is_none() {
                        return Err(missing(
                            "OS_USER_ID or OS_USERNAME (a credential by name needs its user)",
                        ));
                    }
                }
                KeystoneMethod::ApplicationCredential {
                    id: self.os_app_cred_id.clone(),
                    name: self.os_app_cred_name.clone(),
                    user,
                    secret: self
                        .os_app_cred_secret
                        .clone()
                        .ok_or_else(|| missing("OS_APPLICATION_CREDENTIAL_SECRET"))?,
                }
            } else {
                if self.os_project_name.is_none() && self.os_project_id.is_none() {
                    return Err(missing("OS_PROJECT_NAME (or OS_PROJECT_ID)"));
                }
                if user.id.is_none() && user.name.is_none() {
                    return Err(missing("OS_USERNAME (or OS_USER_ID)"));
                }
                KeystoneMethod::Password {
                    user,
                    password: self
                        .os_password
                        .clone()
                        .ok_or_else(|| missing("OS_PASSWORD"))?,
                    project_name: self.os_project_name.clone(),
                    project_id: self.os_project_id.clone(),
                    project_domain_name: self.os_project_domain_name.clone(),
                    project_domain_id: self.os_project_domain_id.clone(),
                }
            };
            return Ok(Credentials::Keystone(Box::new(Keystone {
                auth_url: auth_url("OS_AUTH_URL", url)?,
                method,
                region: self.os_region_name.clone(),
                interface: normalise_interface(self.os_interface.as_deref().unwrap_or("public")),
            })));
        }
        if self.token.is_some() {
            return Ok(Credentials::None);
        }
        Err(Error::MissingCredentials)
    }
}
