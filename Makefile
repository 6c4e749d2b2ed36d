# The two commands the README promises: `make demo` and `make test`. Both install what is
# missing (Debian packages, then a .venv with the project and its extras) and are quick when
# everything is already there.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test deps venv lint typecheck unit fuzz bench clean

demo: deps venv
	$(BIN)/sac demo

test: deps venv lint typecheck
	$(BIN)/pytest

deps:
	@scripts/deps.sh

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[all]'
	@touch $@

lint: venv
	$(BIN)/ruff check .

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest tests/unit

# The fuzz tests at a size `make test` cannot afford: the wire decoder's property tests
# (tests/unit/test_wire_tables.py: hostile, truncated and mutated bytes against our decoder and
# pika's) with many examples each, then hostile message ids, header tables and bodies through
# a real broker to both faces and every store (tests/sdk/test_hostile_ids.py, about 0.3 s an
# example). `make test` runs the same tests at a small size.
SAC_FUZZ_EXAMPLES ?= 10000
SAC_FUZZ_BROKER_EXAMPLES ?= 300
fuzz: deps venv
	SAC_FUZZ_EXAMPLES=$(SAC_FUZZ_EXAMPLES) $(BIN)/pytest tests/unit/test_wire_tables.py -q \
		-o timeout=0
	SAC_FUZZ_EXAMPLES=$(SAC_FUZZ_BROKER_EXAMPLES) $(BIN)/pytest tests/sdk/test_hostile_ids.py \
		-k fuzz -q -o timeout=0

# The SDK's hot paths against the official Go client (bench/anchor.py: interleaved rounds on a
# fresh 3-node cluster and PostgreSQL; the Go program is built on first use from the Debian
# packages deps installs). BENCH_ARGS=--quick for a smoke run.
BENCH_ARGS ?=
bench: deps venv
	$(BIN)/python -m bench.anchor $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .sac .pytest_cache .mypy_cache .ruff_cache
