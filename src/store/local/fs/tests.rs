use super::*;

/// The bank's own directory is never made by a write: gone, a write fails, and nothing is
/// created where it was.
#[test]
fn a_write_never_makes_the_banks_directory_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bank");
    std::fs::create_dir(&path).unwrap();
    let root = Root::open(path.clone()).unwrap();
    std::fs::remove_dir(&path).unwrap();
    let err = with_parent(&root, FsPath::new("locks/ns"), |_| Ok(())).unwrap_err();
    let WriteError::Io(err) = err else {
        panic!("{err:?}")
    };
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string()
            .contains("only `banklease init` makes a bank"),
        "{err}"
    );
    assert!(!path.exists());
}

/// A directory in the bank's place (the bare mount point of an unmounted disk, a directory
/// made where the bank was moved from) is not written in: not even a lock stripe.
#[test]
fn a_write_never_lands_in_another_directory_at_the_banks_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bank");
    std::fs::create_dir(&path).unwrap();
    let root = Root::open(path.clone()).unwrap();
    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    std::fs::create_dir(&path).unwrap();
    let err = lock_keys(&root, &["k"]).map(drop).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(
        std::fs::read_dir(&path).unwrap().count(),
        0,
        "written in the new directory"
    );
}

#[test]
fn a_directory_pruned_between_making_it_and_linking_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path().to_owned()).unwrap();
    let target = dir.path().join("a/b/object");
    let mut pruned = false;
    with_parent(&root, FsPath::new("a/b"), |parent| {
        if !pruned {
            // A concurrent delete's prune, between making the directory and the link.
            pruned = true;
            std::fs::remove_dir(target.parent().unwrap()).unwrap();
        }
        rustix::fs::openat(
            parent.fd(),
            "object",
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .map(drop)
        .map_err(|e| WriteError::Io(e.into()))
    })
    .unwrap();
    assert!(pruned && target.is_file());
    // Deleting it prunes what it leaves empty, up to the root and no further.
    delete(&root, "a/b/object", FsPath::new("a/b/object")).unwrap();
    assert!(!dir.path().join("a").exists());
    assert!(dir.path().is_dir());
}

/// A link on the way to a key, or at its name, is never followed: not to write, read, rename
/// or delete, and pruning stops at it.
#[test]
fn no_operation_follows_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let (bank, outside) = (dir.path().join("bank"), dir.path().join("outside"));
    std::fs::create_dir_all(&bank).unwrap();
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    std::fs::write(outside.join("file"), "theirs").unwrap();
    std::fs::write(outside.join("sub/file"), "theirs").unwrap();
    std::os::unix::fs::symlink(&outside, bank.join("dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("file"), bank.join("file")).unwrap();
    let root = Root::open(bank.clone()).unwrap();
    let is_link = |e: &io::Error| beneath::is_link_in_bank(e);
    let io = |e: WriteError| match e {
        WriteError::Io(e) => e,
        other => panic!("{other:?}"),
    };

    let put = |rel: &str| {
        let payload = PutPayload::from_static(b"ours");
        put(
            &root,
            rel,
            FsPath::new(rel),
            &payload,
            &PutMode::Overwrite,
            true,
            &None,
        )
    };
    assert!(is_link(&io(put("dir/sub/file").unwrap_err())));
    assert!(is_link(&io(put("dir/new").unwrap_err())));
    assert!(is_link(&io(put("file").unwrap_err())));
    assert!(is_link(
        &delete(&root, "dir/sub/file", FsPath::new("dir/sub/file")).unwrap_err()
    ));
    assert!(is_link(
        &delete(&root, "file", FsPath::new("file")).unwrap_err()
    ));
    assert!(is_link(
        &beneath::open_file(&root, FsPath::new("dir/file")).unwrap_err()
    ));
    assert!(is_link(
        &beneath::open_file(&root, FsPath::new("file")).unwrap_err()
    ));
    let moved = rename(
        &root,
        ("file", FsPath::new("file")),
        ("x", FsPath::new("x")),
        false,
    );
    assert!(is_link(&io(moved.unwrap_err())));
    std::fs::write(bank.join("mine"), "ours").unwrap();
    let moved = rename(
        &root,
        ("mine", FsPath::new("mine")),
        ("d", FsPath::new("dir/mine")),
        false,
    );
    assert!(is_link(&io(moved.unwrap_err())));
    let copied = copy(
        &root,
        "c",
        FsPath::new("c"),
        FsPath::new("file"),
        &PutMode::Overwrite,
    );
    assert!(is_link(&io(copied.unwrap_err())));

    assert_eq!(std::fs::read(outside.join("file")).unwrap(), b"theirs");
    assert_eq!(std::fs::read(outside.join("sub/file")).unwrap(), b"theirs");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 2);
    assert!(std::fs::symlink_metadata(bank.join("dir"))
        .unwrap()
        .is_symlink());
    assert!(std::fs::symlink_metadata(bank.join("file"))
        .unwrap()
        .is_symlink());
}

#[test]
fn only_names_this_store_stages_are_temporaries() {
    assert!(is_temporary("w-0123456789abcdef0123456789abcdef#0"));
    assert!(!is_temporary("index.json#1"));
    assert!(!is_temporary("invoice#2024"));
    assert!(!is_temporary("w-0123456789abcdef#0"));
    assert!(!is_temporary("w-0123456789abcdef0123456789abcdeg#0"));
    assert!(!is_temporary("w-0123456789abcdef0123456789abcdef#1"));
    assert!(!is_temporary(".banklease-lock#3"));
}

#[test]
fn stripes_are_stable_across_builds() {
    // The mapping is part of the on-disk protocol: other processes (and other versions)
    // must lock the same file for the same key.
    assert_eq!(stripe_of("leases/owner-1"), stripe_of("leases/owner-1"));
    assert_eq!(stripe_of(""), 0xe3b0c44298fc1c14 % STRIPES);
}
