#!/usr/bin/env bash
# The whole banklease story on a local-filesystem bank, in about 5 s of run, with the installed
# `banklease` when it is on PATH (README "Install"), else after one release build of it (a few
# minutes on a fresh 2-core machine): two backup jobs run as owners under `banklease run`, writing
# checkpoints through `banklease agent`; one crashes (SIGKILL), the GC leaves everything alone
# while the dead owner's lease could still be valid, then collects exactly its zombies, and the
# live job shuts down cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."

if installed=$(command -v banklease); then
  echo "== using the installed banklease ($installed, $(banklease --version)): nothing to build"
else
  echo "== no banklease on PATH: building it once (cargo build --release --locked -p banklease-cli);"
  echo "   a few minutes on a fresh 2-core machine (about 3, plus fetching the crates), seconds when built"
  cargo build --release --locked -q -p banklease-cli
  bin=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)
  export PATH="$bin:$PATH" # the jobs call `banklease agent` too
  echo "== using $bin/banklease ($(banklease --version))"
fi

WORK=$(mktemp -d -t banklease-quickstart.XXXXXX)
export BANKLEASE_BANK="file://$WORK/bank"
# Short windows so the story fits in seconds (production defaults: 2m / 10m / 100s / 2s / 10m).
export BANKLEASE_LEASE__RENEW_WINDOW=500ms BANKLEASE_LEASE__EXPIRE_WINDOW=2s
export BANKLEASE_LEASE__VALIDITY_WINDOW=300ms BANKLEASE_LEASE__SKEW_MARGIN=200ms
export BANKLEASE_GC__GRACE=1s
# The agents' sockets under $WORK, so that the one of the `run` killed outright goes with it.
export XDG_RUNTIME_DIR=$WORK
runs=() # the `banklease run` supervisors still running
running() { for p in "${runs[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
cleanup() {
  local p g
  # SIGTERM first: `run` forwards it to its job's process group, then releases its lease.
  for p in "${runs[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do running || break; sleep 0.1; done # 5 s at most
  { for p in "${runs[@]}"; do kill -9 "$p"; done; wait; } 2>/dev/null || true
  # The process groups of jobs not seen gone yet (a job killed alone would run on).
  for g in "$WORK"/*.pgid; do
    if [ -s "$g" ]; then kill -9 -- "-$(cat "$g")" 2>/dev/null || true; fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
echo "== making the bank (banklease init)"
banklease init

# A backup job, as README's "Wrapping an existing backup job" writes one: NAME N DONE DIR.
# It creates N checkpoints, puts a small body in each, completes the first DONE as available,
# says who it is (its process group, BANKLEASE_OWNER_ID), and runs on with the rest protecting.
# shellcheck disable=SC2016 # expanded by the job's bash, not here
job='set -euo pipefail
name=$1 n=$2 done=$3 dir=$4
echo "$$" >"$dir/$name.pgid" # the job leads a process group of its own
for ((i = 0; i < n; i++)); do
  banklease agent checkpoint create "cp-$name-$i"
  echo "checkpoint $i of job $name" | banklease agent checkpoint put "cp-$name-$i" body.txt -
done
for ((i = 0; i < done; i++)); do banklease agent checkpoint complete "cp-$name-$i" available; done
echo "$BANKLEASE_OWNER_ID" >"$dir/$name.owner.tmp" && mv "$dir/$name.owner.tmp" "$dir/$name.owner"
exec sleep 300'

start_job() { # NAME CHECKPOINTS COMPLETE
  banklease run --checkpoint-prefix "cp-$1-" -- bash -c "$job" "job-$1" "$1" "$2" "$3" "$WORK" \
    >"$WORK/$1.out" 2>"$WORK/$1.err" &
  local run=$!
  runs+=("$run")
  printf -v "$1_RUN" %s "$run"
  for _ in $(seq 100); do # 10 s at most
    [ -s "$WORK/$1.owner" ] && break
    kill -0 "$run" 2>/dev/null || break
    sleep 0.1
  done
  [ -s "$WORK/$1.owner" ] || { echo "job $1 did not start:"; cat "$WORK/$1.out" "$WORK/$1.err"; exit 1; }
  printf -v "$1" %s "$(cat "$WORK/$1.owner")"
  printf -v "$1_PGID" %s "$(cat "$WORK/$1.pgid")"
  echo "job $1: banklease run pid $run, job process group $(cat "$WORK/$1.pgid"), owner $(cat "$WORK/$1.owner")"
}
statuses() { banklease checkpoint list | awk 'NR > 1 { printf "%s%s=%s", sep, $1, $2; sep = " " }'; }

echo; echo "== two backup jobs start under banklease run (A: 4 checkpoints, 2 completed; B: 3 checkpoints, 1 completed)"
start_job A 4 2
start_job B 3 1
banklease checkpoint list

echo; echo "== job A crashes (SIGKILL to its banklease run and its job); a GC pass right away must collect nothing"
# `run` first: killed alone, its job would run on; the job killed alone, `run` would release.
# (Braces: bash's own "Killed" notice goes with the rest of stderr.)
{ kill -9 -- "$A_RUN" "-$A_PGID"; wait "$A_RUN"; } 2>/dev/null || true
runs=("$B_RUN")
banklease gc
banklease validity-check --owner "$B" || true
banklease validity-check --owner "$A" || true

echo; echo "== after expire_window + skew_margin + grace, the GC collects exactly A's protecting checkpoints"
sleep 3.5 # 2 s + 200 ms + 1 s, and some
# Nothing of job A is left (a zombie is reaped by init, at its own pace: a bounded wait).
for _ in $(seq 50); do kill -0 -- "-$A_PGID" 2>/dev/null || break; sleep 0.1; done
if kill -0 -- "-$A_PGID" 2>/dev/null; then echo "quickstart: job A's process group $A_PGID still runs" >&2; exit 1; fi
rm "$WORK/A.pgid"
banklease validity-check --owner "$A" || true
banklease gc
banklease checkpoint list

echo; echo "== job B's banklease run gets SIGTERM: its protecting checkpoints become error, its lease is released"
kill -TERM "$B_RUN"
status=0
wait "$B_RUN" || status=$?
runs=() && rm "$WORK/B.pgid" # the job got the SIGTERM too, and `run` reaped it
echo "banklease run exited $status (the job's own status: 143 = 128 + SIGTERM); it said:"
cat "$WORK/B.err"
banklease checkpoint list
banklease lease list

want="cp-A-0=available cp-A-1=available cp-A-2=deleted cp-A-3=deleted cp-B-0=available cp-B-1=error cp-B-2=error"
got=$(statuses)
[ "$got" = "$want" ] || { echo "quickstart: expected $want, got $got" >&2; exit 1; }
[ -z "$(banklease lease list | awk 'NR > 1')" ] || { echo "quickstart: a lease is left" >&2; exit 1; }
echo; echo "done: A's available checkpoints kept, its protecting ones collected; B's completed as error; no lease left"
echo "bank was $BANKLEASE_BANK (removed)"
