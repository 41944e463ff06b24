//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces for the
//! persisted state, so that `decide` only sees `in_sync` flags.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::api::DistributedDB;
use super::machine::{Observed, PodView, Requests, Shape, StatefulSetView, VolumeView};
use super::render::{self, CONTAINER, KIND_LABEL, VOLUME};
use crate::driver::Cache;
pub use crate::machines::common::observe::ordinal_of;
use crate::machines::common::observe::{
    cronjob_view, in_sync, job_views, named, pod_image, pod_ready, pods_by_ordinal, template_image,
};

/// The requested size of a StatefulSet's data claim template.
pub fn claim_size(sts: &StatefulSet) -> Option<String> {
    sts.spec
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(VOLUME))?
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

/// What the machine needs to know of a database pod.
pub fn pod_view(pod: &Pod) -> PodView {
    PodView {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        image: pod_image(pod, CONTAINER),
        ready: pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
}

/// Build the observation of `db` from the cache. It does not depend on the machine's
/// state: drift is judged against what would be rendered for the live objects' own
/// image and replicas, and `decide` compares those with what its state wants.
pub fn observe(db: &DistributedDB, cache: &Cache) -> Observed {
    let name = db.name_any();
    let live_sts = named(Cache::owned_by(&cache.statefulsets, db, KIND_LABEL), &name);
    let statefulset = live_sts.as_deref().map(|sts| {
        let image = template_image(sts, CONTAINER);
        let replicas = sts.spec.replicas.unwrap_or(1);
        let claim_size = claim_size(sts);
        // Render for the live object's own image, replicas and claim: whether they are
        // what the state wants is for `decide` to judge.
        let own = Shape {
            image: image.clone().unwrap_or_default(),
            replicas,
            claim_size: claim_size
                .clone()
                .unwrap_or_else(|| db.spec.storage.size.clone()),
        };
        StatefulSetView {
            conforms: image.is_some() && in_sync(Some(sts), render::statefulset(db, &own).ok()),
            image,
            replicas,
            caught_up: sts.status.as_ref().and_then(|s| s.observed_generation)
                >= sts.metadata.generation,
            claim_size,
        }
    });

    let service = named(Cache::owned_by(&cache.services, db, KIND_LABEL), &name);
    let service_in_sync = in_sync(service.as_deref(), render::service(db).ok());

    let pods = pods_by_ordinal(
        &Cache::owned_by(&cache.pods, db, KIND_LABEL),
        &name,
        pod_view,
    );
    let jobs = job_views(&Cache::owned_by(&cache.jobs, db, KIND_LABEL));
    let cronjob = cronjob_view(
        Cache::owned_by(&cache.cronjobs, db, KIND_LABEL),
        &name,
        || {
            db.spec
                .backup_policy
                .as_ref()
                .and_then(|p| render::cronjob(db, p).ok())
        },
    );

    let claim_prefix = format!("{VOLUME}-{name}-");
    let volumes = Cache::owned_by(&cache.pvcs, db, KIND_LABEL)
        .iter()
        .filter_map(|pvc| {
            let ordinal = pvc.name_any().strip_prefix(&claim_prefix)?.parse().ok()?;
            let requested = pvc
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.clone());
            Some((ordinal, VolumeView { requested }))
        })
        .collect();

    Observed {
        name,
        service_in_sync,
        statefulset,
        pods,
        jobs,
        cronjob,
        volumes,
        requests: Requests::from_annotations(db.annotations()),
    }
}
