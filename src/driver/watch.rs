//! The watches: the custom resource's, filtered by `ResourceTrigger`, and the owned kinds',
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
//!   relist), or changes in anything its projection keeps but
//!   `metadata.resourceVersion` (see [`super::cache`]). Status changes that machines
//!   read do trigger: a pod becoming ready or losing readiness, a Job's completion, a
//!   StatefulSet's observed generation; those no machine reads (a claim's binding, a
//!   pod reported not ready yet, replica counts) do not.
//! - Owned-object triggers are debounced per owner ([`super::debounce`]); the custom
//!   resource's own triggers are not. Each trigger is tagged with what it is
//!   ([`super::Trigger`]) for the metrics.
//! - Each owned-object watch selects, on the server, the objects of this machine's kind
//!   only.
//!
//! # Assumptions
//! - Owned objects carry [`labels::MANAGED_BY`] = [`labels::MANAGED_BY_VALUE`] and
//!   [`labels::NAME`] = the owner's [`Operator::KIND_LABEL`] (the watch selector), and
//!   [`labels::INSTANCE`] = the owner's name, and live in the owner's namespace. Pods are
//!   owned by their StatefulSet, not by the custom resource, so the mapping is by labels,
//!   never by owner references.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::cache::{Owned, Project};
use super::own_writes::OwnWrites;
use super::wakeup::Trigger;
use super::{Cache, Error, Operator, labels};

use super::cache::Key;

/// Objects per page of a watch's (re)list. kube's default, 500, makes the first list of
/// 1,500 pods three responses of ~4 MB decoded whole; the memory of such a burst is
/// not all returned to the system afterwards (RSS after a restart stayed ~30 MiB higher
/// at 500 clusters). 100 bounds each burst at a fifth, for a few more requests per list.
pub const LIST_PAGE_SIZE: u32 = 100;

/// Return the memory freed after a (re)list to the system.
///
/// A list arrives in pages decoded whole, several kinds at once: at a restart with 1,000
/// clusters, tens of MiB are allocated and freed within seconds. glibc keeps freed
/// memory in its arenas (one per thread that allocated) and gives back only the top of
/// the main one, so the process stayed that much larger for good. `malloc_trim` gives
/// back every whole free page of every arena; it takes milliseconds, once per list.
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer, only releases pages no allocation uses,
    // and locks each arena while it does.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The label selector of the owned-object watches of owners of `kind_label`: only
/// this machine's objects are sent, never another machine's.
pub fn owned_selector(kind_label: &str) -> String {
    format!(
        "{}={},{}={kind_label}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE,
        labels::NAME
    )
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

/// What the store keeps of a custom resource: all of it but `managedFields` and
/// `kubectl.kubernetes.io/last-applied-configuration` (a copy of the spec that
/// client-side `kubectl apply` keeps; nothing reads it).
pub(crate) fn project_resource<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Decides which events of the custom resource trigger a reconcile.
///
/// Pure bookkeeping, unit-tested without a cluster. An event triggers when the object
/// is first seen, when what the machine reads of its metadata changed (generation,
/// labels, annotations, finalizers, deletion timestamp), or when it is a write this
/// process did not make: `ours` tells this process's writes apart, in either order of
/// response and event ([`super::own_writes`]). Re-deliveries of a version already seen
/// (a relist) trigger nothing.
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
        match self.seen.insert(key.clone(), (read, version.clone())) {
            None => true,
            Some((read_before, _)) if read_before != read => {
                // It triggers either way; telling `ours` lets it forget the version if
                // it is ours (a finalizer we added).
                if let Some(rv) = version.as_deref() {
                    ours.claims(&key, rv);
                }
                true
            }
            Some((_, version_before)) => {
                version_before != version
                    && !version.as_deref().is_some_and(|rv| ours.claims(&key, rv))
            }
        }
    }

    /// Forget `object` (it was deleted).
    pub(crate) fn forget<K: Resource>(&mut self, object: &K) {
        self.seen.remove(&(object.namespace(), object.name_any()));
    }
}

/// Watch one owned kind into `store`; yield the owners to reconcile, each with the
/// trigger naming this kind.
fn owned_watch<K, R>(
    client: &Client,
    namespace: Option<&str>,
    store: Owned<K>,
) -> BoxStream<'static, (ObjectRef<R>, Trigger)>
where
    K: Project + Resource<Scope = k8s_openapi::NamespaceResourceScope> + Debug + DeserializeOwned,
    R: Resource<DynamicType = ()> + 'static,
{
    let api = api::<K>(client, namespace);
    let config = watcher::Config::default()
        .labels(&owned_selector(store.kind_label()))
        .page_size(LIST_PAGE_SIZE)
        .any_semantic();
    let kind = K::kind(&());
    let trigger = Trigger::owned(&kind);
    watcher(api, config)
        .backoff(WatchBackoff::default())
        .flat_map(move |event| {
            let owners = match event {
                Ok(watcher::Event::InitDone) => {
                    let owners = store.apply(watcher::Event::InitDone);
                    release_freed_memory();
                    owners
                }
                Ok(event) => store.apply(event),
                Err(error) => {
                    tracing::warn!(%kind, %error, "owned-object watch failed; retrying with backoff");
                    Vec::new()
                }
            };
            stream::iter(owners.into_iter().map(move |(ns, name)| {
                let r = ObjectRef::<R>::new(&name);
                let r = match ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                };
                (r, trigger)
            }))
        })
        .boxed()
}

impl Cache {
    /// Start the label-selected watches of every owned kind, in `namespace` or
    /// cluster-wide. Returns the cache (empty until the watches have listed; see
    /// [`Cache::ready`]) and the stream of owners their changes concern, each with the
    /// [`Trigger`] of the kind that changed. The watches run only while the stream is
    /// polled.
    pub fn watch<O: Operator>(
        client: &Client,
        namespace: Option<&str>,
    ) -> (
        Self,
        impl Stream<Item = (ObjectRef<O::Resource>, Trigger)> + Send + 'static,
    ) {
        let cache = Cache::new(O::KIND_LABEL, O::KEEP);
        let c = cache.clone();
        let streams = vec![
            owned_watch::<_, O::Resource>(client, namespace, c.statefulsets),
            owned_watch::<_, O::Resource>(client, namespace, c.pods),
            owned_watch::<_, O::Resource>(client, namespace, c.services),
            owned_watch::<_, O::Resource>(client, namespace, c.jobs),
            owned_watch::<_, O::Resource>(client, namespace, c.cronjobs),
            owned_watch::<_, O::Resource>(client, namespace, c.configmaps),
            owned_watch::<_, O::Resource>(client, namespace, c.pdbs),
            owned_watch::<_, O::Resource>(client, namespace, c.network_policies),
            owned_watch::<_, O::Resource>(client, namespace, c.pvcs),
            owned_watch::<_, O::Resource>(client, namespace, c.secrets),
            owned_watch::<_, O::Resource>(client, namespace, c.leases),
        ];
        (cache, stream::select_all(streams))
    }

    /// Wait until every store has completed its first list, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::CacheNotReady`] naming the first store that did not list in time (its
    /// watch is failing: missing RBAC, an unserved API).
    pub async fn ready(&self, timeout: Duration) -> Result<(), Error> {
        async fn one<K: Project>(
            store: &Owned<K>,
            what: &'static str,
            t: Duration,
        ) -> Result<(), Error> {
            tokio::time::timeout(t, store.wait_until_listed())
                .await
                .map_err(|_| Error::CacheNotReady(what))
        }
        one(&self.statefulsets, "statefulsets", timeout).await?;
        one(&self.pods, "pods", timeout).await?;
        one(&self.services, "services", timeout).await?;
        one(&self.jobs, "jobs", timeout).await?;
        one(&self.cronjobs, "cronjobs", timeout).await?;
        one(&self.configmaps, "configmaps", timeout).await?;
        one(&self.pdbs, "poddisruptionbudgets", timeout).await?;
        one(&self.network_policies, "networkpolicies", timeout).await?;
        one(&self.pvcs, "persistentvolumeclaims", timeout).await?;
        one(&self.secrets, "secrets", timeout).await?;
        one(&self.leases, "leases", timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::cache::tests::cm;
    use k8s_openapi::api::core::v1::ConfigMap;

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
        assert!(
            !ours
                .begin((Some("ns".into()), "db".into()))
                .finish(Some("2".into()))
        );
        assert!(!t.admit(&with_status("2", 1), &ours));
    }

    #[test]
    fn our_own_status_write_whose_event_beats_the_response_triggers_nothing() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        let write = ours.begin((Some("ns".into()), "db".into()));
        assert!(!t.admit(&with_status("2", 1), &ours));
        assert!(
            !write.finish(Some("2".into())),
            "nothing to reconcile again"
        );
    }

    #[test]
    fn a_status_write_by_someone_else_during_ours_is_reconciled_after_it() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        let write = ours.begin((Some("ns".into()), "db".into()));
        assert!(
            !t.admit(&with_status("2", 1), &ours),
            "held while ours is in flight"
        );
        assert!(write.finish(Some("3".into())), "then reconciled again");
        assert!(!t.admit(&with_status("3", 1), &ours));
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
        assert!(
            !ours
                .begin((Some("ns".into()), "db".into()))
                .finish(Some("2".into()))
        );
        assert!(t.admit(&with_status("2", 2), &ours));
    }

    #[test]
    fn a_relisted_unchanged_version_triggers_nothing() {
        let (mut t, ours) = (ResourceTrigger::default(), OwnWrites::default());
        t.admit(&with_status("1", 1), &ours);
        assert!(!t.admit(&with_status("1", 1), &ours));
    }

    #[test]
    fn a_custom_resource_is_kept_without_managed_fields_or_a_last_applied_copy() {
        let mut o = with_status("1", 1);
        o.metadata.managed_fields = Some(vec![Default::default()]);
        o.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_owned(), "{}".to_owned()),
                ("lockstep.dev/x".to_owned(), "y".to_owned()),
            ]
            .into(),
        );
        project_resource(&mut o);
        assert!(o.metadata.managed_fields.is_none());
        assert_eq!(
            o.metadata
                .annotations
                .as_ref()
                .map(|a| a.keys().collect::<Vec<_>>()),
            Some(vec![&"lockstep.dev/x".to_owned()])
        );
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
