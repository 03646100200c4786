#!/usr/bin/env bash
# Make sure `kcat` (librdkafka's command-line Kafka client) and `curl` are on PATH: the tests use
# kcat as a real Kafka client against the broker agents' listeners, and the README's Kafka
# Connect example talks to Connect's REST API with curl. Missing ones are installed from Debian's
# packages (scripts/apt-install.sh: apt-get as root or through `sudo -n`, else one line saying
# what to run).
set -euo pipefail
missing=()
for command in kcat curl; do
  command -v "$command" >/dev/null 2>&1 || missing+=("$command")
done
[ ${#missing[@]} -eq 0 ] && exit 0
bash "$(dirname "$0")/apt-install.sh" "command-line clients the tests and the README use" "${missing[@]}"
for command in "${missing[@]}"; do
  command -v "$command" >/dev/null 2>&1 || { echo "Error: the $command package installed no $command command" >&2; exit 1; }
done
