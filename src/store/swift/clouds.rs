//! `clouds.yaml`: the cloud `OS_CLOUD` names, found where openstacksdk and the `openstack`
//! CLI look for it, as [`SwiftBuilder`](super::SwiftBuilder) options.
//!
//! The first file found of `OS_CLIENT_CONFIG_FILE`, then `clouds.yaml` (`.yml`, `.json`) in
//! the working directory, `$XDG_CONFIG_HOME/openstack` (`~/.config/openstack`),
//! `/etc/xdg/openstack` and `/etc/openstack`; `secure.yaml` is found the same way
//! (`OS_CLIENT_SECURE_FILE` first) and its cloud's keys are laid over the first's.
//! Variables `OS_*` set beside `OS_CLOUD` win over the file, as with the `openstack` CLI.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

use super::SwiftConfigKey;
use crate::error::{Error, Result};

/// A cloud's options, flattened: the keys of its `auth:` and its own (`auth_type`,
/// `region_name`, `interface`, `cacert`), as [`Credentials::OpenStack`](crate::Credentials)
/// holds them.
pub(crate) type CloudOptions = BTreeMap<String, String>;

/// Where a cloud's options come from, for messages.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) options: CloudOptions,
    /// The files read, in order.
    pub(crate) files: Vec<PathBuf>,
}

/// The directories openstacksdk searches, in its order.
fn search_dirs() -> Vec<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut dirs = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        dirs.push(cwd);
    }
    let config_home = var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(home) = config_home {
        dirs.push(home.join("openstack"));
    }
    if let Some(home) = var("HOME") {
        let unix = PathBuf::from(home).join(".config").join("openstack");
        if !dirs.contains(&unix) {
            dirs.push(unix);
        }
    }
    dirs.push(PathBuf::from("/etc/xdg/openstack"));
    dirs.push(PathBuf::from("/etc/openstack"));
    dirs
}

/// The files a stem (`clouds`, `secure`) may be, in order, the override variable's first.
fn candidates(variable: &str, stem: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::env::var_os(variable)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    for dir in search_dirs() {
        for suffix in ["yaml", "yml", "json"] {
            files.push(dir.join(format!("{stem}.{suffix}")));
        }
    }
    files
}

/// The cloud `name` of the first `clouds.yaml` found, with `secure.yaml`'s keys over it;
/// `named` says where the name came from, for messages (``OS_CLOUD=`prod` ``).
pub(crate) fn find(name: &str, named: &str) -> Result<Found> {
    let tried = candidates("OS_CLIENT_CONFIG_FILE", "clouds");
    let Some(file) = tried.iter().find(|p| p.is_file()) else {
        return Err(config(format!(
            "{named} but no clouds.yaml was found (looked for {}); write the cloud \
             there, name the file with OS_CLIENT_CONFIG_FILE, or use OS_* variables",
            shown(&tried)
        )));
    };
    let mut options = read_cloud(file, name)?.ok_or_else(|| {
        config(format!(
            "{named} names no cloud in `{}`; check the name under `clouds:`",
            file.display()
        ))
    })?;
    let mut files = vec![file.clone()];
    if let Some(secure) = candidates("OS_CLIENT_SECURE_FILE", "secure")
        .into_iter()
        .find(|p| p.is_file())
    {
        if let Some(over) = read_cloud(&secure, name)? {
            options.extend(over);
        }
        files.push(secure);
    }
    Ok(Found { options, files })
}

fn shown(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| format!("`{}`", p.display()))
        .collect();
    names.join(", ")
}

fn config(message: String) -> Error {
    Error::Config { message }
}

/// The cloud `name` of the file at `path`, flattened, if it has one.
fn read_cloud(path: &Path, name: &str) -> Result<Option<CloudOptions>> {
    let bad = |why: String| config(format!("`{}`: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let docs = YamlLoader::load_from_str(&text)
        .map_err(|e| bad(format!("it is not valid YAML or JSON: {e}")))?;
    let Some(cloud) = docs.first().map(|d| &d["clouds"][name]) else {
        return Ok(None);
    };
    if cloud.is_badvalue() || cloud.is_null() {
        return Ok(None);
    }
    let Yaml::Hash(map) = cloud else {
        return Err(bad(format!("cloud `{name}` is not a mapping")));
    };
    let mut options = CloudOptions::new();
    for (key, value) in map {
        let Some(key) = key.as_str() else { continue };
        if key == "auth" {
            let Yaml::Hash(auth) = value else {
                return Err(bad(format!("`clouds.{name}.auth` is not a mapping")));
            };
            for (k, v) in auth {
                if let (Some(k), Some(v)) = (k.as_str(), scalar(v)) {
                    options.insert(k.to_owned(), v);
                }
            }
        } else if let Some(v) = scalar(value) {
            options.insert(key.to_owned(), v);
        } else if key == "regions" {
            // A list of regions: the first, as openstacksdk takes by default.
            if let Some(first) = value
                .as_vec()
                .and_then(|v| v.first())
                .and_then(|r| scalar(r).or_else(|| r["name"].as_str().map(str::to_owned)))
            {
                options.entry("region_name".to_owned()).or_insert(first);
            }
        }
    }
    Ok(Some(options))
}

fn scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Builder settings, in order.
pub(crate) type Settings = Vec<(SwiftConfigKey, String)>;

/// A cloud's options as builder settings, and its `cacert`. An option with no Swift meaning
/// (`identity_api_version`, `volume_api_version`, …) is left aside; an `auth_type` the client
/// does not speak is refused.
pub(crate) fn settings(
    options: &CloudOptions,
    origin: &str,
) -> Result<(Settings, Option<PathBuf>)> {
    let mut settings = Vec::new();
    let mut cacert = None;
    for (name, value) in options {
        let key = match name.as_str() {
            "auth_url" => SwiftConfigKey::OsAuthUrl,
            "username" => SwiftConfigKey::OsUsername,
            "user_id" => SwiftConfigKey::OsUserId,
            "password" => SwiftConfigKey::OsPassword,
            "project_name" | "tenant_name" => SwiftConfigKey::OsProjectName,
            "project_id" | "tenant_id" => SwiftConfigKey::OsProjectId,
            "user_domain_name" => SwiftConfigKey::OsUserDomainName,
            "user_domain_id" => SwiftConfigKey::OsUserDomainId,
            "project_domain_name" => SwiftConfigKey::OsProjectDomainName,
            "project_domain_id" => SwiftConfigKey::OsProjectDomainId,
            "region_name" => SwiftConfigKey::OsRegionName,
            "interface" => SwiftConfigKey::OsInterface,
            "application_credential_id" => SwiftConfigKey::OsApplicationCredentialId,
            "application_credential_name" => SwiftConfigKey::OsApplicationCredentialName,
            "application_credential_secret" => SwiftConfigKey::OsApplicationCredentialSecret,
            "auth_type" => {
                let kind = match value.as_str() {
                    "password" | "v3password" => "password",
                    "v3applicationcredential" | "applicationcredential" => {
                        "v3applicationcredential"
                    }
                    other => {
                        return Err(config(format!(
                            "{origin}: auth_type=`{other}` is not one the Swift client speaks; \
                             use `password` or `v3applicationcredential`"
                        )))
                    }
                };
                settings.push((SwiftConfigKey::OsAuthType, kind.to_owned()));
                continue;
            }
            "cacert" => {
                cacert = Some(PathBuf::from(value));
                continue;
            }
            _ => continue,
        };
        settings.push((key, value.clone()));
    }
    Ok((settings, cacert))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloud_is_flattened_and_secure_yaml_lays_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let clouds = dir.path().join("clouds.yaml");
        std::fs::write(
            &clouds,
            "clouds:\n  prod:\n    auth:\n      auth_url: https://keystone.example:5000/v3\n      \
             username: svc\n      project_name: backups\n      user_domain_name: Default\n      \
             project_domain_name: Default\n    region_name: RegionTwo\n    \
             identity_api_version: 3\n  other:\n    auth: {auth_url: http://x}\n",
        )
        .unwrap();
        let options = read_cloud(&clouds, "prod").unwrap().unwrap();
        assert_eq!(options["auth_url"], "https://keystone.example:5000/v3");
        assert_eq!(options["region_name"], "RegionTwo");
        assert_eq!(options["identity_api_version"], "3");
        assert!(read_cloud(&clouds, "absent").unwrap().is_none());
        let (settings, cacert) = settings(&options, "test").unwrap();
        assert!(cacert.is_none());
        assert!(settings.contains(&(SwiftConfigKey::OsUsername, "svc".to_owned())));
        assert!(settings.contains(&(SwiftConfigKey::OsRegionName, "RegionTwo".to_owned())));
        // No Swift meaning: left aside.
        assert_eq!(settings.len(), 6);
    }

    #[test]
    fn an_auth_type_the_client_does_not_speak_is_refused() {
        let options: CloudOptions = [("auth_type".to_owned(), "v3oidcpassword".to_owned())].into();
        let e = settings(&options, "cloud `x`").unwrap_err().to_string();
        assert!(e.contains("auth_type=`v3oidcpassword`"), "{e}");
    }

    #[test]
    fn a_list_of_regions_gives_its_first() {
        let dir = tempfile::tempdir().unwrap();
        let clouds = dir.path().join("clouds.yaml");
        std::fs::write(
            &clouds,
            "clouds:\n  c:\n    regions:\n      - name: R1\n      - R2\n    auth: {username: u}\n",
        )
        .unwrap();
        let options = read_cloud(&clouds, "c").unwrap().unwrap();
        assert_eq!(options["region_name"], "R1");
    }
}
