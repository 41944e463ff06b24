//! The Jobs the cluster runs: backup Jobs and the backup CronJob.

use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, EnvVar, Volume};
use kube::ResourceExt;

use super::super::api::{
    BackupMethod, BackupRetention, BackupSpec, PostgresCluster, SUPERUSER, SUPERUSER_PASSWORD_KEY,
};
use crate::machines::common::Error;
use crate::machines::common::backup::{self, BackupKind, Destination};
use crate::machines::common::env::{from_field, from_secret, plain};
use crate::machines::common::jobs::PodRecipe;

use super::*;

/// Give a Job's pod `spec.placement`, the scripts, a scratch directory and the
/// `postgres` user (`restricted`).
fn job_pod_extras(pg: &PostgresCluster, spec: &mut JobSpec) {
    if let Some(pod) = spec.template.spec.take() {
        spec.template.spec = Some(restricted(placed(pg, pod)));
    }
    if let Some(pod) = spec.template.spec.as_mut() {
        pod.volumes = Some(vec![
            scripts_volume(pg),
            Volume {
                name: TMP_VOLUME.to_owned(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
        ]);
    }
}

fn job_container(name: &str, image: String, script: &str, env: Vec<EnvVar>) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image),
        command: Some(vec!["bash".to_owned(), format!("{SCRIPTS_PATH}/{script}")]),
        env: Some(env),
        volume_mounts: Some(vec![
            mount(SCRIPTS_VOLUME, SCRIPTS_PATH, true),
            mount(TMP_VOLUME, TMP_PATH, false),
        ]),
        ..Container::default()
    }
}

/// `POSTGRES_USER` and `POSTGRES_PASSWORD`: the superuser the pod scripts connect as.
fn superuser_env(pg: &PostgresCluster) -> [EnvVar; 2] {
    [
        plain("POSTGRES_USER", SUPERUSER),
        from_secret(
            "POSTGRES_PASSWORD",
            &credentials_name(pg),
            SUPERUSER_PASSWORD_KEY,
        ),
    ]
}

fn destination(backup: &BackupSpec) -> Destination {
    Destination {
        s3_endpoint: backup.s3_endpoint.clone(),
        bucket: backup.bucket.clone(),
        prefix: backup.prefix.clone(),
        credentials_secret: backup.credentials_secret.clone(),
        retention: None,
    }
}

/// The backup container's environment: the shared S3 part plus `backup.sh`'s own.
pub fn backup_env(pg: &PostgresCluster, backup: &BackupSpec, kind: BackupKind) -> Vec<EnvVar> {
    let mut env = backup::backup_env(&destination(backup), kind, &primary_host(pg));
    env.extend([
        plain("CLUSTER_NAME", pg.name_any()),
        plain("PRIMARY_HOST", primary_host(pg)),
        plain("PRIMARY_PORT", PORT.to_string()),
    ]);
    env.extend(superuser_env(pg));
    // The application's database, where its data is; a cluster created before the
    // application role has none by its default name, and its data in `postgres`.
    env.push(plain("BACKUP_DATABASE", super::app::database(pg)));
    if pg.spec.database.is_none() {
        env.push(plain("BACKUP_DATABASE_FALLBACK", "postgres"));
    }
    env.extend([
        plain("S3_REGION", backup.region.as_deref().unwrap_or("us-east-1")),
        plain(
            "S3_FORCE_PATH_STYLE",
            if backup.virtual_hosted_style {
                "false"
            } else {
                "true"
            },
        ),
        plain("BACKUP_TMPDIR", TMP_PATH),
    ]);
    env
}

/// The base-backup container's environment (`basebackup.sh`): where the primary's
/// instance manager answers, the token it is asked with ([`super::token`]), and what
/// to ask it.
pub fn base_backup_env(pg: &PostgresCluster, backup: &BackupSpec, kind: BackupKind) -> Vec<EnvVar> {
    let mut env = vec![
        plain(
            "MANAGER_URL",
            format!("http://{}:{METRICS_PORT}", primary_host(pg)),
        ),
        super::token::job_env(pg),
        plain("BACKUP_KIND", <&str>::from(kind)),
        from_field(
            "BACKUP_NAME",
            "metadata.labels['batch.kubernetes.io/job-name']",
        ),
        plain("BACKUP_TIMEOUT_SECONDS", backup.timeout_seconds.to_string()),
    ];
    match &backup.retention {
        Some(BackupRetention { count: Some(n), .. }) => {
            env.push(plain("BACKUP_RETENTION", format!("retention-count={n}")));
        }
        Some(BackupRetention { days: Some(d), .. }) => {
            env.push(plain("BACKUP_RETENTION", format!("retention-days={d}")));
        }
        _ => {}
    }
    env
}

fn backup_pod(pg: &PostgresCluster, backup: &BackupSpec, kind: BackupKind) -> PodRecipe {
    let container = match backup.effective_method() {
        BackupMethod::Dump => job_container(
            "backup",
            backup.image.clone(),
            "backup.sh",
            backup_env(pg, backup, kind),
        ),
        BackupMethod::BaseBackup => job_container(
            "backup",
            backup.image.clone(),
            "basebackup.sh",
            base_backup_env(pg, backup, kind),
        ),
    };
    PodRecipe {
        labels: backup.pod_labels.clone(),
        annotations: backup.pod_annotations.clone(),
        container,
        ..PodRecipe::default()
    }
}

/// The backup Job `key` (on demand or final). `None` without `spec.backup`.
///
/// # Errors
/// [`Error`] if the owner has no UID.
pub fn backup_job(pg: &PostgresCluster, key: &str, kind: BackupKind) -> Result<Option<Job>, Error> {
    let Some(backup) = &pg.spec.backup else {
        return Ok(None);
    };
    let backups = backup::Backups::of(pg, KIND_LABEL, backup.timeout_seconds)?;
    Ok(Some(backups.job(
        key,
        kind,
        backup_pod(pg, backup, kind),
        |spec| {
            job_pod_extras(pg, spec);
        },
    )))
}

/// The scheduled-backup CronJob. `None` without both `spec.backup` and
/// `spec.backupSchedule`.
///
/// # Errors
/// [`Error`] if the owner has no UID or the object does not serialize.
pub fn cronjob(pg: &PostgresCluster) -> Result<Option<CronJob>, Error> {
    let (Some(backup), Some(schedule)) = (&pg.spec.backup, &pg.spec.backup_schedule) else {
        return Ok(None);
    };
    let pod = backup_pod(pg, backup, BackupKind::Scheduled);
    backup::Backups::of(pg, KIND_LABEL, backup.timeout_seconds)?
        .cronjob(schedule, backup.suspend, &pod, |spec| {
            job_pod_extras(pg, spec)
        })
        .map(Some)
}
