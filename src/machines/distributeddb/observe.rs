//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces for the
//! persisted state, so that `decide` only sees `in_sync` flags.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::api::DistributedDB;
use super::machine::{
    CronJobView, Observed, PodView, Requests, Shape, StatefulSetView, VolumeView,
};
use super::render::{self, CONTAINER, KIND_LABEL, VOLUME};
use crate::driver::Cache;
use crate::machines::common::backup::cronjob_name;
use crate::machines::common::jobs;
use crate::machines::common::subset::typed_contains;

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

fn template_image(sts: &StatefulSet) -> Option<String> {
    sts.spec
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .image
        .clone()
}

/// What the machine needs to know of a database pod.
pub fn pod_view(pod: &Pod) -> PodView {
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.image.clone());
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    PodView {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        image,
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
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

fn in_sync<T: serde::Serialize>(live: &T, desired: Option<T>) -> bool {
    desired.is_some_and(|d| typed_contains(live, &d).unwrap_or(false))
}

/// Build the observation of `db` from the cache. It does not depend on the machine's
/// state: drift is judged against what would be rendered for the live objects' own
/// image and replicas, and `decide` compares those with what its state wants.
pub fn observe(db: &DistributedDB, cache: &Cache) -> Observed {
    let name = db.name_any();
    let live_sts = Cache::owned_by(&cache.statefulsets, db, KIND_LABEL)
        .into_iter()
        .find(|s| s.name_any() == name);
    let statefulset = live_sts.as_deref().map(|sts| {
        let image = template_image(sts);
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
            conforms: image.is_some() && in_sync(sts, render::statefulset(db, &own).ok()),
            image,
            replicas,
            caught_up: sts.status.as_ref().and_then(|s| s.observed_generation)
                >= sts.metadata.generation,
            claim_size,
        }
    });

    let service_in_sync = Cache::owned_by(&cache.services, db, KIND_LABEL)
        .into_iter()
        .find(|s| s.name_any() == name)
        .is_some_and(|svc| in_sync(svc.as_ref(), render::service(db).ok()));

    let pods: BTreeMap<i32, PodView> = Cache::owned_by(&cache.pods, db, KIND_LABEL)
        .iter()
        .filter_map(|p| Some((ordinal_of(p, &name)?, pod_view(p))))
        .collect();

    let mut jobs: Vec<_> = Cache::owned_by(&cache.jobs, db, KIND_LABEL)
        .iter()
        .map(|j| jobs::view(j))
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));

    let cron_name = cronjob_name(&name);
    let cronjob = Cache::owned_by(&cache.cronjobs, db, KIND_LABEL)
        .into_iter()
        .find(|c| c.name_any() == cron_name)
        .map(|live| CronJobView {
            uid: live.uid().unwrap_or_default(),
            in_sync: in_sync(
                live.as_ref(),
                db.spec
                    .backup_policy
                    .as_ref()
                    .and_then(|p| render::cronjob(db, p).ok()),
            ),
        });

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
