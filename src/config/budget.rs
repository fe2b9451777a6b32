//! The store client's limits (`[bank] request_timeout`, `[bank] retry_timeout`) and the retry
//! budget they give: the longest time after a write was sent that the client may still send it
//! again, and so the longest time after which it can land. The timing rules of
//! [`Config::refusals`](super::Config::refusals) are judged on it.

use std::time::Duration;

use object_store::{BackoffConfig, ClientConfigKey, ClientOptions, RetryConfig};

use crate::bank::scheme::Scheme;

/// The limits a bank's store client is opened with; `None` leaves the client's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientLimits {
    /// How long one HTTP request may take.
    pub request_timeout: Option<Duration>,
    /// How long after a request's first attempt another may start.
    pub retry_timeout: Option<Duration>,
}

/// The `[bank]` section the configuration sets (`BANKLEASE_CONFIG`'s file, the
/// `BANKLEASE_BANK__*` variables over it); the defaults where neither is set.
pub(crate) fn configured_bank() -> crate::Result<super::BankConfig> {
    let file = std::env::var_os(super::CONFIG_ENV).map(std::path::PathBuf::from);
    let mentions_bank = |(name, _): &(String, String)| name.starts_with("BANKLEASE_BANK__");
    let env: Vec<(String, String)> = std::env::vars().filter(mentions_bank).collect();
    if file.is_none() && env.is_empty() {
        return Ok(super::BankConfig::default());
    }
    // Only the `[bank]` section is read from the variables: another section's mistake is
    // that command's to report, not every bank opener's.
    Ok(super::Config::gate_with(file.as_deref(), env, |_| {}, false)?.bank)
}

/// The longest pause between two attempts when `retry_timeout` is set: a quarter of it, at
/// most the client's default (15s), so that a short budget is not spent waiting.
fn max_backoff_within(retry_timeout: Duration) -> Duration {
    (retry_timeout / 4).min(BackoffConfig::default().max_backoff)
}

impl ClientLimits {
    /// The limits the configuration sets: `[bank] request_timeout` and `retry_timeout` of the
    /// file `BANKLEASE_CONFIG` names, with the `BANKLEASE_BANK__REQUEST_TIMEOUT` and
    /// `BANKLEASE_BANK__RETRY_TIMEOUT` variables over them; the client's defaults where neither
    /// sets one. A configuration that cannot be read is an error ([`Error::Config`]): a client
    /// opened without the limits its operator set would declare a budget it does not have.
    ///
    /// [`Error::Config`]: crate::Error::Config
    pub fn configured() -> crate::Result<Self> {
        Ok(configured_bank()?.limits())
    }

    /// The retry configuration of a client with these limits: object_store's default, with
    /// `retry_timeout` set and backoffs of at most a quarter of it.
    pub fn retry_config(&self) -> RetryConfig {
        let mut retry = RetryConfig::default();
        if let Some(r) = self.retry_timeout {
            retry.retry_timeout = r;
            retry.backoff.max_backoff = max_backoff_within(r);
            retry.backoff.init_backoff = retry.backoff.init_backoff.min(retry.backoff.max_backoff);
        }
        retry
    }

    /// The store client's retry budget for the bank at `url` opened with these limits. Zero for
    /// `file:` and `memory://` banks (no client, no retries).
    ///
    /// Derived from the clients as they are (object_store 0.14 and `crate::swift`): every HTTP
    /// attempt ends within the request timeout (`ClientOptions`, 30s by default, or the
    /// `AWS_TIMEOUT`, `AZURE_TIMEOUT` or `GOOGLE_TIMEOUT` variable their builders read, unless
    /// `request_timeout` is set); after a failed attempt the client backs off for at most
    /// `max_backoff` (15s) and tries again while fewer than `max_retries` (10) retries were made
    /// and at most `retry_timeout` (3m) has passed since the first attempt. The last attempt
    /// therefore starts within `min(retry_timeout + max_backoff, max_retries × (timeout +
    /// max_backoff))` and ends one timeout later: 3m 45s with the defaults. The Swift client by
    /// default may run that loop three times for one write (a 401 ends the first, it
    /// re-authenticates, and sends the write again): 11m 15s. With `retry_timeout` set, its
    /// re-authentication and the resend count against the same budget (no attempt of either
    /// starts past `retry_timeout + max_backoff` from the first): one loop. Not counted: an
    /// authentication *before* the first attempt, which delays sending like any pause between
    /// the owner's validity check and its send (see ARCHITECTURE.md, "no late write outlives
    /// the sweep").
    pub fn budget(&self, url: &str) -> Duration {
        self.budget_with_env(url, |name| std::env::var(name).ok())
    }

    /// [`budget`](Self::budget) with the environment read through `env`.
    pub(crate) fn budget_with_env(
        &self,
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Duration {
        let url = url.trim();
        let scheme = match Scheme::of(url) {
            // file:, memory:// (and anything Bank::open refuses anyway).
            None | Some(Scheme::File | Scheme::Memory) => return Duration::ZERO,
            Some(scheme) => scheme,
        };
        let (timeout_variable, swift) = (scheme.timeout_variable(), scheme == Scheme::Swift);
        let parse = |v: &str| humantime::parse_duration(v.trim()).ok();
        let default_timeout = ClientOptions::default()
            .get_config_value(&ClientConfigKey::Timeout)
            .and_then(|v| parse(&v));
        // An unparsable variable makes Bank::open fail; then no write is ever sent.
        let timeout = self
            .request_timeout
            .or_else(|| timeout_variable.and_then(&env).and_then(|v| parse(&v)))
            .or(default_timeout)
            // No request timeout at all: nothing bounds a write.
            .unwrap_or(Duration::MAX);
        let retry = self.retry_config();
        let backoff = retry.backoff.max_backoff;
        let per_attempt = timeout.saturating_add(backoff);
        let cutoff = retry.retry_timeout.saturating_add(backoff);
        if swift && self.retry_timeout.is_some() {
            // One cutoff for the request, its re-authentication and its resend.
            return cutoff.saturating_add(timeout);
        }
        let last_start = cutoff
            .min(per_attempt.saturating_mul(u32::try_from(retry.max_retries).unwrap_or(u32::MAX)));
        let loops = if swift { 3 } else { 1 };
        last_start.saturating_add(timeout).saturating_mul(loops)
    }
}

/// The retry budget of the store client [`Bank::open`](crate::Bank::open) makes for `url`, with
/// the clients' default limits ([`ClientLimits::budget`]).
pub fn store_client_retry_budget(url: &str) -> Duration {
    ClientLimits::default().budget(url)
}

/// The retry budget of a client of `url` with the default limits and no timeout variable: what
/// a collector assumes of an owner that declares none (a release before declarations). 11m 15s
/// on Swift, 3m 45s on S3, Azure and GCS, zero on `file:` and `memory://`.
pub fn default_retry_budget(url: &str) -> Duration {
    ClientLimits::default().budget_with_env(url, |_| None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_budget(url: &str, env: impl Fn(&str) -> Option<String>) -> Duration {
        ClientLimits::default().budget_with_env(url, env)
    }

    #[test]
    fn retry_budgets_follow_the_clients_and_their_timeout_variables() {
        let none = |_: &str| None;
        let s = Duration::from_secs;
        // retry_timeout 3m + one backoff of at most 15s, then the last attempt's 30s timeout.
        assert_eq!(retry_budget("s3://b/p", none), s(225));
        assert_eq!(retry_budget(" az://c/p", none), s(225));
        assert_eq!(retry_budget("gs://b/p", none), s(225));
        // Three such loops: a 401 ends the first, re-authentication, the write sent again.
        assert_eq!(retry_budget("swift://c/p", none), s(675));
        for url in ["file:./bank", "file:///tmp/x", "memory://", "nope://x"] {
            assert_eq!(retry_budget(url, none), Duration::ZERO, "{url}");
        }
        // The request timeout the builders read from the environment.
        let env = |name: &str| (name == "AWS_TIMEOUT").then(|| "5s".to_owned());
        assert_eq!(retry_budget("s3://b/p", env), s(200));
        assert_eq!(
            retry_budget("az://c/p", env),
            s(225),
            "AZURE_TIMEOUT, not AWS_TIMEOUT"
        );
        // Ten retries of a 1s timeout and 15s backoffs start within 2m 40s, under 3m + 15s.
        let env = |name: &str| (name == "GOOGLE_TIMEOUT").then(|| "1s".to_owned());
        assert_eq!(retry_budget("gs://b/p", env), s(161));
        // Swift's builder reads no timeout variable.
        let env = |_: &str| Some("5s".to_owned());
        assert_eq!(retry_budget("swift://c/p", env), s(675));
    }

    #[test]
    fn configured_limits_give_the_budget_and_win_over_the_variables() {
        let s = Duration::from_secs;
        let limits = ClientLimits {
            request_timeout: Some(s(5)),
            retry_timeout: Some(s(20)),
        };
        let env = |_: &str| Some("1m".to_owned());
        // 20s + a backoff of at most 5s (a quarter), then the last attempt's 5s.
        assert_eq!(limits.budget_with_env("s3://b/p", env), s(30));
        // Swift: the re-authentication and the resend within the same cutoff.
        assert_eq!(limits.budget_with_env("swift://c/p", env), s(30));
        let retry = limits.retry_config();
        assert_eq!(retry.retry_timeout, s(20));
        assert_eq!(retry.backoff.max_backoff, s(5));
        // Only a request timeout: the default retries (ten of 2s + 15s start within 2m 50s),
        // Swift's three loops.
        let timeout_only = ClientLimits {
            request_timeout: Some(s(2)),
            retry_timeout: None,
        };
        assert_eq!(
            timeout_only.budget_with_env("swift://c/p", |_| None),
            (s(170) + s(2)) * 3
        );
    }
}
