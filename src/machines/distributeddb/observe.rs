//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces for the
//! persisted state, so that `decide` only sees `in_sync` flags.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;

use super::actions::Shape;
use super::api::DistributedDB;
use super::render::{self, CONTAINER, KIND_LABEL, VOLUME};
use crate::driver::Cache;
use crate::machines::common::annotations::{self, RETRY_HOOK, SKIP_HOOK};
use crate::machines::common::observe::{self as common, Reading};
pub use crate::machines::common::observe::{CronJobView, Requests, StatefulSetView, ordinal_of};

/// Everything the machine sees of the world.
pub type Observed = common::Observed<(), Own>;

/// A database pod as observed (DistributedDB pods have no roles).
pub type PodView = common::PodView;

/// A pod's volume claim as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeView {
    /// `spec.resources.requests.storage`.
    pub requested: Option<String>,
}

/// What the user asked of DistributedDB alone through annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookRequests {
    /// [`annotations::RETRY_HOOK`].
    pub retry_hook: Option<String>,
    /// [`annotations::SKIP_HOOK`].
    pub skip_hook: Option<String>,
}

impl HookRequests {
    /// Read the requests from an object's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        HookRequests {
            retry_hook: annotations::token(a, RETRY_HOOK),
            skip_hook: annotations::token(a, SKIP_HOOK),
        }
    }
}

/// What only DistributedDB observes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    /// The headless Service rendered for the spec is contained in the live one.
    pub service_in_sync: bool,
    /// The StatefulSet's volume claim template's requested size, if it exists.
    pub claim_size: Option<String>,
    /// Volume claims by ordinal.
    pub volumes: BTreeMap<i32, VolumeView>,
    /// The hook requests.
    pub requests: HookRequests,
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

/// Build the observation of `db` from the cache. It does not depend on the machine's
/// state: drift is judged against what would be rendered for the live objects' own
/// image and replicas, and `decide` compares those with what its state wants.
pub fn observe(db: &DistributedDB, cache: &Cache) -> Observed {
    let read = Reading {
        owner: db,
        cache,
        kind_label: KIND_LABEL,
        container: CONTAINER,
    };
    let name = db.name_any();
    let live_sts = read.named(&cache.statefulsets, &name);
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

    let service = read.named(&cache.services, &name);
    let service_in_sync = common::in_sync(service.as_deref(), render::service(db).ok());

    let claim_prefix = format!("{VOLUME}-{name}-");
    let volumes = read
        .owned(&cache.pvcs)
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

    let own = Own {
        service_in_sync,
        claim_size: claim,
        volumes,
        requests: HookRequests::from_annotations(db.annotations()),
    };
    read.observed(
        statefulset,
        |_| (),
        || {
            db.spec
                .backup_policy
                .as_ref()
                .and_then(|p| render::cronjob(db, p).ok())
        },
        own,
    )
}
