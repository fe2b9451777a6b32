#!/usr/bin/env bash
# Stop, start or query one object server of the 3-replica Swift started by
# `SWIFT_REPLICAS=3 .ci/start-swift.sh` (which exports this script's path as SWIFT_OBJECT_CTL).
#
# Usage:  swift-object.sh stop N     SIGTERM to server N's process group (its workers too),
#                                    SIGKILL after 5 s; its port then refuses connections
#         swift-object.sh start N    start it again (no-op if running), wait (≤ 30 s) until its
#                                    healthcheck answers
#         swift-object.sh status N   "running <pid>" (exit 0) or "stopped" (exit 1)
# N is 1, 2 or 3. Processes are found by the pid file only (run/object-N.pid), never by name.
# Env:    SWIFT_ROOT (default /tmp/banklease-stores/swift)
set -euo pipefail

ROOT=${SWIFT_ROOT:-/tmp/banklease-stores/swift}
usage() { echo "usage: $0 stop|start|status 1|2|3" >&2; exit 2; }
[ $# = 2 ] || usage
action=$1 n=$2
case "$n" in 1 | 2 | 3) ;; *) usage ;; esac
name=object-$n
conf=$ROOT/etc/object-server-$n.conf
pidfile=$ROOT/run/$name.pid
log=$ROOT/run/$name.log
[ -f "$conf" ] || { echo "swift-object: no $conf (start Swift with SWIFT_REPLICAS=3)" >&2; exit 1; }
port=$(awk -F'=' '$1 ~ /^bind_port *$/ { gsub(/ /, "", $2); print $2; exit }' "$conf")

pid() { cat "$pidfile" 2>/dev/null || true; }
alive() { local p; p=$(pid); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
healthy() { curl -fsS -m 2 "http://127.0.0.1:$port/healthcheck" >/dev/null 2>&1; }

case "$action" in
  status)
    if alive; then echo "running $(pid)"; else echo "stopped"; exit 1; fi
    ;;
  stop)
    if alive; then
      p=$(pid)
      # start-swift.sh and this script start it with setsid: it leads its process group.
      kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$p" 2>/dev/null; then
        kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
      fi
      # Its workers leave with it; wait (bounded) until the port is free.
      for _ in $(seq 1 50); do
        healthy || break
        sleep 0.1
      done
      echo "swift-object: stopped $name (pid $p, port $port)"
    else
      echo "swift-object: $name was not running"
    fi
    rm -f "$pidfile"
    ;;
  start)
    if alive; then
      echo "swift-object: $name already running (pid $(pid))"
    else
      setsid /usr/bin/swift-object-server "$conf" -v >>"$log" 2>&1 </dev/null &
      echo $! >"$pidfile"
    fi
    for _ in $(seq 1 150); do
      if healthy; then
        echo "swift-object: $name ready (pid $(pid), port $port)"
        exit 0
      fi
      alive || break
      sleep 0.2
    done
    echo "swift-object: $name NOT ready on port $port; its log:" >&2
    tail -n 15 "$log" >&2 || true
    exit 1
    ;;
  *) usage ;;
esac
