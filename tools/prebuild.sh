#!/usr/bin/env bash
# tools/prebuild.sh start|stop: build the local cluster's binaries and images in the
# background, at nice 19, while `make test`'s first tiers run.
#
# On a new machine the control plane, KWOK, the node and the images are built from
# source (about 20 minutes of both cores), and `make test` used to start them only at
# `cluster-up`, after the pod-script tier, which leaves the cores ~85 % idle for
# ~12 minutes (it mostly waits on PostgreSQL servers). Started first, at nice 19, the
# builds take only what the tests leave. Nothing waits on them: each builder holds its
# cache's lock while it builds, so a tier that needs an artefact still being built
# waits for it, and one whose build failed here builds it again itself. With warm
# caches every step is a hash check of a second or two.
#
#   start   stop any earlier run, then start one (log: target/prebuild/log)
#   stop    end the run if it is still going (its whole process group)
#
# Environment: LOCKSTEP_REAL_NODE=0 builds only the control plane (no node, no images).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="$ROOT/target/prebuild"

stop() {
  local pid
  pid="$(cat "$STATE/pid" 2>/dev/null)" || return 0
  rm -f "$STATE/pid"
  # The run is its own session's leader, so its pid names its process group.
  kill -0 "$pid" 2>/dev/null || return 0
  echo "prebuild: still running at the end; stopped (log: $STATE/log)"
  kill -TERM -- "-$pid" 2>/dev/null || true
}

# step NAME CMD...: run one builder, logging its time; a failure is logged, not fatal
# (the tier that needs the artefact builds it again and fails there, with its own log).
step() {
  local name="$1" t0=$SECONDS
  shift
  if "$@" >/dev/null; then
    echo "prebuild: $name ready in $((SECONDS - t0)) s"
  else
    echo "prebuild: $name failed after $((SECONDS - t0)) s (its tier will build it again)"
  fi
}

run() {
  echo $$ >"$STATE/pid"
  # Every tier builds the operator's image with this profile (docs/development.md#ci).
  export LOCKSTEP_IMAGE_PROFILE=image-test
  local t0=$SECONDS
  # helm first: `make fresh` and `make chart`, right after lint, need it.
  step "helm" "$ROOT/tools/helm/build.sh"
  step "control plane and KWOK" "$ROOT/tools/cluster/build.sh"
  if [ "${LOCKSTEP_REAL_NODE:-1}" != 0 ]; then
    step "real node" "$ROOT/tools/node/build.sh"
    step "registry and crane" "$ROOT/tools/registry/build.sh"
    # In the order the tiers need them: cluster-up, the KWOK tier (the operator's
    # image, etcd and its client), the real-PostgreSQL tier (15, then the other majors),
    # the install tier.
    local image
    for image in pause lockstep etcd-3.6 etcd-3.7 backup s3 postgres-15 postgres-15-bare postgres-15-next postgres-17 postgres-18 lockstep-next; do
      step "image $image" "$ROOT/tools/images/build.sh" "$image"
    done
  fi
  echo "prebuild: done in $((SECONDS - t0)) s"
  rm -f "$STATE/pid"
}

case "${1:-}" in
  start)
    stop >/dev/null
    mkdir -p "$STATE"
    setsid nice -n 19 bash "$0" run >"$STATE/log" 2>&1 </dev/null &
    echo "prebuild: building the cluster's binaries and images in the background at nice 19 (log: target/prebuild/log)"
    ;;
  stop) stop ;;
  run) run ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
