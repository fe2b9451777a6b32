//! Results, the optimum a pass is compared with, the tables and the target verdicts.
//!
//! **The optimum** of one pass, from the pass's code (gc/src/pass/mod.rs), counting what no GC that
//! keeps banklease's invariants can avoid:
//!
//! ```text
//! optimum = 2                        store clock: PUT + HEAD of _banklease/clock
//!         + P(N)                     the protecting index: 1 listing call, or ceil(N/page) pages
//!         + M                        one lease GET per owner
//!         + C × (4 + L(k))           per collected checkpoint: GET index.json (owner check),
//!                                    PUT decisions/<id> (create-if-absent), PUT index/sweep/<id>
//!                                    (the late sweep's marker, before any data goes), PUT
//!                                    index.json (the `deleted` tombstone); L = listing of its
//!                                    data (1 call / page)
//!         + ⌈C × (k + 1) / B⌉        its k data objects and its marker, deleted in bulk across
//!                                    checkpoints: B = 1,000 on S3 (DeleteObjects), 200 on Swift
//!                                    (bulk delete, banklease's cap), 1 elsewhere
//!         + R                        DELETE of each reaped dead owner's lease
//! ```
//!
//! The pass's requests beyond it are its own choices, listed in BENCHMARKS.md: one listing of
//! each dead owner's markers (D listings), one listing of `leases/`, one re-read of each lease
//! it reaps (R GETs).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::Backend;
use crate::bank_builder::{Built, Layout};
use crate::lease_bench::{KeepersRun, LeaseOps, OpCost};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigResult {
    pub backend: Backend,
    pub layout: Layout,
    pub concurrency: usize,
    pub built: Option<Built>,
    pub karbor: Option<Value>,
    pub gc_dry: Value,
    pub gc: Value,
    pub floor: Option<Value>,
    /// (pass seconds, floor seconds) of every pass/floor pair, the first one included.
    pub repeats: Vec<(f64, f64)>,
}

impl ConfigResult {
    /// GC / floor time ratio of each pair, and their median.
    pub fn time_ratios(&self) -> (Vec<f64>, f64) {
        let mut ratios: Vec<f64> = self.repeats.iter().map(|(g, f)| g / f).collect();
        let shown = ratios.clone();
        ratios.sort_by(|a, b| a.total_cmp(b));
        let median = match ratios.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => ratios[n / 2],
            n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
        };
        (shown, median)
    }
}

/// The machine the run was on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory: String,
    pub kernel: String,
    pub os: String,
    pub swift: String,
    pub moto: String,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

impl Machine {
    pub fn probe() -> Self {
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        let field = |text: &str, name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
                .unwrap_or_else(|| "unknown".into())
        };
        let moto_python = std::env::var("S3_ROOT")
            .unwrap_or_else(|_| "/tmp/banklease-stores/s3".into())
            + "/venv/bin/python";
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: field(&cpuinfo, "model name"),
            memory: field(&meminfo, "MemTotal"),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            os: read("/etc/os-release")
                .lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
                .unwrap_or_else(|| "unknown".into()),
            swift: command_output("dpkg-query", &["-W", "-f=${Version}", "swift"])
                .unwrap_or_else(|| "not installed".into()),
            moto: command_output(
                &moto_python,
                &["-c", "import moto; print(moto.__version__)"],
            )
            .unwrap_or_else(|| "not found".into()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub machine: Machine,
    pub date_unix: u64,
    pub command: String,
    pub configs: Vec<ConfigResult>,
    pub leases: Vec<(Backend, LeaseOps)>,
    pub keepers: Vec<(Backend, KeepersRun)>,
}

fn map(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn sum_but_auth(m: &BTreeMap<String, u64>) -> u64 {
    m.iter()
        .filter(|(k, _)| k.as_str() != "auth")
        .map(|(_, v)| v)
        .sum()
}

fn kinds(m: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = m
        .iter()
        .filter(|(k, _)| k.as_str() != "auth")
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if parts.is_empty() {
        "—".into()
    } else {
        parts.join(", ")
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn div_ceil_min1(n: u64, page: u64) -> u64 {
    n.div_ceil(page).max(1)
}

/// Requests of a run in the unit that counts on this backend: HTTP requests (pages, bulk
/// deletes) on servers, object_store calls on memory and file.
fn measured(backend: Backend, calls: &BTreeMap<String, u64>, http: &BTreeMap<String, u64>) -> u64 {
    if backend.page_size().is_some() {
        sum_but_auth(http)
    } else {
        calls.values().sum()
    }
}

/// The optimum of a full pass (see the module documentation).
pub fn optimum(backend: Backend, layout: &Layout, report: &Value) -> u64 {
    let scanned = u(&report["scanned"]);
    let owners = u(&report["owners"]);
    let collected = u(&report["collected"]);
    let reaped = u(&report["leases_reaped"]);
    let k = layout.data;
    let (index, data_list) = match backend.page_size() {
        None => (1, 1),
        Some(p) => (div_ceil_min1(scanned, p), div_ceil_min1(k, p)),
    };
    let bulk = match backend {
        Backend::S3 => 1_000,
        Backend::Swift => 200,
        _ => 1,
    };
    2 + index + owners + collected * (4 + data_list) + (collected * (k + 1)).div_ceil(bulk) + reaped
}

/// The pieces of one configuration's figures.
pub struct Figures {
    pub gc_total: u64,
    /// HTTP requests of the pass answered 5xx (or lost), each retried by the client.
    pub gc_failed: u64,
    pub gc_calls: BTreeMap<String, u64>,
    pub gc_http: BTreeMap<String, u64>,
    pub optimum: u64,
    pub gc_secs: f64,
    pub gc_hwm_kib: u64,
    pub dry_total: u64,
    pub dry_secs: f64,
    pub karbor_scan: Option<u64>,
    pub karbor_deletions: Option<u64>,
    pub karbor_secs: Option<f64>,
    pub karbor_hwm_kib: Option<u64>,
    pub floor_secs: Option<f64>,
    pub floor_total: Option<u64>,
    pub floor_errors: Option<u64>,
    pub floor_kinds: String,
}

pub fn figures(c: &ConfigResult) -> Figures {
    let gc_calls = map(&c.gc["report"]["requests"]);
    let gc_http = map(&c.gc["http"]);
    let dry_calls = map(&c.gc_dry["report"]["requests"]);
    let dry_http = map(&c.gc_dry["http"]);
    let karbor = c.karbor.as_ref();
    let floor = c.floor.as_ref();
    Figures {
        gc_total: measured(c.backend, &gc_calls, &gc_http),
        gc_failed: u(&c.gc["http_failed"]),
        optimum: optimum(c.backend, &c.layout, &c.gc["report"]),
        gc_secs: f(&c.gc["secs"]),
        gc_hwm_kib: u(&c.gc["hwm_kib"]),
        dry_total: measured(c.backend, &dry_calls, &dry_http),
        dry_secs: f(&c.gc_dry["secs"]),
        karbor_scan: karbor
            .map(|k| measured(c.backend, &map(&k["scan"]["requests"]), &map(&k["http"]))),
        karbor_deletions: karbor.map(|k| u(&k["scan"]["deletion_requests_estimate"])),
        karbor_secs: karbor.map(|k| f(&k["scan"]["secs"])),
        karbor_hwm_kib: karbor.map(|k| u(&k["hwm_kib"])),
        floor_secs: floor.map(|fl| f(&fl["replay"]["secs"])),
        floor_total: floor.map(|fl| {
            measured(
                c.backend,
                &map(&fl["replay"]["requests"]),
                &map(&fl["http"]),
            )
        }),
        floor_errors: floor.map(|fl| u(&fl["replay"]["errors"])),
        floor_kinds: floor
            .map(|fl| {
                if c.backend.page_size().is_some() {
                    kinds(&map(&fl["http"]))
                } else {
                    kinds(&map(&fl["replay"]["requests"]))
                }
            })
            .unwrap_or_default(),
        gc_calls,
        gc_http,
    }
}

/// `d`, marked when only dead owners' checkpoints hold data.
fn data_label(layout: &Layout) -> String {
    if layout.data_dead_only {
        format!("{} (dead only)", layout.data)
    } else {
        layout.data.to_string()
    }
}

/// One line per configuration, for the log.
pub fn config_line(c: &ConfigResult) -> String {
    let fi = figures(c);
    format!(
        "gc_pass: {} N={} d={} collected={} requests={} optimum={} ratio={:.4} time={:.2}s \
         hwm={}MiB karbor_scan={:?} floor={:?}s",
        c.backend.name(),
        c.layout.checkpoints,
        data_label(&c.layout),
        u(&c.gc["report"]["collected"]),
        fi.gc_total,
        fi.optimum,
        fi.gc_total as f64 / fi.optimum as f64,
        fi.gc_secs,
        mib(fi.gc_hwm_kib),
        fi.karbor_scan,
        fi.floor_secs,
    )
}

fn n_label(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn cost(c: &OpCost, http: bool) -> String {
    if http {
        format!("{} ({})", c.http_total(), kinds(&c.http))
    } else {
        format!("{} ({})", c.calls_total(), kinds(&c.calls))
    }
}

/// The tables and verdicts, in Markdown.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let date = chrono::DateTime::from_timestamp(r.date_unix as i64, 0)
        .map(|d| d.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "Run {date} (unix {}) with `{}`.\n",
        r.date_unix, r.command
    );
    let m = &r.machine;
    let _ = writeln!(
        s,
        "Machine: {} CPUs ({}), {} memory, kernel {}, {}; Swift {}, moto {}.\n",
        m.cpus, m.cpu_model, m.memory, m.kernel, m.os, m.swift, m.moto
    );
    if !r.configs.is_empty() {
        write_gc_tables(&mut s, r);
    }
    if !r.leases.is_empty() {
        let _ = writeln!(s, "### Owner lease operations\n");
        let _ = writeln!(
            s,
            "Requests per operation (HTTP requests on servers, object_store calls otherwise; \
             the capability probe, once per bank and process, is not included).\n"
        );
        let _ = writeln!(
            s,
            "| backend | renewal mechanism | acquire | renew | release | check_validity × {} | probe (once) |",
            r.leases.first().map(|l| l.1.checks).unwrap_or(0)
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for (b, l) in &r.leases {
            let http = b.page_size().is_some();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                b.name(),
                l.mechanism,
                cost(&l.acquire, http),
                cost(&l.renew, http),
                cost(&l.release, http),
                cost(&l.check_validity, http),
                cost(&l.probe, http),
            );
        }
        let _ = writeln!(s);
    }
    if !r.keepers.is_empty() {
        let _ = writeln!(s, "### Many leases in one process\n");
        let _ = writeln!(
            s,
            "| backend | leases | renew / expire | acquire time | run | renewals | renewals/s | nominal/s | Lost | least time left seen | HTTP requests |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        for (b, k) in &r.keepers {
            let _ = writeln!(
                s,
                "| {} | {}/{} | {} ms / {} ms | {:.1} s | {:.1} s | {} | {:.1} | {:.1} | {} | {} ms | {} |",
                b.name(),
                k.acquired,
                k.leases,
                k.renew_ms,
                k.expire_ms,
                k.acquire_secs,
                k.run_secs,
                k.renewals,
                k.renewals_per_sec,
                k.nominal_per_sec,
                k.lost,
                k.min_remaining_ms,
                kinds(&k.http),
            );
            for reason in &k.lost_reasons {
                let _ = writeln!(s, "\nLost: {reason}");
            }
        }
        let _ = writeln!(s);
    }
    write_verdicts(&mut s, r);
    s
}

fn write_gc_tables(s: &mut String, r: &Results) {
    let _ = writeln!(s, "### One GC pass\n");
    let _ = writeln!(
        s,
        "Requests: object_store calls on memory/file (a listing is one call), HTTP requests on \
         s3/swift (a listing is its pages; S3 deletes are `POST ?delete`).\n"
    );
    let _ = writeln!(
        s,
        "| backend | N | d | M / D | collected | reaped | requests by kind | HTTP by kind | requests | of which 5xx, retried | optimum | ratio | ratio without the retried | time | peak RSS |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in &r.configs {
        let fi = figures(c);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {:.4} | {:.4} | {:.3} s | {} MiB |",
            c.backend.name(),
            n_label(c.layout.checkpoints),
            data_label(&c.layout),
            c.layout.owners,
            c.layout.dead,
            u(&c.gc["report"]["collected"]),
            u(&c.gc["report"]["leases_reaped"]),
            kinds(&fi.gc_calls),
            if fi.gc_http.is_empty() { "—".to_owned() } else { kinds(&fi.gc_http) },
            fi.gc_total,
            if c.backend.page_size().is_some() { fi.gc_failed.to_string() } else { "—".into() },
            fi.optimum,
            fi.gc_total as f64 / fi.optimum as f64,
            (fi.gc_total - fi.gc_failed) as f64 / fi.optimum as f64,
            fi.gc_secs,
            mib(fi.gc_hwm_kib),
        );
    }
    let _ = writeln!(s);

    if r.configs.iter().any(|c| c.karbor.is_some()) {
        let _ = writeln!(s, "### Against a Karbor-style scan of the same bank\n");
        let _ = writeln!(
            s,
            "Scanning = finding the dead owners' protecting checkpoints: the GC's dry-run pass \
             (clock, index listing, M lease reads, D marker listings) against the scan (clock, \
             listing of `checkpoints/`, N `index.json` GETs, N lease GETs). Totals add the \
             deletions: the GC's measured full pass, the scan's plus 8 requests per dead \
             checkpoint (estimated, not run).\n"
        );
        let _ = writeln!(
            s,
            "| backend | N | Karbor scan | GC scan (dry) | scan ratio | Karbor total (scan + 8 × dead) | GC total | total ratio | Karbor scan time | GC dry time | Karbor peak RSS |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        for c in &r.configs {
            let fi = figures(c);
            let (Some(ks), Some(kd)) = (fi.karbor_scan, fi.karbor_deletions) else {
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.0}× | {} | {} | {:.2}× | {:.2} s | {:.2} s | {} MiB |",
                c.backend.name(),
                n_label(c.layout.checkpoints),
                ks,
                fi.dry_total,
                ks as f64 / fi.dry_total as f64,
                ks + kd,
                fi.gc_total,
                (ks + kd) as f64 / fi.gc_total as f64,
                fi.karbor_secs.unwrap_or(f64::NAN),
                fi.dry_secs,
                mib(fi.karbor_hwm_kib.unwrap_or(0)),
            );
        }
        let _ = writeln!(s);
    }

    if r.configs.iter().any(|c| c.floor.is_some()) {
        let _ = writeln!(s, "### Against the store's floor\n");
        let _ = writeln!(
            s,
            "The floor replays the pass's recorded requests raw on an identically built bank, \
             at the same concurrency, with no banklease logic: only the order the requests \
             themselves impose is kept (requests on one object in their recorded order; a \
             deletion after the listing that found its object).\n"
        );
        let _ = writeln!(
            s,
            "| backend | N | concurrency | GC pass | floor | GC / floor | GC requests | replayed requests | replayed by kind | replay errors | mean in flight (GC / floor) | mean latency (GC / floor) | load avg (GC / floor) | GC / floor, every pair (median) |"
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for c in &r.configs {
            let fi = figures(c);
            let (Some(fs), Some(ft)) = (fi.floor_secs, fi.floor_total) else {
                continue;
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.3} s | {:.3} s | {:.2} | {} | {} | {} | {} | {} | {} | {:.1} / {:.1} | {} |",
                c.backend.name(),
                n_label(c.layout.checkpoints),
                c.concurrency,
                fi.gc_secs,
                fs,
                fi.gc_secs / fs,
                fi.gc_total,
                ft,
                fi.floor_kinds,
                fi.floor_errors.unwrap_or(0),
                in_flight(c),
                latency(c, fi.gc_total, ft),
                f(&c.gc["load"]),
                c.floor.as_ref().map(|fl| f(&fl["load"])).unwrap_or(f64::NAN),
                {
                    let (all, median) = c.time_ratios();
                    let all: Vec<String> = all.iter().map(|r| format!("{r:.2}")).collect();
                    format!("{} ({median:.2})", all.join(", "))
                },
            );
        }
        let _ = writeln!(s);
        if r.configs
            .iter()
            .any(|c| c.floor.is_some() && c.backend.page_size().is_some())
        {
            let _ = writeln!(s, "Mean HTTP latency by request kind, GC pass / floor:\n");
            let _ = writeln!(s, "| backend | N | latency by kind |");
            let _ = writeln!(s, "|---|---|---|");
            for c in r
                .configs
                .iter()
                .filter(|c| c.floor.is_some() && c.backend.page_size().is_some())
            {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} |",
                    c.backend.name(),
                    n_label(c.layout.checkpoints),
                    latency_by_kind(c)
                );
            }
            let _ = writeln!(s);
        }
    }
}

/// Mean HTTP requests in flight during the pass and during the replay (summed request
/// durations / wall time), or `—` without HTTP.
fn in_flight(c: &ConfigResult) -> String {
    let (Some(gc_busy), Some(fl)) = (c.gc["http_busy_secs"].as_f64(), c.floor.as_ref()) else {
        return "—".into();
    };
    if c.backend.page_size().is_none() {
        return "—".into();
    }
    format!(
        "{:.1} / {:.1}",
        gc_busy / f(&c.gc["secs"]),
        f(&fl["http_busy_secs"]) / f(&fl["replay"]["secs"])
    )
}

/// Mean HTTP request latency in the pass and in the replay, or `—` without HTTP.
fn latency(c: &ConfigResult, gc_requests: u64, floor_requests: u64) -> String {
    let (Some(gc_busy), Some(fl)) = (c.gc["http_busy_secs"].as_f64(), c.floor.as_ref()) else {
        return "—".into();
    };
    if c.backend.page_size().is_none() {
        return "—".into();
    }
    format!(
        "{:.1} / {:.1} ms",
        1e3 * gc_busy / gc_requests as f64,
        1e3 * f(&fl["http_busy_secs"]) / floor_requests as f64
    )
}

/// Mean HTTP latency by request kind, pass / floor, e.g. `get 80 / 40 ms`.
fn latency_by_kind(c: &ConfigResult) -> String {
    let Some(fl) = c.floor.as_ref() else {
        return "—".into();
    };
    let (gc_busy, gc_n) = (map(&c.gc["http_busy_us"]), map(&c.gc["http"]));
    let (fl_busy, fl_n) = (map(&fl["http_busy_us"]), map(&fl["http"]));
    let mean = |busy: &BTreeMap<String, u64>, n: &BTreeMap<String, u64>, k: &str| {
        let count = n.get(k).copied().unwrap_or(0);
        if count == 0 {
            f64::NAN
        } else {
            busy.get(k).copied().unwrap_or(0) as f64 / 1e3 / count as f64
        }
    };
    let parts: Vec<String> = gc_n
        .keys()
        .filter(|k| k.as_str() != "auth")
        .map(|k| {
            format!(
                "{k} {:.0} / {:.0}",
                mean(&gc_busy, &gc_n, k),
                mean(&fl_busy, &fl_n, k)
            )
        })
        .collect();
    format!("{} ms", parts.join(", "))
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**not met**"
    }
}

fn write_verdicts(s: &mut String, r: &Results) {
    let _ = writeln!(s, "### Targets (computed from this run)\n");
    if !r.configs.is_empty() {
        let wrong: Vec<String> = r
            .configs
            .iter()
            .filter_map(|c| {
                let expected = c.layout.dead_checkpoints();
                let rep = &c.gc["report"];
                let karbor_dead = c.karbor.as_ref().map(|k| u(&k["scan"]["dead_checkpoints"]));
                let ok = u(&rep["collected"]) == expected
                    && u(&rep["errors"]) == 0
                    && u(&rep["leases_reaped"]) == c.layout.dead
                    && u(&c.gc_dry["report"]["collected"]) == expected
                    && karbor_dead.is_none_or(|d| d == expected)
                    && c.floor
                        .as_ref()
                        .is_none_or(|fl| u(&fl["replay"]["errors"]) == 0);
                (!ok).then(|| format!("{} N={}", c.backend.name(), n_label(c.layout.checkpoints)))
            })
            .collect();
        let _ = writeln!(
            s,
            "- sanity: every pass collected exactly the dead owners' checkpoints with no error and \
             reaped their D leases, its dry run and the Karbor scan found the same, the replay \
             had no error — {}",
            if wrong.is_empty() {
                "yes".to_owned()
            } else {
                format!("**NO** for {}", wrong.join(", "))
            }
        );
        let worst = |with_retries: bool| {
            r.configs
                .iter()
                .map(|c| {
                    let fi = figures(c);
                    let issued = if with_retries {
                        fi.gc_total
                    } else {
                        fi.gc_total - fi.gc_failed
                    };
                    (issued as f64 / fi.optimum as f64, c)
                })
                .fold(None::<(f64, &ConfigResult)>, |acc, x| match acc {
                    Some(a) if a.0 >= x.0 => Some(a),
                    _ => Some(x),
                })
        };
        if let (Some((own, c)), Some((all, d))) = (worst(false), worst(true)) {
            let _ = writeln!(
                s,
                "- requests ≤ 1.05 × optimum: the pass's own requests, worst ratio {own:.4} ({} \
                 N={}) — {}; counting the server's 5xx answers that the client retried, worst \
                 {all:.4} ({} N={}) — {}",
                c.backend.name(),
                n_label(c.layout.checkpoints),
                verdict(own <= 1.05),
                d.backend.name(),
                n_label(d.layout.checkpoints),
                verdict(all <= 1.05)
            );
        }
        for c in r.configs.iter().filter(|c| {
            c.layout.checkpoints == 100_000 && c.layout.owners == 100 && c.karbor.is_some()
        }) {
            let fi = figures(c);
            let (Some(ks), Some(kd)) = (fi.karbor_scan, fi.karbor_deletions) else {
                continue;
            };
            let scan = ks as f64 / fi.dry_total as f64;
            let total = (ks + kd) as f64 / fi.gc_total as f64;
            let _ = writeln!(
                s,
                "- ≥ 100× fewer requests than the Karbor-style scan ({} N=100k, M=100, D={}): \
                 scanning {scan:.0}× — {}; totals with deletions {total:.2}× — {}",
                c.backend.name(),
                c.layout.dead,
                verdict(scan >= 100.0),
                verdict(total >= 100.0)
            );
        }
        for c in r
            .configs
            .iter()
            .filter(|c| matches!(c.backend, Backend::S3 | Backend::Swift) && c.floor.is_some())
        {
            let (all, median) = c.time_ratios();
            let all: Vec<String> = all.iter().map(|r| format!("{r:.2}")).collect();
            let _ = writeln!(
                s,
                "- pass time ≤ 1.25 × floor on loopback {} (N={}): {} (median of {} pair{}) — {}",
                c.backend.name(),
                n_label(c.layout.checkpoints),
                if all.len() > 1 {
                    format!("{} → {median:.2}", all.join(", "))
                } else {
                    format!("{median:.2}")
                },
                all.len(),
                if all.len() == 1 { "" } else { "s" },
                verdict(median <= 1.25)
            );
        }
        let files: Vec<&ConfigResult> = r
            .configs
            .iter()
            .filter(|c| c.backend == Backend::File)
            .collect();
        let smallest = files.iter().min_by_key(|c| c.layout.checkpoints);
        let largest = files.iter().max_by_key(|c| c.layout.checkpoints);
        if let (Some(a), Some(b)) = (smallest, largest) {
            if a.layout.checkpoints < b.layout.checkpoints {
                let (ra, rb) = (figures(a).gc_hwm_kib, figures(b).gc_hwm_kib);
                let ratio = rb as f64 / ra as f64;
                let _ = writeln!(
                    s,
                    "- peak RSS flat on file: {} MiB at N={} vs {} MiB at N={}: {ratio:.2}× — {}{}",
                    mib(rb),
                    n_label(b.layout.checkpoints),
                    mib(ra),
                    n_label(a.layout.checkpoints),
                    verdict(ratio <= 1.5),
                    if b.layout.checkpoints < 1_000_000 {
                        " (the target is at 1M: run with --full)"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    for (b, l) in r
        .leases
        .iter()
        .filter(|(b, _)| matches!(b, Backend::Memory | Backend::S3))
    {
        let http = b.page_size().is_some();
        let n = |c: &OpCost| {
            if http {
                c.http_total()
            } else {
                c.calls_total()
            }
        };
        let ok = n(&l.acquire) == 1
            && n(&l.renew) == 1
            && n(&l.release) == 1
            && n(&l.check_validity) == 0;
        let _ = writeln!(
            s,
            "- lease on {} ({}): acquire {}, renew {}, release {}, check_validity {} requests — {}",
            b.name(),
            l.mechanism,
            n(&l.acquire),
            n(&l.renew),
            n(&l.release),
            n(&l.check_validity),
            verdict(ok)
        );
    }
    for (b, k) in &r.keepers {
        let _ = writeln!(
            s,
            "- {} leases kept on {} (renew {} ms, expire {} ms, {:.0} s): {} Lost, {:.1} renewals/s — {}",
            k.acquired,
            b.name(),
            k.renew_ms,
            k.expire_ms,
            k.run_secs,
            k.lost,
            k.renewals_per_sec,
            verdict(k.lost == 0 && k.acquired == k.leases)
        );
    }
}
