#!/usr/bin/env bash
# A real S3 server in the local cluster: versitygw (POSIX backend, SigV4
# checked) as a pod on the real node, behind the Service s3.lockstep-s3.svc: plain
# HTTP on port 80 (the dump Jobs) and TLS on 443 (pgBackRest, which speaks only TLS),
# both serving the same objects. The TLS certificate comes from a CA made here once per
# cluster ($CLUSTER_DIR/s3-tls/ca.crt; the Secret lockstep-s3/s3-ca holds it as ca.crt
# for spec.backup.walArchive.caSecret once copied to a cluster's namespace).
# Idempotent; builds and imports the image if needed; waits until it answers.
#
#   tools/node/s3.sh           deploy (or check), print the endpoints as env lines
#   tools/node/s3.sh --print   print the endpoints of the running server only
#
# Output (also written to $CLUSTER_DIR/s3.env):
#   S3_ENDPOINT=http://s3.lockstep-s3.svc       from pods
#   S3_HOST_ENDPOINT=http://<pod IP>:7070       from this machine (routed to the node)
#   S3_TLS_ENDPOINT=https://s3.lockstep-s3.svc  from pods, TLS (pgBackRest)
#   S3_CA_FILE=<cluster dir>/s3-tls/ca.crt      the CA that verifies it
#   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...  (also in Secret lockstep-s3/s3-credentials)
# Objects live in the pod's emptyDir: they go with the cluster.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
. "$HERE/../cluster/lib.sh"

NS=lockstep-s3
TLS_DIR="$CLUSTER_DIR/s3-tls"
ACCESS=lockstep
SECRET=lockstep-s3-secret
print_env() {
  local ip
  ip="$(kctl -n "$NS" get pod -l app=s3 --field-selector=status.phase=Running -o jsonpath='{.items[0].status.podIP}')"
  [ -n "$ip" ] || return 1
  cat <<EOF
S3_ENDPOINT=http://s3.$NS.svc
S3_HOST_ENDPOINT=http://$ip:7070
S3_TLS_ENDPOINT=https://s3.$NS.svc
S3_CA_FILE=$TLS_DIR/ca.crt
AWS_ACCESS_KEY_ID=$ACCESS
AWS_SECRET_ACCESS_KEY=$SECRET
AWS_REGION=us-east-1
EOF
}
if [ "${1:-}" = --print ]; then print_env; exit; fi

node_pid_alive node-kubelet || { echo "s3.sh: no real node running (make cluster-up)" >&2; exit 1; }
# Two tests may deploy at once (the e2e tiers run two at a time): one deploy per cluster
# at a time, so that no create races another's (AlreadyExists); the second finds
# everything in place.
exec 9>"$CLUSTER_DIR/s3.lock"
flock 9
"$REPO_ROOT/tools/images/load.sh" s3 >&2
IMAGE="$("$REPO_ROOT/tools/images/build.sh" --name s3)"
# The TLS port's certificate, from a CA of this cluster's own (made once: made aside, then
# renamed into place, so that two runs at once both use the one that landed first).
if [ ! -s "$TLS_DIR/tls.crt" ]; then
  made="$TLS_DIR.$$"
  rm -rf "$made"
  mkdir -p "$made"
  (
    cd "$made"
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=lockstep-s3-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=s3 -keyout tls.key -out tls.csr 2>/dev/null
    echo "subjectAltName=DNS:s3.$NS.svc,DNS:s3.$NS.svc.cluster.local" >ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
      -extfile ext -out tls.crt 2>/dev/null
  ) || { echo "s3.sh: openssl could not make the TLS certificate" >&2; exit 1; }
  mv -T "$made" "$TLS_DIR" 2>/dev/null || rm -rf "$made"
  [ -s "$TLS_DIR/tls.crt" ] || { echo "s3.sh: no certificate in $TLS_DIR" >&2; exit 1; }
fi
kctl create namespace "$NS" --dry-run=client -o yaml | kctl apply -f - >/dev/null
kctl -n "$NS" create secret generic s3-tls --from-file="$TLS_DIR/tls.crt" \
  --from-file="$TLS_DIR/tls.key" --dry-run=client -o yaml | kctl apply -f - >/dev/null
kctl -n "$NS" create secret generic s3-ca --from-file="$TLS_DIR/ca.crt" \
  --dry-run=client -o yaml | kctl apply -f - >/dev/null
kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS, labels: {pod-security.kubernetes.io/enforce: restricted}}
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
      # restricted (the namespace enforces it): a non-root user owning the data volume.
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: s3
        image: $IMAGE
        imagePullPolicy: IfNotPresent
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        args: [--port, ":7070", posix, /data]
        env:
        - {name: ROOT_ACCESS_KEY, valueFrom: {secretKeyRef: {name: s3-credentials, key: accessKey}}}
        - {name: ROOT_SECRET_KEY, valueFrom: {secretKeyRef: {name: s3-credentials, key: secretKey}}}
        ports: [{name: s3, containerPort: 7070}]
        readinessProbe:
          tcpSocket: {port: 7070}
          periodSeconds: 1
        volumeMounts: [{name: data, mountPath: /data}]
      - name: s3-tls
        image: $IMAGE
        imagePullPolicy: IfNotPresent
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        args: [--port, ":7443", --cert, /tls/tls.crt, --key, /tls/tls.key, posix, /data]
        env:
        - {name: ROOT_ACCESS_KEY, valueFrom: {secretKeyRef: {name: s3-credentials, key: accessKey}}}
        - {name: ROOT_SECRET_KEY, valueFrom: {secretKeyRef: {name: s3-credentials, key: secretKey}}}
        ports: [{name: s3-tls, containerPort: 7443}]
        readinessProbe:
          tcpSocket: {port: 7443}
          periodSeconds: 1
        volumeMounts: [{name: data, mountPath: /data}, {name: tls, mountPath: /tls, readOnly: true}]
      volumes: [{name: data, emptyDir: {}}, {name: tls, secret: {secretName: s3-tls}}]
---
apiVersion: v1
kind: Service
metadata: {name: s3, namespace: $NS}
spec:
  selector: {app: s3}
  ports: [{name: s3, port: 80, targetPort: 7070}, {name: s3-tls, port: 443, targetPort: 7443}]
EOF
kctl -n "$NS" rollout status deployment/s3 --timeout=120s >&2
print_env | tee "$CLUSTER_DIR/s3.env"
