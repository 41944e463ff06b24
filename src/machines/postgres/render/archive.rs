//! Continuous WAL archiving (`spec.backup.walArchive`): the instances' pgBackRest
//! settings, as environment variables (pgBackRest reads every option from a
//! `PGBACKREST_<OPTION>` variable, so no configuration file is written), and the CA
//! bundle's volume.
//!
//! The instance manager sees [`WAL_ARCHIVE_ENV`] and then archives
//! (`instance::run::archive`): `archive_mode`, an `archive_command` of `pgbackrest
//! archive-push`, and the stanza created on the primary. The postmaster inherits the
//! environment, so `archive-push` finds the same options.

use k8s_openapi::api::core::v1::{EnvVar, SecretVolumeSource, Volume, VolumeMount};
use kube::ResourceExt;

use super::super::api::{BackupSpec, PostgresCluster};
use super::PGDATA;
use crate::machines::common::env::{from_secret, plain};

/// Set (to `pgbackrest`) when the instance archives its WAL.
pub const WAL_ARCHIVE_ENV: &str = "LOCKSTEP_WAL_ARCHIVE";
/// The tool it archives with.
pub const WAL_ARCHIVE_TOOL: &str = "pgbackrest";
/// The CA bundle's volume.
const CA_VOLUME: &str = "wal-archive-ca";
/// Where it is mounted.
const CA_PATH: &str = "/etc/lockstep/wal-archive-ca";
/// How long one pgBackRest request to the store may take, in seconds: a store that does
/// not answer fails an `archive-push` within about four of these, so the archiver's
/// failure shows within a minute instead of after pgBackRest's default of minutes.
const IO_TIMEOUT_SECONDS: u32 = 10;

/// `(host, port)` of an `http(s)://host[:port][/]` endpoint.
fn host_port(endpoint: &str) -> (String, Option<String>) {
    let rest = endpoint
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
            (host.to_owned(), Some(port.to_owned()))
        }
        _ => (rest.to_owned(), None),
    }
}

/// The repository's path in the bucket: `/<prefix>/<cluster>` (pgBackRest wants it
/// absolute).
#[must_use]
pub fn repository_path(backup: &BackupSpec, cluster: &str) -> String {
    match backup.prefix.as_deref().map(|p| p.trim_matches('/')) {
        Some(prefix) if !prefix.is_empty() => format!("/{prefix}/{cluster}"),
        _ => format!("/{cluster}"),
    }
}

/// The archiving environment of the PostgreSQL container: none without
/// `spec.backup.walArchive`.
#[must_use]
pub fn env(pg: &PostgresCluster) -> Vec<EnvVar> {
    let Some(backup) = &pg.spec.backup else {
        return Vec::new();
    };
    let Some(archive) = &backup.wal_archive else {
        return Vec::new();
    };
    let name = pg.name_any();
    let endpoint = archive
        .s3_endpoint
        .as_deref()
        .unwrap_or(&backup.s3_endpoint);
    let (host, port) = host_port(endpoint);
    let mut env = vec![
        plain(WAL_ARCHIVE_ENV, WAL_ARCHIVE_TOOL),
        plain("PGBACKREST_STANZA", &name),
        plain("PGBACKREST_REPO1_TYPE", "s3"),
        plain("PGBACKREST_REPO1_PATH", repository_path(backup, &name)),
        plain("PGBACKREST_REPO1_S3_BUCKET", &backup.bucket),
        plain("PGBACKREST_REPO1_S3_ENDPOINT", host),
        plain(
            "PGBACKREST_REPO1_S3_REGION",
            backup.region.as_deref().unwrap_or("us-east-1"),
        ),
        plain(
            "PGBACKREST_REPO1_S3_URI_STYLE",
            if backup.virtual_hosted_style {
                "host"
            } else {
                "path"
            },
        ),
        from_secret(
            "PGBACKREST_REPO1_S3_KEY",
            &backup.credentials_secret,
            "accessKey",
        ),
        from_secret(
            "PGBACKREST_REPO1_S3_KEY_SECRET",
            &backup.credentials_secret,
            "secretKey",
        ),
        plain("PGBACKREST_PG1_PATH", PGDATA),
        plain("PGBACKREST_PG1_SOCKET_PATH", "/var/run/postgresql"),
        plain("PGBACKREST_IO_TIMEOUT", IO_TIMEOUT_SECONDS.to_string()),
        // Errors go to stderr, which is the server's log for archive-push and the
        // manager's for stanza-create; no log files on the data volume.
        plain("PGBACKREST_LOG_LEVEL_FILE", "off"),
        plain("PGBACKREST_LOG_LEVEL_CONSOLE", "warn"),
        plain("PGBACKREST_LOCK_PATH", "/tmp/pgbackrest"),
    ];
    if let Some(port) = port {
        env.push(plain("PGBACKREST_REPO1_STORAGE_PORT", port));
    }
    if archive.ca_secret.is_some() {
        env.push(plain(
            "PGBACKREST_REPO1_STORAGE_CA_FILE",
            format!("{CA_PATH}/ca.crt"),
        ));
    }
    env
}

/// The names of the recovery settings the instance manager reads
/// (`instance::run::args`): set only with `spec.bootstrap.recovery`.
pub mod recovery {
    /// The source cluster: its stanza.
    pub const SOURCE: &str = "LOCKSTEP_RECOVERY_SOURCE";
    /// Its repository's path in the bucket.
    pub const REPO_PATH: &str = "LOCKSTEP_RECOVERY_REPO_PATH";
    /// pgBackRest's `--type`: `default` (the end of the archive), `time`, `lsn`, `name`
    /// or `immediate`.
    pub const TARGET_TYPE: &str = "LOCKSTEP_RECOVERY_TARGET_TYPE";
    /// pgBackRest's `--target`, for `time`, `lsn` and `name`.
    pub const TARGET: &str = "LOCKSTEP_RECOVERY_TARGET";
}

/// The recovery environment of the PostgreSQL container: none without
/// `spec.bootstrap.recovery` (or without the store it reads, which the CRD requires).
#[must_use]
pub fn recovery_env(pg: &PostgresCluster) -> Vec<EnvVar> {
    let (Some(recovery), Some(backup)) = (
        pg.spec.bootstrap.as_ref().and_then(|b| b.recovery.as_ref()),
        pg.spec.backup.as_ref(),
    ) else {
        return Vec::new();
    };
    let (kind, target) = target_args(recovery.target.as_ref());
    let mut env = vec![
        plain(recovery::SOURCE, &recovery.source),
        plain(
            recovery::REPO_PATH,
            repository_path(backup, &recovery.source),
        ),
        plain(recovery::TARGET_TYPE, kind),
    ];
    if let Some(target) = target {
        env.push(plain(recovery::TARGET, target));
    }
    env
}

pub use crate::pod::restore::target_args;

/// The CA bundle's volume and its mount, when `spec.backup.walArchive.caSecret` names
/// one.
#[must_use]
pub fn ca_volume(pg: &PostgresCluster) -> Option<(Volume, VolumeMount)> {
    let secret = pg
        .spec
        .backup
        .as_ref()?
        .wal_archive
        .as_ref()?
        .ca_secret
        .clone()?;
    Some((
        Volume {
            name: CA_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: CA_VOLUME.to_owned(),
            mount_path: CA_PATH.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_gives_its_host_and_port_and_the_repository_sits_under_the_prefix() {
        assert_eq!(
            host_port("https://s3.lockstep-s3.svc"),
            ("s3.lockstep-s3.svc".to_owned(), None)
        );
        assert_eq!(
            host_port("https://minio:9000/"),
            ("minio".to_owned(), Some("9000".to_owned()))
        );
        let mut backup = crate::machines::postgres::tests::backup();
        backup.prefix = Some("/backups/".to_owned());
        assert_eq!(repository_path(&backup, "orders"), "/backups/orders");
        backup.prefix = None;
        assert_eq!(repository_path(&backup, "orders"), "/orders");
    }
}
