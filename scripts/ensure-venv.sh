#!/usr/bin/env bash
# Create the virtual environment if it is missing. On Debian/Ubuntu, `python3 -m venv`
# needs the pythonX.Y-venv package; install it with apt-get when we can (root), else say so.
set -euo pipefail
python="$1"; venv="$2"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  exit 0
fi
rm -rf "$venv"
if "$python" -m venv "$venv" 2>/dev/null; then
  exit 0
fi
rm -rf "$venv"
pyver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "Installing python${pyver}-venv (Debian package needed by python -m venv)..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${pyver}-venv" >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  "$python" -m venv "$venv"
else
  echo "Error: '$python -m venv' failed. Install the venv module: sudo apt-get install python${pyver}-venv" >&2
  exit 1
fi
