#!/usr/bin/env bash
# Stop every process tools/cluster/up.sh started (by the pids it recorded) and
# remove the cluster state (target/cluster) and the hostpath volumes it made.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ ! -d "$CLUSTER_DIR" ]; then
  log "no cluster state at $CLUSTER_DIR: nothing to do"
  exit 0
fi

# Volumes provisioned by the hostpath provisioner: ask the API while it is up,
# and remember them in case the API is not reachable next time.
if [ -f "$KUBECONFIG_ADMIN" ] && [ -x "$CLUSTER_DIR/bin/kubectl" ] && pid_alive apiserver; then
  kctl get pv -o jsonpath='{range .items[*]}{.spec.hostPath.path}{"\n"}{end}' --request-timeout=5s \
    >>"$CLUSTER_DIR/hostpath-volumes" 2>/dev/null || true
fi

stop() {
  local name="$1" f="$PIDS/$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if pid_alive "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      pid_alive "$name" || break
      sleep 0.1
    done
    if pid_alive "$name"; then
      log "$name (pid $pid) ignored SIGTERM; killing"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        [ -d "/proc/$pid" ] || break
        sleep 0.1
      done
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$f"
}
for c in "${COMPONENTS_STOP_ORDER[@]}"; do stop "$c"; done

if [ -f "$CLUSTER_DIR/hostpath-volumes" ]; then
  sort -u "$CLUSTER_DIR/hostpath-volumes" | while read -r p; do
    case "$p" in
      "$HOSTPATH_PV_ROOT"/?*) rm -rf -- "$p" ;;
    esac
  done
  rmdir "$HOSTPATH_PV_ROOT" 2>/dev/null || true
fi

rm -rf -- "$CLUSTER_DIR"
log "cluster down; removed $CLUSTER_DIR"
