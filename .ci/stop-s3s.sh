#!/usr/bin/env bash
# Stop the s3s-fs server started by .ci/start-s3s.sh (--wipe: also $S3S_ROOT, the data; the
# installed binary stays).
set -euo pipefail
exec bash "$(dirname "$0")/stop-by-pidfile.sh" stop-s3s "${S3S_ROOT:-/tmp/banklease-stores/s3s}" s3s s3s-fs "${1:-}"
