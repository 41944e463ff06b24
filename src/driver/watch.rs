//! The watches: the custom resource's, filtered by predicates, and the owned kinds',
//! reflected into the shared [`Cache`] and mapped back to their owners.
//!
//! # Guarantees
//! - The custom resource triggers a reconcile when it is first seen, when its
//!   generation, labels, annotations, finalizers or deletion timestamp change, and when
//!   it changes in a write this process did not make (a status restore, a
//!   `kubectl edit`, a wiped record): the driver's own writes trigger nothing
//!   (`ResourceTrigger`).
//! - A failing watch (an API server restarting, `410 Expired`) is retried within
//!   [`WatchBackoff`]'s cap of two seconds, so progress resumes promptly once the
//!   server is back.
//! - An owned object triggers a reconcile of its owner when it appears, disappears
//!   (including objects that vanished while a watch was down and are missing from the
//!   relist), or changes in anything but `metadata.resourceVersion` and
//!   `metadata.managedFields`. Status changes do trigger: a pod's readiness, a Job's
//!   completion and a claim's binding are what machines wait for.
//!
//! # Assumptions
//! - Owned objects carry [`labels::MANAGED_BY`] = [`labels::MANAGED_BY_VALUE`] (the watch
//!   selector), [`labels::NAME`] = the owner's [`Operator::KIND_LABEL`] and
//!   [`labels::INSTANCE`] = the owner's name, and live in the owner's namespace. Pods are
//!   owned by their StatefulSet, not by the custom resource, so the mapping is by labels,
//!   never by owner references.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Cache, Error, Operator, labels};

/// Where an object lives: namespace and name.
pub(crate) type Key = (Option<String>, String);

/// The label selector of every owned-object watch.
pub fn owned_selector() -> String {
    format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE)
}

/// An `Api` in `namespace`, or across all namespaces.
pub(crate) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The owner an owned object names through its labels, if it names one of `kind_label`.
pub(crate) fn owner_of<K: Resource>(object: &K, kind_label: &str) -> Option<Key> {
    let l = object.labels();
    if l.get(labels::NAME).map(String::as_str) != Some(kind_label) {
        return None;
    }
    let instance = l.get(labels::INSTANCE)?;
    Some((object.namespace(), instance.clone()))
}

/// The retry delays of a failing watch: 250 ms doubling to at most 2 s, each ±25 %
/// jitter, reset by the first event after a success.
///
/// kube's default grows to 30 s, so watches that failed through an API-server restart
/// stayed down for tens of seconds after it was back; a watch costs one request per
/// retry, so a short cap is cheap.
#[derive(Debug, Clone, Default)]
pub struct WatchBackoff {
    attempt: u32,
}

impl WatchBackoff {
    /// The first delay.
    pub const BASE: Duration = Duration::from_millis(250);
    /// The largest delay.
    pub const CAP: Duration = Duration::from_secs(2);
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = Self::BASE
            .saturating_mul(2u32.saturating_pow(self.attempt.min(16)))
            .min(Self::CAP);
        self.attempt = self.attempt.saturating_add(1);
        Some(delay.mul_f64(1.0 + rand::random_range(-0.25..=0.25)))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Decides which events of the custom resource trigger a reconcile.
///
/// Pure bookkeeping, unit-tested without a cluster. An event triggers when the object
/// is first seen, when what the machine reads of its metadata changed (generation,
/// labels, annotations, finalizers, deletion timestamp), or when it is a write this
/// process did not make: `ours` holds the resourceVersions this process got back from
/// its own writes. Re-deliveries of a version already seen (a relist) trigger nothing.
#[derive(Debug, Default)]
pub(crate) struct ResourceTrigger {
    seen: HashMap<Key, (u64, Option<String>)>,
}

impl ResourceTrigger {
    /// Whether `object` (as a watch delivered it) should be reconciled.
    pub(crate) fn admit<K: Resource>(&mut self, object: &K, ours: &OwnWrites) -> bool {
        let key = (object.namespace(), object.name_any());
        let meta = object.meta();
        let mut hasher = DefaultHasher::new();
        (
            meta.generation,
            &meta.labels,
            &meta.annotations,
            &meta.finalizers,
            meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        )
            .hash(&mut hasher);
        let read = hasher.finish();
        let version = object.resource_version();
        let own_write = version.as_deref().is_some_and(|rv| ours.take(rv));
        match self.seen.insert(key, (read, version.clone())) {
            None => true,
            Some((read_before, _)) if read_before != read => true,
            Some((_, version_before)) => version_before != version && !own_write,
        }
    }

    /// Forget `object` (it was deleted).
    pub(crate) fn forget<K: Resource>(&mut self, object: &K) {
        self.seen.remove(&(object.namespace(), object.name_any()));
    }
}

/// The resourceVersions of the writes this process made to its custom resources,
/// shared between the driver (which adds) and the [`ResourceTrigger`] (which takes).
///
/// A write whose event arrives before the driver has added its version is taken for
/// someone else's: that costs one idle reconcile (no request), never a missed one.
#[derive(Debug, Default)]
pub(crate) struct OwnWrites(std::sync::Mutex<HashSet<String>>);

impl OwnWrites {
    /// The most versions remembered; past this the oldest are not told apart (a write
    /// whose event never came, for an object deleted meanwhile, must not leak).
    const LIMIT: usize = 4096;

    /// Remember that this process wrote version `rv`.
    pub(crate) fn add(&self, rv: Option<String>) {
        let Some(rv) = rv else { return };
        let mut set = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if set.len() >= Self::LIMIT {
            set.clear();
        }
        set.insert(rv);
    }

    /// Whether this process wrote version `rv` (forgetting it).
    pub(crate) fn take(&self, rv: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(rv)
    }
}

/// A hash of what matters about an object: everything but `metadata.resourceVersion`
/// and `metadata.managedFields`.
pub(crate) fn content_hash<K: Serialize>(object: &K) -> u64 {
    let mut value = serde_json::to_value(object).unwrap_or(serde_json::Value::Null);
    if let Some(meta) = value
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    let mut hasher = DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

#[derive(Debug, Clone)]
struct Seen {
    hash: u64,
    owner: Option<Key>,
}

/// Turns the events of one owned kind into the owners to reconcile.
///
/// Pure bookkeeping over watch events, so it is unit-tested without a cluster.
#[derive(Debug)]
pub(crate) struct OwnerTrigger {
    kind_label: &'static str,
    seen: HashMap<Key, Seen>,
    relisted: Option<HashSet<Key>>,
}

impl OwnerTrigger {
    pub(crate) fn new(kind_label: &'static str) -> Self {
        Self {
            kind_label,
            seen: HashMap::new(),
            relisted: None,
        }
    }

    /// The owners that `event` concerns (deduplicated, in no particular order).
    pub(crate) fn owners<K>(&mut self, event: &watcher::Event<K>) -> Vec<Key>
    where
        K: Resource + Serialize,
    {
        let mut out = Vec::new();
        match event {
            watcher::Event::Init => self.relisted = Some(HashSet::new()),
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                let key = (o.namespace(), o.name_any());
                if let (watcher::Event::InitApply(_), Some(listed)) = (event, &mut self.relisted) {
                    listed.insert(key.clone());
                }
                let now = Seen {
                    hash: content_hash(o),
                    owner: owner_of(o, self.kind_label),
                };
                let before = self.seen.insert(key, now.clone());
                match before {
                    Some(b) if b.hash == now.hash => {}
                    Some(b) => {
                        // Relabelled away from an owner: that owner must look too.
                        out.extend(b.owner.filter(|o| Some(o) != now.owner.as_ref()));
                        out.extend(now.owner);
                    }
                    None => out.extend(now.owner),
                }
            }
            watcher::Event::Delete(o) => {
                let key = (o.namespace(), o.name_any());
                let before = self.seen.remove(&key).and_then(|s| s.owner);
                out.extend(before.or_else(|| owner_of(o, self.kind_label)));
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.relisted.take() {
                    let gone: Vec<Key> = self
                        .seen
                        .keys()
                        .filter(|k| !listed.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        out.extend(self.seen.remove(&key).and_then(|s| s.owner));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// Watch one owned kind into `writer`'s store; yield the owners to reconcile.
fn owned_watch<K, R>(
    client: &Client,
    namespace: Option<&str>,
    writer: reflector::store::Writer<K>,
    kind_label: &'static str,
) -> BoxStream<'static, ObjectRef<R>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    R: Resource<DynamicType = ()> + 'static,
{
    let api = api::<K>(client, namespace);
    let config = watcher::Config::default()
        .labels(&owned_selector())
        .any_semantic();
    let mut trigger = OwnerTrigger::new(kind_label);
    let kind = K::kind(&());
    watcher(api, config)
        .backoff(WatchBackoff::default())
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(writer)
        .flat_map(move |event| {
            let owners = match event {
                Ok(event) => trigger.owners(&event),
                Err(error) => {
                    tracing::warn!(%kind, %error, "owned-object watch failed; retrying with backoff");
                    Vec::new()
                }
            };
            stream::iter(owners.into_iter().map(|(ns, name)| {
                let r = ObjectRef::<R>::new(&name);
                match ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            }))
        })
        .boxed()
}

impl Cache {
    /// Start the label-selected watches of every owned kind, in `namespace` or
    /// cluster-wide. Returns the cache (empty until the watches have listed; see
    /// [`Cache::ready`]) and the stream of owners their changes concern. The watches
    /// run only while the stream is polled.
    pub fn watch<O: Operator>(
        client: &Client,
        namespace: Option<&str>,
    ) -> (
        Self,
        impl Stream<Item = ObjectRef<O::Resource>> + Send + 'static,
    ) {
        let (statefulsets, w1) = reflector::store();
        let (pods, w2) = reflector::store();
        let (services, w3) = reflector::store();
        let (jobs, w4) = reflector::store();
        let (cronjobs, w5) = reflector::store();
        let (configmaps, w6) = reflector::store();
        let (pdbs, w7) = reflector::store();
        let (pvcs, w8) = reflector::store();
        let k = O::KIND_LABEL;
        let streams = vec![
            owned_watch::<_, O::Resource>(client, namespace, w1, k),
            owned_watch::<_, O::Resource>(client, namespace, w2, k),
            owned_watch::<_, O::Resource>(client, namespace, w3, k),
            owned_watch::<_, O::Resource>(client, namespace, w4, k),
            owned_watch::<_, O::Resource>(client, namespace, w5, k),
            owned_watch::<_, O::Resource>(client, namespace, w6, k),
            owned_watch::<_, O::Resource>(client, namespace, w7, k),
            owned_watch::<_, O::Resource>(client, namespace, w8, k),
        ];
        let cache = Cache {
            statefulsets,
            pods,
            services,
            jobs,
            cronjobs,
            configmaps,
            pdbs,
            pvcs,
        };
        (cache, stream::select_all(streams))
    }

    /// Wait until every store has completed its first list, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::CacheNotReady`] naming the first store that did not list in time (its
    /// watch is failing: missing RBAC, an unserved API).
    pub async fn ready(&self, timeout: Duration) -> Result<(), Error> {
        async fn one<K>(store: &Store<K>, what: &'static str, t: Duration) -> Result<(), Error>
        where
            K: Resource<DynamicType = ()> + Clone + 'static,
        {
            match tokio::time::timeout(t, store.wait_until_ready()).await {
                Ok(Ok(())) => Ok(()),
                _ => Err(Error::CacheNotReady(what)),
            }
        }
        one(&self.statefulsets, "statefulsets", timeout).await?;
        one(&self.pods, "pods", timeout).await?;
        one(&self.services, "services", timeout).await?;
        one(&self.jobs, "jobs", timeout).await?;
        one(&self.cronjobs, "cronjobs", timeout).await?;
        one(&self.configmaps, "configmaps", timeout).await?;
        one(&self.pdbs, "poddisruptionbudgets", timeout).await?;
        one(&self.pvcs, "persistentvolumeclaims", timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, owner: &str, kind: &str, rv: &str, data: &str) -> ConfigMap {
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

    #[test]
    fn a_new_owned_object_triggers_its_owner() {
        let mut t = OwnerTrigger::new("beacon");
        let owners = t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")));
        assert_eq!(owners, [key("a")]);
    }

    #[test]
    fn an_object_of_another_kind_triggers_nothing() {
        let mut t = OwnerTrigger::new("beacon");
        let owners = t.owners(&watcher::Event::Apply(cm("a-cm", "a", "other", "1", "x")));
        assert!(owners.is_empty());
    }

    #[test]
    fn a_resource_version_only_change_triggers_nothing() {
        let mut t = OwnerTrigger::new("beacon");
        t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")));
        let owners = t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "2", "x")));
        assert!(owners.is_empty());
    }

    #[test]
    fn a_content_change_triggers_the_owner() {
        let mut t = OwnerTrigger::new("beacon");
        t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")));
        let owners = t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "2", "y")));
        assert_eq!(owners, [key("a")]);
    }

    #[test]
    fn a_relabelled_object_triggers_both_owners() {
        let mut t = OwnerTrigger::new("beacon");
        t.owners(&watcher::Event::Apply(cm("cm", "a", "beacon", "1", "x")));
        let owners = t.owners(&watcher::Event::Apply(cm("cm", "b", "beacon", "2", "x")));
        assert_eq!(owners, [key("a"), key("b")]);
    }

    #[test]
    fn a_deletion_triggers_the_owner() {
        let mut t = OwnerTrigger::new("beacon");
        t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")));
        let owners = t.owners(&watcher::Event::Delete(cm("a-cm", "a", "beacon", "2", "x")));
        assert_eq!(owners, [key("a")]);
    }

    #[test]
    fn an_unchanged_relist_triggers_nothing_but_a_vanished_object_triggers_its_owner() {
        let mut t = OwnerTrigger::new("beacon");
        t.owners(&watcher::Event::Apply(cm("a-cm", "a", "beacon", "1", "x")));
        t.owners(&watcher::Event::Apply(cm("b-cm", "b", "beacon", "1", "x")));
        assert!(t.owners::<ConfigMap>(&watcher::Event::Init).is_empty());
        let again = t.owners(&watcher::Event::InitApply(cm(
            "a-cm", "a", "beacon", "5", "x",
        )));
        assert!(again.is_empty());
        let done = t.owners::<ConfigMap>(&watcher::Event::InitDone);
        assert_eq!(done, [key("b")]);
    }

    fn with_status(rv: &str, generation: i64) -> ConfigMap {
        let mut o = cm("db", "db", "beacon", rv, "x");
        o.metadata.generation = Some(generation);
        o
    }

    #[test]
    fn a_custom_resource_first_seen_is_reconciled() {
        let mut t = ResourceTrigger::default();
        assert!(t.admit(&with_status("1", 1), &OwnWrites::default()));
    }

    #[test]
    fn our_own_status_write_triggers_nothing() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        ours.add(Some("2".into()));
        assert!(!t.admit(&with_status("2", 1), &ours));
    }

    #[test]
    fn a_status_write_by_someone_else_is_reconciled() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        assert!(t.admit(&with_status("2", 1), &ours));
    }

    #[test]
    fn a_spec_change_is_reconciled_even_in_our_own_write() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        ours.add(Some("2".into()));
        assert!(t.admit(&with_status("2", 2), &ours));
    }

    #[test]
    fn a_relisted_unchanged_version_triggers_nothing() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        assert!(!t.admit(&with_status("1", 1), &ours));
    }

    #[test]
    fn watch_retries_stay_within_two_seconds() {
        let delays: Vec<Duration> = WatchBackoff::default().take(20).collect();
        assert!(delays[0] <= Duration::from_millis(313), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_millis(2500)),
            "{delays:?}"
        );
        let mut b = WatchBackoff::default();
        b.nth(10);
        kube::runtime::utils::Backoff::reset(&mut b);
        assert!(b.next().is_some_and(|d| d <= Duration::from_millis(313)));
    }
}
