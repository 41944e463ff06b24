//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces, so that `decide`
//! only sees `in_sync` flags.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::api::PostgresCluster;
use super::machine::{
    CronJobView, InSync, Observed, PodView, Requests, Role, ServiceKind, StatefulSetView,
};
use super::render::{self, CONTAINER, KIND_LABEL, ROLE_LABEL};
use crate::driver::Cache;
use crate::machines::common::backup::cronjob_name;
use crate::machines::common::jobs;
use crate::machines::common::subset::typed_contains;

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

/// What the machine needs to know of a PostgreSQL pod.
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
        role: pod
            .labels()
            .get(ROLE_LABEL)
            .and_then(|r| r.parse::<Role>().ok()),
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

fn in_sync<T: serde::Serialize>(live: Option<&T>, desired: Option<T>) -> bool {
    match (live, desired) {
        (Some(live), Some(desired)) => typed_contains(live, &desired).unwrap_or(false),
        _ => false,
    }
}

fn named<K: kube::Resource>(
    objects: Vec<std::sync::Arc<K>>,
    name: &str,
) -> Option<std::sync::Arc<K>> {
    objects
        .into_iter()
        .find(|o| o.meta().name.as_deref() == Some(name))
}

/// Build the observation of `pg` from the cache. It does not depend on the machine's
/// state: the StatefulSet is judged against what would be rendered for its own image and
/// replicas, and `decide` compares those with what its state wants.
pub fn observe(pg: &PostgresCluster, cache: &Cache) -> Observed {
    let name = pg.name_any();
    let statefulset =
        named(Cache::owned_by(&cache.statefulsets, pg, KIND_LABEL), &name).map(|sts| {
            let image = template_image(&sts);
            let replicas = sts.spec.replicas.unwrap_or(1);
            let own = image
                .as_deref()
                .and_then(|i| render::statefulset(pg, i, replicas).ok());
            StatefulSetView {
                conforms: in_sync(Some(sts.as_ref()), own),
                image,
                replicas,
                caught_up: sts.status.as_ref().and_then(|s| s.observed_generation)
                    >= sts.metadata.generation,
            }
        });

    let services = Cache::owned_by(&cache.services, pg, KIND_LABEL);
    let service_in_sync = |kind: ServiceKind| {
        let live = services
            .iter()
            .find(|s| s.name_any() == render::service_name(pg, kind));
        in_sync(live.map(|s| s.as_ref()), render::service(pg, kind).ok())
    };
    let scripts = named(
        Cache::owned_by(&cache.configmaps, pg, KIND_LABEL),
        &render::scripts_name(pg),
    );
    let pdb = named(Cache::owned_by(&cache.pdbs, pg, KIND_LABEL), &name);
    let in_sync_flags = InSync {
        scripts: in_sync(scripts.as_deref(), render::scripts(pg).ok()),
        headless: service_in_sync(ServiceKind::Headless),
        read_write: service_in_sync(ServiceKind::ReadWrite),
        read_only: service_in_sync(ServiceKind::ReadOnly),
        pdb: in_sync(pdb.as_deref(), render::pdb(pg).ok()),
    };

    let pods: BTreeMap<i32, PodView> = Cache::owned_by(&cache.pods, pg, KIND_LABEL)
        .iter()
        .filter_map(|p| Some((ordinal_of(p, &name)?, pod_view(p))))
        .collect();

    let mut jobs: Vec<_> = Cache::owned_by(&cache.jobs, pg, KIND_LABEL)
        .iter()
        .map(|j| jobs::view(j))
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));

    let cronjob = named(
        Cache::owned_by(&cache.cronjobs, pg, KIND_LABEL),
        &cronjob_name(&name),
    )
    .map(|live| CronJobView {
        uid: live.uid().unwrap_or_default(),
        in_sync: in_sync(Some(live.as_ref()), render::cronjob(pg).ok().flatten()),
    });

    Observed {
        name,
        in_sync: in_sync_flags,
        statefulset,
        pods,
        jobs,
        cronjob,
        requests: Requests::from_annotations(pg.annotations()),
    }
}
