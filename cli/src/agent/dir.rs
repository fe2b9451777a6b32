//! The agent's private directory (`banklease-agent-*`, mode 0700, for its socket), and the
//! removal of those that `run`s killed outright left behind.
//!
//! A `run` removes its directory on every exit it sees (the `TempDir` is dropped on every path
//! out of `supervise`, signals included); only a `run` killed without a chance (SIGKILL, the
//! OOM killer, a crash) leaves one. So each directory records who made it (`run.json`: the pid
//! and its [`ProcessStamp`]), and the next `run` of the same user removes those whose process
//! is provably gone: on this host since this boot, in this pid namespace, and no process with
//! that pid and start time. **Invariant:** a directory whose maker cannot be proven gone (it
//! runs, the record is missing or unreadable, another boot, another namespace, another user)
//! is never touched.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use banklease::process::ProcessHere;
use banklease::process::ProcessStamp;
use serde::{Deserialize, Serialize};

const PREFIX: &str = "banklease-agent-";
const RECORD: &str = "run.json";

/// Who made an agent directory.
#[derive(Debug, Serialize, Deserialize)]
struct Maker {
    pid: u32,
    process: ProcessStamp,
}

/// A private directory for the socket: in `$XDG_RUNTIME_DIR` (per user, tmpfs) when there is
/// one, else in the temporary directory; mode 0700. Directories there that killed `run`s left
/// are removed first.
pub(super) fn socket_dir() -> Result<tempfile::TempDir> {
    // A socket path holds at most 107 bytes (sun_path); a long $TMPDIR falls back to /tmp.
    let fits = |p: &PathBuf| p.as_os_str().len() + "/banklease-agent-XXXXXX/agent.sock".len() < 108;
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir() && fits(p))
        .or_else(|| Some(std::env::temp_dir()).filter(fits))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    remove_left_behind(&base);
    let dir = tempfile::Builder::new()
        .prefix(PREFIX)
        .tempdir_in(&base)
        .with_context(|| {
            format!(
                "cannot create a private directory for the agent's socket in `{}`",
                base.display()
            )
        })?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make `{}` private", dir.path().display()))?;
    // Without a stamp (no /proc) nothing is recorded, and the directory is never another
    // run's to remove.
    if let Some(process) = ProcessStamp::this_process() {
        let maker = Maker {
            pid: std::process::id(),
            process,
        };
        let path = dir.path().join(RECORD);
        std::fs::write(&path, serde_json::to_vec(&maker)?)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(dir)
}

/// Remove the agent directories in `base` of this user whose `run` is provably gone. Best
/// effort: what cannot be read or removed is left, with a debug line.
fn remove_left_behind(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let uid = rustix::process::getuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = entry.path();
        // Not followed: a symlink is nobody's agent directory.
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let Some(maker) = std::fs::read(dir.join(RECORD))
            .ok()
            .and_then(|b| serde_json::from_slice::<Maker>(&b).ok())
        else {
            continue;
        };
        let gone = matches!(
            ProcessStamp::here(Some(&maker.process), maker.pid),
            ProcessHere::Exited | ProcessHere::PidReused
        );
        if !gone {
            continue;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::info!(dir = %dir.display(), pid = maker.pid,
                "removed the agent directory of a run that was killed"),
            Err(e) => tracing::debug!(dir = %dir.display(), error = %e,
                "cannot remove the agent directory of a killed run"),
        }
    }
}
