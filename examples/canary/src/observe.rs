//! What the machine sees of the cluster: the two StatefulSets, their pods and the
//! Service, read from the driver's cache (no request).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use lockstep::driver::Cache;

use crate::api::{CanaryApp, Template};
use crate::render::{COMPONENT, CONTAINER, KIND_LABEL, Track, VERSION};

// ANCHOR: observed
/// The observed world of one `CanaryApp`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// The stable StatefulSet.
    pub stable: Option<SetView>,
    /// The canary StatefulSet.
    pub canary: Option<SetView>,
    /// The pods of both.
    pub pods: Vec<PodView>,
    /// Whether the Service exists.
    pub service: bool,
}

/// A StatefulSet as the machine reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetView {
    /// Its UID (the canary is deleted only if it is still this object).
    pub uid: String,
    /// The template its pods are made from.
    pub template: Template,
    /// Its replicas.
    pub replicas: i32,
}

/// A pod as the machine reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Stable or canary.
    pub track: Track,
    /// The revision it was made from.
    pub revision: String,
    /// Whether its Ready condition is True.
    pub ready: bool,
    /// Whether it is being deleted.
    pub terminating: bool,
}
// ANCHOR_END: observed

impl Observed {
    /// The pods of `track` at `revision` that are not being deleted.
    pub fn pods_at<'a>(
        &'a self,
        track: Track,
        revision: &'a str,
    ) -> impl Iterator<Item = &'a PodView> + 'a {
        self.pods
            .iter()
            .filter(move |p| p.track == track && p.revision == revision && !p.terminating)
    }

    /// Whether the stable set runs `template` with `replicas` pods, all Ready, and no
    /// stable pod of another revision is left.
    pub fn stable_at_rest(&self, template: &Template, replicas: i32) -> bool {
        let revision = template.revision();
        let set_matches = self
            .stable
            .as_ref()
            .is_some_and(|s| s.template == *template && s.replicas == replicas);
        let ready = self.pods_at(Track::Stable, &revision).filter(|p| p.ready);
        let strays = self
            .pods
            .iter()
            .filter(|p| p.track == Track::Stable && p.revision != revision);
        set_matches
            && usize::try_from(replicas).is_ok_and(|n| ready.count() == n)
            && strays.count() == 0
    }

    /// Whether anything of a canary is left: its StatefulSet or a pod.
    pub fn canary_left(&self) -> bool {
        self.canary.is_some() || self.pods.iter().any(|p| p.track == Track::Canary)
    }
}

// ANCHOR: observe
/// Read the world of `app` from the cache.
pub fn observe(app: &CanaryApp, cache: &Cache) -> Observed {
    let sets = Cache::owned_by(&cache.statefulsets, app, KIND_LABEL);
    let set = |track: Track| {
        sets.iter()
            .find(|s| track_of(s.labels()) == Some(track))
            .and_then(|s| set_view(s))
    };
    Observed {
        stable: set(Track::Stable),
        canary: set(Track::Canary),
        pods: Cache::owned_by(&cache.pods, app, KIND_LABEL)
            .iter()
            .filter_map(|p| pod_view(p))
            .collect(),
        service: !Cache::owned_by::<Service, _>(&cache.services, app, KIND_LABEL).is_empty(),
    }
}
// ANCHOR_END: observe

fn track_of(labels: &BTreeMap<String, String>) -> Option<Track> {
    match labels.get(COMPONENT)?.as_str() {
        "stable" => Some(Track::Stable),
        "canary" => Some(Track::Canary),
        _ => None,
    }
}

/// The template a StatefulSet's pods are made from: its container's image and the pod
/// labels that are not the operator's own.
fn set_view(set: &StatefulSet) -> Option<SetView> {
    let spec = &set.spec;
    let pod = spec.template.spec.as_ref()?;
    let image = pod
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .image
        .clone()?;
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("app.kubernetes.io/"))
        .collect();
    Some(SetView {
        uid: set.uid()?,
        template: Template { image, labels },
        replicas: spec.replicas.unwrap_or(1),
    })
}

fn pod_view(pod: &Pod) -> Option<PodView> {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(PodView {
        track: track_of(pod.labels())?,
        revision: pod.labels().get(VERSION)?.clone(),
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
    })
}
