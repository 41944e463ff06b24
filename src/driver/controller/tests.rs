//! The controller's unit tests.

use super::*;

use crate::driver::execute::Executed;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

fn cm(rv: &str, data: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("a".into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), data.to_owned())].into()),
        ..ConfigMap::default()
    }
}

/// A refusal as the API server sends it, with one cause.
fn refusal(cause: &str) -> kube::Error {
    let status: kube::core::Status = serde_json::from_value(serde_json::json!({
        "status": "Failure", "code": 403, "reason": "Forbidden", "message": "refused",
        "details": { "causes": [{ "reason": cause }] },
    }))
    .expect("a Status");
    kube::Error::Api(status.boxed())
}

#[test]
fn an_event_refused_because_its_namespace_is_going_away_is_expected() {
    assert!(namespace_terminating(&refusal("NamespaceTerminating")));
    assert!(!namespace_terminating(&refusal("")));
}

#[test]
fn the_fence_serves_the_written_object_while_the_store_is_stale() {
    let fence = Fence::<ConfigMap>::default();
    let key = ObjectRef::new("a").within("ns");
    fence.remember(&key, Some("1".into()), cm("2", "written"));
    let served = fence.freshest(&key, Arc::new(cm("1", "stale")));
    assert_eq!(served.resource_version().as_deref(), Some("2"));
}

#[test]
fn the_fence_steps_aside_once_the_store_has_caught_up() {
    let fence = Fence::<ConfigMap>::default();
    let key = ObjectRef::new("a").within("ns");
    fence.remember(&key, Some("1".into()), cm("2", "written"));
    let served = fence.freshest(&key, Arc::new(cm("3", "newer")));
    assert_eq!(served.resource_version().as_deref(), Some("3"));
    // Forgotten: even a (theoretical) replay of the old version is served as is.
    let served = fence.freshest(&key, Arc::new(cm("1", "stale")));
    assert_eq!(served.resource_version().as_deref(), Some("1"));
}

#[test]
fn the_fence_covers_two_writes_before_the_store_sees_the_first() {
    let fence = Fence::<ConfigMap>::default();
    let key = ObjectRef::new("a").within("ns");
    fence.remember(&key, Some("1".into()), cm("2", "finalizer added"));
    fence.remember(&key, Some("2".into()), cm("3", "status written"));
    for stale in ["1", "2"] {
        let served = fence.freshest(&key, Arc::new(cm(stale, "stale")));
        assert_eq!(
            served.resource_version().as_deref(),
            Some("3"),
            "store at {stale}"
        );
    }
    let served = fence.freshest(&key, Arc::new(cm("3", "caught up")));
    assert_eq!(
        served
            .data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("caught up")
    );
}

#[test]
fn the_fence_drops_the_written_object_once_the_store_serves_it() {
    let fence = Fence::<ConfigMap>::default();
    let key = ObjectRef::new("a").within("ns");
    let mut written = cm("2", "written");
    written.metadata.managed_fields = Some(vec![Default::default()]);
    fence.remember(&key, Some("1".into()), written);
    let held = lock(&fence.written);
    assert!(held[&key].object.metadata.managed_fields.is_none());
    drop(held);
    fence.caught_up(&key, Some("1"));
    assert!(lock(&fence.written).contains_key(&key), "still stale");
    fence.caught_up(&key, Some("2"));
    assert!(lock(&fence.written).is_empty());
    // Moved past our write (someone else wrote since): dropped as well.
    fence.remember(&key, Some("2".into()), cm("3", "written"));
    fence.caught_up(&key, Some("4"));
    assert!(lock(&fence.written).is_empty());
}

#[test]
fn the_fence_ignores_other_objects() {
    let fence = Fence::<ConfigMap>::default();
    fence.remember(
        &ObjectRef::new("a").within("ns"),
        Some("1".into()),
        cm("2", "written"),
    );
    let other = ObjectRef::new("a").within("other");
    let served = fence.freshest(&other, Arc::new(cm("1", "theirs")));
    assert_eq!(
        served
            .data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("theirs")
    );
}

#[test]
fn truncation_respects_character_boundaries() {
    assert_eq!(truncate("héllo", 2), "h");
    assert_eq!(truncate("hello", 10), "hello");
}

/// Pod `name` of cluster `pg` (kind label `postgrescluster`) with UID `uid`.
fn pod(name: &str, uid: &str, rv: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv,
            "labels": {"app.kubernetes.io/name": "postgrescluster",
                       "app.kubernetes.io/instance": "pg"}},
    }))
    .expect("a pod")
}

/// A pod store that shows `pg-0` live, and the cluster it belongs to.
fn pg_0_live() -> (Cache, Target<'static>) {
    let cache = Cache::new("postgrescluster", crate::driver::cache::Keep::NOTHING);
    cache
        .pods
        .apply(kube::runtime::watcher::Event::Apply(pod("pg-0", "u0", "1")));
    let target = Target {
        machine: "postgrescluster",
        namespace: "ns",
        name: "pg",
    };
    (cache, target)
}

#[tokio::test]
async fn a_reconcile_that_deleted_a_pod_goes_on_once_the_store_shows_it_going() {
    let (cache, target) = pg_0_live();
    let delete = Op::delete::<k8s_openapi::api::core::v1::Pod>("pg-0", "u0");
    let waiting = tokio::spawn({
        let cache = cache.clone();
        async move { until_pod_seen_going(&cache, &target, (&delete, Executed::Taken)).await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "the store still shows pg-0 live");
    let mut going = pod("pg-0", "u0", "2");
    going.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).expect("a time");
    cache
        .pods
        .apply(kube::runtime::watcher::Event::Apply(going));
    let seen = tokio::time::timeout(DELETE_SEEN_WITHIN, waiting)
        .await
        .expect("ends with the event")
        .expect("the task ran");
    assert!(seen);
}

#[tokio::test]
async fn a_reconcile_waits_on_no_other_op_than_a_pods_deletion() {
    let (cache, target) = pg_0_live();
    let other = Op::delete::<ConfigMap>("pg-0", "u0");
    let started = std::time::Instant::now();
    assert!(until_pod_seen_going(&cache, &target, (&other, Executed::Taken)).await);
    assert!(started.elapsed() < DELETE_SEEN_WITHIN);
}

/// Found in review: a delete refused on its preconditions (as-read, the pod changed
/// since) leaves the pod live; waiting to see it going would hold the reconcile for the
/// whole bound.
#[tokio::test]
async fn a_pod_deletion_the_server_refused_is_not_waited_for() {
    let (cache, target) = pg_0_live();
    let refused = Op::delete::<k8s_openapi::api::core::v1::Pod>("pg-0", "u0");
    let started = std::time::Instant::now();
    assert!(until_pod_seen_going(&cache, &target, (&refused, Executed::AlreadySo)).await);
    assert!(started.elapsed() < DELETE_SEEN_WITHIN);
}
