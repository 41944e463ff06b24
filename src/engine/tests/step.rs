//! Unit tests of [`crate::engine::step`], one reconcile at a time, with the toy machine.

use std::time::Duration;

use serde_json::json;

use super::toy::{
    Api, CLEANED_UP, CREATED, DELETE_REQUESTED, Misbehave, SCALE_REQUESTED, SCALING_DEADLINE,
    SCALING_POLL, Toy, ToyAction, ToySpec, ToyState,
};
use crate::engine::conditions::{self, reason, status};
use crate::engine::record::HISTORY_LIMIT;
use crate::engine::step::{decode, with_error, with_refusal};
use crate::engine::{EngineStatus, MachineRecord, NoteKind, Outcome, Taken};

fn spec(replicas: u32) -> ToySpec {
    ToySpec {
        replicas,
        misbehave: Misbehave::No,
    }
}

fn misbehaving(replicas: u32, misbehave: Misbehave) -> ToySpec {
    ToySpec {
        replicas,
        misbehave,
    }
}

fn condition<'a>(status: &'a EngineStatus<ToyState>, type_: &str) -> (&'a str, &'a str) {
    let c = status
        .condition(type_)
        .unwrap_or_else(|| panic!("condition {type_} is projected"));
    (c.status.as_str(), c.reason.as_str())
}

fn with_machine(machine: serde_json::Value) -> EngineStatus<ToyState> {
    let mut status = EngineStatus::default();
    status.machine = Some(machine.into());
    status
}

fn record(api: &Api) -> MachineRecord<ToyState> {
    decode::<Toy>(&api.read())
        .expect("record decodes")
        .expect("record present")
}

fn assert_degraded(out: &Outcome<Toy>, why: &str) {
    assert_eq!(
        condition(&out.status, conditions::DEGRADED),
        (status::TRUE, why)
    );
    assert_eq!(condition(&out.status, conditions::READY).0, status::FALSE);
}

#[test]
fn the_first_reconcile_initializes_and_writes_once_and_an_idle_one_writes_nothing() {
    let spec = spec(2);
    let mut api = Api::new();

    let first = api.reconcile(&spec, 0);
    assert!(first.changed);
    assert_eq!(api.writes, 1);
    assert!(first.actions.is_empty(), "initializing acts on nothing");
    assert_eq!(first.state, Some(ToyState::Pending));
    assert_eq!(first.taken, None);
    assert!(!first.release_finalizer);
    let note = first.note.expect("an Initialized event");
    assert_eq!(
        (note.kind, note.reason.as_str()),
        (NoteKind::Normal, reason::INITIALIZED)
    );
    let status = api.read();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.observed_generation, Some(1));
    let rec = record(&api);
    assert_eq!(rec.state, ToyState::Pending);
    assert_eq!(rec.state_version, 1);
    assert_eq!(rec.history.len(), 1);
    assert_eq!(rec.history[0].reason, reason::INITIALIZED);

    api.reconcile(&spec, 0); // Pending -> Scaling
    api.reconcile(&spec, 2); // Scaling -> Running
    let writes = api.writes;
    for _ in 0..3 {
        api.wait(60);
        let idle = api.reconcile(&spec, 2);
        assert!(!idle.changed, "an idle reconcile writes nothing");
        assert!(idle.actions.is_empty());
        assert_eq!(idle.note, None);
        assert_eq!(idle.taken, None);
        assert_eq!(idle.state, Some(ToyState::Running { replicas: 2 }));
    }
    assert_eq!(api.writes, writes);
}

#[test]
fn a_successful_stay_clears_the_last_error_once_and_then_writes_nothing() {
    let spec = spec(2);
    let mut api = Api::new();
    api.reconcile(&spec, 0); // Pending -> Scaling
    api.reconcile(&spec, 0);
    api.reconcile(&spec, 2); // Scaling -> Running
    let errored = with_error::<Toy>(&api.read(), "boom").expect("lastError is recorded");
    api.status = serde_json::to_string(&errored).expect("serializes");

    let recovered = api.reconcile(&spec, 2);
    assert!(
        recovered.changed,
        "the reconcile that succeeds clears lastError"
    );
    assert_eq!(recovered.taken, None);
    assert_eq!(record(&api).last_error, None);
    let idle = api.reconcile(&spec, 2);
    assert!(!idle.changed, "and then it is quiet");
}

#[test]
fn a_refused_request_is_degraded_with_one_warning_until_a_reconcile_succeeds() {
    let spec = spec(2);
    let mut api = Api::new();
    api.reconcile(&spec, 0); // Pending -> Scaling
    let refusal = "apply CronJob/a-backup: 422 Invalid: spec.schedule: Invalid value";
    let now = chrono::Utc::now();
    let (refused, note) =
        with_refusal::<Toy>(&api.read(), refusal, 1, false, now).expect("the refusal is recorded");
    assert_eq!(note.kind, NoteKind::Warning);
    assert_eq!(note.reason, reason::REQUEST_REFUSED);
    assert!(note.message.contains("spec.schedule"), "{}", note.message);
    assert_eq!(
        condition(&refused, conditions::DEGRADED),
        (status::TRUE, reason::REQUEST_REFUSED)
    );
    assert_eq!(refused.phase, api.read().phase, "the phase is kept");
    assert_eq!(
        with_refusal::<Toy>(&refused, refusal, 1, false, now),
        None,
        "a repeated refusal writes nothing and warns once"
    );

    api.status = serde_json::to_string(&refused).expect("serializes");
    api.reconcile(&spec, 0);
    assert_eq!(
        condition(&api.read(), conditions::DEGRADED),
        (status::FALSE, reason::AS_EXPECTED),
        "the next successful reconcile clears it"
    );
    assert_eq!(record(&api).last_error, None);
}

#[test]
fn a_declared_transition_persists_appends_history_emits_one_normal_note_and_clears_last_error() {
    let spec = spec(3);
    let mut api = Api::new();
    api.reconcile(&spec, 0);
    // The driver recorded an error while acting in Pending.
    let errored = with_error::<Toy>(&api.read(), "boom").expect("lastError is recorded");
    assert_eq!(with_error::<Toy>(&errored, "boom"), None, "recorded once");
    api.status = serde_json::to_string(&errored).expect("serializes");
    assert_eq!(record(&api).last_error.as_deref(), Some("boom"));

    api.wait(5);
    let out = api.reconcile(&spec, 0);
    assert!(out.changed);
    assert_eq!(
        out.taken,
        Some(Taken {
            from: "Pending",
            to: "Scaling",
            reason: CREATED
        })
    );
    assert_eq!(out.actions, vec![ToyAction::Scale(3)]);
    assert_eq!(out.requeue, Some(Duration::ZERO));
    let note = out.note.expect("one event");
    assert_eq!(note.kind, NoteKind::Normal);
    assert_eq!(note.reason, CREATED);
    assert_eq!(note.message, "Pending -> Scaling to 3: scaling to 3");

    let rec = record(&api);
    assert_eq!(rec.state, ToyState::Scaling { to: 3 });
    assert_eq!(rec.entered_at, api.now);
    assert_eq!(rec.last_error, None, "a transition clears lastError");
    assert_eq!(rec.history.len(), 2);
    let last = rec.history.last().expect("an entry");
    assert_eq!(
        (last.from.as_str(), last.to.as_str(), last.reason.as_str()),
        ("Pending", "Scaling to 3", CREATED)
    );
    assert_eq!(last.at, api.now);
    let status = api.read();
    assert_eq!(status.phase.as_deref(), Some("Scaling"));
    assert_eq!(status.step.as_deref(), Some("to 3"));
    assert_eq!(condition(&status, conditions::PROGRESSING).0, status::TRUE);
}

#[test]
fn history_is_bounded_at_history_limit_keeping_the_newest() {
    let (mut api, _) = Api::running(1);
    for replicas in 2..(2 + HISTORY_LIMIT as u32) {
        api.reconcile(&spec(replicas), replicas - 1); // Running -> Scaling
        api.reconcile(&spec(replicas), replicas); // Scaling -> Running
    }
    let rec = record(&api);
    assert_eq!(rec.history.len(), HISTORY_LIMIT);
    let last = rec.history.last().expect("an entry");
    assert_eq!(last.to, "Running");
    assert!(
        rec.history.iter().all(|h| h.reason != reason::INITIALIZED),
        "the oldest entries were dropped"
    );
}

#[test]
fn an_undeclared_transition_to_the_wrong_kind_is_refused_and_reported_degraded() {
    refuses(Misbehave::WrongKind, "Running -> Gone (CleanedUp)");
}

#[test]
fn an_undeclared_transition_with_the_wrong_reason_is_refused_and_reported_degraded() {
    refuses(Misbehave::WrongReason, "Running -> Scaling (Scaled)");
}

fn refuses(misbehave: Misbehave, edge: &str) {
    let (mut api, _) = Api::running(2);
    let before = api.read();
    let bad = misbehaving(2, misbehave);

    api.wait(1);
    let out = api.reconcile(&bad, 2);
    assert!(
        out.actions.is_empty(),
        "a refused transition executes nothing"
    );
    assert_eq!(out.taken, None);
    assert_eq!(out.state, Some(ToyState::Running { replicas: 2 }));
    assert!(!out.release_finalizer);
    assert_eq!(
        out.status.machine, before.machine,
        "the record is kept as it was"
    );
    assert_degraded(&out, reason::UNDECLARED_TRANSITION);
    let message = &out
        .status
        .condition(conditions::DEGRADED)
        .expect("Degraded")
        .message;
    let (from, rest) = edge.split_once(" -> ").expect("an edge");
    let (to, _) = rest.split_once(' ').expect("a reason");
    assert!(
        message.contains(&format!("{from} -> {to}")),
        "message names the edge: {message}"
    );
    let note = out.note.expect("one Warning");
    assert_eq!(note.kind, NoteKind::Warning);
    assert_eq!(note.reason, reason::UNDECLARED_TRANSITION);

    api.wait(1);
    let again = api.reconcile(&bad, 2);
    assert_eq!(again.note, None, "no second Warning for the same refusal");
    assert!(!again.changed, "and nothing new to write");
    assert!(again.actions.is_empty());

    // Once the machine behaves again, the refusal clears.
    let healed = api.reconcile(&spec(2), 2);
    assert_eq!(
        condition(&healed.status, conditions::DEGRADED).0,
        status::FALSE
    );
    assert_eq!(condition(&healed.status, conditions::READY).0, status::TRUE);
}

fn holds_undecodable(machine: serde_json::Value, deleting: bool) {
    let status = with_machine(machine.clone());
    let mut api = Api::with_status(&status);
    api.deleting = deleting;
    let out = api.reconcile(&spec(2), 2);
    assert!(out.actions.is_empty());
    assert_eq!(out.state, None);
    assert_eq!(out.taken, None);
    assert!(
        !out.release_finalizer,
        "an unreadable record never releases the finalizer"
    );
    assert_eq!(
        out.status.machine,
        Some(machine.into()),
        "the record is kept verbatim"
    );
    assert_degraded(&out, reason::UNDECODABLE_STATE);
    assert_eq!(
        out.note.as_ref().map(|n| (n.kind, n.reason.as_str())),
        Some((NoteKind::Warning, reason::UNDECODABLE_STATE))
    );
    let again = api.reconcile(&spec(2), 2);
    assert_eq!(again.note, None);
    assert!(!again.changed);
    assert!(again.actions.is_empty());
}

fn a_valid_record() -> serde_json::Value {
    json!({
        "state": {"name": "Running", "replicas": 2},
        "enteredAt": "2026-11-29T18:00:00Z",
        "stateVersion": 1,
        "history": []
    })
}

#[test]
fn a_record_that_is_not_json_of_a_record_is_held_as_undecodable() {
    holds_undecodable(json!("{not json at all"), false);
    holds_undecodable(json!({"state": 42}), false);
    holds_undecodable(json!([1, 2, 3]), true);
}

#[test]
fn a_record_with_an_unknown_state_variant_is_held_as_undecodable() {
    let mut record = a_valid_record();
    record["state"] = json!({"name": "Exploding", "replicas": 2});
    holds_undecodable(record, false);
}

#[test]
fn a_record_with_a_newer_state_version_is_held_as_undecodable() {
    let mut record = a_valid_record();
    record["stateVersion"] = json!(2);
    holds_undecodable(record.clone(), false);
    holds_undecodable(record, true);
    // The same record at the known version decodes.
    let ok = with_machine(a_valid_record());
    assert!(matches!(decode::<Toy>(&ok), Ok(Some(_))));
}

#[test]
fn a_healthy_stay_past_its_deadline_reports_progress_deadline_exceeded() {
    let spec = spec(3);
    let mut api = Api::new();
    api.reconcile(&spec, 0);
    api.reconcile(&spec, 0); // -> Scaling, deadline starts now
    let entered = api.now;

    // Before the deadline the requeue is capped at the time left (plus one second).
    api.wait(590);
    let early = api.reconcile(&spec, 1);
    assert_eq!(early.requeue, Some(Duration::from_secs(11)));
    assert_eq!(
        condition(&early.status, conditions::PROGRESSING).0,
        status::TRUE
    );
    assert_eq!(
        condition(&early.status, conditions::DEGRADED).0,
        status::FALSE
    );
    assert_eq!(early.note, None);

    // Far from the deadline the machine's own poll is shorter, and wins.
    let mut fresh = Api::new();
    fresh.reconcile(&spec, 0);
    fresh.reconcile(&spec, 0);
    fresh.wait(10);
    assert_eq!(fresh.reconcile(&spec, 1).requeue, Some(SCALING_POLL));

    api.now = entered + chrono::Duration::seconds(SCALING_DEADLINE.as_secs() as i64 + 1);
    let late = api.reconcile(&spec, 1);
    assert!(late.changed);
    assert_eq!(
        condition(&late.status, conditions::PROGRESSING),
        (status::FALSE, reason::PROGRESS_DEADLINE_EXCEEDED)
    );
    assert_degraded(&late, reason::PROGRESS_DEADLINE_EXCEEDED);
    assert!(
        late.status
            .condition(conditions::DEGRADED)
            .expect("Degraded")
            .message
            .contains("Scaling to 3 for longer than its deadline of 600s")
    );
    let note = late.note.expect("one Warning");
    assert_eq!(
        (note.kind, note.reason.as_str()),
        (NoteKind::Warning, reason::PROGRESS_DEADLINE_EXCEEDED)
    );
    assert_eq!(
        late.requeue,
        Some(SCALING_POLL),
        "past the deadline, no cap"
    );
    assert_eq!(late.state, Some(ToyState::Scaling { to: 3 }));

    api.wait(30);
    let still = api.reconcile(&spec, 1);
    assert_eq!(still.note, None, "no second Warning");
    assert!(!still.changed, "nothing new to write");

    // Progress clears it.
    let done = api.reconcile(&spec, 3);
    assert_eq!(done.state, Some(ToyState::Running { replicas: 3 }));
    assert_eq!(
        condition(&done.status, conditions::DEGRADED).0,
        status::FALSE
    );
}

#[test]
fn condition_last_transition_time_moves_only_when_the_status_flips() {
    let (mut api, spec) = Api::running(2);
    let at = |api: &Api, type_: &str| {
        api.read()
            .condition(type_)
            .expect("projected")
            .last_transition_time
    };
    let ready_since = at(&api, conditions::READY);
    let not_degraded_since = at(&api, conditions::DEGRADED);
    assert_eq!(ready_since, api.now);

    api.wait(3600);
    api.reconcile(&spec, 2);
    assert_eq!(
        at(&api, conditions::READY),
        ready_since,
        "idle: nothing moves"
    );

    // Ready flips to False when scaling starts...
    api.wait(60);
    let scaling_at = api.now;
    api.reconcile(&self::spec(3), 2);
    assert_eq!(at(&api, conditions::READY), scaling_at);
    // ...and the reason changes without a flip while Scaling waits.
    api.wait(60);
    api.reconcile(&self::spec(3), 2);
    assert_eq!(at(&api, conditions::READY), scaling_at);
    assert_eq!(
        at(&api, conditions::DEGRADED),
        not_degraded_since,
        "never flipped"
    );

    api.wait(60);
    let back_at = api.now;
    api.reconcile(&self::spec(3), 3);
    assert_eq!(at(&api, conditions::READY), back_at);
    assert_eq!(at(&api, conditions::DEGRADED), not_degraded_since);
}

#[test]
fn the_observed_generation_follows_the_generation_read() {
    let (mut api, spec) = Api::running(2);
    api.generation = 7;
    let out = api.reconcile(&spec, 2);
    assert!(out.changed, "a new generation is written");
    assert_eq!(api.read().observed_generation, Some(7));
    assert!(
        api.read()
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(7))
    );
    assert!(!api.reconcile(&spec, 2).changed);
}

#[test]
fn deleting_releases_the_finalizer_once_a_finalized_state_is_reached() {
    let (mut api, spec) = Api::running(2);
    api.deleting = true;

    let drain = api.reconcile(&spec, 2);
    assert_eq!(
        drain.taken,
        Some(Taken {
            from: "Running",
            to: "Draining",
            reason: DELETE_REQUESTED
        })
    );
    assert_eq!(drain.actions, vec![ToyAction::Cleanup]);
    assert!(!drain.release_finalizer);

    let waiting = api.reconcile(&spec, 1);
    assert_eq!(waiting.actions, vec![ToyAction::Cleanup]);
    assert!(!waiting.release_finalizer, "not finalized yet");

    let gone = api.reconcile(&spec, 0);
    assert_eq!(gone.taken.map(|t| t.reason), Some(CLEANED_UP));
    assert_eq!(gone.state, Some(ToyState::Gone));
    assert!(
        !gone.release_finalizer,
        "not in the write that reaches Gone: the finalized state acts first"
    );

    let after = api.reconcile(&spec, 0);
    assert!(
        after.release_finalizer,
        "the next reconcile, in Gone as persisted"
    );
    assert!(!after.changed);
    assert!(after.actions.is_empty());
}

#[test]
fn a_finalized_state_does_not_release_the_finalizer_unless_deleting() {
    let status = with_machine(json!({
        "state": {"name": "Gone"},
        "enteredAt": "2026-11-29T18:00:00Z",
        "stateVersion": 1
    }));
    let mut api = Api::with_status(&status);
    assert!(!api.reconcile(&spec(1), 0).release_finalizer);
}

#[test]
fn deleting_an_object_that_was_never_initialized_releases_the_finalizer_without_actions() {
    let mut api = Api::new();
    api.deleting = true;
    let out = api.reconcile(&spec(2), 0);
    assert!(out.release_finalizer);
    assert!(out.actions.is_empty());
    assert!(!out.changed);
    assert_eq!(out.state, None);
    assert_eq!(out.note, None);
    assert_eq!(api.writes, 0);
}

/// A record lost while deleting (a wiped status) must not skip the
/// machine's deletion path while something may hold data.
#[test]
fn deleting_with_a_lost_record_runs_the_deletion_path_while_something_may_hold_data() {
    let mut api = Api::new();
    api.deleting = true;
    let first = api.reconcile(&spec(2), 2);
    assert!(!first.release_finalizer, "pods exist: never released blind");
    assert_eq!(first.state, Some(ToyState::Pending));
    let second = api.reconcile(&spec(2), 2);
    assert_eq!(second.state, Some(ToyState::Draining));
    assert_eq!(second.actions, vec![ToyAction::Cleanup]);
    assert!(!second.release_finalizer);
}

#[test]
fn a_scale_while_running_takes_the_scale_requested_edge() {
    let (mut api, _) = Api::running(2);
    let out = api.reconcile(&spec(4), 2);
    assert_eq!(out.taken.map(|t| t.reason), Some(SCALE_REQUESTED));
    assert_eq!(out.actions, vec![ToyAction::Scale(4)]);
}

/// The toy, but declaring no deadline for any state: a machine bug the engine refuses.
struct Undeadlined;

impl crate::engine::Machine for Undeadlined {
    const NAME: &'static str = "undeadlined";
    type Spec = ToySpec;
    type State = ToyState;
    type Kind = <Toy as crate::engine::Machine>::Kind;
    type Observed = <Toy as crate::engine::Machine>::Observed;
    type Action = ToyAction;

    fn initial() -> ToyState {
        Toy::initial()
    }

    fn table() -> &'static [crate::engine::Edge<Self::Kind>] {
        Toy::table()
    }

    fn decide(
        spec: &ToySpec,
        state: &ToyState,
        world: &crate::engine::World<Self::Observed>,
    ) -> crate::engine::Decision<ToyState, ToyAction> {
        Toy::decide(spec, state, world)
    }

    fn is_ready(state: &ToyState) -> bool {
        Toy::is_ready(state)
    }

    fn deadline(_: &ToyState) -> crate::engine::Deadline {
        crate::engine::Deadline::None
    }

    fn finalized(state: &ToyState) -> bool {
        Toy::finalized(state)
    }
}

#[test]
fn every_waiting_state_of_the_toy_declares_a_deadline() {
    for state in [
        ToyState::Pending,
        ToyState::Scaling { to: 2 },
        ToyState::Running { replicas: 2 },
        ToyState::Draining,
        ToyState::Gone,
    ] {
        crate::engine::deadline_declared::<Toy>(&state).expect("declared");
    }
}

#[test]
fn a_machine_whose_waiting_state_declares_no_deadline_is_refused_and_nothing_is_done() {
    let scaling = ToyState::Scaling { to: 2 };
    assert!(crate::engine::deadline_declared::<Undeadlined>(&scaling).is_err());
    assert!(
        crate::engine::deadline_declared::<Undeadlined>(&ToyState::Running { replicas: 2 }).is_ok()
    );

    let mut api = Api::new();
    api.reconcile(&spec(2), 0); // Initialized, in Pending: a waiting state
    let status = api.read();
    let out = crate::engine::step::<Undeadlined>(crate::engine::Input {
        spec: &spec(2),
        status: &status,
        observed: super::toy::ToyObserved {
            ready: 0,
            scaled: None,
        },
        generation: 1,
        deleting: false,
        now: api.now,
    });
    assert!(out.actions.is_empty(), "nothing is done: {:?}", out.actions);
    assert!(out.taken.is_none());
    assert_eq!(
        condition(&out.status, conditions::DEGRADED),
        (status::TRUE, reason::UNDECLARED_DEADLINE)
    );
}

#[test]
fn past_its_deadline_a_state_is_degraded_naming_what_it_waits_for_and_the_way_out() {
    let mut api = Api::new();
    api.reconcile(&spec(2), 0); // Initialized
    api.reconcile(&spec(2), 0); // Pending -> Scaling
    api.wait(i64::try_from(SCALING_DEADLINE.as_secs()).unwrap_or(0) + 1);
    let out = api.reconcile(&spec(2), 1);
    let degraded = out
        .status
        .condition(conditions::DEGRADED)
        .expect("Degraded");
    assert_eq!(degraded.reason, reason::PROGRESS_DEADLINE_EXCEEDED);
    assert!(
        degraded.message.contains("fix the pods"),
        "{}",
        degraded.message
    );
    assert_eq!(out.note.map(|n| n.kind), Some(NoteKind::Warning));
}

#[test]
fn progressing_says_what_the_state_waits_for_and_since_when() {
    let mut api = Api::new();
    api.reconcile(&spec(2), 0); // Initialized
    let went = api.reconcile(&spec(2), 0); // Pending -> Scaling, in the transition's write
    let progressing = went
        .status
        .condition(conditions::PROGRESSING)
        .expect("Progressing")
        .message
        .clone();
    assert!(progressing.starts_with("Scaling to 2: "), "{progressing}");
    assert!(
        progressing.contains("waiting since 2026-11-29T18:00:00Z"),
        "{progressing}"
    );
    // The wait goes on, nothing else changes: nothing to write.
    api.wait(5);
    assert!(!api.reconcile(&spec(2), 0).changed);
}
