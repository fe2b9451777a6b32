#!/usr/bin/env bash
# Start a single-node OpenStack Swift ("SAIO") on 127.0.0.1 for banklease's tests.
#
#   - Debian packages (Swift 2.30 on Debian 12), installed if missing (needs root and apt);
#   - tempauth: user test:tester, key testing -> account AUTH_test, auth at /auth/v1.0;
#   - s3api in the proxy pipeline: the same port also speaks S3 (access key test:tester,
#     secret testing, region us-east-1, path-style);
#   - 1-replica rings, storage in a plain directory; everything under $SWIFT_ROOT
#     (default /tmp/banklease-stores/swift) except /etc/swift/swift.conf, whose path
#     Swift 2.30 hard-codes (written only if missing or without a hash suffix);
#   - SWIFT_REPLICAS=3: a 3-replica *object* ring over three object servers, one device
#     each, each with its own port ($SWIFT_BASE_PORT, +3, +4), configuration
#     (etc/object-server-N.conf), directory (data/object-N/dN), pid file (run/object-N.pid)
#     and log (run/object-N.log); the account and container rings keep 1 replica. No object
#     replicator, auditor or updater runs (none is started in either mode), so an object
#     server that was down while objects changed serves its stale copies until they are
#     written again. `.ci/swift-object.sh stop|start|status N` stops and restarts server N
#     (by its pid file); its path is exported as SWIFT_OBJECT_CTL.
#
# Idempotent: already-running daemons are left alone, rings and configs are reused. Another
# SWIFT_REPLICAS under the same SWIFT_ROOT rebuilds the rings and wipes the data (refused
# while its daemons run: .ci/stop-swift.sh first).
# No reaper daemons by default (tests rely on expired objects staying listed); set
# SWIFT_REAPER_DAEMONS=1 to also run container-updater + object-expirer.
#
# Usage:  .ci/start-swift.sh          then eval the printed `export` line
#         .ci/stop-swift.sh [--wipe]
# Env:    SWIFT_ROOT, SWIFT_PORT (8080), SWIFT_BASE_PORT (6200), MEMCACHED_PORT (11211),
#         SWIFT_CONTAINER (banklease-test), SWIFT_REPLICAS (1 or 3; default 1),
#         SWIFT_REAPER_DAEMONS (0), SWIFT_REAPER_INTERVAL (5)
set -euo pipefail

ROOT=${SWIFT_ROOT:-/tmp/banklease-stores/swift}
PORT=${SWIFT_PORT:-8080}
BP=${SWIFT_BASE_PORT:-6200}
MCPORT=${MEMCACHED_PORT:-11211}
CONTAINER=${SWIFT_CONTAINER:-banklease-test}
REPLICAS=${SWIFT_REPLICAS:-1}
ETC=$ROOT/etc DATA=$ROOT/data RUN=$ROOT/run CACHE=$ROOT/cache
OPORT=$BP CPORT=$((BP + 1)) APORT=$((BP + 2))
BIN=/usr/bin
HERE=$(cd "$(dirname "$0")" && pwd)

fail() { echo "start-swift: $*" >&2; exit 1; }
case "$REPLICAS" in 1 | 3) ;; *) fail "SWIFT_REPLICAS must be 1 or 3, not '$REPLICAS'" ;; esac
# The object servers, one per line: name, port, devices directory, device.
if [ "$REPLICAS" = 1 ]; then
  OBJECT_SERVERS="object $OPORT $DATA d1"
else
  OBJECT_SERVERS="object-1 $OPORT $DATA/object-1 d1
object-2 $((BP + 3)) $DATA/object-2 d2
object-3 $((BP + 4)) $DATA/object-3 d3"
fi
running() { # name
  [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null
}

# ---- 1. packages ------------------------------------------------------------------------
PKGS="swift swift-proxy swift-object swift-container swift-account swift-object-expirer
      python3-swiftclient memcached curl"
missing=""
# Installed means "install ok installed": a removed package keeps its configuration files
# ("deinstall ok config-files"), and `dpkg -s` still answers 0 for it.
for p in $PKGS; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] \
    || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" = 0 ] || fail "packages missing:$missing; run as root (or install them first)"
  echo "start-swift: installing:$missing (1-2 min)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || fail "apt-get update failed"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null \
    || fail "apt-get install failed for:$missing"
fi
# The Debian packages start nothing we need; make sure their own services (if any) do not
# hold our ports. We only ever start/stop our own processes (by recorded pid).

# ---- 2. swift.conf ------------------------------------------------------------------------
SWIFT_CONF='[swift-hash]
swift_hash_path_suffix = banklease
swift_hash_path_prefix = banklease
[storage-policy:0]
name = Policy-0
default = yes
[swift-constraints]'
if ! grep -q '^swift_hash_path_suffix' /etc/swift/swift.conf 2>/dev/null; then
  mkdir -p /etc/swift
  echo "$SWIFT_CONF" >/etc/swift/swift.conf
fi

# ---- 3. configs ---------------------------------------------------------------------------
# Rings built for the other replica mode are rebuilt and the data wiped (never under running
# daemons). A root without the marker was built by the 1-replica-only version of this script.
mkdir -p "$ETC" "$RUN"
built=$(cat "$ETC/replicas" 2>/dev/null || echo 1)
if [ -f "$ETC/object.ring.gz" ] && [ "$built" != "$REPLICAS" ]; then
  for name in proxy object object-1 object-2 object-3 container account; do
    if running "$name"; then
      fail "the Swift under $ROOT runs with $built object replica(s), not $REPLICAS: stop it first (.ci/stop-swift.sh)"
    fi
  done
  echo "start-swift: switching from $built to $REPLICAS object replica(s): new rings, data wiped"
  rm -rf "$DATA"
  rm -f "$ETC"/*.builder "$ETC"/*.ring.gz "$ETC"/object-server*.conf
fi
mkdir -p "$DATA/d1" "$CACHE"
while read -r _ _ dir dev; do mkdir -p "$dir/$dev"; done <<<"$OBJECT_SERVERS"
echo "$SWIFT_CONF" >"$ETC/swift.conf"
common() { # $1 = port, $2 = devices directory
  cat <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $1
user = root
swift_dir = $ETC
devices = $2
mount_check = false
disable_fallocate = true
# Account and container servers answer 507 below fallocate_reserve (default 1 %) free;
# CI disks run fuller than that.
fallocate_reserve = 0
recon_cache_path = $CACHE
log_level = INFO
workers = 1
EOF
}
server() { # $1 = kind, $2 = port, $3 = extra sections, [$4 = devices dir, $5 = name]
  local name=${5:-$1-server}
  { common "$2" "${4:-$DATA}"; cat <<EOF
log_name = $name
[pipeline:main]
pipeline = healthcheck recon $1-server
[app:$1-server]
use = egg:swift#$1
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:recon]
use = egg:swift#recon
recon_cache_path = $CACHE
$3
EOF
  } >"$ETC/$name.conf"
}
# object-server.conf (1 replica) or object-server-N.conf. Replicator, updater and auditor
# have sections but are never started.
while read -r name port dir _; do
  server object "$port" '[object-replicator]
[object-updater]
[object-auditor]' "$dir" "object-server${name#object}"
done <<<"$OBJECT_SERVERS"
server container "$CPORT" "[container-replicator]
[container-updater]
interval = ${SWIFT_REAPER_INTERVAL:-5}
[container-auditor]
[container-sync]
[container-sharder]"
server account "$APORT" '[account-replicator]
[account-auditor]
[account-reaper]'

cat >"$ETC/proxy-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $PORT
workers = 1
user = root
swift_dir = $ETC
log_name = proxy-server
log_level = INFO

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk s3api tempauth copy slo dlo symlink proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true
conn_timeout = 1
node_timeout = 10

[filter:tempauth]
use = egg:swift#tempauth
user_admin_admin = admin .admin .reseller_admin
user_test_tester = testing .admin

[filter:s3api]
use = egg:swift#s3api
location = us-east-1
s3_acl = false

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$MCPORT
# Swift's default pool is 2 connections with a 1 s wait: a burst of a few hundred requests
# (1,000 lease keepers) times out on it, memcached is then error-limited for 60 s and tempauth
# answers 401 to every token meanwhile. A real proxy has many workers; this one has one.
memcache_max_connections = 64

[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
# Bulk delete (POST ?bulk-delete, advertised in GET /info): the GC deletes a collected
# checkpoint's objects up to max_deletes_per_request (10,000) per request.
[filter:bulk]
use = egg:swift#bulk
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
[filter:symlink]
use = egg:swift#symlink
EOF

cat >"$ETC/object-expirer.conf" <<EOF
[DEFAULT]
user = root
swift_dir = $ETC
log_name = object-expirer
[object-expirer]
interval = ${SWIFT_REAPER_INTERVAL:-5}
recon_cache_path = $CACHE
[pipeline:main]
pipeline = catch_errors proxy-logging cache proxy-server
[app:proxy-server]
use = egg:swift#proxy
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$MCPORT
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:proxy-logging]
use = egg:swift#proxy_logging
EOF

# ---- 4. rings, part power 8: account and container 1 replica on d1; object 1 or 3 replicas,
#         one device per object server, each in its own zone (so with 3 replicas every server
#         holds a copy of every object, and there is no handoff device) -----------------------
if [ ! -f "$ETC/object.ring.gz" ] || [ ! -f "$ETC/container.ring.gz" ] || [ ! -f "$ETC/account.ring.gz" ]; then
  (
    cd "$ETC"
    rm -f ./*.builder ./*.ring.gz
    for r in container:$CPORT account:$APORT; do
      n=${r%%:*} p=${r##*:}
      "$BIN/swift-ring-builder" "$n.builder" create 8 1 1 >/dev/null
      "$BIN/swift-ring-builder" "$n.builder" add "r1z1-127.0.0.1:$p/d1" 1 >/dev/null
      "$BIN/swift-ring-builder" "$n.builder" rebalance >/dev/null || true
    done
    "$BIN/swift-ring-builder" object.builder create 8 "$REPLICAS" 1 >/dev/null
    zone=1
    while read -r _ port _ dev; do
      "$BIN/swift-ring-builder" object.builder add "r1z$zone-127.0.0.1:$port/$dev" 1 >/dev/null
      zone=$((zone + 1))
    done <<<"$OBJECT_SERVERS"
    "$BIN/swift-ring-builder" object.builder rebalance >/dev/null || true
  ) || fail "building the rings failed"
  echo "$REPLICAS" >"$ETC/replicas"
fi

# ---- 5. processes (pid in $RUN/<name>.pid, log in $RUN/<name>.log) ------------------------
start() { # name cmd...
  local name=$1
  shift
  if running "$name"; then
    echo "start-swift: $name already running (pid $(cat "$RUN/$name.pid"))"
    return
  fi
  setsid "$@" >"$RUN/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}
start memcached memcached -u memcache -l 127.0.0.1 -p "$MCPORT" -U 0 -m 64
start account "$BIN/swift-account-server" "$ETC/account-server.conf" -v
start container "$BIN/swift-container-server" "$ETC/container-server.conf" -v
while read -r name _ _ _; do
  start "$name" "$BIN/swift-object-server" "$ETC/object-server${name#object}.conf" -v
done <<<"$OBJECT_SERVERS"
start proxy "$BIN/swift-proxy-server" "$ETC/proxy-server.conf" -v
if [ "${SWIFT_REAPER_DAEMONS:-0}" = 1 ]; then
  start container-updater "$BIN/swift-container-updater" "$ETC/container-server.conf" -v
  start object-expirer "$BIN/swift-object-expirer" "$ETC/object-expirer.conf" -v
fi

# ---- 6. ready = auth answers and the test container exists (bounded: 30 s) ----------------
AUTH=http://127.0.0.1:$PORT/auth/v1.0
ok=""
for _ in $(seq 1 150); do
  if curl -fsS -m 2 "http://127.0.0.1:$PORT/healthcheck" >/dev/null 2>&1; then
    hdrs=$(curl -fsS -m 2 -D - -o /dev/null -H 'X-Auth-User: test:tester' -H 'X-Auth-Key: testing' \
      "$AUTH" 2>/dev/null | tr -d '\r' || true)
    token=$(awk -F': ' 'tolower($1)=="x-auth-token"{print $2}' <<<"$hdrs")
    storage=$(awk -F': ' 'tolower($1)=="x-storage-url"{print $2}' <<<"$hdrs")
    if [ -n "$token" ] && [ -n "$storage" ]; then
      code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X PUT -H "X-Auth-Token: $token" \
        "$storage/$CONTAINER" || true)
      if [ "$code" = 201 ] || [ "$code" = 202 ]; then ok=1; break; fi
    fi
  fi
  sleep 0.2
done
if [ -z "$ok" ]; then
  echo "start-swift: Swift NOT ready after 30 s; logs in $RUN:" >&2
  tail -n 15 "$RUN"/*.log >&2 || true
  exit 1
fi
# Every object server answers its healthcheck (bounded: 30 s in all).
for _ in $(seq 1 150); do
  down=""
  while read -r name port _ _; do
    curl -fsS -m 2 "http://127.0.0.1:$port/healthcheck" >/dev/null 2>&1 || down="$down $name"
  done <<<"$OBJECT_SERVERS"
  [ -z "$down" ] && break
  sleep 0.2
done
if [ -n "$down" ]; then
  echo "start-swift: object server(s)$down NOT ready; logs in $RUN:" >&2
  tail -n 15 "$RUN"/object*.log >&2 || true
  exit 1
fi
version=$(dpkg-query -W -f='${Version}' swift 2>/dev/null || echo '?')
echo "start-swift: Swift $version ready on http://127.0.0.1:$PORT (container $CONTAINER; $REPLICAS object replica(s); S3 via s3api on the same port)"
exports="ST_AUTH=$AUTH ST_USER=test:tester ST_KEY=testing SWIFT_CONTAINER=$CONTAINER SWIFT_ROOT=$ROOT"
if [ "$REPLICAS" = 3 ]; then
  # What a test needs to stop and restart one object server: the helper, and each server's
  # port, configuration and pid file, comma-separated in the order of servers 1, 2, 3.
  ports="" confs="" pids=""
  while read -r name port _ _; do
    ports="$ports${ports:+,}$port"
    confs="$confs${confs:+,}$ETC/object-server${name#object}.conf"
    pids="$pids${pids:+,}$RUN/$name.pid"
  done <<<"$OBJECT_SERVERS"
  exports="$exports SWIFT_REPLICAS=3 SWIFT_OBJECT_CTL=$HERE/swift-object.sh"
  exports="$exports SWIFT_OBJECT_PORTS=$ports SWIFT_OBJECT_CONFS=$confs SWIFT_OBJECT_PIDFILES=$pids"
fi
echo "export $exports"
