//! The DistributedDB's own status fields, projected from the persisted state and the
//! observation (the engine projects the rest), and its `Available` condition.
//!
//! # Guarantees
//! - Writes follow transitions: while the machine is in a transitional state
//!   (Creating, Upgrading, Scaling, BackingUp, Finalizing), the observed counts
//!   (`replicas`, `readyReplicas`, and `Available` which is read from them) are carried
//!   over as last written and refreshed only in a write the engine makes anyway (a
//!   transition, a condition that changes). At rest they follow every change, one write
//!   per change.
//! - `Available` is `True` (reason [`QUORUM_REACHED`]) while a majority of
//!   `spec.replicas` members is Ready, else `False` ([`QUORUM_LOST`]).

use chrono::{DateTime, Utc};

use super::api::{DistributedDBStatus, LastBackup};
use super::observe::{Observed, PodView};
use super::state::DdbState;
use crate::engine::{Condition, EngineStatus};
use crate::machines::common::jobs::JobOutcome;

/// The condition type saying whether the database can serve: a quorum of its members
/// is Ready (the seed's `Available`).
pub const AVAILABLE: &str = "Available";
/// `Available=True`: a majority of the members is Ready.
pub const QUORUM_REACHED: &str = "QuorumReached";
/// `Available=False`: fewer than a majority of the members is Ready.
pub const QUORUM_LOST: &str = "QuorumLost";

/// The counts a status shows, and the `Available` condition read from them.
///
/// `fresh` are the counts observed now; `engine` is the status the engine projected for
/// this reconcile. While `transitional`, the counts of `old` are kept unless the engine
/// status changes anyway (see the module's guarantees).
pub fn project(
    engine: EngineStatus<DdbState>,
    old: Option<&DistributedDBStatus>,
    fresh: (i32, i32),
    members: i32,
    transitional: bool,
    now: DateTime<Utc>,
) -> (EngineStatus<DdbState>, i32, i32) {
    let old_engine = old.map(|o| without_available(&o.engine));
    let engine_moves = old_engine.as_ref() != Some(&engine);
    let (replicas, ready) = match old {
        Some(o) if transitional && !engine_moves => (
            o.replicas.unwrap_or(fresh.0),
            o.ready_replicas.unwrap_or(fresh.1),
        ),
        _ => fresh,
    };
    let mut engine = engine;
    let quorum = members / 2 + 1;
    let (holds, reason, message) = if ready >= quorum {
        (
            true,
            QUORUM_REACHED,
            format!("{ready} of {members} members Ready (quorum {quorum})"),
        )
    } else {
        (
            false,
            QUORUM_LOST,
            format!("{ready} of {members} members Ready; quorum needs {quorum}"),
        )
    };
    let status = if holds { "True" } else { "False" };
    let before = old.and_then(|o| o.engine.condition(AVAILABLE));
    let since = before
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time);
    engine.conditions.push(Condition {
        type_: AVAILABLE.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: engine.observed_generation,
    });
    (engine, replicas, ready)
}

/// `status` as the engine projects it: without the machine's own `Available`.
fn without_available(status: &EngineStatus<DdbState>) -> EngineStatus<DdbState> {
    let mut status = status.clone();
    status.conditions.retain(|c| c.type_ != AVAILABLE);
    status
}

/// The version a state vouches for: the image every pod ran when it last came to rest.
pub fn version(state: Option<&DdbState>) -> Option<String> {
    match state? {
        DdbState::Ready { version, .. }
        | DdbState::Scaling { version, .. }
        | DdbState::BackingUp { version, .. } => Some(version.clone()),
        DdbState::Upgrading(u) => Some(u.from.clone()),
        DdbState::Creating | DdbState::Finalizing { .. } | DdbState::Finalized => None,
    }
}

/// How many of the observed pods (not terminating) `pick` holds for.
pub fn count(observed: &Observed, pick: impl Fn(&PodView) -> bool) -> i32 {
    let n = observed
        .pods
        .values()
        .filter(|p| !p.terminating && pick(p))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The most recent finished backup among the observed Jobs, or `before` if that is more
/// recent (Jobs are pruned; the status remembers).
pub fn last_backup(observed: &Observed, before: Option<&LastBackup>) -> Option<LastBackup> {
    let seen = observed
        .jobs
        .iter()
        .filter(|j| j.purpose.is_some_and(|p| p.is_backup()))
        .filter_map(|j| {
            let time = j.outcome.finished_at()?;
            let outcome = match &j.outcome {
                JobOutcome::Succeeded { .. } => "Succeeded".to_owned(),
                other => other.describe(),
            };
            Some(LastBackup {
                time,
                job: j.name.clone(),
                outcome,
            })
        })
        .max_by(|a, b| (a.time, &a.job).cmp(&(b.time, &b.job)));
    match (seen, before) {
        (Some(seen), Some(before)) if before.time > seen.time => Some(before.clone()),
        (None, before) => before.cloned(),
        (seen, _) => seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old(ready: i32) -> DistributedDBStatus {
        let (engine, replicas, ready) = project(
            EngineStatus::default(),
            None,
            (3, ready),
            3,
            false,
            DateTime::UNIX_EPOCH,
        );
        DistributedDBStatus {
            engine,
            replicas: Some(replicas),
            ready_replicas: Some(ready),
            ..DistributedDBStatus::default()
        }
    }

    fn available(engine: &EngineStatus<DdbState>) -> (&str, &str) {
        let c = engine.condition(AVAILABLE).expect("Available is projected");
        (c.status.as_str(), c.reason.as_str())
    }

    /// The projection of `engine` over `before`, 2 of 3 pods Ready now, mid-transition
    /// or at rest.
    fn two_of_three_ready(
        engine: EngineStatus<DdbState>,
        before: &DistributedDBStatus,
        transitional: bool,
    ) -> (EngineStatus<DdbState>, i32, i32) {
        project(
            engine,
            Some(before),
            (3, 2),
            3,
            transitional,
            DateTime::UNIX_EPOCH,
        )
    }

    #[test]
    fn mid_transition_a_readiness_change_alone_writes_nothing() {
        let before = old(3);
        let (engine, _, ready) = two_of_three_ready(EngineStatus::default(), &before, true);
        assert_eq!(ready, 3, "carried over while the engine writes nothing");
        assert_eq!(engine, before.engine, "so the status is unchanged");
    }

    #[test]
    fn mid_transition_the_counts_ride_along_with_the_engine_s_own_write() {
        let mut moved = EngineStatus::default();
        moved.phase = Some("Upgrading".to_owned());
        let (_, _, ready) = two_of_three_ready(moved, &old(3), true);
        assert_eq!(ready, 2);
    }

    #[test]
    fn at_rest_every_readiness_change_is_shown() {
        let (_, _, ready) = two_of_three_ready(EngineStatus::default(), &old(3), false);
        assert_eq!(ready, 2);
    }

    #[test]
    fn available_means_a_majority_of_members_is_ready() {
        assert_eq!(available(&old(2).engine), ("True", QUORUM_REACHED));
        assert_eq!(available(&old(1).engine), ("False", QUORUM_LOST));
    }
}
