//! The processes of one adversary run, found by a mark in their environment: supervisors,
//! their guards, COMMANDs and whatever those start all inherit it. Signals are sent only to
//! marked processes, so a recycled pid is never hit, and the sweep at the end leaves none.

use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

/// The variable that marks the run's processes.
pub const MARK_VAR: &str = "ADVERSARY_MARK";

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// `R`, `S`, `T` (stopped), `Z`…
    pub state: char,
    pub cmdline: String,
}

fn environ_has(pid: i32, mark: &str) -> bool {
    let wanted = format!("{MARK_VAR}={mark}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == wanted.as_bytes()))
}

fn read_proc(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default();
    Some(Proc {
        pid,
        ppid,
        state,
        cmdline,
    })
}

/// Every live process carrying `mark` (zombies have no environment left and are not listed;
/// nor is a process in the middle of an exec, whose environment reads empty for a moment).
pub fn marked(mark: &str) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| environ_has(pid, mark))
        .filter_map(read_proc)
        .filter(|p| p.state != 'Z')
        .collect()
}

/// The guard (`banklease __guard`) started by supervisor `pid`, if it runs now.
pub fn guard_of(procs: &[Proc], pid: i32) -> Option<i32> {
    procs
        .iter()
        .find(|p| p.ppid == pid && p.cmdline.contains("__guard"))
        .map(|p| p.pid)
}

/// Send `signal` to `pid` if it is still one of the run's processes; whether it was sent.
pub fn signal(mark: &str, pid: i32, signal: Signal) -> bool {
    if !environ_has(pid, mark) {
        return false;
    }
    Pid::from_raw(pid).is_some_and(|p| kill_process(p, signal).is_ok())
}

/// Kill every process of the run (SIGKILL; a stopped one dies too), until none is left or
/// `limit` passes; the processes left, if any.
pub fn sweep(mark: &str, limit: Duration) -> Vec<Proc> {
    let rounds = (limit.as_millis() / 50).max(1);
    // Empty twice in a row: a process in the middle of an exec reads an empty environment.
    let mut empty_before = false;
    for _ in 0..rounds {
        let left = marked(mark);
        if left.is_empty() && empty_before {
            return left;
        }
        empty_before = left.is_empty();
        for p in &left {
            signal(mark, p.pid, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    marked(mark)
}
