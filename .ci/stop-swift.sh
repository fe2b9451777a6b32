#!/usr/bin/env bash
# Stop the Swift started by .ci/start-swift.sh (1 or 3 object replicas), by the pids it
# recorded (never by name).
# --wipe also removes its data and configuration ($SWIFT_ROOT). Idempotent.
set -euo pipefail

ROOT=${SWIFT_ROOT:-/tmp/banklease-stores/swift}
RUN=$ROOT/run

stop_pid() { # name pidfile
  local name=$1 f=$2 pid
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # setsid made each daemon a process-group leader: stop its workers too.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop-swift: $name (pid $pid) ignored TERM for 5 s; killing" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "stop-swift: stopped $name (pid $pid)"
  fi
  rm -f "$f"
}

for name in object-expirer container-updater proxy object object-1 object-2 object-3 container \
  account memcached; do
  if [ -f "$RUN/$name.pid" ]; then stop_pid "$name" "$RUN/$name.pid"; fi
done
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$ROOT"
  echo "stop-swift: wiped $ROOT"
fi
echo "stop-swift: done"
