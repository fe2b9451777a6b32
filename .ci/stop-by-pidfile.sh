#!/usr/bin/env bash
# Shared by the .ci/stop-*.sh scripts: stop a server by its recorded pid (never by name), TERM
# then, after 5 s, KILL (its process group when it has one); remove its pid and port files;
# with --wipe also its root. Idempotent.
#
# Usage: stop-by-pidfile.sh SCRIPT ROOT BASE LABEL [--wipe]
#   SCRIPT  name used in messages (stop-s3s); ROOT the server's directory; BASE the pid/port
#   file stem ($ROOT/BASE.pid, $ROOT/BASE.port); LABEL the server's name in messages.
set -euo pipefail

script=$1 root=$2 base=$3 label=$4 wipe=${5:-}
pidfile=$root/$base.pid

if [ -f "$pidfile" ]; then
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$script: $label (pid $pid) ignored TERM for 5 s; killing" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "$script: stopped $label (pid $pid)"
  fi
  rm -f "$pidfile" "$root/$base.port"
fi
if [ "$wipe" = "--wipe" ]; then
  rm -rf "$root"
  echo "$script: wiped $root"
fi
echo "$script: done"
