//! What the DistributedDB machine decides, one file per state, and the sub-decisions
//! they share: which pod an upgrade replaces next, when a pod may be taken down, and
//! which owned objects to restore.
//!
//! - [`creating`], [`ready`], [`scaling`], [`upgrading`] (with [`hooks`]),
//!   [`backing_up`]: one per state;
//!   deletion is [`crate::machines::common::finalize::deleting`].
//! - [`ready`] is split into its sub-decisions: scaling, upgrades, stray images, backups,
//!   volume growth, Job pruning and reporting.

pub(super) mod backing_up;
pub(super) mod creating;
pub(super) mod hooks;
pub(super) mod ready;
pub(super) mod scaling;
pub(super) mod upgrading;

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::actions::{DdbAction, HookPhase, Shape, hook_key};
use super::api::DistributedDBSpec;
use super::observe::Observed;
use super::state::{DdbState, Upgrade, UpgradeStep};
use super::tls;
use crate::engine::Decision;
use crate::machines::common::actions::cronjob_upkeep;
use crate::machines::common::jobs::JobOutcome;
use crate::machines::common::replace;
use crate::machines::common::retry::RetryBudget;

pub(crate) type D = Decision<DdbState, DdbAction>;

/// The readiness window: how long a pod being replaced may take to come back Ready
/// before the upgrade reports it `Degraded` (naming the pod and what it waits for; the
/// upgrade itself keeps waiting), and before a replacement that is still starting at the
/// previous target counts as failed to start, so that a new `spec.image` (a rollback of
/// an image that does not start) may replace it. Measured from the replacement's
/// creation, or, for the other waits of a `Restart` step, from when the step began.
pub const READINESS_WINDOW: Duration = Duration::from_secs(5 * 60);

/// How long since `since` (zero if it is in the future).
pub(crate) fn elapsed(now: DateTime<Utc>, since: DateTime<Utc>) -> Duration {
    (now - since).to_std().unwrap_or_default()
}

impl Upgrade {
    /// A new upgrade from `from` to `to`, starting at pod `ordinal`'s pre-hook. The
    /// escape-hatch tokens already set are acknowledged, so only new ones act.
    pub(super) fn begin(
        from: String,
        to: String,
        replicas: i32,
        ordinal: i32,
        pod_uid: String,
        o: &Observed,
    ) -> Self {
        let attempt = first_attempt(o, ordinal, &to, &pod_uid);
        let requests = &o.own.requests;
        Upgrade {
            from,
            to,
            replicas,
            ordinal,
            step: UpgradeStep::PreHook,
            pod_uid,
            attempt,
            budget: RetryBudget {
                round_start: attempt,
                ..RetryBudget::begin(requests.retry_hook.clone())
            },
            skip_ack: requests.skip_hook.clone(),
            drained: false,
        }
    }

    /// This upgrade moved on to pod `ordinal`: its pre-hook, with a fresh hook budget.
    pub(super) fn at(&self, ordinal: i32, pod_uid: String, o: &Observed) -> Self {
        let attempt = first_attempt(o, ordinal, &self.to, &pod_uid);
        Upgrade {
            ordinal,
            step: UpgradeStep::PreHook,
            pod_uid,
            attempt,
            budget: RetryBudget {
                round_start: attempt,
                ..self.budget.restart()
            },
            drained: false,
            ..self.clone()
        }
    }
}

/// The first attempt of the pre-hook of pod `ordinal` (`pod_uid`) on its way to `to`:
/// 1, or past every attempt whose Job already finished. An earlier upgrade to the same
/// image, undone before it replaced the pod, leaves those Jobs behind (their names are
/// functions of the image, the pod and the attempt), and their outcomes are not this
/// upgrade's (found by the model check: a pre-hook that had failed before was taken as
/// this upgrade's, its retries spent before it ran). A Job still running is adopted.
fn first_attempt(o: &Observed, ordinal: i32, to: &str, pod_uid: &str) -> u32 {
    (1..)
        .find(|attempt| {
            o.job(&hook_key(HookPhase::Pre, ordinal, to, pod_uid, *attempt))
                .is_none_or(|j| j.outcome == JobOutcome::Running)
        })
        .unwrap_or(1)
}

/// The next pod an upgrade to `to` replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// This pod.
    Pod { ordinal: i32, uid: String },
    /// Every pod is Ready at `to`.
    Done,
    /// Not now: why.
    Wait(String),
}

pub(crate) fn next_pod(o: &Observed, replicas: i32, to: &str) -> Next {
    let (mut missing, mut down, mut needing) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..replicas {
        match o.pods.get(&k) {
            Some(p) if !p.terminating => {
                if !p.ready {
                    down.push(k);
                }
                if p.image.as_deref() != Some(to) {
                    needing.push(k);
                }
            }
            _ => missing.push(k),
        }
    }
    if !missing.is_empty() {
        return Next::Wait(format!(
            "waiting for pod {} to be (re)created",
            o.pod_names(&missing)
        ));
    }
    let pick = match (down.as_slice(), needing.iter().max()) {
        (_, None) if down.is_empty() => return Next::Done,
        ([], Some(highest)) => *highest,
        // A pod that is already down and needs replacing goes first: replacing it takes
        // nothing else down.
        ([k], _) if needing.contains(k) => *k,
        _ => {
            return Next::Wait(format!(
                "waiting for pod {} to become Ready",
                o.pod_names(&down)
            ));
        }
    };
    match o.pods.get(&pick) {
        Some(p) => Next::Pod {
            ordinal: pick,
            uid: p.uid.clone(),
        },
        None => Next::Wait(format!("waiting for pod {}", o.pod_name(pick))),
    }
}

/// Why pod `k` may not be taken down now, if it may not
/// ([`replace::hold_before_delete`]).
pub(crate) fn hold_before_delete(o: &Observed, k: i32, replicas: i32, to: &str) -> Option<String> {
    let serving = |j| o.pods.get(&j).is_some_and(|p| p.ready && !p.terminating);
    replace::hold_before_delete(&o.name, k, replicas, serving, o.statefulset.as_ref(), to)
}

/// Owned objects to restore in a state whose StatefulSet has `shape`.
pub(crate) fn upkeep(spec: &DistributedDBSpec, shape: &Shape, o: &Observed) -> Vec<DdbAction> {
    upkeep_at(spec, shape, cut_back_step(shape, o), o)
}

/// [`upkeep`] mid-scaling: a StatefulSet one replica above `shape` holds the member the
/// machine's own step removes, which may have left the database already (its
/// pre-scale-down hook): the step is written as it is, never held back as a replica
/// added by hand is ([`cut_back_step`]), so that a stale read of the StatefulSet cannot
/// grow it back (found by the deep model check: a crash after the step's write, then a
/// read two events old, grew it back over a member already removed).
pub(crate) fn scaling_upkeep(
    spec: &DistributedDBSpec,
    shape: &Shape,
    o: &Observed,
) -> Vec<DdbAction> {
    let own_step = o
        .statefulset
        .as_ref()
        .is_some_and(|s| s.replicas == shape.replicas + 1);
    let replicas = if own_step {
        shape.replicas
    } else {
        cut_back_step(shape, o)
    };
    upkeep_at(spec, shape, replicas, o)
}

/// The owned objects to restore, with the StatefulSet at `shape` but `replicas`.
fn upkeep_at(
    spec: &DistributedDBSpec,
    shape: &Shape,
    replicas: i32,
    o: &Observed,
) -> Vec<DdbAction> {
    let mut actions = Vec::new();
    // The certificates before the StatefulSet: its pods wait for them.
    if tls::issues(spec) && o.own.certificates.is_none() {
        actions.push(DdbAction::CreateCertificates);
    }
    if !o.own.service_in_sync {
        actions.push(DdbAction::EnsureService);
    }
    if !o.own.pdb_in_sync {
        actions.push(DdbAction::EnsurePdb);
    }
    let step = Shape {
        replicas,
        ..shape.clone()
    };
    if !o
        .statefulset
        .as_ref()
        .is_some_and(|s| s.holds(&step.image, step.replicas))
    {
        actions.push(DdbAction::EnsureStatefulSet(step));
    }
    actions.extend(
        cronjob_upkeep(spec.backup_policy.is_some(), o.cronjob.as_ref()).map(DdbAction::Jobs),
    );
    actions
}

/// The replicas to apply to a StatefulSet that should hold `shape`. One scaled up by hand
/// (drift) is cut back one replica at a time, like scaling: a pod is removed only once the
/// previous one is gone, the controller has seen the last step and every remaining pod is
/// Ready. Cutting several at once (`podManagementPolicy: Parallel`) could take a quorum
/// away. A StatefulSet scaled down by hand is restored at once: its pods come back on
/// their own claims.
pub(crate) fn cut_back_step(shape: &Shape, o: &Observed) -> i32 {
    let Some(live) = o.statefulset.as_ref() else {
        return shape.replicas;
    };
    if live.replicas <= shape.replicas {
        return shape.replicas;
    }
    let next = live.replicas - 1;
    let removing = o.pods.keys().any(|k| *k >= live.replicas);
    let others_down = (0..next).any(|k| !o.pods.get(&k).is_some_and(|p| p.ready && !p.terminating));
    if !live.caught_up || removing || others_down {
        live.replicas
    } else {
        next
    }
}

/// A stay that restores owned objects, named `reason` unless it only restores.
pub(crate) fn stay(reason: &'static str, message: impl Into<String>, upkeep: Vec<DdbAction>) -> D {
    Decision::stay(reason, message).with_actions(upkeep)
}

/// What the StatefulSet should hold: `image` and `replicas`, with the live claim size
/// (claims grow by [`DdbAction::ExpandVolume`], not through the template) or, before
/// there is a StatefulSet, the spec's.
pub(crate) fn shape_at(
    spec: &DistributedDBSpec,
    image: &str,
    replicas: i32,
    o: &Observed,
) -> Shape {
    Shape {
        image: image.to_owned(),
        replicas,
        claim_size: o
            .own
            .volumes
            .template_size_or(&spec.storage.size)
            .to_owned(),
    }
}
