#!/usr/bin/env bash
# Make sure `kcat` (librdkafka's command-line Kafka client) is on PATH: the tests use it as a
# real Kafka client against the broker agents' listeners. If it is missing, install Debian's
# `kcat` package with apt-get (as root directly, else through `sudo -n`); if that is not
# possible, fail with one line saying what to run.
set -euo pipefail
if command -v kcat >/dev/null 2>&1; then
  exit 0
fi
fix="sudo apt-get update && sudo apt-get install -y --no-install-recommends kcat"
fail() {
  echo "Error: kcat (a Kafka client the tests use) is not on PATH and $1; run: ${2:-$fix}" >&2
  exit 1
}
command -v apt-get >/dev/null 2>&1 \
  || fail "there is no apt-get to install it" "your package manager's install of kcat (or build https://github.com/edenhill/kcat), then make again"
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  fail "installing it needs root (not root, and sudo -n is not available)"
fi
echo "Installing kcat (Debian package; a real Kafka client the tests use)..." >&2
output=$(mktemp)
trap 'rm -f "$output"' EXIT
if ! ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$output" 2>&1; then
  fail "apt-get update failed ($(tail -n 1 "$output"))"
fi
if ! ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends kcat >"$output" 2>&1; then
  fail "apt-get install kcat failed ($(tail -n 1 "$output"))"
fi
command -v kcat >/dev/null 2>&1 || fail "the kcat package installed no kcat command"
