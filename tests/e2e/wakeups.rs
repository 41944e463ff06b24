//! What wakes the DistributedDB machine, on the real control plane (`docs/decisions/0004-wakeups.md`): a
//! relevant change of each kind it owns wakes it, an irrelevant one does not, a burst of
//! owned changes costs fewer reconciles than it asks for (the debounce), and a relevant
//! change inside the debounce window is still acted on after it.
//!
//! Irrelevant changes cannot be told from "not yet delivered" by waiting, so each kind's
//! irrelevant changes are followed by one relevant change of the same kind (a
//! `lockstep.dev/` label, which the projection keeps): events of one watch arrive in
//! order, so once that one's wake is seen the irrelevant ones were delivered before it.
//! The other owned kinds (Jobs, CronJobs, ConfigMaps, PodDisruptionBudgets, Leases) are
//! held to the same rule by the driver's unit tests (`driver::wakes_tests`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use lockstep::driver::{self, DriverHooks, Target, Trigger};
use lockstep::machines::distributeddb::{DistributedDB, DistributedDb};

use crate::support::{DEADLINE, Fixture, InProcessOperator, wait_for};

/// Wake requests and reconciles by trigger, and reconciles running, as the hooks see
/// them.
#[derive(Debug, Clone, Default)]
struct Wakes {
    requested: BTreeMap<&'static str, u64>,
    woken: BTreeMap<&'static str, u64>,
    started: u64,
    finished: u64,
}

impl Wakes {
    fn requested(&self, trigger: Trigger) -> u64 {
        self.requested.get(trigger.as_str()).copied().unwrap_or(0)
    }

    fn total(counts: &BTreeMap<&'static str, u64>) -> u64 {
        counts.values().sum()
    }
}

struct Probe(tokio::sync::watch::Sender<Wakes>);

impl DriverHooks for Probe {
    fn wake_requested(&self, _: &'static str, trigger: Trigger) {
        self.0
            .send_modify(|w| *w.requested.entry(trigger.as_str()).or_default() += 1);
    }

    fn woken(&self, _: &Target<'_>, trigger: Trigger) {
        self.0
            .send_modify(|w| *w.woken.entry(trigger.as_str()).or_default() += 1);
    }

    fn reconcile_started(&self, _: &Target<'_>) {
        self.0.send_modify(|w| w.started += 1);
    }

    fn reconcile_finished(&self, _: &Target<'_>, _: Duration, _: driver::Finished) {
        self.0.send_modify(|w| w.finished += 1);
    }
}

async fn until(
    seen: &mut tokio::sync::watch::Receiver<Wakes>,
    what: &str,
    condition: impl FnMut(&Wakes) -> bool,
) -> Wakes {
    let waited = match tokio::time::timeout(DEADLINE, seen.wait_for(condition)).await {
        Ok(Ok(w)) => Some(w.clone()),
        Ok(Err(_)) => panic!("the operator stopped while waiting for {what}"),
        Err(_) => None,
    };
    waited.unwrap_or_else(|| {
        panic!(
            "timed out after {DEADLINE:?} waiting for {what}: {:?}",
            *seen.borrow()
        )
    })
}

/// Create a 3-replica DistributedDB `name` and wait until it is Ready and no
/// reconcile runs.
async fn ready(
    fx: &Fixture<DistributedDb>,
    seen: &mut tokio::sync::watch::Receiver<Wakes>,
    name: &str,
) -> Wakes {
    let spec = serde_json::from_value(json!({
        "replicas": 3, "image": "registry.example/db:1", "storage": {"size": "1Gi"},
    }))
    .expect("a spec");
    fx.create_object(&DistributedDB::new(name, spec)).await;
    fx.until(name, "Ready", |db| {
        db.status
            .as_ref()
            .is_some_and(|s| s.engine.phase.as_deref() == Some("Ready"))
    })
    .await;
    until(seen, "reconciles to settle", |w| w.started == w.finished).await
}

fn start(fx: &Fixture<DistributedDb>) -> (InProcessOperator, tokio::sync::watch::Receiver<Wakes>) {
    start_with(fx, driver::Config::DEBOUNCE)
}

/// The operator in-process, with owned-object triggers held for `debounce`.
fn start_with(
    fx: &Fixture<DistributedDb>,
    debounce: Duration,
) -> (InProcessOperator, tokio::sync::watch::Receiver<Wakes>) {
    let (wakes, seen) = tokio::sync::watch::channel(Wakes::default());
    let operator = InProcessOperator::start::<DistributedDb>(
        fx.env.client.clone(),
        driver::Config::namespaced(fx.env.namespace())
            .debounce(debounce)
            .hooks(Probe(wakes)),
    );
    (operator, seen)
}

async fn merge<K>(api: &Api<K>, name: &str, patch: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch {name} with {patch}: {e}"));
}

/// A relevant change of the kind: a label the projection keeps.
fn sentinel() -> serde_json::Value {
    json!({"metadata": {"labels": {"lockstep.dev/wake-probe": "1"}}})
}

/// Apply `irrelevant` to every object of `api` owned by `owner`, then the sentinel to
/// the first; wait for the sentinel's wake, and return how many wakes of `trigger` the
/// whole sequence requested.
async fn wakes_of<K>(
    api: &Api<K>,
    owner: &str,
    trigger: Trigger,
    seen: &mut tokio::sync::watch::Receiver<Wakes>,
    irrelevant: impl AsyncFn(&Api<K>, &str),
) -> u64
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let before = seen.borrow().requested(trigger);
    let selector = format!("app.kubernetes.io/instance={owner}");
    let objects = api
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("list the owned objects");
    assert!(!objects.items.is_empty(), "{owner} owns some {trigger}");
    for object in &objects.items {
        irrelevant(api, &object.name_any()).await;
    }
    merge(api, &objects.items[0].name_any(), sentinel()).await;
    let after = until(seen, "the sentinel's wake", |w| {
        w.requested(trigger) > before
    })
    .await;
    after.requested(trigger) - before
}

#[tokio::test]
async fn each_owned_kind_wakes_the_machine_on_a_relevant_change_and_not_on_an_irrelevant_one() {
    let fx = Fixture::<DistributedDb>::new("wakes").await;
    let (operator, mut seen) = start(&fx);
    let created = ready(&fx, &mut seen, "wakes").await;
    assert!(
        Wakes::total(&created.woken) < Wakes::total(&created.requested),
        "a created cluster's bursts of owned changes are folded: {created:?}"
    );
    assert_eq!(
        created.requested(Trigger::Object),
        2,
        "the object wakes its machine when first seen and when its finalizer lands; its \
         status writes are the operator's own and wake nothing, whether their events \
         come before or after the responses: {created:?}"
    );

    let annotate = async |api: &Api<Pod>, name: &str| {
        merge(
            api,
            name,
            json!({"metadata": {"annotations": {"example.com/note": "x"}}}),
        )
        .await;
    };
    let pods = wakes_of(
        &fx.env.api::<Pod>(),
        "wakes",
        Trigger::Pod,
        &mut seen,
        annotate,
    )
    .await;
    assert_eq!(pods, 1, "annotating pods wakes nothing; a kept label does");

    let label = async |api: &Api<PersistentVolumeClaim>, name: &str| {
        merge(
            api,
            name,
            json!({"metadata": {"labels": {"example.com/team": "x"}}}),
        )
        .await;
    };
    let claims = wakes_of(
        &fx.env.api::<PersistentVolumeClaim>(),
        "wakes",
        Trigger::PersistentVolumeClaim,
        &mut seen,
        label,
    )
    .await;
    assert_eq!(
        claims, 1,
        "a foreign label on a claim wakes nothing; a kept one does"
    );

    let status = async |api: &Api<Service>, name: &str| {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "example.com/Probed", "status": "True", "reason": "Probed",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch the status of {name}: {e}"));
    };
    let services = wakes_of(
        &fx.env.api::<Service>(),
        "wakes",
        Trigger::Service,
        &mut seen,
        status,
    )
    .await;
    assert_eq!(
        services, 1,
        "a Service's status wakes nothing; a kept label does"
    );

    let annotate = async |api: &Api<StatefulSet>, name: &str| {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentRevision": "wake-probe"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch the status of {name}: {e}"));
    };
    let sets = wakes_of(
        &fx.env.api::<StatefulSet>(),
        "wakes",
        Trigger::StatefulSet,
        &mut seen,
        annotate,
    )
    .await;
    assert_eq!(
        sets, 1,
        "a StatefulSet's status counts wake nothing; a kept label does"
    );

    operator.stop().await;
    fx.env.finish().await;
}

#[tokio::test]
async fn a_relevant_change_inside_the_debounce_window_is_acted_on_after_it() {
    let fx = Fixture::<DistributedDb>::new("window").await;
    // A window long enough that the two changes below certainly fall inside it, even
    // on a loaded machine (the default 1 s could pass between two requests).
    let (operator, mut seen) = start_with(&fx, Duration::from_secs(5));
    let settled = ready(&fx, &mut seen, "window").await;

    // Two relevant changes of one owner within the window: a pod gains a kept label (a
    // wake that decides nothing), then the Service is deleted (drift to repair).
    let pods = fx.env.api::<Pod>();
    let first = pods
        .list(&ListParams::default().labels("app.kubernetes.io/instance=window"))
        .await
        .expect("list pods");
    merge(&pods, &first.items[0].name_any(), sentinel()).await;
    let services = fx.env.api::<Service>();
    let old = services.get("window").await.expect("the Service");
    services
        .delete("window", &DeleteParams::default())
        .await
        .expect("delete the Service");

    let uid = old.uid();
    wait_for(
        &services,
        "window",
        "the Service re-created",
        move |s: Option<&Service>| s.is_some_and(|s| s.uid() != uid),
    )
    .await;
    let after = until(&mut seen, "reconciles to settle", |w| {
        w.started == w.finished
    })
    .await;
    assert!(after.started > settled.started, "{after:?}");
    operator.stop().await;
    fx.env.finish().await;
}
