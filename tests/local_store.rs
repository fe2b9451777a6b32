//! The `file:` bank's store: object_store's conformance suite, atomic conditional writes raced by
//! 16 threads and by 16 processes, deletes that stay deleted, and a writer killed between
//! writing and publishing.
#![allow(clippy::disallowed_methods)] // real threads, processes and files

use std::path::{Path as FsPath, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use banklease::store::LocalStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

const WRITERS: usize = 16;

fn update(e_tag: &str) -> PutOptions {
    PutOptions::from(PutMode::Update(UpdateVersion {
        e_tag: Some(e_tag.to_owned()),
        version: None,
    }))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn body(store: &LocalStore, key: &Path) -> String {
    let b = store.get(key).await.unwrap().bytes().await.unwrap();
    String::from_utf8(b.to_vec()).unwrap()
}

#[tokio::test]
async fn passes_object_stores_conformance_suite_with_update() {
    use object_store::integration::*;
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    put_get_delete_list(&store).await;
    list_with_offset_exclusivity(&store).await;
    get_opts(&store).await;
    list_uses_directories_correctly(&store).await;
    list_with_delimiter(&store).await;
    rename_and_copy(&store).await;
    copy_if_not_exists(&store).await;
    copy_rename_nonexistent_object(&store).await;
    stream_get(&store).await;
    // `true`: unlike the `LocalFileSystem` it wraps, this store supports `PutMode::Update`.
    put_opts(&store, true).await;
}

#[tokio::test]
async fn every_write_changes_the_etag_and_matches_what_reads_report() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("leases/owner");
    let mut seen = std::collections::HashSet::new();
    let mut last = store
        .put_opts(&key, "same-size".into(), PutMode::Create.into())
        .await
        .unwrap()
        .e_tag
        .unwrap();
    seen.insert(last.clone());
    // Same size, as fast as possible: the file system's own mtime granularity and a reused
    // inode would repeat an ETag; the writer's stamp must not.
    for i in 0..2_000 {
        let r = if i % 2 == 0 {
            store
                .put_opts(&key, "same-size".into(), update(&last))
                .await
        } else {
            store.put(&key, "same-size".into()).await
        };
        let e_tag = r.unwrap().e_tag.unwrap();
        assert_eq!(
            store.head(&key).await.unwrap().e_tag.as_deref(),
            Some(&*e_tag)
        );
        assert!(
            seen.insert(e_tag.clone()),
            "ETag repeated after {i} writes: {e_tag}"
        );
        last = e_tag;
    }
    // Any older version's ETag is refused.
    let old = seen.iter().find(|e| **e != last).unwrap().clone();
    let err = store
        .put_opts(&key, "x".into(), update(&old))
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::Precondition { .. }),
        "{err}"
    );
    let err = store
        .put_opts(&Path::from("missing"), "x".into(), update(&last))
        .await
        .unwrap_err();
    assert!(
        matches!(err, object_store::Error::Precondition { .. }),
        "{err}"
    );
}

#[test]
fn sixteen_threads_race_one_winner_per_round() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("gc/active");
    let rt = runtime();
    let first = rt.block_on(store.put(&key, "start".into())).unwrap();
    let current = Arc::new(Mutex::new(first.e_tag.unwrap()));
    let barrier = Arc::new(Barrier::new(WRITERS + 1));
    let rounds = 40;
    let wins: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, key, current, barrier) =
                (store.clone(), key.clone(), current.clone(), barrier.clone());
            std::thread::spawn(move || {
                let rt = runtime();
                let mut won = Vec::new();
                for round in 0..rounds {
                    barrier.wait();
                    let e_tag = current.lock().unwrap().clone();
                    let create = Path::from(format!("fresh/{round}"));
                    let body = format!("{w}/{round}");
                    let updated =
                        rt.block_on(store.put_opts(&key, body.clone().into(), update(&e_tag)));
                    let created =
                        rt.block_on(store.put_opts(&create, body.into(), PutMode::Create.into()));
                    won.push((
                        match updated {
                            Ok(_) => true,
                            Err(object_store::Error::Precondition { .. }) => false,
                            Err(e) => panic!("writer {w}: {e}"),
                        },
                        match created {
                            Ok(_) => true,
                            Err(object_store::Error::AlreadyExists { .. }) => false,
                            Err(e) => panic!("writer {w}: {e}"),
                        },
                    ));
                    barrier.wait();
                }
                won
            })
        })
        .collect();
    for _ in 0..rounds {
        barrier.wait(); // writers go
        barrier.wait(); // writers done
        let head = rt.block_on(store.head(&key)).unwrap();
        *current.lock().unwrap() = head.e_tag.unwrap();
    }
    let wins: Vec<Vec<(bool, bool)>> = wins.into_iter().map(|h| h.join().unwrap()).collect();
    let by_round: Vec<Vec<(bool, bool)>> = (0..rounds)
        .map(|r| wins.iter().map(|w| w[r]).collect())
        .collect();
    for (round, row) in by_round.iter().enumerate() {
        let updates: Vec<usize> = (0..WRITERS).filter(|&w| row[w].0).collect();
        let creates: Vec<usize> = (0..WRITERS).filter(|&w| row[w].1).collect();
        assert_eq!(
            updates.len(),
            1,
            "round {round}: update winners {updates:?}"
        );
        assert_eq!(
            creates.len(),
            1,
            "round {round}: create winners {creates:?}"
        );
        let fresh = rt.block_on(body(&store, &Path::from(format!("fresh/{round}"))));
        assert_eq!(fresh, format!("{}/{round}", creates[0]));
    }
    let last = rt.block_on(body(&store, &key));
    let winner = (0..WRITERS).find(|&w| by_round[rounds - 1][w].0).unwrap();
    assert_eq!(last, format!("{winner}/{}", rounds - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conditional_write_racing_a_delete_never_brings_the_key_back() {
    // A reaped lease must stay reaped: if both the delete and the owner's conditional renewal
    // succeed, the renewal came first and the key is gone.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalStore::new(dir.path()).unwrap());
    let key = Path::from("leases/raced");
    let mut both = 0;
    for _ in 0..300 {
        let e_tag = store.put(&key, "v".into()).await.unwrap().e_tag.unwrap();
        let (s1, k1) = (store.clone(), key.clone());
        let deleter = tokio::spawn(async move { s1.delete(&k1).await });
        let renewed = store.put_opts(&key, "renewed".into(), update(&e_tag)).await;
        let deleted = deleter.await.unwrap();
        deleted.unwrap();
        match renewed {
            Ok(_) => {
                both += 1;
                let err = store.head(&key).await.unwrap_err();
                assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
            }
            Err(object_store::Error::Precondition { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        let _ = store.delete(&key).await;
    }
    eprintln!("renewal and delete both succeeded in {both} of 300 rounds");
}

/// One writer process of the process race, or a writer killed before publishing: the parent
/// re-runs this test binary with `BANKLEASE_LOCAL_CHILD` set.
#[test]
#[ignore = "a child process of the tests below; does nothing on its own"]
fn local_store_child() {
    let Ok(mode) = std::env::var("BANKLEASE_LOCAL_CHILD") else {
        return;
    };
    let root = PathBuf::from(std::env::var("BANKLEASE_LOCAL_ROOT").unwrap());
    let store = LocalStore::new(&root).unwrap();
    let rt = runtime();
    match mode.as_str() {
        "race" => {
            // Slow between compare and publish: without the lock, racers would slip through.
            let store = store
                .with_before_publish(Arc::new(|| std::thread::sleep(Duration::from_millis(2))));
            let me: usize = std::env::var("BANKLEASE_LOCAL_WRITER")
                .unwrap()
                .parse()
                .unwrap();
            let rounds: usize = std::env::var("BANKLEASE_LOCAL_ROUNDS")
                .unwrap()
                .parse()
                .unwrap();
            let signals = root.join("signals");
            for round in 0..rounds {
                let e_tag = wait_for(&signals.join(format!("go-{round}")));
                let body = format!("{me}/{round}");
                let updated = rt.block_on(store.put_opts(
                    &Path::from("gc/active"),
                    body.clone().into(),
                    update(&e_tag),
                ));
                let created = rt.block_on(store.put_opts(
                    &Path::from(format!("fresh/{round}")),
                    body.into(),
                    PutMode::Create.into(),
                ));
                let outcome = |won: bool| if won { "won" } else { "lost" };
                let line = format!(
                    "{} {}",
                    outcome(match updated {
                        Ok(_) => true,
                        Err(object_store::Error::Precondition { .. }) => false,
                        Err(e) => panic!("writer {me}: {e}"),
                    }),
                    outcome(match created {
                        Ok(_) => true,
                        Err(object_store::Error::AlreadyExists { .. }) => false,
                        Err(e) => panic!("writer {me}: {e}"),
                    }),
                );
                publish(&signals.join(format!("result-{round}-{me}")), &line);
            }
        }
        "crash" => {
            let store = store.with_before_publish(Arc::new(|| std::process::abort()));
            let key = Path::from(std::env::var("BANKLEASE_LOCAL_KEY").unwrap());
            let mode = if std::env::var("BANKLEASE_LOCAL_CREATE").is_ok() {
                PutMode::Create
            } else {
                PutMode::Overwrite
            };
            let _ = rt.block_on(store.put_opts(&key, "never published".into(), mode.into()));
            unreachable!("the hook aborts the process before the write is published");
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// The staged files (hidden from listings) of the store rooted at `root`: every write stages
/// in `_banklease/staging/`.
fn staged_files(root: &FsPath) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join("_banklease/staging")) else {
        return Vec::new();
    };
    entries.map(|e| e.unwrap().path()).collect()
}

#[tokio::test]
async fn a_writer_whose_temporary_was_swept_fails_and_publishes_nothing_of_another() {
    // A writer held up past the sweep's age (lock contention, a pause) loses its temporary;
    // if another writer then made a file of the same name, the first must not publish that
    // half-written file as its own write.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let key = Path::from("leases/owner");
    let plain = LocalStore::new(&root).unwrap();
    plain.put(&key, "v1".into()).await.unwrap();
    let hook_root = root.clone();
    let store = LocalStore::new(&root)
        .unwrap()
        .with_before_publish(Arc::new(move || {
            for t in staged_files(&hook_root) {
                std::fs::remove_file(&t).unwrap(); // the sweep
                std::fs::write(&t, "half of another writer's").unwrap(); // a new writer
            }
        }));
    let err = store.put(&key, "v2".into()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("removed before it could be published"),
        "{err}"
    );
    assert_eq!(body(&plain, &key).await, "v1");
    // The other writer's staged file is left for it (or for the sweep).
    assert_eq!(staged_files(&root).len(), 1);
}

#[tokio::test]
async fn stamps_follow_the_store_clock_back_after_a_step() {
    // The GC reads last_modified as the store's clock: a version written after the host's clock
    // stepped back must carry the clock's time, not the earlier version's plus a microsecond.
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("_banklease/clock/probe");
    store.put(&key, "a".into()).await.unwrap();
    // As if written before the clock stepped back by an hour.
    let ahead = std::time::SystemTime::now() + Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(dir.path().join("_banklease/clock/probe"))
        .unwrap()
        .set_modified(ahead)
        .unwrap();
    let before = store.head(&key).await.unwrap();
    store.put(&key, "b".into()).await.unwrap();
    let after = store.head(&key).await.unwrap();
    let now = chrono::Utc::now();
    assert!(
        (now - after.last_modified).num_seconds().abs() < 60,
        "stamped {} at {now}",
        after.last_modified
    );
    assert_ne!(before.e_tag, after.e_tag);
}

/// Write a small file whole (temporary + rename), so a reader never sees half of it.
fn publish(path: &FsPath, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Wait (bounded: 60 s) for `path` to exist and return its contents.
fn wait_for(path: &FsPath) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn child(root: &FsPath, mode: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "local_store_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("BANKLEASE_LOCAL_CHILD", mode)
    .env("BANKLEASE_LOCAL_ROOT", root);
    cmd
}

#[test]
fn sixteen_processes_race_one_winner_per_round() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let signals = root.join("signals");
    std::fs::create_dir_all(&signals).unwrap();
    let store = LocalStore::new(root).unwrap();
    let rt = runtime();
    let key = Path::from("gc/active");
    rt.block_on(store.put(&key, "start".into())).unwrap();
    let rounds = 15;
    let mut children = Children(
        (0..WRITERS)
            .map(|w| {
                child(root, "race")
                    .env("BANKLEASE_LOCAL_WRITER", w.to_string())
                    .env("BANKLEASE_LOCAL_ROUNDS", rounds.to_string())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    for round in 0..rounds {
        let e_tag = rt.block_on(store.head(&key)).unwrap().e_tag.unwrap();
        publish(&signals.join(format!("go-{round}")), &e_tag);
        let results: Vec<String> = (0..WRITERS)
            .map(|w| wait_for(&signals.join(format!("result-{round}-{w}"))))
            .collect();
        let updates: Vec<usize> = (0..WRITERS)
            .filter(|&w| results[w].starts_with("won "))
            .collect();
        let creates: Vec<usize> = (0..WRITERS)
            .filter(|&w| results[w].ends_with(" won"))
            .collect();
        assert_eq!(
            updates.len(),
            1,
            "round {round}: update winners {updates:?}"
        );
        assert_eq!(
            creates.len(),
            1,
            "round {round}: create winners {creates:?}"
        );
        assert_eq!(
            rt.block_on(body(&store, &key)),
            format!("{}/{round}", updates[0])
        );
        let fresh = rt.block_on(body(&store, &Path::from(format!("fresh/{round}"))));
        assert_eq!(fresh, format!("{}/{round}", creates[0]));
    }
    for c in &mut children.0 {
        assert!(c.wait().unwrap().success());
    }
}

/// Child processes killed if the test fails before they finish (they would wait for a signal).
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test]
async fn a_writer_killed_before_publishing_leaves_a_temporary_the_sweep_removes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = LocalStore::new(root).unwrap();
    let index = Path::from("checkpoints/cp-1/index.json");
    store.put(&index, "protecting".into()).await.unwrap();
    for (key, create) in [(&index, false), (&Path::from("decisions/cp-1"), true)] {
        let mut cmd = child(root, "crash");
        cmd.env("BANKLEASE_LOCAL_KEY", key.as_ref());
        if create {
            cmd.env("BANKLEASE_LOCAL_CREATE", "1");
        }
        let status = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(!status.success(), "the writer was to be killed: {status}");
    }
    // What the crashed writers left: a staged file each, which no reader can see.
    let temporaries = staged_files(root);
    assert_eq!(temporaries.len(), 2, "{temporaries:?}");
    use futures::TryStreamExt;
    let listed: Vec<_> = store.list(None).try_collect().await.unwrap();
    let listed: Vec<&str> = listed.iter().map(|m| m.location.as_ref()).collect();
    assert_eq!(listed, ["checkpoints/cp-1/index.json"]);
    assert_eq!(body(&store, &index).await, "protecting");
    assert!(store.head(&Path::from("decisions/cp-1")).await.is_err());

    // Young temporaries may belong to a live writer: left alone. Lock files are never swept.
    let r = store
        .sweep_temporaries(Duration::from_secs(3600), false)
        .await
        .unwrap();
    assert_eq!((r.stale, r.removed, r.fresh), (0, 0, 2));
    let r = store.sweep_temporaries(Duration::ZERO, true).await.unwrap();
    assert_eq!((r.stale, r.removed), (2, 0), "a dry run removes nothing");
    let r = store
        .sweep_temporaries(Duration::ZERO, false)
        .await
        .unwrap();
    assert_eq!((r.stale, r.removed), (2, 2));
    for t in &temporaries {
        assert!(!t.exists(), "{} left", t.display());
    }
    // The store still works, and its lock files survived.
    store
        .put_opts(
            &Path::from("decisions/cp-1"),
            "gc".into(),
            PutMode::Create.into(),
        )
        .await
        .unwrap();
    assert!(std::fs::read_dir(root).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".banklease-lock#")));
}

#[tokio::test]
async fn a_bank_on_files_renews_with_one_conditional_write_and_serves_named_locks() {
    let dir = tempfile::tempdir().unwrap();
    let bank = banklease::Bank::open(&format!("file://{}", dir.path().display())).unwrap();
    let caps = bank.capabilities().await.unwrap();
    assert_eq!(
        caps.conditional_overwrite,
        banklease::capability::Condition::Enforced
    );
    assert_eq!(
        caps.renewal,
        banklease::capability::RenewalMechanism::ConditionalUpdate
    );
    assert!(bank.local().is_some());
    // Named locks accept the bank (they refuse one without atomic If-Match) and work on it.
    let locks = banklease::lock::Locks::new(
        &bank,
        "t",
        std::sync::Arc::new(banklease::clock::SystemClock),
    )
    .unwrap();
    assert!(locks.current("k").await.unwrap().is_none());
}

#[tokio::test]
async fn the_sweep_goes_on_across_bounded_steps_until_the_tree_is_walked() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    for i in 0..10 {
        // As crashed writers leave them (the name's random part is 32 hex digits).
        let t = dir.path().join(format!("_banklease/staging/w-{i:032x}#0"));
        std::fs::create_dir_all(t.parent().unwrap()).unwrap();
        std::fs::File::create(&t)
            .unwrap()
            .set_modified(old)
            .unwrap();
        store
            .put(
                &Path::from(format!("checkpoints/cp-{i}/index.json")),
                "x".into(),
            )
            .await
            .unwrap();
    }
    let walk = Arc::new(Mutex::new(banklease::store::SweepWalk::default()));
    let (mut removed, mut steps) = (0, 0);
    loop {
        let r = store
            .sweep_temporaries_step(&walk, 5, Duration::from_secs(60), false)
            .await
            .unwrap();
        removed += r.removed;
        steps += 1;
        assert!(steps < 100, "the walk never ends");
        if r.done {
            break;
        }
    }
    assert_eq!(removed, 10);
    // 10 staged files: a budget of 5 entries takes at least two steps (and the checkpoints'
    // own directories are not walked at all).
    assert!((2..=3).contains(&steps), "{steps} steps");
    assert!(walk.lock().unwrap().is_done());
}
