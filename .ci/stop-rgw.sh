#!/usr/bin/env bash
# Stop what .ci/start-rgw.sh started, by its recorded pids (radosgw, the OSD, the mgr, the mon);
# `--wipe` also removes $RGW_ROOT (default /tmp/banklease-stores/rgw).
set -euo pipefail
ROOT=${RGW_ROOT:-/tmp/banklease-stores/rgw}
RUN=$ROOT/run
for name in rgw osd mgr mon; do
  pidfile=$RUN/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
done
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$ROOT"
fi
