//! Observation: the machine's [`Observed`] snapshot, built purely from the driver's
//! reflector stores and the custom resource itself.
//!
//! Drift is judged here, against the objects [`super::render`] produces for the
//! persisted state, so that `decide` only sees `in_sync` flags.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use super::actions::Shape;
use super::api::DistributedDB;
use super::render::{self, CONTAINER, KIND_LABEL, VOLUME};
use super::tls;
use crate::driver::Cache;
use crate::machines::common::annotations::{self, RETRY_HOOK, SKIP_HOOK};
use crate::machines::common::observe::{self as common, Reading};
pub use crate::machines::common::observe::{CronJobView, Requests, StatefulSetView, ordinal_of};
use crate::machines::common::quantity;
use crate::machines::common::tls::CertificatesView;

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
    /// The PodDisruptionBudget rendered for the spec is contained in the live one.
    pub pdb_in_sync: bool,
    /// The data volumes.
    pub volumes: Volumes,
    /// The hook requests.
    pub requests: HookRequests,
    /// The certificates Lockstep issued (`<name>-tls`), if it issues them and the
    /// Secret exists.
    pub certificates: Option<CertificatesView>,
}

/// The data volumes as observed: the size the StatefulSet's claim template asks for and
/// the claims made from it. Claims grow one by one
/// ([`super::actions::DdbAction::ExpandVolume`]), never through the template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Volumes {
    /// The StatefulSet's volume claim template's requested size, if it exists.
    pub template_size: Option<String>,
    /// Volume claims by ordinal.
    pub claims: BTreeMap<i32, VolumeView>,
}

impl Volumes {
    /// Read the claim template of the live StatefulSet `sts` and the owned `claims` of
    /// the DistributedDB called `name`.
    pub fn observe(
        sts: Option<&StatefulSet>,
        claims: &[Arc<PersistentVolumeClaim>],
        name: &str,
    ) -> Self {
        let prefix = format!("{VOLUME}-{name}-");
        let claims = claims
            .iter()
            .filter_map(|pvc| {
                let ordinal = pvc.name_any().strip_prefix(&prefix)?.parse().ok()?;
                let requested = pvc
                    .spec
                    .as_ref()
                    .and_then(|s| s.resources.as_ref())
                    .and_then(|r| storage_request(r.requests.as_ref()));
                Some((ordinal, VolumeView { requested }))
            })
            .collect();
        Volumes {
            template_size: sts.and_then(template_size),
            claims,
        }
    }

    /// Whether no claim exists.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// The size the StatefulSet's claim template holds: the live one's, or `spec_size`
    /// before there is one.
    pub fn template_size_or<'a>(&'a self, spec_size: &'a str) -> &'a str {
        self.template_size.as_deref().unwrap_or(spec_size)
    }

    /// The ordinals below `replicas` whose claims ask for less than `size`.
    pub fn smaller_than(&self, size: &str, replicas: i32) -> impl Iterator<Item = i32> {
        self.claims.iter().filter_map(move |(k, v)| {
            let smaller = v
                .requested
                .as_deref()
                .is_some_and(|r| quantity::compare(r, size) == Some(Ordering::Less));
            (*k < replicas && smaller).then_some(*k)
        })
    }
}

/// The requested size of a StatefulSet's data claim template.
fn template_size(sts: &StatefulSet) -> Option<String> {
    let template = sts
        .spec
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(VOLUME))?;
    storage_request(
        template
            .spec
            .as_ref()?
            .resources
            .as_ref()?
            .requests
            .as_ref(),
    )
}

/// The `storage` of a claim's resource requests.
fn storage_request(requests: Option<&BTreeMap<String, Quantity>>) -> Option<String> {
    requests?.get("storage").map(|q| q.0.clone())
}

/// Build the observation of `db` from the cache. It does not depend on the machine's
/// state: drift is judged against what would be rendered for the live objects' own
/// image and replicas, and `decide` compares those with what its state wants.
pub fn observe(db: &DistributedDB, cache: &Cache) -> Observed {
    let read = Reading::new(db, cache, KIND_LABEL, CONTAINER);
    let name = db.name_any();
    let live_sts = read.named(&cache.statefulsets, &name);
    let volumes = Volumes::observe(live_sts.as_deref(), &read.owned(&cache.pvcs), &name);
    let statefulset = live_sts.as_deref().map(|sts| {
        // Rendered for the live object's own image, replicas and claim: whether they
        // are what the state wants is for `decide` to judge.
        StatefulSetView::of(sts, CONTAINER, |image, replicas| {
            let own = Shape {
                image: image.to_owned(),
                replicas,
                claim_size: volumes.template_size_or(&db.spec.storage.size).to_owned(),
            };
            common::in_sync(Some(sts), render::statefulset(db, &own).ok())
        })
    });

    let service = read.named(&cache.services, &name);
    let service_in_sync = common::in_sync(service.as_deref(), render::service(db).ok());

    let pdb = read.named(&cache.pdbs, &name);
    let own = Own {
        service_in_sync,
        pdb_in_sync: common::in_sync(pdb.as_deref(), render::pdb(db).ok()),
        volumes,
        requests: HookRequests::from_annotations(db.annotations()),
        certificates: tls::issues(&db.spec)
            .then(|| read.named(&cache.secrets, &tls::issued_name(db)))
            .flatten()
            .map(|s| CertificatesView::of(&s)),
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
