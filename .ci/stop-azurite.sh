#!/usr/bin/env bash
# Stop the Azurite blob service started by .ci/start-azurite.sh, by its recorded pid (never by
# name).
# --wipe also removes $AZURITE_ROOT (data and the npm install). Idempotent.
set -euo pipefail

ROOT=${AZURITE_ROOT:-/tmp/banklease-stores/azurite}
PIDFILE=$ROOT/azurite.pid

if [ -f "$PIDFILE" ]; then
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop-azurite: azurite (pid $pid) ignored TERM for 5 s; killing" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stop-azurite: stopped azurite (pid $pid)"
  fi
  rm -f "$PIDFILE" "$ROOT/azurite.port"
fi
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$ROOT"
  echo "stop-azurite: wiped $ROOT"
fi
echo "stop-azurite: done"
