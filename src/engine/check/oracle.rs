//! The oracle: what each reconcile's outcome must satisfy (a declared edge, a record
//! that changes exactly with it, a deterministic step, a deadline reported), independent
//! of the engine's own checks.

use super::*;

pub(super) fn edge_name(from: &str, to: &str, reason: &str) -> String {
    format!("{from} -> {to} ({reason})")
}

pub(super) fn describe_outcome<M: Machine>(out: &Outcome<M>) -> String {
    let mut line = String::from("    ");
    let initialized = out
        .note
        .as_ref()
        .is_some_and(|n| n.reason == reason::INITIALIZED);
    match (&out.taken, &out.state) {
        (Some(t), _) => line.push_str(&format!("{} -> {} ({})", t.from, t.to, t.reason)),
        (None, Some(state)) if initialized => line.push_str(&format!("initialized to {state:?}")),
        (None, Some(state)) => line.push_str(&format!("stays in {state:?}")),
        (None, None) => line.push_str("no state"),
    }
    // Why it stays, when the stay records a new reason (a taken edge names its own).
    if let (None, Some(note)) = (&out.taken, out.note.as_ref().filter(|_| !initialized)) {
        line.push_str(&format!(" [{}: {}]", note.reason, note.message));
    }
    if !out.actions.is_empty() {
        line.push_str(&format!("; actions {:?}", out.actions));
    }
    if !out.changed {
        line.push_str("; nothing to write");
    }
    if out.release_finalizer {
        line.push_str("; may release the finalizer");
    }
    line
}

/// `step` is deterministic.
pub(super) fn same_outcome<M: Machine>(a: &Outcome<M>, b: &Outcome<M>) -> Result<(), String> {
    let same = a.actions == b.actions
        && a.status == b.status
        && a.changed == b.changed
        && a.note == b.note
        && a.requeue == b.requeue
        && a.taken == b.taken
        && a.state == b.state
        && a.release_finalizer == b.release_finalizer;
    if same {
        Ok(())
    } else {
        Err(format!(
            "the same input gave two different outcomes (decide is not deterministic): actions {:?} vs {:?}, state {:?} vs {:?}",
            a.actions, b.actions, a.state, b.state
        ))
    }
}

pub(super) fn declared<M: Machine>(taken: &Taken) -> bool {
    M::table().iter().any(|e| {
        let (from, to): (&str, &str) = (e.from.into(), e.to.into());
        from == taken.from && to == taken.to && e.reason == taken.reason
    })
}

/// Safety checks on one outcome, against the status it was computed from.
pub(super) fn check_outcome<M: Machine>(
    read: &EngineStatus<M::State>,
    deleting: bool,
    now: DateTime<Utc>,
    out: &Outcome<M>,
) -> Result<(), String> {
    if out.changed != (&out.status != read) {
        return Err(format!(
            "changed is {} but the status {} differ from the one read",
            out.changed,
            if out.changed { "does not" } else { "does" }
        ));
    }
    if let Some(degraded) = out.status.condition(conditions::DEGRADED)
        && degraded.status == status::TRUE
        && (degraded.reason == reason::UNDECLARED_TRANSITION
            || degraded.reason == reason::UNDECODABLE_STATE
            || degraded.reason == reason::UNDECLARED_DEADLINE)
    {
        return Err(format!("{}: {}", degraded.reason, degraded.message));
    }

    // The status and the state survive the API server's JSON round trip.
    let text = serde_json::to_string(&out.status)
        .map_err(|e| format!("the status does not serialize: {e}"))?;
    let back: EngineStatus<M::State> =
        serde_json::from_str(&text).map_err(|e| format!("the status does not deserialize: {e}"))?;
    if back != out.status {
        return Err(format!("the status changes in a JSON round trip: {text}"));
    }
    if let Some(state) = &out.state {
        let value = serde_json::to_value(state)
            .map_err(|e| format!("the state does not serialize: {e}"))?;
        let again: M::State = serde_json::from_value(value.clone())
            .map_err(|e| format!("the state {value} does not deserialize: {e}"))?;
        if &again != state {
            return Err(format!(
                "decode(encode(state)) differs: {state:?} became {again:?}"
            ));
        }
    }

    let before = step::decode::<M>(read)
        .map_err(|e| format!("the persisted record does not decode: {e}"))?;
    let after = step::decode::<M>(&out.status)
        .map_err(|e| format!("the new record does not decode: {e}"))?;
    if after.as_ref().map(|r| &r.state) != out.state.as_ref() {
        return Err(format!(
            "Outcome.state {:?} disagrees with the record to write {:?}",
            out.state,
            after.map(|r| r.state)
        ));
    }
    check_edge::<M>(before.as_ref(), after.as_ref(), out.taken.as_ref())?;
    if let Some(record) = &after {
        check_deadline::<M>(record, now, &out.status)?;
    }

    if out.release_finalizer {
        if !deleting {
            return Err("release_finalizer while not deleting".into());
        }
        if let Some(record) = &after
            && !M::finalized(&record.state)
        {
            return Err(format!(
                "release_finalizer in {:?}, which is not finalized",
                record.state
            ));
        }
    }
    Ok(())
}

/// Every state that waits on something outside declares a deadline, and no state is
/// written as lasting past its deadline without `Degraded=True`.
pub(super) fn check_deadline<M: Machine>(
    record: &MachineRecord<M::State>,
    now: DateTime<Utc>,
    status: &EngineStatus<M::State>,
) -> Result<(), String> {
    crate::engine::deadline_declared::<M>(&record.state)?;
    let Some(limit) = M::deadline(&record.state).limit() else {
        return Ok(());
    };
    let lasted = (now - record.entered_at).to_std().unwrap_or_default();
    let degraded = status
        .condition(conditions::DEGRADED)
        .is_some_and(|c| c.status == status::TRUE);
    if lasted > limit && !degraded {
        return Err(format!(
            "{:?} has lasted {}s, past its deadline of {}s, without Degraded",
            record.state,
            lasted.as_secs(),
            limit.as_secs()
        ));
    }
    Ok(())
}

/// The record changes exactly when a transition is reported, and that transition is
/// declared and matches the states.
pub(super) fn check_edge<M: Machine>(
    before: Option<&MachineRecord<M::State>>,
    after: Option<&MachineRecord<M::State>>,
    taken: Option<&Taken>,
) -> Result<(), String> {
    match (before, after, taken) {
        (_, _, Some(t)) if !declared::<M>(t) => Err(format!(
            "took {} -> {} ({}), which the table does not declare",
            t.from, t.to, t.reason
        )),
        (Some(b), Some(a), Some(t)) => {
            let (from, to) = (kind_name::<M>(&b.state), kind_name::<M>(&a.state));
            if (from, to) == (t.from, t.to) {
                Ok(())
            } else {
                Err(format!(
                    "reported {} -> {} but the record went {from} -> {to}",
                    t.from, t.to
                ))
            }
        }
        (_, _, Some(t)) => Err(format!(
            "reported {} -> {} without a record before and after",
            t.from, t.to
        )),
        (Some(b), Some(a), None) => {
            if a.state == b.state && a.entered_at == b.entered_at && a.history == b.history {
                Ok(())
            } else {
                Err(format!(
                    "the record changed from {:?} to {:?} without a transition",
                    b.state, a.state
                ))
            }
        }
        (Some(b), None, None) => Err(format!("the record {:?} vanished", b.state)),
        (None, Some(a), None) => {
            if a.state == M::initial() {
                Ok(())
            } else {
                Err(format!(
                    "initialized to {:?}, not the initial state",
                    a.state
                ))
            }
        }
        (None, None, None) => Ok(()),
    }
}
