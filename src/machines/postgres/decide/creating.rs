//! Creating: credentials first, then the primary Lease naming the primary's pod, then
//! every instance Ready with its role. A new cluster's primary is pod 0; a cluster whose
//! status was lost is adopted as it runs (see [`choose_primary`]).
//!
//! **A missing Lease** ([`missing_lease`]). Creating tells a brand-new cluster from one
//! that existed before by what exists when it finds no Lease: nothing of the cluster (no
//! volume claim, StatefulSet or pod) means brand new, and the Lease is created then,
//! before anything else, marked `lockstep.dev/never-held`; that mark is the recorded
//! intent, and every hand-over removes it. Anything else means the cluster existed (an
//! operator that lost its status, or a cluster recreated over old volumes), and a server
//! may still run that held a Lease since deleted: the Lease is created naming nobody,
//! carrying the longest `L` any former holder may use, and pod 0 (or whoever is chosen)
//! is named only once it expired.
//!
//! # Guarantees
//! - A brand-new cluster does not wait: its Lease is handed to pod 0 as soon as pod 0
//!   exists.
//! - A cluster that existed before is never given a primary while a former holder may
//!   still be writable: the Lease it finds missing is waited out for `L + S`, `L` the
//!   longest the status remembers or, the status lost, the CRD's maximum (120 s).
//!
//! # Assumptions
//! - Volume claims are not deleted by hand while a server of the cluster may run: a
//!   cluster whose claims, StatefulSet and pods are all gone has no server left.
//! - The observation a reconcile decides on is not older than the objects it acts on
//!   (the driver's caches are synced before it reconciles).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::fencing::{
    Fence, fence, hand, hand_first, recreate_lease, recreated_lease_seconds, stamp, wait_for,
};
use super::restoring_in_place::{RESTORE_ACK, unserved_token};
use super::upgrading::waits_for_restart;
use super::{D, label_moves, objects, promoting_moves, stay};
use crate::engine::{Decision, World};
use crate::machines::postgres::actions::{PgAction, Role, spec_image};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::{ADOPT_PRIMARY, Observed};
use crate::machines::postgres::state::{PgState, Topology};
use crate::machines::postgres::table::reason::*;

pub(crate) fn creating(
    spec: &PostgresClusterSpec,
    credentials_created: bool,
    served_restore: Option<&str>,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let served = world.acked(RESTORE_ACK).or(served_restore);
    if let Some(request) = unserved_token(spec, served) {
        return Decision::go(
            PgState::Creating {
                credentials_created,
                served_restore: Some(request.token.clone()),
            },
            RESTORE_TOKEN_SERVED,
            format!(
                "spec.restore.token {:?} was set when the cluster was created (or its status was lost): taken as served, nothing is restored; a new token rewinds the cluster once it is Ready",
                request.token
            ),
        );
    }
    if !credentials_created {
        let passwords = if spec.credentials_secret.is_none() {
            ", and (no spec.credentialsSecret) the superuser and replication passwords"
        } else {
            ""
        };
        return Decision::go(
            PgState::Creating {
                credentials_created: true,
                served_restore: served_restore.map(str::to_owned),
            },
            CREDENTIALS_GENERATED,
            format!(
                "issued the cluster's CA, server and replication certificates, the application role's password{passwords}"
            ),
        )
        .with_actions([PgAction::CreateCredentials]);
    }
    let image = spec_image(spec);
    let replicas = spec.replicas;
    let mut actions = objects(spec, &image, replicas, o);
    let primary = match choose_primary(spec, world) {
        Ok(k) => k,
        Err(wait) => {
            // The Lease's moves first: a brand-new cluster's Lease is created before
            // the StatefulSet, so that an action failing between them never leaves
            // pods without it (which would read as a cluster that existed before).
            let actions = wait.actions.into_iter().chain(actions).collect();
            let d = stay(wait.reason, wait.message, actions);
            let d = if wait.degraded { d.degraded() } else { d };
            return d.requeue_if_any(wait.wake);
        }
    };
    actions.extend(label_moves(o, Some(primary)));
    let ready: Vec<i32> = (0..replicas).filter(|k| o.serving(*k)).collect();
    let extra = o.pods.keys().any(|k| *k >= replicas);
    if ready.len() == usize::try_from(replicas).unwrap_or(0) && !extra && actions.is_empty() {
        let cluster = Topology {
            image: image.clone(),
            replicas,
            primary,
        };
        let stale: Vec<i32> = (0..replicas)
            .filter(|k| o.pods.get(k).and_then(|p| p.image.as_deref()) != Some(&image))
            .collect();
        if !stale.is_empty() {
            return Decision::go(
                PgState::Upgrading { cluster, pod: None },
                MIXED_IMAGES,
                format!(
                    "all {replicas} instances Ready, but {} run an earlier image; upgrading to {image}",
                    o.pod_names(&stale)
                ),
            );
        }
        let waiting: Vec<i32> = (0..replicas).filter(|k| waits_for_restart(o, *k)).collect();
        if !waiting.is_empty() {
            // An adopted cluster whose servers wait for a start to apply a parameter:
            // restarted as Ready would restart them, so that Ready means applied.
            return Decision::go(
                PgState::Upgrading { cluster, pod: None },
                SETTINGS_NEED_RESTART,
                format!(
                    "all {replicas} instances Ready, but {} wait for a restart to apply a parameter; restarting them",
                    o.pod_names(&waiting)
                ),
            );
        }
        // A primary that moved (another ordinal, or a Lease handed over before) was
        // adopted from a running cluster; one that never moved reads as created.
        let moved = primary != 0 || o.own.lease.as_ref().is_some_and(|l| l.transitions > 0);
        let (reason, message) = if moved {
            (
                ADOPTED,
                format!(
                    "all {replicas} instances Ready at {image}; adopted {} as primary (it holds the primary Lease)",
                    o.pod_name(primary)
                ),
            )
        } else {
            (
                CLUSTER_CREATED,
                format!(
                    "all {replicas} instances Ready at {image}; {} is primary",
                    o.pod_name(primary)
                ),
            )
        };
        return Decision::go(PgState::Ready { cluster }, reason, message);
    }
    // A Ready primary's last exit is history (a retry that succeeded).
    if let Some(error) = o
        .own
        .recovery_failed
        .get(&primary)
        .filter(|_| !o.serving(primary))
    {
        return stay(
            RECOVERY_FAILED,
            format!(
                "{} could not bootstrap from backups (spec.bootstrap.recovery): {error}; it tries again, and serves nothing until a recovery reaches its target; spec.bootstrap is immutable: to restore to another target, delete this cluster and create it anew",
                o.pod_name(primary)
            ),
            actions,
        )
        .degraded();
    }
    stay(
        WAITING_FOR_PODS,
        format!(
            "{}/{replicas} instances Ready at {image}; {} is primary",
            ready.len(),
            o.pod_name(primary)
        ),
        actions,
    )
}

/// Why Creating cannot label a primary yet, and what it does meanwhile.
pub(crate) struct Wait {
    reason: &'static str,
    message: String,
    actions: Vec<PgAction>,
    wake: Option<Duration>,
    degraded: bool,
}

fn wait(reason: &'static str, message: String, actions: Vec<PgAction>) -> Wait {
    Wait {
        reason,
        message,
        actions,
        wake: None,
        degraded: false,
    }
}

/// The ordinal a `<name>-<ordinal>` or `<name>-<ordinal>/<uid>` names.
pub(crate) fn ordinal_named(o: &Observed, name: &str) -> Option<i32> {
    let pod = name.split('/').next()?;
    pod.strip_prefix(&format!("{}-", o.name))?.parse().ok()
}

/// The primary, once the Lease names its pod:
/// - the pod the Lease names, if it is observed (a new cluster's pod 0 once the Lease
///   was created naming it, or the running primary of a cluster whose status was lost);
/// - otherwise the one who should get it, once whoever held it is certainly fenced:
///   the pod named by `lockstep.dev/adopt-primary`; the ordinal the Lease (or its last
///   releaser) named, whose pod was recreated; pod 0 if no pod carries a role label
///   (a new cluster); the one pod labelled primary; with none labelled primary, the one
///   pod not labelled `replica`, while every ordinal has a live pod on a volume that
///   holds data. Anything else is ambiguous: a Degraded wait for the annotation.
///
/// Without a Lease, see [`missing_lease`].
pub(crate) fn choose_primary(
    spec: &PostgresClusterSpec,
    world: &World<Observed>,
) -> Result<i32, Wait> {
    let o = &world.observed;
    let now = world.now;
    let hatch = o
        .own
        .requests
        .adopt_primary
        .as_deref()
        .and_then(|n| ordinal_named(o, n));
    let holder = o.own.lease.as_ref().and_then(|l| l.holder.as_deref());
    if let Some(k) = holder.and_then(|h| o.holder_ordinal(h))
        && hatch.is_none_or(|x| x == k)
    {
        return Ok(k);
    }
    if o.own.lease.is_none() {
        return Err(missing_lease(spec, o, now));
    }
    let roles = o.pods.values().any(|p| p.role.is_some());
    let labelled: Vec<i32> = o
        .pods
        .iter()
        .filter(|(_, p)| !p.terminating && p.role == Some(Role::Primary))
        .map(|(k, _)| *k)
        .collect();
    let last = o
        .own
        .lease
        .as_ref()
        .and_then(|l| l.holder.as_deref().or(l.released_by.as_deref()))
        .and_then(|h| ordinal_named(o, h));
    // With nobody labelled primary, the one pod not labelled `replica` (a recreated
    // primary waits unlabelled) is the primary's ordinal, but only while every ordinal
    // has a live pod on a volume that holds data: a primary whose pod is gone, or was
    // recreated on an empty volume, leaves a recreated standby the one unlabelled pod
    // (found by the deep model check: the status, the Lease and the primary's volume
    // lost, a standby recreated behind the other, and the Lease handed to it).
    let members = o.statefulset.as_ref().map_or(spec.replicas, |s| s.replicas);
    let whole = (0..members).all(|k| o.live(k).is_some() && !o.own.empty.contains(&k));
    let unlabelled: Vec<i32> = o
        .pods
        .iter()
        .filter(|(_, p)| p.role != Some(Role::Replica))
        .map(|(k, _)| *k)
        .collect();
    let wanted = hatch.or(last).or((!roles).then_some(0)).or(
        match (labelled.as_slice(), unlabelled.as_slice()) {
            ([k], _) => Some(*k),
            ([], [k]) if whole => Some(*k),
            _ => None,
        },
    );
    let Some(k) = wanted else {
        let mut w = wait(
            ADOPTION_AMBIGUOUS,
            format!(
                "pods carry role labels but the primary Lease names no pod that exists, and {} labelled primary: set {ADOPT_PRIMARY}=<pod> to name the primary",
                if labelled.is_empty() {
                    "none is".to_owned()
                } else {
                    format!("{} are", o.pod_names(&labelled))
                }
            ),
            Vec::new(),
        );
        w.degraded = true;
        return Err(w);
    };
    let name = o.pod_name(k);
    let Some(id) = o.live(k).and_then(|_| o.identity(k)) else {
        return Err(wait(
            WAITING_FOR_PODS,
            format!("waiting for {name}, the primary, to exist"),
            Vec::new(),
        ));
    };
    match &o.own.lease {
        None => Err(missing_lease(spec, o, now)),
        Some(lease) => match fence(spec, lease, o, now) {
            // An agent that starts labelled anything but primary gives back a Lease that
            // names it, so a pod labelled `replica` or `demoted` is labelled primary
            // first, and every other pod replica or demoted (its agent then waits for the
            // Lease): handed the Lease as it was, it would release it before this machine
            // saw it held, at every reconcile.
            Fence::Fenced { why, .. }
                if o.pods
                    .get(&k)
                    .and_then(|p| p.role)
                    .is_some_and(|r| r != Role::Primary) =>
            {
                Err(wait(
                    WAITING_FOR_LEASE,
                    format!(
                        "{why}: {name} is labelled primary first (its agent would give back a Lease handed to it under another role), then handed the primary Lease"
                    ),
                    promoting_moves(o, k),
                ))
            }
            Fence::Fenced { why, .. } => Err(wait(
                WAITING_FOR_LEASE,
                format!(
                    "{why}: the primary Lease is handed to {name} before it is labelled primary"
                ),
                vec![if lease.never_held {
                    hand_first(lease, id, now)
                } else {
                    hand(lease, Some(id), now)
                }],
            )),
            Fence::Alive { until } => {
                let mut w = wait(
                    WAITING_FOR_FENCE,
                    format!(
                        "{} may still be writable (it holds the primary Lease); {name} is labelled primary once it is certainly fenced",
                        holder.unwrap_or("its last holder")
                    ),
                    stamp(lease, now).into_iter().collect(),
                );
                w.wake = wait_for(until, now);
                Err(w)
            }
        },
    }
}

/// Whether nothing of the cluster exists yet: no volume claim, no StatefulSet, no pod.
/// Only then can no server have held a primary Lease of this cluster.
fn brand_new(o: &Observed) -> bool {
    o.own.claims.is_empty() && o.statefulset.is_none() && o.pods.is_empty()
}

/// Creating without a Lease. A brand-new cluster ([`brand_new`]) creates it naming
/// nobody, marked never held (`lockstep.dev/never-held`), and hands it to pod 0 as soon
/// as pod 0 exists, without waiting. Anything else (volume claims Creating did not see
/// created: an operator that lost the status, a cluster recreated over old volumes)
/// may include a server that held a Lease that vanished, perhaps on a pod force-deleted
/// on a partitioned node: the Lease is created naming nobody, carrying the longest `L`
/// any former holder may run with ([`recreated_lease_seconds`]), and handed over only
/// once it expired (`L + S`).
fn missing_lease(spec: &PostgresClusterSpec, o: &Observed, now: DateTime<Utc>) -> Wait {
    if brand_new(o) {
        return wait(
            WAITING_FOR_PODS,
            "a new cluster: the primary Lease is created naming nobody, never held, and handed to pod 0 as soon as it exists".to_owned(),
            vec![PgAction::CreateLease {
                holder: None,
                at: now,
                seconds: spec.fencing.lease_duration_seconds,
                never_held: true,
            }],
        );
    }
    let l = recreated_lease_seconds(spec, o).saturating_add(spec.fencing.clock_skew_seconds);
    let mut w = wait(
        WAITING_FOR_FENCE,
        format!(
            "the primary Lease is missing but the cluster's volume claims or pods exist (its status was lost, or it was recreated over old volumes): it is created naming nobody, and handed to the primary once it expired (L + S = {l}s), when any server that held a Lease before has stopped"
        ),
        vec![recreate_lease(spec, o, now)],
    );
    w.wake = wait_for(Some(now + chrono::Duration::seconds(l)), now);
    w
}
