# Makefile fragment for the local Kubernetes test cluster (tools/cluster).
#
# Include it from the top-level Makefile:
#     include tools/cluster/cluster.mk
# or use it on its own from the repository root:
#     make -f tools/cluster/cluster.mk cluster-up
#
# Targets:
#   cluster-build   build (or reuse from cache) lockstep-cluster + kwok
#   cluster-up      start the cluster; idempotent; builds if needed
#   cluster-down    stop every process of the cluster and remove its state
#   cluster-status  print whether the cluster is up
#   cluster-selftest  check StatefulSet/PVC, Job, KWOK hooks, RBAC on a running cluster
#   node-build      build (or reuse from cache) kubelet, kube-proxy, containerd, CoreDNS
#   node-smoke      real pod on the real node: DNS, Service, exec, logs, S3
#   node-etcd-check the etcd images: 3.6->3.7 upgrade under a writer, backup, restore
#   images-load     build (or reuse from cache) every local image (tools/images) and
#                   import them into the running real node
# (`make images` and `make push`, the release images, are in the top-level Makefile.)
#
# Environment: LOCKSTEP_REAL_NODE=0 starts no real node (KWOK only);
# LOCKSTEP_CLUSTER_DIR overrides CLUSTER_DIR.
#
# Variables (for recipes and tests):
#   CLUSTER_BIN_DIR     cached binaries: lockstep-cluster, kwok, kubectl
#   CLUSTER_DIR         state of the running cluster (target/cluster)
#   CLUSTER_KUBECONFIG  admin kubeconfig (target/cluster/kubeconfig)
#   CLUSTER_KUBECTL     kubectl (target/cluster/bin/kubectl, exists while up)

CLUSTER_MK_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
CLUSTER_ROOT := $(abspath $(CLUSTER_MK_DIR)/../..)
# LOCKSTEP_CLUSTER_DIR from the environment wins over the default (as in lib.sh).
CLUSTER_DIR ?= $(or $(LOCKSTEP_CLUSTER_DIR),$(CLUSTER_ROOT)/target/cluster)
CLUSTER_KUBECONFIG := $(CLUSTER_DIR)/kubeconfig
CLUSTER_KUBECTL := $(CLUSTER_DIR)/bin/kubectl
# Evaluated lazily: hashing the inputs costs a few milliseconds, no build.
CLUSTER_BIN_DIR = $(shell $(CLUSTER_ROOT)/tools/cluster/build.sh --print)

.PHONY: cluster-build cluster-up cluster-down cluster-status cluster-selftest node-build node-smoke node-etcd-check images-load

cluster-build:
	@$(CLUSTER_ROOT)/tools/cluster/build.sh >/dev/null

cluster-up:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/cluster/up.sh

cluster-down:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/cluster/down.sh

cluster-status:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/cluster/status.sh

cluster-selftest:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/cluster/selftest.sh

node-build:
	@$(CLUSTER_ROOT)/tools/node/build.sh >/dev/null

node-smoke:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/node/smoke.sh

node-etcd-check:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/node/etcd-check.sh

images-load:
	@LOCKSTEP_CLUSTER_DIR=$(CLUSTER_DIR) $(CLUSTER_ROOT)/tools/images/load.sh
