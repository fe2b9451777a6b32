//! What kind of file system a `file:` bank is on, as far as judging needs to know: whether its
//! stamps come from another machine's clock.
//!
//! Invariant: **on a network file system the store's clock is the server's.** There every
//! write is stamped by the file server (`UTIME_NOW` is sent as "set to the server's time"), and
//! hosts sharing the bank read that clock with a probe written and read back, never their own
//! ([`crate::Bank`]'s reading-only shortcut, the host's clock, is for local file systems only).

use std::os::fd::AsFd;

use serde::Serialize;

/// The file system under a `file:` bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FileSystem {
    /// Its kind, as the kernel names it (`nfs`, `cifs`, …), or `local` for any other.
    pub kind: &'static str,
    /// Whether another machine stamps its writes (a network or cluster file system). FUSE is
    /// counted as one: what serves it cannot be told from here.
    pub network: bool,
}

/// Magic numbers of `statfs(2)` for file systems whose stamps are another machine's (linux
/// `include/uapi/linux/magic.h` and the file systems' own headers).
const NETWORK: &[(u64, &str)] = &[
    (0x6969, "nfs"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb2"),
    (0x517B, "smb"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "ceph"),
    (0x6573_5546, "fuse"),
    (0x5346_414F, "afs"),
    (0x0116_1970, "gfs2"),
    (0x7461_636F, "ocfs2"),
    (0x0BD0_0BD0, "lustre"),
    (0x4750_4653, "gpfs"),
];

impl FileSystem {
    /// The file system the directory `fd` is on. Unknown (the call failed): taken for a network
    /// one, whose clock is read with a probe — the reading that holds everywhere.
    pub(super) fn of(fd: impl AsFd) -> Self {
        match rustix::fs::fstatfs(fd) {
            Ok(st) => Self::from_magic(st.f_type as u64),
            Err(_) => Self {
                kind: "unknown",
                network: true,
            },
        }
    }

    fn from_magic(magic: u64) -> Self {
        // `f_type` is signed on some targets: compare the low 32 bits the magics use.
        let magic = magic & 0xFFFF_FFFF;
        match NETWORK.iter().find(|(m, _)| *m == magic) {
            Some((_, kind)) => Self {
                kind,
                network: true,
            },
            None => Self {
                kind: "local",
                network: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_file_systems_are_told_by_their_magic() {
        assert_eq!(
            FileSystem::from_magic(0x6969),
            FileSystem {
                kind: "nfs",
                network: true
            }
        );
        // As a signed 32-bit f_type sign-extends it.
        assert_eq!(FileSystem::from_magic(0xFFFF_FFFF_FF53_4D42).kind, "cifs");
        assert!(!FileSystem::from_magic(0xEF53).network, "ext4");
        assert!(!FileSystem::from_magic(0x0102_1994).network, "tmpfs");
    }

    #[test]
    fn a_temporary_directory_is_local() {
        let dir = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        assert!(!FileSystem::of(&fd).network);
    }
}
