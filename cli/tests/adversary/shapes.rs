//! What the adversary's launches run and where: COMMAND shapes whose worker leaves the guard's
//! process group or outlives COMMAND, and wrappers that put a supervisor in another time
//! namespace or behind a `hidepid` `/proc`. Each is used only where this machine can run it
//! (probed once per run; what is skipped is said, with the reason).

use std::path::Path;
use std::process::{Command, Stdio};

/// How COMMAND runs the witness script (`$ADV_SCRIPT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `sh -c SCRIPT`.
    Plain,
    /// `timeout 600 sh -c SCRIPT`: a process group of its own.
    Timeout,
    /// `setsid sh -c SCRIPT`: a session of its own.
    Setsid,
    /// A double-forking daemon in a session of its own; COMMAND waits for it to say it is done.
    Daemon,
    /// `nohup sh -c SCRIPT &`, then `wait`.
    Nohup,
    /// A multi-threaded COMMAND (python3) whose second thread runs the script.
    Threads,
    /// A daemon left behind: COMMAND exits 0.3 s after starting it.
    Early,
    /// A chain left behind whose every generation ticks once, forks the next and exits (a new
    /// pid each time, as a re-daemonizing daemon): COMMAND exits 0.3 s after starting it.
    Hopping,
    /// A worker that writes its pid into the parent of its cgroup's `cgroup.procs` (as any
    /// process of the user may) and then runs the script: out of the tree's cgroup, still the
    /// guard's descendant and in COMMAND's process group.
    Escaper,
}

pub const SHAPES: [Shape; 9] = [
    Shape::Plain,
    Shape::Timeout,
    Shape::Setsid,
    Shape::Daemon,
    Shape::Nohup,
    Shape::Threads,
    Shape::Early,
    Shape::Hopping,
    Shape::Escaper,
];

/// The shapes whose worker a stop of COMMAND's process group alone would miss; the first, which
/// a launch takes most often, leaves it behind on every run (the others only when COMMAND is
/// stopped too).
pub const ESCAPING: [Shape; 4] = [Shape::Early, Shape::Daemon, Shape::Timeout, Shape::Setsid];

/// Waits (bounded: 10 minutes of 50 ms) for the script's `$ADV_DONE`.
const WAIT_DONE: &str =
    r#"i=0; while [ ! -e "$ADV_DONE" ] && [ $i -lt 12000 ]; do sleep 0.05; i=$((i+1)); done"#;

/// The hopping chain: the witness's start, then one tick per generation until `ADV_RUN_MS` ran
/// out, then its end (no fenced puts).
const HOP: &str = r#"T=$BANKLEASE_LOCK_TOKEN; L=$ADV_LAUNCH; W=$ADV_WITNESS
echo "$BANKLEASE_LOCK_OWNER $BANKLEASE_LOCK_SESSION" > "$ADV_HOLDER"
echo "start $T $(date +%s%N) $L" >> "$W"
E=$(( $(date +%s%N) + ADV_RUN_MS * 1000000 ))
hop() {
  t=$(date +%s%N)
  if [ "$t" -ge "$E" ]; then echo "end $T $t $L" >> "$W"; : > "$ADV_DONE"; exit 0; fi
  echo "tick $T $t $L" >> "$W"
  sleep 0.04
  hop &
  exit 0
}
hop &
sleep 0.3
"#;

/// The escaper: its cgroup's parent from `/proc/self/cgroup` and the cgroup2 mount from
/// `/proc/self/mountinfo`; where there is none, it runs the script where it is.
const ESCAPE: &str = r#"cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
mnt=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break } }' /proc/self/mountinfo)
if [ -n "$cg" ] && [ "$cg" != / ] && [ -n "$mnt" ]; then
  echo $$ > "$mnt${cg%/*}/cgroup.procs" 2>/dev/null || true
fi
eval "$ADV_SCRIPT"
"#;

const THREADS: &str = "import os, subprocess, threading\n\
t = threading.Thread(target=subprocess.run, args=(['sh', '-c', os.environ['ADV_SCRIPT']],))\n\
t.start()\n\
t.join()\n";

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Plain => "sh -c",
            Shape::Timeout => "timeout",
            Shape::Setsid => "setsid",
            Shape::Daemon => "daemon",
            Shape::Nohup => "nohup &",
            Shape::Threads => "threads",
            Shape::Early => "exits early",
            Shape::Hopping => "hopping chain",
            Shape::Escaper => "leaves its cgroup",
        }
    }

    /// COMMAND's argv.
    pub fn argv(self) -> Vec<String> {
        let sh = |line: String| vec!["sh".to_owned(), "-c".to_owned(), line];
        let script = r#""$ADV_SCRIPT""#;
        match self {
            Shape::Plain => sh(format!("eval {script}")),
            Shape::Timeout => ["timeout", "600", "sh", "-c", "eval \"$ADV_SCRIPT\""]
                .map(String::from)
                .to_vec(),
            Shape::Setsid => ["setsid", "sh", "-c", "eval \"$ADV_SCRIPT\""]
                .map(String::from)
                .to_vec(),
            Shape::Daemon => sh(format!(
                "(setsid sh -c {script} </dev/null >/dev/null 2>&1 &); {WAIT_DONE}"
            )),
            Shape::Nohup => sh(format!(
                "nohup sh -c {script} </dev/null >/dev/null 2>&1 & wait"
            )),
            Shape::Threads => ["python3", "-c", THREADS].map(String::from).to_vec(),
            Shape::Early => sh(format!(
                "(setsid sh -c {script} </dev/null >/dev/null 2>&1 &); sleep 0.3"
            )),
            Shape::Hopping => sh(HOP.to_owned()),
            Shape::Escaper => sh(ESCAPE.to_owned()),
        }
    }

    /// Whether this machine runs it; why not, when it does not.
    pub fn available(self) -> Result<(), String> {
        match self {
            Shape::Threads => runs(Command::new("python3").args(["-c", "import threading"]))
                .map_err(|e| format!("no python3: {e}")),
            Shape::Timeout => runs(Command::new("timeout").args(["5", "true"])),
            Shape::Setsid => runs(Command::new("setsid").arg("true")),
            _ => Ok(()),
        }
    }
}

/// Where a supervisor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrap {
    /// Beside the others.
    None,
    /// In a time namespace of its own (`unshare -T`, as CRIU restores into), whose `/proc`
    /// shows start times shifted by its boot-time offset.
    TimeNs,
    /// In a mount namespace whose `/proc` is mounted `hidepid=2` over the host's.
    Hidepid,
}

/// `unshare -m`'s script that mounts `/proc` with `hidepid=2`, then runs the rest.
const HIDEPID: &str = r#"mount -t proc -o hidepid=2 proc /proc && exec "$@""#;

impl Wrap {
    pub fn name(self) -> &'static str {
        match self {
            Wrap::None => "",
            Wrap::TimeNs => " in a time namespace",
            Wrap::Hidepid => " behind a hidepid /proc",
        }
    }

    /// The program and arguments that come before the supervisor's own command line.
    pub fn prefix(self) -> Vec<String> {
        match self {
            Wrap::None => Vec::new(),
            Wrap::TimeNs => ["unshare", "-T", "--fork", "--boottime", "100000", "--"]
                .map(String::from)
                .to_vec(),
            Wrap::Hidepid => [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                HIDEPID,
                "sh",
            ]
            .map(String::from)
            .to_vec(),
        }
    }

    /// Whether this machine runs it; why not, when it does not.
    pub fn available(self, bin: &Path) -> Result<(), String> {
        if self == Wrap::None {
            return Ok(());
        }
        let mut argv = self.prefix();
        argv.push(bin.display().to_string());
        argv.push("--version".to_owned());
        runs(Command::new(&argv[0]).args(&argv[1..]))
    }
}

fn runs(command: &mut Command) -> Result<(), String> {
    match command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "{:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(e.to_string()),
    }
}
