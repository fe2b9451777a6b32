//! A holding bound to processes of one host: proved over by that host's kernel.
//!
//! `lock run` and `run --lock` hold a lock for the life of a supervisor and of COMMAND's process
//! group. Their records name both ([`ProcessBinding`]), with what makes the names mean the same
//! processes to another reader: the kernel's boot id and the pid namespace. A waiter on the same
//! kernel may take the lock over as soon as the kernel shows the supervisor gone (exited, a
//! zombie, or its pid reused by a process started at another instant) *and* no live process
//! left in the group; until then, or on any other kernel, only the lock's expiry on the store's
//! clock frees it.
//!
//! Invariant: **a lock is taken before its expiry only from processes the kernel proved gone.**
//! Every process that acts under the hold (the supervisor that renews and releases it, COMMAND
//! and everything it started in its group, the guard) is dead when [`ProcessBinding::gone`]
//! answers true: a dead process sends nothing more, and a request it sent before it died is a
//! conditional write on the ETag it knew, which the taker's write has replaced. Any doubt — a
//! `/proc` that cannot be read, another boot or namespace, a process that may be ours — answers
//! false.

use serde::{Deserialize, Serialize};

/// The processes a holding lives by, as the kernel that runs them names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessBinding {
    /// `/proc/sys/kernel/random/boot_id` of the kernel (a random id, new at every boot).
    pub boot_id: String,
    /// The inode of the pid namespace the pids below belong to (`/proc/self/ns/pid`).
    pub pid_ns: u64,
    /// The supervisor: the process that renews and releases the hold.
    pub pid: u32,
    /// The supervisor's start time, in clock ticks since boot (field 22 of `/proc/PID/stat`),
    /// so that a reused pid is told apart.
    pub start_ticks: u64,
    /// COMMAND's process group.
    pub group: u32,
}

impl ProcessBinding {
    /// This process as the supervisor of process group `group`; `None` where the kernel cannot
    /// name them (not Linux, no `/proc`).
    pub fn of_this_process(group: u32) -> Option<Self> {
        let pid = std::process::id();
        let kernel = imp::Kernel::read()?;
        let me = imp::stat(pid)?;
        Some(Self {
            boot_id: kernel.boot_id,
            pid_ns: kernel.pid_ns,
            pid,
            start_ticks: me.start_ticks,
            group,
        })
    }

    /// Whether this host's kernel can judge the binding: the same boot, the same pid
    /// namespace.
    pub fn local(&self) -> bool {
        imp::Kernel::read().is_some_and(|k| k.boot_id == self.boot_id && k.pid_ns == self.pid_ns)
    }

    /// Whether the supervisor is gone (proved, on this kernel). Alone it frees nothing: it says
    /// when to look again (a release is followed by the supervisor's exit).
    pub fn supervisor_gone(&self) -> bool {
        self.local() && self.supervisor_gone_here()
    }

    fn supervisor_gone_here(&self) -> bool {
        match imp::stat(self.pid) {
            None => imp::no_such_process(self.pid),
            Some(s) => s.zombie || s.start_ticks != self.start_ticks,
        }
    }

    /// Whether every process of the holding is proved gone on this kernel: the supervisor, and
    /// every process of COMMAND's group. See the [module documentation](self).
    pub fn gone(&self) -> bool {
        self.local() && self.supervisor_gone_here() && imp::group_gone(self.group)
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::os::unix::fs::MetadataExt;

    use rustix::io::Errno;
    use rustix::process::Pid;

    #[derive(Clone)]
    pub(super) struct Kernel {
        pub boot_id: String,
        pub pid_ns: u64,
    }

    impl Kernel {
        /// Read once: neither the boot nor this process's pid namespace changes while it runs.
        pub(super) fn read() -> Option<Self> {
            static KERNEL: std::sync::OnceLock<Option<Kernel>> = std::sync::OnceLock::new();
            KERNEL
                .get_or_init(|| {
                    let boot_id =
                        std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
                    let pid_ns = std::fs::metadata("/proc/self/ns/pid").ok()?.ino();
                    let boot_id = boot_id.trim().to_owned();
                    (!boot_id.is_empty()).then_some(Kernel { boot_id, pid_ns })
                })
                .clone()
        }
    }

    pub(super) struct Stat {
        pub zombie: bool,
        pub group: u32,
        pub start_ticks: u64,
    }

    /// `/proc/PID/stat`, or `None` when it cannot be read (gone, or never there).
    pub(super) fn stat(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) is in parentheses and may hold anything, `)` included.
        let rest = &text[text.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields from 3 on: state is 3, the process group 5, the start time 22.
        Some(Stat {
            zombie: matches!(*fields.first()?, "Z" | "X" | "x"),
            group: fields.get(2)?.parse().ok()?,
            start_ticks: fields.get(19)?.parse().ok()?,
        })
    }

    /// Whether the kernel says no process has this pid (not merely that `/proc` was silent).
    pub(super) fn no_such_process(pid: u32) -> bool {
        let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            return false;
        };
        rustix::process::test_kill_process(pid) == Err(Errno::SRCH)
    }

    /// Whether no live process is in `group`: none at all, or only zombies.
    pub(super) fn group_gone(group: u32) -> bool {
        let Some(pgid) = i32::try_from(group).ok().and_then(Pid::from_raw) else {
            return false;
        };
        match rustix::process::test_kill_process_group(pgid) {
            Err(Errno::SRCH) => true,
            // Someone is in it (EPERM: another user's): alive unless every member is a zombie,
            // which only a full look at `/proc` can tell.
            _ => only_zombies_in(group, pgid),
        }
    }

    fn only_zombies_in(group: u32, pgid: Pid) -> bool {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        let mut members = 0usize;
        for entry in entries {
            let Ok(entry) = entry else {
                return false;
            };
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // A process that exits as we read is no member; one we cannot read may be.
            match stat(pid) {
                Some(s) if s.group == group => {
                    if !s.zombie {
                        return false;
                    }
                    members += 1;
                }
                Some(_) => {}
                None if !no_such_process(pid) => return false,
                None => {}
            }
        }
        // The kernel saw a member a moment ago; if /proc shows none now, ask it again.
        members > 0 || rustix::process::test_kill_process_group(pgid) == Err(Errno::SRCH)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) struct Kernel {
        pub boot_id: String,
        pub pid_ns: u64,
    }

    impl Kernel {
        pub(super) fn read() -> Option<Self> {
            None
        }
    }

    pub(super) struct Stat {
        pub zombie: bool,
        pub start_ticks: u64,
    }

    pub(super) fn stat(_pid: u32) -> Option<Stat> {
        None
    }

    pub(super) fn no_such_process(_pid: u32) -> bool {
        false
    }

    pub(super) fn group_gone(_group: u32) -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// A child leading a group of its own, with the binding that names it as the supervisor.
    fn child_leading_a_group() -> (std::process::Child, ProcessBinding) {
        let child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let mut binding = ProcessBinding::of_this_process(child.id()).unwrap();
        binding.pid = child.id();
        binding.start_ticks = imp::stat(child.id()).unwrap().start_ticks;
        (child, binding)
    }

    #[test]
    fn a_living_supervisor_or_group_is_never_gone() {
        let me = ProcessBinding::of_this_process(std::process::id()).unwrap();
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
    fn a_dead_supervisor_and_group_are_gone_even_as_zombies() {
        let (mut child, binding) = child_leading_a_group();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        // Not yet reaped: a zombie, which acts no more.
        for round in 0.. {
            if imp::stat(child.id()).is_some_and(|s| s.zombie) {
                break;
            }
            assert!(round < 1000, "never a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(binding.gone(), "a zombie supervisor and group");
        child.wait().unwrap();
        assert!(binding.gone(), "reaped");
    }

    #[test]
    fn a_reused_pid_or_another_kernel_is_told_apart() {
        let me = ProcessBinding::of_this_process(std::process::id()).unwrap();
        let reused = ProcessBinding {
            start_ticks: me.start_ticks + 1,
            group: u32::MAX / 2,
            ..me.clone()
        };
        assert!(reused.supervisor_gone(), "another process under our pid");
        assert!(reused.gone());
        for other in [
            ProcessBinding {
                boot_id: "another-boot".to_owned(),
                pid: u32::MAX / 2,
                group: u32::MAX / 2,
                ..me.clone()
            },
            ProcessBinding {
                pid_ns: me.pid_ns + 1,
                pid: u32::MAX / 2,
                group: u32::MAX / 2,
                ..me.clone()
            },
        ] {
            assert!(!other.local());
            assert!(!other.supervisor_gone() && !other.gone(), "{other:?}");
        }
    }
}
