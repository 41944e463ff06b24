# shellcheck shell=bash
# Shared by the etcd entrypoint, hooks, restore and backup: endpoints from the
# hook/backup env.
#   TARGET_HOST  <set>-<i>.<set>.<namespace>.svc (hooks)
#   BACKUP_SOURCE <set>.<namespace>.svc (backups)
#   DB_TLS_DIR   the DistributedDB's certificates (spec.tls): ca.crt, client.crt
#                and client.key everywhere, tls.crt and tls.key in the members
# With DB_TLS_DIR, every URL is https and etcdctl presents the client
# certificate (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY); without it, http.
if [ -n "${DB_TLS_DIR:-}" ]; then
  scheme=https
  export ETCDCTL_CACERT="$DB_TLS_DIR/ca.crt" ETCDCTL_CERT="$DB_TLS_DIR/client.crt" ETCDCTL_KEY="$DB_TLS_DIR/client.key"
else
  scheme=http
fi
export scheme

# etcd_curl PATH: GET https?://localhost:2379/PATH (with the client certificate).
etcd_curl() {
  if [ "$scheme" = https ]; then
    curl -s --cacert "$ETCDCTL_CACERT" --cert "$ETCDCTL_CERT" --key "$ETCDCTL_KEY" "https://localhost:2379/$1"
  else
    curl -s "http://localhost:2379/$1"
  fi
}

# status_field ENDPOINT FIELD: one field of `etcdctl endpoint status -w fields`.
status_field() {
  etcdctl --endpoints="$1" --command-timeout=5s endpoint status -w fields 2>/dev/null |
    sed -n "s/^\"$2\" : \"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" | head -1
}

# member_endpoints SERVICE: the client URL of every member (from member list).
member_endpoints() {
  etcdctl --endpoints="$scheme://$1:2379" --command-timeout=5s member list -w simple |
    awk -F', ' '{print $5}'
}

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# running_members: the running cluster's member list (`etcdctl member list -w
# simple`), from the first member other than this pod (POD_NAME, of DB_REPLICAS
# behind DB_SERVICE) that answers; fails if none does.
running_members() {
  local i set_name="${POD_NAME%-*}"
  for i in $(seq 0 $((DB_REPLICAS - 1))); do
    [ "$set_name-$i" = "$POD_NAME" ] && continue
    etcdctl --endpoints="$scheme://$set_name-$i.$DB_SERVICE:2379" --dial-timeout=1s \
      --command-timeout=3s member list -w simple 2>/dev/null && return 0
  done
  return 1
}

# member_status URL: this peer URL's status in the member list on stdin
# (started, unstarted), or nothing if it is not listed.
member_status() { awk -F', ' -v url="$1" '$4 == url {print $2}'; }
