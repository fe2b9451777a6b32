//! COMMAND's whole process tree, wherever its processes move.
//!
//! A supervisor that signals only COMMAND's process group misses what leaves it: `timeout`
//! calls `setpgid`, `setsid` starts a session, a daemon double-forks, `nohup … &` outlives its
//! parent. Two holds keep the tree within reach:
//! - the guard (COMMAND's parent) is the tree's **child subreaper**: a process of the tree that
//!   loses its parent is re-parented to the guard, not to init, so the tree is always the
//!   guard's descendants, whatever group or session they moved to;
//! - where the host delegates a cgroup v2 (one this user may create and move processes into),
//!   COMMAND runs in a **cgroup of its own**: it is frozen and killed atomically, and it still
//!   names the tree after supervisor and guard both died (a same-host waiter reads it:
//!   [`banklease::lock::process::ProcessBinding`]).
//!
//! `BANKLEASE_TREE=subreaper` uses the subreaper alone; `BANKLEASE_TREE=cgroup` refuses to run
//! without a cgroup.
//!
//! Invariant: **a stop reaches every process of the tree, race-free against forks.** The tree
//! is frozen first — the cgroup's `cgroup.freeze`, waited for until the kernel says it is
//! frozen; without one (or a freeze that did not complete), SIGSTOP to every member, each
//! waited for until it is seen stopped, and again until a walk finds no new one: a stopped
//! process forks no more, and one whose fork was under way shows its child by then — then
//! signalled, then thawed. What was stopped before (a ^Z, a user's SIGSTOP) is not continued.
//! A kill is repeated by its callers until no process of the tree lives.
//!
//! Invariant: **a lock holds COMMAND's whole tree.** No process COMMAND started runs beside the
//! next holder: every stop (the guard's deadline, a lost lock, forwarded signals, ^Z, the
//! supervisor's death, COMMAND's exit) goes through [`Tree`], and a tree that cannot be made to
//! die (a process this user may not signal, an uninterruptible sleep) is not released beside:
//! the lock is left to run out, its record still naming the tree. Absence is never a walk's: a
//! process that forks and exits as fast as it is looked at is in no walk of `/proc`; while the
//! guard lives, the tree is gone when the guard has no child at all (it says so). What remains: without a
//! cgroup, supervisor and guard killed together leave what COMMAND started outside its process
//! group out of reach (COMMAND itself dies with the guard, unless it exec'd a setuid program);
//! work outside the host (a container under a daemon, `ssh`'s remote side) is in no tree; a
//! waiter on another host sees none of it. Fenced writes are what holds there.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::process::{Pid, Signal};

/// The variable that chooses how the tree is held: `auto` (default), `cgroup`, `subreaper`.
pub const TREE_ENV: &str = "BANKLEASE_TREE";
/// Walks of the tree while stopping it by signals before giving up on new forks.
const FREEZE_ROUNDS: usize = 200;
/// How long a freeze of the cgroup is waited for (a process in an uninterruptible sleep
/// freezes when it wakes).
const FREEZE_WAIT: Duration = Duration::from_millis(200);
/// What banklease names its cgroups (`banklease-<pid namespace>.<pid>-<nonce>`) and its
/// markers.
pub(super) const PREFIX: &str = "banklease-";
/// How long an empty cgroup whose supervisor its name cannot judge (another pid namespace's, or
/// an older version's) is left: a live supervisor's is empty only from its creation until its
/// COMMAND joins it, moments.
const UNJUDGED_IDLE: Duration = Duration::from_secs(60);
/// How deep the sweep looks into leftovers (a nested `lock run` makes its cgroup in its outer
/// COMMAND's).
const SWEEP_DEPTH: usize = 8;

/// A cgroup v2 that holds COMMAND's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A new cgroup for COMMAND below this process's own, as `BANKLEASE_TREE` asks: `None` for
    /// the subreaper alone (asked, or `auto` on a host that delegates no cgroup v2 to this
    /// user); an error when `cgroup` was asked and none can be made.
    pub fn for_command() -> Result<Option<Cgroup>> {
        if group_only() {
            return Ok(None);
        }
        let asked = std::env::var(TREE_ENV).unwrap_or_default();
        match asked.as_str() {
            "" | "auto" => Ok(Self::create().map_err(|e| {
                tracing::debug!(error = %format!("{e:#}"), "no cgroup for COMMAND's tree; the guard holds it as child subreaper");
            }).ok()),
            "cgroup" => Self::create()
                .map(Some)
                .context("cannot make a cgroup for COMMAND's tree (BANKLEASE_TREE=cgroup)"),
            "subreaper" => Ok(None),
            other => bail!(
                "{TREE_ENV}=`{other}` is not one of `auto`, `cgroup`, `subreaper`; unset it or \
                 pick one"
            ),
        }
    }

    fn create() -> Result<Cgroup> {
        let parent = own_cgroup_dir().context("no cgroup v2 of this process is mounted")?;
        sweep(&parent);
        // The pid namespace in the name: a sweeper elsewhere cannot judge the pid (pid 1 of a
        // container is not the host's).
        let dir = parent.join(format!(
            "{PREFIX}{}.{}-{:08x}",
            own_pid_namespace(),
            std::process::id(),
            nonce() as u32
        ));
        std::fs::create_dir(&dir)
            .with_context(|| format!("cannot create cgroup=`{}`", dir.display()))?;
        let cgroup = Cgroup { dir };
        // Moving a process needs write access to the cgroup.procs of both ends.
        for procs in [parent.join("cgroup.procs"), cgroup.file("cgroup.procs")] {
            if let Err(e) = std::fs::OpenOptions::new().write(true).open(&procs) {
                cgroup.remove();
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot move processes: `{}`", procs.display())));
            }
        }
        Ok(cgroup)
    }

    /// The cgroup at `dir` (as made by [`Cgroup::for_command`]).
    pub fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Move the calling process into the cgroup.
    pub fn join(&self) -> Result<()> {
        let procs = self.file("cgroup.procs");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .and_then(|mut f| f.write_all(b"0\n"))
            .with_context(|| format!("cannot join cgroup=`{}`", self.dir.display()))
    }

    /// The processes in it; `None` when it cannot be read.
    fn procs(&self) -> Option<Vec<u32>> {
        let text = std::fs::read_to_string(self.file("cgroup.procs")).ok()?;
        Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Whether it is frozen (or being frozen) already: by a ^Z of ours.
    fn frozen(&self) -> bool {
        std::fs::read_to_string(self.file("cgroup.freeze")).is_ok_and(|v| v.trim() == "1")
    }

    /// Freeze (or thaw) it; with `on`, wait (at most [`FREEZE_WAIT`]) until the kernel says
    /// every process is frozen. `false` when the freezer cannot be used or did not freeze in
    /// time (a process in an uninterruptible sleep): then the caller stops by signals.
    fn freeze(&self, on: bool) -> bool {
        let value: &[u8] = if on { b"1" } else { b"0" };
        if std::fs::write(self.file("cgroup.freeze"), value).is_err() {
            return false;
        }
        if !on {
            return true;
        }
        let rounds = FREEZE_WAIT.as_millis();
        for _ in 0..rounds {
            let events = std::fs::read_to_string(self.file("cgroup.events")).unwrap_or_default();
            if events.lines().any(|l| l.trim() == "frozen 1") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// SIGKILL every process in it at once (`cgroup.kill`, Linux 5.14), else one by one while
    /// frozen.
    fn kill(&self) {
        if std::fs::write(self.file("cgroup.kill"), b"1").is_ok() {
            return;
        }
        let frozen = self.freeze(true);
        for pid in self.procs().unwrap_or_default() {
            send(pid, Signal::KILL);
        }
        if frozen {
            self.freeze(false);
        }
    }

    /// Remove it once empty (best effort: a cgroup with processes stays, and is swept by the
    /// next `lock run` once they are gone).
    pub fn remove(&self) {
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(cgroup = %self.dir.display(), error = %e, "cgroup not removed");
            }
        }
    }
}

/// Remove the empty cgroups that earlier supervisors, killed before they could, left in
/// `parent`, and in them (a nested `lock run`'s, which kept its outer one from being removed):
/// each is judged by what is in it (`populated 0` in `cgroup.events`), and by its supervisor,
/// as a live one's cgroup is empty until its COMMAND joins it: gone (the pid in the name, in
/// this pid namespace), or, where the name cannot say, empty for [`UNJUDGED_IDLE`].
fn sweep(parent: &Path) {
    sweep_in(parent, SWEEP_DEPTH, own_pid_namespace());
}

fn sweep_in(dir: &Path, depth: usize, namespace: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // Read before its children go (which touches it).
        let idle = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        // Children first: a cgroup with one cannot be removed.
        if depth > 0 {
            sweep_in(&path, depth - 1, namespace);
        }
        let events = std::fs::read_to_string(path.join("cgroup.events")).unwrap_or_default();
        if !events.lines().any(|l| l.trim() == "populated 0") {
            continue;
        }
        let pid_gone =
            |pid| rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH);
        let supervisor_gone = match supervisor_of(rest) {
            Some((Some(ns), pid)) if ns == namespace => pid_gone(pid),
            // An older version's name: a pid gone here is gone (as that version judged); one
            // that lives may be another namespace's (pid 1 of a container).
            Some((None, pid)) if pid_gone(pid) => true,
            _ => idle.is_some_and(|idle| idle > UNJUDGED_IDLE),
        };
        if supervisor_gone {
            // Fails, harmlessly, if a process joined it since.
            if let Err(e) = std::fs::remove_dir(&path) {
                tracing::debug!(cgroup = %path.display(), error = %e, "leftover cgroup not removed");
            }
        }
    }
}

/// The supervisor a cgroup's name (after [`PREFIX`]) gives: its pid namespace (`None` in an
/// older version's name, `<pid>-<nonce>`) and pid.
fn supervisor_of(rest: &str) -> Option<(Option<u64>, Pid)> {
    let first = rest.split('-').next()?;
    let (ns, pid) = match first.split_once('.') {
        Some((ns, pid)) => (Some(ns.parse().ok()?), pid),
        None => (None, first),
    };
    Some((ns, Pid::from_raw(pid.parse().ok()?)?))
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`; 0 where it cannot be read).
fn own_pid_namespace() -> u64 {
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m))
}

/// A random number, without a generator of our own: std's per-process random hash keys.
pub(super) fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// This process's cgroup v2 directory: its path in `/proc/self/cgroup` (`0::/path`) below the
/// cgroup2 mount that takes effect (the last in `/proc/self/mountinfo`).
fn own_cgroup_dir() -> Option<PathBuf> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - TYPE SOURCE SUPER_OPTIONS`
    let (root, point) = info
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            (tail.split(' ').next()? == "cgroup2").then_some(())?;
            let mut fields = head.split(' ');
            Some((fields.nth(3)?.to_owned(), fields.next()?.to_owned()))
        })
        .next_back()?;
    // Escaped names (`\040`) are not worth the doubt.
    if root.contains('\\') || point.contains('\\') || path.contains('\\') {
        return None;
    }
    let below = if root == "/" {
        path
    } else {
        path.strip_prefix(root.as_str())?
    };
    let dir = Path::new(&point).join(below.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// COMMAND's tree: the descendants of `root` (the guard, its subreaper; or the supervisor,
/// a subreaper too, with the guard `outside` it), and the processes of its cgroup.
#[derive(Debug, Clone)]
pub struct Tree {
    root: u32,
    /// A descendant of the root that is not of the tree (the guard, seen from the supervisor):
    /// walked through, never signalled nor counted.
    outside: Option<u32>,
    /// COMMAND's process group, once known (the chaos build signals it alone).
    group: Option<u32>,
    cgroup: Option<Cgroup>,
}

impl Tree {
    pub fn new(root: u32, cgroup: Option<Cgroup>) -> Self {
        Self {
            root,
            outside: None,
            group: None,
            cgroup,
        }
    }

    /// The same tree with `pid` walked through but not of it.
    pub fn outside(self, pid: u32) -> Self {
        Self {
            outside: Some(pid),
            ..self
        }
    }

    /// The same tree, COMMAND's process group known.
    pub fn with_group(self, group: u32) -> Self {
        Self {
            group: Some(group),
            ..self
        }
    }

    pub fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    /// What holds the tree, for `--verbose`, `-v` and `--help`.
    pub fn describe(&self) -> String {
        match &self.cgroup {
            Some(c) => format!(
                "cgroup `{}` and the guard as child subreaper",
                c.dir().display()
            ),
            None => "the guard as child subreaper (no cgroup)".to_owned(),
        }
    }

    /// The live processes of the tree (a dead zombie is not live).
    pub fn members(&self) -> Vec<u32> {
        if group_only() {
            return Vec::new();
        }
        let mut all: BTreeSet<u32> = self.descendants().into_iter().collect();
        if let Some(c) = &self.cgroup {
            all.extend(c.procs().unwrap_or_default());
        }
        all.into_iter()
            .filter(|&p| self.of_tree(p) && banklease::process::process_acts(p))
            .collect()
    }

    /// Send `signal` to every process of the tree, race-free against forks (see the module's
    /// invariant). What was stopped before (a ^Z, a user's SIGSTOP) stays stopped; what this
    /// stopped to signal it is continued, unless `signal` is SIGSTOP.
    pub fn signal(&self, signal: Signal) {
        if group_only() {
            return self.group(signal);
        }
        if signal == Signal::KILL {
            return self.kill();
        }
        let cgroup = self.cgroup.as_ref();
        let was_frozen = cgroup.is_some_and(Cgroup::frozen);
        let frozen = cgroup.is_some_and(|c| c.freeze(true));
        let mut targets: BTreeSet<u32> = match (cgroup, frozen) {
            (Some(c), true) => c.procs().unwrap_or_default().into_iter().collect(),
            _ => BTreeSet::new(),
        };
        let stopped = self.stop_by_signals(&targets);
        targets.extend(&stopped.ours);
        targets.extend(&stopped.theirs);
        for &pid in targets.iter().filter(|&&p| self.of_tree(p)) {
            send(pid, signal);
        }
        if signal != Signal::STOP {
            for &pid in &stopped.ours {
                send(pid, Signal::CONT);
            }
            if frozen && !was_frozen {
                cgroup.map(|c| c.freeze(false));
            }
        }
    }

    /// Stop the whole tree where it stands (job control): frozen, or SIGSTOPped.
    pub fn pause(&self) {
        if group_only() {
            return self.group(Signal::TSTP);
        }
        let frozen = self.cgroup.as_ref().is_some_and(|c| c.freeze(true));
        let inside: BTreeSet<u32> = match (&self.cgroup, frozen) {
            (Some(c), true) => c.procs().unwrap_or_default().into_iter().collect(),
            _ => BTreeSet::new(),
        };
        self.stop_by_signals(&inside);
    }

    /// Continue the whole tree ([`Tree::pause`]; `fg` continues the whole job).
    pub fn resume(&self) {
        if group_only() {
            return self.group(Signal::CONT);
        }
        if let Some(c) = &self.cgroup {
            c.freeze(false);
        }
        for pid in self.members() {
            send(pid, Signal::CONT);
        }
    }

    /// SIGKILL the whole tree: the cgroup at once, then every descendant, stopped first so none
    /// forks past the walk. One pass: a caller that must see it gone asks [`Tree::members`]
    /// and kills again.
    pub fn kill(&self) {
        if group_only() {
            return self.group(Signal::KILL);
        }
        if let Some(c) = &self.cgroup {
            c.kill();
        }
        let stopped = self.stop_by_signals(&BTreeSet::new());
        for &pid in stopped.ours.iter().chain(&stopped.theirs) {
            send(pid, Signal::KILL);
        }
    }

    /// `signal` to COMMAND's process group alone (the chaos build's "before").
    fn group(&self, signal: Signal) {
        let Some(group) = self
            .group
            .and_then(|g| i32::try_from(g).ok())
            .and_then(Pid::from_raw)
        else {
            return;
        };
        let _ = rustix::process::kill_process_group(group, signal);
    }

    fn of_tree(&self, pid: u32) -> bool {
        pid != self.root && Some(pid) != self.outside
    }

    /// SIGSTOP every descendant not in `skip` and not stopped already, waiting until each is
    /// seen stopped, and walk again until a walk finds none new: a process with SIGSTOP pending
    /// cannot start a fork, and one whose fork was under way shows its child by the time it
    /// is seen stopped.
    fn stop_by_signals(&self, skip: &BTreeSet<u32>) -> Stopped {
        let mut stopped = Stopped::default();
        for round in 0..FREEZE_ROUNDS {
            let new: Vec<u32> = self
                .descendants()
                .into_iter()
                .filter(|p| {
                    self.of_tree(*p)
                        && !skip.contains(p)
                        && !stopped.ours.contains(p)
                        && !stopped.theirs.contains(p)
                })
                .collect();
            if new.is_empty() {
                return stopped;
            }
            let mut sent = Vec::new();
            for pid in new {
                if matches!(state(pid), Some('T' | 't')) {
                    stopped.theirs.insert(pid);
                } else {
                    send(pid, Signal::STOP);
                    stopped.ours.insert(pid);
                    sent.push(pid);
                }
            }
            wait_stopped(&sent);
            if round + 1 == FREEZE_ROUNDS {
                tracing::warn!(
                    "COMMAND's tree kept forking through {FREEZE_ROUNDS} walks; what forked last \
                     may have been missed"
                );
            }
        }
        stopped
    }

    /// The root's descendants now (one walk of `/proc`), the root excluded; through the
    /// `outside` process, which is left out too.
    fn descendants(&self) -> Vec<u32> {
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(ppid) = banklease::process::proc_stat(pid).map(|s| s.parent) {
                children.entry(ppid).or_default().push(pid);
            }
        }
        let mut seen = BTreeSet::new();
        let mut next = vec![self.root];
        while let Some(pid) = next.pop() {
            for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
                // A walk is bounded by the processes listed: each is visited once.
                if child != self.root && seen.insert(child) {
                    next.push(child);
                }
            }
        }
        seen.into_iter().filter(|&p| self.of_tree(p)).collect()
    }
}

/// What a stop walk stopped itself, and what it found stopped already.
#[derive(Debug, Default)]
struct Stopped {
    ours: BTreeSet<u32>,
    theirs: BTreeSet<u32>,
}

/// Wait (at most [`STOP_WAIT`] in all) until each of `pids` is seen stopped, dead or gone.
fn wait_stopped(pids: &[u32]) {
    let rounds = STOP_WAIT.as_millis();
    for _ in 0..rounds {
        if pids
            .iter()
            .all(|&p| !matches!(state(p), Some(s) if !matches!(s, 'T' | 't' | 'Z' | 'X' | 'x')))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long a stop walk waits for the processes it sent SIGSTOP to be seen stopped.
const STOP_WAIT: Duration = Duration::from_millis(200);

/// Whether every stop reaches COMMAND's process group only, with no cgroup, as before the lock
/// held the whole tree: only in a build with the `chaos` feature and
/// `BANKLEASE_CHAOS_GROUP_ONLY=1`, which the process-level adversary uses to show that it
/// finds what holding the whole tree prevents.
fn group_only() -> bool {
    #[cfg(feature = "chaos")]
    if std::env::var_os("BANKLEASE_CHAOS_GROUP_ONLY").is_some_and(|v| v == "1") {
        return true;
    }
    false
}

/// The state letter of `pid`, `None` once it is gone.
fn state(pid: u32) -> Option<char> {
    banklease::process::proc_stat(pid).map(|s| s.state)
}

fn send(pid: u32, signal: Signal) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    match rustix::process::kill_process(pid, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => tracing::warn!(pid = pid.as_raw_nonzero().get(), error = %e,
            signal = signal.as_raw(), "cannot signal a process of COMMAND's tree"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    /// A shell that starts a child in a session of its own and then goes on: the walk from the
    /// shell finds it, and a kill of the tree reaches it (the root is left alone).
    #[test]
    fn the_walk_finds_what_left_the_group_and_a_kill_reaches_it() {
        let mut sh = Command::new("sh")
            .args(["-c", "setsid sleep 60 & exec sleep 60"])
            .spawn()
            .unwrap();
        let tree = Tree::new(sh.id(), None);
        wait_until("the member", || tree.members().len() == 1);
        tree.kill();
        wait_until("the tree gone", || tree.members().is_empty());
        assert!(
            banklease::process::process_acts(sh.id()),
            "the root is not the tree's"
        );
        sh.kill().unwrap();
        sh.wait().unwrap();
    }
}
