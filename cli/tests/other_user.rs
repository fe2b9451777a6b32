//! Another local user cannot refuse, hijack or hold up a `lock run`: the guard's channel and
//! the marker a waiter trusts are out of that user's reach. Run as root (as CI does), the
//! other user being `nobody` through `setpriv`.

#![allow(clippy::disallowed_methods)] // real processes on real time

use std::process::{Command, Stdio};

mod common;

use common::output_text as text;
use common::work::{signal, Env};
use common::{wait_child, wait_for};

/// Connects to every socket `/proc/net/unix` lists whose name says `banklease-guard`, as soon
/// as it appears (abstract or not), and keeps each connection open; stops when its stop file
/// appears (at most 120 s). Prints how many such sockets it saw and how many it connected to.
const ATTACKER: &str = r#"
import os, socket, sys, time
stop = sys.argv[1]
seen, held = set(), []
deadline = time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    with open('/proc/net/unix') as f:
        lines = f.read().splitlines()[1:]
    for line in lines:
        parts = line.split()
        if len(parts) < 8 or 'banklease-guard' not in parts[7] or parts[7] in seen:
            continue
        seen.add(parts[7])
        name = parts[7]
        addr = '\0' + name[1:] if name.startswith('@') else name
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(addr)
            held.append(s)
        except OSError:
            s.close()
    time.sleep(0.0005)
print(len(seen), len(held))
"#;

/// Whether this test can run here: root, with `setpriv` and a system Python.
fn can_switch_users() -> bool {
    rustix::process::geteuid().is_root()
        && std::path::Path::new("/usr/bin/setpriv").exists()
        && std::path::Path::new("/usr/bin/python3").exists()
}

/// Before, the guard's socket was an abstract one that `/proc/net/unix` shows every user:
/// connecting first refused the run (exit 125, "a process other than the guard … connected").
/// Now it lies in a directory only the supervisor's user may enter, in a shared `/tmp`.
#[test]
fn another_user_cannot_refuse_a_lock_run_by_connecting_to_its_guard() {
    if !can_switch_users() {
        eprintln!("skipped: needs root, /usr/bin/setpriv and /usr/bin/python3");
        return;
    }
    let env = Env::new();
    let stop = env.work().join("stop");
    let attacker = Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
        ])
        .arg(ATTACKER)
        .arg(&stop)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the other user's process");
    let mut refused = Vec::new();
    for round in 0..10 {
        let out = env
            .command(&["lock", "run", "k", "--duration", "10s", "--", "true"])
            // A directory every user may enter, as on most hosts.
            .env("TMPDIR", "/tmp")
            .output()
            .expect("run the CLI");
        if out.status.code() != Some(0) {
            refused.push(format!("round {round}: {}", text(&out)));
        }
    }
    std::fs::write(&stop, "").unwrap();
    let attacked = attacker.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&attacked.stdout);
    let counts: Vec<usize> = said
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        counts.len() == 2 && counts[0] >= 1,
        "the other user's process saw no guard socket (so this test proves nothing): {said} {}",
        String::from_utf8_lossy(&attacked.stderr)
    );
    assert!(refused.is_empty(), "{refused:#?}");
    assert_eq!(counts[1], 0, "the other user connected to a guard's socket");
}

/// Looks at every process's command line for a guard's `--done PATH` and creates that file
/// first (as a file anyone may leave in `/dev/shm` would be); writes `seen` into its report
/// directory once it found one. Stops when its stop file appears (at most 120 s).
const SQUATTER: &str = r#"
import os, sys, time
report, stop = sys.argv[1], sys.argv[2]
tried = set()
deadline = time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                args = f.read().split(b'\0')
        except OSError:
            continue
        if b'__guard' not in args or b'--done' not in args:
            continue
        path = args[args.index(b'--done') + 1]
        if path in tried:
            continue
        tried.add(path)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            verdict = 'created'
        except OSError:
            verdict = 'refused'
        with open(os.path.join(report, 'seen'), 'w') as f:
            f.write(verdict)
    time.sleep(0.002)
"#;

/// Before, a guard without a cgroup wrote its word that the tree is gone at a name in
/// `/dev/shm` shown on its command line: another user who created that file first made the
/// next holder on this host wait for the lock's expiry (30 s here) instead of taking it as soon
/// as the killed holder's tree was gone. Now the file lies in a directory only the holder's user
/// may enter.
#[test]
fn another_user_cannot_hold_up_a_handoff_by_taking_the_guards_marker() {
    if !can_switch_users() {
        eprintln!("skipped: needs root, /usr/bin/setpriv and /usr/bin/python3");
        return;
    }
    // Without a cgroup, the guard's word is all a waiter has.
    let env = Env::with_vars(&[("BANKLEASE_TREE", "subreaper")]);
    let report = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        report.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let stop = report.path().join("stop");
    let mut squatter = Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
        ])
        .arg(SQUATTER)
        .arg(report.path())
        .arg(&stop)
        .current_dir("/")
        .spawn()
        .expect("start the other user's process");
    let mut holder = env.spawn(
        &[
            "lock",
            "run",
            "--duration",
            "30s",
            "k",
            "--",
            "sh",
            "-c",
            r#"echo $$ > "$WORK/first.pid"; exec sleep 60"#,
        ],
        "first",
    );
    wait_for("COMMAND to start", || {
        !env.read("first.pid").trim().is_empty()
    });
    let seen = report.path().join("seen");
    wait_for("the other user to find the guard", || seen.exists());
    signal(&holder, rustix::process::Signal::KILL);
    holder.wait().unwrap();
    let started = std::time::Instant::now();
    let mut waiter = env.spawn(
        &["lock", "acquire", "k", "--duration", "5s", "-w", "25"],
        "waiter",
    );
    let status = wait_child(&mut waiter);
    let took = started.elapsed();
    std::fs::write(&stop, "").unwrap();
    squatter.wait().unwrap();
    let verdict = std::fs::read_to_string(&seen).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{}", env.read("waiter.err"));
    assert!(
        took < std::time::Duration::from_secs(5),
        "the waiter took {took:?} after the holder was killed (the other user {verdict} the \
         guard's marker first)"
    );
    assert_eq!(
        verdict, "refused",
        "the other user could create the guard's marker"
    );
}
