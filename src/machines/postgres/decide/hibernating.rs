//! Hibernating: `spec.hibernate: true` stops every instance cleanly and keeps their
//! volumes; `false` brings the cluster back with the primary it had. Each step is
//! persisted before it acts (the transition that enters it carries no action):
//!
//! 1. [`HibernateStep::Stopping`]: the StatefulSet is scaled to zero (each pod's
//!    manager stops its server cleanly on the pod's termination, and the primary's
//!    releases the Lease); the step ends once no pod is left and the Lease holder is
//!    certainly fenced ([`stopped`]).
//! 2. [`HibernateStep::Asleep`]: nothing runs; the volume claims, Services, Secrets and
//!    the Lease are kept. The backup CronJob is deleted (a scheduled backup needs a
//!    running primary) and made again as the cluster wakes.
//! 3. [`HibernateStep::Waking`]: the StatefulSet holds `cluster.replicas` again; the
//!    primary before hibernation is given the Lease (once its last holder is certainly
//!    fenced, as at rest: [`keep_lease`]) and the primary label, every other pod the
//!    replica label. Every instance Ready ends it, in `Ready`.
//!
//! Hibernation is taken on only from `Ready` with the primary serving, so the primary
//! it wakes with holds every commit. `spec.hibernate: false` while stopping wakes at
//! once, and `true` while waking stops again.
//!
//! # Errors
//!
//! A primary whose volume comes back empty (its claim was deleted while asleep) does
//! not bootstrap a new database over the cluster's (the Lease's `initialized` mark):
//! `Degraded` with `PrimaryVolumeEmpty`, until its volume is restored or
//! `lockstep.dev/adopt-primary` names a member that holds the data.

use super::fencing::keep_lease;
use super::primary_lost::adoption_requested;
use super::stopping::stopped;
use super::{D, RESYNC, label_moves, objects, stay};
use crate::engine::{Decision, World};
use crate::machines::postgres::actions::PgAction;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{HibernateStep, Hibernation, PgState, Topology};
use crate::machines::postgres::table::reason::*;

/// From `Ready` (its primary serving): `spec.hibernate` asks to stop the cluster.
pub(crate) fn hibernate_requested(spec: &PostgresClusterSpec, cluster: &Topology) -> Option<D> {
    spec.hibernate.then(|| {
        Decision::go(
            step(cluster, HibernateStep::Stopping),
            HIBERNATION_REQUESTED,
            format!(
                "spec.hibernate is true: the {} instances stop and their volumes are kept",
                cluster.replicas
            ),
        )
    })
}

fn step(cluster: &Topology, hibernate_step: HibernateStep) -> PgState {
    PgState::Hibernating(Hibernation {
        cluster: cluster.clone(),
        hibernate_step,
    })
}

/// Decide in Hibernating.
pub(crate) fn hibernating(
    spec: &PostgresClusterSpec,
    h: &Hibernation,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let cluster = &h.cluster;
    match (h.hibernate_step, spec.hibernate) {
        (HibernateStep::Stopping | HibernateStep::Asleep, false) => Decision::go(
            step(cluster, HibernateStep::Waking),
            WAKE_REQUESTED,
            format!(
                "spec.hibernate is false: the {} instances start again, {} as the primary",
                cluster.replicas,
                o.pod_name(cluster.primary)
            ),
        ),
        (HibernateStep::Waking, true) => Decision::go(
            step(cluster, HibernateStep::Stopping),
            HIBERNATION_REQUESTED,
            "spec.hibernate is true again while waking: the instances stop again",
        ),
        (HibernateStep::Stopping, true) => {
            let mut actions = asleep_objects(spec, cluster, o);
            match stopped(spec, o, world.now) {
                Ok(()) => Decision::go(
                    step(cluster, HibernateStep::Asleep),
                    INSTANCES_STOPPED,
                    "every instance stopped and nothing holds the primary Lease: the cluster is asleep, its volumes kept",
                ),
                Err(running) => {
                    actions.extend(running.actions);
                    stay(
                        STOPPING_INSTANCES,
                        format!("hibernating: {}", running.why),
                        actions,
                    )
                    .requeue_if_any(running.wake)
                }
            }
        }
        (HibernateStep::Asleep, true) => stay(
            HIBERNATED,
            format!(
                "hibernated: no instance runs, the volumes of {} are kept; set spec.hibernate to false to wake it with {} as the primary",
                o.pod_names(&(0..cluster.replicas).collect::<Vec<_>>()),
                o.pod_name(cluster.primary)
            ),
            asleep_objects(spec, cluster, o),
        )
        // As at rest: a missed watch event (an object deleted) is noticed within this.
        .requeue(RESYNC),
        (HibernateStep::Waking, false) => waking(spec, cluster, world),
    }
}

/// Deleted while hibernating, with a final backup to take: the backup needs a running
/// primary. With `spec.hibernate: false` the cluster wakes (then, `Ready`, the final
/// backup runs as for any deletion); with `true` it stays `Degraded`, naming both ways
/// out.
pub(crate) fn deleting(spec: &PostgresClusterSpec, h: &Hibernation, world: &World<Observed>) -> D {
    if !spec.hibernate {
        return hibernating(spec, h, world);
    }
    stay(
        FINAL_BACKUP_NEEDS_PRIMARY,
        format!(
            "deleting a hibernated cluster: its final backup needs a running primary; set spec.hibernate to false to wake it (the final backup runs once it is Ready), or annotate {}=true to delete it without one",
            crate::machines::common::annotations::SKIP_FINAL_BACKUP
        ),
        Vec::new(),
    )
    .degraded()
}

/// The owned objects of a cluster that hibernates: a StatefulSet of no pod, and no
/// backup CronJob.
fn asleep_objects(spec: &PostgresClusterSpec, cluster: &Topology, o: &Observed) -> Vec<PgAction> {
    let unscheduled = PostgresClusterSpec {
        backup_schedule: None,
        ..spec.clone()
    };
    objects(&unscheduled, &cluster.image, 0, o)
}

/// Step 3: the instances start again, the primary before hibernation given the Lease
/// and its label.
fn waking(spec: &PostgresClusterSpec, cluster: &Topology, world: &World<Observed>) -> D {
    let o = &world.observed;
    let primary = cluster.primary;
    let name = o.pod_name(primary);
    let mut actions = objects(spec, &cluster.image, cluster.replicas, o);
    let (lease, wake) = keep_lease(spec, primary, o, world.now);
    actions.extend(lease);
    actions.extend(label_moves(o, Some(primary)));
    let ready: Vec<i32> = (0..cluster.replicas).filter(|k| o.serving(*k)).collect();
    if actions.is_empty() && ready.len() == usize::try_from(cluster.replicas).unwrap_or(0) {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            CLUSTER_WOKEN,
            format!("every instance is Ready again, {name} the primary it was before hibernation"),
        );
    }
    if o.own.empty.contains(&primary) && !o.serving(primary) {
        let stuck = format!(
            "waking: primary {name} reports that its volume holds no database (its claim was deleted while the cluster hibernated); it does not create a new one over the cluster's"
        );
        if let Some(adopt) = adoption_requested(o, Some(primary), &stuck) {
            return adopt;
        }
        return stay(
            PRIMARY_VOLUME_EMPTY,
            format!(
                "{stuck}; restore its volume, or set {}=<pod> naming a member that holds the data to make it the primary",
                crate::machines::postgres::observe::ADOPT_PRIMARY
            ),
            actions,
        )
        .degraded()
        .requeue_if_any(wake);
    }
    stay(
        WAKING,
        format!(
            "waking: {}/{} instances Ready; {name} starts as the primary it was",
            ready.len(),
            cluster.replicas
        ),
        actions,
    )
    .requeue_if_any(wake)
}
