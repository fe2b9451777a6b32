#!/usr/bin/env bash
# Builds the Debian package target/debian/banklease_<version>-1_<arch>.deb: both binaries in
# /usr/bin, banklease-gc.service in /lib/systemd/system, the example configuration as the
# conffile /etc/banklease/banklease.toml, man pages and bash/zsh/fish completions (README.md,
# "Install"). Needs cargo-deb (`cargo install --locked cargo-deb@3.8.0`). The release binaries
# that `cargo install --path cli` / `--path gc-daemon` built are reused, not rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release -p banklease-cli -p banklease-gc-daemon --bins
target=$(cargo metadata --locked --no-deps --format-version 1 |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# Made afresh from the binary just built: a removed subcommand leaves no page behind.
rm -rf "$target/release/share"
"$target/release/banklease" __share "$target/release/share" >/dev/null
# Debian policy: man pages compressed; -n keeps no name or time (the same bytes every build).
gzip -9n "$target"/release/share/man/man*/*
cargo deb --locked -p banklease-cli --no-build --output target/debian/
