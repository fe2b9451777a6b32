#!/usr/bin/env bash
# Stop the fake-gcs-server started by .ci/start-gcs.sh (--wipe: also $GCS_ROOT: data,
# service-account file and venv).
set -euo pipefail
exec bash "$(dirname "$0")/stop-by-pidfile.sh" stop-gcs "${GCS_ROOT:-/tmp/banklease-stores/gcs}" fake-gcs fake-gcs-server "${1:-}"
