//! Preparing the data directory: reading the role and `$PGDATA`, bootstrap, local
//! promotion, clone, rewind.

use super::{AgentDecision, me};
use crate::engine::Decision;
use crate::instance::action::AgentAction;
use crate::instance::machine::AgentSpec;
use crate::instance::observe::{DataDir, Finished, Observation, RoleLabel, Task};
use crate::instance::state::{AgentState, ExitCode};
use crate::instance::table::reason::{
    BOOTSTRAPPED, CLONED, FOREIGN_DATA, LABELLED_PRIMARY, NO_DATA, OLD_PRIMARY_DATA,
    PREPARE_FAILED, PREPARING, PROMOTED_LOCALLY, REWIND_FAILED, REWIND_UNREACHED, REWOUND,
    SIGNALLED, STANDBY_DATA, STANDBY_MAY_HAVE_DIVERGED, UNKNOWN_ROLE, WAITING_FOR_ROLE,
};
use crate::pod::Role;

/// Starting: the role label and `$PGDATA` say what comes next; asked to stop first, it
/// exits at once (nothing of it runs yet, so a pod deleted before it was labelled does
/// not wait out its grace period).
pub(super) fn starting(spec: &AgentSpec, seen: &Observation, signalled: bool) -> AgentDecision {
    let exit = |why, message: String| {
        Decision::go(
            AgentState::Exited {
                code: ExitCode::Misconfigured,
            },
            why,
            message,
        )
    };
    if signalled {
        return Decision::go(
            AgentState::Exited {
                code: ExitCode::Stopped,
            },
            SIGNALLED,
            "asked to stop before preparing anything: exiting",
        );
    }
    let role = match &seen.role {
        RoleLabel::Absent => {
            return Decision::stay(
                WAITING_FOR_ROLE,
                "no role label yet: waiting for the operator to label this pod",
            )
            .requeue(spec.period());
        }
        RoleLabel::Unknown(value) => {
            return exit(
                UNKNOWN_ROLE,
                format!("the role label is {value:?}: it must be primary, replica or demoted"),
            );
        }
        RoleLabel::Is(role) => *role,
    };
    if seen.data == DataDir::Foreign {
        return exit(
            FOREIGN_DATA,
            "$PGDATA is not empty but holds no PostgreSQL data directory: refusing to write over it".to_owned(),
        );
    }
    if role == Role::Primary {
        return Decision::go(
            AgentState::AwaitingLease,
            LABELLED_PRIMARY,
            "labelled primary: waiting for the Lease before a writable start",
        );
    }
    // A standby-to-be: if the Lease still names this pod (it was fenced, or demoted while
    // not running), nothing of it runs: say so (a release without a position keeps any
    // position already there).
    let release = seen
        .lease
        .seen()
        .filter(|l| spec.lease.is_some() && l.names(me(spec)))
        .map(|_| AgentAction::Release { lsn: None });
    let go = |to, why, message: &str| {
        Decision::go(
            to,
            why,
            format!("labelled {}: {message}", <&str>::from(role)),
        )
        .with_actions(release.clone())
    };
    match seen.data {
        DataDir::Empty | DataDir::Interrupted => {
            go(AgentState::Cloning, NO_DATA, "no data: cloning the primary")
        }
        DataDir::Primary { .. } => go(
            AgentState::Rewinding,
            OLD_PRIMARY_DATA,
            "an old primary's data: rewinding it against the primary",
        ),
        DataDir::Standby { clean: true } if seen.upstream_writable => go(
            AgentState::Rewinding,
            STANDBY_MAY_HAVE_DIVERGED,
            "a standby's data, shut down cleanly, and the primary answers: rewinding (a no-op unless it streamed past a failover)",
        ),
        DataDir::Standby { .. } | DataDir::Foreign => go(
            AgentState::Standby,
            STANDBY_DATA,
            "a standby's data: starting as a standby",
        )
        .with_actions(super::standby::start_standby(spec, seen)),
    }
}

/// A long-running preparation: asked every round until it finished.
pub(super) fn preparing(spec: &AgentSpec, state: &AgentState, seen: &Observation) -> AgentDecision {
    let task = match state {
        AgentState::Bootstrapping => Task::Bootstrap,
        AgentState::PromotingLocally => Task::PromoteLocally,
        AgentState::Cloning => Task::Clone,
        _ => Task::Rewind,
    };
    let failed = |message: &str| {
        Decision::go(
            AgentState::Exited {
                code: ExitCode::PrepareFailed,
            },
            PREPARE_FAILED,
            message.to_owned(),
        )
    };
    match seen.finished {
        Some(Finished {
            task: t, ok: true, ..
        }) if t == task => match task {
            Task::Bootstrap => Decision::go(
                AgentState::StartingPrimary,
                BOOTSTRAPPED,
                "bootstrapped: starting writable after a renewal",
            ),
            Task::PromoteLocally => Decision::go(
                AgentState::StartingPrimary,
                PROMOTED_LOCALLY,
                "promoted locally: starting writable after a renewal",
            ),
            Task::Clone => {
                Decision::go(AgentState::Standby, CLONED, "cloned: starting as a standby")
                    .with_actions(super::standby::start_standby(spec, seen))
            }
            Task::Rewind => Decision::go(
                AgentState::Standby,
                REWOUND,
                "rewound: starting as a standby",
            )
            .with_actions(super::standby::start_standby(spec, seen)),
        },
        // A rewind that never reached the primary changed nothing: $PGDATA is kept, and
        // the start is decided again (a standby that answers a failover's survey, when no
        // writable primary does), never discarded for a primary that was away a moment
        // (found on the real node: a failover's kill came while a standby rewound, and a
        // member the synchronous quorum needed threw its WAL away).
        Some(Finished {
            task: Task::Rewind,
            ok: false,
            unreached: true,
        }) if task == Task::Rewind => Decision::go(
            AgentState::Starting,
            REWIND_UNREACHED,
            "pg_rewind never reached a writable primary: nothing changed, $PGDATA is kept; deciding the start again",
        ),
        Some(Finished {
            task: t, ok: false, ..
        }) if t == task => match task {
            Task::Bootstrap => {
                failed("initdb or creating the roles, or the restore from backups, failed")
            }
            Task::PromoteLocally => failed("the local promotion failed"),
            Task::Clone => failed("pg_basebackup failed within its bound"),
            Task::Rewind if spec.reclone_on_rewind_failure => Decision::go(
                AgentState::Cloning,
                REWIND_FAILED,
                "pg_rewind FAILED: DISCARDING $PGDATA and cloning the primary again",
            ),
            Task::Rewind => failed("pg_rewind failed and re-cloning is off"),
        },
        _ => {
            let action = match task {
                Task::Bootstrap => AgentAction::Bootstrap,
                Task::PromoteLocally => AgentAction::PromoteLocally,
                Task::Clone => AgentAction::Clone,
                Task::Rewind => AgentAction::Rewind,
            };
            Decision::stay(PREPARING, format!("{task} runs"))
                .with_actions([action])
                .requeue(spec.period())
        }
    }
}
