use super::*;

/// The bank's own directory is never made by a write: gone, a write fails, and nothing is
/// created where it was.
#[test]
fn a_write_never_makes_the_banks_directory_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("bank");
    let target = root.join("locks/ns/k");
    let err = with_parent(&root, &target, || std::fs::write(&target, "x")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string()
            .contains("only `banklease init` makes a bank"),
        "{err}"
    );
    assert!(!root.exists());
}

/// A directory in the bank's place (the bare mount point of an unmounted disk, a directory
/// made where the bank was moved from) is not written in: not even a lock stripe.
#[test]
fn a_write_never_lands_in_another_directory_at_the_banks_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("bank");
    std::fs::create_dir(&root).unwrap();
    opened(&root);
    std::fs::rename(&root, dir.path().join("moved")).unwrap();
    std::fs::create_dir(&root).unwrap();
    let err = lock_keys(&root, &["k"]).map(drop).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "written in the new directory"
    );
}

#[test]
fn a_directory_pruned_between_making_it_and_linking_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::write(&source, "x").unwrap();
    let target = dir.path().join("a/b/object");
    let mut pruned = false;
    with_parent(dir.path(), &target, || {
        if !pruned {
            // A concurrent delete's prune, between making the directory and the link.
            pruned = true;
            std::fs::remove_dir(target.parent().unwrap()).unwrap();
        }
        std::fs::hard_link(&source, &target)
    })
    .unwrap();
    assert!(pruned && target.is_file());
    // Deleting it prunes what it leaves empty, up to the root and no further.
    let root = dir.path();
    std::fs::remove_file(&target).unwrap();
    prune_empty_parents(root, &target);
    assert!(!root.join("a").exists());
    assert!(root.is_dir());
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
