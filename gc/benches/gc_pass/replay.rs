//! The store's floor: the GC pass's own requests (recorded by testkit's `RecordingStore`), replayed raw
//! against an identically built bank — same kinds, same paths, same put modes and body sizes,
//! `concurrency` in flight, started in the recorded order, with no banklease logic in between
//! (no parsing, no judging, no decision protocol).
//!
//! A listing is one unit (its pages follow each other, as they must); a `delete_stream` call is
//! one unit (so S3 sees the same bulk-delete chunks). Everything else is one request per unit.
//!
//! Only the ordering that the requests themselves impose is kept:
//! - requests on the same object keep their recorded order (the store clock's PUT before its
//!   HEAD; a lease's GET before its DELETE; `index.json`'s GET before its DELETE);
//! - a deletion waits for the listing that found its object (the recorded listing of its
//!   nearest listed ancestor prefix): nobody can delete what they have not listed yet, and
//!   moto answers 500 to a listing of a prefix whose objects are being deleted under it.
//!
//! Everything else runs unordered: the GC's own order between the requests of one checkpoint
//! (read `index.json`, win the decision, list and delete data, delete `index.json`, delete the
//! marker), which is its safety protocol, is *not* kept — the floor is what the store could do
//! with the same requests if no protocol constrained them.

use std::collections::HashMap;
use std::sync::Arc;

use banklease::clock::{Clock, SystemClock};
use banklease::store::CountingStore;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// One replayed unit.
#[derive(Debug)]
enum Unit {
    Put {
        path: Path,
        mode: PutMode,
        size: usize,
    },
    Get(Path),
    Head(Path),
    List(Path),
    ListDelim(Path),
    /// The paths of one `delete_stream` call.
    Delete(Vec<Path>),
}

/// A unit and the earlier units it waits for.
#[derive(Debug)]
struct Entry {
    unit: Unit,
    after: Vec<usize>,
}

/// The log, parsed.
#[derive(Debug)]
pub struct Log {
    entries: Vec<Entry>,
    pub lines: u64,
}

fn join(prefix: &Path, rel: &str) -> anyhow::Result<Path> {
    let full = match (prefix.as_ref(), rel) {
        (p, "") => p.to_owned(),
        ("", r) => r.to_owned(),
        (p, r) => format!("{p}/{r}"),
    };
    Ok(Path::parse(full)?)
}

/// Parse a log written by `RecordingStore`, re-rooting its paths at `prefix`.
pub fn load(file: &std::path::Path, prefix: &Path) -> anyhow::Result<Log> {
    let text = std::fs::read_to_string(file)?;
    let mut entries: Vec<Entry> = Vec::new();
    // delete_stream call -> its entry; listed prefix -> its listing; path -> last entry on it.
    let mut groups: HashMap<u64, usize> = HashMap::new();
    let mut lists: HashMap<String, usize> = HashMap::new();
    let mut last: HashMap<String, usize> = HashMap::new();
    let mut lines = 0;
    for line in text.lines() {
        lines += 1;
        let mut f = line.splitn(5, '\t');
        let (Some(kind), Some(group), Some(mode), Some(size), Some(rel)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            anyhow::bail!("malformed log line `{line}`");
        };
        let path = join(prefix, rel)?;
        let key = path.as_ref().to_owned();
        let mut after: Vec<usize> = last.get(&key).copied().into_iter().collect();
        let unit = match kind {
            "put" => Unit::Put {
                path,
                mode: match mode {
                    "create" => PutMode::Create,
                    "overwrite" => PutMode::Overwrite,
                    other => anyhow::bail!("put mode `{other}` is not replayed"),
                },
                size: size.parse()?,
            },
            "get" => Unit::Get(path),
            "head" => Unit::Head(path),
            "list" => {
                lists.insert(key.clone(), entries.len());
                Unit::List(path)
            }
            "list_delim" => Unit::ListDelim(path),
            "delete" => {
                // The listing that found this object: the nearest listed ancestor prefix.
                let mut ancestor = key.as_str();
                while let Some((parent, _)) = ancestor.rsplit_once('/') {
                    if let Some(&i) = lists.get(parent) {
                        after.push(i);
                        break;
                    }
                    ancestor = parent;
                }
                let group: u64 = group.parse()?;
                if let Some(&i) = groups.get(&group) {
                    let entry = &mut entries[i];
                    if let Unit::Delete(paths) = &mut entry.unit {
                        paths.push(path);
                    }
                    entry.after.extend(after.into_iter().filter(|&a| a < i));
                    last.insert(key, i);
                    continue;
                }
                groups.insert(group, entries.len());
                Unit::Delete(vec![path])
            }
            other => anyhow::bail!("request kind `{other}` is not replayed"),
        };
        last.insert(key, entries.len());
        entries.push(Entry { unit, after });
    }
    Ok(Log { entries, lines })
}

/// What the replay took.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Replayed {
    pub secs: f64,
    pub units: u64,
    /// Requests by kind as object_store calls (one `list` per listing, one `delete` per path).
    pub requests: std::collections::BTreeMap<String, u64>,
    /// Requests that failed (the GC's own pass tolerates NotFound on deletes, for example).
    pub errors: u64,
    /// The first few failures.
    pub error_samples: Vec<String>,
}

async fn run(
    store: &dyn ObjectStore,
    unit: Unit,
    done: Option<&watch::Sender<bool>>,
    after: Vec<watch::Receiver<bool>>,
) -> object_store::Result<()> {
    for mut earlier in after {
        // Every unit it waits for started before it (units start in order), so this ends.
        let _ = earlier.wait_for(|d| *d).await;
    }
    let result = run_one(store, unit).await;
    if let Some(done) = done {
        done.send_replace(true);
    }
    result
}

async fn run_one(store: &dyn ObjectStore, unit: Unit) -> object_store::Result<()> {
    match unit {
        Unit::Put { path, mode, size } => {
            let body = PutPayload::from(vec![b'r'; size]);
            store
                .put_opts(&path, body, PutOptions::from(mode))
                .await
                .map(|_| ())
        }
        Unit::Get(path) => store.get(&path).await?.bytes().await.map(|_| ()),
        Unit::Head(path) => store.head(&path).await.map(|_| ()),
        Unit::List(prefix) => {
            store
                .list(Some(&prefix))
                .try_for_each(|_| async { Ok(()) })
                .await
        }
        Unit::ListDelim(prefix) => store.list_with_delimiter(Some(&prefix)).await.map(|_| ()),
        Unit::Delete(paths) => {
            let paths = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
            store
                .delete_stream(paths)
                .try_for_each(|_| async { Ok(()) })
                .await
        }
    }
}

/// Replay `log` on `store` with `concurrency` units in flight.
pub async fn replay(store: Arc<dyn ObjectStore>, log: Log, concurrency: usize) -> Replayed {
    let counting = Arc::new(CountingStore::new(store));
    let counters = Arc::clone(counting.counters());
    let units = log.entries.len() as u64;
    let clock = SystemClock;
    let started = clock.now();
    // A completion signal for each unit that another one waits for.
    let done: HashMap<usize, watch::Sender<bool>> = log
        .entries
        .iter()
        .flat_map(|e| e.after.iter().copied())
        .map(|i| (i, watch::channel(false).0))
        .collect();
    let done = &done;
    let mut results = futures::stream::iter(log.entries.into_iter().enumerate())
        .map(|(i, entry)| {
            let store = Arc::clone(&counting);
            let after = entry
                .after
                .iter()
                .filter_map(|a| done.get(a).map(|tx| tx.subscribe()))
                .collect();
            async move { run(store.as_ref(), entry.unit, done.get(&i), after).await }
        })
        .buffer_unordered(concurrency);
    let mut errors = 0;
    let mut error_samples = Vec::new();
    while let Some(r) = results.next().await {
        if let Err(e) = r {
            errors += 1;
            if error_samples.len() < 5 {
                error_samples.push(e.to_string());
            }
        }
    }
    drop(results);
    Replayed {
        secs: clock.now().duration_since(started).as_secs_f64(),
        units,
        requests: counters.snapshot(),
        errors,
        error_samples,
    }
}
