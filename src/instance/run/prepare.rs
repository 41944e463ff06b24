//! Preparing `$PGDATA` before the server starts: bootstrap, local promotion, clone,
//! rewind, and the managed configuration. Each step runs PostgreSQL's own tools as
//! bounded child processes.
//!
//! # Guarantees
//! - A bootstrap or a clone runs behind a marker file beside `$PGDATA` (on the same
//!   volume): one that was interrupted is seen ([`Layout::interrupted`]) and redone
//!   from an empty directory, never mistaken for data.
//! - A non-empty `$PGDATA` without `PG_VERSION` and without a marker of ours is never
//!   written over ([`PrepareError::Foreign`]).
//! - The managed configuration (`lockstep.conf`, `pg_hba.conf`, `standby.signal`) is
//!   rewritten before every start, so a changed setting takes effect at the next start;
//!   `primary_conninfo` lines that `pg_basebackup -R` or `pg_rewind -R` leave in
//!   `postgresql.auto.conf` are removed (read last, they would win).
//! - Passwords reach the tools only through their environment (`PGPASSWORD`) or stdin,
//!   never argv, and are never logged.
//! - Every child process is bounded: a temporary server's start and stop by
//!   `START_TIMEOUT_SECONDS` (`pg_ctl -t`), the wait for a writable primary by
//!   `PRIMARY_WAIT_SECONDS`, and every query by [`Psql::bound`].
//!
//! # Errors
//! [`PrepareError`].

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::config::InstanceArgs;
use super::quote;
use super::settings::Settings;
use super::sql::Psql;
use super::tls::Transport;
use crate::instance::observe::Upstream;
use crate::machines::postgres::in_place;
use crate::machines::postgres::recovery::RECOVERY_FAILED;
use crate::machines::postgres::render::archive::target_args;
use crate::machines::postgres::settings::PostgresqlSpec;

/// What went wrong preparing `$PGDATA`.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A file of `$PGDATA` or beside it could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `$PGDATA` holds something that is no data directory of ours.
    #[error(
        "PGDATA={0} is not empty but holds no PostgreSQL data directory (no PG_VERSION); refusing to write over it"
    )]
    Foreign(PathBuf),
    /// A tool could not be started.
    #[error("starting {tool}: {source}")]
    Spawn {
        /// The tool.
        tool: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A tool failed or outlasted its bound.
    #[error("{tool} failed: {status}")]
    Tool {
        /// The tool.
        tool: String,
        /// Its exit status, or the bound it outlasted.
        status: String,
    },
    /// A restore (`spec.bootstrap.recovery`) failed, or its recovery did not reach the
    /// target. Its text begins with [`RECOVERY_FAILED`], which the operator looks for in
    /// the container's termination message.
    #[error("{RECOVERY_FAILED}{0}")]
    Recovery(String),
    /// No writable primary answered within the bound.
    #[error(
        "no writable primary at {host}:{port} within {seconds} s (PRIMARY_WAIT_SECONDS): {last}"
    )]
    NoPrimary {
        /// The primary's host.
        host: String,
        /// Its port.
        port: u16,
        /// The bound.
        seconds: u64,
        /// The last answer.
        last: String,
    },
    /// A setting needed for this step is missing.
    #[error("{0} is required for this step")]
    Missing(&'static str),
    /// A tool could not connect to the primary at its start (`pg_rewind` makes one
    /// connection, first of all): it changed nothing.
    #[error("{tool} could not connect to the primary: {message}")]
    Unreached {
        /// The tool.
        tool: String,
        /// What it said.
        message: String,
    },
}

impl PrepareError {
    /// Whether the step failed before it changed anything because it never reached the
    /// primary ([`crate::instance::observe::Finished::unreached`]).
    #[must_use]
    pub fn unreached(&self) -> bool {
        matches!(self, Self::NoPrimary { .. } | Self::Unreached { .. })
    }
}

/// Whether a libpq client's error output says its connection could not be made (as
/// opposed to lost later, which libpq words differently: "server closed the
/// connection unexpectedly"). PostgreSQL 14 on: `connection to server at "…" (…), port
/// … failed: …` or `connection to server on socket "…" failed: …`; before: `could not
/// connect to server`.
#[must_use]
pub fn connection_failed(stderr: &str) -> bool {
    stderr.lines().any(|line| {
        (line.contains("connection to server at ")
            || line.contains("connection to server on socket "))
            && line.contains(" failed: ")
            || line.contains("could not connect to server")
    })
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PrepareError {
    let path = path.to_owned();
    move |source| PrepareError::Io { what, path, source }
}

/// The files of `$PGDATA` and beside it that the manager reads and writes.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `$PGDATA`.
    pub pgdata: PathBuf,
}

impl Layout {
    /// The marker of a bootstrap in progress.
    #[must_use]
    pub fn initdb_marker(&self) -> PathBuf {
        self.beside("lockstep-initdb-in-progress")
    }

    /// The marker of a clone in progress.
    #[must_use]
    pub fn clone_marker(&self) -> PathBuf {
        self.beside("lockstep-clone-in-progress")
    }

    fn beside(&self, suffix: &str) -> PathBuf {
        let mut name = self.pgdata.as_os_str().to_owned();
        name.push(".");
        name.push(suffix);
        PathBuf::from(name)
    }

    /// Whether `PG_VERSION` is there.
    #[must_use]
    pub fn has_data(&self) -> bool {
        self.pgdata.join("PG_VERSION").is_file()
    }

    /// Whether `standby.signal` is there.
    #[must_use]
    pub fn is_standby(&self) -> bool {
        self.pgdata.join("standby.signal").is_file()
    }

    /// Whether a bootstrap or a clone was interrupted.
    #[must_use]
    pub fn interrupted(&self) -> bool {
        self.initdb_marker().exists() || self.clone_marker().exists()
    }

    /// Whether `$PGDATA` is missing or empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        fs::read_dir(&self.pgdata).map_or(true, |mut d| d.next().is_none())
    }

    /// Removes everything inside `$PGDATA`.
    ///
    /// # Errors
    /// [`PrepareError::Io`].
    pub fn wipe(&self) -> Result<(), PrepareError> {
        tracing::warn!(pgdata = %self.pgdata.display(), "removing the contents of PGDATA");
        let Ok(entries) = fs::read_dir(&self.pgdata) else {
            return Ok(());
        };
        for entry in entries {
            let path = entry.map_err(io("listing", &self.pgdata))?.path();
            if path.is_dir() && !path.is_symlink() {
                fs::remove_dir_all(&path).map_err(io("removing", &path))?;
            } else {
                fs::remove_file(&path).map_err(io("removing", &path))?;
            }
        }
        Ok(())
    }

    /// Creates `$PGDATA` (mode 0700) if needed.
    ///
    /// # Errors
    /// [`PrepareError::Io`]: its volume is not writable by this user.
    pub fn create(&self) -> Result<(), PrepareError> {
        fs::create_dir_all(&self.pgdata).map_err(io("creating", &self.pgdata))?;
        fs::set_permissions(&self.pgdata, fs::Permissions::from_mode(0o700))
            .map_err(io("chmod 0700", &self.pgdata))
    }
}

/// What `pg_controldata` says about `$PGDATA`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Control {
    /// `Database cluster state` (`shut down`, `shut down in recovery`, `in production`, …).
    pub state: String,
    /// `Latest checkpoint location`.
    pub checkpoint: Option<String>,
    /// `Latest checkpoint's TimeLineID`.
    pub timeline: Option<u32>,
}

impl Control {
    /// Reads `pg_controldata`'s output.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        Self {
            state: field("Database cluster state").unwrap_or_default(),
            checkpoint: field("Latest checkpoint location"),
            timeline: field("Latest checkpoint's TimeLineID").and_then(|t| t.parse().ok()),
        }
    }
}

/// Where a restore reads from and how far it replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreFrom {
    /// The pgBackRest stanza (a cluster's name).
    pub stanza: String,
    /// Its repository's path in the bucket.
    pub repo: String,
    /// pgBackRest's restore `--type`.
    pub kind: String,
    /// pgBackRest's restore `--target`, for `time`, `lsn` and `name`.
    pub target: Option<String>,
}

/// The preparation steps, with what they run with.
#[derive(Debug, Clone)]
pub struct Prepare {
    /// The settings.
    pub args: InstanceArgs,
    /// `$PGDATA` and its markers.
    pub layout: Layout,
    /// Whom a standby's configuration streams from (the `-rw` Service until the agent
    /// says otherwise).
    pub upstream: Upstream,
}

impl Prepare {
    /// The steps for `args`.
    #[must_use]
    pub fn new(args: InstanceArgs) -> Self {
        let layout = Layout {
            pgdata: args.pgdata.clone(),
        };
        Self {
            args,
            layout,
            upstream: Upstream::Service,
        }
    }

    /// The host a standby streams from, by its field `upstream`: the `-rw` Service, the
    /// holder's pod by its stable DNS name (`<pod>.<LOCKSTEP_PEER_DOMAIN>`; the Service
    /// without a peer domain), or none.
    #[must_use]
    pub fn streams_from(&self) -> Option<String> {
        match &self.upstream {
            Upstream::Service => self.args.primary_host.clone(),
            Upstream::Holder(holder) => {
                let pod = holder.split('/').next().unwrap_or_default();
                match &self.args.peer_domain {
                    Some(domain) if !pod.is_empty() => Some(format!("{pod}.{domain}")),
                    _ => self.args.primary_host.clone(),
                }
            }
            Upstream::Nobody => None,
        }
    }

    fn start_timeout(&self) -> Duration {
        Duration::from_secs(self.args.start_timeout_seconds)
    }

    /// How this instance's connections are secured: by the certificates in
    /// `LOCKSTEP_TLS_DIR`, if every one is there.
    #[must_use]
    pub fn transport(&self) -> Transport {
        Transport::of(
            self.args.tls_dir.as_deref(),
            self.args.server_tls_dir.as_deref(),
        )
    }

    /// `psql` on the local server, over the socket.
    #[must_use]
    pub fn local(&self) -> Psql {
        Psql {
            binary: self.args.binary("psql"),
            host: self.args.socket_dir.display().to_string(),
            port: self.args.port,
            user: self.args.superuser.clone(),
            password: None,
            connect_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(2),
        }
    }

    /// `psql` on the primary, as `user` with `password`.
    fn upstream(&self, user: &str, password: &str) -> Result<Psql, PrepareError> {
        Ok(Psql {
            binary: self.args.binary("psql"),
            host: self
                .args
                .primary_host
                .clone()
                .ok_or(PrepareError::Missing("PRIMARY_HOST"))?,
            port: self.args.primary_port,
            user: user.to_owned(),
            password: Some(password.to_owned()),
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
        })
    }

    /// Runs `tool args…` within `bound` (killed past it); its output goes to ours.
    async fn run(
        &self,
        tool: &str,
        args: &[String],
        env: &[(&str, &str)],
        bound: Duration,
    ) -> Result<(), PrepareError> {
        self.run_program(self.args.binary(tool), tool, args, env, bound)
            .await
    }

    /// [`Self::run`] for a program found by its own path (not a PostgreSQL binary).
    async fn run_program(
        &self,
        program: PathBuf,
        tool: &str,
        args: &[String],
        env: &[(&str, &str)],
        bound: Duration,
    ) -> Result<(), PrepareError> {
        let mut child = tool_command(program, args, env, Stdio::inherit())
            .spawn()
            .map_err(|source| PrepareError::Spawn {
                tool: tool.to_owned(),
                source,
            })?;
        let status = bounded(tool, bound, child.wait()).await?;
        if status.success() {
            Ok(())
        } else {
            Err(PrepareError::Tool {
                tool: tool.to_owned(),
                status: status.to_string(),
            })
        }
    }

    /// [`Self::run_program`], its standard error also kept (the last 4 KiB) while it
    /// goes to ours line by line.
    async fn run_capturing(
        &self,
        program: PathBuf,
        tool: &str,
        args: &[String],
        env: &[(&str, &str)],
        bound: Duration,
    ) -> (Result<(), PrepareError>, String) {
        use tokio::io::AsyncBufReadExt;
        const KEPT: usize = 4096;
        let mut child = match tool_command(program, args, env, Stdio::piped()).spawn() {
            Ok(child) => child,
            Err(source) => {
                let tool = tool.to_owned();
                return (Err(PrepareError::Spawn { tool, source }), String::new());
            }
        };
        let Some(stderr) = child.stderr.take() else {
            return (
                Err(PrepareError::Missing("a piped standard error")),
                String::new(),
            );
        };
        let tee = tokio::spawn(async move {
            let mut kept = String::new();
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
                kept.push_str(&line);
                kept.push('\n');
                if kept.len() > KEPT {
                    let cut = kept.len() - KEPT;
                    let cut = (cut..kept.len())
                        .find(|i| kept.is_char_boundary(*i))
                        .unwrap_or(kept.len());
                    kept.drain(..cut);
                }
            }
            kept
        });
        let status = bounded(tool, bound, child.wait()).await;
        // The pipe closes when the tool exits (or is killed on drop after its bound).
        drop(child);
        let kept = tee.await.unwrap_or_default();
        let result = status.and_then(|status| {
            if status.success() {
                Ok(())
            } else {
                Err(PrepareError::Tool {
                    tool: tool.to_owned(),
                    status: status.to_string(),
                })
            }
        });
        (result, kept)
    }

    /// `pg_controldata` of `$PGDATA`.
    ///
    /// # Errors
    /// [`PrepareError`] if it cannot run.
    pub async fn control(&self) -> Result<Control, PrepareError> {
        let output = Command::new(self.args.binary("pg_controldata"))
            .arg("-D")
            .arg(&self.layout.pgdata)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(10), output)
            .await
            .map_err(|_| PrepareError::Tool {
                tool: "pg_controldata".to_owned(),
                status: "no end within 10 s".to_owned(),
            })?
            .map_err(|source| PrepareError::Spawn {
                tool: "pg_controldata".to_owned(),
                source,
            })?;
        Ok(Control::parse(&String::from_utf8_lossy(&output.stdout)))
    }

    /// `lockstep.conf` for a primary or a standby: the person's parameters (`user`)
    /// first, then the managed settings, which win over any of the same name (read
    /// later).
    #[must_use]
    pub fn lockstep_conf(&self, standby: bool, user: &PostgresqlSpec, synchronous: &str) -> String {
        let a = &self.args;
        let mut lines = vec![
            "# Managed by lockstep instance; rewritten on every start. Do not edit.".to_owned(),
            // Lockstep's defaults, before the person's parameters, which may override them.
            // A standby whose primary went away (a failover, a switchover) tries its
            // new one every second, not every 5 s: under synchronous replication the
            // new primary's first commit waits for it.
            "wal_retrieve_retry_interval = '1s'".to_owned(),
        ];
        if !user.parameters.is_empty() {
            lines.push(super::settings::PARAMETERS_SECTION.to_owned());
            lines.extend(Settings::parameter_lines(user));
            lines.push("# managed by Lockstep".to_owned());
        }
        lines.extend([
            format!("listen_addresses = {}", quote::conf(&a.listen_addresses)),
            format!("port = {}", a.port),
            format!(
                "unix_socket_directories = {}",
                quote::conf(&a.socket_dir.display().to_string())
            ),
            "wal_level = replica".to_owned(),
            format!("max_wal_senders = {}", a.max_wal_senders),
            format!("max_replication_slots = {}", a.max_wal_senders),
            format!("wal_keep_size = {}", quote::conf(&a.wal_keep_size)),
            "hot_standby = on".to_owned(),
            "wal_log_hints = on".to_owned(),
            "password_encryption = 'scram-sha-256'".to_owned(),
            "recovery_target_timeline = 'latest'".to_owned(),
            // spec.synchronous (empty: asynchronous), the same on every member.
            format!("synchronous_standby_names = {}", quote::conf(synchronous)),
        ]);
        let transport = self.transport();
        lines.extend(transport.conf_lines());
        if standby && let Some(host) = &self.streams_from() {
            let conninfo = format!(
                "host={} port={} user={} {} application_name={} connect_timeout=10",
                quote::conninfo(host),
                a.primary_port,
                quote::conninfo(&a.replication_user),
                transport.replication_conninfo(&a.replication_password),
                quote::conninfo(&self.application_name()),
            );
            lines.push(format!("primary_conninfo = {}", quote::conf(&conninfo)));
        }
        if a.wal_archive.is_some() {
            lines.extend(super::archive::conf_lines());
        }
        if let Some(extra) = &a.extra_conf {
            lines.push("# POSTGRES_EXTRA_CONF".to_owned());
            lines.push(extra.clone());
        }
        lines.join("\n") + "\n"
    }

    /// The name this server streams under (`application_name`): the pod's by default.
    #[must_use]
    pub fn application_name(&self) -> String {
        self.args
            .application_name
            .clone()
            .or_else(|| self.args.pod_name.clone())
            .unwrap_or_else(|| "lockstep-replica".to_owned())
    }

    /// Writes the managed configuration for a primary or a standby, with the person's
    /// settings `user`, and gives `$PGDATA` the mode PostgreSQL requires (`0700`): the
    /// kubelet applies a pod's `fsGroup` to a volume by adding group `rwx` and setgid to
    /// everything on it when it mounts it, and PostgreSQL refuses to start on a data
    /// directory open to its group for writing (as CloudNativePG's instance manager,
    /// this one sets the mode back before every start).
    ///
    /// # Errors
    /// [`PrepareError::Io`].
    pub fn write_config(
        &self,
        standby: bool,
        user: &PostgresqlSpec,
        synchronous: &str,
    ) -> Result<(), PrepareError> {
        let dir = &self.layout.pgdata;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io("chmod 0700", dir))?;
        write_private(
            &dir.join("lockstep.conf"),
            &self.lockstep_conf(standby, user, synchronous),
        )?;
        let conf = dir.join("postgresql.conf");
        let text = fs::read_to_string(&conf).map_err(io("reading", &conf))?;
        if !text.contains("\ninclude_if_exists = 'lockstep.conf'") {
            let mut file = fs::OpenOptions::new()
                .append(true)
                .open(&conf)
                .map_err(io("opening", &conf))?;
            file.write_all(b"\n# lockstep managed settings\ninclude_if_exists = 'lockstep.conf'\n")
                .map_err(io("writing", &conf))?;
        }
        let auto = dir.join("postgresql.auto.conf");
        if let Ok(text) = fs::read_to_string(&auto) {
            let kept: String = text
                .lines()
                .filter(|line| {
                    let key = line.trim_start();
                    !(key.starts_with("primary_conninfo") || key.starts_with("primary_slot_name"))
                })
                .map(|line| format!("{line}\n"))
                .collect();
            write_private(&auto, &kept)?;
        }
        let transport = self.transport();
        if transport == Transport::Plain
            && let Some(tls) = &self.args.tls_dir
        {
            tracing::warn!(dir = %tls.display(), "no certificates: serving without TLS, the replication role by password (a cluster created before its operator issued certificates)");
        }
        if let (Transport::Tls { server, .. }, Some(own)) = (&transport, &self.args.server_tls_dir)
            && server != own
        {
            tracing::warn!(dir = %own.display(), "spec.certificates names a Secret without tls.crt, tls.key and ca.crt (or none at all): serving the cluster's own certificate");
        }
        write_private(
            &dir.join("pg_hba.conf"),
            &pg_hba(user, &transport, &self.args.replication_user),
        )?;
        let signal = dir.join("standby.signal");
        if standby {
            write_private(&signal, "")?;
        } else {
            for name in ["standby.signal", "recovery.signal"] {
                let path = dir.join(name);
                if path.exists() {
                    fs::remove_file(&path).map_err(io("removing", &path))?;
                }
            }
        }
        Ok(())
    }

    /// Checks the parameters in the files with PostgreSQL itself (`postgres -C`, which
    /// reads the configuration as a start would, without starting): the names of the
    /// parameters it refuses, empty when it accepts them all.
    ///
    /// # Errors
    /// [`PrepareError::Spawn`] when `postgres` cannot run; [`PrepareError::Tool`] when
    /// it outlasts `START_TIMEOUT_SECONDS`.
    pub async fn refused_parameters(&self) -> Result<Vec<(String, String)>, PrepareError> {
        let tool = "postgres -C";
        let bound = self.start_timeout();
        let run = Command::new(self.args.binary("postgres"))
            .arg("-D")
            .arg(&self.layout.pgdata)
            .args(["-C", "port"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = bounded(tool, bound, run).await?;
        if output.status.success() {
            return Ok(Vec::new());
        }
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        Ok(super::settings::named_parameters(&stderr)
            .into_iter()
            .map(|name| {
                let quoted = format!("\"{name}\"");
                let line = stderr
                    .lines()
                    .find(|l| l.contains(&quoted))
                    .unwrap_or_default();
                (name, line.trim().to_owned())
            })
            .collect())
    }

    async fn temp_start(&self) -> Result<(), PrepareError> {
        tracing::info!("starting a temporary local-only server");
        let t = self.args.start_timeout_seconds.to_string();
        let args = [
            "-D",
            &self.pgdata_str(),
            "-w",
            "-t",
            &t,
            "-o",
            "-c listen_addresses=''",
            "start",
        ];
        self.run(
            "pg_ctl",
            &strings(&args),
            &[],
            self.start_timeout() + Duration::from_secs(5),
        )
        .await
    }

    async fn temp_stop(&self) -> Result<(), PrepareError> {
        tracing::info!("stopping the temporary server");
        let t = self.args.start_timeout_seconds.to_string();
        let args = [
            "-D",
            &self.pgdata_str(),
            "-w",
            "-t",
            &t,
            "-m",
            "fast",
            "stop",
        ];
        self.run(
            "pg_ctl",
            &strings(&args),
            &[],
            self.start_timeout() + Duration::from_secs(5),
        )
        .await
    }

    fn pgdata_str(&self) -> String {
        self.layout.pgdata.display().to_string()
    }

    /// `initdb`, the superuser's password, the replication role, the application role
    /// and its database ([`super::app`]), behind the bootstrap marker.
    ///
    /// # Errors
    /// [`PrepareError`]; [`PrepareError::Foreign`] for a foreign `$PGDATA`.
    pub async fn bootstrap(&self) -> Result<(), PrepareError> {
        let marker = self.layout.initdb_marker();
        if !self.layout.is_empty() {
            if marker.exists() {
                tracing::warn!("a previous bootstrap was interrupted; starting it over");
                self.layout.wipe()?;
            } else {
                return Err(PrepareError::Foreign(self.layout.pgdata.clone()));
            }
        }
        self.layout.create()?;
        write_private(&marker, "")?;
        if let Some(from) = self.restore_from()? {
            // Every failure of a restore names itself as one (the operator reads it).
            self.restore(&from).await.map_err(|e| match e {
                PrepareError::Recovery(_) => e,
                other => PrepareError::Recovery(other.to_string()),
            })?;
            fs::remove_file(&marker).map_err(io("removing", &marker))?;
            return Ok(());
        }
        let a = &self.args;
        tracing::info!(superuser = %a.superuser, "initializing a new cluster");
        let mut args = vec![
            "-D".to_owned(),
            self.pgdata_str(),
            "-U".to_owned(),
            a.superuser.clone(),
            "--auth-local=trust".to_owned(),
            "--auth-host=scram-sha-256".to_owned(),
        ];
        args.extend(a.initdb_args.split_whitespace().map(str::to_owned));
        self.run("initdb", &args, &[], Duration::from_secs(600))
            .await?;
        // The temporary server is never synchronous: it would wait for standbys to have
        // its own writes.
        self.write_config(false, &PostgresqlSpec::default(), "")?;
        self.temp_start().await?;
        let mut sql = format!(
            "ALTER ROLE {} WITH PASSWORD {};\n",
            quote::sql_ident(&a.superuser),
            quote::sql_literal(&a.superuser_password)
        );
        if a.replication_user != a.superuser {
            sql += &format!(
                "CREATE ROLE {} WITH LOGIN REPLICATION PASSWORD {};\n",
                quote::sql_ident(&a.replication_user),
                quote::sql_literal(&a.replication_password)
            );
        }
        if a.app_user.is_some() && a.app_password.as_deref().unwrap_or_default().is_empty() {
            tracing::warn!(
                "no application password (its Secret is missing): no application role is created"
            );
        }
        // The application role and its database, or `POSTGRES_DB` alone.
        sql += &super::app::bootstrap_sql(a);
        let roles = self.psql_stdin(&sql).await;
        if let Err(e) = roles {
            let _ = self.temp_stop().await;
            return Err(e);
        }
        self.temp_stop().await?;
        fs::remove_file(&marker).map_err(io("removing", &marker))?;
        tracing::info!(superuser = %a.superuser, replication = %a.replication_user, app = ?a.app_user, "bootstrap complete");
        Ok(())
    }

    /// What a bootstrap restores instead of running `initdb`, if anything: the in-place
    /// restore the operator wrote on this pod ([`in_place::RESTORE_ANNOTATION`]: this
    /// cluster's own repository, from its `PGBACKREST_*` settings), else
    /// `spec.bootstrap.recovery` (the `LOCKSTEP_RECOVERY_*` settings).
    ///
    /// # Errors
    /// [`PrepareError::Recovery`] for an annotation that cannot be read, or an in-place
    /// restore without the repository's settings: never `initdb` in place of a restore.
    fn restore_from(&self) -> Result<Option<RestoreFrom>, PrepareError> {
        let a = &self.args;
        let annotations = a
            .annotations_file
            .as_ref()
            .and_then(|f| fs::read_to_string(f).ok())
            .unwrap_or_default();
        let asked = in_place::from_annotations(&annotations).map_err(PrepareError::Recovery)?;
        if let Some(request) = asked {
            let setting = |name: &str| {
                std::env::var(name).map_err(|_| {
                    PrepareError::Recovery(format!(
                        "an in-place restore ({}) needs the repository's {name}: spec.backup.walArchive is not set on this pod",
                        request.token
                    ))
                })
            };
            let (kind, target) = target_args(request.target.as_ref());
            return Ok(Some(RestoreFrom {
                stanza: setting("PGBACKREST_STANZA")?,
                repo: setting("PGBACKREST_REPO1_PATH")?,
                kind: kind.to_owned(),
                target,
            }));
        }
        Ok(a.recovery_source.clone().map(|stanza| RestoreFrom {
            stanza,
            repo: a.recovery_repo_path.clone().unwrap_or_default(),
            kind: a.recovery_target_type.clone(),
            target: a.recovery_target.clone(),
        }))
    }

    /// `pgbackrest restore` of `from`'s repository into the empty data directory (a
    /// bootstrap from another cluster's backups, or an in-place restore from this
    /// cluster's own), a local-only start that replays the archive up to the target and
    /// promotes there, then this cluster's passwords and the recovery settings reset,
    /// and a stop. No client reaches the server before the target is reached: it listens
    /// on no address until this returns.
    ///
    /// # Errors
    /// [`PrepareError`]; [`PrepareError::Recovery`] when the server stops before it
    /// reached the target (a target beyond the archive), or outlasts the bound.
    async fn restore(&self, from: &RestoreFrom) -> Result<(), PrepareError> {
        let a = &self.args;
        let bound = Duration::from_secs(a.recovery_timeout_seconds);
        let source = from.stanza.as_str();
        let repo = from.repo.as_str();
        let kind = from.kind.as_str();
        tracing::info!(%source, %repo, kind, target = ?from.target, "restoring the source's backups");
        let repo_option = format!("--repo1-path={repo}");
        let mut args = vec![
            "restore".to_owned(),
            format!("--stanza={source}"),
            repo_option.clone(),
            format!("--pg1-path={}", self.pgdata_str()),
            format!("--type={kind}"),
            // The WAL comes from the source's archive, whatever this cluster's own
            // archive settings say.
            format!(
                "--recovery-option=restore_command=pgbackrest --stanza={source} {repo_option} archive-get %f \"%p\""
            ),
        ];
        if let Some(target) = &from.target {
            args.push(format!("--target={target}"));
        }
        if kind != "default" {
            args.push("--target-action=promote".to_owned());
        }
        super::archive::pgbackrest(super::archive::PGBACKREST, &args, bound)
            .await
            .map_err(|error| PrepareError::Recovery(format!("pgbackrest restore: {error}")))?;
        self.write_config(false, &PostgresqlSpec::default(), "")?;
        // A primary's configuration, in archive recovery until the target (the signal
        // pgBackRest wrote, which a primary's configuration removes).
        write_private(&self.layout.pgdata.join("recovery.signal"), "")?;
        // Replays to the target, then promotes: started without waiting, then watched.
        let start = [
            "-D",
            &self.pgdata_str(),
            "-W",
            "-o",
            "-c listen_addresses=''",
            "start",
        ];
        self.run("pg_ctl", &strings(&start), &[], self.start_timeout())
            .await?;
        let local = self.local();
        let started = tokio::time::Instant::now();
        let pid_file = self.layout.pgdata.join("postmaster.pid");
        // The postmaster writes its pid file at once; give it a moment before its absence
        // means it stopped.
        let mut seen_running = false;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let running = pid_file.exists();
            seen_running |= running;
            match local.value("SELECT pg_is_in_recovery()").await {
                Ok(Some(v)) if v == "f" => break,
                _ if !running && (seen_running || started.elapsed() >= Duration::from_secs(10)) => {
                    return Err(PrepareError::Recovery(format!(
                        "the server stopped before recovery reached the target ({kind}{}): \
                         the target is beyond what the archive of {source} holds, or before its \
                         first backup; its log above says which",
                        from.target
                            .as_deref()
                            .map(|t| format!(" {t}"))
                            .unwrap_or_default()
                    )));
                }
                _ if started.elapsed() >= bound => {
                    let _ = self.temp_stop().await;
                    return Err(PrepareError::Recovery(format!(
                        "recovery did not reach its target within {} s",
                        bound.as_secs()
                    )));
                }
                _ => {}
            }
        }
        tracing::info!("recovery reached its target and promoted");
        let mut sql = format!(
            "ALTER ROLE {} WITH PASSWORD {};\n",
            quote::sql_ident(&a.superuser),
            quote::sql_literal(&a.superuser_password)
        );
        if a.replication_user != a.superuser {
            let role = quote::sql_ident(&a.replication_user);
            sql += &format!(
                "SELECT format('CREATE ROLE %I', {}) WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {}) \\gexec\n",
                quote::sql_literal(&a.replication_user),
                quote::sql_literal(&a.replication_user)
            );
            sql += &format!(
                "ALTER ROLE {role} WITH LOGIN REPLICATION PASSWORD {};\n",
                quote::sql_literal(&a.replication_password)
            );
        }
        // The application role with this cluster's password, owning its database.
        sql += &super::app::restore_sql(a);
        // The restore's settings: a standby cloned from this server must not inherit a
        // recovery target.
        for setting in [
            "restore_command",
            "recovery_target",
            "recovery_target_time",
            "recovery_target_lsn",
            "recovery_target_name",
            "recovery_target_xid",
            "recovery_target_action",
            "recovery_target_timeline",
            "recovery_target_inclusive",
        ] {
            sql += &format!("ALTER SYSTEM RESET {setting};\n");
        }
        let done = self.psql_stdin(&sql).await;
        if let Err(e) = done {
            let _ = self.temp_stop().await;
            return Err(e);
        }
        self.temp_stop().await?;
        tracing::info!(%source, "restored: this cluster's passwords set (the application role's too, if it has one), the recovery settings reset");
        Ok(())
    }

    /// Runs `sql` on the local server through stdin (passwords never in argv).
    async fn psql_stdin(&self, sql: &str) -> Result<(), PrepareError> {
        let local = self.local();
        let mut child = Command::new(&local.binary)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", &local.host])
            .args([
                "-p",
                &local.port.to_string(),
                "-U",
                &local.user,
                "-d",
                "postgres",
                "-f",
                "-",
            ])
            .env("PGCONNECT_TIMEOUT", "10")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| PrepareError::Spawn {
                tool: "psql".to_owned(),
                source,
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(sql.as_bytes())
                .await
                .map_err(|source| PrepareError::Spawn {
                    tool: "psql".to_owned(),
                    source,
                })?;
        }
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .map_err(|_| PrepareError::Tool {
                tool: "psql".to_owned(),
                status: "no end within 60 s".to_owned(),
            })?
            .map_err(|source| PrepareError::Spawn {
                tool: "psql".to_owned(),
                source,
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(PrepareError::Tool {
                tool: "psql (creating the roles)".to_owned(),
                status: status.to_string(),
            })
        }
    }

    /// Standby data made a primary's: a temporary local-only start in recovery,
    /// `pg_ctl promote` (a new timeline), a stop.
    ///
    /// # Errors
    /// [`PrepareError`].
    pub async fn promote_locally(&self) -> Result<(), PrepareError> {
        tracing::info!(
            "the data directory is a standby's but this pod is labelled primary: promoting it locally"
        );
        // The temporary server is never synchronous: it would wait for standbys to have
        // its own writes.
        self.write_config(false, &PostgresqlSpec::default(), "")?;
        write_private(&self.layout.pgdata.join("standby.signal"), "")?;
        self.temp_start().await?;
        let t = self.args.start_timeout_seconds.to_string();
        let args = ["-D", &self.pgdata_str(), "-w", "-t", &t, "promote"];
        if let Err(e) = self
            .run(
                "pg_ctl",
                &strings(&args),
                &[],
                self.start_timeout() + Duration::from_secs(5),
            )
            .await
        {
            let _ = self.temp_stop().await;
            return Err(e);
        }
        self.temp_stop().await?;
        tracing::info!("local promotion complete");
        Ok(())
    }

    /// Whether a writable primary answers upstream right now (as the replication role).
    ///
    /// # Errors
    /// The answer, when it is no.
    pub async fn upstream_writable(&self) -> Result<(), String> {
        let psql = self
            .upstream(&self.args.replication_user, &self.args.replication_password)
            .map_err(|e| e.to_string())?;
        match psql.value("SELECT pg_is_in_recovery()").await {
            Ok(Some(v)) if v == "f" => Ok(()),
            Ok(_) => Err("the server is in recovery (a standby)".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Waits up to `PRIMARY_WAIT_SECONDS` for a writable primary upstream.
    async fn await_primary(&self) -> Result<(), PrepareError> {
        let bound = Duration::from_secs(self.args.primary_wait_seconds);
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = match self.upstream_writable().await {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            if started.elapsed() >= bound {
                return Err(PrepareError::NoPrimary {
                    host: self.args.primary_host.clone().unwrap_or_default(),
                    port: self.args.primary_port,
                    seconds: self.args.primary_wait_seconds,
                    last,
                });
            }
            if attempt == 1 {
                tracing::info!(
                    %last,
                    "waiting up to {} s (PRIMARY_WAIT_SECONDS) for a writable primary at {}:{}",
                    self.args.primary_wait_seconds,
                    self.args.primary_host.as_deref().unwrap_or_default(),
                    self.args.primary_port
                );
            }
            tokio::time::sleep(Duration::from_secs(self.args.retry_interval_seconds)).await;
        }
    }

    /// Waits for a writable primary, then `pg_basebackup` into an emptied `$PGDATA`
    /// behind the clone marker, retried until `PRIMARY_WAIT_SECONDS`.
    ///
    /// # Errors
    /// [`PrepareError`].
    pub async fn clone_primary(&self) -> Result<(), PrepareError> {
        self.await_primary().await?;
        let a = &self.args;
        let host = a
            .primary_host
            .clone()
            .ok_or(PrepareError::Missing("PRIMARY_HOST"))?;
        self.layout.create()?;
        let marker = self.layout.clone_marker();
        write_private(&marker, "")?;
        let bound = Duration::from_secs(a.primary_wait_seconds);
        let started = tokio::time::Instant::now();
        let app = self.application_name();
        let mut attempt = 0;
        loop {
            attempt += 1;
            if !self.layout.is_empty() {
                self.layout.wipe()?;
            }
            tracing::info!(%host, attempt, "cloning the primary with pg_basebackup");
            let args = [
                "-h",
                &host,
                "-p",
                &a.primary_port.to_string(),
                "-U",
                &a.replication_user,
                "-w",
                "-D",
                &self.pgdata_str(),
                "-X",
                "stream",
                "-c",
                "fast",
                "-R",
            ];
            let mut env = self.transport().replication_env(&a.replication_password);
            env.push(("PGAPPNAME", app.clone()));
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            match self
                .run(
                    "pg_basebackup",
                    &strings(&args),
                    &env,
                    Duration::from_secs(24 * 3600),
                )
                .await
            {
                Ok(()) => break,
                Err(e) if started.elapsed() >= bound => return Err(e),
                Err(e) => tracing::warn!(error = %e, "pg_basebackup failed; retrying"),
            }
            tokio::time::sleep(Duration::from_secs(a.retry_interval_seconds)).await;
        }
        fs::set_permissions(&self.layout.pgdata, fs::Permissions::from_mode(0o700))
            .map_err(io("chmod 0700", &self.layout.pgdata))?;
        fs::remove_file(&marker).map_err(io("removing", &marker))?;
        tracing::info!("clone complete");
        Ok(())
    }

    /// Waits for a writable primary, `CHECKPOINT`s it (a just-promoted primary's
    /// timeline reaches its pg_control only then), and `pg_rewind`s `$PGDATA` against
    /// it. Whether a failed rewind is followed by a clone is the agent's decision.
    ///
    /// # Errors
    /// [`PrepareError`].
    pub async fn rewind(&self) -> Result<(), PrepareError> {
        self.await_primary().await?;
        let a = &self.args;
        let host = a
            .primary_host
            .clone()
            .ok_or(PrepareError::Missing("PRIMARY_HOST"))?;
        let admin = self.upstream(&a.superuser, &a.superuser_password)?;
        if let Err(e) = admin.value("CHECKPOINT").await {
            tracing::warn!(error = %e, "CHECKPOINT on the primary failed; pg_rewind may miss a recent promotion");
        }
        let source = format!(
            "host={} port={} user={} dbname=postgres connect_timeout=10",
            quote::conninfo(&host),
            a.primary_port,
            quote::conninfo(&a.superuser)
        );
        let args = [
            format!("--target-pgdata={}", self.pgdata_str()),
            format!("--source-server={source}"),
            "--progress".to_owned(),
        ];
        let env = [
            ("PGPASSWORD", a.superuser_password.as_str()),
            ("PGCONNECT_TIMEOUT", "10"),
        ];
        tracing::info!(%host, "running pg_rewind");
        let (result, stderr) = self
            .run_capturing(
                self.args.binary("pg_rewind"),
                "pg_rewind",
                &args,
                &env,
                Duration::from_secs(3600),
            )
            .await;
        match result {
            Err(PrepareError::Tool { tool, .. }) if connection_failed(&stderr) => {
                Err(PrepareError::Unreached {
                    tool,
                    message: stderr.trim().to_owned(),
                })
            }
            other => other,
        }
    }
}

/// A tool's command: no stdin, its stdout ours, its stderr as given, killed if dropped.
fn tool_command(program: PathBuf, args: &[String], env: &[(&str, &str)], stderr: Stdio) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(stderr)
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// Writes `text` to `path`, mode 0600.
fn write_private(path: &Path, text: &str) -> Result<(), PrepareError> {
    fs::write(path, text).map_err(io("writing", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io("chmod 0600", path))
}

/// Waits for `tool`'s `run` for at most `bound`.
async fn bounded<T>(
    tool: &str,
    bound: Duration,
    run: impl Future<Output = std::io::Result<T>>,
) -> Result<T, PrepareError> {
    tokio::time::timeout(bound, run)
        .await
        .map_err(|_| PrepareError::Tool {
            tool: tool.to_owned(),
            status: format!("no end within {bound:?}"),
        })?
        .map_err(|source| PrepareError::Spawn {
            tool: tool.to_owned(),
            source,
        })
}

/// `pg_hba.conf`: local access and replication first (no rule of a person's can lock
/// the manager or the standbys out), then the person's rules, then password access
/// for everyone else. Over TLS ([`Transport::Tls`]) every remote rule of Lockstep's is
/// `hostssl`, and the replication role is authenticated by its certificate.
#[must_use]
pub fn pg_hba(user: &PostgresqlSpec, transport: &Transport, replication_user: &str) -> String {
    let mut text = String::from(
        "# Managed by lockstep instance; rewritten on every start and settings change.\n\
         # TYPE  DATABASE     USER  ADDRESS  METHOD\n\
         local   all          all            trust\n\
         local   replication  all            trust\n",
    );
    text.push_str(&transport.replication_rules(replication_user));
    if !user.pg_hba.is_empty() {
        text.push_str("# spec.postgresql.pgHba\n");
        for rule in user.pg_hba.iter().filter(|r| !r.contains('\n')) {
            text.push_str(rule);
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "{} all          all   all      scram-sha-256\n",
        transport.remote()
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare(pgdata: &str) -> Prepare {
        let argv = vec![
            "lockstep",
            "--pgdata",
            pgdata,
            "--superuser-password",
            "s",
            "--replication-password",
            "r3pl'ic\\ \"ation pw",
            "--primary-host",
            "pg-rw.ns.svc",
            "--pod-name",
            "pg-1",
        ];
        Prepare::new(super::super::config::parsed(&argv[1..]))
    }

    #[test]
    fn a_standby_follows_the_primary_with_a_quoted_password_and_a_primary_does_not() {
        let p = prepare("/tmp/x/pgdata");
        let standby = p.lockstep_conf(true, &PostgresqlSpec::default(), "");
        assert!(standby.contains(
            "primary_conninfo = 'host=''pg-rw.ns.svc'' port=5432 user=''replicator'' password=''r3pl\\\\''ic\\\\\\\\ \"ation pw'' application_name=''pg-1'' connect_timeout=10'"
        ), "{standby}");
        assert!(
            !p.lockstep_conf(false, &PostgresqlSpec::default(), "")
                .contains("primary_conninfo")
        );
    }

    #[test]
    fn the_markers_sit_beside_pgdata_on_the_same_volume() {
        let p = prepare("/tmp/x/pgdata");
        assert_eq!(
            p.layout.initdb_marker(),
            PathBuf::from("/tmp/x/pgdata.lockstep-initdb-in-progress")
        );
        assert_eq!(
            p.layout.clone_marker(),
            PathBuf::from("/tmp/x/pgdata.lockstep-clone-in-progress")
        );
    }

    #[test]
    fn pg_controldata_is_read_for_state_checkpoint_and_timeline() {
        let control = Control::parse(
            "pg_control version number:            1300\n\
             Database cluster state:               shut down in recovery\n\
             Latest checkpoint location:           0/3000060\n\
             Latest checkpoint's TimeLineID:       2\n",
        );
        assert_eq!(
            control,
            Control {
                state: "shut down in recovery".to_owned(),
                checkpoint: Some("0/3000060".to_owned()),
                timeline: Some(2),
            }
        );
    }

    #[test]
    fn write_config_makes_a_standby_and_back_and_drops_pg_basebackups_conninfo() {
        let dir = std::env::temp_dir().join(format!("lockstep-prepare-{}", std::process::id()));
        let pgdata = dir.join("pgdata");
        fs::create_dir_all(&pgdata).unwrap();
        fs::write(pgdata.join("postgresql.conf"), "port = 1\n").unwrap();
        fs::write(
            pgdata.join("postgresql.auto.conf"),
            "primary_conninfo = 'host=old'\nwork_mem = '8MB'\n",
        )
        .unwrap();
        let p = prepare(pgdata.to_str().unwrap());

        p.write_config(true, &PostgresqlSpec::default(), "")
            .unwrap();
        p.write_config(true, &PostgresqlSpec::default(), "")
            .unwrap();
        let conf = fs::read_to_string(pgdata.join("postgresql.conf")).unwrap();
        assert_eq!(
            conf.matches("include_if_exists = 'lockstep.conf'").count(),
            1
        );
        assert_eq!(
            fs::read_to_string(pgdata.join("postgresql.auto.conf")).unwrap(),
            "work_mem = '8MB'\n"
        );
        assert!(p.layout.is_standby());

        p.write_config(false, &PostgresqlSpec::default(), "")
            .unwrap();
        assert!(!p.layout.is_standby());
        let mode = fs::metadata(pgdata.join("lockstep.conf"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "it holds the replication password");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_data_directory_the_kubelet_opened_to_its_fs_group_is_made_private_before_a_start() {
        let dir = std::env::temp_dir().join(format!("lockstep-fsgroup-{}", std::process::id()));
        let pgdata = dir.join("pgdata");
        fs::create_dir_all(&pgdata).unwrap();
        fs::write(pgdata.join("postgresql.conf"), "port = 1\n").unwrap();
        // What the kubelet leaves after applying fsGroup: group rwx and setgid.
        fs::set_permissions(&pgdata, fs::Permissions::from_mode(0o2770)).unwrap();
        prepare(pgdata.to_str().unwrap())
            .write_config(true, &PostgresqlSpec::default(), "")
            .unwrap();
        let mode = fs::metadata(&pgdata).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o7777,
            0o700,
            "PostgreSQL refuses anything wider than 0750"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_a_connection_that_could_not_be_made_counts_as_never_reaching_the_primary() {
        for made_none in [
            "pg_rewind: error: connection to server at \"pg-rw.ns.svc\" (10.0.0.251), port 5432 failed: FATAL:  terminating connection due to unexpected postmaster exit",
            "pg_rewind: error: connection to server on socket \"/run/pg/.s.PGSQL.5432\" failed: No such file or directory",
            "pg_rewind: fatal: could not connect to server: Connection refused",
        ] {
            assert!(connection_failed(made_none), "{made_none}");
        }
        for lost_later in [
            "pg_rewind: servers diverged at WAL location 0/3000060 on timeline 1\npg_rewind: error: unexpected result while fetching remote files: server closed the connection unexpectedly",
            "pg_rewind: error: could not fetch remote file \"base/1/1259\"",
            "",
        ] {
            assert!(!connection_failed(lost_later), "{lost_later}");
        }
    }

    #[test]
    fn a_persons_parameters_come_before_the_managed_ones_and_their_rules_after_the_local_ones() {
        let p = prepare("/data/pgdata");
        let user = PostgresqlSpec {
            parameters: [("work_mem", "16MB"), ("port", "1")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            pg_hba: vec!["host all app 10.0.0.0/8 md5".to_owned()],
        };
        let conf = p.lockstep_conf(false, &user, r#"ANY 1 ("pg-1", "pg-2")"#);
        let at = |needle: &str| {
            conf.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {conf}"))
        };
        assert!(at("work_mem = '16MB'") < at("wal_level = replica"));
        // Read later, the managed port wins over one that slipped through.
        assert!(at("port = '1'") < at("port = 5432"));
        at(r#"synchronous_standby_names = 'ANY 1 ("pg-1", "pg-2")'"#);
        let hba = pg_hba(&user, &Transport::Plain, "replicator");
        let line = |needle: &str| {
            hba.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {hba}"))
        };
        assert!(line("local   replication") < line("host all app"));
        assert!(line("host all app") < line("host    all          all   all"));
    }

    #[test]
    fn over_tls_every_remote_rule_of_lockstep_s_wants_tls_and_a_person_s_rule_stays_as_written() {
        let user = PostgresqlSpec {
            pg_hba: vec!["host all app 10.0.0.0/8 scram-sha-256".to_owned()],
            ..PostgresqlSpec::default()
        };
        let t = Transport::Tls {
            dir: "/t".into(),
            server: "/t".into(),
        };
        let hba = pg_hba(&user, &t, "replicator");
        let remote: Vec<&str> = hba
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("local"))
            .collect();
        assert_eq!(remote.len(), 4, "{hba}");
        assert!(remote[0].starts_with("hostssl replication  \"replicator\""));
        assert!(remote[0].ends_with("cert"));
        assert_eq!(remote[2], "host all app 10.0.0.0/8 scram-sha-256");
        assert!(remote[3].starts_with("hostssl all"));
    }

    #[test]
    fn a_standby_over_tls_streams_with_verify_full_and_its_server_turns_ssl_on() {
        let mut p = prepare("/tmp/x/pgdata");
        p.args.tls_dir = Some("/nonexistent".into());
        assert!(
            !p.lockstep_conf(false, &PostgresqlSpec::default(), "")
                .contains("ssl")
        );
        let dir = std::env::temp_dir().join(format!("lockstep-prepare-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        for f in crate::machines::postgres::render::tls::MOUNTED {
            std::fs::write(dir.join(f), "x").expect("file");
        }
        p.args.tls_dir = Some(dir.clone());
        let conf = p.lockstep_conf(true, &PostgresqlSpec::default(), "");
        assert!(conf.contains("ssl = on\n"), "{conf}");
        let conninfo = conf
            .lines()
            .find(|l| l.starts_with("primary_conninfo"))
            .expect("a standby streams");
        assert!(conninfo.contains("sslmode=verify-full"), "{conninfo}");
        assert!(!conninfo.contains("password"), "{conninfo}");
    }
}
