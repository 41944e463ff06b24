//! Rendering: the typed objects a DistributedDB owns, as pure functions of the custom
//! resource (and, for the StatefulSet, the state's [`Shape`]).
//!
//! Observation renders the same objects to check the live ones for drift
//! ([`crate::machines::common::subset`]), so what is compared is exactly what would be
//! applied.
//!
//! | object | name | notes |
//! |---|---|---|
//! | headless Service | `<name>` | `clusterIP: None`, publishes not-ready addresses |
//! | PodDisruptionBudget | `<name>` | `maxUnavailable: 1` ([`disruption`]) |
//! | StatefulSet | `<name>` | `OnDelete`, `Parallel` (pods start together at creation; Scaling steps `replicas` by one), claim template `data` |
//! | pods (by the StatefulSet) | `<name>-<ordinal>` | container `db`, volume at `/var/lib/data` |
//! | hook Jobs | `<name>-{pre,post}-<ordinal>-<hash>-<attempt>` | run once |
//! | backup Jobs | `<name>-backup-<hash>`, `<name>-final-backup-<attempt>` | run once |
//! | CronJob | `<name>-backup` | scheduled backups |
//!
//! `spec.placement` goes into every pod template above (database, hook, backup,
//! scheduled backup); `spec.readinessProbe` and `spec.livenessProbe` into the database
//! container.
//!
//! Every one of those pods is admitted under the `restricted` Pod Security Standard
//! ([`security::restrict`]): it runs as uid and gid [`security::NON_ROOT_UID`], the
//! group of its volumes, under the runtime's default seccomp profile, and no container
//! has a capability or may gain privileges. The images must work as that user (the
//! `tools/images` etcd and backup images are made for it).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec,
    PodTemplateSpec, Service, ServicePort, ServiceSpec, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;

use super::actions::{HookPhase, Shape};
use super::api::{BackupPolicy, DbPort, DistributedDB};
use super::tls;
use crate::machines::common::Error;
use crate::machines::common::applied::with_applied_hash;
use crate::machines::common::backup::{self, BackupKind, Destination};
use crate::machines::common::disruption;
use crate::machines::common::env::{from_field, from_secret, plain};
use crate::machines::common::jobs::{PodRecipe, Purpose, RunOnce};
use crate::machines::common::meta::{self, Owner};
use crate::machines::common::security;
use crate::machines::common::storage;

/// `app.kubernetes.io/name` of everything a DistributedDB owns.
pub const KIND_LABEL: &str = "distributeddb";
/// The database container's name.
pub const CONTAINER: &str = "db";
/// The volume claim template's name (claims are `data-<name>-<ordinal>`).
pub const VOLUME: &str = "data";
/// Where the volume is mounted.
pub const DATA_PATH: &str = "/var/lib/data";

/// The owner's standard labels.
pub fn labels(db: &DistributedDB) -> BTreeMap<String, String> {
    meta::standard_labels(KIND_LABEL, &db.name_any())
}

/// The database pods' selector (immutable once the StatefulSet exists).
pub fn selector(db: &DistributedDB) -> BTreeMap<String, String> {
    meta::component_labels(KIND_LABEL, &db.name_any(), "database")
}

/// The DistributedDB's namespace (its children's).
pub(super) fn namespace(db: &DistributedDB) -> String {
    db.namespace().unwrap_or_default()
}

/// `<name>-<ordinal>.<name>.<namespace>.svc`: a pod's stable DNS name.
pub fn pod_host(db: &DistributedDB, ordinal: i32) -> String {
    meta::pod_host(&db.name_any(), &namespace(db), ordinal)
}

/// `data-<name>-<ordinal>`: the volume claim of a pod.
pub fn claim_name(db: &DistributedDB, ordinal: i32) -> String {
    format!("{VOLUME}-{}-{ordinal}", db.name_any())
}

/// The PodDisruptionBudget: evictions take one member at a time, so a drain keeps the
/// quorum of three to five members ([`disruption`]).
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn pdb(db: &DistributedDB) -> Result<PodDisruptionBudget, Error> {
    disruption::one_at_a_time(
        Owner::of(db)?.child(db.name_any(), labels(db)),
        selector(db),
    )
}

/// The headless Service giving each pod a stable DNS name.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn service(db: &DistributedDB) -> Result<Service, Error> {
    let svc = Service {
        metadata: Owner::of(db)?.child(db.name_any(), labels(db)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(db)),
            ports: Some(db.spec.ports.iter().map(service_port).collect()),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    with_applied_hash(svc, |s| &mut s.metadata)
}

/// The headless Service's port for a declared port.
fn service_port(p: &DbPort) -> ServicePort {
    ServicePort {
        name: Some(p.name.clone()),
        port: p.port,
        ..ServicePort::default()
    }
}

/// The container's port for a declared port (the same name and number).
fn container_port(p: &DbPort) -> ContainerPort {
    ContainerPort {
        name: Some(p.name.clone()),
        container_port: p.port,
        ..ContainerPort::default()
    }
}

/// The StatefulSet holding `shape`.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn statefulset(db: &DistributedDB, shape: &Shape) -> Result<StatefulSet, Error> {
    let name = db.name_any();
    let spec = &db.spec;
    let mut pod_labels = spec.pod_labels.clone();
    pod_labels.extend(selector(db));
    let tls = tls::member_volume(db);
    let mut member_env = vec![
        from_field("POD_NAME", "metadata.name"),
        plain("DB_SERVICE", meta::service_host(&name, &namespace(db))),
        plain("DB_REPLICAS", shape.replicas.to_string()),
    ];
    member_env.extend(tls.as_ref().map(|_| tls::env()));
    let mut env = member_env.clone();
    env.extend(spec.env.iter().cloned());
    let data_mount = VolumeMount {
        name: VOLUME.to_owned(),
        mount_path: DATA_PATH.to_owned(),
        ..VolumeMount::default()
    };
    let mut mounts = vec![data_mount];
    mounts.extend(tls.as_ref().map(|(_, m)| m.clone()));
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(shape.image.clone()),
        ports: Some(spec.ports.iter().map(container_port).collect()),
        env: Some(env),
        resources: spec.resources.clone(),
        readiness_probe: spec.readiness_probe.clone(),
        liveness_probe: spec.liveness_probe.clone(),
        volume_mounts: Some(mounts.clone()),
        ..Container::default()
    };
    let restore = restore_container(db, &shape.image, member_env, mounts);
    let sts = StatefulSet {
        metadata: Owner::of(db)?.child(name.clone(), labels(db)),
        spec: StatefulSetSpec {
            replicas: Some(shape.replicas),
            service_name: Some(name),
            pod_management_policy: Some("Parallel".to_owned()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(selector(db)),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: (!spec.pod_annotations.is_empty())
                        .then(|| spec.pod_annotations.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(placed(
                    restricted(PodSpec {
                        init_containers: restore.map(|c| vec![c]),
                        containers: vec![container],
                        volumes: tls.map(|(v, _)| vec![v]),
                        ..PodSpec::default()
                    }),
                    db,
                )),
            },
            volume_claim_templates: Some(vec![storage::claim_template(
                VOLUME,
                labels(db),
                spec.storage.storage_class_name.clone(),
                shape.claim_size.clone(),
            )]),
            ..StatefulSetSpec::default()
        },
        status: None,
    };
    with_applied_hash(sts, |s| &mut s.metadata)
}

/// The request growing pod `ordinal`'s volume claim to `size` (server-side applied:
/// only the storage request is owned by Lockstep).
pub fn volume_expansion(db: &DistributedDB, ordinal: i32, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(db, ordinal)),
            namespace: Some(namespace(db)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.to_owned()),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// The hook Job `key` for pod `ordinal`.
///
/// # Errors
/// [`Error`] if the owner has no UID. A hook that is no longer in the spec renders to
/// `None`.
pub fn hook_job(
    db: &DistributedDB,
    phase: HookPhase,
    ordinal: i32,
    key: &str,
    from: &str,
    to: &str,
) -> Result<Option<Job>, Error> {
    let Some(hook) = phase.of(&db.spec) else {
        return Ok(None);
    };
    let name = db.name_any();
    let phase_name: &str = phase.into();
    let mut env = vec![
        plain("HOOK", phase_name),
        plain("TARGET_POD", format!("{name}-{ordinal}")),
        plain("TARGET_ORDINAL", ordinal.to_string()),
        plain("TARGET_HOST", pod_host(db, ordinal)),
        plain("FROM_IMAGE", from),
        plain("TO_IMAGE", to),
    ];
    env.extend(hook.env.iter().cloned());
    let pod = PodRecipe {
        labels: hook.pod_labels.clone(),
        annotations: hook.pod_annotations.clone(),
        container: Container {
            name: "hook".to_owned(),
            image: Some(hook.image.clone().unwrap_or_else(|| to.to_owned())),
            command: (!hook.command.is_empty()).then(|| hook.command.clone()),
            args: (!hook.args.is_empty()).then(|| hook.args.clone()),
            env: Some(env),
            ..Container::default()
        },
        service_account_name: None,
    };
    let owner = Owner::of(db)?;
    let mut job = RunOnce {
        labels: meta::component_labels(KIND_LABEL, &owner.name, "hook"),
        owner: &owner,
        key,
        purpose: Purpose::Hook,
        pod,
        deadline: Some(hook.timeout_seconds),
    }
    .build();
    if let Some(spec) = job.spec.as_mut() {
        place_job(spec, db);
    }
    Ok(Some(job))
}

/// `pod` with `spec.placement` (node selector, tolerations, affinity, topology spread
/// constraints) of `db`.
fn placed(pod: PodSpec, db: &DistributedDB) -> PodSpec {
    match &db.spec.placement {
        Some(placement) => placement.apply(pod),
        None => pod,
    }
}

/// `pod` with the client certificate's volume mounted in each container, and
/// [`tls::TLS_DIR_ENV`] naming it, if `spec.tls` is set.
fn with_client_tls(mut pod: PodSpec, db: &DistributedDB) -> PodSpec {
    if let Some((volume, mount)) = tls::client_volume(db) {
        for c in &mut pod.containers {
            c.volume_mounts
                .get_or_insert_with(Vec::new)
                .push(mount.clone());
            c.env.get_or_insert_with(Vec::new).push(tls::env());
        }
        pod.volumes.get_or_insert_with(Vec::new).push(volume);
    }
    pod
}

/// `pod`, `restricted` ([`security::restrict`]).
fn restricted(mut pod: PodSpec) -> PodSpec {
    security::restrict(&mut pod, security::NON_ROOT_UID);
    pod
}

/// A hook or backup Job's pod template, `restricted`, with `spec.placement` of `db`,
/// and the client certificate if `spec.tls` is set.
fn place_job(job: &mut JobSpec, db: &DistributedDB) {
    if let Some(pod) = job.template.spec.take() {
        job.template.spec = Some(placed(restricted(with_client_tls(pod, db)), db));
    }
}

/// The `restore` init container of `spec.bootstrap.fromBackup`, if set: the member's
/// environment (`member_env`) and volumes (`mounts`: data, certificates), the backup's
/// key and store, the credentials as secret references ([`FromBackup`]'s contract). A
/// store that names neither itself nor a backup policy (the CRD refuses it) renders
/// empty values, which the restore command reports.
fn restore_container(
    db: &DistributedDB,
    image: &str,
    member_env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
) -> Option<Container> {
    let from = db.spec.bootstrap.as_ref()?.from_backup.as_ref()?;
    let policy = db.spec.backup_policy.as_ref().map(destination);
    let or_policy = |own: &Option<String>, of: fn(&Destination) -> String| {
        own.clone()
            .or_else(|| policy.as_ref().map(of))
            .unwrap_or_default()
    };
    let secret = or_policy(&from.s3_credentials_secret, |d| {
        d.credentials_secret.clone()
    });
    let mut env = member_env;
    env.extend([
        plain("RESTORE_KEY", &from.key),
        plain(
            "S3_ENDPOINT",
            or_policy(&from.s3_endpoint, |d| d.s3_endpoint.clone()),
        ),
        plain("S3_BUCKET", or_policy(&from.bucket, |d| d.bucket.clone())),
        from_secret("AWS_ACCESS_KEY_ID", &secret, backup::ACCESS_KEY_KEY),
        from_secret("AWS_SECRET_ACCESS_KEY", &secret, backup::SECRET_KEY_KEY),
    ]);
    Some(Container {
        name: "restore".to_owned(),
        image: Some(from.image.clone().unwrap_or_else(|| image.to_owned())),
        command: (!from.command.is_empty()).then(|| from.command.clone()),
        args: (!from.args.is_empty()).then(|| from.args.clone()),
        env: Some(env),
        resources: db.spec.resources.clone(),
        volume_mounts: Some(mounts),
        ..Container::default()
    })
}

fn destination(policy: &BackupPolicy) -> Destination {
    let (s3_endpoint, bucket, prefix) = policy.destination();
    Destination {
        s3_endpoint,
        bucket,
        prefix,
        credentials_secret: policy.s3_credentials_secret.clone(),
        retention: policy.retention,
    }
}

fn backup_pod(db: &DistributedDB, policy: &BackupPolicy, kind: BackupKind) -> PodRecipe {
    let source = meta::service_host(&db.name_any(), &namespace(db));
    PodRecipe {
        labels: policy.pod_labels.clone(),
        annotations: policy.pod_annotations.clone(),
        container: Container {
            name: "backup".to_owned(),
            image: Some(if policy.image.is_empty() {
                db.spec.image.clone()
            } else {
                policy.image.clone()
            }),
            command: (!policy.command.is_empty()).then(|| policy.command.clone()),
            args: (!policy.args.is_empty()).then(|| policy.args.clone()),
            env: Some(backup::backup_env(&destination(policy), kind, &source)),
            ..Container::default()
        },
        service_account_name: None,
    }
}

/// The backup Job `key` (on demand or final). `None` without a backup policy.
///
/// # Errors
/// [`Error`] if the owner has no UID.
pub fn backup_job(db: &DistributedDB, key: &str, kind: BackupKind) -> Result<Option<Job>, Error> {
    let Some(policy) = &db.spec.backup_policy else {
        return Ok(None);
    };
    let backups = backup::Backups::of(db, KIND_LABEL, policy.timeout_seconds)?;
    Ok(Some(backups.job(
        key,
        kind,
        backup_pod(db, policy, kind),
        |job| place_job(job, db),
    )))
}

/// The scheduled-backup CronJob for `policy`.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn cronjob(db: &DistributedDB, policy: &BackupPolicy) -> Result<CronJob, Error> {
    let pod = backup_pod(db, policy, BackupKind::Scheduled);
    backup::Backups::of(db, KIND_LABEL, policy.timeout_seconds)?.cronjob(
        &policy.schedule,
        policy.suspend,
        &pod,
        |job| place_job(job, db),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use serde_json::json;

    use super::*;
    use crate::machines::common::testing;

    fn db() -> DistributedDB {
        serde_json::from_value(json!({
            "apiVersion": "lockstep.dev/v1alpha1",
            "kind": "DistributedDB",
            "metadata": {"name": "etcd", "namespace": "ns", "uid": "u-1"},
            "spec": {
                "image": "etcd:1",
                "storage": {"size": "1Gi"},
                "upgrade": {"preHook": {"command": ["pre"]}},
                "backupPolicy": {
                    "schedule": "0 3 * * *",
                    "s3Endpoint": "http://s3",
                    "s3CredentialsSecret": "s3",
                    "bucket": "b",
                },
                "placement": {
                    "nodeSelector": {"lockstep.dev/real-node": "true"},
                    "tolerations": [{"key": "lockstep.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                    ]}},
                },
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 2379}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 2379}},
            }
        }))
        .expect("a DistributedDB")
    }

    fn assert_placed(pod: Option<&PodSpec>, what: &str) {
        let pod = pod.unwrap_or_else(|| panic!("{what} has a pod spec"));
        let want = db().spec.placement.expect("placement");
        assert_eq!(
            pod.node_selector.as_ref(),
            Some(&want.node_selector),
            "{what}"
        );
        assert_eq!(pod.tolerations.as_ref(), Some(&want.tolerations), "{what}");
        assert_eq!(pod.affinity, want.affinity, "{what}");
    }

    #[test]
    fn placement_reaches_every_pod_template_and_probes_the_database_container() {
        let db = db();
        let shape = Shape {
            image: "etcd:1".to_owned(),
            replicas: 3,
            claim_size: "1Gi".to_owned(),
        };
        let sts = statefulset(&db, &shape).expect("a StatefulSet");
        let pod = sts.spec.template.spec.as_ref();
        assert_placed(pod, "the StatefulSet");
        let container = &pod.expect("pod").containers[0];
        assert_eq!(container.readiness_probe, db.spec.readiness_probe);
        assert_eq!(container.liveness_probe, db.spec.liveness_probe);

        let hook = hook_job(&db, HookPhase::Pre, 2, "pre-2-x-1", "etcd:1", "etcd:2")
            .expect("a hook Job")
            .expect("a pre-hook");
        assert_placed(
            hook.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
            "the hook Job",
        );
        for kind in [BackupKind::OnDemand, BackupKind::Final] {
            let job = backup_job(&db, "backup-x", kind)
                .expect("a backup Job")
                .expect("a policy");
            assert_placed(
                job.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
                "a backup Job",
            );
        }
        let policy = db.spec.backup_policy.as_ref().expect("a policy");
        let cron = cronjob(&db, policy).expect("a CronJob");
        assert_placed(
            cron.spec
                .job_template
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref()),
            "the CronJob",
        );
    }

    #[test]
    fn a_cluster_bootstrapped_from_a_backup_restores_each_member_in_an_init_container() {
        let mut db = db();
        let shape = Shape {
            image: "etcd:1".to_owned(),
            replicas: 3,
            claim_size: "1Gi".to_owned(),
        };
        let plain_pod = statefulset(&db, &shape)
            .expect("a StatefulSet")
            .spec
            .template
            .spec;
        assert_eq!(plain_pod.and_then(|p| p.init_containers), None);
        db.spec.bootstrap = serde_json::from_value(json!({"fromBackup": {
            "key": "etcd/final.db", "command": ["etcd-restore"],
        }}))
        .expect("a bootstrap");
        let pod = statefulset(&db, &shape)
            .expect("a StatefulSet")
            .spec
            .template
            .spec
            .expect("a pod");
        testing::assert_restricted(&pod, "a member restored from a backup");
        let init = pod.init_containers.as_deref().unwrap_or_default();
        assert_eq!(init.len(), 1, "{init:?}");
        let restore = &init[0];
        assert_eq!(restore.image.as_deref(), Some("etcd:1"));
        assert_eq!(restore.volume_mounts, pod.containers[0].volume_mounts);
        let env = |name: &str| {
            restore
                .env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} in {:?}", restore.env))
        };
        assert_eq!(env("RESTORE_KEY").value.as_deref(), Some("etcd/final.db"));
        // The store is the backup policy's; the credentials stay secret references.
        assert_eq!(env("S3_ENDPOINT").value.as_deref(), Some("http://s3"));
        assert_eq!(env("S3_BUCKET").value.as_deref(), Some("b"));
        let secret = env("AWS_SECRET_ACCESS_KEY")
            .value_from
            .and_then(|v| v.secret_key_ref)
            .expect("a secret reference");
        assert_eq!(secret.name, "s3");
        assert!(env("POD_NAME").value_from.is_some());
    }

    #[test]
    fn a_scaling_hook_job_is_told_its_hook_and_member_and_is_restricted() {
        let mut db = db();
        let hook = db
            .spec
            .upgrade
            .as_ref()
            .and_then(|u| u.pre_hook.clone())
            .expect("a pre-hook");
        db.spec.scaling = Some(crate::machines::distributeddb::api::ScalingPolicy {
            pre_scale_up: Some(hook),
            ..Default::default()
        });
        let job = hook_job(
            &db,
            HookPhase::PreScaleUp,
            3,
            "pre-scale-up-3-x-1",
            "etcd:1",
            "etcd:1",
        )
        .expect("a hook Job")
        .expect("a pre-scale-up hook");
        let pod = testing::job_pod(&job);
        testing::assert_restricted(&pod, "a scaling hook Job");
        let env: BTreeMap<String, String> = pod.containers[0]
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect();
        assert_eq!(env.get("HOOK").map(String::as_str), Some("pre-scale-up"));
        assert_eq!(env.get("TARGET_ORDINAL").map(String::as_str), Some("3"));
        assert_eq!(env.get("TARGET_POD").map(String::as_str), Some("etcd-3"));
        let none = hook_job(
            &db,
            HookPhase::PostScaleUp,
            3,
            "post-scale-up-3-x-1",
            "etcd:1",
            "etcd:1",
        )
        .expect("no error");
        assert!(
            none.is_none(),
            "a hook that is not configured renders nothing"
        );
    }

    #[test]
    fn every_pod_it_renders_is_admitted_under_the_restricted_pod_security_standard() {
        let mut db = db();
        if let Some(upgrade) = db.spec.upgrade.as_mut() {
            upgrade.post_hook = upgrade.pre_hook.clone();
        }
        let shape = Shape {
            image: "etcd:1".to_owned(),
            replicas: 3,
            claim_size: "1Gi".to_owned(),
        };
        let sts = statefulset(&db, &shape).expect("a StatefulSet");
        let mut pods = vec![("the database", sts.spec.template.spec.unwrap_or_default())];
        for phase in [HookPhase::Pre, HookPhase::Post] {
            let hook = hook_job(&db, phase, 2, "hook-2-x-1", "etcd:1", "etcd:2")
                .expect("a hook Job")
                .expect("a hook");
            pods.push(("a hook Job", testing::job_pod(&hook)));
        }
        for kind in [BackupKind::OnDemand, BackupKind::Final] {
            let job = backup_job(&db, "backup-x", kind)
                .expect("a backup Job")
                .expect("a policy");
            pods.push(("a backup Job", testing::job_pod(&job)));
        }
        let policy = db.spec.backup_policy.as_ref().expect("a policy");
        let cron = cronjob(&db, policy).expect("a CronJob");
        pods.push((
            "the CronJob",
            cron.spec
                .job_template
                .spec
                .and_then(|s| s.template.spec)
                .unwrap_or_default(),
        ));
        for (what, pod) in &pods {
            testing::assert_restricted(pod, what);
            let context = pod.security_context.clone().unwrap_or_default();
            assert_eq!(
                (context.run_as_user, context.fs_group),
                (Some(security::NON_ROOT_UID), Some(security::NON_ROOT_UID)),
                "{what} runs as the non-root user, whose group its volumes are"
            );
        }
    }

    #[test]
    fn without_placement_the_pods_are_left_to_the_scheduler() {
        let mut db = db();
        db.spec.placement = None;
        db.spec.readiness_probe = None;
        let shape = Shape {
            image: "etcd:1".to_owned(),
            replicas: 3,
            claim_size: "1Gi".to_owned(),
        };
        let sts = statefulset(&db, &shape).expect("a StatefulSet");
        let pod = sts.spec.template.spec.expect("a pod template");
        assert_eq!(
            (pod.node_selector, pod.tolerations, pod.affinity),
            (None, None, None)
        );
        assert_eq!(pod.containers[0].readiness_probe, None);
    }
}
