//! PostgresCluster end to end, on the real control plane with KWOK pods: creation with
//! roles and Services, the upgrade (replicas in reverse order, switchover Job, old
//! primary last) with `-rw` watched throughout, failover after the delay (and none when
//! the primary recovers in time), the backup CronJob following the schedule, on-demand
//! and final backups, a failing final backup held until skipped, and the API server's
//! validation.
//!
//! KWOK runs no containers: PostgreSQL pods become Ready on their own, Job pods complete
//! about a second after they start (so promote and backup Jobs "succeed"), a pod labelled
//! `lockstep.dev/kwok-notready=true` turns NotReady and `lockstep.dev/kwok-fail=true`
//! makes a Job's pod fail. What the scripts do inside the pods is tested for real in
//! `tests/pg_scripts/`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use lockstep::driver;
use lockstep::engine::conditions;
use lockstep::machines::common::meta::OUTCOME_FINALIZER;
use lockstep::machines::common::on_demand::{BACKUP_OUTCOME_UNKNOWN, key as backup_key};
use lockstep::machines::postgres::{
    PRIMARY_AVAILABLE, Postgres, PostgresCluster, PostgresClusterSpec,
};
use lockstep::pod::answers;

use crate::support::{
    Env, Fixture, InProcessOperator, LeaseAgents, ReconcileCounts, ReconcileProbe, RequestLog,
    counted_client, counts_until, merge_json, wait_for, wait_for_all, wait_gone,
};

// ------------------------------------------------------------------ helpers

const ROLE: &str = "lockstep.dev/role";

/// Three instances of PostgreSQL 18.1, plus `extra`.
fn spec(extra: serde_json::Value) -> PostgresClusterSpec {
    let mut base = json!({"version": "18.1", "replicas": 3, "storageSize": "1Gi"});
    merge_json(&mut base, extra);
    serde_json::from_value(base).expect("a valid PostgresCluster spec")
}

fn backup() -> serde_json::Value {
    json!({
        "s3Endpoint": "https://s3.example",
        "bucket": "backups",
        "prefix": "e2e",
        "credentialsSecret": "s3",
        "image": "registry.example/pg-backup:16",
    })
}

/// A namespace with the PostgresCluster CRD and the S3 credentials Secret.
type Pg = Fixture<Postgres>;

impl Fixture<Postgres> {
    async fn create(&self, name: &str, spec: PostgresClusterSpec) -> PostgresCluster {
        self.create_object(&PostgresCluster::new(name, spec)).await
    }

    /// Ready for its current generation, every instance at `image`.
    async fn ready_at(&self, name: &str, image: &str) -> PostgresCluster {
        let image = image.to_owned();
        self.until(name, &format!("Ready at {image}"), move |pg| {
            is_ready_at(pg, &image)
        })
        .await
    }

    async fn label_pod(&self, pod: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"labels": {key: value}}});
        self.env
            .api::<Pod>()
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("label {pod}: {e}"));
    }

    /// The error the API server gives for creating `name` with `spec` (a JSON value, so
    /// that invalid values get through serde).
    async fn refused_create(&self, name: &str, spec: serde_json::Value) -> String {
        let object = json!({
            "apiVersion": "lockstep.dev/v1alpha1",
            "kind": "PostgresCluster",
            "metadata": {"name": name},
            "spec": spec,
        });
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.env.client.clone(),
            self.env.namespace(),
            &kube::core::ApiResource::erase::<PostgresCluster>(&()),
        );
        let object: kube::api::DynamicObject =
            serde_json::from_value(object).expect("a dynamic object");
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => panic!("the API server accepted {name}"),
            Err(e) => e.to_string(),
        }
    }

    async fn refused_patch(&self, name: &str, patch: serde_json::Value) -> String {
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => panic!("the API server accepted {patch} on {name}"),
            Err(e) => e.to_string(),
        }
    }
}

fn is_ready_at(pg: &PostgresCluster, image: &str) -> bool {
    let Some(status) = &pg.status else {
        return false;
    };
    status.image.as_deref() == Some(image)
        && status.engine.phase.as_deref() == Some("Ready")
        && status.engine.observed_generation == pg.metadata.generation
        && status
            .engine
            .condition(conditions::READY)
            .is_some_and(|c| c.status == conditions::status::TRUE)
}

fn primary_pod(pg: &PostgresCluster) -> Option<&str> {
    pg.status.as_ref()?.primary_pod.as_deref()
}

/// The machine's transitions as the status records them (shared with `postgres_real`).
pub(crate) fn history(pg: &PostgresCluster) -> Vec<lockstep::engine::HistoryEntry> {
    pg.status
        .as_ref()
        .and_then(|s| s.engine.machine.as_ref())
        .and_then(|m| m.to_value().get("history").cloned())
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default()
}

/// Every transition of a cluster seen by the one who watches it, in order, beyond the
/// last [`lockstep::engine::HISTORY_LIMIT`] its status keeps: each history observed is
/// merged on its overlap with what was seen before.
#[derive(Clone, Default)]
pub(crate) struct Transitions(
    std::sync::Arc<std::sync::Mutex<Vec<lockstep::engine::HistoryEntry>>>,
);

impl Transitions {
    /// Takes in the history `pg` shows.
    pub(crate) fn see(&self, pg: &PostgresCluster) {
        let now = history(pg);
        let mut seen = self.0.lock().expect("no other holder panicked");
        let overlap = (0..=now.len().min(seen.len()))
            .rev()
            .find(|k| seen[seen.len() - k..] == now[..*k])
            .unwrap_or(0);
        seen.extend_from_slice(&now[overlap..]);
    }

    /// The reasons of the transitions seen, in order.
    pub(crate) fn reasons(&self) -> Vec<String> {
        let seen = self.0.lock().expect("no other holder panicked");
        seen.iter().map(|h| h.reason.clone()).collect()
    }
}

fn reasons(pg: &PostgresCluster) -> Vec<String> {
    history(pg).into_iter().map(|h| h.reason).collect()
}

/// What happened to a cluster, as the watches saw it: database pod deletions
/// (`delete pg-2`), pods labelled primary (`primary pg-1`), Job creations
/// (`job final-backup-1`), Job completions (`done final-backup-1`); and, over the whole run, the most pods ever
/// labelled primary at once and the most ready endpoints `<name>-rw` ever had at once;
/// and the UIDs of every pod ever labelled `replica` and ever selected by `<name>-ro`.
struct Recorder {
    log: Arc<Mutex<Vec<String>>>,
    most_primaries: Arc<Mutex<usize>>,
    most_rw_endpoints: Arc<Mutex<usize>>,
    replica_uids: Arc<Mutex<BTreeSet<String>>>,
    ro_uids: Arc<Mutex<BTreeSet<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

fn short_key(key: &str) -> String {
    // `backup-<hash>` -> `backup`; `final-backup-1` stays.
    if key.starts_with("backup-") {
        "backup".to_owned()
    } else {
        key.to_owned()
    }
}

impl Recorder {
    async fn start(env: &Env, name: &str) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let most_primaries = Arc::new(Mutex::new(0));
        let most_rw_endpoints = Arc::new(Mutex::new(0));
        let replica_uids = Arc::new(Mutex::new(BTreeSet::new()));
        let ro_uids = Arc::new(Mutex::new(BTreeSet::new()));
        let mut listed = Vec::new();

        let (tx, rx) = tokio::sync::oneshot::channel();
        listed.push(rx);
        let pods = {
            let api: Api<Pod> = env.api();
            let (log, most) = (log.clone(), most_primaries.clone());
            let replica_uids = replica_uids.clone();
            let selector =
                format!("app.kubernetes.io/instance={name},lockstep.dev/component=database");
            let config = watcher::Config::default().labels(&selector);
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut deleted = BTreeSet::new();
                let mut roles: BTreeMap<String, Option<String>> = BTreeMap::new();
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    let (pod, gone) = match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                        watcher::Event::Delete(p) => (p, true),
                        watcher::Event::Init => continue,
                    };
                    let pod_name = pod.name_any();
                    if gone {
                        roles.remove(&pod_name);
                    } else {
                        let role = pod.labels().get(ROLE).cloned();
                        if role.as_deref() == Some("primary")
                            && roles.get(&pod_name).and_then(Option::as_deref) != Some("primary")
                            && let Ok(mut log) = log.lock()
                        {
                            log.push(format!("primary {pod_name}"));
                        }
                        roles.insert(pod_name.clone(), role);
                        if pod.labels().get(ROLE).map(String::as_str) == Some("replica")
                            && let Ok(mut uids) = replica_uids.lock()
                        {
                            uids.insert(pod.uid().unwrap_or_default());
                        }
                    }
                    let primaries = roles
                        .values()
                        .filter(|r| r.as_deref() == Some("primary"))
                        .count();
                    if let Ok(mut most) = most.lock() {
                        *most = (*most).max(primaries);
                    }
                    if (gone || pod.metadata.deletion_timestamp.is_some())
                        && deleted.insert(pod.uid().unwrap_or_default())
                        && let Ok(mut log) = log.lock()
                    {
                        log.push(format!("delete {pod_name}"));
                    }
                }
            })
        };

        let (tx, rx) = tokio::sync::oneshot::channel();
        listed.push(rx);
        let jobs = {
            let api: Api<Job> = env.api();
            let log = log.clone();
            let selector = format!("app.kubernetes.io/instance={name}");
            let config = watcher::Config::default().labels(&selector);
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let (mut seen, mut done) = (BTreeSet::new(), BTreeSet::new());
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    let job = match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        watcher::Event::Apply(j) | watcher::Event::InitApply(j) => j,
                        watcher::Event::Delete(_) | watcher::Event::Init => continue,
                    };
                    let key = job.labels().get("lockstep.dev/job").cloned();
                    let key = short_key(&key.unwrap_or_else(|| "scheduled-backup".to_owned()));
                    let complete = job
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Complete" && c.status == "True")
                        });
                    let Ok(mut log) = log.lock() else { continue };
                    if seen.insert(job.name_any()) {
                        log.push(format!("job {key}"));
                    }
                    if complete && done.insert(job.name_any()) {
                        log.push(format!("done {key}"));
                    }
                }
            })
        };

        let (tx, rx) = tokio::sync::oneshot::channel();
        listed.push(rx);
        let slices = {
            let api: Api<EndpointSlice> = env.api();
            let most = most_rw_endpoints.clone();
            let selector = format!("kubernetes.io/service-name={name}-rw");
            let config = watcher::Config::default().labels(&selector);
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut ready: BTreeMap<String, usize> = BTreeMap::new();
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                            ready.insert(s.name_any(), ready_endpoints(&s));
                        }
                        watcher::Event::Delete(s) => {
                            ready.remove(&s.name_any());
                        }
                        watcher::Event::Init => {}
                    }
                    if let Ok(mut most) = most.lock() {
                        *most = (*most).max(ready.values().sum());
                    }
                }
            })
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        listed.push(rx);
        let ro_slices = {
            let api: Api<EndpointSlice> = env.api();
            let uids = ro_uids.clone();
            let selector = format!("kubernetes.io/service-name={name}-ro");
            let config = watcher::Config::default().labels(&selector);
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut stream = std::pin::pin!(watcher(api, config));
                while let Some(Ok(event)) = stream.next().await {
                    match event {
                        watcher::Event::InitDone => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                            // Every endpoint, Ready or not: what the Service selects.
                            let selected = s
                                .endpoints
                                .iter()
                                .flatten()
                                .filter_map(|e| e.target_ref.as_ref()?.uid.clone());
                            if let Ok(mut uids) = uids.lock() {
                                uids.extend(selected);
                            }
                        }
                        watcher::Event::Delete(_) | watcher::Event::Init => {}
                    }
                }
            })
        };
        for rx in listed {
            let _ = rx.await;
        }
        Self {
            log,
            most_primaries,
            most_rw_endpoints,
            replica_uids,
            ro_uids,
            tasks: vec![pods, jobs, slices, ro_slices],
        }
    }

    /// Whether the pod with `uid` was ever labelled `replica` or selected by `<name>-ro`.
    fn ever_read_only(&self, uid: &str) -> (bool, bool) {
        let labelled = self.replica_uids.lock().map_or(true, |u| u.contains(uid));
        let selected = self.ro_uids.lock().map_or(true, |u| u.contains(uid));
        (labelled, selected)
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Pod deletions and pods labelled primary after the first, in order.
    fn switchover_steps(&self) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|e| e.starts_with("delete ") || e.starts_with("primary "))
            .skip_while(|e| e.starts_with("primary "))
            .collect()
    }

    fn most_primaries(&self) -> usize {
        self.most_primaries.lock().map(|m| *m).unwrap_or(usize::MAX)
    }

    fn most_rw_endpoints(&self) -> usize {
        self.most_rw_endpoints
            .lock()
            .map(|m| *m)
            .unwrap_or(usize::MAX)
    }
}

/// Stands in for the standbys' instance managers' answers to a failover's survey on
/// KWOK pods (which run nothing): whenever the Lease asks a survey (the annotation
/// `lockstep.dev/survey`), each pod of `positions` that exists and is not terminating
/// answers it once on its own pod, as its manager would (`answers::Answer`), at its
/// received and replayed LSN, on timeline 1.
struct SurveyAnswers(JoinHandle<()>);

impl SurveyAnswers {
    fn start(env: &Env, positions: &[(&str, &str)]) -> Self {
        let leases: Api<Lease> = env.api();
        let pods: Api<Pod> = env.api();
        let positions: Vec<(String, String)> = positions
            .iter()
            .map(|(pod, lsn)| ((*pod).to_owned(), (*lsn).to_owned()))
            .collect();
        SurveyAnswers(tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(leases, watcher::Config::default()));
            while let Some(Ok(event)) = stream.next().await {
                let (watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) = event
                else {
                    continue;
                };
                let Some(token) = lease.annotations().get(answers::SURVEY).cloned() else {
                    continue;
                };
                for (pod, lsn) in &positions {
                    answer(&pods, pod, &token, lsn).await;
                }
            }
        }))
    }
}

/// Pod `pod` answers the survey `token` at `lsn`, unless it is gone, terminating or
/// answered it already.
async fn answer(pods: &Api<Pod>, pod: &str, token: &str, lsn: &str) {
    let Ok(Some(p)) = pods.get_opt(pod).await else {
        return;
    };
    if p.metadata.deletion_timestamp.is_some() {
        return;
    }
    let said = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == answers::SURVEYED))
        .and_then(|c| answers::Answer::parse(c.message.as_deref()?));
    if said.is_some_and(|a| a.token == token) {
        return;
    }
    let at = lsn.parse().expect("an LSN");
    let (status, reason, message) = answers::Answer {
        token: token.to_owned(),
        timeline: 1,
        received: at,
        replayed: at,
    }
    .condition();
    let condition = json!({"status": {"conditions": [{
        "type": answers::SURVEYED, "status": status, "reason": reason, "message": message,
    }]}});
    let _ = pods
        .patch_status(pod, &PatchParams::default(), &Patch::Strategic(condition))
        .await;
}

impl Drop for SurveyAnswers {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn ready_endpoints(slice: &EndpointSlice) -> usize {
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| {
            e.conditions
                .as_ref()
                .is_none_or(|c| c.ready.unwrap_or(true) && !c.terminating.unwrap_or(false))
        })
        .count()
}

/// The pods the ready endpoints of Service `service` point at, once they are `want`.
async fn endpoints_become(env: &Env, service: &str, want: &[&str]) {
    let api: Api<EndpointSlice> = env.api();
    let mut want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    let what = format!("{service} to select {want:?}");
    wait_for_all(
        &api,
        &format!("kubernetes.io/service-name={service}"),
        &what,
        move |slices: &[EndpointSlice]| {
            let mut pods: Vec<String> = slices
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| {
                    e.conditions
                        .as_ref()
                        .is_none_or(|c| c.ready.unwrap_or(true))
                })
                .filter_map(|e| e.target_ref.as_ref().and_then(|r| r.name.clone()))
                .collect();
            pods.sort();
            pods == want
        },
    )
    .await;
}

// ------------------------------------------------------------------ the tests

#[tokio::test]
async fn a_new_cluster_becomes_ready_with_pod_0_primary_and_the_services_selecting_by_role() {
    let pg = Pg::new("pg-create").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create("pg", spec(json!({"database": "app"}))).await;
    let ready = pg
        .ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let status = ready.status.as_ref().expect("a status");
    assert_eq!(status.primary_pod.as_deref(), Some("pg-0"));
    assert_eq!(status.replica_pods, vec!["pg-1", "pg-2"]);
    assert!(
        status
            .engine
            .condition(PRIMARY_AVAILABLE)
            .is_some_and(|c| c.status == conditions::status::TRUE),
        "{status:?}"
    );

    let pods: Api<Pod> = pg.env.api();
    for (pod, role) in [
        ("pg-0", "primary"),
        ("pg-1", "replica"),
        ("pg-2", "replica"),
    ] {
        let pod = pods.get(pod).await.expect("the pod");
        assert_eq!(pod.labels().get(ROLE).map(String::as_str), Some(role));
    }
    endpoints_become(&pg.env, "pg-rw", &["pg-0"]).await;
    endpoints_become(&pg.env, "pg-ro", &["pg-1", "pg-2"]).await;

    let services: Api<Service> = pg.env.api();
    let headless = services.get("pg").await.expect("the headless Service");
    assert_eq!(
        headless.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some("None")
    );

    // Generated credentials: both passwords, no owner (they outlive the cluster, like
    // the volumes that were bootstrapped with them).
    let secret = pg
        .env
        .api::<Secret>()
        .get("pg-credentials")
        .await
        .expect("the generated Secret");
    let keys: Vec<String> = secret.data.unwrap_or_default().keys().cloned().collect();
    assert_eq!(keys, vec!["replicationPassword", "superuserPassword"]);
    assert!(secret.metadata.owner_references.is_none());
    // The endpoint token the managers' writes need: one key, created before the pods,
    // kept like the credentials.
    let token = pg
        .env
        .api::<Secret>()
        .get("pg-endpoint-token")
        .await
        .expect("the endpoint token Secret");
    let keys: Vec<String> = token.data.unwrap_or_default().keys().cloned().collect();
    assert_eq!(keys, vec!["token"]);
    assert!(token.metadata.owner_references.is_none());
    // The application user's Secret: how to connect as `pg-app`, kept like the
    // credentials (the role's password is in the volumes' data).
    let app = pg
        .env
        .api::<Secret>()
        .get("pg-app")
        .await
        .expect("the application Secret");
    let data = app.data.unwrap_or_default();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "dbname", "host", "jdbc-uri", "password", "pgpass", "port", "uri", "username"
        ]
    );
    let value = |key: &str| String::from_utf8_lossy(&data[key].0).into_owned();
    assert_eq!(value("username"), "pg-app");
    assert_eq!(value("dbname"), "app");
    assert_eq!(value("host"), format!("pg-rw.{}.svc", pg.env.namespace()));
    assert_eq!(app.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert!(app.metadata.owner_references.is_none());

    let sts: Api<StatefulSet> = pg.env.api();
    let sts = sts.get("pg").await.expect("the StatefulSet");
    assert_eq!(
        sts.spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.type_.as_deref()),
        Some("OnDelete")
    );
    let template_labels = sts
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert!(!template_labels.contains_key(ROLE));
    let scripts = pg
        .env
        .api::<ConfigMap>()
        .get("pg-scripts")
        .await
        .expect("the scripts ConfigMap");
    // The backup Jobs' scripts; the pods run `lockstep instance`, no script, and a
    // failover runs no Job.
    let scripts = scripts.data.unwrap_or_default();
    assert!(scripts.contains_key("backup.sh"));
    assert!(!scripts.contains_key("entrypoint.sh") && !scripts.contains_key("survey.sh"));
    pg.env
        .api::<PodDisruptionBudget>()
        .get("pg")
        .await
        .expect("the PodDisruptionBudget");

    // Fencing: the Lease names the primary's pod (name and UID); the pods run as the
    // instance ServiceAccount.
    let pg0 = pods.get("pg-0").await.expect("pg-0");
    assert_eq!(
        lease_holder(&pg.env.api::<Lease>()).await,
        Some(format!("pg-0/{}", pg0.uid().unwrap_or_default()))
    );
    assert_eq!(
        pg0.spec.and_then(|s| s.service_account_name).as_deref(),
        Some("pg-instance")
    );
    operator.stop().await;
    pg.env.finish().await;
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get("pg-primary")
        .await
        .ok()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// `lockstep kubectl …` (the kubectl plugin) against the test cluster: its exit status
/// and stdout.
pub(crate) async fn plugin(args: &[&str]) -> (i32, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let kubeconfig = crate::support::kubeconfig_path();
        // `psql` runs `kubectl exec`: the cluster's own kubectl, next to its kubeconfig.
        let path = kubeconfig
            .parent()
            .map(|d| d.join("bin").display().to_string())
            .into_iter()
            .chain(std::env::var("PATH").ok())
            .collect::<Vec<_>>()
            .join(":");
        std::process::Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .arg("kubectl")
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run lockstep kubectl")
    })
    .await
    .expect("the plugin ran");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The kubectl plugin: `status` and `history` read the object and its pods,
/// `switchover` sets the request and waits for its outcome, a refused request fails
/// naming why.
#[tokio::test]
async fn the_kubectl_plugin_shows_the_cluster_and_switches_over_on_demand() {
    let pg = Pg::new("pg-plugin").await;
    let _operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create("pg", spec(json!({}))).await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let ns = pg.env.ns.name.clone();

    let (code, out) = plugin(&["status", "pg", "-n", &ns, "-o", "json"]).await;
    assert_eq!(code, 0, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(status["phase"], "Ready", "{status}");
    assert_eq!(status["primary"], "pg-0");
    assert_eq!(status["instances"].as_array().map(Vec::len), Some(3));
    let (code, text) = plugin(&["status", "postgrescluster/pg", "-n", &ns]).await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("primary: pg-0") && text.contains("ClusterCreated"),
        "{text}"
    );

    let (code, out) = plugin(&["switchover", "pg", "pg-2", "-n", &ns, "--timeout", "300"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("pg-2 is primary"), "{out}");
    let (code, out) = plugin(&["history", "pg", "-n", &ns, "-o", "yaml"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("SwitchoverRequested") && out.contains("SwitchoverCompleted"),
        "{out}"
    );

    let (code, out) = plugin(&["switchover", "pg", "pg-9", "-n", &ns, "--timeout", "60"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("names no instance"), "{out}");

    let (code, out) = plugin(&["retry", "pg", "-n", &ns]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nothing waits for a retry in pg"), "{out}");
}

/// A switchover on demand to a replica whose standby reports that it does not
/// stream (the pod condition its instance manager writes; here the test writes it, as
/// KWOK runs no manager) is refused up front, Degraded naming why, and runs once the
/// replica says it streams again.
#[tokio::test]
async fn a_switchover_to_a_replica_that_does_not_stream_waits_degraded_until_it_streams() {
    let pg = Pg::new("pg-lag").await;
    let _operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create("pg", spec(json!({}))).await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let pods: Api<Pod> = pg.env.api();
    let says = |streams: &str| {
        json!({"status": {"conditions": [{"type": "lockstep.dev/Streaming", "status": streams,
            "reason": "R", "message": "as its instance manager would say"}]}})
    };
    pods.patch_status(
        "pg-2",
        &PatchParams::default(),
        &Patch::Strategic(says("False")),
    )
    .await
    .expect("pg-2 says it does not stream");
    pg.merge_patch(
        "pg",
        json!({"metadata": {"annotations": {"lockstep.dev/switchover": "pg-2"}}}),
    )
    .await;
    pg.until("pg", "the switchover refused, Degraded naming why", |pg| {
        pg.status
            .as_ref()
            .and_then(|s| s.engine.condition(conditions::DEGRADED))
            .is_some_and(|c| {
                c.status == conditions::status::TRUE
                    && c.reason == "SwitchoverRefused"
                    && c.message
                        .contains("pg-2 reports that its standby does not stream")
            })
    })
    .await;
    assert_eq!(
        primary_pod(&pg.api.get("pg").await.expect("the cluster")),
        Some("pg-0"),
        "nothing moved"
    );
    pods.patch_status(
        "pg-2",
        &PatchParams::default(),
        &Patch::Strategic(says("True")),
    )
    .await
    .expect("pg-2 says it streams");
    pg.until("pg", "switched over to pg-2", |pg| {
        is_ready_at(pg, "ghcr.io/lockstep-dev/postgres:18.1") && primary_pod(pg) == Some("pg-2")
    })
    .await;
}

/// `spec.spread.mode: Required`: the scheduler puts each instance on a node of its own
/// (the local cluster has three KWOK nodes).
#[tokio::test]
async fn a_required_spread_puts_each_instance_on_a_node_of_its_own() {
    let pg = Pg::new("pg-spread").await;
    let _operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create("pg", spec(json!({"spread": {"mode": "Required"}})))
        .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let pods: Api<Pod> = pg.env.api();
    let mut nodes = std::collections::BTreeSet::new();
    for name in ["pg-0", "pg-1", "pg-2"] {
        let pod = pods.get(name).await.expect("the pod");
        let node = pod.spec.and_then(|s| s.node_name).expect("scheduled");
        assert!(
            nodes.insert(node.clone()),
            "{name} shares {node}: {nodes:?}"
        );
    }
}

/// A status wiped after the primary moved (here by a failover) is
/// adopted as the cluster runs: the Lease holder stays primary, no role moves, no pod is
/// deleted, and the cluster is Ready again (`Adopted`).
#[tokio::test]
async fn a_wiped_status_is_adopted_without_moving_a_role_or_restarting_a_pod() {
    let pg = Pg::new("pg-adopt").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    let _survey = SurveyAnswers::start(&pg.env, &[("pg-1", "0/3000060"), ("pg-2", "0/3000060")]);
    pg.create("pg", spec(json!({"failoverDelaySeconds": 2})))
        .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    pg.label_pod("pg-0", "lockstep.dev/kwok-notready", Some("true"))
        .await;
    pg.until("pg", "failed over to pg-1, pg-0 back as a replica", |pg| {
        is_ready_at(pg, "ghcr.io/lockstep-dev/postgres:18.1")
            && primary_pod(pg) == Some("pg-1")
            && pg
                .status
                .as_ref()
                .is_some_and(|s| s.replica_pods.len() == 2)
    })
    .await;
    let pods: Api<Pod> = pg.env.api();
    let before: BTreeMap<String, (Option<String>, Option<String>)> = pods
        .list(&Default::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| !p.labels().contains_key("batch.kubernetes.io/job-name"))
        .map(|p| (p.name_any(), (p.uid(), p.labels().get(ROLE).cloned())))
        .collect();
    let leases: Api<Lease> = pg.env.api();
    let holder = lease_holder(&leases).await;
    assert!(
        holder.as_deref().is_some_and(|h| h.starts_with("pg-1/")),
        "{holder:?}"
    );
    let recorder = Recorder::start(&pg.env, "pg").await;

    let clusters: Api<PostgresCluster> = pg.env.api();
    clusters
        .patch_status(
            "pg",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"machine": null}})),
        )
        .await
        .expect("wipe the status");
    let adopted = pg
        .until("pg", "Ready again after the wiped status", |pg| {
            is_ready_at(pg, "ghcr.io/lockstep-dev/postgres:18.1")
                && reasons(pg).iter().any(|r| r == "Adopted")
        })
        .await;
    assert_eq!(primary_pod(&adopted), Some("pg-1"));
    let after: BTreeMap<String, (Option<String>, Option<String>)> = pods
        .list(&Default::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| !p.labels().contains_key("batch.kubernetes.io/job-name"))
        .map(|p| (p.name_any(), (p.uid(), p.labels().get(ROLE).cloned())))
        .collect();
    assert_eq!(before, after, "no pod was recreated or relabelled");
    assert_eq!(lease_holder(&leases).await, holder);
    let log = recorder.log();
    for pod in ["pg-0", "pg-1", "pg-2"] {
        assert!(!log.contains(&format!("delete {pod}")), "{log:?}");
    }
    assert!(recorder.most_primaries() <= 1);
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn a_version_change_upgrades_replicas_2_then_1_switches_over_then_replaces_the_old_primary() {
    let pg = Pg::new("pg-upgrade").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create("pg", spec(json!({}))).await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    endpoints_become(&pg.env, "pg-rw", &["pg-0"]).await;
    let pods: Api<Pod> = pg.env.api();
    let old_primary_uid = pods
        .get("pg-0")
        .await
        .expect("the primary's pod")
        .uid()
        .expect("a UID");
    let recorder = Recorder::start(&pg.env, "pg").await;

    pg.merge_patch("pg", json!({"spec": {"version": "18.2"}}))
        .await;
    let upgraded = pg
        .ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.2")
        .await;

    assert_eq!(
        recorder.switchover_steps(),
        vec!["delete pg-2", "delete pg-1", "primary pg-1", "delete pg-0"],
        "full log: {:?}",
        recorder.log()
    );
    assert_eq!(primary_pod(&upgraded), Some("pg-1"));
    endpoints_become(&pg.env, "pg-rw", &["pg-1"]).await;
    endpoints_become(&pg.env, "pg-ro", &["pg-0", "pg-2"]).await;
    assert!(
        recorder.most_primaries() <= 1,
        "two pods were labelled primary at once"
    );
    assert!(
        recorder.most_rw_endpoints() <= 1,
        "pg-rw selected {} pods at once",
        recorder.most_rw_endpoints()
    );
    // The old primary's pod (its original UID: until it restarts it is a writable
    // primary) is labelled `demoted`, never `replica`, and `pg-ro` never selects it.
    assert_eq!(
        recorder.ever_read_only(&old_primary_uid),
        (false, false),
        "(labelled replica, selected by pg-ro) for the old primary pg-0 before its restart"
    );
    let reasons = reasons(&upgraded);
    for reason in [
        "SwitchoverStarted",
        "OldPrimaryDemoted",
        "SwitchoverCompleted",
        "UpgradeCompleted",
    ] {
        assert!(reasons.iter().any(|r| r == reason), "{reasons:?}");
    }
    for k in 0..3 {
        let pod = pods.get(&format!("pg-{k}")).await.expect("the pod");
        let image = pod
            .spec
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
        assert_eq!(image.as_deref(), Some("ghcr.io/lockstep-dev/postgres:18.2"));
    }
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn a_primary_that_stays_not_ready_is_failed_over_to_a_ready_replica_after_the_delay() {
    let pg = Pg::new("pg-failover").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    let _survey = SurveyAnswers::start(&pg.env, &[("pg-1", "0/3000060"), ("pg-2", "0/3000060")]);
    pg.create("pg", spec(json!({"failoverDelaySeconds": 5})))
        .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let recorder = Recorder::start(&pg.env, "pg").await;

    pg.label_pod("pg-0", "lockstep.dev/kwok-notready", Some("true"))
        .await;
    let failed_over = pg
        .until("pg", "a failover to another pod", |pg| {
            is_ready_at(pg, "ghcr.io/lockstep-dev/postgres:18.1")
                && primary_pod(pg).is_some_and(|p| p != "pg-0")
        })
        .await;
    assert_eq!(primary_pod(&failed_over), Some("pg-1"));

    let history = history(&failed_over);
    let at = |reason: &str| {
        history
            .iter()
            .find(|h| h.reason == reason)
            .unwrap_or_else(|| panic!("no {reason} in {history:?}"))
            .at
    };
    let waited = at("FailoverStarted") - at("PrimaryNotReady");
    assert!(
        waited >= chrono::Duration::seconds(5),
        "failed over after {waited}, before failoverDelaySeconds=5"
    );
    let completed = history
        .iter()
        .find(|h| h.reason == "FailoverCompleted")
        .expect("a completed failover");
    assert!(
        completed.message.contains("failoverDelaySeconds"),
        "{}",
        completed.message
    );
    let status = failed_over.status.as_ref().expect("a status");
    assert!(status.last_failover.is_some());
    assert!(
        status
            .engine
            .condition(PRIMARY_AVAILABLE)
            .is_some_and(|c| c.status == conditions::status::TRUE && c.reason == "FailedOver"),
        "{:?}",
        status.engine.conditions
    );

    // The failed primary was fenced (deleted) and comes back as a replica.
    pg.until("pg", "pg-0 back as a replica", |pg| {
        pg.status
            .as_ref()
            .is_some_and(|s| s.replica_pods.iter().any(|p| p == "pg-0"))
    })
    .await;
    endpoints_become(&pg.env, "pg-rw", &["pg-1"]).await;
    let log = recorder.log();
    assert!(log.contains(&"delete pg-0".to_owned()), "{log:?}");
    assert!(log.contains(&"primary pg-1".to_owned()), "{log:?}");
    assert!(recorder.most_primaries() <= 1);
    assert!(recorder.most_rw_endpoints() <= 1);
    operator.stop().await;
    pg.env.finish().await;
}

/// A failover promotes the replica that received the most WAL (here pg-2),
/// not the lowest ordinal, and records why.
#[tokio::test]
async fn a_failover_promotes_the_most_advanced_replica() {
    let pg = Pg::new("pg-advanced").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    let _survey = SurveyAnswers::start(&pg.env, &[("pg-1", "0/3000060"), ("pg-2", "0/3000148")]);
    pg.create("pg", spec(json!({"failoverDelaySeconds": 2})))
        .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    pg.label_pod("pg-0", "lockstep.dev/kwok-notready", Some("true"))
        .await;
    let failed_over = pg
        .until("pg", "a failover to another pod", |pg| {
            is_ready_at(pg, "ghcr.io/lockstep-dev/postgres:18.1")
                && primary_pod(pg).is_some_and(|p| p != "pg-0")
        })
        .await;
    assert_eq!(primary_pod(&failed_over), Some("pg-2"));
    let history = history(&failed_over);
    let chosen = history
        .iter()
        .find(|h| h.reason == "MostAdvancedChosen")
        .unwrap_or_else(|| panic!("no MostAdvancedChosen in {history:?}"));
    assert!(
        chosen.message.contains("pg-2 timeline 1 receive 0/3000148"),
        "{}",
        chosen.message
    );
    let reasons = reasons(&failed_over);
    let at = |r: &str| reasons.iter().position(|x| x == r);
    assert!(
        at("OldPrimaryFenced") < at("MostAdvancedChosen")
            && at("MostAdvancedChosen") < at("LeaseHandedOver"),
        "fenced, then surveyed, then handed over: {reasons:?}"
    );
    let leases: Api<Lease> = pg.env.api();
    assert!(
        lease_holder(&leases)
            .await
            .is_some_and(|h| h.starts_with("pg-2/"))
    );
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn a_primary_that_recovers_within_the_delay_keeps_its_role() {
    let pg = Pg::new("pg-recover").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create("pg", spec(json!({"failoverDelaySeconds": 600})))
        .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let recorder = Recorder::start(&pg.env, "pg").await;

    pg.label_pod("pg-0", "lockstep.dev/kwok-notready", Some("true"))
        .await;
    let lost = pg
        .until(
            "pg",
            "PrimaryLost, Degraded while awaiting the failover",
            |pg| {
                pg.status.as_ref().is_some_and(|s| {
                    s.engine.phase.as_deref() == Some("PrimaryLost")
                        && s.engine
                            .condition(conditions::DEGRADED)
                            .is_some_and(|c| c.status == conditions::status::TRUE)
                })
            },
        )
        .await;
    let status = lost.status.as_ref().expect("a status");
    assert!(
        status
            .engine
            .condition(PRIMARY_AVAILABLE)
            .is_some_and(|c| c.status == conditions::status::FALSE),
        "{:?}",
        status.engine.conditions
    );
    assert!(
        status
            .engine
            .condition(conditions::DEGRADED)
            .is_some_and(|c| c.status == conditions::status::TRUE && c.reason == "AwaitingFailover"),
        "{:?}",
        status.engine.conditions
    );

    pg.label_pod("pg-0", "lockstep.dev/kwok-notready", None)
        .await;
    let recovered = pg
        .ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    assert_eq!(primary_pod(&recovered), Some("pg-0"));
    assert!(reasons(&recovered).iter().any(|r| r == "PrimaryRecovered"));
    assert!(
        !recorder
            .log()
            .iter()
            .any(|e| e.starts_with("primary ") && e != "primary pg-0"),
        "{:?}",
        recorder.log()
    );
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn the_backup_cronjob_follows_the_schedule_and_backup_now_runs_one_job() {
    let pg = Pg::new("pg-backups").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    pg.create(
        "pg",
        spec(json!({"backup": backup(), "backupSchedule": "0 3 * * *"})),
    )
    .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let cronjobs: Api<CronJob> = pg.env.api();
    let schedule_is = |want: &'static str| {
        move |cj: Option<&CronJob>| cj.is_some_and(|cj| cj.spec.schedule == want)
    };
    wait_for(
        &cronjobs,
        "pg-backup",
        "the CronJob at 0 3 * * *",
        schedule_is("0 3 * * *"),
    )
    .await;

    pg.merge_patch("pg", json!({"spec": {"backupSchedule": "30 4 * * 1-5"}}))
        .await;
    let cj = wait_for(
        &cronjobs,
        "pg-backup",
        "the CronJob at 30 4 * * 1-5",
        schedule_is("30 4 * * 1-5"),
    )
    .await
    .expect("the CronJob");
    let uid = cj.uid().unwrap_or_default();
    let container = cj
        .spec
        .job_template
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].clone())
        .expect("a container");
    assert_eq!(
        container.command.unwrap_or_default(),
        vec!["bash", "/lockstep/scripts/backup.sh"]
    );

    let recorder = Recorder::start(&pg.env, "pg").await;
    pg.merge_patch(
        "pg",
        json!({"metadata": {"annotations": {"lockstep.dev/backup-now": "e2e-1"}}}),
    )
    .await;
    let backed_up = pg
        .until("pg", "lastBackupTime from the on-demand backup", |pg| {
            pg.status.as_ref().is_some_and(|s| {
                s.last_backup_time.is_some() && s.engine.phase.as_deref() == Some("Ready")
            })
        })
        .await;
    assert!(reasons(&backed_up).iter().any(|r| r == "BackupSucceeded"));
    assert!(
        recorder.log().contains(&"done backup".to_owned()),
        "{:?}",
        recorder.log()
    );

    pg.merge_patch("pg", json!({"spec": {"backupSchedule": null}}))
        .await;
    wait_gone(&cronjobs, "pg-backup", &uid, "the CronJob to be deleted").await;
    operator.stop().await;
    pg.env.finish().await;
}

/// The Job of a `backup-now` token that finished while the operator was down,
/// and went (its outcome finalizer stripped) before it was read, is reported where
/// people look: `Degraded` `BackupOutcomeUnknown` and `status.lastBackup` `Unknown`,
/// both naming the token.
#[tokio::test]
async fn a_backup_whose_job_vanished_unread_says_so_in_last_backup() {
    let pg = Pg::new("pg-lost").await;
    // KWOK runs no agent: without renewals the primary would be lost mid-test.
    let _agents = LeaseAgents::start(&pg.env);
    let operator = pg.operator();
    let mut with_delay = backup();
    merge_json(
        &mut with_delay,
        json!({"podAnnotations": {"lockstep.dev/kwok-complete-delay-ms": "3000"}}),
    );
    pg.create("pg", spec(json!({"backup": with_delay}))).await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    pg.merge_patch(
        "pg",
        json!({"metadata": {"annotations": {"lockstep.dev/backup-now": "lost-1"}}}),
    )
    .await;
    pg.until("pg", "BackingUp", |pg| {
        pg.status.as_ref().and_then(|s| s.engine.phase.as_deref()) == Some("BackingUp")
    })
    .await;
    operator.stop().await;

    let jobs: Api<Job> = pg.env.api();
    let name = format!("pg-{}", backup_key("lost-1", None));
    let job = wait_for(
        &jobs,
        &name,
        "the backup Job to succeed",
        |j: Option<&Job>| {
            j.and_then(|j| j.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                })
        },
    )
    .await
    .expect("the Job");
    assert!(
        job.finalizers().iter().any(|f| f == OUTCOME_FINALIZER),
        "{:?}",
        job.finalizers()
    );
    let strip = json!({"metadata": {"finalizers": null}});
    jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&strip))
        .await
        .expect("remove the finalizer");
    jobs.delete(&name, &DeleteParams::background())
        .await
        .expect("delete the Job");
    wait_gone(&jobs, &name, &job.uid().unwrap_or_default(), "the Job").await;

    let operator = pg.operator();
    let seen = pg
        .until(
            "pg",
            "Degraded BackupOutcomeUnknown, lastBackup Unknown",
            |pg| {
                let degraded = pg
                    .status
                    .as_ref()
                    .and_then(|s| s.engine.condition(conditions::DEGRADED))
                    .is_some_and(|c| {
                        c.status == conditions::status::TRUE && c.reason == BACKUP_OUTCOME_UNKNOWN
                    });
                let unknown = pg
                    .status
                    .as_ref()
                    .and_then(|s| s.last_backup.as_ref())
                    .is_some_and(|b| b.outcome.starts_with("Unknown"));
                degraded && unknown
            },
        )
        .await;
    let last = seen
        .status
        .as_ref()
        .and_then(|s| s.last_backup.clone())
        .expect("lastBackup");
    assert_eq!(last.job, name);
    assert!(
        last.outcome.contains("lockstep.dev/backup-now=lost-1"),
        "names the token: {}",
        last.outcome
    );
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn deleting_a_cluster_runs_the_final_backup_job_and_then_it_is_gone() {
    let pg = Pg::new("pg-final").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    let created = pg.create("pg", spec(json!({"backup": backup()}))).await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    let recorder = Recorder::start(&pg.env, "pg").await;

    pg.api
        .delete("pg", &DeleteParams::default())
        .await
        .expect("delete the cluster");
    wait_gone(
        &pg.api,
        "pg",
        &created.uid().unwrap_or_default(),
        "the cluster to be gone",
    )
    .await;
    let log = recorder.log();
    let job = log.iter().position(|e| e == "job final-backup-1");
    let done = log.iter().position(|e| e == "done final-backup-1");
    assert!(
        job.is_some() && done.is_some() && job < done,
        "the final backup Job ran to completion before the finalizer went: {log:?}"
    );
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn a_failing_final_backup_keeps_the_finalizer_until_the_skip_annotation() {
    let pg = Pg::new("pg-final-fails").await;
    let operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    let mut failing = backup();
    merge_json(
        &mut failing,
        json!({"podLabels": {"lockstep.dev/kwok-fail": "true"}}),
    );
    let created = pg.create("pg", spec(json!({"backup": failing}))).await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;

    pg.api
        .delete("pg", &DeleteParams::default())
        .await
        .expect("delete the cluster");
    let held = pg
        .until("pg", "Degraded: the final backup failed", |pg| {
            pg.status.as_ref().is_some_and(|s| {
                s.engine.condition(conditions::DEGRADED).is_some_and(|c| {
                    c.status == conditions::status::TRUE && c.reason == "FinalBackupFailed"
                })
            })
        })
        .await;
    assert!(
        held.finalizers()
            .iter()
            .any(|f| f.starts_with("lockstep.dev/"))
    );
    let message = held
        .status
        .as_ref()
        .and_then(|s| s.engine.condition(conditions::DEGRADED))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("lockstep.dev/skip-final-backup"),
        "{message}"
    );

    let ns = pg.env.ns.name.clone();
    let (code, out) = plugin(&["skip-final-backup", "pg", "-n", &ns, "--timeout", "300"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("pg is deleted, without a final backup"),
        "{out}"
    );
    wait_gone(
        &pg.api,
        "pg",
        &created.uid().unwrap_or_default(),
        "the cluster to be gone once skipped",
    )
    .await;
    operator.stop().await;
    pg.env.finish().await;
}

#[tokio::test]
async fn invalid_specs_are_rejected_by_the_api_server_naming_the_field() {
    let pg = Pg::new("pg-invalid").await;
    let base = json!({"version": "18.1", "replicas": 3, "storageSize": "1Gi"});
    let with = |extra: serde_json::Value| {
        let mut s = base.clone();
        merge_json(&mut s, extra);
        s
    };
    for (name, spec, says) in [
        (
            "old",
            with(json!({"version": "12"})),
            "spec.version must be a supported",
        ),
        // A major between supported ones, with no image built here: the message names
        // the ones that are.
        (
            "no-image",
            with(json!({"version": "16.4"})),
            "major version (15, 17 or 18",
        ),
        ("none", with(json!({"replicas": 0})), "spec.replicas"),
        (
            "reserved-role",
            with(json!({"roles": [{"name": "pg_monitor"}]})),
            "spec.roles[].name: postgres, replicator and names starting with pg_",
        ),
        (
            "twice",
            with(json!({"databases": [
                {"name": "a", "owner": "x"},
                {"name": "a", "owner": "y"}
            ]})),
            "Duplicate value",
        ),
        (
            "size",
            with(json!({"storageSize": "lots"})),
            "spec.storageSize must be a positive quantity",
        ),
        (
            "cron",
            with(json!({"backup": backup(), "backupSchedule": "every day"})),
            "spec.backupSchedule must be a cron expression",
        ),
        (
            "nowhere",
            with(json!({"backupSchedule": "0 3 * * *"})),
            "spec.backupSchedule needs spec.backup",
        ),
        (
            "plainarchive",
            with(json!({"backup": {
                "s3Endpoint": "http://s3.example", "bucket": "b", "credentialsSecret": "s3",
                "image": "pg:16", "walArchive": {}
            }})),
            "spec.backup.walArchive needs an https:// endpoint",
        ),
        (
            "basebackupnoarchive",
            with(json!({"backup": {
                "s3Endpoint": "https://s3.example", "bucket": "b", "credentialsSecret": "s3",
                "image": "pg:16", "method": "BaseBackup"
            }})),
            "spec.backup.method BaseBackup needs spec.backup.walArchive",
        ),
        (
            "dumpretention",
            with(json!({"backup": {
                "s3Endpoint": "https://s3.example", "bucket": "b", "credentialsSecret": "s3",
                "image": "pg:16", "retention": {"count": 3}
            }})),
            "spec.backup.retention applies to base backups only",
        ),
        (
            "tworetentions",
            with(json!({"backup": {
                "s3Endpoint": "https://s3.example", "bucket": "b", "credentialsSecret": "s3",
                "image": "pg:16", "walArchive": {}, "retention": {"count": 3, "days": 7}
            }})),
            "spec.backup.retention: set exactly one of count and days",
        ),
        (
            "restorenoarchive",
            with(json!({"backup": backup(), "restore": {"token": "t1"}})),
            "spec.restore needs spec.backup with walArchive",
        ),
        (
            "restoretwotargets",
            with(json!({"backup": {
                "s3Endpoint": "https://s3.example", "bucket": "b", "credentialsSecret": "s3",
                "image": "pg:16", "walArchive": {}
            }, "restore": {"token": "t1", "target": {"lsn": "0/1", "name": "x"}}})),
            "spec.restore.target: Invalid value: set exactly one of time, lsn, name and immediate",
        ),
        (
            "delay",
            with(json!({"failoverDelaySeconds": -1})),
            "spec.failoverDelaySeconds",
        ),
        (
            "toleration",
            with(json!({"placement": {"tolerations": [{"key": "k", "operator": "Exist"}]}})),
            "placement.tolerations[].operator must be Exists or Equal",
        ),
        (
            "skew",
            with(json!({"placement": {"topologySpreadConstraints": [
                {"maxSkew": 0, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
            ]}})),
            "placement.topologySpreadConstraints[].maxSkew must be at least 1",
        ),
        (
            "spread",
            with(json!({"spread": {"mode": "Always"}})),
            "spec.spread.mode",
        ),
        (
            "sync-too-many",
            with(json!({"synchronous": {"number": 3}})),
            "spec.synchronous.number must be less than spec.replicas",
        ),
        (
            "managed",
            with(
                json!({"postgresql": {"parameters": {"work_mem": "8MB", "wal_level": "logical"}}}),
            ),
            "spec.postgresql.parameters: wal_level is managed by Lockstep",
        ),
        (
            "weak-commit",
            with(json!({"synchronous": {"number": 1},
                        "postgresql": {"parameters": {"synchronous_commit": "local"}}})),
            "spec.postgresql.parameters.synchronous_commit must be on or remote_apply with spec.synchronous",
        ),
        (
            "upper",
            with(json!({"postgresql": {"parameters": {"Work_Mem": "8MB"}}})),
            "spec.postgresql.parameters: every name is a PostgreSQL parameter name in lower case",
        ),
        (
            "newline",
            with(json!({"postgresql": {"parameters": {"work_mem": "8MB\nport = 1"}}})),
            "spec.postgresql.parameters: every value is one line",
        ),
        (
            "hba",
            with(json!({"postgresql": {"pgHba": ["host all all all trust\nlocal all all trust"]}})),
            "spec.postgresql.pgHba: every rule is one line",
        ),
    ] {
        let error = pg.refused_create(name, spec).await;
        assert!(error.contains(says), "{name}: {error}");
    }
    let long = "p".repeat(41);
    let error = pg.refused_create(&long, base.clone()).await;
    assert!(
        error.contains("metadata.name must be at most 40"),
        "{error}"
    );

    pg.create("pg", spec(json!({}))).await;
    for (patch, says) in [
        (
            json!({"spec": {"storageSize": "2Gi"}}),
            "spec.storageSize is immutable",
        ),
        (
            json!({"spec": {"version": "17"}}),
            "spec.version cannot change its major version",
        ),
        (
            json!({"spec": {"credentialsSecret": "mine"}}),
            "spec.credentialsSecret is immutable",
        ),
    ] {
        let error = pg.refused_patch("pg", patch.clone()).await;
        assert!(error.contains(says), "{patch}: {error}");
    }
    // A minor version change is an upgrade, not an error.
    pg.merge_patch("pg", json!({"spec": {"version": "18.2"}}))
        .await;
    pg.env.finish().await;
}

#[tokio::test]
async fn a_cluster_at_rest_makes_no_request_when_reconciled_again() {
    let pg = Pg::new("pg-quiet").await;
    let requests = RequestLog::default();
    let counted = counted_client(&requests).await;
    let (probe, mut counts) = watch::channel(ReconcileCounts::default());
    let (force, forced) = futures::channel::mpsc::unbounded();
    let operator = InProcessOperator::start::<Postgres>(
        counted,
        driver::Config::namespaced(pg.env.namespace())
            .hooks(ReconcileProbe(probe))
            .reconcile_all_on(forced),
    );
    let _agents = LeaseAgents::start(&pg.env);
    // Suspended: a run spanning 03:00 UTC would otherwise count a scheduled backup's writes.
    let mut suspended = backup();
    suspended["suspend"] = json!(true);
    pg.create(
        "pg",
        spec(json!({"backup": suspended, "backupSchedule": "0 3 * * *", "database": "app"})),
    )
    .await;
    pg.ready_at("pg", "ghcr.io/lockstep-dev/postgres:18.1")
        .await;
    // Wait until reconciles stop coming (owned objects settle after creation), then
    // force a few more: each must find everything as rendered.
    let mut settled = counts_until(&mut counts, "reconciles to finish", |c| {
        c.started == c.finished
    })
    .await;
    loop {
        let mark = requests.mark();
        force.unbounded_send(()).expect("the operator listens");
        let after = counts_until(&mut counts, "a forced reconcile", |c| {
            c.finished > settled.finished && c.started == c.finished
        })
        .await;
        let mutating: Vec<String> = requests
            .since(mark)
            .into_iter()
            .filter(|r| r.is_mutating())
            .map(|r| r.to_string())
            .collect();
        if after.idle > settled.idle && mutating.is_empty() {
            settled = after;
            break;
        }
        // A late watch event (a pod's status settling) may still be in flight once;
        // the next forced reconcile must then be quiet.
        assert!(
            after.finished < settled.finished + 4,
            "reconciles at rest keep acting: {mutating:?}"
        );
        settled = after;
    }
    for _ in 0..3 {
        let mark = requests.mark();
        force.unbounded_send(()).expect("the operator listens");
        let after = counts_until(&mut counts, "a forced reconcile", |c| {
            c.finished > settled.finished && c.started == c.finished
        })
        .await;
        let mutating: Vec<String> = requests
            .since(mark)
            .into_iter()
            .filter(|r| r.is_mutating())
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            mutating,
            Vec::<String>::new(),
            "a reconcile at rest writes nothing"
        );
        assert!(after.idle > settled.idle, "{after:?}");
        settled = after;
    }
    operator.stop().await;
    pg.env.finish().await;
}
