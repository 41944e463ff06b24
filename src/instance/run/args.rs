//! What `lockstep instance` runs with: its environment, as the operator renders it into
//! the PostgreSQL container (`machines::postgres::render::statefulset`). Every setting
//! is also a flag, for running it by hand.

use std::path::PathBuf;
use std::time::Duration;

/// The settings of `lockstep instance`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstanceArgs {
    /// The data directory: a sub-directory of the volume (its root may hold `lost+found`).
    #[arg(long, env = "PGDATA")]
    pub pgdata: PathBuf,
    /// The port the server listens on.
    #[arg(long, env = "PGPORT", default_value_t = 5432)]
    pub port: u16,
    /// The Unix socket directory (the manager's queries go through it).
    #[arg(long, env = "PG_SOCKET_DIR", default_value = "/var/run/postgresql")]
    pub socket_dir: PathBuf,
    /// Where the PostgreSQL binaries are (default: found on `PATH`).
    #[arg(long, env = "PG_BIN")]
    pub pg_bin: Option<PathBuf>,
    /// The downward-API labels file (`key="value"` per line).
    #[arg(
        long,
        env = "LOCKSTEP_ROLE_FILE",
        default_value = "/etc/lockstep/podinfo/labels"
    )]
    pub role_file: PathBuf,
    /// The downward-API annotations file (`key="value"` per line): the person's
    /// settings come in its `lockstep.dev/postgresql` ([`super::settings`]). None: no
    /// settings.
    #[arg(long, env = "LOCKSTEP_ANNOTATIONS_FILE")]
    pub annotations_file: Option<PathBuf>,
    /// The label holding the role.
    #[arg(long, env = "LOCKSTEP_ROLE_LABEL", default_value = "lockstep.dev/role")]
    pub role_label: String,
    /// The role, overriding the labels file (tests).
    #[arg(long, env = "LOCKSTEP_ROLE")]
    pub role: Option<String>,
    /// The superuser.
    #[arg(long, env = "POSTGRES_USER", default_value = "postgres")]
    pub superuser: String,
    /// The superuser's password (from the Secret; never logged).
    #[arg(long, env = "POSTGRES_PASSWORD", hide_env_values = true)]
    pub superuser_password: String,
    /// A database created at bootstrap, besides `postgres`.
    #[arg(long, env = "POSTGRES_DB")]
    pub database: Option<String>,
    /// The replication role.
    #[arg(long, env = "REPLICATION_USER", default_value = "replicator")]
    pub replication_user: String,
    /// The replication role's password (from the Secret; never logged).
    #[arg(long, env = "REPLICATION_PASSWORD", hide_env_values = true)]
    pub replication_password: String,
    /// The application role, created at bootstrap (`instance::run::app`).
    #[arg(long, env = "APP_USER")]
    pub app_user: Option<String>,
    /// The application role's password (from the Secret `<cluster>-app`; never logged).
    /// Without it no application role is created.
    #[arg(long, env = "APP_PASSWORD", hide_env_values = true)]
    pub app_password: Option<String>,
    /// The database the application role owns, created at bootstrap.
    #[arg(long, env = "APP_DATABASE")]
    pub app_database: Option<String>,
    /// The primary's address (the `<cluster>-rw` Service).
    #[arg(long, env = "PRIMARY_HOST")]
    pub primary_host: Option<String>,
    /// The domain of the members' stable DNS names (`<headless Service>.<namespace>.svc`):
    /// a standby streams from the Lease's holder at `<pod>.<this>`. None: from
    /// [`Self::primary_host`].
    #[arg(long, env = "LOCKSTEP_PEER_DOMAIN")]
    pub peer_domain: Option<String>,
    /// Where the operator projects the cluster's certificates (`<name>-tls`, without
    /// the CA's key). None, or a directory without them: no TLS.
    #[arg(long, env = "LOCKSTEP_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,
    /// Where a person's own server certificate is projected (`spec.certificates`:
    /// `tls.crt`, `tls.key`, `ca.crt`). None, or incomplete: the cluster's own.
    #[arg(long, env = "LOCKSTEP_SERVER_TLS_DIR")]
    pub server_tls_dir: Option<PathBuf>,
    /// The primary's port.
    #[arg(long, env = "PRIMARY_PORT", default_value_t = 5432)]
    pub primary_port: u16,
    /// How long a clone or a rewind waits for a writable primary, in seconds.
    #[arg(long, env = "PRIMARY_WAIT_SECONDS", default_value_t = 300)]
    pub primary_wait_seconds: u64,
    /// The pause between attempts, in seconds.
    #[arg(long, env = "RETRY_INTERVAL_SECONDS", default_value_t = 2)]
    pub retry_interval_seconds: u64,
    /// The name this standby reports to the primary (default: the pod's name).
    #[arg(long, env = "APPLICATION_NAME")]
    pub application_name: Option<String>,
    /// `listen_addresses`.
    #[arg(long, env = "LISTEN_ADDRESSES", default_value = "*")]
    pub listen_addresses: String,
    /// `max_wal_senders` (and `max_replication_slots`).
    #[arg(long, env = "MAX_WAL_SENDERS", default_value_t = 10)]
    pub max_wal_senders: u32,
    /// `wal_keep_size`.
    #[arg(long, env = "WAL_KEEP_SIZE", default_value = "1GB")]
    pub wal_keep_size: String,
    /// Extra `initdb` arguments, split on whitespace.
    #[arg(
        long,
        env = "INITDB_ARGS",
        default_value = "--encoding=UTF8 --locale=C --data-checksums",
        allow_hyphen_values = true
    )]
    pub initdb_args: String,
    /// Extra `postgresql.conf` lines, appended verbatim to the managed `lockstep.conf`.
    #[arg(long, env = "POSTGRES_EXTRA_CONF")]
    pub extra_conf: Option<String>,
    /// When `pg_rewind` of an old primary fails: wipe and re-clone (`true`), or stop.
    #[arg(long, env = "RECLONE_ON_REWIND_FAILURE", default_value_t = true, action = clap::ArgAction::Set)]
    pub reclone_on_rewind_failure: bool,
    /// The bound of a temporary server's start or stop, and of a clean stop, in seconds.
    #[arg(long, env = "START_TIMEOUT_SECONDS", default_value_t = 120)]
    pub start_timeout_seconds: u64,
    /// The primary Lease; unset: no Lease (fencing off).
    #[arg(long, env = "LOCKSTEP_LEASE_NAME")]
    pub lease_name: Option<String>,
    /// The pod's name.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// The pod's UID.
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,
    /// The pod's namespace (the Lease's).
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// `L`, in seconds: published in the Lease at every renewal.
    #[arg(long, env = "LOCKSTEP_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u32,
    /// `T`, in seconds (default `L / 2`): no renewal for this long fences the server.
    #[arg(long, env = "LOCKSTEP_FENCE_SECONDS")]
    pub fence_seconds: Option<u32>,
    /// `R`, in seconds: how often the holder renews.
    #[arg(long, env = "LOCKSTEP_RENEW_SECONDS", default_value_t = crate::pod::fencing::RENEW_SECONDS)]
    pub renew_seconds: u32,
    /// How long a standby may not stream while a writable primary answers before it
    /// restarts to rejoin it, in seconds.
    #[arg(long, env = "STANDBY_STALL_SECONDS", default_value_t = 20)]
    pub standby_stall_seconds: u64,
    /// How long a writable server may leave the WAL it wrote unflushed, its flush
    /// position never moving, before it is stopped at once, in seconds.
    #[arg(long, env = "LOCKSTEP_WAL_STALL_SECONDS", default_value_t = 30)]
    pub wal_stall_seconds: u64,
    /// The bound of one Lease request, in seconds.
    #[arg(long, env = "LEASE_REQUEST_SECONDS", default_value_t = 1)]
    pub lease_request_seconds: u64,
    /// The tool that archives the WAL ([`super::archive`]; only `pgbackrest`, configured
    /// by its `PGBACKREST_*` variables); none: no archiving.
    #[arg(long, env = "LOCKSTEP_WAL_ARCHIVE", value_parser = [super::archive::PGBACKREST])]
    pub wal_archive: Option<String>,
    /// Bootstrap by restoring this cluster's pgBackRest repository (its stanza) instead of
    /// `initdb` (`spec.bootstrap.recovery`); the other `LOCKSTEP_RECOVERY_*` settings
    /// say where it is and how far to replay.
    #[arg(long, env = "LOCKSTEP_RECOVERY_SOURCE")]
    pub recovery_source: Option<String>,
    /// The source repository's path in the bucket.
    #[arg(long, env = "LOCKSTEP_RECOVERY_REPO_PATH")]
    pub recovery_repo_path: Option<String>,
    /// pgBackRest's restore `--type`.
    #[arg(long, env = "LOCKSTEP_RECOVERY_TARGET_TYPE", default_value = "default",
          value_parser = ["default", "time", "lsn", "name", "immediate"])]
    pub recovery_target_type: String,
    /// pgBackRest's restore `--target` (for `time`, `lsn` and `name`).
    #[arg(long, env = "LOCKSTEP_RECOVERY_TARGET")]
    pub recovery_target: Option<String>,
    /// The bound of a restore and of the recovery that follows it, in seconds.
    #[arg(long, env = "LOCKSTEP_RECOVERY_TIMEOUT_SECONDS", default_value_t = 6 * 3600)]
    pub recovery_timeout_seconds: u64,
    /// The port `/metrics` is served on, on every address ([`super::metrics`]); none
    /// without it.
    #[arg(long, env = "LOCKSTEP_METRICS_PORT")]
    pub metrics_port: Option<u16>,
    /// The file holding the endpoint token a write to that port must carry
    /// ([`super::auth`]); none: every write is refused.
    #[arg(long, env = "LOCKSTEP_ENDPOINT_TOKEN_FILE")]
    pub endpoint_token_file: Option<PathBuf>,
}

impl InstanceArgs {
    /// `L`.
    #[must_use]
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_seconds.into())
    }

    /// `T`: the fence's deadline after the start of the last accepted renewal.
    #[must_use]
    pub fn fence(&self) -> Duration {
        Duration::from_secs(
            self.fence_seconds
                .unwrap_or(crate::pod::fencing::tenure_seconds(self.lease_seconds))
                .into(),
        )
    }

    /// `R`.
    #[must_use]
    pub fn renew(&self) -> Duration {
        Duration::from_secs(self.renew_seconds.into())
    }

    /// The Lease's holder identity of this pod: `<pod name>/<pod uid>`.
    #[must_use]
    pub fn holder(&self) -> Option<String> {
        Some(format!(
            "{}/{}",
            self.pod_name.as_ref()?,
            self.pod_uid.as_ref()?
        ))
    }

    /// The path of a PostgreSQL binary: under [`Self::pg_bin`] if set, else its bare
    /// name (found on `PATH`).
    #[must_use]
    pub fn binary(&self, name: &str) -> PathBuf {
        self.pg_bin
            .as_ref()
            .map_or_else(|| PathBuf::from(name), |dir| dir.join(name))
    }
}

/// The settings `argv` (after the program's name) parses to, as tests write them.
///
/// # Panics
/// If `argv` does not parse.
#[cfg(test)]
#[must_use]
pub fn parsed(argv: &[&str]) -> InstanceArgs {
    use clap::Parser;
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: InstanceArgs,
    }
    Cli::try_parse_from(std::iter::once("lockstep").chain(argv.iter().copied()))
        .expect("valid flags")
        .args
}
