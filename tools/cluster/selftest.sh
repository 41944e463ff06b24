#!/usr/bin/env bash
# Check the behaviours tests rely on, against a running cluster (make cluster-up):
# 3 Ready nodes; a 3-replica StatefulSet with a volumeClaimTemplate gets 3 Ready
# pods and Bound PVCs; a deleted pod is recreated; a Job completes; a Job with
# lockstep.dev/kwok-fail=true fails; lockstep.dev/kwok-notready toggles
# readiness; an "expandable" PVC resize completes; RBAC denies an unbound SA.
# Works in its own namespace and deletes it at the end. Prints "N passed, N failed".
set -uo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NS="lockstep-selftest-$$"
pass=0 failed=0
ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; }
k() { kctl -n "$NS" "$@"; }
# until_ok SECONDS CMD...: retry CMD every 0.5 s
until_ok() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

[ -f "$KUBECONFIG_ADMIN" ] || { echo "cluster is not up (no $KUBECONFIG_ADMIN)"; exit 1; }

ready_nodes() { [ "$(kctl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)" -ge 3 ]; }
if ready_nodes; then ok "3 nodes Ready"; else bad "3 nodes Ready"; fi
if [ "$(kctl version -o json | grep -c '"gitVersion": "v1.37.2"')" -ge 2 ]; then ok "client and server report v1.37.2"; else bad "version v1.37.2"; fi

kctl create namespace "$NS" >/dev/null
until_ok 30 k get serviceaccount default

k apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: example.invalid/db:1}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: good}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: example.invalid/job:1}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: doomed}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {lockstep.dev/kwok-fail: "true"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: example.invalid/job:1}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: grow}
spec:
  storageClassName: expandable
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
EOF

sts_ready() { [ "$(k get sts db -o jsonpath='{.status.readyReplicas}')" = 3 ]; }
if until_ok 60 sts_ready; then ok "StatefulSet: 3 Ready pods"; else bad "StatefulSet: 3 Ready pods"; fi
pvcs_bound() { [ "$(k get pvc -l app=db -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c Bound)" = 3 ]; }
if until_ok 30 pvcs_bound; then ok "StatefulSet: 3 Bound PVCs"; else bad "StatefulSet: 3 Bound PVCs"; fi

job_cond() { [ "$(k get job "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}")" = True ]; }
if until_ok 60 job_cond good Complete; then ok "Job completes"; else bad "Job completes"; fi
if until_ok 60 job_cond doomed Failed; then ok "Job with lockstep.dev/kwok-fail=true fails"; else bad "Job with kwok-fail fails"; fi
code="$(k get pods -l job-name=doomed -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}')"
if [ "$code" = 1 ]; then ok "failed pod: exit code 1"; else bad "failed pod: exit code 1 (got '$code')"; fi

pod_ready() { [ "$(k get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = "$2" ]; }
k label pod db-1 lockstep.dev/kwok-notready=true >/dev/null
if until_ok 15 pod_ready db-1 False; then ok "kwok-notready label: pod NotReady"; else bad "kwok-notready: pod NotReady"; fi
k label pod db-1 lockstep.dev/kwok-notready- >/dev/null
if until_ok 15 pod_ready db-1 True; then ok "label removed: pod Ready again"; else bad "label removed: pod Ready again"; fi

old_uid="$(k get pod db-2 -o jsonpath='{.metadata.uid}')"
k delete pod db-2 --wait=false >/dev/null
recreated() { local u; u="$(k get pod db-2 -o jsonpath='{.metadata.uid}')" && [ -n "$u" ] && [ "$u" != "$old_uid" ] && pod_ready db-2 True; }
if until_ok 30 recreated; then ok "deleted StatefulSet pod recreated and Ready"; else bad "deleted pod recreated"; fi

grow_bound() { [ "$(k get pvc grow -o jsonpath='{.status.phase}')" = Bound ]; }
until_ok 30 grow_bound
k patch pvc grow -p '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}' >/dev/null
grown() { [ "$(k get pvc grow -o jsonpath='{.status.capacity.storage}')" = 2Gi ]; }
if until_ok 30 grown; then ok "expandable PVC resized to 2Gi"; else bad "expandable PVC resize"; fi

k apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: slow
  annotations:
    lockstep.dev/kwok-ready-delay-ms: "3000"
    lockstep.dev/kwok-ready-jitter-ms: "0"
    lockstep.dev/kwok-delete-delay-ms: "3000"
spec:
  containers: [{name: c, image: example.invalid/x:1}]
EOF
scheduled() { [ -n "$(k get pod slow -o jsonpath='{.spec.nodeName}')" ]; }
until_ok 15 scheduled
sleep 1.5
early="$(k get pod slow -o jsonpath='{.status.phase}')"
if [ "$early" = Pending ] && until_ok 10 pod_ready slow True; then ok "kwok-ready-delay-ms delays readiness"; else bad "kwok-ready-delay-ms (phase at 1.5 s: $early)"; fi
k delete pod slow --wait=false >/dev/null
sleep 1.5
gone() { ! k get pod slow; }
if k get pod slow >/dev/null 2>&1 && until_ok 10 gone; then
  ok "kwok-delete-delay-ms keeps the pod Terminating, then removes it"
else
  bad "kwok-delete-delay-ms"
fi

k create serviceaccount nobody >/dev/null
if [ "$(kctl auth can-i list pods -n "$NS" --as="system:serviceaccount:$NS:nobody")" = no ]; then ok "RBAC: unbound ServiceAccount denied"; else bad "RBAC denies"; fi
token="$(k create token nobody 2>/dev/null)"
server="$(kctl config view -o jsonpath='{.clusters[0].cluster.server}')"
if [ -n "$token" ] && "$CLUSTER_DIR/bin/kubectl" --kubeconfig=/dev/null --server="$server" \
  --certificate-authority="$PKI/ca.crt" --token="$token" auth whoami -o jsonpath='{.status.userInfo.username}' 2>/dev/null |
  grep -q "system:serviceaccount:$NS:nobody"; then
  ok "TokenRequest token authenticates"
else
  bad "TokenRequest token authenticates"
fi

kctl delete namespace "$NS" --wait=false >/dev/null
echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
