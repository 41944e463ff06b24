{{/* The name of every object: the release's, unless it already says lockstep. */}}
{{- define "lockstep.fullname" -}}
{{- if contains "lockstep" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-lockstep" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lockstep.selectorLabels" -}}
app.kubernetes.io/name: lockstep
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "lockstep.labels" -}}
app.kubernetes.io/name: lockstep
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: lockstep
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lockstep.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The operator's permissions on the objects it manages, bound cluster-wide (ClusterRole)
or in each watched namespace (Role). Exactly the requests the code makes; where each
comes from is said in examples/deploy/rbac.yaml, which the e2e tests prove sufficient
(tests/e2e/operability.rs).
*/}}
{{- define "lockstep.rules" -}}
# The custom resources: watched, finalizers added and removed, status written.
- apiGroups: ["lockstep.dev"]
  resources: ["distributeddbs", "postgresclusters"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["lockstep.dev"]
  resources: ["distributeddbs/status", "postgresclusters/status"]
  verbs: ["patch"]
# Watched by the shared cache (label-selected) and server-side applied.
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch"]
# A PostgresCluster's NetworkPolicy (spec.networkPolicy): applied, deleted when turned off.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Upgrades replace pods one ordinal at a time (PostgresCluster deletes them, DistributedDB
# evicts them through its PodDisruptionBudget); PostgresCluster moves its role label.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
# Granted on to the PostgreSQL pods' Role (each instance reports on its own pod).
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Hook, backup and promotion Jobs; the scheduled-backup CronJob.
- apiGroups: ["batch"]
  resources: ["jobs", "cronjobs"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Volume expansion; an in-place restore deletes its instances' claims.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["list", "watch", "patch", "delete"]
# PostgresCluster's primary Lease; get and update are granted on to the pods' Role.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["list", "watch", "create", "get", "update", "patch", "delete"]
# The PostgreSQL pods' ServiceAccount, Role and RoleBinding.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "patch"]
# Generated credentials, endpoint token and certificates: created once; the
# certificates' Secret is watched (label-selected) and its leaves renewed by a patch.
# get is granted on to the PostgreSQL pods' Role, for the password Secrets spec.roles
# names (list already reads as much).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "watch", "get", "create", "patch"]
# One Event per transition.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}
