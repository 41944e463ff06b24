# shellcheck shell=bash disable=SC2034
# The real node of the local cluster: containerd + kubelet + kube-proxy +
# CoreDNS, in a private mount namespace and their own network namespace.
# Sourced by tools/cluster/lib.sh (needs CLUSTER_DIR, PKI, LOGS, PIDS, log).
#
# Layout while up (NODE_STATE = $CLUSTER_DIR/node):
#   a holder process (`lockstep-node-holder`) owns the mount + net namespaces;
#   every node process is entered into them with nsenter, so the namespaces die
#   with the last of them and nothing is mounted in the host's namespace.
#   Inside, $NODE_STATE/{run,varlib,varlog,opt} are bind-mounted over /run,
#   /var/lib, /var/log and /opt (kubelet, containerd and the CNI plugins write
#   to fixed paths there), and dummy files over the kernel sysctls kubelet sets.
#   A veth pair links the node (eth0, 10.250.N.2) to the host (lockstepN,
#   10.250.N.1); the API server binds 10.250.N.1. Pods get 10.245.N.0/24 on the
#   bridge cni0 inside the node; the host routes that range to the node.
#   kubelet's cgroups live under /sys/fs/cgroup/<controller>/lockstep-node-N.

NODE_TOOLS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODE_STATE="$CLUSTER_DIR/node"
NODE_NAME=lockstep-node-0
# Label and taint of the real node: only pods that tolerate the taint (and
# select the label) run real containers; everything else stays on KWOK.
NODE_LABEL_KEY=lockstep.dev/real-node
NODE_TAINT="lockstep.dev/real-node=true:NoSchedule"
NODE_COMPONENTS_STOP_ORDER=(node-coredns node-kube-proxy node-kubelet node-containerd node-holder)
# The kernel sysctls kubelet writes (setupKernelTunables); they are global, so
# kubelet gets private copies.
NODE_SYSCTLS=(kernel/panic kernel/panic_on_oops vm/overcommit_memory vm/panic_on_oom kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
NODE_DEBIAN_PACKAGES=(runc containernetworking-plugins nftables iptables conntrack)
CNI_BIN_DIR=/usr/lib/cni

real_node_enabled() { [ "${LOCKSTEP_REAL_NODE:-1}" != 0 ]; }

# node_env: load NODE_NET/HOST_IP/NODE_IP/POD_CIDR/NODE_IFACE of a started node.
node_env() {
  [ -f "$NODE_STATE/node.env" ] || return 1
  # shellcheck disable=SC1091
  . "$NODE_STATE/node.env"
}

# node_pid_alive NAME: pids/NAME.pid is alive and still the same process
# (pid_alive); the holder must also have exec'd into its named sleep, which is
# when its namespaces exist.
node_pid_alive() {
  pid_alive "$1" || return 1
  case "$1" in
    node-holder) [[ "$(tr '\0' ' ' <"/proc/$(cat "$PIDS/$1.pid")/cmdline" 2>/dev/null)" == lockstep-node-holder* ]] ;;
  esac
}

# node_install_deps: the Debian packages the node needs, installed if missing.
node_install_deps() {
  "$REPO_ROOT/tools/apt-install.sh" "${NODE_DEBIAN_PACKAGES[@]}" >>"$LOGS/node-apt.log" 2>&1
}

# in_node CMD...: run CMD inside the node's mount and network namespaces.
in_node() {
  nsenter -t "$(cat "$PIDS/node-holder.pid")" -m -n -- "$@"
}

# node_net_up: create the namespaces and the veth pair; sets and records
# NODE_NET HOST_IP NODE_IP POD_CIDR NODE_IFACE. Runs before the API server,
# which must bind HOST_IP.
node_net_up() {
  case "$CLUSTER_DIR/" in
    /run/* | /var/lib/* | /var/log/* | /opt/*)
      log "ERROR: LOCKSTEP_CLUSTER_DIR=$CLUSTER_DIR is under a path the node hides (/run /var/lib /var/log /opt)"
      return 1
      ;;
  esac
  local n
  for n in $(seq 0 63); do
    ip link show "lockstep$n" >/dev/null 2>&1 && continue
    ip route show | grep -q -e "^10\.250\.$n\." -e "^10\.245\.$n\." && continue
    break
  done
  NODE_NET=$n NODE_IFACE="lockstep$n" HOST_IP="10.250.$n.1" NODE_IP="10.250.$n.2" POD_CIDR="10.245.$n.0/24"
  mkdir -p "$NODE_STATE"/{run,varlib,varlog,opt,sysctl,etc,cni/net.d}
  cat >"$NODE_STATE/node.env" <<EOF
NODE_NET=$NODE_NET
NODE_IFACE=$NODE_IFACE
HOST_IP=$HOST_IP
NODE_IP=$NODE_IP
POD_CIDR=$POD_CIDR
CGROUP_ROOT=/lockstep-node-$NODE_NET
EOF
  # The holder: `exec -a` names it so that its pid can be recognised later.
  setsid unshare --mount --net --propagation private -- \
    bash -c 'exec -a lockstep-node-holder sleep infinity' </dev/null >/dev/null 2>&1 &
  pid_record node-holder $!
  # Deadlines in seconds, not a count of tries: a loaded machine starts processes slowly.
  local deadline=$((SECONDS + 30))
  until node_pid_alive node-holder || ((SECONDS >= deadline)); do
    sleep 0.05
  done
  node_pid_alive node-holder || { log "ERROR: the node's namespace holder did not start within 30 s"; return 1; }
  local h
  h="$(cat "$PIDS/node-holder.pid")"
  ip link add "$NODE_IFACE" type veth peer name eth0 netns "$h"
  ip addr add "$HOST_IP/24" dev "$NODE_IFACE"
  ip link set "$NODE_IFACE" up
  in_node sh -ec "
    ip link set lo up
    ip addr add $NODE_IP/24 dev eth0
    ip link set eth0 up
    ip route add default via $HOST_IP
    echo 1 >/proc/sys/net/ipv4/ip_forward
    if [ -w /proc/sys/net/bridge/bridge-nf-call-iptables ]; then echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables; fi
    mount --bind '$NODE_STATE/run' /run
    mount --bind '$NODE_STATE/varlib' /var/lib
    mount --bind '$NODE_STATE/varlog' /var/log
    mount --bind '$NODE_STATE/opt' /opt
    for s in ${NODE_SYSCTLS[*]}; do
      f='$NODE_STATE'/sysctl/\$(echo \$s | tr / .)
      cat /proc/sys/\$s >\"\$f\"
      mount --bind \"\$f\" /proc/sys/\$s
    done
  "
  ip route add "$POD_CIDR" via "$NODE_IP" dev "$NODE_IFACE"
  # kubelet's cgroup root, in every v1 hierarchy (cpuset needs its cpus/mems).
  local c d
  for c in /sys/fs/cgroup/*/; do
    d="${c%/}/lockstep-node-$NODE_NET"
    [ -f "${c%/}/cgroup.procs" ] || continue
    mkdir -p "$d"
    if [ -f "${c%/}/cpuset.cpus" ]; then
      cat "${c%/}/cpuset.cpus" >"$d/cpuset.cpus"
      cat "${c%/}/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
  log "node network: host $NODE_IFACE $HOST_IP <-> node eth0 $NODE_IP, pods $POD_CIDR"
}

# node_pki: certificates of the node's components (run in $PKI with sign()).
node_certs() {
  local client_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
  sign kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" "$client_ext"
  sign kubelet-serving "/CN=$NODE_NAME" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"
  sign kube-proxy "/CN=system:kube-proxy" "$client_ext"
  sign coredns "/CN=system:lockstep-coredns" "$client_ext"
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client_ext"
}

# node_bootstrap_yaml: objects the node needs from the API (CoreDNS's RBAC).
node_bootstrap_yaml() {
  cat <<'EOF'
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lockstep:coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lockstep:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lockstep:coredns}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:lockstep-coredns}
---
# Namespaces labelled lockstep.dev/real-node=true put every new pod on the
# real node (nodeSelector + toleration added at admission), so that workloads
# whose API has no placement fields (DistributedDB today: StatefulSet, hook and
# backup Jobs) run real containers. A pod that already tolerates the taint is
# left alone.
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: lockstep-real-node-placement}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  matchConditions:
  - name: not-yet-placed
    expression: >-
      !has(object.spec.tolerations) || !object.spec.tolerations.exists(t, has(t.key) && t.key == 'lockstep.dev/real-node')
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        (has(object.spec.tolerations) ? [] : [JSONPatch{op: "add", path: "/spec/tolerations", value: []}]) +
        [JSONPatch{op: "add", path: "/spec/tolerations/-", value: Object.spec.tolerations{key: "lockstep.dev/real-node", operator: "Exists", effect: "NoSchedule"}}] +
        (has(object.spec.nodeSelector) ? [] : [JSONPatch{op: "add", path: "/spec/nodeSelector", value: {}}]) +
        [JSONPatch{op: "add", path: "/spec/nodeSelector/" + jsonpatch.escapeKey("lockstep.dev/real-node"), value: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: lockstep-real-node-placement}
spec:
  policyName: lockstep-real-node-placement
  matchResources:
    namespaceSelector:
      matchLabels: {lockstep.dev/real-node: "true"}
EOF
}

# node_write_configs NODE_BIN: containerd, CNI, kubelet, kube-proxy, CoreDNS.
node_write_configs() {
  local bin="$1" etc="$NODE_STATE/etc"
  echo "$bin" >"$NODE_STATE/bin-dir"
  write_kubeconfig "$etc/kubelet.kubeconfig" kubelet-client
  write_kubeconfig "$etc/kube-proxy.kubeconfig" kube-proxy
  write_kubeconfig "$etc/coredns.kubeconfig" coredns
  cat >"$etc/containerd.toml" <<EOF
# containerd for the real node (tools/node/node.sh); paths are inside the node's
# mount namespace, where /run /var/lib /opt are $NODE_STATE/{run,varlib,opt}.
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  # The sandbox lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  # No hugetlb controller on this VM ("cannot set hugetlb limit").
  disable_hugetlb_controller = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$NODE_STATE/cni/net.d"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
  # Per-registry settings: the local registry's address and CA (tools/registry/lib.sh).
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$NODE_STATE/etc/certs.d"
EOF
  cat >"$NODE_STATE/cni/net.d/10-lockstep.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lockstep",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  printf 'nameserver %s\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' "$NODE_IP" >"$etc/resolv.conf"
  # No upstream resolver: the node's own resolv.conf points at CoreDNS, which
  # answers cluster.local only.
  cat >"$etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The VM has cgroup v1 only, and PID 1 is not systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /lockstep-node-$NODE_NET
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
resolvConf: $etc/resolv.conf
registerWithTaints:
- {key: lockstep.dev/real-node, value: "true", effect: NoSchedule}
failSwapOn: false
protectKernelDefaults: false
# Never garbage-collect the locally imported images (most are imported, not pulled).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
maxPods: 110
serializeImagePulls: false
# An image on the node serves any pod. Without this, the kubelet pulls again an image
# it has pulled once under another name (the same content imported as
# ghcr.io/lockstep-dev/operator:<version> and pulled from the local registry by the
# install test), to verify credentials: a pull from ghcr.io, which this node cannot
# reach.
imagePullCredentialsVerificationPolicy: NeverVerify
nodeStatusReportFrequency: 10s
EOF
  cat >"$etc/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
# This kernel has no IPVS; nftables rules live in the node's netns only.
mode: nftables
clientConnection: {kubeconfig: $etc/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the (global) conntrack table size and timeouts alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  cat >"$etc/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $etc/coredns.kubeconfig lockstep
        pods insecure
    }
    cache 5
}
EOF
}

# node_start_proc NAME CMD...: start CMD inside the node, detached, logged.
node_start_proc() {
  local name="$1"
  shift
  echo "+ $*" >"$LOGS/$name.log"
  setsid nsenter -t "$(cat "$PIDS/node-holder.pid")" -m -n -- \
    env PATH="$(cat "$NODE_STATE/bin-dir"):/usr/sbin:/usr/bin:/sbin:/bin" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  pid_record "$name" $!
}

# node_ctr ARGS...: ctr against the node's containerd, namespace k8s.io.
node_ctr() {
  in_node "$(cat "$NODE_STATE/bin-dir")/ctr" --address /run/containerd/containerd.sock -n k8s.io "$@"
}

# node_start_containerd: containerd, waiting for its socket (up to
# LOCKSTEP_NODE_START_SECONDS, 120: on a loaded 2-core machine it once took more than 20).
node_start_containerd() {
  local bin
  bin="$(cat "$NODE_STATE/bin-dir")"
  node_start_proc node-containerd "$bin/containerd" --config "$NODE_STATE/etc/containerd.toml"
  local wait=${LOCKSTEP_NODE_START_SECONDS:-120}
  local deadline=$((SECONDS + wait))
  while ((SECONDS < deadline)); do
    node_ctr version >/dev/null 2>&1 && return 0
    node_pid_alive node-containerd || break
    sleep 0.2
  done
  log "ERROR: containerd did not come up within ${wait} s"
  tail -n 20 "$LOGS/node-containerd.log" >&2
  return 1
}

# node_start_agents: kubelet, kube-proxy and CoreDNS.
node_start_agents() {
  local bin etc="$NODE_STATE/etc"
  bin="$(cat "$NODE_STATE/bin-dir")"
  # `env` execs the binary, so each recorded pid is the program's.
  node_start_proc node-kubelet "$bin/lockstep-node" kubelet \
    --config="$etc/kubelet.yaml" \
    --kubeconfig="$etc/kubelet.kubeconfig" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" \
    --node-labels="$NODE_LABEL_KEY=true,type=real" \
    --v=1
  node_start_proc node-kube-proxy "$bin/lockstep-node" kube-proxy --config="$etc/kube-proxy.yaml" --v=1
  node_start_proc node-coredns "$bin/coredns" -conf "$etc/Corefile"
}

# node_stop: stop every node process by pid (kubelet, kube-proxy, CoreDNS,
# containerd, the shims) and the containers by their cgroups; node_stop_net
# then removes the rest. Both are safe to call on a half-started node.
node_stop() {
  local h="" cgroot=""
  [ -f "$PIDS/node-holder.pid" ] && node_pid_alive node-holder && h="$(cat "$PIDS/node-holder.pid")"
  if node_env; then cgroot="$CGROUP_ROOT"; fi
  stop node-coredns
  stop node-kube-proxy
  stop node-kubelet
  # Containers: kill their tasks through containerd while it runs...
  if [ -n "$h" ] && node_pid_alive node-containerd; then
    local t
    for t in $(node_ctr tasks ls -q 2>/dev/null); do
      node_ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
  fi
  # ...and every process left in the node's cgroups (containers, by pid).
  if [ -n "$cgroot" ]; then
    local pid
    for _ in 1 2 3; do
      while read -r pid; do
        if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
      done < <(find /sys/fs/cgroup/*/"${cgroot#/}" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
      sleep 0.2
    done
  fi
  stop node-containerd
  # The shims (containerd-shim-runc-v2) run in the node's mount namespace.
  if [ -n "$h" ]; then
    local mnt p
    mnt="$(readlink "/proc/$h/ns/mnt")"
    for p in /proc/[0-9]*; do
      [ "${p#/proc/}" = "$h" ] && continue
      if [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$mnt" ]; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
    done
  fi
}

# node_stop_net: after the control plane stopped (the API server binds the
# veth address until then), end the namespaces and remove the veth pair and
# the cgroups.
node_stop_net() {
  local net="" cgroot=""
  if node_env; then cgroot="$CGROUP_ROOT" net="$NODE_IFACE"; fi
  stop node-holder
  # The veth pair goes with the netns; delete it in case something pinned it.
  if [ -n "$net" ] && ip link show "$net" >/dev/null 2>&1; then ip link del "$net" 2>/dev/null || true; fi
  if [ -n "$cgroot" ]; then
    local d
    for d in /sys/fs/cgroup/*/"${cgroot#/}"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    for d in /sys/fs/cgroup/*/"${cgroot#/}"; do
      [ -d "$d" ] && log "WARNING: cgroup $d is still there (a process in it did not die)"
    done
  fi
  return 0
}
