#!/usr/bin/env bash
# Stop the Azurite blob service started by .ci/start-azurite.sh (--wipe: also $AZURITE_ROOT,
# data and the npm install).
set -euo pipefail
exec bash "$(dirname "$0")/stop-by-pidfile.sh" stop-azurite "${AZURITE_ROOT:-/tmp/banklease-stores/azurite}" azurite azurite "${1:-}"
