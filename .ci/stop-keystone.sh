#!/usr/bin/env bash
# Stop what .ci/start-keystone.sh started (both Keystones, the Keystone Swift proxy and the TLS
# front), by
# their recorded pids. --wipe also removes $KEYSTONE_ROOT (database, keys, openrc). Idempotent.
set -euo pipefail
ROOT=${KEYSTONE_ROOT:-/tmp/banklease-stores/keystone}
for name in tls-front proxy keystone-short keystone; do
  bash "$(dirname "$0")/stop-by-pidfile.sh" stop-keystone "$ROOT/run" "$name" "$name"
done
if [ "${1:-}" = "--wipe" ]; then
  rm -rf "$ROOT"
  echo "stop-keystone: wiped $ROOT"
fi
