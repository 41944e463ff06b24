//! Regressions found by fault testing, on the real control plane: a request the API
//! server refuses downstream, a status wiped by someone else, and a process that may no
//! longer act.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use lockstep::driver::{self, Authority, DriverHooks, Finished, Target};
use lockstep::engine::conditions::{self, reason};
use lockstep::machines::distributeddb::{DistributedDB, DistributedDb};
use lockstep::machines::postgres::PostgresCluster;

use crate::support::{
    DEADLINE, Env, Fixture, InProcessOperator, RequestLog, counted_client, events_about,
    install_crd_of, wait_for, wait_for_all,
};

/// A namespace with the DistributedDB CRD and the S3 credentials Secret.
async fn env(prefix: &str) -> Env {
    Fixture::<DistributedDb>::new(prefix).await.env
}

fn db(name: &str, backups: bool) -> DistributedDB {
    let mut spec = json!({
        "replicas": 2,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
    });
    if backups {
        // Suspended: a run spanning 03:00 UTC would otherwise meet a scheduled backup Job.
        spec["backupPolicy"] = json!({
            "schedule": "0 3 * * *",
            "suspend": true,
            "s3Endpoint": "https://s3.example",
            "s3CredentialsSecret": "s3",
            "bucket": "backups",
            "image": "registry.example/db-backup:1",
        });
    }
    DistributedDB::new(
        name,
        serde_json::from_value(spec).expect("a valid DistributedDB spec"),
    )
}

fn condition<'a>(db: &'a DistributedDB, type_: &str) -> Option<&'a lockstep::engine::Condition> {
    db.status
        .as_ref()
        .and_then(|s| s.engine.conditions.iter().find(|c| c.type_ == type_))
}

fn is_ready(db: Option<&DistributedDB>) -> bool {
    db.and_then(|db| condition(db, conditions::READY))
        .is_some_and(|c| c.status == conditions::status::TRUE)
}

/// A ValidatingAdmissionPolicy (and its binding) that refuses, in one namespace only,
/// every CronJob: the API server refusing a derived object, whatever the CRD accepted.
struct RefuseCronJobs {
    policies: Api<ValidatingAdmissionPolicy>,
    bindings: Api<ValidatingAdmissionPolicyBinding>,
    name: String,
}

impl RefuseCronJobs {
    async fn install(env: &Env) -> Self {
        let name = format!("refuse-cronjobs-{}", env.namespace());
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["batch"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["cronjobs"]
                }]},
                "validations": [{
                    "expression": "false",
                    "message": "spec.schedule: refused by the cluster's policy",
                    "reason": "Invalid"
                }]
            }
        }))
        .expect("a policy");
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": env.namespace()
                }}}
            }
        }))
        .expect("a binding");
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
        policies
            .create(&PostParams::default(), &policy)
            .await
            .expect("create the policy");
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .expect("create the binding");
        let this = Self {
            policies,
            bindings,
            name,
        };
        this.wait_until_enforced(env).await;
        this
    }

    /// Policies are loaded asynchronously: probe with a server-side dry run until one
    /// is refused (or, once removed, accepted), within a deadline.
    async fn wait_until_enforced(&self, env: &Env) {
        self.probe(env, true).await;
    }

    async fn probe(&self, env: &Env, refused: bool) {
        let cronjobs: Api<k8s_openapi::api::batch::v1::CronJob> = env.api();
        let probe: k8s_openapi::api::batch::v1::CronJob = serde_json::from_value(json!({
            "metadata": {"name": "probe"},
            "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.example/x:1"}]
            }}}}}
        }))
        .expect("a CronJob");
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while cronjobs.create(&dry, &probe).await.is_ok() == refused {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the admission policy {} was not {} within 60 s",
                self.name,
                if refused { "enforced" } else { "lifted" }
            );
            // Nothing to watch: the policy is compiled in the API server's memory.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn remove(self, env: &Env) {
        let _ = self
            .bindings
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = self
            .policies
            .delete(&self.name, &DeleteParams::default())
            .await;
        self.probe(env, false).await;
    }
}

#[tokio::test]
async fn a_derived_object_the_api_server_refuses_makes_the_object_degraded_with_a_warning_naming_the_field()
 {
    let env = env("refused").await;
    let policy = RefuseCronJobs::install(&env).await;
    let api: Api<DistributedDB> = env.api();
    let operator = InProcessOperator::start::<DistributedDb>(
        env.client.clone(),
        driver::Config::namespaced(env.namespace()),
    );
    api.create(&PostParams::default(), &db("typo", true))
        .await
        .expect("create");

    let degraded = wait_for(
        &api,
        "typo",
        "Degraded RequestRefused",
        |db: Option<&DistributedDB>| {
            db.and_then(|db| condition(db, conditions::DEGRADED))
                .is_some_and(|c| {
                    c.status == conditions::status::TRUE && c.reason == reason::REQUEST_REFUSED
                })
        },
    )
    .await
    .expect("the object exists");
    let message = &condition(&degraded, conditions::DEGRADED)
        .expect("Degraded")
        .message;
    assert!(
        message.contains("CronJob/typo-backup"),
        "names the object: {message}"
    );
    assert!(
        message.contains("spec.schedule"),
        "names the field: {message}"
    );

    // The Event follows the status write: wait for it.
    let refused = |e: &Event| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("typo")
            && e.reason.as_deref() == Some(reason::REQUEST_REFUSED)
    };
    let events: Api<Event> = env.api();
    wait_for_all(&events, "", "the RequestRefused Warning", |all| {
        all.iter().any(refused)
    })
    .await;
    let all = events_about(&env.client, env.namespace(), "typo").await;
    let warnings: Vec<&Event> = all.iter().filter(|e| refused(e)).collect();
    assert_eq!(
        warnings.len(),
        1,
        "one Warning Event, however often retried: {all:#?}"
    );
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert!(
        warnings[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("spec.schedule")),
        "{:?}",
        warnings[0].note
    );

    // Once the cluster accepts the object again, the next attempt heals it. A person
    // who fixed the cause touches the object rather than wait out the backoff.
    policy.remove(&env).await;
    api.patch(
        "typo",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"example.com/fixed": "policy"}}})),
    )
    .await
    .expect("annotate");
    wait_for(&api, "typo", "Ready once the CronJob is accepted", is_ready).await;
    operator.stop().await;
    env.finish().await;
}

#[tokio::test]
async fn a_status_wiped_by_someone_else_is_rebuilt_at_once_without_touching_a_pod() {
    let env = env("wiped").await;
    let api: Api<DistributedDB> = env.api();
    let operator = InProcessOperator::start::<DistributedDb>(
        env.client.clone(),
        driver::Config::namespaced(env.namespace()),
    );
    api.create(&PostParams::default(), &db("wiped", false))
        .await
        .expect("create");
    wait_for(&api, "wiped", "Ready", is_ready).await;
    let pods: Api<Pod> = env.api();
    let before: Vec<String> =
        wait_for_all(&pods, "app.kubernetes.io/instance=wiped", "2 pods", |p| {
            p.len() == 2
        })
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();

    // Someone else (a restore, a `kubectl edit`) wipes the record; no other event follows.
    api.patch_status(
        "wiped",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"machine": null, "phase": null, "conditions": null}})),
    )
    .await
    .expect("wipe the status");

    let rebuilt = wait_for(
        &api,
        "wiped",
        "Ready again with a rebuilt record",
        |db: Option<&DistributedDB>| {
            is_ready(db)
                && db
                    .and_then(|db| db.status.as_ref())
                    .is_some_and(|s| s.engine.machine.is_some())
        },
    )
    .await
    .expect("the object exists");
    assert!(rebuilt.status.is_some());
    let after: Vec<String> = pods
        .list(&Default::default())
        .await
        .expect("list pods")
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(before.len(), 2);
    for uid in &before {
        assert!(after.contains(uid), "pod {uid} was replaced: {after:?}");
    }
    operator.stop().await;
    env.finish().await;
}

/// Counts the reconciles that failed.
struct CountFailures(tokio::sync::watch::Sender<u32>);

impl DriverHooks for CountFailures {
    fn reconcile_finished(&self, _: &Target<'_>, _: Duration, finished: Finished) {
        if finished == Finished::Failed {
            self.0.send_modify(|n| *n += 1);
        }
    }
}

#[tokio::test]
async fn a_process_without_authority_sends_nothing_until_it_is_granted() {
    let env = env("authority").await;
    let api: Api<DistributedDB> = env.api();
    let log = RequestLog::default();
    let authority = Authority::leased(Duration::from_millis(500));
    let failures = tokio::sync::watch::Sender::new(0_u32);
    let operator = InProcessOperator::start::<DistributedDb>(
        counted_client(&log).await,
        driver::Config::namespaced(env.namespace())
            .authority(authority.clone())
            .hooks(CountFailures(failures.clone())),
    );
    api.create(&PostParams::default(), &db("gated", false))
        .await
        .expect("create");
    // Wait until a reconcile of it ran and was refused for want of authority.
    let mut refused = failures.subscribe();
    tokio::time::timeout(DEADLINE, refused.wait_for(|n| *n >= 2))
        .await
        .expect("the operator tried within the deadline")
        .expect("the hooks live as long as the operator");
    let mutating: Vec<String> = log
        .since(0)
        .iter()
        .filter(|r| r.is_mutating())
        .map(ToString::to_string)
        .collect();
    assert!(mutating.is_empty(), "sent without authority: {mutating:?}");

    authority.set_valid_until(Some(
        tokio::time::Instant::now() + Duration::from_secs(3600),
    ));
    // Authority granted: the next retry (backoff from 1 s) proceeds to Ready.
    wait_for(&api, "gated", "Ready once granted", is_ready).await;
    operator.stop().await;
    env.finish().await;
}

/// Create `object` (as JSON) in a server-side dry run; the API server's refusal.
async fn refusal<K>(api: &Api<K>, object: serde_json::Value) -> String
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(object).expect("an object");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&dry, &object).await {
        Ok(_) => panic!("the API server accepted it"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn input_that_kubernetes_would_refuse_downstream_is_rejected_at_admission_naming_the_field() {
    let mut env = env("downstream").await;
    install_crd_of::<PostgresCluster>(&env.client).await;
    env.ns.track::<PostgresCluster>();
    let ddbs: Api<DistributedDB> = env.api();
    let pgcs: Api<PostgresCluster> = env.api();
    let ddb = |name: &str, extra: serde_json::Value| {
        let mut spec = json!({"image": "registry.example/db:1", "storage": {"size": "1Gi"}});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            spec[k] = v;
        }
        json!({"apiVersion": "lockstep.dev/v1alpha1", "kind": "DistributedDB",
               "metadata": {"name": name}, "spec": spec})
    };
    let schedule = |s: &str| {
        json!({"backupPolicy": {"schedule": s, "s3Endpoint": "https://s3.example",
            "s3CredentialsSecret": "s3", "bucket": "b", "image": "registry.example/b:1"}})
    };
    for bad in ["*/0 * * * *", "5-3 * * * *", "0 0 * FOO *"] {
        let e = refusal(&ddbs, ddb("sched", schedule(bad))).await;
        assert!(e.contains("backupPolicy.schedule"), "{bad}: {e}");

        let pg = json!({"apiVersion": "lockstep.dev/v1alpha1", "kind": "PostgresCluster",
            "metadata": {"name": "sched"},
            "spec": {"version": "18.1", "replicas": 3, "storageSize": "1Gi",
                "backupSchedule": bad,
                "backup": {"s3Endpoint": "https://s3.example", "bucket": "b",
                    "credentialsSecret": "s3", "image": "registry.example/b:1"}}});
        let e = refusal(&pgcs, pg).await;
        assert!(e.contains("spec.backupSchedule"), "{bad}: {e}");
    }
    let e = refusal(
        &ddbs,
        ddb(
            "ports",
            json!({"ports": [{"name": "Not_A_Port_Name", "port": 2379}]}),
        ),
    )
    .await;
    assert!(e.contains("ports[].name"), "{e}");
    // A clock-skew bound too close to the Lease's duration: standbys would stop
    // streaming at the full skew.
    let pg = json!({"apiVersion": "lockstep.dev/v1alpha1", "kind": "PostgresCluster",
        "metadata": {"name": "skew"},
        "spec": {"version": "18.1", "replicas": 3, "storageSize": "1Gi",
            "fencing": {"leaseDurationSeconds": 15, "clockSkewSeconds": 11}}});
    let e = refusal(&pgcs, pg).await;
    assert!(e.contains("spec.fencing.clockSkewSeconds"), "{e}");
    let e = refusal(&ddbs, ddb("dotted.db", json!({}))).await;
    assert!(e.contains("metadata.name"), "{e}");
    assert!(!e.contains("<nil>"), "the rule reports its field: {e}");
    // And what Kubernetes accepts still passes.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let ok: DistributedDB =
        serde_json::from_value(ddb("fine", schedule("0 0 1-5/2 JAN,jul MON-FRI"))).expect("ok");
    ddbs.create(&dry, &ok)
        .await
        .expect("a valid schedule passes");
    env.finish().await;
}

#[tokio::test]
async fn the_seed_articles_object_is_accepted_and_reports_available_with_quorum() {
    let env = env("seed").await;
    let api: Api<DistributedDB> = env.api();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/distributeddb-seed.yaml"),
    )
    .expect("the example");
    let object: DistributedDB = serde_yaml::from_str(&text).expect("the example parses");
    let operator = InProcessOperator::start::<DistributedDb>(
        env.client.clone(),
        driver::Config::namespaced(env.namespace()),
    );
    api.create(&PostParams::default(), &object)
        .await
        .expect("the seed's object is accepted as it is");

    let available = |db: Option<&DistributedDB>| {
        is_ready(db)
            && db
                .and_then(|db| condition(db, "Available"))
                .is_some_and(|c| c.status == "True" && c.reason == "QuorumReached")
    };
    wait_for(
        &api,
        "analytics",
        "Ready and Available (QuorumReached)",
        available,
    )
    .await;

    let cronjobs: Api<k8s_openapi::api::batch::v1::CronJob> = env.api();
    let cronjob = cronjobs.get("analytics-backup").await.expect("the CronJob");
    let container = cronjob
        .spec
        .job_template
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .expect("a backup container");
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example/distributeddb:1.4"),
        "the database image is the default backup image"
    );
    let env_of = |name: &str| {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(env_of("S3_BUCKET").as_deref(), Some("db-backups"));
    assert_eq!(
        env_of("S3_ENDPOINT").as_deref(),
        Some("https://s3.example.com")
    );
    operator.stop().await;
    env.finish().await;
}
