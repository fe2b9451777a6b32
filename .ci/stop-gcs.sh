#!/usr/bin/env bash
# Stop the fake-gcs-server started by .ci/start-gcs.sh, by its recorded pid (never by name).
# --wipe also removes $GCS_ROOT (data, service-account file and venv). Idempotent.
set -euo pipefail

ROOT=${GCS_ROOT:-/tmp/banklease-stores/gcs}
PIDFILE=$ROOT/fake-gcs.pid

if [ -f "$PIDFILE" ]; then
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop-gcs: fake-gcs-server (pid $pid) ignored TERM for 5 s; killing" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stop-gcs: stopped fake-gcs-server (pid $pid)"
  fi
  rm -f "$PIDFILE" "$ROOT/fake-gcs.port"
fi
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$ROOT"
  echo "stop-gcs: wiped $ROOT"
fi
echo "stop-gcs: done"
