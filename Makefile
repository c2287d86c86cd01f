# The two commands: `make run` and `make test`. Everything else is optional.
SHELL := /bin/bash
.DEFAULT_GOAL := help
BIN := .venv/bin
PYTEST_ARGS ?=
# Most tests wait on timers and child processes, so two workers on two cores halve the wall clock.
PYTEST_WORKERS ?= 2
# The unit lane: no broker, no service process (tests/unit/conftest.py refuses both).
UNIT_TESTS := tests/unit

.PHONY: help venv lock nats-values run run-cluster test test-fast lint typecheck proto proto-check bench bench-ops bench-coordination bench-acceptance bench-agent-api bench-mcp bench-voice bench-speech bench-cluster bench-recovery bench-messages bench-delivery chaos dashboards docs docs-build docs-check clean

help:
	@echo "make run    start the broker and every service (foreground, Ctrl-C stops)"
	@echo "make run-cluster  the same on a 3-node JetStream cluster, two of each service"
	@echo "make test   install what is needed and run lint, types and the whole suite"
	@echo "make test-fast  the unit tests: deciders, folds, plans, codecs, shells (no broker)"
	@echo "make lock   re-resolve pyproject.toml into the hash-pinned requirements/*.txt"
	@echo "make proto  regenerate proto/ (JSON Schemas, the AsyncAPI document) and the docs' consumer table"
	@echo "make bench  run the benchmarks; results under bench/results/"
	@echo "make docs   serve the docs site on http://127.0.0.1:8000 (make docs-build: build it, strict)"
	@echo "make chaos  the long fault-injection run (kills, pauses, broker faults); prints its figures"

venv:
	@scripts/ensure-venv.sh

run: venv
	@$(BIN)/holdline run

run-cluster: venv
	@$(BIN)/holdline run --cluster 3

lint: venv
	$(BIN)/ruff check .

typecheck: venv
	$(BIN)/mypy

# The unit lane first (it prints how many ran), then the component and system suites on the
# run's broker. Either pytest failing, or collecting nothing (exit code 5), fails the target.
test: venv lint typecheck docs-check
	scripts/ensure-system-deps.sh
	$(BIN)/python -m pytest $(UNIT_TESTS) -n $(PYTEST_WORKERS) $(PYTEST_ARGS)
	$(BIN)/python -m pytest --ignore=$(UNIT_TESTS) -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Every unit test (all marked `fast`): no broker or service is started, under a minute.
test-fast: venv
	$(BIN)/python -m pytest $(UNIT_TESTS) -n $(PYTEST_WORKERS) -p no:randomly $(PYTEST_ARGS)

proto: venv
	$(BIN)/python -m devtools.proto

proto-check: venv
	$(BIN)/python -m devtools.proto --check

bench: venv
	$(BIN)/python -m bench

bench-ops: venv
	$(BIN)/python -m bench.ops

bench-coordination: venv
	$(BIN)/python -m bench.coordination

bench-acceptance: venv
	$(BIN)/python -m bench.acceptance

bench-agent-api: venv
	$(BIN)/python -m bench.agent_api

bench-mcp: venv
	$(BIN)/python -m bench.mcp

bench-voice: venv
	$(BIN)/python -m bench.voice
	$(BIN)/python -m bench.webrtc

bench-speech: venv
	$(BIN)/python -m bench.speech

bench-cluster: venv
	$(BIN)/python -m bench.cluster

bench-recovery: venv
	$(BIN)/python -m bench.recovery

bench-messages: venv
	$(BIN)/python -m bench.messages --turns 40 --sessions 1 30

bench-delivery: venv
	$(BIN)/python -m bench.delivery

chaos: venv
	scripts/ensure-system-deps.sh
	$(BIN)/python -m tests.system.chaos $(CHAOS_ARGS)

# The reference pages are generated from the code first (devtools/docs_reference.py), so
# the strict build also fails on a stale or undocumented setting.
docs: venv
	$(BIN)/python -m devtools.docs_reference
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

docs-build: venv
	$(BIN)/python -m devtools.docs_reference
	$(BIN)/mkdocs build --strict --site-dir .site

# What `make test` runs: a stale reference page fails instead of being rewritten.
docs-check: venv
	$(BIN)/python -m devtools.docs_reference --check
	$(BIN)/mkdocs build --strict --site-dir .site

# The hash-pinned lock files every install uses (make venv, CI, the Dockerfile); run after
# changing a dependency in pyproject.toml (needs the package index).
lock: venv
	$(BIN)/python -m devtools.lock

# The NATS Helm chart's users and permissions, from the services' declared roles.
nats-values: venv
	$(BIN)/python -m devtools.nats_values

dashboards: venv
	$(BIN)/python deploy/grafana/build.py

clean:
	rm -rf .data .site tests/artifacts .pytest_cache .mypy_cache .ruff_cache
