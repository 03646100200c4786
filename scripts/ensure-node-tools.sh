#!/usr/bin/env bash
# Install the npm packages the tests use (package.json, locked by package-lock.json: s3rver,
# an S3 server that ignores conditional writes, the store sparklog must refuse) into
# ./node_modules, from the npm registry, once. Node.js and npm come from apt-get when missing
# (scripts/apt-install.sh).
set -euo pipefail
here=$(dirname "$0")
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  bash "$here/apt-install.sh" "s3rver, a test server, runs on them" nodejs npm
fi
if ! npm ci --no-audit --no-fund --loglevel=error >/dev/null; then
  echo "Error: npm ci (package-lock.json: s3rver) failed; run: npm ci, and read its error" >&2
  exit 1
fi
if [ ! -f node_modules/s3rver/bin/s3rver.js ]; then
  echo "Error: npm installed no node_modules/s3rver/bin/s3rver.js; run: npm ci" >&2
  exit 1
fi
