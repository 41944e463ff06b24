//! Running Lockstep in production, on the real control plane: the `lockstep` binary with
//! its health endpoints and metrics, leader election between two processes (one
//! reconciles; a killed leader is replaced within the lease duration and the upgrade it
//! left half done finishes), and the deploy manifests' RBAC (sufficient for a whole
//! lifecycle with the ServiceAccount's own token, and no broader than needed).
//!
//! Every operator here is the real binary (`CARGO_BIN_EXE_lockstep`) watching only the
//! test's namespace, so tests running side by side never reconcile each other's objects.
//! Nothing sleeps for a fixed time: objects are awaited through watches, endpoints are
//! polled, and every wait has a deadline.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::conditions;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use lockstep::engine::RawRecord;
use lockstep::machines::distributeddb::DistributedDB;
use lockstep::machines::postgres::PostgresCluster;

use crate::support::{self, DEADLINE, Env, OperatorProcess, TEST_MANAGER};

// ------------------------------------------------------------------------ helpers

/// A free loopback address for a process's health server.
fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address")
}

/// `GET path` on `addr`: the status code and body, or `None` if nothing answers.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: lockstep\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let code = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((code, body))
    })
    .await
    .ok()
    .flatten()
}

/// Poll `GET path` until `accept(code, body)`; fail after [`DEADLINE`] with what was
/// last answered. (An HTTP endpoint has no watch: this is the one poll in these tests.)
async fn wait_http(
    addr: SocketAddr,
    path: &str,
    what: &str,
    accept: impl Fn(u16, &str) -> bool,
) -> String {
    let deadline = Instant::now() + DEADLINE;
    let mut last = None;
    loop {
        let answer = http_get(addr, path).await;
        if let Some((code, body)) = &answer
            && accept(*code, body)
        {
            return body.clone();
        }
        last = answer.or(last);
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what} on http://{addr}{path}; last answer: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of the sample `series` (name with its labels, exactly as exposed).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

const RECONCILES: &str = "lockstep_reconciles_total{machine=\"distributeddb\"}";

/// A running `lockstep run` and the address of its health server.
struct Operator {
    process: OperatorProcess,
    addr: SocketAddr,
    identity: String,
}

impl Operator {
    /// `lockstep run --machines distributeddb --namespace <ns>` plus `extra`.
    fn start(namespace: &str, identity: &str, extra: &[&str], log: &str) -> Self {
        let addr = free_addr();
        let addr_arg = format!("--metrics-addr={addr}");
        let ns_arg = format!("--namespace={namespace}");
        let id_arg = format!("--identity={identity}");
        let mut args = vec![
            "run",
            "--machines=distributeddb",
            &ns_arg,
            &addr_arg,
            &id_arg,
        ];
        args.extend_from_slice(extra);
        let process = OperatorProcess::spawn(&args, log);
        Self {
            process,
            addr,
            identity: identity.to_owned(),
        }
    }

    /// Two-process election on a Lease in the test namespace.
    fn elected(namespace: &str, identity: &str, lease_secs: u64) -> Self {
        let lease_ns = format!("--lease-namespace={namespace}");
        let duration = format!("--lease-duration={lease_secs}");
        Self::start(
            namespace,
            identity,
            &[
                "--leader-election",
                "--lease-name=lockstep-e2e",
                &lease_ns,
                &duration,
            ],
            &format!("operability-{namespace}-{identity}"),
        )
    }

    async fn metrics(&self) -> String {
        match http_get(self.addr, "/metrics").await {
            Some((200, body)) => body,
            other => panic!(
                "{}: /metrics answered {other:?}; log: {}",
                self.identity,
                self.process.log.display()
            ),
        }
    }

    async fn readyz(&self) -> (u16, String) {
        http_get(self.addr, "/readyz")
            .await
            .unwrap_or_else(|| panic!("{}: /readyz did not answer", self.identity))
    }

    fn sigterm(&self) {
        let pid = self.process.pid().expect("the operator runs");
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid} failed");
    }

    /// Fail if the log shows an authorization failure.
    fn assert_no_forbidden(&self) {
        let log = self.process.output();
        let denied: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("Forbidden") || l.contains("forbidden") || l.contains(" 403"))
            .collect();
        assert!(
            denied.is_empty(),
            "{}: the log shows denied requests:\n{}",
            self.identity,
            denied.join("\n")
        );
    }
}

/// A DistributedDB of 3 pods at `image`, with pre and post hooks, a backup policy when
/// `backups`, and pods that take `ready_ms` to become Ready (KWOK), so an upgrade takes a
/// while.
fn ddb(name: &str, image: &str, ready_ms: u32, backups: bool) -> DistributedDB {
    let mut db = json!({
        "apiVersion": "lockstep.dev/v1alpha1",
        "kind": "DistributedDB",
        "metadata": {"name": name},
        "spec": {
            "replicas": 3,
            "image": image,
            "storage": {"size": "1Gi", "storageClassName": "expandable"},
            "podAnnotations": {
                "lockstep.dev/kwok-ready-delay-ms": ready_ms.to_string(),
                "lockstep.dev/kwok-ready-jitter-ms": "0"
            },
            "upgrade": {
                "preHook": {"command": ["db-admin", "drain"]},
                "postHook": {"command": ["db-admin", "verify"]}
            }
        }
    });
    if backups {
        // Suspended: a run spanning 03:00 UTC would otherwise meet a scheduled backup Job.
        db["spec"]["backupPolicy"] = json!({
            "schedule": "0 3 * * *",
            "suspend": true,
            "s3Endpoint": "http://s3.invalid",
            "s3CredentialsSecret": "backup-s3",
            "bucket": "backups",
            "image": "registry.example/db-backup:1"
        });
    }
    serde_json::from_value(db).expect("a valid DistributedDB")
}

fn condition_true(db: &DistributedDB, type_: &str) -> bool {
    db.status
        .as_ref()
        .and_then(|s| s.engine.condition(type_))
        .is_some_and(|c| c.status == "True")
}

fn phase(db: &DistributedDB) -> Option<&str> {
    db.status.as_ref().and_then(|s| s.engine.phase.as_deref())
}

/// Ready at `image`, for the current generation.
fn ready_at(image: &str) -> impl Fn(Option<&DistributedDB>) -> bool {
    let image = image.to_owned();
    move |db: Option<&DistributedDB>| {
        db.is_some_and(|db| {
            let status = db.status.as_ref();
            condition_true(db, "Ready")
                && status.and_then(|s| s.version.as_deref()) == Some(image.as_str())
                && status.and_then(|s| s.engine.observed_generation) == db.metadata.generation
        })
    }
}

/// A PostgresCluster Ready with an image ending in `tag`, for the current generation.
fn pg_ready_at(tag: &str) -> impl Fn(Option<&PostgresCluster>) -> bool {
    let tag = tag.to_owned();
    move |pg: Option<&PostgresCluster>| {
        pg.is_some_and(|pg| {
            let status = pg.status.as_ref();
            status
                .and_then(|s| s.engine.condition("Ready"))
                .is_some_and(|c| c.status == "True")
                && status
                    .and_then(|s| s.image.as_deref())
                    .is_some_and(|i| i.ends_with(tag.as_str()))
                && status.and_then(|s| s.engine.observed_generation) == pg.metadata.generation
        })
    }
}

async fn install_crd(client: &Client) {
    support::install_crd_of::<DistributedDB>(client).await;
}

async fn create_ddb(env: &Env, db: &DistributedDB) {
    env.api::<DistributedDB>()
        .create(&PostParams::default(), db)
        .await
        .unwrap_or_else(|e| panic!("cannot create the DistributedDB: {e}"));
}

async fn set_image(api: &Api<DistributedDB>, name: &str, image: &str) {
    let patch = json!({"spec": {"image": image}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("cannot change the image: {e}"));
}

async fn lease_holder(api: &Api<Lease>, name: &str) -> Option<String> {
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Wait (through a watch) until the Lease `name` is held by one of `candidates`; returns
/// the holder.
async fn wait_holder(api: &Api<Lease>, name: &str, candidates: &[&str], what: &str) -> String {
    let held = support::wait_for(api, name, what, |lease: Option<&Lease>| {
        lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            .is_some_and(|h| candidates.contains(&h))
    })
    .await;
    held.and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_else(|| panic!("{what}: the Lease has no holder"))
}

fn history(db: &DistributedDB) -> Vec<(String, String, String)> {
    db.status
        .as_ref()
        .and_then(|s| s.engine.machine.as_ref())
        .map(RawRecord::to_value)
        .and_then(|m| m.get("history").and_then(|h| h.as_array()).cloned())
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let f = |k: &str| e.get(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
                    (f("from"), f("to"), f("reason"))
                })
                .collect()
        })
        .unwrap_or_default()
}

// ------------------------------------------------------------------------ tests

/// `/healthz`, `/readyz` and `/metrics` answer with the expected content, the metrics
/// follow an object, and SIGTERM stops the process cleanly.
#[tokio::test]
async fn health_endpoints_metrics_and_graceful_shutdown() {
    let mut env = Env::new("ops-health").await;
    env.ns.track::<DistributedDB>();
    install_crd(&env.client).await;
    let mut operator = Operator::start(env.namespace(), "solo", &[], "operability-health");

    let healthz = wait_http(
        operator.addr,
        "/healthz",
        "/healthz to answer 200",
        |c, _| c == 200,
    )
    .await;
    assert_eq!(healthz, "ok\n");
    let readyz = wait_http(operator.addr, "/readyz", "/readyz to be ready", |c, _| {
        c == 200
    })
    .await;
    assert!(readyz.contains("leader: true"), "{readyz}");
    assert!(readyz.contains("leader-election: false"), "{readyz}");
    assert!(readyz.contains("caches: synced"), "{readyz}");

    let api = env.api::<DistributedDB>();
    create_ddb(&env, &ddb("db", "registry.example/db:1", 100, false)).await;
    support::wait_for(
        &api,
        "db",
        "the DistributedDB to be Ready",
        ready_at("registry.example/db:1"),
    )
    .await;

    let metrics = wait_http(operator.addr, "/metrics", "the object's state in /metrics", |c, body| {
        c == 200
            && body.contains(&format!(
                "lockstep_object_state{{machine=\"distributeddb\",namespace=\"{}\",name=\"db\",state=\"Ready\"}} 1",
                env.namespace()
            ))
    })
    .await;
    assert!(
        sample(&metrics, RECONCILES).is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "lockstep_transitions_total{machine=\"distributeddb\",from=\"Creating\",to=\"Ready\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("lockstep_reconcile_duration_seconds_bucket"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "lockstep_state_duration_seconds_count{machine=\"distributeddb\",state=\"Creating\"} 1"
        ),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "lockstep_stuck_objects{machine=\"distributeddb\"}"
        ),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "lockstep_leader"), Some(1.0), "{metrics}");
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    for path in ["/nope", "/metrics/x"] {
        let answer = http_get(operator.addr, path).await;
        assert!(matches!(answer, Some((404, _))), "{path}: {answer:?}");
    }

    // Deleted objects leave no series.
    let uid = api.get("db").await.expect("get").uid().expect("uid");
    api.delete("db", &DeleteParams::default())
        .await
        .expect("delete");
    support::wait_gone(
        &api,
        "db",
        &uid,
        "the DistributedDB to be finalized and gone",
    )
    .await;
    wait_http(
        operator.addr,
        "/metrics",
        "the deleted object's series to go",
        |c, body| c == 200 && !body.contains("name=\"db\""),
    )
    .await;

    operator.sigterm();
    let status = operator.process.wait().await;
    assert!(
        status.success(),
        "exit status {status}; log: {}",
        operator.process.log.display()
    );
    let log = operator.process.output();
    assert!(log.contains("stopped"), "no clean stop in the log:\n{log}");
    operator.assert_no_forbidden();
    env.finish().await;
}

/// Two `lockstep run --leader-election`: exactly one reconciles (by each process's
/// reconcile counter); the other reports `leader: false` and stays idle. On SIGTERM the
/// leader drains, releases the lease, and the standby takes over well before the lease
/// would have expired.
#[tokio::test]
async fn of_two_elected_processes_exactly_one_reconciles() {
    const LEASE_SECS: u64 = 30;
    let mut env = Env::new("ops-elect").await;
    env.ns.track::<DistributedDB>();
    install_crd(&env.client).await;
    let ns = env.namespace().to_owned();
    let a = Operator::elected(&ns, "a", LEASE_SECS);
    let b = Operator::elected(&ns, "b", LEASE_SECS);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &ns);
    let holder = wait_holder(
        &leases,
        "lockstep-e2e",
        &["a", "b"],
        "a leader to be elected",
    )
    .await;
    let (leader, standby) = if holder == "a" { (a, b) } else { (b, a) };

    let api = env.api::<DistributedDB>();
    create_ddb(&env, &ddb("db", "registry.example/db:1", 100, false)).await;
    support::wait_for(
        &api,
        "db",
        "the DistributedDB to be Ready",
        ready_at("registry.example/db:1"),
    )
    .await;
    set_image(&api, "db", "registry.example/db:2").await;
    support::wait_for(
        &api,
        "db",
        "the upgrade to finish",
        ready_at("registry.example/db:2"),
    )
    .await;

    let led = leader.metrics().await;
    let stood = standby.metrics().await;
    assert!(
        sample(&led, RECONCILES).is_some_and(|n| n >= 1.0),
        "leader {}: {led}",
        leader.identity
    );
    assert_eq!(sample(&led, "lockstep_leader"), Some(1.0), "{led}");
    assert_eq!(
        sample(&stood, RECONCILES),
        None,
        "standby {} reconciled: {stood}",
        standby.identity
    );
    assert_eq!(sample(&stood, "lockstep_leader"), Some(0.0), "{stood}");
    assert!(
        !stood.contains("lockstep_object_state{"),
        "standby reports objects: {stood}"
    );
    let (code, body) = leader.readyz().await;
    assert!(
        code == 200 && body.contains("leader: true"),
        "{code} {body}"
    );
    let (code, body) = standby.readyz().await;
    assert!(
        code == 200 && body.contains("leader: false"),
        "{code} {body}"
    );
    assert_eq!(
        lease_holder(&leases, "lockstep-e2e").await.as_deref(),
        Some(leader.identity.as_str())
    );

    // Graceful hand-over: released on SIGTERM, taken long before it could have expired.
    let asked = Instant::now();
    leader.sigterm();
    let standby_id = standby.identity.clone();
    wait_holder(
        &leases,
        "lockstep-e2e",
        &[&standby_id],
        "the standby to take over",
    )
    .await;
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(LEASE_SECS / 2),
        "the standby took {took:?}: the lease was not released on SIGTERM"
    );
    let mut leader = leader;
    let status = leader.process.wait().await;
    assert!(status.success(), "the old leader exited with {status}");
    wait_http(
        standby.addr,
        "/readyz",
        "the new leader to be ready",
        |c, b| c == 200 && b.contains("leader: true") && b.contains("caches: synced"),
    )
    .await;
    leader.assert_no_forbidden();
    standby.assert_no_forbidden();
    // Stopped before the namespace goes, so that no finalizer is re-added behind the
    // cleanup's back.
    drop(standby);
    env.finish().await;
}

/// kill -9 the leader in the middle of an upgrade: the standby takes over within the
/// lease duration and the upgrade finishes correctly (every pod at the new image, each
/// ordinal replaced once, the history in order).
#[tokio::test]
async fn a_killed_leader_is_replaced_and_the_upgrade_finishes() {
    const LEASE_SECS: u64 = 6;
    let mut env = Env::new("ops-failover").await;
    env.ns.track::<DistributedDB>();
    install_crd(&env.client).await;
    let ns = env.namespace().to_owned();
    let a = Operator::elected(&ns, "a", LEASE_SECS);
    let b = Operator::elected(&ns, "b", LEASE_SECS);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &ns);
    let holder = wait_holder(
        &leases,
        "lockstep-e2e",
        &["a", "b"],
        "a leader to be elected",
    )
    .await;
    let (mut leader, standby) = if holder == "a" { (a, b) } else { (b, a) };

    // Pods take 1.5 s to become Ready, so a 3-pod upgrade with hooks lasts many seconds.
    let api = env.api::<DistributedDB>();
    create_ddb(&env, &ddb("db", "registry.example/db:1", 1500, false)).await;
    support::wait_for(
        &api,
        "db",
        "the DistributedDB to be Ready",
        ready_at("registry.example/db:1"),
    )
    .await;
    set_image(&api, "db", "registry.example/db:2").await;
    support::wait_for(
        &api,
        "db",
        "the upgrade to be under way",
        |db: Option<&DistributedDB>| db.is_some_and(|db| phase(db) == Some("Upgrading")),
    )
    .await;

    let killed = Instant::now();
    leader.process.kill9();
    let standby_id = standby.identity.clone();
    wait_holder(
        &leases,
        "lockstep-e2e",
        &[&standby_id],
        "the standby to take over",
    )
    .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_secs(LEASE_SECS + 3),
        "the standby took {took:?} to take over a lease of {LEASE_SECS}s"
    );
    let mid = api.get("db").await.expect("get");
    assert_eq!(
        phase(&mid),
        Some("Upgrading"),
        "the kill did not land mid-upgrade: {:?}",
        history(&mid)
    );

    let done = support::wait_for(
        &api,
        "db",
        "the upgrade to finish under the new leader",
        ready_at("registry.example/db:2"),
    )
    .await
    .expect("the DistributedDB exists");
    let pods = env.api::<Pod>();
    for ordinal in 0..3 {
        let name = format!("db-{ordinal}");
        let pod = pods
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let image = pod
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default();
        assert_eq!(image, "registry.example/db:2", "{name} runs {image}");
    }
    // The history is one chain: each entry leaves the state the previous one entered,
    // and each pod was upgraded once.
    let entries = history(&done);
    for pair in entries.windows(2) {
        assert_eq!(
            pair[0].1, pair[1].0,
            "the history is not one chain: {entries:#?}"
        );
    }
    let upgraded = entries.iter().filter(|e| e.2 == "PodUpgraded").count();
    assert!(upgraded <= 3, "a pod was upgraded twice: {entries:#?}");
    let standby_metrics = standby.metrics().await;
    assert!(
        sample(&standby_metrics, RECONCILES).is_some_and(|n| n >= 1.0),
        "{standby_metrics}"
    );
    standby.assert_no_forbidden();
    drop((leader, standby));
    env.finish().await;
}

/// `examples/deploy` applied with server-side apply; then the operator runs out of the
/// cluster as its ServiceAccount (a TokenRequest token) through a whole lifecycle —
/// create, upgrade with hooks, volume expansion, on-demand backup, delete with a final
/// backup — and a PostgresCluster's (generated credentials, switchover during an
/// upgrade, finalization) without a single Forbidden and without a Secret value in its
/// log; and the ServiceAccount cannot read Secrets or touch what it does not manage.
#[tokio::test]
async fn the_deploy_manifests_rbac_is_sufficient_and_least() {
    let mut env = Env::new("ops-rbac").await;
    env.ns.track::<DistributedDB>();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    // The manifests, as a user would apply them.
    let applied = kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            TEST_MANAGER,
            "--force-conflicts",
            "-k",
        ],
        &root.join("examples/deploy"),
    );
    assert!(
        applied.contains("deployment.apps/lockstep serverside-applied"),
        "{applied}"
    );
    assert!(
        applied.contains("clusterrole.rbac.authorization.k8s.io/lockstep serverside-applied"),
        "{applied}"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    for crd in [
        "distributeddbs.lockstep.dev",
        "postgresclusters.lockstep.dev",
    ] {
        support::wait_for(
            &crds,
            crd,
            "the CRD from the kustomization to be Established",
            conditions::is_crd_established(),
        )
        .await;
    }
    // The Deployment's pods pass the namespace's `restricted` Pod Security admission.
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "lockstep-system");
    support::wait_for(
        &deployments,
        "lockstep",
        "the Deployment's 2 replicas to be created",
        |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref()).and_then(|s| s.replicas) == Some(2)
        },
    )
    .await;

    // The ServiceAccount's own credentials.
    let kubeconfig = service_account_kubeconfig(&env.client, "lockstep-system", "lockstep").await;
    let sa_client = {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("read the SA kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("use the SA kubeconfig");
        Client::try_from(config).expect("SA client")
    };

    // No broader than needed.
    let ns = env.namespace().to_owned();
    for (verb, resource, group, namespace, allowed) in [
        ("list", "distributeddbs", "lockstep.dev", None, true),
        (
            "patch",
            "distributeddbs",
            "lockstep.dev",
            Some(ns.as_str()),
            true,
        ),
        ("create", "jobs", "batch", Some(ns.as_str()), true),
        // The outcome finalizer comes off a Job by a fenced patch.
        ("patch", "jobs", "batch", Some(ns.as_str()), true),
        ("delete", "pods", "", Some(ns.as_str()), true),
        ("create", "events", "events.k8s.io", Some(ns.as_str()), true),
        (
            "patch",
            "leases",
            "coordination.k8s.io",
            Some("lockstep-system"),
            true,
        ),
        ("create", "secrets", "", Some(ns.as_str()), true),
        // The certificates' renewal: a label-selected watch of the Secrets Lockstep made
        // (RBAC cannot narrow it by label) and a patch of their leaves; `get` only
        // because the pods' Role grants it on the password Secrets `spec.roles` names
        // (RBAC lets no one grant what it does not hold; `list` reads as much); never
        // update or delete.
        ("list", "secrets", "", None, true),
        ("watch", "secrets", "", None, true),
        ("patch", "secrets", "", Some(ns.as_str()), true),
        ("update", "secrets", "", Some(ns.as_str()), false),
        ("get", "secrets", "", Some(ns.as_str()), true),
        ("delete", "secrets", "", Some(ns.as_str()), false),
        ("create", "pods", "", Some(ns.as_str()), false),
        (
            "delete",
            "distributeddbs",
            "lockstep.dev",
            Some(ns.as_str()),
            false,
        ),
        ("delete", "namespaces", "", None, false),
        (
            "create",
            "clusterrolebindings",
            "rbac.authorization.k8s.io",
            None,
            false,
        ),
        // PostgresCluster's primary Leases are patched in any namespace, and deleted
        // (UID-preconditioned) by an in-place restore once their holder is fenced.
        (
            "delete",
            "leases",
            "coordination.k8s.io",
            Some(ns.as_str()),
            true,
        ),
        ("update", "statefulsets", "apps", Some(ns.as_str()), false),
    ] {
        // The lease rules name their Lease.
        let name = (resource == "leases").then_some("lockstep-leader");
        let got = can_i(&sa_client, verb, resource, group, namespace, name).await;
        assert_eq!(
            got, allowed,
            "can-i {verb} {group}/{resource} in {namespace:?}: expected {allowed}, got {got}"
        );
    }

    // Sufficient: a whole lifecycle, as the ServiceAccount, with leader election on the
    // manifests' own Lease.
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let mut operator = Operator::start(
        &ns,
        "rbac",
        &[
            &kubeconfig_arg,
            "--leader-election",
            "--lease-namespace=lockstep-system",
            "--lease-name=lockstep-leader",
            "--lease-duration=6",
            "--machines=postgrescluster",
        ],
        "operability-rbac",
    );
    // The S3 credentials the backup Jobs reference: canaries that must never be logged.
    let canary = format!("canary-{}", env.namespace());
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "backup-s3"},
        "stringData": {"accessKey": format!("{canary}-access"), "secretKey": format!("{canary}-secret")}
    }))
    .expect("a Secret");
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the S3 Secret");
    let api = env.api::<DistributedDB>();
    create_ddb(&env, &ddb("db", "registry.example/db:1", 100, true)).await;
    support::wait_for(
        &api,
        "db",
        "Ready (as the ServiceAccount)",
        ready_at("registry.example/db:1"),
    )
    .await;
    set_image(&api, "db", "registry.example/db:2").await;
    support::wait_for(
        &api,
        "db",
        "the upgrade (as the ServiceAccount)",
        ready_at("registry.example/db:2"),
    )
    .await;
    // Grow the volumes (server-side apply on the existing claims).
    let grow = json!({"spec": {"storage": {"size": "2Gi"}}});
    api.patch("db", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .expect("grow storage");
    support::wait_for_all(
        &env.api::<PersistentVolumeClaim>(),
        "app.kubernetes.io/instance=db",
        "every claim to request 2Gi (as the ServiceAccount)",
        |claims: &[PersistentVolumeClaim]| {
            claims.len() == 3
                && claims.iter().all(|c| {
                    c.spec
                        .as_ref()
                        .and_then(|s| s.resources.as_ref())
                        .and_then(|r| r.requests.as_ref())
                        .and_then(|r| r.get("storage"))
                        .is_some_and(|q| q.0 == "2Gi")
                })
        },
    )
    .await;
    let annotate = json!({"metadata": {"annotations": {"lockstep.dev/backup-now": "e2e-1"}}});
    api.patch("db", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .expect("annotate");
    support::wait_for(
        &api,
        "db",
        "the on-demand backup (as the ServiceAccount)",
        |db: Option<&DistributedDB>| {
            db.is_some_and(|db| {
                condition_true(db, "Ready")
                    && history(db).iter().any(|e| e.0.starts_with("BackingUp"))
            })
        },
    )
    .await;
    let uid = api.get("db").await.expect("get").uid().expect("uid");
    api.delete("db", &DeleteParams::default())
        .await
        .expect("delete");
    support::wait_gone(
        &api,
        "db",
        &uid,
        "the final backup and the finalizer's release (as the ServiceAccount)",
    )
    .await;

    // PostgresCluster: generated credentials (create-only), role labels, a switchover
    // with a promotion Job during an upgrade, finalization.
    let pgc: Api<PostgresCluster> = env.api();
    // KWOK runs no pod agent: the test plays their part on the Lease.
    let _agents = support::LeaseAgents::start(&env);
    let cluster: PostgresCluster = serde_json::from_value(json!({
        "apiVersion": "lockstep.dev/v1alpha1",
        "kind": "PostgresCluster",
        "metadata": {"name": "pg"},
        "spec": {"version": "18", "replicas": 2, "storageSize": "1Gi"}
    }))
    .expect("a valid PostgresCluster");
    pgc.create(&PostParams::default(), &cluster)
        .await
        .expect("create the PostgresCluster");
    support::wait_for(
        &pgc,
        "pg",
        "the PostgresCluster Ready (as the ServiceAccount)",
        pg_ready_at(":18"),
    )
    .await;
    let before = pgc
        .get("pg")
        .await
        .expect("get")
        .status
        .and_then(|s| s.primary_pod);
    let upgrade = json!({"spec": {"version": "18.2"}});
    pgc.patch("pg", &PatchParams::default(), &Patch::Merge(&upgrade))
        .await
        .expect("upgrade the PostgresCluster");
    let upgraded = support::wait_for(
        &pgc,
        "pg",
        "the PostgresCluster upgrade (as the ServiceAccount)",
        pg_ready_at(":18.2"),
    )
    .await
    .and_then(|p| p.status)
    .and_then(|s| s.primary_pod);
    assert_ne!(
        before, upgraded,
        "the upgrade did not switch the primary over"
    );
    let generated = env
        .api::<Secret>()
        .get("pg-credentials")
        .await
        .expect("the generated credentials");
    let passwords: Vec<String> = generated
        .data
        .unwrap_or_default()
        .values()
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    assert!(!passwords.is_empty(), "no generated passwords");
    let uid = pgc.get("pg").await.expect("get").uid().expect("uid");
    pgc.delete("pg", &DeleteParams::default())
        .await
        .expect("delete");
    support::wait_gone(
        &pgc,
        "pg",
        &uid,
        "the PostgresCluster's finalization (as the ServiceAccount)",
    )
    .await;
    let log = operator.process.output();
    for password in &passwords {
        assert!(
            !log.contains(password.as_str()),
            "a generated password reached the operator's log"
        );
    }

    operator.assert_no_forbidden();
    operator.sigterm();
    let status = operator.process.wait().await;
    assert!(
        status.success(),
        "exit status {status}; log: {}",
        operator.process.log.display()
    );
    operator.assert_no_forbidden();
    assert!(
        !operator.process.output().contains(&canary),
        "a Secret value reached the operator's log: {}",
        operator.process.log.display()
    );
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "lockstep-system");
    assert_eq!(
        lease_holder(&leases, "lockstep-leader").await,
        None,
        "the lease was not released"
    );
    env.finish().await;
}

// ------------------------------------------------------------------------ RBAC helpers

/// Run the test cluster's kubectl with `args` and `path`; fail on a non-zero exit.
fn kubectl(args: &[&str], path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(root.join("target/cluster/bin/kubectl"))
        .args(args)
        .arg(path)
        .env("KUBECONFIG", support::kubeconfig_path())
        .output()
        .expect("run kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "kubectl {args:?} {}: {text}",
        path.display()
    );
    text
}

/// A kubeconfig that authenticates as `namespace/name` with a short-lived token from the
/// TokenRequest API (written under target/e2e-logs, never printed).
async fn service_account_kubeconfig(client: &Client, namespace: &str, name: &str) -> PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
        .status
        .map(|s| s.token)
        .unwrap_or_else(|| panic!("TokenRequest for {namespace}/{name} returned no token"));
    let admin = support::kube_config().await;
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cluster/pki/ca.crt");
    assert!(ca.exists(), "no cluster CA at {}", ca.display());
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lockstep", "cluster": {
            "server": admin.cluster_url.to_string(),
            "certificate-authority": ca,
        }}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "lockstep", "user": name, "namespace": namespace}}],
        "current-context": "sa",
    });
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/e2e-logs");
    std::fs::create_dir_all(&dir).expect("create target/e2e-logs");
    let path = dir.join(format!("{namespace}-{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&kubeconfig).expect("serialize"))
        .expect("write the SA kubeconfig");
    path
}

/// Whether the client's user may `verb` `group/resource` (in `namespace`, or
/// cluster-wide; the object `name` if given), by a SelfSubjectAccessReview.
async fn can_i(
    client: &Client,
    verb: &str,
    resource: &str,
    group: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                resource: Some(resource.to_owned()),
                group: Some(group.to_owned()),
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SelfSubjectAccessReview {verb} {resource}: {e}"))
        .status
        .is_some_and(|s| s.allowed)
}
