//! Rendering: the typed objects a PostgresCluster owns, as functions of the custom
//! resource (the StatefulSet also of the state's image and replicas).
//!
//! Everything here is pure except [`credentials_secret`], [`app_secret`] and
//! [`endpoint_token_secret`], which draw random values; each is created once (`AlreadyExists` counts as success)
//! and never re-rendered for a drift check, so the passwords a cluster was bootstrapped
//! with and the token its pods read never change.
//!
//! | object | name | notes |
//! |---|---|---|
//! | ConfigMap | `<name>-scripts` | the Jobs' scripts (`backup.sh`, `basebackup.sh`, `restore.sh` and the `lib.sh` they source), mounted at `/lockstep/scripts` in the Jobs |
//! | Secret | `<name>-credentials` | only without `spec.credentialsSecret`; random passwords; not owned (kept, like the claims) |
//! | Secret | `<name>-app` | the application role's name and password, its database and how to connect (`uri`, `jdbc-uri`, `pgpass`); random password; generated whatever `spec.credentialsSecret` says; not owned (kept); [`app`] |
//! | Secret | `<name>-tls` | the cluster's CA and the server and replication certificates it issued ([`tls`]); created once; owned; the instances mount all but the CA's key |
//! | Secret | `<name>-endpoint-token` | key `token`, random; authorises writes to the instance managers' endpoints (`POST /backup`): mounted read-only (`0440`) in the instances, an environment variable of the base-backup Jobs; created before the StatefulSet and before each backup Job or CronJob; not owned (kept); [`token`] |
//! | Service | `<name>` | headless, publishes not-ready addresses: each pod's stable DNS name |
//! | Service | `<name>-rw` | selects `lockstep.dev/role=primary` |
//! | Service | `<name>-ro` | selects `lockstep.dev/role=replica` (neither Service selects `demoted`) |
//! | PodDisruptionBudget | `<name>` | `maxUnavailable: 1` |
//! | NetworkPolicy | `<name>` | only with `spec.networkPolicy.enabled` (deleted when it is turned off); ingress to the instances only ([`netpol`]) |
//! | StatefulSet | `<name>` | `OnDelete`, `Parallel`, claim template `data`; the init container copies `lockstep` from the operator's image and the server's container runs `lockstep instance` as PID 1 (`render::manager`); claims of removed ordinals are deleted on scale-down (kept when it scales to zero), kept on deletion; pods run as `<name>-instance` |
//! | Lease | `<name>-primary` | names the one pod allowed to be writable; created by the operator, renewed by its holder, handed over by the operator; a failover's survey asks the standbys through it (`lockstep.dev/survey`, [`crate::pod::answers`]) |
//! | ServiceAccount, Role, RoleBinding | `<name>-instance` | the pods may get, update and patch the Lease `<name>-primary`, nothing else; applied with the StatefulSet |
//! | backup Jobs | `<name>-backup-<hash>`, `<name>-final-backup-<attempt>` | `backup.sh` against `<name>-rw`, or `basebackup.sh` asking its instance manager (`spec.backup.method`) |
//! | CronJob | `<name>-backup` | scheduled backups, the same way |
//!
//! Every pod (instances and Jobs) is admitted under the `restricted` Pod Security
//! Standard: it runs as `postgres` ([`POSTGRES_UID`]), the volumes' group, under the
//! runtime's default seccomp profile, and no container has a capability or may gain
//! privileges ([`crate::machines::common::security`]).
//!
//! The server container's environment is `lockstep instance`'s settings
//! (`src/instance/run/args.rs`); the Jobs' follows the scripts' contract
//! (`src/machines/postgres/scripts/README.md`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, EnvVar, ExecAction, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    Probe, Secret, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use rand::Rng;

use super::actions::{Role, ServiceKind};
use super::api::{
    FencingSpec, PostgresCluster, REPLICATION_PASSWORD_KEY, REPLICATION_USER, SUPERUSER,
    SUPERUSER_PASSWORD_KEY,
};
use super::instance_settings;
use crate::machines::common::Error;
use crate::machines::common::applied::with_applied_hash;
use crate::machines::common::disruption;
use crate::machines::common::env::{from_field, from_secret, plain};
use crate::machines::common::meta::{self, Owner};
use crate::machines::common::placement;
use crate::machines::common::security;
use crate::machines::common::storage;
use crate::pod::settings;

pub mod api_access;
pub mod app;
pub mod archive;
mod jobs;
mod lease;
mod manager;
pub mod netpol;
pub mod tls;
pub mod token;

pub use app::{app_name, app_secret};
pub use jobs::{backup_env, backup_job, cronjob};
pub use lease::{
    LEASE_SECONDS_ENV, instance_binding, instance_name, instance_role, lease, lease_hand_over,
    lease_name, lease_survey, micro_time, service_account,
};
pub use manager::{
    BIN_PATH, DEFAULT_INSTANCE_IMAGE, INSTALL_CONTAINER, INSTALL_PATH, INSTANCE_BINARY,
    INSTANCE_COMMAND, LIVENESS_COMMAND, instance_image, set_instance_image,
};
pub use netpol::{
    CLIENT_LABEL, network_policy, network_policy_name, operator_namespace, set_operator_namespace,
};
pub use token::{endpoint_token_secret, token_name};

/// `app.kubernetes.io/name` of everything a PostgresCluster owns.
pub const KIND_LABEL: &str = "postgrescluster";
/// The label carrying a pod's role (`primary` or `replica`), maintained by the operator.
pub const ROLE_LABEL: &str = "lockstep.dev/role";
/// The PostgreSQL container's name.
pub const CONTAINER: &str = "postgres";
/// The volume claim template's name (claims are `data-<name>-<ordinal>`).
pub const VOLUME: &str = "data";
/// Where the volume is mounted.
pub const DATA_PATH: &str = "/var/lib/postgresql/data";
/// `PGDATA`: a sub-directory of the volume (its root may hold `lost+found`).
pub const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// Where the scripts ConfigMap is mounted.
pub const SCRIPTS_PATH: &str = "/lockstep/scripts";
/// Where the downward-API labels file is mounted (`<path>/labels`).
pub const PODINFO_PATH: &str = "/etc/lockstep/podinfo";
/// The PostgreSQL port.
pub const PORT: i32 = 5432;
/// The port of the instance manager's `/metrics` in every instance (named `metrics`).
pub const METRICS_PORT: i32 = 9187;
/// The uid and gid of `postgres` in the official images.
pub const POSTGRES_UID: i64 = 999;

/// The pod scripts, shipped verbatim in the scripts ConfigMap (`lib.sh` first: the
/// others source it from their own directory).
pub const SCRIPTS: [(&str, &str); 4] = [
    ("lib.sh", include_str!("../scripts/lib.sh")),
    ("backup.sh", include_str!("../scripts/backup.sh")),
    ("basebackup.sh", include_str!("../scripts/basebackup.sh")),
    ("restore.sh", include_str!("../scripts/restore.sh")),
];

/// A probe or hook running `command`.
fn exec(command: &[&str]) -> ExecAction {
    ExecAction {
        command: Some(command.iter().map(|c| (*c).to_owned()).collect()),
    }
}

/// The probe that asks whether the server answers at all ([`LIVENESS_COMMAND`]), every
/// 10 s, failing after `failure_threshold` misses in a row.
fn alive(failure_threshold: i32) -> Probe {
    Probe {
        exec: Some(exec(&LIVENESS_COMMAND)),
        period_seconds: Some(10),
        timeout_seconds: Some(5),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    }
}

const SCRIPTS_VOLUME: &str = "scripts";
const PODINFO_VOLUME: &str = "podinfo";
const TMP_VOLUME: &str = "tmp";
const TMP_PATH: &str = "/lockstep/tmp";

/// The owner's standard labels.
pub fn labels(pg: &PostgresCluster) -> BTreeMap<String, String> {
    meta::standard_labels(KIND_LABEL, &pg.name_any())
}

/// The PostgreSQL pods' selector (immutable once the StatefulSet exists).
pub fn selector(pg: &PostgresCluster) -> BTreeMap<String, String> {
    meta::component_labels(KIND_LABEL, &pg.name_any(), "database")
}

/// `pod` with `spec.placement` (every pod of the cluster: instances and Jobs).
pub(super) fn placed(pg: &PostgresCluster, pod: PodSpec) -> PodSpec {
    match &pg.spec.placement {
        Some(placement) => placement.apply(pod),
        None => pod,
    }
}

/// An instance's `pod` with the anti-affinity of `spec.spread` added to its own: the
/// instances keep off each other's node (or zone).
fn spread(pg: &PostgresCluster, mut pod: PodSpec) -> PodSpec {
    pod.affinity = placement::spread_terms(
        pod.affinity.take(),
        pg.spec.spread.mode,
        &pg.spec.spread.topology_key,
        &selector(pg),
    );
    pod
}

pub(super) fn namespace(pg: &PostgresCluster) -> String {
    pg.namespace().unwrap_or_default()
}

/// The name of one of the cluster's Services.
pub fn service_name(pg: &PostgresCluster, kind: ServiceKind) -> String {
    let name = pg.name_any();
    match kind {
        ServiceKind::Headless => name,
        ServiceKind::ReadWrite => format!("{name}-rw"),
        ServiceKind::ReadOnly => format!("{name}-ro"),
    }
}

/// `<name>-rw.<namespace>.svc`: where the primary is reached.
pub fn primary_host(pg: &PostgresCluster) -> String {
    meta::service_host(&service_name(pg, ServiceKind::ReadWrite), &namespace(pg))
}

/// The ConfigMap holding the scripts.
pub fn scripts_name(pg: &PostgresCluster) -> String {
    format!("{}-scripts", pg.name_any())
}

/// The Secret the pods read their passwords from.
pub fn credentials_name(pg: &PostgresCluster) -> String {
    pg.spec
        .credentials_secret
        .clone()
        .unwrap_or_else(|| format!("{}-credentials", pg.name_any()))
}

pub(super) fn metadata(pg: &PostgresCluster, name: String) -> Result<ObjectMeta, Error> {
    Ok(Owner::of(pg)?.child(name, labels(pg)))
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn scripts_volume(pg: &PostgresCluster) -> Volume {
    Volume {
        name: SCRIPTS_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: scripts_name(pg),
            default_mode: Some(0o555),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// A pod of the cluster, `restricted` ([`security::restrict`]): it runs as PostgreSQL's
/// user, whose group the volumes are.
fn restricted(mut pod: PodSpec) -> PodSpec {
    security::restrict(&mut pod, POSTGRES_UID);
    pod
}

/// The ConfigMap holding the pod scripts.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn scripts(pg: &PostgresCluster) -> Result<ConfigMap, Error> {
    let cm = ConfigMap {
        metadata: metadata(pg, scripts_name(pg))?,
        data: Some(
            SCRIPTS
                .iter()
                .map(|(file, text)| ((*file).to_owned(), (*text).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    };
    with_applied_hash(cm, |c| &mut c.metadata)
}

/// A random password: 32 alphanumeric characters (about 190 bits).
fn password() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// The generated credentials Secret, with fresh random passwords. Created once, never
/// applied: only its first rendering is ever stored. It has no owner reference: like the
/// volume claims (which hold a data directory bootstrapped with these passwords) it
/// outlives the cluster, so a cluster re-created under the same name finds both.
pub fn credentials_secret(pg: &PostgresCluster) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("{}-credentials", pg.name_any())),
            namespace: Some(namespace(pg)),
            labels: Some(labels(pg)),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([
            (SUPERUSER_PASSWORD_KEY.to_owned(), password()),
            (REPLICATION_PASSWORD_KEY.to_owned(), password()),
        ])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// One of the cluster's Services.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn service(pg: &PostgresCluster, kind: ServiceKind) -> Result<Service, Error> {
    let mut select = selector(pg);
    let (cluster_ip, publish_not_ready) = match kind {
        ServiceKind::Headless => (Some("None".to_owned()), Some(true)),
        ServiceKind::ReadWrite => {
            let role: &str = Role::Primary.into();
            select.insert(ROLE_LABEL.to_owned(), role.to_owned());
            (None, None)
        }
        ServiceKind::ReadOnly => {
            let role: &str = Role::Replica.into();
            select.insert(ROLE_LABEL.to_owned(), role.to_owned());
            (None, None)
        }
    };
    let mut ports = vec![ServicePort {
        name: Some("postgresql".to_owned()),
        port: PORT,
        target_port: Some(IntOrString::String("postgresql".to_owned())),
        ..ServicePort::default()
    }];
    if kind == ServiceKind::ReadWrite {
        // The primary's instance manager: the base-backup Jobs ask it for a backup
        // (`POST /backup`, `instance::run::basebackup`).
        ports.push(ServicePort {
            name: Some("manager".to_owned()),
            port: METRICS_PORT,
            target_port: Some(IntOrString::String("metrics".to_owned())),
            ..ServicePort::default()
        });
    }
    let svc = Service {
        metadata: metadata(pg, service_name(pg, kind))?,
        spec: Some(ServiceSpec {
            cluster_ip,
            publish_not_ready_addresses: publish_not_ready,
            selector: Some(select),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    with_applied_hash(svc, |s| &mut s.metadata)
}

/// The PodDisruptionBudget: voluntary disruptions take one instance at a time.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn pdb(pg: &PostgresCluster) -> Result<PodDisruptionBudget, Error> {
    disruption::one_at_a_time(metadata(pg, pg.name_any())?, selector(pg))
}

/// The instance manager's environment (`instance::run::args::InstanceArgs`).
fn server_env(pg: &PostgresCluster) -> Vec<EnvVar> {
    let secret = credentials_name(pg);
    let mut env = vec![
        plain("PGDATA", PGDATA),
        plain("PGPORT", PORT.to_string()),
        plain("LOCKSTEP_METRICS_PORT", METRICS_PORT.to_string()),
        from_field("POD_NAME", "metadata.name"),
        plain("LOCKSTEP_ROLE_FILE", format!("{PODINFO_PATH}/labels")),
        plain(
            "LOCKSTEP_ANNOTATIONS_FILE",
            format!("{PODINFO_PATH}/annotations"),
        ),
        plain("LOCKSTEP_ROLE_LABEL", ROLE_LABEL),
        plain("POSTGRES_USER", SUPERUSER),
        from_secret("POSTGRES_PASSWORD", &secret, SUPERUSER_PASSWORD_KEY),
        plain("REPLICATION_USER", REPLICATION_USER),
        from_secret("REPLICATION_PASSWORD", &secret, REPLICATION_PASSWORD_KEY),
        plain("PRIMARY_HOST", primary_host(pg)),
        plain("PRIMARY_PORT", PORT.to_string()),
        // A standby streams from the Lease's holder at `<pod>.<this>`.
        plain(
            "LOCKSTEP_PEER_DOMAIN",
            meta::service_host(&service_name(pg, ServiceKind::Headless), &namespace(pg)),
        ),
        // Fencing (the contract: src/machines/postgres/scripts/README.md).
        from_field("POD_UID", "metadata.uid"),
        from_field("POD_NAMESPACE", "metadata.namespace"),
        plain("LOCKSTEP_LEASE_NAME", lease_name(pg)),
        plain(
            LEASE_SECONDS_ENV,
            pg.spec.fencing.lease_duration_seconds.to_string(),
        ),
        plain(
            "LOCKSTEP_FENCE_SECONDS",
            pg.spec.fencing.fence_seconds().to_string(),
        ),
        plain(
            "LOCKSTEP_RENEW_SECONDS",
            FencingSpec::RENEW_SECONDS.to_string(),
        ),
        plain(tls::TLS_DIR_ENV, tls::TLS_PATH),
    ];
    if let Some(db) = &pg.spec.database {
        env.push(plain("POSTGRES_DB", db));
    }
    if pg.spec.certificates.is_some() {
        env.push(plain(tls::SERVER_TLS_DIR_ENV, tls::SERVER_TLS_PATH));
    }
    env.extend(app::server_env(pg));
    env.extend(archive::env(pg));
    env.extend(archive::recovery_env(pg));
    env.push(token::server_env());
    env
}

/// The annotations that carry `spec.postgresql` to an instance pod ([`settings`]):
/// none when nothing is set.
#[must_use]
pub fn settings_annotations(pg: &PostgresCluster) -> Option<BTreeMap<String, String>> {
    instance_settings::annotation_of(pg)
        .map(|value| BTreeMap::from([(settings::SETTINGS_ANNOTATION.to_owned(), value)]))
}

/// The StatefulSet's claim retention policy on a scale-down to `replicas`
/// (`whenScaled`): a removed replica's data is stale, and a new one clones afresh
/// (`Delete`); but a StatefulSet of no pod (hibernation, or an in-place restore's stop,
/// which deletes the claims itself once every server is down) keeps them all
/// (`Retain`), so its members come back on their own volumes. Rendered in the same write
/// as the count, so the controller never condemns a claim of a cluster going to sleep.
#[must_use]
pub fn when_scaled(replicas: i32) -> &'static str {
    if replicas == 0 { "Retain" } else { "Delete" }
}

/// The StatefulSet running `image` × `replicas`.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn statefulset(pg: &PostgresCluster, image: &str, replicas: i32) -> Result<StatefulSet, Error> {
    let name = pg.name_any();
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        command: Some(INSTANCE_COMMAND.map(str::to_owned).to_vec()),
        ports: Some(vec![
            ContainerPort {
                name: Some("postgresql".to_owned()),
                container_port: PORT,
                ..ContainerPort::default()
            },
            // The instance manager's `/metrics` (`src/instance/run/metrics.rs`).
            ContainerPort {
                name: Some("metrics".to_owned()),
                container_port: METRICS_PORT,
                ..ContainerPort::default()
            },
        ]),
        env: Some(server_env(pg)),
        resources: pg.spec.resources.clone(),
        readiness_probe: Some(Probe {
            exec: Some(exec(&[
                "pg_isready",
                "-h",
                "127.0.0.1",
                "-p",
                "5432",
                "-U",
                SUPERUSER,
            ])),
            period_seconds: Some(5),
            timeout_seconds: Some(4),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        // Only a server that does not answer at all is restarted: a busy primary that
        // rejects connections for a while (recovery, a checkpoint) is not. The startup
        // probe holds the liveness probe off while the manager waits for its role or
        // its Lease (up to an hour).
        startup_probe: Some(alive(360)),
        liveness_probe: Some(alive(6)),
        // Why the manager last exited stays on the pod (`kubectl describe`: Last State
        // .. Message) after the kubelet drops the dead container and its log: a fence
        // that fired while the pod was cut off is told there.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        // No preStop hook: SIGTERM reaches the manager (PID 1), which stops the server
        // fast while it keeps renewing, then releases the Lease with its last position.
        volume_mounts: Some(
            [
                mount(VOLUME, DATA_PATH, false),
                mount(manager::BIN_VOLUME, BIN_PATH, true),
                mount(PODINFO_VOLUME, PODINFO_PATH, true),
                token::volume(pg).1,
                api_access::volume().1,
            ]
            .into_iter()
            .chain(archive::ca_volume(pg).map(|(_, m)| m))
            .chain([tls::volume(pg).1])
            .chain(tls::server_volume(pg).map(|(_, m)| m))
            .collect(),
        ),
        ..Container::default()
    };
    let podinfo = Volume {
        name: PODINFO_VOLUME.to_owned(),
        downward_api: Some(DownwardAPIVolumeSource {
            // The role label, and the settings annotation (`settings`): the kubelet
            // rewrites both files as soon as it sees the pod change.
            items: Some(
                [
                    ("labels", "metadata.labels"),
                    ("annotations", "metadata.annotations"),
                ]
                .map(|(path, field)| DownwardAPIVolumeFile {
                    path: path.to_owned(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: field.to_owned(),
                        api_version: None,
                    }),
                    ..DownwardAPIVolumeFile::default()
                })
                .to_vec(),
            ),
            ..DownwardAPIVolumeSource::default()
        }),
        ..Volume::default()
    };
    let sts = StatefulSet {
        metadata: metadata(pg, name.clone())?,
        spec: StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(name),
            pod_management_policy: Some("Parallel".to_owned()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_scaled: Some(when_scaled(replicas).to_owned()),
                    // Deleting the cluster keeps the data.
                    when_deleted: Some("Retain".to_owned()),
                },
            ),
            selector: LabelSelector {
                match_labels: Some(selector(pg)),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(selector(pg)),
                    annotations: settings_annotations(pg),
                    ..ObjectMeta::default()
                }),
                spec: Some(spread(
                    pg,
                    placed(
                        pg,
                        restricted(PodSpec {
                            init_containers: Some(vec![manager::install_container()]),
                            containers: vec![container],
                            service_account_name: Some(instance_name(pg)),
                            // Only the manager's container gets a token, short-lived
                            // (`api_access`).
                            automount_service_account_token: Some(false),
                            termination_grace_period_seconds: Some(60),
                            volumes: Some(
                                [
                                    manager::bin_volume(),
                                    podinfo,
                                    token::volume(pg).0,
                                    api_access::volume().0,
                                ]
                                .into_iter()
                                .chain(archive::ca_volume(pg).map(|(v, _)| v))
                                .chain([tls::volume(pg).0])
                                .chain(tls::server_volume(pg).map(|(v, _)| v))
                                .collect(),
                            ),
                            ..PodSpec::default()
                        }),
                    ),
                )),
            },
            volume_claim_templates: Some(vec![storage::claim_template(
                VOLUME,
                labels(pg),
                pg.spec.storage_class_name.clone(),
                pg.spec.storage_size.clone(),
            )]),
            ..StatefulSetSpec::default()
        },
        status: None,
    };
    with_applied_hash(sts, |s| &mut s.metadata)
}
