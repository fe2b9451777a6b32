//! A holding bound to processes of one host: proved over by that host's kernel.
//!
//! `lock run` and `run --lock` hold a lock for the life of a supervisor and of COMMAND's process
//! group. Their records name both ([`ProcessBinding`]), with what makes the names mean the same
//! processes to another reader: the kernel's boot id, the pid namespace and the supervisor's
//! start time ([`ProcessStamp`], the stamp an owner lease records too). A waiter on the same
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

use crate::process::{dead_zombie, group_gone, stat_status, ProcessHere, ProcessStamp, Status};

/// The processes a holding lives by, as the kernel that runs them names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessBinding {
    /// The supervisor's boot, pid namespace and start time.
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
}

impl ProcessBinding {
    /// This process as the supervisor of `command`, which runs in process group `group`;
    /// `None` where the kernel cannot name them (not Linux, no `/proc` of our own, `command`
    /// already gone).
    pub fn of_this_process(group: u32, command: u32) -> Option<Self> {
        let stamp = ProcessStamp::this_process()?;
        let command_start_ticks = match stat_status(command) {
            Status::Found(s) if !s.zombie => s.start_ticks,
            _ => return None,
        };
        Some(Self {
            stamp,
            pid: std::process::id(),
            group,
            command,
            command_start_ticks,
        })
    }

    /// Whether this host's kernel can judge the binding: the same boot, the same pid
    /// namespace.
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
    /// COMMAND, and every process of COMMAND's group. See the [module documentation](self).
    pub fn gone(&self) -> bool {
        // Cheapest first: the group's may be two full looks at `/proc`.
        self.supervisor_gone() && self.command_gone() && group_gone(self.group)
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
        let mut binding = ProcessBinding::of_this_process(child.id(), child.id()).unwrap();
        binding.pid = child.id();
        binding.stamp.start_ticks = start_ticks(child.id());
        (child, binding)
    }

    #[test]
    fn a_living_supervisor_or_group_is_never_gone() {
        let me = ProcessBinding::of_this_process(std::process::id(), std::process::id()).unwrap();
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
        let me = ProcessBinding::of_this_process(std::process::id(), std::process::id()).unwrap();
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

    #[test]
    fn the_record_names_the_binding_flat() {
        let b = ProcessBinding::of_this_process(7, std::process::id()).unwrap();
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
