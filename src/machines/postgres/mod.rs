//! PostgresCluster: the seed-001 operator, as a Lockstep machine. A primary and streaming
//! replicas of PostgreSQL, with switchover on upgrades, failover when the primary stays
//! down, scheduled, on-demand and final backups to S3.
//!
//! - [`api`]: the custom resource, its validation and status.
//! - [`machine`]: the state machine: guarantees and assumptions, and `impl Machine`,
//!   which dispatches to one `decide/<state>.rs` per state (private; the shared
//!   sub-decisions live in `decide/mod.rs`).
//! - [`state`]: the persisted state; [`table`]: the declared edges and their reasons,
//!   each edge naming the file that takes it (the generated statechart is
//!   `machines/postgrescluster.md`); [`actions`]: the side effects, as data.
//! - [`observe`] and [`render`]: the bridge to Kubernetes objects; [`crate::pod::applied`]: what
//!   each instance reports on its pod of the settings it was given; [`crate::pod::volume`]: whether
//!   its volume holds a database;
//!   [`status`]: the kind's own status fields.
//! - `scripts/`: what runs in the Jobs (`backup.sh`, `restore.sh`), shipped in a ConfigMap; their environment contract is in
//!   `scripts/README.md`. The pods run `lockstep instance` ([`crate::instance`]).
//!
//! This module binds them into an [`Operator`] the driver runs, and projects the kind's
//! own status: `primaryPod` and `replicaPods` (from the role labels the Services select
//! by), `targetPrimary` mid-switchover, `image`, `lastBackupTime`, `lastBackup` (which
//! says when a requested backup's outcome is unknown), `firstRecoverabilityPoint`
//! ([`recoverability`]), `lastFailover`, and the condition
//! `PrimaryAvailable`, and `SettingsApplied` (what the instances report of
//! `spec.postgresql`, [`crate::pod::applied`]).
//!
//! # Guarantees
//! See [`machine`]. Additionally, `status` is a deterministic function of the persisted
//! record, the previous status and the observation, so an idle reconcile writes nothing;
//! no password is ever read, logged or written to the status.
//!
//! # Assumptions
//! The driver's cache watches pods, Jobs, CronJobs, StatefulSets, Services, ConfigMaps,
//! PodDisruptionBudgets and Leases carrying the standard labels, which every rendered
//! object (and every pod made from the StatefulSet) carries. The pods' ServiceAccount,
//! Role and RoleBinding are not watched: they are applied with the StatefulSet (before
//! it, since a pod needs its ServiceAccount), and restored whenever it is.
//!
//! # Errors
//! Rendering fails only for an owner without a UID (never for an object read from the
//! API server) or an object that does not serialize: [`crate::driver::Error`].

pub mod actions;
pub mod api;
pub mod archived;
mod decide;
pub mod instance_settings;
pub mod instances;
pub mod machine;
#[cfg(test)]
mod model;
pub mod observe;
pub mod recoverability;
pub mod render;
pub mod state;
pub mod status;
pub mod table;
pub mod terms;
#[cfg(test)]
mod tests;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;

use crate::pod::restore::RESTORE_ANNOTATION;
use crate::pod::settings::SETTINGS_ANNOTATION;
use crate::pod::{managed, settings};

pub use actions::PgAction;
pub use api::{PostgresCluster, PostgresClusterSpec, PostgresClusterStatus};
pub use machine::Postgres;
pub use observe::Observed;
pub use state::{PgKind, PgState};
pub use status::last_backup_time;

use crate::driver::cache::Keep;
use crate::driver::{Cache, Error, Op, Operator, Precondition};
use crate::engine::EngineStatus;
use crate::machines::common::actions::JobAction;
use crate::machines::common::{last_backup, requests};
use actions::Role;
use render::ROLE_LABEL;
use status::{
    continuous_archiving, last_failover, primary_available, rest_image, settings_applied,
    synchronous_replication,
};

/// The condition type saying what the instances made of `spec.postgresql`: applied,
/// refused by PostgreSQL, or pending a restart, from what each instance reports
/// ([`crate::pod::applied`]).
pub const SETTINGS_APPLIED: &str = "SettingsApplied";

/// The condition type saying whether the primary's WAL reaches the archive
/// (`spec.backup.walArchive`), from what the primary reports ([`crate::pod::archiving`]).
pub const CONTINUOUS_ARCHIVING: &str = "ContinuousArchiving";

/// The condition type saying whether the primary's commits wait for standbys
/// (`spec.synchronous`), from what the primary reports ([`crate::pod::synchronous::SYNCHRONOUS`]):
/// `False` (`Asynchronous`) while `dataDurability: Preferred` turned it asynchronous.
pub const SYNCHRONOUS_REPLICATION: &str = "SynchronousReplication";

/// The condition type saying whether a primary serves writes (through `<name>-rw`), and
/// why not or since when.
pub const PRIMARY_AVAILABLE: &str = "PrimaryAvailable";

impl Operator for Postgres {
    type Resource = PostgresCluster;

    const KIND_LABEL: &'static str = render::KIND_LABEL;

    /// The settings and in-place restore it writes on its pods (read back as digests),
    /// and the `LOCKSTEP_*` variables a pod was created with (the `L` its fence runs
    /// with).
    const KEEP: Keep = Keep {
        digested_annotations: &[SETTINGS_ANNOTATION, RESTORE_ANNOTATION],
        env_prefix: Some("LOCKSTEP_"),
    };

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
        // Every write to an observed object is on the object as read.
        let read = |uid: &str, version: &str| Precondition {
            uid: uid.to_owned(),
            resource_version: version.to_owned(),
        };
        // Pod annotations the instance manager reads: one key, set (or removed, for
        // `None`) on the pod as read.
        let annotate =
            |ordinal: i32, uid: &str, version: &str, key: &str, value: Option<String>| {
                vec![Op::patch_if::<Pod>(
                    pod(ordinal),
                    read(uid, version),
                    serde_json::json!({"metadata": {"annotations": {key: value}}}),
                )]
            };
        let lease_patch = |uid: &str, version: &str, body| {
            vec![Op::patch_if::<Lease>(
                render::lease_name(object),
                read(uid, version),
                body,
            )]
        };
        Ok(match action {
            PgAction::CreateCredentials => {
                let mut ops = Vec::new();
                if object.spec.credentials_secret.is_none() {
                    ops.push(Op::create(&render::credentials_secret(object))?);
                }
                ops.push(Op::create(&render::app_secret(object))?);
                ops.push(Op::create(&render::tls::secret(object)?)?);
                ops
            }
            PgAction::RenewCertificates(due) => vec![Op::patch_if::<Secret>(
                render::tls::secret_name(object),
                read(&due.uid, &due.version),
                render::tls::renewal(object, &due.ca)?,
            )],
            PgAction::EnsureScripts => vec![Op::apply(&render::scripts(object)?)?],
            PgAction::EnsureService(kind) => vec![Op::apply(&render::service(object, *kind)?)?],
            PgAction::EnsurePdb => vec![Op::apply(&render::pdb(object)?)?],
            PgAction::EnsureNetworkPolicy => vec![Op::apply(&render::network_policy(object)?)?],
            PgAction::DeleteNetworkPolicy { uid } => vec![Op::delete::<NetworkPolicy>(
                render::network_policy_name(object),
                uid,
            )],
            // The pods' ServiceAccount, Role and RoleBinding go with the StatefulSet:
            // a pod cannot be created before its ServiceAccount exists.
            // The endpoint token first: the pods and Jobs read it (`render::token`).
            PgAction::EnsureStatefulSet { image, replicas } => vec![
                Op::create(&render::endpoint_token_secret(object))?,
                Op::apply(&render::service_account(object)?)?,
                Op::apply(&render::instance_role(object)?)?,
                Op::apply(&render::instance_binding(object)?)?,
                Op::apply(&render::statefulset(object, image, *replicas)?)?,
            ],
            PgAction::CreateLease {
                holder,
                at,
                seconds,
                never_held,
            } => vec![Op::create(&render::lease(
                object,
                holder.as_deref(),
                *at,
                *seconds,
                *never_held,
            )?)?],
            PgAction::HandLease {
                holder,
                gate,
                transitions,
                at,
                uid,
                version,
            } => lease_patch(
                uid,
                version,
                render::lease_hand_over(object, holder.as_deref(), *gate, *transitions, *at),
            ),
            PgAction::Label {
                ordinal,
                role,
                uid,
                version,
            } => {
                let role: &str = (*role).into();
                vec![Op::label_if::<Pod>(
                    pod(*ordinal),
                    read(uid, version),
                    [(ROLE_LABEL.to_owned(), Some(role.to_owned()))].into(),
                )]
            }
            PgAction::Configure {
                ordinal,
                uid,
                version,
            } => annotate(
                *ordinal,
                uid,
                version,
                settings::SETTINGS_ANNOTATION,
                instance_settings::annotation_of(object),
            ),
            PgAction::AnnotateRestore {
                ordinal,
                value,
                uid,
                version,
            } => annotate(
                *ordinal,
                uid,
                version,
                crate::pod::restore::RESTORE_ANNOTATION,
                Some(value.clone()),
            ),
            PgAction::DeleteClaim { ordinal, uid } => vec![Op::delete::<PersistentVolumeClaim>(
                format!("{}-{name}-{ordinal}", render::VOLUME),
                uid,
            )],
            PgAction::DeleteLease { uid } => {
                vec![Op::delete::<Lease>(render::lease_name(object), uid)]
            }
            PgAction::DeletePod { ordinal, uid, .. } => vec![Op::delete::<Pod>(pod(*ordinal), uid)],
            PgAction::AskSurvey {
                token,
                uid,
                version,
            } => lease_patch(uid, version, render::lease_survey(token)),
            PgAction::Jobs(action) => {
                let mut ops = requests::job_action(
                    action,
                    &name,
                    |key, kind| Ok(render::backup_job(object, key, kind)?),
                    || Ok(render::cronjob(object)?),
                )?;
                // A backup Job reads the endpoint token: created before the Job (or
                // the CronJob) if a cluster older than the token has none yet.
                let starts = matches!(
                    action,
                    JobAction::RunBackup { .. } | JobAction::EnsureCronJob
                );
                if starts && !ops.is_empty() {
                    ops.insert(0, Op::create(&render::endpoint_token_secret(object))?);
                }
                ops
            }
        })
    }

    fn status(
        object: &PostgresCluster,
        engine: EngineStatus<PgState>,
        state: Option<&PgState>,
        observed: &Observed,
        now: chrono::DateTime<chrono::Utc>,
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
                observed,
                now,
                engine.observed_generation,
            )
        {
            engine.conditions.push(condition);
        }
        if state.is_some()
            && let Some(condition) =
                settings_applied(object, observed, now, engine.observed_generation)
        {
            engine.conditions.push(condition);
        }
        if state.is_some()
            && let Some(condition) =
                continuous_archiving(object, observed, now, engine.observed_generation)
        {
            engine.conditions.push(condition);
        }
        if state.is_some()
            && let Some(condition) =
                synchronous_replication(object, observed, now, engine.observed_generation)
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
            first_recoverability_point: recoverability::project(
                observed,
                old.and_then(|s| s.first_recoverability_point),
            ),
            last_archived: archived::project(observed, old.and_then(|s| s.last_archived.as_ref())),
            last_backup: last_backup::project(
                history.as_ref(),
                &name,
                observed,
                old.and_then(|s| s.last_backup.as_ref()),
            ),
            last_failover: history
                .as_ref()
                .and_then(|r| last_failover(&r.history))
                .filter(|seen| {
                    old.and_then(|s| s.last_failover.as_ref())
                        .is_none_or(|before| before.time <= seen.time)
                })
                .or_else(|| old.and_then(|s| s.last_failover.clone())),
            instances: instances::project(observed, &name),
            longest_lease_seconds: Some(status::longest_lease_seconds(
                object.spec.fencing.lease_duration_seconds,
                observed,
                old.and_then(|s| s.longest_lease_seconds),
            )),
            synchronous_terms: Some(status::synchronous_terms(
                &object.spec,
                observed,
                old.and_then(|s| s.synchronous_terms.as_deref()),
            )),
            roles: Vec::new(),
            databases: Vec::new(),
        };
        // What the primary last made of the entries; until it says, what was said; none
        // once the spec lists none.
        let listed = !object.spec.roles.is_empty() || !object.spec.databases.is_empty();
        let (roles, databases) = match &observed.own.objects {
            Some(report) => managed::statuses(report),
            None if listed => {
                old.map_or_else(Default::default, |s| (s.roles.clone(), s.databases.clone()))
            }
            None => Default::default(),
        };
        let status = PostgresClusterStatus {
            roles,
            databases,
            ..status
        };
        serde_json::to_value(status).unwrap_or(serde_json::Value::Null)
    }
}
