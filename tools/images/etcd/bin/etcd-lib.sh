# shellcheck shell=bash
# Shared by the etcd hooks and the backup: endpoints from the hook/backup env.
#   TARGET_HOST  <set>-<i>.<set>.<namespace>.svc (hooks)
#   BACKUP_SOURCE <set>.<namespace>.svc (backups)

# status_field ENDPOINT FIELD: one field of `etcdctl endpoint status -w fields`.
status_field() {
  etcdctl --endpoints="$1" --command-timeout=5s endpoint status -w fields 2>/dev/null |
    sed -n "s/^\"$2\" : \"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" | head -1
}

# member_endpoints SERVICE: the client URL of every member (from member list).
member_endpoints() {
  etcdctl --endpoints="http://$1:2379" --command-timeout=5s member list -w simple |
    awk -F', ' '{print $5}'
}

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
