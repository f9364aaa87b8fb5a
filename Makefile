# sparkqueue: `make demo` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Spark 4.2 needs Java 17; a newer JDK may sit beside it, so pick 17 explicitly.
JAVA_HOME := $(or $(firstword $(wildcard /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/java-17-openjdk* /usr/lib/jvm/temurin-17*)),$(JAVA_HOME))
export JAVA_HOME
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PYTHONWARNINGS := ignore::FutureWarning

.PHONY: help setup java jars s3-jars demo test test-main test-compat test-fast check bench soak connect-server sweep torture clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[spark,test]"
	touch $@

setup: $(VENV)/.installed  ## create .venv with sparkqueue (editable) and the test tools

java:  ## check that a Java 17 runtime is there
	@if [ -z "$(JAVA_HOME)" ] || [ ! -x "$(JAVA_HOME)/bin/java" ]; then \
	  echo "ERROR: Java 17 not found. Spark needs it: apt-get install openjdk-17-jdk-headless," ; \
	  echo "       or set JAVA_HOME to a Java 17 installation." ; exit 1; fi
	@"$(JAVA_HOME)/bin/java" -version 2>&1 | head -1

jars: setup java  ## fetch the Delta jars from Maven Central into the Ivy cache
	$(PY) -c "import sparkqueue; sparkqueue.session().stop(); print('Delta jars ready')"

# S3 roots: Hadoop's S3A (hadoop-aws and the AWS SDK, about 690 MB, once into the Ivy
# cache) and sparkqueue's Delta log store for S3, compiled with the JDK's javac.
s3-jars: jars  ## fetch S3A and build the S3 log store (what an s3a:// root needs)
	$(PY) -c "import sparkqueue; sparkqueue.session(root='s3a://bucket/q').stop(); print('S3A ready')"

# A local S3-compatible server for the tests (sparkqueue/s3gateway.py), built once with Go.
VERSITYGW := github.com/versity/versitygw/cmd/versitygw@v1.8.0
$(VENV)/bin/versitygw: | $(VENV)/.installed
	@command -v go >/dev/null || { echo "ERROR: Go not found: the S3 tests build their local S3 server (versitygw) with go install"; exit 1; }
	GOBIN=$(abspath $(VENV)/bin) go install $(VERSITYGW)

demo: jars  ## set up, then run the end-to-end example on a local embedded Spark
	$(PY) jobs/demo.py --root $${DEMO_ROOT:-/tmp/sparkqueue-demo}

# The test JVMs start from a class-data-sharing archive made once per venv (tests/jvm.py).
$(VENV)/spark-classes.jsa: $(VENV)/.installed tests/jvm.py
	$(PY) -m tests.jvm

# The whole suite on the main line (.venv: sparkqueue[spark]). CI (.ci/run) runs the
# compatibility tier (test-compat) after it: every other supported line.
test: test-main  ## set up, then run the whole test suite on the main line

# Two test workers (pytest-xdist), each with its own local Spark; the Spark Connect
# tests run in a pytest process of their own (tests/test_spark_connect.py).
test-main: jars s3-jars $(VENV)/bin/versitygw $(VENV)/spark-classes.jsa  ## the whole suite on the main line
	$(PY) -m pytest -n 2 --durations=20 tests

# Every other supported Spark line, each in .venvs/spark-<line> on its own Python
# (from PATH or ~/.pyenv; tests/compat.py): the contract on the classic engine, catalog
# roots, sharded tubes, sink, changes, Consumer, the sweeper by spark-submit, and a Spark
# Connect smoke test of the portable engine. LINES="3.5 4.0" runs those only.
test-compat: setup java  ## the compatibility tier: Spark 3.5, 4.0 and 4.1, each in a venv of its own
	$(PY) -m tests.compat $(LINES)

test-fast: setup  ## the pure-logic tests only: no JVM, seconds
	$(PY) -m pytest -q tests/unit

check: setup  ## lint and type-check
	$(VENV)/bin/ruff check sparkqueue jobs bench tests notebooks
	$(VENV)/bin/mypy

soak: jars s3-jars $(VENV)/bin/versitygw  ## one tube through 2,000 small rounds on each engine, local and S3 (ARGS="--rounds 5000")
	$(PY) -m bench.soak $(ARGS)

connect-server: jars  ## a local Spark Connect server with Delta (then SPARK_REMOTE=sc://127.0.0.1:15002 make demo)
	$(PY) -m sparkqueue.server --port $${PORT:-15002}

sweep: jars  ## one sweeper pass through spark-submit (ROOT=... or conf's root; s3a:// too)
	$(VENV)/bin/spark-submit --properties-file conf/spark-submit.conf \
	  $$($(VENV)/bin/sparkqueue submit-args $(if $(ROOT),--root $(ROOT))) \
	  jobs/sweeper.py $(if $(ROOT),--root $(ROOT)) --once

bench: jars s3-jars $(VENV)/bin/versitygw  ## run the benchmark job (figures and ratios against plain Delta)
	$(PY) -m bench --write BENCHMARKS.md $(ARGS)

torture: jars s3-jars $(VENV)/bin/versitygw  ## crash torture (ARGS="--seconds 300" etc.): processes SIGKILLed at random, then a drain
	$(PY) tests/concurrency/torture.py $(ARGS)

clean:  ## remove the venv and local data
	rm -rf $(VENV) data spark-warehouse
