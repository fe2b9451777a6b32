//! Which process a lease names, precisely enough for a human on some host to be told whether
//! it is a process of *this* host and whether it still runs ([`ProcessStamp`], [`ProcessHere`]).
//!
//! A hostname alone proves nothing (cloned machines share one) and a pid is reused. So a lease
//! records, beside `host` and `pid`, the kernel's boot id (random at every boot: equal only on
//! the same machine since the same boot), the pid namespace (a pid means one process only
//! inside it) and the process's start time in clock ticks after boot (a reused pid has
//! another). Linux only (`/proc`); elsewhere nothing is recorded and nothing is claimed.
//!
//! **Invariant:** for an owner lease this is advice to a human only: no judgement of a lease,
//! and nothing the GC collects, reads it. A named lock held by `lock run` is bound to its
//! processes the same way, and there the kernel's proof that they are all gone frees the lock
//! ([`crate::lock::process::ProcessBinding`]; the rule is stated there).

use std::os::unix::fs::MetadataExt;

use serde::{Deserialize, Serialize};

/// Where and when a process was started, as its lease records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStamp {
    /// `/proc/sys/kernel/random/boot_id` of the process's host.
    pub boot_id: String,
    /// The inode of the process's pid namespace (`/proc/self/ns/pid`).
    pub pid_ns: u64,
    /// The inode of the process's time namespace (`/proc/self/ns/time`): `/proc` shows start
    /// times shifted by the reader's boot-time offset, so they compare only within one. Absent
    /// on kernels without time namespaces, and from stamps of older versions, which then prove
    /// nothing where the reader has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ns: Option<u64>,
    /// When the process started, in clock ticks after boot (`/proc/<pid>/stat`, field 22).
    pub start_ticks: u64,
}

/// What this host can tell of a process a lease names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessHere {
    /// The lease proves nothing about this host: it records no stamp, or one of another boot
    /// (another machine, or this one before a reboot) or another pid namespace.
    Unproven {
        /// Whether a process with that pid runs here, in this pid namespace (`None`: cannot be
        /// read, or not Linux). Not proof that it is the lease's.
        pid_running: Option<bool>,
    },
    /// It is a process of this host, since this boot, and it has exited (no process has its
    /// pid, or one that is a zombie).
    Exited,
    /// It is a process of this host and it still runs (same pid, same start time).
    Running,
    /// It is a process of this host and it has exited: its pid now belongs to a process
    /// started later.
    PidReused,
}

impl ProcessStamp {
    /// Whether the stamp was made on this host's kernel since this boot, in this pid namespace
    /// and this time namespace: only then do its pids and start times name processes here.
    pub fn is_here(&self) -> bool {
        // A kernel without time namespaces (before 5.6) has but one: `None` on both sides.
        Some(self.boot_id.as_str()) == boot_id().as_deref()
            && Some(self.pid_ns) == pid_ns()
            && self.time_ns == time_ns()
    }

    /// Whether the stamp was made on this host's kernel since this boot (whatever the
    /// namespaces): cgroup ids mean the same then.
    pub fn same_boot(&self) -> bool {
        Some(self.boot_id.as_str()) == boot_id().as_deref()
    }

    /// The stamp of this process, read now (a process restored on another host by CRIU gets
    /// that host's boot); `None` where `/proc` does not say.
    pub fn this_process() -> Option<ProcessStamp> {
        Some(ProcessStamp {
            boot_id: boot_id()?,
            pid_ns: pid_ns()?,
            time_ns: time_ns(),
            start_ticks: proc_stat(std::process::id())?.start_ticks,
        })
    }

    /// What this host can tell of process `pid`, stamped `stamp` (if at all) by its lease.
    pub fn here(stamp: Option<&ProcessStamp>, pid: u32) -> ProcessHere {
        let ours = stamp.is_some_and(ProcessStamp::is_here);
        let Some(stamp) = stamp.filter(|_| ours) else {
            return ProcessHere::Unproven {
                pid_running: match stat_status(pid) {
                    Status::Unreadable => None,
                    Status::Gone => Some(false),
                    Status::Found(s) => Some(!s.zombie),
                },
            };
        };
        match stat_status(pid) {
            Status::Gone => ProcessHere::Exited,
            Status::Found(s) if s.start_ticks != stamp.start_ticks => ProcessHere::PidReused,
            Status::Found(s) if s.zombie => ProcessHere::Exited,
            Status::Found(_) => ProcessHere::Running,
            // /proc answers for this process but not for that one: nothing is claimed.
            Status::Unreadable => ProcessHere::Unproven { pid_running: None },
        }
    }
}

/// What `/proc/<pid>/stat` says of a process, read after the command's last `)` (it may hold
/// spaces and parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The state letter (`R`, `S`, `T` stopped, `Z` zombie…; field 3).
    pub state: char,
    /// A zombie (or dead): it exited and waits to be reaped.
    pub zombie: bool,
    /// The parent's pid (field 4).
    pub parent: u32,
    /// The process group (field 5).
    pub group: u32,
    /// When it started, in clock ticks after boot (field 22).
    pub start_ticks: u64,
}

pub(crate) enum Status {
    Found(ProcStat),
    /// No such process (`/proc` answers for this process, not for that one).
    Gone,
    Unreadable,
}

pub(crate) fn stat_status(pid: u32) -> Status {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => parse_stat(&text).map_or(Status::Unreadable, Status::Found),
        // A `/proc` mounted with `hidepid` hides other users' processes as if they were gone:
        // only the kernel's own "no such process" says so.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && no_such_process(pid) => Status::Gone,
        Err(_) => Status::Unreadable,
    }
}

/// Whether the kernel says no process has this pid (`kill(pid, 0)` fails with ESRCH).
#[cfg(target_os = "linux")]
fn no_such_process(pid: u32) -> bool {
    use rustix::process::{test_kill_process, Pid};
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|pid| test_kill_process(pid) == Err(rustix::io::Errno::SRCH))
}

#[cfg(not(target_os = "linux"))]
fn no_such_process(_pid: u32) -> bool {
    false
}

/// `/proc/<pid>/stat` read now, when it can be: `None` for a process gone or unreadable.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    match stat_status(pid) {
        Status::Found(s) => Some(s),
        _ => None,
    }
}

/// Fields after the command (which may hold spaces and parentheses, so split after the last
/// `)`): the state is field 3, the start time field 22.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    Some(ProcStat {
        state,
        zombie: matches!(state, 'Z' | 'X' | 'x'),
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Read each time: cheap, and a process restored elsewhere (CRIU) is on another boot.
fn boot_id() -> Option<String> {
    if !proc_is_ours() {
        return None;
    }
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

/// The name of this process's boot clock: what makes two readings of `CLOCK_BOOTTIME`
/// comparable, its boot and the boot-time offset of its time namespace,
/// `<boot id without dashes>-b<seconds>.<nanoseconds>` (`-b0.000000000` on kernels without time
/// namespaces, where every process shares one clock). Not the namespace's inode: the kernel
/// reuses it for a later namespace with other offsets, whose readings a record of the first
/// would be compared with. `None` where the offsets cannot be told (a process that entered a
/// new time namespace for its children only: `timens_offsets` shows the children's).
pub(crate) fn boot_clock_name() -> Option<String> {
    let boot = boot_id()?.replace('-', "");
    if time_ns() != ns_inode("time_for_children") {
        return None;
    }
    let offsets = match std::fs::read_to_string("/proc/self/timens_offsets") {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(_) => return None,
    };
    let (secs, nanos) = boottime_offset(&offsets)?;
    Some(format!("{boot}-b{secs}.{nanos:09}"))
}

/// The boot-time offset in `/proc/self/timens_offsets` (`boottime <secs> <nanos>`, or the
/// clock's number, 7, on early kernels); zero when the file is empty or absent (no time
/// namespaces). `None` when it cannot be read.
fn boottime_offset(text: &str) -> Option<(i64, u32)> {
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let clock = fields.next()?;
        if clock == "boottime" || clock == "7" {
            let secs = fields.next()?.parse().ok()?;
            let nanos = fields.next()?.parse().ok()?;
            return Some((secs, nanos));
        }
    }
    Some((0, 0))
}

fn pid_ns() -> Option<u64> {
    if !proc_is_ours() {
        return None;
    }
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// The time namespace's inode; `None` on kernels without time namespaces (before 5.6), whose
/// stamps then prove nothing here.
fn time_ns() -> Option<u64> {
    ns_inode("time")
}

/// The inode of this process's namespace of `kind` (`/proc/self/ns/KIND`).
fn ns_inode(kind: &str) -> Option<u64> {
    if !proc_is_ours() {
        return None;
    }
    std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// Whether `/proc` is this process's pid namespace's: in a namespace without a `/proc` of its
/// own (`unshare -p` without `--mount-proc`), `/proc/PID` would name other processes.
fn proc_is_ours() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
        == Some(std::process::id())
}

/// Whether process `pid` can still act: it is there and not a dead zombie ([`dead_zombie`]: a
/// thread group leader that exited before its threads reads as a zombie while they run).
pub fn process_acts(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|s| !s.zombie || !dead_zombie(pid))
}

/// Whether process `pid` is a zombie whose threads have all exited: dead, only waiting to be
/// reaped. (A thread group leader that exited before its other threads also reads as a zombie;
/// its `task/` still lists them.)
pub(crate) fn dead_zombie(pid: u32) -> bool {
    matches!(stat_status(pid), Status::Found(s) if s.zombie)
        && std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() == 1)
}

/// Whether no live process is left in process group `group`: the kernel finds none
/// (`kill(-group, 0)` fails with ESRCH), or every member is a dead zombie (a killed group whose
/// members nothing has reaped yet), seen alike by two full looks at `/proc`, and only where
/// `/proc` hides no process. Two looks, because one is not a snapshot: a member that forks as
/// the look passes and then dies leaves its child unseen in one look, never in the next. Any
/// doubt answers false.
#[cfg(target_os = "linux")]
pub(crate) fn group_gone(group: u32) -> bool {
    use rustix::process::{test_kill_process_group, Pid};
    let Some(pgid) = i32::try_from(group).ok().and_then(Pid::from_raw) else {
        return false;
    };
    if test_kill_process_group(pgid) == Err(rustix::io::Errno::SRCH) {
        return true;
    }
    if proc_hides_processes() {
        return false;
    }
    match (dead_members(group), dead_members(group)) {
        (Some(first), Some(second)) => !first.is_empty() && first == second,
        _ => false,
    }
}

/// A live process of `group` other than `except` (a dead zombie is not live); `None` when the
/// kernel finds none, or every other member is a dead zombie. Where `/proc` hides processes or
/// cannot be read, the group itself is named: what lives in it cannot be told apart.
#[cfg(target_os = "linux")]
pub(crate) fn group_member(group: u32, except: Option<u32>) -> Option<u32> {
    use rustix::process::{test_kill_process_group, Pid};
    let pgid = i32::try_from(group).ok().and_then(Pid::from_raw)?;
    if test_kill_process_group(pgid) == Err(rustix::io::Errno::SRCH) {
        return None;
    }
    if proc_hides_processes() {
        return Some(group);
    }
    let Some(pids) = proc_pids() else {
        return Some(group);
    };
    for pid in pids {
        let Ok(pid) = pid else {
            return Some(group);
        };
        if let Status::Found(s) = stat_status(pid) {
            if s.group == group && Some(pid) != except && !dead_zombie(pid) {
                return Some(pid);
            }
        }
    }
    None
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn group_member(group: u32, _except: Option<u32>) -> Option<u32> {
    Some(group)
}

/// The pids `/proc` lists, in its order; an entry it could not read is an error.
#[cfg(target_os = "linux")]
fn proc_pids() -> Option<impl Iterator<Item = std::io::Result<u32>>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(entries.filter_map(|entry| {
        match entry {
            Ok(e) => e
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .map(Ok),
            Err(e) => Some(Err(e)),
        }
    }))
}

/// The members of `group`, when every one is a dead zombie; `None` when one lives or cannot be
/// read. In pid order (`/proc` lists in it).
#[cfg(target_os = "linux")]
fn dead_members(group: u32) -> Option<Vec<u32>> {
    let mut members = Vec::new();
    for pid in proc_pids()? {
        let pid = pid.ok()?;
        match stat_status(pid) {
            Status::Found(s) if s.group == group => {
                if !dead_zombie(pid) {
                    return None;
                }
                members.push(pid);
            }
            Status::Found(_) | Status::Gone => {}
            Status::Unreadable => return None,
        }
    }
    Some(members)
}

/// Whether `/proc` is mounted to hide processes (`hidepid`, `subset=pid`), or cannot be told:
/// then a look at it proves no absence.
#[cfg(target_os = "linux")]
pub fn proc_hides_processes() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    hides_processes(&info)
}

#[cfg(not(target_os = "linux"))]
pub fn proc_hides_processes() -> bool {
    true
}

/// [`proc_hides_processes`] on the text of `/proc/self/mountinfo`.
fn hides_processes(info: &str) -> bool {
    // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - TYPE SOURCE SUPER_OPTIONS`. The mount
    // that takes effect at `/proc` is the last one there (one stacked over another, as
    // systemd's `ProtectProc=` and a private namespace's `mount -o hidepid=2` make); one that
    // is not a proc is doubt.
    let Some(line) = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some("/proc"))
        .filter(|l| l.contains(" - proc "))
    else {
        return true;
    };
    let options = line.rsplit(' ').next().unwrap_or_default();
    options.split(',').any(|o| {
        (o.starts_with("hidepid=") && o != "hidepid=0" && o != "hidepid=off")
            || o.starts_with("subset=")
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn group_gone(_group: u32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two time namespaces with other boot-time offsets are other clocks, whatever their
    /// inodes; the same offsets are the same clock.
    #[test]
    fn a_boot_clock_is_named_by_its_boottime_offset() {
        let host = "monotonic           0         0\nboottime            0         0\n";
        let ahead = "monotonic           0         0\nboottime           50         0\n";
        let early = "1 0 0\n7 -3600 500\n";
        assert_eq!(boottime_offset(host), Some((0, 0)));
        assert_eq!(boottime_offset(ahead), Some((50, 0)));
        assert_eq!(boottime_offset(early), Some((-3600, 500)));
        assert_eq!(boottime_offset(""), Some((0, 0)), "no time namespaces");
        assert_eq!(boottime_offset("boottime x 0\n"), None);
    }

    #[test]
    fn the_proc_mount_that_takes_effect_is_the_last_one_at_proc() {
        let plain = "22 27 0:21 / /proc rw,relatime - proc proc rw\n";
        let hidden = "90 22 0:50 / /proc rw,relatime - proc proc rw,hidepid=invisible\n";
        let other = "91 90 0:51 / /proc rw - tmpfs tmpfs rw\n";
        assert!(!hides_processes(plain));
        assert!(
            hides_processes(&format!("{plain}{hidden}")),
            "hidepid stacked over"
        );
        assert!(
            !hides_processes(&format!("{hidden}{plain}")),
            "a plain /proc over it"
        );
        assert!(
            hides_processes(&format!("{plain}{other}")),
            "not a proc: doubt"
        );
        assert!(hides_processes(""), "no /proc: doubt");
    }

    #[test]
    fn a_stamp_of_another_time_namespace_or_none_proves_nothing() {
        let Some(me) = ProcessStamp::this_process() else {
            return; // not Linux
        };
        assert!(me.is_here());
        let pid = std::process::id();
        for time_ns in [None, me.time_ns.map(|t| t + 1)] {
            let other = ProcessStamp {
                time_ns,
                ..me.clone()
            };
            assert!(!other.is_here(), "{other:?}");
            assert!(matches!(
                ProcessStamp::here(Some(&other), pid),
                ProcessHere::Unproven { .. }
            ));
        }
    }

    #[test]
    fn a_stat_line_is_read_after_the_last_parenthesis() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 \
                    50 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.start_ticks, s.zombie), (987654, false));
        assert!(parse_stat(&line.replace(") S", ") Z")).unwrap().zombie);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_runs_here_and_a_later_one_is_a_reused_pid() {
        let Some(me) = ProcessStamp::this_process() else {
            return; // not Linux
        };
        let pid = std::process::id();
        assert_eq!(ProcessStamp::here(Some(&me), pid), ProcessHere::Running);
        let earlier = ProcessStamp {
            start_ticks: me.start_ticks.wrapping_sub(1),
            ..me.clone()
        };
        assert_eq!(
            ProcessStamp::here(Some(&earlier), pid),
            ProcessHere::PidReused
        );
        let other_boot = ProcessStamp {
            boot_id: "another-boot".to_owned(),
            ..me.clone()
        };
        assert_eq!(
            ProcessStamp::here(Some(&other_boot), pid),
            ProcessHere::Unproven {
                pid_running: Some(true)
            }
        );
        assert_eq!(
            ProcessStamp::here(None, pid),
            ProcessHere::Unproven {
                pid_running: Some(true)
            }
        );
    }
}
