//! One reconcile, as a pure function.
//!
//! [`step`] is everything the driver does between reading and writing, minus the I/O:
//! decode the persisted record, ask the machine, check the edge against the table,
//! project phase and conditions, and say what to write and which event to record. The
//! driver and the model-checking harness both call it, so what proptest checks is the
//! code that runs in the cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;

use super::conditions::{self, reason, status};
use super::machine::{
    Deadline, Decision, Health, Machine, Wait, World, deadline_declared, is_declared, kind_name,
};
use super::record::{
    Condition, EngineStatus, HISTORY_LIMIT, HistoryEntry, MachineRecord, RawRecord,
};

/// Everything one reconcile reads.
#[derive(Debug)]
pub struct Input<'a, M: Machine> {
    /// The object's spec.
    pub spec: &'a M::Spec,
    /// The engine part of the object's status, as read.
    pub status: &'a EngineStatus<M::State>,
    /// The machine's observation of the world.
    pub observed: M::Observed,
    /// `metadata.generation`.
    pub generation: i64,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The clock, truncated to whole seconds.
    pub now: DateTime<Utc>,
}

/// The kind of an [`Note`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// Routine: a transition.
    Normal,
    /// Needs attention.
    Warning,
}

/// An event to record, at most one per reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub kind: NoteKind,
    /// A CamelCase reason.
    pub reason: String,
    /// What happened.
    pub message: String,
}

/// A transition that was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The kind left.
    pub from: &'static str,
    /// The kind entered.
    pub to: &'static str,
    /// The edge's reason.
    pub reason: &'static str,
}

/// Everything one reconcile does, as data.
#[derive(Debug)]
pub struct Outcome<M: Machine> {
    /// Effects to carry out, in order, before writing `status`.
    pub actions: Vec<M::Action>,
    /// The engine status to persist.
    pub status: EngineStatus<M::State>,
    /// Whether `status` differs from what was read (so a write is needed).
    pub changed: bool,
    /// The event to record once the write has succeeded.
    pub note: Option<Note>,
    /// When to reconcile again without a watch event.
    pub requeue: Option<Duration>,
    /// The transition taken, if any.
    pub taken: Option<Taken>,
    /// The decoded state after this step (`None` if the record could not be decoded).
    pub state: Option<M::State>,
    /// The finalizer may be removed once `status` is persisted.
    pub release_finalizer: bool,
}

/// Decode the persisted record, if any.
///
/// # Errors
/// A message naming why the record cannot be used: it does not decode, or it was written
/// with a newer `stateVersion` than this build knows.
pub fn decode<M: Machine>(
    status: &EngineStatus<M::State>,
) -> Result<Option<MachineRecord<M::State>>, String> {
    let Some(raw) = &status.machine else {
        return Ok(None);
    };
    let record: MachineRecord<M::State> = serde_json::from_str(raw.get())
        .map_err(|e| format!("cannot decode status.machine: {e}"))?;
    if record.state_version > M::STATE_VERSION {
        return Err(format!(
            "status.machine has stateVersion {} but this operator understands up to {}",
            record.state_version,
            M::STATE_VERSION
        ));
    }
    Ok(Some(record))
}

/// Encode a record for `status.machine`.
pub fn encode<S: serde::Serialize>(record: &MachineRecord<S>) -> RawRecord {
    // Serializing plain data with derived impls cannot fail.
    RawRecord::from_value(&serde_json::to_value(record).unwrap_or(serde_json::Value::Null))
}

/// How a state is named in history, events and messages: `Kind` or `Kind step`.
pub fn describe<M: Machine>(state: &M::State) -> String {
    match M::step_label(state) {
        Some(step) => format!("{} {step}", kind_name::<M>(state)),
        None => kind_name::<M>(state).to_owned(),
    }
}

/// Run one reconcile's decision.
///
/// # Guarantees
/// - At most one transition is taken, and only along a declared edge.
/// - An undeclared transition or an undecodable record yields no actions, keeps the
///   persisted record as it was, and reports `Degraded`.
/// - `changed` is false when the decision and the persisted status agree, so an idle
///   reconcile writes nothing.
/// - A missing record never releases the finalizer while [`Machine::holds_data`] says
///   the world may hold data: the record is started again from [`Machine::initial`] and
///   the machine's deletion path (its final backup) runs. Only an object that never
///   created anything is released without a record.
/// - The request tokens a state takes on ([`Machine::acks`]) are persisted in the same
///   write as that state and kept through every later one.
pub fn step<M: Machine>(input: Input<'_, M>) -> Outcome<M> {
    let Input {
        spec,
        status: old,
        observed,
        generation,
        deleting,
        now,
    } = input;
    let read = Read {
        spec,
        old,
        generation,
        now,
    };
    let record = match decode::<M>(old) {
        Ok(Some(record)) => record,
        Ok(None) => return without_record(read, observed, deleting),
        Err(why) => {
            // The way out: the operator version that wrote the record reads it.
            let why = format!(
                "{why}; nothing is done until an operator version that understands it runs"
            );
            let status =
                project_hold::<M>(old, None, generation, now, reason::UNDECODABLE_STATE, &why);
            return held(old, status, None);
        }
    };
    if let Err(why) = deadline_declared::<M>(&record.state) {
        let status = project_hold::<M>(
            old,
            Some(&record),
            generation,
            now,
            reason::UNDECLARED_DEADLINE,
            &format!("{why}; nothing was done"),
        );
        return held(old, status, Some(record.state));
    }
    let world = World {
        observed,
        deleting,
        now,
        entered_at: record.entered_at,
        acks: record.acks.clone(),
        entered_by: record
            .history
            .last()
            .map(|h| h.reason.clone())
            .unwrap_or_default(),
    };
    match M::decide(spec, &record.state, &world) {
        Decision::Stay {
            reason,
            message,
            actions,
            wait,
            health,
        } => stayed(
            read,
            record,
            &world,
            Stayed {
                reason,
                message,
                wait,
                health,
            },
            actions,
        ),
        Decision::Go {
            to,
            reason,
            message,
            actions,
        } => went(read, record, world, (to, reason, message), actions),
    }
}

/// What every path of [`step`] reads besides the observation.
struct Read<'a, M: Machine> {
    /// The object's spec.
    spec: &'a M::Spec,
    /// The engine status as read.
    old: &'a EngineStatus<M::State>,
    /// `metadata.generation`.
    generation: i64,
    /// The clock.
    now: DateTime<Utc>,
}

impl<M: Machine> Clone for Read<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: Machine> Copy for Read<'_, M> {}

/// A stay's parts besides its actions.
struct Stayed {
    /// Why.
    reason: &'static str,
    /// What it waits for.
    message: String,
    /// When to look again.
    wait: Wait,
    /// Degraded or not.
    health: Health,
}

/// No record (never initialized, or lost: a status wiped by a restore or an edit): start
/// again from the initial state; while deleting, the next reconcile takes the machine's
/// deletion path from there, final backup included. Only an object being deleted whose
/// machine sees nothing that may hold data (it never created anything) is released at
/// once.
fn without_record<M: Machine>(
    read: Read<'_, M>,
    observed: M::Observed,
    deleting: bool,
) -> Outcome<M> {
    let Read {
        spec,
        old,
        generation,
        now,
    } = read;
    if deleting && !M::holds_data(&observed) {
        return Outcome {
            actions: Vec::new(),
            status: old.clone(),
            changed: false,
            note: None,
            requeue: None,
            taken: None,
            state: None,
            release_finalizer: true,
        };
    }
    // What the initial state waits for, as far as this observation tells: so that
    // Progressing names it in this write, not in one more.
    let state = M::initial();
    let world = World {
        observed,
        deleting,
        now,
        entered_at: now,
        acks: acked::<M>(BTreeMap::new(), &state),
        entered_by: reason::INITIALIZED.to_owned(),
    };
    let waiting = match M::decide(spec, &state, &world) {
        Decision::Stay { message, .. } => message,
        Decision::Go { .. } => String::new(),
    };
    initialize::<M>(old, generation, now, &waiting)
}

/// The machine stays: Degraded when it says so or when the state's deadline passed
/// (then a look again once it passes), and the record's error cleared (the write
/// follows only if the actions succeed).
fn stayed<M: Machine>(
    read: Read<'_, M>,
    record: MachineRecord<M::State>,
    world: &World<M::Observed>,
    stay: Stayed,
    actions: Vec<M::Action>,
) -> Outcome<M> {
    let Read {
        old,
        generation,
        now,
        ..
    } = read;
    let Stayed {
        reason: stay_reason,
        message,
        wait,
        health,
    } = stay;
    let declared = M::deadline(&record.state);
    let deadline = declared.limit();
    let in_state = world.in_state_for();
    let stuck = deadline.is_some_and(|d| in_state > d);
    let progress = progress_message::<M>(&record, &message);
    let degraded = match (health, stuck, declared) {
        (Health::Degraded, _, _) => Some((stay_reason, message)),
        (Health::Healthy, true, Deadline::Within { limit, way_out }) => Some((
            reason::PROGRESS_DEADLINE_EXCEEDED,
            format!(
                "{} for longer than its deadline of {}s: {message}; {way_out}",
                describe::<M>(&record.state),
                limit.as_secs()
            ),
        )),
        (Health::Healthy, _, _) => None,
    };
    let mut requeue = match wait {
        Wait::Watch => None,
        Wait::Requeue(after) => Some(after),
    };
    if let Some(left) = deadline
        .and_then(|d| d.checked_sub(in_state))
        .filter(|_| !stuck)
    {
        // Look again when the deadline passes, so a silent stall is reported.
        let left = left + Duration::from_secs(1);
        requeue = Some(requeue.map_or(left, |r| r.min(left)));
    }
    // The write that follows this decision happens only if its actions all succeed, so
    // it clears the error a failed reconcile recorded.
    let record = MachineRecord {
        last_error: None,
        acks: acked::<M>(record.acks.clone(), &record.state),
        ..record
    };
    let status = project::<M>(
        old,
        &record,
        generation,
        now,
        degraded.as_ref().map(|(r, m)| (*r, m.as_str())),
        (stuck, &progress),
    );
    let note = degraded_note(old, &status);
    let changed = &status != old;
    Outcome {
        release_finalizer: world.deleting && M::finalized(&record.state),
        actions,
        status,
        changed,
        note,
        requeue,
        taken: None,
        state: Some(record.state),
    }
}

/// The machine goes along `(to, edge_reason, message)`: refused (held, Degraded) unless
/// the edge is declared; else the history grows by one entry, the new state's acks are
/// taken, and Progressing names what the new state waits for.
fn went<M: Machine>(
    read: Read<'_, M>,
    record: MachineRecord<M::State>,
    world: World<M::Observed>,
    (to, edge_reason, message): (M::State, &'static str, String),
    actions: Vec<M::Action>,
) -> Outcome<M> {
    let Read {
        spec,
        old,
        generation,
        now,
    } = read;
    if !is_declared::<M>(&record.state, &to, edge_reason) {
        let why = format!(
            "refused undeclared transition {} -> {} ({edge_reason}); nothing was done",
            kind_name::<M>(&record.state),
            kind_name::<M>(&to)
        );
        let status = project_hold::<M>(
            old,
            Some(&record),
            generation,
            now,
            reason::UNDECLARED_TRANSITION,
            &why,
        );
        return held(old, status, Some(record.state));
    }
    let from = describe::<M>(&record.state);
    let taken = Taken {
        from: kind_name::<M>(&record.state),
        to: kind_name::<M>(&to),
        reason: edge_reason,
    };
    let mut history = record.history;
    history.push(HistoryEntry {
        from: from.clone(),
        to: describe::<M>(&to),
        reason: edge_reason.to_owned(),
        message: message.clone(),
        at: now,
    });
    let excess = history.len().saturating_sub(HISTORY_LIMIT);
    history.drain(..excess);
    let next = MachineRecord {
        acks: acked::<M>(record.acks, &to),
        state: to,
        entered_at: now,
        state_version: M::STATE_VERSION,
        history,
        last_error: None,
    };
    // What the new state waits for, as far as this observation tells: so that
    // Progressing names it in this write, not in one more.
    let ahead = World {
        entered_at: now,
        acks: next.acks.clone(),
        entered_by: edge_reason.to_owned(),
        ..world
    };
    let waiting = match M::decide(spec, &next.state, &ahead) {
        Decision::Stay { message, .. } => message,
        Decision::Go { .. } => message.clone(),
    };
    let progress = progress_message::<M>(&next, &waiting);
    let status = project::<M>(old, &next, generation, now, None, (false, &progress));
    let note = Some(Note {
        kind: NoteKind::Normal,
        reason: edge_reason.to_owned(),
        message: format!("{from} -> {}: {message}", describe::<M>(&next.state)),
    });
    Outcome {
        // Not in the transition's own write: the next reconcile, which decides in the
        // finalized state as persisted, releases it after the actions that state still
        // takes (its Jobs' outcome finalizers).
        release_finalizer: false,
        actions,
        changed: true,
        status,
        note,
        // Carry on promptly: the next step's inputs are usually already there.
        requeue: Some(Duration::ZERO),
        taken: Some(taken),
        state: Some(next.state),
    }
}

/// Record `error` as the record's `lastError` (the driver calls this when acting failed).
/// Returns `None` when the record is unreadable or already says so.
pub fn with_error<M: Machine>(
    status: &EngineStatus<M::State>,
    error: &str,
) -> Option<EngineStatus<M::State>> {
    let mut record = decode::<M>(status).ok().flatten()?;
    if record.last_error.as_deref() == Some(error) {
        return None;
    }
    record.last_error = Some(error.to_owned());
    let mut next = status.clone();
    next.machine = Some(encode(&record));
    Some(next)
}

/// Record `error` as `lastError` and report it as `Degraded` (reason
/// [`reason::REQUEST_REFUSED`]): the API server refused a request in a way that retrying
/// cannot fix (an object it finds invalid, a forbidden verb), so a person must act.
/// Phase and state are kept; the next successful reconcile projects Degraded afresh.
/// While the object is being `deleting`, the message names the machine's
/// [`Machine::DELETION_WAY_OUT`].
///
/// Returns the status to persist and the Warning to record, or `None` when the record
/// is unreadable or already says exactly this.
pub fn with_refusal<M: Machine>(
    status: &EngineStatus<M::State>,
    error: &str,
    generation: i64,
    deleting: bool,
    now: DateTime<Utc>,
) -> Option<(EngineStatus<M::State>, Note)> {
    let record = decode::<M>(status).ok().flatten()?;
    let record = MachineRecord {
        last_error: Some(error.to_owned()),
        ..record
    };
    let message = match M::DELETION_WAY_OUT.filter(|_| deleting) {
        Some(way_out) => format!("the API server refused a request: {error}; {way_out}"),
        None => format!("the API server refused a request: {error}"),
    };
    let progress = status
        .condition(conditions::PROGRESSING)
        .map_or_else(|| describe::<M>(&record.state), |c| c.message.clone());
    let next = project::<M>(
        status,
        &record,
        generation,
        now,
        Some((reason::REQUEST_REFUSED, &message)),
        (false, &progress),
    );
    if &next == status {
        return None;
    }
    let note = degraded_note(status, &next).unwrap_or(Note {
        kind: NoteKind::Warning,
        reason: reason::REQUEST_REFUSED.to_owned(),
        message,
    });
    Some((next, note))
}

fn initialize<M: Machine>(
    old: &EngineStatus<M::State>,
    generation: i64,
    now: DateTime<Utc>,
    waiting: &str,
) -> Outcome<M> {
    let state = M::initial();
    let record = MachineRecord {
        history: vec![HistoryEntry {
            from: String::new(),
            to: describe::<M>(&state),
            reason: reason::INITIALIZED.to_owned(),
            message: "first reconcile".to_owned(),
            at: now,
        }],
        acks: acked::<M>(BTreeMap::new(), &state),
        state,
        entered_at: now,
        state_version: M::STATE_VERSION,
        last_error: None,
    };
    let progress = progress_message::<M>(&record, waiting);
    let status = project::<M>(old, &record, generation, now, None, (false, &progress));
    Outcome {
        actions: Vec::new(),
        changed: true,
        note: Some(Note {
            kind: NoteKind::Normal,
            reason: reason::INITIALIZED.to_owned(),
            message: format!("starting in {}", describe::<M>(&record.state)),
        }),
        requeue: Some(Duration::ZERO),
        taken: None,
        state: Some(record.state.clone()),
        release_finalizer: false,
        status,
    }
}

/// `acks` with the tokens `state` takes on recorded.
fn acked<M: Machine>(
    mut acks: BTreeMap<String, String>,
    state: &M::State,
) -> BTreeMap<String, String> {
    for (kind, token) in M::acks(state) {
        acks.insert(kind.to_owned(), token);
    }
    acks
}

fn held<M: Machine>(
    old: &EngineStatus<M::State>,
    status: EngineStatus<M::State>,
    state: Option<M::State>,
) -> Outcome<M> {
    Outcome {
        actions: Vec::new(),
        note: degraded_note(old, &status),
        changed: &status != old,
        status,
        requeue: None,
        taken: None,
        state,
        release_finalizer: false,
    }
}

/// A Warning when Degraded newly became true or changed its reason.
fn degraded_note<S: JsonSchema + PartialEq>(
    old: &EngineStatus<S>,
    new: &EngineStatus<S>,
) -> Option<Note> {
    let now = new
        .condition(conditions::DEGRADED)
        .filter(|c| c.status == status::TRUE)?;
    let before = old.condition(conditions::DEGRADED);
    if before.is_some_and(|b| {
        b.status == now.status && b.reason == now.reason && b.message == now.message
    }) {
        return None;
    }
    Some(Note {
        kind: NoteKind::Warning,
        reason: now.reason.clone(),
        message: now.message.clone(),
    })
}

/// What `Progressing` says in `record`'s state: the state, and while it is not at rest,
/// what it waits for (`waiting`, the decision's message) and since when (the state's
/// `enteredAt`, so that the message need not change while the wait goes on).
fn progress_message<M: Machine>(record: &MachineRecord<M::State>, waiting: &str) -> String {
    let described = describe::<M>(&record.state);
    if M::rests(&record.state) || waiting.is_empty() {
        return described;
    }
    let since = record
        .entered_at
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    format!("{described}: {waiting} (waiting since {since})")
}

/// Project phase, step and conditions from a decoded record; `progress` is whether the
/// state is past its deadline and what `Progressing` says.
fn project<M: Machine>(
    old: &EngineStatus<M::State>,
    record: &MachineRecord<M::State>,
    generation: i64,
    now: DateTime<Utc>,
    degraded: Option<(&str, &str)>,
    (stuck, progress_text): (bool, &str),
) -> EngineStatus<M::State> {
    let kind = kind_name::<M>(&record.state);
    let described = describe::<M>(&record.state);
    let ready = M::is_ready(&record.state);
    let rests = M::rests(&record.state);
    let mut next = old.clone();
    next.phase = Some(kind.to_owned());
    next.step = M::step_label(&record.state);
    next.observed_generation = Some(generation);
    next.machine = Some(encode(record));
    let ok = degraded.is_none();
    let at = |type_, holds, reason, message| {
        condition(old, type_, holds, reason, message, generation, now)
    };
    let progress = if stuck {
        reason::PROGRESS_DEADLINE_EXCEEDED
    } else {
        kind
    };
    let (bad, why, message) = match degraded {
        Some((why, message)) => (true, why, message),
        None => (false, reason::AS_EXPECTED, ""),
    };
    next.conditions = vec![
        at(conditions::READY, ready && ok, kind, &described),
        at(
            conditions::PROGRESSING,
            !stuck && !rests,
            progress,
            progress_text,
        ),
        at(conditions::DEGRADED, bad, why, message),
    ];
    next
}

/// Project a hold: the record (raw) is kept, Ready and Progressing are false, Degraded
/// carries `why`.
fn project_hold<M: Machine>(
    old: &EngineStatus<M::State>,
    record: Option<&MachineRecord<M::State>>,
    generation: i64,
    now: DateTime<Utc>,
    why: &str,
    message: &str,
) -> EngineStatus<M::State> {
    let mut next = old.clone();
    if let Some(record) = record {
        next.phase = Some(kind_name::<M>(&record.state).to_owned());
        next.step = M::step_label(&record.state);
    }
    next.observed_generation = Some(generation);
    let at = |type_, holds| condition(old, type_, holds, why, message, generation, now);
    next.conditions = vec![
        at(conditions::READY, false),
        at(conditions::PROGRESSING, false),
        at(conditions::DEGRADED, true),
    ];
    next
}

fn condition<S: JsonSchema>(
    old: &EngineStatus<S>,
    type_: &str,
    holds: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: DateTime<Utc>,
) -> Condition {
    let status = if holds { status::TRUE } else { status::FALSE };
    let since = old
        .condition(type_)
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time);
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: since,
        observed_generation: Some(generation),
    }
}
