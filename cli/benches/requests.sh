#!/usr/bin/env bash
# Requests per command, as BENCHMARKS.md's table gives them: each binary given, on each store the
# environment configures (S3 from AWS_* when AWS_ENDPOINT is set, Swift from ST_* when ST_AUTH
# is set), on a fresh bank, counted by the binary itself (BANKLEASE_COUNT_REQUESTS=1: every HTTP
# request it sent, retries and authentications included). Python's check_lease_existence is
# counted with `banklease.requests_sent()` when PYTHON names an interpreter with the package
# (once per store, on the bank the last binary made).
#
#   eval "$(bash .ci/start-s3.sh | grep '^export ')"; eval "$(bash .ci/start-swift.sh | grep '^export ')"
#   cargo build -p banklease-cli
#   bash cli/benches/requests.sh target/debug/banklease [OTHER_BINARY...]
#
# Prints one row per command and store: `store command binary requests writes`.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 64; }
export BANKLEASE_COUNT_REQUESTS=1 AWS_EC2_METADATA_DISABLED=true NO_COLOR=1
unset BANKLEASE_BANK

stores=()
[ -n "${AWS_ENDPOINT:-}" ] && stores+=("s3://${S3_BUCKET:-banklease-test}")
[ -n "${ST_AUTH:-}" ] && stores+=("swift://${SWIFT_CONTAINER:-banklease-test}")
[ ${#stores[@]} -gt 0 ] || { echo "$0: no store configured (AWS_ENDPOINT, ST_AUTH)" >&2; exit 69; }

# `requests writes` from a command's last `note: requests=…` line.
count() {
  local line
  line=$("$@" 2>&1 >/dev/null | grep '^note: requests=' | tail -n 1 || true)
  [ -n "$line" ] || { echo "? ?"; return; }
  echo "$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$line") $(sed -E 's/.*writes=([0-9]+).*/\1/' <<<"$line")"
}

printf '%-8s %-34s %-26s %8s %6s\n' store command binary requests writes
for store in "${stores[@]}"; do
  for bin in "$@"; do
    name=$(basename "$bin")
    bank="$store/requests-$(date +%s%N)"
    b() { "$bin" --bank "$bank" "$@"; }
    row() {
      local what=$1; shift
      printf '%-8s %-34s %-26s %8s %6s\n' "${store%%:*}" "$what" "$name" $(count "$@")
    }
    row "init" b init
    row "lock run -- true (first)" b lock run -n job -- true
    row "lock run -- true" b lock run -n job -- true
    row "run --lock -- true" b run --lock job2 -- true
    row "run -- true" b run -- true
    b lock acquire held --duration 30s >/dev/null 2>&1 || true
    row "lock show" b lock show held
    row "lease list" b lease list
    row "validity-check" b validity-check --owner o1
    row "gc (empty bank)" b gc
    # The installed package, once per store: on the last binary's bank.
    if [ -n "${PYTHON:-}" ] && [ "$bin" = "${@: -1}" ]; then
      py=$("$PYTHON" - "$bank" <<'EOF' 2>/dev/null || echo "? ?"
import sys
import banklease
from banklease.compat import BankPluginLease
lease = BankPluginLease(banklease.Bank.open(sys.argv[1]), banklease.LeaseWindows(30, 120, 20))
before = banklease.requests_sent()
lease.check_lease_existence("o1")
after = banklease.requests_sent()
print(after["total"] - before["total"], after["writes"] - before["writes"])
EOF
)
      printf '%-8s %-34s %-26s %8s %6s\n' "${store%%:*}" "python check_lease_existence" "(installed package)" $py
    fi
  done
done
