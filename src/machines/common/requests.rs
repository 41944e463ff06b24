//! The requests every machine renders the same way from its actions: a Job or CronJob
//! that exists only when the spec configures it, and the deletes of owned Jobs and of
//! the backup CronJob.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::Resource;
use serde::Serialize;

use super::actions::JobAction;
use super::backup::{BackupKind, cronjob_name};
use super::jobs::Hold;
use crate::driver::{Error, Op, Precondition};

/// The requests of a [`JobAction`] of the owner `owner`: a backup Job as `backup_job`
/// renders it for its key and kind, the CronJob as `cronjob` renders it (either `None`
/// when the spec no longer configures it: nothing is created or applied), and deletes
/// preconditioned on the observed UIDs.
///
/// # Errors
/// What the renderers return, or [`Error::Serde`] if an object does not serialize.
pub fn job_action(
    action: &JobAction,
    owner: &str,
    backup_job: impl FnOnce(&str, BackupKind) -> Result<Option<Job>, Error>,
    cronjob: impl FnOnce() -> Result<Option<CronJob>, Error>,
) -> Result<Vec<Op>, Error> {
    match action {
        JobAction::RunBackup { key, kind } => create_some(backup_job(key, *kind)?),
        JobAction::EnsureCronJob => apply_some(cronjob()?),
        JobAction::DeleteCronJob { uid } => Ok(delete_cronjob(owner, uid)),
        JobAction::DeleteJob { name, uid } => Ok(delete_job(name, uid)),
        JobAction::ReleaseJob { name, uid, hold } => Ok(release_job(name, uid, hold)),
    }
}

/// Remove the [`OUTCOME_FINALIZER`](super::meta::OUTCOME_FINALIZER) from the Job `name`,
/// keeping its other finalizers: a merge patch (which replaces the list whole),
/// preconditioned on the UID and resourceVersion read, so that a list someone changed
/// since is read again before anything is removed.
pub fn release_job(name: &str, uid: &str, hold: &Hold) -> Vec<Op> {
    let finalizers = if hold.others.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::json!(hold.others)
    };
    vec![Op::patch_if::<Job>(
        name,
        Precondition {
            uid: uid.to_owned(),
            resource_version: hold.resource_version.clone(),
        },
        serde_json::json!({"metadata": {"finalizers": finalizers}}),
    )]
}

/// Create `object` if absent, when there is one to create (a Job the spec no longer
/// configures renders as `None`: nothing is created).
///
/// # Errors
/// [`Error::Serde`] if the object does not serialize.
pub fn create_some<K>(object: Option<K>) -> Result<Vec<Op>, Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    object.iter().map(Op::create).collect()
}

/// Apply `object`, when there is one (a CronJob the spec no longer configures renders
/// as `None`: nothing is applied).
///
/// # Errors
/// [`Error::Serde`] if the object does not serialize.
pub fn apply_some<K>(object: Option<K>) -> Result<Vec<Op>, Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    object.iter().map(Op::apply).collect()
}

/// Delete the backup CronJob of the owner `owner` (its UID `uid`, as observed).
pub fn delete_cronjob(owner: &str, uid: &str) -> Vec<Op> {
    vec![Op::delete::<CronJob>(cronjob_name(owner), uid)]
}

/// Delete the owned Job `name` (its UID `uid`, as observed).
pub fn delete_job(name: &str, uid: &str) -> Vec<Op> {
    vec![Op::delete::<Job>(name, uid)]
}
