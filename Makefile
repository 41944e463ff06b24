# Lockstep — kubebuilder-style targets.
#
#   make test     everything CI checks (lint, freshness, the manual's links and the
#                 API docs, unit + model checks, pod-script tests against real
#                 PostgreSQL and S3, e2e on a real control plane, real pods, a real
#                 etcd and real PostgreSQL clusters on the real node)
#   make demo     the DistributedDB lifecycle on etcd, then the PostgresCluster one on
#                 PostgreSQL (make demo-postgres alone), narrated, on a local control plane
#   make bench    benchmarks at scale on a local control plane (not part of `make test`);
#                 make bench-postgres: failover and switchover times on real PostgreSQL
#
# Run `make help` for the rest.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
LOCKSTEP := $(CURDIR)/target/debug/lockstep
# The example operator of docs/write-your-own-operator.md (examples/canary, a member of
# the workspace built on the public API only).
CANARY := $(CURDIR)/target/debug/canary

include tools/cluster/cluster.mk

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the lockstep binary (and the example operator's, canary).
	$(CARGO) build --bins
	$(CARGO) build -p lockstep-canary --bins

.PHONY: generate
generate: build ## Regenerate crds/ and machines/ from the code, and what the chart derives from them (make dist).
	$(LOCKSTEP) crds --out-dir crds
	$(LOCKSTEP) machines --out-dir machines
	$(CANARY) crds --out-dir examples/canary/crds
	$(CANARY) machines --out-dir examples/canary/machines
	tools/helm/chart.sh update

.PHONY: fmt
fmt: ## Format the code.
	$(CARGO) fmt --all

.PHONY: lint
lint: ## rustfmt check and clippy with warnings denied.
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

.PHONY: fresh
fresh: build ## Fail if the committed crds/, machines/, the chart's CRDs and version, or dist/install.yaml are stale.
	$(LOCKSTEP) crds --out-dir crds --check
	$(LOCKSTEP) machines --out-dir machines --check
	$(CANARY) crds --out-dir examples/canary/crds --check
	$(CANARY) machines --out-dir examples/canary/machines --check
	tools/helm/chart.sh fresh

.PHONY: dist
dist: ## Regenerate dist/install.yaml, the chart's CRDs and version, and its snapshots (tests/chart) from crds/, Cargo.toml and charts/lockstep.
	tools/helm/chart.sh update

# The images a release publishes (tools/images/build.sh names): the operator and one
# PostgreSQL image per supported major, each with pgBackRest.
RELEASE_IMAGES := lockstep postgres-15 postgres-17 postgres-18
# Where `make push` pushes them: a registry and repository prefix. Default: the running
# local cluster's registry (tools/registry/registry.sh address), under lockstep-dev/.
REGISTRY ?=

.PHONY: images
images: ## Build (or reuse from cache) the release images, RELEASE_IMAGES: the operator and the PostgreSQL images (tools/images/build.sh).
	tools/images/build.sh $(RELEASE_IMAGES)

.PHONY: push
push: ## Push the release images to REGISTRY (host[:port]/prefix; default: the local cluster's registry), tagged by Cargo.toml's and PostgreSQL's versions (tools/registry/push.sh).
	tools/registry/push.sh $(if $(REGISTRY),--registry $(REGISTRY)) $(RELEASE_IMAGES)

.PHONY: chart
chart: ## helm lint of charts/lockstep, and helm template against the snapshots in tests/chart (helm built from Go modules, tools/helm/build.sh).
	tools/helm/chart.sh test

# The model checks' generated runs explore from the hash of the commit's src/ tree, so
# that every change to the code explores new runs, while a commit that changes only the
# docs runs exactly the runs its parent ran (a seed in the environment wins; without git
# it is empty, and the checks run from their fixed seeds alone). Each check also runs its
# fixed seed, so what the tests assert about coverage never depends on the commit
# (src/engine/check.rs).
LOCKSTEP_CHECK_SEED ?= $(shell git rev-parse HEAD:src 2>/dev/null)
# `make model-deep`: the shipped machines' model checks, this many generated runs each.
MODEL_DEEP_CASES ?= 20000

.PHONY: unit
unit: ## Unit tests and the proptest model checks (seeded from the commit and from a fixed seed, fixed case count); the example operator's, with its planted bug, and its tutorial's listings.
	LOCKSTEP_CHECK_SEED='$(LOCKSTEP_CHECK_SEED)' $(CARGO) test --lib --bins
	LOCKSTEP_CHECK_SEED='$(LOCKSTEP_CHECK_SEED)' $(CARGO) test -p lockstep-canary --lib --bins --test tutorial

.PHONY: model-deep
model-deep: ## The shipped machines' model checks with MODEL_DEEP_CASES (20,000) generated runs from the commit's seed; about 15 min of CPU (docs/development.md).
	LOCKSTEP_CHECK_SEED='$(LOCKSTEP_CHECK_SEED)' LOCKSTEP_CHECK_CASES='$(MODEL_DEEP_CASES)' \
	  $(CARGO) test --lib -- --exact --nocapture --test-threads=2 \
	  machines::postgres::model::scenarios::the_postgres_machine_keeps_one_primary_converges_under_faults_and_takes_every_edge \
	  machines::postgres::model::hibernation::hibernation_keeps_one_writer_sleeps_with_no_server_and_wakes_with_its_primary \
	  machines::distributeddb::model::scenarios::distributeddb_is_safe_and_live_under_faults_and_takes_every_edge

.PHONY: docs
docs: ## The manual's links and anchors resolve (tools/check_links.py); no commit hash in the manual, no tracker number in the code, the plugin's help whole (tools/check_refs.py); each checker tested first; API docs with warnings denied; doctests.
	python3 tools/check_links_test.py
	python3 tools/check_links.py
	python3 tools/check_refs_test.py
	python3 tools/check_refs.py
	RUSTDOCFLAGS='-D warnings' $(CARGO) doc --no-deps --workspace
	$(CARGO) test --doc

.PHONY: scripts
scripts: ## Pod scripts against real PostgreSQL servers and a local S3 server.
	bash tests/pg_scripts/run.sh

.PHONY: e2e
e2e: cluster-up ## End-to-end tests on the local control plane (brings it up).
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) test --test e2e -- --test-threads=2 --skip postgres_real:: --skip postgres_freeze:: --skip install::
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) test -p lockstep-canary --test e2e

# The real tier's slower variants: each a second angle on what a test of the per-change
# tier already covers (a failover that must not promote a lagging replica, a primary cut
# off from the API server without synchronous replication, an asynchronous frozen
# primary, `Preferred` relaxing, a frozen primary found by its probe). `make test-slow`
# runs them, before each stop; CI runs the rest (docs/development.md).
REAL_SLOW := \
  postgres_real::failover_never_promotes_a_lagging_replica \
  postgres_real::failover_with_the_primary_cut_off_from_the_api \
  postgres_real::zero_loss::asynchronously_a_frozen_primary_is_failed_over_and_what_it_lost_is_reported \
  postgres_real::zero_loss::preferred_turns_asynchronous_when_no_standby_streams_and_says_so \
  postgres_freeze::a_frozen_primary_is_reported_lost_and_failed_over
REAL_IMAGES := pause postgres-15 postgres-15-bare postgres-15-next postgres-17 postgres-18 s3 lockstep

.PHONY: e2e-postgres-real
e2e-postgres-real: ## PostgresCluster on real PostgreSQL pods on the real node, but the slower variants (cluster-up with the real node first).
	LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) LOCKSTEP_IMAGE_PROFILE=image-test tools/images/load.sh $(REAL_IMAGES)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) test --test e2e -- postgres_real:: postgres_freeze:: --test-threads=2 $(addprefix --skip ,$(REAL_SLOW))

.PHONY: test-slow
test-slow: cluster-up ## The real tier's slower variants (REAL_SLOW), run before each stop and not in CI; brings the control plane up and leaves it.
	LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) LOCKSTEP_IMAGE_PROFILE=image-test tools/images/load.sh $(REAL_IMAGES)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) test --test e2e -- --exact --test-threads=2 $(REAL_SLOW)

.PHONY: e2e-install
# Alone: the chart's operator watches every namespace.
e2e-install: ## Install with `helm install` of charts/lockstep on the real node; databases through a switchover, `helm upgrade` and `helm uninstall` (tests/e2e/install.rs).
	LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) LOCKSTEP_IMAGE_PROFILE=image-test tools/images/load.sh pause postgres-15 etcd-3.6
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) test --test e2e -- install:: --test-threads=1 --nocapture

.PHONY: demo
# The DistributedDB part keeps the control plane up for the PostgreSQL part, which tears
# it down at the end if asked (DEMO_TEARDOWN=1); with LOCKSTEP_REAL_NODE=0 the
# PostgreSQL part says it needs the real node and is skipped.
demo: ## The DistributedDB lifecycle on etcd, then PostgresCluster on PostgreSQL, narrated, on the local control plane (DEMO_TEARDOWN=1 to tear down after).
	DEMO_TEARDOWN=0 bash hack/demo.sh
	bash hack/demo-postgres.sh

.PHONY: demo-postgres
demo-postgres: ## The PostgresCluster part of `make demo` alone: real PostgreSQL on the real node, on the running control plane (brought up if none is).
	bash hack/demo-postgres.sh

.PHONY: test
# `node-etcd-check` (the etcd images alone) is not in `test`: the e2e etcd tier drives the
# same upgrade, snapshot and restore through the operator.
# The cluster's binaries and images build in the background from the start
# (tools/prebuild.sh, nice 19): on a new machine they are 20 minutes of both cores, and
# the pod-script tier leaves the cores mostly idle.
test: ## Everything CI checks; the control plane is torn down afterwards.
	@tools/prebuild.sh start
	@status=0; $(MAKE) --no-print-directory lint fresh chart docs unit scripts e2e || status=$$?; \
	  if [ "$$status" = 0 ] && [ "$${LOCKSTEP_REAL_NODE:-1}" != 0 ]; then \
	    $(MAKE) --no-print-directory node-smoke e2e-postgres-real e2e-install demo || status=$$?; \
	  fi; \
	  tools/prebuild.sh stop; cat target/prebuild/log 2>/dev/null || true; \
	  $(MAKE) --no-print-directory cluster-down; exit $$status

.PHONY: bench-postgres
bench-postgres: cluster-up ## Seconds writes are refused through -rw in switchovers and failovers, on real PostgreSQL on the real node (BENCH_PG_RUNS, default 5; docs/benchmarks.md).
	LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) LOCKSTEP_IMAGE_PROFILE=image-test tools/images/load.sh pause postgres-15 postgres-15-bare lockstep
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) test --test e2e -- --ignored --exact postgres_real::recovery_time::seconds_writes_are_refused_in_a_switchover_and_a_failover --nocapture

.PHONY: bench
bench: ## Benchmarks: criterion + scale on its own control plane (BENCH_SIZES, BENCH_QUICK=1; tools/bench/README.md).
	bash tools/bench/run.sh
