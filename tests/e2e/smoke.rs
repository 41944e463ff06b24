//! The control plane is real: the controllers, the scheduler, KWOK's fake kubelets, the
//! volume provisioner, the garbage collector and CEL validation all do their jobs.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use serde_json::json;

use crate::support::{Env, OperatorProcess, install_crd, wait_for, wait_for_all, wait_gone};

fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value)
        .unwrap_or_else(|e| panic!("test fixture does not deserialize: {e}"))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn image(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default()
}

fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// The pod-level security context of the `restricted` Pod Security Standard: the test
/// namespaces enforce it, so the plain workloads below carry it as the operator's do.
static RESTRICTED_POD: LazyLock<serde_json::Value> = LazyLock::new(
    || json!({"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}),
);

/// The container-level half of the same standard.
static RESTRICTED_CONTAINER: LazyLock<serde_json::Value> =
    LazyLock::new(|| json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}));

fn web(replicas: i32, image: &str) -> StatefulSet {
    from_json(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "securityContext": RESTRICTED_POD.clone(),
                    "containers": [{"name": "web", "image": image, "securityContext": RESTRICTED_CONTAINER.clone()}],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }],
        },
    }))
}

#[tokio::test]
async fn a_statefulset_gets_ready_pods_on_kwok_nodes_and_bound_claims() {
    let env = Env::new("smoke-sts").await;
    let sets = env.api::<StatefulSet>();
    sets.create(&PostParams::default(), &web(3, "registry.invalid/web:1"))
        .await
        .expect("the StatefulSet is created");

    wait_for(
        &sets,
        "web",
        "3 ready replicas",
        |s: Option<&StatefulSet>| {
            s.and_then(|s| s.status.as_ref())
                .is_some_and(|st| st.ready_replicas == Some(3))
        },
    )
    .await;
    let pods = wait_for_all(
        &env.api::<Pod>(),
        "app=web",
        "3 ready pods",
        |pods: &[Pod]| pods.len() == 3 && pods.iter().all(is_ready),
    )
    .await;
    for pod in &pods {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(
            node.starts_with("kwok-node-"),
            "{} runs on a KWOK node, not {node:?}",
            pod.name_any()
        );
    }

    let claims = env.api::<PersistentVolumeClaim>();
    for ordinal in 0..3 {
        wait_for(
            &claims,
            &format!("data-web-{ordinal}"),
            "the claim to be Bound",
            |c: Option<&PersistentVolumeClaim>| {
                c.and_then(|c| c.status.as_ref())
                    .and_then(|s| s.phase.as_deref())
                    == Some("Bound")
            },
        )
        .await;
    }
    env.finish().await;
}

#[tokio::test]
async fn under_on_delete_a_new_image_restarts_no_pod_until_one_is_deleted() {
    let env = Env::new("smoke-ondelete").await;
    let sets = env.api::<StatefulSet>();
    let pods = env.api::<Pod>();
    sets.create(&PostParams::default(), &web(3, "registry.invalid/web:1"))
        .await
        .expect("the StatefulSet is created");
    let before = wait_for_all(&pods, "app=web", "3 ready pods", |pods: &[Pod]| {
        pods.len() == 3 && pods.iter().all(is_ready)
    })
    .await;

    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "registry.invalid/web:2"}]}}}});
    let patched = sets
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("the image is changed");
    let generation = patched.metadata.generation.unwrap_or_default();
    // Once the StatefulSet controller has seen the new template (a new update revision),
    // it has decided what to do about the pods: under OnDelete, nothing.
    wait_for(
        &sets,
        "web",
        "the controller to observe the new template",
        |s: Option<&StatefulSet>| {
            s.and_then(|s| s.status.as_ref()).is_some_and(|st| {
                st.observed_generation == Some(generation)
                    && st.update_revision != Some(st.current_revision.clone().unwrap_or_default())
            })
        },
    )
    .await;
    let after = wait_for_all(
        &pods,
        "app=web",
        "the pods as they are",
        |pods: &[Pod]| pods.len() == 3,
    )
    .await;
    assert_eq!(uids(&after), uids(&before), "no pod was replaced");
    assert!(
        after.iter().all(|p| image(p) == "registry.invalid/web:1"),
        "every pod still runs the old image"
    );

    let old = before
        .iter()
        .find(|p| p.name_any() == "web-0")
        .expect("web-0 exists");
    let old_uid = old.uid().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(old_uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    pods.delete("web-0", &params)
        .await
        .expect("web-0 is deleted");
    let recreated = wait_for(
        &pods,
        "web-0",
        "web-0 to come back ready",
        |p: Option<&Pod>| {
            p.is_some_and(|p| p.uid().as_deref() != Some(old_uid.as_str()) && is_ready(p))
        },
    )
    .await
    .expect("web-0 exists");
    assert_eq!(
        image(&recreated),
        "registry.invalid/web:2",
        "the recreated pod runs the new image"
    );

    let rest = wait_for_all(
        &pods,
        "app=web",
        "the pods as they are",
        |pods: &[Pod]| pods.len() == 3,
    )
    .await;
    for pod in rest.iter().filter(|p| p.name_any() != "web-0") {
        assert_eq!(
            image(pod),
            "registry.invalid/web:1",
            "{} was left alone",
            pod.name_any()
        );
        assert_eq!(
            uids(&before).get(&pod.name_any()),
            pod.uid().as_ref(),
            "{} was not replaced",
            pod.name_any()
        );
    }
    env.finish().await;
}

fn job(name: &str, fail: bool) -> Job {
    let labels = if fail {
        json!({"lockstep.dev/kwok-fail": "true"})
    } else {
        json!({})
    };
    from_json(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": RESTRICTED_POD.clone(),
                    "containers": [{
                        "name": "main",
                        "image": "registry.invalid/job:1",
                        "securityContext": RESTRICTED_CONTAINER.clone(),
                    }],
                },
            },
        },
    }))
}

fn job_condition(job: Option<&Job>, type_: &str) -> bool {
    job.and_then(|j| j.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

#[tokio::test]
async fn a_job_completes_and_one_labelled_to_fail_fails() {
    let env = Env::new("smoke-jobs").await;
    let jobs = env.api::<Job>();
    jobs.create(&PostParams::default(), &job("succeeds", false))
        .await
        .expect("the Job is created");
    jobs.create(&PostParams::default(), &job("fails", true))
        .await
        .expect("the failing Job is created");

    let done = wait_for(
        &jobs,
        "succeeds",
        "the Job to complete",
        |j: Option<&Job>| job_condition(j, "Complete"),
    )
    .await
    .expect("the Job exists");
    assert_eq!(done.status.and_then(|s| s.succeeded), Some(1));
    let failed = wait_for(&jobs, "fails", "the Job to fail", |j: Option<&Job>| {
        job_condition(j, "Failed")
    })
    .await
    .expect("the Job exists");
    assert_eq!(failed.status.and_then(|s| s.failed), Some(1));
    env.finish().await;
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependents() {
    let env = Env::new("smoke-gc").await;
    let maps = env.api::<ConfigMap>();
    let owner = maps
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "owner"}})),
        )
        .await
        .expect("the owner is created");
    let dependent: ConfigMap = from_json(json!({
        "metadata": {
            "name": "dependent",
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": "owner",
                "uid": owner.uid().unwrap_or_default(),
            }],
        },
    }));
    let dependent = maps
        .create(&PostParams::default(), &dependent)
        .await
        .expect("the dependent is created");

    maps.delete("owner", &DeleteParams::background())
        .await
        .expect("the owner is deleted");
    wait_gone(
        &maps,
        "dependent",
        &dependent.uid().unwrap_or_default(),
        "the garbage collector to delete the dependent",
    )
    .await;
    env.finish().await;
}

fn gadget_crd() -> CustomResourceDefinition {
    from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.smoke.lockstep.dev"},
        "spec": {
            "group": "smoke.lockstep.dev",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "properties": {"replicas": {"type": "integer"}},
                        "x-kubernetes-validations": [{
                            "rule": "self.replicas <= 5",
                            "message": "replicas must be at most 5",
                        }],
                    }},
                }},
            }],
        },
    }))
}

#[tokio::test]
async fn a_cel_rule_rejects_a_bad_object_with_its_message() {
    let env = Env::new("smoke-cel").await;
    install_crd(&env.client, &gadget_crd()).await;
    let resource = ApiResource {
        group: "smoke.lockstep.dev".into(),
        version: "v1".into(),
        api_version: "smoke.lockstep.dev/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(env.client.clone(), env.namespace(), &resource);
    let gadget = |name: &str, replicas: i64| {
        DynamicObject::new(name, &resource).data(json!({"spec": {"replicas": replicas}}))
    };

    gadgets
        .create(&PostParams::default(), &gadget("good", 3))
        .await
        .expect("an object within the rule is accepted");
    match gadgets
        .create(&PostParams::default(), &gadget("bad", 7))
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "rejected as invalid: {status:?}");
            assert!(
                status.message.contains("replicas must be at most 5"),
                "the rejection carries the rule's message: {}",
                status.message
            );
        }
        other => panic!("an object breaking the rule must be rejected, got {other:?}"),
    }
    env.finish().await;
}

#[tokio::test]
async fn the_lockstep_binary_runs_as_a_child_process() {
    let mut lockstep = OperatorProcess::spawn(&["--version"], "smoke-version");
    let status = lockstep.wait().await;
    assert!(
        status.success(),
        "lockstep --version exits 0: {}",
        lockstep.output()
    );
    assert!(
        lockstep.output().contains("lockstep"),
        "it names itself: {}",
        lockstep.output()
    );
}
