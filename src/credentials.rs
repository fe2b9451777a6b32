//! Credentials an embedder gives a bank explicitly, instead of the process's environment
//! ([`Bank::open_with_credentials`](crate::Bank::open_with_credentials), `[bank]` in code,
//! Python's `Bank.open(..., credentials=...)`).
//!
//! Without them a bank takes its credentials as each ecosystem hands them out: S3 from the
//! AWS chain (the `AWS_*` keys, else `AWS_PROFILE` and the shared files, web identity, the
//! container and instance endpoints), Swift from `ST_*`/`OS_*` or the cloud `OS_CLOUD` names
//! in `clouds.yaml`, Azure and GCS from their variables.

use std::collections::BTreeMap;
use std::fmt;

/// Credentials for one bank's store. Secrets are never printed (`Debug` shows `***`).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credentials {
    /// An S3 access key (`s3://` banks), and the session token of temporary credentials.
    S3 {
        /// `AWS_ACCESS_KEY_ID`'s value.
        access_key_id: String,
        /// `AWS_SECRET_ACCESS_KEY`'s value.
        secret_access_key: String,
        /// `AWS_SESSION_TOKEN`'s value, for temporary credentials.
        session_token: Option<String>,
    },
    /// A cloud of `clouds.yaml` by name, as `OS_CLOUD` names one (`swift://` banks), looked up
    /// in the files and order openstacksdk uses.
    Cloud {
        /// The cloud's name under `clouds:`.
        name: String,
    },
    /// OpenStack options as a cloud of `clouds.yaml` holds them (`swift://` banks): the keys
    /// of its `auth:` (`auth_url`, `username`, `password`, `project_name`,
    /// `user_domain_name`, `project_domain_name`, `application_credential_id`,
    /// `application_credential_secret`, …) and `auth_type`, `region_name`, `interface`,
    /// `cacert`, in one map.
    OpenStack {
        /// Option name to value.
        options: BTreeMap<String, String>,
    },
}

impl Credentials {
    /// An S3 access key without a session token.
    pub fn s3(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self::S3 {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }

    /// What kind of store they are for, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::S3 { .. } => "S3",
            Self::Cloud { .. } | Self::OpenStack { .. } => "OpenStack",
        }
    }
}

/// Options whose values are shown (`Debug`): names and places, never a credential. Any other
/// option, a misspelt one included, is taken for a secret.
pub(crate) fn is_shown_option(name: &str) -> bool {
    matches!(
        name,
        "auth_url"
            | "auth_type"
            | "username"
            | "user_id"
            | "project_name"
            | "project_id"
            | "tenant_name"
            | "tenant_id"
            | "user_domain_name"
            | "user_domain_id"
            | "project_domain_name"
            | "project_domain_id"
            | "domain_name"
            | "domain_id"
            | "region_name"
            | "interface"
            | "cacert"
            | "application_credential_id"
            | "application_credential_name"
            | "identity_api_version"
    )
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::S3 {
                access_key_id,
                session_token,
                ..
            } => f
                .debug_struct("S3")
                .field("access_key_id", access_key_id)
                .field("secret_access_key", &"***")
                .field("session_token", &session_token.as_ref().map(|_| "***"))
                .finish(),
            Self::Cloud { name } => f.debug_struct("Cloud").field("name", name).finish(),
            Self::OpenStack { options } => {
                let shown: BTreeMap<&str, &str> = options
                    .iter()
                    .map(|(k, v)| {
                        let v = if is_shown_option(k) { v } else { "***" };
                        (k.as_str(), v)
                    })
                    .collect();
                f.debug_struct("OpenStack")
                    .field("options", &shown)
                    .finish()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_secret() {
        let s3 = Credentials::S3 {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("token-secret".into()),
        };
        let os = Credentials::OpenStack {
            options: [
                ("username".to_owned(), "svc".to_owned()),
                ("password".to_owned(), "very-secret".to_owned()),
                (
                    "application_credential_secret".to_owned(),
                    "app-secret".to_owned(),
                ),
                (
                    "aws_secret_access_key".to_owned(),
                    "misspelt-secret".to_owned(),
                ),
            ]
            .into(),
        };
        for shown in [format!("{s3:?}"), format!("{os:?}")] {
            assert!(!shown.contains("very-secret") && !shown.contains("token-secret"));
            assert!(!shown.contains("app-secret"), "{shown}");
            assert!(!shown.contains("misspelt-secret"), "{shown}");
        }
        assert!(format!("{s3:?}").contains("AKIDEXAMPLE"));
        assert!(format!("{os:?}").contains("svc"));
    }
}
