#!/usr/bin/env bash
# Start a moto S3 server on 127.0.0.1 for banklease's tests, and create the test bucket and a
# versioned one beside it ($S3_BUCKET-versioned, exported as S3_VERSIONED_BUCKET).
#
#   - moto[server] from PyPI in a venv under $S3_ROOT (default /tmp/banklease-stores/s3);
#   - listens on 127.0.0.1:$S3_PORT (default 9000; if that port is taken by something else,
#     a free port is chosen and printed);
#   - any access key / secret; region us-east-1; path-style; conditional puts are atomic.
#
# Idempotent: a running server (recorded pid) is reused, on the port it was started with.
#
# Usage:  .ci/start-s3.sh          then eval the printed `export` line
#         .ci/stop-s3.sh [--wipe]
# Env:    S3_ROOT, S3_PORT (9000), S3_BUCKET (banklease-test), MOTO_SPEC ('moto[server]')
set -euo pipefail

ROOT=${S3_ROOT:-/tmp/banklease-stores/s3}
VENV=$ROOT/venv
BUCKET=${S3_BUCKET:-banklease-test}
PIDFILE=$ROOT/moto.pid
PORTFILE=$ROOT/moto.port
LOG=$ROOT/moto.log

fail() { echo "start-s3: $*" >&2; exit 1; }

command -v python3 >/dev/null || fail "python3 is required"
command -v curl >/dev/null || fail "curl is required"
mkdir -p "$ROOT"

# ---- 1. moto in a venv ------------------------------------------------------------------
if [ ! -x "$VENV/bin/moto_server" ]; then
  echo "start-s3: installing ${MOTO_SPEC:-moto[server]} into $VENV"
  python3 -m venv "$VENV" || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${MOTO_SPEC:-moto[server]}" \
    || fail "pip install ${MOTO_SPEC:-moto[server]} failed"
fi

port_free() { # $1 = port; true when nothing listens on 127.0.0.1:$1
  "$VENV/bin/python" - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
EOF
}

free_port() {
  "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# ---- 2. start (or reuse) ------------------------------------------------------------------
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ -f "$PORTFILE" ]; then
  PORT=$(cat "$PORTFILE")
  echo "start-s3: moto already running (pid $(cat "$PIDFILE"), port $PORT)"
else
  PORT=${S3_PORT:-9000}
  if ! port_free "$PORT"; then
    [ -n "${S3_PORT:-}" ] && fail "port $PORT (S3_PORT) is in use by another process"
    PORT=$(free_port)
    echo "start-s3: port 9000 is in use; using free port $PORT"
  fi
  setsid "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"
fi

# ---- 3. ready = the bucket exists (bounded: 30 s) ------------------------------------------
ok=""
for _ in $(seq 1 150); do
  # moto answers 200 also when the bucket exists already.
  code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$PORT/$BUCKET" || true)
  if [ "$code" = 200 ]; then ok=1; break; fi
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "start-s3: moto exited; log $LOG:" >&2
    tail -n 20 "$LOG" >&2 || true
    rm -f "$PIDFILE"
    exit 1
  fi
  sleep 0.2
done
if [ -z "$ok" ]; then
  echo "start-s3: moto NOT ready after 30 s (last status ${code:-none}); log $LOG:" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 1
fi
# A second bucket with versioning on: every write gets a new version id while the ETag stays
# the content's MD5 (tests/fence.rs: fenced writes must be refused there too). With moto's own
# boto3 (moto depends on it).
VERSIONED=$BUCKET-versioned
"$VENV/bin/python" - "$PORT" "$VERSIONED" <<'PY' || fail "could not make the versioned bucket $VERSIONED"
import sys
import boto3
port, bucket = sys.argv[1:3]
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="test",
                  aws_secret_access_key="test", region_name="us-east-1")
s3.create_bucket(Bucket=bucket)  # moto answers 200 when it exists already
s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
assert s3.get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled"
PY
version=$("$VENV/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null || echo '?')
echo "start-s3: moto $version ready on http://127.0.0.1:$PORT (bucket $BUCKET; versioned bucket $VERSIONED)"
echo "export AWS_ENDPOINT=http://127.0.0.1:$PORT AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 S3_BUCKET=$BUCKET S3_VERSIONED_BUCKET=$VERSIONED"
