//! Ready: at rest. [`ready`] runs its sub-decisions in order, the first that moves wins:
//! [`rescale`] (one replica at a time), [`upgrade`], [`stray_image`], [`backup`]; then,
//! staying, it grows volumes ([`grow_volumes`]), releases the outcome finalizer of every
//! finished Job ([`actions::release_finished`]: their outcomes are recorded), prunes hook
//! Jobs ([`prune_hook_jobs`])
//! and on-demand backup Jobs beyond their history limit ([`prune_backup_jobs`]) and
//! reports ([`report`]).

use std::ops::ControlFlow;

use super::scaling::{Step, begin_step, describe_step, next_step};
use super::{D, Next, next_pod, shape_at, stay, upkeep};
use crate::engine::{Decision, World};
use crate::machines::common::actions::{self, JobActions};
use crate::machines::common::annotations;
use crate::machines::common::jobs::{self, Purpose};
use crate::machines::common::on_demand;
use crate::machines::distributeddb::actions::{DdbAction, Shape};
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::{DdbState, Upgrade};
use crate::machines::distributeddb::table::reason::*;

/// Decide in Ready: every pod at `version`, `replicas` of them.
/// `served` is the `backup-now` request last served (the record's acks); `lost` the
/// message of a backup it asked for whose outcome is unknown ([`on_demand::lost`]).
pub(crate) fn ready(
    spec: &DistributedDBSpec,
    version: &str,
    replicas: i32,
    served: on_demand::Served<'_>,
    lost: Option<String>,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let shape = shape_at(spec, version, replicas, o);
    let mut actions = upkeep(spec, &shape, o);
    if spec.replicas != replicas {
        return rescale(spec, version, &shape, world, actions);
    }
    if spec.image != version {
        return upgrade(spec, version, replicas, o, actions);
    }
    if actions.is_empty()
        && let Some(go) = stray_image(version, replicas, o)
    {
        return go;
    }
    let ignored = match backup(spec, version, replicas, served, o) {
        ControlFlow::Break(go) => return go,
        ControlFlow::Continue(ignored) => ignored
            .map(|m| (BACKUP_NOT_CONFIGURED, m))
            .or(lost.map(|m| (BACKUP_OUTCOME_UNKNOWN, m))),
    };
    actions.extend(grow_volumes(spec, replicas, o));
    // The member and client certificates, renewed at rest only.
    actions.extend(
        o.own
            .certificates
            .as_ref()
            .and_then(|c| c.renewal(world.now))
            .map(DdbAction::RenewCertificates),
    );
    actions.extend(actions::release_finished::<DdbAction>(&o.jobs));
    actions.extend(prune_hook_jobs(o));
    actions.extend(prune_backup_jobs(o));
    report(version, replicas, o, ignored, actions)
}

/// `spec.replicas` changed: scale, one replica at a time, once a member can be added or
/// removed ([`next_step`]).
fn rescale(
    spec: &DistributedDBSpec,
    version: &str,
    shape: &Shape,
    world: &World<Observed>,
    actions: Vec<DdbAction>,
) -> D {
    let o = &world.observed;
    let replicas = shape.replicas;
    match next_step(shape, spec.replicas, o, !actions.is_empty()) {
        Step::Next { replicas: next, .. } => begin_step(
            spec,
            (version, replicas, replicas, next),
            REPLICAS_CHANGED,
            format!(
                "scaling from {replicas} to {} replicas, one at a time: {}",
                spec.replicas,
                describe_step(o, replicas, next, spec.replicas)
            ),
            world,
        ),
        Step::Wait(why) => {
            let pending = stay(
                WAITING_FOR_PODS,
                format!("scaling to {} replicas pending: {why}", spec.replicas),
                actions,
            );
            let down =
                (0..replicas).any(|k| !o.pods.get(&k).is_some_and(|p| p.ready && !p.terminating));
            if down { pending.degraded() } else { pending }
        }
    }
}

/// `spec.image` is not the version: upgrade, starting with the next pod; adopt it if every
/// pod already runs it; or wait until a pod can be taken down.
fn upgrade(
    spec: &DistributedDBSpec,
    version: &str,
    replicas: i32,
    o: &Observed,
    actions: Vec<DdbAction>,
) -> D {
    match next_pod(o, replicas, &spec.image) {
        Next::Pod { ordinal, uid } => Decision::go(
            DdbState::Upgrading(Upgrade::begin(
                version.to_owned(),
                spec.image.clone(),
                replicas,
                ordinal,
                uid,
                o,
            )),
            IMAGE_CHANGED,
            format!(
                "upgrading from {version} to {}, starting with {}",
                spec.image,
                o.pod_name(ordinal)
            ),
        ),
        Next::Done => adopt(spec, replicas),
        Next::Wait(why) => stay(
            UPGRADE_PENDING,
            format!("upgrade to {} pending: {why}", spec.image),
            actions,
        ),
    }
}

/// Every pod already runs `spec.image` (in Ready, or mid-upgrade): it is the version.
pub(crate) fn adopt(spec: &DistributedDBSpec, replicas: i32) -> D {
    Decision::go(
        DdbState::Ready {
            version: spec.image.clone(),
            replicas,
        },
        VERSION_ADOPTED,
        format!("every pod already runs {}", spec.image),
    )
}

/// A pod at an image other than the version (made from a template someone edited, say)
/// is replaced the way an upgrade replaces pods: one at a time, with its hooks, once the
/// template holds the version again (the caller checks that nothing is to restore).
fn stray_image(version: &str, replicas: i32, o: &Observed) -> Option<D> {
    let stray = (0..replicas).find(|k| {
        o.pods
            .get(k)
            .is_some_and(|p| !p.terminating && p.image.as_deref() != Some(version))
    })?;
    let Next::Pod { ordinal, uid } = next_pod(o, replicas, version) else {
        return None;
    };
    let image = o
        .pods
        .get(&stray)
        .and_then(|p| p.image.clone())
        .unwrap_or_default();
    Some(Decision::go(
        DdbState::Upgrading(Upgrade::begin(
            version.to_owned(),
            version.to_owned(),
            replicas,
            ordinal,
            uid,
            o,
        )),
        STRAY_IMAGE,
        format!(
            "{} runs {image}, not {version}; replacing it",
            o.pod_name(stray)
        ),
    ))
}

/// A `backup-now` token not yet served starts a backup (`Break`); one that cannot be
/// served is reported (`Continue` with the message), once every pod is Ready.
fn backup(
    spec: &DistributedDBSpec,
    version: &str,
    replicas: i32,
    served: on_demand::Served<'_>,
    o: &Observed,
) -> ControlFlow<D, Option<String>> {
    match on_demand::requested(o, served, spec.backup_policy.is_some()).start(|request, job| {
        DdbState::BackingUp {
            version: version.to_owned(),
            replicas,
            request,
            job: Some(job),
        }
    }) {
        Ok(go) => ControlFlow::Break(go),
        // Reported Degraded (once every pod is Ready), until the annotation goes.
        Err(on_demand::Request::NotConfigured { token }) => ControlFlow::Continue(Some(format!(
            "{}={token} is ignored: spec.backupPolicy is not set",
            annotations::BACKUP_NOW
        ))),
        Err(_) => ControlFlow::Continue(None),
    }
}

/// At rest, volume claims smaller than `spec.storage.size` grow.
fn grow_volumes(
    spec: &DistributedDBSpec,
    replicas: i32,
    o: &Observed,
) -> impl Iterator<Item = DdbAction> {
    let size = &spec.storage.size;
    o.own
        .volumes
        .smaller_than(size, replicas)
        .map(|ordinal| DdbAction::ExpandVolume {
            ordinal,
            size: size.clone(),
        })
}

/// At rest, the finished hook Jobs of past upgrades go.
fn prune_hook_jobs(o: &Observed) -> impl Iterator<Item = DdbAction> {
    jobs::finished(&o.jobs, Purpose::Hook).map(DdbAction::delete_job)
}

/// At rest, finished on-demand backup Jobs beyond the history limit go (their tokens are
/// served: the record's ack remembers).
fn prune_backup_jobs(o: &Observed) -> impl Iterator<Item = DdbAction> {
    on_demand::prune(&o.jobs)
        .into_iter()
        .map(DdbAction::delete_job)
}

/// The stay at rest: Degraded while a replica is down (Ready turns False and Degraded
/// names the pods, one status write each way), a request is ignored or the backup it
/// asked for was lost; otherwise serving
/// (or restoring what drifted).
fn report(
    version: &str,
    replicas: i32,
    o: &Observed,
    ignored: Option<(&'static str, String)>,
    actions: Vec<DdbAction>,
) -> D {
    let not_ready: Vec<i32> = (0..replicas)
        .filter(|k| !o.pods.get(k).is_some_and(|p| p.ready && !p.terminating))
        .collect();
    if !not_ready.is_empty() {
        return stay(
            PODS_NOT_READY,
            format!("pod {} not Ready", o.pod_names(&not_ready)),
            actions,
        )
        .degraded();
    }
    if let Some((reason, message)) = ignored {
        // The user asked for something that cannot happen, or that may not have
        // happened: say so where they look.
        return stay(reason, message, actions).degraded();
    }
    let reason = if actions.is_empty() {
        SERVING
    } else {
        RESTORING
    };
    stay(
        reason,
        format!("all {replicas} pods Ready at {version}"),
        actions,
    )
}
