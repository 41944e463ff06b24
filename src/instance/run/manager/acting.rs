//! What the manager does for its agent's actions: start and stop the server, run a
//! preparation, write the checked configuration, apply the settings annotation.

#[allow(clippy::wildcard_imports)] // the manager's vocabulary, imported once in its parent
use super::*;
use crate::pod::synchronous::Waiting;

impl Manager {
    pub(super) fn task_done(
        &mut self,
        task: Task,
        result: Result<(), super::super::prepare::PrepareError>,
    ) {
        if let Err(e) = &result {
            tracing::error!(%task, error = %e, "preparation failed");
            if let super::super::prepare::PrepareError::Recovery(_) = e {
                self.recovery_failed = Some(e.to_string());
            }
        }
        self.cloned |= task == Task::Clone && result.is_ok();
        self.finished = Some(Finished {
            task,
            ok: result.is_ok(),
            unreached: result
                .as_ref()
                .is_err_and(super::super::prepare::PrepareError::unreached),
        });
    }

    /// Writes the configuration with the person's settings and has PostgreSQL check the
    /// parameters before a start: the ones it refuses are left out (a start that fails
    /// on them would fail again at every restart).
    pub(super) async fn write_checked_config(&mut self, standby: bool) -> Result<(), String> {
        self.settings.read();
        // Each round leaves out at least one more refused parameter.
        for _ in 0..=self.settings.effective().parameters.len() {
            self.prepare
                .write_config(
                    standby,
                    &self.settings.effective(),
                    self.settings.synchronous(),
                )
                .map_err(|e| e.to_string())?;
            self.settings.written();
            let refused = self
                .prepare
                .refused_parameters(self.deadline())
                .await
                .map_err(|e| e.to_string())?;
            let mut new = false;
            for (name, error) in &refused {
                new |= self.settings.refuse(name, error);
            }
            if !new {
                break;
            }
        }
        self.settings.accepted();
        Ok(())
    }

    /// What a writable server's commits wait for, from what it runs (this round's
    /// `SHOW`, compared only if the files held `in_files` when it was read and still
    /// do). A server that runs other values than its files (an `ALTER SYSTEM` and a
    /// reload since) gets its files written again and a reload at the next round, which
    /// leaves `postgresql.auto.conf` without them.
    pub(super) fn synchronous_waiting(&mut self, in_files: Option<&str>) -> Option<Waiting> {
        let unchanged = in_files.is_some() && in_files == self.settings.in_files();
        let running = self
            .stats
            .as_ref()
            .and_then(|s| s.synchronous.as_ref())
            .filter(|_| unchanged)
            .map(|(names, commit)| (names.as_str(), commit.as_str()));
        let waiting = self.settings.synchronous_report(running)?;
        if matches!(waiting, Waiting::NotInForce { .. }) && !self.settings.stale() {
            tracing::warn!(
                ?waiting,
                "the server runs other synchronous settings than its files hold: writing them again and reloading"
            );
            self.settings.unwritten();
        }
        Some(waiting)
    }

    /// This member's name in `synchronous_standby_names` (its `application_name`).
    pub(super) fn member(&self) -> String {
        self.prepare.application_name()
    }

    /// Applies a change of the person's settings to the running server: the files
    /// rewritten (what `postgres -C` refuses left out, as before a start) and a reload;
    /// then a `pg_hba.conf` rule the server cannot parse is left out (and the server
    /// reloaded again), and the round after reads what waits for a restart. Failures
    /// are logged and retried at the next round; the agent's decisions never wait on
    /// them.
    pub(super) async fn apply_settings(&mut self) {
        let standby = match self.state {
            AgentState::Primary => false,
            AgentState::Standby => true,
            _ => return,
        };
        if self.postmaster.is_none() {
            return;
        }
        let psql = self.local();
        if std::mem::take(&mut self.reloaded) {
            match psql
                .query("SELECT name FROM pg_settings WHERE pending_restart")
                .await
            {
                Ok(rows) => self.settings.set_pending_restart(
                    rows.into_iter()
                        .filter_map(|r| r.into_iter().next())
                        .collect(),
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the settings pending a restart failed");
                }
            }
        }
        self.settings.read();
        let certificates = super::super::tls::digest(
            self.args.tls_dir.as_deref(),
            self.args.server_tls_dir.as_deref(),
        );
        if certificates != self.certificates {
            // Renewed (or issued after this pod started): the server reads its
            // certificates, and a standby its replication certificate, at a reload.
            tracing::info!("the certificates changed: rewriting the configuration and reloading");
            self.certificates = certificates;
            self.settings.unwritten();
        }
        if !standby && self.settings.follows_streaming() {
            match psql
                .query("SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'")
                .await
            {
                Ok(rows) => {
                    let streaming = rows
                        .into_iter()
                        .filter_map(|r| r.into_iter().next())
                        .collect();
                    self.settings
                        .decide_synchronous(&self.member(), Some(&streaming));
                }
                // Undecided this round: the value written stays.
                Err(e) => tracing::warn!(error = %e, "reading which standbys stream failed"),
            }
        } else {
            self.settings.decide_synchronous(&self.member(), None);
        }
        // At most twice: the second round leaves out a rule the first one refused.
        for _ in 0..2 {
            if !self.settings.stale() {
                return;
            }
            if let Err(e) = self.write_checked_config(standby).await {
                tracing::warn!(error = %e, "writing the settings failed");
                self.settings.unwritten();
                return;
            }
            if let Err(e) = psql.query("SELECT pg_reload_conf()").await {
                tracing::warn!(error = %e, "reloading the server failed");
                self.settings.unwritten();
                return;
            }
            self.reloaded = true;
            let hba =
                std::fs::read_to_string(self.args.pgdata.join("pg_hba.conf")).unwrap_or_default();
            let mut new = false;
            match psql
                .query("SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL")
                .await
            {
                Ok(rows) => {
                    for row in rows {
                        if let [line, error] = row.as_slice()
                            && let Some(rule) = line
                                .parse::<usize>()
                                .ok()
                                .and_then(|n| hba.lines().nth(n.saturating_sub(1)))
                        {
                            new |= self.settings.refuse_rule(rule, error);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the refused pg_hba.conf rules failed");
                }
            }
            if new {
                self.settings.unwritten();
            } else {
                tracing::info!(settings = ?self.settings.effective(), "settings applied by a reload");
                return;
            }
        }
    }

    pub(super) async fn checked_start(&mut self, standby: bool) -> Result<(), String> {
        if self.postmaster.is_some() {
            return Ok(());
        }
        self.settings.read();
        // Nothing streams from a server before it starts: the full value (a Preferred
        // primary relaxes it at its first round if too few standbys stream).
        self.settings.decide_synchronous(&self.member(), None);
        self.write_checked_config(standby).await?;
        self.start(standby)?;
        self.settings.started();
        Ok(())
    }

    pub(super) fn start(&mut self, standby: bool) -> Result<(), String> {
        let pm = Postmaster::start(&self.args.binary("postgres"), &self.args.pgdata, &[])
            .map_err(|e| e.to_string())?;
        if !standby && self.spec.lease.is_some() {
            // Guarded before it can accept a write.
            self.fence.guard(pm.pidfd());
        }
        self.last_exit = None;
        self.streamed = false;
        self.postmaster = Some(pm);
        // A server that starts reads every parameter in its files: none waits any more.
        self.settings
            .set_pending_restart(std::collections::BTreeSet::new());
        Ok(())
    }

    /// Carries out one action; `Err` stops the round's remaining actions.
    pub(super) async fn act(&mut self, action: &AgentAction) -> Result<(), String> {
        match action {
            AgentAction::KillStray { pid } => {
                let pid = i32::try_from(*pid).map_err(|e| e.to_string())?;
                if process::is_postgres(pid) {
                    tracing::warn!(pid, "killing a postmaster this manager did not start");
                    let pidfd = Pidfd::open(pid).map_err(|e| e.to_string())?;
                    process::kill_tree(&pidfd).map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            AgentAction::Bootstrap => {
                let r = self.prepare.bootstrap().await;
                self.task_done(Task::Bootstrap, r);
                Ok(())
            }
            AgentAction::PromoteLocally => {
                // The temporary server is guarded as the server proper will be: the
                // renewal that took this pod here started its deadline.
                let guarded = self.spec.lease.is_some();
                let fence = &self.fence;
                let r = self
                    .prepare
                    .promote_locally(|pid| {
                        if guarded {
                            fence.guard(std::sync::Arc::new(Pidfd::open(pid)?));
                        }
                        Ok(())
                    })
                    .await;
                if guarded {
                    if r.is_err() && self.fence.is_guarding() {
                        // A failed promotion's temporary server may still run (its stop
                        // failed too): killed now, before the guard is dropped.
                        self.fence.fence_now("the local promotion failed");
                        let waiter = self.fence.waiter();
                        let within = std::time::Duration::from_secs(5);
                        let fenced = tokio::task::spawn_blocking(move || waiter.fenced(within))
                            .await
                            .ok()
                            .flatten();
                        if fenced.is_none() {
                            tracing::warn!(
                                "the fence did not report the failed promotion's server killed within 5 s"
                            );
                        }
                    }
                    self.fence.release();
                }
                self.task_done(Task::PromoteLocally, r);
                Ok(())
            }
            AgentAction::Clone => {
                let r = self.prepare.clone_primary().await;
                self.task_done(Task::Clone, r);
                Ok(())
            }
            AgentAction::Rewind => {
                let r = self.prepare.rewind().await;
                self.task_done(Task::Rewind, r);
                Ok(())
            }
            AgentAction::StartStandby => self.checked_start(true).await,
            AgentAction::Follow { holder } => {
                let before = std::mem::replace(
                    &mut self.prepare.upstream,
                    holder.clone().map_or(Upstream::Nobody, Upstream::Holder),
                );
                tracing::info!(upstream = ?self.prepare.streams_from(), "the standby follows the Lease");
                if self.postmaster.is_none() {
                    // Its start writes the configuration.
                    return Ok(());
                }
                let reloaded = match self.write_checked_config(true).await {
                    Ok(()) => self
                        .local()
                        .query("SELECT pg_reload_conf()")
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                };
                if reloaded.is_err() {
                    // Tried again next round: the server follows whom it did.
                    self.prepare.upstream = before;
                }
                reloaded
            }
            AgentAction::StartPrimary => self.checked_start(false).await,
            AgentAction::Promote => {
                let pm = self.postmaster.as_ref().ok_or("no server runs")?;
                if self.spec.lease.is_some() && !self.fence.is_guarding() {
                    // Guarded from the request on.
                    self.fence.guard(pm.pidfd());
                }
                match self.local().value("SELECT pg_promote(wait => false)").await {
                    Ok(Some(t)) if t == "t" => Ok(()),
                    Ok(other) => Err(format!("pg_promote answered {other:?}")),
                    Err(e) => Err(e.to_string()),
                }
            }
            AgentAction::Renew {
                drop_released_lsn,
                mark_initialized,
                ..
            } => {
                let lease = self.lease.as_ref().ok_or("no Lease configured")?;
                let seen = lease
                    .renew(*drop_released_lsn, *mark_initialized)
                    .await
                    .map_err(|e| e.to_string())?;
                self.fence.renewed(seen.read_at);
                self.lease_read = LeaseRead::Seen(lease_seen(
                    &seen.lease,
                    seen.read_at,
                    k8s_openapi::jiff::Timestamp::now(),
                ));
                Ok(())
            }
            AgentAction::Release { lsn } => {
                let lease = self.lease.as_ref().ok_or("no Lease configured")?;
                let lsn = lsn.map(|l| l.to_string());
                let released = lease
                    .release(lsn.as_deref())
                    .await
                    .map_err(|e| e.to_string())?;
                tracing::info!(released, lsn = ?lsn, "released the Lease");
                Ok(())
            }
            AgentAction::StopClean => self.signal(Signal::Int),
            AgentAction::StopImmediate => self.signal(Signal::Quit),
            AgentAction::Kill => {
                if self.postmaster.is_some() {
                    self.fence.fence_now("the agent decided to kill the server");
                    if !self.fence.is_guarding()
                        && let Some(pm) = &self.postmaster
                    {
                        process::kill_tree(&pm.pidfd()).map_err(|e| e.to_string())?;
                    }
                }
                Ok(())
            }
        }
    }
}
