//! The witness file every COMMAND appends to, and the checker that judges it.
//!
//! Each line is `<kind> <token> <ns> <launch>`: `ns` is `date +%s%N` taken by COMMAND itself, so
//! every line is a moment at which COMMAND (holding `token`, or believing it did) was running.
//! Kinds: `start`, `tick`, `end`; `put-ok` / `put-no` for a fenced `lock put` that exited 0 /
//! not, with `ns` taken before the put began, and `put-unsupported` for one the store was
//! refused for (`cannot be used for fenced writes`: S3). A killed COMMAND writes no `end`: its
//! last line is its last evidence of running.

use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Start,
    Tick,
    End,
    PutOk,
    PutNo,
    /// Refused because the store cannot take fenced writes.
    PutUnsupported,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    pub token: u64,
    /// Wall-clock nanoseconds (one host, one clock).
    pub at: u64,
    pub launch: u32,
}

/// The events of `text`, and the lines that could not be read (a torn line is reported, not
/// silently dropped: it would hide evidence).
pub fn parse(text: &str) -> (Vec<Event>, Vec<String>) {
    let mut events = Vec::new();
    let mut bad = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let kind = match f.first().copied() {
            Some("start") => Kind::Start,
            Some("tick") => Kind::Tick,
            Some("end") => Kind::End,
            Some("put-ok") => Kind::PutOk,
            Some("put-no") => Kind::PutNo,
            Some("put-unsupported") => Kind::PutUnsupported,
            _ => {
                bad.push(line.to_owned());
                continue;
            }
        };
        match (
            f.len(),
            f.get(1).and_then(|s| s.parse().ok()),
            f.get(2).and_then(|s| s.parse().ok()),
            f.get(3).and_then(|s| s.parse().ok()),
        ) {
            (4, Some(token), Some(at), Some(launch)) => events.push(Event {
                kind,
                token,
                at,
                launch,
            }),
            _ => bad.push(line.to_owned()),
        }
    }
    (events, bad)
}

/// One holding, as its COMMAND's lines show it.
#[derive(Debug, Clone, Copy)]
struct Holding {
    launch: u32,
    /// The `start` line (else the earliest line).
    first: u64,
    /// The latest evidence of running (a put's `ns` included: it was taken while running).
    last: u64,
}

/// What the checker found wrong; `Display`ed with times relative to `origin` (ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// `older` ran at `older_at`, after `newer` (a later holder: tokens grow with each new
    /// holder) had started at `newer_start`.
    Overlap {
        older: u64,
        older_launch: u32,
        older_at: u64,
        newer: u64,
        newer_launch: u32,
        newer_start: u64,
    },
    /// A fenced write of `token`, begun at `put_at`, landed although `newer` had started (so
    /// held a newer token) at `newer_start`.
    StaleWriteLanded {
        token: u64,
        launch: u32,
        put_at: u64,
        newer: u64,
        newer_launch: u32,
        newer_start: u64,
    },
    /// Two launches ran with one token: two holders were given the same fencing token.
    SharedToken { token: u64, launches: (u32, u32) },
}

impl Violation {
    pub fn launches(&self) -> Vec<u32> {
        match *self {
            Violation::Overlap {
                older_launch,
                newer_launch,
                ..
            } => vec![older_launch, newer_launch],
            Violation::StaleWriteLanded {
                launch,
                newer_launch,
                ..
            } => vec![launch, newer_launch],
            Violation::SharedToken { launches, .. } => vec![launches.0, launches.1],
        }
    }

    pub fn describe(&self, origin: u64) -> String {
        let t = |ns: u64| format!("+{:.3}s", ns.saturating_sub(origin) as f64 / 1e9);
        let gap = |a: u64, b: u64| format!("{:.3} s", a.saturating_sub(b) as f64 / 1e9);
        match *self {
            Violation::Overlap {
                older,
                older_launch,
                older_at,
                newer,
                newer_launch,
                newer_start,
            } => format!(
                "overlap: token {older} (launch {older_launch}) was still running at {}, \
                 {} after token {newer} (launch {newer_launch}) started at {}",
                t(older_at),
                gap(older_at, newer_start),
                t(newer_start)
            ),
            Violation::StaleWriteLanded {
                token,
                launch,
                put_at,
                newer,
                newer_launch,
                newer_start,
            } => format!(
                "superseded fenced write landed: token {token} (launch {launch}) began a put at \
                 {} that was written, {} after token {newer} (launch {newer_launch}) started at {}",
                t(put_at),
                gap(put_at, newer_start),
                t(newer_start)
            ),
            Violation::SharedToken { token, launches } => format!(
                "two holders with token {token}: launches {} and {}",
                launches.0, launches.1
            ),
        }
    }
}

/// Judge the events: at most one violation of each kind per newer holder (the worst), in token
/// order.
pub fn check(events: &[Event]) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut holdings: BTreeMap<u64, Holding> = BTreeMap::new();
    for e in events {
        if matches!(e.kind, Kind::Start) {
            if let Some(h) = holdings.get(&e.token) {
                if h.launch != e.launch {
                    found.push(Violation::SharedToken {
                        token: e.token,
                        launches: (h.launch, e.launch),
                    });
                }
            }
        }
        let h = holdings.entry(e.token).or_insert(Holding {
            launch: e.launch,
            first: e.at,
            last: e.at,
        });
        if matches!(e.kind, Kind::Start) && h.launch == e.launch {
            h.first = e.at;
        } else {
            h.first = h.first.min(e.at);
        }
        h.last = h.last.max(e.at);
    }
    // Overlap: some older token's last evidence after a newer token's start.
    let mut latest: Option<(u64, Holding)> = None;
    for (&token, h) in &holdings {
        if let Some((older, o)) = latest {
            if o.last > h.first {
                found.push(Violation::Overlap {
                    older,
                    older_launch: o.launch,
                    older_at: o.last,
                    newer: token,
                    newer_launch: h.launch,
                    newer_start: h.first,
                });
            }
        }
        if latest.is_none_or(|(_, o)| h.last > o.last) {
            latest = Some((token, *h));
        }
    }
    // A landed put of token t begun after any newer token's start: the earliest such start.
    let mut earliest_newer: BTreeMap<u64, (u64, Holding)> = BTreeMap::new();
    let mut best: Option<(u64, Holding)> = None;
    for (&token, h) in holdings.iter().rev() {
        if let Some(b) = best {
            earliest_newer.insert(token, b);
        }
        if best.is_none_or(|(_, b)| h.first < b.first) {
            best = Some((token, *h));
        }
    }
    let mut stale: BTreeMap<u64, Violation> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == Kind::PutOk) {
        if let Some(&(newer, n)) = earliest_newer.get(&e.token) {
            if e.at > n.first {
                let worse = match stale.get(&e.token) {
                    Some(Violation::StaleWriteLanded { put_at, .. }) => e.at > *put_at,
                    _ => true,
                };
                if worse {
                    stale.insert(
                        e.token,
                        Violation::StaleWriteLanded {
                            token: e.token,
                            launch: e.launch,
                            put_at: e.at,
                            newer,
                            newer_launch: n.launch,
                            newer_start: n.first,
                        },
                    );
                }
            }
        }
    }
    found.extend(stale.into_values());
    found
}

/// Counts for the summary: holdings started, ended cleanly, fenced puts written / refused.
pub fn tally(events: &[Event]) -> String {
    let count = |k: Kind| events.iter().filter(|e| e.kind == k).count();
    let mut s = String::new();
    let _ = write!(
        s,
        "holdings started={} ended={} ticks={} puts written={} refused={} refused for the store={}",
        count(Kind::Start),
        count(Kind::End),
        count(Kind::Tick),
        count(Kind::PutOk),
        count(Kind::PutNo),
        count(Kind::PutUnsupported)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Vec<Event> {
        let (events, bad) = parse(text);
        assert!(bad.is_empty(), "{bad:?}");
        events
    }

    #[test]
    fn one_holder_after_another_is_clean() {
        let e = events(
            "start 1 100 1\ntick 1 150 1\nput-ok 1 160 1\nput-no 1 170 1\nend 1 200 1\n\
             start 2 210 2\ntick 2 250 2\nput-ok 2 260 2\n",
        );
        assert_eq!(check(&e), vec![]);
    }

    #[test]
    fn an_older_token_running_after_a_newer_start_is_an_overlap() {
        // Token 1 paused, never ended; its tick at 300 comes after token 2 started at 250.
        let e = events("start 1 100 1\ntick 1 150 1\nstart 2 250 2\ntick 1 300 1\nend 2 400 2\n");
        assert_eq!(
            check(&e),
            vec![Violation::Overlap {
                older: 1,
                older_launch: 1,
                older_at: 300,
                newer: 2,
                newer_launch: 2,
                newer_start: 250,
            }]
        );
        // Lines are judged by their times, not their order in the file.
        let e = events("start 2 250 2\nstart 1 100 1\ntick 1 300 1\n");
        assert_eq!(check(&e).len(), 1);
    }

    #[test]
    fn an_overlap_is_found_across_an_intermediate_holder() {
        let e = events("start 1 100 1\nstart 2 200 2\nend 2 210 2\nstart 3 220 3\ntick 1 230 1\n");
        let found = check(&e);
        assert!(
            found.iter().any(|v| matches!(
                v,
                Violation::Overlap {
                    older: 1,
                    newer: 2,
                    ..
                }
            )),
            "{found:?}"
        );
    }

    #[test]
    fn a_written_put_begun_after_a_newer_start_is_a_stale_write() {
        let e = events("start 1 100 1\nstart 2 200 2\nput-ok 1 190 1\nput-ok 1 205 1\n");
        let found = check(&e);
        assert!(
            found.contains(&Violation::StaleWriteLanded {
                token: 1,
                launch: 1,
                put_at: 205,
                newer: 2,
                newer_launch: 2,
                newer_start: 200,
            }),
            "{found:?}"
        );
    }

    #[test]
    fn a_token_given_twice_and_torn_lines_are_reported() {
        let e = events("start 4 100 1\nend 4 110 1\nstart 4 120 2\n");
        assert!(check(&e).contains(&Violation::SharedToken {
            token: 4,
            launches: (1, 2)
        }));
        let (_, bad) = parse("start 1 100 1\ntick 1 1");
        assert_eq!(bad, ["tick 1 1"]);
    }
}
