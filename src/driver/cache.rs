//! The owned-object cache: every owned object, projected to what machines read, indexed
//! by its owner, and kept as compact JSON.
//!
//! One [`Owned`] store per kind is filled by that kind's watch. Each event is applied
//! by the store's index, which also says which owners must be reconciled, so the
//! bookkeeping that decides triggers and the store that machines read are one
//! structure, with no second copy of any object.
//!
//! # Guarantees
//! - [`Cache::owned_by`](super::Cache::owned_by) costs time in the number of objects of that owner, not in the
//!   number of objects cached: a reconcile does the same work with 1 cluster or 1,000.
//! - Objects are stored as [`Project`]ed: without `managedFields`, and without the parts
//!   no machine reads (see each kind's [`Project::project`]). A change confined to what
//!   the projection drops triggers nothing.
//! - What is kept is held as the object's JSON (its resourceVersion apart), not as the
//!   typed object: k8s-openapi's types are mostly empty inline fields (a projected pod
//!   is ~5 KiB typed, under 1 KiB as JSON). Reads decode the owner's objects again
//!   ([`Owned::of`]); nothing is decoded for other owners.
//! - An owned object triggers a reconcile of its owner when it appears, disappears
//!   (including objects that vanished while the watch was down and are missing from
//!   the relist), is relabelled to or from it, or changes in anything but
//!   `metadata.resourceVersion` (the kept JSON compared byte for byte: serializing a
//!   typed object is deterministic).
//!
//! # Assumptions
//! - Owned objects carry [`labels::NAME`] = the owner's kind label and
//!   [`labels::INSTANCE`] = the owner's name, and live in the owner's namespace.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::batch::v1::{CronJob, Job, JobStatus};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerState, ContainerStateTerminated, ContainerStatus,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, PodCondition, PodSpec, PodStatus,
    Secret, Service,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::labels;

/// Where an object lives: namespace and name.
pub(crate) type Key = (Option<String>, String);

/// Reduce an object to what machines read, before it is stored.
pub trait Project:
    Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Drop what no machine reads. The default drops `managedFields`.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
    }

    /// Whether [`Project::quiet`] clears anything (so comparisons need to apply it).
    const HAS_QUIET: bool = false;

    /// Clear what machines read but what must not trigger a reconcile by itself when
    /// it changes (a Lease's renewal time). The stored object keeps it. The default
    /// clears nothing.
    fn quiet(&mut self) {}
}

impl Project for Service {
    /// Keeps metadata and spec (the drift check reads what Lockstep applies); the status
    /// (load balancer ingress) is never read.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
        self.status = None;
    }
}

impl Project for ConfigMap {}

/// The annotation by which an owned Secret names the keys of its data the cache keeps
/// (comma-separated); every other key is dropped before the Secret is stored.
pub const CACHED_KEYS: &str = "lockstep.dev/cached-keys";

impl Project for Secret {
    /// Keeps metadata, and of the data only the keys the Secret names in [`CACHED_KEYS`]
    /// (none by default): a machine that must read part of a Secret it owns (a CA it
    /// signs with) says so on the Secret, and no password it does not read is held.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
        self.string_data = None;
        let kept: Vec<String> = self
            .annotations()
            .get(CACHED_KEYS)
            .map(|keys| keys.split(',').map(|k| k.trim().to_owned()).collect())
            .unwrap_or_default();
        self.data = self
            .data
            .take()
            .map(|data| {
                data.into_iter()
                    .filter(|(k, _)| kept.contains(k))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
            .filter(|data| !data.is_empty());
    }
}

impl Project for StatefulSet {
    /// Keeps metadata and spec (the drift check, image, replicas, claim size) and, of
    /// the status, `observedGeneration` (whether the controller has caught up). Replica
    /// counts are read from the pods.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
        self.status = self.status.take().map(|status| StatefulSetStatus {
            observed_generation: status.observed_generation,
            ..StatefulSetStatus::default()
        });
    }
}

impl Project for CronJob {
    /// Keeps metadata and spec (the drift check); the status (last schedule) is never
    /// read: the Jobs it makes are watched themselves.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
        self.status = None;
    }
}

impl Project for PodDisruptionBudget {
    /// Keeps metadata and spec (the drift check); the status is never read.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
        self.status = None;
    }
}

impl Project for NetworkPolicy {
    /// Keeps metadata and spec (the drift check).
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
    }
}

impl Project for Pod {
    /// Keeps, of the metadata, what identifies the pod and what is read of it (name,
    /// namespace, UID, creation and deletion timestamps, Lockstep's and the Job
    /// controller's labels, the owner references' kind, name, UID and controller
    /// flag); each container's name, image and literal `LOCKSTEP_*` environment
    /// variables (what a pod was created with: PostgresCluster reads the lease duration
    /// its fence runs with); the Ready condition's type and status while it holds
    /// (`True`): what readiness, images, ordinals and roles are read from; the type,
    /// status, reason and message of the conditions a pod's own agent writes (types
    /// under [`LOCKSTEP_CONDITION_PREFIX`]); the digests of
    /// [`DIGESTED_ANNOTATIONS`]. Other annotations,
    /// other environment variables and the labels other controllers add
    /// (`controller-revision-hash`, `pod-index`, …) are dropped.
    ///
    /// A Ready condition that does not hold (`False`, `Unknown`) is dropped like an
    /// absent one: machines read readiness as "the Ready condition is True"
    /// (`common::observe::pod_ready`), so a pod being scheduled and reported not ready
    /// yet wakes no machine; becoming ready, or losing readiness, does.
    fn project(&mut self) {
        slim_metadata(self.meta_mut());
        self.spec = self.spec.take().map(|spec| PodSpec {
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    image: c.image,
                    env: c
                        .env
                        .map(|env| {
                            env.into_iter()
                                .filter(|e| e.name.starts_with("LOCKSTEP_") && e.value.is_some())
                                .collect::<Vec<_>>()
                        })
                        .filter(|env| !env.is_empty()),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        });
        // A Job's pod also keeps what its containers reported when they terminated (a
        // base backup's first recoverable point, in its termination message); a server pod's container
        // statuses (restarts, probes) are dropped.
        let job_pod = self.labels().contains_key(JOB_NAME_LABEL);
        self.status = self.status.take().map(|status| PodStatus {
            conditions: status.conditions.map(|conditions| {
                conditions
                    .into_iter()
                    .filter_map(|c| {
                        if c.type_ == "Ready" && c.status == "True" {
                            Some(PodCondition {
                                type_: c.type_,
                                status: c.status,
                                ..PodCondition::default()
                            })
                        } else if c.type_.starts_with(LOCKSTEP_CONDITION_PREFIX) {
                            // What a pod's own agent reports (a PostgreSQL instance's
                            // settings): its words, not its times.
                            Some(PodCondition {
                                type_: c.type_,
                                status: c.status,
                                reason: c.reason,
                                message: c.message,
                                ..PodCondition::default()
                            })
                        } else {
                            None
                        }
                    })
                    .collect()
            }),
            container_statuses: status
                .container_statuses
                .filter(|_| job_pod)
                .map(|statuses| statuses.into_iter().map(terminated_only).collect()),
            ..PodStatus::default()
        });
    }
}

/// Reduce the metadata of an object Lockstep reads only by name, labels, owner and
/// version (pods, claims) to those: no managedFields, annotations, finalizers,
/// `generateName` or `generation`; only the labels Lockstep sets or reads
/// (`app.kubernetes.io/*`, `lockstep.dev/*`, [`JOB_NAME_LABEL`]); owner references
/// without `apiVersion` and `blockOwnerDeletion`.
fn slim_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    // The annotations a machine writes and reads back stay, each as the digest of its
    // value: enough to tell whether it holds what the machine would write, at a fixed
    // cost.
    meta.annotations = meta
        .annotations
        .take()
        .map(|annotations| {
            annotations
                .into_iter()
                .filter(|(key, _)| DIGESTED_ANNOTATIONS.contains(&key.as_str()))
                .map(|(key, value)| (key, digest(&value)))
                .collect::<BTreeMap<_, _>>()
        })
        .filter(|kept| !kept.is_empty());
    meta.finalizers = None;
    meta.generate_name = None;
    meta.generation = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| {
            key.starts_with("app.kubernetes.io/")
                || key.starts_with("lockstep.dev/")
                || key == JOB_NAME_LABEL
        });
    }
    if let Some(references) = meta.owner_references.as_mut() {
        for reference in references {
            reference.api_version = String::new();
            reference.block_owner_deletion = None;
        }
    }
}

/// The annotations a projected object keeps, as [`digest`]s: PostgresCluster's settings
/// (`machines::postgres::settings`) and in-place restore
/// (`machines::postgres::in_place`), which it writes on its pods.
pub const DIGESTED_ANNOTATIONS: &[&str] = &["lockstep.dev/postgresql", "lockstep.dev/restore"];

/// What a projected object keeps of a [`DIGESTED_ANNOTATIONS`] `value`: a digest
/// that differs for different values (64-bit FNV-1a, so it is the same in every process
/// and every build: an instance manager can say which value it judged, and the operator
/// compare it with the one it wrote).
#[must_use]
pub fn digest(value: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = value.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    format!("{hash:016x}")
}

/// The prefix of the pod condition types Lockstep's agents write on their own pods
/// (`lockstep.dev/SettingsApplied`), which the cache keeps.
pub const LOCKSTEP_CONDITION_PREFIX: &str = "lockstep.dev/";

/// The label the Job controller puts on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// A container status reduced to its name and how it terminated (exit code, message).
fn terminated_only(status: ContainerStatus) -> ContainerStatus {
    ContainerStatus {
        name: status.name,
        state: status.state.map(|state| ContainerState {
            terminated: state.terminated.map(|t| ContainerStateTerminated {
                exit_code: t.exit_code,
                message: t.message,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

impl Project for Lease {
    /// Keeps metadata and the spec: holder, renewal time, duration, transitions.
    /// A renewal alone (only `spec.renewTime` changed) is stored but triggers nothing:
    /// the holder renews every few seconds, and the machine computes the expiry it
    /// waits for and asks for a requeue at that time instead.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
    }

    const HAS_QUIET: bool = true;

    fn quiet(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.renew_time = None;
        }
    }
}

impl Project for Job {
    /// Keeps metadata and, of the status, the conditions and completion time: a Job is
    /// judged by its labels and its outcome; its pod template is never read back.
    fn project(&mut self) {
        self.meta_mut().managed_fields = None;
        self.spec = None;
        self.status = self.status.take().map(|status| JobStatus {
            conditions: status.conditions,
            completion_time: status.completion_time,
            ..JobStatus::default()
        });
    }
}

impl Project for PersistentVolumeClaim {
    /// Keeps the metadata `slim_metadata` keeps and the requested resources (what
    /// volume expansion reads). The phase (bound or not), the binding annotations, the
    /// protection finalizer and the creation time are never read, so a claim's binding
    /// wakes no machine.
    fn project(&mut self) {
        slim_metadata(self.meta_mut());
        self.meta_mut().creation_timestamp = None;
        self.spec = self.spec.take().map(|spec| PersistentVolumeClaimSpec {
            resources: spec.resources,
            ..PersistentVolumeClaimSpec::default()
        });
        self.status = None;
    }
}

/// One stored object: its resourceVersion, and the rest of it, projected, as JSON.
#[derive(Debug)]
struct Entry {
    version: Option<Box<str>>,
    content: Box<[u8]>,
}

impl Entry {
    /// Project `object` and encode it (`None` only if it does not serialize, which no
    /// object decoded from the API server fails to).
    fn of<K: Project>(object: &mut K) -> Option<Self> {
        object.project();
        let version = object.meta_mut().resource_version.take();
        let content = serde_json::to_vec(&*object);
        object.meta_mut().resource_version = version;
        let content = match content {
            Ok(content) => content.into_boxed_slice(),
            Err(error) => {
                tracing::warn!(kind = %K::kind(&()), %error, "cannot encode an owned object; not stored");
                return None;
            }
        };
        Some(Self {
            version: object.meta().resource_version.as_deref().map(Box::from),
            content,
        })
    }

    /// The object again (`None` only if the kept JSON does not decode, which cannot
    /// happen for JSON this process encoded from the same type).
    fn decode<K: Project>(&self) -> Option<K> {
        let mut object: K = serde_json::from_slice(&self.content)
            .inspect_err(|error| {
                tracing::warn!(kind = %K::kind(&()), %error, "cannot decode a kept owned object");
            })
            .ok()?;
        object.meta_mut().resource_version = self.version.as_deref().map(str::to_owned);
        Some(object)
    }
}

/// The objects of one owner, by name, in name order. A sorted vector: an owner has a
/// handful (one StatefulSet, three pods), and a map's node (~600 bytes) would outweigh
/// the objects of most owners.
#[derive(Debug, Default)]
struct Objects(Vec<(Box<str>, Entry)>);

impl Objects {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    fn get(&self, name: &str) -> Option<&Entry> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    fn insert(&mut self, name: &str, entry: Entry) {
        match self.find(name) {
            Ok(i) => self.0[i].1 = entry,
            Err(i) => self.0.insert(i, (name.into(), entry)),
        }
    }

    fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.0.remove(i);
            if self.0.len() * 2 < self.0.capacity() {
                self.0.shrink_to_fit();
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn values(&self) -> impl Iterator<Item = &Entry> {
        self.0.iter().map(|(_, e)| e)
    }
}

/// The objects of one kind, indexed by owner. Cheap to clone (shared).
pub struct Owned<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Owned<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<K> {
    index: RwLock<Index<K>>,
    listed: tokio::sync::watch::Sender<bool>,
}

impl<K: Project> Owned<K> {
    /// An empty store for objects of owners of `kind_label`, not yet listed.
    pub fn new(kind_label: &'static str) -> Self {
        Self {
            shared: Arc::new(Shared {
                index: RwLock::new(Index::new(kind_label)),
                listed: tokio::sync::watch::Sender::new(false),
            }),
        }
    }

    /// A listed store holding `objects` (projected), for tests of observation code.
    pub fn from_objects(kind_label: &'static str, objects: Vec<K>) -> Self {
        let store = Self::new(kind_label);
        store.apply(watcher::Event::Init);
        for object in objects {
            store.apply(watcher::Event::InitApply(object));
        }
        store.apply(watcher::Event::InitDone);
        store
    }

    /// The kind label of the owners whose objects this store holds.
    pub fn kind_label(&self) -> &'static str {
        self.shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .kind_label
    }

    /// The objects of `owner` (namespace and name), as projected, decoded from what is
    /// kept.
    pub fn of(&self, namespace: Option<&str>, owner: &str) -> Vec<Arc<K>> {
        let index = self
            .shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        index
            .by_owner
            .get(&(namespace.map(str::to_owned), owner.to_owned()))
            .map(|objects| {
                objects
                    .values()
                    .filter_map(Entry::decode)
                    .map(Arc::new)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many objects are stored.
    pub fn len(&self) -> usize {
        self.shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .owner_of
            .len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes of the kept JSON (for measurements; not the index's own overhead).
    pub fn kept_bytes(&self) -> usize {
        let index = self
            .shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        index
            .by_owner
            .values()
            .flat_map(Objects::values)
            .map(|e| e.content.len() + e.version.as_deref().map_or(0, str::len))
            .sum()
    }

    /// Apply one watch event; returns the owners it concerns.
    pub(crate) fn apply(&self, event: watcher::Event<K>) -> Vec<Key> {
        let owners = self
            .shared
            .index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
        owners.listed.then(|| self.shared.listed.send_replace(true));
        owners.keys
    }

    /// Resolves once the first list is complete.
    pub async fn wait_until_listed(&self) {
        let mut listed = self.shared.listed.subscribe();
        // The sender lives as long as `self`, so this cannot fail while awaited.
        let _ = listed.wait_for(|l| *l).await;
    }
}

/// What one event did: the owners to reconcile, and whether a list completed.
pub(crate) struct Applied {
    pub(crate) keys: Vec<Key>,
    pub(crate) listed: bool,
}

/// The index behind [`Owned`], without locking or I/O (unit-tested as is).
pub(crate) struct Index<K> {
    kind_label: &'static str,
    /// Owner → object name → object.
    by_owner: HashMap<Key, Objects>,
    /// Object → its owner (`None`: not one of ours; kept so deletes are cheap).
    owner_of: HashMap<Key, Option<Key>>,
    /// The objects seen in the relist under way.
    relisted: Option<std::collections::HashSet<Key>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Project> Index<K> {
    pub(crate) fn new(kind_label: &'static str) -> Self {
        Self {
            kind_label,
            by_owner: HashMap::new(),
            owner_of: HashMap::new(),
            relisted: None,
            _kind: std::marker::PhantomData,
        }
    }

    fn owner(&self, object: &K) -> Option<Key> {
        let l = object.labels();
        if l.get(labels::NAME).map(String::as_str) != Some(self.kind_label) {
            return None;
        }
        Some((object.namespace(), l.get(labels::INSTANCE)?.clone()))
    }

    fn get(&self, key: &Key) -> Option<&Entry> {
        let owner = self.owner_of.get(key)?.as_ref()?;
        self.by_owner.get(owner)?.get(&key.1)
    }

    fn remove(&mut self, key: &Key) -> Option<Key> {
        let owner = self.owner_of.remove(key)??;
        if let Some(objects) = self.by_owner.get_mut(&owner) {
            objects.remove(&key.1);
            if objects.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
        Some(owner)
    }

    /// Store `object`; the owners to reconcile.
    fn upsert(&mut self, mut object: K) -> Vec<Key> {
        let key = (object.namespace(), object.name_any());
        let owner = self.owner(&object);
        let Some(entry) = Entry::of(&mut object) else {
            // Not storable: drop any older version, and let its owner look.
            return self.remove(&key).into_iter().chain(owner).collect();
        };
        let unchanged = self.get(&key).is_some_and(|before| {
            before.content == entry.content || (K::HAS_QUIET && same_but_quiet::<K>(before, &entry))
        });
        let before = self.owner_of.get(&key).cloned().flatten();
        if unchanged && before == owner {
            // Keep the stored version current for the stale-read fence of callers.
            if let Some(o) = &owner
                && let Some(objects) = self.by_owner.get_mut(o)
            {
                objects.insert(&key.1, entry);
            }
            return Vec::new();
        }
        self.remove(&key);
        if let Some(o) = &owner {
            self.by_owner
                .entry(o.clone())
                .or_default()
                .insert(&key.1, entry);
        }
        self.owner_of.insert(key, owner.clone());
        // Relabelled away from an owner: that owner must look too.
        before.into_iter().chain(owner).collect()
    }

    pub(crate) fn apply(&mut self, event: watcher::Event<K>) -> Applied {
        let mut keys = Vec::new();
        let mut listed = false;
        match event {
            watcher::Event::Init => self.relisted = Some(Default::default()),
            watcher::Event::InitApply(object) => {
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert((object.namespace(), object.name_any()));
                }
                keys = self.upsert(object);
            }
            watcher::Event::Apply(object) => keys = self.upsert(object),
            watcher::Event::Delete(object) => {
                let key = (object.namespace(), object.name_any());
                keys.extend(self.remove(&key).or_else(|| self.owner(&object)));
            }
            watcher::Event::InitDone => {
                listed = true;
                if let Some(relisted) = self.relisted.take() {
                    let gone: Vec<Key> = self
                        .owner_of
                        .keys()
                        .filter(|k| !relisted.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        keys.extend(self.remove(&key));
                    }
                }
            }
        }
        keys.sort();
        keys.dedup();
        Applied { keys, listed }
    }
}

/// Whether two kept versions differ only in what [`Project::quiet`] clears.
fn same_but_quiet<K: Project>(before: &Entry, after: &Entry) -> bool {
    let (Some(mut before), Some(mut after)) = (before.decode::<K>(), after.decode::<K>()) else {
        return false;
    };
    before.quiet();
    after.quiet();
    before.meta_mut().resource_version = None;
    after.meta_mut().resource_version = None;
    matches!(
        (serde_json::to_vec(&before), serde_json::to_vec(&after)),
        (Ok(b), Ok(a)) if a == b
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    #[test]
    fn the_digest_is_fnv_1a_so_every_build_agrees_on_it() {
        assert_eq!(digest(""), "cbf29ce484222325");
        assert_eq!(digest("a"), "af63dc4c8601ec8c");
        assert_ne!(digest("{\"a\":1}"), digest("{\"a\":2}"));
    }

    /// A ConfigMap `name` of `owner` (kind label `kind`) at version `rv`.
    pub(crate) fn cm(name: &str, owner: &str, kind: &str, rv: &str, data: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                labels: Some(
                    [
                        (labels::MANAGED_BY.to_owned(), "lockstep".to_owned()),
                        (labels::NAME.to_owned(), kind.to_owned()),
                        (labels::INSTANCE.to_owned(), owner.to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some([("k".to_owned(), data.to_owned())].into()),
            ..Default::default()
        }
    }

    fn key(name: &str) -> Key {
        (Some("ns".into()), name.into())
    }

    fn owners(store: &Owned<ConfigMap>, event: watcher::Event<ConfigMap>) -> Vec<Key> {
        store.apply(event)
    }

    #[test]
    fn a_new_owned_object_triggers_its_owner_and_is_found_under_it() {
        let s = Owned::new("beacon");
        let o = owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
        );
        assert_eq!(o, [key("a")]);
        assert_eq!(s.of(Some("ns"), "a").len(), 1);
        assert!(s.of(Some("ns"), "b").is_empty());
        assert!(s.of(Some("other"), "a").is_empty());
    }

    #[test]
    fn an_object_of_another_kind_triggers_nothing_and_is_not_listed() {
        let s = Owned::new("beacon");
        let o = owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "other", "1", "x")),
        );
        assert!(o.is_empty());
        assert!(s.of(Some("ns"), "a").is_empty());
    }

    #[test]
    fn a_resource_version_only_change_triggers_nothing() {
        let s = Owned::new("beacon");
        owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
        );
        let o = owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "2", "x")),
        );
        assert!(o.is_empty());
        let stored = s.of(Some("ns"), "a");
        assert_eq!(stored[0].resource_version().as_deref(), Some("2"));
    }

    #[test]
    fn a_content_change_triggers_the_owner() {
        let s = Owned::new("beacon");
        owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
        );
        let o = owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "2", "y")),
        );
        assert_eq!(o, [key("a")]);
    }

    #[test]
    fn a_relabelled_object_triggers_both_owners_and_moves() {
        let s = Owned::new("beacon");
        owners(&s, watcher::Event::Apply(cm("cm", "a", "beacon", "1", "x")));
        let o = owners(&s, watcher::Event::Apply(cm("cm", "b", "beacon", "2", "x")));
        assert_eq!(o, [key("a"), key("b")]);
        assert!(s.of(Some("ns"), "a").is_empty());
        assert_eq!(s.of(Some("ns"), "b").len(), 1);
    }

    #[test]
    fn a_deletion_triggers_the_owner_and_removes_the_object() {
        let s = Owned::new("beacon");
        owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
        );
        let o = owners(
            &s,
            watcher::Event::Delete(cm("a-cm", "a", "beacon", "2", "x")),
        );
        assert_eq!(o, [key("a")]);
        assert!(s.is_empty());
    }

    #[test]
    fn an_unchanged_relist_triggers_nothing_but_a_vanished_object_triggers_its_owner() {
        let s = Owned::new("beacon");
        owners(
            &s,
            watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")),
        );
        owners(
            &s,
            watcher::Event::Apply(cm("b-cm", "b", "beacon", "1", "x")),
        );
        assert!(owners(&s, watcher::Event::Init).is_empty());
        let again = owners(
            &s,
            watcher::Event::InitApply(cm("a-cm", "a", "beacon", "5", "x")),
        );
        assert!(again.is_empty());
        let done = owners(&s, watcher::Event::InitDone);
        assert_eq!(done, [key("b")]);
        assert_eq!(s.len(), 1);
    }

    #[tokio::test]
    async fn the_store_is_listed_after_the_first_init_done() {
        let s = Owned::<ConfigMap>::new("beacon");
        let waiting = s.clone();
        let listed = tokio::spawn(async move { waiting.wait_until_listed().await });
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitDone);
        tokio::time::timeout(std::time::Duration::from_secs(5), listed)
            .await
            .expect("listed in time")
            .expect("the task ran");
    }

    fn lease(rv: &str, holder: &str, renewed: i64) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-primary", "namespace": "ns", "resourceVersion": rv,
                "labels": {"app.kubernetes.io/name": "beacon", "app.kubernetes.io/instance": "db"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                "renewTime": format!("2026-01-01T00:00:{renewed:02}.000000Z")}
        }))
        .expect("a Lease")
    }

    #[test]
    fn a_lease_renewal_alone_is_stored_but_triggers_nothing() {
        let s = Owned::<Lease>::new("beacon");
        assert_eq!(
            s.apply(watcher::Event::Apply(lease("1", "db-0/u", 0))),
            [key("db")]
        );
        assert!(
            s.apply(watcher::Event::Apply(lease("2", "db-0/u", 2)))
                .is_empty()
        );
        let stored = s.of(Some("ns"), "db");
        assert_eq!(stored[0].resource_version().as_deref(), Some("2"));
        let renewed = stored[0].spec.as_ref().and_then(|s| s.renew_time.clone());
        assert!(renewed.is_some_and(|t| t.0.as_second() % 60 == 2));
    }

    #[test]
    fn a_new_lease_holder_triggers_the_owner() {
        let s = Owned::<Lease>::new("beacon");
        s.apply(watcher::Event::Apply(lease("1", "db-0/u", 0)));
        assert_eq!(
            s.apply(watcher::Event::Apply(lease("2", "db-1/v", 4))),
            [key("db")]
        );
    }

    #[test]
    fn a_job_pod_keeps_its_termination_message_and_nothing_else_of_its_containers() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-survey-1-x", "namespace": "ns", "labels": {
                "app.kubernetes.io/name": "beacon", "app.kubernetes.io/instance": "db",
                "batch.kubernetes.io/job-name": "db-survey-1"}},
            "status": {"phase": "Succeeded",
                "containerStatuses": [{"name": "survey", "image": "pg:16", "imageID": "x",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "message": "{}",
                        "reason": "Completed"}}}]}
        }))
        .expect("a pod");
        let s = Owned::<Pod>::from_objects("beacon", vec![pod]);
        let stored = s.of(Some("ns"), "db");
        let statuses = stored[0]
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default();
        let terminated = statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .expect("terminated");
        assert_eq!(terminated.message.as_deref(), Some("{}"));
        assert!(terminated.reason.is_none() && statuses[0].image.is_empty());
    }

    #[test]
    fn a_pod_is_stored_with_only_what_machines_read() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "ns", "labels": {
                "app.kubernetes.io/name": "beacon", "app.kubernetes.io/instance": "db"},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"containers": [{"name": "db", "image": "db:1",
                "env": [{"name": "A", "value": "b"}, {"name": "LOCKSTEP_LEASE_SECONDS", "value": "15"},
                    {"name": "LOCKSTEP_X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
                "command": ["run"]}],
                "volumes": [{"name": "data", "emptyDir": {}}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.9",
                "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "db", "image": "db:1", "imageID": "x",
                    "ready": true, "restartCount": 0}]}
        }))
        .expect("a pod");
        let s = Owned::<Pod>::from_objects("beacon", vec![pod]);
        let stored = s.of(Some("ns"), "db");
        let stored = &stored[0];
        assert!(stored.metadata.managed_fields.is_none());
        let spec = stored.spec.as_ref().expect("spec");
        assert_eq!(spec.containers[0].image.as_deref(), Some("db:1"));
        // Only Lockstep's literal variables stay: what the pod was created with.
        let env = spec.containers[0].env.as_deref().unwrap_or_default();
        let kept: Vec<_> = env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(kept, vec![("LOCKSTEP_LEASE_SECONDS", Some("15"))]);
        assert!(spec.containers[0].command.is_none());
        assert!(spec.volumes.is_none());
        let status = stored.status.as_ref().expect("status");
        assert!(status.container_statuses.is_none());
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn a_pod_keeps_its_settings_annotation_as_a_digest_that_tells_values_apart() {
        let pod = |value: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "db-1", "namespace": "ns", "uid": "u1",
                    "annotations": {"lockstep.dev/postgresql": value, "other": "x"},
                    "labels": {"app.kubernetes.io/name": "beacon",
                        "app.kubernetes.io/instance": "db"}}
            }))
            .expect("a pod")
        };
        let kept = |value: &str| {
            let s = Owned::<Pod>::from_objects("beacon", vec![pod(value)]);
            s.of(Some("ns"), "db")[0].metadata.annotations.clone()
        };
        let a = kept("{\"parameters\":{\"work_mem\":\"8MB\"}}");
        assert_eq!(
            a,
            Some(BTreeMap::from([(
                "lockstep.dev/postgresql".to_owned(),
                digest("{\"parameters\":{\"work_mem\":\"8MB\"}}")
            )]))
        );
        assert_ne!(a, kept("{\"parameters\":{\"work_mem\":\"16MB\"}}"));
    }

    #[test]
    fn a_pod_keeps_of_its_metadata_what_is_read_and_lockstep_s_labels() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-1", "namespace": "ns", "uid": "u1",
                "generateName": "db-", "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T00:01:00Z",
                "annotations": {"lockstep.dev/kwok-ready-delay-ms": "2000"},
                "finalizers": ["example.com/f"],
                "labels": {"app.kubernetes.io/name": "beacon",
                    "app.kubernetes.io/instance": "db", "lockstep.dev/role": "primary",
                    "controller-revision-hash": "db-7c9fb687d5",
                    "statefulset.kubernetes.io/pod-name": "db-1",
                    "apps.kubernetes.io/pod-index": "1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "db", "uid": "s1", "controller": true,
                    "blockOwnerDeletion": true}]}
        }))
        .expect("a pod");
        let s = Owned::<Pod>::from_objects("beacon", vec![pod]);
        let stored = s.of(Some("ns"), "db");
        let meta = &stored[0].metadata;
        assert_eq!(meta.uid.as_deref(), Some("u1"));
        assert!(meta.creation_timestamp.is_some() && meta.deletion_timestamp.is_some());
        assert!(meta.annotations.is_none() && meta.finalizers.is_none());
        assert!(meta.generate_name.is_none() && meta.generation.is_none());
        let labels: Vec<&str> = meta.labels.iter().flatten().map(|(k, _)| &**k).collect();
        assert_eq!(
            labels,
            [
                "app.kubernetes.io/instance",
                "app.kubernetes.io/name",
                "lockstep.dev/role"
            ]
        );
        let owner = &meta.owner_references.as_ref().expect("an owner")[0];
        assert_eq!(
            (&*owner.kind, &*owner.name, &*owner.uid, owner.controller),
            ("StatefulSet", "db", "s1", Some(true))
        );
        assert_eq!(
            crate::machines::common::observe::ordinal_of(&stored[0], "db"),
            Some(1)
        );
    }

    #[test]
    fn a_claim_keeps_its_name_labels_and_size_only() {
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-db-0", "namespace": "ns", "uid": "c1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                "finalizers": ["kubernetes.io/pvc-protection"],
                "labels": {"app.kubernetes.io/name": "beacon",
                    "app.kubernetes.io/instance": "db"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
        }))
        .expect("a claim");
        let s = Owned::<PersistentVolumeClaim>::from_objects("beacon", vec![pvc]);
        let stored = s.of(Some("ns"), "db");
        let pvc = &stored[0];
        assert_eq!(pvc.metadata.uid.as_deref(), Some("c1"));
        assert!(pvc.metadata.annotations.is_none() && pvc.metadata.finalizers.is_none());
        assert!(pvc.metadata.creation_timestamp.is_none());
        let spec = pvc.spec.as_ref().expect("spec");
        assert!(spec.volume_name.is_none() && spec.access_modes.is_none());
        let size = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
        assert_eq!(
            size.and_then(|r| r.get("storage")).map(|q| &*q.0),
            Some("1Gi")
        );
        assert!(pvc.status.is_none());
    }
}
