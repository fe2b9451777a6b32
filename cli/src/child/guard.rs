//! The guard: a dead-man's switch over COMMAND's whole process tree.
//!
//! `lock run` and `run --lock` start it (`banklease __guard`, this binary) leading a process
//! group of its own, armed with the first proved deadline; it starts COMMAND as its child
//! (through `__exec`, which dies with it) and is the child subreaper of COMMAND's tree, so
//! every process of the tree stays its descendant whatever group or session it moves to
//! ([`super::tree`]). The supervisor sends it each new deadline as the holds are renewed, over
//! a socket of their own: the guard's stdin, stdout and stderr are COMMAND's. The socket lies
//! in a new directory only the supervisor's user may enter, and its peer must be the guard
//! (`SO_PEERCRED`): another user can neither connect first nor see it (an abstract socket was
//! anyone's to take, and one taken refused `lock run`). The guard stops
//! the whole tree — SIGTERM, then SIGKILL after `--kill-after` — when the deadline passes,
//! whatever the supervisor is doing (stopped, frozen, held by a debugger), and SIGKILLs it at
//! once when the supervisor dies. It tells the supervisor that it fired, and when COMMAND
//! exited (it reaps the tree).
//!
//! Invariant: **a paused supervisor cannot outlive its lock.** A deadline is the instant up to
//! which every hold is proved (send-time expiry on the holder's clock) less the stop margin the
//! supervisor itself keeps, so SIGKILL lands before any hold can lapse. Deadlines are on
//! `CLOCK_BOOTTIME`: one clock for both processes, and it counts time the host spent
//! suspended. The guard only ever acts on the last deadline it was sent: a supervisor that
//! stops renewing stops moving it. It starts COMMAND only once armed, so COMMAND never runs
//! unguarded, and not at all when its holds prove no time left. What remains: a freeze of the
//! whole host (or of supervisor and guard together) stops the switch with COMMAND, which may
//! act on thawing before the guard reads the clock; fenced writes are the protection there.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{Context, Result};
use banklease::clock::SharedClock;
use rustix::process::{Signal, WaitOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::Child;
use tokio::sync::watch;

use super::tree::{Cgroup, Tree};
use super::{Signals, EXIT_HOLD_LOST};

/// How often the guard reads the clock and looks whether its supervisor is still there.
const GUARD_POLL: Duration = Duration::from_millis(50);
/// What the guard says when it stops COMMAND's tree at the deadline.
const FIRED: &str = "fired";
/// What the guard says once its handlers are installed.
const ARMED: &str = "armed";
/// What the guard says once it started COMMAND: `started PID`.
const STARTED: &str = "started";
/// What the supervisor says once it checked that its peer is the guard: start COMMAND.
const GO: &str = "go";
/// What the guard says once COMMAND exited and it has no child at all: the whole tree is gone.
const EMPTY: &str = "empty";
/// What the guard says when it could not start COMMAND: `failed WHY`.
const FAILED: &str = "failed";
/// What the guard says when COMMAND exited: `exited RAW_WAIT_STATUS`.
const EXITED: &str = "exited";
/// How the supervisor tells the guard it sent COMMAND's tree SIGTERM itself.
const TERMED: &str = "termed";
/// How long a supervisor waits for its guard to arm and start COMMAND.
const ARMING: Duration = Duration::from_secs(10);
/// Rounds (10 ms apart) of kill and reap a guard whose supervisor is gone makes before exiting.
const GONE_ROUNDS: usize = 500;

/// The host's `CLOCK_BOOTTIME`: the same in every process, and it counts suspended time.
pub fn boottime() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// The deadline `left()` from now, on [`boottime`]. The clock is read first: a pause between
/// the two reads makes the deadline earlier, never later.
fn deadline(left: impl FnOnce() -> Duration) -> Duration {
    let now = boottime();
    now + left()
}

/// What the supervisor last told the guard, on [`boottime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// The holds are proved up to here: SIGTERM the tree then, SIGKILL `kill_after` later.
    Deadline(Duration),
    /// The supervisor sent the tree SIGTERM at this instant: SIGKILL it `kill_after` later,
    /// with no SIGTERM of the guard's own (a second one cuts short the shutdown the first
    /// began, as in programs that exit at once on a repeated ^C).
    Termed(Duration),
}

impl Told {
    /// The line that carries it on the guard's socket.
    fn line(self) -> String {
        match self {
            Told::Deadline(at) => format!("{}\n", at.as_nanos()),
            Told::Termed(at) => format!("{TERMED} {}\n", at.as_nanos()),
        }
    }

    /// The line read back; `None` for one the guard does not know (ignored).
    fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        let nanos = |n: &str| n.parse::<u64>().ok().map(Duration::from_nanos);
        match line.strip_prefix(TERMED) {
            Some(rest) => nanos(rest.trim()).map(Told::Termed),
            None => nanos(line).map(Told::Deadline),
        }
    }
}

/// The supervisor's end of a guard.
#[derive(Debug)]
pub struct Guard {
    child: Child,
    /// What to tell the guard, written to its socket by a task of its own (a stopped guard
    /// must never block the supervisor; only the newest word matters).
    told: watch::Sender<Told>,
    feeder: tokio::task::JoinHandle<()>,
    /// Tells the feeder to say `go`: the guard starts COMMAND.
    go: Option<tokio::sync::oneshot::Sender<()>>,
    /// What the guard says, until it started COMMAND; then read by a task of its own, which
    /// passes on the events and keeps `empty`.
    said: Option<Lines<BufReader<OwnedReadHalf>>>,
    events: Option<tokio::sync::mpsc::UnboundedReceiver<Heard>>,
    /// The guard said COMMAND's whole tree is gone ([`EMPTY`]).
    empty: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Once the guard is heard gone: nothing more will be said.
    gone: bool,
}

/// What the guard said, or that it is gone.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// It began stopping COMMAND's tree at the deadline.
    Fired,
    /// COMMAND exited (the guard reaped it), with this status.
    Exited(ExitStatus),
    /// It exited (or was killed): COMMAND died with it (its death signal, unless it exec'd a
    /// setuid program, which clears it), the rest of the
    /// tree is re-parented to the supervisor.
    Gone,
}

/// What the guard's command line needs besides the deadline.
#[derive(Debug)]
pub struct Spawn<'a> {
    pub argv: &'a [OsString],
    pub env: &'a [(&'a str, OsString)],
    pub cgroup: Option<&'a Cgroup>,
    /// Where the guard says it proved the tree gone after the supervisor
    /// died.
    pub done: Option<&'a std::path::Path>,
    pub kill_after: Duration,
}

impl Guard {
    /// Start the guard leading a new process group, armed with the proved time `left()` gives;
    /// it starts COMMAND (`spawn.argv`, with `spawn.env` added) as its child once armed. Talks
    /// to it over a Unix socket in a private directory, whose peer must be the guard (its pid,
    /// by `SO_PEERCRED`): the guard's stdin, stdout and stderr are COMMAND's.
    pub async fn spawn(left: impl FnOnce() -> Duration, spawn: Spawn<'_>) -> Result<Self> {
        // The program this process runs, even if its file was replaced or removed since (an
        // upgrade while `lock run` waited): `/proc/self/exe`, resolved in the forked child.
        let proc_exe = std::path::Path::new("/proc/self/exe");
        let me = if proc_exe.exists() {
            proc_exe.to_owned()
        } else {
            std::env::current_exe().context("cannot find this binary to start its guard")?
        };
        let (dir, socket, listener) = listen()?;
        let first = deadline(left);
        let mut command = tokio::process::Command::new(me);
        command
            .args(["__guard", "--parent"])
            .arg(std::process::id().to_string())
            .arg("--deadline-ns")
            .arg(first.as_nanos().to_string())
            .arg("--kill-after")
            .arg(humantime::format_duration(spawn.kill_after).to_string())
            .arg("--socket")
            .arg(&socket);
        if let Some(cgroup) = spawn.cgroup {
            command.arg("--cgroup").arg(cgroup.dir());
        }
        if let Some(done) = spawn.done {
            command.arg("--done").arg(done);
        }
        // Not killed when dropped: a supervisor that unwinds without stopping it closes its
        // socket, and the guard then kills the tree, as for a supervisor that died.
        let mut child = command
            .arg("--")
            .args(spawn.argv)
            .envs(spawn.env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .spawn()
            .context("cannot start the guard of COMMAND's tree")?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        let accepted = tokio::time::timeout(ARMING, listener.accept()).await;
        // Connected or not, the name has served: nothing is left behind.
        drop(listener);
        if let Err(e) = dir.close() {
            tracing::debug!(error = %e, "cannot remove the guard's socket directory");
        }
        let stream = match accepted {
            Ok(Ok((stream, _))) => stream,
            Ok(Err(e)) => {
                let _ = child.start_kill();
                return Err(anyhow::Error::new(e).context("the guard did not connect"));
            }
            Err(_) => {
                let _ = child.start_kill();
                anyhow::bail!(
                    "the guard did not connect within {}",
                    humantime::format_duration(ARMING)
                );
            }
        };
        let peer = stream.peer_cred().ok().and_then(|c| c.pid());
        if peer.is_none() || peer != pid {
            let _ = child.start_kill();
            let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
            anyhow::bail!(
                "a process other than the guard connected to its socket: pid={peer}; another \
                 process of this user is interfering with `lock run`"
            );
        }
        let (read, mut write) = stream.into_split();
        let (told, mut latest) = watch::channel(Told::Deadline(first));
        // The peer proved to be the guard: it starts COMMAND once told to (`started`), after
        // the caller bound the holds to the guard (`Proof::bind_before_start`). Nothing is
        // written before: the guard reads `go` first.
        let (go, went) = tokio::sync::oneshot::channel::<()>();
        let feeder = tokio::spawn(async move {
            if went.await.is_err() {
                return;
            }
            // `go`, with the deadline proved while the guard waited for it: the guard starts
            // COMMAND under that one, not the one on its command line.
            let proved = latest.borrow_and_update().line();
            if write
                .write_all(format!("{GO} {proved}").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            while latest.changed().await.is_ok() {
                let line = latest.borrow_and_update().line();
                if write.write_all(line.as_bytes()).await.is_err() {
                    // The guard is gone: the supervisor hears it from its socket.
                    return;
                }
            }
        });
        Ok(Self {
            child,
            told,
            feeder,
            go: Some(go),
            said: Some(BufReader::new(read).lines()),
            events: None,
            empty: std::sync::Arc::default(),
            gone: false,
        })
    }

    /// Move the deadline: the holds are proved for `left()` more before COMMAND must be stopped.
    pub fn prove(&self, left: impl FnOnce() -> Duration) {
        let next = deadline(left);
        self.told.send_if_modified(|told| match *told {
            // Unchanged to the millisecond: nothing worth a write.
            Told::Deadline(d) if d.abs_diff(next) < Duration::from_millis(1) => false,
            Told::Deadline(_) => {
                *told = Told::Deadline(next);
                true
            }
            // Stopping is final.
            Told::Termed(_) => false,
        });
    }

    /// The supervisor has just sent COMMAND's tree SIGTERM: the guard SIGKILLs it
    /// `kill_after` from now should the supervisor not (it is stopped, or dies), and sends no
    /// SIGTERM of its own.
    pub fn termed(&self) {
        self.told.send_replace(Told::Termed(boottime()));
    }

    /// The guard's pid: the root of COMMAND's tree, and the leader of COMMAND's process group.
    pub fn pid(&self) -> u32 {
        self.child
            .id()
            .expect("a guard not yet waited for has a pid")
    }

    /// Wait (at most `ARMING`) until the guard says it is armed and has started COMMAND: its
    /// handlers are installed, its deadline running. COMMAND's pid, and its start time (clock
    /// ticks after boot) as the guard read it before COMMAND could be reaped.
    pub async fn started(&mut self) -> Result<(u32, Option<u64>)> {
        if let Some(go) = self.go.take() {
            if go.send(()).is_err() {
                anyhow::bail!("cannot tell the guard to start COMMAND: its channel is closed");
            }
        }
        let Some(lines) = self.said.as_mut() else {
            anyhow::bail!("the guard already started COMMAND");
        };
        for expected in [ARMED, STARTED] {
            let said = tokio::time::timeout(ARMING, lines.next_line()).await;
            let line = match said {
                Ok(Ok(Some(line))) => line,
                Ok(_) => anyhow::bail!("the guard exited before it started COMMAND"),
                Err(_) => anyhow::bail!(
                    "the guard did not start COMMAND within {}",
                    humantime::format_duration(ARMING)
                ),
            };
            let line = line.trim();
            if expected == ARMED && line == ARMED {
                continue;
            }
            if let Some(rest) = line.strip_prefix(STARTED).map(str::trim) {
                let mut words = rest.split_whitespace();
                let pid = words
                    .next()
                    .and_then(|p| p.parse().ok())
                    .with_context(|| format!("the guard said `{line}`"))?;
                let ticks = words.next().and_then(|t| t.parse().ok());
                self.listen();
                return Ok((pid, ticks));
            }
            match line.strip_prefix(FAILED) {
                Some(why) => anyhow::bail!("{}", why.trim()),
                None => anyhow::bail!("the guard said `{line}` instead of `{expected}`"),
            }
        }
        unreachable!("the loop returns at `started`")
    }

    /// From COMMAND's start on, a task reads what the guard says: `empty` is kept (the tree's
    /// end is asked for, not waited for), the rest passed on to [`heard`](Self::heard).
    fn listen(&mut self) {
        let Some(mut lines) = self.said.take() else {
            return;
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let empty = std::sync::Arc::clone(&self.empty);
        tokio::spawn(async move {
            loop {
                let heard = match lines.next_line().await {
                    Ok(Some(line)) => {
                        let line = line.trim();
                        let mut words = line.split_whitespace();
                        match words.next() {
                            Some(FIRED) => Heard::Fired,
                            Some(EMPTY) => {
                                empty.store(true, std::sync::atomic::Ordering::SeqCst);
                                continue;
                            }
                            Some(EXITED) => {
                                let Some(raw) = words.next().and_then(|r| r.parse::<i32>().ok())
                                else {
                                    continue;
                                };
                                // `exited RAW empty`: nothing of the tree was left either.
                                if words.next() == Some(EMPTY) {
                                    empty.store(true, std::sync::atomic::Ordering::SeqCst);
                                }
                                Heard::Exited(ExitStatus::from_raw(raw))
                            }
                            _ => continue,
                        }
                    }
                    Ok(None) | Err(_) => Heard::Gone,
                };
                let gone = heard == Heard::Gone;
                if tx.send(heard).is_err() || gone {
                    return;
                }
            }
        });
        self.events = Some(rx);
    }

    /// The next thing the guard says (cancel-safe). Once it is gone, pending forever.
    pub async fn heard(&mut self) -> Heard {
        if self.gone {
            return std::future::pending().await;
        }
        let next = match self.events.as_mut() {
            Some(events) => events.recv().await,
            None => None,
        };
        match next {
            Some(Heard::Gone) | None => {
                self.gone = true;
                Heard::Gone
            }
            Some(heard) => heard,
        }
    }

    /// Whether the guard said COMMAND's whole tree is gone: COMMAND exited and the guard, the
    /// subreaper every orphan of the tree comes back to, has no child at all.
    pub fn said_empty(&self) -> bool {
        self.empty.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether the guard is heard gone (exited or killed).
    pub fn is_gone(&self) -> bool {
        self.gone
    }

    /// SIGCONT the guard if it is stopped: a dead-man's switch that does not run is none.
    pub fn continue_if_stopped(&self) {
        let Some(pid) = self.child.id() else {
            return;
        };
        let stopped = banklease::process::proc_stat(pid).is_some_and(|s| s.state == 'T');
        if stopped {
            tracing::warn!(pid, "COMMAND's guard was stopped; continuing it");
            if let Some(pid) = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, Signal::CONT);
            }
        }
    }

    /// Stop the guard (COMMAND and its tree are gone): killed, which closes its socket.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        self.feeder.abort();
    }
}

/// The supervisor's end of the guard's socket: `s` in a new directory of the temporary
/// directory (`/tmp` where that path is too long for a socket), mode 0700, so no other user
/// can reach it; removed once the guard connected.
fn listen() -> Result<(tempfile::TempDir, PathBuf, tokio::net::UnixListener)> {
    // A socket's path must fit in `sun_path` (108 bytes with its NUL).
    let base = Some(std::env::temp_dir())
        .filter(|t| t.as_os_str().len() < 60)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let dir = tempfile::Builder::new()
        .prefix("banklease-guard-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir_in(&base)
        .with_context(|| {
            format!(
                "cannot make the guard's socket directory in dir=`{}`",
                base.display()
            )
        })?;
    let socket = dir.path().join("s");
    let listener = std::os::unix::net::UnixListener::bind(&socket)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::UnixListener::from_std)
        .with_context(|| format!("cannot open the guard's socket=`{}`", socket.display()))?;
    Ok((dir, socket, listener))
}

fn connect(socket: &std::path::Path) -> std::io::Result<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::connect(socket)?;
    stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(stream)
}

/// `banklease __guard`'s command line.
#[derive(Debug)]
pub struct Args {
    /// The supervisor's pid.
    pub parent: i32,
    /// The first deadline, in ns on [`boottime`].
    pub deadline_ns: u64,
    pub kill_after: Duration,
    /// The supervisor's socket.
    pub socket: PathBuf,
    /// COMMAND's cgroup, if it has one.
    pub cgroup: Option<PathBuf>,
    /// Where to say the tree was proved gone after the supervisor died.
    pub done: Option<PathBuf>,
    pub argv: Vec<OsString>,
}

/// `banklease __guard` (hidden), leading a process group of its own and the child subreaper of
/// its tree: start COMMAND (through `__exec`), reap the tree and say when COMMAND exited;
/// stop the tree at the deadline (the last one read from the socket); kill it at once when the
/// supervisor is gone (its socket closed, or no longer this process's parent).
pub async fn run(args: Args, clock: &SharedClock) -> crate::Outcome {
    // The tree's forwarded signals are COMMAND's, not ours; nor is a ^Z (the switch must keep
    // counting while COMMAND is stopped), nor what a script sends its own group
    // (`kill -USR1 0`).
    let (Ok(_signals), Ok(_ignored), Ok(mut children)) = (
        Signals::new(),
        ignore_others(),
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()),
    ) else {
        // Unarmed: COMMAND is not started.
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    };
    let me = rustix::process::getpid();
    if rustix::process::set_child_subreaper(Some(me)).is_err() {
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    }
    let Ok(stream) = connect(&args.socket) else {
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    };
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let cgroup = args.cgroup.clone().map(Cgroup::at);
    let tree = Tree::new(me.as_raw_nonzero().get().unsigned_abs(), cgroup.clone());
    let mut guard = Guarding {
        tree,
        cgroup,
        done: args.done.clone(),
        kill_after: args.kill_after,
        told: Told::Deadline(Duration::from_nanos(args.deadline_ns)),
        armed: deadline_armed(),
        fired: false,
        kill_at: None,
        command: None,
    };
    if say(&mut write, ARMED).await.is_err() {
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    }
    // Not before the supervisor checked that this is its guard (its socket could be anyone's).
    let go = tokio::time::timeout(ARMING, lines.next_line()).await;
    let Ok(Ok(Some(go))) = go else {
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    };
    // `go DEADLINE`: the deadline proved as the supervisor said it.
    match go.trim().strip_prefix(GO) {
        Some(proved) => guard.heard(proved.trim()),
        None => return crate::Outcome::Exit(EXIT_HOLD_LOST),
    }
    match start_command(&args) {
        Ok(pid) => {
            guard.command = Some(pid);
            guard.tree = guard.tree.clone().with_group(pid);
            // Read before this guard can reap it: COMMAND may exit at once.
            let ticks = banklease::process::proc_stat(pid)
                .map_or_else(String::new, |s| s.start_ticks.to_string());
            if say(&mut write, &format!("{STARTED} {pid} {ticks}"))
                .await
                .is_err()
            {
                return guard.supervisor_gone(clock).await;
            }
        }
        Err(e) => {
            let _ = say(&mut write, &format!("{FAILED} {e:#}")).await;
            return crate::Outcome::Exit(EXIT_HOLD_LOST);
        }
    }
    let mut said_empty = false;
    loop {
        for said in guard.reap() {
            if say(&mut write, &said).await.is_err() {
                return guard.supervisor_gone(clock).await;
            }
            said_empty |= said.ends_with(EMPTY);
        }
        // Once COMMAND exited, the moment the tree is all gone (said once: nothing can join an
        // empty tree).
        if !said_empty && guard.command.is_none() && childless() {
            if say(&mut write, EMPTY).await.is_err() {
                return guard.supervisor_gone(clock).await;
            }
            said_empty = true;
        }
        let parent_now = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        if parent_now != args.parent {
            return guard.supervisor_gone(clock).await;
        }
        if guard.due() && say(&mut write, FIRED).await.is_err() {
            return guard.supervisor_gone(clock).await;
        }
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => guard.heard(&line),
                // The supervisor is gone (its end of the socket closed with it).
                Ok(None) | Err(_) => return guard.supervisor_gone(clock).await,
            },
            _ = children.recv() => {}
            () = clock.sleep(GUARD_POLL) => {}
        }
    }
}

/// Start COMMAND as `__exec` (this binary), in the guard's process group — not leading one of
/// its own, so that `setsid` as COMMAND starts its session in place (a group leader's `setsid`
/// forks and exits at once) — with the guard's stdin, stdout and stderr (the supervisor's); its
/// pid. What COMMAND sends its group reaches the guard, which ignores all but SIGSTOP; the
/// supervisor continues a stopped guard.
fn start_command(args: &Args) -> Result<u32> {
    use std::os::unix::process::CommandExt as _;
    let me = std::path::Path::new("/proc/self/exe");
    let mut command = std::process::Command::new(me);
    command
        .args(["__exec", "--parent"])
        .arg(std::process::id().to_string());
    if let Some(dir) = &args.cgroup {
        command.arg("--cgroup").arg(dir);
    }
    let child = command
        .arg("--")
        .args(&args.argv)
        .process_group(rustix::process::getpgrp().as_raw_nonzero().get())
        .spawn()
        .context("cannot start COMMAND")?;
    // Reaped by `Guarding::reap`, as every process of the tree.
    Ok(child.id())
}

/// The guard's state.
struct Guarding {
    tree: Tree,
    cgroup: Option<Cgroup>,
    done: Option<PathBuf>,
    kill_after: Duration,
    told: Told,
    armed: bool,
    fired: bool,
    /// When the tree gets SIGKILL, once it was told SIGTERM.
    kill_at: Option<Duration>,
    /// COMMAND's pid, until it is reaped.
    command: Option<u32>,
}

impl Guarding {
    /// A line from the supervisor.
    fn heard(&mut self, line: &str) {
        if self.fired {
            return;
        }
        self.told = match (self.told, Told::parse(line)) {
            // Never later than the deadline already proved: the kill stays inside the holds.
            (Told::Deadline(d), Some(Told::Termed(at))) => Told::Termed(d.min(at)),
            (Told::Deadline(_), Some(next)) => next,
            // After `termed`, nothing moves the kill.
            (told, _) => told,
        };
    }

    /// Act on the deadline: at it, SIGTERM the tree (unless the supervisor did: `termed`) and
    /// set the SIGKILL `kill_after` after it — at once when that is past already (this guard
    /// ran late: the host was busy). A stopped tree is not continued: SIGKILL ends it where it
    /// stands. True when it just fired (to be said).
    fn due(&mut self) -> bool {
        let now = boottime();
        let mut fired_now = false;
        let (Told::Deadline(deadline) | Told::Termed(deadline)) = self.told;
        if self.armed && !self.fired && now >= deadline {
            self.fired = true;
            fired_now = true;
            let kill_at = deadline + self.kill_after;
            if now < kill_at && !matches!(self.told, Told::Termed(_)) {
                self.tree.signal(Signal::TERM);
            }
            self.kill_at = Some(kill_at);
        }
        // Killed again at every look until none of it lives: a process in an uninterruptible
        // sleep, or one that forked as a walk passed, is not let go.
        if self.kill_at.is_some_and(|at| now >= at) && !childless() {
            self.tree.kill();
        }
        fired_now
    }

    /// Reap every child that exited (the tree's orphans come to the guard); what to say of
    /// COMMAND's exit (`exited RAW`, and `empty` after it when nothing of the tree is left).
    fn reap(&mut self) -> Vec<String> {
        let mut said = Vec::new();
        while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
            let pid = pid.as_raw_nonzero().get().unsigned_abs();
            if Some(pid) == self.command {
                self.command = None;
                let empty = if childless() { " empty" } else { "" };
                said.push(format!("{EXITED} {}{empty}", status.as_raw()));
            }
        }
        said
    }

    /// The supervisor is gone: kill the whole tree, reap it, remove its cgroup — or, without
    /// one, say it is gone where a waiter on this host looks — and exit.
    async fn supervisor_gone(mut self, clock: &SharedClock) -> crate::Outcome {
        let mut gone = false;
        for _ in 0..GONE_ROUNDS {
            self.tree.kill();
            self.reap();
            // A walk can miss a process that forks and exits as it passes; the kernel's answer
            // to "any child?" cannot (and a process that left the cgroup is still a child).
            if childless() && self.tree.members().is_empty() {
                gone = true;
                break;
            }
            clock.sleep(Duration::from_millis(10)).await;
        }
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
        // Only a walk that saw every process proves the tree gone: behind a `/proc` that hides
        // some (a setuid program of the tree, under `hidepid`) the lock runs to its expiry.
        let seen_all = !banklease::process::proc_hides_processes();
        if let (true, true, Some(done)) = (gone, seen_all, &self.done) {
            // New, never through a symlink, and the supervisor's user's (the waiter checks).
            use std::os::unix::fs::OpenOptionsExt as _;
            let made = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc_nofollow())
                .open(done);
            if let Err(e) = made {
                tracing::warn!(path = %done.display(), error = %e,
                    "cannot say COMMAND's tree is gone; a waiter on this host waits for the lock's expiry");
            }
        }
        crate::Outcome::Exit(EXIT_HOLD_LOST)
    }
}

/// Whether this process has no child at all, live or unreaped: for the guard, the child
/// subreaper of COMMAND's tree, that every process of the tree is gone — whatever group,
/// session or cgroup it moved to, however fast it forks and exits (the kernel re-parents a
/// dying process's children to the subreaper before the process itself is reaped). One
/// question to the kernel, atomic, where a walk of `/proc` is not.
fn childless() -> bool {
    use rustix::process::{WaitId, WaitIdOptions};
    let any = WaitIdOptions::NOHANG
        | WaitIdOptions::NOWAIT
        | WaitIdOptions::EXITED
        | WaitIdOptions::STOPPED
        | WaitIdOptions::CONTINUED;
    matches!(
        rustix::process::waitid(WaitId::All, any),
        Err(rustix::io::Errno::CHILD)
    )
}

/// `O_NOFOLLOW`, from the kernel's own definition.
fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// One line to the supervisor.
async fn say(to: &mut OwnedWriteHalf, what: &str) -> std::io::Result<()> {
    to.write_all(format!("{what}\n").as_bytes()).await
}

/// The signals taken over besides [`Signals`]': job control's (their default stops the
/// process) and those a script may send its own group.
fn ignore_others() -> std::io::Result<Vec<tokio::signal::unix::Signal>> {
    use tokio::signal::unix::{signal, SignalKind};
    [
        Signal::TSTP,
        Signal::TTIN,
        Signal::TTOU,
        Signal::QUIT,
        Signal::USR1,
        Signal::USR2,
        Signal::ALARM,
    ]
    .into_iter()
    .map(|s| signal(SignalKind::from_raw(s.as_raw())))
    .collect()
}

/// Whether the guard acts on its deadline: always, except in a build with the `chaos` feature
/// and `BANKLEASE_CHAOS_NO_DEADLINE=1`, which the process-level adversary uses to show what the
/// switch prevents.
fn deadline_armed() -> bool {
    #[cfg(feature = "chaos")]
    if std::env::var_os("BANKLEASE_CHAOS_NO_DEADLINE").is_some_and(|v| v == "1") {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_supervisor_tells_reads_back_the_same() {
        for told in [
            Told::Deadline(Duration::new(12, 345)),
            Told::Termed(Duration::new(67, 89)),
        ] {
            assert_eq!(Told::parse(&told.line()), Some(told));
        }
        assert_eq!(Told::parse("termed soon"), None);
        assert_eq!(Told::parse("armed"), None);
    }
}
