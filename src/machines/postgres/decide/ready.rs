//! Ready: at rest. [`ready`] runs its sub-decisions in order, the first that moves wins:
//! a lost primary ([`lose_primary`]: not Ready, or not renewing the Lease), hibernation
//! ([`hibernate_requested`]), scaling ([`rescale`]),
//! [`upgrade`] (a new image or a stray one), [`restart`] (a parameter waits for a start),
//! [`backup`]; then, staying, it releases the outcome
//! finalizer of every finished Job ([`actions::release_finished`]: their outcomes are recorded),
//! prunes survey Jobs (and the promote Jobs of earlier versions)
//! ([`prune_promote_jobs`]) and on-demand backup Jobs beyond their history limit
//! ([`on_demand::prune`]) and reports ([`report`]): Degraded while a replica is not Ready,
//! while an instance reports a setting of `spec.postgresql` its server refused
//! ([`crate::pod::applied`]), while the primary could not apply an entry
//! of `spec.roles` or `spec.databases` ([`crate::pod::managed`]), or while
//! a backup's outcome is unknown.

use std::ops::ControlFlow;

use super::RESYNC;
use super::hibernating::hibernate_requested;
use super::primary_lost::{lose_primary, primary_down};
use super::requested::requested;
use super::restoring_in_place::{Asked, restore_requested};
use super::scaling::rescale;
use super::upgrading::waits_for_restart;
use super::{D, fencing, rest, stay, upkeep_at};
use crate::engine::Decision;
use crate::machines::common::actions::{self, JobActions};
use crate::machines::common::annotations;
use crate::machines::common::jobs::{self, Purpose};
use crate::machines::common::on_demand;
use crate::machines::postgres::actions::{PgAction, spec_image};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, Topology};
use crate::machines::postgres::table::reason::*;
use crate::pod::applied::Gathered;

/// What a person does about a setting PostgreSQL refused, named in the message.
pub const SETTINGS_WAY_OUT: &str = "each instance keeps running on the last value it accepted; correct the value in spec.postgresql (the instance manager's log gives PostgreSQL's reason), and this clears once the instances accept it";

/// What a person does about an entry of `spec.roles` or `spec.databases` the primary
/// could not apply, named in the message.
pub const OBJECTS_WAY_OUT: &str = "the other entries are applied; correct or remove the entry named (status.roles and status.databases say what each came to), and this clears at the primary's next pass";

/// The request tokens last taken on (the record's acks).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Served<'a> {
    /// `lockstep.dev/backup-now`'s, with its Job's key.
    pub backup: on_demand::Served<'a>,
    /// `lockstep.dev/switchover`'s.
    pub switchover: Option<&'a str>,
    /// `spec.restore.token`'s.
    pub restore: Option<&'a str>,
}

/// Decide in Ready: every instance Ready at `cluster.image`, roles as it says.
/// `served` holds the request tokens last taken on; `lost` the message of a backup it
/// asked for whose outcome is unknown ([`on_demand::lost`]).
pub(crate) fn ready(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    served: Served<'_>,
    lost: Option<String>,
    o: &Observed,
    now: chrono::DateTime<chrono::Utc>,
) -> D {
    let mut actions = upkeep_at(spec, cluster, o);
    // A person's rewind comes first: it replaces every member, so it also ends a lost
    // primary or a change in flight.
    if let ControlFlow::Break(decision) = restore_requested(
        spec,
        cluster,
        Asked::AtRest {
            served: served.restore,
        },
        o,
        now,
        &actions,
    ) {
        return decision;
    }
    if let Some(lost) = primary_down(spec, cluster, o, now) {
        return lose_primary(cluster, o, &lost);
    }
    // Before any change: a cluster about to sleep scales or upgrades once it wakes.
    if let Some(go) = hibernate_requested(spec, cluster) {
        return go;
    }
    if spec.replicas != cluster.replicas {
        return rescale(spec, cluster, None, o, actions);
    }
    if let Some(go) = upgrade(spec, cluster, o) {
        return go;
    }
    if let Some(go) = restart(cluster, o) {
        return go;
    }
    if let ControlFlow::Break(decision) = requested(cluster, served.switchover, o, &actions) {
        return decision;
    }
    if let ControlFlow::Break(decision) = backup(spec, cluster, served.backup, o, &actions) {
        return decision;
    }
    actions.extend(actions::release_finished::<PgAction>(&o.jobs));
    actions.extend(prune_promote_jobs(o));
    // The server's and the replication certificates, renewed at rest only.
    actions.extend(
        o.own
            .certificates
            .as_ref()
            .and_then(|c| c.renewal(now))
            .map(PgAction::RenewCertificates),
    );
    actions.extend(
        on_demand::prune(&o.jobs)
            .into_iter()
            .map(PgAction::delete_job),
    );
    report(spec, cluster, o, lost, actions)
}

/// An instance reports a parameter its server applies only at its next start: restart
/// the instances that wait, as an upgrade to the same image replaces pods (replicas
/// first, then a switchover, then the old primary), with the same safety.
///
/// Not before every instance has judged the spec's settings
/// ([`crate::pod::applied`]): the kubelet refreshes each pod's
/// annotations on its own schedule, and a replica that says late that it waits too
/// would find the role already moved to it, and move it a second time.
fn restart(cluster: &Topology, o: &Observed) -> Option<D> {
    let waiting: Vec<i32> = (0..cluster.replicas)
        .filter(|k| waits_for_restart(o, *k))
        .collect();
    if waiting.is_empty() || !o.own.unjudged.is_empty() {
        return None;
    }
    let pending = Gathered::of(&o.own.settings).pending_text(|k| o.pod_name(k));
    Some(Decision::go(
        PgState::Upgrading {
            cluster: cluster.clone(),
            pod: None,
        },
        SETTINGS_NEED_RESTART,
        format!(
            "restarting {} one at a time, replicas first, to apply what waits for a start: {pending}",
            o.pod_names(&waiting)
        ),
    ))
}

/// The spec's image changed, or an instance runs another image: upgrade.
fn upgrade(spec: &PostgresClusterSpec, cluster: &Topology, o: &Observed) -> Option<D> {
    let image = spec_image(spec);
    let elsewhere: Vec<i32> = (0..cluster.replicas)
        .filter(|k| {
            o.live(*k)
                .is_some_and(|p| p.image.as_deref() != Some(&cluster.image))
        })
        .collect();
    if image == cluster.image && elsewhere.is_empty() {
        return None;
    }
    let message = if image == cluster.image {
        format!(
            "{} run an image other than {image}; replacing them",
            o.pod_names(&elsewhere)
        )
    } else {
        format!("upgrading from {} to {image}", cluster.image)
    };
    Some(Decision::go(
        PgState::Upgrading {
            cluster: Topology {
                image,
                ..cluster.clone()
            },
            pod: None,
        },
        IMAGE_CHANGED,
        message,
    ))
}

/// A `backup-now` token not yet served starts a backup; one that cannot be served is a
/// Degraded stay until the annotation goes.
fn backup(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    served: on_demand::Served<'_>,
    o: &Observed,
    actions: &[PgAction],
) -> ControlFlow<D> {
    match on_demand::requested(o, served, spec.backup.is_some()).start(|request, job| PgState::BackingUp {
        cluster: cluster.clone(),
        request,
        job: Some(job),
    }) {
        Ok(go) => ControlFlow::Break(go),
        Err(on_demand::Request::NotConfigured { .. }) => ControlFlow::Break(
            stay(
                BACKUP_NOT_CONFIGURED,
                format!(
                    "{} is set but spec.backup is not: configure a backup destination or remove the annotation",
                    annotations::BACKUP_NOW
                ),
                actions.to_vec(),
            )
            .degraded(),
        ),
        Err(_) => ControlFlow::Continue(()),
    }
}

/// At rest, the finished Jobs of past failovers go: survey Jobs, and the promote Jobs
/// of versions before the managers reported their promotions.
fn prune_promote_jobs(o: &Observed) -> impl Iterator<Item = PgAction> {
    jobs::finished(&o.jobs, Purpose::Promote).map(PgAction::delete_job)
}

/// A primary holding the Lease whose node clock is off from the operator's beyond `S`
/// ([`fencing::holder_skew`]): safety never rests on its clock (every expiry counts from
/// when the operator saw a renewal), but its standbys judge its tenure by its
/// `renewTime` on their own clocks, and stop streaming from it when it seems to have
/// run out. The message names no number of seconds, so a steady skew writes the status
/// once.
fn skewed_holder(spec: &PostgresClusterSpec, cluster: &Topology, o: &Observed) -> Option<String> {
    let lease = o.own.lease.as_ref()?;
    let primary = o.identity(cluster.primary)?;
    if lease.holder.as_deref() != Some(primary.as_str()) {
        return None;
    }
    let (_, way) = fencing::holder_skew(spec, lease)?;
    let s = spec.fencing.clock_skew_seconds;
    Some(format!(
        "primary {} serves, but its Lease renewals are dated more than {s}s (spec.fencing.clockSkewSeconds) {way} when this operator sees them: its node's clock is off (check NTP). Nothing is at risk of two writers, since every expiry counts from when the operator saw a renewal; but its standbys judge its tenure by their own clocks, and one that finds it run out stops streaming from it (under synchronous replication, commits then wait)",
        o.pod_name(cluster.primary)
    ))
}

/// The stay at rest: Degraded while a replica is down or the backup the current token
/// asked for was `lost`, otherwise serving (or restoring what drifted); either way
/// looked at again every [`RESYNC`].
fn report(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    o: &Observed,
    lost: Option<String>,
    actions: Vec<PgAction>,
) -> D {
    let down: Vec<i32> = (0..cluster.replicas).filter(|k| !o.serving(*k)).collect();
    if !down.is_empty() {
        return stay(
            REPLICAS_NOT_READY,
            format!(
                "primary {} serves; replica {} not Ready",
                o.pod_name(cluster.primary),
                o.pod_names(&down)
            ),
            actions,
        )
        .degraded()
        .requeue(RESYNC);
    }
    let settings = Gathered::of(&o.own.settings);
    if !settings.refused.is_empty() {
        return stay(
            SETTINGS_REFUSED,
            format!(
                "PostgreSQL refused {}: {SETTINGS_WAY_OUT}",
                settings.refused_text(|k| o.pod_name(k))
            ),
            actions,
        )
        .degraded()
        .requeue(RESYNC);
    }
    if let Some(refused) = o.own.objects.as_ref().map(|r| r.refused())
        && !refused.is_empty()
    {
        return stay(
            OBJECTS_REFUSED,
            format!(
                "primary {} could not apply {}: {OBJECTS_WAY_OUT}",
                o.pod_name(cluster.primary),
                refused.join("; ")
            ),
            actions,
        )
        .degraded()
        .requeue(RESYNC);
    }
    if let Some((false, said)) = o.own.archiving.get(&cluster.primary) {
        return stay(
            ARCHIVE_FAILING,
            format!(
                "primary {} reports WAL archiving failing (spec.backup.walArchive): {said}",
                o.pod_name(cluster.primary)
            ),
            actions,
        )
        .degraded()
        .requeue(RESYNC);
    }
    if let Some(message) = skewed_holder(spec, cluster, o) {
        return stay(HOLDER_CLOCK_SKEWED, message, actions)
            .degraded()
            .requeue(RESYNC);
    }
    if let Some(message) = lost {
        return stay(BACKUP_OUTCOME_UNKNOWN, message, actions)
            .degraded()
            .requeue(RESYNC);
    }
    rest(
        SERVING,
        format!(
            "{} instances Ready at {}; {} is primary",
            cluster.replicas,
            cluster.image,
            o.pod_name(cluster.primary)
        ),
        actions,
    )
    .requeue(RESYNC)
}
