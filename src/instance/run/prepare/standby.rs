//! Data from another server: local promotion, a clone of the primary (`pg_basebackup`),
//! and a rewind against it (`pg_rewind`).

#[allow(clippy::wildcard_imports)] // the preparation's vocabulary, imported once in its parent
use super::*;

impl Prepare {
    /// Standby data made a primary's: a temporary local-only start in recovery,
    /// `pg_ctl promote` (a new timeline), a stop. Once promoted the temporary server may
    /// write (its end-of-recovery checkpoint, the WAL it archives), so it is handed to
    /// `guard` by its postmaster's pid as soon as it runs: the fence kills it at the last
    /// renewal plus `T`, as it would the server proper.
    ///
    /// # Errors
    /// [`PrepareError`]; [`PrepareError::Io`] when the temporary server's pid cannot be
    /// read or `guard` refuses it (it is stopped, never promoted unguarded).
    pub async fn promote_locally(
        &self,
        guard: impl FnOnce(i32) -> std::io::Result<()>,
    ) -> Result<(), PrepareError> {
        tracing::info!(
            "the data directory is a standby's but this pod is labelled primary: promoting it locally"
        );
        // The temporary server is never synchronous: it would wait for standbys to have
        // its own writes.
        self.write_config(false, &PostgresqlSpec::default(), "")?;
        write_private(&self.layout.pgdata.join("standby.signal"), "")?;
        self.temp_start().await?;
        let guarded = self.temp_pid().and_then(|pid| {
            guard(pid).map_err(|source| PrepareError::Io {
                what: "guarding the temporary server of",
                path: self.layout.pgdata.join("postmaster.pid"),
                source,
            })
        });
        if let Err(e) = guarded {
            let _ = self.temp_stop().await;
            return Err(e);
        }
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
    pub(super) async fn await_primary(&self) -> Result<(), PrepareError> {
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
