//! Planning a pass: pure decisions from what was read.

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
    /// Most checkpoints collected per pass (0 = no limit).
    pub max_deletions: usize,
    /// Refuse a pass that would collect more than this fraction of protecting checkpoints ...
    pub brake_ratio: f64,
    /// ... once there are at least this many.
    pub brake_min: usize,
    /// Plan and report only.
    pub dry_run: bool,
    /// Collect even when the brake would refuse, and allow an empty bank prefix.
    pub force: bool,
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
        }
    }
}
