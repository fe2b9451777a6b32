//! Every write banklease sends, listed. The records several actors write — a checkpoint's
//! `index.json`, its decision, its `index/failed/` entry, a reap record — are written only on
//! the version their writer read (`checkpoint::rewrite_index`, create-if-absent) or, where a
//! plain overwrite is right, say why below. A write added anywhere in the code fails this test
//! until it is listed here with what it writes and how: an unconditional overwrite of a shared
//! record cannot slip in by accident.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// (file, calls that send a write — `put`, `put_opts`, `put_multipart*`, doc examples
/// included — and what they write, how).
const WRITES: &[(&str, usize, &str)] = &[
    // The shared records.
    (
        "src/checkpoint/shared.rs",
        2,
        "index.json: `rewrite_index` on the version read (If-Match, create-if-absent, or a \
         HEAD compare where If-Match is refused) and `create_index` (create-if-absent)",
    ),
    (
        "src/checkpoint/decision.rs",
        1,
        "a failure's `index/failed/` entry, create-if-absent (a removal's is never emptied); the \
         decision itself is created through the lease core's conditional write",
    ),
    (
        "src/checkpoint/removal.rs",
        3,
        "a removal's `index/failed/` entry (`removing`: it supersedes a failure's empty one, and \
         nothing else is written there), put back by `ensure_entry` only after a HEAD found it \
         gone; and the removal's sweep marker",
    ),
    (
        "src/checkpoint/repair.rs",
        2,
        "`checkpoint resolve`: the set-aside copy (create-if-absent) and the record it replaces, \
         on the version it read (If-Match, or a HEAD compare)",
    ),
    (
        "gc/src/pass/reaped.rs",
        1,
        "a reap record: only collectors write it, each its own judgement of the same lease's \
         reaping; a lease re-made and reaped again replaces the older record (overwrite)",
    ),
    // The owner's own objects.
    (
        "src/checkpoint/mod.rs",
        3,
        "an owner's protecting marker (create, and a repair of its own) and its data objects",
    ),
    (
        "src/checkpoint/upload.rs",
        2,
        "an owner's data objects, in parts",
    ),
    (
        "src/lease/write.rs",
        2,
        "lease and lock holdings: the core's conditional write (create-if-absent, If-Match, or \
         an overwrite after a HEAD showed our own record)",
    ),
    (
        "src/lock/fence.rs",
        2,
        "fenced objects and their fence, conditional on the highest token seen",
    ),
    // The GC's own records.
    (
        "gc/src/pass/sweep.rs",
        1,
        "a collected checkpoint's sweep marker",
    ),
    (
        "gc/src/pass/records.rs",
        1,
        "a missing lease's missing-since record, create-if-absent",
    ),
    (
        "gc/src/time/host_clock.rs",
        2,
        "a host's clock record, on the version read (overwrite where If-Match is refused: one \
         host's collectors take turns under the GC lease)",
    ),
    (
        "gc/src/time/timing.rs",
        5,
        "the clock floor and step candidate, on the version read (HEAD-compared where If-Match \
         is refused)",
    ),
    (
        "gc/src/time/steps.rs",
        2,
        "the confirmed clock steps, on the version read (HEAD-compared where If-Match is \
         refused)",
    ),
    // Scratch keys and the bank itself.
    (
        "src/layout.rs",
        1,
        "the bank's descriptor, create-if-absent",
    ),
    (
        "src/bank/store_time.rs",
        1,
        "the host's clock probe, rewritten in place",
    ),
    (
        "src/capability.rs",
        5,
        "capability probes on their own scratch keys",
    ),
    (
        "src/bank/learnt.rs",
        3,
        "what the probes learnt about the store (`_banklease/store.json`): a fresh measurement \
         of the conditions overwrites it (`init`, `doctor`, each writer's own probe); one more \
         thing measured is kept on the version read (create-if-absent when there is none), so \
         an older view never overwrites a newer one; a lost race costs a measurement (and its \
         tests' unreadable record)",
    ),
    (
        "src/lock/support.rs",
        3,
        "the fencing support probe on its own scratch key",
    ),
    (
        "src/race.rs",
        3,
        "`doctor`'s race probe on its own scratch key",
    ),
    (
        "src/doctor.rs",
        3,
        "`doctor`'s probes on their own scratch keys",
    ),
    // The stores themselves: implementations, wrappers forwarding, doc examples, tests.
    (
        "src/store/local/mod.rs",
        5,
        "the `file:` store: its implementation and doc examples",
    ),
    (
        "src/store/swift/mod.rs",
        4,
        "the Swift store: its implementation and doc example",
    ),
    ("src/store/swift/tests.rs", 9, "the Swift store's tests"),
    (
        "src/store/counting.rs",
        4,
        "a wrapper forwarding every write, and its doc example",
    ),
    ("src/store/etag.rs", 3, "a wrapper forwarding every write"),
];

const WRITE_CALLS: [&str; 3] = [".put(", ".put_opts(", "put_multipart"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_write_is_listed_with_what_it_writes_and_how() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "gc/src", "gc-daemon/src", "cli/src", "python/src"] {
        if root.join(dir).is_dir() {
            sources(&root.join(dir), &mut files);
        }
    }
    let mut found = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let calls: usize = text
            .lines()
            .map(|l| WRITE_CALLS.iter().filter(|c| l.contains(*c)).count())
            .sum();
        if calls > 0 {
            let rel = file
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            found.insert(rel, calls);
        }
    }
    let listed: BTreeMap<String, usize> = WRITES
        .iter()
        .map(|(f, n, _)| ((*f).to_owned(), *n))
        .collect();
    let mut wrong = Vec::new();
    for (file, n) in &found {
        match listed.get(file) {
            Some(m) if m == n => {}
            Some(m) => wrong.push(format!("{file}: {n} write call(s), {m} listed")),
            None => wrong.push(format!("{file}: {n} write call(s), not listed")),
        }
    }
    for (file, m) in &listed {
        if !found.contains_key(file) {
            wrong.push(format!("{file}: listed with {m} write call(s), has none"));
        }
    }
    assert!(
        wrong.is_empty(),
        "the writes changed: {wrong:#?}\nA write of `index.json` goes through \
         `checkpoint::rewrite_index` or `create_index`, a decision through `decide`, a failed \
         entry or any other shared record on the version its writer read; then list the \
         change in tests/writes.rs with what it writes and how"
    );
}
