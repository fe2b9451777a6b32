//! TLS as operators configure it: a private CA named by the variable their tools already read
//! (`OS_CACERT` in an OpenStack openrc, for Swift and its Keystone; `AWS_CA_BUNDLE`, the AWS
//! CLI's and SDKs', for S3) is added to the system's trust for that store — never replacing it,
//! as `SSL_CERT_FILE` would — and a TLS failure is not retried: a certificate that is not
//! trusted fails the same way every time, and retrying it only made `init` wait minutes before
//! saying so.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::{Certificate, ClientOptions};

use crate::error::{Error, Result};

/// The variable naming a private CA for Swift and its Keystone (an openrc's).
pub const OS_CACERT: &str = "OS_CACERT";
/// The variable naming a private CA for S3 (the AWS CLI's and SDKs').
pub const AWS_CA_BUNDLE: &str = "AWS_CA_BUNDLE";

/// The CA certificates (PEM, one or more) of the file `variable` names and of `ca_file`
/// (`[bank] ca_file`); none when neither is set. A file that cannot be read or holds no
/// certificate is refused naming where it was named.
pub fn extra_roots(variable: &str, ca_file: Option<&Path>) -> Result<Vec<Certificate>> {
    let mut roots = Vec::new();
    if let Some(path) = std::env::var_os(variable).filter(|v| !v.is_empty()) {
        roots.extend(read_roots(variable, Path::new(&path))?);
    }
    if let Some(path) = ca_file {
        roots.extend(read_roots("bank.ca_file", path)?);
    }
    Ok(roots)
}

/// The CA certificates of the PEM file at `path`, which `named` named (a cloud's `cacert`).
pub(crate) fn file_roots(named: &str, path: &Path) -> Result<Vec<Certificate>> {
    read_roots(named, path)
}

/// The CA certificates of the PEM file at `path`, which `named` named.
fn read_roots(named: &str, path: &Path) -> Result<Vec<Certificate>> {
    let shown = path.display();
    let refused = |why: String| Error::Config {
        message: format!("{named}=`{shown}`: {why}; name a PEM file of CA certificates"),
    };
    let pem = std::fs::read(path).map_err(|e| refused(format!("cannot read it: {e}")))?;
    let roots = Certificate::from_pem_bundle(&pem)
        .map_err(|e| refused(format!("it holds no certificate that parses: {e}")))?;
    if roots.is_empty() {
        return Err(refused("it holds no certificate".to_owned()));
    }
    if let Some(leaf) = only_leaves(&pem) {
        return Err(refused(format!(
            "it holds no CA certificate: `{leaf}` is a server's own, issued by a CA \
             (basicConstraints CA:FALSE), not that CA (a leaf given as the CA)"
        )));
    }
    Ok(roots)
}

/// When every certificate of the PEM bundle `pem` is a leaf another issued (basicConstraints
/// CA:FALSE or none): the first one's subject. A CA, and a self-signed certificate (a server's
/// own, pinned: the TLS library trusts it as an anchor), are not; what does not parse is left
/// to the TLS library to judge.
fn only_leaves(pem: &[u8]) -> Option<String> {
    let mut first_leaf = None;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let Ok(block) = block else { return None };
        let Ok(cert) = block.parse_x509() else {
            return None;
        };
        let self_signed = cert.subject() == cert.issuer();
        let ca = match cert.basic_constraints() {
            Ok(Some(bc)) => bc.value.ca || self_signed,
            Ok(None) => self_signed,
            Err(_) => return None,
        };
        if ca {
            return None;
        }
        first_leaf.get_or_insert_with(|| cert.subject().to_string());
    }
    first_leaf
}

/// `options` with `roots` added to the system's trust.
pub fn with_roots(mut options: ClientOptions, roots: Vec<Certificate>) -> ClientOptions {
    for root in roots {
        options = options.with_root_certificate(root);
    }
    options
}

/// A connector whose clients answer a TLS failure as an error that is not retried (its kind
/// `Unknown`, where a connection error is retried by object_store's and the Swift client's
/// loops alike); its message, and so the one line that names the variable to set, is kept.
#[derive(Debug)]
pub struct FailFast {
    inner: Arc<dyn HttpConnector>,
}

impl FailFast {
    /// Fail fast in front of `inner`.
    pub fn new(inner: impl HttpConnector) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }
}

impl HttpConnector for FailFast {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(FailFastService {
            inner: self.inner.connect(options)?,
        }))
    }
}

#[derive(Debug)]
struct FailFastService {
    inner: HttpClient,
}

#[async_trait]
impl HttpService for FailFastService {
    async fn call(&self, req: HttpRequest) -> std::result::Result<HttpResponse, HttpError> {
        super::sent::count(req.method());
        match self.inner.execute(req).await {
            Err(e) if e.kind() == HttpErrorKind::Connect && super::cause::is_tls_failure(&e) => {
                Err(HttpError::new(HttpErrorKind::Unknown, e))
            }
            answer => answer,
        }
    }
}
