//! The `PostgresCluster` custom resource (`lockstep.dev/v1alpha1`, short name `pgc`).
//!
//! ```yaml
//! apiVersion: lockstep.dev/v1alpha1
//! kind: PostgresCluster
//! metadata: {name: orders}
//! spec:
//!   version: "18"               # 15, 17 or 18, optionally with a minor: "18.1" -> <repository>:18.1
//!   replicas: 3                 # one primary, two streaming replicas
//!   storageSize: 10Gi           # immutable
//!   failoverDelaySeconds: 30    # primary not Ready this long -> promote a Ready replica
//!   backupSchedule: "0 3 * * *" # needs spec.backup
//!   backup:
//!     s3Endpoint: https://s3.eu-west-1.amazonaws.com
//!     bucket: backups
//!     prefix: prod
//!     credentialsSecret: orders-s3        # keys accessKey, secretKey
//!     image: registry.example/pg-backup:16  # pg_dump + curl, see the scripts README
//!   spread: {mode: Preferred}   # instances prefer a node each (Required | None)
//!   postgresql:                 # applied by a reload; see `settings`
//!     parameters: {work_mem: 16MB, max_connections: "200"}
//!     pgHba: ["host all app 10.0.0.0/8 scram-sha-256"]
//!   placement:                  # instances and Jobs: nodeSelector, tolerations, affinity,
//!     nodeSelector: {disktype: ssd}  # topologySpreadConstraints (DistributedDB's type)
//! ```
//!
//! # Validation (by the API server, each message naming the field)
//! - `metadata.name` at most 40 characters (pod, Service and Job names derive from it);
//! - `spec.version` a supported major (15, 17 or 18: [`SUPPORTED_MAJORS`]), optionally
//!   with a minor version; the
//!   major cannot change in place (data directories are not compatible across majors:
//!   create a new cluster and restore a dump into it);
//! - `spec.replicas` ≥ 1;
//! - `spec.storageSize` a positive quantity, immutable; `spec.storageClassName` and
//!   `spec.credentialsSecret` immutable;
//! - `spec.backupSchedule` a five-field cron expression or a macro such as `@daily`, and
//!   only together with `spec.backup`;
//! - `spec.failoverDelaySeconds` in 0..=3600;
//! - `spec.spread.mode` one of `Preferred`, `Required`, `None`; `spec.placement`'s
//!   tolerations and topology spread constraints as DistributedDB's;
//! - `spec.postgresql.parameters` names no parameter Lockstep manages (the message
//!   names the ones it does), every value one line; `spec.postgresql.pgHba` one line per
//!   rule.
//!
//! # Credentials
//! The superuser (`postgres`) and replication (`replicator`) passwords come from the Secret
//! `spec.credentialsSecret` (keys [`SUPERUSER_PASSWORD_KEY`] and
//! [`REPLICATION_PASSWORD_KEY`]); without one, Lockstep creates `<name>-credentials` with
//! random passwords once, and never reads, logs or rewrites it.
//!
//! # Annotations
//! `lockstep.dev/backup-now` (one on-demand backup per token) and
//! `lockstep.dev/skip-final-backup` (delete without the final backup): see
//! [`crate::machines::common::annotations`].

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::state::PgState;
use crate::engine::EngineStatus;
use crate::machines::common::cron::{CRON_RANGE_RULE, CRON_RULE};
use crate::machines::common::last_backup::LastBackup;
use crate::machines::common::meta::{NAME_MESSAGE, NAME_RULE};
pub use crate::machines::common::placement::{HOSTNAME_TOPOLOGY_KEY, Placement, Spread};
use crate::pod::fencing::{RENEW_SECONDS, tenure_seconds};
use crate::pod::settings::PostgresqlSpec;
use crate::pod::synchronous::SynchronousSpec;

/// The longest name a `PostgresCluster` may have.
pub const MAX_NAME: usize = 40;
/// The key of the credentials Secret holding the superuser's password.
pub const SUPERUSER_PASSWORD_KEY: &str = "superuserPassword";
/// The key of the credentials Secret holding the replication role's password.
pub const REPLICATION_PASSWORD_KEY: &str = "replicationPassword";
/// The superuser.
pub const SUPERUSER: &str = "postgres";
/// The replication role.
pub const REPLICATION_USER: &str = "replicator";
/// The PostgreSQL majors `spec.version` accepts: those with a server image built
/// here (`tools/images/build.sh`), one per Debian suite that serves the major with
/// pgBackRest (bookworm 15, trixie 17, sid 18; docs/postgres-versions.md).
pub const SUPPORTED_MAJORS: [u32; 3] = [15, 17, 18];

/// [`SUPPORTED_MAJORS`] as a regular expression over `spec.version`, optionally with a
/// minor (RE2, no backslashes, so that it embeds in a CEL string).
pub const VERSION_PATTERN: &str = "^(15|17|18)([.][0-9]+)?$";

/// What the API server answers to a `spec.version` outside [`VERSION_PATTERN`].
pub const VERSION_MESSAGE: &str = "spec.version must be a supported PostgreSQL major version (15, 17 or 18: the majors Lockstep builds a server image for), optionally with a minor version such as \"18.1\"";

fn default_replicas() -> i32 {
    3
}

fn default_failover_delay() -> i64 {
    30
}

fn default_backup_timeout() -> i64 {
    3600
}

fn version_rule() -> String {
    format!("self.matches('{VERSION_PATTERN}')")
}

/// A PostgreSQL cluster: one primary and streaming replicas in a StatefulSet, with
/// switchover on upgrades, failover when the primary stays down, scheduled and on-demand
/// backups to S3, and a final backup before it is deleted.
#[skip_serializing_none]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "lockstep.dev",
    version = "v1alpha1",
    kind = "PostgresCluster",
    plural = "postgresclusters",
    shortname = "pgc",
    namespaced,
    status = "PostgresClusterStatus",
    derive = "PartialEq",
    doc = "A PostgreSQL primary/replica cluster whose lifecycle is a declared state machine persisted in .status.machine.",
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step"),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.primaryPod"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    // The root schema does not declare `metadata`, so no fieldPath here:
    // `driver::crd` declares `metadata.name` and points these rules at it.
    validation = Rule::new("size(self.metadata.name) <= 40")
        .message("metadata.name must be at most 40 characters: the names of the pods, Services and Jobs derive from it"),
    validation = Rule::new(NAME_RULE).message(NAME_MESSAGE),
)]
#[x_kube(
    validation = Rule::new("!has(self.synchronous) || self.synchronous.number < self.replicas")
        .message("spec.synchronous.number must be less than spec.replicas: a commit cannot wait for more standbys than the cluster has")
        .field_path(".synchronous.number"),
    validation = Rule::new("!has(self.backupSchedule) || has(self.backup)")
        .message("spec.backupSchedule needs spec.backup: scheduled backups need a destination")
        .field_path(".backupSchedule"),
    validation = Rule::new(
        "has(self.credentialsSecret) == has(oldSelf.credentialsSecret) && (!has(self.credentialsSecret) || self.credentialsSecret == oldSelf.credentialsSecret)"
    )
        .message("spec.credentialsSecret is immutable: the data directory holds the passwords it was created with")
        .field_path(".credentialsSecret")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(
        "has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)"
    )
        .message("spec.storageClassName is immutable: existing volumes cannot move to another StorageClass")
        .field_path(".storageClassName")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(
        "has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)"
    )
        .message("spec.bootstrap is immutable: it is read only when the cluster is created")
        .field_path(".bootstrap")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(
        "!has(self.bootstrap) || !has(self.bootstrap.recovery) || (has(self.backup) && has(self.backup.walArchive))"
    )
        .message("spec.bootstrap.recovery needs spec.backup with walArchive: the source repository is read from that store")
        .field_path(".bootstrap.recovery"),
    validation = Rule::new(
        "!has(self.restore) || (has(self.backup) && has(self.backup.walArchive))"
    )
        .message("spec.restore needs spec.backup with walArchive: the cluster is restored from its own repository in that store")
        .field_path(".restore"),
    validation = Rule::new(crate::pod::synchronous::COMMIT_RULE)
        .message(crate::pod::synchronous::COMMIT_MESSAGE)
        .field_path(".postgresql.parameters"),
)]
#[serde(rename_all = "camelCase")]
pub struct PostgresClusterSpec {
    /// The PostgreSQL version: a supported major, 15, 17 or 18 (`"18"`), optionally with
    /// a minor (`"18.1"`). The image is `<repository>:<version>` unless `image` is set, the
    /// repository the operator's `--postgres-image-repository`
    /// (`ghcr.io/lockstep-dev/postgres` by default). A change of
    /// the minor (or of `image`) is a rolling upgrade: replicas first, then a switchover,
    /// then the old primary. The major cannot change in place.
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(version_rule()).message(VERSION_MESSAGE),
        validation = Rule::new(
            "!self.matches('^[0-9]+') || !oldSelf.matches('^[0-9]+') || self.find('^[0-9]+') == oldSelf.find('^[0-9]+')"
        )
            .message("spec.version cannot change its major version in place: data directories are not compatible across majors; create a new cluster and restore a dump into it")
            .reason(Reason::FieldValueForbidden)
    )]
    pub version: String,
    /// The server image, overriding `<repository>:<version>`. It must run the major of
    /// `version` and provide the server binaries and `psql` on `PATH` (the official
    /// images do), and `pgbackrest` when WAL is archived; nothing of Lockstep's.
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Instances: one primary and `replicas - 1` streaming replicas.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 32))]
    pub replicas: i32,
    /// The size of each instance's volume, such as `10Gi`. Immutable.
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))")
            .message("spec.storageSize must be a positive quantity such as 10Gi"),
        validation = Rule::new("self == oldSelf")
            .message("spec.storageSize is immutable: the StatefulSet's volume claim template cannot change")
            .reason(Reason::FieldValueForbidden)
    )]
    pub storage_size: String,
    /// The StorageClass of the volumes (default: the cluster's default class). Immutable.
    pub storage_class_name: Option<String>,
    /// Resources of the PostgreSQL container.
    pub resources: Option<ResourceRequirements>,
    /// How long the primary may be not Ready before a Ready replica is promoted in its
    /// place.
    #[serde(default = "default_failover_delay")]
    #[schemars(range(min = 0, max = 3600))]
    pub failover_delay_seconds: i64,
    /// The Secret holding the superuser's and the replication role's passwords (keys
    /// `superuserPassword` and `replicationPassword`). Without it Lockstep generates
    /// `<name>-credentials`. Immutable.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: Option<String>,
    /// Certificates of your own instead of those Lockstep issues (`<name>-tls`, which it
    /// issues anyway: the cluster's CA verifies the replication role's certificate).
    pub certificates: Option<CertificatesSpec>,
    /// The application's database, created at bootstrap and owned by the application
    /// role `<name>-app` (whose Secret `<name>-app` names it): default `app` for clusters
    /// created by an operator that has the application role (before it, none was created;
    /// changing this field later creates nothing). `Dump` backups dump it (a cluster
    /// created before the application role, without this field, has no `app` database:
    /// its `Dump` backups dump `postgres`).
    #[schemars(length(min = 1, max = 63), regex(pattern = "^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub database: Option<String>,
    /// Roles the primary keeps as described (`CREATE`, `ALTER` or `DROP ROLE`), applied
    /// without a restart; roles not listed are left alone (`docs/roles-and-databases.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 64,
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["name"]
    ))]
    pub roles: Vec<crate::pod::managed::RoleSpec>,
    /// Databases the primary keeps, each with its owner and extensions; databases not
    /// listed are left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 64,
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["name"]
    ))]
    pub databases: Vec<crate::pod::managed::DatabaseSpec>,
    /// When scheduled backups run: five cron fields (`0 3 * * *`) or a macro (`@daily`).
    /// Needs `backup`.
    #[schemars(length(max = 128))]
    #[x_kube(
        validation = Rule::new(CRON_RULE).message(
            "spec.backupSchedule must be a cron expression: five fields (minute hour day-of-month month day-of-week, such as \"0 3 * * *\"; steps are positive, names are JAN-DEC and SUN-SAT) or @yearly, @monthly, @weekly, @daily or @hourly"
        ),
        validation = Rule::new(CRON_RANGE_RULE)
            .message("spec.backupSchedule: every range must run upwards (1-5, not 5-1)")
    )]
    pub backup_schedule: Option<String>,
    /// Where backups go and how they run. Without it there are no backups, and deletion
    /// takes no final backup.
    pub backup: Option<BackupSpec>,
    /// How the one writable server is fenced: the primary Lease's duration and the
    /// clock-skew bound the operator allows for (see the machine's `# Assumptions`).
    #[serde(default)]
    pub fencing: FencingSpec,
    /// Where the instances and the backup Jobs' pods are scheduled (the same type as
    /// DistributedDB's).
    pub placement: Option<Placement>,
    /// How the instances keep apart, so that one node (or zone) lost takes one
    /// instance, not the cluster: by default each prefers a node without another.
    #[serde(default)]
    pub spread: SpreadSpec,
    /// PostgreSQL's own configuration: `parameters` (`postgresql.conf`) and `pgHba`
    /// rules, applied by a reload without restarting any pod.
    #[serde(default, skip_serializing_if = "PostgresqlSpec::is_empty")]
    pub postgresql: PostgresqlSpec,
    /// Synchronous replication: a commit is acknowledged only once `number` standbys
    /// have it, and a failover promotes only a member that must have every
    /// acknowledged commit (see `docs/postgrescluster.md`). Without it, replication is
    /// asynchronous and a failover may lose the last acknowledged commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous: Option<SynchronousSpec>,
    /// How the cluster's first primary gets its data: absent, a new database (`initdb`);
    /// `recovery`, a restore from another cluster's base backups and WAL archive, up to
    /// an optional target. Read only when the cluster is created; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapSpec>,
    /// Rewind this cluster in place to a point of its own backups: each new `token`
    /// runs once. Writes stop, every instance's volume is replaced, the first primary
    /// restores this cluster's repository up to `target` and promotes there (a new
    /// timeline), and the replicas clone from it (see `docs/backup.md`). Everything
    /// committed after the target is discarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,
    /// Per-cluster NetworkPolicy `<name>` (ingress only): PostgreSQL's port from the
    /// cluster's own members and from pods labelled `lockstep.dev/client: <name>` in
    /// the cluster's namespace; the instance managers' port from the members, the
    /// cluster's backup Jobs and the operator's namespace. Off by default (`enabled:
    /// false`): nothing is created, and a policy created earlier is deleted. It takes
    /// effect only where the cluster's network plugin enforces NetworkPolicies (see
    /// `docs/security.md`).
    #[serde(default, skip_serializing_if = "NetworkPolicySpec::is_default")]
    pub network_policy: NetworkPolicySpec,
    /// `true`: every instance stops cleanly and its volume is kept (nothing runs, so
    /// nothing serves); `false` (default) brings the cluster back with the primary it
    /// had (see `docs/hibernation.md`). Taken on only from `Ready`: a change in flight
    /// finishes first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hibernate: bool,
}

/// `spec.networkPolicy`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// `true`: the operator keeps the NetworkPolicy `<name>`; `false` (default): it
    /// keeps none, and deletes the one it made while this was `true`.
    #[serde(default)]
    pub enabled: bool,
}

impl NetworkPolicySpec {
    /// Whether this is the default (disabled), left out when serialized.
    #[must_use]
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

pub use crate::pod::restore::{RecoveryTarget, RestoreSpec};

/// `spec.bootstrap`.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Restore the first primary from a cluster's pgBackRest repository (see
    /// `docs/backup.md`).
    pub recovery: Option<RecoverySpec>,
}

/// `spec.bootstrap.recovery`: the source and how far to replay.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySpec {
    /// The cluster whose backups are restored: its repository is `<prefix>/<source>` in
    /// this cluster's `spec.backup` bucket, read with the same endpoint, credentials and
    /// CA (`spec.backup.walArchive`). It may be deleted; its repository stays.
    #[schemars(length(min = 1, max = 40))]
    pub source: String,
    /// Where recovery stops and the restored primary is promoted. Absent: the end of
    /// the archive.
    pub target: Option<RecoveryTarget>,
}

/// `spec.certificates`: certificates a person brings (for example from cert-manager).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificatesSpec {
    /// A Secret in the cluster's namespace with the server's certificate (`tls.crt`), its
    /// key (`tls.key`) and the CA that signed it (`ca.crt`): a cert-manager Certificate's
    /// Secret has all three. It must name `<name>-rw.<namespace>.svc` and
    /// `*.<name>.<namespace>.svc` (standbys verify the primary by these names). Renewed
    /// in place (by cert-manager), it is reloaded without a restart. While it lacks a
    /// key, the instances serve Lockstep's own certificate and log why.
    #[schemars(length(min = 1, max = 253))]
    pub server_tls_secret: String,
}

/// `spec.spread`: the pod anti-affinity Lockstep adds to the instances' own, over one
/// topology key.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SpreadSpec {
    /// `Preferred` (default): the scheduler puts each instance on a node without
    /// another while it can, and shares one when it cannot. `Required`: never two on
    /// one node (with fewer nodes than instances, the extra ones stay Pending).
    /// `None`: no anti-affinity of Lockstep's (`placement.affinity` still applies).
    #[serde(default)]
    pub mode: Spread,
    /// The node label whose values are the domains to spread over (default
    /// `kubernetes.io/hostname`: one node each; `topology.kubernetes.io/zone`: one
    /// zone each).
    #[serde(default = "default_topology_key")]
    #[schemars(length(min = 1, max = 316))]
    pub topology_key: String,
}

impl Default for SpreadSpec {
    fn default() -> Self {
        Self {
            mode: Spread::default(),
            topology_key: default_topology_key(),
        }
    }
}

fn default_topology_key() -> String {
    HOSTNAME_TOPOLOGY_KEY.to_owned()
}

/// The default `spec.fencing.leaseDurationSeconds`.
pub const DEFAULT_LEASE_SECONDS: i64 = 15;
/// The longest `spec.fencing.leaseDurationSeconds` the CRD allows: the `L` a Lease
/// created in place of one that vanished carries when the status no longer says the
/// longest the cluster ever used (`status.longestLeaseSeconds`, lost with the status).
pub const MAX_LEASE_SECONDS: i64 = 120;
/// The default `spec.fencing.clockSkewSeconds`.
pub const DEFAULT_CLOCK_SKEW_SECONDS: i64 = 2;

fn default_lease_seconds() -> i64 {
    DEFAULT_LEASE_SECONDS
}

fn default_clock_skew() -> i64 {
    DEFAULT_CLOCK_SKEW_SECONDS
}

/// Fencing: the Lease `<name>-primary` names the one pod allowed to run a writable
/// server; its holder renews it every `R` = 2 seconds and stops its server when it
/// cannot for `T` = ⌊L/2⌋ seconds. The operator promotes another pod only once the old
/// holder released the Lease, or `renewTime + L + S` has passed on the operator's clock
/// (`L` the longest any living pod runs with), or a person says it is down (a vanished
/// pod is not proof that its server stopped).
///
/// `L` exceeds `S` by at least 5 s (two renewals and a read): a standby follows the
/// primary only while its Lease lasts on the standby's own clock (`renewTime + L`, the
/// holder's clock), so with `S` near `L` the standbys could stop streaming at the full
/// skew (found by the model check: a planned switchover's target had received nothing).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.leaseDurationSeconds >= self.clockSkewSeconds + 5").message(
        "spec.fencing.leaseDurationSeconds must exceed spec.fencing.clockSkewSeconds by at least 5 seconds: standbys follow the primary only while its Lease lasts on their own clocks"
    )
)]
pub struct FencingSpec {
    /// `L`: the Lease's duration in seconds (default 15, 12 to 120). A failed primary is
    /// replaced at the earliest `L + S` seconds after its last renewal, unless it was
    /// seen to stop. The holder's fence runs with `T = L/2`, which must leave room for
    /// the immediate stop's grace (2 s) and two renewals (2 s apart): hence at least 12.
    #[serde(default = "default_lease_seconds")]
    #[x_kube(
        validation = Rule::new("self >= 12 && self <= 120")
            .message("spec.fencing.leaseDurationSeconds must be between 12 and 120")
    )]
    pub lease_duration_seconds: i64,
    /// `S`: the most two clocks (any node's and the operator's) may differ, in seconds
    /// (default 2, 0 to 60). Fencing is only as safe as this bound: keep the nodes'
    /// clocks synchronized (NTP) well within it.
    #[serde(default = "default_clock_skew")]
    #[x_kube(
        validation = Rule::new("self >= 0 && self <= 60")
            .message("spec.fencing.clockSkewSeconds must be between 0 and 60")
    )]
    pub clock_skew_seconds: i64,
}

impl Default for FencingSpec {
    fn default() -> Self {
        Self {
            lease_duration_seconds: DEFAULT_LEASE_SECONDS,
            clock_skew_seconds: DEFAULT_CLOCK_SKEW_SECONDS,
        }
    }
}

impl FencingSpec {
    /// `T`: how long the holder keeps its server writable without a successful renewal.
    pub fn fence_seconds(&self) -> i64 {
        u32::try_from(self.lease_duration_seconds).map_or(0, |l| i64::from(tenure_seconds(l)))
    }

    /// `R`: how often the holder renews.
    pub const RENEW_SECONDS: i64 = RENEW_SECONDS as i64;
}

/// The backup destination and the backup Jobs' pod.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "!has(self.walArchive) || has(self.walArchive.s3Endpoint) || self.s3Endpoint.startsWith('https://')"
    )
    .message(
        "spec.backup.walArchive needs an https:// endpoint (pgBackRest speaks only TLS to S3): set spec.backup.walArchive.s3Endpoint, or make spec.backup.s3Endpoint https"
    ),
    validation = Rule::new(
        "!has(self.method) || self.method != 'BaseBackup' || has(self.walArchive)"
    )
    .message(
        "spec.backup.method BaseBackup needs spec.backup.walArchive: a base backup restores only with the WAL archived since it began"
    ),
    validation = Rule::new(
        "!has(self.retention) || (has(self.method) ? self.method : (has(self.walArchive) ? 'BaseBackup' : 'Dump')) == 'BaseBackup'"
    )
    .message(
        "spec.backup.retention applies to base backups only (spec.backup.method BaseBackup, the default with spec.backup.walArchive)"
    )
)]
pub struct BackupSpec {
    /// The S3-compatible endpoint URL (`http(s)://host[:port]`).
    #[schemars(length(min = 1), regex(pattern = "^https?://[^/]+/?$"))]
    pub s3_endpoint: String,
    /// The bucket.
    #[schemars(length(min = 1, max = 63))]
    pub bucket: String,
    /// The key prefix within the bucket; dumps go to `<prefix>/<cluster>/<time>.dump`.
    pub prefix: Option<String>,
    /// The signing region (default `us-east-1`).
    pub region: Option<String>,
    /// Virtual-hosted-style addressing (`bucket.host`) instead of path style.
    #[serde(default)]
    pub virtual_hosted_style: bool,
    /// The Secret holding the S3 credentials under the keys `accessKey` and `secretKey`.
    /// They reach the backup container only as secret references.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: String,
    /// The backup image: bash, `pg_dump` of the cluster's major or newer, `curl` ≥ 7.75
    /// and `sha256sum` (the official `postgres` images plus curl).
    #[schemars(length(min = 1))]
    pub image: String,
    /// How long one backup may run before it counts as failed.
    #[serde(default = "default_backup_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i64,
    /// Pause scheduled backups (on-demand and final backups still run).
    #[serde(default)]
    pub suspend: bool,
    /// Extra labels of backup pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Extra annotations of backup pods (for example a cloud IAM role).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Continuous WAL archiving into the same bucket, by pgBackRest from each instance
    /// (the primary archives): every WAL file it completes, and at least one a minute
    /// while it writes. Absent: no archiving. See `docs/backup.md`.
    pub wal_archive: Option<WalArchiveSpec>,
    /// What a backup (scheduled, on demand or final) is: `BaseBackup`, a physical copy by
    /// pgBackRest that restores to any point the archive reaches, or `Dump`, a logical
    /// `pg_dump` of `spec.database`. Default: `BaseBackup` with `walArchive`, else `Dump`.
    pub method: Option<BackupMethod>,
    /// How many base backups the repository keeps; pgBackRest prunes the older ones, and
    /// the WAL only they needed, after each backup that succeeded. Absent: all of them.
    pub retention: Option<BackupRetention>,
}

/// `spec.backup.method`.
#[derive(
    Serialize,
    Deserialize,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
pub enum BackupMethod {
    /// `pgbackrest backup` on the primary: a full physical backup into the WAL
    /// archive's repository.
    BaseBackup,
    /// `pg_dump -Fc` of one database, uploaded as one object.
    Dump,
}

impl BackupSpec {
    /// The method backups take: `spec.backup.method`, or its default.
    #[must_use]
    pub fn effective_method(&self) -> BackupMethod {
        self.method.unwrap_or(if self.wal_archive.is_some() {
            BackupMethod::BaseBackup
        } else {
            BackupMethod::Dump
        })
    }
}

/// `spec.backup.retention`: by count or by age, one of them.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.count) != has(self.days)")
        .message("spec.backup.retention: set exactly one of count and days")
)]
pub struct BackupRetention {
    /// Keep the newest this many base backups.
    #[schemars(range(min = 1, max = 9_999_999))]
    pub count: Option<u32>,
    /// Keep the base backups of the last this many days (and always the newest).
    #[schemars(range(min = 1, max = 9_999_999))]
    pub days: Option<u32>,
}

/// `spec.backup.walArchive`: where pgBackRest archives the WAL (its repository is
/// `<prefix>/<cluster>/` in `spec.backup.bucket`, its stanza the cluster's name).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalArchiveSpec {
    /// The endpoint pgBackRest reaches the bucket at, `https://host[:port]` (default
    /// `spec.backup.s3Endpoint`, which must then be https: pgBackRest speaks only TLS).
    #[schemars(regex(pattern = "^https://[^/:]+(:[0-9]+)?/?$"))]
    pub s3_endpoint: Option<String>,
    /// A Secret in the cluster's namespace whose key `ca.crt` holds the CA bundle that
    /// verifies the endpoint's certificate (default: the image's system CAs).
    #[schemars(length(min = 1, max = 253))]
    pub ca_secret: Option<String>,
}

/// The observed state of a PostgresCluster.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct PostgresClusterStatus {
    /// Phase, step, conditions, observedGeneration and the machine record.
    #[serde(flatten)]
    pub engine: EngineStatus<PgState>,
    /// The pod labelled `lockstep.dev/role=primary`: the one `<name>-rw` selects.
    pub primary_pod: Option<String>,
    /// The pods labelled `lockstep.dev/role=replica`: the ones `<name>-ro` selects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replica_pods: Vec<String>,
    /// While a switchover or failover runs: the pod being promoted.
    pub target_primary: Option<String>,
    /// The image every instance ran when the cluster last came to rest.
    pub image: Option<String>,
    /// When the most recent successful backup (scheduled, on demand or final) finished.
    pub last_backup_time: Option<DateTime<Utc>>,
    /// The most recent backup that finished (scheduled, on demand or final), whatever
    /// its outcome: `Unknown (…)`, naming the `lockstep.dev/backup-now` token, when the
    /// Job of a requested backup was lost before its outcome was recorded.
    pub last_backup: Option<LastBackup>,
    /// The earliest moment a recovery (`spec.bootstrap.recovery`) can target: when the
    /// oldest base backup the repository keeps became consistent, as the newest base
    /// backup reported it after its retention ran (`spec.backup.method: BaseBackup`).
    pub first_recoverability_point: Option<DateTime<Utc>>,
    /// The newest WAL file the archive took (`spec.backup.walArchive`), as the primary
    /// that archived it reported it: at most a minute behind while archiving goes on
    /// ([`super::archived`]).
    pub last_archived: Option<LastArchived>,
    /// The most recent failover.
    pub last_failover: Option<FailoverRecord>,
    /// The longest lease duration `L` (seconds) this status has seen the spec or any
    /// instance pod carry: a server may run that long unrenewed after its pod vanished,
    /// so a primary Lease created in place of one that vanished carries it and expires
    /// only after it. It never decreases.
    pub longest_lease_seconds: Option<i64>,
    /// The synchronous terms (`number`, `dataDurability`, how many members) commits may
    /// have been acknowledged under: the spec's, and any earlier ones until every
    /// instance runs the spec's. A failover under `Required` reads enough members for
    /// the strictest of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synchronous_terms: Option<Vec<super::terms::Terms>>,
    /// Every instance pod, by ordinal: its role, whether it is Ready, what its server is
    /// and on which timeline ([`super::instances`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
    /// What the primary last made of each entry of `spec.roles`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<crate::pod::managed::ObjectStatus>,
    /// What the primary last made of each entry of `spec.databases`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<crate::pod::managed::ObjectStatus>,
}

/// An instance in `status.instances`.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// The pod.
    pub pod: String,
    /// Its `lockstep.dev/role` label: `primary`, `replica` or `demoted`.
    pub role: Option<String>,
    /// Its Ready condition holds (it serves).
    pub ready: bool,
    /// What its instance manager last reported its server to be: `primary` (writable) or
    /// `standby` (in recovery).
    pub server: Option<String>,
    /// The timeline its server last reported.
    pub timeline: Option<u32>,
    /// A standby's report: whether its WAL receiver streams (`false`: not for 10 s).
    pub streaming: Option<bool>,
}

pub use crate::pod::archived::LastArchived;

/// A completed failover.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRecord {
    /// When the promoted replica took the primary role.
    pub time: DateTime<Utc>,
    /// What happened and why.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::{PostgresClusterStatus, SUPPORTED_MAJORS, VERSION_MESSAGE, VERSION_PATTERN};

    fn accepted(version: &str) -> bool {
        regex::Regex::new(VERSION_PATTERN)
            .expect("the version pattern compiles")
            .is_match(version)
    }

    #[test]
    fn every_supported_major_is_accepted_with_or_without_a_minor_and_named_in_the_message() {
        for major in SUPPORTED_MAJORS {
            for version in [
                format!("{major}"),
                format!("{major}.1"),
                format!("{major}.12"),
            ] {
                assert!(accepted(&version), "{version}");
            }
            assert!(VERSION_MESSAGE.contains(&major.to_string()), "{major}");
        }
        assert!(VERSION_MESSAGE.starts_with("spec.version "));
    }

    #[test]
    fn a_major_without_an_image_or_a_malformed_version_is_refused() {
        for major in 0..100 {
            assert_eq!(
                accepted(&major.to_string()),
                SUPPORTED_MAJORS.contains(&major),
                "{major}"
            );
        }
        for version in ["150", "18.", "18.1.2", "v18", "18beta1", " 18", "1 8", ""] {
            assert!(!accepted(version), "{version:?} accepted");
        }
    }

    #[test]
    fn a_status_is_written_as_today() {
        crate::engine::record::assert_status_as_today::<PostgresClusterStatus>(
            r#"{"phase":"Ready","observedGeneration":2,"conditions":[],"primaryPod":"pg-0","replicaPods":["pg-1"],"image":"postgres:16"}"#,
        );
    }
}
