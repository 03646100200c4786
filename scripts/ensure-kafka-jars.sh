#!/usr/bin/env bash
# Put Apache Kafka's broker jars (the baseline of the Kafka-wire benchmarks) in a directory:
#   scripts/ensure-kafka-jars.sh benchmarks/kafka/pom.xml .venv/kafka-jars
# They come from Maven Central through the ordinary Maven client (`mvn
# dependency:copy-dependencies` on the pom, which pins the version), once: `make bench` calls
# this behind a stamp, and nothing downloads while a benchmark runs. Maven and a Java 17+
# runtime are installed with apt-get when missing (root or sudo -n, as ensure-kcat.sh), else
# the script fails with one line saying what to run.
set -euo pipefail
pom=${1:?usage: ensure-kafka-jars.sh POM OUTPUT_DIR}
out=${2:?usage: ensure-kafka-jars.sh POM OUTPUT_DIR}
fix="sudo apt-get update && sudo apt-get install -y --no-install-recommends maven default-jre-headless"
fail() {
  echo "Error: $1; run: ${2:-$fix}" >&2
  exit 1
}
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 \
    || fail "Maven (mvn) and Java are needed to fetch Apache Kafka and there is no apt-get" "your package manager's install of Maven and a Java 17 runtime, then make again"
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    fail "Maven (mvn) or Java is missing and installing them needs root"
  fi
  echo "Installing Maven and a Java runtime (Debian packages; they fetch and run Apache Kafka)..." >&2
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 \
    || fail "apt-get update failed ($(tail -n 1 "$log"))"
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends maven default-jre-headless >"$log" 2>&1 \
    || fail "apt-get install maven default-jre-headless failed ($(tail -n 1 "$log"))"
fi
# Kafka 4's broker needs Java 17 or newer.
java_major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
[ "${java_major%%.*}" -ge 17 ] 2>/dev/null \
  || fail "Apache Kafka 4 needs Java 17 or newer, java is ${java_major:-unknown}" "sudo apt-get install -y openjdk-17-jre-headless"
echo "Fetching Apache Kafka's jars ($(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")) into $out with Maven..." >&2
rm -rf "$out.tmp"
mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$(realpath -m "$out.tmp")" \
  || fail "mvn dependency:copy-dependencies on $pom failed (output above)" "make kafka-jars"
ls "$out.tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || fail "no kafka_2.13 jar in $out.tmp after Maven ran" "make kafka-jars"
rm -rf "$out"
mv "$out.tmp" "$out"
