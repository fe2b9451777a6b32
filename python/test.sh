#!/usr/bin/env bash
# The Python package's tests: installs the package the way README.md says (`pip install
# ./python`, a release build by maturin) into a virtual environment of its own, then runs pytest.
# Swift and S3 tests run when BANKLEASE_TEST_SWIFT=1 / BANKLEASE_TEST_S3=1 (see .ci/run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${BANKLEASE_VENV:-$root/target/python-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "pytest==9.2.0"
echo "python/test.sh: building and installing the package (pip install ./python)"
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$root/python"
# The daemon test runs the Rust GC daemon on a Python owner's zombies.
cargo build -q --manifest-path "$root/Cargo.toml" -p banklease-gc-daemon --bin banklease-gc
export BANKLEASE_GC_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/banklease-gc"
# An S3 bank without keys asks the AWS credential chain: never the instance metadata address.
export AWS_EC2_METADATA_DISABLED="${AWS_EC2_METADATA_DISABLED:-true}"
cd "$root"
exec "$venv/bin/pytest" -q python/tests "$@"
