#!/usr/bin/env bash
# Start the local Lockstep test cluster: kube-apiserver (with embedded etcd),
# kube-controller-manager, kube-scheduler and KWOK with 3 fake nodes, all as
# local processes with free ports, plus one real node (containerd + kubelet +
# kube-proxy + CoreDNS in its own namespaces, tools/node/node.sh) and an image
# registry that it pulls from (tools/registry/lib.sh).
#
# Idempotent: returns at once when the cluster is already up and healthy.
# Returns when /readyz is ok, the KWOK nodes and the real node are Ready and
# the default ServiceAccount exists. Writes the admin kubeconfig to
# target/cluster/kubeconfig. Without the real node everything listens on
# 127.0.0.1; with it the API server binds the host end of the node's veth pair
# (10.250.N.1), which the node and its pods can reach.
#
# Env:
#   LOCKSTEP_CLUSTER_DIR      state dir (default: <repo>/target/cluster)
#   LOCKSTEP_CACHE            build cache root (default: ~/.cache/lockstep)
#   LOCKSTEP_CLUSTER_TIMEOUT  seconds to wait for readiness (default: 180)
#   LOCKSTEP_KWOK_NODES       number of fake nodes (default: 3)
#   LOCKSTEP_REAL_NODE        0: no real node (KWOK only, loopback only; default: 1)
#   LOCKSTEP_NODE_IMAGES      cached: import every cached image at start (default: pause only)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TIMEOUT="${LOCKSTEP_CLUSTER_TIMEOUT:-180}"
NODES="${LOCKSTEP_KWOK_NODES:-3}"
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1

healthy() {
  [ -f "$KUBECONFIG_ADMIN" ] && [ -x "$CLUSTER_DIR/bin/kubectl" ] || return 1
  local c
  for c in "${COMPONENTS_STOP_ORDER[@]}"; do pid_alive "$c" || return 1; done
  [ "$(kctl get --raw /readyz 2>/dev/null)" = ok ] || return 1
  local ready
  ready="$(kctl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)"
  [ "$ready" -ge "$((NODES + EXPECT_REAL))" ] || return 1
  if real_node_enabled; then
    for c in "${NODE_COMPONENTS_STOP_ORDER[@]}"; do pid_alive "$c" || return 1; done
    pid_alive registry || return 1
  fi
}
EXPECT_REAL=0
if real_node_enabled; then EXPECT_REAL=1; fi

if healthy; then
  log "already up: KUBECONFIG=$KUBECONFIG_ADMIN"
  exit 0
fi

# Anything left from a previous, broken run goes first.
if [ -d "$CLUSTER_DIR" ]; then
  log "stale or unhealthy cluster state in $CLUSTER_DIR: tearing it down first"
  "$CLUSTER_TOOLS/down.sh"
fi

BIN="$("$CLUSTER_TOOLS/build.sh")"
mkdir -p "$CLUSTER_DIR/bin" "$PKI" "$LOGS" "$PIDS" "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/kwok-home"
chmod 700 "$CLUSTER_DIR/etcd" "$PKI"
ln -sfn "$BIN/lockstep-cluster" "$CLUSTER_DIR/bin/lockstep-cluster"
ln -sfn "$BIN/lockstep-cluster" "$CLUSTER_DIR/bin/kubectl"
ln -sfn "$BIN/kwok" "$CLUSTER_DIR/bin/kwok"
echo "$BIN" >"$CLUSTER_DIR/bin-dir"
API_IP=127.0.0.1
if real_node_enabled; then
  node_install_deps || { log "ERROR: installing ${NODE_DEBIAN_PACKAGES[*]} failed; see $LOGS/node-apt.log"; exit 1; }
  NODE_BIN="$("$REPO_ROOT/tools/node/build.sh")"
  PAUSE_TAR="$("$REPO_ROOT/tools/images/build.sh" pause)"
  # shellcheck disable=SC2034 # read by node_write_configs (tools/node/node.sh)
  PAUSE_IMAGE="$("$REPO_ROOT/tools/images/build.sh" --name pause)"
  REGISTRY_BIN="$("$REPO_ROOT/tools/registry/build.sh")"
  node_net_up || { "$CLUSTER_TOOLS/down.sh"; exit 1; }
  API_IP="$HOST_IP"
fi

fail() {
  log "ERROR: $*"
  local f
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    case "$f" in */pki.log) continue ;; esac # openssl noise; named when it matters
    echo "----- tail of $f -----" >&2
    tail -n 25 "$f" >&2
  done
  log "logs are in $LOGS; run 'make cluster-down' (or tools/cluster/down.sh) to clean up"
  exit 1
}

# ---------------------------------------------------------------- ports
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
declare -A TAKEN=()
# Pick listen ports below the kernel's ephemeral range, so that no outgoing
# connection (etcd clients, kubectl, ...) can grab one before it is bound.
read -r EPHEMERAL_LOW _ </proc/sys/net/ipv4/ip_local_port_range || EPHEMERAL_LOW=32768
if [ "$EPHEMERAL_LOW" -gt 12000 ]; then
  PORT_LO=10000 PORT_SPAN=$((EPHEMERAL_LOW - 10000))
else
  PORT_LO=$((EPHEMERAL_LOW / 2)) PORT_SPAN=$((EPHEMERAL_LOW / 2))
fi
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((PORT_LO + (RANDOM * 32768 + RANDOM) % PORT_SPAN))
    [ -z "${TAKEN[$p]:-}" ] || continue
    if ! port_in_use "$p" && ! grep -qi ":$(printf '%04X' "$p") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
      TAKEN[$p]=1
      echo "$p"
      return 0
    fi
  done
  return 1
}
APISERVER_PORT="$(free_port)"
KCM_PORT="$(free_port)"
SCHED_PORT="$(free_port)"
ETCD_CLIENT_PORT="$(free_port)"
ETCD_PEER_PORT="$(free_port)"
REGISTRY_PORT=""
if real_node_enabled; then REGISTRY_PORT="$(free_port)"; fi
SERVER="https://$API_IP:$APISERVER_PORT"
cat >"$CLUSTER_DIR/ports.env" <<EOF
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHED_PORT
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
REGISTRY_PORT=$REGISTRY_PORT
API_IP=$API_IP
EOF

# ---------------------------------------------------------------- PKI
log "generating certificates in $PKI"
(
  cd "$PKI"
  exec 2>>"$LOGS/pki.log"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=lockstep-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" >/dev/null

  # sign NAME SUBJECT EXT...
  sign() {
    local name="$1" subj="$2" ext="$3"
    openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" >/dev/null
    printf '%b\n' "$ext" >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out "$name.crt" -days 3650 -extfile "$name.ext" >/dev/null
    rm -f "$name.csr" "$name.ext"
  }
  client_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
  sign apiserver "/CN=kube-apiserver" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:$API_IP,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=lockstep-admin" "$client_ext"
  sign controller-manager "/CN=system:kube-controller-manager" "$client_ext"
  sign scheduler "/CN=system:kube-scheduler" "$client_ext"
  # KWOK plays every kubelet: simplest to give it cluster-admin.
  sign kwok "/O=system:masters/CN=kwok" "$client_ext"
  # The local volume provisioner creates and deletes PersistentVolumes cluster-wide.
  sign local-provisioner "/O=system:masters/CN=lockstep-local-provisioner" "$client_ext"
  # Front-proxy client for the aggregation layer.
  sign front-proxy-client "/CN=front-proxy-client" "$client_ext"
  if real_node_enabled; then
    node_certs
    registry_certs
  fi
  openssl genrsa -out sa.key 2048 >/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub >/dev/null
  chmod 600 ./*.key
) || true
certs=(ca.crt apiserver.crt admin.crt controller-manager.crt scheduler.crt kwok.crt local-provisioner.crt front-proxy-client.crt sa.key sa.pub)
if real_node_enabled; then certs+=(kubelet-client.crt kubelet-serving.crt kube-proxy.crt coredns.crt apiserver-kubelet-client.crt registry.crt); fi
for f in "${certs[@]}"; do
  [ -s "$PKI/$f" ] || fail "certificate generation failed (openssl): no $PKI/$f; see $LOGS/pki.log"
done

# kubeconfig FILE USER
write_kubeconfig() {
  local file="$1" user="$2"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lockstep
  cluster:
    server: $SERVER
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$user.crt")
    client-key-data: $(base64 -w0 <"$PKI/$user.key")
contexts:
- name: lockstep
  context:
    cluster: lockstep
    user: $user
    namespace: default
current-context: lockstep
EOF
  chmod 600 "$file"
}
write_kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" controller-manager
write_kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" scheduler
write_kubeconfig "$CLUSTER_DIR/kwok.kubeconfig" kwok
write_kubeconfig "$CLUSTER_DIR/local-provisioner.kubeconfig" local-provisioner
# The admin kubeconfig is written last: its presence means "PKI complete".
write_kubeconfig "$KUBECONFIG_ADMIN.tmp" admin

# start NAME CMD...: run detached in its own session, log and pid under CLUSTER_DIR.
start() {
  local name="$1"
  shift
  echo "+ $*" >"$LOGS/$name.log"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  pid_record "$name" $!
}

wait_for() { # DESCRIPTION CMD...
  local what="$1" deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then fail "timed out after ${TIMEOUT}s waiting for $what"; fi
    local c
    for c in "${STARTED[@]}"; do
      pid_alive "$c" || fail "$c exited while waiting for $what"
    done
    sleep 0.5
  done
}
STARTED=()

# ---------------------------------------------------------------- apiserver
# Without the real node: --endpoint-reconciler-type=none (the lease reconciler
# refuses a loopback advertise address, and no pod needs default/kubernetes).
# With it: bind and advertise the veth address, so that default/kubernetes
# has an endpoint the pods reach; reach kubelets by their InternalIP.
apiserver_node_flags=(--endpoint-reconciler-type=none)
if real_node_enabled; then
  apiserver_node_flags=(
    --endpoint-reconciler-type=lease
    --kubelet-preferred-address-types=InternalIP
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt"
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key"
  )
fi
log "starting kube-apiserver on $SERVER (embedded etcd on 127.0.0.1:$ETCD_CLIENT_PORT)"
start apiserver "$BIN/lockstep-cluster" apiserver \
  --embedded-etcd-dir="$CLUSTER_DIR/etcd" \
  --embedded-etcd-client-port="$ETCD_CLIENT_PORT" \
  --embedded-etcd-peer-port="$ETCD_PEER_PORT" \
  --advertise-address="$API_IP" \
  --bind-address="$API_IP" \
  --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$PKI/apiserver.crt" \
  --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --requestheader-client-ca-file="$PKI/ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
  --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --authorization-mode=Node,RBAC \
  --allow-privileged=true \
  --enable-priority-and-fairness=true \
  --profiling=false \
  --event-ttl=1h \
  "${apiserver_node_flags[@]}" \
  --v=1
STARTED+=(apiserver)
readyz() { [ "$(KUBECONFIG=/dev/null curl -fsS --max-time 3 --cacert "$PKI/ca.crt" "$SERVER/readyz" 2>/dev/null)" = ok ]; }
wait_for "kube-apiserver /readyz" readyz
mv "$KUBECONFIG_ADMIN.tmp" "$KUBECONFIG_ADMIN"
log "kube-apiserver ready"

# ---------------------------------------------------------------- controllers
log "starting kube-controller-manager, kube-scheduler, the local volume provisioner, kwok"
start controller-manager "$BIN/lockstep-cluster" controller-manager \
  --kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$KCM_PORT" \
  --controllers='*' \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" \
  --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" \
  --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --enable-hostpath-provisioner=true \
  --leader-elect=false \
  --profiling=false \
  --v=1
STARTED+=(controller-manager)

start scheduler "$BIN/lockstep-cluster" scheduler \
  --kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --authentication-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$SCHED_PORT" \
  --leader-elect=false \
  --profiling=false \
  --v=1
STARTED+=(scheduler)

# Node-local volumes that honour a pod's fsGroup (StorageClass "local"; see
# provisioner/main.go for why the in-tree hostpath provisioner cannot serve them).
start local-provisioner "$BIN/lockstep-local-provisioner" \
  --kubeconfig="$CLUSTER_DIR/local-provisioner.kubeconfig" \
  --root="$LOCAL_PV_ROOT"
STARTED+=(local-provisioner)

kwok_configs=(--config="$CLUSTER_TOOLS/kwok/kwok.yaml")
for f in "$CLUSTER_TOOLS"/kwok/stages/*.yaml; do kwok_configs+=(--config="$f"); done
# HOME is redirected so that a stray ~/.kwok/kwok.yaml cannot be picked up.
start kwok env HOME="$CLUSTER_DIR/kwok-home" "$BIN/kwok" \
  --kubeconfig="$CLUSTER_DIR/kwok.kubeconfig" \
  "${kwok_configs[@]}"
# `env` execs kwok, so the recorded pid is kwok's.
STARTED+=(kwok)

# ---------------------------------------------------------------- objects
log "creating $NODES KWOK nodes, StorageClasses and the KWOK delete guard"
{
  for i in $(seq 0 $((NODES - 1))); do
    zones=(a b c); zone="zone-${zones[$((i % 3))]}"
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    topology.kubernetes.io/zone: $zone
spec: {}
status:
  allocatable:
    cpu: "64"
    memory: 256Gi
    pods: "250"
    ephemeral-storage: 1Ti
  capacity:
    cpu: "64"
    memory: 256Gi
    pods: "250"
    ephemeral-storage: 1Ti
EOF
  done
  cat "$CLUSTER_TOOLS/storageclasses.yaml"
  echo ---
  cat "$CLUSTER_TOOLS/kwok/guard.yaml"
  if real_node_enabled; then node_bootstrap_yaml; fi
} >"$CLUSTER_DIR/bootstrap.yaml"
kctl apply -f "$CLUSTER_DIR/bootstrap.yaml" >>"$LOGS/bootstrap.log" 2>&1 || fail "applying $CLUSTER_DIR/bootstrap.yaml failed"

# ---------------------------------------------------------------- real node
if real_node_enabled; then
  # The registry first: containerd reads its hosts.toml (certs.d) on each pull.
  log "starting the image registry on $HOST_IP:$REGISTRY_PORT (TLS, the cluster's CA)"
  registry_write_configs "$REGISTRY_BIN" "$REGISTRY_PORT"
  registry_start
  STARTED+=(registry)
  # shellcheck disable=SC2153 # NODE_IP is set by node_net_up
  log "starting the real node $NODE_NAME: containerd, kubelet, kube-proxy, CoreDNS ($NODE_IP)"
  node_write_configs "$NODE_BIN"
  node_start_containerd || fail "containerd did not start"
  STARTED+=(node-holder node-containerd)
  node_ctr images import "$PAUSE_TAR" >>"$LOGS/node-images.log" 2>&1 ||
    fail "importing $PAUSE_TAR into containerd failed (see $LOGS/node-images.log)"
  # LOCKSTEP_NODE_IMAGES=cached: also every other image already built
  # (~5 s per 200 MB); otherwise `make images-load` / tools/images/load.sh.
  if [ "${LOCKSTEP_NODE_IMAGES:-}" = cached ]; then
    "$REPO_ROOT/tools/images/load.sh" --cached >>"$LOGS/node-images.log" 2>&1 ||
      fail "importing the cached images failed (see $LOGS/node-images.log)"
  fi
  node_start_agents
  STARTED+=(node-kubelet node-kube-proxy node-coredns)
fi

nodes_ready() {
  local n
  n="$(kctl get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)"
  [ "$n" -ge "$NODES" ]
}
wait_for "$NODES KWOK nodes Ready" nodes_ready
wait_for "ServiceAccount default/default" kctl get serviceaccount default -n default
# Untainted means schedulable: the node lifecycle controller removes the
# not-ready taint shortly after the node turns Ready.
no_taints() { [ -z "$(kctl get nodes -l type=kwok -o jsonpath='{.items[*].spec.taints}')" ]; }
wait_for "KWOK node taints to clear" no_taints
if real_node_enabled; then
  real_node_ready() {
    [ "$(kctl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] || return 1
    # Only our own taint is left once the lifecycle controller saw it Ready.
    [ "$(kctl get node "$NODE_NAME" -o jsonpath='{.spec.taints[*].key}')" = lockstep.dev/real-node ]
  }
  wait_for "the real node $NODE_NAME Ready" real_node_ready
  coredns_ready() { in_node curl -fsS --max-time 2 http://127.0.0.1:8181/ready; }
  wait_for "CoreDNS ready" coredns_ready
  wait_for "the image registry at $(registry_address)" registry_healthy
fi

log "cluster up ($SECONDS s): export KUBECONFIG=$KUBECONFIG_ADMIN; kubectl at $CLUSTER_DIR/bin/kubectl"
