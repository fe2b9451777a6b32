//! The guard: a dead-man's switch in COMMAND's process group.
//!
//! `lock run` and `run --lock` start it (`banklease __guard`, this binary) in COMMAND's group,
//! armed with the first proved deadline, and send it each new deadline on its stdin as the holds
//! are renewed. The guard stops COMMAND's group — SIGTERM, then SIGKILL after `--kill-after` —
//! when the deadline passes, whatever the supervisor is doing (stopped, frozen in a cgroup,
//! held by a debugger), and SIGKILLs the group at once when the supervisor dies. It tells the
//! supervisor on its stdout that it fired.
//!
//! Invariant: **a paused supervisor cannot outlive its lock.** A deadline is the instant up to
//! which every hold is proved (send-time expiry on the holder's clock) less the stop margin the
//! supervisor itself keeps, so SIGKILL lands before any hold can lapse. Deadlines are on
//! `CLOCK_BOOTTIME`: one clock for both processes, and it counts time the host spent
//! suspended. The guard only ever acts on the last deadline it was sent: a supervisor that
//! stops renewing stops moving it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use banklease::clock::SharedClock;
use rustix::process::{Pid, Signal};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};
use tokio::sync::watch;

use super::{send, Signals, EXIT_HOLD_LOST};

/// How often the guard reads the clock and looks whether its supervisor is still there.
const GUARD_POLL: Duration = Duration::from_millis(50);
/// What the guard prints when it stops COMMAND at the deadline.
const FIRED: &str = "fired";
/// What the guard prints once its handlers are installed.
const ARMED: &str = "armed";
/// How the supervisor tells the guard it sent COMMAND's group SIGTERM itself.
const TERMED: &str = "termed";
/// How long a supervisor that saw COMMAND exit reads what its guard already wrote.
const SETTLE: Duration = Duration::from_millis(10);
/// How long a supervisor waits for its guard to arm.
const ARMING: Duration = Duration::from_secs(10);

/// The host's `CLOCK_BOOTTIME`: the same in every process, and it counts suspended time.
pub fn boottime() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
    /// The holds are proved up to here: SIGTERM the group then, SIGKILL `kill_after` later.
    Deadline(Duration),
    /// The supervisor sent the group SIGTERM at this instant: SIGKILL it `kill_after` later,
    /// with no SIGTERM of the guard's own (a second one cuts short the shutdown the first
    /// began, as in programs that exit at once on a repeated ^C).
    Termed(Duration),
}

impl Told {
    /// The line that carries it on the guard's stdin.
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
    /// What to tell the guard, written to its stdin by a task of its own (a stopped guard
    /// must never block the supervisor; only the newest word matters).
    told: watch::Sender<Told>,
    feeder: tokio::task::JoinHandle<()>,
    said: Lines<BufReader<ChildStdout>>,
    fired: bool,
    /// The earliest instant (ns on [`boottime`]) the guard was ever told to act at: it cannot
    /// fire before it.
    earliest: AtomicU64,
}

/// What the guard said, or that it is gone.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// It stopped COMMAND at the deadline.
    Fired,
    /// It exited (or was killed) without firing: COMMAND is unguarded.
    Gone,
}

impl Guard {
    /// Start the guard leading a new process group (COMMAND joins it once the guard is
    /// [`armed`](Self::armed)), armed with the proved time `left()` gives; `kill_after` between
    /// its SIGTERM and SIGKILL.
    pub fn spawn(left: impl FnOnce() -> Duration, kill_after: Duration) -> Result<Self> {
        // The program this process runs, even if its file was replaced or removed since (an
        // upgrade while `lock run` waited): `/proc/self/exe`, resolved in the forked child.
        let proc_exe = std::path::Path::new("/proc/self/exe");
        let me = if proc_exe.exists() {
            proc_exe.to_owned()
        } else {
            std::env::current_exe().context("cannot find this binary to start its guard")?
        };
        let first = deadline(left);
        // Not killed when dropped: a supervisor that unwinds without stopping it closes its
        // stdin, and the guard then kills the group, as for a supervisor that died.
        let mut child = tokio::process::Command::new(me)
            .args(["__guard", "--parent"])
            .arg(std::process::id().to_string())
            .arg("--deadline-ns")
            .arg(first.as_nanos().to_string())
            .arg("--kill-after")
            .arg(humantime::format_duration(kill_after).to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .context("cannot start the guard of COMMAND's process group")?;
        let mut stdin = child.stdin.take().context("the guard has no stdin")?;
        let stdout = child.stdout.take().context("the guard has no stdout")?;
        let (told, mut latest) = watch::channel(Told::Deadline(first));
        let feeder = tokio::spawn(async move {
            while latest.changed().await.is_ok() {
                let line = latest.borrow_and_update().line();
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    // The guard is gone: the supervisor hears it from its exit.
                    return;
                }
            }
        });
        Ok(Self {
            child,
            told,
            feeder,
            said: BufReader::new(stdout).lines(),
            fired: false,
            earliest: AtomicU64::new(nanos(first)),
        })
    }

    /// Move the deadline: the holds are proved for `left()` more before COMMAND must be stopped.
    pub fn prove(&self, left: impl FnOnce() -> Duration) {
        let next = deadline(left);
        self.earliest.fetch_min(nanos(next), Ordering::SeqCst);
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

    /// The supervisor has just sent COMMAND's group SIGTERM: the guard SIGKILLs it
    /// `kill_after` from now should the supervisor not (it is stopped, or dies), and sends no
    /// SIGTERM of its own.
    pub fn termed(&self) {
        let now = boottime();
        self.earliest.fetch_min(nanos(now), Ordering::SeqCst);
        self.told.send_replace(Told::Termed(now));
    }

    /// COMMAND's process group: the guard leads it.
    pub fn group(&self) -> Pid {
        self.child
            .id()
            .and_then(|p| Pid::from_raw(i32::try_from(p).ok()?))
            .expect("a guard not yet waited for has a pid")
    }

    /// Wait (at most `ARMING`) until the guard says it is armed: its handlers are installed and
    /// its deadline running. Only then may COMMAND join its group.
    pub async fn armed(&mut self) -> Result<()> {
        let said = tokio::time::timeout(ARMING, self.said.next_line()).await;
        match said {
            Ok(Ok(Some(line))) if line.trim() == ARMED => Ok(()),
            Ok(Ok(Some(line))) => anyhow::bail!("the guard said `{line}` instead of arming"),
            Ok(_) => anyhow::bail!("the guard exited before it was armed"),
            Err(_) => anyhow::bail!(
                "the guard was not armed within {}",
                humantime::format_duration(ARMING)
            ),
        }
    }

    /// The next thing the guard says (cancel-safe). Once it is gone, pending forever.
    pub async fn heard(&mut self) -> Heard {
        loop {
            match self.said.next_line().await {
                Ok(Some(line)) if line.trim() == FIRED => {
                    self.fired = true;
                    return Heard::Fired;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Heard::Gone,
            }
        }
    }

    /// After COMMAND exited: whether the guard fired, reading what it may still have to say.
    /// Before the earliest deadline it was ever told it cannot have fired (the supervisor is
    /// alive, so it has no other cause to), and nothing is waited for: the next holder is not
    /// kept waiting on a normal exit.
    pub async fn settle(&mut self) -> bool {
        if !self.fired && nanos(boottime()) < self.earliest.load(Ordering::SeqCst) {
            return false;
        }
        if !self.fired {
            // It prints before it signals: when the guard's signal ended COMMAND, its line was in
            // the pipe before COMMAND died, so only the reactor's turn to see it is waited for.
            let _ = tokio::time::timeout(SETTLE, self.heard()).await;
        }
        self.fired
    }

    /// Stop the guard (COMMAND is gone): killed before its stdin closes, which it would take for
    /// its supervisor's death.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        self.feeder.abort();
    }
}

/// `banklease __guard --parent PID --deadline-ns NS --kill-after D` (hidden), in COMMAND's
/// process group: stop the group at the deadline (the last one read from stdin), kill it at once
/// when PID is no longer this process's parent or stdin closes (the supervisor died).
pub async fn run(
    parent: i32,
    deadline_ns: u64,
    kill_after: Duration,
    clock: &SharedClock,
) -> crate::Outcome {
    // The group's forwarded signals are COMMAND's, not ours; nor is a ^Z the supervisor
    // forwards (the switch must keep counting while COMMAND is stopped), nor what a script
    // sends its own group (`kill -USR1 0`).
    let (Ok(_signals), Ok(_ignored)) = (Signals::new(), ignore_others()) else {
        // Unarmed: the supervisor does not start COMMAND.
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    };
    let group = rustix::process::getpgrp();
    let mut told = Told::Deadline(Duration::from_nanos(deadline_ns));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let armed = deadline_armed();
    if say(ARMED).is_err() {
        return crate::Outcome::Exit(EXIT_HOLD_LOST);
    }
    loop {
        let parent_now = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        if parent_now != parent {
            send(group, Signal::KILL);
            return crate::Outcome::Exit(EXIT_HOLD_LOST);
        }
        let (Told::Deadline(deadline) | Told::Termed(deadline)) = told;
        if armed && boottime() >= deadline {
            let termed = matches!(told, Told::Termed(_));
            return fire(group, deadline, kill_after, termed, clock).await;
        }
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    told = match (told, Told::parse(&line)) {
                        // Never later than the deadline already proved: the kill stays
                        // inside the holds.
                        (Told::Deadline(d), Some(Told::Termed(at))) => Told::Termed(d.min(at)),
                        (Told::Deadline(_), Some(next)) => next,
                        // After `termed`, nothing moves the kill.
                        (told, _) => told,
                    };
                }
                // The supervisor is gone (its end of the pipe closed with it).
                Ok(None) | Err(_) => {
                    send(group, Signal::KILL);
                    return crate::Outcome::Exit(EXIT_HOLD_LOST);
                }
            },
            () = clock.sleep(GUARD_POLL) => {}
        }
    }
}

/// One line to the supervisor.
fn say(what: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{what}").and_then(|()| out.flush())
}

/// The deadline passed: say so, SIGTERM the group (unless the supervisor did: `termed`),
/// SIGKILL it `kill_after` after the deadline (this guard goes with it) — at once when that is
/// past already (this guard ran late: it was stopped with the group, or the host was busy). A
/// stopped COMMAND is not continued: SIGKILL ends it where it stands.
async fn fire(
    group: Pid,
    deadline: Duration,
    kill_after: Duration,
    termed: bool,
    clock: &SharedClock,
) -> crate::Outcome {
    let _ = say(FIRED);
    let kill_at = deadline + kill_after;
    if boottime() < kill_at {
        if !termed {
            send(group, Signal::TERM);
        }
        while boottime() < kill_at {
            clock
                .sleep(GUARD_POLL.min(kill_at.saturating_sub(boottime())))
                .await;
        }
    }
    send(group, Signal::KILL);
    crate::Outcome::Exit(EXIT_HOLD_LOST)
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
