#!/usr/bin/env bash
# Start a single-node Ceph with a RADOS Gateway on 127.0.0.1 for banklease's tests: a real S3
# server (and a Swift API that banklease must judge NOT supported).
#
#   - Debian 12's packages (ceph-mon ceph-mgr ceph-osd radosgw ceph-common), installed if
#     missing (needs root and apt); no cephadm, no systemd: one mon, one mgr, one OSD (memstore)
#     and one radosgw, each in the foreground under its own pid file, started from `/`;
#   - cephx off, pools of size 1, `public addr = 127.0.0.1`;
#   - radosgw on 127.0.0.1:$RGW_PORT (default 7480) with the S3, Swift and admin APIs and a fast
#     expirer, and the same over TLS on 127.0.0.1:$RGW_TLS_PORT (default 7443) with a certificate
#     of a private CA made here ($RGW_ROOT/tls/ca.pem: what an operator's OS_CACERT or
#     AWS_CA_BUNDLE names); a user `banklease` with S3 keys and a Swift subuser (`banklease:swift`, v1 auth
#     at /auth/1.0); the test bucket and a versioned one ($RGW_BUCKET-versioned) made through S3.
#
# Idempotent: a running cluster (recorded pids) is reused. Everything lives under $RGW_ROOT
# (default /tmp/banklease-stores/rgw).
#
# Usage:  .ci/start-rgw.sh          then eval the printed `export` line
#         .ci/stop-rgw.sh [--wipe]
# Env:    RGW_ROOT, RGW_PORT (7480), RGW_TLS_PORT (7443), RGW_MON_PORT (6789),
#         RGW_BUCKET (banklease-test)
set -euo pipefail

ROOT=${RGW_ROOT:-/tmp/banklease-stores/rgw}
PORT=${RGW_PORT:-7480}
TLS_PORT=${RGW_TLS_PORT:-7443}
TLS=$ROOT/tls
MON_PORT=${RGW_MON_PORT:-6789}
BUCKET=${RGW_BUCKET:-banklease-test}
CONF=$ROOT/ceph.conf
RUN=$ROOT/run
ACCESS=banklease-access
SECRET=banklease-secret
SWIFT_KEY=banklease-swift-key

fail() { echo "start-rgw: $*" >&2; exit 1; }

# ---- 1. packages --------------------------------------------------------------------------
# openssl makes the private CA of the TLS endpoint.
if ! command -v openssl >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null \
    || fail "apt-get install of openssl failed"
fi
if ! command -v radosgw >/dev/null || ! command -v ceph-mon >/dev/null; then
  echo "start-rgw: installing Ceph from Debian's packages (about a minute)"
  command -v apt-get >/dev/null || fail "apt-get is required to install Ceph"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    ceph-mon ceph-mgr ceph-osd radosgw ceph-common >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends ceph-mon ceph-mgr ceph-osd radosgw ceph-common >/dev/null; } \
    || fail "apt-get install of ceph-mon ceph-mgr ceph-osd radosgw ceph-common failed"
fi

running() { # $1 = name; true when its recorded pid lives
  [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null
}

s3_ready() {
  curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/" 2>/dev/null | grep -q '^[24]'
}

# The TLS endpoint answers with the private CA's certificate (its SAN is 127.0.0.1).
tls_ready() {
  curl -s -o /dev/null -w '%{http_code}' --cacert "$TLS/ca.pem" "https://127.0.0.1:$TLS_PORT/" 2>/dev/null | grep -q '^[24]'
}

print_env() {
  local tls=""
  # Only a TLS endpoint that answered is named: its suites skip, saying why, without it.
  if tls_ready; then
    tls=" RGW_TLS_ENDPOINT=https://127.0.0.1:$TLS_PORT RGW_TLS_CA=$TLS/ca.pem"
  fi
  echo "export RGW_S3_ENDPOINT=http://127.0.0.1:$PORT RGW_ACCESS_KEY_ID=$ACCESS RGW_SECRET_ACCESS_KEY=$SECRET RGW_BUCKET=$BUCKET RGW_VERSIONED_BUCKET=$BUCKET-versioned RGW_SWIFT_AUTH=http://127.0.0.1:$PORT/auth/1.0 RGW_SWIFT_USER=banklease:swift RGW_SWIFT_KEY=$SWIFT_KEY RGW_ROOT=$ROOT$tls"
}

if running mon && running osd && running rgw && s3_ready; then
  echo "start-rgw: already running on 127.0.0.1:$PORT"
  print_env
  exit 0
fi

# ---- 2. a new cluster ---------------------------------------------------------------------
# Daemons of an earlier attempt go first: a half-started cluster is started again whole.
[ -x "$(dirname "$0")/stop-rgw.sh" ] && RGW_ROOT=$ROOT bash "$(dirname "$0")/stop-rgw.sh" --wipe >/dev/null 2>&1 || true
mkdir -p "$ROOT" "$RUN" "$ROOT/mon" "$ROOT/osd" "$ROOT/mgr" "$ROOT/rgw" "$ROOT/log" "$TLS"
FSID=$(cat /proc/sys/kernel/random/uuid)
# A private CA and the gateway's certificate for 127.0.0.1, valid for a week.
openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=banklease test CA" \
  -keyout "$TLS/ca.key" -out "$TLS/ca.pem" >/dev/null 2>&1 || fail "openssl could not make the test CA"
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$TLS/rgw.key" \
  -out "$TLS/rgw.csr" >/dev/null 2>&1 || fail "openssl could not make the gateway's key"
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$TLS/ext.cnf"
openssl x509 -req -in "$TLS/rgw.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
  -days 7 -extfile "$TLS/ext.cnf" -out "$TLS/rgw.pem" >/dev/null 2>&1 || fail "openssl could not sign the gateway's certificate"
cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = 127.0.0.1:$MON_PORT
public addr = 127.0.0.1
ms bind port min = 6800
ms bind port max = 6900
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd crush chooseleaf type = 0
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
mon warn on pool no redundancy = false
run dir = $RUN
log file = $ROOT/log/\$name.log
pid file = $RUN/\$name.pid
[mon.a]
mon data = $ROOT/mon
[mgr.x]
mgr data = $ROOT/mgr
[osd.0]
osd data = $ROOT/osd
osd objectstore = memstore
memstore device bytes = 2147483648
osd fast shutdown = false
osd class load list = *
osd class default list = *
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$PORT ssl_endpoint=127.0.0.1:$TLS_PORT ssl_certificate=$TLS/rgw.pem ssl_private_key=$TLS/rgw.key
rgw enable apis = s3, swift, swift_auth, admin
rgw data = $ROOT/rgw
rgw objexp gc interval = 5
rgw swift url = http://127.0.0.1:$PORT
EOF
export CEPH_CONF=$CONF
cd /

ceph-mon --mkfs -i a --fsid "$FSID" -c "$CONF" >/dev/null 2>&1 || fail "ceph-mon --mkfs failed (see $ROOT/log)"
ceph-mon -i a -c "$CONF" -f >"$ROOT/log/mon.out" 2>&1 &
echo $! >"$RUN/mon.pid"
for _ in $(seq 1 100); do ceph -c "$CONF" --connect-timeout 5 -s >/dev/null 2>&1 && break; sleep 0.2; done
ceph -c "$CONF" --connect-timeout 5 -s >/dev/null 2>&1 || fail "the monitor did not answer (see $ROOT/log)"

ceph-mgr -i x -c "$CONF" -f >"$ROOT/log/mgr.out" 2>&1 &
echo $! >"$RUN/mgr.pid"

OSD_ID=$(ceph -c "$CONF" osd create)
ceph -c "$CONF" osd crush add "osd.$OSD_ID" 1 root=default >/dev/null
ceph-osd -i "$OSD_ID" --mkfs -c "$CONF" >/dev/null 2>&1 || fail "ceph-osd --mkfs failed (see $ROOT/log)"
ceph-osd -i "$OSD_ID" -c "$CONF" -f >"$ROOT/log/osd.out" 2>&1 &
echo $! >"$RUN/osd.pid"
for _ in $(seq 1 150); do
  ceph -c "$CONF" --connect-timeout 5 osd stat 2>/dev/null | grep -q '1 up' && break
  sleep 0.2
done
ceph -c "$CONF" --connect-timeout 5 osd stat 2>/dev/null | grep -q '1 up' || fail "the OSD did not come up (see $ROOT/log)"

radosgw -n client.rgw.a -c "$CONF" -f >"$ROOT/log/rgw.out" 2>&1 &
echo $! >"$RUN/rgw.pid"
for _ in $(seq 1 300); do s3_ready && break; sleep 0.2; done
s3_ready || fail "radosgw did not answer on 127.0.0.1:$PORT (see $ROOT/log/rgw.out)"
# TLS is checked, not required: without it only the TLS suites skip (print_env says).
for _ in $(seq 1 50); do tls_ready && break; sleep 0.2; done
tls_ready || echo "start-rgw: warning: no TLS answer on 127.0.0.1:$TLS_PORT (see $ROOT/log/rgw.out); the TLS suites will skip" >&2

# ---- 3. a user, a Swift subuser and the bucket ------------------------------------------
radosgw-admin -c "$CONF" user create --uid=banklease --display-name=banklease \
  --access-key="$ACCESS" --secret-key="$SECRET" >/dev/null
radosgw-admin -c "$CONF" subuser create --uid=banklease --subuser=banklease:swift \
  --access=full >/dev/null
radosgw-admin -c "$CONF" key create --subuser=banklease:swift --key-type=swift \
  --secret-key="$SWIFT_KEY" >/dev/null
python3 - "$PORT" "$ACCESS" "$SECRET" "$BUCKET" <<'PY' || fail "could not create buckets $BUCKET and $BUCKET-versioned"
# The test bucket, and a versioned one beside it, through S3 (SigV4, path-style), with the
# standard library only.
import datetime, hashlib, hmac, sys, urllib.error, urllib.request
port, access, secret, bucket = sys.argv[1:5]
host = f"127.0.0.1:{port}"

def put(path, query="", body=b""):
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    canonical = f"PUT\n{path}\n{query}\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}"
    scope = f"{day}/us-east-1/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = ("AWS4" + secret).encode()
    for part in (day, "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    url = f"http://{host}{path}" + (f"?{query}" if query else "")
    req = urllib.request.Request(url, data=body, method="PUT", headers={
        "x-amz-date": amz_date, "x-amz-content-sha256": payload,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}"})
    try:
        urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as e:
        if e.code != 409:  # BucketAlreadyOwnedByYou
            raise

put(f"/{bucket}")
# Versioning on: every write gets a new version id while the ETag stays the content's MD5.
put(f"/{bucket}-versioned")
put(f"/{bucket}-versioned", "versioning=",
    b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b'<Status>Enabled</Status></VersioningConfiguration>')
PY
echo "start-rgw: Ceph RGW ready on http://127.0.0.1:$PORT and https://127.0.0.1:$TLS_PORT (S3 bucket $BUCKET; Swift v1 auth at /auth/1.0; private CA $TLS/ca.pem)"
print_env
