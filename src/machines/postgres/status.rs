//! The PostgresCluster's own status fields and its `PrimaryAvailable` condition,
//! projected from the persisted state, its history and the observation.

use kube::ResourceExt;

use super::actions::Role;
use super::api::{FailoverRecord, PostgresCluster, PostgresClusterSpec};
use super::observe::Observed;
use super::state::{HibernateStep, PgState, RestoreStep, SwitchCause};
use super::table::reason;
use super::terms::{self, Applied, Terms};
use super::{CONTINUOUS_ARCHIVING, PRIMARY_AVAILABLE, SETTINGS_APPLIED, SYNCHRONOUS_REPLICATION};
use crate::engine::{Condition, HistoryEntry, conditions};
use crate::machines::common::jobs::JobOutcome;
use crate::pod::applied::{Gathered, reason as applied_reason};
use crate::pod::archiving;
use crate::pod::synchronous;

/// The image a state vouches every instance runs.
pub(super) fn rest_image(state: Option<&PgState>) -> Option<String> {
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

/// `status.longestLeaseSeconds`: the longest `L` of what the status said `before`, the
/// spec's, and the one each observed instance pod was created with. A pod is created
/// from the StatefulSet's template, which carries the spec's `L`, so once this is
/// written no server of the cluster runs with a longer one, whether or not its pod is
/// still observed (a pod force-deleted on a partitioned node runs on). It never
/// decreases: lowering the spec's `L` leaves it as it was.
pub fn longest_lease_seconds(spec_seconds: i64, observed: &Observed, before: Option<i64>) -> i64 {
    observed
        .own
        .lease_seconds
        .values()
        .copied()
        .chain(before)
        .fold(spec_seconds, i64::max)
}

/// `status.synchronousTerms` ([`super::terms::record`]): the spec's terms alone once
/// every member of the spec's (`0..spec.replicas`) and every other pod observed reports
/// it judged the spec's settings; otherwise those the status said `before`, with the
/// spec's added. The widest a lost record is taken over: the spec's members, every pod
/// and every volume claim observed.
pub fn synchronous_terms(
    spec: &PostgresClusterSpec,
    observed: &Observed,
    before: Option<&[Terms]>,
) -> Vec<Terms> {
    let judged = &observed.own.judged;
    let everywhere = (0..spec.replicas).all(|k| judged.contains(&k))
        && observed.pods.keys().all(|k| judged.contains(k));
    let applied = if everywhere {
        Applied::Everywhere
    } else {
        Applied::NotYet
    };
    let seen = observed
        .pods
        .keys()
        .chain(observed.own.claims.keys())
        .map(|k| k.saturating_add(1))
        .max()
        .unwrap_or(0);
    terms::record(
        Terms::of(spec.synchronous.as_ref(), spec.replicas),
        before,
        applied,
        seen.max(spec.replicas),
    )
}

pub(super) fn last_failover(history: &[HistoryEntry]) -> Option<FailoverRecord> {
    history
        .iter()
        .rev()
        .find(|h| h.reason == reason::FAILOVER_COMPLETED)
        .map(|h| FailoverRecord {
            time: h.at,
            message: h.message.clone(),
        })
}

/// `PrimaryAvailable`: False while the primary is lost or the role moves, and while the
/// primary's pod is observed not Ready in any other state (an upgrade, a scale, a
/// backup: it follows the pod within a reconcile, not only on transitions); True
/// otherwise (saying how the current primary got its role, when the history still
/// tells).
pub(super) fn primary_available(
    object: &PostgresCluster,
    state: &PgState,
    history: &[HistoryEntry],
    observed: &Observed,
    now: chrono::DateTime<chrono::Utc>,
    generation: Option<i64>,
) -> Option<Condition> {
    let name = object.name_any();
    let pod = |k: i32| format!("{name}-{k}");
    let (holds, why, message) = match state {
        PgState::Creating { .. } | PgState::Finalizing { .. } | PgState::Finalized => return None,
        // Why it was lost (not Ready, or not renewing the Lease though Ready), as the
        // transition into PrimaryLost said.
        PgState::PrimaryLost { cluster } => {
            let lost = history.iter().rev().find(|h| {
                h.reason == reason::PRIMARY_NOT_READY || h.reason == reason::PRIMARY_NOT_RENEWING
            });
            let (why, what) = match lost {
                Some(h) => (
                    if h.reason == reason::PRIMARY_NOT_RENEWING {
                        "PrimaryNotRenewing"
                    } else {
                        "PrimaryNotReady"
                    },
                    h.message.clone(),
                ),
                None => (
                    "PrimaryNotReady",
                    format!("primary {} is not Ready", pod(cluster.primary)),
                ),
            };
            (
                false,
                why,
                format!(
                    "{what}; a Ready replica is promoted if it stays so for failoverDelaySeconds={}",
                    object.spec.failover_delay_seconds
                ),
            )
        }
        // A request for the pod that is already primary moves nothing: it stays available.
        PgState::SwitchingOver(s) if s.target.ordinal != s.cluster.primary => {
            let (from, to) = (pod(s.cluster.primary), pod(s.target.ordinal));
            match s.cause {
                SwitchCause::Failover => (
                    false,
                    "FailingOver",
                    format!(
                        "promoting {to} in place of {from}, which was not Ready (or not renewing the primary Lease) for longer than failoverDelaySeconds"
                    ),
                ),
                SwitchCause::Upgrade | SwitchCause::Scale | SwitchCause::Requested => (
                    false,
                    "SwitchingOver",
                    format!("moving the primary role from {from} to {to}"),
                ),
            }
        }
        // An in-place restore: nothing serves until pod 0 has recovered to the target.
        PgState::RestoringInPlace(r) => {
            let what = format!(
                "the in-place restore {:?} to {}",
                r.restore.token,
                super::decide::restoring_in_place::target_text(r.restore.target.as_ref())
            );
            match r.restore_step {
                RestoreStep::CloneReplicas if observed.serving(0) => (
                    true,
                    "Restored",
                    format!(
                        "{} is primary, restored by {what}; the replicas clone it",
                        pod(0)
                    ),
                ),
                step => (
                    false,
                    "Restoring",
                    format!("no primary serves during {what} (step {step})"),
                ),
            }
        }
        // Hibernation: nothing serves until the primary it had is back.
        PgState::Hibernating(h) if !observed.serving(h.cluster.primary) => (
            false,
            "Hibernating",
            match h.hibernate_step {
                HibernateStep::Stopping => {
                    "spec.hibernate: the instances stop, their volumes kept".to_owned()
                }
                HibernateStep::Asleep => "spec.hibernate: no instance runs".to_owned(),
                HibernateStep::Waking => format!(
                    "waking from hibernation: {} starts as the primary it was",
                    pod(h.cluster.primary)
                ),
            },
        ),
        other
            if other
                .cluster()
                .is_some_and(|c| !observed.serving(c.primary)) =>
        {
            let primary = other.cluster().map_or(0, |c| c.primary);
            (
                false,
                "PrimaryNotReady",
                format!("primary {} is not Ready", pod(primary)),
            )
        }
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
    Some(condition(
        object,
        PRIMARY_AVAILABLE,
        (holds, why, message),
        now,
        generation,
    ))
}

/// `SettingsApplied`: what the instances made of `spec.postgresql`, from what each
/// reports on its pod ([`crate::pod::applied`]): `False` while one refused a setting
/// (`Refused`) or one waits for a restart to apply a parameter (`PendingRestart`),
/// naming each field and its instances; `False` (`Applying`) while an instance has yet
/// to judge the spec's settings ([`Observed`]'s `unjudged`, named in every message);
/// `True` (`Applied`) once every instance that reports applies them all. Absent while
/// no instance reports (a server not started yet, or pods made before instances
/// reported).
pub(super) fn settings_applied(
    object: &PostgresCluster,
    observed: &Observed,
    now: chrono::DateTime<chrono::Utc>,
    generation: Option<i64>,
) -> Option<Condition> {
    let reports = &observed.own.settings;
    if reports.is_empty() {
        return None;
    }
    let name = object.name_any();
    let pod = |k: i32| format!("{name}-{k}");
    let gathered = Gathered::of(reports);
    let pending = (!gathered.pending_restart.is_empty()).then(|| {
        format!(
            "pending restart: {} (each applies at the instance's next start)",
            gathered.pending_text(pod)
        )
    });
    let unjudged: Vec<i32> = observed.own.unjudged.iter().copied().collect();
    let unread = (!unjudged.is_empty()).then(|| {
        let pods: Vec<String> = unjudged.iter().map(|k| pod(*k)).collect();
        format!("{} yet to read the spec's settings", pods.join(", "))
    });
    let (holds, why, message) = if !gathered.refused.is_empty() {
        let refused = format!("refused: {}", gathered.refused_text(pod));
        let message = match pending {
            Some(pending) => format!("{refused}; {pending}"),
            None => refused,
        };
        (false, applied_reason::REFUSED, message)
    } else if let Some(pending) = pending {
        (false, applied_reason::PENDING_RESTART, pending)
    } else if let Some(unread) = &unread {
        (false, applied_reason::APPLYING, unread.clone())
    } else {
        let message = format!(
            "{} instance(s) report every setting of spec.postgresql applied",
            reports.len()
        );
        (true, applied_reason::APPLIED, message)
    };
    let message = match unread {
        Some(unread) if why != applied_reason::APPLYING => format!("{message}; {unread}"),
        _ => message,
    };
    Some(condition(
        object,
        SETTINGS_APPLIED,
        (holds, why, message),
        now,
        generation,
    ))
}

/// `ContinuousArchiving`: whether the primary's WAL reaches the archive
/// (`spec.backup.walArchive`), as the primary reports it on its pod
/// ([`crate::pod::archiving`]): `True` (`Archiving`) or `False` (`ArchiveFailing`, its
/// message). Absent without `walArchive`, or while the primary reports nothing (its
/// stanza is being created).
pub(super) fn continuous_archiving(
    object: &PostgresCluster,
    observed: &Observed,
    now: chrono::DateTime<chrono::Utc>,
    generation: Option<i64>,
) -> Option<Condition> {
    object.spec.backup.as_ref()?.wal_archive.as_ref()?;
    let (primary, (works, said)) = primary_report(observed, &observed.own.archiving)?;
    let name = object.name_any();
    let (why, message) = if *works {
        (
            archiving::reason::ARCHIVING,
            format!("{name}-{primary} archives its WAL: {said}"),
        )
    } else {
        (
            archiving::reason::FAILING,
            format!("{name}-{primary}: {said}"),
        )
    };
    Some(condition(
        object,
        CONTINUOUS_ARCHIVING,
        (*works, why, message),
        now,
        generation,
    ))
}

/// `SynchronousReplication` (with `spec.synchronous`): what the pod labelled primary
/// last reported, `False` while `Preferred` turned it asynchronous; none until it
/// reported.
pub(super) fn synchronous_replication(
    object: &PostgresCluster,
    observed: &Observed,
    now: chrono::DateTime<chrono::Utc>,
    generation: Option<i64>,
) -> Option<Condition> {
    object.spec.synchronous.as_ref()?;
    let (primary, (waits, said)) = primary_report(observed, &observed.own.synchronous)?;
    let why = if *waits {
        synchronous::reason::SYNCHRONOUS
    } else {
        synchronous::reason::ASYNCHRONOUS
    };
    Some(condition(
        object,
        SYNCHRONOUS_REPLICATION,
        (
            *waits,
            why,
            format!("{}-{primary}: {said}", object.name_any()),
        ),
        now,
        generation,
    ))
}

/// The pod labelled primary (not terminating) and what it reported in `reports` (a
/// replica's report, from when it was a primary, is nobody's).
fn primary_report<'a>(
    observed: &Observed,
    reports: &'a std::collections::BTreeMap<i32, (bool, String)>,
) -> Option<(i32, &'a (bool, String))> {
    let (primary, _) = observed
        .pods
        .iter()
        .find(|(_, p)| !p.terminating && p.role == Some(Role::Primary))?;
    Some((*primary, reports.get(primary)?))
}

/// The condition `type_` of `object` saying `(holds, reason, message)`: its transition
/// time moves only when whether it holds does (kept from the status as it was read).
fn condition(
    object: &PostgresCluster,
    type_: &str,
    (holds, why, message): (bool, &str, String),
    now: chrono::DateTime<chrono::Utc>,
    generation: Option<i64>,
) -> Condition {
    let status = if holds {
        conditions::status::TRUE
    } else {
        conditions::status::FALSE
    };
    let since = object
        .status
        .as_ref()
        .and_then(|s| s.engine.condition(type_))
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time);
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: why.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: generation,
    }
}
