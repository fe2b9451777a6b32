//! The knobs of a pass ([`GcOptions`]) and a builder for them.

use std::time::Duration;

use banklease::config::Config;
use serde::Serialize;

/// The knobs of a pass (from `[gc]` and `[lease].skew_margin`).
#[derive(Debug, Clone, Serialize)]
pub struct GcOptions {
    /// How long past expiry (after the skew margin) before an owner's checkpoints are collected.
    pub grace: Duration,
    /// Skew margin for judging leases on the store clock.
    pub skew_margin: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Most checkpoints deleted per pass, collected or retired (0 = no limit).
    pub max_deletions: usize,
    /// Refuse a pass that would collect more than this fraction of protecting checkpoints ...
    pub brake_ratio: f64,
    /// ... once there are at least this many.
    pub brake_min: usize,
    /// Plan and report only.
    pub dry_run: bool,
    /// Collect even when the brake would refuse, and allow an empty bank prefix.
    pub force: bool,
    /// Delete lease objects of owners expired past grace with nothing left to collect.
    pub reap_leases: bool,
    /// How old a read's answer may be on this store; reads are judged this much before they
    /// were sent (`gc.read_staleness`).
    pub read_staleness: Duration,
    /// After this (plus the margin) a collected checkpoint's data is swept once more for late
    /// writes (`gc.late_write_window`).
    pub late_write_window: Duration,
    /// Without a recent store-clock reading to compare with (the first pass of a process, a
    /// standby that just took over), judge every stamp older than the pass's first reading as
    /// written at it: a store-clock step just before cannot be told from elapsed time otherwise.
    /// Holds collection back for one expire window + margin + grace. The daemon sets it; a
    /// one-shot pass (`banklease gc`) cannot, or it would never collect.
    pub floor_at_first_reading: bool,
    /// Who collects, recorded in each collection's evidence: the GC daemon's (or `banklease
    /// gc`'s) owner id; empty for an unnamed collector.
    pub collector: String,
    /// How long a failed checkpoint is kept before a pass retires it (`gc.keep_failed_for`);
    /// `None`: never.
    pub keep_failed_for: Option<Duration>,
}

impl Default for GcOptions {
    /// The options of the default configuration.
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

impl GcOptions {
    /// Options from a loaded configuration.
    pub fn from_config(config: &Config) -> Self {
        Self {
            grace: config.gc.grace,
            skew_margin: config.lease.skew_margin,
            concurrency: config.gc.concurrency,
            max_deletions: config.gc.max_deletions,
            brake_ratio: config.gc.brake_ratio,
            brake_min: config.gc.brake_min,
            dry_run: config.gc.dry_run,
            force: false,
            reap_leases: config.gc.reap_leases,
            read_staleness: config.gc.read_staleness,
            late_write_window: config.gc.late_write_window,
            floor_at_first_reading: false,
            collector: String::new(),
            keep_failed_for: config.gc.keep_failed_for,
        }
    }

    /// A builder starting from the default configuration's options ([`GcOptions::default`]):
    /// `grace`, `skew_margin`, `concurrency`, the brake, `reap_leases`, `read_staleness` and
    /// `late_write_window`, `keep_failed_for` as `[gc]` and `[lease]` default them; `dry_run`, `force` and
    /// `floor_at_first_reading` off.
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = banklease_gc::GcOptions::builder()
    ///     .grace(Duration::from_secs(2))
    ///     .dry_run(true)
    ///     .build();
    /// assert!(options.dry_run);
    /// assert_eq!(options.grace, Duration::from_secs(2));
    /// ```
    pub fn builder() -> GcOptionsBuilder {
        GcOptionsBuilder(Self::default())
    }

    /// A builder starting from these options.
    pub fn to_builder(&self) -> GcOptionsBuilder {
        GcOptionsBuilder(self.clone())
    }
}

/// Builds [`GcOptions`]; every setter names the field it sets (see there for its meaning).
#[derive(Debug, Clone)]
#[must_use]
pub struct GcOptionsBuilder(GcOptions);

macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        impl GcOptionsBuilder {
            $(
                #[doc = concat!("Set [`GcOptions::", stringify!($field), "`].")]
                pub fn $field(mut self, $field: $ty) -> Self {
                    self.0.$field = $field;
                    self
                }
            )*

            /// The options.
            pub fn build(self) -> GcOptions {
                self.0
            }
        }
    };
}

setters! {
    grace: Duration,
    skew_margin: Duration,
    concurrency: usize,
    max_deletions: usize,
    brake_ratio: f64,
    brake_min: usize,
    dry_run: bool,
    force: bool,
    reap_leases: bool,
    read_staleness: Duration,
    late_write_window: Duration,
    floor_at_first_reading: bool,
    collector: String,
    keep_failed_for: Option<Duration>,
}
