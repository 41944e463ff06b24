//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces for the
//! persisted state, so that `decide` only sees `in_sync` flags.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::actions::Shape;
use super::api::DistributedDB;
use super::render::{self, CONTAINER, KIND_LABEL, VOLUME};
use crate::driver::Cache;
use crate::machines::common::annotations::{self, RETRY_HOOK, SKIP_HOOK};
use crate::machines::common::jobs::{self, JobView};
use crate::machines::common::observe as common;
pub use crate::machines::common::observe::ordinal_of;
use crate::machines::common::replace::Seen;

pub use crate::machines::common::observe::StatefulSetView;

/// A database pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Its UID.
    pub uid: String,
    /// The database container's image.
    pub image: Option<String>,
    /// The Ready condition holds.
    pub ready: bool,
    /// It has a deletion timestamp.
    pub terminating: bool,
    /// Its creation timestamp: how long a replacement has been starting.
    pub created: Option<DateTime<Utc>>,
}

impl PodView {
    /// As a replacement sees it.
    pub fn seen(&self) -> Seen<'_> {
        Seen {
            uid: &self.uid,
            image: self.image.as_deref(),
            ready: self.ready,
            terminating: self.terminating,
        }
    }
}

pub use crate::machines::common::observe::CronJobView;

/// A pod's volume claim as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeView {
    /// `spec.resources.requests.storage`.
    pub requested: Option<String>,
}

/// What the user asked for through annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// [`annotations::BACKUP_NOW`].
    pub backup_now: Option<String>,
    /// [`annotations::SKIP_FINAL_BACKUP`].
    pub skip_final_backup: bool,
    /// [`annotations::RETRY_HOOK`].
    pub retry_hook: Option<String>,
    /// [`annotations::SKIP_HOOK`].
    pub skip_hook: Option<String>,
}

impl Requests {
    /// Read the requests from an object's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        Requests {
            backup_now: annotations::token(a, annotations::BACKUP_NOW),
            skip_final_backup: annotations::flag(a, annotations::SKIP_FINAL_BACKUP),
            retry_hook: annotations::token(a, RETRY_HOOK),
            skip_hook: annotations::token(a, SKIP_HOOK),
        }
    }
}

/// Everything the machine sees of the world.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The custom resource's name (pods are `<name>-<ordinal>`).
    pub name: String,
    /// The headless Service rendered for the spec is contained in the live one.
    pub service_in_sync: bool,
    /// The StatefulSet, if it exists.
    pub statefulset: Option<StatefulSetView>,
    /// The StatefulSet's volume claim template's requested size, if it exists.
    pub claim_size: Option<String>,
    /// Database pods by ordinal.
    pub pods: BTreeMap<i32, PodView>,
    /// Owned Jobs (hooks, backups).
    pub jobs: Vec<JobView>,
    /// The scheduled-backup CronJob, if it exists.
    pub cronjob: Option<CronJobView>,
    /// Volume claims by ordinal.
    pub volumes: BTreeMap<i32, VolumeView>,
    /// Annotation requests.
    pub requests: Requests,
}

impl Observed {
    /// The run-once Job with `key`.
    pub fn job(&self, key: &str) -> Option<&JobView> {
        common::job_by_key(&self.jobs, key)
    }

    /// `<name>-<ordinal>`.
    pub fn pod_name(&self, ordinal: i32) -> String {
        common::pod_name(&self.name, ordinal)
    }

    /// The pods at `ordinals`, comma-separated, for messages.
    pub(super) fn pod_names(&self, ordinals: &[i32]) -> String {
        common::pod_names(&self.name, ordinals)
    }
}

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
        image: common::pod_image(pod, CONTAINER),
        ready: common::pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        created: pod.metadata.creation_timestamp.as_ref().map(jobs::time),
    }
}

/// Build the observation of `db` from the cache. It does not depend on the machine's
/// state: drift is judged against what would be rendered for the live objects' own
/// image and replicas, and `decide` compares those with what its state wants.
pub fn observe(db: &DistributedDB, cache: &Cache) -> Observed {
    let name = db.name_any();
    let live_sts = common::named(Cache::owned_by(&cache.statefulsets, db, KIND_LABEL), &name);
    let claim = live_sts.as_deref().and_then(claim_size);
    let statefulset = live_sts.as_deref().map(|sts| {
        // Rendered for the live object's own image, replicas and claim: whether they
        // are what the state wants is for `decide` to judge.
        StatefulSetView::of(sts, CONTAINER, |image, replicas| {
            let own = Shape {
                image: image.to_owned(),
                replicas,
                claim_size: claim
                    .clone()
                    .unwrap_or_else(|| db.spec.storage.size.clone()),
            };
            common::in_sync(Some(sts), render::statefulset(db, &own).ok())
        })
    });

    let service = common::named(Cache::owned_by(&cache.services, db, KIND_LABEL), &name);
    let service_in_sync = common::in_sync(service.as_deref(), render::service(db).ok());

    let pods = common::pods_by_ordinal(
        &Cache::owned_by(&cache.pods, db, KIND_LABEL),
        &name,
        pod_view,
    );
    let jobs = common::job_views(&Cache::owned_by(&cache.jobs, db, KIND_LABEL));
    let cronjob = common::cronjob_view(
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
        claim_size: claim,
        pods,
        jobs,
        cronjob,
        volumes,
        requests: Requests::from_annotations(db.annotations()),
    }
}
