#!/usr/bin/env bash
# Start Azurite's blob service on 127.0.0.1 for banklease's tests, and create the test container.
#
#   - azurite@3.35.0 from npm, installed under $AZURITE_ROOT (default
#     /tmp/banklease-stores/azurite: node_modules there, never global), reused when present;
#     3.35.0 because 3.36+ declare Node >= 21 and the machine has Node 20; about 20 s;
#   - only the blob service (azurite-blob), on 127.0.0.1:$AZURITE_PORT (default 10000; if that
#     port is taken by something else, a free port is chosen and printed), with --loose
#     --skipApiVersionCheck --disableTelemetry; data in $AZURITE_ROOT/data;
#   - the well-known development account devstoreaccount1 and its well-known key; path-style
#     URLs (http://127.0.0.1:PORT/devstoreaccount1/CONTAINER/BLOB);
#   - the container is created with a SharedKey-signed request made by Node's own crypto and
#     http modules (no SDK); 201 (created) and 409 (exists) both count as ready.
#
# Idempotent: a running server (recorded pid) is reused, on the port it was started with.
# The printed variables are the ones object_store 0.14's MicrosoftAzureBuilder::from_env reads:
# AZURE_STORAGE_USE_EMULATOR=true makes it use AZURITE_BLOB_STORAGE_URL as the endpoint (and
# allow http), AZURE_CONTAINER_NAME is the container.
#
# Usage:  .ci/start-azurite.sh          then eval the printed `export` line
#         .ci/stop-azurite.sh [--wipe]
# Env:    AZURITE_ROOT, AZURITE_PORT (10000), AZURITE_CONTAINER (banklease-test)
set -euo pipefail

ROOT=${AZURITE_ROOT:-/tmp/banklease-stores/azurite}
DATA=$ROOT/data
CONTAINER=${AZURITE_CONTAINER:-banklease-test}
PIDFILE=$ROOT/azurite.pid
PORTFILE=$ROOT/azurite.port
LOG=$ROOT/azurite.log
VERSION=3.35.0
ACCOUNT=devstoreaccount1
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

fail() { echo "start-azurite: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is required (on Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || fail "npm is required (on Debian: apt-get install npm)"
mkdir -p "$DATA"

# ---- 1. azurite under $ROOT -------------------------------------------------------------
BIN=$ROOT/node_modules/azurite/dist/src/blob/main.js
installed=$(node -p "require('$ROOT/node_modules/azurite/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$VERSION" ] || [ ! -f "$BIN" ]; then
  echo "start-azurite: installing azurite@$VERSION into $ROOT/node_modules"
  t0=$(date +%s)
  npm install --prefix "$ROOT" --no-save --no-audit --no-fund --loglevel=error \
    "azurite@$VERSION" >/dev/null || fail "npm install azurite@$VERSION failed"
  echo "start-azurite: installed azurite in $(($(date +%s) - t0)) s"
  [ -f "$BIN" ] || fail "azurite installed but $BIN is missing"
fi

port_free() { # $1 = port; true when nothing listens on 127.0.0.1:$1
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# One SharedKey-signed request to the blob service; prints the HTTP status (000: no answer).
# $1 method, $2 path (e.g. /devstoreaccount1/banklease-test?restype=container),
# then "Header: value" arguments. Body: none.
signed() {
  node - "$PORT" "$ACCOUNT" "$KEY" "$@" <<'EOF'
const crypto = require("crypto"), http = require("http");
const [port, account, key, method, path, ...hdrs] = process.argv.slice(2);
const headers = { "x-ms-date": new Date().toUTCString(), "x-ms-version": "2021-12-02" };
for (const h of hdrs) {
  const i = h.indexOf(":");
  headers[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1).trim();
}
const u = new URL(path, "http://127.0.0.1");
// String to sign (SharedKey, blob service): the standard headers in this order (an empty
// Content-Length as it is 0), the x-ms-* headers sorted, then /account/path and the sorted
// query parameters.
const std = ["content-encoding", "content-language", "content-length", "content-md5",
  "content-type", "date", "if-modified-since", "if-match", "if-none-match",
  "if-unmodified-since", "range"];
const xms = Object.keys(headers).filter((k) => k.startsWith("x-ms-")).sort();
const params = [...new Set([...u.searchParams.keys()].map((k) => k.toLowerCase()))].sort();
const query = params.map((k) => `\n${k}:${u.searchParams.getAll(k).join(",")}`).join("");
const sts = [method, ...std.map((h) => headers[h] || ""),
  ...xms.map((k) => `${k}:${headers[k]}`), `/${account}${u.pathname}${query}`].join("\n");
headers.authorization = `SharedKey ${account}:` +
  crypto.createHmac("sha256", Buffer.from(key, "base64")).update(sts, "utf8").digest("base64");
headers["content-length"] = "0";
const req = http.request({ host: "127.0.0.1", port, method, path, headers, timeout: 2000 },
  (res) => { res.resume(); res.on("end", () => console.log(res.statusCode)); });
req.on("timeout", () => req.destroy(new Error("timeout")));
req.on("error", () => console.log("000"));
req.end();
EOF
}

# ---- 2. start (or reuse) ------------------------------------------------------------------
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ -f "$PORTFILE" ]; then
  PORT=$(cat "$PORTFILE")
  echo "start-azurite: azurite already running (pid $(cat "$PIDFILE"), port $PORT)"
else
  PORT=${AZURITE_PORT:-10000}
  if ! port_free "$PORT"; then
    [ -n "${AZURITE_PORT:-}" ] && fail "port $PORT (AZURITE_PORT) is in use by another process"
    # Bounded search upwards for a free port.
    for p in $(seq 11000 11099); do
      if port_free "$p"; then PORT=$p; break; fi
    done
    port_free "$PORT" || fail "no free port found in 11000-11099"
    echo "start-azurite: port 10000 is in use; using free port $PORT"
  fi
  setsid node "$BIN" --blobHost 127.0.0.1 --blobPort "$PORT" --location "$DATA" --loose \
    --skipApiVersionCheck --disableTelemetry --silent >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"
fi

# ---- 3. ready = the container exists (bounded: 30 s) ----------------------------------------
ok=""
for _ in $(seq 1 150); do
  # 201 Created, or 409 ContainerAlreadyExists on a reused server or data directory.
  code=$(signed PUT "/$ACCOUNT/$CONTAINER?restype=container" || true)
  if [ "$code" = 201 ] || [ "$code" = 409 ]; then ok=1; break; fi
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "start-azurite: azurite exited; log $LOG:" >&2
    tail -n 20 "$LOG" >&2 || true
    rm -f "$PIDFILE"
    exit 1
  fi
  sleep 0.2
done
if [ -z "$ok" ]; then
  echo "start-azurite: azurite NOT ready after 30 s (last status ${code:-none}); log $LOG:" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 1
fi
echo "start-azurite: azurite $VERSION (blob) ready on http://127.0.0.1:$PORT (container $CONTAINER, data $DATA)"
echo "export AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:$PORT" \
  "AZURE_STORAGE_ACCOUNT_NAME=$ACCOUNT AZURE_STORAGE_ACCOUNT_KEY=$KEY AZURE_ALLOW_HTTP=true" \
  "AZURE_CONTAINER_NAME=$CONTAINER"
