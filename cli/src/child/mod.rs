//! COMMAND under a hold: start it, forward signals to it, and stop it (SIGTERM, then SIGKILL)
//! when the hold it runs under stops being valid.
//!
//! Shared by `banklease run` (an owner lease), `run --lock` and `banklease lock run` (a named
//! lock): they differ only in what they hold, given to [`watch`] as the future that completes
//! when the hold can no longer be proved and as the [`Proof`] the guard and job control use.
//!
//! Under a lock, COMMAND is guarded ([`guard`]) and every stop reaches its whole process tree
//! ([`tree`]): what leaves the process group (`timeout`, `setsid`, daemons) is stopped with it,
//! and what COMMAND leaves running when it exits is stopped before the lock is released.
//! Unguarded (`run` without `--lock`), COMMAND leads a process group of its own.
//!
//! Job control: a ^Z (SIGTSTP) to the supervisor stops COMMAND's tree (frozen, or SIGSTOPped)
//! and then the supervisor; continued (SIGCONT, `fg`), the supervisor re-proves every hold with
//! a request sent then, *before* it continues COMMAND, and when it cannot, kills the stopped
//! tree and exits 75.

mod exec;
mod guard;
mod marker;
pub mod overdue;
mod proof;
mod tree;

pub use exec::run as exec;
pub use guard::{run as guard, Args as GuardArgs};
pub use proof::Proof;
pub use tree::Cgroup;

use tree::Tree;

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use banklease::clock::SharedClock;
use banklease::LeaseState;
use rustix::process::{Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};

use crate::human;

/// The hold stopped being valid and COMMAND was stopped (EX_TEMPFAIL: try again later).
pub const EXIT_HOLD_LOST: u8 = 75;
/// The supervisor itself failed: bad configuration, no lease or lock, no socket (as `env`,
/// `timeout`).
pub const EXIT_RUN_FAILED: u8 = 125;
/// COMMAND was found but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// COMMAND was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// How COMMAND ended.
#[derive(Debug)]
pub enum Ended {
    /// COMMAND exited on its own (or by a signal it was sent by someone else).
    Exited(ExitStatus),
    /// The hold stopped being valid and COMMAND was stopped.
    Stopped { status: ExitStatus, reason: String },
}

/// SIGTERM, SIGINT and SIGHUP, taken over from the default action (which would end the
/// supervisor with its hold kept).
#[derive(Debug)]
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// A signal received and not yet handled, if any (without waiting).
    pub fn pending(&mut self) -> Option<i32> {
        use futures::FutureExt;
        [
            (self.term.recv().now_or_never(), Signal::TERM),
            (self.int.recv().now_or_never(), Signal::INT),
            (self.hup.recv().now_or_never(), Signal::HUP),
        ]
        .into_iter()
        .find_map(|(got, signal)| got.flatten().map(|()| signal.as_raw()))
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::TERM,
            _ = self.int.recv() => Signal::INT,
            _ = self.hup.recv() => Signal::HUP,
        }
    }
}

/// COMMAND as the supervisor reaches it.
#[derive(Debug)]
pub struct Running {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    /// Unguarded (`run` without `--lock`): COMMAND is the supervisor's child, leading a
    /// process group of its own, and the agent's refusals fence its writes.
    Plain {
        child: tokio::process::Child,
        group: Pid,
    },
    /// Guarded: COMMAND is the guard's child, and its tree the guard's descendants (and its
    /// cgroup's processes); seen from here, this process's descendants but the guard (orphans
    /// come here should the guard die).
    Guarded {
        guard: Box<guard::Guard>,
        tree: Tree,
        command: u32,
        /// COMMAND's start time, as the guard read it.
        command_start_ticks: Option<u64>,
        /// The file the guard writes once it proved the tree gone.
        done: Option<PathBuf>,
    },
}

/// What became of COMMAND.
enum Event {
    Exited(ExitStatus),
    /// COMMAND cannot be waited for (unguarded only).
    WaitFailed(std::io::Error),
    /// The guard began stopping the tree at its deadline.
    Fired,
    /// The guard is gone: COMMAND died with it.
    GuardGone,
}

impl Running {
    /// What a lock's record names of COMMAND's tree ([`Proof::bind_locks`]); `handoff` lets a
    /// waiter on this host take the lock as soon as it is all gone. `None` when unguarded.
    pub fn binding(&self, handoff: bool) -> Option<banklease::lock::process::Processes> {
        match &self.inner {
            Inner::Plain { .. } => None,
            Inner::Guarded {
                guard,
                tree,
                command,
                command_start_ticks,
                done,
            } => Some(banklease::lock::process::Processes {
                // The guard leads COMMAND's process group.
                group: guard.pid(),
                command: *command,
                cgroup: tree.cgroup().map(|c| c.dir().to_owned()),
                done: done.clone(),
                command_start_ticks: *command_start_ticks,
                // Without the guard's word, nothing proves the tree gone once supervisor and
                // guard are: no early handoff then.
                handoff: handoff && done.is_some(),
            }),
        }
    }

    /// What holds COMMAND's tree, in words (`--verbose`, `-v`).
    pub fn held_by(&self) -> String {
        match &self.inner {
            Inner::Guarded { tree, .. } => tree.describe(),
            Inner::Plain { .. } => "its process group".to_owned(),
        }
    }

    /// What is left of COMMAND's tree: `None` once it is proved gone, else the live processes a
    /// walk of `/proc` found — maybe none: a process that forks and exits as fast as it is
    /// looked at is not in any walk, and the tree is not gone until the guard says so (it has
    /// no child at all: [`guard::Guard::said_empty`]). Once the guard is gone, its orphans are
    /// this process's, and a walk is all there is. Nothing is tracked unguarded. After
    /// [`watch`], anything left could not be stopped: the hold must not be released.
    pub fn left(&self) -> Option<Vec<u32>> {
        match &self.inner {
            Inner::Guarded { tree, guard, .. } => {
                let members = tree.members();
                let gone = if guard.is_gone() {
                    members.is_empty()
                } else {
                    guard.said_empty()
                };
                (!gone).then_some(members)
            }
            Inner::Plain { .. } => None,
        }
    }

    /// What COMMAND left running in its process group as it exited, unguarded (plain `run`,
    /// which does not stop it): each process's pid and name. Empty when guarded (the guard
    /// stops the tree) or when nothing is left.
    pub fn left_in_group(&self) -> Vec<(u32, String)> {
        let Inner::Plain { group, .. } = &self.inner else {
            return Vec::new();
        };
        let group = group.as_raw_pid().unsigned_abs();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                banklease::process::proc_stat(pid).is_some_and(|s| s.group == group && !s.zombie)
            })
            .map(|pid| {
                let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                (pid, name.trim().to_owned())
            })
            .collect()
    }

    /// After COMMAND's hold was released (or left to run out): stop the guard and remove the
    /// tree's cgroup, or its marker's directory. Until then the guard has kept its last
    /// deadline.
    pub async fn finish(self) {
        if let Inner::Guarded {
            guard, tree, done, ..
        } = self.inner
        {
            guard.stop().await;
            if let Some(cgroup) = tree.cgroup() {
                cgroup.remove();
            }
            if let Some(done) = &done {
                marker::remove_marker(done);
            }
        }
    }

    async fn next(&mut self) -> Event {
        match &mut self.inner {
            Inner::Plain { child, .. } => match child.wait().await {
                Ok(status) => Event::Exited(status),
                Err(e) => Event::WaitFailed(e),
            },
            Inner::Guarded { guard, .. } => match guard.heard().await {
                guard::Heard::Exited(status) => Event::Exited(status),
                guard::Heard::Fired => Event::Fired,
                guard::Heard::Gone => Event::GuardGone,
            },
        }
    }

    /// `signal` to COMMAND: its whole tree when guarded, else its group.
    fn signal(&self, signal: Signal) {
        match &self.inner {
            Inner::Plain { group, .. } => send(*group, signal),
            Inner::Guarded { tree, .. } => tree.signal(signal),
        }
    }

    fn kill(&self) {
        self.signal(Signal::KILL);
    }

    /// Job control: stop COMMAND (its whole tree: frozen, or SIGSTOPped) or continue it.
    fn pause(&self, on: bool) {
        match (&self.inner, on) {
            (Inner::Plain { group, .. }, true) => send(*group, Signal::TSTP),
            (Inner::Plain { group, .. }, false) => send(*group, Signal::CONT),
            (Inner::Guarded { tree, .. }, true) => tree.pause(),
            (Inner::Guarded { tree, .. }, false) => tree.resume(),
        }
    }

    fn guard(&self) -> Option<&guard::Guard> {
        match &self.inner {
            Inner::Guarded { guard, .. } => Some(guard),
            Inner::Plain { .. } => None,
        }
    }

    /// COMMAND and its whole tree are gone (COMMAND at most a zombie the guard has not
    /// reaped). Guarded only.
    fn gone_unheard(&self) -> bool {
        match &self.inner {
            Inner::Guarded { tree, command, .. } => {
                tree.members().is_empty() && !banklease::process::process_acts(*command)
            }
            Inner::Plain { .. } => false,
        }
    }

    /// After the guard died: its orphans came to this process (a subreaper too), and are of
    /// the tree seen from here; COMMAND's status if it can be had (it died with the guard).
    fn reap_command(&self) -> ExitStatus {
        let killed = ExitStatus::from_raw(Signal::KILL.as_raw());
        let Inner::Guarded { command, .. } = &self.inner else {
            return killed;
        };
        let Some(pid) = i32::try_from(*command).ok().and_then(Pid::from_raw) else {
            return killed;
        };
        for _ in 0..REAP_ROUNDS {
            match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG) {
                Ok(Some((_, status))) => return ExitStatus::from_raw(status.as_raw()),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break,
            }
        }
        killed
    }
}

/// Rounds (10 ms apart) spent on reaping COMMAND after its guard died.
const REAP_ROUNDS: usize = 100;

/// Start COMMAND (`argv`) with `env` added; on failure, the exit status to use (127 not found,
/// 126 cannot be executed, 75 nothing left of the hold, 125 otherwise) and why.
///
/// With `guarded` (the proof COMMAND runs under, and `kill_after`), the guard (`banklease
/// __guard`, this binary; see [`guard`]) is started, leading a new process group, and starts
/// COMMAND itself once armed: no instant in which COMMAND runs unguarded, nor one in which a
/// signal finds the guard without its handlers. COMMAND is not started at all when its holds
/// prove no time left. Without, COMMAND leads a process group of its own.
pub async fn spawn(
    argv: &[OsString],
    env: &[(&str, OsString)],
    guarded: Option<(&Proof, Duration, bool)>,
) -> Result<Running, (u8, anyhow::Error)> {
    let Some((proof, kill_after, handoff)) = guarded else {
        let child = spawn_command(argv, env)?;
        let group = child
            .id()
            .and_then(|p| Pid::from_raw(i32::try_from(p).ok()?))
            .context("COMMAND exited before it could be watched")
            .map_err(|e| (EXIT_RUN_FAILED, e))?;
        return Ok(Running {
            inner: Inner::Plain { child, group },
        });
    };
    if proof.left().is_zero() {
        return Err((
            EXIT_HOLD_LOST,
            anyhow::anyhow!(
                "{}; COMMAND was not started",
                proof
                    .what_ran_out()
                    .unwrap_or_else(|| "nothing is held".to_owned())
            ),
        ));
    }
    let failed = |e: anyhow::Error| (EXIT_RUN_FAILED, e);
    let cgroup = Cgroup::for_command().map_err(failed)?;
    // Once the supervisor is gone, only the guard's own word that it proved the tree empty
    // hands the lock over early (a waiter on this host reads it): a cgroup can be left.
    let done = marker::done_marker();
    // Should the guard die, the tree's orphans come here, where they can still be killed.
    let me = rustix::process::getpid();
    if let Err(e) = rustix::process::set_child_subreaper(Some(me)) {
        tracing::debug!(error = %e, "cannot be the child subreaper of the guard's orphans");
    }
    let me = me.as_raw_nonzero().get().unsigned_abs();
    let spawned = guard::Guard::spawn(
        || proof.left(),
        guard::Spawn {
            argv,
            env,
            cgroup: cgroup.as_ref(),
            done: done.as_deref(),
            kill_after,
        },
    )
    .await;
    let mut guard = match spawned {
        Ok(guard) => guard,
        Err(e) => {
            if let Some(c) = &cgroup {
                c.remove();
            }
            if let Some(done) = &done {
                marker::remove_marker(done);
            }
            return Err(failed(e));
        }
    };
    let guard_pid = guard.pid();
    // Bound before COMMAND starts, the guard standing in for it (COMMAND's group leader, and
    // its parent): a release by name is refused from COMMAND's first instant, not only once
    // the binding after its start landed.
    let before = banklease::lock::process::Processes {
        group: guard_pid,
        command: guard_pid,
        cgroup: cgroup.as_ref().map(|c| c.dir().to_owned()),
        done: done.clone(),
        command_start_ticks: banklease::process::proc_stat(guard_pid).map(|s| s.start_ticks),
        handoff: handoff && done.is_some(),
    };
    proof.bind_before_start(&before, BIND_WITHIN).await;
    // The binding took time: the guard starts COMMAND on the deadline proved now.
    guard.prove(|| proof.left());
    let tree = Tree::new(me, cgroup).outside(guard_pid);
    match guard.started().await {
        Ok((command, command_start_ticks)) => {
            tracing::info!(held_by = %tree.describe(), command, "COMMAND started");
            Ok(Running {
                inner: Inner::Guarded {
                    guard: Box::new(guard),
                    tree: tree.with_group(guard_pid),
                    command,
                    command_start_ticks,
                    done,
                },
            })
        }
        Err(e) => {
            // COMMAND may have started: it dies with the guard, and what it started comes
            // here.
            guard.stop().await;
            let gone = end(&tree, TREE_GONE);
            if let Some(c) = tree.cgroup() {
                c.remove();
            }
            if let Some(done) = &done {
                marker::remove_marker(done);
            }
            if !gone {
                // The hold must not be released beside them: 75 says so to the caller.
                let pids: Vec<String> = tree.members().iter().map(u32::to_string).collect();
                return Err((
                    EXIT_HOLD_LOST,
                    e.context(format!(
                        "processes COMMAND started could not be stopped (pid {}); the lock is \
                         left to run out instead of being released beside them",
                        pids.join(", ")
                    )),
                ));
            }
            Err(failed(e))
        }
    }
}

/// SIGKILL `tree` until none of it lives, for at most `limit`; whether none does. Blocking:
/// only on the way out of a failed start.
fn end(tree: &Tree, limit: Duration) -> bool {
    let rounds = (limit.as_millis() / TREE_POLL.as_millis()).max(1);
    for _ in 0..rounds {
        if tree.members().is_empty() {
            return true;
        }
        tree.kill();
        std::thread::sleep(TREE_POLL);
    }
    tree.members().is_empty()
}

/// COMMAND leading a new process group, as the supervisor's child.
fn spawn_command(
    argv: &[OsString],
    env: &[(&str, OsString)],
) -> Result<tokio::process::Child, (u8, anyhow::Error)> {
    let (program, rest) = argv.split_first().expect("clap requires COMMAND");
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        // A group of its own: signals reach every process of a shell pipeline, and a
        // terminal's ^C reaches COMMAND once (forwarded), not twice.
        .process_group(0);
    let spawned = match command.spawn() {
        // No `#!` line: run it with /bin/sh, as execvp(3) and flock(1) do.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOEXEC.raw_os_error()) => {
            let script = exec::resolve(program).unwrap_or_else(|| program.into());
            let mut sh = tokio::process::Command::new("/bin/sh");
            sh.arg(script)
                .args(rest)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .process_group(0);
            sh.spawn()
        }
        spawned => spawned,
    };
    spawned.map_err(|e| exec::cannot_start(program, e))
}

/// How often the supervisor hands the guard the deadline its holds now prove.
pub(crate) const PROVE_EVERY: Duration = Duration::from_millis(200);
/// How often the supervisor looks whether what COMMAND left of its tree is gone.
const TREE_POLL: Duration = Duration::from_millis(20);

/// Wait for COMMAND; forward signals to its tree; when `lost` completes (with the reason),
/// send the tree SIGTERM, then SIGKILL after `kill_after`. Keeps the guard's deadline moving
/// with `proof`, and stops and continues COMMAND's tree with this process (job control). When
/// COMMAND exits on its own, what is left of its tree is stopped (SIGTERM, SIGKILL after
/// `kill_after`) before this returns, and so before the hold is released.
pub async fn watch(
    running: &mut Running,
    lost: impl Future<Output = String>,
    proof: &Proof,
    clock: &SharedClock,
    signals: &mut Signals,
    kill_after: Duration,
) -> Result<Ended> {
    let jobs = match JobControl::new() {
        Ok(jobs) => jobs,
        Err(e) => {
            // Unwatched, COMMAND must not run on.
            running.kill();
            return Err(anyhow::Error::new(e)
                .context("cannot install the job-control signal handlers; COMMAND was killed"));
        }
    };
    let watched = Watched {
        proof,
        clock,
        kill_after,
    };
    watched.watch_child(running, lost, signals, jobs).await
}

/// SIGTSTP and SIGCONT, for job control.
struct JobControl {
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl JobControl {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            tstp: signal(SignalKind::from_raw(Signal::TSTP.as_raw()))?,
            cont: signal(SignalKind::from_raw(Signal::CONT.as_raw()))?,
        })
    }
}

struct Watched<'a> {
    proof: &'a Proof,
    clock: &'a SharedClock,
    kill_after: Duration,
}

/// The guard fired while the supervisor could not act.
const GUARD_FIRED: &str = "COMMAND outlived the deadline its supervisor last proved (was the \
                           supervisor stopped?): the guard stopped it";

impl Watched<'_> {
    async fn watch_child(
        &self,
        running: &mut Running,
        lost: impl Future<Output = String>,
        signals: &mut Signals,
        mut jobs: JobControl,
    ) -> Result<Ended> {
        let clock = self.clock;
        tokio::pin!(lost);
        let mut stopping: Option<String> = None;
        // On the holder's clock, which counts time the host was suspended; checked at least
        // once a second.
        let mut kill_at: Option<Instant> = None;
        let guarded = running.guard().is_some();
        // Looks that found COMMAND and its tree gone with no word from the guard.
        let mut silent = 0;
        loop {
            let kill_wait = kill_at.map(|at| {
                at.saturating_duration_since(clock.now())
                    .min(Duration::from_secs(1))
            });
            tokio::select! {
                event = running.next() => match event {
                    Event::Exited(status) => {
                        return Ok(match stopping {
                            Some(reason) => {
                                // What ignored SIGTERM goes too, before the hold can expire.
                                self.end_tree(running, true).await;
                                Ended::Stopped { status, reason }
                            }
                            None => {
                                self.end_tree(running, false).await;
                                Ended::Exited(status)
                            }
                        });
                    }
                    Event::WaitFailed(e) => {
                        // COMMAND cannot be watched: it must not run on without its hold.
                        running.kill();
                        return Err(anyhow::Error::new(e).context("cannot wait for COMMAND; it was killed"));
                    }
                    Event::GuardGone => {
                        // COMMAND died with it; what it started is ours now.
                        self.end_tree(running, true).await;
                        let status = running.reap_command();
                        let reason = stopping.unwrap_or_else(|| {
                            "the guard of COMMAND's tree exited".to_owned()
                        });
                        return Ok(Ended::Stopped { status, reason });
                    }
                    Event::Fired => {
                        // The guard backing up our own SIGTERM: it kills at the same instant
                        // we do, and COMMAND keeps its `kill_after` to finish.
                        if kill_at.is_none() {
                            // Past the deadline the guard fired at (this process may hear it
                            // late), or with no switch left should this process be paused
                            // next.
                            running.kill();
                        }
                        if stopping.is_none() {
                            stopping = Some(GUARD_FIRED.to_owned());
                        }
                    }
                },
                signal = signals.recv() => running.signal(signal),
                Some(()) = jobs.tstp.recv() => {
                    if let Err(reason) = self.suspend(running).await {
                        if stopping.is_none() {
                            // Stopped, and never continued without its hold: killed where it
                            // stands.
                            running.kill();
                            stopping = Some(reason);
                        }
                    }
                }
                // Continued after a stop not ours (SIGSTOP): the deadline moves only if the
                // keepers renew again.
                Some(()) = jobs.cont.recv() => {}
                () = clock.sleep(PROVE_EVERY), if guarded => {
                    if let Some(g) = running.guard() {
                        if stopping.is_none() {
                            g.prove(|| self.proof.left());
                        }
                        // The switch must not stay stopped (a stray SIGSTOP): it alone tells
                        // COMMAND's exit.
                        g.continue_if_stopped();
                    }
                    // Stopping, with COMMAND and its whole tree gone, and the guard silent:
                    // COMMAND's status is not waited for longer.
                    if stopping.is_some() && running.gone_unheard() {
                        silent += 1;
                        if silent >= SILENT_LOOKS {
                            let status = ExitStatus::from_raw(Signal::KILL.as_raw());
                            let reason = stopping.take().unwrap_or_default();
                            return Ok(Ended::Stopped { status, reason });
                        }
                    }
                }
                reason = &mut lost, if stopping.is_none() => {
                    // Logged (-v) only: the supervisor's one `error:` line says it at the end.
                    tracing::info!(reason = %reason, kill_after = %human(self.kill_after),
                        "the hold stopped being valid: stopping COMMAND (SIGTERM now, SIGKILL after kill_after)");
                    // The guard backs this up from now, should this process stop: it kills when
                    // we would, without a second SIGTERM.
                    running.signal(Signal::TERM);
                    if let Some(g) = running.guard() {
                        g.termed();
                    }
                    kill_at = Some(clock.now() + self.kill_after);
                    stopping = Some(reason);
                }
                () = clock.sleep(kill_wait.unwrap_or_default()), if kill_wait.is_some() => {
                    if kill_at.is_some_and(|at| clock.now() >= at) {
                        tracing::info!("COMMAND outlived --kill-after: SIGKILL");
                        running.kill();
                        kill_at = None;
                    }
                }
            }
        }
    }

    /// COMMAND exited: stop what is left of its tree — SIGKILL at once when the hold is being
    /// stopped (`now`), else SIGTERM and SIGKILL after `kill_after`, said in one line — and
    /// wait until none of it lives, killing again (bounded: what cannot die within
    /// [`TREE_GONE`] of its SIGKILL is left, and [`Running::still_running`] names it).
    async fn end_tree(&self, running: &Running, now: bool) {
        if now {
            // Unguarded, the group is all that is known of the tree: killed unlooked.
            running.kill();
        }
        let clock = self.clock;
        // The guard's word that the tree is gone follows COMMAND's exit at once when nothing
        // else ran: a moment for it before anything is said to be left.
        let said_by = clock.now() + TREE_WORD;
        let mut left = running.left();
        while left.as_ref().is_some_and(Vec::is_empty) && clock.now() < said_by {
            clock.sleep(TREE_POLL).await;
            left = running.left();
        }
        let Some(left) = left else {
            return;
        };
        if !now {
            let shown: Vec<String> = left.iter().take(5).map(u32::to_string).collect();
            let more = if left.len() > 5 { ", …" } else { "" };
            let which = if shown.is_empty() {
                // Seen by the guard, not by a walk: forking and exiting as fast as it is looked
                // at.
                "processes of its tree running (none stays long enough to be named)".to_owned()
            } else {
                format!(
                    "{} process(es) of its tree running (pid {}{more})",
                    left.len(),
                    shown.join(", ")
                )
            };
            eprintln!(
                "note: COMMAND exited, leaving {which}: stopping them (SIGTERM, then SIGKILL \
                 after {}) before the lock is released",
                human(self.kill_after)
            );
            running.signal(Signal::TERM);
            let until = clock.now() + self.kill_after;
            while clock.now() < until && running.left().is_some() {
                clock.sleep(TREE_POLL).await;
            }
        }
        let until = clock.now() + TREE_GONE;
        loop {
            let Some(left) = running.left() else {
                return;
            };
            if clock.now() >= until {
                tracing::warn!(pids = ?left, "processes of COMMAND's tree did not die after SIGKILL");
                return;
            }
            running.kill();
            clock.sleep(TREE_POLL).await;
        }
    }

    /// ^Z: stop COMMAND's tree, then this process. Continued, re-prove every hold before
    /// COMMAND continues; `Err(reason)` (COMMAND left stopped) when that fails.
    async fn suspend(&self, running: &Running) -> Result<(), String> {
        running.pause(true);
        // The guard keeps its deadline while we are stopped: it stops COMMAND if we are not
        // back in time.
        let stopped = self.clock.now();
        if let Err(e) = rustix::process::kill_process(rustix::process::getpid(), Signal::STOP) {
            tracing::warn!(error = %e, "cannot stop the supervisor");
        }
        let stopped_for = self.clock.now().saturating_duration_since(stopped);
        // Continued: whatever the holds were proved for was before the stop.
        let proved =
            self.proof
                .reprove(self.clock)
                .await
                .and_then(|()| match self.proof.what_ran_out() {
                    Some(reason) => Err(reason),
                    None => Ok(()),
                });
        if proved.is_ok() {
            if let Some(g) = running.guard() {
                g.prove(|| self.proof.left());
            }
            running.pause(false);
        }
        proved.map_err(|reason| {
            format!(
                "this supervisor was stopped (^Z, SIGTSTP) for {}, and then {reason}",
                crate::output::human(stopped_for)
            )
        })
    }
}

/// Looks ([`PROVE_EVERY`] apart) that must find COMMAND gone, its guard silent, before the
/// supervisor stops waiting for its word.
const SILENT_LOOKS: u32 = 10;

/// How long the binding of the holds is waited for before COMMAND starts (the guard waits
/// twice as long for its word to start).
const BIND_WITHIN: Duration = Duration::from_secs(5);
/// How long what is left of COMMAND's tree is waited for after its SIGKILL.
const TREE_GONE: Duration = Duration::from_secs(5);
/// How long after COMMAND's exit the guard's word that nothing of its tree is left is waited
/// for, when no walk finds anything, before the tree is said to be left running.
const TREE_WORD: Duration = Duration::from_secs(1);

/// Completes, with the reason, when a hold (an owner lease, a named lock) can no longer be
/// proved: Lost, released, or less than `margin` of it left on the holder's clock (send-time
/// expiry, never later than the store's), which then says `short`. Sends no request; wakes on
/// every change of state, when the margin would be reached, and at least once a second (the
/// holder's clock counts suspended time; tokio's timers do not).
pub async fn hold_ended(
    mut states: tokio::sync::watch::Receiver<LeaseState>,
    remaining: impl Fn() -> Duration,
    margin: Duration,
    short: &str,
    clock: &SharedClock,
) -> String {
    let mut watching = true;
    loop {
        let state = states.borrow_and_update().clone();
        match state {
            LeaseState::Lost { reason } => return format!("lost: {reason}"),
            LeaseState::Released => return "released".to_owned(),
            LeaseState::Held { .. } if remaining() < margin => return short.to_owned(),
            LeaseState::Held { .. } => {}
        }
        let until = remaining()
            .saturating_sub(margin)
            .min(Duration::from_secs(1))
            + Duration::from_millis(1);
        tokio::select! {
            changed = states.changed(), if watching => watching = changed.is_ok(),
            () = clock.sleep(until) => {}
        }
    }
}

fn send(group: Pid, signal: Signal) {
    match rustix::process::kill_process_group(group, signal) {
        Ok(()) => {}
        // The group is gone: COMMAND's exit is about to be seen.
        Err(rustix::io::Errno::SRCH) => {}
        Err(e) => {
            tracing::warn!(error = %e, signal = signal.as_raw(), "cannot signal COMMAND's process group")
        }
    }
}

/// The one line a supervisor says when processes of COMMAND's tree could not be stopped and
/// the lock `key` is left to run out instead of being released beside them.
pub fn left_to_run_out(stuck: &[u32], key: &str) -> String {
    let pids: Vec<String> = stuck.iter().map(u32::to_string).collect();
    let which = if pids.is_empty() {
        "none stays long enough to be named".to_owned()
    } else {
        format!("pid {}", pids.join(", "))
    };
    format!(
        "error: processes of COMMAND's tree could not be stopped ({which}); the lock \
         key=`{key}` is left to run out instead of being released beside them"
    )
}

/// Plain `run`'s one `note:` on what COMMAND left running in its process group.
pub fn left_running_note(left: &[(u32, String)]) -> String {
    const SHOWN: usize = 5;
    let mut named: Vec<String> = left
        .iter()
        .take(SHOWN)
        .map(|(pid, name)| format!("pid {pid} `{name}`"))
        .collect();
    if left.len() > SHOWN {
        named.push(format!("{} more", left.len() - SHOWN));
    }
    let (count, it) = match left.len() {
        1 => ("1 process".to_owned(), "it"),
        n => (format!("{n} processes"), "them"),
    };
    format!(
        "note: COMMAND exited and left {count} of its process group running ({}); plain `run` \
         does not stop {it} (`run --lock KEY` holds COMMAND's whole tree and stops what it \
         leaves)",
        named.join(", ")
    )
}

/// A supervisor's exit status: its own, or [`EXIT_RUN_FAILED`] after reporting why it failed.
pub fn reported(result: Result<u8>) -> crate::Outcome {
    match result {
        Ok(code) => crate::Outcome::Exit(code),
        Err(e) => {
            eprintln!("error: {}", banklease_gc_daemon::logging::error_line(&e));
            crate::Outcome::Exit(EXIT_RUN_FAILED)
        }
    }
}

/// The exit status a supervisor passes on: COMMAND's code, or 128 + N for signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EXIT_RUN_FAILED),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(EXIT_RUN_FAILED),
        (None, None) => EXIT_RUN_FAILED,
    }
}

/// How COMMAND ended, for a message.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => status.to_string(),
    }
}
