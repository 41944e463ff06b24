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

mod project;
#[cfg(test)]
pub(crate) mod tests;

pub use project::*;

/// One stored object: its resourceVersion, and the rest of it, projected, as JSON.
#[derive(Debug)]
struct Entry {
    version: Option<Box<str>>,
    content: Box<[u8]>,
    /// The object's [`Project::moment`] and when this process first saw that value.
    seen: Option<Box<Seen>>,
}

/// A [`Project::moment`] value and when this process first saw it, on its monotonic
/// clock.
#[derive(Debug)]
struct Seen {
    moment: Box<str>,
    at: std::time::Instant,
}

impl Entry {
    /// Project `object` and encode it (`None` only if it does not serialize, which no
    /// object decoded from the API server fails to).
    fn of<K: Project>(object: &mut K, keep: &Keep) -> Option<Self> {
        let seen = object.moment().map(|moment| {
            Box::new(Seen {
                moment: moment.into(),
                at: std::time::Instant::now(),
            })
        });
        object.project(keep);
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
            seen,
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
    /// How many events were applied: waiters on a change of the store subscribe to it.
    applied: tokio::sync::watch::Sender<u64>,
}

impl<K: Project> Owned<K> {
    /// An empty store for objects of owners of `kind_label`, not yet listed, keeping
    /// nothing beyond what every machine reads.
    pub fn new(kind_label: &'static str) -> Self {
        Self::keeping(kind_label, Keep::NOTHING)
    }

    /// An empty store for objects of owners of `kind_label`, not yet listed, keeping
    /// what `keep` declares.
    pub fn keeping(kind_label: &'static str, keep: Keep) -> Self {
        Self {
            shared: Arc::new(Shared {
                index: RwLock::new(Index::new(kind_label, keep)),
                listed: tokio::sync::watch::Sender::new(false),
                applied: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// A listed store holding `objects` (projected, keeping nothing more than every
    /// machine reads), for tests of observation code.
    pub fn from_objects(kind_label: &'static str, objects: Vec<K>) -> Self {
        Self::from_objects_keeping(kind_label, Keep::NOTHING, objects)
    }

    /// A listed store holding `objects`, projected keeping what `keep` declares.
    pub fn from_objects_keeping(kind_label: &'static str, keep: Keep, objects: Vec<K>) -> Self {
        let store = Self::keeping(kind_label, keep);
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
        self.shared.applied.send_modify(|n| *n = n.wrapping_add(1));
        owners.keys
    }

    /// Whether the store shows the object `name` of `owner` with UID `uid` going: gone,
    /// replaced by another object of that name, or carrying a deletion timestamp.
    pub(crate) fn shows_going(
        &self,
        namespace: Option<&str>,
        owner: &str,
        name: &str,
        uid: &str,
    ) -> bool {
        !self.of(namespace, owner).iter().any(|o| {
            let meta = o.meta();
            meta.name.as_deref() == Some(name)
                && meta.uid.as_deref() == Some(uid)
                && meta.deletion_timestamp.is_none()
        })
    }

    /// Resolves once `holds` holds of the store (looked at again after each event it
    /// applies), or `within` has passed; says which.
    pub(crate) async fn until(
        &self,
        within: std::time::Duration,
        holds: impl Fn(&Self) -> bool,
    ) -> bool {
        let mut applied = self.shared.applied.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if holds(self) {
                return true;
            }
            // The sender lives as long as `self`: `changed` fails only on the deadline.
            if !matches!(
                tokio::time::timeout_at(deadline, applied.changed()).await,
                Ok(Ok(()))
            ) {
                return holds(self);
            }
        }
    }

    /// The current [`Project::moment`] of the object `name` in `namespace`, with when
    /// this process first saw that value: measured on its monotonic clock, given on its
    /// wall clock as it reads now (so a step of the wall clock since does not move it).
    /// `None` if the object is not stored or has no moment.
    pub fn moment_seen(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<(String, chrono::DateTime<chrono::Utc>)> {
        let index = self
            .shared
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let seen = index
            .get(&(namespace.map(str::to_owned), name.to_owned()))?
            .seen
            .as_ref()?;
        let ago = chrono::Duration::from_std(seen.at.elapsed()).ok()?;
        Some((seen.moment.to_string(), chrono::Utc::now() - ago))
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
    /// What the operator keeps beyond what every machine reads.
    keep: Keep,
    /// Owner → object name → object.
    by_owner: HashMap<Key, Objects>,
    /// Object → its owner (`None`: not one of ours; kept so deletes are cheap).
    owner_of: HashMap<Key, Option<Key>>,
    /// The objects seen in the relist under way.
    relisted: Option<std::collections::HashSet<Key>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Project> Index<K> {
    pub(crate) fn new(kind_label: &'static str, keep: Keep) -> Self {
        Self {
            kind_label,
            keep,
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
        let Some(mut entry) = Entry::of(&mut object, &self.keep) else {
            // Not storable: drop any older version, and let its owner look.
            return self.remove(&key).into_iter().chain(owner).collect();
        };
        // A moment seen before keeps the time it was first seen.
        if let (Some(now), Some(before)) = (
            entry.seen.as_mut(),
            self.get(&key).and_then(|e| e.seen.as_ref()),
        ) && now.moment == before.moment
        {
            now.at = before.at;
        }
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
