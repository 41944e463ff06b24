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
//!   a managed setting in `postgresql.auto.conf` (read last, it would win) is removed:
//!   the `primary_conninfo` that `pg_basebackup -R` or `pg_rewind -R` leave, what an
//!   `ALTER SYSTEM` wrote; but a restore's recovery settings, removed once its recovery
//!   ended.
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

use super::args::InstanceArgs;
use super::quote;
use super::settings::Settings;
use super::sql::Psql;
use super::tls::Transport;
use crate::instance::observe::Upstream;
use crate::pod::recovery::RECOVERY_FAILED;
use crate::pod::restore::target_args;
use crate::pod::settings::PostgresqlSpec;

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

mod bootstrap;
mod conf;
mod standby;

pub use conf::pg_hba;

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
            deadline: None,
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
            deadline: None,
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

#[cfg(test)]
mod tests;
