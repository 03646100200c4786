#!/usr/bin/env bash
# Install the npm packages the tests use (package.json: s3rver, an S3 server that ignores
# conditional writes, the store sparklog must refuse) into ./node_modules, from the npm
# registry, once. Node.js and npm come from apt-get when missing (root or sudo -n); if that
# is not possible, fail with one line saying what to run.
set -euo pipefail
fix="sudo apt-get update && sudo apt-get install -y --no-install-recommends nodejs npm"
fail() {
  echo "Error: $1; run: ${2:-$fix}" >&2
  exit 1
}
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 \
    || fail "node and npm (for s3rver, a test server) are missing and there is no apt-get" "your package manager's install of nodejs and npm, then make again"
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    fail "node and npm (for s3rver, a test server) are missing and installing them needs root"
  fi
  echo "Installing Node.js and npm (Debian packages; s3rver, a test server, runs on them)..." >&2
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
npm install --no-audit --no-fund --loglevel=error >/dev/null \
  || fail "npm install (package.json: s3rver) failed" "npm install, and read its error"
test -f node_modules/s3rver/bin/s3rver.js || fail "npm installed no node_modules/s3rver/bin/s3rver.js" "npm install"
