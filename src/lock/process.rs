//! A holding bound to processes of one host: proved over by that host's kernel.
//!
//! `lock run` and `run --lock` hold a lock for the life of a supervisor and of COMMAND's
//! process tree. Its
//! records name them ([`ProcessBinding`]): the supervisor, COMMAND, COMMAND's process group
//! (led by the guard), and the cgroup that holds the tree where the host delegates one
//! ([`TreeCgroup`]), with what makes the names mean the same processes to another reader: the
//! kernel's boot id, the pid and time namespaces and the supervisor's start time
//! ([`ProcessStamp`], the stamp an owner lease records too). A waiter on the same kernel may
//! take the lock over as soon as the kernel shows the supervisor gone (exited, a zombie, or its
//! pid reused by a process started at another instant) *and* no live process left of COMMAND,
//! its group and its cgroup; until then, or on any other kernel, only the lock's expiry on the
//! store's clock frees it.
//!
//! Invariant: **a lock is taken before its expiry only from processes the kernel proved gone.**
//! Every process that acts under the hold (the supervisor that renews and releases it, the
//! guard, COMMAND and everything it started) is dead when [`ProcessBinding::gone`] answers
//! true: a dead process sends nothing more, and a request it sent before it died is either a
//! conditional write on the lock's record with the ETag it knew, which the taker's write has
//! replaced, or its own work, which the lock never fenced (COMMAND's files, `run --lock`'s
//! checkpoints, its owner's): what a late write must not overwrite is written fenced
//! (`BANKLEASE_LOCK_TOKEN`, `lock put --token`), as across hosts. Any doubt — a
//! `/proc` or a cgroup that cannot be read, another boot or namespace, a process that may be
//! ours — answers false.
//!
//! Invariant: **nor after it, while its tree runs here.** Past the lock's expiry, a waiter on
//! the same kernel still does not take it while COMMAND or a process of its cgroup lives
//! ([`ProcessBinding::lingering`]): supervisor and guard killed together (`pkill -9`) leave
//! what COMMAND started out of anyone's reach but the kernel's. A waiter on another host
//! cannot see them; fenced writes (`BANKLEASE_LOCK_TOKEN`, `lock put`) are what hold there.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::process::{
    dead_zombie, group_gone, group_member, stat_status, ProcessHere, ProcessStamp, Status,
};

/// The processes a holding lives by, as the kernel that runs them names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessBinding {
    /// The supervisor's boot, pid and time namespaces and start time.
    #[serde(flatten)]
    pub stamp: ProcessStamp,
    /// The supervisor: the process that renews and releases the hold.
    pub pid: u32,
    /// COMMAND's process group.
    pub group: u32,
    /// COMMAND itself, which may leave the group (`timeout`, `setsid`), and its start time.
    pub command: u32,
    /// COMMAND's start time, in clock ticks after boot.
    pub command_start_ticks: u64,
    /// The start time of the group's leader (the guard), when it was read: a process with the
    /// group's pid and another start time proves the group gone (the kernel never gives a pid
    /// that is still some group's id to a new process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_start_ticks: Option<u64>,
    /// The cgroup that holds COMMAND's whole tree, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<TreeCgroup>,
    /// Without a cgroup: the file the guard writes once it has proved the tree it holds empty
    /// after its supervisor died (nothing else can name the tree then). Believed only as a
    /// regular file of the supervisor's user (`uid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<PathBuf>,
    /// The supervisor's effective user id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

/// What [`crate::lock::Lock::bind_to_processes`] binds a holding to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processes {
    /// COMMAND's process group.
    pub group: u32,
    /// COMMAND.
    pub command: u32,
    /// The cgroup that holds COMMAND's tree, if any.
    pub cgroup: Option<PathBuf>,
    /// The file the guard writes once the tree is proved gone (after the supervisor died).
    pub done: Option<PathBuf>,
    /// COMMAND's start time (clock ticks after boot), when its starter read it: COMMAND may
    /// have exited by the time the binding is made (`sh -c 'daemon &'`).
    pub command_start_ticks: Option<u64>,
    /// Whether a waiter on this host may take the lock as soon as all are proved gone (`lock
    /// run`, `run --lock`); otherwise the binding serves only the checks that need no early
    /// takeover: the holder-only rule and the wait past expiry (`--no-same-host-handoff`).
    pub handoff: bool,
}

/// The cgroup v2 that holds COMMAND's tree, by its path as the supervisor saw it and by the ids
/// (inodes) of it and of its parent: cgroup ids are never reused within a boot, so a reader
/// whose view of the hierarchy differs (another mount or cgroup namespace, another mount point)
/// is told apart, and judges nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeCgroup {
    /// Its directory.
    pub path: PathBuf,
    /// Its inode: the cgroup's id.
    pub id: u64,
    /// Its parent directory's inode.
    pub parent_id: u64,
}

/// What this kernel says of a tree's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    /// No live process in it (or it was removed: only an empty cgroup can be).
    Gone,
    /// This process of it lives.
    Lives(u32),
    /// It cannot be judged here.
    Doubt,
}

impl TreeCgroup {
    /// The cgroup at `path`, named from this process; `None` where it cannot be.
    pub fn of_this_process(path: &Path) -> Option<Self> {
        Some(Self {
            path: path.to_owned(),
            id: std::fs::metadata(path).ok()?.ino(),
            parent_id: std::fs::metadata(path.parent()?).ok()?.ino(),
        })
    }

    fn judge(&self) -> Tree {
        let same_parent = || {
            self.path
                .parent()
                .and_then(|p| std::fs::metadata(p).ok())
                .is_some_and(|m| m.ino() == self.parent_id)
        };
        match std::fs::metadata(&self.path) {
            Ok(m) if m.ino() == self.id => {
                // `populated` counts the cgroups below it too (a nested `lock run`'s, one a
                // process of the tree made or moved into): `cgroup.procs` lists its own only.
                let Ok(events) = std::fs::read_to_string(self.path.join("cgroup.events")) else {
                    return Tree::Doubt;
                };
                match events.lines().find_map(|l| l.strip_prefix("populated ")) {
                    Some("0") => Tree::Gone,
                    Some(_) => Tree::Lives(live_in(&self.path).unwrap_or(0)),
                    None => Tree::Doubt,
                }
            }
            // Another cgroup at that path, or none, in the same parent: ours was removed, which
            // only an empty cgroup can be. Elsewhere, this reader sees another hierarchy.
            Ok(_) => {
                if same_parent() {
                    Tree::Gone
                } else {
                    Tree::Doubt
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && same_parent() => Tree::Gone,
            Err(_) => Tree::Doubt,
        }
    }
}

/// A live process of the cgroup at `dir` or of one below it (a bounded walk: a cgroup tree
/// has at most `cgroup.max.descendants` cgroups), to name in a message.
fn live_in(dir: &Path) -> Option<u32> {
    let mut dirs = vec![dir.to_owned()];
    let mut looked = 0;
    while let Some(dir) = dirs.pop() {
        looked += 1;
        if looked > 10_000 {
            return None;
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let live = procs
            .lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .find(|&pid| match stat_status(pid) {
                Status::Found(s) => !s.zombie || !dead_zombie(pid),
                Status::Gone => false,
                Status::Unreadable => true,
            });
        if live.is_some() {
            return live;
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    None
}

/// Whether `dir` is named as the directory of a guard's word (`banklease-tree-…`).
fn is_word_dir(dir: &std::path::Path) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("banklease-tree-"))
}

impl ProcessBinding {
    /// This process as the supervisor of `to`'s COMMAND; `None` where the kernel cannot name
    /// them (not Linux, no `/proc` of our own, COMMAND already gone, a cgroup that cannot be
    /// read). COMMAND's start time is read now: the binding still names it once it exited.
    pub fn of_this_process(to: &Processes) -> Option<Self> {
        let stamp = ProcessStamp::this_process()?;
        let command_start_ticks = match (to.command_start_ticks, stat_status(to.command)) {
            (Some(ticks), _) => ticks,
            (None, Status::Found(s)) if !s.zombie => s.start_ticks,
            _ => return None,
        };
        let cgroup = match &to.cgroup {
            Some(path) => Some(TreeCgroup::of_this_process(path)?),
            None => None,
        };
        let group_start_ticks = match stat_status(to.group) {
            Status::Found(s) => Some(s.start_ticks),
            _ => None,
        };
        Some(Self {
            stamp,
            pid: std::process::id(),
            group: to.group,
            command: to.command,
            command_start_ticks,
            group_start_ticks,
            cgroup,
            done: to.done.clone(),
            uid: Some(rustix::process::geteuid().as_raw()),
        })
    }

    /// The binding stamped anew by this process (at each write: a process restored elsewhere
    /// by CRIU names its new boot).
    pub(crate) fn restamped(&self) -> Option<Self> {
        Some(Self {
            stamp: ProcessStamp::this_process()?,
            ..self.clone()
        })
    }

    /// Whether this host's kernel can judge the binding: the same boot, the same pid and time
    /// namespaces.
    pub fn local(&self) -> bool {
        self.stamp.is_here()
    }

    /// Whether the supervisor is proved gone on this kernel. Alone it frees nothing: it says
    /// when to look again (a release is followed by the supervisor's exit).
    pub fn supervisor_gone(&self) -> bool {
        matches!(
            ProcessStamp::here(Some(&self.stamp), self.pid),
            ProcessHere::Exited | ProcessHere::PidReused
        )
    }

    /// Whether every process of the holding is proved gone on this kernel: the supervisor,
    /// COMMAND, every process of COMMAND's group and of its cgroup. See the [module
    /// documentation](self).
    pub fn gone(&self) -> bool {
        // Cheapest first: the group's may be two full looks at `/proc`.
        self.supervisor_gone()
            && self.command_gone()
            && self.tree_gone()
            && (self.group_reused() || group_gone(self.group))
    }

    /// The whole tree proved gone: the guard said it proved it empty (it had no child left),
    /// and its cgroup, if it has one, has no live process (or was removed). An empty cgroup
    /// alone proves nothing: a process of the tree can move itself into its parent's (a
    /// user's processes can write that `cgroup.procs`), where only the guard, its subreaper,
    /// still sees it; with the guard killed too, nothing does, and the lock runs to its expiry.
    /// A record of an older version names no word: its cgroup, or else its group and COMMAND,
    /// are all it knows of.
    fn tree_gone(&self) -> bool {
        // Made by the guard (create-new, no symlink followed) as the supervisor's user: a file
        // anyone could have put there proves nothing. In its own directory (since the word
        // moved into one), that directory is the user's too, and no one else may write in it:
        // a name freed there cannot be taken by another user.
        let said = |done: &std::path::Path| {
            let file = std::fs::symlink_metadata(done)
                .is_ok_and(|m| m.file_type().is_file() && Some(m.uid()) == self.uid);
            let dir_ok = match done.parent().filter(|d| is_word_dir(d)) {
                Some(dir) => std::fs::symlink_metadata(dir).is_ok_and(|m| {
                    m.is_dir() && Some(m.uid()) == self.uid && m.mode() & 0o022 == 0
                }),
                None => true,
            };
            file && dir_ok
        };
        match (&self.cgroup, &self.done) {
            (Some(cgroup), Some(done)) => said(done) && cgroup.judge() == Tree::Gone,
            (Some(cgroup), None) => cgroup.judge() == Tree::Gone,
            (None, Some(done)) => said(done),
            (None, None) => true,
        }
    }

    /// Remove the guard's word that the tree is gone (the file and its directory) once the
    /// holding it vouched for was replaced: nobody reads it again. Only what a guard of this
    /// user made: a regular file `done` in a directory named `banklease-tree-…` of `/dev/shm`
    /// or the temporary directory, both this user's; nothing is followed through a link (the
    /// record's path is the bank's, whoever wrote it). Best effort: one left is swept later.
    pub(crate) fn forget_word(&self) {
        let Some(done) = &self.done else {
            return;
        };
        let Some(dir) = done.parent().filter(|d| is_word_dir(d)) else {
            return;
        };
        let base = dir.parent();
        let known = base == Some(std::path::Path::new("/dev/shm"))
            || base == Some(std::env::temp_dir().as_path());
        if !known || done.file_name() != Some(std::ffi::OsStr::new("done")) {
            return;
        }
        let me = rustix::process::geteuid().as_raw();
        let ours = |path: &std::path::Path, dir: bool| {
            std::fs::symlink_metadata(path).is_ok_and(|m| {
                m.uid() == me
                    && if dir {
                        m.is_dir()
                    } else {
                        m.file_type().is_file()
                    }
            })
        };
        if self.uid != Some(me) || !ours(dir, true) || !ours(done, false) {
            return;
        }
        let _ = std::fs::remove_file(done);
        if let Err(e) = std::fs::remove_dir(dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot remove the guard's word");
        }
    }

    /// A process of the holding's tree that still runs on this kernel — COMMAND, or one of its
    /// cgroup — for a holding past its expiry: the lock is not taken beside it. `None` when none
    /// does, or this kernel cannot judge (another host or namespace, a cgroup hierarchy seen
    /// otherwise: then the expiry alone frees the lock, as on another host). The supervisor and the guard are not asked
    /// for: past the deadline they act no more (the guard has stopped the tree).
    pub fn lingering(&self) -> Option<u32> {
        // A cgroup's id means one cgroup for a whole boot, whatever the reader's time or mount
        // namespace (a holder restored into a time namespace is judged by it too).
        if !self.stamp.same_boot() {
            return None;
        }
        if let Some(Tree::Lives(pid)) = self.cgroup.as_ref().map(TreeCgroup::judge) {
            return Some(pid);
        }
        if !self.local() {
            return None;
        }
        if !self.command_gone() {
            return Some(self.command);
        }
        // Its leader is the guard, which outlives an expired holding whose supervisor is
        // stopped, and acts under it no more (it stopped the tree at the deadline). Behind a
        // `/proc` that hides processes the group itself is named while any member lives, the
        // guard included.
        if self.group_reused() {
            return None;
        }
        group_member(self.group, Some(self.group))
    }

    /// The group's pid belongs to a process started at another instant than its leader: the
    /// group is gone, whatever now uses that pid as its group.
    fn group_reused(&self) -> bool {
        matches!(
            (self.group_start_ticks, stat_status(self.group)),
            (Some(then), Status::Found(s)) if s.start_ticks != then
        )
    }

    /// COMMAND proved gone: no such process, a dead zombie, or its pid is now another
    /// process's.
    fn command_gone(&self) -> bool {
        match stat_status(self.command) {
            Status::Gone => true,
            Status::Found(s) => {
                s.start_ticks != self.command_start_ticks || dead_zombie(self.command)
            }
            Status::Unreadable => false,
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    fn to(group: u32, command: u32) -> Processes {
        Processes {
            group,
            command,
            cgroup: None,
            done: None,
            command_start_ticks: None,
            handoff: true,
        }
    }

    fn start_ticks(pid: u32) -> u64 {
        match stat_status(pid) {
            Status::Found(s) => s.start_ticks,
            _ => panic!("no process {pid}"),
        }
    }

    fn zombie(pid: u32) -> bool {
        matches!(stat_status(pid), Status::Found(s) if s.zombie)
    }

    /// A child leading a group of its own, with the binding that names it as the supervisor.
    fn child_leading_a_group() -> (std::process::Child, ProcessBinding) {
        let child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let mut binding = ProcessBinding::of_this_process(&to(child.id(), child.id())).unwrap();
        binding.pid = child.id();
        binding.stamp.start_ticks = start_ticks(child.id());
        (child, binding)
    }

    #[test]
    fn a_living_supervisor_or_group_is_never_gone() {
        let me =
            ProcessBinding::of_this_process(&to(std::process::id(), std::process::id())).unwrap();
        assert!(me.local());
        assert!(!me.supervisor_gone());
        assert!(!me.gone());

        let (mut child, binding) = child_leading_a_group();
        assert!(!binding.gone(), "a running group");
        // A supervisor that is gone, and a group still alive: not gone.
        let dead_supervisor = ProcessBinding {
            pid: u32::MAX / 2,
            ..binding.clone()
        };
        assert!(dead_supervisor.supervisor_gone());
        assert!(!dead_supervisor.gone());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_killed_group_is_gone_as_dead_zombies_and_once_reaped() {
        let (mut child, binding) = child_leading_a_group();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        for round in 0.. {
            if zombie(child.id()) {
                break;
            }
            assert!(round < 1000, "never a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Not yet reaped: a zombie whose threads have all exited acts no more.
        assert!(binding.supervisor_gone(), "a zombie supervisor");
        assert!(binding.gone(), "a dead zombie in the group");
        child.wait().unwrap();
        assert!(binding.gone(), "reaped");
    }

    #[test]
    fn a_zombie_beside_a_live_member_keeps_the_group() {
        let (mut leader, binding) = child_leading_a_group();
        let mut member = Command::new("sleep")
            .arg("30")
            .process_group(leader.id() as i32)
            .spawn()
            .unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(leader.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        for round in 0.. {
            if zombie(leader.id()) {
                break;
            }
            assert!(round < 1000, "never a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!binding.gone(), "a live member beside the zombie leader");
        member.kill().unwrap();
        member.wait().unwrap();
        assert!(binding.gone(), "only the dead zombie is left");
        leader.wait().unwrap();
        assert!(binding.gone());
    }

    #[test]
    fn a_command_that_left_the_group_keeps_the_holding() {
        let (mut left, _) = child_leading_a_group();
        let (mut group, mut binding) = child_leading_a_group();
        // Supervisor gone, group gone, COMMAND (in a group of its own) alive.
        binding.command = left.id();
        binding.command_start_ticks = start_ticks(left.id());
        group.kill().unwrap();
        group.wait().unwrap();
        assert!(binding.supervisor_gone());
        assert!(!binding.gone(), "COMMAND lives outside the group");
        left.kill().unwrap();
        left.wait().unwrap();
        assert!(binding.gone());
    }

    #[test]
    fn a_reused_pid_or_another_kernel_is_told_apart() {
        let me =
            ProcessBinding::of_this_process(&to(std::process::id(), std::process::id())).unwrap();
        let mut reused = ProcessBinding {
            group: u32::MAX / 2,
            ..me.clone()
        };
        reused.stamp.start_ticks += 1;
        reused.command_start_ticks += 1;
        assert!(reused.supervisor_gone(), "another process under our pid");
        assert!(reused.gone());
        let mut other_boot = ProcessBinding {
            pid: u32::MAX / 2,
            group: u32::MAX / 2,
            ..me.clone()
        };
        other_boot.stamp.boot_id = "another-boot".to_owned();
        let mut other_ns = other_boot.clone();
        other_ns.stamp = me.stamp.clone();
        other_ns.stamp.pid_ns += 1;
        for other in [other_boot, other_ns] {
            assert!(!other.local());
            assert!(!other.supervisor_gone() && !other.gone(), "{other:?}");
        }
    }

    /// The cgroup judged as a reader finds it: a live member, none, removed (its parent the
    /// same), or a parent that is not the one recorded (another view of the hierarchy). On a
    /// plain directory standing in for cgroupfs.
    #[test]
    fn a_trees_cgroup_is_judged_by_its_members_and_its_ids() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("banklease-1-0");
        std::fs::create_dir(&dir).unwrap();
        let procs = dir.join("cgroup.procs");
        let events = dir.join("cgroup.events");
        let cgroup = TreeCgroup::of_this_process(&dir).unwrap();
        std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
        std::fs::write(&procs, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(cgroup.judge(), Tree::Lives(std::process::id()));
        // Populated through a cgroup below it (a nested `lock run`'s): its own list is empty.
        std::fs::write(&procs, "").unwrap();
        std::fs::create_dir(dir.join("inner")).unwrap();
        std::fs::write(
            dir.join("inner/cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        assert_eq!(cgroup.judge(), Tree::Lives(std::process::id()), "nested");
        std::fs::write(&events, "populated 0\nfrozen 0\n").unwrap();
        assert_eq!(cgroup.judge(), Tree::Gone, "empty");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(cgroup.judge(), Tree::Gone, "removed");
        std::fs::create_dir(&dir).unwrap();
        // (A cgroup made anew at its path has another id; a plain directory may reuse the inode.)
        let elsewhere = TreeCgroup {
            parent_id: cgroup.parent_id + 1,
            id: cgroup.id + 1,
            ..cgroup.clone()
        };
        assert_eq!(
            elsewhere.judge(),
            Tree::Doubt,
            "another view of the hierarchy"
        );
        let mut binding =
            ProcessBinding::of_this_process(&to(std::process::id(), std::process::id())).unwrap();
        binding.cgroup = Some(TreeCgroup::of_this_process(&dir).unwrap());
        std::fs::write(dir.join("cgroup.events"), "populated 1\n").unwrap();
        std::fs::write(
            dir.join("cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        assert_eq!(binding.lingering(), Some(std::process::id()));
    }

    /// A group whose leader's pid now belongs to a process started later is gone: a new group
    /// led from that pid (a pipeline, a master and its workers) holds no waiter.
    #[test]
    fn a_group_whose_leaders_pid_was_reused_holds_no_waiter() {
        let (mut child, mut binding) = child_leading_a_group();
        binding.command = std::process::id();
        binding.command_start_ticks = start_ticks(std::process::id()) + 1;
        binding.group_start_ticks = Some(start_ticks(child.id()));
        assert_eq!(
            binding.lingering(),
            None,
            "its leader is the guard: not waited for"
        );
        let mut member = Command::new("sleep")
            .arg("30")
            .process_group(child.id() as i32)
            .spawn()
            .unwrap();
        assert_eq!(binding.lingering(), Some(member.id()), "a live member");
        binding.group_start_ticks = Some(start_ticks(child.id()) + 1);
        assert_eq!(
            binding.lingering(),
            None,
            "the pid is another process's now"
        );
        member.kill().unwrap();
        member.wait().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Without a cgroup, the guard's word that the tree is gone is a regular file of the
    /// supervisor's user: a symlink, or a file of another user, proves nothing.
    #[test]
    fn the_guards_word_counts_only_as_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let done = dir.path().join("banklease-tree-1-0.done");
        let mut b =
            ProcessBinding::of_this_process(&to(std::process::id(), std::process::id())).unwrap();
        b.done = Some(done.clone());
        assert!(!b.tree_gone(), "no word yet");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &done).unwrap();
        std::fs::write(dir.path().join("elsewhere"), "").unwrap();
        assert!(!b.tree_gone(), "a symlink");
        std::fs::remove_file(&done).unwrap();
        std::fs::write(&done, "").unwrap();
        assert!(b.tree_gone(), "the guard's file");
        b.uid = b.uid.map(|u| u.wrapping_add(1));
        assert!(!b.tree_gone(), "another user's file");
    }

    #[test]
    fn the_record_names_the_binding_flat() {
        let b = ProcessBinding::of_this_process(&to(7, std::process::id())).unwrap();
        let json = serde_json::to_value(&b).unwrap();
        for field in [
            "boot_id",
            "pid_ns",
            "start_ticks",
            "pid",
            "group",
            "command",
        ] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(serde_json::from_value::<ProcessBinding>(json).unwrap(), b);
    }
}
