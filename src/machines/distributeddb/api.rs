//! The `DistributedDB` custom resource (`lockstep.dev/v1alpha1`, short name `ddb`).
//!
//! ```yaml
//! apiVersion: lockstep.dev/v1alpha1
//! kind: DistributedDB
//! metadata: {name: orders}
//! spec:
//!   replicas: 3                       # ≥ 1, default 3
//!   image: registry.example/db:1.4    # changing it runs an ordered upgrade
//!   storage: {storageClassName: standard, size: 10Gi}   # size may grow, never shrink
//!   upgrade:
//!     preHook:  {command: [db-admin, drain]}            # image defaults to the target
//!     postHook: {command: [db-admin, verify], retryLimit: 5}
//!   backupPolicy:
//!     schedule: "0 3 * * *"
//!     s3Endpoint: https://s3.example
//!     s3CredentialsSecret: orders-s3   # keys accessKey, secretKey
//!     bucket: backups
//!     image: registry.example/db-backup:1.4
//!   placement:                        # the database, hook and backup pods
//!     nodeSelector: {disktype: ssd}
//!     tolerations: [{key: dedicated, operator: Equal, value: db, effect: NoSchedule}]
//!     affinity: {podAntiAffinity: {...}}
//!   readinessProbe: {httpGet: {path: /readyz, port: 2379}}   # the db container's
//!   livenessProbe:  {httpGet: {path: /livez, port: 2379}, failureThreshold: 5}
//! ```
//!
//! # Validation (by the API server, with the field named in every message)
//! - `metadata.name` at most 40 characters (names of owned Jobs derive from it) and a
//!   DNS label (Services are named after it);
//! - `spec.replicas` ≥ 1; `spec.image` non-empty;
//! - `spec.storage.size` a positive quantity that never shrinks; growing it expands
//!   every volume claim, which needs a StorageClass with `allowVolumeExpansion`
//!   (otherwise the API server refuses the resize and the error is reported in
//!   `status.machine.lastError`); `spec.storage.storageClassName` immutable;
//! - `spec.backupPolicy.schedule` a five-field cron expression or a macro such as
//!   `@daily`, as Kubernetes' cron parser reads it (positive steps, upward ranges,
//!   month and weekday names);
//! - `spec.ports[].name` an IANA service name; at most 16 ports;
//! - hook `timeoutSeconds` ≥ 1 and `retryLimit` in 0..=10;
//! - `spec.placement.tolerations[]`: `operator` `Exists` or `Equal`, no `value` with
//!   `Exists`, `effect` one of `NoSchedule`, `PreferNoSchedule`, `NoExecute`;
//! - `spec.readinessProbe` / `spec.livenessProbe`: exactly one handler (`exec`,
//!   `httpGet`, `tcpSocket` or `grpc`); `livenessProbe.successThreshold` 1.
//!
//! # Placement and probes
//! `spec.placement` (`nodeSelector`, `tolerations`, `affinity`,
//! `topologySpreadConstraints`, the core/v1 types; shared with PostgresCluster) is
//! copied into the pod template of the StatefulSet and of every hook, backup and
//! scheduled-backup Job, so that the pods that reach the database run where it does
//! (for example on nodes with a taint of their own). `spec.readinessProbe` and
//! `spec.livenessProbe` (core/v1 `Probe`) go to the database container: with a
//! readiness probe a pod counts as Ready (for `Creating`, for each pod's replacement in
//! an upgrade, and for `status.readyReplicas`) only once the database serves, not when
//! its process has started. Without them the kubelet's defaults apply (Ready when
//! started; no liveness check). Changing any of them changes the StatefulSet's pod
//! template, which reaches each pod when it is next replaced (the update strategy is
//! `OnDelete`: an upgrade, or a pod deleted by hand).
//!
//! # Annotations
//! See [`crate::machines::common::annotations`]: `lockstep.dev/backup-now`,
//! `lockstep.dev/skip-final-backup`, `lockstep.dev/retry-hook`, `lockstep.dev/skip-hook`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Probe, ResourceRequirements};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::state::DdbState;
use crate::engine::EngineStatus;
use crate::machines::common::cron::{CRON_RANGE_RULE, CRON_RULE};
use crate::machines::common::meta::{NAME_MESSAGE, NAME_RULE, PORT_NAME_MESSAGE, PORT_NAME_RULE};
pub use crate::machines::common::placement::Placement;

/// The shape of `status.lastBackup`, the same in every machine.
pub use crate::machines::common::last_backup::LastBackup;

/// The longest name a `DistributedDB` may have.
pub const MAX_NAME: usize = 40;

fn default_replicas() -> i32 {
    3
}

fn default_ports() -> Vec<DbPort> {
    vec![DbPort {
        name: "db".to_owned(),
        port: 8080,
    }]
}

fn default_hook_timeout() -> i64 {
    600
}

fn default_retry_limit() -> i32 {
    3
}

fn default_backup_timeout() -> i64 {
    3600
}

/// A DistributedDB cluster: a StatefulSet of database pods upgraded one ordinal at a
/// time with hooks, backed up on a schedule and on demand, and backed up once more
/// before it is deleted.
#[skip_serializing_none]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "lockstep.dev",
    version = "v1alpha1",
    kind = "DistributedDB",
    plural = "distributeddbs",
    shortname = "ddb",
    namespaced,
    status = "DistributedDBStatus",
    derive = "PartialEq",
    doc = "A DistributedDB cluster whose lifecycle is a declared state machine persisted in .status.machine.",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 40")
        .message("metadata.name must be at most 40 characters: the names of the StatefulSet's pods and of the hook and backup Jobs derive from it")
        ,
    validation = Rule::new(NAME_RULE).message(NAME_MESSAGE),
)]
#[x_kube(
    validation = Rule::new(
        "has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)"
    )
    .message("spec.bootstrap is immutable: it only says how the cluster was created")
    .field_path(".bootstrap")
    .reason(Reason::FieldValueForbidden),
    validation = Rule::new(
        "!has(self.bootstrap) || !has(self.bootstrap.fromBackup) || has(self.backupPolicy) || (has(self.bootstrap.fromBackup.s3Endpoint) && has(self.bootstrap.fromBackup.bucket) && has(self.bootstrap.fromBackup.s3CredentialsSecret))"
    )
    .message("spec.bootstrap.fromBackup needs a store: set its s3Endpoint, bucket and s3CredentialsSecret, or a spec.backupPolicy whose store it reads")
    .field_path(".bootstrap.fromBackup"),
    validation = Rule::new(
        "has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || self.tls == oldSelf.tls)"
    )
    .message("spec.tls is immutable: the members' URLs (http or https) are part of the database's membership, set when the cluster is created")
    .field_path(".tls")
    .reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct DistributedDBSpec {
    /// The number of database pods.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// The database image. Changing it runs an ordered, hooked upgrade.
    #[schemars(length(min = 1))]
    pub image: String,
    /// The volume each pod gets.
    pub storage: Storage,
    /// Scheduled, on-demand and final backups. Without it, no backups are taken.
    pub backup_policy: Option<BackupPolicy>,
    /// How the cluster's members get their first data (immutable): without it, they
    /// start empty.
    pub bootstrap: Option<Bootstrap>,
    /// Hooks run around each pod's replacement during an upgrade.
    pub upgrade: Option<UpgradePolicy>,
    /// Hooks run around each member added or removed when `replicas` changes (for
    /// example, to add it to the database's membership before its pod starts).
    pub scaling: Option<ScalingPolicy>,
    /// Transport security (immutable): the members, hooks and backups get a CA, a
    /// member certificate and a client certificate. Without it, none.
    pub tls: Option<DdbTls>,
    /// Resources of the database container.
    pub resources: Option<ResourceRequirements>,
    /// The ports the database listens on; the headless Service exposes the same (at
    /// most 16).
    #[serde(default = "default_ports")]
    #[schemars(length(max = 16))]
    pub ports: Vec<DbPort>,
    /// Extra environment of the database container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Extra labels of the database pods (Lockstep's own labels win on a clash).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Extra annotations of the database pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Where the database pods, and the hook and backup pods, are scheduled.
    pub placement: Option<Placement>,
    /// The database container's readiness probe: a pod counts as Ready (at creation,
    /// after each replacement in an upgrade) only once it passes.
    #[x_kube(validation = Rule::new(ONE_HANDLER_RULE).message(
        "readinessProbe must set exactly one of exec, httpGet, tcpSocket or grpc"
    ))]
    pub readiness_probe: Option<Probe>,
    /// The database container's liveness probe: the kubelet restarts the container
    /// when it fails.
    #[x_kube(
        validation = Rule::new(ONE_HANDLER_RULE).message(
            "livenessProbe must set exactly one of exec, httpGet, tcpSocket or grpc"
        ),
        validation = Rule::new("!has(self.successThreshold) || self.successThreshold == 1")
            .message("livenessProbe.successThreshold must be 1")
    )]
    pub liveness_probe: Option<Probe>,
}

/// The CEL rule on a probe: exactly one handler.
const ONE_HANDLER_RULE: &str = "[has(self.exec), has(self.httpGet), has(self.tcpSocket), has(self.grpc)].filter(h, h).size() == 1";

/// Persistent storage of each pod.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[x_kube(validation = Rule::new(
    "has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)"
).message("storage.storageClassName is immutable: existing volumes cannot move to another StorageClass")
 .field_path(".storageClassName")
 .reason(Reason::FieldValueForbidden))]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// The StorageClass of the volumes (default: the cluster's default class). Immutable.
    pub storage_class_name: Option<String>,
    /// The size of each volume, such as `10Gi`. It may grow (the volumes are expanded,
    /// which needs a StorageClass with `allowVolumeExpansion`) but never shrink.
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))")
            .message("storage.size must be a positive quantity such as 10Gi"),
        validation = Rule::new("!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0")
            .message("storage.size cannot shrink: volumes can only grow")
            .reason(Reason::FieldValueForbidden)
    )]
    pub size: String,
}

/// A port of the database container.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DbPort {
    /// The port's name (an IANA service name: at most 15 lower-case letters, digits and
    /// single hyphens, with at least one letter).
    #[schemars(length(min = 1, max = 15))]
    #[x_kube(validation = Rule::new(PORT_NAME_RULE).message(PORT_NAME_MESSAGE))]
    pub name: String,
    /// The port number, on the container and on the Service.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// Upgrade hooks.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePolicy {
    /// Runs before each pod is replaced (for example, to move leadership away from it).
    pub pre_hook: Option<Hook>,
    /// Runs after each replaced pod is Ready at the new image (for example, to verify it
    /// rejoined), before the next pod is touched.
    pub post_hook: Option<Hook>,
}

/// Transport security of a DistributedDB. The database pods find, in the directory
/// `DB_TLS_DIR` (`/etc/lockstep/tls`), `ca.crt`, the member certificate `tls.crt` and
/// `tls.key` (for serving clients and peers, and as a peer's client), and the client
/// certificate `client.crt` and `client.key`; the hook and backup Jobs find `ca.crt`,
/// `client.crt` and `client.key` there. The image decides how to use them (the etcd
/// image serves `https` with client-certificate authentication, peer and client).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct DdbTls {
    /// A Secret of your own holding those five keys (cert-manager can issue it).
    /// Without it, Lockstep issues a CA for the cluster and the certificates, in
    /// `<name>-tls`, and renews them before they expire.
    #[schemars(length(min = 1))]
    pub secret_name: Option<String>,
}

/// How a new cluster's members get their first data.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// Restore every member from a backup before its first start.
    pub from_backup: Option<FromBackup>,
}

/// A backup to restore a new cluster from: each member's pod runs a `restore` init
/// container (the image's restore command) before the database starts. It gets
/// `RESTORE_KEY`, `S3_ENDPOINT`, `S3_BUCKET`, the credentials as `AWS_ACCESS_KEY_ID` and
/// `AWS_SECRET_ACCESS_KEY` (secret references), the database container's `POD_NAME`,
/// `DB_SERVICE` and `DB_REPLICAS` (and `DB_TLS_DIR` with the certificates, with
/// `spec.tls`), and the data volume; it must do nothing for a member
/// that already has data or joins a running cluster as a new member (it runs at every
/// start of every pod).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FromBackup {
    /// The backup's key in the bucket (as the backup Job logged it, for example
    /// `etcd/etcd-final-backup-1-20261207T171734Z.db`).
    #[schemars(length(min = 1))]
    pub key: String,
    /// The S3-compatible endpoint (default: `spec.backupPolicy`'s).
    pub s3_endpoint: Option<String>,
    /// The bucket (default: `spec.backupPolicy`'s).
    pub bucket: Option<String>,
    /// The Secret holding the S3 credentials under `accessKey` and `secretKey` (default:
    /// `spec.backupPolicy`'s).
    pub s3_credentials_secret: Option<String>,
    /// The restore container's image (default: the database's).
    pub image: Option<String>,
    /// Its entrypoint (default: the image's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

/// Scaling hooks: each runs once per member added or removed, with that member's
/// ordinal (`TARGET_ORDINAL`) in its environment. Members are added one at a time in
/// ascending order (pre-hook, the StatefulSet grows by one, the pod becomes Ready,
/// post-hook) and removed one at a time in descending order (pre-hook, the StatefulSet
/// shrinks by one, the pod is gone, post-hook).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScalingPolicy {
    /// Runs before a member's pod is created (for example, to add it to the membership).
    pub pre_scale_up: Option<Hook>,
    /// Runs once the added member's pod is Ready (for example, to promote it to a
    /// voting member once it has caught up).
    pub post_scale_up: Option<Hook>,
    /// Runs before a member's pod is removed (for example, to move the leadership away
    /// and remove it from the membership).
    pub pre_scale_down: Option<Hook>,
    /// Runs once the removed member's pod is gone.
    pub post_scale_down: Option<Hook>,
}

/// A container run to completion as one Job per pod and attempt.
///
/// It gets `TARGET_POD`, `TARGET_ORDINAL`, `TARGET_HOST` (the pod's stable DNS name),
/// `FROM_IMAGE`, `TO_IMAGE` and `HOOK` (`pre`, `post`, `pre-scale-up`, `post-scale-up`,
/// `pre-scale-down` or `post-scale-down`) in its environment (a scaling hook's
/// `FROM_IMAGE` and `TO_IMAGE` are both the cluster's image).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// The image (default: the image being upgraded to).
    pub image: Option<String>,
    /// The entrypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// How long one attempt may run before it counts as failed.
    #[serde(default = "default_hook_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i64,
    /// How many times a failed attempt is retried (with backoff) before the upgrade
    /// waits for `lockstep.dev/retry-hook` or `lockstep.dev/skip-hook`.
    #[serde(default = "default_retry_limit")]
    #[schemars(range(min = 0, max = 10))]
    pub retry_limit: i32,
    /// Extra labels of the hook's pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Extra annotations of the hook's pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
}

/// Where and when backups are taken.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[x_kube(
    validation = Rule::new(
        "(has(self.bucket) && size(self.bucket) > 0) || self.s3Endpoint.matches('^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]+/[^/?#]+')"
    )
    .message("backupPolicy needs a bucket: set backupPolicy.bucket, or name it in backupPolicy.s3Endpoint's path (https://s3.example.com/my-bucket)")
)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// When scheduled backups run: five cron fields (`0 3 * * *`) or a macro (`@daily`).
    #[schemars(length(max = 128))]
    #[x_kube(
        validation = Rule::new(CRON_RULE).message(
            "backupPolicy.schedule must be a cron expression: five fields (minute hour day-of-month month day-of-week, such as \"0 3 * * *\"; steps are positive, names are JAN-DEC and SUN-SAT) or @yearly, @monthly, @weekly, @daily or @hourly"
        ),
        validation = Rule::new(CRON_RANGE_RULE)
            .message("backupPolicy.schedule: every range must run upwards (1-5, not 5-1)")
    )]
    pub schedule: String,
    /// Pause scheduled backups (on-demand and final backups still run).
    #[serde(default)]
    pub suspend: bool,
    /// The S3-compatible endpoint URL. It may name the bucket as the first segment of its
    /// path (`https://s3.example.com/backups`), as the seed's objects do; further
    /// segments are the key prefix.
    #[schemars(length(min = 1))]
    pub s3_endpoint: String,
    /// The Secret holding the S3 credentials under the keys `accessKey` and `secretKey`.
    /// They reach the backup container only as secret references.
    #[schemars(length(min = 1))]
    pub s3_credentials_secret: String,
    /// The bucket (default: the first segment of `s3Endpoint`'s path; one of the two
    /// must name it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket: String,
    /// The key prefix within the bucket.
    pub prefix: Option<String>,
    /// How many backups to keep under the prefix (passed to the image as
    /// `BACKUP_RETENTION`; pruning is the image's job).
    #[schemars(range(min = 1))]
    pub retention: Option<i32>,
    /// The backup container's image (default: `spec.image`, the database's own image,
    /// which then carries the backup tool).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Its entrypoint (default: the image's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// How long one backup may run before it counts as failed.
    #[serde(default = "default_backup_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i64,
    /// Extra labels of backup pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Extra annotations of backup pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
}

impl BackupPolicy {
    /// Where backups go: the bucket and prefix as given, or as named by the endpoint's
    /// path (the endpoint itself then without that path).
    pub fn destination(&self) -> (String, String, Option<String>) {
        let (origin, path) = split_url(&self.s3_endpoint);
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        if !self.bucket.is_empty() {
            return (
                self.s3_endpoint.clone(),
                self.bucket.clone(),
                self.prefix.clone(),
            );
        }
        let bucket = segments.next().unwrap_or_default().to_owned();
        let rest: Vec<&str> = segments.collect();
        let prefix = self
            .prefix
            .clone()
            .or_else(|| (!rest.is_empty()).then(|| rest.join("/")));
        (origin.to_owned(), bucket, prefix)
    }
}

/// `scheme://authority` and the path of a URL (without query or fragment).
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let path_start = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    let path = &url[path_start..];
    let path_end = path.find(['?', '#']).unwrap_or(path.len());
    (&url[..path_start], &path[..path_end])
}

/// The observed state of a DistributedDB.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct DistributedDBStatus {
    /// Phase, step, conditions, observedGeneration and the machine record.
    #[serde(flatten)]
    pub engine: EngineStatus<DdbState>,
    /// The image every pod ran when the cluster last came to rest (set when an upgrade
    /// finishes with the last pod).
    pub version: Option<String>,
    /// Database pods that exist.
    pub replicas: Option<i32>,
    /// Database pods that are Ready.
    pub ready_replicas: Option<i32>,
    /// The most recent backup that finished (scheduled, on demand or final).
    pub last_backup: Option<LastBackup>,
}

#[cfg(test)]
mod tests {
    use super::{BackupPolicy, DistributedDBStatus};

    #[test]
    fn a_status_is_written_as_today() {
        crate::engine::record::assert_status_as_today::<DistributedDBStatus>(
            r#"{"phase":"Ready","conditions":[],"version":"db:1","readyReplicas":3}"#,
        );
    }

    fn seed_policy(endpoint: &str, bucket: &str) -> BackupPolicy {
        serde_json::from_value(serde_json::json!({
            "schedule": "0 0 * * *",
            "s3Endpoint": endpoint,
            "s3CredentialsSecret": "s3",
            "bucket": bucket,
        }))
        .expect("the seed's three fields are a whole policy")
    }

    #[test]
    fn the_bucket_may_come_from_the_endpoint_path_as_in_the_seed() {
        let policy = seed_policy("https://s3.example.com/backups/prod/db?x=1", "");
        assert_eq!(
            policy.destination(),
            (
                "https://s3.example.com".to_owned(),
                "backups".to_owned(),
                Some("prod/db".to_owned())
            )
        );
        assert!(policy.image.is_empty(), "the database image is the default");
    }

    #[test]
    fn an_explicit_bucket_keeps_the_endpoint_as_given() {
        let policy = seed_policy("http://minio:9000", "b");
        assert_eq!(
            policy.destination(),
            ("http://minio:9000".to_owned(), "b".to_owned(), None)
        );
    }
}
