//! The objects an action stands for, as the driver sends them: pure functions of the
//! custom resource and the action.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use lockstep::driver::{Error, Op, labels};

use crate::actions::CanaryAction;
use crate::api::{CanaryApp, Template};

/// `app.kubernetes.io/name` on every owned object: the driver's cache selects on it.
pub const KIND_LABEL: &str = "canaryapp";
/// The label saying which set an object belongs to (`stable` or `canary`).
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// The label carrying a pod's template revision ([`Template::revision`]).
pub const VERSION: &str = "app.kubernetes.io/version";
/// The app's container.
pub const CONTAINER: &str = "app";
/// The port the app serves on, in the container and on the Service.
pub const PORT: i32 = 8080;

/// The two sets of pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Track {
    /// The StatefulSet `<name>`, at the stable template.
    Stable,
    /// The StatefulSet `<name>-canary`, one pod at the candidate template.
    Canary,
}

impl Track {
    fn label(self) -> &'static str {
        match self {
            Track::Stable => "stable",
            Track::Canary => "canary",
        }
    }

    /// The StatefulSet's name for an app named `app`.
    pub fn set_name(self, app: &str) -> String {
        match self {
            Track::Stable => app.to_owned(),
            Track::Canary => format!("{app}-canary"),
        }
    }
}

// ANCHOR: render
/// The requests that carry out `action` for `app`.
///
/// # Errors
/// [`Error::Render`] for an object without a UID (never one read from the API server),
/// [`Error::Serde`] if an object does not serialize.
pub fn render(app: &CanaryApp, action: &CanaryAction) -> Result<Vec<Op>, Error> {
    Ok(match action {
        CanaryAction::CreateStable { template, replicas } => {
            vec![Op::create(&statefulset(
                app,
                Track::Stable,
                template,
                *replicas,
            )?)?]
        }
        CanaryAction::ApplyStable { template, replicas } => {
            vec![Op::apply(&statefulset(
                app,
                Track::Stable,
                template,
                *replicas,
            )?)?]
        }
        CanaryAction::ApplyCanary { template } => {
            vec![Op::apply(&statefulset(app, Track::Canary, template, 1)?)?]
        }
        CanaryAction::DeleteCanary { uid } => {
            vec![Op::delete::<StatefulSet>(
                Track::Canary.set_name(&app.name_any()),
                uid,
            )]
        }
        CanaryAction::ApplyService => vec![Op::apply(&service(app)?)?],
    })
}
// ANCHOR_END: render

/// The labels of every object of `app`: the driver's cache finds them by these.
fn owned_labels(app: &CanaryApp) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
        (labels::NAME.to_owned(), KIND_LABEL.to_owned()),
        (labels::INSTANCE.to_owned(), app.name_any()),
    ])
}

/// The metadata of an object named `name` that `app` controls.
fn child(
    app: &CanaryApp,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, Error> {
    let owner = app
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Render(format!("{} has no UID", app.name_any())))?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: app.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    })
}

/// The StatefulSet of `track`, its pods made from `template`.
pub fn statefulset(
    app: &CanaryApp,
    track: Track,
    template: &Template,
    replicas: i32,
) -> Result<StatefulSet, Error> {
    let mut selector = owned_labels(app);
    selector.insert(COMPONENT.to_owned(), track.label().to_owned());
    let mut pod_labels = template.labels.clone();
    pod_labels.extend(selector.clone());
    pod_labels.insert(VERSION.to_owned(), template.revision());
    Ok(StatefulSet {
        metadata: child(app, track.set_name(&app.name_any()), selector.clone())?,
        spec: StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(app.name_any()),
            pod_management_policy: Some("Parallel".to_owned()),
            selector: LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: CONTAINER.to_owned(),
                        image: Some(template.image.clone()),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".to_owned()),
                            container_port: PORT,
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        },
        status: None,
    })
}

/// The Service in front of every pod of `app`, stable and canary alike: a canary takes
/// its share of the traffic (one pod in `replicas + 1`).
pub fn service(app: &CanaryApp) -> Result<Service, Error> {
    Ok(Service {
        metadata: child(app, app.name_any(), owned_labels(app))?,
        spec: Some(ServiceSpec {
            selector: Some(owned_labels(app)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: 80,
                target_port: Some(IntOrString::String("http".to_owned())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}
