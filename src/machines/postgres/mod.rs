//! PostgresCluster: the seed-001 operator, as a Lockstep machine. A primary and streaming
//! replicas of PostgreSQL, with switchover on upgrades, failover when the primary stays
//! down, scheduled, on-demand and final backups to S3.
//!
//! - [`api`]: the custom resource, its validation and status.
//! - [`machine`]: the state machine (statechart, guarantees and assumptions there).
//! - [`observe`] and [`render`]: the bridge to Kubernetes objects.
//! - `scripts/`: what runs in the pods and Jobs (`entrypoint.sh`, `promote.sh`,
//!   `backup.sh`, `restore.sh`), shipped in a ConfigMap; their environment contract is in
//!   `scripts/README.md`.
//!
//! This module binds them into an [`Operator`] the driver runs, and projects the kind's
//! own status: `primaryPod` and `replicaPods` (from the role labels the Services select
//! by), `targetPrimary` mid-switchover, `image`, `lastBackupTime`, `lastFailover`, and
//! the condition `PrimaryAvailable`.
//!
//! # Guarantees
//! See [`machine`]. Additionally, `status` is a deterministic function of the persisted
//! record, the previous status and the observation, so an idle reconcile writes nothing;
//! no password is ever read, logged or written to the status.
//!
//! # Assumptions
//! The driver's cache watches pods, Jobs, CronJobs, StatefulSets, Services, ConfigMaps
//! and PodDisruptionBudgets carrying the standard labels, which every rendered object
//! (and every pod made from the StatefulSet) carries.
//!
//! # Errors
//! Rendering fails only for an owner without a UID (never for an object read from the
//! API server) or an object that does not serialize: [`crate::driver::Error`].

pub mod api;
pub mod machine;
#[cfg(test)]
mod model;
pub mod observe;
pub mod render;
#[cfg(test)]
mod tests;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

pub use api::{PostgresCluster, PostgresClusterSpec, PostgresClusterStatus};
pub use machine::{Observed, PgAction, PgKind, PgState, Postgres};

use crate::driver::{Cache, Error, Op, Operator};
use crate::engine::{Condition, EngineStatus, HistoryEntry, conditions};
use crate::machines::common::backup::cronjob_name;
use crate::machines::common::jobs::JobOutcome;
use api::FailoverRecord;
use machine::{Role, SwitchCause, reason};
use render::ROLE_LABEL;

/// The condition type saying whether a primary serves writes (through `<name>-rw`), and
/// why not or since when.
pub const PRIMARY_AVAILABLE: &str = "PrimaryAvailable";

impl Operator for Postgres {
    type Resource = PostgresCluster;

    const KIND_LABEL: &'static str = render::KIND_LABEL;

    fn spec(object: &PostgresCluster) -> PostgresClusterSpec {
        object.spec.clone()
    }

    fn engine_status(object: &PostgresCluster) -> EngineStatus<PgState> {
        let mut engine = object
            .status
            .as_ref()
            .map(|s| s.engine.clone())
            .unwrap_or_default();
        // The kind's own condition is projected by `status`, not by the engine.
        engine.conditions.retain(|c| c.type_ != PRIMARY_AVAILABLE);
        engine
    }

    fn observe(object: &PostgresCluster, _state: Option<&PgState>, cache: &Cache) -> Observed {
        observe::observe(object, cache)
    }

    fn render(object: &PostgresCluster, action: &PgAction) -> Result<Vec<Op>, Error> {
        let name = object.name_any();
        let pod = |ordinal: i32| format!("{name}-{ordinal}");
        Ok(match action {
            PgAction::CreateCredentials => vec![Op::create(&render::credentials_secret(object))?],
            PgAction::EnsureScripts => vec![Op::apply(&render::scripts(object)?)?],
            PgAction::EnsureService(kind) => vec![Op::apply(&render::service(object, *kind)?)?],
            PgAction::EnsurePdb => vec![Op::apply(&render::pdb(object)?)?],
            PgAction::EnsureStatefulSet { image, replicas } => {
                vec![Op::apply(&render::statefulset(object, image, *replicas)?)?]
            }
            PgAction::Label { ordinal, role } => {
                let role: &str = (*role).into();
                vec![Op::label::<Pod>(
                    pod(*ordinal),
                    [(ROLE_LABEL.to_owned(), Some(role.to_owned()))].into(),
                )]
            }
            PgAction::DeletePod { ordinal, uid, .. } => vec![Op::delete::<Pod>(pod(*ordinal), uid)],
            PgAction::RunPromote {
                key,
                target,
                image,
                old_primary,
            } => {
                vec![Op::create(&render::promote_job(
                    object,
                    key,
                    *target,
                    image,
                    *old_primary,
                )?)?]
            }
            PgAction::RunBackup { key, kind } => render::backup_job(object, key, *kind)?
                .map(|job| Op::create(&job))
                .transpose()?
                .into_iter()
                .collect(),
            PgAction::EnsureCronJob => render::cronjob(object)?
                .map(|cj| Op::apply(&cj))
                .transpose()?
                .into_iter()
                .collect(),
            PgAction::DeleteCronJob { uid } => {
                vec![Op::delete::<CronJob>(cronjob_name(&name), uid)]
            }
            PgAction::DeleteJob { name, uid } => vec![Op::delete::<Job>(name, uid)],
        })
    }

    fn status(
        object: &PostgresCluster,
        engine: EngineStatus<PgState>,
        state: Option<&PgState>,
        observed: &Observed,
    ) -> serde_json::Value {
        let old = object.status.as_ref();
        let name = object.name_any();
        let labelled = |role: Role| -> Vec<String> {
            observed
                .pods
                .iter()
                .filter(|(_, p)| !p.terminating && p.role == Some(role))
                .map(|(k, _)| format!("{name}-{k}"))
                .collect()
        };
        let history = crate::engine::step::decode::<Postgres>(&engine)
            .ok()
            .flatten();
        let mut engine = engine;
        if let (Some(state), Some(record)) = (state, &history)
            && let Some(condition) = primary_available(
                object,
                state,
                &record.history,
                record.entered_at,
                engine.observed_generation,
            )
        {
            engine.conditions.push(condition);
        }
        let status = PostgresClusterStatus {
            engine,
            primary_pod: labelled(Role::Primary).into_iter().next(),
            replica_pods: labelled(Role::Replica),
            target_primary: match state {
                Some(PgState::SwitchingOver(s)) => Some(format!("{name}-{}", s.target.ordinal)),
                _ => None,
            },
            image: rest_image(state).or_else(|| old.and_then(|s| s.image.clone())),
            last_backup_time: last_backup_time(observed, old.and_then(|s| s.last_backup_time)),
            last_failover: history
                .as_ref()
                .and_then(|r| last_failover(&r.history))
                .filter(|seen| {
                    old.and_then(|s| s.last_failover.as_ref())
                        .is_none_or(|before| before.time <= seen.time)
                })
                .or_else(|| old.and_then(|s| s.last_failover.clone())),
        };
        serde_json::to_value(status).unwrap_or(serde_json::Value::Null)
    }
}

/// The image a state vouches every instance runs.
fn rest_image(state: Option<&PgState>) -> Option<String> {
    match state? {
        PgState::Ready { cluster }
        | PgState::Scaling { cluster, .. }
        | PgState::BackingUp { cluster, .. } => Some(cluster.image.clone()),
        _ => None,
    }
}

/// When the most recent successful backup finished: from the Jobs still there, or what
/// the status already says if that is more recent (Jobs are pruned).
pub fn last_backup_time(
    observed: &Observed,
    before: Option<chrono::DateTime<chrono::Utc>>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let seen = observed
        .jobs
        .iter()
        .filter(|j| j.purpose.is_some_and(|p| p.is_backup()))
        .filter_map(|j| match j.outcome {
            JobOutcome::Succeeded { at } => Some(at),
            _ => None,
        })
        .max();
    seen.max(before)
}

fn last_failover(history: &[HistoryEntry]) -> Option<FailoverRecord> {
    history
        .iter()
        .rev()
        .find(|h| h.reason == reason::FAILOVER_COMPLETED)
        .map(|h| FailoverRecord {
            time: h.at,
            message: h.message.clone(),
        })
}

/// `PrimaryAvailable`: False while the primary is lost or the role moves, True otherwise
/// (saying how the current primary got its role, when the history still tells). It flips
/// only on transitions, so its time is the current state's `enteredAt`.
fn primary_available(
    object: &PostgresCluster,
    state: &PgState,
    history: &[HistoryEntry],
    entered_at: chrono::DateTime<chrono::Utc>,
    generation: Option<i64>,
) -> Option<Condition> {
    let name = object.name_any();
    let pod = |k: i32| format!("{name}-{k}");
    let (holds, why, message) = match state {
        PgState::Creating { .. } | PgState::Finalizing { .. } | PgState::Finalized => return None,
        PgState::PrimaryLost { cluster } => (
            false,
            "PrimaryNotReady",
            format!(
                "primary {} is not Ready; a Ready replica is promoted if it stays so for failoverDelaySeconds={}",
                pod(cluster.primary),
                object.spec.failover_delay_seconds
            ),
        ),
        PgState::SwitchingOver(s) => match s.cause {
            SwitchCause::Failover => (
                false,
                "FailingOver",
                format!(
                    "promoting {} in place of {}, which was not Ready for longer than failoverDelaySeconds",
                    pod(s.target.ordinal),
                    pod(s.cluster.primary)
                ),
            ),
            SwitchCause::Upgrade | SwitchCause::Scale => (
                false,
                "SwitchingOver",
                format!(
                    "moving the primary role from {} to {}",
                    pod(s.cluster.primary),
                    pod(s.target.ordinal)
                ),
            ),
        },
        other => {
            let primary = other.cluster().map_or(0, |c| c.primary);
            let how = history.iter().rev().find_map(|h| match h.reason.as_str() {
                reason::FAILOVER_COMPLETED => Some(("FailedOver", h.message.clone())),
                reason::SWITCHOVER_COMPLETED => Some(("SwitchedOver", h.message.clone())),
                _ => None,
            });
            match how {
                Some((why, message)) => (true, why, message),
                None => (true, "Primary", format!("{} is primary", pod(primary))),
            }
        }
    };
    let status = if holds {
        conditions::status::TRUE
    } else {
        conditions::status::FALSE
    };
    let since = object
        .status
        .as_ref()
        .and_then(|s| s.engine.condition(PRIMARY_AVAILABLE))
        .filter(|c| c.status == status)
        .map_or(entered_at, |c| c.last_transition_time);
    Some(Condition {
        type_: PRIMARY_AVAILABLE.to_owned(),
        status: status.to_owned(),
        reason: why.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: generation,
    })
}
