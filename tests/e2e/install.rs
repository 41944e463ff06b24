//! Lockstep installed as [docs/install.md](../../docs/install.md) says, on the real node:
//! `helm install` of `charts/lockstep` (the chart directory of this clone) into a fresh
//! namespace, then databases in another one, both namespaces enforcing the `restricted`
//! Pod Security Standard. One scenario, checked in the databases themselves:
//!
//! - the release's Deployment runs its 2 replicas on the real node (the chart's
//!   `nodeSelector` and `tolerations`), one of them holding the leader Lease;
//! - a PostgresCluster of 2 instances and a DistributedDB of 3 etcd members, created in
//!   the database namespace, reach Ready, driven by that Deployment alone (this process
//!   runs no operator and applies no CRD);
//! - a writer through `<cluster>-rw` loses no acknowledged commit across a switchover on
//!   demand (`lockstep.dev/switchover`);
//! - `helm upgrade` to a different operator image (`lockstep-next`, the same binary under
//!   a second tag with one more variable: `tools/images/build.sh`) rolls the Deployment,
//!   and the new leader renders the instances' StatefulSet with the new instance image,
//!   while no database pod is replaced or restarted (UIDs and restart counts);
//! - `helm uninstall` removes the operator and leaves the CRDs, the custom resources,
//!   their pods and claims, and the databases serving (a write and a read in each).
//!
//! The operator's images and PostgreSQL's are pushed to the local cluster's registry
//! (`tools/registry/push.sh`) under a repository prefix of this run's own
//! (`<registry>/lockstep-dev/install-<time>/`), which no node has seen, and the chart is
//! pointed at it (`image.repository`, `postgresImageRepository`, the operator's
//! `imagePullPolicy: Always`): the kubelet pulls them, and says so in its events. The
//! etcd image and the writer's stay imported (`tools/images/load.sh`): they are the
//! examples', not the install's. Without a real node (`LOCKSTEP_REAL_NODE=0`, or a
//! cluster without one) it prints why on stderr and returns. The Makefile runs it alone
//! (`make e2e-install`): the chart's operator watches every namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use lockstep::machines::distributeddb::DistributedDB;
use lockstep::machines::postgres::PostgresCluster;
use lockstep::machines::postgres::render::INSTALL_CONTAINER;

use crate::etcd;
use crate::postgres_real::{Real, Tally, is_ready_at, primary_of};
use crate::support::{Env, RESTRICTED, wait_for_all_within};

/// The release's name; its objects, the cluster-wide ClusterRole and binding among them,
/// are named after it (the chart's fullname). Not `lockstep`: earlier tiers of `make
/// test` leave a ClusterRole of that name from `examples/deploy`, which helm refuses to
/// adopt.
const RELEASE: &str = "lockstep-e2e";
/// The PostgresCluster.
const PG: &str = "pg";
/// The chart's leader Lease (`leaderElection.leaseName`).
const LEASE: &str = "lockstep-leader";
/// One step (a rollout, a cluster Ready, a switchover) on a loaded 2-core machine.
const STEP: Duration = Duration::from_secs(300);
/// The label of every database pod, PostgreSQL's and etcd's.
const DATABASE_PODS: &str = "lockstep.dev/component=database";

#[tokio::test]
async fn a_helm_install_runs_databases_through_a_switchover_an_operator_upgrade_and_an_uninstall() {
    let client = crate::support::client().await;
    let node = match etcd::real_node(&client).await {
        Ok(node) => node,
        Err(why) => {
            return etcd::skipped(
                "a_helm_install_runs_databases_through_a_switchover_an_operator_upgrade_and_an_uninstall",
                &why,
            );
        }
    };
    etcd::load_images(&["pause", "etcd-3.6", "postgres-15"]).await;
    let images = Pushed::new().await;
    let helm = Helm::new(&images).await;
    let operator_env = Env::labelled("lockstep-install", &[RESTRICTED]).await;
    let system = operator_env.namespace().to_owned();
    let mut db_env =
        Env::labelled("install-db", &[(etcd::REAL_NODE_LABEL, "true"), RESTRICTED]).await;
    db_env.ns.track::<DistributedDB>();
    let ns = db_env.namespace().to_owned();

    // helm install, then both replicas on the real node and a leader.
    let first = images.operator("lockstep").await;
    let mut release = helm.install(&system, &first).await;
    let operators = rolled_out(&client, &system, &first).await;
    assert_eq!(operators.len(), 2, "replicas: {operators:?}");
    for pod in &operators {
        let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert_eq!(
            on,
            Some(node.as_str()),
            "{} is not on the real node",
            pod.name_any()
        );
    }
    let leader = leader_among(&client, &system, &operators).await;
    eprintln!(
        "installed {first}: {} replicas, {leader} leads",
        operators.len()
    );

    // A PostgresCluster and a DistributedDB, driven by the installed operator.
    let real = Real::managed_elsewhere(db_env).await;
    // `examples/etcd.yaml`'s DistributedDB without its backups: the uninstalled
    // operator's CronJob would outlive it for nothing.
    let (_, mut db) = etcd::example(&format!("{ns}/"));
    db.spec.backup_policy = None;
    let ddbs: Api<DistributedDB> = real.pg.env.api();
    ddbs.create(&PostParams::default(), &db)
        .await
        .expect("create the DistributedDB");
    // No `spec.image`: the chart's `postgresImageRepository` and `spec.version` name it.
    let pg_image = format!("{}:15", images.postgres());
    let object: PostgresCluster = serde_json::from_value(json!({
        "apiVersion": "lockstep.dev/v1alpha1",
        "kind": "PostgresCluster",
        "metadata": {"name": PG},
        "spec": {"version": "15", "replicas": 2, "storageSize": "1Gi", "storageClassName": "local"},
    }))
    .expect("a PostgresCluster");
    real.pg.create_object(&object).await;
    let (pg, _) = tokio::join!(
        real.ready_at(PG, &pg_image),
        etcd::wait_ready_at(&ddbs, etcd::FROM)
    );
    // Both pulled from the registry, by the kubelet.
    pulled(&client, &system, &first).await;
    pulled(&client, &ns, &pg_image).await;
    etcd::assert_all_healthy(&ns, "3.6.16").await;
    etcd::assert_all_on(&real.pg.env.api::<Pod>(), &node).await;

    // A switchover on demand under the writer: nothing acknowledged is lost.
    let old = primary_of(&pg);
    let target = if old == format!("{PG}-0") {
        format!("{PG}-1")
    } else {
        format!("{PG}-0")
    };
    real.start_client(PG).await;
    real.writing(true);
    let before = real.acks_grow(0, 20).await;
    real.pg
        .merge_patch(
            PG,
            json!({"metadata": {"annotations": {"lockstep.dev/switchover": target}}}),
        )
        .await;
    // At rest, not only Ready: the transition's own write says Ready while the old
    // primary, labelled `demoted`, is still to be recreated as a standby; a baseline of
    // the pods taken then would count that recreation against the operator's upgrade.
    let (wanted, image) = (target.clone(), pg_image.clone());
    real.cluster_until(
        PG,
        "Ready with the requested primary, every instance Ready as primary or replica",
        move |pg| {
            let status = pg.status.as_ref();
            let instances = status.map(|s| s.instances.as_slice()).unwrap_or_default();
            is_ready_at(pg, &image)
                && status.and_then(|s| s.primary_pod.as_deref()) == Some(wanted.as_str())
                && instances.len() == 2
                && instances
                    .iter()
                    .all(|i| i.ready && matches!(i.role.as_deref(), Some("primary" | "replica")))
        },
    )
    .await;
    real.acks_grow(real.acks().len(), 20).await;
    let Tally { acked, rows, lost } = real.tally(PG);
    eprintln!(
        "switchover {old} -> {target}: {} commits acknowledged ({before} before the request), {} rows, lost {lost:?}",
        acked.len(),
        rows.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged commits lost in the switchover: {lost:?}"
    );

    // helm upgrade to another operator image: the operator rolls, no database pod does.
    logs_without_refusals(&client, &system).await;
    let pods_before = database_pods(&real).await;
    assert_eq!(pods_before.len(), 5, "database pods: {pods_before:?}");
    let next = images.operator("lockstep-next").await;
    helm.upgrade(&system, &next).await;
    let upgraded = rolled_out(&client, &system, &next).await;
    let leader = leader_among(&client, &system, &upgraded).await;
    // The new leader has reconciled the PostgresCluster: its StatefulSet names the new
    // instance image (the chart passes the operator's own), on a template no pod runs
    // until a machine replaces it (`OnDelete`).
    let sets: Api<StatefulSet> = real.pg.env.api();
    let wanted = next.clone();
    etcd::wait_long(
        &sets,
        PG,
        "the StatefulSet rendered by the upgraded operator",
        STEP,
        move |s: Option<&StatefulSet>| {
            s.and_then(|s| s.spec.template.spec.as_ref()?.init_containers.clone())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.name == INSTALL_CONTAINER && c.image.as_deref() == Some(&wanted))
                })
        },
    )
    .await;
    etcd::wait_ready_at(&ddbs, etcd::FROM).await;
    let image = pg_image.clone();
    real.cluster_until(PG, "Ready after the operator's upgrade", move |pg| {
        is_ready_at(pg, &image)
    })
    .await;
    let pods_after = database_pods(&real).await;
    if pods_after != pods_before {
        // The cluster's history and events say which decision replaced the pod.
        eprintln!("{}", real.explain(PG));
    }
    assert_eq!(
        pods_after, pods_before,
        "a database pod was replaced or restarted by the operator's upgrade"
    );
    eprintln!("upgraded to {next}: {leader} leads, no database pod restarted");

    // helm uninstall: the operator goes, the databases stay and serve.
    logs_without_refusals(&client, &system).await;
    helm.uninstall(&system).await;
    release.uninstalled = true;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &system);
    etcd::wait_long(
        &deployments,
        RELEASE,
        "the operator Deployment to be gone",
        STEP,
        |d: Option<&Deployment>| d.is_none(),
    )
    .await;
    wait_for_all_within(
        &Api::<Pod>::namespaced(client.clone(), &system),
        "app.kubernetes.io/name=lockstep",
        "every operator pod gone",
        STEP,
        |pods: &[Pod]| pods.is_empty(),
    )
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "postgresclusters.lockstep.dev",
        "distributeddbs.lockstep.dev",
    ] {
        assert!(
            crds.get_opt(crd).await.expect("get a CRD").is_some(),
            "helm uninstall deleted the CRD {crd}"
        );
    }
    let pgcs: Api<PostgresCluster> = real.pg.env.api();
    assert!(pgcs.get_opt(PG).await.expect("get").is_some());
    assert!(ddbs.get_opt(etcd::NAME).await.expect("get").is_some());
    assert_eq!(
        database_pods(&real).await,
        pods_before,
        "a database pod was replaced or restarted by the uninstall"
    );
    let claims = real
        .pg
        .env
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .expect("list the claims");
    let bound = claims
        .items
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .count();
    assert_eq!(bound, 5, "claims after the uninstall: {:?}", claims.items);
    let (ok, out) = real.psql_rw(
        PG,
        "INSERT INTO acks (id) VALUES (0) RETURNING id; SELECT count(*) FROM acks WHERE id = 0",
    );
    assert!(
        ok && out.lines().last() == Some("1"),
        "{PG}-rw after the uninstall: {out}"
    );
    let put = etcd::exec_db(
        &ns,
        &format!("{}-0", etcd::NAME),
        &format!(
            "etcdctl --endpoints=$scheme://{}.{ns}.svc:2379 put after-uninstall yes && \
             etcdctl --endpoints=$scheme://{}.{ns}.svc:2379 get --print-value-only after-uninstall",
            etcd::NAME,
            etcd::NAME
        ),
    )
    .await;
    assert_eq!(
        put.as_deref().map(str::trim),
        Some("OK\nyes"),
        "etcd after the uninstall"
    );
    eprintln!("uninstalled: CRDs, custom resources, 5 pods and 5 claims kept, both serving");

    // The custom resources' finalizers are stripped (no operator runs to release them)
    // and both namespaces deleted.
    real.finish().await;
    operator_env.finish().await;
}

/// The images of this run in the local cluster's registry, under a prefix of its own.
struct Pushed {
    /// `<registry>/lockstep-dev/install-<time>`.
    prefix: String,
}

impl Pushed {
    /// Push the operator's two images and PostgreSQL 15's (built first if needed, the
    /// operator with the profile of the other real-node tiers, as `etcd::load_images`).
    async fn new() -> Self {
        let (ok, address) = etcd::run(
            etcd::repo().join("tools/registry/registry.sh"),
            vec!["address".to_owned()],
            Vec::new(),
            None,
            Duration::from_secs(30),
        )
        .await;
        assert!(ok, "tools/registry/registry.sh address: {address}");
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let prefix = format!("{}/lockstep-dev/install-{stamp}", address.trim());
        let profile =
            std::env::var("LOCKSTEP_IMAGE_PROFILE").unwrap_or_else(|_| "image-test".into());
        let args = [
            "--registry",
            &prefix,
            "lockstep",
            "lockstep-next",
            "postgres-15",
        ];
        let (ok, out) = etcd::run(
            etcd::repo().join("tools/registry/push.sh"),
            args.iter().map(|s| (*s).to_owned()).collect(),
            vec![("LOCKSTEP_IMAGE_PROFILE".to_owned(), profile)],
            None,
            Duration::from_secs(3600),
        )
        .await;
        assert!(ok, "tools/registry/push.sh {args:?}: {out}");
        eprintln!("pushed:\n{out}");
        Self { prefix }
    }

    /// Where the operator image `name` (`lockstep` or `lockstep-next`) was pushed: this
    /// run's `operator` repository, with the tag `tools/images/build.sh` gives it.
    async fn operator(&self, name: &str) -> String {
        let (ok, out) = etcd::run(
            etcd::repo().join("tools/images/build.sh"),
            vec!["--name".to_owned(), name.to_owned()],
            Vec::new(),
            None,
            Duration::from_secs(30),
        )
        .await;
        assert!(ok, "tools/images/build.sh --name {name}: {out}");
        let (_, tag) = out.trim().rsplit_once(':').expect("a tagged reference");
        format!("{}/operator:{tag}", self.prefix)
    }

    /// This run's PostgreSQL repository (tagged by major).
    fn postgres(&self) -> String {
        format!("{}/postgres", self.prefix)
    }
}

/// The kubelet pulled `image` for a pod of `namespace` (its `Pulled` event names it).
async fn pulled(client: &kube::Client, namespace: &str, image: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let listed = events
        .list(&ListParams::default())
        .await
        .expect("list the events");
    let quoted = format!("\"{image}\"");
    assert!(
        listed
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Pulled")
                && e.message.as_deref().is_some_and(|m| m.contains(&quoted))
                && !e
                    .message
                    .as_deref()
                    .is_some_and(|m| m.contains("already present"))),
        "no pull of {image} in {namespace}'s events: {:?}",
        listed
            .items
            .iter()
            .map(|e| (e.reason.clone(), e.message.clone()))
            .collect::<Vec<_>>()
    );
}

/// Wait until the operator Deployment runs `image` on all its replicas, each Ready, and
/// no other pod; returns them.
async fn rolled_out(client: &kube::Client, system: &str, image: &str) -> Vec<Pod> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), system);
    let wanted = image.to_owned();
    etcd::wait_long(
        &deployments,
        RELEASE,
        &format!("the operator Deployment rolled out at {image}"),
        STEP,
        move |d: Option<&Deployment>| {
            let Some(d) = d else { return false };
            let template = d
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.as_deref());
            let replicas = d.spec.replicas;
            d.status.as_ref().is_some_and(|s| {
                template == Some(wanted.as_str())
                    && s.observed_generation == d.metadata.generation
                    && s.updated_replicas == replicas
                    && s.available_replicas == replicas
                    && s.replicas == replicas
            })
        },
    )
    .await;
    let wanted = image.to_owned();
    wait_for_all_within(
        &Api::<Pod>::namespaced(client.clone(), system),
        "app.kubernetes.io/name=lockstep",
        &format!("every operator pod Ready at {image}"),
        STEP,
        move |pods: &[Pod]| {
            !pods.is_empty()
                && pods.iter().all(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.spec
                            .as_ref()
                            .is_some_and(|s| s.containers[0].image.as_deref() == Some(&wanted))
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
        },
    )
    .await
}

/// The chart's RBAC is enough: no operator replica's log says the API server refused it
/// a request (`Forbidden`), and each says how many lines it wrote at each level. A write
/// refused because its namespace is being deleted is no RBAC refusal: the test's own
/// namespaces go away while their clusters finalize.
async fn logs_without_refusals(client: &kube::Client, system: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), system);
    let listed = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=lockstep"))
        .await
        .expect("list the operator pods");
    for pod in listed.items {
        let name = pod.name_any();
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_else(|e| panic!("the log of {name}: {e}"));
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.to_lowercase().contains("forbidden") && !l.contains("NamespaceTerminating")
            })
            .collect();
        assert!(
            refused.is_empty(),
            "{name} was refused requests: {refused:#?}"
        );
        let levels: BTreeMap<&str, usize> = ["ERROR", "WARN", "INFO"]
            .into_iter()
            .map(|level| {
                let field = format!("\"level\":\"{level}\"");
                (level, log.lines().filter(|l| l.contains(&field)).count())
            })
            .collect();
        eprintln!("{name}'s log: {levels:?}");
    }
}

/// Wait until one of `pods` holds the leader Lease; its name.
async fn leader_among(client: &kube::Client, system: &str, pods: &[Pod]) -> String {
    let names: Vec<String> = pods.iter().map(ResourceExt::name_any).collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), system);
    let lease = etcd::wait_long(
        &leases,
        LEASE,
        &format!("one of {names:?} to hold the leader Lease"),
        STEP,
        move |l: Option<&Lease>| {
            l.and_then(|l| l.spec.as_ref()?.holder_identity.as_ref())
                .is_some_and(|h| names.contains(h))
        },
    )
    .await
    .expect("the Lease exists");
    lease
        .spec
        .and_then(|s| s.holder_identity)
        .expect("a holder")
}

/// Every database pod of the namespace: its UID and its containers' restarts.
async fn database_pods(real: &Real) -> BTreeMap<String, (String, i32)> {
    real.pg
        .env
        .api::<Pod>()
        .list(&ListParams::default().labels(DATABASE_PODS))
        .await
        .expect("list the database pods")
        .items
        .into_iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |c| c.iter().map(|c| c.restart_count).sum());
            (p.name_any(), (p.uid().unwrap_or_default(), restarts))
        })
        .collect()
}

/// helm (built from Go modules by `tools/helm/build.sh`) and the chart of this clone.
struct Helm {
    bin: PathBuf,
    values: PathBuf,
    postgres: String,
}

/// The release, uninstalled on drop unless the test did it (the ClusterRole and its
/// binding are cluster-wide, and the operator would go on managing every namespace).
struct Release {
    system: String,
    helm: PathBuf,
    uninstalled: bool,
}

impl Helm {
    async fn new(images: &Pushed) -> Self {
        let (ok, out) = etcd::run(
            etcd::repo().join("tools/helm/build.sh"),
            Vec::new(),
            Vec::new(),
            None,
            Duration::from_secs(3600),
        )
        .await;
        assert!(ok, "tools/helm/build.sh: {out}");
        let values =
            std::env::temp_dir().join(format!("lockstep-install-{}.json", std::process::id()));
        Self {
            bin: PathBuf::from(out.trim()),
            values,
            postgres: images.postgres(),
        }
    }

    /// The values of this test: the operator at `image`, pulled at every start, on the
    /// real node (its label and taint, tools/node/node.sh); PostgreSQL from this run's
    /// repository.
    fn write_values(&self, image: &str) {
        let (repository, tag) = image.rsplit_once(':').expect("an image with a tag");
        let values = json!({
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Always"},
            "postgresImageRepository": self.postgres,
            "nodeSelector": {"lockstep.dev/real-node": "true"},
            "tolerations": [{"key": "lockstep.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}],
        });
        std::fs::write(&self.values, values.to_string()).expect("write the values file");
    }

    async fn helm(&self, args: &[&str]) {
        let (ok, out) = etcd::run(
            self.bin.clone(),
            args.iter().map(|s| (*s).to_owned()).collect(),
            Vec::new(),
            None,
            STEP,
        )
        .await;
        assert!(ok, "helm {args:?}: {out}");
    }

    async fn install(&self, system: &str, image: &str) -> Release {
        let release = Release {
            system: system.to_owned(),
            helm: self.bin.clone(),
            uninstalled: false,
        };
        self.apply("install", system, image).await;
        release
    }

    /// `helm install` or `helm upgrade` (`verb`) of the chart in this clone, with the
    /// operator at `image`.
    async fn apply(&self, verb: &str, system: &str, image: &str) {
        self.write_values(image);
        let chart = etcd::repo().join("charts/lockstep").display().to_string();
        let values = self.values.display().to_string();
        self.helm(&[
            verb,
            RELEASE,
            &chart,
            "--namespace",
            system,
            "--values",
            &values,
        ])
        .await;
    }

    async fn upgrade(&self, system: &str, image: &str) {
        self.apply("upgrade", system, image).await;
    }

    async fn uninstall(&self, system: &str) {
        self.helm(&["uninstall", RELEASE, "--namespace", system])
            .await;
    }
}

impl Drop for Helm {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.values);
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.uninstalled {
            return;
        }
        let _ = std::process::Command::new(&self.helm)
            .args(["uninstall", RELEASE, "--namespace", &self.system])
            .env("KUBECONFIG", crate::support::kubeconfig_path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
