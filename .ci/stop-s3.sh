#!/usr/bin/env bash
# Stop the moto server started by .ci/start-s3.sh (--wipe: also $S3_ROOT, venv included).
set -euo pipefail
exec bash "$(dirname "$0")/stop-by-pidfile.sh" stop-s3 "${S3_ROOT:-/tmp/banklease-stores/s3}" moto moto "${1:-}"
