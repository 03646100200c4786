#!/usr/bin/env bash
# Put the runtime jars of a pom (and their dependencies) in a directory:
#   scripts/ensure-maven-jars.sh POM OUTPUT_DIR EXPECTED_JAR_GLOB "WHAT" MAKE_TARGET
# e.g. scripts/ensure-maven-jars.sh jvm/spark/pom.xml .venv/spark-jars 'delta-spark_2.13-*.jar' \
#        "Delta Lake's and Spark's Kafka connector's jars" venv
# They come from Maven Central through the ordinary Maven client (`mvn
# dependency:copy-dependencies` on the pom, which pins the versions; Maven's cache is ~/.m2),
# once: make calls this behind a stamp, and nothing downloads while a session, job, test or
# benchmark runs. Maven and a Java 17+ runtime are installed when missing
# (scripts/apt-install.sh: apt-get as root or through `sudo -n`, else one line saying what to run).
set -euo pipefail
usage="usage: ensure-maven-jars.sh POM OUTPUT_DIR EXPECTED_JAR_GLOB WHAT MAKE_TARGET"
pom=${1:?$usage}
out=${2:?$usage}
expected=${3:?$usage}
what=${4:?$usage}
target=${5:?$usage}
fail() {
  echo "Error: $1; run: $2" >&2
  exit 1
}
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  bash "$(dirname "$0")/apt-install.sh" "they fetch and run $what" maven default-jre-headless
fi
# Spark 4 and Kafka 4 need Java 17 or newer.
java_major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
[ "${java_major%%.*}" -ge 17 ] 2>/dev/null \
  || fail "$what need Java 17 or newer, java is ${java_major:-unknown}" "sudo apt-get install -y openjdk-17-jre-headless"
echo "Fetching $what into $out with Maven..." >&2
rm -rf "$out.tmp"
mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$(realpath -m "$out.tmp")" \
  || fail "mvn dependency:copy-dependencies on $pom failed (output above)" "make $target"
compgen -G "$out.tmp/$expected" >/dev/null || fail "no $expected in $out.tmp after Maven ran" "make $target"
rm -rf "$out"
mv "$out.tmp" "$out"
