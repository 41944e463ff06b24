//! Rendering.

use super::*;
use crate::machines::common::testing::{assert_env, assert_restricted, assert_secret_env, job_pod};
use crate::machines::postgres::api::{Placement, Spread, SpreadSpec};
use k8s_openapi::api::core::v1::{PodAntiAffinity, Probe};
use serde::Deserialize;

pub(super) fn object(spec: PostgresClusterSpec) -> PostgresCluster {
    let mut pg = PostgresCluster::new("pg", spec);
    pg.metadata.namespace = Some("db".to_owned());
    pg.metadata.uid = Some("owner-uid".to_owned());
    pg
}

/// `c` reaches the primary through the `-rw` Service as the superuser, whose password
/// comes from the credentials Secret.
fn assert_connects_to_the_primary_as_superuser(c: &Container) {
    assert_env(c, &[("PRIMARY_HOST", "pg-rw.db.svc")]);
    assert_secret_env(
        c,
        &[("POSTGRES_PASSWORD", ("pg-creds", "superuserPassword"))],
    );
}

/// `c` runs `script` of the scripts ConfigMap, with bash.
fn assert_runs(c: &Container, script: &str) {
    let path = format!("/lockstep/scripts/{script}");
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        ["bash", path.as_str()]
    );
}

#[test]
fn the_pods_run_the_instance_manager_copied_in_by_an_init_container() {
    let pg = object(spec("16.3"));
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    assert_eq!(
        sts.spec.update_strategy.and_then(|u| u.type_).as_deref(),
        Some("OnDelete")
    );
    let template = sts.spec.template;
    let labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    assert!(
        !labels.contains_key(render::ROLE_LABEL),
        "roles come from the operator, never from the template"
    );
    let pod = template.spec.unwrap_or_default();
    let security = pod.security_context.clone().unwrap_or_default();
    assert_eq!(
        (security.run_as_user, security.fs_group),
        (Some(render::POSTGRES_UID), Some(render::POSTGRES_UID))
    );
    assert_eq!(
        security.fs_group_change_policy.as_deref(),
        Some("OnRootMismatch"),
        "the kubelet walks the data directory for fsGroup only once, not at every mount"
    );

    let init = pod.init_containers.clone().unwrap_or_default();
    assert_eq!(init.len(), 1);
    assert_eq!(init[0].name, render::INSTALL_CONTAINER);
    assert_eq!(init[0].image.as_deref(), Some(render::instance_image()));
    assert_eq!(
        init[0].command.clone().unwrap_or_default(),
        [
            "/lockstep",
            "install-instance",
            "--to",
            render::INSTALL_PATH
        ]
    );

    let c = &pod.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some(V1),
        "the server's image is the user's"
    );
    assert_eq!(
        c.command.clone().unwrap_or_default(),
        render::INSTANCE_COMMAND
    );
    let probe = |p: &Option<Probe>| {
        p.as_ref()
            .and_then(|p| p.exec.clone())
            .and_then(|e| e.command)
    };
    let liveness = render::LIVENESS_COMMAND.map(str::to_owned).to_vec();
    assert_eq!(probe(&c.liveness_probe), Some(liveness.clone()));
    assert_eq!(probe(&c.startup_probe), Some(liveness));
    assert!(
        c.lifecycle.is_none(),
        "no preStop hook: SIGTERM reaches the manager, which stops the server itself"
    );
    let mounted = |into: &Container, path: &str| {
        into.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "lockstep-bin" && m.mount_path == path)
    };
    assert!(mounted(c, render::BIN_PATH) && mounted(&init[0], render::INSTALL_PATH));

    assert_connects_to_the_primary_as_superuser(c);
    assert_env(
        c,
        &[
            ("PGDATA", render::PGDATA),
            ("POSTGRES_DB", "app"),
            ("LOCKSTEP_ROLE_FILE", "/etc/lockstep/podinfo/labels"),
        ],
    );
    let replication = ("pg-creds", "replicationPassword");
    assert_secret_env(c, &[("REPLICATION_PASSWORD", replication)]);
    let volumes = pod.volumes.unwrap_or_default();
    assert!(volumes.iter().any(|v| v.downward_api.is_some()));
    assert!(
        volumes
            .iter()
            .any(|v| v.name == "lockstep-bin" && v.empty_dir.is_some()),
        "the copy lives in an emptyDir"
    );
    assert!(
        !volumes.iter().any(|v| v.config_map.is_some()),
        "the server's pod mounts no script"
    );
}

#[test]
fn the_rw_and_ro_services_select_by_role() {
    let pg = object(spec("16.3"));
    let selector = |kind| {
        render::service(&pg, kind)
            .ok()
            .and_then(|s| s.spec)
            .and_then(|s| s.selector)
            .unwrap_or_default()
    };
    assert_eq!(
        selector(ServiceKind::ReadWrite)
            .get(render::ROLE_LABEL)
            .map(String::as_str),
        Some("primary")
    );
    assert_eq!(
        selector(ServiceKind::ReadOnly)
            .get(render::ROLE_LABEL)
            .map(String::as_str),
        Some("replica")
    );
    assert!(!selector(ServiceKind::Headless).contains_key(render::ROLE_LABEL));
    assert_eq!(render::service_name(&pg, ServiceKind::ReadWrite), "pg-rw");
}

#[test]
fn the_scripts_configmap_ships_every_script_verbatim() {
    let cm = render::scripts(&object(spec("16.3"))).expect("renders");
    let data = cm.data.unwrap_or_default();
    for (file, text) in render::SCRIPTS {
        assert_eq!(data.get(file).map(String::as_str), Some(text));
    }
}

#[test]
fn generated_passwords_are_random_and_only_in_the_secret() {
    let mut s = spec("16.3");
    s.credentials_secret = None;
    let pg = object(s);
    let a = render::credentials_secret(&pg)
        .string_data
        .unwrap_or_default();
    let b = render::credentials_secret(&pg)
        .string_data
        .unwrap_or_default();
    assert_eq!(a.len(), 2);
    assert!(a.values().all(|p| p.len() == 32));
    assert_ne!(a, b);
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    let text = serde_json::to_string(&sts).unwrap_or_default();
    assert!(a.values().all(|p| !text.contains(p.as_str())));
    assert!(text.contains("pg-credentials"));
}

#[test]
fn backup_jobs_run_backup_sh_against_the_primary_with_secrets_by_reference() {
    let pg = object(with_backups(spec("16.3"), Some("0 3 * * *")));
    let job = render::backup_job(&pg, "final-backup-1", BackupKind::Final)
        .ok()
        .flatten()
        .expect("renders");
    assert_eq!(job.name_any(), "pg-final-backup-1");
    let pod = job_pod(&job);
    let c = &pod.containers[0];
    assert_runs(c, "backup.sh");
    assert_connects_to_the_primary_as_superuser(c);
    assert_env(
        c,
        &[
            ("CLUSTER_NAME", "pg"),
            ("S3_BUCKET", "backups"),
            ("S3_PREFIX", "prod"),
            ("BACKUP_DATABASE", "app"),
        ],
    );
    assert_secret_env(c, &[("AWS_SECRET_ACCESS_KEY", ("s3", "secretKey"))]);
    assert!(pod.volumes.unwrap_or_default().len() == 2);
    let cj = render::cronjob(&pg).ok().flatten().expect("renders");
    assert_eq!(cj.spec.schedule, "0 3 * * *");
    let unscheduled = object(with_backups(spec("16.3"), None));
    assert!(render::cronjob(&unscheduled).ok().flatten().is_none());
}

#[test]
fn with_a_wal_archive_backups_are_base_backups_asked_of_the_primarys_manager() {
    let mut with = with_backups(spec("16.3"), Some("0 3 * * *"));
    if let Some(backup) = with.backup.as_mut() {
        backup.wal_archive = Some(crate::machines::postgres::api::WalArchiveSpec::default());
        backup.retention = Some(crate::machines::postgres::api::BackupRetention {
            count: Some(7),
            days: None,
        });
    }
    let pg = object(with);
    let job = render::backup_job(&pg, "backup-1", BackupKind::OnDemand)
        .ok()
        .flatten()
        .expect("renders");
    let c = &job_pod(&job).containers[0];
    assert_runs(c, "basebackup.sh");
    assert_env(
        c,
        &[
            ("MANAGER_URL", "http://pg-rw.db.svc:9187"),
            ("BACKUP_RETENTION", "retention-count=7"),
        ],
    );
    let env = c.env.clone().unwrap_or_default();
    assert!(
        env.iter().all(|e| e
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .is_none_or(|r| r.name == "pg-endpoint-token")),
        "a base-backup Job needs no secret but the endpoint token: {env:?}"
    );
    // The -rw Service reaches the primary's manager.
    let rw = render::service(
        &pg,
        crate::machines::postgres::actions::ServiceKind::ReadWrite,
    )
    .expect("renders");
    let ports = rw.spec.and_then(|s| s.ports).unwrap_or_default();
    assert!(
        ports
            .iter()
            .any(|p| p.name.as_deref() == Some("manager") && p.port == 9187),
        "{ports:?}"
    );
    // `method: Dump` keeps the logical export.
    let mut dump = pg.clone();
    if let Some(backup) = dump.spec.backup.as_mut() {
        backup.method = Some(crate::machines::postgres::api::BackupMethod::Dump);
    }
    let job = render::backup_job(&dump, "backup-1", BackupKind::OnDemand)
        .ok()
        .flatten()
        .expect("renders");
    assert_runs(&job_pod(&job).containers[0], "backup.sh");
}

#[test]
fn a_role_label_is_patched_only_on_the_pod_as_it_was_read() {
    let pg = object(spec("16.3"));
    let mut seen = pod(1, V1, true, Some(Role::Replica));
    seen.version = "42".to_owned();
    let ops = <Postgres as crate::driver::Operator>::render(&pg, &seen.label(1, Role::Primary))
        .expect("renders");
    match ops.as_slice() {
        [
            crate::driver::Op::Label {
                name, precondition, ..
            },
        ] => {
            assert_eq!(name, "pg-1");
            assert_eq!(
                precondition
                    .as_ref()
                    .map(|p| (p.uid.as_str(), p.resource_version.as_str())),
                Some((seen.uid.as_str(), "42"))
            );
        }
        other => panic!("one fenced label patch, got {other:?}"),
    }
}

#[test]
fn primary_available_follows_the_primary_pod_in_the_middle_of_an_upgrade() {
    let pg = object(spec(V2));
    let state = upgrading_to_v2(0);
    let available = |o: &Observed| {
        crate::machines::postgres::status::primary_available(&pg, &state, &[], o, t(5), Some(1))
            .map(|c| (c.status, c.reason))
    };
    let mut o = at_rest(V1, 0);
    assert_eq!(
        available(&o),
        Some(("True".to_owned(), "Primary".to_owned()))
    );
    edit(&mut o, 0, |p| p.ready = false);
    assert_eq!(
        available(&o),
        Some(("False".to_owned(), "PrimaryNotReady".to_owned()))
    );
}

// --- placement --------------------------------------------------------------------

fn instance_pod(pg: &PostgresCluster) -> k8s_openapi::api::core::v1::PodSpec {
    render::statefulset(pg, V1, 3)
        .expect("renders")
        .spec
        .template
        .spec
        .expect("a pod template")
}

fn anti_affinity(pod: &k8s_openapi::api::core::v1::PodSpec) -> PodAntiAffinity {
    pod.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.clone())
        .unwrap_or_default()
}

#[test]
fn instances_prefer_a_node_each_by_default() {
    let pod = instance_pod(&object(spec("16.3")));
    let terms = anti_affinity(&pod)
        .preferred_during_scheduling_ignored_during_execution
        .unwrap_or_default();
    let [term] = terms.as_slice() else {
        panic!("one preferred term: {terms:?}")
    };
    assert_eq!(
        term.pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
    assert_eq!(
        term.pod_affinity_term
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(render::selector(&object(spec("16.3")))),
        "the term selects this cluster's instances, nobody else's"
    );
    assert!(
        anti_affinity(&pod)
            .required_during_scheduling_ignored_during_execution
            .is_none()
    );
}

#[test]
fn a_required_spread_over_zones_never_lets_two_instances_share_a_zone() {
    let pg = object(PostgresClusterSpec {
        spread: SpreadSpec {
            mode: Spread::Required,
            topology_key: "topology.kubernetes.io/zone".to_owned(),
        },
        ..spec("16.3")
    });
    let terms = anti_affinity(&instance_pod(&pg))
        .required_during_scheduling_ignored_during_execution
        .unwrap_or_default();
    assert_eq!(
        terms
            .iter()
            .map(|t| t.topology_key.as_str())
            .collect::<Vec<_>>(),
        ["topology.kubernetes.io/zone"]
    );
}

#[test]
fn every_pod_of_a_cluster_is_admitted_under_the_restricted_pod_security_standard() {
    let mut archived = with_backups(spec("16.3"), Some("0 3 * * *"));
    if let Some(backup) = archived.backup.as_mut() {
        backup.wal_archive = Some(crate::machines::postgres::api::WalArchiveSpec::default());
    }
    let mut dumped = with_backups(spec("16.3"), Some("0 3 * * *"));
    if let Some(backup) = dumped.backup.as_mut() {
        backup.method = Some(crate::machines::postgres::api::BackupMethod::Dump);
    }
    for (what, pg) in [("archiving", object(archived)), ("dumping", object(dumped))] {
        let instance = instance_pod(&pg);
        assert_restricted(&instance, &format!("{what}: an instance"));
        assert_eq!(
            instance.init_containers.as_ref().map(Vec::len),
            Some(1),
            "the install-instance init container is checked too"
        );
        for kind in [BackupKind::OnDemand, BackupKind::Final] {
            let job = render::backup_job(&pg, "backup-1", kind)
                .ok()
                .flatten()
                .expect("renders");
            assert_restricted(&job_pod(&job), &format!("{what}: a {kind:?} backup Job"));
        }
        let scheduled = render::cronjob(&pg)
            .ok()
            .flatten()
            .and_then(|cj| cj.spec.job_template.spec)
            .and_then(|j| j.template.spec)
            .expect("a scheduled backup pod");
        assert_restricted(&scheduled, &format!("{what}: a scheduled backup"));
    }
}

#[test]
fn placement_reaches_the_instances_and_every_job_but_only_instances_spread() {
    let placement: Placement = serde_json::from_value(serde_json::json!({
        "nodeSelector": {"disktype": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}],
    }))
    .expect("a placement");
    let pg = object(PostgresClusterSpec {
        placement: Some(placement.clone()),
        ..with_backups(spec("16.3"), Some("0 3 * * *"))
    });
    let placed = |pod: &k8s_openapi::api::core::v1::PodSpec, what: &str| {
        assert_eq!(
            pod.node_selector.as_ref(),
            Some(&placement.node_selector),
            "{what}"
        );
        assert_eq!(
            pod.tolerations.as_ref(),
            Some(&placement.tolerations),
            "{what}"
        );
    };
    let instance = instance_pod(&pg);
    placed(&instance, "the instances");
    assert_eq!(
        instance.topology_spread_constraints.as_ref(),
        Some(&placement.topology_spread_constraints)
    );
    assert!(
        anti_affinity(&instance)
            .preferred_during_scheduling_ignored_during_execution
            .is_some()
    );
    let backup = render::backup_job(&pg, "final-backup-1", BackupKind::Final)
        .ok()
        .flatten()
        .expect("renders");
    let pod = job_pod(&backup);
    placed(&pod, "backup");
    assert!(
        anti_affinity(&pod)
            .preferred_during_scheduling_ignored_during_execution
            .is_none(),
        "a backup Job needs no node of its own"
    );
    let scheduled = render::cronjob(&pg)
        .ok()
        .flatten()
        .and_then(|cj| cj.spec.job_template.spec)
        .and_then(|j| j.template.spec)
        .expect("a scheduled backup pod");
    placed(&scheduled, "scheduled backups");
}

#[test]
fn the_example_in_examples_is_a_postgres_cluster_this_operator_reads() {
    let text = include_str!("../../../../examples/postgrescluster.yaml");
    let clusters: Vec<PostgresCluster> = serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("a YAML document"))
        .filter(|v| v.get("kind").and_then(|k| k.as_str()) == Some("PostgresCluster"))
        .map(|v| serde_yaml::from_value(v).expect("a PostgresCluster"))
        .collect();
    let [pg] = clusters.as_slice() else {
        panic!("one PostgresCluster in the example: {clusters:?}")
    };
    assert_eq!(pg.spec.spread.mode, Spread::Preferred);
    assert!(pg.spec.backup.is_some());
}

#[test]
fn a_scale_down_deletes_the_removed_claims_but_a_statefulset_of_no_pod_keeps_every_one() {
    let pg = object(spec("16.3"));
    let policy = |replicas| {
        let sts = render::statefulset(&pg, V1, replicas).expect("renders");
        let p = sts
            .spec
            .persistent_volume_claim_retention_policy
            .unwrap_or_default();
        (p.when_scaled, p.when_deleted)
    };
    let (delete, retain) = (Some("Delete".to_owned()), Some("Retain".to_owned()));
    assert_eq!(policy(2), (delete, retain.clone()));
    assert_eq!(
        policy(0),
        (retain.clone(), retain),
        "a hibernating cluster wakes on its own volumes"
    );
}

#[test]
fn only_the_managers_container_gets_a_token_and_it_lasts_ten_minutes() {
    let pg = object(spec("16.3"));
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    let pod = sts.spec.template.spec.unwrap_or_default();
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "the pod mounts no token of its own"
    );
    let projected = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find_map(|v| v.projected)
        .and_then(|p| p.sources)
        .unwrap_or_default();
    let token = projected
        .iter()
        .find_map(|s| s.service_account_token.clone())
        .expect("a projected token");
    assert_eq!(
        (token.expiration_seconds, token.audience),
        (Some(render::api_access::TOKEN_SECONDS), None)
    );
    assert_eq!(render::api_access::TOKEN_SECONDS, 600);
    let mounts_at = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == render::api_access::PATH)
    };
    assert!(pod.containers.iter().all(mounts_at));
    assert!(
        !pod.init_containers.iter().flatten().any(mounts_at),
        "the init container that copies the manager in gets no token"
    );
}

#[test]
fn a_dump_backup_dumps_the_application_database_falling_back_to_postgres_only_by_default() {
    let env_of = |database: Option<&str>| {
        let mut s = with_backups(spec("16.3"), None);
        s.database = database.map(str::to_owned);
        let job = render::backup_job(&object(s), "backup-1", BackupKind::OnDemand)
            .ok()
            .flatten()
            .expect("renders");
        let env = job_pod(&job).containers[0].env.clone().unwrap_or_default();
        ["BACKUP_DATABASE", "BACKUP_DATABASE_FALLBACK"].map(|name| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        })
    };
    assert_eq!(
        env_of(None),
        [Some("app".to_owned()), Some("postgres".to_owned())],
        "the default application database, else (a cluster older than it) postgres"
    );
    assert_eq!(env_of(Some("orders")), [Some("orders".to_owned()), None]);
}
