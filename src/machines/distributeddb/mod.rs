//! DistributedDB: the seed operator for a replicated database, as a Lockstep machine.
//!
//! - [`api`]: the custom resource, its validation and status.
//! - [`machine`]: the state machine: guarantees and assumptions, and `impl Machine`,
//!   which dispatches to one `decide/<state>.rs` per state (private; the shared
//!   sub-decisions live in `decide/mod.rs`).
//! - [`state`]: the persisted state; [`table`]: the declared edges and their reasons,
//!   each edge naming the file that takes it (the generated statechart is
//!   `machines/distributeddb.md`); [`actions`]: the side effects, as data.
//! - [`observe`] and [`render`]: the bridge to Kubernetes objects, both pure
//!   ([`tls`]: the certificates of `spec.tls`);
//!   [`status`]: the kind's own status fields.
//!
//! This module binds them into an [`Operator`] the driver runs.
//!
//! # Walkthrough
//! ```text
//! $ kubectl apply -f examples/distributeddb-full.yaml
//! $ kubectl get ddb
//! NAME        REPLICAS   READY   VERSION                              PHASE      STEP   AGE
//! inventory   3          3       registry.example/distributeddb:1.4   Ready             20s
//!
//! # An upgrade: one pod at a time, highest ordinal first, hooks around each.
//! $ kubectl patch ddb inventory --type merge -p '{"spec":{"image":"registry.example/distributeddb:1.5"}}'
//! $ kubectl get ddb inventory -w      # STEP: 2/PreHook 2/Restart 2/PostHook 1/PreHook ... 0/PostHook
//! $ kubectl describe ddb inventory    # history: ImageChanged, PreHookSucceeded, PodReplaced,
//!                                     # PodUpgraded, ..., UpgradeCompleted; one Event each
//!
//! # A replacement that is not Ready within the readiness window (5 minutes) keeps the
//! # upgrade waiting and makes it Degraded=True, naming the pod and what it waits for.
//! # A hook that keeps failing stops the upgrade: Degraded=True, reason HookFailed,
//! # "the pre-upgrade hook of inventory-2 Failed (BackoffLimitExceeded: ...)".
//! # Fix the hook (or the cluster), then:
//! $ kubectl annotate ddb inventory --overwrite lockstep.dev/retry-hook=$(date +%s)
//! # ... or go on without it:
//! $ kubectl annotate ddb inventory --overwrite lockstep.dev/skip-hook=$(date +%s)
//! # ... or roll back: set spec.image back; the upgrade retargets, pod by pod.
//!
//! # Backups: the CronJob inventory-backup follows spec.backupPolicy; one more, now:
//! $ kubectl annotate ddb inventory --overwrite lockstep.dev/backup-now=$(date +%s)
//! $ kubectl get ddb inventory -o jsonpath='{.status.lastBackup}'
//!
//! # Deletion takes a final backup first; while it fails the object stays Terminating
//! # with Degraded=True (FinalBackupFailed) and retries with backoff. To delete anyway:
//! $ kubectl annotate ddb inventory lockstep.dev/skip-final-backup=true
//! ```
//!
//! Growing `spec.storage.size` expands every volume claim (the StorageClass must allow
//! expansion); shrinking it or changing the class is refused by the API server. A change
//! of `spec.replicas` goes through Scaling, one replica at a time: the StatefulSet's
//! `spec.replicas` is stepped by one once every pod is Ready and no removed pod is left
//! (its `podManagementPolicy: Parallel` is immutable on a live StatefulSet, so the
//! machine keeps the pace; claims of removed replicas are retained).
//! On-demand backup Jobs are kept (their names are the record of which tokens were
//! served); the CronJob keeps its last three Jobs of each outcome; hook Jobs are deleted
//! once the cluster is back at rest.
//!
//! # Guarantees
//! See [`machine`]. Additionally, `status` is a deterministic function of the persisted
//! state and the observation, so an idle reconcile writes nothing.
//!
//! # Assumptions
//! The driver's cache watches pods, Jobs, CronJobs, StatefulSets, Services,
//! PodDisruptionBudgets, volume claims and Secrets (`<name>-tls`) carrying the standard
//! labels, which every rendered object (and every pod and claim made from them) carries.
//!
//! # Errors
//! Rendering fails only for an owner without a UID (never for an object read from the
//! API server) or an object that does not serialize: [`crate::driver::Error`].

pub mod actions;
pub mod api;
mod decide;
#[cfg(test)]
mod fixtures;
pub mod machine;
#[cfg(test)]
mod model;
pub mod observe;
pub mod render;
pub mod state;
pub mod status;
pub mod table;
#[cfg(test)]
mod tests;
pub mod tls;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;

pub use actions::DdbAction;
pub use api::{DistributedDB, DistributedDBSpec, DistributedDBStatus, LastBackup};
pub use machine::DistributedDb;
pub use observe::Observed;
pub use state::{DdbKind, DdbState};
pub use status::{last_backup, version};

use crate::driver::{Cache, Error, Op, Operator, Precondition};
use crate::engine::EngineStatus;
use crate::machines::common::requests;

impl Operator for DistributedDb {
    type Resource = DistributedDB;

    const KIND_LABEL: &'static str = render::KIND_LABEL;

    fn spec(object: &DistributedDB) -> DistributedDBSpec {
        object.spec.clone()
    }

    fn engine_status(object: &DistributedDB) -> EngineStatus<DdbState> {
        object
            .status
            .as_ref()
            .map(|s| s.engine.clone())
            .unwrap_or_default()
    }

    fn observe(object: &DistributedDB, _state: Option<&DdbState>, cache: &Cache) -> Observed {
        observe::observe(object, cache)
    }

    fn render(object: &DistributedDB, action: &DdbAction) -> Result<Vec<Op>, Error> {
        let name = object.name_any();
        Ok(match action {
            DdbAction::CreateCertificates => vec![Op::create(&tls::secret(object)?)?],
            DdbAction::RenewCertificates(due) => vec![Op::patch_if::<Secret>(
                tls::issued_name(object),
                Precondition {
                    uid: due.uid.clone(),
                    resource_version: due.version.clone(),
                },
                tls::renewal(object, &due.ca)?,
            )],
            DdbAction::EnsureService => vec![Op::apply(&render::service(object)?)?],
            DdbAction::EnsurePdb => vec![Op::apply(&render::pdb(object)?)?],
            DdbAction::EnsureStatefulSet(shape) => {
                vec![Op::apply(&render::statefulset(object, shape)?)?]
            }
            DdbAction::EvictPod { ordinal, uid } => {
                vec![Op::evict(format!("{name}-{ordinal}"), uid)]
            }
            DdbAction::DeleteUnstarted {
                ordinal,
                uid,
                version,
            } => vec![Op::delete_as_read::<Pod>(
                format!("{name}-{ordinal}"),
                Precondition {
                    uid: uid.clone(),
                    resource_version: version.clone(),
                },
            )],
            DdbAction::RunHook {
                phase,
                ordinal,
                key,
                from,
                to,
            } => requests::create_some(render::hook_job(object, *phase, *ordinal, key, from, to)?)?,
            DdbAction::Jobs(action) => requests::job_action(
                action,
                &name,
                |key, kind| Ok(render::backup_job(object, key, kind)?),
                || {
                    let policy = object.spec.backup_policy.as_ref();
                    Ok(policy.map(|p| render::cronjob(object, p)).transpose()?)
                },
            )?,
            DdbAction::ExpandVolume { ordinal, size } => {
                vec![Op::apply(&render::volume_expansion(
                    object, *ordinal, size,
                ))?]
            }
        })
    }

    fn status(
        object: &DistributedDB,
        engine: EngineStatus<DdbState>,
        state: Option<&DdbState>,
        observed: &Observed,
        now: chrono::DateTime<chrono::Utc>,
    ) -> serde_json::Value {
        let old = object.status.as_ref();
        let fresh = (
            status::count(observed, |_| true),
            status::count(observed, |p| p.ready),
        );
        let record = crate::engine::step::decode::<Self>(&engine).ok().flatten();
        let (engine, replicas, ready) =
            status::project(engine, old, fresh, object.spec.replicas, now);
        let status = DistributedDBStatus {
            engine,
            version: version(state).or_else(|| old.and_then(|s| s.version.clone())),
            replicas: Some(replicas),
            ready_replicas: Some(ready),
            last_backup: crate::machines::common::last_backup::project(
                record.as_ref(),
                &object.name_any(),
                observed,
                old.and_then(|s| s.last_backup.as_ref()),
            ),
        };
        serde_json::to_value(status).unwrap_or(serde_json::Value::Null)
    }
}
