//! The CI's Keystone (`.ci/start-keystone.sh`), as tests use it: the users and credentials it
//! made (read from the JSON file `KEYSTONE_TEST_ENV` names), Swift stores authenticated through
//! it, a connector that remembers the tokens handed out (so a test can revoke one), and the few
//! admin calls the tests need (make, disable and delete a user; revoke a token).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use banklease::store::{SwiftBuilder, SwiftConfigKey, SwiftStore};
use bytes::Bytes;
use http::{Method, StatusCode};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpRequestBody, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::ClientOptions;
use serde_json::{json, Value};

/// What `.ci/start-keystone.sh` made; `None` when `BANKLEASE_TEST_KEYSTONE` is not `1`.
#[derive(Debug, Clone)]
pub struct KeystoneEnv {
    json: Value,
}

/// `(variable, value)` pairs, as an openrc file exports them.
pub type Vars = Vec<(String, String)>;

impl KeystoneEnv {
    /// Read `KEYSTONE_TEST_ENV`; `None` (with a note) when Keystone suites are not configured.
    pub fn load() -> Option<Self> {
        if std::env::var("BANKLEASE_TEST_KEYSTONE").as_deref() != Ok("1") {
            eprintln!(
                "note: Keystone suites skipped: set BANKLEASE_TEST_KEYSTONE=1 and the variables \
                 `.ci/start-keystone.sh` prints (.ci/run starts Keystone)"
            );
            return None;
        }
        let path = std::env::var("KEYSTONE_TEST_ENV")
            .expect("KEYSTONE_TEST_ENV (printed by .ci/start-keystone.sh) is set");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        Some(Self {
            json: serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {path}: {e}")),
        })
    }

    /// A value by its dotted path (`tester.password`).
    pub fn get(&self, dotted: &str) -> String {
        let mut v = &self.json;
        for part in dotted.split('.') {
            v = &v[part];
        }
        v.as_str()
            .unwrap_or_else(|| panic!("{dotted} missing from the keystone test env"))
            .to_owned()
    }

    /// The Keystone v3 URL (tokens live an hour).
    pub fn auth_url(&self) -> String {
        self.get("auth_url")
    }

    /// The second Keystone, whose tokens live `KEYSTONE_SHORT_TOKEN_LIFETIME` seconds.
    pub fn short_auth_url(&self) -> String {
        std::env::var("KEYSTONE_SHORT_AUTH_URL").expect("KEYSTONE_SHORT_AUTH_URL is set")
    }

    /// How long the second Keystone's tokens live (`KEYSTONE_SHORT_TOKEN_LIFETIME`, 20 s; at
    /// least 4 s, so that three quarters of it is a whole number of seconds).
    pub fn short_token_lifetime(&self) -> std::time::Duration {
        let secs: u64 = std::env::var("KEYSTONE_SHORT_TOKEN_LIFETIME")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20);
        std::time::Duration::from_secs(secs.max(4))
    }

    /// The container made in each project.
    pub fn container(&self) -> String {
        self.get("container")
    }

    fn common(&self, auth_url: &str) -> Vars {
        vars(&[
            ("OS_AUTH_URL", auth_url),
            ("OS_IDENTITY_API_VERSION", "3"),
            ("OS_REGION_NAME", &self.get("region")),
            ("OS_INTERFACE", "public"),
        ])
    }

    /// The openrc of user `tester` on project `banklease`, by name in the default domain.
    pub fn password_vars(&self) -> Vars {
        self.password_vars_at(&self.auth_url())
    }

    /// [`password_vars`](Self::password_vars) against another Keystone URL.
    pub fn password_vars_at(&self, auth_url: &str) -> Vars {
        let mut v = self.common(auth_url);
        v.extend(vars(&[
            ("OS_USERNAME", &self.get("tester.username")),
            ("OS_PASSWORD", &self.get("tester.password")),
            ("OS_USER_DOMAIN_NAME", "Default"),
            ("OS_PROJECT_NAME", &self.get("tester.project_name")),
            ("OS_PROJECT_DOMAIN_NAME", "Default"),
        ]));
        v
    }

    /// The openrc of `tester`'s application credential (by id).
    pub fn app_cred_vars(&self) -> Vars {
        let mut v = self.common(&self.auth_url());
        v.extend(vars(&[
            ("OS_AUTH_TYPE", "v3applicationcredential"),
            ("OS_APPLICATION_CREDENTIAL_ID", &self.get("app_cred.id")),
            (
                "OS_APPLICATION_CREDENTIAL_SECRET",
                &self.get("app_cred.secret"),
            ),
        ]));
        v
    }

    /// A Swift store configured only by `vars` (never by this process's environment).
    /// [`store`](Self::store) with a client of `limits`, as `Bank::open_configured` makes one.
    pub fn store_with_limits(
        &self,
        vars: &Vars,
        connector: Option<TokenRecorder>,
        limits: banklease::config::ClientLimits,
    ) -> SwiftStore {
        self.builder(vars, connector, Some(limits))
            .build()
            .expect("a Swift store through Keystone")
    }

    pub fn store(&self, vars: &Vars, connector: Option<TokenRecorder>) -> SwiftStore {
        self.builder(vars, connector, None)
            .build()
            .expect("a Swift store through Keystone")
    }

    fn builder(
        &self,
        vars: &Vars,
        connector: Option<TokenRecorder>,
        limits: Option<banklease::config::ClientLimits>,
    ) -> SwiftBuilder {
        let mut b = SwiftBuilder::new().with_container(self.container());
        for (k, v) in vars {
            if let Ok(key) = k.parse::<SwiftConfigKey>() {
                b = b.with_config(key, v);
            }
        }
        if let Some(c) = connector {
            b = b.with_http_connector(c);
        }
        if let Some(limits) = limits {
            if let Some(timeout) = limits.request_timeout {
                b = b.with_request_timeout(timeout);
            }
            if limits.retry_timeout.is_some() {
                b = b.with_retry(limits.retry_config()).with_one_retry_cutoff();
            }
        }
        b
    }

    /// An admin session (project `admin`).
    pub async fn admin(&self) -> Admin {
        let http = ReqwestConnector::default()
            .connect(&ClientOptions::new().with_allow_http(true))
            .expect("an HTTP client");
        let mut admin = Admin {
            http,
            base: self.auth_url(),
            token: String::new(),
        };
        admin.token = admin
            .issue(
                &self.get("admin.username"),
                &self.get("admin.password"),
                "admin",
            )
            .await;
        admin
    }
}

fn vars(pairs: &[(&str, &str)]) -> Vars {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Keystone's admin API, for what tests do to users and tokens mid-lease.
#[derive(Debug)]
pub struct Admin {
    http: HttpClient,
    base: String,
    token: String,
}

impl Admin {
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        extra: &[(&str, &str)],
    ) -> (StatusCode, http::HeaderMap, Value) {
        let mut b = http::Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if !self.token.is_empty() {
            b = b.header("X-Auth-Token", &self.token);
        }
        for (k, v) in extra {
            b = b.header(*k, *v);
        }
        let body = body.map_or_else(HttpRequestBody::empty, |v| {
            HttpRequestBody::from(Bytes::from(v.to_string()))
        });
        let response = self
            .http
            .execute(b.body(body).expect("a request"))
            .await
            .unwrap_or_else(|e| panic!("keystone {method} {path}: {e}"));
        let (parts, body) = response.into_parts();
        let bytes = body.bytes().await.expect("a keystone response body");
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (parts.status, parts.headers, json)
    }

    async fn expect(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, _, json) = self.call(method.clone(), path, body, &[]).await;
        assert!(
            status.is_success(),
            "keystone {method} {path}: {status} {json}"
        );
        json
    }

    /// A project-scoped token for `user` (default domain).
    pub async fn issue(&self, user: &str, password: &str, project: &str) -> String {
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}}});
        let (status, headers, json) = self
            .call(Method::POST, "/auth/tokens", Some(body), &[])
            .await;
        assert!(
            status.is_success(),
            "keystone token for {user}: {status} {json}"
        );
        headers["X-Subject-Token"].to_str().unwrap().to_owned()
    }

    /// A new user (default domain) with the `member` role on `project_id`; its id.
    pub async fn create_member(&self, name: &str, password: &str, project_id: &str) -> String {
        let made = self
            .expect(
                Method::POST,
                "/users",
                Some(
                    json!({"user": {"name": name, "password": password, "domain_id": "default",
                                     "enabled": true}}),
                ),
            )
            .await;
        let id = made["user"]["id"].as_str().unwrap().to_owned();
        let roles = self.expect(Method::GET, "/roles?name=member", None).await;
        let role = roles["roles"][0]["id"].as_str().unwrap().to_owned();
        self.expect(
            Method::PUT,
            &format!("/projects/{project_id}/users/{id}/roles/{role}"),
            None,
        )
        .await;
        id
    }

    /// Enable or disable a user (disabling revokes its tokens).
    pub async fn set_enabled(&self, user_id: &str, enabled: bool) {
        self.expect(
            Method::PATCH,
            &format!("/users/{user_id}"),
            Some(json!({"user": {"enabled": enabled}})),
        )
        .await;
    }

    /// Delete a user.
    pub async fn delete_user(&self, user_id: &str) {
        self.expect(Method::DELETE, &format!("/users/{user_id}"), None)
            .await;
    }

    /// Revoke one token.
    pub async fn revoke(&self, token: &str) {
        let (status, _, json) = self
            .call(
                Method::DELETE,
                "/auth/tokens",
                None,
                &[("X-Subject-Token", token)],
            )
            .await;
        assert!(status.is_success(), "revoking a token: {status} {json}");
    }

    /// Whether Keystone still validates `token`.
    pub async fn validates(&self, token: &str) -> bool {
        let (status, _, _) = self
            .call(
                Method::GET,
                "/auth/tokens",
                None,
                &[("X-Subject-Token", token)],
            )
            .await;
        status.is_success()
    }
}

/// An [`HttpConnector`] (reqwest underneath) that remembers every token Keystone hands out
/// (`X-Subject-Token`), so a test can revoke the one a store is using.
#[derive(Debug, Clone, Default)]
pub struct TokenRecorder {
    tokens: Arc<Mutex<Vec<String>>>,
}

impl TokenRecorder {
    /// The tokens handed out so far, oldest first.
    pub fn tokens(&self) -> Vec<String> {
        self.tokens.lock().unwrap().clone()
    }
}

impl HttpConnector for TokenRecorder {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Recording {
            inner: ReqwestConnector::default().connect(options)?,
            tokens: Arc::clone(&self.tokens),
        }))
    }
}

#[derive(Debug)]
struct Recording {
    inner: HttpClient,
    tokens: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl HttpService for Recording {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let response = self.inner.execute(req).await?;
        if let Some(t) = response.headers().get("X-Subject-Token") {
            if let Ok(t) = t.to_str() {
                self.tokens.lock().unwrap().push(t.to_owned());
            }
        }
        Ok(response)
    }
}
