//! Reads and listings of a `file:` bank, never through a link ([`super::beneath`]).
//!
//! object_store's `LocalFileSystem` lists with `follow_links(true)` and opens by path: a link
//! planted in a bank would make a listing name files outside it as the bank's objects, which a
//! deletion then removes. Here a listing walks from directory descriptors, reports a link as
//! something met and not the bank's ([`Met`]) and does not descend into it; a read opens the
//! file with `O_NOFOLLOW` beneath the root. Names are what object_store's local store makes of
//! them (a file's name is its path part; names ending `#<digits>` are hidden, as object_store
//! hides its own temporaries and this store's lock and staged files).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use object_store::path::{Path, PathPart};
use object_store::{ListResult, ObjectMeta};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::beneath::{self, Root};
use super::fs::etag_of_stat;

/// What listings met that is not the bank's: links. Shared by the clones of a store; a pass
/// reports it ([`super::LocalStore::take_met`]); the log says each once per process.
#[derive(Debug, Default, Clone)]
pub(super) struct Met {
    since_taken: Arc<Mutex<BTreeSet<String>>>,
    logged: Arc<Mutex<BTreeSet<String>>>,
}

impl Met {
    fn link(&self, rel: &str) {
        let what = format!("`{rel}` (a symbolic link)");
        self.since_taken
            .lock()
            .expect("met poisoned")
            .insert(what.clone());
        if self.logged.lock().expect("met poisoned").insert(what) {
            tracing::warn!(
                path = rel,
                "a symbolic link in the bank: never followed, never removed, kept as it is"
            );
        }
    }

    pub(super) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.since_taken.lock().expect("met poisoned"))
            .into_iter()
            .collect()
    }
}

/// The metadata of a file as object_store's local store gives it (its ETag: inode, mtime in
/// µs, size).
pub(super) fn meta_of(st: &rustix::fs::Stat, location: Path) -> ObjectMeta {
    let secs = st.st_mtime;
    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or_default();
    ObjectMeta {
        location,
        last_modified: DateTime::<Utc>::from_timestamp(secs, nanos).unwrap_or_default(),
        size: u64::try_from(st.st_size).unwrap_or_default(),
        e_tag: Some(etag_of_stat(st)),
        version: None,
    }
}

/// Whether a file named `name` is listed: object_store hides names ending in `#<digits>`.
fn listed_file(name: &str) -> bool {
    match name.split_once('#') {
        Some((_, suffix)) if !suffix.is_empty() => !suffix.bytes().all(|b| b.is_ascii_digit()),
        _ => true,
    }
}

/// A name as a part of a key, when it can be one.
fn part(name: &OsStr) -> Option<&str> {
    let name = std::str::from_utf8(name.as_bytes()).ok()?;
    PathPart::parse(name).ok().map(|_| name)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// The directory of `prefix`, opened beneath the root; `None` when there is none (a missing
/// directory, a file, a link: nothing is listed under it, and a link is reported).
fn open_prefix(root: &Root, prefix: &Path, met: &Met) -> io::Result<Option<Dir>> {
    let rel: PathBuf = prefix.parts().map(|p| p.as_ref().to_owned()).collect();
    match beneath::dirs(root, &rel, false) {
        Ok(dirs) => {
            let fd = dirs.into_fd()?;
            Ok(Some(Dir::new(fd)?))
        }
        Err(e) if beneath::is_link_in_bank(&e) => {
            if let Some(link) = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<beneath::LinkInBank>())
            {
                met.link(&link.rel.to_string_lossy());
            }
            Ok(None)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// What one entry of a directory is, not following a link.
enum Entry {
    File(ObjectMeta),
    Dir(String, Dir),
    Skip,
}

fn entry(dir: &Dir, prefix: &str, name: &OsStr, met: &Met) -> io::Result<Entry> {
    let Some(part) = part(name) else {
        return Ok(Entry::Skip);
    };
    let key = join(prefix, part);
    let fd = dir.fd()?;
    let st = match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(Entry::Skip),
        Err(e) => return Err(e.into()),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            met.link(&key);
            Ok(Entry::Skip)
        }
        FileType::Directory => match rustix::fs::openat(
            fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(sub) => Ok(Entry::Dir(key, Dir::new(sub)?)),
            // Made a link since it was looked at.
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                met.link(&key);
                Ok(Entry::Skip)
            }
            Err(rustix::io::Errno::NOENT) => Ok(Entry::Skip),
            Err(e) => Err(e.into()),
        },
        FileType::RegularFile if listed_file(part) => match Path::parse(&key) {
            Ok(location) => Ok(Entry::File(meta_of(&st, location))),
            Err(_) => Ok(Entry::Skip),
        },
        _ => Ok(Entry::Skip),
    }
}

fn is_dot(name: &OsStr) -> bool {
    name == "." || name == ".."
}

/// A recursive listing in progress: the directories open on the way down, each with the key
/// prefix of its entries.
pub(super) struct Walk {
    stack: Vec<(String, Dir)>,
    offset: Option<Path>,
    met: Met,
}

impl Walk {
    pub(super) fn new(
        root: &Root,
        prefix: Option<&Path>,
        offset: Option<&Path>,
        met: &Met,
    ) -> io::Result<Self> {
        let prefix = prefix.cloned().unwrap_or_default();
        let stack = open_prefix(root, &prefix, met)?
            .map(|dir| vec![(prefix.as_ref().to_owned(), dir)])
            .unwrap_or_default();
        Ok(Self {
            stack,
            offset: offset.cloned(),
            met: met.clone(),
        })
    }
}

impl Iterator for Walk {
    type Item = io::Result<ObjectMeta>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (prefix, dir) = self.stack.last_mut()?;
            let Some(next) = dir.next() else {
                self.stack.pop();
                continue;
            };
            let name = match next {
                Ok(e) => OsStr::from_bytes(e.file_name().to_bytes()).to_owned(),
                Err(e) => return Some(Err(e.into())),
            };
            if is_dot(&name) {
                continue;
            }
            let prefix = prefix.clone();
            let dir = &self.stack.last()?.1;
            match entry(dir, &prefix, &name, &self.met) {
                Ok(Entry::File(meta)) => {
                    if self.offset.as_ref().is_some_and(|o| meta.location <= *o) {
                        continue;
                    }
                    return Some(Ok(meta));
                }
                Ok(Entry::Dir(key, sub)) => self.stack.push((key, sub)),
                Ok(Entry::Skip) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// One level of `prefix`: its files and its directories (as common prefixes), never through a
/// link.
pub(super) fn one_level(root: &Root, prefix: Option<&Path>, met: &Met) -> io::Result<ListResult> {
    let prefix = prefix.cloned().unwrap_or_default();
    let mut listed = ListResult {
        common_prefixes: Vec::new(),
        objects: Vec::new(),
        extensions: Default::default(),
    };
    let Some(mut dir) = open_prefix(root, &prefix, met)? else {
        return Ok(listed);
    };
    let mut prefixes = BTreeSet::new();
    while let Some(next) = dir.next() {
        let name = OsStr::from_bytes(next?.file_name().to_bytes()).to_owned();
        if is_dot(&name) {
            continue;
        }
        match entry(&dir, prefix.as_ref(), &name, met)? {
            Entry::File(meta) => listed.objects.push(meta),
            Entry::Dir(key, _) => {
                if let Ok(p) = Path::parse(&key) {
                    prefixes.insert(p);
                }
            }
            Entry::Skip => {}
        }
    }
    listed.common_prefixes = prefixes.into_iter().collect();
    Ok(listed)
}

/// Open the file at `rel` for reading, with its metadata; a directory is not an object.
pub(super) fn open(root: &Root, rel: &FsPath, location: &Path) -> io::Result<(File, ObjectMeta)> {
    let file = beneath::open_file(root, rel)?;
    let st = rustix::fs::fstat(file.as_fd())?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("`{}` is not a file", root.display(rel).display()),
        ));
    }
    Ok((file, meta_of(&st, location.clone())))
}

/// The bytes of `range` of `file` (of `len` bytes); a range past its end is an error.
pub(super) fn read_range(
    file: &File,
    len: u64,
    range: std::ops::Range<u64>,
) -> io::Result<bytes::Bytes> {
    if range.start > range.end || range.end > len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the range {}..{} is outside the object's {len} bytes",
                range.start, range.end
            ),
        ));
    }
    let mut buf = vec![0u8; usize::try_from(range.end - range.start).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut buf, range.start)?;
    Ok(buf.into())
}
