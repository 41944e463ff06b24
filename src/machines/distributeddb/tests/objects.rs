//! Rendering and observation.
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

use super::super::actions::{HookPhase, Shape};
use super::super::observe::observe;
use super::super::render;
use super::super::state::DdbState;
use super::super::{DistributedDB, DistributedDb};
use super::{spec, with_backups, with_hooks};
use crate::driver::{Cache, Operator};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::testing::{assert_env, assert_runs_once, job_pod};

fn cache(statefulsets: Vec<StatefulSet>, pods: Vec<Pod>) -> Cache {
    crate::machines::common::testing::cache::<DistributedDb>(statefulsets, pods)
}

fn db(spec: super::DistributedDBSpec) -> DistributedDB {
    let mut db = DistributedDB::new("db", spec);
    db.metadata.namespace = Some("ns".to_owned());
    db.metadata.uid = Some("uid-db".to_owned());
    db
}

fn shape(image: &str) -> Shape {
    Shape {
        image: image.to_owned(),
        replicas: 3,
        claim_size: "1Gi".to_owned(),
    }
}

/// What the API server would hand back: the object with defaults and a status.
fn as_stored(sts: &StatefulSet) -> StatefulSet {
    let mut v = serde_json::to_value(sts).unwrap_or_default();
    v["metadata"]["uid"] = json!("uid-sts");
    v["metadata"]["generation"] = json!(1);
    v["spec"]["revisionHistoryLimit"] = json!(10);
    v["spec"]["template"]["spec"]["dnsPolicy"] = json!("ClusterFirst");
    v["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] =
        json!("/dev/termination-log");
    v["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
    v["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] = json!("Filesystem");
    v["status"] = json!({"observedGeneration": 1, "replicas": 3});
    serde_json::from_value(v).unwrap_or_default()
}

#[test]
fn the_statefulset_is_replaced_by_hand_with_claims_from_storage() {
    let mut s = spec("db:1");
    s.storage.storage_class_name = Some("fast".to_owned());
    s.pod_labels
        .insert("app.kubernetes.io/instance".to_owned(), "evil".to_owned());
    let sts = render::statefulset(&db(s), &shape("db:1")).unwrap_or_default();
    let spec = &sts.spec;
    assert_eq!(
        spec.update_strategy
            .as_ref()
            .and_then(|u| u.type_.as_deref()),
        Some("OnDelete")
    );
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    assert_eq!(spec.service_name.as_deref(), Some("db"));
    let claim = &spec
        .volume_claim_templates
        .as_ref()
        .map(|v| v[0].clone())
        .unwrap_or_default();
    let claim_spec = claim.spec.clone().unwrap_or_default();
    assert_eq!(claim_spec.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(
        claim_spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned())
            .map(|q| q.0),
        Some("1Gi".to_owned())
    );
    let owner = &sts.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("DistributedDB", Some(true))
    );
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(
        template_labels
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some("db"),
        "our labels win"
    );
    assert!(sts.annotations().contains_key("lockstep.dev/applied-hash"));
}

#[test]
fn the_disruption_budget_lets_one_member_of_the_statefulset_go_at_a_time() {
    let db = db(spec("db:1"));
    let pdb = render::pdb(&db).expect("renders");
    let sts = render::statefulset(&db, &shape("db:1")).expect("renders");
    let spec = pdb.spec.unwrap_or_default();
    assert_eq!(
        spec.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        sts.spec.selector.match_labels
    );
    assert_eq!(pdb.metadata.owner_references.map(|r| r.len()), Some(1));
}

#[test]
fn a_stored_statefulset_with_api_defaults_conforms_and_an_edited_one_does_not() {
    let d = db(spec("db:1"));
    let live = as_stored(&render::statefulset(&d, &shape("db:2")).unwrap_or_default());
    let o = observe(&d, &cache(vec![live.clone()], Vec::new()));
    let sts = o.statefulset.clone().unwrap_or_else(|| panic!("{o:?}"));
    assert!(sts.conforms && sts.caught_up, "{sts:?}");
    assert_eq!(sts.image.as_deref(), Some("db:2"));
    assert!(sts.holds("db:2", 3) && !sts.holds("db:1", 3));

    let mut edited = live;
    if let Some(c) = edited
        .spec
        .template
        .spec
        .as_mut()
        .map(|s| &mut s.containers[0])
    {
        c.env = None;
    }
    let o = observe(&d, &cache(vec![edited], Vec::new()));
    assert!(o.statefulset.is_some_and(|s| !s.conforms));
}

fn pod(name: &str, owner_kind: &str, owner: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "labels": {
                "app.kubernetes.io/managed-by": "lockstep",
                "app.kubernetes.io/name": "distributeddb",
                "app.kubernetes.io/instance": "db"
            },
            "ownerReferences": [{"apiVersion": "v1", "kind": owner_kind, "name": owner, "uid": "x"}]
        },
        "spec": {"containers": [{"name": "db", "image": "db:1"}]},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap_or_default()
}

#[test]
fn observation_maps_database_pods_by_ordinal_and_ignores_job_pods() {
    let d = db(spec("db:1"));
    let pods = vec![
        pod("db-0", "StatefulSet", "db", true),
        pod("db-2", "StatefulSet", "db", false),
        pod(
            "db-pre-2-1a2b3c4d-1-xyz12",
            "Job",
            "db-pre-2-1a2b3c4d-1",
            true,
        ),
    ];
    let o = observe(&d, &cache(Vec::new(), pods));
    assert_eq!(o.pods.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
    assert!(o.pods[&0].ready && !o.pods[&2].ready);
    assert_eq!(o.pods[&0].image.as_deref(), Some("db:1"));
}

#[test]
fn a_hook_job_runs_once_at_the_target_image_about_its_pod() {
    let d = db(with_hooks(spec("db:2"), 1));
    let job = render::hook_job(&d, HookPhase::Pre, 2, "pre-2-abc-1", "db:1", "db:2")
        .ok()
        .flatten()
        .unwrap_or_default();
    assert_eq!(job.name_any(), "db-pre-2-abc-1");
    assert_runs_once(&job, 60);
    let container = &job_pod(&job).containers[0];
    assert_eq!(container.image.as_deref(), Some("db:2"));
    assert_env(
        container,
        &[("TARGET_POD", "db-2"), ("TARGET_HOST", "db-2.db.ns.svc")],
    );
}

#[test]
fn backups_get_s3_credentials_only_through_secret_references() {
    let d = db(with_backups(spec("db:1")));
    let job = render::backup_job(&d, "final-backup-1", BackupKind::Final)
        .ok()
        .flatten()
        .unwrap_or_default();
    let cron = d
        .spec
        .backup_policy
        .as_ref()
        .and_then(|p| render::cronjob(&d, p).ok())
        .unwrap_or_default();
    for text in [
        serde_json::to_string(&job).unwrap_or_default(),
        serde_json::to_string(&cron).unwrap_or_default(),
    ] {
        assert!(
            text.contains(r#""secretKeyRef":{"key":"accessKey","name":"s3""#),
            "{text}"
        );
        assert!(
            !text.contains(r#""name":"AWS_ACCESS_KEY_ID","value""#),
            "{text}"
        );
    }
    assert_eq!(
        job.labels().get("lockstep.dev/purpose").map(String::as_str),
        Some("final-backup")
    );
}

#[test]
fn the_status_reports_the_version_the_pods_and_the_last_backup() {
    let d = db(spec("db:2"));
    let mut o = super::at_rest("db:1");
    o.jobs.push(super::job(
        "backup-x",
        crate::machines::common::jobs::Purpose::Backup,
        super::succeeded(),
    ));
    let state = super::upgrading("db:2", 2, super::UpgradeStep::Restart, "u");
    let status =
        DistributedDb::status(&d, Default::default(), Some(&state), &o, chrono::Utc::now());
    assert_eq!(
        status["version"],
        json!("db:1"),
        "the version moves only at the end"
    );
    assert_eq!(status["readyReplicas"], json!(3));
    assert_eq!(status["lastBackup"]["job"], json!("db-backup-x"));
    let ready = DdbState::Ready {
        version: "db:2".to_owned(),
        replicas: 3,
    };
    let status =
        DistributedDb::status(&d, Default::default(), Some(&ready), &o, chrono::Utc::now());
    assert_eq!(status["version"], json!("db:2"));
}
