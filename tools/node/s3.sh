#!/usr/bin/env bash
# A real S3 server in the local cluster: versitygw (POSIX backend, SigV4
# checked) as a pod on the real node, behind the Service s3.lockstep-s3.svc:80.
# Idempotent; builds and imports the image if needed; waits until it answers.
#
#   tools/node/s3.sh           deploy (or check), print the endpoints as env lines
#   tools/node/s3.sh --print   print the endpoints of the running server only
#
# Output (also written to $CLUSTER_DIR/s3.env):
#   S3_ENDPOINT=http://s3.lockstep-s3.svc       from pods
#   S3_HOST_ENDPOINT=http://<pod IP>:7070       from this machine (routed to the node)
#   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...  (also in Secret lockstep-s3/s3-credentials)
# Objects live in the pod's emptyDir: they go with the cluster.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
. "$HERE/../cluster/lib.sh"

NS=lockstep-s3
ACCESS=lockstep
SECRET=lockstep-s3-secret
print_env() {
  local ip
  ip="$(kctl -n "$NS" get pod -l app=s3 --field-selector=status.phase=Running -o jsonpath='{.items[0].status.podIP}')"
  [ -n "$ip" ] || return 1
  cat <<EOF
S3_ENDPOINT=http://s3.$NS.svc
S3_HOST_ENDPOINT=http://$ip:7070
AWS_ACCESS_KEY_ID=$ACCESS
AWS_SECRET_ACCESS_KEY=$SECRET
AWS_REGION=us-east-1
EOF
}
if [ "${1:-}" = --print ]; then print_env; exit; fi

node_pid_alive node-kubelet || { echo "s3.sh: no real node running (make cluster-up)" >&2; exit 1; }
"$REPO_ROOT/tools/images/load.sh" s3 >&2
IMAGE="$("$REPO_ROOT/tools/images/build.sh" --name s3)"
kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: v1
kind: Secret
metadata: {name: s3-credentials, namespace: $NS}
stringData: {accessKey: $ACCESS, secretKey: $SECRET}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: s3, namespace: $NS}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: s3}}
  template:
    metadata: {labels: {app: s3}}
    spec:
      nodeSelector: {$NODE_LABEL_KEY: "true"}
      tolerations: [{key: $NODE_LABEL_KEY, operator: Exists, effect: NoSchedule}]
      containers:
      - name: s3
        image: $IMAGE
        imagePullPolicy: IfNotPresent
        args: [--port, ":7070", posix, /data]
        env:
        - {name: ROOT_ACCESS_KEY, valueFrom: {secretKeyRef: {name: s3-credentials, key: accessKey}}}
        - {name: ROOT_SECRET_KEY, valueFrom: {secretKeyRef: {name: s3-credentials, key: secretKey}}}
        ports: [{name: s3, containerPort: 7070}]
        readinessProbe:
          tcpSocket: {port: 7070}
          periodSeconds: 1
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: s3, namespace: $NS}
spec:
  selector: {app: s3}
  ports: [{name: s3, port: 80, targetPort: 7070}]
EOF
kctl -n "$NS" rollout status deployment/s3 --timeout=120s >&2
print_env | tee "$CLUSTER_DIR/s3.env"
