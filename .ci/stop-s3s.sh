#!/usr/bin/env bash
# Stop the s3s-fs server started by .ci/start-s3s.sh, by its recorded pid (never by name).
# --wipe also removes $S3S_ROOT (the data; the installed binary stays). Idempotent.
set -euo pipefail

ROOT=${S3S_ROOT:-/tmp/banklease-stores/s3s}
PIDFILE=$ROOT/s3s.pid

if [ -f "$PIDFILE" ]; then
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop-s3s: s3s-fs (pid $pid) ignored TERM for 5 s; killing" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stop-s3s: stopped s3s-fs (pid $pid)"
  fi
  rm -f "$PIDFILE" "$ROOT/s3s.port"
fi
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$ROOT"
  echo "stop-s3s: wiped $ROOT"
fi
echo "stop-s3s: done"
