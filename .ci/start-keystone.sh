#!/usr/bin/env bash
# Start OpenStack Keystone (v3) on 127.0.0.1 and a Swift proxy that authenticates through it,
# beside the TempAuth Swift of .ci/start-swift.sh (which must be running: the Keystone proxy
# uses its rings, storage servers and memcached).
#
#   - Debian 12 packages python3-keystone (Keystone 22) and python3-keystonemiddleware,
#     installed if missing; SQLite database, fernet tokens, everything under $KEYSTONE_ROOT
#     (default /tmp/banklease-stores/keystone);
#   - Keystone on $KEYSTONE_PORT (5000), tokens valid $KEYSTONE_TOKEN_LIFETIME s (3600, the
#     default of a real deployment);
#   - a second Keystone process on $KEYSTONE_SHORT_PORT (5001), same database and keys, whose
#     tokens live $KEYSTONE_SHORT_TOKEN_LIFETIME s (20): the token-expiry tests authenticate
#     there, Swift validates at the first;
#   - a Swift proxy on $SWIFT_KEYSTONE_PORT (8081) with authtoken + keystoneauth (operator
#     roles admin, member; reader role reader), token cache $SWIFT_TOKEN_CACHE_TIME s (2), so that a revoked token
#     is refused within seconds;
#   - a TLS front (HAProxy, as OpenStack deployments terminate TLS), with a certificate of a
#     private CA this script makes ($KEYSTONE_ROOT/tls/ca.pem): Keystone on $KEYSTONE_TLS_PORT
#     (5443) and the Keystone Swift proxy on $SWIFT_KEYSTONE_TLS_PORT (8444), the catalog's
#     object-store endpoint in region RegionTLS;
#   - .ci/keystone-bootstrap.py: users, projects, a domain, an application credential, the
#     object-store endpoints (RegionOne; RegionTLS through the front); it writes
#     $KEYSTONE_ROOT/test-env.json (what the tests read) and the openrc files an operator would
#     source.
#
# Idempotent: running processes are left alone; the bootstrap is rerun (it repairs what tests
# changed, e.g. a disabled user).
#
# Usage:  .ci/start-keystone.sh        then eval the printed `export` line
#         .ci/stop-keystone.sh [--wipe]
set -euo pipefail

ROOT=${KEYSTONE_ROOT:-/tmp/banklease-stores/keystone}
PORT=${KEYSTONE_PORT:-5000}
SHORT_PORT=${KEYSTONE_SHORT_PORT:-5001}
LIFETIME=${KEYSTONE_TOKEN_LIFETIME:-3600}
SHORT_LIFETIME=${KEYSTONE_SHORT_TOKEN_LIFETIME:-20}
SWIFT_ROOT=${SWIFT_ROOT:-/tmp/banklease-stores/swift}
SPORT=${SWIFT_KEYSTONE_PORT:-8081}
MCPORT=${MEMCACHED_PORT:-11211}
CACHE_TIME=${SWIFT_TOKEN_CACHE_TIME:-2}
TLS_PORT=${KEYSTONE_TLS_PORT:-5443}
STLS_PORT=${SWIFT_KEYSTONE_TLS_PORT:-8444}
CONTAINER=${SWIFT_CONTAINER:-banklease-test}
ADMIN_PASSWORD=admin-secret
RUN=$ROOT/run
HERE=$(cd "$(dirname "$0")" && pwd)
# Debian's Python, where python3-keystone is (not a pyenv or venv python3 earlier on PATH).
PY=/usr/bin/python3

fail() { echo "start-keystone: $*" >&2; exit 1; }
running() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

[ -f "$SWIFT_ROOT/etc/object.ring.gz" ] \
  || fail "no Swift under $SWIFT_ROOT: run .ci/start-swift.sh first (the Keystone proxy uses its rings)"

# ---- 1. packages ------------------------------------------------------------------------
PKGS="python3-keystone python3-keystonemiddleware curl haproxy openssl"
missing=""
# Installed means "install ok installed": a removed package keeps its configuration files
# ("deinstall ok config-files"), and `dpkg -s` still answers 0 for it.
for p in $PKGS; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] \
    || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" = 0 ] || fail "packages missing:$missing; run as root (or install them first)"
  echo "start-keystone: installing:$missing (about 30 s)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || fail "apt-get update failed"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null \
    || fail "apt-get install failed for:$missing"
fi

# ---- 2. configuration: two Keystone configs differing only in the token lifetime ----------
mkdir -p "$ROOT/etc" "$ROOT/etc-short" "$RUN" "$ROOT/fernet-keys" "$ROOT/credential-keys"
keystone_conf() { # lifetime
  cat <<CONF
[DEFAULT]
log_file = $RUN/keystone.log
[database]
connection = sqlite:///$ROOT/keystone.db
[identity]
# bcrypt at its lowest cost: a test rig, where every authentication hashes a password and
# the default (12) costs ~0.3 s of a 2-core machine.
password_hash_rounds = 4
[token]
provider = fernet
expiration = $1
[fernet_tokens]
key_repository = $ROOT/fernet-keys
[fernet_receipts]
key_repository = $ROOT/fernet-keys
[credential]
key_repository = $ROOT/credential-keys
[cache]
enabled = false
CONF
}
keystone_conf "$LIFETIME" >"$ROOT/etc/keystone.conf"
keystone_conf "$SHORT_LIFETIME" >"$ROOT/etc-short/keystone.conf"
sed -i "s#keystone.log#keystone-short.log#" "$ROOT/etc-short/keystone.conf"
manage() { keystone-manage --config-file "$ROOT/etc/keystone.conf" "$@" >>"$RUN/manage.log" 2>&1; }

# ---- 3. database, keys, admin and identity endpoints (keystone-manage; idempotent) -------
if [ ! -f "$ROOT/bootstrapped" ]; then
  echo "start-keystone: making the database and keys"
  manage db_sync || fail "keystone-manage db_sync failed; see $RUN/manage.log"
  # WAL: a reader (the other Keystone, or a session Keystone leaves open) never locks out a
  # writer, which in the default journal mode fails with "database is locked".
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA journal_mode=WAL")' \
    "$ROOT/keystone.db" || fail "cannot switch the database to WAL"
  manage fernet_setup --keystone-user root --keystone-group root || fail "fernet_setup failed"
  manage credential_setup --keystone-user root --keystone-group root || fail "credential_setup failed"
  manage bootstrap --bootstrap-password "$ADMIN_PASSWORD" \
    --bootstrap-admin-url "http://127.0.0.1:$PORT/v3" \
    --bootstrap-internal-url "http://127.0.0.1:$PORT/v3" \
    --bootstrap-public-url "http://127.0.0.1:$PORT/v3" \
    --bootstrap-region-id RegionOne || fail "keystone-manage bootstrap failed; see $RUN/manage.log"
  touch "$ROOT/bootstrapped"
fi

# ---- 4. the Keystone Swift proxy ----------------------------------------------------------
cat >"$ROOT/proxy-server.conf" <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $SPORT
workers = 1
user = root
swift_dir = $SWIFT_ROOT/etc
log_name = proxy-keystone
log_level = INFO

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk authtoken keystoneauth copy slo dlo symlink proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
conn_timeout = 1
node_timeout = 10

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory
www_authenticate_uri = http://127.0.0.1:$PORT
auth_url = http://127.0.0.1:$PORT
auth_type = password
project_domain_id = default
user_domain_id = default
project_name = service
username = swift
password = swift-secret
delay_auth_decision = True
memcached_servers = 127.0.0.1:$MCPORT
token_cache_time = $CACHE_TIME
include_service_catalog = False

[filter:keystoneauth]
use = egg:swift#keystoneauth
operator_roles = admin, member
# OpenStack's reader role reads and lists, never writes: banklease's read-only commands.
project_reader_roles = reader

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$MCPORT
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
[filter:bulk]
use = egg:swift#bulk
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
[filter:symlink]
use = egg:swift#symlink
CONF

# ---- 5. the TLS front: a private CA, the front's certificate for 127.0.0.1, HAProxy --------
# Made once (the tests trust this CA through OS_CACERT, so a rerun keeps it), and again when
# the front's certificate ends within a day (a long-lived rig).
TLS=$ROOT/tls
mkdir -p "$TLS"
if [ ! -f "$TLS/front.pem" ] || ! openssl x509 -checkend 86400 -noout -in "$TLS/front.crt" >/dev/null 2>&1; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=banklease Keystone test CA" \
    -keyout "$TLS/ca.key" -out "$TLS/ca.pem" >/dev/null 2>&1 || fail "openssl could not make the test CA"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$TLS/front.key" \
    -out "$TLS/front.csr" >/dev/null 2>&1 || fail "openssl could not make the front's key"
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$TLS/ext.cnf"
  openssl x509 -req -in "$TLS/front.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
    -days 30 -extfile "$TLS/ext.cnf" -out "$TLS/front.crt" >/dev/null 2>&1 \
    || fail "openssl could not sign the front's certificate"
  # HAProxy takes the certificate and its key in one file.
  cat "$TLS/front.crt" "$TLS/front.key" >"$TLS/front.pem"
fi
cat >"$ROOT/haproxy.cfg" <<CONF
global
  maxconn 512
defaults
  mode http
  option forwardfor
  timeout connect 5s
  timeout client 300s
  timeout server 300s
frontend keystone_tls
  bind 127.0.0.1:$TLS_PORT ssl crt $TLS/front.pem
  http-request set-header X-Forwarded-Proto https
  default_backend keystone
frontend swift_tls
  bind 127.0.0.1:$STLS_PORT ssl crt $TLS/front.pem
  http-request set-header X-Forwarded-Proto https
  default_backend swift
backend keystone
  server keystone 127.0.0.1:$PORT
backend swift
  server swift 127.0.0.1:$SPORT
CONF
haproxy -c -q -f "$ROOT/haproxy.cfg" || fail "HAProxy refused $ROOT/haproxy.cfg"

# ---- 6. processes (pid in $RUN/<name>.pid, log in $RUN/<name>.log) ------------------------
start() { # name cmd...
  local name=$1
  shift
  if running "$name"; then
    echo "start-keystone: $name already running (pid $(cat "$RUN/$name.pid"))"
    return
  fi
  setsid "$@" >"$RUN/$name.out" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}
OS_KEYSTONE_CONFIG_DIR=$ROOT/etc start keystone "$PY" "$HERE/keystone-serve.py" "$PORT"
OS_KEYSTONE_CONFIG_DIR=$ROOT/etc-short start keystone-short "$PY" "$HERE/keystone-serve.py" "$SHORT_PORT"
start proxy /usr/bin/swift-proxy-server "$ROOT/proxy-server.conf" -v
# -db: in the foreground (its pid is the one recorded), logging to stderr.
start tls-front haproxy -db -f "$ROOT/haproxy.cfg"

# ---- 7. ready = both Keystones answer, then the bootstrap (bounded: 60 s) -----------------
for p in "$PORT" "$SHORT_PORT"; do
  ok=""
  for _ in $(seq 1 300); do
    if curl -fsS -m 2 "http://127.0.0.1:$p/v3" >/dev/null 2>&1; then ok=1; break; fi
    for name in keystone keystone-short; do
      running "$name" || { tail -n 20 "$RUN/$name.out" >&2; fail "$name exited; see $RUN/$name.out"; }
    done
    sleep 0.2
  done
  if [ -z "$ok" ]; then
    echo "start-keystone: Keystone on port $p NOT ready after 60 s; logs in $RUN:" >&2
    tail -n 20 "$RUN"/keystone*.out "$RUN"/keystone*.log >&2 || true
    exit 1
  fi
done
for _ in $(seq 1 150); do
  curl -fsS -m 2 "http://127.0.0.1:$SPORT/healthcheck" >/dev/null 2>&1 && break
  sleep 0.2
done
"$PY" "$HERE/keystone-bootstrap.py" "http://127.0.0.1:$PORT" "$SPORT" "$ROOT" \
  "$ADMIN_PASSWORD" "$CONTAINER" "$STLS_PORT" || {
  tail -n 20 "$RUN"/proxy.out "$RUN"/keystone.log >&2 || true
  fail "bootstrap failed"
}

# The front is checked, not required: without it only the TLS suites skip.
tls_env=""
tls_ready() {
  curl -fsS -m 2 --cacert "$TLS/ca.pem" "https://127.0.0.1:$TLS_PORT/v3" >/dev/null 2>&1 \
    && curl -fsS -m 2 --cacert "$TLS/ca.pem" "https://127.0.0.1:$STLS_PORT/healthcheck" >/dev/null 2>&1
}
for _ in $(seq 1 50); do tls_ready && break; sleep 0.2; done
if tls_ready; then
  tls_env=" KEYSTONE_TLS_AUTH_URL=https://127.0.0.1:$TLS_PORT/v3 KEYSTONE_TLS_REGION=RegionTLS KEYSTONE_TLS_CA=$TLS/ca.pem"
else
  echo "start-keystone: warning: the TLS front does not answer on 127.0.0.1:$TLS_PORT/$STLS_PORT (see $RUN/tls-front.out); the TLS suites will skip" >&2
fi

version=$(dpkg-query -W -f='${Version}' python3-keystone 2>/dev/null || echo '?')
echo "start-keystone: Keystone $version ready on http://127.0.0.1:$PORT/v3 (tokens ${LIFETIME} s;" \
  "port $SHORT_PORT: ${SHORT_LIFETIME} s); Swift through Keystone on http://127.0.0.1:$SPORT;" \
  "behind TLS (CA $TLS/ca.pem): Keystone https://127.0.0.1:$TLS_PORT/v3, Swift https://127.0.0.1:$STLS_PORT (region RegionTLS)"
echo "start-keystone: an operator's openrc (password): $ROOT/openrc; application credential: $ROOT/app-cred-openrc"
sed 's/^/start-keystone:   /' "$ROOT/openrc"
echo "export KEYSTONE_ROOT=$ROOT KEYSTONE_TEST_ENV=$ROOT/test-env.json KEYSTONE_SHORT_AUTH_URL=http://127.0.0.1:$SHORT_PORT/v3 KEYSTONE_SHORT_TOKEN_LIFETIME=$SHORT_LIFETIME$tls_env"
