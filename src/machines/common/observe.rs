//! Reading what every machine observes the same way: the pods of its StatefulSet, their
//! images and readiness, its run-once Jobs, its backup CronJob, and the drift check of a
//! live object against its rendering.
//!
//! # Guarantees
//! - Pure: everything here reads typed objects taken from the reflector stores.
//! - An object is in sync only if it exists, its rendering succeeded and the live object
//!   contains the rendering ([`super::subset`]); anything else counts as drift.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};
use serde::Serialize;

use super::backup::cronjob_name;
use super::jobs::{self, JobView};
use super::subset::typed_contains;

/// The scheduled-backup CronJob as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJobView {
    /// Its UID.
    pub uid: String,
    /// The rendered CronJob is contained in the live one.
    pub in_sync: bool,
}

/// A machine's StatefulSet as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatefulSetView {
    /// The live object contains what Lockstep renders for its own image and replicas
    /// (and anything else of its own the machine renders it with): nothing else
    /// drifted. Whether image and replicas are what the state wants is
    /// [`StatefulSetView::holds`].
    pub conforms: bool,
    /// The template's image of the machine's container.
    pub image: Option<String>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.observedGeneration` has reached `metadata.generation`: the StatefulSet
    /// controller acts on the current template.
    pub caught_up: bool,
}

impl StatefulSetView {
    /// `sts` as observed, reading the image of its `container`; `conforms` says whether
    /// it contains what would be rendered for its own image and replicas.
    pub fn of(
        sts: &StatefulSet,
        container: &str,
        conforms: impl FnOnce(&str, i32) -> bool,
    ) -> Self {
        let image = template_image(sts, container);
        let replicas = sts.spec.replicas.unwrap_or(1);
        StatefulSetView {
            conforms: image.as_deref().is_some_and(|i| conforms(i, replicas)),
            image,
            replicas,
            caught_up: sts.status.as_ref().and_then(|s| s.observed_generation)
                >= sts.metadata.generation,
        }
    }

    /// Whether the live StatefulSet is exactly what Lockstep renders for `image` and
    /// `replicas`.
    pub fn holds(&self, image: &str, replicas: i32) -> bool {
        self.conforms && self.image.as_deref() == Some(image) && self.replicas == replicas
    }

    /// Whether the controller already acts on (recreates pods from) a template holding
    /// `image`.
    pub fn serves(&self, image: &str) -> bool {
        self.conforms && self.caught_up && self.image.as_deref() == Some(image)
    }
}

/// Whether `live` exists and contains `desired` (which rendered).
pub fn in_sync<T: Serialize>(live: Option<&T>, desired: Option<T>) -> bool {
    match (live, desired) {
        (Some(live), Some(desired)) => typed_contains(live, &desired).unwrap_or(false),
        _ => false,
    }
}

/// The object called `name` among `objects`.
pub fn named<K: Resource>(objects: Vec<Arc<K>>, name: &str) -> Option<Arc<K>> {
    objects
        .into_iter()
        .find(|o| o.meta().name.as_deref() == Some(name))
}

/// The image of the StatefulSet's pod template's `container`.
pub fn template_image(sts: &StatefulSet, container: &str) -> Option<String> {
    sts.spec
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == container)?
        .image
        .clone()
}

/// The image of the pod's `container`.
pub fn pod_image(pod: &Pod, container: &str) -> Option<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == container))
        .and_then(|c| c.image.clone())
}

/// Whether the pod's Ready condition holds.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The ordinal of a pod of StatefulSet `sts` (by its owner reference and name).
pub fn ordinal_of(pod: &Pod, sts: &str) -> Option<i32> {
    let owned = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "StatefulSet" && o.name == sts);
    if !owned {
        return None;
    }
    pod.name_any()
        .strip_prefix(&format!("{sts}-"))?
        .parse()
        .ok()
}

/// The pods of StatefulSet `sts` among `pods`, by ordinal, as `view` sees them.
pub fn pods_by_ordinal<V>(
    pods: &[Arc<Pod>],
    sts: &str,
    view: impl Fn(&Pod) -> V,
) -> BTreeMap<i32, V> {
    pods.iter()
        .filter_map(|p| Some((ordinal_of(p, sts)?, view(p))))
        .collect()
}

/// The views of `jobs`, sorted by name.
pub fn job_views(jobs: &[Arc<Job>]) -> Vec<JobView> {
    let mut views: Vec<_> = jobs.iter().map(|j| jobs::view(j)).collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

/// The backup CronJob of `owner` among `cronjobs`, checked against `desired` (rendered
/// only if the CronJob exists).
pub fn cronjob_view(
    cronjobs: Vec<Arc<CronJob>>,
    owner: &str,
    desired: impl FnOnce() -> Option<CronJob>,
) -> Option<CronJobView> {
    named(cronjobs, &cronjob_name(owner)).map(|live| CronJobView {
        uid: live.uid().unwrap_or_default(),
        in_sync: in_sync(Some(live.as_ref()), desired()),
    })
}

/// The run-once Job with `key` among `jobs`.
pub fn job_by_key<'a>(jobs: &'a [JobView], key: &str) -> Option<&'a JobView> {
    jobs.iter().find(|j| j.key.as_deref() == Some(key))
}

/// The pod at `ordinal` of the StatefulSet `name`: `<name>-<ordinal>`.
pub fn pod_name(name: &str, ordinal: i32) -> String {
    format!("{name}-{ordinal}")
}

/// The pods at `ordinals`, comma-separated, for messages.
pub fn pod_names(name: &str, ordinals: &[i32]) -> String {
    ordinals
        .iter()
        .map(|k| pod_name(name, *k))
        .collect::<Vec<_>>()
        .join(", ")
}
