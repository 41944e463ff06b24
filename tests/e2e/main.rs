//! End-to-end tests against the local control plane (`make -f tools/cluster/cluster.mk cluster-up`).
