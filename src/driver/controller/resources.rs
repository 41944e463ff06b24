//! The watch of the custom resources: reflected into the driver's store, each change a
//! reconcile must see admitted (not the echo of the driver's own status writes), each
//! wake-up recorded, and every event told to the hooks that want them.

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;

use super::Fence;
use crate::driver::Operator;
use crate::driver::hooks::{DriverHooks, ResourceEvent};
use crate::driver::own_writes::OwnWrites;
use crate::driver::wakeup::{Trigger, Wakeups};
use crate::driver::watch::{self, ResourceTrigger, WatchBackoff};

/// What the watch of the custom resources shares with the reconciles.
pub(super) struct Shared<O: Operator> {
    /// Told of every event (when they want them) and of every wake-up.
    pub(super) hooks: Arc<dyn DriverHooks>,
    /// Why each object was woken.
    pub(super) wakeups: Arc<Wakeups>,
    /// The driver's own status writes, so their echoes wake nothing.
    pub(super) written: Arc<OwnWrites>,
    /// The resource versions the store has caught up to.
    pub(super) fence: Arc<Fence<O::Resource>>,
}

/// The watch of the custom resources in `ns` (all with none), reflected into `writer`:
/// the objects whose change a reconcile must see (not the echo of the driver's own
/// status writes: [`ResourceTrigger`]), each recorded as woken; the store's fence told
/// of every version it applied, and everything forgotten of an object deleted.
pub(super) fn resource_events<O: Operator>(
    client: &Client,
    ns: Option<&str>,
    writer: reflector::store::Writer<O::Resource>,
    shared: Shared<O>,
) -> impl futures::Stream<Item = Result<O::Resource, watcher::Error>> + Send + use<O> {
    let Shared {
        hooks,
        wakeups,
        written,
        fence,
    } = shared;
    let mut trigger = ResourceTrigger::default();
    let (observer, gone) = (hooks.clone(), wakeups.clone());
    let wake = move |o: &O::Resource| {
        wakeups.record((o.namespace(), o.name_any()), Trigger::Object);
        hooks.wake_requested(O::NAME, Trigger::Object);
    };
    watcher(
        watch::api::<O::Resource>(client, ns),
        watcher::Config::default()
            .page_size(watch::LIST_PAGE_SIZE)
            .any_semantic(),
    )
    .backoff(WatchBackoff::default())
    .modify(watch::project_resource)
    .reflect(writer)
    .filter_map(move |event| {
        if let Ok(event) = &event
            && observer.wants_resource_events()
        {
            tell::<O>(&*observer, event);
        }
        let admitted = match event {
            Ok(watcher::Event::Apply(o)) => {
                fence.caught_up(
                    &ObjectRef::from_obj(&o),
                    o.meta().resource_version.as_deref(),
                );
                trigger.admit(&o, &written).then(|| {
                    wake(&o);
                    Ok(o)
                })
            }
            // Not told to the fence: during a relist the store serves the old versions
            // until `InitDone` (the reflector buffers the new ones).
            Ok(watcher::Event::InitApply(o)) => trigger.admit(&o, &written).then(|| {
                wake(&o);
                Ok(o)
            }),
            Ok(watcher::Event::Delete(o)) => {
                fence.forget(&ObjectRef::from_obj(&o));
                trigger.forget(&o);
                gone.forget(&(o.namespace(), o.name_any()));
                None
            }
            Ok(watcher::Event::Init) => None,
            Ok(watcher::Event::InitDone) => {
                watch::release_freed_memory();
                None
            }
            Err(error) => Some(Err(error)),
        };
        futures::future::ready(admitted)
    })
}

/// Hand one event of the custom resources' watch to the hooks.
fn tell<O: Operator>(hooks: &dyn DriverHooks, event: &watcher::Event<O::Resource>) {
    let seen = |o: &O::Resource| {
        let status = serde_json::to_value(o)
            .ok()
            .and_then(|mut v| v.get_mut("status").map(Value::take))
            .unwrap_or(Value::Null);
        let (namespace, name) = (o.namespace().unwrap_or_default(), o.name_any());
        hooks.resource_event(
            O::NAME,
            ResourceEvent::Seen {
                namespace: &namespace,
                name: &name,
                status: &status,
            },
        );
    };
    match event {
        watcher::Event::Init => hooks.resource_event(O::NAME, ResourceEvent::Relisting),
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => seen(o),
        watcher::Event::Delete(o) => {
            let (namespace, name) = (o.namespace().unwrap_or_default(), o.name_any());
            hooks.resource_event(
                O::NAME,
                ResourceEvent::Deleted {
                    namespace: &namespace,
                    name: &name,
                },
            );
        }
        watcher::Event::InitDone => hooks.resource_event(O::NAME, ResourceEvent::Listed),
    }
}
