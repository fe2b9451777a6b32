//! What a command costs in requests, as an operator sees it (`BANKLEASE_COUNT_REQUESTS=1`: the
//! CLI's last `note:` line counts every HTTP request it sent): after `init`, a cron job's
//! `lock run -- true` sends a handful, and read commands send no write at all. On each S3
//! server the caller's variables turn on (moto, Ceph RGW); `file:` sends no HTTP.
//! BENCHMARKS.md's request table comes from the same counter.

#![allow(clippy::disallowed_methods)] // real processes

mod common;

use common::output_text as text;
use common::work::{Env, Store};

/// `(requests, writes)` from the command's `note: requests=N writes=W …` line.
fn cost(env: &Env, args: &[&str]) -> (u64, u64, String) {
    let out = env.run(args);
    let all = text(&out);
    let line = String::from_utf8_lossy(&out.stderr)
        .lines()
        .rev()
        .find(|l| l.starts_with("note: requests="))
        .unwrap_or_else(|| panic!("{args:?}: no request count in: {all}"))
        .to_owned();
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{args:?}: no {name} in `{line}`"))
    };
    (field("requests"), field("writes"), line)
}

#[test]
fn a_cron_jobs_lock_is_a_handful_of_requests_and_reads_write_nothing() {
    let servers: Vec<Store> = Store::configured()
        .into_iter()
        .filter(|s| *s != Store::File)
        .collect();
    if servers.is_empty() {
        eprintln!("note: no S3 server configured (BANKLEASE_TEST_S3=1 or BANKLEASE_TEST_RGW=1)");
        return;
    }
    for store in servers {
        let env = Env::on_with_vars(
            store,
            &[("RUST_LOG", "error"), ("BANKLEASE_COUNT_REQUESTS", "1")],
        );
        // The first job after `init` as much as every later one: `init` measured the store.
        for run in 0..2 {
            let (requests, _, line) = cost(&env, &["lock", "run", "-n", "job", "--", "true"]);
            assert!(
                requests <= 8,
                "{store:?}: `lock run -- true` #{run} sent {requests} requests: {line}"
            );
        }
        let out = env.run(&["lock", "acquire", "held", "--duration", "30s"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        for read in [
            &["lock", "show", "held"][..],
            &["lock", "list"],
            &["lease", "list"],
            &["lease", "show", "o1"],
            &["validity-check", "--owner", "o1"],
            &["checkpoint", "list"],
            &["gc", "--dry-run"],
            &["doctor", "--read-only"],
        ] {
            let (_, writes, line) = cost(&env, read);
            assert_eq!(writes, 0, "{store:?}: `{}` wrote: {line}", read.join(" "));
        }
    }
}
