# The two set-up commands from the README. Both create or refresh .venv from pyproject.toml.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test venv test-deps lint bench

$(BIN)/python:
	$(PY) -m venv $(VENV)

venv: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .

serve: venv
	scripts/ensure-java.sh
	scripts/ensure-kcat.sh || echo "warning: kcat could not be installed (the README's quick start uses it)" >&2
	$(BIN)/kompakt serve $(ARGS) || test $$? -eq 130

test-deps: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# Quix Streams for tests/broker/test_quix.py; --no-deps: its confluent-kafka<2.13 pin
	# would downgrade the client every other test uses (its other deps are in [test])
	$(BIN)/pip install -q --no-deps 'quixstreams>=3.20,<4'
	scripts/ensure-java.sh
	scripts/ensure-kcat.sh
	scripts/ensure-chromium.sh
	scripts/ensure-fiu.sh || echo "warning: fiu-utils could not be installed (the fault campaign skips read I/O errors)" >&2
	scripts/ensure-librdkafka-tests.sh $(BIN)/python || echo "warning: librdkafka's tests could not be built (tests/reliability/test_librdkafka_suite.py skips)" >&2

lint: test-deps
	$(BIN)/ruff check kompakt tests benchmarks
	$(BIN)/ruff format --check kompakt tests benchmarks

test: test-deps lint
	$(BIN)/pytest -q --durations=25

bench: venv
	$(BIN)/python benchmarks/bench_log.py
