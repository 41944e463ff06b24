//! A new database: `initdb` behind its marker, or a restore from the backups, with a
//! temporary server for what `initdb` cannot do.

#[allow(clippy::wildcard_imports)] // the preparation's vocabulary, imported once in its parent
use super::*;

impl Prepare {
    pub(super) async fn temp_start(&self) -> Result<(), PrepareError> {
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

    /// The temporary server's postmaster pid: the first line of `postmaster.pid`.
    pub(super) fn temp_pid(&self) -> Result<i32, PrepareError> {
        let path = self.layout.pgdata.join("postmaster.pid");
        let io = |source| PrepareError::Io {
            what: "reading",
            path: path.clone(),
            source,
        };
        let text = std::fs::read_to_string(&path).map_err(io)?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| {
                io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "no pid on its first line",
                ))
            })
    }

    pub(super) async fn temp_stop(&self) -> Result<(), PrepareError> {
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

    pub(super) fn pgdata_str(&self) -> String {
        self.layout.pgdata.display().to_string()
    }

    /// `initdb`, the superuser's password, the replication role, the application role
    /// and its database ([`super::super::app`]), behind the bootstrap marker.
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
        sql += &super::super::app::bootstrap_sql(a);
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
    /// restore the operator wrote on this pod ([`crate::pod::restore::RESTORE_ANNOTATION`]: this
    /// cluster's own repository, from its `PGBACKREST_*` settings), else
    /// `spec.bootstrap.recovery` (the `LOCKSTEP_RECOVERY_*` settings).
    ///
    /// # Errors
    /// [`PrepareError::Recovery`] for an annotation that cannot be read, or an in-place
    /// restore without the repository's settings: never `initdb` in place of a restore.
    pub(super) fn restore_from(&self) -> Result<Option<RestoreFrom>, PrepareError> {
        let a = &self.args;
        let annotations = a
            .annotations_file
            .as_ref()
            .and_then(|f| fs::read_to_string(f).ok())
            .unwrap_or_default();
        let asked =
            crate::pod::restore::from_annotations(&annotations).map_err(PrepareError::Recovery)?;
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
    pub(super) async fn restore(&self, from: &RestoreFrom) -> Result<(), PrepareError> {
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
        super::super::archive::pgbackrest(super::super::archive::PGBACKREST, &args, bound)
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
        sql += &super::super::app::restore_sql(a);
        let done = self.psql_stdin(&sql).await;
        if let Err(e) = done {
            let _ = self.temp_stop().await;
            return Err(e);
        }
        self.temp_stop().await?;
        // The restore's settings: a standby cloned from this server must not inherit a
        // recovery target. Removed from the file once the server stopped (ALTER SYSTEM
        // RESET is refused from PostgreSQL 17: `allow_alter_system = off`).
        self.drop_from_auto_conf(|line| conf::restore_setting(&conf::setting_of(line)))?;
        tracing::info!(%source, "restored: this cluster's passwords set (the application role's too, if it has one), the recovery settings reset");
        Ok(())
    }

    /// Runs `sql` on the local server through stdin (passwords never in argv).
    pub(super) async fn psql_stdin(&self, sql: &str) -> Result<(), PrepareError> {
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
}
