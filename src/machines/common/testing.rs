//! Test fixtures every machine's unit tests share: a clock, worlds, decisions checked
//! against the declared table, Jobs and their outcomes, and whole reconciles through
//! the engine.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::jobs::{JobOutcome, JobView, Purpose};
use super::observe::PodView;
use crate::engine::machine::is_declared;
use crate::engine::{Decision, EngineStatus, Health, Input, Machine, Outcome, World, step};

/// The test clock: `secs` seconds after a fixed instant.
pub fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
}

/// The model checks' clock starts here; their failed Jobs failed at this time.
pub fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default()
}

/// A world observing `observed`, not deleting, at `now`, in a state entered at
/// `entered` (both [`t`] seconds), with no request taken on.
pub fn world_at<O>(observed: O, now: i64, entered: i64) -> World<O> {
    World {
        observed,
        deleting: false,
        now: t(now),
        entered_at: t(entered),
        acks: BTreeMap::new(),
    }
}

/// `M`'s decision in `state` on `o` at `now` (state entered at `entered`); a transition
/// it takes must be declared in its table.
pub fn decide_at<M: Machine>(
    spec: &M::Spec,
    state: &M::State,
    o: M::Observed,
    now: i64,
    entered: i64,
) -> Decision<M::State, M::Action> {
    let d = M::decide(spec, state, &world_at(o, now, entered));
    assert_declared::<M>(state, &d);
    d
}

/// A transition `d` takes from `from` is declared in `M`'s table.
pub fn assert_declared<M: Machine>(from: &M::State, d: &Decision<M::State, M::Action>) {
    if let Decision::Go { to, reason, .. } = d {
        assert!(
            is_declared::<M>(from, to, reason),
            "undeclared: {from:?} -> {to:?} ({reason})"
        );
    }
}

/// Pod `uid` running `image` as observed: `ready` or not, `terminating` or not, of no
/// known creation time or version, its role label read as `role`.
pub fn pod<R>(uid: String, image: &str, ready: bool, terminating: bool, role: R) -> PodView<R> {
    PodView {
        uid,
        image: Some(image.to_owned()),
        ready,
        terminating,
        created: None,
        version: String::new(),
        role,
    }
}

/// What `pick` yields for each of `actions` that matches its pattern, in order:
/// `picked!(d.actions(), Action::DeletePod { ordinal, .. } => *ordinal)`.
macro_rules! picked {
    ($actions:expr, $pattern:pat => $picked:expr) => {
        $actions
            .iter()
            .filter_map(|a| match a {
                $pattern => Some($picked),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
}
pub(crate) use picked;

/// The state a decision goes to, if it transitions.
pub fn target<S, A>(d: &Decision<S, A>) -> Option<&S> {
    match d {
        Decision::Go { to, .. } => Some(to),
        Decision::Stay { .. } => None,
    }
}

/// Whether a decision stays Degraded.
pub fn is_degraded<S, A>(d: &Decision<S, A>) -> bool {
    matches!(
        d,
        Decision::Stay {
            health: Health::Degraded,
            ..
        }
    )
}

/// A decision's message.
pub fn message<S, A>(d: &Decision<S, A>) -> &str {
    match d {
        Decision::Go { message, .. } | Decision::Stay { message, .. } => message,
    }
}

/// The Job `key` of the owner `owner` (named `<owner>-<key>`), created at `t(0)`.
pub fn job(owner: &str, key: &str, purpose: Purpose, outcome: JobOutcome) -> JobView {
    JobView {
        name: format!("{owner}-{key}"),
        uid: format!("job-{key}"),
        key: Some(key.to_owned()),
        purpose: Some(purpose),
        created: Some(t(0)),
        outcome,
    }
}

/// A Job that failed at `t(at)` by reaching its backoff limit.
pub fn failed(at: i64) -> JobOutcome {
    JobOutcome::Failed {
        at: t(at),
        reason: "BackoffLimitExceeded".to_owned(),
        message: "Job has reached the specified backoff limit".to_owned(),
    }
}

/// A Job that succeeded at `t(0)`.
pub fn succeeded() -> JobOutcome {
    JobOutcome::Succeeded { at: t(0) }
}

/// A status whose record holds `state` (written as JSON, the way the API server has it),
/// entered at `t(0)`.
pub fn status_in<S: serde::Serialize + schemars::JsonSchema>(state: &S) -> EngineStatus<S> {
    let mut status = EngineStatus::default();
    status.machine = Some(
        serde_json::json!({
            "state": state,
            "enteredAt": t(0),
            "stateVersion": 1,
        })
        .into(),
    );
    status
}

/// One reconcile of `M` from `status` at `t(secs)`; `status` then holds what it wrote.
pub fn reconcile_at<M: Machine>(
    spec: &M::Spec,
    status: &mut EngineStatus<M::State>,
    o: &M::Observed,
    deleting: bool,
    secs: i64,
) -> Outcome<M> {
    let out = step::<M>(Input {
        spec,
        status,
        observed: o.clone(),
        generation: 1,
        deleting,
        now: t(secs),
    });
    *status = out.status.clone();
    out
}

/// The state a status's record holds, if it decodes.
pub fn current<M: Machine>(status: &EngineStatus<M::State>) -> Option<M::State> {
    crate::engine::step::decode::<M>(status)
        .ok()
        .flatten()
        .map(|r| r.state)
}
