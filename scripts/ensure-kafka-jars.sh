#!/usr/bin/env bash
# Put Apache Kafka's broker jars (the baseline of the Kafka-wire benchmarks) in a directory:
#   scripts/ensure-kafka-jars.sh benchmarks/kafka/pom.xml .venv/kafka-jars
# They come from Maven Central through the ordinary Maven client (`mvn
# dependency:copy-dependencies` on the pom, which pins the version), once: `make bench` calls
# this behind a stamp, and nothing downloads while a benchmark runs. Maven and a Java 17+
# runtime are installed when missing (scripts/apt-install.sh: apt-get as root or through
# `sudo -n`, else one line saying what to run).
set -euo pipefail
pom=${1:?usage: ensure-kafka-jars.sh POM OUTPUT_DIR}
out=${2:?usage: ensure-kafka-jars.sh POM OUTPUT_DIR}
fail() {
  echo "Error: $1; run: $2" >&2
  exit 1
}
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  bash "$(dirname "$0")/apt-install.sh" "they fetch and run Apache Kafka" maven default-jre-headless
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
