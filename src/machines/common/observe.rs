//! Reading what every machine observes the same way: the pods of its StatefulSet, their
//! images and readiness, its run-once Jobs, its backup CronJob, the backup requests, and
//! the drift check of a live object against its rendering. A machine's observation is an
//! [`Observed`] whose `own` part holds what only that machine reads.
//!
//! # Guarantees
//! - Pure: everything here reads typed objects taken from the reflector stores.
//! - An object is in sync only if it exists, its rendering succeeded and the live object
//!   contains the rendering ([`super::subset`]); anything else counts as drift.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};
use serde::Serialize;

use super::annotations;
use super::backup::cronjob_name;
use super::jobs::{self, JobView};
use super::subset::typed_contains;
use crate::driver::{Cache, Owned, Project};

/// Everything a machine sees of the world: the parts every machine observes the same
/// way, its pods' role labels read as `R` (`()` for a machine whose pods have none), and
/// what only that machine observes, `M`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed<R, M> {
    /// The custom resource's name (pods are `<name>-<ordinal>`).
    pub name: String,
    /// The StatefulSet, if it exists.
    pub statefulset: Option<StatefulSetView>,
    /// The StatefulSet's pods by ordinal.
    pub pods: BTreeMap<i32, PodView<R>>,
    /// Owned run-once Jobs (backups, and the machine's own), sorted by name.
    pub jobs: Vec<JobView>,
    /// The scheduled-backup CronJob, if it exists.
    pub cronjob: Option<CronJobView>,
    /// The backup requests made through annotations.
    pub requests: Requests,
    /// What only this machine observes.
    pub own: M,
}

impl<R, M> Observed<R, M> {
    /// The run-once Job with `key`.
    pub fn job(&self, key: &str) -> Option<&JobView> {
        job_by_key(&self.jobs, key)
    }

    /// `<name>-<ordinal>`.
    pub fn pod_name(&self, ordinal: i32) -> String {
        pod_name(&self.name, ordinal)
    }

    /// The pods at `ordinals`, comma-separated, for messages.
    pub fn pod_names(&self, ordinals: &[i32]) -> String {
        pod_names(&self.name, ordinals)
    }
}

/// A pod of a machine's StatefulSet as observed, its role label read as `R`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView<R = ()> {
    /// Its UID.
    pub uid: String,
    /// The machine's container's image.
    pub image: Option<String>,
    /// The Ready condition holds.
    pub ready: bool,
    /// It has a deletion timestamp.
    pub terminating: bool,
    /// Its creation timestamp: how long a replacement has been starting.
    pub created: Option<DateTime<Utc>>,
    /// Its `metadata.resourceVersion` as read, for writes fenced on the pod as observed.
    pub version: String,
    /// Its role label as the machine reads it.
    pub role: R,
}

impl<R> PodView<R> {
    /// What the machine needs to know of `pod`, whose `container` runs the machine's
    /// image, with its role label read as `role`.
    pub fn of(pod: &Pod, container: &str, role: R) -> Self {
        PodView {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            image: pod_image(pod, container),
            ready: pod_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            created: pod.metadata.creation_timestamp.as_ref().map(jobs::time),
            version: pod.metadata.resource_version.clone().unwrap_or_default(),
            role,
        }
    }

    /// Ready and not terminating.
    pub fn serving(&self) -> bool {
        self.ready && !self.terminating
    }
}

/// The backup requests every machine takes through annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// [`annotations::BACKUP_NOW`].
    pub backup_now: Option<String>,
    /// [`annotations::SKIP_FINAL_BACKUP`].
    pub skip_final_backup: bool,
}

impl Requests {
    /// Read the requests from an object's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        Requests {
            backup_now: annotations::token(a, annotations::BACKUP_NOW),
            skip_final_backup: annotations::flag(a, annotations::SKIP_FINAL_BACKUP),
        }
    }
}

/// How a machine reads, from the driver's cache, the objects its custom resource owns.
#[derive(Clone, Copy)]
pub struct Reading<'a, K> {
    /// The custom resource.
    pub owner: &'a K,
    /// The driver's cache.
    pub cache: &'a Cache,
    /// The machine's kind label, which its owned objects carry.
    pub kind_label: &'a str,
    /// The container of the StatefulSet's pods that runs the machine's image.
    pub container: &'a str,
}

impl<'a, K: Resource<DynamicType = ()>> Reading<'a, K> {
    /// How `owner`'s objects are read from `cache`: those carrying `kind_label`, with
    /// the machine's image in the pods' container `container`.
    pub fn new(owner: &'a K, cache: &'a Cache, kind_label: &'a str, container: &'a str) -> Self {
        Reading {
            owner,
            cache,
            kind_label,
            container,
        }
    }

    /// The objects of `store` the owner owns.
    pub fn owned<T: Project>(&self, store: &Owned<T>) -> Vec<Arc<T>> {
        Cache::owned_by(store, self.owner, self.kind_label)
    }

    /// The object of `store` called `name` the owner owns.
    pub fn named<T: Project>(&self, store: &Owned<T>, name: &str) -> Option<Arc<T>> {
        named(self.owned(store), name)
    }

    /// The observation: `statefulset` as the machine judged it, the pods with their role
    /// labels read by `role`, the Jobs, the backup CronJob checked against `cronjob`
    /// (rendered only if it exists), the backup requests, and the machine's `own` part.
    pub fn observed<R, M>(
        &self,
        statefulset: Option<StatefulSetView>,
        role: impl Fn(&Pod) -> R,
        cronjob: impl FnOnce() -> Option<CronJob>,
        own: M,
    ) -> Observed<R, M> {
        let name = self.owner.name_any();
        let pods = pods_by_ordinal(&self.owned(&self.cache.pods), &name, |p| {
            PodView::of(p, self.container, role(p))
        });
        Observed {
            statefulset,
            pods,
            jobs: job_views(&self.owned(&self.cache.jobs)),
            cronjob: cronjob_view(self.owned(&self.cache.cronjobs), &name, cronjob),
            requests: Requests::from_annotations(self.owner.annotations()),
            own,
            name,
        }
    }
}

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
fn pods_by_ordinal<V>(pods: &[Arc<Pod>], sts: &str, view: impl Fn(&Pod) -> V) -> BTreeMap<i32, V> {
    pods.iter()
        .filter_map(|p| Some((ordinal_of(p, sts)?, view(p))))
        .collect()
}

/// The views of `jobs`, sorted by name.
fn job_views(jobs: &[Arc<Job>]) -> Vec<JobView> {
    let mut views: Vec<_> = jobs.iter().map(|j| jobs::view(j)).collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    views
}

/// The backup CronJob of `owner` among `cronjobs`, checked against `desired` (rendered
/// only if the CronJob exists).
fn cronjob_view(
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
