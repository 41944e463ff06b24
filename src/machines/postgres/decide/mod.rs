//! What the PostgresCluster machine decides, one file per state, and the sub-decisions
//! they share: which pods carry which role label, which owned objects to restore, and
//! which replica may be promoted.
//!
//! - [`creating`], [`ready`], [`scaling`], [`upgrading`], [`switching_over`],
//!   [`primary_lost`], [`backing_up`], [`restoring_in_place`], [`hibernating`]: one per
//!   state ([`stopping`]: the wait for every server to stop, which two of them share); deletion is [`crate::machines::common::finalize::deleting`].
//! - [`ready`] is split into its sub-decisions: a lost primary, scaling, upgrades and
//!   stray images, a switchover on demand ([`requested`]), an in-place restore
//!   ([`restoring_in_place::restore_requested`]), backups, Job pruning and reporting.

pub(super) mod backing_up;
pub(super) mod creating;
pub(super) mod fencing;
pub(super) mod hibernating;
pub(super) mod primary_lost;
pub(super) mod ready;
pub(super) mod requested;
pub(super) mod restoring_in_place;
pub(super) mod scaling;
pub(super) mod stopping;
pub(super) mod survey;
pub(super) mod switching_over;
pub(super) mod upgrading;

use std::time::Duration;

use super::actions::{DeleteCause, PgAction, Role, ServiceKind};
use super::api::PostgresClusterSpec;
use super::observe::{Observed, PodView};
use super::state::{PgState, PodRef, SwitchCause, Switchover, Topology};
use super::table::reason::RESTORING;
use crate::engine::Decision;
use crate::machines::common::actions::cronjob_upkeep;
use switching_over::begin_switchover;

pub(crate) type D = Decision<PgState, PgAction>;

/// How many more promote attempts (each [`switching_over::promote::PROMOTE_WAIT_SECONDS`] long)
/// follow one that ended unreported before the switchover holds Degraded
/// ([`crate::machines::postgres::table::reason::PROMOTION_EXHAUSTED`]) until
/// `lockstep.dev/retry-promote` has a new token: a promotion that does not come is said,
/// not waited for in silence.
pub(crate) const PROMOTE_RETRY_LIMIT: u32 = 5;

/// How often a cluster at rest is looked at again without any event: a missed watch
/// event cannot postpone noticing a primary that stopped being Ready by more than this.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Whether a pod that must not be primary is to be labelled `demoted` rather than
/// `replica`: it is labelled `primary` or `demoted` now, so it may still be a writable
/// primary (a role change takes effect only when the pod restarts, and a restarted pod
/// is a new pod without the label).
fn may_be_writable(pod: &PodView) -> bool {
    matches!(pod.role, Some(Role::Primary | Role::Demoted))
}

/// The role the old primary of switchover `s` is labelled with once it must not serve:
/// `demoted` while it is the pod the switchover began with or may be writable for
/// another reason; a recreated pod (a standby) is a `replica`.
pub(crate) fn old_primary_role(s: &Switchover, pod: &PodView) -> Role {
    if s.old_uid.as_deref() == Some(pod.uid.as_str()) || may_be_writable(pod) {
        Role::Demoted
    } else {
        Role::Replica
    }
}

/// The label moves that make the pods' roles what `primary` says: demotions first, then
/// the promotion, so that no two pods are ever labelled primary. A pod that may still be
/// a writable primary is labelled `demoted` (served by neither Service), never
/// `replica`; when `primary` is known (not mid-switchover) such a pod is deleted, so
/// that it comes back as a new pod, a standby, and is labelled `replica`.
pub(crate) fn label_moves(o: &Observed, primary: Option<i32>) -> Vec<PgAction> {
    moves(o, primary, primary.is_some())
}

/// Mid-switchover, once the target holds the Lease: the target is labelled `primary`
/// (its agent would fence a promoted server labelled anything else), every other pod
/// that may be writable `demoted`, and nobody is restarted.
pub(crate) fn promoting_moves(o: &Observed, target: i32) -> Vec<PgAction> {
    moves(o, Some(target), false)
}

fn moves(o: &Observed, primary: Option<i32>, restart: bool) -> Vec<PgAction> {
    let mut demotions = Vec::new();
    let mut promotion = Vec::new();
    let mut restarts = Vec::new();
    // A terminating pod is neither promoted nor restarted, but loses a `primary` label it
    // should not have: the `-rw` Service may route to a terminating endpoint while no
    // other is Ready (found by the deep model check: a failover's first target, deleted
    // as it promoted, kept the label while the second was labelled primary).
    let keeps = |k: i32, pod: &PodView| {
        pod.terminating && (pod.role != Some(Role::Primary) || Some(k) == primary)
    };
    for (k, pod) in o.pods.iter().filter(|(k, p)| !keeps(**k, p)) {
        let want = if Some(*k) == primary {
            Role::Primary
        } else if may_be_writable(pod) {
            Role::Demoted
        } else {
            Role::Replica
        };
        if want == Role::Demoted && restart && !pod.terminating {
            restarts.push(PgAction::DeletePod {
                ordinal: *k,
                uid: pod.uid.clone(),
                cause: DeleteCause::Fence,
            });
        }
        if pod.role == Some(want) {
            continue;
        }
        let action = pod.label(*k, want);
        match want {
            Role::Primary => promotion.push(action),
            Role::Replica | Role::Demoted => demotions.push(action),
        }
    }
    demotions.extend(promotion);
    demotions.extend(restarts);
    demotions
}

/// Owned objects and labels to restore for a StatefulSet of `image` × `replicas` whose
/// primary is `primary` (none mid-switchover).
pub(crate) fn upkeep(
    spec: &PostgresClusterSpec,
    image: &str,
    replicas: i32,
    primary: Option<i32>,
    o: &Observed,
) -> Vec<PgAction> {
    let mut actions = objects(spec, image, replicas, o);
    actions.extend(label_moves(o, primary));
    actions
}

/// Owned objects to restore (no labels) for a StatefulSet of `image` × `replicas`.
pub(crate) fn objects(
    spec: &PostgresClusterSpec,
    image: &str,
    replicas: i32,
    o: &Observed,
) -> Vec<PgAction> {
    let mut actions = Vec::new();
    let s = o.own.in_sync;
    if !s.scripts {
        actions.push(PgAction::EnsureScripts);
    }
    for (ok, kind) in [
        (s.headless, ServiceKind::Headless),
        (s.read_write, ServiceKind::ReadWrite),
        (s.read_only, ServiceKind::ReadOnly),
    ] {
        if !ok {
            actions.push(PgAction::EnsureService(kind));
        }
    }
    if !s.pdb {
        actions.push(PgAction::EnsurePdb);
    }
    if !s.network_policy {
        if spec.network_policy.enabled {
            actions.push(PgAction::EnsureNetworkPolicy);
        } else if let Some(uid) = &o.own.network_policy_uid {
            actions.push(PgAction::DeleteNetworkPolicy { uid: uid.clone() });
        }
    }
    if !o
        .statefulset
        .as_ref()
        .is_some_and(|sts| sts.holds(image, replicas))
    {
        actions.push(PgAction::EnsureStatefulSet {
            image: image.to_owned(),
            replicas,
        });
    }
    // The settings reach each live instance on its pod (its manager reloads from it).
    actions.extend(o.own.unconfigured.iter().filter_map(|k| {
        let pod = o.live(*k)?;
        Some(PgAction::Configure {
            ordinal: *k,
            uid: pod.uid.clone(),
            version: pod.version.clone(),
        })
    }));
    let scheduled = spec.backup.is_some() && spec.backup_schedule.is_some();
    actions.extend(cronjob_upkeep(scheduled, o.cronjob.as_ref()).map(PgAction::Jobs));
    actions
}

/// [`upkeep`] for a cluster that is not mid-switchover: its primary keeps the label.
pub(crate) fn upkeep_at(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    o: &Observed,
) -> Vec<PgAction> {
    upkeep(
        spec,
        &cluster.image,
        cluster.replicas,
        Some(cluster.primary),
        o,
    )
}

pub(crate) fn stay(reason: &'static str, message: impl Into<String>, upkeep: Vec<PgAction>) -> D {
    Decision::stay(reason, message).with_actions(upkeep)
}

/// A stay that restores objects (`Restoring`) or rests (`reason`).
pub(crate) fn rest(reason: &'static str, message: impl Into<String>, upkeep: Vec<PgAction>) -> D {
    let reason = if upkeep.is_empty() { reason } else { RESTORING };
    stay(reason, message, upkeep)
}

/// The replica to promote: Ready, not the primary, below `below`, at `image` when given;
/// the lowest ordinal.
pub(crate) fn choose_target(
    o: &Observed,
    cluster: &Topology,
    below: i32,
    image: Option<&str>,
) -> Option<PodRef> {
    candidates(o, cluster, below, image).next()
}

/// The replica a planned switchover (an upgrade's or rolling restart's, a scale-down's)
/// moves the primary role to: [`choose_target`]'s, among the replicas whose standby does
/// not report that it stopped streaming ([`crate::pod::streaming`]), as a
/// requested switchover refuses one. A standby behind the primary would keep writes
/// unavailable, once the old primary stopped, until it caught up. `Err` names the
/// candidates held back for that (empty: there is no candidate at all).
pub(crate) fn choose_planned_target(
    o: &Observed,
    cluster: &Topology,
    below: i32,
    image: Option<&str>,
) -> Result<PodRef, Vec<i32>> {
    let (behind, streaming): (Vec<PodRef>, Vec<PodRef>) =
        candidates(o, cluster, below, image).partition(|c| o.own.lagging.contains(&c.ordinal));
    streaming
        .into_iter()
        .next()
        .ok_or_else(|| behind.iter().map(|c| c.ordinal).collect())
}

/// What a planned switchover held back by [`choose_planned_target`] waits for, and the
/// way out; `None` when no candidate was held back.
pub(crate) fn held_back(o: &Observed, behind: &[i32]) -> Option<String> {
    (!behind.is_empty()).then(|| {
        format!(
            "{} report that their standbys do not stream from the primary (behind it: a switchover to one would keep writes unavailable until it caught up); waiting for one to catch up (if it cannot, because the primary no longer keeps the WAL it needs, delete its volume claim and pod to clone it anew)",
            o.pod_names(behind)
        )
    })
}

/// The replicas that may be promoted ([`choose_target`]'s rules), the lowest ordinal
/// first.
fn candidates<'a>(
    o: &'a Observed,
    cluster: &'a Topology,
    below: i32,
    image: Option<&'a str>,
) -> impl Iterator<Item = PodRef> + 'a {
    (0..below.min(cluster.replicas))
        .filter(|k| *k != cluster.primary)
        .filter_map(|k| o.pods.get(&k).map(|p| (k, p)))
        .filter(move |(_, p)| {
            p.serving()
                && p.role != Some(Role::Demoted)
                && image.is_none_or(|i| p.image.as_deref() == Some(i))
        })
        .map(|(k, p)| PodRef {
            ordinal: k,
            uid: p.uid.clone(),
        })
}

/// Begin moving the primary role from `cluster.primary` to `target` (for `cause`, by the
/// edge `reason`); `message` is told the two pods' names (the primary's, the target's).
pub(crate) fn switch_to(
    cluster: &Topology,
    target: PodRef,
    cause: SwitchCause,
    o: &Observed,
    reason: &'static str,
    message: impl FnOnce(String, String) -> String,
) -> D {
    let message = message(o.pod_name(cluster.primary), o.pod_name(target.ordinal));
    begin_switchover(cluster, target, cause, None, o, reason, message)
}
