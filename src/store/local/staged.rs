//! What is staged in a `file:` bank's `_banklease/staging/` now, for reports (`banklease gc`,
//! `checkpoint explain`): each staged write with the key it is staged for, its size, its last
//! write and whether a live writer holds it. Reading only: the sweep ([`super::fs`]) decides
//! alone what goes, and nothing here changes it.

use std::fs::File;
use std::io;
use std::time::SystemTime;

use super::beneath::Root;
#[cfg(target_os = "linux")]
use super::fs::KEY_XATTR;
use super::fs::{context, staging_dir};

/// One staged write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedWrite {
    /// The key it is staged for; `None` where the file system keeps no user attributes (or a
    /// release before this one staged it).
    pub key: Option<String>,
    /// Bytes written so far.
    pub bytes: u64,
    /// Its last write, on the store's clock (a `file:` bank's is the host's).
    pub modified: SystemTime,
    /// Whether its writer still holds it (a live process, however idle): the sweep leaves it
    /// until that writer lets go.
    pub held: bool,
}

/// The staged writes under `root`, at most `budget` of the directory's entries looked at.
pub(super) fn list(root: &Root, budget: usize) -> io::Result<Vec<StagedWrite>> {
    let Some(mut staging) = staging_dir(root)? else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for _ in 0..budget {
        let Some(entry) = staging.entries.next() else {
            break;
        };
        let Some((_, path, file)) = staging.open_staged(entry)? else {
            continue;
        };
        let meta = file.metadata().map_err(|e| context(e, "stat", &path))?;
        // A shared lock, let go at once: refused while a writer holds its exclusive one.
        let held = match file.try_lock_shared() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(e)) => return Err(context(e, "lock", &path)),
        };
        found.push(StagedWrite {
            key: staged_for(&file),
            bytes: meta.len(),
            modified: meta.modified().map_err(|e| context(e, "stat", &path))?,
            held,
        });
    }
    Ok(found)
}

/// The key `file` is staged for, from its extended attribute.
#[cfg(target_os = "linux")]
fn staged_for(file: &File) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::fgetxattr(file, KEY_XATTR, &mut buf[..]).ok()?;
    String::from_utf8(buf[..n].to_vec())
        .ok()
        .filter(|k| !k.is_empty())
}

#[cfg(not(target_os = "linux"))]
fn staged_for(_file: &File) -> Option<String> {
    None
}
