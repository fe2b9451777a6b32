#!/usr/bin/env bash
# The whole banklease story on a local-filesystem bank, in about a minute of build and 10 s of run:
# two protection services write checkpoints, one crashes (SIGKILL), the GC leaves everything
# alone while the dead owner's lease could still be valid, then collects exactly its zombies,
# and the live service shuts down cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building (cargo build --workspace --bins --examples)"
cargo build -q --workspace --bins --examples
BIN=${CARGO_TARGET_DIR:-target}/debug

WORK=$(mktemp -d -t banklease-quickstart.XXXXXX)
export BANKLEASE_BANK__URL="file://$WORK/bank"
# Short windows so the story fits in seconds (production defaults: 2m / 10m / 100s).
export BANKLEASE_LEASE__RENEW_WINDOW=500ms BANKLEASE_LEASE__EXPIRE_WINDOW=2s
export BANKLEASE_LEASE__VALIDITY_WINDOW=300ms BANKLEASE_LEASE__SKEW_MARGIN=200ms
export BANKLEASE_GC__GRACE=1s
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
echo "== making the bank (banklease init)"
"$BIN/banklease" init

start_service() { # name checkpoints complete
  "$BIN/examples/protection_service" --bank "$BANKLEASE_BANK__URL" --checkpoints "$2" --complete "$3" \
    --renew-window 500ms --expire-window 2s --validity-window 300ms >"$WORK/$1.out" 2>"$WORK/$1.err" &
  pids+=($!)
  eval "$1_PID=$!"
  for _ in $(seq 100); do [ -s "$WORK/$1.out" ] && break; sleep 0.1; done
  [ -s "$WORK/$1.out" ] || { echo "service $1 did not start:"; cat "$WORK/$1.err"; exit 1; }
  echo "service $1: $(head -n1 "$WORK/$1.out")"
}
owner_of() { sed -n 's/.*"owner_id": *"\([^"]*\)".*/\1/p' "$WORK/$1.out" | head -n1; }

echo; echo "== two protection services start (A: 4 checkpoints, 2 completed; B: 3 checkpoints, 1 completed)"
start_service A 4 2
start_service B 3 1
A=$(owner_of A); B=$(owner_of B)
"$BIN/banklease" checkpoint list

echo; echo "== service A crashes (SIGKILL); a GC pass right away must collect nothing"
kill -9 "$A_PID"; wait "$A_PID" 2>/dev/null || true
"$BIN/banklease" gc
"$BIN/banklease" validity-check --owner "$B" || true
"$BIN/banklease" validity-check --owner "$A" || true

echo; echo "== after expire_window + skew_margin + grace, the GC collects exactly A's protecting checkpoints"
sleep 3.5
"$BIN/banklease" validity-check --owner "$A" || true
"$BIN/banklease" gc
"$BIN/banklease" checkpoint list

echo; echo "== service B shuts down (SIGTERM): its protecting checkpoints become error, its lease is released"
kill -TERM "$B_PID"
wait "$B_PID" || true
"$BIN/banklease" checkpoint list
"$BIN/banklease" lease list
echo; echo "done: bank was $BANKLEASE_BANK__URL (removed)"
