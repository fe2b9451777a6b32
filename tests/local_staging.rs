//! The `file:` bank's staged writes: the sweep removes only what this store staged and nobody
//! is still writing, multipart uploads are staged by the same rules as single writes, and no
//! upload ever publishes another upload's bytes.
#![allow(clippy::disallowed_methods)] // real files and their timestamps

use std::path::{Path as FsPath, PathBuf};
use std::time::{Duration, SystemTime};

use banklease::store::LocalStore;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

/// Every file under `root` whose name holds a `#` (a staged write, of any layout), but not the
/// stripe lock files.
fn staged_files(root: &FsPath) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path);
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains('#') && !name.starts_with(".banklease-lock#") {
                out.push(path);
            }
        }
    }
    out
}

/// Make `path` look as if nothing had written to it for an hour.
fn age(path: &FsPath) {
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

async fn body(store: &LocalStore, key: &Path) -> Vec<u8> {
    store
        .get(key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn files_the_store_did_not_stage_are_never_swept_however_old() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    store
        .put(&Path::from("checkpoints/cp-1/index.json"), "x".into())
        .await
        .unwrap();
    // A user's files that look like temporaries, old enough for any sweep.
    let planted = [
        "docs/invoice#2024",
        "checkpoints/cp-1/index.json#1",
        "leases/owner#7",
        "index/protecting/o/cp#12",
    ];
    for name in planted {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "a user's file").unwrap();
        age(&path);
    }
    let r = store
        .sweep_temporaries(Duration::ZERO, false)
        .await
        .unwrap();
    for name in planted {
        assert!(
            dir.path().join(name).exists(),
            "{name} was removed by the sweep ({r:?})"
        );
    }
    assert_eq!((r.stale, r.removed), (0, 0), "{r:?}");
}

#[tokio::test]
async fn an_upload_that_spans_a_sweep_keeps_its_staged_file_and_publishes_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("checkpoints/cp-1/data/big");
    let mut upload = store.put_multipart(&key).await.unwrap();
    upload
        .put_part(PutPayload::from(vec![b'a'; 1000]))
        .await
        .unwrap();
    // A slow producer: nothing written to the staged file for longer than any sweep waits.
    let staged = staged_files(dir.path());
    assert_eq!(staged.len(), 1, "{staged:?}");
    age(&staged[0]);
    let r = store
        .sweep_temporaries(Duration::from_secs(60), false)
        .await
        .unwrap();
    assert_eq!(r.removed, 0, "a live upload's staged file was swept: {r:?}");
    upload
        .put_part(PutPayload::from(vec![b'b'; 1000]))
        .await
        .unwrap();
    upload.complete().await.unwrap();
    let mut want = vec![b'a'; 1000];
    want.extend(vec![b'b'; 1000]);
    assert_eq!(body(&store, &key).await, want);
    assert!(staged_files(dir.path()).is_empty());
}

#[tokio::test]
async fn an_upload_whose_staged_file_vanished_fails_and_publishes_nothing_of_another() {
    // Two uploads of one name (a retry beside a stuck first try). The first one's staged file
    // goes (an operator's `rm`, a sweep of another release); the second one stages next. The
    // first one's completion must not publish the second one's half-written file.
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("checkpoints/cp-1/data/vol");
    store.put(&key, "before".into()).await.unwrap();
    let mut first = store.put_multipart(&key).await.unwrap();
    first.put_part("first's bytes".into()).await.unwrap();
    let staged = staged_files(dir.path());
    assert_eq!(staged.len(), 1, "{staged:?}");
    std::fs::remove_file(&staged[0]).unwrap();
    let mut second = store.put_multipart(&key).await.unwrap();
    second.put_part("second's half".into()).await.unwrap();
    let err = first.complete().await;
    assert!(err.is_err(), "the first upload completed: {err:?}");
    assert_eq!(
        body(&store, &key).await,
        b"before",
        "nothing of the second upload is published by the first"
    );
    second.put_part(" and the rest".into()).await.unwrap();
    second.complete().await.unwrap();
    assert_eq!(body(&store, &key).await, b"second's half and the rest");
}

#[tokio::test]
async fn an_aborted_or_dropped_upload_leaves_nothing_a_sweep_must_find() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("checkpoints/cp-1/data/vol");
    let mut upload = store.put_multipart(&key).await.unwrap();
    upload.put_part("x".into()).await.unwrap();
    upload.abort().await.unwrap();
    assert!(staged_files(dir.path()).is_empty());
    let mut upload = store.put_multipart(&key).await.unwrap();
    upload.put_part("x".into()).await.unwrap();
    drop(upload);
    assert!(staged_files(dir.path()).is_empty());
    assert!(store.head(&key).await.is_err(), "nothing was published");
}

#[tokio::test]
async fn two_uploads_of_one_name_racing_each_publish_only_their_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::new(dir.path()).unwrap();
    let key = Path::from("checkpoints/cp-1/data/vol");
    let mut a = store.put_multipart(&key).await.unwrap();
    let mut b = store.put_multipart(&key).await.unwrap();
    // Parts interleaved, as a retry beside a slow first try sends them.
    for i in 0..4 {
        a.put_part(PutPayload::from(vec![b'a'; 100 + i]))
            .await
            .unwrap();
        b.put_part(PutPayload::from(vec![b'b'; 200 + i]))
            .await
            .unwrap();
    }
    let want_a: Vec<u8> = (0..4).flat_map(|i| vec![b'a'; 100 + i]).collect();
    let want_b: Vec<u8> = (0..4).flat_map(|i| vec![b'b'; 200 + i]).collect();
    a.complete().await.unwrap();
    assert_eq!(body(&store, &key).await, want_a);
    b.complete().await.unwrap();
    assert_eq!(body(&store, &key).await, want_b);
    assert!(staged_files(dir.path()).is_empty());
}
