#!/usr/bin/env bash
# Compile the small Java programs the tests run against sparklog's brokers (tests/jvm/*.java:
# a Streams application, a client exerciser...) against Kafka's jars:
#   scripts/compile-java-tests.sh SOURCE_DIR JAR_DIR OUTPUT_DIR
# A JDK's javac is installed with apt-get when missing (scripts/apt-install.sh); the classes go
# to OUTPUT_DIR, replaced whole, so a failed compile leaves the previous build alone.
set -euo pipefail
usage="usage: compile-java-tests.sh SOURCE_DIR JAR_DIR OUTPUT_DIR"
sources=${1:?$usage}
jars=${2:?$usage}
out=${3:?$usage}
if ! command -v javac >/dev/null 2>&1; then
  bash "$(dirname "$0")/apt-install.sh" "javac compiles the tests' Java programs" default-jdk-headless
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
javac -nowarn -encoding UTF-8 -d "$out.tmp" -cp "$jars/*" "$sources"/*.java \
  || { echo "Error: javac failed on $sources/*.java (output above); fix the source and run: make venv" >&2; exit 1; }
rm -rf "$out"
mv "$out.tmp" "$out"
