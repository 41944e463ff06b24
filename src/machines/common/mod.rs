//! Parts every Lockstep machine shares: DistributedDB and PostgresCluster both build on
//! these, so each behaviour exists once.
//!
//! - [`meta`]: the identity of owned objects: standard labels, owner references, stable
//!   hashes and deterministic child names.
//! - [`observe`]: the [`observe::Observed`] every machine's observation is (name,
//!   StatefulSet, pods, Jobs, backup CronJob, backup requests, and the machine's own
//!   part), how it is read, and the drift check.
//! - [`quantity`]: Kubernetes quantities, parsed and compared exactly.
//! - [`storage`]: the data volume claim template of every machine's StatefulSet.
//! - [`subset`]: the semantic drift check: is the object we would apply already
//!   contained in the live one? API-server defaults never count as drift.
//! - [`env`](mod@env): container environment variables (plain, from a Secret, from a pod field).
//! - [`jobs`]: run-once Jobs with deterministic names, reading a Job's outcome, and the
//!   [`jobs::Verdict`] of a state that runs one Job at a time.
//! - [`actions`]: the [`actions::JobAction`]s every machine takes on its backup Jobs, its
//!   backup CronJob and its finished Jobs, as data.
//! - [`retry`]: backoff and attempt bookkeeping for a step that runs a Job which may fail.
//! - [`backup`]: the backup container (S3 settings, credentials only through
//!   `secretKeyRef`) and the scheduled-backup CronJob.
//! - [`cron`]: the CEL rule every backup schedule is validated with.
//! - [`finalize`]: the final-backup sub-machine every Finalizing state runs.
//! - [`on_demand`]: the on-demand backup sub-machine every `backup-now` request runs.
//! - [`last_backup`]: every machine's `status.lastBackup`, which says so when a
//!   requested backup's outcome is unknown.
//! - [`requests`]: the requests every machine renders the same way from its
//!   [`actions::JobAction`]s.
//! - [`replace`]: where the replacement of one pod stands, and when a pod may be taken
//!   down.
//! - [`annotations`]: the documented escape hatches users set on a custom resource.
//! - [`placement`]: where pods are scheduled (`spec.placement` of every kind), and the
//!   spread of one object's instances over nodes.
//! - [`security`]: the security context that admits every rendered pod under the
//!   `restricted` Pod Security Standard.
//! - [`tls`]: a certificate authority per cluster, the leaves it signs, their renewal,
//!   and their projection into pods.
//!
//! The files import each other without a cycle, from the bottom up: `meta`, `jobs`,
//! `backup`, `observe`, then `replace`, `actions` and `retry`, then the sub-machines
//! (`finalize`, `on_demand`), `last_backup` and `ops`; a test (`layering.rs`) fails if a cycle returns.
//!
//! # Guarantees
//! - Everything here is pure: builders return typed objects, readers take typed objects,
//!   deciders take observations and a clock reading. Nothing performs I/O.
//! - Names and hashes are stable across builds and platforms (FNV-1a, not the standard
//!   library's hasher), because they are persisted in cluster objects.
//!
//! # Assumptions
//! - Owned objects live in the owner's namespace and carry [`meta::standard_labels`].
//!
//! # Errors
//! [`Error`]: an owner without a name or UID (never the case for objects read from the
//! API server), or an object that does not serialize.

pub mod actions;
pub mod annotations;
pub mod applied;
pub mod backup;
pub mod cron;
pub mod disruption;
pub mod env;
pub mod finalize;
pub mod jobs;
pub mod last_backup;
#[cfg(test)]
mod layering;
pub mod meta;
pub mod observe;
pub mod on_demand;
pub mod placement;
pub mod quantity;
pub mod replace;
pub mod requests;
pub mod retry;
pub mod security;
pub mod storage;
pub mod subset;
#[cfg(test)]
pub(crate) mod table_sources;
#[cfg(test)]
pub(crate) mod testing;
pub mod tls;

/// The errors of the shared parts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The owner has no name or UID yet, so nothing can reference it.
    #[error("the owner {kind} has no {missing}; it must be read from the API server first")]
    OwnerIncomplete {
        /// The owner's kind.
        kind: String,
        /// `name` or `uid`.
        missing: &'static str,
    },
    /// An object could not be turned into JSON.
    #[error("cannot serialize {what}")]
    Serialize {
        /// What was being serialized.
        what: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// A certificate could not be issued (what, and the encoder's reason).
    #[error("cannot issue a certificate: {0}")]
    Certificate(String),
}

impl From<Error> for crate::driver::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Serialize { source, .. } => crate::driver::Error::Serde(source),
            other => crate::driver::Error::Render(other.to_string()),
        }
    }
}
