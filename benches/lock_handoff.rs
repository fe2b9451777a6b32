//! `lock_handoff`: how soon a waiter holds a named lock after its holder releases it, or after
//! its holder dies and the lock expires, and what a waiting process costs the store.
//!
//! ```text
//! cargo bench -p banklease --bench lock_handoff                      # file, + servers set up
//! cargo bench -p banklease --bench lock_handoff -- --backends file,s3,azure --rounds 100
//! ```
//!
//! One process, two handles on one key, each over its own bank handle and request counter: the
//! holder acquires (a 60 s lock), a waiter blocks on it (`Wait::Forever`), the holder releases
//! after a random 0.3–0.8 s, and the handoff is the time from the release's answer to the
//! waiter's `acquire_blocking` returning (both on this host's monotonic clock). After expiry:
//! the holder takes a 3 s lock and never renews or releases; the handoff is measured from the
//! holder's own `valid_until` (send time + duration). The idle cost is the waiter's requests
//! per second, by kind, over 10 s of waiting on a lock held throughout.
//! Swift is not measured: locks are refused there (see `banklease::lock::support`).

#![allow(clippy::disallowed_methods)] // real time: that is what is measured

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use banklease::clock::{SharedClock, SystemClock};
use banklease::lock::{Blocking, Locks, Term, Wait};
use banklease::store::{Counters, CountingStore};
use banklease::Bank;
use banklease_testkit::backends::{Backend, TestBank};
use clap::Parser;
use rand::Rng;

#[derive(Debug, Parser)]
#[command(
    name = "lock_handoff",
    about = "Handoff latency and waiting cost of named locks"
)]
struct Args {
    /// Backends: file, s3, rgw, azure. Default: file, plus s3, rgw and azure when
    /// BANKLEASE_TEST_S3=1 / BANKLEASE_TEST_RGW=1 / BANKLEASE_TEST_AZURE=1 (as `.ci/run` sets
    /// them).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Release handoffs measured per backend.
    #[arg(long, default_value_t = 60)]
    rounds: usize,
    /// Expiry handoffs measured per backend.
    #[arg(long, default_value_t = 8)]
    expiry_rounds: usize,
    /// Seconds of idle waiting whose requests are counted.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Accepted for `cargo bench`'s own arguments.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Lock held by the releasing holder (long: only a release ends it).
const HELD_FOR: Duration = Duration::from_secs(60);
/// Lock of the holder that dies.
const DIES_WITH: Duration = Duration::from_secs(3);

struct Side {
    locks: Locks,
    counters: Arc<Counters>,
}

fn side(test: &TestBank, margin: Duration, clock: &SharedClock) -> Result<Side> {
    let counting = CountingStore::new(Arc::clone(test.bank.store()));
    let counters = Arc::clone(counting.counters());
    let bank: Bank = test.bank.with_store(Arc::new(counting));
    let locks = Locks::new(&bank, "bench", clock.clone())?.with_skew_margin(margin);
    Ok(Side { locks, counters })
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(name: &str, mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    format!(
        "{name}: n={} median={:.0} ms p99={:.0} ms max={:.0} ms min={:.0} ms",
        ms.len(),
        quantile(&ms, 0.5),
        quantile(&ms, 0.99),
        ms[ms.len() - 1],
        ms[0]
    )
}

fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

async fn release_handoffs(holder: &Side, waiter: &Side, rounds: usize) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(rounds);
    let mut rng = rand::thread_rng();
    for round in 0..rounds {
        let key = format!("release-{round}");
        let held = holder
            .locks
            .acquire(&key, "holder", Term::For(HELD_FOR), None)
            .await?;
        let w = waiter.locks.lock(&key, "waiter")?;
        let task = tokio::spawn(async move {
            let got = w
                .acquire_blocking(Term::For(HELD_FOR), None, &Blocking::new(Wait::Forever))
                .await;
            (Instant::now(), got.map(|_| w))
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..800))).await;
        held.release().await?;
        let released = Instant::now();
        let (acquired, got) = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .context("the waiter did not get the lock within 30 s")??;
        got?.release().await?;
        out.push(acquired.saturating_duration_since(released).as_secs_f64() * 1e3);
    }
    Ok(out)
}

async fn expiry_handoffs(holder: &Side, waiter: &Side, rounds: usize) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let key = format!("expiry-{round}");
        let dead = holder.locks.lock(&key, "dies")?;
        let acquired = dead.acquire(Term::For(DIES_WITH), None).await?;
        let w = waiter.locks.lock(&key, "waiter")?;
        w.acquire_blocking(
            Term::For(HELD_FOR),
            None,
            &Blocking::new(Wait::For(Duration::from_secs(60))),
        )
        .await?;
        let at = Instant::now();
        w.release().await?;
        out.push(
            at.saturating_duration_since(acquired.valid_until)
                .as_secs_f64()
                * 1e3,
        );
    }
    Ok(out)
}

async fn idle_cost(
    holder: &Side,
    waiter: &Side,
    secs: u64,
) -> Result<(BTreeMap<String, u64>, f64)> {
    let held = holder
        .locks
        .acquire("idle", "holder", Term::For(HELD_FOR), None)
        .await?;
    let w = waiter.locks.lock("idle", "waiter")?;
    let before = waiter.counters.snapshot();
    let started = Instant::now();
    let wait = Blocking::new(Wait::For(Duration::from_secs(secs)));
    let got = w.acquire_blocking(Term::For(HELD_FOR), None, &wait).await;
    if got.is_ok() {
        bail!("the waiter got a lock that was held throughout");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let used = delta(&before, &waiter.counters.snapshot());
    held.release().await?;
    Ok((used, elapsed))
}

fn backends(args: &Args) -> Result<Vec<Backend>> {
    if args.backends.is_empty() {
        return Ok([Backend::File, Backend::S3, Backend::Rgw, Backend::Azure]
            .into_iter()
            .filter(|b| b.is_configured())
            .collect());
    }
    args.backends
        .iter()
        .map(|b| match b.as_str() {
            "file" => Ok(Backend::File),
            "s3" => Ok(Backend::S3),
            "rgw" => Ok(Backend::Rgw),
            "azure" => Ok(Backend::Azure),
            "swift" => bail!("locks are refused on Swift (its conditional writes are not atomic)"),
            other => bail!("unknown backend `{other}`: file, s3, rgw or azure"),
        })
        .collect()
}

async fn run(args: Args) -> Result<()> {
    let clock: SharedClock = Arc::new(SystemClock);
    for backend in backends(&args)? {
        let test = backend.open_in("bench-lock").await;
        // As an operator would set it: the store's stamp resolution and some drift.
        let margin = backend.stamp_resolution() + Duration::from_millis(100);
        let holder = side(&test, margin, &clock)?;
        let waiter = side(&test, margin, &clock)?;
        println!("== {backend:?} (skew_margin {} ms)", margin.as_millis());
        let before = waiter.counters.snapshot();
        let started = clock.now();
        let release = release_handoffs(&holder, &waiter, args.rounds).await?;
        if !release.is_empty() {
            println!("{}", summary("handoff after release", release));
        }
        let spent = clock.now().saturating_duration_since(started).as_secs_f64();
        let used = delta(&before, &waiter.counters.snapshot());
        println!(
            "  waiter requests over those rounds (incl. its own acquire and release): {used:?} in {spent:.1} s"
        );
        let expiry = expiry_handoffs(&holder, &waiter, args.expiry_rounds).await?;
        println!(
            "{} (target: skew_margin + 1 s = {} ms)",
            summary(
                "handoff after expiry, from the holder's valid_until",
                expiry
            ),
            (margin + Duration::from_secs(1)).as_millis()
        );
        let (used, elapsed) = idle_cost(&holder, &waiter, args.idle_secs).await?;
        let total: u64 = used.values().sum();
        println!(
            "idle waiter: {:.2} requests/s ({used:?} in {elapsed:.1} s)",
            total as f64 / elapsed
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    // RUST_LOG=banklease=debug shows each waiter's looks.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(args))
}
