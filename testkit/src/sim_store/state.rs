//! The objects of a [`SimStore`](super::SimStore) and, while stale reads are on, the recent
//! versions of each path that a lagging replica may still serve.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{Attributes, ObjectMeta};
use rand::rngs::StdRng;
use rand::Rng;

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) data: Bytes,
    pub(super) last_modified: DateTime<Utc>,
    pub(super) e_tag: u64,
    pub(super) attributes: Attributes,
}

impl Entry {
    pub(super) fn meta(&self, location: &Path) -> ObjectMeta {
        ObjectMeta {
            location: location.clone(),
            last_modified: self.last_modified,
            size: self.data.len() as u64,
            e_tag: Some(e_tag(self.e_tag)),
            version: None,
        }
    }
}

/// Most versions remembered per path for stale reads (older ones are forgotten early).
const MAX_VERSIONS: usize = 256;

/// One state of a path in its timeline: since when (`None`: since before the timeline began),
/// and the object (`None`: absent).
type Version = (Option<Instant>, Option<Entry>);

/// Reads from lagging replicas (see [`SimStore::set_stale_reads`]).
#[derive(Debug)]
pub(super) struct Staleness {
    pub(super) lag: Duration,
    pub(super) rate: f64,
    pub(super) rng: StdRng,
    /// Reads answered with another version than the current one.
    pub(super) served: u64,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) next_etag: u64,
    pub(super) map: BTreeMap<Path, Entry>,
    pub(super) stale: Option<Staleness>,
    /// Per path, the versions that a stale read may still return, oldest first; the last one
    /// is the current state. Only kept while stale reads are on; a path without a timeline has
    /// had its current state for longer than the lag.
    pub(super) timeline: HashMap<Path, VecDeque<Version>>,
}

impl State {
    /// Note that `path` changed to `entry` at `now` (from `previous`), for stale reads.
    pub(super) fn record(
        &mut self,
        path: &Path,
        now: Instant,
        previous: Option<&Entry>,
        entry: Option<Entry>,
    ) {
        let Some(stale) = &self.stale else { return };
        let lag = stale.lag;
        let line = self.timeline.entry(path.clone()).or_default();
        if line.is_empty() {
            if let Some(previous) = previous {
                line.push_back((None, Some(previous.clone())));
            }
        }
        line.push_back((Some(now), entry));
        prune(line, now, lag);
        // One version older than the lag is the current state: no history left to serve.
        let horizon = now.checked_sub(lag);
        let settled = line.len() == 1
            && line[0]
                .0
                .is_none_or(|since| horizon.is_some_and(|h| since <= h));
        if settled {
            self.timeline.remove(path);
        }
    }

    /// What a read of `path` served at `now` returns: the current object, or (a fraction
    /// `rate` of reads) the version current at an instant drawn within `lag` before `now`.
    pub(super) fn read(&mut self, path: &Path, now: Instant) -> Option<Entry> {
        let current = self.map.get(path).cloned();
        let Some(stale) = self.stale.as_mut() else {
            return current;
        };
        if !stale.rng.gen_bool(stale.rate) {
            return current;
        }
        let back = stale.lag.mul_f64(stale.rng.gen_range(0.0..=1.0));
        let Some(line) = self.timeline.get_mut(path) else {
            return current;
        };
        prune(line, now, stale.lag);
        let at = now.checked_sub(back).unwrap_or(now);
        let found = line
            .iter()
            .rev()
            .find(|(since, _)| since.is_none_or(|s| s <= at))
            .and_then(|(_, e)| e.clone());
        if found.as_ref().map(|e| e.e_tag) != current.as_ref().map(|e| e.e_tag) {
            stale.served += 1;
        }
        found
    }
}

/// Forget the versions of `line` that no read within `lag` of `now` can return any more.
fn prune(line: &mut VecDeque<Version>, now: Instant, lag: Duration) {
    let horizon = now.checked_sub(lag);
    while line.len() >= 2 {
        let next_since = line[1].0;
        let invisible = match (next_since, horizon) {
            (Some(s), Some(h)) => s <= h,
            _ => false,
        };
        if invisible || line.len() > MAX_VERSIONS {
            line.pop_front();
        } else {
            break;
        }
    }
}

pub(super) fn e_tag(n: u64) -> String {
    format!("\"{n}\"")
}

/// The entries under `prefix`, segment-wise (`a/b` is under `a`, `ab` is not), excluding the
/// prefix itself, in path order.
pub(super) fn under<'a>(
    map: &'a BTreeMap<Path, Entry>,
    prefix: Option<&Path>,
) -> impl Iterator<Item = (&'a Path, &'a Entry)> + 'a {
    let prefix = prefix.cloned();
    let start = prefix.clone().unwrap_or_default();
    map.range(start..)
        .take_while({
            let prefix = prefix.clone();
            move |(path, _)| {
                prefix
                    .as_ref()
                    .is_none_or(|p| path.as_ref().starts_with(p.as_ref()))
            }
        })
        .filter(move |(path, _)| match &prefix {
            None => true,
            Some(p) => path
                .prefix_match(p)
                .is_some_and(|mut rest| rest.next().is_some()),
        })
}
