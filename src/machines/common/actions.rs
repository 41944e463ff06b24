//! The actions every machine takes the same way on its backup Jobs, its backup CronJob
//! and its finished Jobs ([`JobAction`]), how the shared sub-machines build them
//! ([`JobActions`]), and when the backup CronJob needs one ([`cronjob_upkeep`]).
//!
//! Actions are data: [`super::requests`] turns them into requests at the edge.

use super::backup::BackupKind;
use super::jobs::{Hold, JobOutcome, JobView};
use super::observe::CronJobView;

/// The actions every machine takes the same way on its backup Jobs, its backup CronJob
/// and its finished Jobs; a machine's action enum holds them as one variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobAction {
    /// Create a backup Job (if absent).
    RunBackup {
        /// The Job's key.
        key: String,
        /// On demand or final.
        kind: BackupKind,
    },
    /// Apply the scheduled-backup CronJob.
    EnsureCronJob,
    /// Delete the scheduled-backup CronJob.
    DeleteCronJob {
        /// Its UID.
        uid: String,
    },
    /// Delete a finished Job (preconditioned on its UID).
    DeleteJob {
        /// Its name.
        name: String,
        /// Its UID.
        uid: String,
    },
    /// Remove the [`super::meta::OUTCOME_FINALIZER`] from a Job whose outcome is recorded
    /// (a merge patch preconditioned on its UID and the resourceVersion read).
    ReleaseJob {
        /// Its name.
        name: String,
        /// Its UID.
        uid: String,
        /// What the removal needs.
        hold: Hold,
    },
}

/// The Job actions every machine has: it runs backup Jobs and deletes finished Jobs.
/// The shared sub-machines ([`super::finalize`], [`super::on_demand`]) and pruning build
/// a machine's actions through it; every action enum that holds the [`JobAction`]s has
/// it.
pub trait JobActions: From<JobAction> {
    /// Create a backup Job with `key` (if absent).
    fn run_backup(key: String, kind: BackupKind) -> Self {
        JobAction::RunBackup { key, kind }.into()
    }

    /// Delete a finished `job` (preconditioned on its UID).
    fn delete_job(job: &JobView) -> Self {
        JobAction::DeleteJob {
            name: job.name.clone(),
            uid: job.uid.clone(),
        }
        .into()
    }

    /// Remove the [`super::meta::OUTCOME_FINALIZER`] from `job`, if it holds it.
    fn release_job(job: &JobView) -> Option<Self> {
        let hold = job.held.clone()?;
        Some(
            JobAction::ReleaseJob {
                name: job.name.clone(),
                uid: job.uid.clone(),
                hold,
            }
            .into(),
        )
    }
}

/// At rest: the finalizer of every finished Job goes. The state that read each outcome
/// has been left, by a transition whose write recorded it.
pub fn release_finished<A: JobActions>(jobs: &[JobView]) -> Vec<A> {
    jobs.iter()
        .filter(|j| j.outcome != JobOutcome::Running)
        .filter_map(A::release_job)
        .collect()
}

/// Before the owner's finalizer goes: the finalizer of every Job left, finished or not
/// (nothing will read them any more; held, they would outlive their owner).
pub fn release_all<A: JobActions>(jobs: &[JobView]) -> Vec<A> {
    jobs.iter().filter_map(A::release_job).collect()
}

impl<A: From<JobAction>> JobActions for A {}

/// The action that keeps the backup CronJob as the spec wants it: applied when it is
/// `wanted` and missing or drifted, deleted when it is not wanted but `observed`.
pub fn cronjob_upkeep(wanted: bool, observed: Option<&CronJobView>) -> Option<JobAction> {
    match (wanted, observed) {
        (true, Some(c)) if c.in_sync => None,
        (true, _) => Some(JobAction::EnsureCronJob),
        (false, Some(c)) => Some(JobAction::DeleteCronJob { uid: c.uid.clone() }),
        (false, None) => None,
    }
}
