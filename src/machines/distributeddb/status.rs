//! The DistributedDB's own status fields, projected from the persisted state and the
//! observation (the engine projects the rest), and its `Available` condition.
//!
//! # Guarantees
//! - The counts (`replicas`, `readyReplicas`, and `Available` which is read from them)
//!   are what the reconcile observed, in every state: a pod that becomes NotReady in
//!   the middle of an upgrade shows in `READY` and `Available` on the next reconcile.
//!   Writes are coalesced, not skipped: the counts change only when readiness does, and
//!   they ride in the same write as anything else that changed, so a readiness change
//!   costs at most one status write and nothing changes while nothing does.
//! - `Available` is `True` (reason [`QUORUM_REACHED`]) while a majority of
//!   `spec.replicas` members is Ready, else `False` ([`QUORUM_LOST`]).

use chrono::{DateTime, Utc};

use super::api::{DistributedDBStatus, LastBackup};
use super::observe::{Observed, PodView};
use super::state::DdbState;
use crate::engine::{Condition, EngineStatus};
use crate::machines::common::last_backup;

/// The condition type saying whether the database can serve: a quorum of its members
/// is Ready (the seed's `Available`).
pub const AVAILABLE: &str = "Available";
/// `Available=True`: a majority of the members is Ready.
pub const QUORUM_REACHED: &str = "QuorumReached";
/// `Available=False`: fewer than a majority of the members is Ready.
pub const QUORUM_LOST: &str = "QuorumLost";

/// The counts a status shows, and the `Available` condition read from them.
///
/// `fresh` are the counts observed now (`replicas`, `readyReplicas`); `engine` is the
/// status the engine projected for this reconcile; `old` the status read (for the
/// condition's `lastTransitionTime`).
pub fn project(
    engine: EngineStatus<DdbState>,
    old: Option<&DistributedDBStatus>,
    fresh: (i32, i32),
    members: i32,
    now: DateTime<Utc>,
) -> (EngineStatus<DdbState>, i32, i32) {
    let (replicas, ready) = fresh;
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
/// recent ([`last_backup::seen`]).
pub fn last_backup(observed: &Observed, before: Option<&LastBackup>) -> Option<LastBackup> {
    last_backup::seen(observed, before)
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

    #[test]
    fn a_readiness_change_is_shown_whatever_the_engine_writes() {
        let before = old(3);
        let (engine, _, ready) = project(
            without(&before.engine),
            Some(&before),
            (3, 2),
            3,
            DateTime::UNIX_EPOCH,
        );
        assert_eq!(ready, 2);
        assert_eq!(available(&engine), ("True", QUORUM_REACHED));
        let c = engine.condition(AVAILABLE).expect("Available is projected");
        assert_eq!(c.message, "2 of 3 members Ready (quorum 2)");
    }

    #[test]
    fn nothing_changes_while_readiness_does_not() {
        let before = old(3);
        let (engine, replicas, ready) = project(
            without(&before.engine),
            Some(&before),
            (3, 3),
            3,
            DateTime::UNIX_EPOCH,
        );
        assert_eq!((engine, replicas, ready), (before.engine, 3, 3));
    }

    /// `status` as the engine projects it: without the machine's own `Available`.
    fn without(status: &EngineStatus<DdbState>) -> EngineStatus<DdbState> {
        let mut status = status.clone();
        status.conditions.retain(|c| c.type_ != AVAILABLE);
        status
    }

    #[test]
    fn available_means_a_majority_of_members_is_ready() {
        assert_eq!(available(&old(2).engine), ("True", QUORUM_REACHED));
        assert_eq!(available(&old(1).engine), ("False", QUORUM_LOST));
    }
}
