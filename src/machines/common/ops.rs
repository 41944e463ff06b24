//! The requests every machine renders the same way from its actions: a Job or CronJob
//! that exists only when the spec configures it, and the deletes of owned Jobs and of
//! the backup CronJob.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::Resource;
use serde::Serialize;

use super::backup::cronjob_name;
use crate::driver::{Error, Op};

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
