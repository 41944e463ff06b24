//! The cache's unit tests.

use super::*;
use kube::api::ObjectMeta;
use std::time::Duration;

#[test]
fn the_digest_is_fnv_1a_so_every_build_agrees_on_it() {
    assert_eq!(digest(""), "cbf29ce484222325");
    assert_eq!(digest("a"), "af63dc4c8601ec8c");
    assert_ne!(digest("{\"a\":1}"), digest("{\"a\":2}"));
}

/// A ConfigMap `name` of `owner` (kind label `kind`) at version `rv`.
pub(crate) fn cm(name: &str, owner: &str, kind: &str, rv: &str, data: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            labels: Some(
                [
                    (labels::MANAGED_BY.to_owned(), "lockstep".to_owned()),
                    (labels::NAME.to_owned(), kind.to_owned()),
                    (labels::INSTANCE.to_owned(), owner.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        data: Some([("k".to_owned(), data.to_owned())].into()),
        ..Default::default()
    }
}

fn key(name: &str) -> Key {
    (Some("ns".into()), name.into())
}

fn owners(store: &Owned<ConfigMap>, event: watcher::Event<ConfigMap>) -> Vec<Key> {
    store.apply(event)
}

#[test]
fn a_new_owned_object_triggers_its_owner_and_is_found_under_it() {
    let s = Owned::new("beacon");
    let o = owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
    );
    assert_eq!(o, [key("a")]);
    assert_eq!(s.of(Some("ns"), "a").len(), 1);
    assert!(s.of(Some("ns"), "b").is_empty());
    assert!(s.of(Some("other"), "a").is_empty());
}

#[test]
fn an_object_of_another_kind_triggers_nothing_and_is_not_listed() {
    let s = Owned::new("beacon");
    let o = owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "other", "1", "x")),
    );
    assert!(o.is_empty());
    assert!(s.of(Some("ns"), "a").is_empty());
}

#[test]
fn a_resource_version_only_change_triggers_nothing() {
    let s = Owned::new("beacon");
    owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
    );
    let o = owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "2", "x")),
    );
    assert!(o.is_empty());
    let stored = s.of(Some("ns"), "a");
    assert_eq!(stored[0].resource_version().as_deref(), Some("2"));
}

#[test]
fn a_content_change_triggers_the_owner() {
    let s = Owned::new("beacon");
    owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
    );
    let o = owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "2", "y")),
    );
    assert_eq!(o, [key("a")]);
}

#[test]
fn a_relabelled_object_triggers_both_owners_and_moves() {
    let s = Owned::new("beacon");
    owners(&s, watcher::Event::Apply(cm("cm", "a", "beacon", "1", "x")));
    let o = owners(&s, watcher::Event::Apply(cm("cm", "b", "beacon", "2", "x")));
    assert_eq!(o, [key("a"), key("b")]);
    assert!(s.of(Some("ns"), "a").is_empty());
    assert_eq!(s.of(Some("ns"), "b").len(), 1);
}

#[test]
fn a_deletion_triggers_the_owner_and_removes_the_object() {
    let s = Owned::new("beacon");
    owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
    );
    let o = owners(
        &s,
        watcher::Event::Delete(cm("a-cm", "a", "beacon", "2", "x")),
    );
    assert_eq!(o, [key("a")]);
    assert!(s.is_empty());
}

#[test]
fn an_unchanged_relist_triggers_nothing_but_a_vanished_object_triggers_its_owner() {
    let s = Owned::new("beacon");
    owners(
        &s,
        watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
    );
    owners(
        &s,
        watcher::Event::Apply(cm("b-cm", "b", "beacon", "1", "x")),
    );
    assert!(owners(&s, watcher::Event::Init).is_empty());
    let again = owners(
        &s,
        watcher::Event::InitApply(cm("a-cm", "a", "beacon", "5", "x")),
    );
    assert!(again.is_empty());
    let done = owners(&s, watcher::Event::InitDone);
    assert_eq!(done, [key("b")]);
    assert_eq!(s.len(), 1);
}

#[tokio::test]
async fn the_store_is_listed_after_the_first_init_done() {
    let s = Owned::<ConfigMap>::new("beacon");
    let waiting = s.clone();
    let listed = tokio::spawn(async move { waiting.wait_until_listed().await });
    s.apply(watcher::Event::Init);
    s.apply(watcher::Event::InitDone);
    tokio::time::timeout(std::time::Duration::from_secs(5), listed)
        .await
        .expect("listed in time")
        .expect("the task ran");
}

fn lease(rv: &str, holder: &str, renewed: i64) -> Lease {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db-primary", "namespace": "ns", "resourceVersion": rv,
            "labels": {"app.kubernetes.io/name": "beacon", "app.kubernetes.io/instance": "db"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
            "renewTime": format!("2026-01-01T00:00:{renewed:02}.000000Z")}
    }))
    .expect("a Lease")
}

#[test]
fn a_lease_renewal_alone_is_stored_but_triggers_nothing() {
    let s = Owned::<Lease>::new("beacon");
    assert_eq!(
        s.apply(watcher::Event::Apply(lease("1", "db-0/u", 0))),
        [key("db")]
    );
    assert!(
        s.apply(watcher::Event::Apply(lease("2", "db-0/u", 2)))
            .is_empty()
    );
    let stored = s.of(Some("ns"), "db");
    assert_eq!(stored[0].resource_version().as_deref(), Some("2"));
    let renewed = stored[0].spec.as_ref().and_then(|s| s.renew_time.clone());
    assert!(renewed.is_some_and(|t| t.0.as_second() % 60 == 2));
}

#[test]
fn a_lease_renewal_is_timed_from_when_this_process_first_saw_it() {
    let s = Owned::<Lease>::new("beacon");
    s.apply(watcher::Event::Apply(lease("1", "db-0/u", 0)));
    let (first, at) = s.moment_seen(Some("ns"), "db-primary").expect("seen");
    std::thread::sleep(std::time::Duration::from_millis(20));
    // The same renewal again (an annotation changed, a relist): still first seen then.
    s.apply(watcher::Event::Apply(lease("2", "db-0/u", 0)));
    let (again, at_again) = s.moment_seen(Some("ns"), "db-primary").expect("seen");
    assert_eq!(again, first);
    assert!(
        (at_again - at).num_milliseconds().abs() < 10,
        "{at} then {at_again}"
    );
    // A new renewal: seen now, whatever time the holder wrote.
    s.apply(watcher::Event::Apply(lease("3", "db-0/u", 2)));
    let (renewed, at_renewed) = s.moment_seen(Some("ns"), "db-primary").expect("seen");
    assert_ne!(renewed, first);
    assert!(at_renewed - at >= chrono::Duration::milliseconds(20));
    assert!(s.moment_seen(Some("ns"), "other").is_none());
}

#[test]
fn a_new_lease_holder_triggers_the_owner() {
    let s = Owned::<Lease>::new("beacon");
    s.apply(watcher::Event::Apply(lease("1", "db-0/u", 0)));
    assert_eq!(
        s.apply(watcher::Event::Apply(lease("2", "db-1/v", 4))),
        [key("db")]
    );
}

#[test]
fn a_job_pod_keeps_its_termination_message_and_nothing_else_of_its_containers() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db-survey-1-x", "namespace": "ns", "labels": {
            "app.kubernetes.io/name": "beacon", "app.kubernetes.io/instance": "db",
            "batch.kubernetes.io/job-name": "db-survey-1"}},
        "status": {"phase": "Succeeded",
            "containerStatuses": [{"name": "survey", "image": "pg:16", "imageID": "x",
                "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "message": "{}",
                    "reason": "Completed"}}}]}
    }))
    .expect("a pod");
    let s = Owned::<Pod>::from_objects("beacon", vec![pod]);
    let stored = s.of(Some("ns"), "db");
    let statuses = stored[0]
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let terminated = statuses[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(terminated.message.as_deref(), Some("{}"));
    assert!(terminated.reason.is_none() && statuses[0].image.is_empty());
}

/// What the test operator "beacon" declares it reads beyond what every machine does.
const BEACON: Keep = Keep {
    digested_annotations: &["beacon.example/settings"],
    env_prefix: Some("BEACON_"),
};

#[test]
fn a_pod_is_stored_with_only_what_machines_read() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db-0", "namespace": "ns", "labels": {
            "app.kubernetes.io/name": "beacon", "app.kubernetes.io/instance": "db"},
            "managedFields": [{"manager": "kubelet"}]},
        "spec": {"containers": [{"name": "db", "image": "db:1",
            "env": [{"name": "A", "value": "b"}, {"name": "BEACON_LEASE_SECONDS", "value": "15"},
                {"name": "BEACON_X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
            "command": ["run"]}],
            "volumes": [{"name": "data", "emptyDir": {}}], "nodeName": "n1"},
        "status": {"phase": "Running", "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "db", "image": "db:1", "imageID": "x",
                "ready": true, "restartCount": 0}]}
    }))
    .expect("a pod");
    // An operator that declares no variable keeps none.
    let bare = Owned::<Pod>::from_objects("beacon", vec![pod.clone()]);
    let bare = bare.of(Some("ns"), "db");
    assert!(
        bare[0]
            .spec
            .as_ref()
            .is_some_and(|s| s.containers[0].env.is_none())
    );
    let s = Owned::<Pod>::from_objects_keeping("beacon", BEACON, vec![pod]);
    let stored = s.of(Some("ns"), "db");
    let stored = &stored[0];
    assert!(stored.metadata.managed_fields.is_none());
    let spec = stored.spec.as_ref().expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some("db:1"));
    // Only the literal variables the operator declared stay: what the pod was created with.
    let env = spec.containers[0].env.as_deref().unwrap_or_default();
    let kept: Vec<_> = env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    assert_eq!(kept, vec![("BEACON_LEASE_SECONDS", Some("15"))]);
    assert!(spec.containers[0].command.is_none());
    assert!(spec.volumes.is_none());
    let status = stored.status.as_ref().expect("status");
    assert!(status.container_statuses.is_none());
    assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
}

#[test]
fn a_pod_keeps_a_declared_annotation_as_a_digest_that_tells_values_apart() {
    let pod = |value: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-1", "namespace": "ns", "uid": "u1",
                "annotations": {"beacon.example/settings": value, "other": "x"},
                "labels": {"app.kubernetes.io/name": "beacon",
                    "app.kubernetes.io/instance": "db"}}
        }))
        .expect("a pod")
    };
    let kept = |value: &str| {
        let s = Owned::<Pod>::from_objects_keeping("beacon", BEACON, vec![pod(value)]);
        s.of(Some("ns"), "db")[0].metadata.annotations.clone()
    };
    let a = kept("{\"parameters\":{\"work_mem\":\"8MB\"}}");
    assert_eq!(
        a,
        Some(BTreeMap::from([(
            "beacon.example/settings".to_owned(),
            digest("{\"parameters\":{\"work_mem\":\"8MB\"}}")
        )]))
    );
    assert_ne!(a, kept("{\"parameters\":{\"work_mem\":\"16MB\"}}"));
}

#[test]
fn a_pod_keeps_of_its_metadata_what_is_read_and_lockstep_s_labels() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db-1", "namespace": "ns", "uid": "u1",
            "generateName": "db-", "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:01:00Z",
            "annotations": {"lockstep.dev/kwok-ready-delay-ms": "2000"},
            "finalizers": ["example.com/f"],
            "labels": {"app.kubernetes.io/name": "beacon",
                "app.kubernetes.io/instance": "db", "lockstep.dev/role": "primary",
                "controller-revision-hash": "db-7c9fb687d5",
                "statefulset.kubernetes.io/pod-name": "db-1",
                "apps.kubernetes.io/pod-index": "1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                "name": "db", "uid": "s1", "controller": true,
                "blockOwnerDeletion": true}]}
    }))
    .expect("a pod");
    let s = Owned::<Pod>::from_objects("beacon", vec![pod]);
    let stored = s.of(Some("ns"), "db");
    let meta = &stored[0].metadata;
    assert_eq!(meta.uid.as_deref(), Some("u1"));
    assert!(meta.creation_timestamp.is_some() && meta.deletion_timestamp.is_some());
    assert!(meta.annotations.is_none() && meta.finalizers.is_none());
    assert!(meta.generate_name.is_none() && meta.generation.is_none());
    let labels: Vec<&str> = meta.labels.iter().flatten().map(|(k, _)| &**k).collect();
    assert_eq!(
        labels,
        [
            "app.kubernetes.io/instance",
            "app.kubernetes.io/name",
            "lockstep.dev/role"
        ]
    );
    let owner = &meta.owner_references.as_ref().expect("an owner")[0];
    assert_eq!(
        (&*owner.kind, &*owner.name, &*owner.uid, owner.controller),
        ("StatefulSet", "db", "s1", Some(true))
    );
    assert_eq!(
        crate::machines::common::observe::ordinal_of(&stored[0], "db"),
        Some(1)
    );
}

#[test]
fn a_claim_keeps_its_name_labels_and_size_only() {
    let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data-db-0", "namespace": "ns", "uid": "c1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            "finalizers": ["kubernetes.io/pvc-protection"],
            "labels": {"app.kubernetes.io/name": "beacon",
                "app.kubernetes.io/instance": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
            "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
    }))
    .expect("a claim");
    let s = Owned::<PersistentVolumeClaim>::from_objects("beacon", vec![pvc]);
    let stored = s.of(Some("ns"), "db");
    let pvc = &stored[0];
    assert_eq!(pvc.metadata.uid.as_deref(), Some("c1"));
    assert!(pvc.metadata.annotations.is_none() && pvc.metadata.finalizers.is_none());
    assert!(pvc.metadata.creation_timestamp.is_none());
    let spec = pvc.spec.as_ref().expect("spec");
    assert!(spec.volume_name.is_none() && spec.access_modes.is_none());
    let size = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    assert_eq!(
        size.and_then(|r| r.get("storage")).map(|q| &*q.0),
        Some("1Gi")
    );
    assert!(pvc.status.is_none());
}

/// ConfigMap `name` of owner `o` (kind `db`) with UID `uid`, at version `rv`.
fn cm_uid(name: &str, uid: &str, rv: &str) -> ConfigMap {
    let mut c = cm(name, "o", "db", rv, "x");
    c.metadata.uid = Some(uid.into());
    c
}

#[test]
fn an_object_shows_going_once_it_carries_a_deletion_timestamp_is_gone_or_was_replaced() {
    let store = Owned::<ConfigMap>::new("db");
    let going = |store: &Owned<ConfigMap>| store.shows_going(Some("ns"), "o", "a", "uid-1");
    store.apply(watcher::Event::Apply(cm_uid("a", "uid-1", "1")));
    assert!(!going(&store), "live under the same UID");

    let mut deleting = cm_uid("a", "uid-1", "2");
    deleting.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).expect("a time");
    store.apply(watcher::Event::Apply(deleting.clone()));
    assert!(going(&store), "terminating");

    store.apply(watcher::Event::Delete(deleting));
    assert!(going(&store), "gone");

    store.apply(watcher::Event::Apply(cm_uid("a", "uid-2", "3")));
    assert!(going(&store), "replaced by another object of that name");
}

#[tokio::test]
async fn a_wait_on_the_store_ends_with_the_event_that_makes_it_hold_or_at_its_bound() {
    let store = Owned::<ConfigMap>::new("db");
    store.apply(watcher::Event::Apply(cm_uid("a", "uid-1", "1")));
    let going = |s: &Owned<ConfigMap>| s.shows_going(Some("ns"), "o", "a", "uid-1");

    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.until(Duration::from_secs(10), going).await }
    });
    tokio::task::yield_now().await;
    store.apply(watcher::Event::Delete(cm_uid("a", "uid-1", "2")));
    assert!(
        waiting.await.expect("the wait ends"),
        "held once the event came"
    );

    store.apply(watcher::Event::Apply(cm_uid("a", "uid-3", "4")));
    let started = tokio::time::Instant::now();
    let held = store
        .until(Duration::from_millis(200), |s| {
            s.shows_going(Some("ns"), "o", "a", "uid-3")
        })
        .await;
    assert!(!held, "a live object never shows going");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the wait ends at its bound, not before"
    );
}
