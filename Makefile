# sparklog — the two commands: `make demo` and `make test`.
# Everything comes from PyPI (into .venv), Debian packages (kcat, a C compiler and the Python
# headers, Node.js, Maven and a JDK), Maven Central (JVM jars, with Maven) or the npm registry
# (s3rver, a test server); nothing downloads at run time.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sparklog-installed
SPARK_ENV_STAMP := $(VENV)/.sparklog-spark-env
KCAT_STAMP := $(VENV)/.sparklog-kcat
NODE_STAMP := $(VENV)/.sparklog-node-tools
# The C extension (the Kafka record-batch codec) is compiled by the install below.
NATIVE_SOURCES := setup.py $(wildcard sparklog/model/kafka_batches_c/*.c sparklog/model/kafka_batches_c/*.h)
# Delta Lake for Spark and Spark's Kafka connector (jvm/spark/pom.xml), linked into PySpark's jars.
SPARK_JARS := $(VENV)/spark-jars
SPARK_JARS_STAMP := $(VENV)/.sparklog-spark-jars
# Kafka's Java clients, tools and Streams (jvm/kafka/pom.xml), run by the tests against the brokers.
KAFKA_CLIENT_JARS := $(VENV)/kafka-clients-jars
KAFKA_CLIENT_JARS_STAMP := $(VENV)/.sparklog-kafka-clients-jars
# Kafka's 3.9 clients and tools (jvm/kafka39/pom.xml): the tests' Java programs run on both lines.
KAFKA39_CLIENT_JARS := $(VENV)/kafka39-clients-jars
KAFKA39_CLIENT_JARS_STAMP := $(VENV)/.sparklog-kafka39-clients-jars
# The tests' Java programs (tests/jvm/*.java), compiled against the 4.x jars.
JAVA_TEST_CLASSES := $(VENV)/jvm-test-classes
JAVA_TEST_CLASSES_STAMP := $(VENV)/.sparklog-jvm-test-classes
# Apache Kafka's broker jars, the baseline of the Kafka-wire benchmarks (benchmarks/kafka/pom.xml).
KAFKA_JARS := $(VENV)/kafka-jars
KAFKA_STAMP := $(VENV)/.sparklog-kafka-jars
# Keep Spark and the embedded ZooKeeper quiet and local.
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: venv demo lint test bench kafka-jars clean zookeeper-stop

venv: $(STAMP) $(SPARK_JARS_STAMP) $(SPARK_ENV_STAMP) $(KAFKA_CLIENT_JARS_STAMP) $(KAFKA39_CLIENT_JARS_STAMP) \
	$(JAVA_TEST_CLASSES_STAMP) $(KCAT_STAMP) $(NODE_STAMP)

# `compat` editable mode puts the repo on sys.path, so Spark's data-source lookup
# (pkgutil over sys.path) finds pyspark_sparklog in its Python workers. The install compiles
# the C extension in place: a C compiler and the Python headers come first (apt-get when
# missing and root or sudo -n, else make stops with one line saying what to run); editing its
# sources reinstalls.
$(STAMP): pyproject.toml $(NATIVE_SOURCES)
	@bash scripts/ensure-compiler.sh "$(PYTHON)"
	@bash scripts/ensure-venv.sh "$(PYTHON)" "$(VENV)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --config-settings editable_mode=compat -e '.[dev]'
	@touch $(STAMP)

# delta-spark and spark-sql-kafka for the pinned Spark, from Maven Central with `mvn`, once
# (Maven and Java come from apt-get when missing).
$(SPARK_JARS_STAMP): jvm/spark/pom.xml scripts/ensure-maven-jars.sh | $(STAMP)
	@bash scripts/ensure-maven-jars.sh jvm/spark/pom.xml $(SPARK_JARS) 'delta-spark_2.13-*.jar' \
		"Delta Lake's and Spark's Kafka connector's jars" venv
	@touch $(SPARK_JARS_STAMP)

# Kafka's own clients and tools (sparklog.testing.kafka_tools), likewise once.
$(KAFKA_CLIENT_JARS_STAMP): jvm/kafka/pom.xml scripts/ensure-maven-jars.sh | $(STAMP)
	@bash scripts/ensure-maven-jars.sh jvm/kafka/pom.xml $(KAFKA_CLIENT_JARS) 'kafka-tools-*.jar' \
		"Kafka's clients' and tools' jars" venv
	@touch $(KAFKA_CLIENT_JARS_STAMP)

$(KAFKA39_CLIENT_JARS_STAMP): jvm/kafka39/pom.xml scripts/ensure-maven-jars.sh | $(STAMP)
	@bash scripts/ensure-maven-jars.sh jvm/kafka39/pom.xml $(KAFKA39_CLIENT_JARS) 'kafka-clients-3.9.*.jar' \
		"Kafka 3.9's clients' and tools' jars" venv
	@touch $(KAFKA39_CLIENT_JARS_STAMP)

# javac (a JDK from apt-get when missing) builds the tests' Java programs once per change.
$(JAVA_TEST_CLASSES_STAMP): $(wildcard tests/jvm/*.java) scripts/compile-java-tests.sh $(KAFKA_CLIENT_JARS_STAMP)
	@bash scripts/compile-java-tests.sh tests/jvm $(KAFKA_CLIENT_JARS) $(JAVA_TEST_CLASSES)
	@touch $(JAVA_TEST_CLASSES_STAMP)

# Spark launched from .venv (`.venv/bin/python job.py`, `.venv/bin/spark-submit job.py`) runs
# Python with .venv's interpreter even when .venv is not activated, logs errors only (no INFO
# lines, with or without --properties-file) and has the jars above: see sparklog/spark/spark_env.py.
$(SPARK_ENV_STAMP): $(STAMP) $(SPARK_JARS_STAMP) sparklog/spark/spark_env.py conf/log4j2.properties
	$(BIN)/python -m sparklog.spark.spark_env --jars $(SPARK_JARS)
	@touch $(SPARK_ENV_STAMP)

# kcat (Debian's package) is a real Kafka client the tests use, curl the README's client of
# Connect's REST API; installed with apt-get when missing (root or sudo -n), else make stops
# with one line saying what to run.
$(KCAT_STAMP): scripts/ensure-kcat.sh | $(STAMP)
	@bash scripts/ensure-kcat.sh
	@touch $(KCAT_STAMP)

# s3rver (npm, package.json): an S3 server that ignores conditional writes, the store the
# tests prove sparklog refuses. Node.js and npm come from apt-get when missing.
$(NODE_STAMP): package.json package-lock.json scripts/ensure-node-tools.sh scripts/apt-install.sh | $(STAMP)
	@bash scripts/ensure-node-tools.sh
	@touch $(NODE_STAMP)

demo: venv
	$(BIN)/python -m jobs.demo

# Lint (ruff) and format check, then the type checker: CI fails on any finding.
LINTED := sparklog tests jobs benchmarks pyspark_sparklog
lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

test: venv lint
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=30

# Apache Kafka (pinned in benchmarks/kafka/pom.xml) from Maven Central with `mvn`, once: Maven and
# Java come from apt-get when missing. The benchmarks never download; without the jars the
# Kafka-wire cases stop and name this target.
$(KAFKA_STAMP): benchmarks/kafka/pom.xml scripts/ensure-maven-jars.sh | $(STAMP)
	@bash scripts/ensure-maven-jars.sh benchmarks/kafka/pom.xml $(KAFKA_JARS) 'kafka_2.13-*.jar' \
		"Apache Kafka's jars" kafka-jars
	@touch $(KAFKA_STAMP)

kafka-jars: $(KAFKA_STAMP)

bench: venv $(KAFKA_STAMP)
	$(BIN)/python -m benchmarks.run

# The embedded ZooKeeper and the embedded broker (`make demo` starts both; they keep running):
# `sparklog zookeeper stop` stops the broker first.
zookeeper-stop: venv
	$(BIN)/sparklog zookeeper stop

clean:
	-$(BIN)/sparklog broker stop 2>/dev/null
	-$(BIN)/sparklog zookeeper stop 2>/dev/null
	rm -rf .sparklog spark-warehouse
