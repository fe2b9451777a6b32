//! The guard's word that a tree is gone, for a waiter on this host: without a cgroup, nothing
//! else names the tree once supervisor and guard are gone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tree::PREFIX;

/// Where a guard without a cgroup says it proved its tree gone after its supervisor died:
/// `done` in a new directory of `/dev/shm` (else the temporary directory) where only this user
/// may create or list (mode 0711: a waiter of another user looks the word up by its name), read
/// by a waiter on this host. Another user cannot create the file first (in a
/// shared directory, a name shown on the guard's command line could be taken, and the guard's
/// word then never came). `None` when no such directory can be made: a waiter then waits for
/// the lock's expiry. The supervisor removes it as it ends ([`remove_marker`]); old ones left
/// by a supervisor that was killed are swept here.
pub fn done_marker() -> Option<PathBuf> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    sweep_markers(&base);
    match tempfile::Builder::new()
        .prefix(&format!("{PREFIX}tree-{}-", std::process::id()))
        // Others may look the word up by its name (a waiter of another user), never make it.
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o711))
        .tempdir_in(&base)
    {
        Ok(dir) => Some(dir.keep().join("done")),
        Err(e) => {
            tracing::warn!(dir = %base.display(), error = %e,
                "cannot make a private directory for the guard's word; a waiter on this host \
                 waits for the lock's expiry should this supervisor be killed");
            None
        }
    }
}

/// Remove a marker [`done_marker`] made, and its directory (never through a link).
pub fn remove_marker(done: &Path) {
    let Some(dir) = done.parent() else {
        return;
    };
    let ours = dir
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{PREFIX}tree-")));
    if !ours {
        return;
    }
    let _ = std::fs::remove_file(done);
    if let Err(e) = std::fs::remove_dir(dir) {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot remove the guard's marker directory");
    }
}

/// How long a guard's word that its tree is gone is kept: a waiter reads it within moments.
const MARKER_KEPT: Duration = Duration::from_secs(3600);

/// Remove this user's markers older than [`MARKER_KEPT`]: directories of [`done_marker`]
/// (what is in them first, one by one: nothing is followed), and files of an older version.
fn sweep_markers(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let me = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name
            .to_string_lossy()
            .starts_with(&format!("{PREFIX}tree-"))
        {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > MARKER_KEPT);
        // A live supervisor's stays, however long its run (its guard writes the word only
        // when that supervisor dies).
        let supervisor_lives = name
            .to_str()
            .and_then(|n| n.strip_prefix(&format!("{PREFIX}tree-")))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|pid| {
                rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
            });
        if !old || supervisor_lives || std::os::unix::fs::MetadataExt::uid(&meta) != me {
            continue;
        }
        if meta.is_dir() {
            remove_marker(&entry.path().join("done"));
        } else if meta.is_file() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
