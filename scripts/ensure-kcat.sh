#!/usr/bin/env bash
# Make sure `kcat` (librdkafka's command-line Kafka client) is on PATH: the tests use it as a
# real Kafka client against the broker agents' listeners. If it is missing, install Debian's
# `kcat` package (scripts/apt-install.sh: apt-get as root or through `sudo -n`, else one line
# saying what to run).
set -euo pipefail
if command -v kcat >/dev/null 2>&1; then
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" "a real Kafka client the tests use" kcat
command -v kcat >/dev/null 2>&1 || { echo "Error: the kcat package installed no kcat command" >&2; exit 1; }
