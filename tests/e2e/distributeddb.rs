//! DistributedDB end to end, on the real control plane with KWOK pods: creation, the
//! ordered hooked upgrade (asserted from watched pod deletions and Job creations), an
//! upgrade held by someone else's disruption budget, a failing pre-hook, an operator killed mid-upgrade, drift and scaling, backups, a
//! failing final backup, and the API server's validation.
//!
//! KWOK runs no containers: database pods become Ready on their own, Job pods complete
//! after about a second, and a pod labelled `lockstep.dev/kwok-fail=true` fails (so a
//! hook or backup with that label in its `podLabels` fails).

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use lockstep::driver;
use lockstep::engine::conditions;
use lockstep::machines::distributeddb::actions::backup_key;
use lockstep::machines::distributeddb::{DistributedDB, DistributedDBSpec, DistributedDb};

use crate::support::{
    Env, Fixture, InProcessOperator, OperatorProcess, ReconcileCounts, ReconcileProbe, RequestLog,
    counted_client, counts_until, merge_json, wait_for, wait_for_all, wait_gone,
};

// ------------------------------------------------------------------ helpers

fn spec(value: serde_json::Value) -> DistributedDBSpec {
    serde_json::from_value(value).expect("a valid DistributedDB spec")
}

/// Three pods of `db:1`, with hooks that KWOK completes.
fn hooked(extra: serde_json::Value) -> DistributedDBSpec {
    let mut base = json!({
        "replicas": 3,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
        "upgrade": {
            "preHook": {"command": ["drain"], "retryLimit": 0},
            "postHook": {"command": ["verify"], "retryLimit": 0}
        }
    });
    merge_json(&mut base, extra);
    spec(base)
}

fn policy(schedule: &str) -> serde_json::Value {
    json!({
        "schedule": schedule,
        "s3Endpoint": "https://s3.example",
        "s3CredentialsSecret": "s3",
        "bucket": "backups",
        "image": "registry.example/db-backup:1",
    })
}

/// A namespace with the DistributedDB CRD and the S3 credentials Secret.
type Db = Fixture<DistributedDb>;

impl Fixture<DistributedDb> {
    async fn create(&self, name: &str, spec: DistributedDBSpec) -> DistributedDB {
        self.create_object(&DistributedDB::new(name, spec)).await
    }

    async fn json_patch(&self, name: &str, ops: serde_json::Value) {
        let patch: json_patch::Patch = serde_json::from_value(ops).expect("a JSON patch");
        self.api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .unwrap_or_else(|e| panic!("JSON-patch {name}: {e}"));
    }

    async fn ready_at(&self, name: &str, image: &str) -> DistributedDB {
        let image = image.to_owned();
        self.until(name, &format!("Ready at {image}"), move |db| {
            is_ready_at(db, &image)
        })
        .await
    }

    async fn degraded(&self, name: &str, reason: &str) -> DistributedDB {
        let reason = reason.to_owned();
        self.until(name, &format!("Degraded with reason {reason}"), move |db| {
            condition(Some(db), conditions::DEGRADED)
                .is_some_and(|c| c.status == conditions::status::TRUE && c.reason == reason)
        })
        .await
    }
}

fn condition<'a>(
    db: Option<&'a DistributedDB>,
    type_: &str,
) -> Option<&'a lockstep::engine::Condition> {
    db?.status.as_ref()?.engine.condition(type_)
}

fn is_ready_at(db: &DistributedDB, image: &str) -> bool {
    crate::support::at_rest(db)
        && db.status.as_ref().and_then(|s| s.version.as_deref()) == Some(image)
}

/// What happened to a DistributedDB's pods and Jobs, in the order the watches saw it:
/// `delete db-2` when a database pod first shows a deletion, `job pre-2` when a hook or
/// backup Job first appears (its key without the hash and attempt).
struct Recorder {
    log: Arc<Mutex<Vec<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Recorder {
    async fn start(env: &Env, name: &str) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let selector = format!("app.kubernetes.io/instance={name}");
        let (pods_listed, pods_ready) = tokio::sync::oneshot::channel();
        let (jobs_listed, jobs_ready) = tokio::sync::oneshot::channel();
        let pods = {
            let api: Api<Pod> = env.api();
            let log = log.clone();
            let config = watcher::Config::default().labels(&selector);
            let name = name.to_owned();
            tokio::spawn(async move {
                let mut deleted = std::collections::BTreeSet::new();
                let mut listed = Some(pods_listed);
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    let (pod, gone) = match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = listed.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                        watcher::Event::Delete(p) => (p, true),
                        watcher::Event::Init => continue,
                    };
                    let ordinal = pod
                        .name_any()
                        .strip_prefix(&format!("{name}-"))
                        .and_then(|o| o.parse::<u32>().ok());
                    let uid = pod.uid().unwrap_or_default();
                    if let Some(ordinal) = ordinal
                        && (gone || pod.metadata.deletion_timestamp.is_some())
                        && deleted.insert(uid)
                    {
                        log.lock()
                            .expect("the log")
                            .push(format!("delete {name}-{ordinal}"));
                    }
                }
            })
        };
        let jobs = {
            let api: Api<Job> = env.api();
            let log = log.clone();
            let config = watcher::Config::default().labels(&selector);
            tokio::spawn(async move {
                let mut seen = std::collections::BTreeSet::new();
                let mut listed = Some(jobs_listed);
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    let job = match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = listed.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        watcher::Event::Apply(j) | watcher::Event::InitApply(j) => j,
                        watcher::Event::Delete(_) | watcher::Event::Init => continue,
                    };
                    let key = job
                        .labels()
                        .get("lockstep.dev/job")
                        .cloned()
                        .unwrap_or_else(|| "scheduled-backup".to_owned());
                    if seen.insert(job.name_any()) {
                        let short: Vec<&str> = key.splitn(3, '-').take(2).collect();
                        log.lock()
                            .expect("the log")
                            .push(format!("job {}", short.join("-")));
                    }
                }
            })
        };
        let _ = pods_ready.await;
        let _ = jobs_ready.await;
        Self {
            log,
            tasks: vec![pods, jobs],
        }
    }

    /// The database pod deletions and hook Job creations seen so far.
    fn upgrade_steps(&self) -> Vec<String> {
        self.log
            .lock()
            .expect("the log")
            .iter()
            .filter(|e| {
                e.starts_with("delete ") || e.starts_with("job pre-") || e.starts_with("job post-")
            })
            .cloned()
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn ordered_upgrade(name: &str) -> Vec<String> {
    [2, 1, 0]
        .iter()
        .flat_map(|k| {
            [
                format!("job pre-{k}"),
                format!("delete {name}-{k}"),
                format!("job post-{k}"),
            ]
        })
        .collect()
}

// ------------------------------------------------------------------ the tests

#[tokio::test]
async fn a_new_distributeddb_becomes_ready_and_an_image_change_replaces_pods_2_1_0_with_hooks_between()
 {
    let db = Db::new("ddb-upgrade").await;
    let operator = db.operator();
    db.create("orders", hooked(json!({}))).await;
    let created = db.ready_at("orders", "registry.example/db:1").await;
    let status = created.status.as_ref().expect("a status");
    assert_eq!(status.ready_replicas, Some(3));

    let sts: Api<StatefulSet> = db.env.api();
    let sts = sts.get("orders").await.expect("the StatefulSet");
    let sts_spec = &sts.spec;
    assert_eq!(
        sts_spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.type_.as_deref()),
        Some("OnDelete")
    );
    assert!(
        sts.owner_references()
            .iter()
            .any(|o| o.kind == "DistributedDB"),
        "the StatefulSet is owned by the DistributedDB"
    );
    let services: Api<Service> = db.env.api();
    let svc = services.get("orders").await.expect("the headless Service");
    assert_eq!(svc.spec.and_then(|s| s.cluster_ip).as_deref(), Some("None"));

    let recorder = Recorder::start(&db.env, "orders").await;
    db.merge_patch(
        "orders",
        json!({"spec": {"image": "registry.example/db:2"}}),
    )
    .await;
    let upgraded = db.ready_at("orders", "registry.example/db:2").await;

    assert_eq!(recorder.upgrade_steps(), ordered_upgrade("orders"));
    let pods: Api<Pod> = db.env.api();
    for k in 0..3 {
        let pod = pods.get(&format!("orders-{k}")).await.expect("the pod");
        let image = pod
            .spec
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
        assert_eq!(image.as_deref(), Some("registry.example/db:2"));
    }
    let history = upgraded
        .status
        .as_ref()
        .and_then(|s| s.engine.machine.as_ref())
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(history.contains("UpgradeCompleted"), "{history}");
    operator.stop().await;
    db.env.finish().await;
}

#[tokio::test]
async fn an_upgrade_under_someone_elses_disruption_budget_is_degraded_naming_it_and_goes_on_once_it_is_gone()
 {
    // The upgrade evicts through the members' PodDisruptionBudget. A second budget over
    // the same pods makes every eviction impossible (the API server decides with one
    // budget only): the machine says so and evicts nothing until it goes.
    let db = Db::new("ddb-two-budgets").await;
    let operator = db.operator();
    let three = spec(json!({
        "replicas": 3,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
    }));
    db.create("stock", three).await;
    db.ready_at("stock", "registry.example/db:1").await;
    let pdbs: Api<PodDisruptionBudget> = db.env.api();
    let theirs: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "theirs"},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": "stock"}},
        },
    }))
    .expect("a budget");
    pdbs.create(&PostParams::default(), &theirs)
        .await
        .expect("create a second budget");

    db.merge_patch("stock", json!({"spec": {"image": "registry.example/db:2"}}))
        .await;
    let held = db
        .degraded("stock", conditions::reason::REQUEST_REFUSED)
        .await;
    let message = &condition(Some(&held), conditions::DEGRADED)
        .expect("Degraded")
        .message;
    assert!(
        message.contains("evict Pod/stock-2")
            && message.contains("more than one PodDisruptionBudget"),
        "names the pod and why: {message}"
    );
    let pods: Api<Pod> = db.env.api();
    for k in 0..3 {
        let pod = pods.get(&format!("stock-{k}")).await.expect("the pod");
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "stock-{k} was not evicted"
        );
    }

    pdbs.delete("theirs", &DeleteParams::default())
        .await
        .expect("delete the second budget");
    let upgraded = db.ready_at("stock", "registry.example/db:2").await;
    assert!(
        condition(Some(&upgraded), conditions::DEGRADED)
            .is_none_or(|c| c.status != conditions::status::TRUE),
        "Degraded clears once the upgrade goes on"
    );
    operator.stop().await;
    db.env.finish().await;
}

#[tokio::test]
async fn a_failing_pre_hook_stops_the_upgrade_with_a_clear_condition_until_retried() {
    let db = Db::new("ddb-hookfail").await;
    let operator = db.operator();
    db.create(
        "ledger",
        hooked(json!({"upgrade": {"preHook": {"podLabels": {"lockstep.dev/kwok-fail": "true"}}}})),
    )
    .await;
    db.ready_at("ledger", "registry.example/db:1").await;
    let recorder = Recorder::start(&db.env, "ledger").await;
    db.merge_patch(
        "ledger",
        json!({"spec": {"image": "registry.example/db:2"}}),
    )
    .await;

    let stuck = db.degraded("ledger", "HookFailed").await;
    let degraded = condition(Some(&stuck), conditions::DEGRADED).expect("Degraded");
    assert!(
        degraded.message.contains("pre-upgrade hook of ledger-2")
            && degraded.message.contains("BackoffLimitExceeded")
            && degraded.message.contains("lockstep.dev/retry-hook"),
        "{}",
        degraded.message
    );
    let status = stuck.status.as_ref().expect("a status");
    assert_eq!(status.engine.phase.as_deref(), Some("Upgrading"));
    assert_eq!(status.version.as_deref(), Some("registry.example/db:1"));
    assert!(
        !recorder
            .upgrade_steps()
            .iter()
            .any(|e| e.starts_with("delete")),
        "no pod went down: {:?}",
        recorder.upgrade_steps()
    );

    // The user fixes the hook and asks for it to run again.
    db.json_patch(
        "ledger",
        json!([{"op": "remove", "path": "/spec/upgrade/preHook/podLabels"}]),
    )
    .await;
    let ns = db.env.ns.name.clone();
    let (code, out) =
        crate::postgres::plugin(&["retry", "ledger", "-n", &ns, "--timeout", "120"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("lockstep.dev/retry-hook=") && out.contains("taken on:"),
        "{out}"
    );
    db.ready_at("ledger", "registry.example/db:2").await;
    let steps = recorder.upgrade_steps();
    let deletes: Vec<&String> = steps.iter().filter(|e| e.starts_with("delete")).collect();
    assert_eq!(
        deletes,
        ["delete ledger-2", "delete ledger-1", "delete ledger-0"]
    );
    operator.stop().await;
    db.env.finish().await;
}

fn free_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener
        .local_addr()
        .expect("a local address")
        .port()
        .to_string()
}

fn start_process(namespace: &str, log: &str) -> OperatorProcess {
    let ns = format!("--namespace={namespace}");
    let metrics = format!("--metrics-addr=127.0.0.1:{}", free_port());
    OperatorProcess::spawn(&["run", "--machines=distributeddb", &ns, &metrics], log)
}

#[tokio::test]
async fn an_operator_killed_mid_upgrade_finishes_it_without_deleting_any_pod_twice() {
    let db = Db::new("ddb-crash").await;
    let mut process = start_process(db.env.namespace(), "ddb-crash-1");
    // Slow pods down so that the kill lands mid-upgrade.
    db.create(
        "stock",
        hooked(json!({"podAnnotations": {"lockstep.dev/kwok-ready-delay-ms": "1500"}})),
    )
    .await;
    db.ready_at("stock", "registry.example/db:1").await;
    let recorder = Recorder::start(&db.env, "stock").await;
    db.merge_patch("stock", json!({"spec": {"image": "registry.example/db:2"}}))
        .await;
    wait_for(
        &db.api,
        "stock",
        "the upgrade to reach ordinal 1",
        |d: Option<&DistributedDB>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.engine.step.as_deref())
                .is_some_and(|step| step.starts_with("1/"))
        },
    )
    .await;
    process.kill9();
    let at_kill = recorder.upgrade_steps();

    let restarted = start_process(db.env.namespace(), "ddb-crash-2");
    db.ready_at("stock", "registry.example/db:2").await;
    let steps = recorder.upgrade_steps();
    let deletes: Vec<&String> = steps.iter().filter(|e| e.starts_with("delete")).collect();
    assert_eq!(
        deletes,
        ["delete stock-2", "delete stock-1", "delete stock-0"],
        "each pod deleted exactly once, in order (killed after {at_kill:?})"
    );
    assert_eq!(steps, ordered_upgrade("stock"), "killed after {at_kill:?}");
    // Stop the operator before the namespace goes, so it cannot re-add the finalizer
    // that the cleanup strips.
    drop(restarted);
    db.env.finish().await;
}

#[tokio::test]
async fn drift_is_restored_and_scaling_and_volume_growth_are_applied() {
    let db = Db::new("ddb-drift").await;
    let operator = db.operator();
    db.create(
        "cart",
        spec(json!({
            "replicas": 2,
            "image": "registry.example/db:1",
            "storage": {"storageClassName": "expandable", "size": "1Gi"}
        })),
    )
    .await;
    db.ready_at("cart", "registry.example/db:1").await;

    // Someone deletes the Service and scales the StatefulSet by hand.
    let services: Api<Service> = db.env.api();
    let svc = services.get("cart").await.expect("the Service");
    services
        .delete("cart", &DeleteParams::default())
        .await
        .expect("delete the Service");
    wait_gone(
        &services,
        "cart",
        &svc.uid().unwrap_or_default(),
        "the Service to go",
    )
    .await;
    let statefulsets: Api<StatefulSet> = db.env.api();
    statefulsets
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale the StatefulSet by hand");
    wait_for(
        &services,
        "cart",
        "the Service to be restored",
        |s: Option<&Service>| s.is_some(),
    )
    .await;
    wait_for(
        &statefulsets,
        "cart",
        "the StatefulSet to be restored to 2 replicas",
        |s: Option<&StatefulSet>| s.is_some_and(|s| s.spec.replicas == Some(2)),
    )
    .await;

    // Scale through the spec: Scaling, then Ready with three pods.
    db.merge_patch("cart", json!({"spec": {"replicas": 3}}))
        .await;
    wait_for(
        &db.api,
        "cart",
        "three Ready replicas",
        |d: Option<&DistributedDB>| {
            d.is_some_and(|d| {
                is_ready_at(d, "registry.example/db:1")
                    && d.status.as_ref().and_then(|s| s.ready_replicas) == Some(3)
            })
        },
    )
    .await;

    // Grow the volumes: every claim asks for the new size.
    db.merge_patch("cart", json!({"spec": {"storage": {"size": "2Gi"}}}))
        .await;
    let claims: Api<PersistentVolumeClaim> = db.env.api();
    // (The claim of the replica someone added by hand is retained, and left alone.)
    wait_for_all(
        &claims,
        "app.kubernetes.io/instance=cart",
        "the claims of the three replicas at 2Gi",
        |pvcs: &[PersistentVolumeClaim]| {
            let ours: Vec<&PersistentVolumeClaim> = pvcs
                .iter()
                .filter(|p| {
                    ["data-cart-0", "data-cart-1", "data-cart-2"].contains(&p.name_any().as_str())
                })
                .collect();
            ours.len() == 3
                && ours.iter().all(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.resources.as_ref())
                        .and_then(|r| r.requests.as_ref())
                        .and_then(|r| r.get("storage"))
                        .is_some_and(|q| q.0 == "2Gi")
                })
        },
    )
    .await;
    operator.stop().await;
    db.env.finish().await;
}

#[tokio::test]
async fn scheduled_and_on_demand_backups_update_last_backup() {
    let db = Db::new("ddb-backup").await;
    let operator = db.operator();
    let mut s = json!({
        "replicas": 1,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
    });
    // Suspended until the on-demand backup is recorded: a scheduled Job finishing in the
    // same moment would otherwise be the newer backup, and lastBackup would never name
    // the on-demand one.
    let mut backup = policy("* * * * *");
    merge_json(&mut backup, json!({"suspend": true}));
    merge_json(&mut s, json!({"backupPolicy": backup}));
    db.create("audit", spec(s)).await;
    db.ready_at("audit", "registry.example/db:1").await;
    let cronjobs: Api<CronJob> = db.env.api();
    let cron = cronjobs.get("audit-backup").await.expect("the CronJob");
    assert_eq!(cron.spec.schedule, "* * * * *");
    assert_eq!(cron.spec.suspend, Some(true));

    db.merge_patch(
        "audit",
        json!({"metadata": {"annotations": {"lockstep.dev/backup-now": "first"}}}),
    )
    .await;
    let on_demand = format!("audit-{}", backup_key("first", None));
    let expected = on_demand.clone();
    wait_for(
        &db.api,
        "audit",
        "lastBackup from the on-demand Job",
        move |d: Option<&DistributedDB>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.last_backup.as_ref())
                .is_some_and(|b| b.job == expected && b.outcome == "Succeeded")
        },
    )
    .await;

    // Resumed, the CronJob fires within a minute; its Job's outcome becomes lastBackup.
    db.merge_patch(
        "audit",
        json!({"spec": {"backupPolicy": {"suspend": false}}}),
    )
    .await;
    let scheduled = wait_for(
        &db.api,
        "audit",
        "lastBackup from a scheduled Job",
        move |d: Option<&DistributedDB>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.last_backup.as_ref())
                .is_some_and(|b| b.job != on_demand && b.job.starts_with("audit-backup-"))
        },
    )
    .await
    .expect("the object");
    let last = scheduled
        .status
        .and_then(|s| s.last_backup)
        .expect("a last backup");
    assert_eq!(last.outcome, "Succeeded");
    operator.stop().await;
    db.env.finish().await;
}

#[tokio::test]
async fn a_delete_with_a_failing_final_backup_stays_terminating_until_the_failure_is_cleared() {
    let db = Db::new("ddb-final").await;
    let operator = db.operator();
    // Suspended: a run spanning 03:00 UTC would otherwise meet a scheduled backup Job.
    let mut backup = policy("0 3 * * *");
    merge_json(
        &mut backup,
        json!({"suspend": true, "podLabels": {"lockstep.dev/kwok-fail": "true"}}),
    );
    let created = db
        .create(
            "billing",
            spec(json!({
                "replicas": 1,
                "image": "registry.example/db:1",
                "storage": {"size": "1Gi"},
                "backupPolicy": backup,
            })),
        )
        .await;
    db.ready_at("billing", "registry.example/db:1").await;
    db.api
        .delete("billing", &DeleteParams::default())
        .await
        .expect("delete");

    let stuck = db.degraded("billing", "FinalBackupFailed").await;
    assert!(
        stuck.metadata.deletion_timestamp.is_some(),
        "still Terminating"
    );
    assert!(
        stuck
            .finalizers()
            .iter()
            .any(|f| f == "lockstep.dev/finalizer"),
        "the finalizer is held"
    );
    let message = &condition(Some(&stuck), conditions::DEGRADED)
        .expect("Degraded")
        .message;
    assert!(
        message.contains("billing-final-backup-1")
            && message.contains("BackoffLimitExceeded")
            && message.contains("lockstep.dev/skip-final-backup"),
        "{message}"
    );

    // The backup is fixed: the next attempt succeeds and the object goes.
    db.json_patch(
        "billing",
        json!([{"op": "remove", "path": "/spec/backupPolicy/podLabels"}]),
    )
    .await;
    wait_gone(
        &db.api,
        "billing",
        &created.uid().unwrap_or_default(),
        "the DistributedDB to be deleted",
    )
    .await;
    let jobs: Api<Job> = db.env.api();
    let finals: Vec<String> = jobs
        .list(&Default::default())
        .await
        .expect("list Jobs")
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(
        finals
            .iter()
            .all(|j| !j.starts_with("billing-") || j.contains("final-backup")),
        "nothing but final backups was created while deleting: {finals:?}"
    );
    operator.stop().await;
    db.env.finish().await;
}

async fn patch(api: &Api<DistributedDB>, value: serde_json::Value) -> Result<(), String> {
    api.patch("vault", &PatchParams::default(), &Patch::Merge(&value))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

async fn rejected(api: &Api<DistributedDB>, name: &str, spec: serde_json::Value) -> String {
    let object: DistributedDB = serde_json::from_value(json!({
        "apiVersion": "lockstep.dev/v1alpha1",
        "kind": "DistributedDB",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("an object");
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => panic!("the API server accepted {name}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn invalid_specs_are_rejected_by_the_api_server_naming_the_field() {
    let db = Db::new("ddb-invalid").await;
    let base = json!({"image": "registry.example/db:1", "storage": {"size": "1Gi"}});
    let with = |extra: serde_json::Value| {
        let mut s = base.clone();
        merge_json(&mut s, extra);
        s
    };

    let e = rejected(&db.api, "zero", with(json!({"replicas": 0}))).await;
    assert!(e.contains("spec.replicas"), "{e}");
    let e = rejected(
        &db.api,
        "quantity",
        with(json!({"storage": {"size": "lots"}})),
    )
    .await;
    assert!(
        e.contains("spec.storage.size") && e.contains("quantity"),
        "{e}"
    );
    let e = rejected(
        &db.api,
        "cron",
        with(json!({"backupPolicy": policy("every day at noon")})),
    )
    .await;
    assert!(
        e.contains("spec.backupPolicy.schedule") && e.contains("cron"),
        "{e}"
    );
    let e = rejected(&db.api, &"n".repeat(41), base.clone()).await;
    assert!(e.contains("metadata.name"), "{e}");
    let e = rejected(
        &db.api,
        "nowhere",
        with(json!({"bootstrap": {"fromBackup": {"key": "snap.db"}}})),
    )
    .await;
    assert!(
        e.contains("spec.bootstrap.fromBackup") && e.contains("needs a store"),
        "{e}"
    );

    // Storage may grow, but neither shrink nor move to another class.
    db.create(
        "vault",
        spec(with(json!({"storage": {"storageClassName": "expandable"}}))),
    )
    .await;
    let e = patch(&db.api, json!({"spec": {"storage": {"size": "512Mi"}}}))
        .await
        .expect_err("shrinking is refused");
    assert!(
        e.contains("spec.storage.size") && e.contains("cannot shrink"),
        "{e}"
    );
    let e = patch(
        &db.api,
        json!({"spec": {"storage": {"storageClassName": "standard"}}}),
    )
    .await
    .expect_err("a class change is refused");
    assert!(
        e.contains("spec.storage.storageClassName") && e.contains("immutable"),
        "{e}"
    );
    patch(&db.api, json!({"spec": {"storage": {"size": "2Gi"}}}))
        .await
        .expect("growing is allowed");
    // How the cluster was created cannot change afterwards.
    let e = patch(
        &db.api,
        json!({"spec": {"bootstrap": {"fromBackup": {"key": "snap.db", "s3Endpoint": "http://s3", "bucket": "b", "s3CredentialsSecret": "s3"}}}}),
    )
    .await
    .expect_err("a bootstrap added later is refused");
    assert!(
        e.contains("spec.bootstrap") && e.contains("immutable"),
        "{e}"
    );
    // Nor whether its members speak TLS (their URLs are in the membership).
    let e = patch(&db.api, json!({"spec": {"tls": {}}}))
        .await
        .expect_err("TLS turned on later is refused");
    assert!(e.contains("spec.tls") && e.contains("immutable"), "{e}");
    db.env.finish().await;
}

#[tokio::test]
async fn an_idle_distributeddb_with_hooks_and_backups_makes_no_mutating_request() {
    let db = Db::new("ddb-idle").await;
    let requests = RequestLog::default();
    let counted = counted_client(&requests).await;
    let (probe, mut counts) = tokio::sync::watch::channel(ReconcileCounts::default());
    let (force, forced) = futures::channel::mpsc::unbounded();
    let operator = InProcessOperator::start::<DistributedDb>(
        counted,
        driver::Config::namespaced(db.env.namespace())
            .hooks(ReconcileProbe(probe))
            .reconcile_all_on(forced),
    );
    let mut s = json!({
        "replicas": 3,
        "image": "registry.example/db:1",
        "storage": {"storageClassName": "expandable", "size": "1Gi"},
        "resources": {"requests": {"cpu": "0.5", "memory": "256Mi"}},
        "env": [{"name": "EMPTY", "value": ""}],
        "upgrade": {"preHook": {"command": ["drain"]}, "postHook": {"command": ["verify"]}},
        // Its certificates are issued once, then nothing is written for them at rest.
        "tls": {},
    });
    // Suspended: a run spanning 03:00 UTC would otherwise count a scheduled backup's writes.
    let mut backup = policy("0 3 * * *");
    merge_json(&mut backup, json!({"suspend": true}));
    merge_json(&mut s, json!({"backupPolicy": backup}));
    db.create("quiet", spec(s)).await;
    db.ready_at("quiet", "registry.example/db:1").await;
    let issued = db
        .env
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get("quiet-tls")
        .await
        .expect("the operator issued quiet-tls");
    let keys: Vec<&String> = issued.data.as_ref().expect("its data").keys().collect();
    assert_eq!(
        keys,
        [
            "ca.crt",
            "ca.key",
            "client.crt",
            "client.key",
            "tls.crt",
            "tls.key"
        ]
    );
    let settled = counts_until(&mut counts, "reconciles to finish", |c| {
        c.started == c.finished
    })
    .await;

    let mark = requests.mark();
    for forced in 1..=5 {
        force.unbounded_send(()).expect("the operator listens");
        counts_until(&mut counts, "a forced reconcile", |c| {
            c.finished >= settled.finished + forced && c.started == c.finished
        })
        .await;
    }
    let after = counts_until(&mut counts, "reconciles to finish", |c| {
        c.started == c.finished
    })
    .await;
    assert!(
        after.idle >= settled.idle + 5,
        "the forced reconciles were idle: {after:?}"
    );
    let mutating: Vec<String> = requests
        .since(mark)
        .iter()
        .filter(|r| r.is_mutating())
        .map(ToString::to_string)
        .collect();
    assert!(
        mutating.is_empty(),
        "an idle DistributedDB wrote: {mutating:#?}"
    );
    operator.stop().await;
    db.env.finish().await;
}
