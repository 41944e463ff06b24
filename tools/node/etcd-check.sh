#!/usr/bin/env bash
# Exercise the etcd images on the real node the way a DistributedDB would run
# them, without the operator: the headless Service and StatefulSet are written
# here exactly as src/machines/distributeddb/render.rs renders them (env
# POD_NAME/DB_SERVICE/DB_REPLICAS, volume at /var/lib/data, OnDelete,
# Parallel), PLUS the placement (nodeSelector + toleration) and the readiness
# probe, as spec.placement and spec.readinessProbe render them. Then:
#   1. 3 members healthy;
#   2. a writer pod puts keys continuously through the Service while each
#      member, highest ordinal first, is upgraded 3.6 -> 3.7: pre-hook pod,
#      delete, post-hook pod;
#   3. every acknowledged write is readable, the cluster version is 3.7;
#   4. a backup pod (etcd-backup) uploads a snapshot to S3 (tools/node/s3.sh),
#      and a fresh etcd restored from it holds the keys.
# Prints "N passed, N failed"; leaves nothing behind (own namespace).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
. "$HERE/../cluster/lib.sh"

NS="lockstep-etcd-$$"
pass=0 failed=0
ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; }
k() { kctl -n "$NS" "$@"; }
node_pid_alive node-kubelet || { echo "no real node (make cluster-up)"; exit 1; }

"$REPO_ROOT/tools/images/load.sh" etcd-3.6 etcd-3.7 backup >/dev/null || { echo "cannot build/import the images"; exit 1; }
S3ENV="$("$HERE/s3.sh")" || { echo "cannot start the S3 server"; exit 1; }
set -a; eval "$S3ENV"; set +a
FROM="$("$REPO_ROOT/tools/images/build.sh" --name etcd-3.6)"
TO="$("$REPO_ROOT/tools/images/build.sh" --name etcd-3.7)"
BACKUP="$("$REPO_ROOT/tools/images/build.sh" --name backup)"
SVC="etcd.$NS.svc"
# spec.placement of examples/etcd.yaml, as rendered (one line of flow YAML each).
PLACEMENT="nodeSelector: {$NODE_LABEL_KEY: \"true\"}"
TOLERATION="tolerations: [{key: $NODE_LABEL_KEY, operator: Exists, effect: NoSchedule}]"
# restricted, as the namespace enforces: the images run as nonroot (65532), the
# volumes are its group's (the `local` class, to which the kubelet applies fsGroup).
POD_SC="securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}"
C_SC="securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}"

kctl create namespace "$NS" >/dev/null
kctl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null
cleanup() { kctl delete namespace "$NS" --wait=false >/dev/null 2>&1; }
trap cleanup EXIT
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: etcd}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: etcd}
  ports: [{name: client, port: 2379}, {name: peer, port: 2380}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: etcd}
spec:
  replicas: 3
  serviceName: etcd
  podManagementPolicy: Parallel
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: etcd}}
  template:
    metadata: {labels: {app: etcd}}
    spec:
      $PLACEMENT
      $TOLERATION
      $POD_SC
      containers:
      - name: db
        image: $FROM
        $C_SC
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: DB_SERVICE, value: $SVC}
        - {name: DB_REPLICAS, value: "3"}
        ports: [{name: client, containerPort: 2379}, {name: peer, containerPort: 2380}]
        readinessProbe:
          httpGet: {path: /readyz, port: 2379}
          periodSeconds: 1
        resources: {requests: {cpu: 100m, memory: 128Mi}}
        volumeMounts: [{name: data, mountPath: /var/lib/data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: local
      resources: {requests: {storage: 1Gi}}
EOF

# run_pod NAME IMAGE SCRIPT [ENV=VALUE...]: a one-shot pod on the real node;
# prints its log, returns its success.
run_pod() {
  local name="$1" image="$2" script="$3" env="" kv
  shift 3
  for kv in "$@"; do env+="
    - {name: ${kv%%=*}, value: \"${kv#*=}\"}"; done
  k apply -f - >/dev/null <<EOF || { echo "cannot create pod $name"; return 1; }
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  restartPolicy: Never
  $PLACEMENT
  $TOLERATION
  $POD_SC
  containers:
  - name: c
    image: $image
    $C_SC
    command: [/bin/bash, -c, '$script']
    env:
    - {name: PLACEHOLDER, value: "1"}$env
EOF
  local phase=""
  for _ in $(seq 1 400); do
    phase="$(k get pod "$name" -o jsonpath='{.status.phase}' 2>/dev/null)"
    [ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
    sleep 0.5
  done
  k logs "$name" 2>&1 | sed "s/^/    [$name] /"
  [ "$phase" = Succeeded ]
}

t0=$SECONDS
# (rollout status does not work with OnDelete.)
three_ready() { [ "$(k get statefulset etcd -o jsonpath='{.status.readyReplicas}')" = 3 ]; }
deadline=$((SECONDS + 180))
until three_ready || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
if three_ready; then
  ok "3 etcd $FROM members Ready on the real node in $((SECONDS - t0)) s"
else
  bad "etcd StatefulSet Ready: $(k get pods -o wide 2>&1)"
  k logs etcd-0 2>&1 | tail -5
fi
if run_pod health "$BACKUP" "etcdctl --endpoints=http://$SVC:2379 endpoint health --cluster && etcdctl --endpoints=http://$SVC:2379 member list -w table" >/dev/null; then
  ok "etcdctl endpoint health --cluster: all members healthy"
else
  bad "cluster health"
fi

# The writer: one key per put, through the Service name; logs "ack N" / "err N".
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  $PLACEMENT
  $TOLERATION
  $POD_SC
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: $BACKUP
    $C_SC
    command: [/bin/bash, -c]
    args:
    - |
      i=0
      while [ ! -f /tmp/stop ]; do
        i=\$((i + 1))
        if etcdctl --endpoints=http://$SVC:2379 --dial-timeout=1s --command-timeout=2s put key-\$i v\$i >/dev/null 2>&1; then
          echo "ack \$i \$(date +%s.%N)"
        else
          echo "err \$i \$(date +%s.%N)"
        fi
        sleep 0.05
      done
      echo done
      sleep infinity
EOF
k wait pod/writer --for=condition=Ready --timeout=60s >/dev/null

upgrade_ok=1
for ord in 2 1 0; do
  host="etcd-$ord.$SVC"
  if ! run_pod "pre-$ord" "$TO" etcd-pre-hook "TARGET_POD=etcd-$ord" "TARGET_HOST=$host" >/tmp/"$NS".hook 2>&1; then
    upgrade_ok=0; bad "pre-hook etcd-$ord"; cat /tmp/"$NS".hook; break
  fi
  grep -h 'leader\|quorum' /tmp/"$NS".hook | tail -2
  [ "$ord" = 2 ] && k patch statefulset etcd --type=json -p "[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/image\",\"value\":\"$TO\"}]" >/dev/null
  k delete pod "etcd-$ord" --wait=true >/dev/null
  t1=$SECONDS
  until [ "$(k get pod "etcd-$ord" -o jsonpath='{.spec.containers[0].image}/{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = "$TO/True" ]; do
    [ $((SECONDS - t1)) -lt 120 ] || break
    sleep 0.5
  done
  if ! run_pod "post-$ord" "$TO" etcd-post-hook "TARGET_POD=etcd-$ord" "TARGET_HOST=$host" >/tmp/"$NS".hook 2>&1; then
    upgrade_ok=0; bad "post-hook etcd-$ord"; cat /tmp/"$NS".hook; break
  fi
  grep -h 'ok:' /tmp/"$NS".hook | tail -1
  echo "#   etcd-$ord upgraded to $TO in $((SECONDS - t1)) s"
done
rm -f /tmp/"$NS".hook
[ "$upgrade_ok" = 1 ] && ok "rolling upgrade $FROM -> $TO with pre/post hooks, highest ordinal first"
k exec writer -- touch /tmp/stop
sleep 1
k logs writer >/tmp/"$NS".writer
acks="$(grep -c '^ack' /tmp/"$NS".writer)"
errs="$(grep -c '^err' /tmp/"$NS".writer)"
# every acknowledged key must be readable
missing="$(k exec etcd-0 -- sh -c "etcdctl get --prefix key- --keys-only | grep -c ." 2>/dev/null)"
lost=0
read_keys="$(k exec etcd-0 -- etcdctl get --prefix key- --keys-only 2>/dev/null | grep . | sort -u)"
while read -r _ n _; do
  grep -qx "key-$n" <<<"$read_keys" || lost=$((lost + 1))
done < <(grep '^ack' /tmp/"$NS".writer)
if [ "$acks" -gt 0 ] && [ "$lost" -eq 0 ]; then
  ok "writer: $acks writes acknowledged, $errs failed, $lost lost ($missing keys stored)"
else
  bad "writer: $acks acknowledged, $errs failed, $lost LOST"
fi
rm -f /tmp/"$NS".writer
vers="$(k exec etcd-0 -- etcdctl --endpoints="http://etcd-0.$SVC:2379,http://etcd-1.$SVC:2379,http://etcd-2.$SVC:2379" endpoint status -w fields 2>/dev/null | sed -n 's/^"Version" : "\(.*\)"$/\1/p' | sort -u | tr '\n' ' ')"
cluster_ver="$(k exec etcd-0 -- curl -s http://localhost:2379/version 2>/dev/null)"
if [[ "$vers" == "3.7.3 " && "$cluster_ver" == *'"etcdcluster":"3.7.0"'* ]]; then
  ok "all members at 3.7.3, cluster version 3.7.0 ($cluster_ver)"
else
  bad "versions after upgrade: members '$vers', cluster $cluster_ver"
fi

# Backup to S3 as the DistributedDB backup Job would run it, then restore.
bk="etcd-backup-check-$$"
if run_pod backup "$BACKUP" etcd-backup "BACKUP_SOURCE=$SVC" "BACKUP_NAME=$bk" BACKUP_KIND=on-demand \
  "S3_ENDPOINT=$S3_ENDPOINT" S3_BUCKET=etcd-backups S3_PREFIX=check/ BACKUP_RETENTION=5 \
  "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" >/tmp/"$NS".bk 2>&1; then
  # The key is check/<BACKUP_NAME>-<UTC time>.db; list it from this machine.
  bkey="$(S3_ENDPOINT="$S3_HOST_ENDPOINT" "$REPO_ROOT/tools/images/backup/s3" ls etcd-backups "check/$bk-" | head -1)"
  size="$(S3_ENDPOINT="$S3_HOST_ENDPOINT" "$REPO_ROOT/tools/images/backup/s3" get "etcd-backups/$bkey" /dev/stdout | wc -c)"
  if [ -n "$bkey" ] && [ "${size:-0}" -gt 0 ]; then ok "backup: s3://etcd-backups/$bkey ($size bytes, read from this machine)"; else bad "backup object not in S3 ('$bkey')"; fi
else
  bad "backup pod"; cat /tmp/"$NS".bk
fi
rm -f /tmp/"$NS".bk
last="$(grep '^ack' <<<"$(k logs writer)" | tail -1 | awk '{print $2}')"
restore="set -e; s3 get etcd-backups/${bkey:-none} /tmp/s.db; etcdutl snapshot restore /tmp/s.db --data-dir /tmp/r --name r --initial-cluster r=http://localhost:2380 --initial-advertise-peer-urls http://localhost:2380 >/dev/null; etcd --data-dir /tmp/r --name r --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 >/tmp/etcd.log 2>&1 & for i in \$(seq 1 60); do etcdctl endpoint health >/dev/null 2>&1 && break; sleep 0.5; done; echo restored-keys \$(etcdctl get --prefix key- --keys-only | grep -c .); etcdctl get key-$last --print-value-only"
if run_pod restore "$TO" "$restore" "S3_ENDPOINT=$S3_ENDPOINT" "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" >/tmp/"$NS".rs 2>&1 &&
  grep -q "v$last" /tmp/"$NS".rs; then
  ok "restore: a fresh etcd from the snapshot holds the keys ($(grep -o 'restored-keys [0-9]*' /tmp/"$NS".rs), key-$last = v$last)"
else
  bad "restore from the snapshot"; cat /tmp/"$NS".rs
fi
rm -f /tmp/"$NS".rs
echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
