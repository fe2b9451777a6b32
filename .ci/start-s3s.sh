#!/usr/bin/env bash
# Start an s3s-fs S3 server on 127.0.0.1 for banklease's tests, and create the test bucket.
#
# s3s-fs is an S3-compatible server whose conditional writes are checked but NOT atomic (two
# racing creators can both win): the store `banklease doctor` must flag.
#
#   - `cargo install s3s-fs@0.14.1 --features binary --locked` if the binary is missing
#     (0.14.1: newer versions need a newer rustc than 1.95); takes minutes on 2 cores;
#   - listens on 127.0.0.1:$S3S_PORT (default 8014; if that port is taken by something else,
#     a free port is chosen and printed); data in $S3S_ROOT/data (default
#     /tmp/banklease-stores/s3s); a bucket is a directory there;
#   - credentials: access key banklease, secret banklease-secret; region us-east-1; path-style.
#
# Idempotent: a running server (recorded pid) is reused, on the port it was started with.
# Its variables are S3S_* (not AWS_*), so it can run beside moto in one test run.
#
# Usage:  .ci/start-s3s.sh          then eval the printed `export` line
#         .ci/stop-s3s.sh [--wipe]
# Env:    S3S_ROOT, S3S_PORT (8014), S3S_BUCKET (banklease-test), S3S_BIN (s3s-fs on PATH or
#         in ~/.cargo/bin)
set -euo pipefail

ROOT=${S3S_ROOT:-/tmp/banklease-stores/s3s}
DATA=$ROOT/data
BUCKET=${S3S_BUCKET:-banklease-test}
PIDFILE=$ROOT/s3s.pid
PORTFILE=$ROOT/s3s.port
LOG=$ROOT/s3s.log
ACCESS_KEY=banklease
SECRET_KEY=banklease-secret
VERSION=0.14.1
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

fail() { echo "start-s3s: $*" >&2; exit 1; }

command -v curl >/dev/null || fail "curl is required"
mkdir -p "$DATA"

# ---- 1. the binary ----------------------------------------------------------------------
BIN=${S3S_BIN:-$(command -v s3s-fs || echo "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs")}
if [ ! -x "$BIN" ]; then
  command -v cargo >/dev/null || fail "cargo is required to install s3s-fs"
  echo "start-s3s: installing s3s-fs@$VERSION (a few minutes on 2 cores)"
  t0=$(date +%s)
  # Its own target dir, so that it neither reuses nor pollutes a CARGO_TARGET_DIR set for the
  # project; removed once installed.
  CARGO_TARGET_DIR=$ROOT/build cargo install --quiet "s3s-fs@$VERSION" --features binary --locked \
    || fail "cargo install s3s-fs@$VERSION failed"
  rm -rf "$ROOT/build"
  echo "start-s3s: installed s3s-fs in $(($(date +%s) - t0)) s"
  BIN=$(command -v s3s-fs || echo "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs")
  [ -x "$BIN" ] || fail "s3s-fs installed but not found at $BIN"
fi

port_free() { # $1 = port; true when nothing listens on 127.0.0.1:$1
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---- 2. start (or reuse) ------------------------------------------------------------------
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ -f "$PORTFILE" ]; then
  PORT=$(cat "$PORTFILE")
  echo "start-s3s: s3s-fs already running (pid $(cat "$PIDFILE"), port $PORT)"
else
  PORT=${S3S_PORT:-8014}
  if ! port_free "$PORT"; then
    [ -n "${S3S_PORT:-}" ] && fail "port $PORT (S3S_PORT) is in use by another process"
    # Bounded search upwards for a free port.
    for p in $(seq 18014 18113); do
      if port_free "$p"; then PORT=$p; break; fi
    done
    port_free "$PORT" || fail "no free port found in 18014-18113"
    echo "start-s3s: port 8014 is in use; using free port $PORT"
  fi
  # A bucket is a directory: creating it here needs no signed request.
  mkdir -p "$DATA/$BUCKET"
  setsid "$BIN" --host 127.0.0.1 --port "$PORT" --access-key "$ACCESS_KEY" \
    --secret-key "$SECRET_KEY" "$DATA" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"
fi
mkdir -p "$DATA/$BUCKET"

# ---- 3. ready = a signed HEAD of the bucket answers 200 (bounded: 30 s) --------------------
ok=""
for _ in $(seq 1 150); do
  # s3s wants the payload hash header, which curl signs when given (here: of an empty body).
  code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' -I --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$ACCESS_KEY:$SECRET_KEY" -H "x-amz-content-sha256: $EMPTY_SHA256" \
    "http://127.0.0.1:$PORT/$BUCKET" || true)
  if [ "$code" = 200 ]; then ok=1; break; fi
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "start-s3s: s3s-fs exited; log $LOG:" >&2
    tail -n 20 "$LOG" >&2 || true
    rm -f "$PIDFILE"
    exit 1
  fi
  sleep 0.2
done
if [ -z "$ok" ]; then
  echo "start-s3s: s3s-fs NOT ready after 30 s (last status ${code:-none}); log $LOG:" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 1
fi
echo "start-s3s: s3s-fs $VERSION ready on http://127.0.0.1:$PORT (bucket $BUCKET, data $DATA)"
echo "export S3S_ENDPOINT=http://127.0.0.1:$PORT S3S_ACCESS_KEY_ID=$ACCESS_KEY S3S_SECRET_ACCESS_KEY=$SECRET_KEY S3S_REGION=us-east-1 S3S_BUCKET=$BUCKET"
