//! Backups: the environment every backup container gets, the run-once Jobs of on-demand
//! and final backups, and the CronJob that takes scheduled backups.
//!
//! # Guarantees
//! - S3 credentials reach a backup container only as `secretKeyRef`s to the Secret the
//!   user names: no credential is ever read by Lockstep, copied into a custom resource,
//!   its status, an Event or a log line.
//! - The CronJob never runs two backups at once (`concurrencyPolicy: Forbid`) and keeps
//!   the last few Jobs of each outcome so the last backup's outcome stays readable.
//!
//! # Contract with the backup image
//! The container receives `S3_ENDPOINT`, `S3_BUCKET`, `S3_PREFIX`, `BACKUP_KIND`
//! (`scheduled`, `on-demand` or `final`), `BACKUP_NAME` (the Job's name, unique per
//! run), `BACKUP_SOURCE` (the host to back up from), `BACKUP_RETENTION` when set (how
//! many backups to keep under the prefix; pruning is the image's job), and
//! `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` from the Secret's keys
//! [`ACCESS_KEY_KEY`] and [`SECRET_KEY_KEY`]. It exits 0 when the backup is stored.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::Error;
use super::applied::with_applied_hash;
use super::env::{from_field, from_secret, plain};
use super::jobs::{PodRecipe, Purpose, RunOnce, job_spec};
use super::meta::{JOB_PURPOSE, MAX_CRONJOB_NAME, Owner, child_name, component_labels};

/// The key of the credentials Secret holding the access key id.
pub const ACCESS_KEY_KEY: &str = "accessKey";
/// The key of the credentials Secret holding the secret access key.
pub const SECRET_KEY_KEY: &str = "secretKey";

/// Where backups go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The S3-compatible endpoint URL.
    pub s3_endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// The key prefix within the bucket.
    pub prefix: Option<String>,
    /// The Secret (in the owner's namespace) holding [`ACCESS_KEY_KEY`] and
    /// [`SECRET_KEY_KEY`].
    pub credentials_secret: String,
    /// How many backups to keep, if bounded.
    pub retention: Option<i32>,
}

/// Why a backup runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum BackupKind {
    /// Taken by the CronJob.
    Scheduled,
    /// Requested through the `backup-now` annotation.
    OnDemand,
    /// Taken before the finalizer is released.
    Final,
}

impl BackupKind {
    /// What a Job taking a backup of this kind is for.
    pub fn purpose(self) -> Purpose {
        match self {
            BackupKind::Final => Purpose::FinalBackup,
            BackupKind::Scheduled | BackupKind::OnDemand => Purpose::Backup,
        }
    }
}

/// The environment of a backup container (see the module docs for the contract).
pub fn backup_env(destination: &Destination, kind: BackupKind, source: &str) -> Vec<EnvVar> {
    let mut env = vec![
        plain("S3_ENDPOINT", &destination.s3_endpoint),
        plain("S3_BUCKET", &destination.bucket),
        plain("S3_PREFIX", destination.prefix.clone().unwrap_or_default()),
        plain("BACKUP_KIND", <&str>::from(kind)),
        plain("BACKUP_SOURCE", source),
        from_field(
            "BACKUP_NAME",
            "metadata.labels['batch.kubernetes.io/job-name']",
        ),
    ];
    if let Some(keep) = destination.retention {
        env.push(plain("BACKUP_RETENTION", keep.to_string()));
    }
    env.push(from_secret(
        "AWS_ACCESS_KEY_ID",
        &destination.credentials_secret,
        ACCESS_KEY_KEY,
    ));
    env.push(from_secret(
        "AWS_SECRET_ACCESS_KEY",
        &destination.credentials_secret,
        SECRET_KEY_KEY,
    ));
    env
}

/// The name of an owner's backup CronJob.
pub fn cronjob_name(owner: &str) -> String {
    child_name(owner, "backup", MAX_CRONJOB_NAME)
}

/// What an owner's backup Jobs are made of: the run-once Jobs of on-demand and final
/// backups ([`Backups::job`]) and the scheduled-backup CronJob ([`Backups::cronjob`]).
#[derive(Debug, Clone)]
pub struct Backups<'a> {
    /// The owner.
    pub owner: Owner,
    /// The owner's `app.kubernetes.io/name` (the Jobs' component is `backup`).
    pub kind_label: &'a str,
    /// `activeDeadlineSeconds` of every backup Job.
    pub timeout_seconds: i64,
}

impl<'a> Backups<'a> {
    /// The backup Jobs of `owner`, labelled with `kind_label`, each allowed
    /// `timeout_seconds`.
    ///
    /// # Errors
    /// [`Error::OwnerIncomplete`] if the owner has no name or UID.
    pub fn of<K>(owner: &K, kind_label: &'a str, timeout_seconds: i64) -> Result<Self, Error>
    where
        K: Resource<DynamicType = ()>,
    {
        Ok(Backups {
            owner: Owner::of(owner)?,
            kind_label,
            timeout_seconds,
        })
    }

    fn labels(&self) -> BTreeMap<String, String> {
        component_labels(self.kind_label, &self.owner.name, "backup")
    }

    /// The run-once Job `key` taking a backup of `kind` with `pod`; `extras` completes
    /// its Job spec (volumes, security context) if the machine needs more than the pod.
    pub fn job(
        &self,
        key: &str,
        kind: BackupKind,
        pod: PodRecipe,
        extras: impl FnOnce(&mut JobSpec),
    ) -> Job {
        let mut job = RunOnce {
            owner: &self.owner,
            labels: self.labels(),
            key,
            purpose: kind.purpose(),
            pod,
            deadline: Some(self.timeout_seconds),
        }
        .build();
        if let Some(spec) = job.spec.as_mut() {
            extras(spec);
        }
        job
    }

    /// The scheduled-backup CronJob on `schedule`, its Jobs running `pod` (completed by
    /// `extras` like [`Backups::job`]), stamped with its applied hash.
    ///
    /// # Errors
    /// [`Error::Serialize`] if the object does not serialize.
    pub fn cronjob(
        &self,
        schedule: &str,
        suspend: bool,
        pod: &PodRecipe,
        extras: impl FnOnce(&mut JobSpec),
    ) -> Result<CronJob, Error> {
        let mut labels = self.labels();
        let mut job = job_spec(pod, &labels, Some(self.timeout_seconds));
        extras(&mut job);
        // The CronJob and the Jobs it creates carry their purpose (how Jobs are told apart).
        labels.insert(JOB_PURPOSE.to_owned(), Purpose::Backup.label().to_owned());
        let cj = CronJob {
            metadata: self
                .owner
                .child(cronjob_name(&self.owner.name), labels.clone()),
            spec: CronJobSpec {
                schedule: schedule.to_owned(),
                suspend: Some(suspend),
                concurrency_policy: Some("Forbid".to_owned()),
                starting_deadline_seconds: Some(300),
                successful_jobs_history_limit: Some(3),
                failed_jobs_history_limit: Some(3),
                job_template: JobTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(job),
                },
                ..CronJobSpec::default()
            },
            status: None,
        };
        with_applied_hash(cj, |c| &mut c.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::common::testing;

    fn destination() -> Destination {
        Destination {
            s3_endpoint: "https://s3.example".to_owned(),
            bucket: "b".to_owned(),
            prefix: None,
            credentials_secret: "s3-creds".to_owned(),
            retention: Some(7),
        }
    }

    #[test]
    fn credentials_reach_the_container_only_through_secret_refs() {
        let env = backup_env(&destination(), BackupKind::Final, "db.ns.svc");
        for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            let var = env.iter().find(|e| e.name == name);
            let var = var.map(|v| (v.value.clone(), v.value_from.clone()));
            assert!(
                matches!(&var, Some((None, Some(src))) if src.secret_key_ref.as_ref().is_some_and(|s| s.name == "s3-creds")),
                "{name}: {var:?}"
            );
        }
        assert!(
            env.iter()
                .any(|e| e.name == "BACKUP_KIND" && e.value.as_deref() == Some("final"))
        );
        assert!(
            env.iter()
                .any(|e| e.name == "BACKUP_RETENTION" && e.value.as_deref() == Some("7"))
        );
    }

    #[test]
    fn the_cronjob_never_overlaps_runs_and_labels_its_jobs() {
        let backups = Backups {
            owner: testing::owner_db(),
            kind_label: "distributeddb",
            timeout_seconds: 60,
        };
        let cj = backups.cronjob("0 3 * * *", false, &PodRecipe::default(), |_| {});
        let Ok(cj) = cj else { panic!("{cj:?}") };
        assert_eq!(cj.metadata.name.as_deref(), Some("db-backup"));
        let spec = cj.spec;
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
        let job = spec.job_template.metadata.as_ref();
        assert_eq!(testing::label(job, JOB_PURPOSE).as_deref(), Some("backup"));
    }
}
