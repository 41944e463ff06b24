//! Executing requests: [`Op`]s, finalizer patches and the fenced status write.
//!
//! # Guarantees
//! Every request here is idempotent or fenced:
//! - [`Op::Apply`] is a forced server-side apply with field manager `lockstep`: applying
//!   the same object twice changes nothing the second time.
//! - [`Op::Create`] treats `AlreadyExists` as success.
//! - [`Op::Delete`] carries a UID precondition, and may carry a resourceVersion one;
//!   `NotFound` and a failed precondition (409) both mean the object as read is gone,
//!   which is success (a changed object's watch event brings the next decision).
//! - [`Op::Evict`] carries a UID precondition; `NotFound` and a failed precondition
//!   mean the pod as read is gone (success). A PodDisruptionBudget's refusal (429) is
//!   returned as [`Error::Api`] and retried: nothing was done. So is a `Failure` status
//!   in a successful answer's body (two budgets over the pod), never taken as done.
//! - [`Op::Label`] is a JSON merge patch of `metadata.labels`; NotFound counts as success
//!   (machines relabel whatever replaces the object from their persisted state). With a
//!   precondition the patch also carries the UID and resourceVersion read, so the server
//!   refuses it (409 for a newer version, 422 naming `metadata.uid` for a replaced
//!   object; both [`Error::Conflict`]) if the object changed since it was read.
//! - Finalizer patches are JSON patches whose first operation tests the
//!   `resourceVersion` that was read: a concurrent change makes the server reject them
//!   (reported as [`Error::Conflict`]).
//! - The status write is one JSON merge patch to the status subresource that carries the
//!   `resourceVersion` that was read (409 → [`Error::Conflict`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{self as meta, DeleteOptions, ObjectMeta};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::ApiResource;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Error, Op, Precondition};

/// The HTTP status code of an API error, if the server answered with one.
pub(crate) fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

fn reason(error: &kube::Error) -> Option<&str> {
    match error {
        kube::Error::Api(status) => Some(status.reason.as_str()),
        _ => None,
    }
}

fn api_error(what: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api { what, source }
}

fn dynamic_api(client: &Client, namespace: &str, resource: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, resource)
}

/// A JSON merge patch of `name`, written as `field_manager`.
async fn merge_patch(
    client: &Client,
    namespace: &str,
    resource: &ApiResource,
    name: &str,
    field_manager: &str,
    patch: &Value,
) -> Result<DynamicObject, kube::Error> {
    let params = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    };
    dynamic_api(client, namespace, resource)
        .patch(name, &params, &Patch::Merge(patch))
        .await
}

/// What a request is about, for logs and errors: `verb Kind/name`.
pub(crate) fn describe_op(op: &Op) -> String {
    match op {
        Op::Apply { resource, object } => format!("apply {}/{}", resource.kind, object.name_any()),
        Op::Create { resource, object } => {
            format!("create {}/{}", resource.kind, object.name_any())
        }
        Op::Delete { resource, name, .. } => format!("delete {}/{name}", resource.kind),
        Op::Evict { name, .. } => format!("evict Pod/{name}"),
        Op::Label { resource, name, .. } => format!("label {}/{name}", resource.kind),
        Op::Patch { resource, name, .. } => format!("patch {}/{name}", resource.kind),
    }
}

/// What the API server made of an executed op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Executed {
    /// It took the op as asked.
    Taken,
    /// Nothing changed, as the op allows: the object to create existed already, or the
    /// one to delete was gone or replaced (its preconditions refused it).
    AlreadySo,
}

/// Execute one op in `namespace` (the owner's; objects are always created there), and
/// say what the server made of it.
///
/// # Errors
/// [`Error::Api`] when the server refuses for any reason other than the ones this op
/// treats as success; [`Error::Render`] when an object to write has no name.
pub async fn execute(
    client: &Client,
    namespace: &str,
    op: &Op,
    field_manager: &str,
) -> Result<Executed, Error> {
    let what = describe_op(op);
    match op {
        Op::Apply { resource, object } => {
            let (name, object) = placed(object, namespace, &what)?;
            let params = PatchParams::apply(field_manager).force();
            dynamic_api(client, namespace, resource)
                .patch(&name, &params, &Patch::Apply(&object))
                .await
                .map_err(api_error(what))?;
        }
        Op::Create { resource, object } => {
            let (_, object) = placed(object, namespace, &what)?;
            let params = PostParams {
                field_manager: Some(field_manager.to_owned()),
                ..PostParams::default()
            };
            match dynamic_api(client, namespace, resource)
                .create(&params, &object)
                .await
            {
                Ok(_) => {}
                Err(e) if reason(&e) == Some("AlreadyExists") => {
                    tracing::debug!("{what}: already exists");
                    return Ok(Executed::AlreadySo);
                }
                Err(e) => return Err(api_error(what)(e)),
            }
        }
        Op::Delete {
            resource,
            name,
            uid,
            version,
        } => {
            let params = DeleteParams {
                preconditions: uid.as_ref().map(|uid| Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: version.clone(),
                }),
                ..DeleteParams::background()
            };
            match dynamic_api(client, namespace, resource)
                .delete(name, &params)
                .await
            {
                Ok(_) => {}
                Err(e) if matches!(status_code(&e), Some(404 | 409)) => {
                    tracing::debug!("{what}: already gone (or replaced by another object)");
                    return Ok(Executed::AlreadySo);
                }
                Err(e) => return Err(api_error(what)(e)),
            }
        }
        Op::Evict { name, uid } => {
            let params = PostParams {
                field_manager: Some(field_manager.to_owned()),
                ..PostParams::default()
            };
            // The Eviction built here, not by `Api::evict`, whose body names the field
            // `delete_options`: the API server reads only `deleteOptions`, and would
            // evict without the UID precondition.
            let eviction = eviction(name, namespace, uid);
            let answer = Api::<Pod>::namespaced(client.clone(), namespace)
                .create_subresource::<_, Value>("eviction", name, &params, &eviction)
                .await
                .and_then(|body| failure(&body).map_or(Ok(()), Err));
            match answer {
                Ok(()) => {}
                Err(e) if matches!(status_code(&e), Some(404 | 409)) => {
                    tracing::debug!("{what}: already gone (or replaced by another pod)");
                    return Ok(Executed::AlreadySo);
                }
                Err(e) => return Err(api_error(what)(e)),
            }
        }
        Op::Label {
            resource,
            name,
            labels,
            precondition,
        } => {
            let patch = label_patch(labels, precondition.as_ref());
            match merge_patch(client, namespace, resource, name, field_manager, &patch).await {
                Ok(_) => {}
                // Labels follow the persisted state: whatever replaces a vanished object
                // is labelled when it is observed, so there is nothing to retry.
                Err(e) if status_code(&e) == Some(404) => {
                    tracing::debug!("{what}: gone; its replacement is labelled when observed");
                }
                // A newer version is a 409; another object of the same name (a UID that
                // differs, which the server reports as an immutable field) is a 422.
                Err(e) if precondition.is_some() && precondition_failed(&e) => {
                    tracing::debug!("{what}: replaced or changed since it was read; re-deciding");
                    return Err(Error::Conflict);
                }
                Err(e) => return Err(api_error(what)(e)),
            }
        }
        Op::Patch {
            resource,
            name,
            patch,
            precondition,
        } => {
            let patch = fenced_patch(patch, precondition);
            match merge_patch(client, namespace, resource, name, field_manager, &patch).await {
                Ok(_) => {}
                // Gone, replaced or changed since it was read: the decision was made on
                // a world that no longer is.
                Err(e) if status_code(&e) == Some(404) || precondition_failed(&e) => {
                    tracing::debug!("{what}: gone or changed since it was read; re-deciding");
                    return Err(Error::Conflict);
                }
                Err(e) => return Err(api_error(what)(e)),
            }
        }
    }
    Ok(Executed::Taken)
}

/// The failure a successful answer may carry: the eviction subresource answers some
/// refusals (a pod that more than one PodDisruptionBudget selects) with a `Status` of
/// `Failure` in its body, whatever the HTTP code.
pub(crate) fn failure(body: &Value) -> Option<kube::Error> {
    let is_failure = body.get("kind").and_then(Value::as_str) == Some("Status")
        && body.get("status").and_then(Value::as_str) == Some("Failure");
    let status: kube::core::Status = serde_json::from_value(body.clone())
        .ok()
        .filter(|_| is_failure)?;
    Some(kube::Error::Api(status.boxed()))
}

/// The Eviction of pod `name` in `namespace`, only while it has `uid` (background
/// propagation, as the machines' deletes).
pub(crate) fn eviction(name: &str, namespace: &str, uid: &str) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: Some(meta::Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            propagation_policy: Some("Background".to_owned()),
            ..DeleteOptions::default()
        }),
    }
}

/// `patch` carrying the object's UID and resourceVersion as read (the API server refuses
/// it with a 409 if either changed).
pub(crate) fn fenced_patch(patch: &Value, precondition: &Precondition) -> Value {
    let mut patch = patch.clone();
    if !patch.is_object() {
        patch = json!({});
    }
    if let Some(map) = patch.as_object_mut() {
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("uid".into(), precondition.uid.clone().into());
            meta.insert(
                "resourceVersion".into(),
                precondition.resource_version.clone().into(),
            );
        }
    }
    patch
}

/// Whether a patch carrying a UID and resourceVersion was refused for them.
fn precondition_failed(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            status.code == 409 || (status.code == 422 && status.message.contains("metadata.uid"))
        }
        _ => false,
    }
}

/// The merge patch that sets (`Some`) or removes (`None`) labels, carrying the object's
/// UID and resourceVersion as read when there is a precondition (the API server checks
/// both: a different resourceVersion or UID is a 409).
pub(crate) fn label_patch(
    labels: &BTreeMap<String, Option<String>>,
    precondition: Option<&Precondition>,
) -> Value {
    match precondition {
        Some(p) => json!({ "metadata": {
            "labels": labels,
            "uid": p.uid,
            "resourceVersion": p.resource_version,
        } }),
        None => json!({ "metadata": { "labels": labels } }),
    }
}

/// The object's name, and the object with its namespace set to the owner's.
fn placed(
    object: &DynamicObject,
    namespace: &str,
    what: &str,
) -> Result<(String, DynamicObject), Error> {
    let name = object
        .metadata
        .name
        .clone()
        .ok_or_else(|| Error::Render(format!("{what}: the object has no metadata.name")))?;
    let mut object = object.clone();
    object.metadata.namespace = Some(namespace.to_owned());
    Ok((name, object))
}

/// Map a rejected fenced write to [`Error::Conflict`]: 409 from a resourceVersion
/// mismatch, or 422 from a failed JSON-patch `test`.
fn fenced(what: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| match status_code(&source) {
        Some(409 | 422) => Error::Conflict,
        _ => Error::Api { what, source },
    }
}

/// The JSON patch that adds `finalizer` if the object still has resourceVersion
/// `resource_version`.
pub(crate) fn add_finalizer_patch(
    resource_version: &str,
    existing: &[String],
    finalizer: &str,
) -> Value {
    let add = if existing.is_empty() {
        json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
    } else {
        json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
    };
    json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        add,
    ])
}

/// The JSON patch that removes the finalizer at `index` if the object still has
/// resourceVersion `resource_version` and that entry is still `finalizer`.
pub(crate) fn remove_finalizer_patch(
    resource_version: &str,
    index: usize,
    finalizer: &str,
) -> Value {
    let path = format!("/metadata/finalizers/{index}");
    json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ])
}

fn json_patch(value: Value) -> Result<json_patch::Patch, Error> {
    serde_json::from_value(value).map_err(Error::Serde)
}

/// Add `finalizer` to `object`, fenced on the resourceVersion read.
///
/// # Errors
/// [`Error::Conflict`] if the object changed since it was read; [`Error::Api`] otherwise.
pub async fn add_finalizer<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let rv = object.resource_version().unwrap_or_default();
    let patch = json_patch(add_finalizer_patch(&rv, object.finalizers(), finalizer))?;
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(fenced(format!("add finalizer {finalizer}")))
}

/// Remove `finalizer` from `object`, fenced on the resourceVersion read. Succeeds when
/// the finalizer or the object is already gone.
///
/// # Errors
/// [`Error::Conflict`] if the object changed since it was read; [`Error::Api`] otherwise.
pub async fn remove_finalizer<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(index) = object.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let rv = object.resource_version().unwrap_or_default();
    let patch = json_patch(remove_finalizer_patch(&rv, index, finalizer))?;
    match api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if status_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(fenced(format!("remove finalizer {finalizer}"))(e)),
    }
}

/// Write `patch` (a [`super::status::fenced_status_patch`]) to the status subresource.
/// Returns the object as the server stored it.
///
/// # Errors
/// [`Error::Conflict`] if the object changed since it was read (409); [`Error::Api`]
/// otherwise.
pub async fn write_status<K>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
    field_manager: &str,
) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    };
    api.patch_status(name, &params, &Patch::Merge(patch))
        .await
        .map_err(|source| match status_code(&source) {
            Some(409) => Error::Conflict,
            _ => Error::Api {
                what: "write status".to_owned(),
                source,
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eviction_answered_with_a_failure_status_is_a_failure_with_its_code() {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        });
        let error = failure(&body).expect("a failure");
        assert_eq!(status_code(&error), Some(500));
        let taken = json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201});
        assert!(failure(&taken).is_none());
        assert!(failure(&json!({"kind": "Eviction"})).is_none());
    }

    #[test]
    fn an_eviction_carries_its_uid_precondition_where_the_api_server_reads_it() {
        let body = serde_json::to_value(eviction("db-2", "prod", "u-7")).expect("serializes");
        assert_eq!(body["apiVersion"], "policy/v1");
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["metadata"]["name"], "db-2");
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "u-7");
        assert_eq!(body["deleteOptions"]["propagationPolicy"], "Background");
    }

    #[test]
    fn the_first_finalizer_creates_the_list() {
        let patch = add_finalizer_patch("7", &[], "lockstep.dev/finalizer");
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/metadata/finalizers", "value": ["lockstep.dev/finalizer"]},
            ])
        );
        assert!(json_patch(patch).is_ok());
    }

    #[test]
    fn a_further_finalizer_is_appended() {
        let patch = add_finalizer_patch("7", &["other".to_owned()], "lockstep.dev/finalizer");
        assert_eq!(patch[1]["path"], "/metadata/finalizers/-");
        assert_eq!(patch[1]["value"], "lockstep.dev/finalizer");
    }

    #[test]
    fn removal_tests_both_the_version_and_the_entry() {
        let patch = remove_finalizer_patch("9", 1, "lockstep.dev/finalizer");
        assert_eq!(patch[0]["value"], "9");
        assert_eq!(
            patch[1],
            json!({"op": "test", "path": "/metadata/finalizers/1", "value": "lockstep.dev/finalizer"})
        );
        assert_eq!(
            patch[2],
            json!({"op": "remove", "path": "/metadata/finalizers/1"})
        );
        assert!(json_patch(patch).is_ok());
    }

    #[test]
    fn label_patches_remove_with_null() {
        let labels = BTreeMap::from([
            ("role".to_owned(), Some("primary".to_owned())),
            ("old".to_owned(), None),
        ]);
        assert_eq!(
            label_patch(&labels, None),
            json!({"metadata": {"labels": {"role": "primary", "old": null}}})
        );
    }

    #[test]
    fn a_fenced_patch_keeps_its_metadata_and_adds_the_uid_and_version_read() {
        let read = Precondition {
            uid: "u-1".to_owned(),
            resource_version: "42".to_owned(),
        };
        let patch =
            json!({"metadata": {"annotations": {"a": null}}, "spec": {"holderIdentity": "p/u"}});
        assert_eq!(
            fenced_patch(&patch, &read),
            json!({"metadata": {"annotations": {"a": null}, "uid": "u-1", "resourceVersion": "42"},
                "spec": {"holderIdentity": "p/u"}})
        );
    }

    #[test]
    fn a_fenced_label_patch_names_the_uid_and_version_read() {
        let labels = BTreeMap::from([("role".to_owned(), Some("replica".to_owned()))]);
        let read = Precondition {
            uid: "u-1".to_owned(),
            resource_version: "42".to_owned(),
        };
        assert_eq!(
            label_patch(&labels, Some(&read)),
            json!({"metadata": {"labels": {"role": "replica"},
                "uid": "u-1", "resourceVersion": "42"}})
        );
    }
}
