#!/usr/bin/env bash
# Make sure a C compiler and the Python headers are there: `pip install` compiles sparklog's
# record-batch codec (a C extension, sparklog/model/kafka_batches_c/) from source. What is
# missing is installed from Debian's packages (scripts/apt-install.sh: apt-get as root or
# through `sudo -n`, else one line saying what to run).
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
fail() {
  echo "Error: building sparklog's C extension needs ${packages[*]} ($compiler, $include/Python.h): $1" >&2
  exit 1
}
bash "$(dirname "$0")/apt-install.sh" "the C compiler and Python headers sparklog's extension is built with" "${packages[@]}"
# Debian's python3.X is configured with the triplet compiler name, which gcc brings as a link.
have_compiler || fail "the packages installed no ${compiler}"
have_headers || fail "the packages installed no $include/Python.h"
