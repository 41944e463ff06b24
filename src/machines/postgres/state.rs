//! The persisted state of a PostgresCluster: what `status.machine.state` holds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::EnumDiscriminants;

use crate::machines::common::retry::RetryBudget;

/// What a settled cluster is: the image its instances run, how many there are, and which
/// ordinal is the primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// The image the StatefulSet's template holds (in Upgrading: the target).
    pub image: String,
    /// The replicas the StatefulSet holds.
    pub replicas: i32,
    /// The ordinal of the pod labelled primary.
    pub primary: i32,
}

/// A pod, by ordinal and the UID it had when it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    /// The ordinal.
    pub ordinal: i32,
    /// The UID.
    pub uid: String,
}

/// Where a switchover stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum SwitchStep {
    /// The target is chosen; the old primary is about to lose its label.
    Demote,
    /// The old primary is labelled demoted; waiting until the Lease holder is certainly
    /// fenced (it released the Lease, its Lease expired, or a person says so), then the
    /// Lease is handed to the target.
    Fence,
    /// Failover: the old primary is certainly fenced; every standby is asked for its WAL
    /// positions through the Lease, and the most advanced Ready one that answered
    /// becomes the target.
    Survey,
    /// The target holds the Lease; its manager promotes it, and the switchover waits for
    /// its report (a writable server holding the Lease's term).
    Promote,
}

/// Why a switchover runs (and where it goes once done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum SwitchCause {
    /// Every replica is upgraded; the old primary is upgraded after it. Back to Upgrading.
    Upgrade,
    /// `spec.replicas` would remove the primary's ordinal. Back to Ready, then Scaling.
    Scale,
    /// The primary was not Ready for longer than `failoverDelaySeconds`. Back to Ready.
    Failover,
    /// A person asked for it (`lockstep.dev/switchover`). Back to Ready.
    Requested,
}

/// A standby's WAL positions as a failover's survey read them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Surveyed {
    /// The ordinal.
    pub ordinal: i32,
    /// `pg_last_wal_receive_lsn()`.
    pub receive: String,
    /// `pg_last_wal_replay_lsn()`.
    pub replay: String,
    /// The timeline of the WAL it received last (the newest timeline whose segment
    /// file holds its receive position); `None` from a survey that read none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
}

/// A switchover in progress: the intent, persisted before anything moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Switchover {
    /// The cluster; `cluster.primary` is the old primary until the switchover completes.
    pub cluster: Topology,
    /// The old primary's pod UID when the switchover began (the fence delete of a
    /// failover names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_uid: Option<String>,
    /// The replica being promoted.
    pub target: PodRef,
    /// The step.
    pub step: SwitchStep,
    /// The promote attempt, from 1.
    pub attempt: u32,
    /// Why.
    pub cause: SwitchCause,
    /// The promotion's attempt budget, renewed by a `retry-promote` token.
    #[serde(flatten)]
    pub budget: RetryBudget,
    /// Failover: the survey attempt, from 1 (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub survey_attempt: Option<u32>,
    /// Failover: the standbys' WAL positions the target was chosen from (recorded with
    /// the choice, before the Lease is handed to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surveyed: Option<Vec<Surveyed>>,
    /// A requested switchover: the `lockstep.dev/switchover` token it serves (recorded
    /// in the status's acks as it begins, so it runs once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// Where an in-place restore stands. Each step's intent is persisted before it acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum RestoreStep {
    /// The StatefulSet is scaled to zero: waiting until no pod exists and the Lease
    /// holder is certainly fenced (nothing writes any more).
    StopWrites,
    /// Every instance's volume claim is deleted, and the primary Lease: waiting until
    /// none is left (no member can start on the pre-restore data).
    ReplaceVolumes,
    /// Pod 0 alone, on a new volume, holds the Lease and the restore annotation: its
    /// manager restores the repository, recovers to the target and promotes there,
    /// listening on no address; waiting until it serves as the primary.
    RestorePrimary,
    /// The replicas are added and clone the restored primary: waiting until every
    /// instance is Ready.
    CloneReplicas,
}

/// An in-place restore in progress: the request and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Restore {
    /// The cluster as it was when the restore began (`primary`: the primary before it).
    pub cluster: Topology,
    /// The request being served (`spec.restore` when it began).
    pub restore: crate::machines::postgres::api::RestoreSpec,
    /// The step (not `step`: a switchover's has other values, and every variant's
    /// fields share one schema).
    pub restore_step: RestoreStep,
}

/// Where hibernation (`spec.hibernate`) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
pub enum HibernateStep {
    /// The StatefulSet is scaled to zero: waiting until no pod is left and the Lease
    /// holder is certainly fenced (every server stopped).
    Stopping,
    /// No instance runs; the volume claims are kept. `spec.hibernate: false` wakes it.
    Asleep,
    /// The StatefulSet holds `cluster.replicas` again; the primary before hibernation is
    /// given the Lease and the primary label: waiting until every instance is Ready.
    Waking,
}

/// A hibernation in progress, or a cluster asleep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hibernation {
    /// The cluster as it was when hibernation began: the primary wakes as the primary.
    pub cluster: Topology,
    /// The step (not `step`: a switchover's has other values, and every variant's
    /// fields share one schema).
    pub hibernate_step: HibernateStep,
}

/// The persisted state of a PostgresCluster (`status.machine.state`). Its CRD schema is
/// derived from this enum ([`crate::engine::schema`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, EnumDiscriminants)]
#[strum_discriminants(
    name(PgKind),
    vis(pub),
    derive(strum::IntoStaticStr, strum::EnumIter),
    doc = "The kind of a [`PgState`]: its variant without data."
)]
#[serde(tag = "name", rename_all_fields = "camelCase")]
pub enum PgState {
    /// Objects are being created; pod 0 is the primary.
    Creating {
        /// The generated credentials Secret has been created (or none is needed).
        credentials_created: bool,
        /// The `spec.restore` token the spec held when the cluster was created (or its
        /// status was lost), taken as served: a new cluster has nothing to rewind, and
        /// an adopted one must not run an old request again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        served_restore: Option<String>,
    },
    /// At rest: every instance Ready at `cluster.image`, roles as the state says.
    Ready {
        /// The cluster.
        cluster: Topology,
    },
    /// Instances are being added or removed.
    Scaling {
        /// The cluster; `replicas` is the new count.
        cluster: Topology,
        /// The count before.
        from_replicas: i32,
    },
    /// Instances are being replaced, one at a time, to run `cluster.image`.
    Upgrading {
        /// The cluster; `image` is the target.
        cluster: Topology,
        /// The pod being replaced, if one is chosen.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<PodRef>,
    },
    /// The primary role moves to another instance.
    SwitchingOver(Switchover),
    /// The primary is not Ready; a failover follows if it stays so.
    PrimaryLost {
        /// The cluster; `primary` is the lost one.
        cluster: Topology,
    },
    /// An on-demand backup runs.
    BackingUp {
        /// The cluster.
        cluster: Topology,
        /// The `backup-now` token being served.
        request: String,
        /// The key of the Job serving it ([`crate::machines::common::on_demand::key`]);
        /// absent in a record from before keys were chained (then the token's own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
    },
    /// The cluster is rewound in place to a point of its own backups (`spec.restore`).
    RestoringInPlace(Restore),
    /// `spec.hibernate`: every instance stops cleanly and the volumes are kept; the
    /// cluster wakes with the same primary.
    Hibernating(Hibernation),
    /// Being deleted: a final backup runs before the finalizer is released.
    Finalizing {
        /// The final backup attempt, from 1.
        attempt: u32,
    },
    /// Cleanup is complete; the finalizer is released.
    Finalized,
}

impl PgState {
    /// The cluster the state holds, if it holds one.
    pub fn cluster(&self) -> Option<&Topology> {
        match self {
            PgState::Ready { cluster }
            | PgState::Scaling { cluster, .. }
            | PgState::Upgrading { cluster, .. }
            | PgState::PrimaryLost { cluster }
            | PgState::BackingUp { cluster, .. } => Some(cluster),
            PgState::SwitchingOver(s) => Some(&s.cluster),
            PgState::RestoringInPlace(r) => Some(&r.cluster),
            PgState::Hibernating(h) => Some(&h.cluster),
            PgState::Creating { .. } | PgState::Finalizing { .. } | PgState::Finalized => None,
        }
    }

    /// The ordinal the state labels `primary`, if any (none mid-switchover).
    pub fn designated_primary(&self) -> Option<i32> {
        match self {
            PgState::Creating { .. } => Some(0),
            // Pod 0 is the restored primary, from the step that labels it.
            PgState::RestoringInPlace(r) => match r.restore_step {
                RestoreStep::StopWrites | RestoreStep::ReplaceVolumes => None,
                RestoreStep::RestorePrimary | RestoreStep::CloneReplicas => Some(0),
            },
            // No pod runs until the cluster wakes; then its primary is the one before.
            PgState::Hibernating(h) => match h.hibernate_step {
                HibernateStep::Stopping | HibernateStep::Asleep => None,
                HibernateStep::Waking => Some(h.cluster.primary),
            },
            PgState::SwitchingOver(_) | PgState::Finalizing { .. } | PgState::Finalized => None,
            other => other.cluster().map(|c| c.primary),
        }
    }
}

crate::machines::common::finalize::impl_states!(PgState);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::MachineRecord;

    /// A record as the operator writes it today (keys in the order it writes them).
    const SWITCHING_OVER: &str = r#"{"state":{"name":"SwitchingOver","cluster":{"image":"postgres:16","replicas":3,"primary":0},"oldUid":"u0","target":{"ordinal":1,"uid":"u1"},"step":"Promote","attempt":5,"cause":"Failover","roundStart":4,"retryAck":"t1","surveyAttempt":2,"surveyed":[{"ordinal":1,"receive":"0/3000060","replay":"0/3000060"}]},"enteredAt":"2026-11-29T18:00:00Z","stateVersion":1,"history":[]}"#;

    fn switchover(record: &MachineRecord<PgState>) -> &Switchover {
        match &record.state {
            PgState::SwitchingOver(s) => s,
            other => panic!("a switchover: {other:?}"),
        }
    }

    #[test]
    fn every_field_has_one_type_in_every_state_that_carries_it() {
        // Found on the real node: a restore's `step` hoisted as a switchover's, and the
        // API server refused the status that began the restore.
        assert_eq!(
            crate::engine::schema::mismatched_fields::<PgState>(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_record_written_today_decodes_and_encodes_to_the_same_bytes() {
        let record: MachineRecord<PgState> =
            serde_json::from_str(SWITCHING_OVER).expect("today's record decodes");
        let s = switchover(&record);
        assert_eq!((s.attempt, s.budget.round_start), (5, 4));
        assert_eq!(s.budget.retry_ack.as_deref(), Some("t1"));
        assert_eq!(
            serde_json::to_string(&record).ok().as_deref(),
            Some(SWITCHING_OVER)
        );
    }

    #[test]
    fn a_record_from_before_the_retry_budget_starts_at_round_one() {
        let old = SWITCHING_OVER.replace(r#""roundStart":4,"retryAck":"t1","#, "");
        let record: MachineRecord<PgState> =
            serde_json::from_str(&old).expect("a record without roundStart decodes");
        let s = switchover(&record);
        assert_eq!(s.budget, RetryBudget::begin(None));
        let written = old.replace(
            r#""cause":"Failover","#,
            r#""cause":"Failover","roundStart":1,"#,
        );
        assert_eq!(serde_json::to_string(&record).ok(), Some(written));
    }
}
