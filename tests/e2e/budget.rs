//! The request budget of one DistributedDB lifecycle, counted (not timed) on the real
//! control plane: nothing per idle or forced reconcile; during a hooked upgrade of three
//! pods at most one status write per transition or change of the pods the status counts
//! (`replicas` and `readyReplicas` follow the pods in every state, coalesced with the
//! transitions' own writes), three pod evictions, no GET on the hot path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use lockstep::driver::{self, DriverHooks, Finished, Target};
use lockstep::machines::distributeddb::{DistributedDB, DistributedDb};

use crate::support::{
    Fixture, InProcessOperator, ReconcileCounts, Request, RequestLog, counted_client, counts_until,
    wait_for_all,
};

/// Counts reconciles (into a watch channel) and persisted transitions.
struct Probe {
    counts: tokio::sync::watch::Sender<ReconcileCounts>,
    transitions: Arc<AtomicU64>,
}

impl DriverHooks for Probe {
    fn reconcile_started(&self, _: &Target<'_>) {
        self.counts.send_modify(|c| c.started += 1);
    }

    fn reconcile_finished(&self, _: &Target<'_>, _: Duration, finished: Finished) {
        self.counts.send_modify(|c| {
            c.finished += 1;
            if finished == Finished::Idle {
                c.idle += 1;
            }
        });
    }

    fn transitioned(&self, _: &Target<'_>, _: &str, _: &str, _: &str) {
        self.transitions.fetch_add(1, Ordering::SeqCst);
    }
}

/// `VERB resource[/subresource]` of a request, for tallies.
fn what(r: &Request) -> String {
    let parts: Vec<&str> = r.path.split('/').filter(|p| !p.is_empty()).collect();
    let at = parts
        .iter()
        .position(|p| *p == "namespaces")
        .map_or(parts.len().saturating_sub(1), |i| i + 2);
    let resource = parts.get(at).copied().unwrap_or("?");
    let sub = ["/status", "/eviction"]
        .into_iter()
        .find(|s| r.path.ends_with(s))
        .unwrap_or_default();
    format!("{} {resource}{sub}", r.method)
}

fn tally(requests: &[Request]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in requests.iter().filter(|r| !r.is_watch()) {
        *out.entry(what(r)).or_default() += 1;
    }
    out
}

/// Counts, from a watch of the pods `selector` picks, how often the pods that are not
/// terminating change in number or in how many are Ready: what `replicas` and
/// `readyReplicas` follow. Returns once the watch has listed the pods.
async fn count_readiness_changes(
    pods: Api<Pod>,
    selector: &str,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let changes = Arc::new(AtomicU64::new(0));
    let counted = changes.clone();
    let config = watcher::Config::default().labels(selector);
    let (listed, on_list) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        // Per pod: whether it is not terminating, and whether it is then also Ready.
        let mut ready: BTreeMap<String, (bool, bool)> = BTreeMap::new();
        let mut last: Option<(usize, usize)> = None;
        let mut events = watcher(pods, config).boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Init => {
                    ready.clear();
                    continue;
                }
                watcher::Event::InitDone => {
                    if last.is_none()
                        && let Some(tx) = listed.take()
                    {
                        let _ = tx.send(());
                    }
                }
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    let live = p.metadata.deletion_timestamp.is_none();
                    let serving = live
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                    ready.insert(p.name_any(), (live, serving));
                }
                watcher::Event::Delete(p) => {
                    ready.remove(&p.name_any());
                }
            }
            if listed.is_some() {
                continue; // still listing
            }
            let now = (
                ready.values().filter(|(live, _)| *live).count(),
                ready.values().filter(|(_, serving)| *serving).count(),
            );
            if last.is_some_and(|l| l != now) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            last = Some(now);
        }
    });
    on_list.await.expect("the pod watch lists the pods");
    (changes, task)
}

fn is_ready_at(db: &DistributedDB, image: &str) -> bool {
    db.status.as_ref().is_some_and(|s| {
        s.engine.phase.as_deref() == Some("Ready") && s.version.as_deref() == Some(image)
    })
}

#[tokio::test]
async fn one_lifecycle_costs_nothing_idle_and_a_status_write_per_transition_or_readiness_change() {
    let fx = Fixture::<DistributedDb>::new("budget").await;
    let log = RequestLog::default();
    let (counts, mut seen) = tokio::sync::watch::channel(ReconcileCounts::default());
    let transitions = Arc::new(AtomicU64::new(0));
    let (force, forced) = futures::channel::mpsc::unbounded();
    let operator = InProcessOperator::start::<DistributedDb>(
        counted_client(&log).await,
        driver::Config::namespaced(fx.env.namespace())
            .hooks(Probe {
                counts,
                transitions: transitions.clone(),
            })
            .reconcile_all_on(forced),
    );
    let spec = serde_json::from_value(json!({
        "replicas": 3,
        "image": "registry.example/db:1",
        "storage": {"size": "1Gi"},
        "upgrade": {"preHook": {"command": ["drain"]}, "postHook": {"command": ["verify"]}},
    }))
    .expect("a spec");
    fx.create_object(&DistributedDB::new("budget", spec)).await;
    fx.until("budget", "Ready at db:1", |db| {
        is_ready_at(db, "registry.example/db:1")
    })
    .await;
    let settled = counts_until(&mut seen, "reconciles to settle", |c| {
        c.started == c.finished
    })
    .await;

    // Idle and forced reconciles: no request at all (watches aside).
    let mark = log.mark();
    for n in 1..=3 {
        force.unbounded_send(()).expect("the operator listens");
        counts_until(&mut seen, "a forced reconcile", |c| {
            c.finished >= settled.finished + n && c.started == c.finished
        })
        .await;
    }
    let idle = tally(&log.since(mark));
    assert!(
        idle.is_empty(),
        "forced reconciles made requests: {idle:#?}"
    );

    // A hooked upgrade of three pods: 1 + 3 × 3 transitions, and the changes of the pods
    // the status counts (each pod goes, comes back, turns Ready), at most one status
    // write each.
    let (readiness_changes, watching) = count_readiness_changes(
        fx.env.api(),
        "app.kubernetes.io/instance=budget,lockstep.dev/component=database",
    )
    .await;
    let mark = log.mark();
    let before = transitions.load(Ordering::SeqCst);
    fx.merge_patch(
        "budget",
        json!({"spec": {"image": "registry.example/db:2"}}),
    )
    .await;
    fx.until("budget", "Ready at db:2", |db| {
        is_ready_at(db, "registry.example/db:2")
    })
    .await;
    // The hook Jobs are cleaned up at rest. "No reconcile running" alone does not say
    // the lifecycle is over: an owned object's change may be held by the debounce
    // (the debounce) with nothing running, so wait for the cleanup itself.
    wait_for_all(
        &fx.env.api::<Job>(),
        "app.kubernetes.io/instance=budget,lockstep.dev/component=hook",
        "the hook Jobs cleaned up",
        <[Job]>::is_empty,
    )
    .await;
    counts_until(&mut seen, "reconciles to settle", |c| {
        c.started == c.finished
    })
    .await;
    let upgrade = log.since(mark);
    let taken = transitions.load(Ordering::SeqCst) - before;
    let counted = tally(&upgrade);
    let status_writes = upgrade.iter().filter(|r| r.is_status_write()).count();
    eprintln!("a hooked 3-pod upgrade, by verb and resource: {counted:?}");
    watching.abort();
    let changes = readiness_changes.load(Ordering::SeqCst);
    eprintln!(
        "{status_writes} status writes for {taken} transitions and {changes} changes of the pods counted (live, Ready)"
    );
    assert_eq!(taken, 10, "a hooked 3-pod upgrade: {counted:#?}");
    assert!(
        u64::try_from(status_writes).unwrap_or(u64::MAX) <= taken + changes,
        "status writes ({status_writes}) ≤ transitions ({taken}) + changes of the pods counted ({changes}): {counted:#?}"
    );
    assert_eq!(
        counted.get("POST pods/eviction").copied(),
        Some(3),
        "each pod replaced once, through the eviction API: {counted:#?}"
    );
    assert_eq!(
        counted.get("DELETE pods"),
        None,
        "no pod deleted past its budget: {counted:#?}"
    );
    let gets: Vec<&String> = counted.keys().filter(|k| k.starts_with("GET ")).collect();
    assert!(gets.is_empty(), "no GET on the hot path: {counted:#?}");
    operator.stop().await;
    fx.env.finish().await;
}
