//! Queries to the local server, each bounded: `psql` over the Unix socket with a
//! connect timeout, a statement timeout and a wall-clock bound after which the `psql`
//! process is killed.
//!
//! Why `psql` and not a client library: the server's image already has it (the
//! manager needs `pg_ctl`, `initdb`, `pg_basebackup` and `pg_rewind` from the same
//! place), it adds no dependency to the operator's binary, and a child process gives
//! a bound that nothing inside libpq can outlast: the manager kills it. The queries
//! are few, once per round, and their answers are single rows of plain values.
//!
//! # Guarantees
//! - [`Psql::query`] returns within [`Psql::bound`]: `PGCONNECT_TIMEOUT` bounds the
//!   connection, `statement_timeout` (through `PGOPTIONS`) the statement on the server,
//!   and the wall-clock bound everything else (a hung socket, a stopped server); then
//!   the `psql` process is killed.
//! - Passwords never reach argv: the local socket is trusted (`pg_hba.conf`), and a
//!   remote password goes through `PGPASSWORD` in the child's environment only.
//!
//! # Errors
//! [`SqlError`].

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::clock::Moment;

/// What went wrong running a query.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// `psql` could not be started.
    #[error("starting {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No answer within the bound: `psql` was killed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The deadline ([`Psql::deadline`]) had passed: the query was not run.
    #[error("not run: its deadline had passed")]
    Late,
    /// `psql` failed: the server refused or was unreachable, or the statement failed.
    #[error("psql exited with {code:?}: {stderr}")]
    Failed {
        /// Its exit code (2: no connection; 3: the statement failed).
        code: Option<i32>,
        /// What it printed on stderr.
        stderr: String,
    },
}

/// Where and how to reach a server with `psql`.
#[derive(Debug, Clone)]
pub struct Psql {
    /// The `psql` binary.
    pub binary: PathBuf,
    /// The host: the socket directory for the local server.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The user.
    pub user: String,
    /// The password, for a server that asks for one (through `PGPASSWORD`).
    pub password: Option<String>,
    /// The connect timeout (`PGCONNECT_TIMEOUT`; libpq's minimum is 2 s).
    pub connect_timeout: Duration,
    /// The server-side `statement_timeout`.
    pub statement_timeout: Duration,
    /// The latest a query may end, whatever its bound: the instance manager's next
    /// renewal of the Lease must not wait behind it; `None`: only [`Self::bound`].
    pub deadline: Option<Moment>,
}

impl Psql {
    /// The wall-clock bound of one query: connect + statement + 1 s.
    #[must_use]
    pub fn bound(&self) -> Duration {
        self.connect_timeout.max(Duration::from_secs(2))
            + self.statement_timeout
            + Duration::from_secs(1)
    }

    /// How long a query started now may run: [`Self::bound`], or less to end by the
    /// deadline (zero once it passed).
    #[must_use]
    pub fn allowed(&self) -> Duration {
        let bound = self.bound();
        self.deadline
            .map_or(bound, |d| bound.min(d.since(Moment::now())))
    }

    /// Runs `sql` and returns its rows, each a vector of fields (unaligned, tuples only).
    ///
    /// # Errors
    /// [`SqlError`].
    pub async fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, SqlError> {
        let mut command = self.command("postgres");
        command.args(["-c", sql]).stdin(Stdio::null());
        self.output(command, None).await
    }

    /// Runs the script `sql` in `database`, given on `psql`'s stdin (never in argv: it
    /// may carry a password), stopping at its first error; its rows as
    /// [`Self::query`]'s.
    ///
    /// # Errors
    /// [`SqlError`].
    pub async fn script(&self, database: &str, sql: &str) -> Result<Vec<Vec<String>>, SqlError> {
        let mut command = self.command(database);
        command.args(["-f", "-"]).stdin(Stdio::piped());
        self.output(command, Some(sql)).await
    }

    /// `psql` with the bounds of [`Self`] and no input yet.
    fn command(&self, database: &str) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(["-X", "-A", "-t", "-q", "-w", "-v", "ON_ERROR_STOP=1"])
            .args(["-F", "\u{1f}"])
            .arg("-h")
            .arg(&self.host)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-U")
            .arg(&self.user)
            .args(["-d", database])
            .env(
                "PGCONNECT_TIMEOUT",
                self.connect_timeout.as_secs().max(2).to_string(),
            )
            .env(
                "PGOPTIONS",
                format!(
                    "-c statement_timeout={}",
                    self.statement_timeout.as_millis()
                ),
            )
            .env_remove("PGPASSWORD")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(password) = &self.password {
            command.env("PGPASSWORD", password);
        }
        command
    }

    /// Runs `command` (writing `input` to its stdin) within [`Self::bound`]; its rows.
    async fn output(
        &self,
        mut command: Command,
        input: Option<&str>,
    ) -> Result<Vec<Vec<String>>, SqlError> {
        let bound = self.allowed();
        if bound.is_zero() {
            return Err(SqlError::Late);
        }
        let mut child = command.spawn().map_err(|source| SqlError::Spawn {
            binary: self.binary.clone(),
            source,
        })?;
        let stdin = child.stdin.take();
        let input = input.unwrap_or_default().to_owned();
        let run = async move {
            if let Some(mut stdin) = stdin {
                use tokio::io::AsyncWriteExt;
                // A psql that exits early closes its end: its exit status says why.
                let _ = stdin.write_all(input.as_bytes()).await;
                drop(stdin);
            }
            child.wait_with_output().await
        };
        // On timeout the future (and with it the child) is dropped: kill_on_drop kills it.
        let output = tokio::time::timeout(bound, run)
            .await
            .map_err(|_| SqlError::Timeout(bound))?
            .map_err(|source| SqlError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(SqlError::Failed {
                code: output.status.code(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| line.split('\u{1f}').map(str::to_owned).collect())
            .collect())
    }

    /// Runs `sql` and returns the first field of its first row, if any.
    ///
    /// # Errors
    /// [`SqlError`].
    pub async fn value(&self, sql: &str) -> Result<Option<String>, SqlError> {
        Ok(self
            .query(sql)
            .await?
            .into_iter()
            .next()
            .and_then(|row| row.into_iter().next()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `psql` (the real one is exercised against real servers by
    /// `tests/pg_scripts`): prints its environment's timeouts, or hangs.
    fn fake_psql(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lockstep-psql-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("psql");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path
    }

    fn psql(binary: PathBuf) -> Psql {
        Psql {
            binary,
            host: "/nonexistent".to_owned(),
            port: 5432,
            user: "postgres".to_owned(),
            password: None,
            connect_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_millis(500),
            deadline: None,
        }
    }

    #[tokio::test]
    async fn every_query_carries_a_connect_and_a_statement_timeout() {
        let bin = fake_psql(
            "env",
            r#"printf '%s\037%s\n' "$PGCONNECT_TIMEOUT" "$PGOPTIONS"; printf 'second\n'"#,
        );
        let rows = psql(bin).query("SELECT 1").await.unwrap();
        assert_eq!(
            rows,
            vec![
                vec!["2".to_owned(), "-c statement_timeout=500".to_owned()],
                vec!["second".to_owned()],
            ]
        );
    }

    #[tokio::test]
    async fn a_query_that_hangs_is_killed_at_its_bound() {
        let bin = fake_psql("hang", "exec sleep 600");
        let q = psql(bin);
        let started = std::time::Instant::now();
        let err = q.value("SELECT 1").await.unwrap_err();
        assert!(
            matches!(err, SqlError::Timeout(bound) if bound == q.bound()),
            "{err}"
        );
        assert!(started.elapsed() < q.bound() + Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_query_ends_by_its_deadline_and_one_past_it_is_not_run() {
        let bin = fake_psql("late", "exec sleep 600");
        let soon = Psql {
            deadline: Some(Moment::now() + Duration::from_millis(300)),
            ..psql(bin.clone())
        };
        let started = std::time::Instant::now();
        let err = soon.value("SELECT 1").await.unwrap_err();
        assert!(matches!(err, SqlError::Timeout(_)), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "ended by its deadline"
        );
        let passed = Psql {
            deadline: Some(Moment::zero()),
            ..psql(bin)
        };
        assert!(matches!(
            passed.value("SELECT 1").await,
            Err(SqlError::Late)
        ));
    }

    #[tokio::test]
    async fn a_script_reaches_psql_on_stdin_not_in_argv() {
        let bin = fake_psql(
            "stdin",
            r#"case "$*" in *secret*) exit 9;; esac; case "$*" in *"-d orders"*) cat;; esac"#,
        );
        let rows = psql(bin)
            .script("orders", "ALTER ROLE a PASSWORD 'secret';")
            .await
            .unwrap();
        assert_eq!(
            rows,
            vec![vec!["ALTER ROLE a PASSWORD 'secret';".to_owned()]]
        );
    }

    #[tokio::test]
    async fn a_failed_query_says_why() {
        let bin = fake_psql("fail", "echo 'psql: error: connection refused' >&2; exit 2");
        let err = psql(bin).value("SELECT 1").await.unwrap_err();
        assert!(
            matches!(&err, SqlError::Failed { code: Some(2), stderr } if stderr.contains("refused")),
            "{err}"
        );
    }
}
