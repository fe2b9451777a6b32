//! Opening a bank from its URL: one function per [`Scheme`].

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ClientConfigKey, ClientOptions};

use super::scheme::Scheme;
use super::{file_url_path, Bank};
use crate::clock::store::DateRecorder;
use crate::config::ClientLimits;
use crate::credentials::Credentials;
use crate::error::{Error, Result};
use crate::store::tls::FailFast;

/// Every client option an S3 builder may have read from the environment (`AWS_ALLOW_HTTP`,
/// proxies, timeouts): carried over when a CA is added to its client options.
const CLIENT_KEYS: [ClientConfigKey; 20] = [
    ClientConfigKey::AllowHttp,
    ClientConfigKey::AllowInvalidCertificates,
    ClientConfigKey::NoSystemCertificates,
    ClientConfigKey::ConnectTimeout,
    ClientConfigKey::DefaultContentType,
    ClientConfigKey::Http1Only,
    ClientConfigKey::Http2KeepAliveInterval,
    ClientConfigKey::Http2KeepAliveTimeout,
    ClientConfigKey::Http2KeepAliveWhileIdle,
    ClientConfigKey::Http2MaxFrameSize,
    ClientConfigKey::Http2Only,
    ClientConfigKey::PoolIdleTimeout,
    ClientConfigKey::PoolMaxIdlePerHost,
    ClientConfigKey::ProxyUrl,
    ClientConfigKey::ProxyCaCertificate,
    ClientConfigKey::ProxyExcludes,
    ClientConfigKey::RandomizeAddresses,
    ClientConfigKey::ReadTimeout,
    ClientConfigKey::Timeout,
    ClientConfigKey::UserAgent,
];

impl Bank {
    /// `ca_file`: `[bank] ca_file`, a private CA trusted beside the system's roots;
    /// `credentials`: given by an embedder, used instead of the environment's.
    pub(super) fn open_with(
        url: &str,
        create: bool,
        limits: ClientLimits,
        ca_file: Option<&std::path::Path>,
        credentials: Option<&Credentials>,
    ) -> Result<Self> {
        let url = url.trim();
        if url.is_empty() {
            return Err(invalid(
                url,
                "it is empty; use file:///path, memory://, s3://bucket/prefix, az://container/prefix, \
                 gs://bucket/prefix or swift://container/prefix",
            ));
        }
        // Every bank opened by URL but an in-process one keeps what its store was measured to
        // do, for the next process (`learnt.rs`), under the store's identity.
        let keeping = |bank: Bank, endpoint: Option<&str>| {
            let identity = store_identity(url, &bank, endpoint);
            Ok(bank.keeping_learnt(identity))
        };
        let scheme = Scheme::split(url).map(|(scheme, _)| scheme);
        if let Some(given) = credentials {
            let fits = match given {
                Credentials::S3 { .. } => scheme == Some(Scheme::S3),
                Credentials::Cloud { .. } | Credentials::OpenStack { .. } => {
                    scheme == Some(Scheme::Swift)
                }
            };
            if !fits {
                return Err(invalid(
                    url,
                    &format!(
                        "{} credentials were given for it; S3 credentials are for s3:// \
                         banks, OpenStack ones for swift:// banks",
                        given.kind()
                    ),
                ));
            }
        }
        match Scheme::split(url) {
            Some((Scheme::File, rest)) => {
                open_file(url, rest, create).and_then(|b| keeping(b, None))
            }
            Some((Scheme::Memory, rest)) => open_memory(url, rest),
            Some((Scheme::S3, rest)) => open_s3(url, rest, limits, ca_file, credentials)
                .and_then(|(b, endpoint)| keeping(b, Some(&endpoint))),
            Some((Scheme::Azure, rest)) => {
                open_azure(url, rest, limits).and_then(|(b, endpoint)| keeping(b, Some(&endpoint)))
            }
            Some((Scheme::Gcs, rest)) => open_gcs(url, rest, limits).and_then(|b| keeping(b, None)),
            Some((Scheme::Swift, rest)) => open_swift(url, rest, limits, ca_file, credentials)
                .and_then(|(b, endpoint)| keeping(b, Some(&endpoint))),
            None => Err(invalid(
                url,
                &format!(
                    "unknown scheme; {}use file:///path, file:relative/path, memory://, \
                     s3://bucket/prefix, az://container/prefix, gs://bucket/prefix or \
                     swift://container/prefix",
                    path_hint(url)
                ),
            )),
        }
    }
}

/// For a URL banklease does not open: the one it probably meant. A path (`/var/lib/bank`,
/// `./bank`) is a `file:` URL; a scheme misspelt or missing a slash (`s3:/bucket`, `fiel:///x`,
/// `S3://b`, `gcs://b`, `file//x`) is the known scheme closest to it.
fn path_hint(url: &str) -> String {
    let url = url.trim();
    if url.starts_with('/') {
        return format!("did you mean `file://{url}`? ");
    }
    if url.starts_with("./") || url.starts_with("../") {
        return format!("did you mean `file:{url}`? ");
    }
    // What stands for the scheme: up to `:`, or up to the first `/` when the `:` is missing.
    let (given, rest) = match url.split_once(':') {
        Some((given, rest)) if !given.contains('/') => (given, rest),
        _ => match url.split_once('/') {
            Some((given, rest)) => (given, rest),
            None => return String::new(),
        },
    };
    let given = given.to_ascii_lowercase();
    let known = ["file", "memory", "s3", "az", "gs", "swift"];
    let aliases = [("gcs", "gs"), ("azure", "az"), ("aws", "s3")];
    let scheme = aliases
        .iter()
        .find(|(alias, _)| *alias == given)
        .map(|(_, scheme)| *scheme)
        .or_else(|| {
            known
                .iter()
                .copied()
                .filter(|k| strsim::damerau_levenshtein(k, &given) <= (k.len() / 3).max(1))
                .min_by_key(|k| strsim::damerau_levenshtein(k, &given))
        });
    let Some(scheme) = scheme else {
        return String::new();
    };
    let rest = rest.trim_start_matches('/');
    if rest.is_empty() {
        return String::new();
    }
    let slashes = if scheme == "file" { "///" } else { "//" };
    format!("did you mean `{scheme}:{slashes}{rest}`? ")
}

fn invalid(url: &str, reason: &str) -> Error {
    Error::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
        source: None,
    }
}

/// [`invalid`], because of `cause` (kept as the error's source).
fn invalid_because(
    url: &str,
    reason: &str,
    cause: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
        source: Some(Box::new(cause)),
    }
}

/// `file:…` (`rest` is what follows the scheme).
fn open_file(url: &str, rest: &str, create: bool) -> Result<Bank> {
    let bad = |reason: &str| invalid(url, reason);
    let path = file_url_path(rest).map_err(|r| bad(&r))?;
    // Encoded (`%20` for a space): a label is a URL an operator can paste back.
    let label = url::Url::from_file_path(&path)
        .map_or_else(|()| format!("file://{}", path.display()), String::from);
    // A refusal for lack of permission is labelled as one: the URL is fine.
    let io = |what: String, e: std::io::Error| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::Permission {
            bank: label.clone(),
            what,
            source: Box::new(e),
        },
        _ => invalid_because(url, &format!("cannot {what}"), e),
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(bad(&format!("`{}` is not a directory", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => {
            return Err(Error::NoBank {
                bank: label,
                reason: "its directory does not exist".to_owned(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&path)
                .map_err(|e| io(format!("create directory `{}`", path.display()), e))?;
        }
        Err(e) => return Err(io(format!("look at `{}`", path.display()), e)),
    }
    let store = crate::store::local::LocalStore::new(&path).map_err(|e| {
        let denied = match &e {
            object_store::Error::Generic { source, .. } => source
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied),
            _ => false,
        };
        if denied {
            Error::Permission {
                bank: label.clone(),
                what: "open the bank's directory".to_owned(),
                source: Box::new(e),
            }
        } else {
            invalid_because(url, "cannot open directory", e)
        }
    })?;
    Ok(Bank::from_local(store, &label))
}

/// `memory://…` (`rest` is what follows the scheme).
fn open_memory(url: &str, rest: &str) -> Result<Bank> {
    // Each open is a new store that nothing else can name, so there is no bank to
    // mistype: it is a bank from the start (`layout::check` accepts it empty).
    let mut bank = Bank::from_store(Arc::new(InMemory::new()), rest, url);
    Arc::get_mut(&mut bank.inner)
        .expect("a bank just built is not shared")
        .made_at_open = true;
    Ok(bank)
}

/// `s3://…` (`rest` is what follows the scheme), and the endpoint it talks to.
fn open_s3(
    url: &str,
    rest: &str,
    limits: ClientLimits,
    ca_file: Option<&std::path::Path>,
    credentials: Option<&Credentials>,
) -> Result<(Bank, String)> {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let bad = |reason: &str| invalid(url, reason);
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad("no bucket; use s3://bucket/prefix"));
    }
    let mut builder = object_store::aws::AmazonS3Builder::from_env();
    // The shared files' region and endpoint for the profile in force, where no variable
    // sets them (`aws_chain.rs`).
    let unset = |builder: &object_store::aws::AmazonS3Builder, key: Key| {
        builder.get_config_value(&key).is_none_or(|v| v.is_empty())
    };
    if unset(&builder, Key::Region) || unset(&builder, Key::Endpoint) {
        let (region, endpoint) = crate::store::aws_chain::profile_settings();
        if let Some(region) = region.filter(|_| unset(&builder, Key::Region)) {
            builder = builder.with_region(region);
        }
        if let Some(endpoint) = endpoint.filter(|_| unset(&builder, Key::Endpoint)) {
            builder = builder.with_endpoint(endpoint);
        }
    }
    match credentials {
        // The only ones used: a provider wins over every key, token or `AWS_SKIP_SIGNATURE`
        // the builder read from the environment.
        Some(Credentials::S3 {
            access_key_id,
            secret_access_key,
            session_token,
        }) => {
            builder = builder
                .with_skip_signature(false)
                .with_credentials(Arc::new(object_store::StaticCredentialProvider::new(
                    object_store::aws::AwsCredential {
                        key_id: access_key_id.clone(),
                        secret_key: secret_access_key.clone(),
                        token: session_token.clone(),
                    },
                )));
        }
        // Keys in the environment, or requests unsigned: object_store's own reading.
        _ if !unset(&builder, Key::AccessKeyId) => {}
        _ if builder
            .get_config_value(&Key::SkipSignature)
            .is_some_and(|v| v.eq_ignore_ascii_case("true")) => {}
        // Else the standard AWS chain.
        _ => {
            let region = builder
                .get_config_value(&Key::Region)
                .filter(|r| !r.is_empty());
            builder =
                builder.with_credentials(Arc::new(crate::store::aws_chain::AwsChain::new(region)));
        }
    }
    if let Some(timeout) = limits.request_timeout {
        builder = builder.with_config(
            object_store::aws::AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            humantime::format_duration(timeout).to_string(),
        );
    }
    // A private CA (AWS_CA_BUNDLE) beside the system's roots: the client's options as the
    // builder read them from the environment, plus the CA.
    let roots = crate::store::tls::extra_roots(crate::store::tls::AWS_CA_BUNDLE, ca_file)?;
    if !roots.is_empty() {
        let mut options = ClientOptions::new();
        for key in CLIENT_KEYS {
            let value =
                builder.get_config_value(&object_store::aws::AmazonS3ConfigKey::Client(key));
            if let Some(value) = value {
                options = options.with_config(key, value);
            }
        }
        builder = builder.with_client_options(crate::store::tls::with_roots(options, roots));
    }
    let endpoint = builder
        .get_config_value(&object_store::aws::AmazonS3ConfigKey::Endpoint)
        .unwrap_or_else(|| {
            let region = builder
                .get_config_value(&object_store::aws::AmazonS3ConfigKey::Region)
                .unwrap_or_default();
            format!("aws:{region}")
        });
    let store = builder
        .with_retry(limits.retry_config())
        .with_bucket_name(bucket)
        .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
        .with_http_connector(FailFast::new(DateRecorder::default()))
        .build()
        .map_err(|e| invalid_because(url, "cannot configure S3 from AWS_* variables", e))?;
    Ok((
        Bank::from_s3_compatible(Arc::new(store), prefix, url),
        endpoint,
    ))
}

/// `az://…` (`rest` is what follows the scheme), and the account or endpoint it talks to.
fn open_azure(url: &str, rest: &str, limits: ClientLimits) -> Result<(Bank, String)> {
    let bad = |reason: &str| invalid(url, reason);
    let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if container.is_empty() {
        return Err(bad("no container; use az://container/prefix"));
    }
    let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env();
    if let Some(timeout) = limits.request_timeout {
        builder = builder.with_config(
            object_store::azure::AzureConfigKey::Client(ClientConfigKey::Timeout),
            humantime::format_duration(timeout).to_string(),
        );
    }
    let endpoint = [
        object_store::azure::AzureConfigKey::Endpoint,
        object_store::azure::AzureConfigKey::AccountName,
        object_store::azure::AzureConfigKey::UseEmulator,
    ]
    .iter()
    .filter_map(|k| builder.get_config_value(k))
    .collect::<Vec<_>>()
    .join(",");
    let store = builder
        .with_retry(limits.retry_config())
        .with_container_name(container)
        .with_http_connector(FailFast::new(DateRecorder::default()))
        .build()
        .map_err(|e| {
            invalid_because(
                url,
                "cannot configure Azure from the AZURE_* variables (account and key, or \
                 AZURE_STORAGE_USE_EMULATOR=true for Azurite)",
                e,
            )
        })?;
    Ok((Bank::from_store(Arc::new(store), prefix, url), endpoint))
}

/// `gs://…` (`rest` is what follows the scheme).
fn open_gcs(url: &str, rest: &str, limits: ClientLimits) -> Result<Bank> {
    let bad = |reason: &str| invalid(url, reason);
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad("no bucket; use gs://bucket/prefix"));
    }
    let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env();
    if let Some(timeout) = limits.request_timeout {
        builder = builder.with_config(
            object_store::gcp::GoogleConfigKey::Client(ClientConfigKey::Timeout),
            humantime::format_duration(timeout).to_string(),
        );
    }
    let store = builder
        .with_retry(limits.retry_config())
        .with_bucket_name(bucket)
        .with_http_connector(FailFast::new(DateRecorder::default()))
        .build()
        .map_err(|e| {
            invalid_because(
                url,
                "cannot configure Google Cloud Storage from the GOOGLE_* variables \
                 (GOOGLE_SERVICE_ACCOUNT or application default credentials)",
                e,
            )
        })?;
    Ok(Bank::from_store(Arc::new(store), prefix, url))
}

/// `swift://…` (`rest` is what follows the scheme).
///
/// Its credentials: those given, alone; else the cloud `OS_CLOUD` names in `clouds.yaml`
/// with the `ST_*`/`OS_*` variables over it (as the `openstack` CLI does); else the variables.
fn open_swift(
    url: &str,
    rest: &str,
    limits: ClientLimits,
    ca_file: Option<&std::path::Path>,
    credentials: Option<&Credentials>,
) -> Result<(Bank, String)> {
    use crate::store::swift::clouds;
    let bad = |reason: &str| invalid(url, reason);
    let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if container.is_empty() {
        return Err(bad("no container; use swift://container/prefix"));
    }
    let from_env_cloud = std::env::var("OS_CLOUD").ok().filter(|c| !c.is_empty());
    let (options, origin, with_env) = match credentials {
        Some(Credentials::Cloud { name }) => {
            let found = clouds::find(name, &format!("the cloud `{name}` given"))?;
            (Some(found.options), cloud_origin(name, &found.files), false)
        }
        Some(Credentials::OpenStack { options }) => (
            Some(options.clone()),
            "the credentials given".to_owned(),
            false,
        ),
        _ => match &from_env_cloud {
            Some(name) => {
                let found = clouds::find(name, &format!("OS_CLOUD=`{name}`"))?;
                (Some(found.options), cloud_origin(name, &found.files), true)
            }
            None => (None, String::new(), true),
        },
    };
    let mut builder = crate::store::swift::SwiftBuilder::new();
    let mut cloud_ca = None;
    if let Some(options) = &options {
        let (settings, cacert) = clouds::settings(options, &origin)?;
        for (key, value) in settings {
            builder = builder.with_config(key, value);
        }
        cloud_ca = cacert;
    }
    if with_env {
        builder = builder.with_env();
    }
    if let Some(timeout) = limits.request_timeout {
        builder = builder.with_request_timeout(timeout);
    }
    if limits.retry_timeout.is_some() {
        builder = builder
            .with_retry(limits.retry_config())
            .with_one_retry_cutoff();
    }
    // A private CA (OS_CACERT, as an openrc sets it; a cloud's `cacert`) for Keystone and
    // Swift, beside the system's roots.
    let mut roots = crate::store::tls::extra_roots(crate::store::tls::OS_CACERT, ca_file)?;
    if let Some(path) = &cloud_ca {
        roots.extend(crate::store::tls::file_roots(
            &format!("{origin} cacert"),
            path,
        )?);
    }
    for root in roots {
        builder = builder.with_root_certificate(root);
    }
    let endpoint = builder.endpoint();
    let store = builder
        .with_container(container)
        .with_http_connector(FailFast::new(DateRecorder::default()))
        .build()
        .map_err(|e| {
            invalid_because(
                url,
                "cannot configure Swift from the ST_* (TempAuth) or OS_* (Keystone v3) \
                 variables, OS_CLOUD's clouds.yaml or the credentials given",
                e,
            )
        })?;
    Ok((Bank::from_swift(store, prefix, url), endpoint))
}

/// A cloud of `clouds.yaml`, for messages: its name and the files it was read from.
fn cloud_origin(name: &str, files: &[std::path::PathBuf]) -> String {
    let files: Vec<String> = files.iter().map(|f| format!("`{}`", f.display())).collect();
    format!("cloud `{name}` of {}", files.join(" and "))
}

/// The store a bank's learnt record vouches for, however its URL was spelt (`s3://b/p/`,
/// `s3://b//p`, ` s3://b/p`): the scheme, the bucket or container, the prefix as the bank reads
/// it, and the endpoint its client talks to (lowercased, without a trailing `/`); a `file:`
/// bank's label is its canonical path already.
fn store_identity(url: &str, bank: &Bank, endpoint: Option<&str>) -> String {
    let Some((scheme, rest)) = Scheme::split(url) else {
        return url.to_owned();
    };
    if scheme == Scheme::File {
        return bank.label().to_owned();
    }
    let container = rest.split_once('/').map_or(rest, |(c, _)| c);
    let mut identity = format!("{}{container}/{}", scheme.prefix(), bank.prefix());
    if let Some(endpoint) = endpoint {
        identity.push_str(" endpoint=");
        identity.push_str(&endpoint.trim().trim_end_matches('/').to_ascii_lowercase());
    }
    identity
}
