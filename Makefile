# Strom: build, run and test.
#
#   make run          build (release) and start a broker on 127.0.0.1:9092
#   make test         the whole test suite: Rust unit + integration tests, kafka-python + kcat
#                     tests, Java client + kafka-dump-log tests. Installs what it needs (kcat via
#                     apt, a Python venv in .venv, Maven artifacts from Maven Central).
#   make test-rust | test-python | test-java | test-groups | test-apps    one part (test-groups:
#                     consumer groups across kafka-python, confluent-kafka, Java, franz-go,
#                     kafkajs; tests/groups/README.md; test-apps: Kafka Streams and Kafka Connect
#                     on a 3-node Strom cluster and on Kafka 4.4, tests/apps/README.md)
#
# Fails if any part fails (all parts still run).
#
# The Python and Java tests start target/debug/strom. With STROM_BIN set in the environment or on
# the command line they start that instead and skip `cargo build`, e.g. to check the tests against
# Apache Kafka 4.4 itself:  make test-python test-java STROM_BIN=$PWD/scripts/kafka-as-strom.sh

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
CARGO ?= cargo
PYTHON ?= python3
MVN ?= mvn
VENV := .venv
STROM_BIN ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug/strom
# build the debug binary only when the tests use it
STROM_DEP := $(if $(filter environment command line,$(origin STROM_BIN)),,build)
SUDO := $(shell [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && echo sudo)

export STROM_BIN

.PHONY: test run build rust-deps test-rust test-python test-java test-groups test-apps groups-deps kcat venv kafka-ref-fetch

test:
	@status=0; failed=""; \
	for part in test-rust test-python test-java test-groups test-apps; do \
	  $(MAKE) --no-print-directory $$part || { status=1; failed="$$failed $$part"; }; \
	done; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED:$$failed" >&2; fi; \
	exit $$status

run:
	$(CARGO) run --release -p strom -- server

# the debug binary the Python and Java tests start, with the feature the Rust tests use so
# that it is built once (`strom-chaos leader-kill --client librdkafka` links librdkafka), and
# the chaos harness `strom-chaos`, which starts that strom
build: rust-deps
	$(CARGO) build -p strom -p strom-chaos --features strom-chaos/librdkafka

# librdkafka 2.12's cmake build (the rdkafka dev-dependency) includes curl/curl.h even with
# OIDC off, so the curl headers must be present.
rust-deps:
	@if [ ! -f /usr/include/x86_64-linux-gnu/curl/curl.h ] && [ ! -f /usr/include/curl/curl.h ]; then \
	  echo "installing libcurl4-openssl-dev with apt-get"; \
	  $(SUDO) apt-get update -qq || true; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq libcurl4-openssl-dev; \
	fi

test-rust: rust-deps build kafka-ref-fetch
	$(CARGO) test --workspace --no-fail-fast --features strom-chaos/librdkafka

kcat:
	@if ! command -v kcat >/dev/null 2>&1; then \
	  echo "installing kcat with apt-get"; \
	  $(SUDO) apt-get update -qq || true; \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq kcat; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: tests/python/requirements.txt
	@if [ ! -x $(VENV)/bin/python ]; then \
	  $(PYTHON) -m venv $(VENV) || { \
	    rm -rf $(VENV); \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); }; \
	fi
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
	@touch $@

test-python: $(STROM_DEP) kcat venv
	STROM_REQUIRE_KCAT=1 $(VENV)/bin/python -m pytest tests/python --ignore-glob='tests/python/test_groups_*' --ignore=tests/python/test_txn_matrix.py \
	  --ignore=tests/python/test_apps.py

# the client harnesses' dependencies (Go modules, npm packages) and the Kafka jars for Java's
groups-deps: kafka-ref-fetch
	cd tests/groups/go && go mod download
	cd tests/txn/go && go mod download
	npm ci --prefix tests/groups/node --no-audit --no-fund --loglevel=error

test-groups: $(STROM_DEP) venv groups-deps
	$(VENV)/bin/python -m pytest tests/python/test_groups_checker.py tests/python/test_groups_matrix.py tests/python/test_txn_matrix.py \
	  -rA -o log_level=WARNING --durations=0

# Kafka Streams + Kafka Connect (tests/apps, built with Maven) on 3 Strom nodes and on Kafka 4.4
test-apps: $(STROM_DEP) venv kafka-ref-fetch
	$(VENV)/bin/python -m pytest tests/python/test_apps.py -rA -o log_level=WARNING --durations=0

test-java: $(STROM_DEP)
	@# Maven 3.8 writes stray colour resets at exit even in batch mode: strip escape sequences
	$(MVN) -B -ntp -Dstyle.color=never -f tests/java/pom.xml test 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g'

# Apache Kafka 4.4 reference jars (for scripts/kafka-ref.sh and scripts/kafka-dump-log.sh)
kafka-ref-fetch:
	@scripts/kafka-ref.sh fetch 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g'
	@test -f .cache/kafka-4.4/libs/.complete
