//! [`Faults`]: a tower layer for the kube [`Client`] of an operator under test that
//! records every request and injects faults at exact request boundaries.
//!
//! ```no_run
//! # async fn doc(config: kube::Config) -> Result<(), kube::Error> {
//! use lockstep::testkit::Faults;
//! let faults = Faults::new();
//! faults.crash_after(7); // the 7th mutating request reaches the server, then: crash
//! let client = faults.client(config)?;
//! // run the operator with `client` on a task; when `faults.crashed()` resolves, abort
//! // that task and start a fresh operator with a fresh client.
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Every request through the layer is recorded in order ([`Faults::log`]), classified
//!   ([`RequestInfo`]), with the created object's name (from the body of a `POST`), the UID
//!   precondition of a `DELETE`, and how it ended ([`Outcome`]).
//! - Crash after the `k`-th mutating request ([`Faults::crash_after`]): that request is
//!   forwarded and reaches the server; when its response arrives the crash fires
//!   ([`Faults::crashed`] resolves), and the response is swallowed (the caller gets an
//!   error, as if the process had died before reading it). From then on nothing leaves:
//!   every new request fails without being sent ([`Outcome::Blocked`]), every open
//!   response body (watches included) fails at its next read, and responses of requests
//!   still in flight are swallowed. A mutating request numbered above `k` is never sent.
//!   [`Faults::crash_after_nth`] names the request by what it does instead (the `n`-th
//!   mutating request a predicate matches), with the same guarantees.
//! - A refusal ([`Faults::refuse_once`], [`Faults::refuse_status_write`]) answers one
//!   matching request with a synthesized `Status` error of the given code without
//!   forwarding it.
//! - A stale read ([`Faults::stale_read`]) replays, once, an earlier version of an object
//!   into a watch stream right after the event that triggers it, and after a hold
//!   re-delivers the newest version seen (a lagging API server that catches up).
//! - Dropped watch events ([`Faults::drop_watch_events`]) never reach the client; later
//!   events of the same objects do.
//! - Every injected fault is listed in [`Faults::injected`].
//!
//! # Assumptions
//! - The layer is the outermost one of the client ([`kube::client::ClientBuilder::with_layer`]
//!   on the default stack), so the synthesized answers are not retried by kube.
//! - Request bodies are buffered (kube's are), so the layer can read them.
//! - Predicates run under the layer's lock: they must not call back into [`Faults`].
//! - Only the operator under test uses the client, so mutating requests are numbered in
//!   the order that operator issues them (one reconcile issues them one at a time).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use kube::Client;
use kube::client::{Body, ClientBuilder, DynBody};
use serde_json::Value;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tower::{BoxError, Layer, Service};

use super::lines::{LineFilter, WatchEvent};
use super::request::RequestInfo;

/// The errors the layer gives the client in place of an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The simulated operator crashed after its `k`-th mutating request: nothing more
    /// leaves it, and nothing more reaches it.
    #[error("fault injection: the operator crashed after mutating request {0}")]
    Crashed(usize),
}

/// How a recorded request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No answer yet.
    InFlight,
    /// The server answered with this HTTP status (and the caller saw it).
    Answered(u16),
    /// The server answered with this HTTP status, but the caller did not see it: the
    /// crash fired on this answer, or had fired before it arrived.
    Swallowed(u16),
    /// Not sent: an injected fault answered with this HTTP status.
    Refused(u16),
    /// Not sent: the operator had crashed (or was about to).
    Blocked,
    /// Sent, but no answer came (a transport error).
    Failed(String),
}

/// One request, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its position among all requests through the layer, from 1.
    pub seq: usize,
    /// Its position among the mutating requests that were sent, from 1.
    pub mutating_seq: Option<usize>,
    /// The request, classified.
    pub request: RequestInfo,
    /// The object it concerns: the name in the path, else `metadata.name` of the body
    /// (a create), else `metadata.generateName` followed by `*`.
    pub object: Option<String>,
    /// The UID precondition of a delete.
    pub uid_precondition: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Record {
    /// The HTTP status the server answered with, if it answered (whether or not the
    /// caller saw it).
    pub fn server_status(&self) -> Option<u16> {
        match self.outcome {
            Outcome::Answered(code) | Outcome::Swallowed(code) => Some(code),
            _ => None,
        }
    }

    /// Whether the server carried it out (answered 2xx).
    pub fn took_effect(&self) -> bool {
        self.server_status()
            .is_some_and(|c| (200..300).contains(&c))
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} {}",
            self.seq,
            self.request.verb,
            self.request.target()
        )?;
        if let Some(object) = &self.object {
            write!(f, " {object}")?;
        }
        if let Some(uid) = &self.uid_precondition {
            write!(f, " (uid {uid})")?;
        }
        write!(f, " → {:?}", self.outcome)
    }
}

/// A fault that was injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// The crash fired after this mutating request.
    Crash {
        /// Its number among mutating requests.
        after: usize,
        /// The request.
        request: String,
    },
    /// A request was refused with a synthesized error.
    Refused {
        /// The request.
        request: String,
        /// The HTTP status given.
        code: u16,
    },
    /// A watch event was dropped.
    Dropped {
        /// The watch.
        watch: String,
        /// `TYPE name@resourceVersion`.
        event: String,
    },
    /// An earlier version of an object was replayed into a watch.
    Stale {
        /// The watch.
        watch: String,
        /// The object's name.
        name: String,
        /// The resourceVersion replayed.
        served: String,
        /// The newest resourceVersion seen before.
        current: String,
        /// The object replayed.
        object: Value,
    },
    /// The newest version was re-delivered after a stale replay.
    Healed {
        /// The watch.
        watch: String,
        /// The object's name.
        name: String,
        /// The resourceVersion re-delivered.
        resource_version: String,
    },
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Injected::Crash { after, request } => {
                write!(f, "crash after mutating request {after}: {request}")
            }
            Injected::Refused { request, code } => write!(f, "refused with {code}: {request}"),
            Injected::Dropped { watch, event } => write!(f, "dropped from {watch}: {event}"),
            Injected::Stale {
                watch,
                name,
                served,
                current,
                ..
            } => write!(f, "stale read on {watch}: {name}@{served} after @{current}"),
            Injected::Healed {
                watch,
                name,
                resource_version,
            } => write!(f, "healed on {watch}: {name}@{resource_version}"),
        }
    }
}

/// When a crash after the `k`-th mutating request fires, and what may leave before.
///
/// Pure bookkeeping, so it is unit-tested on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashPlan {
    after: Option<usize>,
    sent: usize,
    crashed: bool,
}

/// What to do with a request about to leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send it; for a mutating request, its number.
    Send(Option<usize>),
    /// Do not send it: the crash fired, or will fire before this request could leave.
    Block,
}

impl CrashPlan {
    /// Crash once the `k`-th mutating request has been answered (`k` from 1).
    pub fn after(k: usize) -> Self {
        Self {
            after: Some(k),
            ..Self::default()
        }
    }

    /// A request is about to leave.
    pub fn admit(&mut self, mutating: bool) -> Admit {
        if self.crashed {
            return Admit::Block;
        }
        if !mutating {
            return Admit::Send(None);
        }
        if self.after.is_some_and(|k| self.sent >= k) {
            return Admit::Block;
        }
        self.sent += 1;
        Admit::Send(Some(self.sent))
    }

    /// Mutating request `n` was answered (or failed): whether the crash fires now.
    pub fn answered(&mut self, n: usize) -> bool {
        if !self.crashed && self.after == Some(n) {
            self.crashed = true;
            return true;
        }
        false
    }

    /// Whether the crash has fired.
    pub fn crashed(&self) -> bool {
        self.crashed
    }

    /// How many mutating requests were sent.
    pub fn sent(&self) -> usize {
        self.sent
    }
}

/// Decides whether a request (classified, with its JSON body if it has one) matches.
pub type RequestPredicate = Box<dyn FnMut(&RequestInfo, Option<&Value>) -> bool + Send>;

/// Decides whether a watch event (on the watch request given) matches.
pub type EventPredicate = Box<dyn FnMut(&RequestInfo, &WatchEvent) -> bool + Send>;

struct Refusal {
    code: u16,
    matches: RequestPredicate,
    left: usize,
}

struct DropRule {
    matches: EventPredicate,
}

struct Stale {
    resource: String,
    back: usize,
    hold: Duration,
    matches: EventPredicate,
    fired: bool,
}

/// Where an object lives, for the versions seen: resource, namespace, name.
type ObjectKey = (String, Option<String>, String);

/// How many versions of each object are kept for stale reads.
const VERSIONS_KEPT: usize = 16;

/// Crash after the `n`-th mutating request that matches.
struct CrashOnMatch {
    left: usize,
    matches: RequestPredicate,
}

#[derive(Default)]
struct State {
    plan: CrashPlan,
    crash_on: Option<CrashOnMatch>,
    log: Vec<Record>,
    refusals: Vec<Refusal>,
    drops: Vec<DropRule>,
    stale: Vec<Stale>,
    versions: HashMap<ObjectKey, VecDeque<WatchEvent>>,
    injected: Vec<Injected>,
}

enum Admission {
    Send {
        index: usize,
        mutating: Option<usize>,
    },
    Refuse {
        code: u16,
    },
    Block,
}

impl State {
    fn admit(&mut self, request: RequestInfo, body: Option<&Value>) -> Admission {
        let object = request.name.clone().or_else(|| {
            let meta = body?.get("metadata")?;
            match meta.get("name").and_then(Value::as_str) {
                Some(name) => Some(name.to_owned()),
                None => Some(format!("{}*", meta.get("generateName")?.as_str()?)),
            }
        });
        let uid_precondition = body
            .and_then(|b| b.pointer("/preconditions/uid"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let seq = self.log.len() + 1;
        let mut record = Record {
            seq,
            mutating_seq: None,
            request,
            object,
            uid_precondition,
            outcome: Outcome::InFlight,
        };
        let refusal = if self.plan.crashed() {
            None
        } else {
            self.refusals
                .iter_mut()
                .filter(|r| r.left > 0)
                .find_map(|r| (r.matches)(&record.request, body).then_some(r))
        };
        let admission = if let Some(refusal) = refusal {
            refusal.left -= 1;
            record.outcome = Outcome::Refused(refusal.code);
            self.injected.push(Injected::Refused {
                request: record.to_string(),
                code: refusal.code,
            });
            Admission::Refuse { code: refusal.code }
        } else {
            match self.plan.admit(record.request.is_mutating()) {
                Admit::Send(mutating) => {
                    record.mutating_seq = mutating;
                    if let (Some(n), Some(on)) = (mutating, self.crash_on.as_mut())
                        && (on.matches)(&record.request, body)
                    {
                        on.left = on.left.saturating_sub(1);
                        if on.left == 0 {
                            // This is the request to crash after: nothing numbered
                            // above it may leave.
                            self.plan.after = Some(n);
                            self.crash_on = None;
                        }
                    }
                    Admission::Send {
                        index: seq - 1,
                        mutating,
                    }
                }
                Admit::Block => {
                    record.outcome = Outcome::Blocked;
                    Admission::Block
                }
            }
        };
        self.log.push(record);
        admission
    }

    /// The request at `index` was answered with `code`. Returns whether the caller may
    /// see the answer (false once crashed), and whether the crash fires now.
    fn answered(&mut self, index: usize, mutating: Option<usize>, code: u16) -> (bool, bool) {
        let fires = mutating.is_some_and(|n| self.plan.answered(n));
        let visible = !self.plan.crashed();
        if let Some(record) = self.log.get_mut(index) {
            record.outcome = if visible {
                Outcome::Answered(code)
            } else {
                Outcome::Swallowed(code)
            };
            if fires {
                let request = record.to_string();
                self.injected.push(Injected::Crash {
                    after: mutating.unwrap_or_default(),
                    request,
                });
            }
        }
        (visible, fires)
    }

    fn failed(&mut self, index: usize, mutating: Option<usize>, error: String) -> bool {
        let fires = mutating.is_some_and(|n| self.plan.answered(n));
        if let Some(record) = self.log.get_mut(index) {
            record.outcome = Outcome::Failed(error);
            if fires {
                let request = record.to_string();
                self.injected.push(Injected::Crash {
                    after: mutating.unwrap_or_default(),
                    request,
                });
            }
        }
        fires
    }

    /// What to emit for one line of the watch `request`; stale replays to heal later
    /// are added to `heals`.
    fn edit_watch_line(
        &mut self,
        request: &RequestInfo,
        line: Vec<u8>,
        heals: &mut Vec<(Duration, ObjectKey)>,
    ) -> Vec<Vec<u8>> {
        let Some(event) = WatchEvent::parse(&line) else {
            return vec![line];
        };
        let watch = request.to_string();
        for rule in &mut self.drops {
            if (rule.matches)(request, &event) {
                self.injected.push(Injected::Dropped {
                    watch,
                    event: describe_event(&event),
                });
                return Vec::new();
            }
        }
        let Some(name) = event.name().map(str::to_owned) else {
            return vec![line];
        };
        let key: ObjectKey = (
            request.resource.clone(),
            event.namespace().map(str::to_owned),
            name.clone(),
        );
        if !matches!(event.event_type.as_str(), "ADDED" | "MODIFIED" | "DELETED") {
            return vec![line];
        }
        let versions = self.versions.entry(key.clone()).or_default();
        versions.push_back(event.clone());
        while versions.len() > VERSIONS_KEPT {
            versions.pop_front();
        }
        let mut out = vec![line];
        if event.event_type == "DELETED" {
            return out;
        }
        for rule in &mut self.stale {
            if rule.fired || rule.resource != request.resource || !(rule.matches)(request, &event) {
                continue;
            }
            let Some(old) = versions
                .len()
                .checked_sub(rule.back + 1)
                .and_then(|i| versions.get(i))
            else {
                continue;
            };
            rule.fired = true;
            let replay = WatchEvent {
                event_type: "MODIFIED".to_owned(),
                object: old.object.clone(),
            };
            self.injected.push(Injected::Stale {
                watch: watch.clone(),
                name: name.clone(),
                served: old.resource_version().unwrap_or_default().to_owned(),
                current: event.resource_version().unwrap_or_default().to_owned(),
                object: old.object.clone(),
            });
            out.push(replay.to_line());
            heals.push((rule.hold, key.clone()));
        }
        out
    }

    /// The newest version of `key` seen, to re-deliver after a stale replay.
    fn heal(&mut self, request: &RequestInfo, key: &ObjectKey) -> Option<Vec<u8>> {
        let newest = self.versions.get(key)?.back()?;
        if newest.event_type == "DELETED" {
            return None;
        }
        let event = WatchEvent {
            event_type: "MODIFIED".to_owned(),
            object: newest.object.clone(),
        };
        self.injected.push(Injected::Healed {
            watch: request.to_string(),
            name: key.2.clone(),
            resource_version: newest.resource_version().unwrap_or_default().to_owned(),
        });
        Some(event.to_line())
    }
}

fn describe_event(event: &WatchEvent) -> String {
    format!(
        "{} {}@{}",
        event.event_type,
        event.name().unwrap_or("?"),
        event.resource_version().unwrap_or("?")
    )
}

/// The fault injector: one per client. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
    crash: CancellationToken,
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Faults")
            .field("plan", &state.plan)
            .field("requests", &state.log.len())
            .field("injected", &state.injected)
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// An injector that records requests and injects nothing until told to.
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            crash: CancellationToken::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update keeps the state consistent on its own: a panic in a predicate
        // leaves nothing half-done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Crash right after the `k`-th mutating request (from 1) is answered by the server.
    /// Replaces an earlier plan; has no effect once crashed.
    pub fn crash_after(&self, k: usize) {
        let mut state = self.lock();
        if !state.plan.crashed() {
            let sent = state.plan.sent();
            state.plan = CrashPlan::after(k);
            state.plan.sent = sent;
        }
    }

    /// Crash right after the `n`-th mutating request (from 1) that `matches` is answered
    /// by the server: a crash point named by what the request does rather than by its
    /// position, which shifts when a run makes a request more or less than another.
    /// Replaces an earlier plan; has no effect once crashed.
    pub fn crash_after_nth(
        &self,
        n: usize,
        matches: impl FnMut(&RequestInfo, Option<&Value>) -> bool + Send + 'static,
    ) {
        let mut state = self.lock();
        if !state.plan.crashed() {
            state.plan.after = None;
            state.crash_on = Some(CrashOnMatch {
                left: n.max(1),
                matches: Box::new(matches),
            });
        }
    }

    /// Answer the first request that `matches` with a synthesized error `code` (a
    /// Kubernetes `Status`), without sending it.
    pub fn refuse_once(
        &self,
        code: u16,
        matches: impl FnMut(&RequestInfo, Option<&Value>) -> bool + Send + 'static,
    ) {
        self.lock().refusals.push(Refusal {
            code,
            matches: Box::new(matches),
            left: 1,
        });
    }

    /// Refuse the `n`-th status write (from 1) with `code` (500: the server failed; 409:
    /// a conflict).
    pub fn refuse_status_write(&self, n: usize, code: u16) {
        let mut seen = 0;
        self.refuse_once(code, move |request, _| {
            if request.is_status_write() {
                seen += 1;
                seen == n
            } else {
                false
            }
        });
    }

    /// Drop every watch event that `matches` (on any watch through this client).
    pub fn drop_watch_events(
        &self,
        matches: impl FnMut(&RequestInfo, &WatchEvent) -> bool + Send + 'static,
    ) {
        self.lock().drops.push(DropRule {
            matches: Box::new(matches),
        });
    }

    /// Once: on the first watch event of `resource` (plural, `distributeddbs`) that
    /// `matches`, deliver it, then replay the version of that object seen `back` events
    /// before it (1: the previous one), and after `hold` re-deliver the newest version
    /// seen. Nothing is replayed while fewer versions were seen.
    pub fn stale_read(
        &self,
        resource: &str,
        back: usize,
        hold: Duration,
        matches: impl FnMut(&RequestInfo, &WatchEvent) -> bool + Send + 'static,
    ) {
        self.lock().stale.push(Stale {
            resource: resource.to_owned(),
            back: back.max(1),
            hold,
            matches: Box::new(matches),
            fired: false,
        });
    }

    /// The layer to add to a client's stack.
    pub fn layer(&self) -> FaultLayer {
        FaultLayer {
            faults: self.clone(),
        }
    }

    /// A client for `config` with this injector as its outermost layer.
    ///
    /// # Errors
    /// Whatever [`ClientBuilder::try_from`] fails with (an unusable configuration).
    pub fn client(&self, config: kube::Config) -> Result<Client, kube::Error> {
        Ok(ClientBuilder::try_from(config)?
            .with_layer(&self.layer())
            .build())
    }

    /// Resolves when the crash fires (at once if it has).
    pub fn crashed(&self) -> WaitForCancellationFutureOwned {
        self.crash.clone().cancelled_owned()
    }

    /// Whether the crash has fired.
    pub fn has_crashed(&self) -> bool {
        self.crash.is_cancelled()
    }

    /// Every request so far, in order.
    pub fn log(&self) -> Vec<Record> {
        self.lock().log.clone()
    }

    /// The mutating requests that were sent, in order.
    pub fn mutating(&self) -> Vec<Record> {
        self.lock()
            .log
            .iter()
            .filter(|r| r.mutating_seq.is_some())
            .cloned()
            .collect()
    }

    /// How many requests of each `verb resource[/subresource]` were made (sent or not).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for record in &self.lock().log {
            let key = format!("{} {}", record.request.verb, record.request.target());
            *counts.entry(key).or_insert(0) += 1;
        }
        counts
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> Vec<Injected> {
        self.lock().injected.clone()
    }

    fn admit(&self, request: RequestInfo, body: Option<&Value>) -> Admission {
        self.lock().admit(request, body)
    }

    fn answered(&self, index: usize, mutating: Option<usize>, code: u16) -> bool {
        let (visible, fires) = self.lock().answered(index, mutating, code);
        if fires {
            self.crash.cancel();
        }
        visible
    }

    fn failed(&self, index: usize, mutating: Option<usize>, error: String) {
        if self.lock().failed(index, mutating, error) {
            self.crash.cancel();
        }
    }

    fn blocked_error(&self) -> Error {
        let state = self.lock();
        Error::Crashed(state.plan.after.unwrap_or_else(|| state.plan.sent()))
    }
}

/// The [`Layer`] of a [`Faults`] (see [`Faults::layer`]).
#[derive(Clone, Debug)]
pub struct FaultLayer {
    faults: Faults,
}

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FaultService {
            inner,
            faults: self.faults.clone(),
        }
    }
}

/// The service a [`FaultLayer`] wraps around a client's stack.
#[derive(Debug)]
pub struct FaultService<S> {
    inner: S,
    faults: Faults,
}

type Answer = Result<Response<Box<DynBody>>, BoxError>;

/// The JSON body of a request that carries one (kube's are buffered, so this never waits).
fn peek_json(body: &Body) -> Option<Value> {
    let copy = body.try_clone()?;
    let collected = copy.collect().now_or_never()?.ok()?;
    serde_json::from_slice(&collected.to_bytes()).ok()
}

/// A Kubernetes `Status` answer with `code`, as the API server would send it.
fn status_answer(code: u16, request: &RequestInfo) -> Answer {
    let reason = match code {
        409 => "Conflict",
        404 => "NotFound",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("injected by lockstep::testkit: {code} for {request}"),
        "reason": reason,
        "code": code,
    });
    let body: Box<DynBody> = Box::new(
        Full::new(Bytes::from(body.to_string())).map_err(|never| -> BoxError { match never {} }),
    );
    let response = Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)?;
    Ok(response)
}

impl<S> Service<Request<Body>> for FaultService<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.faults.has_crashed() {
            // `call` will not use the inner service.
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let uri = request.uri();
        let info = RequestInfo::parse(request.method(), uri.path(), uri.query().unwrap_or(""));
        let body = info
            .is_mutating()
            .then(|| peek_json(request.body()))
            .flatten();
        match self.faults.admit(info.clone(), body.as_ref()) {
            Admission::Block => {
                let error = self.faults.blocked_error();
                Box::pin(std::future::ready(Err(error.into())))
            }
            Admission::Refuse { code } => Box::pin(std::future::ready(status_answer(code, &info))),
            Admission::Send { index, mutating } => {
                let faults = self.faults.clone();
                let sent = self.inner.call(request);
                Box::pin(async move {
                    match sent.await {
                        Ok(response) => {
                            let code = response.status().as_u16();
                            if !faults.answered(index, mutating, code) {
                                return Err(faults.blocked_error().into());
                            }
                            let (parts, body) = response.into_parts();
                            let body: Box<DynBody> = if info.is_watch() && parts.status.is_success()
                            {
                                Box::new(WatchBody::new(body, faults, info))
                            } else {
                                Box::new(GuardedBody {
                                    inner: body,
                                    crashed: Box::pin(faults.crashed()),
                                    faults,
                                })
                            };
                            Ok(Response::from_parts(parts, body))
                        }
                        Err(error) => {
                            faults.failed(index, mutating, error.to_string());
                            Err(error)
                        }
                    }
                })
            }
        }
    }
}

/// A response body that fails at its next read once the crash fired.
struct GuardedBody {
    inner: Box<DynBody>,
    crashed: Pin<Box<WaitForCancellationFutureOwned>>,
    faults: Faults,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.crashed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(self.faults.blocked_error().into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }
}

type LineEdit = Box<dyn FnMut(Vec<u8>) -> Vec<Vec<u8>> + Send>;

/// A watch response body, edited line by line (dropped events, stale replays), that
/// fails at its next read once the crash fired.
struct WatchBody {
    inner: Box<DynBody>,
    crashed: Pin<Box<WaitForCancellationFutureOwned>>,
    faults: Faults,
    request: RequestInfo,
    filter: LineFilter<LineEdit>,
    /// Replays to heal, as the line edit schedules them.
    scheduled: Arc<Mutex<Vec<(Duration, ObjectKey)>>>,
    heals: Vec<(Pin<Box<tokio::time::Sleep>>, ObjectKey)>,
    out: VecDeque<Bytes>,
    ended: bool,
}

impl WatchBody {
    fn new(inner: Box<DynBody>, faults: Faults, request: RequestInfo) -> Self {
        let scheduled: Arc<Mutex<Vec<(Duration, ObjectKey)>>> = Arc::default();
        let edit: LineEdit = {
            let (faults, request, scheduled) = (faults.clone(), request.clone(), scheduled.clone());
            Box::new(move |line| {
                let mut heals = Vec::new();
                let out = faults.lock().edit_watch_line(&request, line, &mut heals);
                if !heals.is_empty() {
                    scheduled
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend(heals);
                }
                out
            })
        };
        Self {
            inner,
            crashed: Box::pin(faults.crashed()),
            faults,
            request,
            filter: LineFilter::new(edit),
            scheduled,
            heals: Vec::new(),
            out: VecDeque::new(),
            ended: false,
        }
    }
}

impl http_body::Body for WatchBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.crashed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(this.faults.blocked_error().into())));
        }
        loop {
            if let Some(bytes) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let scheduled = std::mem::take(
                &mut *this
                    .scheduled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            for (hold, key) in scheduled {
                this.heals.push((Box::pin(tokio::time::sleep(hold)), key));
            }
            let mut due = Vec::new();
            this.heals.retain_mut(|(sleep, key)| {
                if sleep.as_mut().poll(cx).is_ready() {
                    due.push(key.clone());
                    false
                } else {
                    true
                }
            });
            for key in due {
                if let Some(line) = this.faults.lock().heal(&this.request, &key) {
                    this.out.push_back(Bytes::from(line));
                }
            }
            if !this.out.is_empty() {
                continue;
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.out.extend(this.filter.push(&data)),
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => {
                    this.out.extend(this.filter.finish());
                    this.ended = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn request(method: Method, path: &str) -> RequestInfo {
        RequestInfo::parse(&method, path, "")
    }

    const DDB: &str = "/apis/lockstep.dev/v1alpha1/namespaces/ns/distributeddbs";

    #[test]
    fn the_crash_fires_on_the_answer_to_the_kth_mutating_request_and_nothing_leaves_after() {
        let mut plan = CrashPlan::after(2);
        assert_eq!(plan.admit(false), Admit::Send(None));
        assert_eq!(plan.admit(true), Admit::Send(Some(1)));
        assert!(!plan.answered(1));
        assert_eq!(plan.admit(false), Admit::Send(None));
        assert_eq!(plan.admit(true), Admit::Send(Some(2)));
        // A third mutating request cannot leave, even before the second is answered.
        assert_eq!(plan.admit(true), Admit::Block);
        assert_eq!(plan.admit(false), Admit::Send(None));
        assert!(plan.answered(2), "the crash fires on the 2nd answer");
        assert!(!plan.answered(2), "once");
        assert_eq!(plan.admit(false), Admit::Block);
        assert_eq!(plan.admit(true), Admit::Block);
        assert_eq!(plan.sent(), 2);
    }

    #[test]
    fn a_crash_named_by_what_the_request_does_fires_after_its_nth_occurrence() {
        let faults = Faults::new();
        faults.crash_after_nth(2, |request, _| {
            request.resource == "pods" && request.verb == crate::testkit::Verb::Delete
        });
        let mut state = faults.lock();
        let delete = || request(Method::DELETE, "/api/v1/namespaces/ns/pods/db-2");
        let status = || request(Method::PATCH, &format!("{DDB}/orders/status"));
        assert!(matches!(
            state.admit(delete(), None),
            Admission::Send {
                mutating: Some(1),
                ..
            }
        ));
        assert!(matches!(
            state.admit(status(), None),
            Admission::Send {
                mutating: Some(2),
                ..
            }
        ));
        assert!(matches!(
            state.admit(delete(), None),
            Admission::Send {
                index: 2,
                mutating: Some(3)
            }
        ));
        // The crash is due after request 3: nothing mutating leaves any more.
        assert!(matches!(state.admit(status(), None), Admission::Block));
        assert_eq!(state.answered(0, Some(1), 200), (true, false));
        assert_eq!(state.answered(2, Some(3), 200), (false, true));
        assert!(matches!(
            state.admit(request(Method::GET, "/api/v1/namespaces/ns/pods"), None),
            Admission::Block
        ));
    }

    #[test]
    fn without_a_plan_everything_is_numbered_and_sent() {
        let mut plan = CrashPlan::default();
        let sent: Vec<Admit> = [true, false, true, true].map(|m| plan.admit(m)).into();
        assert_eq!(
            sent,
            [
                Admit::Send(Some(1)),
                Admit::Send(None),
                Admit::Send(Some(2)),
                Admit::Send(Some(3))
            ]
        );
        assert!(!plan.answered(3));
        assert!(!plan.crashed());
    }

    #[test]
    fn the_log_names_created_objects_and_delete_preconditions() {
        let mut state = State::default();
        let body = serde_json::json!({"metadata": {"name": "db-pre-2"}});
        state.admit(
            request(Method::POST, "/apis/batch/v1/namespaces/ns/jobs"),
            Some(&body),
        );
        let body = serde_json::json!({"preconditions": {"uid": "u-1"}});
        state.admit(
            request(Method::DELETE, "/api/v1/namespaces/ns/pods/db-2"),
            Some(&body),
        );
        state.admit(request(Method::GET, "/api/v1/namespaces/ns/pods"), None);
        let log = &state.log;
        assert_eq!(log[0].object.as_deref(), Some("db-pre-2"));
        assert_eq!(log[0].mutating_seq, Some(1));
        assert_eq!(log[1].object.as_deref(), Some("db-2"));
        assert_eq!(log[1].uid_precondition.as_deref(), Some("u-1"));
        assert_eq!(log[1].mutating_seq, Some(2));
        assert_eq!(log[2].mutating_seq, None);
        assert_eq!(state.answered(0, Some(1), 201), (true, false));
        assert!(state.log[0].took_effect());
    }

    #[test]
    fn a_refusal_answers_the_nth_status_write_once_without_numbering_it() {
        let faults = Faults::new();
        faults.refuse_status_write(2, 500);
        let status = format!("{DDB}/orders/status");
        let mut state = faults.lock();
        assert!(matches!(
            state.admit(request(Method::PATCH, &status), None),
            Admission::Send {
                mutating: Some(1),
                ..
            }
        ));
        assert!(matches!(
            state.admit(request(Method::PATCH, &format!("{DDB}/orders")), None),
            Admission::Send {
                mutating: Some(2),
                ..
            }
        ));
        assert!(matches!(
            state.admit(request(Method::PATCH, &status), None),
            Admission::Refuse { code: 500 }
        ));
        assert!(matches!(
            state.admit(request(Method::PATCH, &status), None),
            Admission::Send {
                mutating: Some(3),
                ..
            }
        ));
        assert_eq!(state.log[2].outcome, Outcome::Refused(500));
        assert_eq!(state.injected.len(), 1);
    }

    fn ddb(rv: u32, step: &str) -> Vec<u8> {
        WatchEvent {
            event_type: "MODIFIED".into(),
            object: serde_json::json!({
                "metadata": {"name": "orders", "namespace": "ns", "resourceVersion": rv.to_string()},
                "status": {"step": step},
            }),
        }
        .to_line()
    }

    fn rvs(lines: &[Vec<u8>]) -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| WatchEvent::parse(l))
            .filter_map(|e| e.resource_version().map(str::to_owned))
            .collect()
    }

    #[test]
    fn a_stale_read_replays_an_earlier_version_once_and_schedules_the_heal() {
        let faults = Faults::new();
        faults.stale_read("distributeddbs", 1, Duration::from_secs(2), |_, e| {
            e.object.pointer("/status/step").and_then(Value::as_str) == Some("1/PreHook")
        });
        let watch = RequestInfo::parse(&Method::GET, DDB, "watch=true");
        let mut state = faults.lock();
        let mut heals = Vec::new();
        let mut out = Vec::new();
        for (rv, step) in [
            (1, "2/PreHook"),
            (2, "2/PostHook"),
            (3, "1/PreHook"),
            (4, "1/PreHook"),
        ] {
            out.extend(state.edit_watch_line(&watch, ddb(rv, step), &mut heals));
        }
        assert_eq!(rvs(&out), ["1", "2", "3", "2", "4"]);
        assert_eq!(heals.len(), 1);
        assert_eq!(heals[0].0, Duration::from_secs(2));
        let healed = state.heal(&watch, &heals[0].1).expect("a heal");
        assert_eq!(rvs(&[healed]), ["4"]);
    }

    #[test]
    fn dropped_events_are_not_remembered_and_later_ones_pass() {
        let faults = Faults::new();
        let mut left = 1;
        faults.drop_watch_events(move |_, e| {
            let hit = left > 0 && e.resource_version() == Some("2");
            if hit {
                left -= 1;
            }
            hit
        });
        let watch = RequestInfo::parse(&Method::GET, DDB, "watch=true");
        let mut state = faults.lock();
        let mut heals = Vec::new();
        let mut out = Vec::new();
        for rv in 1..=3 {
            out.extend(state.edit_watch_line(&watch, ddb(rv, "x"), &mut heals));
        }
        assert_eq!(rvs(&out), ["1", "3"]);
        let key = (
            "distributeddbs".to_owned(),
            Some("ns".to_owned()),
            "orders".to_owned(),
        );
        assert_eq!(state.versions[&key].len(), 2);
        assert!(
            matches!(&state.injected[..], [Injected::Dropped { event, .. }] if event == "MODIFIED orders@2")
        );
    }
}
