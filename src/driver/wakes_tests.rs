//! What wakes a machine, kind by kind: for every owned kind, a change of what some
//! machine reads wakes its owner, and a change of what none reads does not (`docs/decisions/0004-wakeups.md`).
//! The owned-object cache decides this from the projection it keeps
//! ([`super::cache::Project`]); these tests hold each kind to it with realistic changes.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::cache::{Owned, Project};

/// `body` as an object of owner `db` at resourceVersion `rv`.
fn object<K: Project>(rv: &str, body: &Value) -> K {
    let mut value = body.clone();
    let meta = value
        .as_object_mut()
        .expect("an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    meta["name"] = json!("db-x");
    meta["namespace"] = json!("ns");
    meta["resourceVersion"] = json!(rv);
    meta["labels"] = json!({
        "app.kubernetes.io/managed-by": "lockstep",
        "app.kubernetes.io/name": "beacon",
        "app.kubernetes.io/instance": "db",
    });
    serde_json::from_value(value).expect("a valid object")
}

/// Whether `before` → `after` (one watch update) wakes the owner.
fn wakes<K: Project>(before: Value, after: Value) -> bool {
    let store = Owned::<K>::new("beacon");
    store.apply(Event::Apply(object::<K>("1", &before)));
    !store
        .apply(Event::Apply(object::<K>("2", &after)))
        .is_empty()
}

fn sts(replicas: i32, observed: i64, ready: i32) -> Value {
    json!({"spec": {"replicas": replicas, "serviceName": "db", "selector": {},
        "template": {"spec": {"containers": [{"name": "db", "image": "db:1"}]}}},
        "status": {"observedGeneration": observed, "replicas": 3, "readyReplicas": ready}})
}

#[test]
fn a_statefulset_wakes_its_owner_on_its_spec_or_observed_generation_not_on_its_counts() {
    assert!(wakes::<StatefulSet>(sts(3, 1, 0), sts(3, 2, 0)));
    assert!(wakes::<StatefulSet>(sts(3, 1, 0), sts(5, 1, 0)));
    assert!(!wakes::<StatefulSet>(sts(3, 1, 0), sts(3, 1, 2)));
}

fn pod(ready: Option<&str>, node: Option<&str>, phase: &str) -> Value {
    let conditions: Vec<Value> = ready
        .map(
            |s| json!({"type": "Ready", "status": s, "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        )
        .into_iter()
        .chain([json!({"type": "PodScheduled", "status": "True"})])
        .collect();
    json!({"spec": {"containers": [{"name": "db", "image": "db:1"}], "nodeName": node},
        "status": {"phase": phase, "conditions": conditions,
            "containerStatuses": [{"name": "db", "image": "db:1", "imageID": "",
                "ready": ready == Some("True"), "restartCount": 0}]}})
}

#[test]
fn a_pod_wakes_its_owner_when_it_becomes_ready_or_loses_readiness_and_not_before() {
    assert!(wakes::<Pod>(
        pod(Some("False"), Some("n1"), "Running"),
        pod(Some("True"), Some("n1"), "Running")
    ));
    assert!(wakes::<Pod>(
        pod(Some("True"), Some("n1"), "Running"),
        pod(Some("False"), Some("n1"), "Running")
    ));
    assert!(!wakes::<Pod>(
        pod(None, None, "Pending"),
        pod(Some("False"), Some("n1"), "Running")
    ));
    assert!(!wakes::<Pod>(
        pod(Some("False"), Some("n1"), "Pending"),
        pod(Some("Unknown"), Some("n1"), "Running")
    ));
}

#[test]
fn a_pod_wakes_its_owner_when_it_is_being_deleted_or_runs_another_image() {
    let mut deleting = pod(Some("True"), Some("n1"), "Running");
    deleting["metadata"] = json!({"deletionTimestamp": "2026-01-01T00:00:00Z"});
    assert!(wakes::<Pod>(
        pod(Some("True"), Some("n1"), "Running"),
        deleting
    ));
    let mut upgraded = pod(Some("True"), Some("n1"), "Running");
    upgraded["spec"]["containers"][0]["image"] = json!("db:2");
    assert!(wakes::<Pod>(
        pod(Some("True"), Some("n1"), "Running"),
        upgraded
    ));
}

#[test]
fn a_pod_wakes_its_owner_when_its_agent_reports_otherwise_not_when_only_the_time_moves() {
    let reporting = |status: &str, message: &str, at: &str| {
        let mut p = pod(Some("True"), Some("n1"), "Running");
        p["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(
                json!({"type": "lockstep.dev/SettingsApplied", "status": status,
                "reason": "R", "message": message, "lastTransitionTime": at}),
            );
        p
    };
    let at = "2026-01-01T00:00:00Z";
    assert!(wakes::<Pod>(
        pod(Some("True"), Some("n1"), "Running"),
        reporting("True", "all", at)
    ));
    assert!(wakes::<Pod>(
        reporting("True", "all", at),
        reporting("False", "pending restart: shared_buffers", at)
    ));
    assert!(wakes::<Pod>(
        reporting("False", "pending restart: a", at),
        reporting("False", "pending restart: a, b", at)
    ));
    assert!(!wakes::<Pod>(
        reporting("True", "all", at),
        reporting("True", "all", "2026-01-02T00:00:00Z")
    ));
}

fn service(port: i32, ingress: &str) -> Value {
    json!({"spec": {"clusterIP": "None", "ports": [{"name": "db", "port": port}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ingress}]}}})
}

#[test]
fn a_service_wakes_its_owner_on_its_spec_not_on_its_status() {
    assert!(wakes::<Service>(
        service(5432, "10.0.0.1"),
        service(5433, "10.0.0.1")
    ));
    assert!(!wakes::<Service>(
        service(5432, "10.0.0.1"),
        service(5432, "10.0.0.2")
    ));
}

fn job(complete: bool, active: i32) -> Value {
    let conditions: Vec<Value> = complete
        .then(|| json!({"type": "Complete", "status": "True"}))
        .into_iter()
        .collect();
    json!({"spec": {"template": {"spec": {"containers": [{"name": "hook", "image": "h:1"}]}}},
        "status": {"conditions": conditions, "active": active}})
}

#[test]
fn a_job_wakes_its_owner_when_it_finishes_not_when_its_pods_come_and_go() {
    assert!(wakes::<Job>(job(false, 1), job(true, 0)));
    assert!(!wakes::<Job>(job(false, 0), job(false, 1)));
}

fn cronjob(schedule: &str, last: &str) -> Value {
    json!({"spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec":
            {"containers": [{"name": "backup", "image": "b:1"}]}}}}},
        "status": {"lastScheduleTime": last}})
}

#[test]
fn a_cronjob_wakes_its_owner_on_its_spec_not_on_its_last_schedule() {
    assert!(wakes::<CronJob>(
        cronjob("0 * * * *", "2026-01-01T00:00:00Z"),
        cronjob("5 * * * *", "2026-01-01T00:00:00Z")
    ));
    assert!(!wakes::<CronJob>(
        cronjob("0 * * * *", "2026-01-01T00:00:00Z"),
        cronjob("0 * * * *", "2026-01-01T01:00:00Z")
    ));
}

#[test]
fn a_configmap_wakes_its_owner_on_its_data_not_on_a_new_version_alone() {
    assert!(wakes::<ConfigMap>(
        json!({"data": {"a": "1"}}),
        json!({"data": {"a": "2"}})
    ));
    assert!(!wakes::<ConfigMap>(
        json!({"data": {"a": "1"}}),
        json!({"data": {"a": "1"}})
    ));
}

fn pdb(min: i32, healthy: i32) -> Value {
    json!({"spec": {"minAvailable": min}, "status": {"currentHealthy": healthy,
        "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3}})
}

#[test]
fn a_pod_disruption_budget_wakes_its_owner_on_its_spec_not_on_its_status() {
    assert!(wakes::<PodDisruptionBudget>(pdb(2, 3), pdb(1, 3)));
    assert!(!wakes::<PodDisruptionBudget>(pdb(2, 3), pdb(2, 2)));
}

fn claim(size: &str, phase: &str) -> Value {
    json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        "status": {"phase": phase}})
}

#[test]
fn a_claim_wakes_its_owner_when_its_request_grows_not_when_it_binds() {
    assert!(wakes::<PersistentVolumeClaim>(
        claim("1Gi", "Bound"),
        claim("2Gi", "Bound")
    ));
    assert!(!wakes::<PersistentVolumeClaim>(
        claim("1Gi", "Pending"),
        claim("1Gi", "Bound")
    ));
}

fn lease(holder: &str, renewed: &str) -> Value {
    json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}})
}

#[test]
fn a_lease_wakes_its_owner_on_a_new_holder_not_on_a_renewal() {
    assert!(wakes::<Lease>(
        lease("db-0", "2026-01-01T00:00:00.000000Z"),
        lease("db-1", "2026-01-01T00:00:00.000000Z")
    ));
    assert!(!wakes::<Lease>(
        lease("db-0", "2026-01-01T00:00:00.000000Z"),
        lease("db-0", "2026-01-01T00:00:02.000000Z")
    ));
}

#[test]
fn every_owned_kind_wakes_its_owner_when_it_appears_or_disappears() {
    fn both<K: Project>(body: Value) {
        let store = Owned::<K>::new("beacon");
        assert!(
            !store
                .apply(Event::Apply(object::<K>("1", &body)))
                .is_empty()
        );
        assert!(
            !store
                .apply(Event::Delete(object::<K>("2", &body)))
                .is_empty()
        );
    }
    both::<StatefulSet>(sts(3, 1, 0));
    both::<Pod>(pod(None, None, "Pending"));
    both::<Service>(service(5432, "10.0.0.1"));
    both::<Job>(job(false, 0));
    both::<CronJob>(cronjob("0 * * * *", "2026-01-01T00:00:00Z"));
    both::<ConfigMap>(json!({"data": {"a": "1"}}));
    both::<PodDisruptionBudget>(pdb(2, 3));
    both::<NetworkPolicy>(json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}));
    both::<PersistentVolumeClaim>(claim("1Gi", "Pending"));
    both::<Lease>(lease("db-0", "2026-01-01T00:00:00.000000Z"));
}
