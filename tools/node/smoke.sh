#!/usr/bin/env bash
# Smoke check of the real node (make node-smoke), against a running cluster:
#   - a pod that tolerates the node's taint runs a real container there, and
#     one that does not lands on a KWOK node;
#   - from inside the pod: DNS (CoreDNS) resolves Services, and the
#     `kubernetes` Service (kube-proxy + the endpoint reconciler) reaches the
#     API server;
#   - kubectl logs and kubectl exec work (apiserver -> kubelet);
#   - a plain pod in a namespace labelled lockstep.dev/real-node=true is put
#     on the real node (the MutatingAdmissionPolicy of tools/node/node.sh);
#   - the S3 server (tools/node/s3.sh) stores an object uploaded from a pod,
#     and this machine reads the same bytes back;
#   - containerd pulls from the cluster's registry (tools/registry): the pause
#     image, pushed under a fresh tag, runs in a pod with imagePullPolicy: Always,
#     and the pod's image ID names the registry's digest;
#   - the API server runs PodSecurity admission: the namespace is labelled
#     `pod-security.kubernetes.io/enforce: restricted`, its pods meet it, and a
#     pod that does not is refused, the API server naming the fields.
# Works in its own namespace and deletes it at the end. Prints "N passed, N failed".
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
. "$HERE/../cluster/lib.sh"

NS="lockstep-smoke-$$"
pass=0 failed=0
ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; }
k() { kctl -n "$NS" "$@"; }
until_ok() { # SECONDS CMD...: retry CMD every 0.5 s
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}
[ -f "$KUBECONFIG_ADMIN" ] || { echo "cluster is not up (no $KUBECONFIG_ADMIN)"; exit 1; }
node_pid_alive node-kubelet || { echo "no real node (LOCKSTEP_REAL_NODE=0?)"; exit 1; }

t0=$SECONDS
"$REPO_ROOT/tools/images/load.sh" backup >/dev/null || { echo "cannot build/import the backup image"; exit 1; }
S3ENV="$("$HERE/s3.sh")" || { echo "cannot start the S3 server"; exit 1; }
set -a; eval "$S3ENV"; set +a
echo "# images and S3 ready in $((SECONDS - t0)) s"
CLIENT_IMAGE="$("$REPO_ROOT/tools/images/build.sh" --name backup)"

kctl create namespace "$NS" >/dev/null
kctl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null
until_ok 30 k get serviceaccount default
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {app: client}}
spec:
  nodeSelector: {$NODE_LABEL_KEY: "true"}
  tolerations: [{key: $NODE_LABEL_KEY, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: $CLIENT_IMAGE
    imagePullPolicy: IfNotPresent
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    command: [/bin/sh, -c, 'echo smoke-marker-\$(hostname); exec sleep infinity']
    env:
    - {name: S3_ENDPOINT, value: "$S3_ENDPOINT"}
    - {name: AWS_ACCESS_KEY_ID, value: "$AWS_ACCESS_KEY_ID"}
    - {name: AWS_SECRET_ACCESS_KEY, value: "$AWS_SECRET_ACCESS_KEY"}
---
apiVersion: v1
kind: Service
metadata: {name: client}
spec:
  selector: {app: client}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: fake}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: example.invalid/never-pulled:1
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF

# PodSecurity admission: a pod without the restricted context is refused, by name of field.
refused="$(k run root --image="$CLIENT_IMAGE" --restart=Never --command -- /bin/true 2>&1)"
if [[ "$refused" == *'violates PodSecurity "restricted'*allowPrivilegeEscalation* ]]; then
  ok "a pod that is not restricted is refused in a restricted namespace: ${refused:0:160}..."
else
  bad "PodSecurity admission: a plain pod in a restricted namespace gave: $refused"
  k delete pod root --wait=false >/dev/null 2>&1
fi

t1=$SECONDS
if k wait pod/client --for=condition=Ready --timeout=90s >/dev/null 2>&1; then
  ok "a real pod is Ready on $(k get pod client -o jsonpath='{.spec.nodeName}') in $((SECONDS - t1)) s (ip $(k get pod client -o jsonpath='{.status.podIP}'))"
else
  bad "pod client Ready on the real node: $(k get pod client -o wide --no-headers 2>&1); $(k describe pod client | tail -5)"
fi
# The registry: a tag that exists nowhere but there, pulled by the node's containerd.
reg_tag="smoke-$$-$RANDOM"
reg_digest="$("$REPO_ROOT/tools/registry/push.sh" --tag "$reg_tag" pause 2>&1 | awk '{print $NF}')"
reg_image="$("$REPO_ROOT/tools/registry/registry.sh" address)/lockstep-dev/pause:$reg_tag"
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: pulled}
spec:
  nodeSelector: {$NODE_LABEL_KEY: "true"}
  tolerations: [{key: $NODE_LABEL_KEY, operator: Exists, effect: NoSchedule}]
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65535, runAsGroup: 65535, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: $reg_image
    imagePullPolicy: Always
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF
t1=$SECONDS
if k wait pod/pulled --for=condition=Ready --timeout=60s >/dev/null 2>&1; then
  image_id="$(k get pod pulled -o jsonpath='{.status.containerStatuses[0].imageID}')"
  if [ "$image_id" = "$reg_digest" ]; then
    ok "containerd pulled $reg_image from the registry (imagePullPolicy: Always), Running in $((SECONDS - t1)) s as $image_id"
  else
    bad "pod pulled: image ID $image_id, pushed $reg_digest"
  fi
else
  bad "pod pulled ($reg_image, pushed: $reg_digest): $(k get pod pulled --no-headers 2>&1); $(k get events --field-selector involvedObject.name=pulled -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>&1 | tail -3)"
fi
k delete pod pulled --wait=false >/dev/null 2>&1

fake_node() { [[ "$(k get pod fake -o jsonpath='{.spec.nodeName}')" == kwok-node-* ]] && [ "$(k get pod fake -o jsonpath='{.status.phase}')" = Running ]; }
if until_ok 30 fake_node; then ok "a pod without the toleration runs on KWOK ($(k get pod fake -o jsonpath='{.spec.nodeName}'))"; else bad "pod fake on a KWOK node"; fi

# A namespace labelled lockstep.dev/real-node=true places plain pods on the real node.
kctl create namespace "$NS-placed" >/dev/null
kctl label namespace "$NS-placed" "$NODE_LABEL_KEY=true" >/dev/null
until_ok 30 kctl -n "$NS-placed" get serviceaccount default
kctl -n "$NS-placed" run plain --image="$CLIENT_IMAGE" --restart=Never --command -- /bin/true >/dev/null
placed() { [ "$(kctl -n "$NS-placed" get pod plain -o jsonpath='{.spec.nodeName}/{.status.phase}')" = "$NODE_NAME/Succeeded" ]; }
if until_ok 60 placed; then
  ok "a plain pod in a namespace labelled $NODE_LABEL_KEY=true ran on $NODE_NAME (MutatingAdmissionPolicy)"
else
  bad "placement by namespace label: $(kctl -n "$NS-placed" get pod plain -o wide --no-headers 2>&1)"
fi
kctl delete namespace "$NS-placed" --wait=false >/dev/null 2>&1

logs_ok() { k logs client | grep -q smoke-marker-client; }
if until_ok 20 logs_ok; then
  ok "kubectl logs: $(k logs client | head -1)"
else
  bad "kubectl logs client: $(k logs client 2>&1 | tail -2)"
fi
out="$(k exec client -- cat /etc/os-release 2>&1 | grep PRETTY_NAME)"
if [ -n "$out" ]; then ok "kubectl exec: $out"; else bad "kubectl exec: $(k exec client -- true 2>&1)"; fi

svc_ip="$(k get svc client -o jsonpath='{.spec.clusterIP}')"
dns_ok() { [ "$(k exec client -- getent hosts "client.$NS.svc.cluster.local" | awk '{print $1}')" = "$svc_ip" ]; }
if until_ok 20 dns_ok; then ok "DNS: client.$NS.svc.cluster.local -> $svc_ip"; else bad "DNS: $(k exec client -- getent hosts "client.$NS.svc.cluster.local" 2>&1) (want $svc_ip)"; fi
short="$(k exec client -- getent hosts kubernetes.default 2>&1 | awk '{print $1}')"
if [ "$short" = 10.0.0.1 ]; then ok "DNS search path: kubernetes.default -> $short"; else bad "DNS kubernetes.default: '$short'"; fi
ver="$(k exec client -- curl -sS --max-time 5 --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt https://kubernetes.default.svc/version 2>&1 | grep gitVersion)"
if [[ "$ver" == *v1.37.2* ]]; then ok "the kubernetes Service reaches the API server from a pod: $(echo "$ver" | tr -d ' ,')"; else bad "https://kubernetes.default.svc/version from a pod: $ver"; fi

key="smoke/$NS.bin"
if k exec client -- sh -ec "head -c 1048576 /dev/urandom >/tmp/obj && s3 mb smoke && s3 put smoke/$key /tmp/obj && sha256sum </tmp/obj" >"/tmp/$NS.sha" 2>&1; then
  want="$(cut -d' ' -f1 "/tmp/$NS.sha")"
  got="$(curl -sS --max-time 10 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "$S3_HOST_ENDPOINT/smoke/$key" | sha256sum | cut -d' ' -f1)"
  if [ "$want" = "$got" ]; then ok "S3: 1 MiB put from a pod via $S3_ENDPOINT, read back from this machine via $S3_HOST_ENDPOINT (sha256 ${want:0:12})"; else bad "S3 read-back: $want != $got"; fi
  bad_sig="$(k exec client -- curl -sS --max-time 5 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:wrong" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "$S3_ENDPOINT/smoke/$key" 2>&1 | grep -o -m1 'SignatureDoesNotMatch\|AccessDenied\|InvalidAccessKeyId')"
  if [ -n "$bad_sig" ]; then ok "S3 rejects a wrong secret ($bad_sig)"; else bad "S3 accepted a wrong secret"; fi
else
  bad "S3 upload from a pod: $(tail -3 "/tmp/$NS.sha")"
fi
rm -f "/tmp/$NS.sha"

kctl delete namespace "$NS" --wait=false >/dev/null 2>&1
echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
