//! The canary operator under Lockstep's driver, on the local control plane (`make
//! cluster-up`; KWOK pods are enough: nothing runs in them, readiness is what is judged).
//!
//! One app goes through its whole life: created and Stable; a new template canaried and
//! promoted to every pod; a template whose pod never becomes Ready (KWOK's
//! `lockstep.dev/kwok-notready` label) canaried, rolled back by the operator itself and
//! held as rejected while the stable pods never run it; deleted.
//!
//! Every wait is a watch with a deadline; nothing sleeps. Without a control plane
//! (`KUBECONFIG`, default `target/cluster/kubeconfig` of the workspace) the test fails
//! and says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use lockstep::driver::{self, Config};
use lockstep_canary::api::CanaryPolicy;
use lockstep_canary::{CanaryApp, CanaryAppSpec, CanaryRollout, Template};
use tokio::sync::oneshot;

/// How long any one wait may take.
const DEADLINE: Duration = Duration::from_secs(90);

fn kubeconfig() -> PathBuf {
    match std::env::var_os("KUBECONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/cluster/kubeconfig"),
    }
}

async fn client() -> Client {
    let path = kubeconfig();
    let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!(
            "no control plane for the e2e test: cannot read {} ({e}); start one with `make cluster-up`",
            path.display()
        )
    });
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    Client::try_from(config).expect("a client")
}

/// Wait on a watch until `name` meets `condition`; fail with `what` and the object.
async fn until<K>(api: &Api<K>, name: &str, what: &str, condition: impl Condition<K>) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(DEADLINE, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => object,
        Ok(Err(e)) => panic!("the watch failed while waiting for {what}: {e}"),
        Err(_) => panic!(
            "timed out waiting for {what}; last seen: {:#?}",
            api.get_opt(name).await
        ),
    }
}

/// The app's status field `field` as text.
fn status_field(app: &CanaryApp, field: &str) -> Option<String> {
    let status = serde_json::to_value(app.status.as_ref()?).ok()?;
    status.get(field)?.as_str().map(str::to_owned)
}

/// Whether the app is at rest in Stable with its stable pods at `image`.
fn stable_at(image: &'static str) -> impl Fn(Option<&CanaryApp>) -> bool {
    move |app| {
        app.is_some_and(|a| {
            status_field(a, "phase").as_deref() == Some("Stable")
                && status_field(a, "stableImage").as_deref() == Some(image)
        })
    }
}

/// The reason of `Degraded=True`, if it is.
fn degraded_reason(app: &CanaryApp) -> Option<String> {
    let degraded = app.status.as_ref()?.engine.condition("Degraded")?;
    (degraded.status == "True").then(|| degraded.reason.clone())
}

/// The last transition's reason.
fn last_reason(app: &CanaryApp) -> Option<String> {
    let status = serde_json::to_value(app.status.as_ref()?).ok()?;
    let history = status.pointer("/machine/history")?.as_array()?;
    history.last()?.get("reason")?.as_str().map(str::to_owned)
}

/// The namespace of the test, deleted when it ends (also on a panic).
struct TestNamespace {
    name: String,
}

impl TestNamespace {
    async fn create(client: &Client) -> Self {
        let api: Api<Namespace> = Api::all(client.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some("canary-".to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = api
            .create(&PostParams::default(), &namespace)
            .await
            .expect("a test namespace");
        let name = created.name_any();
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &name);
        until(
            &accounts,
            "default",
            "the default ServiceAccount",
            conditions::is_created(),
        )
        .await;
        Self { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop cannot await: delete on a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    let api: Api<Namespace> = Api::all(client().await);
                    let _ = api.delete(&name, &DeleteParams::background()).await;
                });
            }
        })
        .join();
    }
}

async fn install_crd(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = CanaryApp::crd();
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply("canary-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("the CRD installs");
    until(
        &api,
        &name,
        "the CRD to be Established",
        conditions::is_crd_established(),
    )
    .await;
}

fn template(image: &str, labels: &[(&str, &str)]) -> Template {
    Template {
        image: image.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

async fn set_template(apps: &Api<CanaryApp>, template: &Template) {
    let patch = serde_json::json!({"spec": {"template": template}});
    apps.patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the template changes");
}

/// The revisions the stable pods run.
async fn stable_revisions(pods: &Api<Pod>) -> Vec<String> {
    let selector = "app.kubernetes.io/instance=shop,app.kubernetes.io/component=stable";
    let listed = pods
        .list(&ListParams::default().labels(selector))
        .await
        .expect("the pods list");
    listed
        .iter()
        .filter_map(|p| p.labels().get("app.kubernetes.io/version").cloned())
        .collect()
}

// ANCHOR: e2e
#[tokio::test]
async fn a_good_template_is_promoted_and_a_bad_one_rolled_back_by_the_operator() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::create(&client).await;
    let apps: Api<CanaryApp> = Api::namespaced(client.clone(), &ns.name);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    // The operator runs in this process, under Lockstep's driver.
    let (stop, stopped) = oneshot::channel::<()>();
    let config = Config::namespaced(&ns.name).shutdown_on(async move {
        let _ = stopped.await;
    });
    let operator = tokio::spawn(driver::run::<CanaryRollout>(client.clone(), config));

    // Created: two stable pods at shop:1. A canary pod has 20 s to be Ready (KWOK's
    // are within a second; the margin is for a loaded machine), then bakes for 2 s.
    let spec = CanaryAppSpec {
        replicas: 2,
        template: template("registry.example/shop:1", &[]),
        canary: CanaryPolicy {
            ready_within_seconds: 20,
            bake_seconds: 2,
        },
    };
    apps.create(&PostParams::default(), &CanaryApp::new("shop", spec))
        .await
        .expect("the app is created");
    until(
        &apps,
        "shop",
        "Stable at shop:1",
        stable_at("registry.example/shop:1"),
    )
    .await;

    // A good template: a canary pod, Ready and baked, then every stable pod.
    let good = template("registry.example/shop:2", &[]);
    set_template(&apps, &good).await;
    until(
        &sets,
        "shop-canary",
        "the canary StatefulSet",
        conditions::is_created(),
    )
    .await;
    let app = until(
        &apps,
        "shop",
        "Stable at shop:2",
        stable_at("registry.example/shop:2"),
    )
    .await
    .expect("the app");
    assert_eq!(last_reason(&app).as_deref(), Some("Promoted"));
    assert_eq!(
        stable_revisions(&pods).await,
        [good.revision(), good.revision()]
    );

    // A bad template: its pod never becomes Ready, so the operator rolls it back.
    let bad = template(
        "registry.example/shop:3",
        &[("lockstep.dev/kwok-notready", "true")],
    );
    set_template(&apps, &bad).await;
    let rejected = bad.revision();
    // Degraded comes with the first reconcile at rest after the rollback.
    let app = until(
        &apps,
        "shop",
        "the bad template rejected, and the app Degraded for it",
        move |app: Option<&CanaryApp>| {
            app.is_some_and(|a| {
                status_field(a, "phase").as_deref() == Some("Stable")
                    && status_field(a, "rejectedRevision").as_deref() == Some(rejected.as_str())
                    && degraded_reason(a).as_deref() == Some("CandidateRejected")
            })
        },
    )
    .await
    .expect("the app");
    assert_eq!(last_reason(&app).as_deref(), Some("RolledBack"));
    assert_eq!(
        status_field(&app, "stableImage").as_deref(),
        Some("registry.example/shop:2")
    );
    assert!(sets.get_opt("shop-canary").await.expect("a get").is_none());
    assert_eq!(
        stable_revisions(&pods).await,
        [good.revision(), good.revision()]
    );

    // Deleted: the finalizer goes once Deleted is persisted.
    let uid = app.uid().expect("a UID");
    apps.delete("shop", &DeleteParams::default())
        .await
        .expect("the app is deleted");
    until(&apps, "shop", "the app gone", conditions::is_deleted(&uid)).await;

    let _ = stop.send(());
    tokio::time::timeout(DEADLINE, operator)
        .await
        .expect("the operator stops")
        .expect("the operator task ends cleanly");
}
// ANCHOR_END: e2e
