//! `lock_run_handoff`: how soon the next `banklease lock run` starts its COMMAND after the one
//! holding the key ends, on one host, through the binary as an operator runs it.
//!
//! ```text
//! cargo bench -p banklease-cli --bench lock_run_handoff
//! cargo bench -p banklease-cli --bench lock_run_handoff -- --rounds 40 --duration 30s
//! ```
//!
//! Each round, on a `file:` bank: a holder `lock run --duration D KEY -- sh -c …` starts its
//! COMMAND, a waiter `lock run --duration D KEY -- sh -c …` queues behind it (a random
//! 0.3–0.8 s), then the holder ends. **Release**: the holder's COMMAND exits by itself, and the
//! handoff runs from the instant COMMAND wrote as its last act to the instant the waiter's
//! COMMAND wrote as its first (both the host's wall clock, read by `date +%s%N`). **Crash**: the
//! holder's supervisor is SIGKILLed, and the handoff runs from just before the kill to the
//! waiter's COMMAND's first act. Without the kernel's proof the crash handoff would be the
//! lock's whole duration D.

#![allow(clippy::disallowed_methods)] // real time and real processes: that is what is measured

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;
use rand::Rng;

const BIN: &str = env!("CARGO_BIN_EXE_banklease");

#[derive(Debug, Parser)]
#[command(
    name = "lock_run_handoff",
    about = "Handoff between `lock run`s on one host"
)]
struct Args {
    /// Rounds of each kind.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// The lock's duration (`lock run --duration`).
    #[arg(long, default_value = "30s")]
    duration: String,
    /// Accepted for `cargo bench`'s own arguments.
    #[arg(long, hide = true)]
    bench: bool,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos()
}

fn lock_run(work: &Path, url: &str, duration: &str, job: &str) -> Result<Child> {
    Command::new(BIN)
        .current_dir(work)
        .args(["--bank", url, "lock", "run", "--duration", duration, "k"])
        .args(["--", "sh", "-c", job])
        .env("WORK", work)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start lock run")
}

/// The ns the file holds once it is written (a COMMAND's `date +%s%N`).
fn wait_ns(file: &Path) -> Result<u128> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Ok(ns) = text.trim().parse() {
                return Ok(ns);
            }
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("`{}` was not written within 120 s", file.display());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait_exit(child: &mut Child, what: &str) -> Result<()> {
    let start = Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            bail!("{what} did not exit within 120 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// One round; the handoff in ms.
fn round(work: &Path, url: &str, duration: &str, crash: bool) -> Result<f64> {
    for f in ["h.started", "h.ended", "w.started"] {
        let _ = std::fs::remove_file(work.join(f));
    }
    let holder_job = if crash {
        r#"date +%s%N > "$WORK/h.started"; exec sleep 120"#
    } else {
        r#"date +%s%N > "$WORK/h.started"; while [ ! -e "$WORK/h.end" ]; do sleep 0.01; done; date +%s%N > "$WORK/h.ended""#
    };
    let _ = std::fs::remove_file(work.join("h.end"));
    let mut holder = lock_run(work, url, duration, holder_job)?;
    wait_ns(&work.join("h.started"))?;
    let mut waiter = lock_run(work, url, duration, r#"date +%s%N > "$WORK/w.started""#)?;
    std::thread::sleep(Duration::from_millis(
        rand::thread_rng().gen_range(300..800),
    ));
    if waiter.try_wait()?.is_some() {
        bail!("the waiter ran while the key was held");
    }
    let from = if crash {
        let at = now_ns();
        holder.kill().context("kill the holder")?;
        at
    } else {
        std::fs::write(work.join("h.end"), "")?;
        wait_ns(&work.join("h.ended"))?
    };
    let started = wait_ns(&work.join("w.started"))?;
    wait_exit(&mut waiter, "the waiter")?;
    wait_exit(&mut holder, "the holder")?;
    Ok(started.saturating_sub(from) as f64 / 1e6)
}

fn summary(name: &str, mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let q = |q: f64| ms[(((ms.len() - 1) as f64) * q).round() as usize];
    format!(
        "{name}: n={} median={:.0} ms p90={:.0} ms max={:.0} ms min={:.0} ms",
        ms.len(),
        q(0.5),
        q(0.9),
        ms[ms.len() - 1],
        ms[0]
    )
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let url = format!("file://{}", dir.path().join("bank").display());
    let init = Command::new(BIN).args(["--bank", &url, "init"]).output()?;
    if !init.status.success() {
        bail!("init: {}", String::from_utf8_lossy(&init.stderr));
    }
    println!(
        "== file: on this host, lock run --duration {}",
        args.duration
    );
    for crash in [false, true] {
        let mut ms = Vec::with_capacity(args.rounds);
        for _ in 0..args.rounds {
            ms.push(round(dir.path(), &url, &args.duration, crash)?);
        }
        let name = if crash {
            "after kill -9 of the holder's lock run"
        } else {
            "after the holder's COMMAND exits"
        };
        println!("{}", summary(name, ms));
    }
    Ok(())
}
