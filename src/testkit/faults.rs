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

mod service;
mod state;
#[cfg(test)]
mod tests;

pub use service::{FaultLayer, FaultService};
use state::*;

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
    /// The UID precondition of a delete or an eviction.
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
