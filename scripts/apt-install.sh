#!/usr/bin/env bash
# Install Debian packages for a `make` step, the one way every ensure-*.sh script does:
#   scripts/apt-install.sh "WHAT THEY ARE FOR" PACKAGE...
# with apt-get, as root directly or else through `sudo -n`. When that is not possible, or
# apt-get fails, print one line saying what failed and what to run, and exit 1.
set -euo pipefail
purpose=${1:?usage: apt-install.sh PURPOSE PACKAGE...}
shift
packages=("$@")
fix="sudo apt-get update && sudo apt-get install -y --no-install-recommends ${packages[*]}"
fail() {
  echo "Error: ${packages[*]} ($purpose): $1; run: ${2:-$fix}" >&2
  exit 1
}
command -v apt-get >/dev/null 2>&1 \
  || fail "there is no apt-get to install them" "your package manager's install of ${packages[*]}, then make again"
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  fail "installing them needs root (not root, and sudo -n is not available)"
fi
echo "Installing ${packages[*]} (Debian packages; $purpose)..." >&2
output=$(mktemp)
trap 'rm -f "$output"' EXIT
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$output" 2>&1 \
  || fail "apt-get update failed ($(tail -n 1 "$output"))"
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$output" 2>&1 \
  || fail "apt-get install failed ($(tail -n 1 "$output"))"
