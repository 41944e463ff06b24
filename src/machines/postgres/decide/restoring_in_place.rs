//! RestoringInPlace: `spec.restore` rewinds the running cluster to a point of its own
//! pgBackRest repository. Each step is persisted before it acts (the transition that
//! enters it carries no action), so an operator that restarts anywhere goes on from the
//! step it recorded:
//!
//! 1. [`RestoreStep::StopWrites`]: the StatefulSet is scaled to zero; the step ends once
//!    no pod is left and the Lease holder is certainly fenced ([`fence`]: it released
//!    the Lease as its pod stopped, or the Lease expired).
//! 2. [`RestoreStep::ReplaceVolumes`]: every instance's volume claim is deleted, and the
//!    primary Lease; it ends once none is left, so no member can start again on the
//!    pre-restore data.
//! 3. [`RestoreStep::RestorePrimary`]: pod 0 alone, on a new volume, is given a new
//!    Lease, the restore annotation ([`crate::pod::restore`]) and then
//!    the primary label. Its manager restores the repository, replays the archive to the
//!    target listening on no address, promotes there (a new timeline) and only then
//!    starts for clients. A manager that reports the restore failed makes the step
//!    `Degraded` (`RestoreFailed`); the manager tries again, and a new token restarts
//!    the restore from step 1 with another target.
//! 4. [`RestoreStep::CloneReplicas`]: the StatefulSet grows to `spec.replicas`; the new
//!    members clone the restored primary. Every instance Ready ends the restore.
//!
//! A request is not taken on while the WAL up to its time target may not be archived
//! yet, or while the primary reports archiving failing: `Ready` stays, `Degraded` with
//! `RestoreRefused`, and nothing stops.

use std::ops::ControlFlow;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::fencing::{Fence, fence, wait_for};
use super::stopping::stopped;
use super::{D, label_moves, objects, stay};
use crate::engine::{Decision, World};
use crate::machines::postgres::actions::{PgAction, Role};
use crate::machines::postgres::api::{PostgresClusterSpec, RecoveryTarget, RestoreSpec};
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, Restore, RestoreStep, Topology};
use crate::machines::postgres::table::reason::*;
use crate::pod::archiving::ARCHIVE_TIMEOUT_SECONDS;
use crate::pod::restore::annotation_value;

/// The key under which the record's acks keep the last `spec.restore.token` taken on.
pub const RESTORE_ACK: &str = "spec.restore.token";

/// How long after a time target the request waits before it stops anything: the
/// primary completes and archives a WAL file at least every `archive_timeout`, plus a
/// margin for the upload.
pub const ARCHIVE_SETTLE_SECONDS: i64 = ARCHIVE_TIMEOUT_SECONDS as i64 + 30;

/// How the target reads in messages.
pub(crate) fn target_text(target: Option<&RecoveryTarget>) -> String {
    match target {
        None => "the end of the archive".to_owned(),
        Some(t) => match (&t.time, &t.lsn, &t.name) {
            (Some(time), _, _) => format!("time {}", time.to_rfc3339()),
            (None, Some(lsn), _) => format!("LSN {lsn}"),
            (None, None, Some(name)) => format!("restore point {name:?}"),
            (None, None, None) => "the end of the base backup (immediate)".to_owned(),
        },
    }
}

/// Where a request for a restore finds the cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Asked<'a> {
    /// At rest; `served` is the token last taken on, if any.
    AtRest {
        /// The token last taken on.
        served: Option<&'a str>,
    },
    /// Over the restore with this token, in flight.
    MidRestore {
        /// The in-flight restore's token.
        token: &'a str,
    },
}

/// The restore `spec.restore` asks for, if its token is new: begun (from `cluster` at
/// rest, or over a restore in flight), or refused for now (a Degraded stay naming why,
/// with `actions`; a restore in flight holds at its step meanwhile).
pub(crate) fn restore_requested(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    asked: Asked<'_>,
    o: &Observed,
    now: DateTime<Utc>,
    actions: &[PgAction],
) -> ControlFlow<D> {
    let (served, meanwhile) = match asked {
        Asked::AtRest { served } => (served, "nothing was stopped".to_owned()),
        Asked::MidRestore { token } => (
            Some(token),
            format!("restore {token:?} holds at its step meanwhile"),
        ),
    };
    let Some(request) = spec
        .restore
        .as_ref()
        .filter(|r| Some(r.token.as_str()) != served)
    else {
        return ControlFlow::Continue(());
    };
    let what = format!(
        "spec.restore (token {:?}, to {})",
        request.token,
        target_text(request.target.as_ref())
    );
    let refuse = |why: String, wake: Option<Duration>| {
        let d = stay(
            RESTORE_REFUSED,
            format!("{what}: {why}; {meanwhile}"),
            actions.to_vec(),
        )
        .degraded();
        ControlFlow::Break(d.requeue_if_any(wake))
    };
    if let Some(time) = request.target.as_ref().and_then(|t| t.time) {
        let settled = time + chrono::Duration::seconds(ARCHIVE_SETTLE_SECONDS);
        if now < settled {
            return refuse(
                format!(
                    "the WAL up to the target time may not be archived yet (the primary completes a WAL file at least every {ARCHIVE_TIMEOUT_SECONDS} s); the restore starts at {}",
                    settled.to_rfc3339()
                ),
                wait_for(Some(settled), now),
            );
        }
    }
    if let Some((false, said)) = o.own.archiving.get(&cluster.primary) {
        return refuse(
            format!(
                "primary {} reports WAL archiving failing, so the archive may lack what the target needs ({said}); the restore starts once archiving works again",
                o.pod_name(cluster.primary)
            ),
            None,
        );
    }
    ControlFlow::Break(Decision::go(
        PgState::RestoringInPlace(Restore {
            cluster: cluster.clone(),
            restore: request.clone(),
            restore_step: RestoreStep::StopWrites,
        }),
        RESTORE_REQUESTED,
        format!(
            "{what}: rewinding the cluster in place; writes stop first, and everything committed after the target is discarded"
        ),
    ))
}

/// Decide in RestoringInPlace.
pub(crate) fn restoring_in_place(
    spec: &PostgresClusterSpec,
    r: &Restore,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let now = world.now;
    if let ControlFlow::Break(d) = restore_requested(
        spec,
        &r.cluster,
        Asked::MidRestore {
            token: &r.restore.token,
        },
        o,
        now,
        &[],
    ) {
        return d;
    }
    let go = |step, reason, message: String| {
        Decision::go(
            PgState::RestoringInPlace(Restore {
                restore_step: step,
                ..r.clone()
            }),
            reason,
            message,
        )
    };
    let image = &r.cluster.image;
    let what = format!(
        "restore {:?} to {}",
        r.restore.token,
        target_text(r.restore.target.as_ref())
    );
    match r.restore_step {
        RestoreStep::StopWrites => {
            let mut actions = objects(spec, image, 0, o);
            if let Err(running) = stopped(spec, o, now) {
                actions.extend(running.actions);
                let d = stay(STOPPING_WRITES, format!("{what}: {}", running.why), actions);
                return d.requeue_if_any(running.wake);
            }
            go(
                RestoreStep::ReplaceVolumes,
                WRITES_STOPPED,
                format!(
                    "{what}: no pod is left and nothing holds the primary Lease; the volumes go next"
                ),
            )
        }
        RestoreStep::ReplaceVolumes => {
            let mut actions = objects(spec, image, 0, o);
            actions.extend(o.own.claims.iter().map(|(k, uid)| PgAction::DeleteClaim {
                ordinal: *k,
                uid: uid.clone(),
            }));
            actions.extend(
                o.own
                    .lease
                    .as_ref()
                    .map(|l| PgAction::DeleteLease { uid: l.uid.clone() }),
            );
            if o.pods.is_empty() && o.own.claims.is_empty() && o.own.lease.is_none() {
                return go(
                    RestoreStep::RestorePrimary,
                    VOLUMES_REPLACED,
                    format!(
                        "{what}: no volume claim and no primary Lease is left; {} restores the repository on a new volume",
                        o.pod_name(0)
                    ),
                );
            }
            stay(
                REPLACING_VOLUMES,
                format!(
                    "{what}: deleting the volume claims of {} and the primary Lease",
                    if o.own.claims.is_empty() {
                        "no instance".to_owned()
                    } else {
                        o.pod_names(&o.own.claims.keys().copied().collect::<Vec<_>>())
                    }
                ),
                actions,
            )
        }
        RestoreStep::RestorePrimary => restore_primary(spec, r, o, now, &what),
        RestoreStep::CloneReplicas => {
            let replicas = spec.replicas;
            let mut actions = objects(spec, image, replicas, o);
            actions.extend(label_moves(o, Some(0)));
            let ready: Vec<i32> = (0..replicas).filter(|k| o.serving(*k)).collect();
            let extra = o.pods.keys().any(|k| *k >= replicas);
            if ready.len() == usize::try_from(replicas).unwrap_or(0) && !extra && actions.is_empty()
            {
                return Decision::go(
                    PgState::Ready {
                        cluster: Topology {
                            image: image.clone(),
                            replicas,
                            primary: 0,
                        },
                    },
                    RESTORE_COMPLETED,
                    format!(
                        "{what}: all {replicas} instances Ready on the restored timeline; {} is primary",
                        o.pod_name(0)
                    ),
                );
            }
            stay(
                CLONING_REPLICAS,
                format!(
                    "{what}: {}/{replicas} instances Ready; the replicas clone the restored {}",
                    ready.len(),
                    o.pod_name(0)
                ),
                actions,
            )
        }
    }
}

/// Step 3: pod 0 alone, given a new Lease, then the restore annotation, then the
/// primary label (the kubelet shows its manager the annotation with the label).
fn restore_primary(
    spec: &PostgresClusterSpec,
    r: &Restore,
    o: &Observed,
    now: DateTime<Utc>,
    what: &str,
) -> D {
    let mut actions = objects(spec, &r.cluster.image, 1, o);
    let name = o.pod_name(0);
    let (Some(pod), Some(id)) = (o.live(0), o.identity(0)) else {
        return stay(
            RESTORING_PRIMARY,
            format!("{what}: waiting for {name} to exist"),
            actions,
        );
    };
    match &o.own.lease {
        None => actions.push(PgAction::CreateLease {
            holder: Some(id),
            at: now,
            seconds: spec.fencing.lease_duration_seconds,
            never_held: false,
        }),
        Some(lease) if lease.holder.as_deref() != Some(id.as_str()) => {
            // Only a Lease this step created, for a pod 0 since replaced: its holder
            // never ran (it had no label yet), but is waited for as any holder is.
            match fence(spec, lease, o, now) {
                Fence::Fenced { .. } => {
                    actions.push(super::fencing::hand(lease, Some(id), now));
                }
                Fence::Alive { until } => {
                    let d = stay(
                        RESTORING_PRIMARY,
                        format!(
                            "{what}: the primary Lease names {}, which may be writable until it expires; {name} is given it then",
                            lease.holder.as_deref().unwrap_or("nobody")
                        ),
                        actions,
                    );
                    return d.requeue_if_any(wait_for(until, now));
                }
            }
        }
        Some(_) => {}
    }
    let wanted = crate::driver::cache::digest(&annotation_value(&r.restore));
    if o.own.restore_annotated.get(&0) != Some(&wanted) {
        actions.push(PgAction::AnnotateRestore {
            ordinal: 0,
            value: annotation_value(&r.restore),
            uid: pod.uid.clone(),
            version: pod.version.clone(),
        });
    } else if pod.role != Some(Role::Primary) {
        actions.push(pod.label(0, Role::Primary));
    }
    if actions.is_empty() && o.serving(0) {
        return Decision::go(
            PgState::RestoringInPlace(Restore {
                restore_step: RestoreStep::CloneReplicas,
                ..r.clone()
            }),
            PRIMARY_RESTORED,
            format!(
                "{what}: {name} recovered to the target, promoted and serves; the replicas clone it next"
            ),
        );
    }
    if let Some(error) = o.own.recovery_failed.get(&0).filter(|_| !o.serving(0)) {
        return stay(
            RESTORE_FAILED,
            format!(
                "{what}: {name} could not restore: {error}; it tries again and serves nothing until a recovery reaches its target; {RESTORE_WAY_OUT}"
            ),
            actions,
        )
        .degraded();
    }
    stay(
        RESTORING_PRIMARY,
        format!(
            "{what}: {name} restores the repository and replays the archive to the target, listening on no address"
        ),
        actions,
    )
}

/// What a `spec.restore` request served at creation (or adoption) looks like to the
/// record: its token, if the spec holds one not yet acknowledged.
pub(crate) fn unserved_token<'a>(
    spec: &'a PostgresClusterSpec,
    served: Option<&str>,
) -> Option<&'a RestoreSpec> {
    spec.restore
        .as_ref()
        .filter(|r| Some(r.token.as_str()) != served)
}
