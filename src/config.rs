//! Configuration: a TOML file plus `BANKLEASE_<SECTION>__<KEY>` environment overrides.
//!
//! Every key is listed and commented in `etc/banklease.toml`. Unknown keys are refused, naming the
//! key and where it came from, so a typo never silently falls back to a default.
//!
//! ```
//! use banklease::config::Config;
//!
//! let env = [
//!     ("BANKLEASE_LEASE__RENEW_WINDOW", "1s"),
//!     ("BANKLEASE_LEASE__EXPIRE_WINDOW", "3s"),
//!     ("BANKLEASE_LEASE__VALIDITY_WINDOW", "500ms"),
//! ]
//! .map(|(k, v)| (k.to_string(), v.to_string()));
//! let config = Config::load_from(None, env).unwrap();
//! assert_eq!(config.lease.expire_window, std::time::Duration::from_secs(3));
//!
//! // Windows that break a rule are refused, saying which rule and by how much.
//! let env = [("BANKLEASE_LEASE__EXPIRE_WINDOW".to_string(), "3s".to_string())];
//! let err = Config::load_from(None, env).unwrap_err();
//! assert!(err.to_string().contains("renew_window < expire_window"));
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::windows::LeaseWindows;

/// The environment variable that names the configuration file.
pub const CONFIG_ENV: &str = "BANKLEASE_CONFIG";
/// The prefix of environment overrides: `BANKLEASE_<SECTION>__<KEY>`.
pub const ENV_PREFIX: &str = "BANKLEASE_";

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the bank is.
    pub bank: BankConfig,
    /// The owner lease.
    pub lease: LeaseConfig,
    /// The garbage collector.
    pub gc: GcConfig,
}

/// `[bank]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BankConfig {
    /// `file:///abs/path`, `file:relative/path`, `memory://`, `s3://bucket/prefix` or
    /// `swift://container/prefix`.
    pub url: String,
}

impl Default for BankConfig {
    fn default() -> Self {
        Self {
            url: "file:./bank".to_owned(),
        }
    }
}

/// How owner ids are made when none is configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerIdScheme {
    /// sha256 of hostname, pid and process start time (the original design's rule).
    #[default]
    HostStart,
    /// A random uuid.
    Uuid,
}

/// `[lease]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseConfig {
    /// Time between renewals.
    #[serde(with = "humantime_serde")]
    pub renew_window: Duration,
    /// Lease lifetime, counted from the instant before a successful write was sent.
    #[serde(with = "humantime_serde")]
    pub expire_window: Duration,
    /// Lease time that must be left for `check_validity` to answer true.
    #[serde(with = "humantime_serde")]
    pub validity_window: Duration,
    /// Added to every observer-side expiry judgement to absorb the store's timestamp resolution
    /// and rate differences between clocks.
    #[serde(with = "humantime_serde")]
    pub skew_margin: Duration,
    /// Fraction by which the keeper may shorten a renew interval at random (0 to 0.5).
    pub renew_jitter: f64,
    /// How owner ids are made.
    pub owner_id_scheme: OwnerIdScheme,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        let w = LeaseWindows::default();
        Self {
            renew_window: w.renew_window,
            expire_window: w.expire_window,
            validity_window: w.validity_window,
            skew_margin: Duration::from_secs(2),
            renew_jitter: 0.1,
            owner_id_scheme: OwnerIdScheme::default(),
        }
    }
}

/// `[gc]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GcConfig {
    /// Time between passes of the daemon.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long past its expiry (store clock) a lease must be before its checkpoints are collected.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Requests in flight at once during a pass.
    pub concurrency: usize,
    /// Most checkpoints collected in one pass (0 = no limit).
    pub max_deletions: usize,
    /// Refuse a pass that would collect more than this fraction of the protecting checkpoints.
    pub brake_ratio: f64,
    /// Only this many protecting checkpoints make the brake apply (small banks are exempt).
    pub brake_min: usize,
    /// Plan and report only; delete nothing.
    pub dry_run: bool,
    /// Delete lease objects of owners expired past grace once none of their protecting
    /// checkpoints is left (every restart makes a new owner; their leases would pile up).
    pub reap_leases: bool,
    /// Address for `/metrics` and `/healthz` (daemon only), e.g. `127.0.0.1:9187`.
    pub metrics_addr: Option<String>,
    /// How old a read's answer may be on this store: each lease read is judged this much
    /// before the instant it was sent. 0 for stores with read-after-write consistency (S3,
    /// local files, Swift: banklease reads with `X-Newest`).
    #[serde(with = "humantime_serde")]
    pub read_staleness: Duration,
    /// How long a write that an owner sent before its lease ran out may take to land. A
    /// collected checkpoint's data prefix is swept once more after this, for such late data.
    #[serde(with = "humantime_serde")]
    pub late_write_window: Duration,
    /// Renew window of the GC's own lease (one active GC per bank).
    #[serde(with = "humantime_serde")]
    pub lease_renew_window: Duration,
    /// Expire window of the GC's own lease: how long a standby waits after the active GC died.
    #[serde(with = "humantime_serde")]
    pub lease_expire_window: Duration,
    /// Validity window of the GC's own lease: what must be left to start a pass.
    #[serde(with = "humantime_serde")]
    pub lease_validity_window: Duration,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(300),
            grace: Duration::from_secs(60),
            concurrency: 16,
            max_deletions: 0,
            brake_ratio: 0.5,
            brake_min: 100,
            dry_run: false,
            reap_leases: true,
            metrics_addr: None,
            read_staleness: Duration::ZERO,
            late_write_window: Duration::from_secs(600),
            lease_renew_window: Duration::from_secs(10),
            lease_expire_window: Duration::from_secs(60),
            lease_validity_window: Duration::from_secs(10),
        }
    }
}

impl LeaseConfig {
    /// The owners' lease windows (not yet validated; see [`Config::validate`]).
    pub fn windows(&self) -> LeaseWindows {
        LeaseWindows {
            renew_window: self.renew_window,
            expire_window: self.expire_window,
            validity_window: self.validity_window,
        }
    }
}

impl LeaseConfig {
    /// A new owner id by the configured scheme; `started` is the process start time.
    pub fn new_owner_id(&self, started: std::time::SystemTime) -> crate::id::OwnerId {
        match self.owner_id_scheme {
            OwnerIdScheme::HostStart => crate::id::OwnerId::for_this_process(started),
            OwnerIdScheme::Uuid => crate::id::OwnerId::random(),
        }
    }
}

impl GcConfig {
    /// The GC's own lease windows.
    pub fn lease_windows(&self) -> LeaseWindows {
        LeaseWindows {
            renew_window: self.lease_renew_window,
            expire_window: self.lease_expire_window,
            validity_window: self.lease_validity_window,
        }
    }
}

impl Config {
    /// Load from `file` (or the file named by `BANKLEASE_CONFIG`, or defaults when neither is
    /// set), then apply `BANKLEASE_<SECTION>__<KEY>` overrides from the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let file: Option<PathBuf> = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        Self::load_from(file.as_deref(), std::env::vars())
    }

    /// Load from an optional file and an explicit environment (for tests and embedding).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self> {
        let mut builder = config::Config::builder();
        let source = match file {
            Some(path) => {
                if !path.is_file() {
                    return Err(Error::config(format!(
                        "config file not found: file=`{}`; pass an existing file with --config \
                         or {CONFIG_ENV}",
                        path.display()
                    )));
                }
                builder = builder.add_source(
                    config::File::from(path.to_path_buf()).format(config::FileFormat::Toml),
                );
                format!("file=`{}`", path.display())
            }
            None => "no config file".to_owned(),
        };
        let mut env_keys = Vec::new();
        for (name, value) in env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            // Only SECTION__KEY names are overrides; BANKLEASE_CONFIG and the like are not.
            if !rest.contains("__") {
                continue;
            }
            let key = rest.to_ascii_lowercase().replace("__", ".");
            builder = builder
                .set_override(key.as_str(), value)
                .map_err(|e| Error::config(format!("environment variable `{name}`: {e}")))?;
            env_keys.push(name);
        }
        let origin = if env_keys.is_empty() {
            source
        } else {
            format!("{source}, environment: {}", env_keys.join(", "))
        };
        let built = builder
            .build()
            .map_err(|e| Error::config(format!("{e} ({origin})")))?;
        let config: Config = built
            .try_deserialize()
            .map_err(|e| Error::config(format!("{e} ({origin})")))?;
        let warnings = config.validate().map_err(|e| match e {
            Error::Config { message } => Error::config(format!("{message} ({origin})")),
            other => other,
        })?;
        for warning in warnings {
            tracing::warn!("{warning} ({origin})");
        }
        Ok(config)
    }

    /// Check values that serde cannot: window rules, ranges.
    pub fn validate(&self) -> Result<Vec<String>> {
        let mut warnings = self.lease.windows().validate()?;
        warnings.extend(
            self.gc
                .lease_windows()
                .validate()
                .map_err(|e| Error::config(format!("[gc] lease_* windows: {e}")))?,
        );
        if !(0.0..=0.5).contains(&self.lease.renew_jitter) {
            return Err(Error::config(format!(
                "lease.renew_jitter=`{}` must be between 0 and 0.5",
                self.lease.renew_jitter
            )));
        }
        if !(0.0..=1.0).contains(&self.gc.brake_ratio) || self.gc.brake_ratio.is_nan() {
            return Err(Error::config(format!(
                "gc.brake_ratio=`{}` must be between 0 and 1",
                self.gc.brake_ratio
            )));
        }
        if self.gc.concurrency == 0 || self.gc.concurrency > 1024 {
            return Err(Error::config(format!(
                "gc.concurrency=`{}` must be between 1 and 1024",
                self.gc.concurrency
            )));
        }
        // Bounds that keep the date arithmetic of every judgement far from overflow, and that
        // refuse a margin no store can honour (every store stamps with some resolution).
        let bounded = |key: &str, value: Duration, min: Duration, max: Duration| {
            if value < min || value > max {
                Err(Error::config(format!(
                    "{key}=`{}` must be between {} and {}",
                    humantime::format_duration(value),
                    humantime::format_duration(min),
                    humantime::format_duration(max),
                )))
            } else {
                Ok(())
            }
        };
        const DAY: Duration = Duration::from_secs(24 * 3600);
        bounded(
            "lease.skew_margin",
            self.lease.skew_margin,
            Duration::from_millis(1),
            DAY,
        )?;
        bounded("gc.grace", self.gc.grace, Duration::ZERO, 365 * DAY)?;
        bounded(
            "gc.read_staleness",
            self.gc.read_staleness,
            Duration::ZERO,
            DAY,
        )?;
        bounded(
            "gc.late_write_window",
            self.gc.late_write_window,
            Duration::from_secs(1),
            DAY,
        )?;
        let windows = self.lease.windows();
        let slack = windows
            .expire_window
            .saturating_sub(windows.validity_window);
        if self.lease.skew_margin >= slack {
            warnings.push(format!(
                "lease.skew_margin=`{}` is not shorter than expire_window − validity_window=`{}`: \
                 no observer with this margin can ever call a lease of these windows valid \
                 (`validity-check` answers not ok for every such owner); lower skew_margin or \
                 lengthen expire_window",
                humantime::format_duration(self.lease.skew_margin),
                humantime::format_duration(slack),
            ));
        }
        if self.gc.interval.is_zero() {
            return Err(Error::config("gc.interval must be longer than zero"));
        }
        if self.bank.url.trim().is_empty() {
            return Err(Error::config("bank.url is empty; set it to a bank URL"));
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    #[test]
    fn a_skew_margin_no_observer_can_judge_under_is_warned_about() {
        let env = |margin: &str| {
            vec![
                (
                    "BANKLEASE_LEASE__RENEW_WINDOW".to_owned(),
                    "300ms".to_owned(),
                ),
                ("BANKLEASE_LEASE__EXPIRE_WINDOW".to_owned(), "2s".to_owned()),
                (
                    "BANKLEASE_LEASE__VALIDITY_WINDOW".to_owned(),
                    "100ms".to_owned(),
                ),
                ("BANKLEASE_LEASE__SKEW_MARGIN".to_owned(), margin.to_owned()),
            ]
        };
        let c = Config::load_from(None, env("2s")).unwrap();
        let warnings = c.validate().unwrap();
        assert!(
            warnings.iter().any(|w| w.contains("lease.skew_margin=`2s`")
                && w.contains("expire_window − validity_window=`1s 900ms`")),
            "{warnings:?}"
        );
        let c = Config::load_from(None, env("500ms")).unwrap();
        assert!(c
            .validate()
            .unwrap()
            .iter()
            .all(|w| !w.contains("skew_margin")));
    }

    #[test]
    fn defaults_load_and_validate() {
        let c = Config::load_from(None, no_env()).unwrap();
        assert_eq!(c.lease.windows(), LeaseWindows::default());
        assert_eq!(c.bank.url, "file:./bank");
    }

    #[test]
    fn file_and_env_override() {
        let f = file(
            "[bank]\nurl = \"memory://\"\n[lease]\nrenew_window = \"1s\"\nexpire_window = \"5s\"\nvalidity_window = \"500ms\"\n",
        );
        let env = vec![
            ("BANKLEASE_LEASE__EXPIRE_WINDOW".into(), "3s".into()),
            ("BANKLEASE_GC__CONCURRENCY".into(), "4".into()),
            ("BANKLEASE_CONFIG".into(), "ignored".into()),
            ("OTHER__THING".into(), "x".into()),
        ];
        let c = Config::load_from(Some(f.path()), env).unwrap();
        assert_eq!(c.bank.url, "memory://");
        assert_eq!(c.lease.expire_window, Duration::from_secs(3));
        assert_eq!(c.lease.validity_window, Duration::from_millis(500));
        assert_eq!(c.gc.concurrency, 4);
    }

    #[test]
    fn unknown_key_in_file_names_key_and_file() {
        let f = file("[lease]\nexpire_windw = \"5s\"\n");
        let msg = Config::load_from(Some(f.path()), no_env())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("expire_windw"), "{msg}");
        assert!(msg.contains(&f.path().display().to_string()), "{msg}");
    }

    #[test]
    fn unknown_section_is_refused() {
        let f = file("[leese]\nx = 1\n");
        let msg = Config::load_from(Some(f.path()), no_env())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("leese"), "{msg}");
    }

    #[test]
    fn unknown_env_key_names_the_variable() {
        let env = vec![("BANKLEASE_LEASE__NOPE".into(), "1".into())];
        let msg = Config::load_from(None, env).unwrap_err().to_string();
        assert!(msg.contains("nope"), "{msg}");
        assert!(msg.contains("BANKLEASE_LEASE__NOPE"), "{msg}");
    }

    #[test]
    fn bad_duration_and_type_are_refused() {
        let f = file("[lease]\nexpire_window = \"five seconds\"\n");
        let msg = Config::load_from(Some(f.path()), no_env())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("invalid configuration"), "{msg}");
        let f = file("[gc]\nconcurrency = \"many\"\n");
        assert!(Config::load_from(Some(f.path()), no_env()).is_err());
    }

    #[test]
    fn window_rules_apply_to_loaded_config() {
        let env = vec![("BANKLEASE_LEASE__RENEW_WINDOW".into(), "700s".into())];
        let err = Config::load_from(None, env).unwrap_err();
        assert!(
            err.to_string().contains("renew_window < expire_window"),
            "{err}"
        );
    }

    /// Issue 11, defect 11: values that break the date arithmetic or that no observer can read
    /// back are refused at load, naming the key.
    #[test]
    fn margins_and_windows_that_break_the_arithmetic_are_refused() {
        for (key, value, needle) in [
            ("BANKLEASE_LEASE__SKEW_MARGIN", "0s", "lease.skew_margin"),
            (
                "BANKLEASE_LEASE__SKEW_MARGIN",
                "300years",
                "lease.skew_margin",
            ),
            ("BANKLEASE_GC__GRACE", "300years", "gc.grace"),
            (
                "BANKLEASE_LEASE__EXPIRE_WINDOW",
                "40days",
                "expire_window <= 30days",
            ),
            ("BANKLEASE_GC__READ_STALENESS", "2days", "gc.read_staleness"),
            (
                "BANKLEASE_GC__LATE_WRITE_WINDOW",
                "0s",
                "gc.late_write_window",
            ),
        ] {
            let env = vec![(key.to_owned(), value.to_owned())];
            let err = Config::load_from(None, env)
                .map(|_| ())
                .expect_err(&format!("{key}={value} must be refused"));
            assert!(err.to_string().contains(needle), "{key}={value}: {err}");
        }
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let msg = Config::load_from(Some(Path::new("/nonexistent/x.toml")), no_env())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("/nonexistent/x.toml"), "{msg}");
    }

    #[test]
    fn example_config_in_etc_loads_and_lists_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/banklease.toml");
        let c = Config::load_from(Some(&path), no_env()).unwrap();
        // Every key the program knows is present in the example (uncommented or commented).
        let text = std::fs::read_to_string(&path).unwrap();
        let value = serde_json::to_value(&c).unwrap();
        for (section, keys) in value.as_object().unwrap() {
            for key in keys.as_object().unwrap().keys() {
                assert!(
                    text.contains(&format!("{key} =")) || text.contains(&format!("# {key} =")),
                    "etc/banklease.toml lacks [{section}] {key}"
                );
            }
        }
    }
}
