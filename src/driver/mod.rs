//! The driver: runs any [`Operator`] as a kube-runtime controller.
//!
//! This is the only layer that talks to the API server. [`run`] watches the custom
//! resource (its own status writes trigger nothing; anyone else's do) and every owned kind
//! (label-selected into the shared [`Cache`], mapped back to the owner by labels), and
//! each reconcile:
//! 1. adds the finalizer first if it is missing (fenced JSON patch) and stops there;
//! 2. loads the persisted record from the object's status (through the reflector store;
//!    no GETs on the hot path);
//! 3. observes the owned objects from the shared [`Cache`];
//! 4. calls the pure [`crate::engine::step()`];
//! 5. renders the decision's actions into [`Op`]s and executes them idempotently;
//! 6. writes the new status with one merge patch fenced on the resourceVersion it read;
//! 7. records one Event per transition (or newly degraded hold), after the write;
//! 8. removes the finalizer once the final state is persisted.
//!
//! See [`controller`] for the order and the stale-cache fence, [`watch`] for what
//! triggers a reconcile, [`execute`] for how each request is made safe to repeat.
//!
//! ```no_run
//! # async fn doc<O: lockstep::driver::Operator>(client: kube::Client) {
//! use lockstep::driver::{self, Config};
//! let config = Config::namespaced("prod").concurrency(8).shutdown_on(async {
//!     let _ = tokio::signal::ctrl_c().await;
//! });
//! driver::run::<O>(client, config).await;
//! # }
//! ```
//!
//! # Guarantees
//! - See [`crate::engine`]; the driver adds: an idle reconcile makes no mutating request,
//!   and a transition makes exactly one status write.
//! - Every status write and finalizer patch is fenced on the resourceVersion read: a
//!   concurrent change makes it fail with 409 ([`Error::Conflict`]), and the object is
//!   re-read and re-decided, never blindly retried.
//! - The finalizer is added before anything is created, never once the object is being
//!   deleted, and removed only after the status of a finalized state is persisted.
//! - Events are recorded only after the status write they describe succeeded.
//! - No mutating request starts unless [`Authority::check`] allows it: under leader
//!   election, only while the lease is certainly valid for another margin.
//!
//! # Assumptions
//! - Owned objects carry the labels of [`labels`] so the cache can watch them with one
//!   label selector and map them back to their owner, and live in the owner's namespace.
//! - [`Operator::status`] returns JSON that round-trips through the resource's status
//!   type (the driver compares it with the typed status it read, re-serialized).
//! - The custom resource has a status subresource.
//!
//! # Errors
//! [`Error`]: API failures while acting or writing; each is retried with per-object
//! exponential backoff with jitter ([`Backoff`]), and recorded (redacted, see
//! [`Error::redacted`]) in `status.machine.lastError`. [`Error::Conflict`] is retried
//! promptly and not recorded. Failing watches are retried with backoff and logged.

use std::fmt::Debug;

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::engine::{EngineStatus, Machine};

pub mod authority;
pub mod cache;
pub mod config;
pub mod controller;
pub mod crd;
pub mod debounce;
pub mod events;
pub mod execute;
pub mod hooks;
mod own_writes;
pub mod status;
pub mod wakeup;
pub mod watch;

#[cfg(test)]
mod wakes_tests;

pub use authority::Authority;
pub use cache::{Owned, Project};

pub use config::{Backoff, Config, FIELD_MANAGER};
pub use controller::run;
pub use crd::{crd, crd_yaml};
pub use hooks::{DriverHooks, Finished, NoHooks, Target};
pub use wakeup::Trigger;
pub use watch::WatchBackoff;

/// Labels every object Lockstep creates carries.
pub mod labels {
    /// `app.kubernetes.io/managed-by`: always [`MANAGED_BY_VALUE`].
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "lockstep";
    /// `app.kubernetes.io/name`: the owning kind, lower-case (`distributeddb`).
    pub const NAME: &str = "app.kubernetes.io/name";
    /// `app.kubernetes.io/instance`: the owning object's name.
    pub const INSTANCE: &str = "app.kubernetes.io/instance";
}

/// The errors of the driver layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// An action could not be rendered into objects (a bug or an invalid spec that the
    /// schema did not catch).
    #[error("cannot render action: {0}")]
    Render(String),
    /// An object could not be (de)serialized.
    #[error("serialization: {0}")]
    Serde(#[source] serde_json::Error),
    /// The status write lost a race (409); the object is re-read and re-decided.
    #[error("status write conflicted; will re-read and re-decide")]
    Conflict,
    /// An owned-object cache did not complete its first list in time (its watch is
    /// failing: missing RBAC, an API the server does not serve).
    #[error("the {0} cache has not completed its first list")]
    CacheNotReady(&'static str),
    /// This process may no longer act ([`Authority::check`]): its lease is lost or about
    /// to lapse. Nothing more is sent; the election loop stops the controllers.
    #[error("not acting: {0}")]
    NoAuthority(String),
}

impl Error {
    /// Whether retrying cannot help until a person acts: the API server found an
    /// object invalid (400, 422) or the verb forbidden (403), cannot decide an eviction
    /// because more than one PodDisruptionBudget selects the pod (someone else's budget
    /// over the members: 500, naming it), or the action could not be rendered at all.
    /// Such errors are reported as `Degraded` with a Warning Event, not only as
    /// `lastError`.
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::Api {
                source: kube::Error::Api(status),
                ..
            } => {
                matches!(status.code, 400 | 403 | 422)
                    || (status.code == 500 && status.message.contains(SEVERAL_BUDGETS))
            }
            Error::Render(_) => true,
            _ => false,
        }
    }

    /// Whether the API server refused a write only because its namespace is being
    /// deleted: expected while a resource finalizes in a namespace on its way out, so
    /// not worth a warning in the log. It stays a refusal ([`Self::is_refusal`]): a
    /// final backup such a namespace refuses is `Degraded`, naming the annotation that
    /// skips it, or the deletion would wait without a way out.
    pub fn is_namespace_terminating(&self) -> bool {
        matches!(self, Error::Api { source, .. } if namespace_terminating(source))
    }

    /// The error as it may be persisted in `status.machine.lastError` and shown to
    /// anyone who can read the object: what failed and the server's verdict, without
    /// anything that could carry secret material (no server messages about Secrets,
    /// no serializer excerpts of the data), at most 512 bytes.
    pub fn redacted(&self) -> String {
        let text = match self {
            Error::Api { what, source } => match source {
                kube::Error::Api(status)
                    if what.contains("Secret") && !namespace_terminating(source) =>
                {
                    format!("{what}: {} {}", status.code, status.reason)
                }
                kube::Error::Api(status) => {
                    format!(
                        "{what}: {} {}: {}",
                        status.code, status.reason, status.message
                    )
                }
                other => format!("{what}: {other}"),
            },
            Error::Serde(e) => format!(
                "serialization: {:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ),
            other => other.to_string(),
        };
        let mut end = text.len().min(512);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_owned()
    }
}

/// What the API server says when it cannot evict a pod that more than one
/// PodDisruptionBudget selects (the eviction subresource decides with one budget only).
const SEVERAL_BUDGETS: &str = "more than one PodDisruptionBudget";

/// Whether `error` is the API server refusing a write only because its namespace is
/// being deleted (a `NamespaceTerminating` cause).
pub(crate) fn namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status)
    if status.details.as_ref().is_some_and(|d| {
        d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
    }))
}

/// One request against the API server, rendered from a machine action.
///
/// Every variant is idempotent as executed by the driver.
#[derive(Debug, Clone)]
pub enum Op {
    /// Server-side apply (field manager `lockstep`, forced), creating or updating.
    Apply {
        /// The object's API.
        resource: ApiResource,
        /// The object, with apiVersion, kind, name and namespace set.
        object: DynamicObject,
    },
    /// Create if absent; AlreadyExists counts as success. For objects whose content
    /// must not be rewritten once made (generated credentials, run-once Jobs).
    Create {
        /// The object's API.
        resource: ApiResource,
        /// The object.
        object: DynamicObject,
    },
    /// Delete `name` if it still has `uid`; NotFound and a failed UID precondition count
    /// as success.
    Delete {
        /// The object's API.
        resource: ApiResource,
        /// The object's name (in the owner's namespace).
        name: String,
        /// The UID precondition. `None` only for objects whose identity does not matter.
        uid: Option<String>,
        /// The resourceVersion precondition, for an object deleted for what it was when
        /// read (a pod that was not Ready): any change since refuses the delete (409),
        /// and the change's watch event brings the next decision.
        version: Option<String>,
    },
    /// Evict pod `name` if it still has `uid`, through the eviction API: the
    /// PodDisruptionBudgets over the pod decide with the API server's own count of
    /// healthy pods, which a decision made on a lagging cache cannot see. NotFound and a
    /// failed UID precondition count as success; a budget's refusal (429) is an error,
    /// retried with backoff (the watch event of the pod the budget waits for comes first).
    Evict {
        /// The pod's name (in the owner's namespace).
        name: String,
        /// The UID precondition.
        uid: String,
    },
    /// A JSON merge patch of metadata labels (for example moving a role label); NotFound
    /// counts as success, since machines relabel whatever replaces the object.
    Label {
        /// The object's API.
        resource: ApiResource,
        /// The object's name.
        name: String,
        /// Labels to set (`Some`) or remove (`None`).
        labels: std::collections::BTreeMap<String, Option<String>>,
        /// Patch only the object as it was read: this UID at this resourceVersion
        /// (a mismatch is [`Error::Conflict`]: re-read and re-decide).
        precondition: Option<Precondition>,
    },
    /// A JSON merge patch of an existing object, only if it is still the object
    /// `precondition` names at the version read (a mismatch or a vanished object is
    /// [`Error::Conflict`]: re-read and re-decide). For hand-overs that must not overwrite
    /// a concurrent write, such as a Lease's holder.
    Patch {
        /// The object's API.
        resource: ApiResource,
        /// The object's name.
        name: String,
        /// The merge patch (without the precondition, which is added when sent).
        patch: serde_json::Value,
        /// The object as read.
        precondition: Precondition,
    },
}

/// The identity and version of an object as it was observed, which a request must
/// still find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precondition {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
}

impl Precondition {
    /// The precondition of `object` as read (`None` if it has no UID or version, as no
    /// object read from the API server lacks).
    pub fn of<K: Resource>(object: &K) -> Option<Self> {
        Some(Self {
            uid: object.meta().uid.clone()?,
            resource_version: object.meta().resource_version.clone()?,
        })
    }
}

impl Op {
    /// Server-side apply a typed object.
    ///
    /// # Errors
    /// [`Error::Serde`] if the object does not serialize.
    pub fn apply<K>(object: &K) -> Result<Self, Error>
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let (resource, object) = erase(object)?;
        Ok(Op::Apply { resource, object })
    }

    /// Create a typed object if absent.
    ///
    /// # Errors
    /// [`Error::Serde`] if the object does not serialize.
    pub fn create<K>(object: &K) -> Result<Self, Error>
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        let (resource, object) = erase(object)?;
        Ok(Op::Create { resource, object })
    }

    /// Set (`Some`) or remove (`None`) labels on a typed object by name.
    pub fn label<K>(
        name: impl Into<String>,
        labels: std::collections::BTreeMap<String, Option<String>>,
    ) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Op::Label {
            resource: ApiResource::erase::<K>(&()),
            name: name.into(),
            labels,
            precondition: None,
        }
    }

    /// Set (`Some`) or remove (`None`) labels on a typed object, only if it is still the
    /// object `precondition` names at the version read.
    pub fn label_if<K>(
        name: impl Into<String>,
        precondition: Precondition,
        labels: std::collections::BTreeMap<String, Option<String>>,
    ) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Op::Label {
            resource: ApiResource::erase::<K>(&()),
            name: name.into(),
            labels,
            precondition: Some(precondition),
        }
    }

    /// Merge-patch a typed object, only if it is still the object `precondition` names
    /// at the version read.
    pub fn patch_if<K>(
        name: impl Into<String>,
        precondition: Precondition,
        patch: serde_json::Value,
    ) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Op::Patch {
            resource: ApiResource::erase::<K>(&()),
            name: name.into(),
            patch,
            precondition,
        }
    }

    /// Delete a typed object by name, preconditioned on its UID.
    pub fn delete<K>(name: impl Into<String>, uid: impl Into<String>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Op::Delete {
            resource: ApiResource::erase::<K>(&()),
            name: name.into(),
            uid: Some(uid.into()),
            version: None,
        }
    }

    /// Evict a pod by name, preconditioned on its UID ([`Op::Evict`]).
    pub fn evict(name: impl Into<String>, uid: impl Into<String>) -> Self {
        Op::Evict {
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// Delete a typed object by name only as it was read: its UID and resourceVersion.
    pub fn delete_as_read<K>(name: impl Into<String>, precondition: Precondition) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Op::Delete {
            resource: ApiResource::erase::<K>(&()),
            name: name.into(),
            uid: Some(precondition.uid),
            version: Some(precondition.resource_version),
        }
    }
}

fn erase<K>(object: &K) -> Result<(ApiResource, DynamicObject), Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let resource = ApiResource::erase::<K>(&());
    let mut value = serde_json::to_value(object).map_err(Error::Serde)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), resource.api_version.clone().into());
        map.insert("kind".into(), resource.kind.clone().into());
    }
    let object = serde_json::from_value(value).map_err(Error::Serde)?;
    Ok((resource, object))
}

/// The stores of every kind Lockstep owns, filled by label-selected watches and indexed
/// by owner ([`cache`]).
///
/// Reads are from memory; the driver keeps them current.
#[derive(Clone)]
pub struct Cache {
    /// StatefulSets.
    pub statefulsets: Owned<StatefulSet>,
    /// Pods (selected by the StatefulSet's labels, which carry [`labels`]), projected.
    pub pods: Owned<Pod>,
    /// Services.
    pub services: Owned<Service>,
    /// Jobs (hooks, backups, promotions), projected.
    pub jobs: Owned<Job>,
    /// CronJobs (scheduled backups).
    pub cronjobs: Owned<CronJob>,
    /// ConfigMaps (pod scripts).
    pub configmaps: Owned<ConfigMap>,
    /// PodDisruptionBudgets.
    pub pdbs: Owned<PodDisruptionBudget>,
    /// NetworkPolicies (a PostgresCluster's, when enabled).
    pub network_policies: Owned<NetworkPolicy>,
    /// PersistentVolumeClaims made from volumeClaimTemplates, projected.
    pub pvcs: Owned<PersistentVolumeClaim>,
    /// Secrets the owner made, projected: metadata, and only the data keys each names
    /// ([`cache::CACHED_KEYS`]).
    pub secrets: Owned<Secret>,
    /// Leases (a PostgresCluster's primary Lease). A renewal alone (a new
    /// `spec.renewTime`) triggers no reconcile; machines that wait on a Lease's expiry
    /// ask for a requeue.
    pub leases: Owned<Lease>,
}

impl Cache {
    /// Empty, unlisted stores for the objects of owners of `kind_label`, keeping what
    /// `keep` declares ([`Operator::KEEP`]).
    pub fn new(kind_label: &'static str, keep: cache::Keep) -> Self {
        Self {
            statefulsets: Owned::keeping(kind_label, keep),
            pods: Owned::keeping(kind_label, keep),
            services: Owned::keeping(kind_label, keep),
            jobs: Owned::keeping(kind_label, keep),
            cronjobs: Owned::keeping(kind_label, keep),
            configmaps: Owned::keeping(kind_label, keep),
            pdbs: Owned::keeping(kind_label, keep),
            network_policies: Owned::keeping(kind_label, keep),
            pvcs: Owned::keeping(kind_label, keep),
            secrets: Owned::keeping(kind_label, keep),
            leases: Owned::keeping(kind_label, keep),
        }
    }

    /// The objects of one store that belong to `owner` (by the instance and name
    /// labels), found through the store's owner index: the cost does not grow with the
    /// number of other owners.
    ///
    /// An object whose controller is an object of the owner's kind with another UID is
    /// left out: it belongs to an earlier object of the same name (deleted and created
    /// again) and is on its way to garbage collection, so it is never taken for this
    /// owner's (a previous incarnation's `final-backup-1` Job, say). Objects controlled
    /// by something else (pods by their StatefulSet) or by nothing (retained claims) are
    /// matched by labels alone.
    pub fn owned_by<K, O>(store: &Owned<K>, owner: &O, kind_label: &str) -> Vec<std::sync::Arc<K>>
    where
        K: Project,
        O: Resource<DynamicType = ()>,
    {
        if store.kind_label() != kind_label {
            return Vec::new();
        }
        let mut objects = store.of(
            owner.meta().namespace.as_deref(),
            owner.meta().name.as_deref().unwrap_or_default(),
        );
        let (kind, uid) = (O::kind(&()), owner.meta().uid.as_deref());
        objects.retain(|o| {
            o.meta()
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.controller == Some(true) && r.kind == kind)
                .all(|r| uid.is_none_or(|uid| r.uid == uid))
        });
        objects
    }
}

/// A machine bound to a custom resource: what the driver needs beyond the pure machine.
///
/// Implementations are pure functions of their inputs too; only the driver performs I/O.
pub trait Operator: Machine + Sized {
    /// The custom resource.
    type Resource: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// The value of `app.kubernetes.io/name` on owned objects (the kind, lower-case).
    const KIND_LABEL: &'static str;

    /// The finalizer this operator holds on its objects.
    const FINALIZER: &'static str = "lockstep.dev/finalizer";

    /// What its machines read of their objects beyond what every machine reads: the
    /// annotations and variables the cache keeps ([`cache::Keep`]). The default: none.
    const KEEP: cache::Keep = cache::Keep::NOTHING;

    /// The object's spec, as the machine reads it.
    fn spec(object: &Self::Resource) -> Self::Spec;

    /// The engine part of the object's status (default when there is none yet).
    fn engine_status(object: &Self::Resource) -> EngineStatus<Self::State>;

    /// Observe the world for `object` from the cache. `state` is the decoded persisted
    /// state when there is one (so desired objects can be rendered for drift checks).
    fn observe(
        object: &Self::Resource,
        state: Option<&Self::State>,
        cache: &Cache,
    ) -> Self::Observed;

    /// Render one action into requests.
    ///
    /// # Errors
    /// [`Error::Render`] or [`Error::Serde`] when the action cannot be expressed.
    fn render(object: &Self::Resource, action: &Self::Action) -> Result<Vec<Op>, Error>;

    /// The complete `.status` to persist: `engine` plus the kind's own projected fields
    /// (ready replicas, version, last backup), all deterministic functions of the inputs.
    /// `now` is the reconcile's clock (the one [`crate::engine::step()`] saw), for the
    /// transition times of conditions the kind projects itself.
    ///
    /// The driver compares it with the object's typed status re-serialized, so it must
    /// round-trip through the resource's status type (serialize that type; do not add
    /// keys it drops), or every reconcile writes (the driver warns when it sees this).
    fn status(
        object: &Self::Resource,
        engine: EngineStatus<Self::State>,
        state: Option<&Self::State>,
        observed: &Self::Observed,
        now: chrono::DateTime<chrono::Utc>,
    ) -> serde_json::Value;
}

#[cfg(test)]
mod tests {
    use super::{Cache, Error, Owned};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn job(name: &str, controller_uid: &str) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {
                "app.kubernetes.io/name": "configmap", "app.kubernetes.io/instance": "db"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "db",
                    "uid": controller_uid, "controller": true}]}
        }))
        .expect("a Job")
    }

    #[test]
    fn an_object_of_an_earlier_owner_with_the_same_name_is_not_taken_as_its_own() {
        let jobs = Owned::from_objects(
            "configmap",
            vec![job("db-final-backup-1", "old"), job("db-hook", "new")],
        );
        let mut owner = ConfigMap::default();
        owner.metadata.name = Some("db".into());
        owner.metadata.namespace = Some("ns".into());
        owner.metadata.uid = Some("new".into());
        let mine: Vec<String> = Cache::owned_by(&jobs, &owner, "configmap")
            .iter()
            .filter_map(|j| j.metadata.name.clone())
            .collect();
        assert_eq!(mine, ["db-hook"]);
    }

    fn api(code: u16) -> Error {
        Error::Api {
            what: "apply CronJob/a-backup".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("refused", "Invalid")
                    .with_code(code)
                    .boxed(),
            ),
        }
    }

    #[test]
    fn invalid_or_forbidden_requests_are_refusals_and_transient_failures_are_not() {
        for code in [400, 403, 422] {
            assert!(api(code).is_refusal(), "{code}");
        }
        for code in [404, 409, 429, 500, 503] {
            assert!(!api(code).is_refusal(), "{code}");
        }
        assert!(Error::Render("no name".into()).is_refusal());
        assert!(!Error::Conflict.is_refusal());
    }

    #[test]
    fn an_eviction_that_two_budgets_select_is_a_refusal_and_a_full_budget_is_not() {
        let status = |code, message: &str| Error::Api {
            what: "evict Pod/db-2".into(),
            source: kube::Error::Api(
                kube::core::Status::failure(message, "InternalError")
                    .with_code(code)
                    .boxed(),
            ),
        };
        let several = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
        assert!(status(500, several).is_refusal());
        let full = "Cannot evict pod as it would violate the pod's disruption budget.";
        assert!(!status(429, full).is_refusal());
        assert!(!status(500, "etcdserver: request timed out").is_refusal());
    }

    #[test]
    fn a_create_refused_because_its_namespace_is_going_away_says_why() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "unable to create new content in namespace a because it is being terminated",
            "details": { "causes": [{ "reason": "NamespaceTerminating" }] },
        }))
        .expect("a Status");
        let error = Error::Api {
            what: "create Secret/pg-endpoint-token".into(),
            source: kube::Error::Api(status.boxed()),
        };
        assert!(error.is_namespace_terminating());
        assert!(error.is_refusal(), "Degraded, naming the way out");
        assert!(
            error.redacted().contains("being terminated"),
            "{}",
            error.redacted()
        );
        assert!(!api(403).is_namespace_terminating());
    }
}
