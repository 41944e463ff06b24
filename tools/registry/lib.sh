# shellcheck shell=bash disable=SC2034
# The local cluster's image registry: the CNCF distribution registry as a host
# process, started by tools/cluster/up.sh with the real node. Sourced by
# tools/cluster/lib.sh (needs CLUSTER_DIR, PKI, PIDS, NODE_STATE).
#
# It listens on the host end of the node's veth pair (HOST_IP, 10.250.N.1) at a
# free port: the host pushes there, and the node's containerd pulls from there
# (the node routes to HOST_IP over its eth0). It serves TLS with a certificate
# signed by the cluster's CA (its subject names HOST_IP), which containerd
# trusts through certs.d/<host:port>/hosts.toml and the host's clients through
# SSL_CERT_DIR=$REGISTRY_STATE/ca (tools/registry/push.sh sets it). It asks for
# no credentials: only this machine and the node reach HOST_IP.
#
# Layout while up (REGISTRY_STATE = $CLUSTER_DIR/registry):
#   config.yml   the registry's configuration
#   data/        its storage (filesystem driver); removed with the cluster
#   ca/ca.crt    the cluster's CA, alone in a directory (for SSL_CERT_DIR)
#   address      host:port, what `tools/registry/registry.sh address` prints

REGISTRY_TOOLS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REGISTRY_STATE="$CLUSTER_DIR/registry"
# Where the node's containerd reads per-registry settings (its config_path).
REGISTRY_CERTS_D="$NODE_STATE/etc/certs.d"

# registry_certs: the registry's serving certificate (run in $PKI with up.sh's sign).
registry_certs() {
  sign registry "/CN=lockstep-registry" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:$HOST_IP"
}

# registry_address: host:port of the running cluster's registry; fails if none.
registry_address() {
  [ -s "$REGISTRY_STATE/address" ] || return 1
  cat "$REGISTRY_STATE/address"
}

# registry_healthy: the registry answers the distribution API over TLS.
registry_healthy() {
  local addr
  addr="$(registry_address)" || return 1
  curl -fsS --max-time 3 --cacert "$REGISTRY_STATE/ca/ca.crt" -o /dev/null "https://$addr/v2/"
}

# registry_write_configs BIN PORT: the registry's configuration and containerd's
# hosts.toml for it; records the address. HOST_IP is set (node_net_up).
registry_write_configs() {
  local bin="$1" addr="$HOST_IP:$2"
  mkdir -p "$REGISTRY_STATE/data" "$REGISTRY_STATE/ca" "$REGISTRY_CERTS_D/$addr"
  echo "$bin" >"$REGISTRY_STATE/bin-dir"
  cp "$PKI/ca.crt" "$REGISTRY_STATE/ca/ca.crt"
  cat >"$REGISTRY_STATE/config.yml" <<EOF
# The local cluster's registry (tools/registry/lib.sh).
version: 0.1
log:
  level: info
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $REGISTRY_STATE/data}
  delete: {enabled: true}
http:
  addr: $addr
  tls:
    certificate: $PKI/registry.crt
    key: $PKI/registry.key
EOF
  cat >"$REGISTRY_CERTS_D/$addr/hosts.toml" <<EOF
# The local cluster's registry (tools/registry/lib.sh): TLS, signed by the cluster's CA.
server = "https://$addr"

[host."https://$addr"]
  capabilities = ["pull", "resolve"]
  ca = "$PKI/ca.crt"
EOF
  echo "$addr" >"$REGISTRY_STATE/address"
}

# registry_start: start the registry (with up.sh's start: pid and log under the
# cluster's state). It exports traces over OTLP unless told not to, and nothing
# here receives them.
registry_start() {
  start registry env OTEL_TRACES_EXPORTER=none "$(cat "$REGISTRY_STATE/bin-dir")/registry" \
    serve "$REGISTRY_STATE/config.yml"
}
