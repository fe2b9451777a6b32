//! The daemon's metrics and its small HTTP endpoint (`/metrics`, `/healthz`).
//!
//! Metrics (OpenMetrics text):
//!
//! | name | type | meaning |
//! | --- | --- | --- |
//! | `banklease_gc_passes_total{outcome}` | counter | passes run; `outcome` is `ok`, `braked` or `failed` |
//! | `banklease_gc_collected_total` | counter | checkpoints collected (or, dry run, that would have been) |
//! | `banklease_gc_late_data_swept_total` | counter | data objects found under collected checkpoints by the late sweep (writes of paused owners that landed after the collection) |
//! | `banklease_gc_temporaries_swept_total` | counter | `file:` banks: temporaries of writers killed before publishing, removed |
//! | `banklease_gc_errors_total` | counter | errors met inside passes, plus passes that failed outright |
//! | `banklease_gc_owners_alive` | gauge | owners with a live lease, as of the last completed pass |
//! | `banklease_gc_owners_dead` | gauge | owners judged dead, as of the last completed pass |
//! | `banklease_gc_pass_duration_seconds` | histogram | wall time of passes, failed ones included |
//! | `banklease_gc_active` | gauge | 1 while this daemon holds the bank's GC lease, else 0 |
//! | `banklease_gc_last_success_timestamp_seconds` | gauge | when the last pass that was neither braked nor failed ended (Unix time; 0 before the first) |
//! | `banklease_gc_protecting_checkpoints{owner_state}` | gauge | protecting checkpoints by their owner's state (`alive`, `in_grace`, `dead`, `unreadable`, `held_back`: expired by its stamp, held by the clock floor), as of the last completed pass |
//! | `banklease_gc_held_back_until_timestamp_seconds` | gauge | while the clock floor holds owners that are dead by their stamps back: when the last of them is collectable (store clock, Unix time); 0 when none is |
//! | `banklease_gc_oldest_zombie_age_seconds` | gauge | how long the longest-dead owner whose protecting checkpoints the last completed pass left behind has been dead; 0 when none is left |
//! | `banklease_gc_leases{state}` | gauge | owner leases by state (`alive`, `expired`, `missing`, `unreadable`), as of the last completed pass |
//! | `banklease_gc_requests_total{kind}` | counter | store requests made by passes, by kind (`get`, `put`, `list`, `delete`, ...) |
//! | `banklease_gc_failed_checkpoints` | gauge | failed checkpoints kept (not failed for `gc.keep_failed_for` yet, or kept for ever), as of the last completed pass |
//! | `banklease_gc_failed_checkpoint_bytes` | gauge | the bytes of their data |
//! | `banklease_gc_oldest_failed_checkpoint_age_seconds` | gauge | how long the longest-failed of them has been failed (store clock); 0 when none is kept |
//! | `banklease_gc_retired_total` | counter | failed checkpoints retired (past `gc.keep_failed_for`; dry run: that would have been) |
//!
//! **API boundary:** the endpoint serves only these two read-only paths; it has no way to change
//! the daemon. Bind it to a loopback or otherwise protected address.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use banklease_gc::PassReport;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How a pass ended, as the `outcome` label of `banklease_gc_passes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The pass ran to its end (its report may still count per-checkpoint errors).
    Ok,
    /// The safety brake refused to collect.
    Braked,
    /// The pass failed as a whole (or its task panicked).
    Failed,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Braked, Outcome::Failed];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Braked => "braked",
            Outcome::Failed => "failed",
        }
    }
}

// By hand: the derive would print the variant names capitalised.
impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PassLabels {
    outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OwnerStateLabels {
    owner_state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// The label values every pass reports, so that each series exists (at 0) from the start.
const OWNER_STATES: [&str; 5] = ["alive", "in_grace", "dead", "unreadable", "held_back"];
const LEASE_STATES: [&str; 4] = ["alive", "expired", "missing", "unreadable"];

/// The daemon's metrics. Cheap to share behind an `Arc`; every update is a few atomic operations.
pub struct Metrics {
    registry: Registry,
    passes: Family<PassLabels, Counter>,
    collected: Counter,
    late_data_swept: Counter,
    temporaries_swept: Counter,
    errors: Counter,
    owners_alive: Gauge,
    owners_dead: Gauge,
    pass_duration: Histogram,
    active: Gauge,
    last_success: Gauge,
    protecting: Family<OwnerStateLabels, Gauge>,
    oldest_zombie_age: Gauge,
    held_back_until: Gauge,
    leases: Family<StateLabels, Gauge>,
    requests: Family<KindLabels, Counter>,
    failed_kept: Gauge,
    failed_kept_bytes: Gauge,
    failed_oldest_age: Gauge,
    retired: Counter,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("active", &self.is_active())
            .field("collected", &self.collected.get())
            .field("errors", &self.errors.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let passes = Family::<PassLabels, Counter>::default();
        // Create every outcome up front so that rates and alerts see a 0, not a missing series.
        for outcome in Outcome::ALL {
            let _ = passes.get_or_create(&PassLabels { outcome });
        }
        registry.register(
            "banklease_gc_passes",
            "GC passes run, by outcome",
            passes.clone(),
        );
        let collected = Counter::default();
        registry.register(
            "banklease_gc_collected",
            "Checkpoints collected (or, in a dry run, that would have been)",
            collected.clone(),
        );
        let late_data_swept = Counter::default();
        registry.register(
            "banklease_gc_late_data_swept",
            "Data objects found under collected checkpoints by the late sweep",
            late_data_swept.clone(),
        );
        let temporaries_swept = Counter::default();
        registry.register(
            "banklease_gc_temporaries_swept",
            "File banks: temporaries of writers killed before publishing, removed",
            temporaries_swept.clone(),
        );
        let errors = Counter::default();
        registry.register(
            "banklease_gc_errors",
            "Errors met inside GC passes, plus passes that failed as a whole",
            errors.clone(),
        );
        let owners_alive = Gauge::default();
        registry.register(
            "banklease_gc_owners_alive",
            "Owners with a live lease, as of the last completed pass",
            owners_alive.clone(),
        );
        let owners_dead = Gauge::default();
        registry.register(
            "banklease_gc_owners_dead",
            "Owners whose lease is expired past grace or missing, as of the last completed pass",
            owners_dead.clone(),
        );
        // 50 ms to about 27 minutes: a pass over a small bank takes milliseconds, over a large
        // remote one many minutes.
        let pass_duration = Histogram::new(exponential_buckets(0.05, 2.0, 16));
        registry.register_with_unit(
            "banklease_gc_pass_duration",
            "Wall time of GC passes, failed ones included",
            Unit::Seconds,
            pass_duration.clone(),
        );
        let active = Gauge::default();
        registry.register(
            "banklease_gc_active",
            "1 while this daemon holds the bank's GC lease, else 0",
            active.clone(),
        );
        let last_success = Gauge::default();
        registry.register_with_unit(
            "banklease_gc_last_success_timestamp",
            "When the last pass that was neither braked nor failed ended (Unix time)",
            Unit::Seconds,
            last_success.clone(),
        );
        let protecting = Family::<OwnerStateLabels, Gauge>::default();
        for state in OWNER_STATES {
            let _ = protecting.get_or_create(&OwnerStateLabels {
                owner_state: state.to_owned(),
            });
        }
        registry.register(
            "banklease_gc_protecting_checkpoints",
            "Protecting checkpoints by their owner's state, as of the last completed pass",
            protecting.clone(),
        );
        let oldest_zombie_age = Gauge::default();
        registry.register_with_unit(
            "banklease_gc_oldest_zombie_age",
            "How long the longest-dead owner with protecting checkpoints left has been dead",
            Unit::Seconds,
            oldest_zombie_age.clone(),
        );
        let held_back_until = Gauge::default();
        registry.register_with_unit(
            "banklease_gc_held_back_until_timestamp",
            "While the clock floor holds owners dead by their stamps back: when the last is collectable (store clock, Unix time)",
            Unit::Seconds,
            held_back_until.clone(),
        );
        let leases = Family::<StateLabels, Gauge>::default();
        for state in LEASE_STATES {
            let _ = leases.get_or_create(&StateLabels {
                state: state.to_owned(),
            });
        }
        registry.register(
            "banklease_gc_leases",
            "Owner leases by state, as of the last completed pass",
            leases.clone(),
        );
        let requests = Family::<KindLabels, Counter>::default();
        registry.register(
            "banklease_gc_requests",
            "Store requests made by GC passes, by kind",
            requests.clone(),
        );
        let failed_kept = Gauge::default();
        registry.register(
            "banklease_gc_failed_checkpoints",
            "Failed checkpoints kept, as of the last completed pass",
            failed_kept.clone(),
        );
        let failed_kept_bytes = Gauge::default();
        registry.register(
            "banklease_gc_failed_checkpoint_bytes",
            "Bytes of the data of the failed checkpoints kept, as of the last completed pass",
            failed_kept_bytes.clone(),
        );
        let failed_oldest_age = Gauge::default();
        registry.register_with_unit(
            "banklease_gc_oldest_failed_checkpoint_age",
            "How long the longest-failed checkpoint kept has been failed (store clock)",
            Unit::Seconds,
            failed_oldest_age.clone(),
        );
        let retired = Counter::default();
        registry.register(
            "banklease_gc_retired",
            "Failed checkpoints retired past gc.keep_failed_for (or, in a dry run, that would have been)",
            retired.clone(),
        );
        Self {
            failed_kept,
            failed_kept_bytes,
            failed_oldest_age,
            retired,
            last_success,
            protecting,
            oldest_zombie_age,
            held_back_until,
            leases,
            requests,
            registry,
            passes,
            collected,
            late_data_swept,
            temporaries_swept,
            errors,
            owners_alive,
            owners_dead,
            pass_duration,
            active,
        }
    }

    /// Record a pass that ran to its end at `ended` (wall clock).
    pub fn record_pass(&self, report: &PassReport, ended: SystemTime) {
        let outcome = if report.braked.is_some() {
            Outcome::Braked
        } else {
            Outcome::Ok
        };
        if outcome == Outcome::Ok {
            let secs = ended
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            self.last_success.set(saturating_i64(secs));
        }
        for state in OWNER_STATES {
            let n = report.protecting.get(state).copied().unwrap_or(0);
            self.protecting
                .get_or_create(&OwnerStateLabels {
                    owner_state: state.to_owned(),
                })
                .set(saturating_i64(n));
        }
        for state in LEASE_STATES {
            let n = report.leases.get(state).copied().unwrap_or(0);
            self.leases
                .get_or_create(&StateLabels {
                    state: state.to_owned(),
                })
                .set(saturating_i64(n));
        }
        self.oldest_zombie_age
            .set(saturating_i64(report.oldest_zombie_age_ms / 1000));
        self.held_back_until
            .set(report.held_back_until.map_or(0, |t| t.timestamp().max(0)));
        for (kind, n) in &report.requests {
            self.requests
                .get_or_create(&KindLabels { kind: kind.clone() })
                .inc_by(*n);
        }
        self.passes.get_or_create(&PassLabels { outcome }).inc();
        self.collected.inc_by(report.collected);
        self.retired.inc_by(report.retired);
        self.failed_kept.set(saturating_i64(report.failed_kept));
        self.failed_kept_bytes
            .set(saturating_i64(report.failed_kept_bytes));
        self.failed_oldest_age
            .set(saturating_i64(report.failed_oldest_age_ms / 1000));
        self.late_data_swept.inc_by(report.late_data_swept);
        self.temporaries_swept.inc_by(report.temporaries_swept);
        self.errors.inc_by(report.errors);
        self.owners_alive.set(saturating_i64(report.alive));
        self.owners_dead.set(saturating_i64(report.dead));
        self.pass_duration
            .observe(Duration::from_millis(report.duration_ms).as_secs_f64());
    }

    /// Record a pass that failed as a whole after `elapsed`. The owner gauges keep the values of
    /// the last completed pass.
    pub fn record_failed_pass(&self, elapsed: Duration) {
        self.passes
            .get_or_create(&PassLabels {
                outcome: Outcome::Failed,
            })
            .inc();
        self.errors.inc();
        self.pass_duration.observe(elapsed.as_secs_f64());
    }

    /// Set whether this daemon holds the GC lease.
    pub fn set_active(&self, active: bool) {
        self.active.set(i64::from(active));
    }

    /// Whether this daemon holds the GC lease, as last set.
    pub fn is_active(&self) -> bool {
        self.active.get() != 0
    }

    /// The number of passes with `outcome` so far.
    pub fn passes(&self, outcome: Outcome) -> u64 {
        self.passes.get_or_create(&PassLabels { outcome }).get()
    }

    /// The registry in OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail; an error here would be a bug in the encoder.
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encoding metrics into a string");
        text
    }

    /// The `/healthz` body: the process answers, and whether it is the active GC.
    pub fn health(&self) -> &'static str {
        if self.is_active() {
            "ok active\n"
        } else {
            "ok standby\n"
        }
    }
}

fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The HTTP routes: `GET /metrics` and `GET /healthz`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(serve_health))
        .with_state(metrics)
}

/// Serve [`router`] on `listener` until `shutdown` completes, then finish open requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        metrics.encode(),
    )
}

async fn serve_health(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        metrics.health(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line `name` (with labels, if any) in OpenMetrics text.
    fn sample(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn fresh_registry_shows_every_metric_at_zero() {
        let m = Metrics::new();
        let text = m.encode();
        for outcome in ["ok", "braked", "failed"] {
            let name = format!("banklease_gc_passes_total{{outcome=\"{outcome}\"}}");
            assert_eq!(sample(&text, &name), Some(0.0), "{name} in\n{text}");
        }
        for name in [
            "banklease_gc_collected_total",
            "banklease_gc_late_data_swept_total",
            "banklease_gc_temporaries_swept_total",
            "banklease_gc_errors_total",
            "banklease_gc_owners_alive",
            "banklease_gc_owners_dead",
            "banklease_gc_active",
            "banklease_gc_pass_duration_seconds_count",
        ] {
            assert_eq!(sample(&text, name), Some(0.0), "{name} in\n{text}");
        }
        assert!(text.contains("# UNIT banklease_gc_pass_duration_seconds seconds"));
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    #[test]
    fn passes_update_counters_and_gauges() {
        let m = Metrics::new();
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let map = |pairs: &[(&str, u64)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        m.record_pass(
            &PassReport {
                alive: 3,
                dead: 2,
                collected: 5,
                errors: 1,
                duration_ms: 1500,
                requests: map(&[("get", 7), ("list", 2)]),
                retired: 2,
                failed_kept: 3,
                failed_kept_bytes: 4096,
                failed_oldest_age_ms: 7_200_500,
                ..PassReport::default()
            },
            at(1_000),
        );
        m.record_pass(
            &PassReport {
                alive: 4,
                dead: 0,
                collected: 0,
                braked: Some("too many".into()),
                protecting: map(&[("alive", 9), ("dead", 12)]),
                leases: map(&[("alive", 4), ("expired", 1)]),
                oldest_zombie_age_ms: 90_500,
                requests: map(&[("get", 1)]),
                retired: 1,
                failed_kept: 1,
                failed_kept_bytes: 10,
                failed_oldest_age_ms: 3_600_900,
                ..PassReport::default()
            },
            at(2_000),
        );
        m.record_failed_pass(Duration::from_millis(20));
        let text = m.encode();
        assert_eq!(m.passes(Outcome::Ok), 1);
        assert_eq!(m.passes(Outcome::Braked), 1);
        assert_eq!(m.passes(Outcome::Failed), 1);
        assert_eq!(sample(&text, "banklease_gc_collected_total"), Some(5.0));
        // What piles up: retirements add up, the kept ones are the last pass's.
        assert_eq!(sample(&text, "banklease_gc_retired_total"), Some(3.0));
        assert_eq!(sample(&text, "banklease_gc_failed_checkpoints"), Some(1.0));
        assert_eq!(
            sample(&text, "banklease_gc_failed_checkpoint_bytes"),
            Some(10.0)
        );
        assert_eq!(
            sample(&text, "banklease_gc_oldest_failed_checkpoint_age_seconds"),
            Some(3600.0)
        );
        // One inside a pass, one failed pass.
        assert_eq!(sample(&text, "banklease_gc_errors_total"), Some(2.0));
        // Gauges are the last completed pass's, untouched by the failed one.
        assert_eq!(sample(&text, "banklease_gc_owners_alive"), Some(4.0));
        assert_eq!(sample(&text, "banklease_gc_owners_dead"), Some(0.0));
        assert_eq!(
            sample(&text, "banklease_gc_pass_duration_seconds_count"),
            Some(3.0)
        );
        assert_eq!(
            sample(&text, "banklease_gc_pass_duration_seconds_sum"),
            Some(1.52)
        );
        // A braked pass is no success; its gauges are the latest all the same.
        assert_eq!(
            sample(&text, "banklease_gc_last_success_timestamp_seconds"),
            Some(1000.0)
        );
        let labelled = |name: &str, label: &str| sample(&text, &format!("{name}{{{label}}}"));
        let protecting = "banklease_gc_protecting_checkpoints";
        assert_eq!(labelled(protecting, "owner_state=\"dead\""), Some(12.0));
        assert_eq!(labelled(protecting, "owner_state=\"in_grace\""), Some(0.0));
        assert_eq!(
            labelled("banklease_gc_leases", "state=\"expired\""),
            Some(1.0)
        );
        assert_eq!(
            labelled("banklease_gc_leases", "state=\"missing\""),
            Some(0.0)
        );
        assert_eq!(
            sample(&text, "banklease_gc_oldest_zombie_age_seconds"),
            Some(90.0)
        );
        assert_eq!(
            labelled("banklease_gc_requests_total", "kind=\"get\""),
            Some(8.0)
        );
    }

    #[test]
    fn active_gauge_and_health_agree() {
        let m = Metrics::new();
        assert_eq!(m.health(), "ok standby\n");
        m.set_active(true);
        assert!(m.is_active());
        assert_eq!(sample(&m.encode(), "banklease_gc_active"), Some(1.0));
        assert_eq!(m.health(), "ok active\n");
        m.set_active(false);
        assert_eq!(sample(&m.encode(), "banklease_gc_active"), Some(0.0));
    }

    #[test]
    fn huge_counts_saturate_gauges() {
        assert_eq!(saturating_i64(u64::MAX), i64::MAX);
        assert_eq!(saturating_i64(7), 7);
    }
}
