//! The controller: kube-runtime's `Controller` around one reconcile function.
//!
//! # One reconcile, in order
//! 1. Without a deletion timestamp and without our finalizer: add the finalizer (a JSON
//!    patch fenced on the resourceVersion read) and stop; the change re-triggers. Once a
//!    deletion timestamp is set the finalizer is never added.
//! 2. Decode the persisted engine status ([`Operator::engine_status`]).
//! 3. Observe the owned objects from the [`Cache`] ([`Operator::observe`]).
//! 4. Decide ([`crate::engine::step()`]).
//! 5. Render each action ([`Operator::render`]) and execute the [`Op`]s in order. After
//!    a pod's deletion the reconcile waits (at most [`DELETE_SEEN_WITHIN`]) until the
//!    pod store shows that pod going, so the next decision never reads a pod it deleted
//!    as live.
//! 6. Build the full status ([`Operator::status`]); if it differs from the `.status`
//!    read (as JSON), write the difference with one merge patch to the status
//!    subresource, fenced on the resourceVersion read.
//! 7. Record the outcome's Event, once the write succeeded.
//! 8. If the engine says the finalizer may go, and the write (if any) succeeded, remove
//!    it (a fenced JSON patch).
//!
//! # The stale-cache fence
//! The reflector store is updated by the watch, some time after a write. A reconcile
//! that follows its own write at once (a transition requeues immediately) could read
//! the pre-write object from the store and re-decide from a stale state. The driver
//! keeps, per object, the resourceVersions its writes replaced and the object the API
//! server returned for the last one; while the store still serves a replaced version,
//! the reconcile uses the returned object instead. Even without this, the fenced write would
//! refuse to persist a decision made from the stale object (409 → [`Error::Conflict`] →
//! re-read): the fence saves the wasted round trip and the conflict, the
//! resourceVersion precondition guarantees correctness.

mod deleted;
mod resources;

use resources::{Shared, resource_events};

pub use deleted::DELETE_SEEN_WITHIN;
use deleted::until_pod_seen_going;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{SubsecRound, Utc};
use futures::StreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::Instrument;

use super::authority::Authority;
use super::cache::Key;
use super::config::{Backoff, Config, FIELD_MANAGER};
use super::debounce::Debouncer;
use super::events::Recorder;
use super::execute::{self, describe_op};
use super::hooks::{DriverHooks, Finished, Target};
use super::own_writes::OwnWrites;
use super::status::{fenced_status_patch, merge_diff};
use super::wakeup::{Trigger, Wakeups};
use super::{Cache, Error, Op, Operator, namespace_terminating};
use crate::engine::step::{decode, describe, with_error, with_refusal};
use crate::engine::{Input, Note, NoteKind, Taken, step};

/// Run `O` until shutdown: watch its custom resources (in `config`'s namespace or
/// cluster-wide) and everything they own, and reconcile each object on every relevant
/// change.
///
/// The future completes after a graceful shutdown ([`Config::shutdown_on`]): no new
/// reconciles start and running ones finish. Dropping it stops everything at once.
///
/// # Errors
/// None escape: API failures are retried per object with backoff and recorded in
/// `status.machine.lastError`; watch failures are retried with backoff and logged.
pub async fn run<O: Operator>(client: Client, config: Config) {
    let Config {
        namespace,
        concurrency,
        backoff,
        instance,
        hooks,
        shutdown,
        triggers,
        owned_store_timeout,
        authority,
        debounce,
    } = config;
    let ns = namespace.as_deref();

    let (reader, writer) = reflector::store();
    let written = Arc::new(OwnWrites::default());
    let fence = Arc::new(Fence::<O::Resource>::default());
    let wakeups = Arc::new(Wakeups::default());
    let objects = resource_events::<O>(
        &client,
        ns,
        writer,
        Shared {
            hooks: hooks.clone(),
            wakeups: wakeups.clone(),
            written: written.clone(),
            fence: fence.clone(),
        },
    );
    let (cache, owned) = Cache::watch::<O>(&client, ns);
    let (woken, observer) = (wakeups.clone(), hooks.clone());
    let owned = owned.map(move |(owner, trigger)| {
        let key = (owner.namespace, owner.name);
        woken.record(key.clone(), trigger);
        observer.wake_requested(O::NAME, trigger);
        key
    });
    let debouncer = Debouncer::new(
        debounce,
        debounce.saturating_mul(Config::DEBOUNCE_MAX_WAIT_FACTOR),
    );
    let owned = debouncer.debounced(owned).map(|(ns, name)| {
        let owner = ObjectRef::<O::Resource>::new(&name);
        match ns {
            Some(ns) => owner.within(&ns),
            None => owner,
        }
    });

    let store = reader.clone();
    let mut controller = Controller::for_stream(objects, reader)
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_on(owned);
    for trigger in triggers {
        let (woken, observer, all) = (wakeups.clone(), hooks.clone(), store.clone());
        controller = controller.reconcile_all_on(trigger.map(move |()| {
            for object in all.state() {
                woken.record((object.namespace(), object.name_any()), Trigger::Resync);
                observer.wake_requested(O::NAME, Trigger::Resync);
            }
        }));
    }
    for signal in shutdown {
        controller = controller.graceful_shutdown_on(signal);
    }

    let instance = instance
        .or_else(|| std::env::var("POD_NAME").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| FIELD_MANAGER.to_owned());
    let reporter = Reporter {
        controller: FIELD_MANAGER.to_owned(),
        instance: Some(instance),
    };
    let context = Arc::new(Context::<O> {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        cache,
        hooks,
        backoff,
        owned_store_timeout,
        authority,
        fence,
        store,
        written,
        wakeups,
        debouncer,
        failures: Mutex::default(),
        _operator: PhantomData,
    });

    tracing::info!(
        machine = O::NAME,
        namespace = ns.unwrap_or("*"),
        "driver starting"
    );
    controller
        .run(reconcile::<O>, error_policy::<O>, context)
        .for_each(|result| async move { log_finished::<O>(result) })
        .await;
    tracing::info!(machine = O::NAME, "driver stopped");
}

/// How one reconcile ended, as the controller reports it.
type Finish<O> = Result<
    (ObjectRef<<O as Operator>::Resource>, Action),
    controller::Error<Error, watcher::Error>,
>;

/// Log how one reconcile ended (the driver's own log says more of a failure).
fn log_finished<O: Operator>(result: Finish<O>) {
    match result {
        Ok((object, action)) => tracing::trace!(%object, ?action, "reconciled"),
        Err(controller::Error::ReconcilerFailed(error, object)) => {
            tracing::debug!(%object, error = %error.redacted(), "reconcile failed");
        }
        Err(controller::Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, "object gone before its reconcile");
        }
        Err(error) => tracing::warn!(%error, "controller"),
    }
}

/// What the reconciles of one operator share.
struct Context<O: Operator> {
    client: Client,
    cache: Cache,
    recorder: Recorder,
    hooks: Arc<dyn DriverHooks>,
    backoff: Backoff,
    owned_store_timeout: Duration,
    /// Whether this process may still make mutating requests.
    authority: Authority,
    /// The stale-cache fence (shared with the watch, which tells it when the store has
    /// caught up).
    fence: Arc<Fence<O::Resource>>,
    /// The custom resources as the watch last delivered them (the controller's store).
    store: reflector::Store<O::Resource>,
    /// The resourceVersions of this process's own writes, so their events trigger
    /// nothing while anyone else's writes do.
    written: Arc<OwnWrites>,
    /// What asked for each object's next reconcile.
    wakeups: Arc<Wakeups>,
    /// The owned-object triggers held back per object.
    debouncer: Debouncer,
    /// Consecutive failed reconciles per object, for the backoff.
    failures: Mutex<HashMap<ObjectRef<O::Resource>, u32>>,
    _operator: PhantomData<fn() -> O>,
}

/// The stale-cache fence: per object, the resourceVersions our writes superseded since
/// the store last caught up, and the object the last write returned.
pub(crate) struct Fence<K: Resource<DynamicType = ()>> {
    written: Mutex<HashMap<ObjectRef<K>, Written<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for Fence<K> {
    fn default() -> Self {
        Self {
            written: Mutex::default(),
        }
    }
}

struct Written<K> {
    /// The versions our writes replaced, oldest first (several when we wrote twice, for
    /// example the finalizer then the status, before the store saw the first write).
    superseded: Vec<Option<String>>,
    object: Arc<K>,
}

impl<K: Resource<DynamicType = ()>> Fence<K> {
    /// The object to reconcile from: the store's, unless the store still serves a
    /// version we overwrote, in which case the object our last write returned.
    pub(crate) fn freshest(&self, key: &ObjectRef<K>, stored: Arc<K>) -> Arc<K> {
        let mut written = lock(&self.written);
        match written.get(key) {
            Some(w) if w.superseded.contains(&stored.resource_version()) => {
                tracing::debug!(
                    "the cache still serves a pre-write object; reconciling from the written one"
                );
                w.object.clone()
            }
            Some(_) => {
                // The store has caught up (or moved past our write): trust it again.
                written.remove(key);
                stored
            }
            None => stored,
        }
    }

    /// Remember that we overwrote version `read` of `key` and got `object` back.
    pub(crate) fn remember(&self, key: &ObjectRef<K>, read: Option<String>, mut object: K) {
        // Kept until the store catches up, or for good if no later reconcile looks:
        // without what no reconcile reads (a write returns managedFields).
        object.meta_mut().managed_fields = None;
        let object = Arc::new(object);
        let mut written = lock(&self.written);
        let mut superseded = match written.remove(key) {
            // Our previous write is what we just overwrote: the store may still serve
            // either version.
            Some(previous) if previous.object.resource_version() == read => previous.superseded,
            _ => Vec::new(),
        };
        superseded.push(read);
        written.insert(key.clone(), Written { superseded, object });
    }

    /// Forget `key` (it is gone).
    pub(crate) fn forget(&self, key: &ObjectRef<K>) {
        lock(&self.written).remove(key);
    }

    /// The store now serves version `rv` of `key`: unless that is a version our writes
    /// replaced, the store has caught up (or moved past our write) and the written
    /// object is dropped, by the rule [`Fence::freshest`] applies; it would otherwise be
    /// held until the next reconcile, for good at rest.
    pub(crate) fn caught_up(&self, key: &ObjectRef<K>, rv: Option<&str>) {
        let mut written = lock(&self.written);
        if written
            .get(key)
            .is_some_and(|w| !w.superseded.iter().any(|s| s.as_deref() == rv))
        {
            written.remove(key);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned map is still a valid map: every update is a single insert or remove.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<O: Operator> Context<O> {
    fn remember(&self, key: &ObjectRef<O::Resource>, read: Option<String>, object: O::Resource) {
        self.fence.remember(key, read, object);
        // The watch may have delivered the written version before the response came.
        if let Some(stored) = self.store.get(key) {
            self.fence
                .caught_up(key, stored.meta().resource_version.as_deref());
        }
    }

    fn forget(&self, key: &ObjectRef<O::Resource>) {
        self.fence.forget(key);
        self.wakeups.forget(&owner_key(key));
        lock(&self.failures).remove(key);
    }

    /// The reconcile of `key` asked to run again after `after` (`trigger`: a requeue or
    /// a retry).
    fn again(&self, key: &ObjectRef<O::Resource>, trigger: Trigger, after: Duration) {
        self.wakeups.again(owner_key(key), trigger, after);
        self.hooks.wake_requested(O::NAME, trigger);
    }

    /// Fail unless this process may still make a mutating request (checked right
    /// before each one).
    fn may_act(&self) -> Result<(), Error> {
        self.authority.check().map_err(Error::NoAuthority)
    }

    fn api(&self, namespace: &str) -> Api<O::Resource> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

/// What one reconcile will do, decided without I/O. Holds nothing of the machine's
/// types, so the reconcile future is `Send` whatever they are.
struct Plan {
    ops: Vec<Op>,
    /// The merge patch of `.status`, when it must change.
    status_diff: Option<Value>,
    /// The full status that should be stored after the write.
    desired_status: Value,
    note: Option<Note>,
    taken: Option<Taken>,
    requeue: Option<Duration>,
    release_finalizer: bool,
    /// The state after the decision, as `Kind` or `Kind step`.
    state: Option<String>,
}

/// The `.status` of `object` as JSON (`null` when absent).
fn current_status<K: serde::Serialize>(object: &K) -> Result<Value, Error> {
    let value = serde_json::to_value(object).map_err(Error::Serde)?;
    Ok(value.get("status").cloned().unwrap_or(Value::Null))
}

/// Steps 2–4 and the status half of 6: decode, observe, decide, render.
fn plan<O: Operator>(object: &O::Resource, cache: &Cache) -> Result<Plan, Error> {
    let engine = O::engine_status(object);
    let persisted = decode::<O>(&engine).ok().flatten().map(|r| r.state);
    let observed = O::observe(object, persisted.as_ref(), cache);
    let spec = O::spec(object);
    let now = Utc::now().trunc_subsecs(0);
    let outcome = step::<O>(Input {
        spec: &spec,
        status: &engine,
        observed: observed.clone(),
        generation: object.meta().generation.unwrap_or_default(),
        deleting: object.meta().deletion_timestamp.is_some(),
        now,
    });
    let mut ops = Vec::new();
    for action in &outcome.actions {
        ops.extend(O::render(object, action)?);
    }
    let state = outcome.state.as_ref().map(describe::<O>);
    let desired_status = O::status(
        object,
        outcome.status,
        outcome.state.as_ref(),
        &observed,
        now,
    );
    let status_diff = merge_diff(&current_status(object)?, &desired_status);
    Ok(Plan {
        ops,
        status_diff,
        desired_status,
        note: outcome.note,
        taken: outcome.taken,
        requeue: outcome.requeue,
        release_finalizer: outcome.release_finalizer,
        state,
    })
}

async fn reconcile<O: Operator>(
    stored: Arc<O::Resource>,
    ctx: Arc<Context<O>>,
) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(&*stored);
    let object = ctx.fence.freshest(&key, stored);
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let span = tracing::info_span!(
        "reconcile",
        machine = O::NAME,
        namespace = %namespace,
        name = %name,
        state = tracing::field::Empty,
    );
    async move {
        let target = Target {
            machine: O::NAME,
            namespace: &namespace,
            name: &name,
        };
        // What is held back for this object is in the cache this reconcile reads.
        let owner = owner_key(&key);
        ctx.debouncer.cancel(&owner);
        let trigger = ctx.wakeups.take(&owner);
        ctx.hooks.woken(&target, trigger);
        ctx.hooks.reconcile_started(&target);
        let started = Instant::now();
        let mut latest = object.clone();
        let result = reconcile_once::<O>(&ctx, &key, &target, object, &mut latest).await;
        let finished = match &result {
            Ok((_, finished)) => {
                lock(&ctx.failures).remove(&key);
                *finished
            }
            Err(Error::Conflict) => {
                tracing::debug!("lost a write race; re-reading and re-deciding");
                Finished::Conflict
            }
            Err(error) if error.is_namespace_terminating() => {
                tracing::debug!(error = %error.redacted(), "namespace being deleted; retrying with backoff");
                record_error::<O>(&ctx, &key, &latest, error).await;
                Finished::Failed
            }
            Err(error) => {
                tracing::warn!(error = %error.redacted(), "reconcile failed; retrying with backoff");
                record_error::<O>(&ctx, &key, &latest, error).await;
                Finished::Failed
            }
        };
        ctx.hooks.reconcile_finished(&target, started.elapsed(), finished);
        result.map(|(action, _)| action)
    }
    .instrument(span)
    .await
}

async fn reconcile_once<O: Operator>(
    ctx: &Context<O>,
    key: &ObjectRef<O::Resource>,
    target: &Target<'_>,
    object: Arc<O::Resource>,
    latest: &mut Arc<O::Resource>,
) -> Result<(Action, Finished), Error> {
    let api = ctx.api(target.namespace);
    let deleting = object.meta().deletion_timestamp.is_some();
    let holds_finalizer = object.finalizers().iter().any(|f| f == O::FINALIZER);

    // 1. The finalizer comes before anything is created.
    if !deleting && !holds_finalizer {
        let read = object.resource_version();
        ctx.may_act()?;
        let write = ctx.written.begin(owner_key(key));
        let patched = execute::add_finalizer(&api, &*object, O::FINALIZER).await?;
        tracing::info!(finalizer = O::FINALIZER, "added finalizer");
        // The finalizer's event triggers the next reconcile whoever wrote it.
        let _ = write.finish(patched.resource_version());
        ctx.remember(key, read, patched);
        return Ok((Action::await_change(), Finished::FinalizerAdded));
    }
    if deleting && !holds_finalizer {
        tracing::debug!("being deleted without our finalizer: nothing to do");
        ctx.forget(key);
        return Ok((Action::await_change(), Finished::Idle));
    }

    // 2–4 (no I/O), once the owned caches have listed.
    ctx.cache.ready(ctx.owned_store_timeout).await?;
    let plan = plan::<O>(&object, &ctx.cache)?;
    if let Some(state) = &plan.state {
        tracing::Span::current().record("state", state.as_str());
        ctx.hooks.state(target, state);
    }

    // 5. Act.
    for op in &plan.ops {
        ctx.may_act()?;
        let executed = execute::execute(&ctx.client, target.namespace, op, FIELD_MANAGER).await?;
        tracing::debug!(op = %describe_op(op), ?executed, "executed");
        // Past its bound the wait has logged why; the next decision reads what there is.
        let _seen = until_pod_seen_going(&ctx.cache, target, (op, executed)).await;
    }

    // 6. One fenced status write, only if the status changes.
    let mut interleaved = false;
    let wrote = match &plan.status_diff {
        Some(diff) => {
            let read = object.resource_version();
            let patch = fenced_status_patch(read.as_deref().unwrap_or_default(), diff.clone());
            ctx.may_act()?;
            let write = ctx.written.begin(owner_key(key));
            let written =
                execute::write_status(&api, &object.name_any(), &patch, FIELD_MANAGER).await?;
            interleaved = write.finish(written.resource_version());
            if current_status(&written)? != plan.desired_status {
                tracing::warn!(
                    "the status read back differs from the one written: Operator::status must \
                     round-trip through the resource's status type, or every reconcile writes"
                );
            }
            tracing::debug!("status written");
            ctx.remember(key, read, written.clone());
            *latest = Arc::new(written);
            true
        }
        None => false,
    };

    // 7. The event, now that the write is in.
    if let Some(taken) = &plan.taken {
        tracing::info!(
            from = taken.from,
            to = taken.to,
            reason = taken.reason,
            "transition"
        );
        ctx.hooks
            .transitioned(target, taken.from, taken.to, taken.reason);
    }
    if let Some(note) = &plan.note {
        publish(ctx, &**latest, note, plan.taken.is_some()).await;
    }

    // 8. Release the finalizer once the final state is persisted.
    if plan.release_finalizer {
        ctx.may_act()?;
        execute::remove_finalizer(&api, &**latest, O::FINALIZER).await?;
        tracing::info!(finalizer = O::FINALIZER, "released finalizer");
        ctx.forget(key);
    }

    if interleaved {
        // Someone else wrote the object while our status write was in flight, and its
        // event was held: look at it now.
        tracing::debug!("the object changed while the status write was in flight");
        ctx.again(key, Trigger::Object, Duration::ZERO);
        return Ok((Action::requeue(Duration::ZERO), finished(wrote, &plan)));
    }
    if let Some(after) = plan.requeue {
        ctx.again(key, Trigger::Requeue, after);
    }
    let action = plan
        .requeue
        .map_or_else(Action::await_change, Action::requeue);
    Ok((action, finished(wrote, &plan)))
}

/// What a reconcile that ran its plan did, for the hooks.
fn finished(wrote: bool, plan: &Plan) -> Finished {
    match (wrote, plan.ops.is_empty()) {
        (true, _) => Finished::StatusWritten,
        (false, false) => Finished::Acted,
        (false, true) => Finished::Idle,
    }
}

/// The key of `object` as the watches, the wakeups and [`OwnWrites`] name it.
fn owner_key<K: Resource>(object: &ObjectRef<K>) -> Key {
    (object.namespace.clone(), object.name.clone())
}

/// The Event of a note; best effort (a lost event is logged, never retried: the status
/// write it describes is already in).
async fn publish<O: Operator>(
    ctx: &Context<O>,
    object: &O::Resource,
    note: &Note,
    transition: bool,
) {
    let (type_, action) = match (note.kind, transition) {
        (NoteKind::Warning, _) => (EventType::Warning, "Hold"),
        (NoteKind::Normal, true) => (EventType::Normal, "Transition"),
        (NoteKind::Normal, false) => (EventType::Normal, "Initialize"),
    };
    let event = Event {
        type_,
        reason: note.reason.clone(),
        note: Some(truncate(&note.message, 1024)),
        action: action.to_owned(),
        secondary: None,
    };
    match ctx.recorder.publish(&event, &object.object_ref(&())).await {
        Ok(()) => {}
        Err(error) if namespace_terminating(&error) => {
            tracing::debug!(reason = %note.reason, "event dropped: its namespace is being deleted");
        }
        Err(error) => tracing::warn!(%error, reason = %note.reason, "could not record event"),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Record `error` as `status.machine.lastError` (redacted), if that changes anything;
/// a refusal ([`Error::is_refusal`]) is also reported as `Degraded`, with a Warning
/// Event once the write is in. Best effort: a failure here is logged; the reconcile is
/// retried anyway.
async fn record_error<O: Operator>(
    ctx: &Context<O>,
    key: &ObjectRef<O::Resource>,
    object: &O::Resource,
    error: &Error,
) {
    if matches!(error, Error::NoAuthority(_)) || ctx.may_act().is_err() {
        return;
    }
    let Some((read, patch, note)) = error_patch::<O>(object, error) else {
        return;
    };
    let namespace = object.namespace().unwrap_or_default();
    let write = ctx.written.begin(owner_key(key));
    match execute::write_status(
        &ctx.api(&namespace),
        &object.name_any(),
        &patch,
        FIELD_MANAGER,
    )
    .await
    {
        Ok(written) => {
            // The failed reconcile is retried anyway, which reads whatever was held.
            let _ = write.finish(written.resource_version());
            if let Some(note) = &note {
                publish(ctx, &written, note, false).await;
            }
            ctx.remember(key, read, written);
        }
        Err(e) => tracing::debug!(error = %e.redacted(), "could not record lastError"),
    }
}

/// The fenced status patch that records `error` (and, for a refusal, Degraded and the
/// Warning to publish), if it changes anything.
fn error_patch<O: Operator>(
    object: &O::Resource,
    error: &Error,
) -> Option<(Option<String>, Value, Option<Note>)> {
    let engine = O::engine_status(object);
    let read = object.resource_version();
    let fence = |diff| fenced_status_patch(read.as_deref().unwrap_or_default(), diff);
    if error.is_refusal() {
        let generation = object.meta().generation.unwrap_or_default();
        let now = Utc::now().trunc_subsecs(0);
        let deleting = object.meta().deletion_timestamp.is_some();
        let (next, note) =
            with_refusal::<O>(&engine, &error.redacted(), generation, deleting, now)?;
        let before = serde_json::to_value(&engine).ok()?;
        let after = serde_json::to_value(&next).ok()?;
        let diff = merge_diff(&before, &after)?;
        return Some((read.clone(), fence(diff), Some(note)));
    }
    let next = with_error::<O>(&engine, &error.redacted())?;
    let diff = merge_diff(
        &engine.machine.as_ref()?.to_value(),
        &next.machine.as_ref()?.to_value(),
    )?;
    Some((
        read.clone(),
        fence(serde_json::json!({ "machine": diff })),
        None,
    ))
}

fn error_policy<O: Operator>(
    object: Arc<O::Resource>,
    error: &Error,
    ctx: Arc<Context<O>>,
) -> Action {
    let key = ObjectRef::from_obj(&*object);
    let attempt = {
        let mut failures = lock(&ctx.failures);
        let count = failures.entry(key.clone()).or_insert(0);
        let attempt = *count;
        *count = count.saturating_add(1);
        attempt
    };
    let unit = rand::random_range(-1.0..=1.0);
    let delay = ctx
        .backoff
        .delay(attempt, matches!(error, Error::Conflict), unit);
    tracing::debug!(attempt, ?delay, "requeue after error");
    ctx.again(&key, Trigger::Retry, delay);
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;
