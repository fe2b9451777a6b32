//! S3 credentials as AWS hands them out: the standard chain of the AWS SDK (`aws-config`:
//! the environment, the shared files with `AWS_PROFILE` — keys, SSO, `credential_process`,
//! an assumed role —, web identity, the container endpoint, instance metadata), plugged into
//! object_store's S3 client as its credential provider. Used when no key is set in the
//! environment and none is given to [`Bank`](crate::Bank); the profile's `region` and
//! `endpoint_url` apply where no variable sets them.
//!
//! When no source yields credentials, the error is one line naming each source tried and why
//! it gave nothing, instead of the instance-metadata endpoint's answer that a host outside a
//! cloud gets; a source that was set up and failed is named by its own error (a
//! `credential_process` by what it printed).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::profile::ProfileFileRegionProvider;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::ProvideCredentials;
use object_store::aws::AwsCredential;
use object_store::CredentialProvider;

use super::cause::AuthFailure;

/// Credentials are fetched again this long before they expire: a refresh that fails then
/// leaves the kept ones in use until they do.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// Credentials the chain gave without an expiry (a profile's keys, a `credential_process`
/// that names none) are fetched again after this long, as the SDK's own cache does.
const REFRESH_UNDATED: Duration = Duration::from_secs(15 * 60);

/// How long one fetch from the chain may take (STS, SSO, the container or instance endpoint,
/// a `credential_process`): requests wait for it, lease renewals among them.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// After a refresh failed while the kept credentials still serve, how long before the next
/// try (each try may take [`FETCH_TIMEOUT`], and requests wait for it).
const RETRY_REFRESH: Duration = Duration::from_secs(30);

/// The standard AWS credential chain, as object_store's credential provider; credentials are
/// kept until [`REFRESH_BEFORE_EXPIRY`] before their expiry.
#[derive(Debug)]
pub(crate) struct AwsChain {
    /// The region the S3 client signs for (the chain's STS calls use it too).
    region: Option<String>,
    chain: tokio::sync::OnceCell<DefaultCredentialsChain>,
    /// Held across a refresh, so that concurrent requests wait for one fetch (bounded by
    /// [`FETCH_TIMEOUT`]).
    kept: tokio::sync::Mutex<Option<Kept>>,
}

/// Credentials as the chain gave them, and until when they serve.
#[derive(Debug)]
struct Kept {
    credential: Arc<AwsCredential>,
    /// When they expire, if the chain said.
    expiry: Option<SystemTime>,
    /// When they are to be fetched again.
    refresh_at: SystemTime,
}

impl AwsChain {
    pub(crate) fn new(region: Option<String>) -> Self {
        Self {
            region,
            chain: tokio::sync::OnceCell::new(),
            kept: tokio::sync::Mutex::new(None),
        }
    }
}

#[async_trait]
impl CredentialProvider for AwsChain {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut kept = self.kept.lock().await;
        let now = now();
        if let Some(k) = kept.as_ref() {
            if now < k.refresh_at {
                return Ok(Arc::clone(&k.credential));
            }
        }
        let chain = self
            .chain
            .get_or_init(|| async {
                let builder = DefaultCredentialsChain::builder();
                // A region known here, else the profile's: never the instance metadata's, which
                // a host outside EC2 would wait for.
                match &self.region {
                    Some(region) => builder.region(aws_config::Region::new(region.clone())),
                    None => builder.region(ProfileFileRegionProvider::new()),
                }
                .build()
                .await
            })
            .await;
        let fetched = match tokio::time::timeout(FETCH_TIMEOUT, chain.provide_credentials()).await {
            Ok(result) => result,
            Err(_) => Err(CredentialsError::provider_timed_out(FETCH_TIMEOUT)),
        };
        match fetched {
            Ok(c) => {
                let credential = Arc::new(AwsCredential {
                    key_id: c.access_key_id().to_owned(),
                    secret_key: c.secret_access_key().to_owned(),
                    token: c.session_token().map(str::to_owned),
                });
                let expiry = c.expiry();
                let refresh_at = match expiry.map(|at| at.duration_since(now).unwrap_or_default()) {
                    Some(left) if left > REFRESH_BEFORE_EXPIRY => {
                        now + (left - REFRESH_BEFORE_EXPIRY)
                    }
                    // Short-lived: halfway through their life.
                    Some(left) => now + left / 2,
                    None => now + REFRESH_UNDATED,
                };
                *kept = Some(Kept {
                    credential: Arc::clone(&credential),
                    expiry,
                    refresh_at,
                });
                Ok(credential)
            }
            // A refresh that failed while the kept credentials still serve: they are used
            // until they expire (undated ones: until the chain gives others).
            Err(e) => match kept.as_mut() {
                Some(k) if k.expiry.is_none_or(|at| now < at) => {
                    tracing::warn!(error = %chain_text(&e),
                        "refreshing the S3 credentials failed; the current ones are used until they expire");
                    k.refresh_at = now + RETRY_REFRESH;
                    Ok(Arc::clone(&k.credential))
                }
                _ => Err(object_store::Error::Generic {
                    store: "S3",
                    source: Box::new(AuthFailure(Box::new(NoCredentials {
                        line: failure_line(&e, &Sources::from_env()),
                    }))),
                }),
            },
        }
    }
}

/// The host's wall clock: credential expiries are stated on it.
#[allow(clippy::disallowed_methods)] // an expiry the SDK states on the host's clock
fn now() -> SystemTime {
    SystemTime::now()
}

/// The chain gave no credentials: [`failure_line`] says what it tried.
#[derive(Debug)]
struct NoCredentials {
    line: String,
}

impl std::fmt::Display for NoCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for NoCredentials {}

/// What the chain's sources are set to in this process (never a secret).
#[derive(Debug, Default, Clone)]
pub(crate) struct Sources {
    /// `AWS_SECRET_ACCESS_KEY` set without `AWS_ACCESS_KEY_ID`.
    pub(crate) secret_only: bool,
    pub(crate) profile: Option<String>,
    pub(crate) credentials_file: Option<PathBuf>,
    pub(crate) config_file: Option<PathBuf>,
    pub(crate) web_identity: bool,
    pub(crate) container: bool,
    pub(crate) imds_disabled: bool,
    pub(crate) imds_endpoint: Option<String>,
}

impl Sources {
    pub(crate) fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from);
        let file = |variable: &str, default: &str| {
            var(variable)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
        };
        Self {
            secret_only: var("AWS_SECRET_ACCESS_KEY").is_some(),
            profile: var("AWS_PROFILE"),
            credentials_file: file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
            config_file: file("AWS_CONFIG_FILE", "config"),
            web_identity: var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some(),
            container: var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
                || var("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some(),
            imds_disabled: var("AWS_EC2_METADATA_DISABLED")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            imds_endpoint: var("AWS_EC2_METADATA_SERVICE_ENDPOINT"),
        }
    }
}

/// One line for a chain that gave no credentials: each source tried and what it gave, then
/// what to set.
pub(crate) fn failure_line(error: &CredentialsError, sources: &Sources) -> String {
    if !matches!(error, CredentialsError::CredentialsNotLoaded(_)) {
        // A source that was configured and failed (a profile's role refused, a token file
        // unreadable): its own words.
        return format!(
            "the AWS credential chain failed: {}; check the profile or variable it names",
            chain_text(error)
        );
    }
    let shown = |p: &Option<PathBuf>| match p {
        Some(p) if p.exists() => format!("`{}`", p.display()),
        Some(p) => format!("`{}` (absent)", p.display()),
        None => "no file (HOME is not set)".to_owned(),
    };
    let profile = match &sources.profile {
        Some(p) => format!("profile `{p}` (AWS_PROFILE)"),
        None => "profile `default` (AWS_PROFILE is not set)".to_owned(),
    };
    let imds = if sources.imds_disabled {
        "instance metadata (disabled by AWS_EC2_METADATA_DISABLED)".to_owned()
    } else {
        format!(
            "instance metadata at {} (no answer or no role)",
            sources
                .imds_endpoint
                .as_deref()
                .unwrap_or("http://169.254.169.254")
        )
    };
    let keys = if sources.secret_only {
        "AWS_ACCESS_KEY_ID (not set, though AWS_SECRET_ACCESS_KEY is)"
    } else {
        "AWS_ACCESS_KEY_ID (not set)"
    };
    format!(
        "no S3 credentials: tried {keys}, {profile} in {} and {}, \
         web identity ({}), the container endpoint ({}) and {imds}; set AWS_PROFILE to a \
         profile with keys, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (a daemon: in \
         its unit's EnvironmentFile=)",
        shown(&sources.credentials_file),
        shown(&sources.config_file),
        if sources.web_identity {
            "gave nothing"
        } else {
            "AWS_WEB_IDENTITY_TOKEN_FILE is not set"
        },
        if sources.container {
            "gave nothing"
        } else {
            "AWS_CONTAINER_CREDENTIALS_* are not set"
        },
    )
}

/// An error and its causes on one line.
fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

/// What the shared files set for the profile in force: its `region` and `endpoint_url` (for
/// S3), read by the SDK's own loader, once per process for the variables that name the
/// profile and its files. Read on a thread of its own: opening a bank is synchronous, and may
/// happen inside a runtime.
pub(crate) fn profile_settings() -> (Option<String>, Option<String>) {
    type Settings = (Option<String>, Option<String>);
    static READ: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<Vec<Option<std::ffi::OsString>>, Settings>>,
    > = std::sync::OnceLock::new();
    let key: Vec<_> = [
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_ENDPOINT_URL",
        "HOME",
    ]
    .iter()
    .map(std::env::var_os)
    .collect();
    let read = READ.get_or_init(Default::default);
    if let Some(found) = read.lock().expect("profile settings poisoned").get(&key) {
        return found.clone();
    }
    let found = read_profile_settings();
    read.lock()
        .expect("profile settings poisoned")
        .insert(key, found.clone());
    found
}

fn read_profile_settings() -> (Option<String>, Option<String>) {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return (None, None);
                };
                runtime.block_on(async {
                    use aws_config::meta::region::ProvideRegion;
                    let region = ProfileFileRegionProvider::new()
                        .region()
                        .await
                        .map(|r| r.to_string());
                    let conf = aws_config::provider_config::ProviderConfig::default();
                    let endpoint =
                        aws_config::default_provider::endpoint_url::endpoint_url_provider(&conf)
                            .await;
                    (region, endpoint)
                })
            })
            .join()
            .unwrap_or((None, None))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_every_source_and_what_to_set() {
        let sources = Sources {
            profile: Some("nightly".into()),
            credentials_file: Some("/nonexistent/credentials".into()),
            config_file: None,
            imds_disabled: true,
            ..Sources::default()
        };
        let line = failure_line(&CredentialsError::not_loaded("nothing"), &sources);
        for part in [
            "AWS_ACCESS_KEY_ID (not set)",
            "profile `nightly` (AWS_PROFILE)",
            "`/nonexistent/credentials` (absent)",
            "no file (HOME is not set)",
            "AWS_WEB_IDENTITY_TOKEN_FILE is not set",
            "AWS_CONTAINER_CREDENTIALS_* are not set",
            "disabled by AWS_EC2_METADATA_DISABLED",
            "EnvironmentFile=",
        ] {
            assert!(line.contains(part), "{part:?} missing from {line}");
        }
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_configured_source_that_failed_is_named_by_its_own_words() {
        let line = failure_line(
            &CredentialsError::provider_error("profile `x` refers to `y`, which does not exist"),
            &Sources::default(),
        );
        assert!(
            line.starts_with("the AWS credential chain failed:"),
            "{line}"
        );
        assert!(line.contains("which does not exist"), "{line}");
    }
}
