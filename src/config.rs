//! Configuration: a TOML file plus `BANKLEASE_<SECTION>__<KEY>` environment overrides.
//!
//! Every key is listed and commented in `etc/banklease.toml`. Unknown keys are refused, naming the
//! key and where it came from, so a typo never silently falls back to a default.
//!
//! Invariant: **one configuration gate** ([`Config::gate`]). The file, the variables,
//! `BANKLEASE_BANK` and a command line's overrides are merged first and validated once, so
//! every rule is judged on the bank and the values actually used, by every entry point alike;
//! the timing rules use the retry budget of the store client actually opened.
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
//! assert_eq!(config.lease.windows.expire_window, std::time::Duration::from_secs(3));
//!
//! // Windows that break a rule are refused, saying which rule and by how much.
//! let env = [("BANKLEASE_LEASE__EXPIRE_WINDOW".to_string(), "3s".to_string())];
//! let err = Config::load_from(None, env).unwrap_err();
//! assert!(err.to_string().contains("renew_window < expire_window"));
//!
//! // So are windows whose guarantees would hold only by luck (see [`Config::refusals`]): here
//! // 0.1 % of a 30-day expire window (43m 12s) against 2s of margin and 10m of grace.
//! let env = [("BANKLEASE_LEASE__EXPIRE_WINDOW".to_string(), "30days".to_string())];
//! let err = Config::load_from(None, env).unwrap_err();
//! assert!(err.to_string().contains("raise gc.grace to at least 43m 10s"));
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::windows::LeaseWindows;

/// The environment variable that names the configuration file.
pub const CONFIG_ENV: &str = "BANKLEASE_CONFIG";
/// The environment variable that gives the bank's URL (as `--bank` does), over `[bank] url`.
pub const BANK_ENV: &str = "BANKLEASE_BANK";
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
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BankConfig {
    /// `file:///abs/path`, `file:relative/path`, `memory://`, `s3://bucket/prefix` or
    /// `swift://container/prefix`. Empty by default: a command without one names the three ways
    /// to give it, instead of making a bank wherever it runs.
    pub url: String,
    /// How long one HTTP request to the store may take [default: the client's, 30s, or the
    /// `AWS_TIMEOUT` / `AZURE_TIMEOUT` / `GOOGLE_TIMEOUT` variable].
    #[serde(with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
    /// How long after a request's first attempt the client may start another (retries,
    /// and on Swift a re-authentication and the resend) [default: the client's, 3m, and on
    /// Swift three such loops]. With [`request_timeout`](Self::request_timeout) it gives the
    /// retry budget the timing rules use ([`ClientLimits::budget`]).
    #[serde(with = "humantime_serde")]
    pub retry_timeout: Option<Duration>,
    /// A PEM file of CA certificates the store's TLS endpoint is trusted by, beside the
    /// system's roots and the store's own variable (`OS_CACERT`, `AWS_CA_BUNDLE`).
    pub ca_file: Option<std::path::PathBuf>,
    /// Credentials given in code, used instead of the environment's (never read from a file
    /// or variable: those are the store's own, `AWS_PROFILE`, `OS_CLOUD`, ...).
    #[serde(skip)]
    pub credentials: Option<crate::Credentials>,
}

impl BankConfig {
    /// The section the configuration sets for a bank opened by URL alone (`Bank::open`): the
    /// file `BANKLEASE_CONFIG` names, the `BANKLEASE_BANK__*` variables over it, the defaults
    /// where neither sets a key.
    pub fn configured() -> crate::Result<Self> {
        budget::configured_bank()
    }

    /// The store client's limits this section sets.
    pub fn limits(&self) -> ClientLimits {
        ClientLimits {
            request_timeout: self.request_timeout,
            retry_timeout: self.retry_timeout,
        }
    }

    /// The retry budget of the store client opened for this section ([`ClientLimits::budget`]).
    pub fn retry_budget(&self) -> Duration {
        self.limits().budget(&self.url)
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
#[serde(default)]
pub struct LeaseConfig {
    /// The owners' windows: `renew_window`, `expire_window` and `validity_window`, keys of this
    /// section (not yet validated; see [`Config::validate`]).
    #[serde(flatten)]
    pub windows: LeaseWindows,
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
        Self {
            windows: LeaseWindows::default(),
            skew_margin: Duration::from_secs(2),
            renew_jitter: 0.1,
            owner_id_scheme: OwnerIdScheme::default(),
        }
    }
}

// The GC's own lease windows are `[gc] lease_renew_window` and so on.
serde_with::with_prefix!(gc_lease "lease_");

/// `gc.keep_failed_for`'s default: 14 days.
pub const DEFAULT_KEEP_FAILED_FOR: Duration = Duration::from_secs(14 * 24 * 3600);

/// A duration, or `"never"` (`None`): `gc.keep_failed_for`.
mod keep_for {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_str("never"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim() == "never" {
            return Ok(None);
        }
        humantime::parse_duration(text.trim())
            .map(Some)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{text}` is neither a duration (`14d`, `36h`) nor `never`: {e}"
                ))
            })
    }
}

/// `[gc]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct GcConfig {
    /// Time between passes of the daemon.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long past its expiry (store clock) a lease must be before its checkpoints are collected.
    /// With `lease.skew_margin` it must cover 0.1 % of `lease.expire_window` (an owner's clock
    /// running slow), and on Swift the store client's retry budget (see [`Config::refusals`]).
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Requests in flight at once during a pass.
    pub concurrency: usize,
    /// Most checkpoints deleted in one pass, collected or retired (0 = no limit).
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
    /// collected checkpoint's data prefix is swept once more after this, for such late data. At
    /// least the store client's retry budget ([`store_client_retry_budget`]) plus 0.1 %.
    #[serde(with = "humantime_serde")]
    pub late_write_window: Duration,
    /// How long a failed (`error`) checkpoint is kept, from when its owner completed it as
    /// failed (the store's clock), before the GC retires it, data first; `None` (`"never"`)
    /// keeps failed checkpoints until an operator deletes them.
    #[serde(with = "keep_for")]
    pub keep_failed_for: Option<Duration>,
    /// The windows of the GC's own lease (one active GC per bank), keys `lease_renew_window`,
    /// `lease_expire_window` (how long a standby waits after the active GC died) and
    /// `lease_validity_window` (what must be left to start a pass).
    #[serde(flatten, with = "gc_lease")]
    pub lease: LeaseWindows,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(300),
            // 10m, not the 1m it was: on Swift the store client may send an owner's write of
            // `decisions/<id>` again up to 11m 15s after the owner sent it
            // ([`store_client_retry_budget`]), and with the default validity window (1m 40s) and
            // margin (2s) only a grace above 9m 34s keeps that write from landing beside the GC's
            // (rule (c) of [`Config::refusals`]). 1m held only because retries that long are rare.
            grace: Duration::from_secs(600),
            concurrency: 16,
            max_deletions: 0,
            brake_ratio: 0.5,
            brake_min: 100,
            dry_run: false,
            reap_leases: true,
            metrics_addr: None,
            read_staleness: Duration::ZERO,
            // 15m, not the 10m it was: at least the Swift client's retry budget (11m 15s) plus
            // 0.1 % (rule (b) of [`Config::refusals`]); S3, Azure and GCS need 3m 45s 225ms.
            late_write_window: Duration::from_secs(900),
            // Two weeks: a nightly job's failure stays to be looked at over a long weekend and
            // a holiday, and its partial data does not pile up for ever.
            keep_failed_for: Some(DEFAULT_KEEP_FAILED_FOR),
            lease: LeaseWindows {
                renew_window: Duration::from_secs(10),
                expire_window: Duration::from_secs(60),
                validity_window: Duration::from_secs(10),
            },
        }
    }
}

/// What [`Config::check`] found: warnings, and refusals (which [`Config::validate`] fails on).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// What the configuration gets wrong without being unsafe.
    pub warnings: Vec<String>,
    /// The rules of [`Config::refusals`] it breaks.
    pub refusals: Vec<String>,
}

/// `d` in whole milliseconds, rounded up (a declared budget, or a wait, is never shorter than
/// the real one).
pub fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// `d` rounded up to the millisecond (a grace that is "at least" it is then a round number).
fn round_up_to_ms(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    crate::clock::drift::nanos_to_duration(ms * 1_000_000)
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

impl Config {
    /// The bank's URL, or an error naming the three ways to give one when none is.
    pub fn bank_url(&self) -> Result<&str> {
        match self.bank.url.trim() {
            "" => Err(Error::NoBankGiven),
            url => Ok(url),
        }
    }

    /// Load from `file` (or the file named by `BANKLEASE_CONFIG`, or defaults when neither is
    /// set), then apply `BANKLEASE_<SECTION>__<KEY>` overrides and `BANKLEASE_BANK` from the
    /// process environment; validated once everything is applied ([`Config::gate`]).
    pub fn load(file: Option<&Path>) -> Result<Self> {
        Self::load_with(file, |_| {})
    }

    /// [`Config::load`], then the command line's overrides (`apply`, e.g. `--bank`), and only
    /// then validated: the one gate every entry point goes through.
    pub fn load_with(file: Option<&Path>, apply: impl FnOnce(&mut Config)) -> Result<Self> {
        let file: Option<PathBuf> = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        Self::gate(file.as_deref(), std::env::vars(), apply)
    }

    /// Load from an optional file and an explicit environment (for tests and embedding).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self> {
        Self::gate(file, env, |_| {})
    }

    /// The one configuration gate. Sources, each over the one before: the file, the
    /// `BANKLEASE_<SECTION>__<KEY>` variables of `env`, `BANKLEASE_BANK` (a whole bank URL, as
    /// `--bank` takes it), then `apply` (a command line's overrides). Only then validated, with
    /// [`Config::refusals`] judged on the bank actually used: a refusal never depends on which
    /// way the URL was given.
    ///
    /// Invariant: **one configuration gate.** Every binary, subcommand, the GC daemon and the
    /// Python package load their configuration here; none validates a configuration it then
    /// changes.
    pub fn gate(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        apply: impl FnOnce(&mut Config),
    ) -> Result<Self> {
        Self::gate_with(file, env, apply, true)
    }

    /// [`Config::load_with`] for `banklease doctor`, which reports the refusals of
    /// [`Config::refusals`] instead of failing on them ([`Config::check`]); values out of range
    /// still fail.
    pub fn load_for_diagnosis(
        file: Option<&Path>,
        apply: impl FnOnce(&mut Config),
    ) -> Result<Self> {
        let file: Option<PathBuf> = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        Self::gate_with(file.as_deref(), std::env::vars(), apply, false)
    }

    pub(crate) fn gate_with(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        apply: impl FnOnce(&mut Config),
        refuse: bool,
    ) -> Result<Self> {
        // The defaults are the first source, so every key is present when the sections with
        // flattened windows are read.
        let defaults_source = config::Config::try_from(&Config::default())
            .map_err(|e| Error::config(format!("the defaults do not serialise: {e}")))?;
        let mut builder = config::Config::builder().add_source(defaults_source.clone());
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
        let mut bank_variable = None;
        for (name, value) in env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            if name == BANK_ENV {
                bank_variable = Some(value).filter(|v| !v.trim().is_empty());
                if bank_variable.is_some() {
                    env_keys.push(name);
                }
                continue;
            }
            // Only SECTION__KEY names are overrides; BANKLEASE_CONFIG and the like are not.
            if !rest.contains("__") {
                if let Some(warning) = env::unknown_variable(&name) {
                    tracing::warn!("{warning}");
                }
                continue;
            }
            let key = rest.to_ascii_lowercase().replace("__", ".");
            builder = builder
                .set_override(key.as_str(), env::typed(value))
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
        // Checked on the merged keys, not by serde: `deny_unknown_fields` does not combine with
        // the flattened windows of `[lease]` and `[gc]`.
        let table: config::Map<String, config::Value> = built
            .clone()
            .try_deserialize()
            .map_err(|e| Error::config(format!("{e} ({origin})")))?;
        if let Some(refusal) = env::unknown_key(&table) {
            return Err(Error::config(format!("{refusal} ({origin})")));
        }
        let mut config: Config = built.try_deserialize().map_err(|e| {
            let e = env::name_the_key(e.to_string(), &table, &defaults_source);
            Error::config(format!("{e}{} ({origin})", unit_hint(&e)))
        })?;
        if let Some(url) = bank_variable {
            config.bank.url = url;
        }
        let before = config.bank.url.clone();
        apply(&mut config);
        let origin = if config.bank.url != before {
            format!("{origin}, command line: --bank")
        } else {
            origin
        };
        let checked = if refuse {
            config.validate()
        } else {
            config.check().map(|c| c.warnings)
        };
        let warnings = checked.map_err(|e| match e {
            Error::Config { message } => Error::config(format!("{message} ({origin})")),
            other => other,
        })?;
        for warning in warnings {
            if crate::windows::first_time(&warning) {
                tracing::warn!("{warning} ({origin})");
            }
        }
        Ok(config)
    }

    /// Check values that serde cannot: window rules, ranges, and the arithmetic of
    /// [`Config::refusals`]. On success returns the warnings (possibly none); every refusal is
    /// named in the one error.
    pub fn validate(&self) -> Result<Vec<String>> {
        let checked = self.check()?;
        if checked.refusals.is_empty() {
            Ok(checked.warnings)
        } else {
            Err(Error::config(checked.refusals.join("; ")))
        }
    }

    /// Like [`validate`](Self::validate), but hands back the refusals of [`Config::refusals`]
    /// instead of failing on them (for `banklease doctor`, which reports them). Fails only on a
    /// value out of range or windows that break their own rules.
    pub fn check(&self) -> Result<Checked> {
        let warnings = self.check_values()?;
        Ok(Checked {
            warnings,
            refusals: self.refusals(),
        })
    }
}

/// A duration as the command line takes it (humantime: `250ms`, `30s`, `10m`), with the hint
/// a bare number needs: `30` is refused as "add a unit, e.g. `30s`", never read as seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| match bare_number(s) {
        Some(n) => format!("`{n}` has no unit: add a unit, e.g. `{n}s`"),
        None => format!("{e} (e.g. `250ms`, `30s`, `10m`)"),
    })
}

/// `s` when it is a number without a unit.
fn bare_number(s: &str) -> Option<&str> {
    let s = s.trim();
    (!s.is_empty() && s.parse::<f64>().is_ok_and(f64::is_finite)).then_some(s)
}

/// For a configuration error about a duration given as a bare number (`expire_window = 600`,
/// which serde reports as `invalid value: string "600", expected a duration`): the hint to
/// add a unit; empty otherwise.
fn unit_hint(error: &str) -> String {
    // A bare number arrives as text from a variable or a flag, and as a number from TOML (read
    // through the buffered values of the sections with flattened windows).
    let quoted = |open: &str, close: &str| {
        error
            .split_once(open)
            .and_then(|(_, rest)| rest.split_once(close))
            .and_then(|(value, _)| bare_number(value))
    };
    let number = quoted("string \"", "\", expected a duration")
        .or_else(|| quoted("integer `", "`, expected a duration"))
        .or_else(|| quoted("floating point `", "`, expected a duration"));
    match number {
        Some(n) => format!("; add a unit, e.g. `{n}s`"),
        None => String::new(),
    }
}

mod budget;
mod env;
mod rules;
#[cfg(test)]
mod tests;

pub use budget::{default_retry_budget, store_client_retry_budget, ClientLimits};
pub use rules::{swift_rule, SwiftRule};
