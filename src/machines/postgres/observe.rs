//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces, so that `decide`
//! only sees `in_sync` flags.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::api::PostgresCluster;
use super::machine::{InSync, Observed, PodView, Requests, Role, ServiceKind, StatefulSetView};
use super::render::{self, CONTAINER, KIND_LABEL, ROLE_LABEL};
use crate::driver::Cache;
pub use crate::machines::common::observe::ordinal_of;
use crate::machines::common::observe::{
    cronjob_view, in_sync, job_views, named, pod_image, pod_ready, pods_by_ordinal, template_image,
};

/// What the machine needs to know of a PostgreSQL pod.
pub fn pod_view(pod: &Pod) -> PodView {
    PodView {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        image: pod_image(pod, CONTAINER),
        ready: pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        role: pod
            .labels()
            .get(ROLE_LABEL)
            .and_then(|r| r.parse::<Role>().ok()),
    }
}

/// Build the observation of `pg` from the cache. It does not depend on the machine's
/// state: the StatefulSet is judged against what would be rendered for its own image and
/// replicas, and `decide` compares those with what its state wants.
pub fn observe(pg: &PostgresCluster, cache: &Cache) -> Observed {
    let name = pg.name_any();
    let statefulset =
        named(Cache::owned_by(&cache.statefulsets, pg, KIND_LABEL), &name).map(|sts| {
            let image = template_image(&sts, CONTAINER);
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

    let pods = pods_by_ordinal(
        &Cache::owned_by(&cache.pods, pg, KIND_LABEL),
        &name,
        pod_view,
    );
    let jobs = job_views(&Cache::owned_by(&cache.jobs, pg, KIND_LABEL));
    let cronjob = cronjob_view(
        Cache::owned_by(&cache.cronjobs, pg, KIND_LABEL),
        &name,
        || render::cronjob(pg).ok().flatten(),
    );

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
