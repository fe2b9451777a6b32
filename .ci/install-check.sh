#!/usr/bin/env bash
# Installs banklease as README.md's "Install" says, by running the blocks marked
# `<!-- .ci/install-check.sh runs this block -->` exactly as written, each into a clean place,
# then runs what they installed: both binaries (and etc/quickstart.sh with them first on PATH,
# which must then build nothing), the Debian package's files (unpacked with `dpkg-deb -x`, not
# installed on this machine), its man pages, its completion scripts, its unit
# (`systemd-analyze verify`), and the Python wheel in a fresh venv. Called by .ci/run after the
# tests; it reuses one release build for the binaries, the package and the wheel's crates.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The n-th (1-based) marked block of README's "Install" section.
readme_block() {
  awk -v want="$1" '
    /^## / { in_install = ($0 == "## Install") }
    in_install && /^<!-- \.ci\/install-check\.sh runs this block -->$/ { marked++; armed = 1; next }
    armed && /^```sh$/ { if (marked == want) printing = 1; armed = 0; next }
    printing && /^```$/ { exit }
    printing { print }
  ' README.md
}
run_block() {
  local n=$1 block
  block=$(readme_block "$n")
  [ -n "$block" ] || { echo "install-check: README.md's Install section has no marked block $n" >&2; exit 1; }
  echo "== README Install, block $n:"
  echo "$block" | sed 's/^/   | /'
  # A home of its own (`~/banklease-venv`), keeping this machine's Rust toolchain and caches.
  HOME="$scratch/home" CARGO_HOME="$cargo_home" RUSTUP_HOME="$rustup_home" \
    bash -euo pipefail -c "$block"
}
mkdir -p "$scratch/home"
# Before HOME moves (an assignment prefix sees the ones before it).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
expect() { # expect WHAT TEXT NEEDLE
  grep -qF -- "$3" <<<"$2" || { echo "install-check: $1: expected \`$3\` in: $2" >&2; exit 1; }
}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)

echo "== cargo install into a scratch root"
CARGO_INSTALL_ROOT="$scratch/cargo" PATH="$scratch/cargo/bin:$PATH" run_block 1
for bin in banklease banklease-gc; do
  expect "$bin --version" "$("$scratch/cargo/bin/$bin" --version)" "$bin $version"
done

echo "== the quick start, with what cargo installed first on PATH: it must build nothing"
quickstart=$(PATH="$scratch/cargo/bin:$PATH" bash etc/quickstart.sh 2>&1) ||
  { echo "install-check: etc/quickstart.sh failed: $quickstart" >&2; exit 1; }
echo "$quickstart" | sed 's/^/   /'
expect "the quick start" "$quickstart" \
  "== using the installed banklease ($scratch/cargo/bin/banklease, banklease $version): nothing to build"
if grep -qiE 'cargo build|building' <<<"$quickstart"; then
  echo "install-check: the quick start built, though banklease was installed: $quickstart" >&2; exit 1
fi

echo "== the Debian package"
rm -rf target/debian
run_block 2
debs=(target/debian/banklease_*.deb) # the file README's `apt install` line names
[ "${#debs[@]}" -eq 1 ] && [ -f "${debs[0]}" ] || { echo "install-check: not one package: ${debs[*]}" >&2; exit 1; }
deb=${debs[0]}
dpkg-deb --info "$deb"
expect "conffiles" "$(dpkg-deb --info "$deb" conffiles)" "/etc/banklease/banklease.toml"
expect "Depends" "$(dpkg-deb --field "$deb" Depends)" "adduser"
root="$scratch/root"
dpkg-deb -x "$deb" "$root"
dpkg-deb --contents "$deb" | awk '{print "   " $NF}'
for bin in banklease banklease-gc; do
  expect "/usr/bin/$bin --version" "$("$root/usr/bin/$bin" --version)" "$bin $version"
done
unit="$root/lib/systemd/system/banklease-gc.service"
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$unit")
[ "$exec_start" = /usr/bin/banklease-gc ] && [ -x "$root$exec_start" ] ||
  { echo "install-check: the unit's ExecStart=$exec_start is not the packaged binary" >&2; exit 1; }
expect "the unit's --config" "$(grep '^ExecStart=' "$unit")" "--config /etc/banklease/banklease.toml"
[ -f "$root/etc/banklease/banklease.toml" ] || { echo "install-check: no /etc/banklease/banklease.toml" >&2; exit 1; }
if command -v systemd-analyze >/dev/null; then
  # A copy whose ExecStart is the unpacked binary (the package is not installed here; the
  # targets it names are this machine's: `--root` would need a whole systemd in $root).
  mkdir -p "$scratch/unit"
  sed "s|^ExecStart=/usr/bin/|ExecStart=$root/usr/bin/|" "$unit" >"$scratch/unit/banklease-gc.service"
  systemd-analyze verify --man=no "$scratch/unit/banklease-gc.service"
  echo "systemd-analyze verify: the unit is valid"
else
  echo "note: no systemd-analyze here; the unit is not verified"
fi

echo "== man pages"
if ! command -v man >/dev/null && [ "${CI:-}" = true ]; then
  apt-get install -y -qq --no-install-recommends man-db >/dev/null
fi
pages=("$root"/usr/share/man/man1/*.1.gz "$root"/usr/share/man/man8/*.8.gz)
echo "${#pages[@]} pages"
for page in "${pages[@]}"; do
  # -ww: every groff warning, after preconv (UTF-8 in, as man does); a page that warns renders wrong.
  warnings=$(zcat "$page" | preconv | groff -man -Tutf8 -ww -z 2>&1) ||
    { echo "install-check: groff failed on $page: $warnings" >&2; exit 1; }
  [ -z "$warnings" ] || { echo "install-check: groff warns on $page: $warnings" >&2; exit 1; }
done
rendered=$(MANWIDTH=100 man -P cat -l "$root/usr/share/man/man1/banklease.1.gz")
expect "man -l banklease.1" "$rendered" "validity-check"
expect "man -l banklease-lock-run.1" \
  "$(MANWIDTH=100 man -P cat -l "$root/usr/share/man/man1/banklease-lock-run.1.gz")" "banklease lock run"
expect "man -l banklease-gc.8" \
  "$(MANWIDTH=100 man -P cat -l "$root/usr/share/man/man8/banklease-gc.8.gz")" "--once"
echo "$rendered" | head -12

echo "== completions"
completes() { # completes SCRIPT WORD... : what bash offers for the last word
  bash --norc --noprofile -c '
    source "$1"; shift
    fn=$(complete -p "$1" | sed -n "s/.* -F \([^ ]*\) .*/\1/p")
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    "$fn" "$1" "${@: -1}" "${@: -2:1}"
    printf "%s\n" "${COMPREPLY[@]}"' bash "$@"
}
bash_dir="$root/usr/share/bash-completion/completions"
[ "$(completes "$bash_dir/banklease" banklease lo)" = lock ] ||
  { echo "install-check: bash does not complete \`banklease lo\` to lock" >&2; exit 1; }
expect "bash: banklease lock r" "$(completes "$bash_dir/banklease" banklease lock r)" run
expect "bash: banklease-gc --on" "$(completes "$bash_dir/banklease-gc" banklease-gc --on)" --once
echo "bash completes: banklease lo -> lock; banklease lock r -> release, run; banklease-gc --on -> --once"
# zsh is a small package: on CI (after .ci/start-keystone.sh's apt-get update) it is installed.
if ! command -v zsh >/dev/null && [ "${CI:-}" = true ]; then
  apt-get install -y -qq --no-install-recommends zsh >/dev/null || echo "note: zsh did not install"
fi
if command -v zsh >/dev/null; then
  for f in "$root"/usr/share/zsh/vendor-completions/_*; do zsh -n "$f"; done
  echo "zsh: the completion functions parse"
else
  echo "note: no zsh here; its completion scripts are not checked"
fi
if command -v fish >/dev/null; then
  for f in "$root"/usr/share/fish/vendor_completions.d/*.fish; do fish --no-execute "$f"; done
  echo "fish: the completion scripts parse"
else
  echo "note: no fish here; its completion scripts are not checked"
fi

echo "== the Python wheel"
rm -rf target/wheels
run_block 3
run_block 4
venv_python="$scratch/home/banklease-venv/bin/python"
# The installed package, not the checkout's python/ (run from elsewhere): a lease on a file bank.
(cd "$scratch" && "$venv_python" - <<'PY')
import pathlib

import banklease

where = pathlib.Path(banklease.__file__).resolve()
assert "site-packages" in where.parts, where
bank = banklease.Bank.open("file:./wheel-bank", create=True)
bank.init()
windows = banklease.LeaseWindows(renew_window=2, expire_window=10, validity_window=1)
lease = banklease.OwnerLease.acquire(bank, windows)
with lease.keep():
    cp = banklease.Checkpoint.create(lease, "cp-wheel")
    cp.put_data("volume-0", b"bytes")
    cp.complete("available")
print("wheel:", where.parent, banklease.read_checkpoint(bank, "cp-wheel").status)
PY
echo "install-check: all installed and run"
cd "$repo"
