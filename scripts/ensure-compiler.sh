#!/usr/bin/env bash
# Make sure a C compiler and the Python headers are there: `pip install` compiles sparklog's
# record-batch codec (a C extension, sparklog/model/kafka_batches_c/) from source. What is
# missing is installed from Debian's packages with apt-get (as root directly, else through
# `sudo -n`); if that is not possible, fail with one line saying what to run.
set -euo pipefail
python="$1"
include=$("$python" -c 'import sysconfig; print(sysconfig.get_path("include"))')
compiler=$("$python" -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')
pyver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
have_compiler() { command -v "${CC:-$compiler}" >/dev/null 2>&1; }
have_headers() { [ -f "$include/Python.h" ]; }
if have_compiler && have_headers; then
  exit 0
fi
packages=()
have_compiler || packages+=(gcc libc6-dev)
have_headers || packages+=("python${pyver}-dev")
fix="sudo apt-get update && sudo apt-get install -y --no-install-recommends ${packages[*]}"
fail() {
  echo "Error: building sparklog's C extension needs ${packages[*]} ($compiler, $include/Python.h) and $1; run: ${2:-$fix}" >&2
  exit 1
}
command -v apt-get >/dev/null 2>&1 \
  || fail "there is no apt-get to install them" "your package manager's install of a C compiler and the Python ${pyver} headers, then make again"
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  fail "installing them needs root (not root, and sudo -n is not available)"
fi
echo "Installing ${packages[*]} (Debian packages; the C compiler and Python headers sparklog's extension is built with)..." >&2
output=$(mktemp)
trap 'rm -f "$output"' EXIT
if ! ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$output" 2>&1; then
  fail "apt-get update failed ($(tail -n 1 "$output"))"
fi
if ! ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$output" 2>&1; then
  fail "apt-get install failed ($(tail -n 1 "$output"))"
fi
# Debian's python3.X is configured with the triplet compiler name, which gcc brings as a link.
have_compiler || fail "the packages installed no ${compiler}"
have_headers || fail "the packages installed no $include/Python.h"
