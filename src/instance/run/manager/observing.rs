//! What the manager reads each round: its server (by a query), its data directory, the
//! Lease, the role label, and its answer to a survey.

#[allow(clippy::wildcard_imports)] // the manager's vocabulary, imported once in its parent
use super::*;

/// Whether a standby says it streams this round ([`crate::pod::streaming`]):
/// yes while its WAL receiver streams; no once it has not for
/// [`NOT_STREAMING_SECONDS`]; nothing for a primary, a server that does not answer, or a
/// shorter gap (a receiver reconnecting).
#[must_use]
pub fn streams(seen: &Observation) -> Option<bool> {
    match &seen.server {
        Server::Standby(s) if s.streaming => Some(true),
        Server::Standby(_) => seen
            .not_streaming_since
            .filter(|since| seen.now.since(*since) >= Duration::from_secs(NOT_STREAMING_SECONDS))
            .map(|_| false),
        _ => None,
    }
}

/// The role label in a downward-API labels file (`key="value"` per line).
#[must_use]
pub fn role_label(labels: &str, key: &str) -> RoleLabel {
    let value = labels.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k == key).then(|| v.trim().trim_matches('"').to_owned())
    });
    match value {
        None => RoleLabel::Absent,
        Some(v) => v
            .parse::<Role>()
            .map_or(RoleLabel::Unknown(v), RoleLabel::Is),
    }
}

/// The local server's answer to [`SERVER_QUERY`], as the agent sees it.
#[must_use]
pub fn server_from_row(row: &[String]) -> Server {
    let field = |i: usize| row.get(i).map(String::as_str).unwrap_or_default();
    let lsn = |i: usize| field(i).parse::<Lsn>().ok();
    let checkpoint_tli: u32 = field(4).parse().unwrap_or(0);
    let received_tli: u32 = field(5).parse().unwrap_or(0);
    match field(0) {
        "f" => Server::Writable {
            position: Position {
                timeline: checkpoint_tli,
                lsn: lsn(1).unwrap_or_default(),
            },
        },
        "t" => Server::Standby(Standby {
            received: lsn(2).map(|lsn| Position {
                timeline: if received_tli > 0 {
                    received_tli
                } else {
                    checkpoint_tli
                },
                lsn,
            }),
            replayed: lsn(3).map(|lsn| Position {
                timeline: checkpoint_tli,
                lsn,
            }),
            streaming: field(6) == "t",
        }),
        _ => Server::Unanswering,
    }
}

/// One row: in recovery, current LSN (a primary), received LSN, replayed LSN, the
/// timeline (a primary's current WAL file's, exact from its promotion on; a standby's
/// last checkpoint's), the WAL receiver's timeline, whether it streams (what
/// `decide` reads, [`server_from_row`]); then, for `/metrics` only
/// ([`super::super::metrics::stats_from_row`]): client connections, a standby's replay lag in
/// seconds, the archiver's archived and failed counts and last archived time; and for
/// the archive's report ([`super::super::archive`]), the last archived and last failed WAL
/// files and when the last attempt failed; the settings of synchronous replication; a
/// primary's WAL insert and flush positions (a flush that stands still behind what was
/// written: `wal_positions`, [`crate::instance::WalStall`]).
pub const SERVER_QUERY: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_lsn()::text END, \
     coalesce(pg_last_wal_receive_lsn()::text, ''), \
     coalesce(pg_last_wal_replay_lsn()::text, ''), \
     CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())::bigint \
       ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END, \
     coalesce((SELECT received_tli FROM pg_stat_wal_receiver LIMIT 1), 0), \
     coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver LIMIT 1), false), \
     (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'), \
     coalesce((CASE WHEN NOT pg_is_in_recovery() THEN NULL \
       WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 \
       ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END)::text, ''), \
     archived_count, failed_count, \
     coalesce(extract(epoch FROM last_archived_time)::text, ''), \
     coalesce(last_archived_wal, ''), coalesce(last_failed_wal, ''), \
     coalesce(extract(epoch FROM last_failed_time)::text, ''), \
     current_setting('synchronous_standby_names'), current_setting('synchronous_commit'), \
     CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_insert_lsn()::text END, \
     CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_flush_lsn()::text END \
     FROM pg_stat_archiver";

/// A writable server's insert and flush positions, from its [`SERVER_QUERY`] row.
#[must_use]
pub fn wal_positions(row: &[String]) -> Option<(Lsn, Lsn)> {
    let lsn = |i: usize| row.get(i)?.parse::<Lsn>().ok();
    Some((lsn(17)?, lsn(18)?))
}

/// The timeline of a standby's furthest WAL: the newest timeline whose segment file in
/// `pg_wal` holds the byte before its furthest position (the WAL receiver names each
/// segment by the timeline it streamed it on), 0 if none. A failover asks once the
/// primary is gone, when PostgreSQL no longer says through SQL which timeline a standby
/// received (its WAL receiver stopped), and its last restartpoint's may predate a switch
/// ([`crate::pod::answers`]).
pub const WAL_TIMELINE_QUERY: &str = "WITH s AS (\
     SELECT greatest(coalesce(pg_last_wal_receive_lsn(), '0/0'), \
       coalesce(pg_last_wal_replay_lsn(), '0/0')) AS at, \
     (SELECT setting::numeric FROM pg_settings WHERE name = 'wal_segment_size') AS seg), \
     f AS (SELECT floor(greatest(at - '0/1'::pg_lsn, 0) / seg) AS segno, \
       4294967296 / seg AS per_id FROM s), \
     n AS (SELECT lpad(upper(to_hex(floor(segno / per_id)::bigint)), 8, '0') \
       || lpad(upper(to_hex(mod(segno, per_id)::bigint)), 8, '0') AS suffix FROM f) \
     SELECT coalesce(max(('x' || substr(w.name, 1, 8))::bit(32)::bigint), 0) \
     FROM pg_ls_waldir() w, n \
     WHERE w.name ~ '^[0-9A-F]{24}$' AND substr(w.name, 9) = n.suffix";

/// The Lease as the agent sees it.
pub(super) fn lease_seen(
    lease: &k8s_openapi::api::coordination::v1::Lease,
    read_at: Moment,
    wall: k8s_openapi::jiff::Timestamp,
) -> LeaseSeen {
    let annotations = lease.metadata.annotations.as_ref();
    // renewTime + L on the holder's wall clock, carried onto this agent's monotonic
    // clock at the read (expired: the read's own instant).
    let holder_until = lease.spec.as_ref().and_then(|s| {
        let renewed = s.renew_time.as_ref()?.0.as_millisecond();
        let until = renewed + i64::from(s.lease_duration_seconds?) * 1000;
        let left = u64::try_from(until - wall.as_millisecond()).unwrap_or(0);
        Some(mono(read_at).after(Duration::from_millis(left)))
    });
    LeaseSeen {
        holder_until,
        holder: lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty()),
        released_by: annotations.and_then(|a| a.get(RELEASED_BY).cloned()),
        released_at: annotations.and_then(|a| a.get(RELEASED_LSN)).map(|v| {
            v.parse::<Lsn>()
                .map_or_else(|_| ReleasedAt::Invalid(v.clone()), ReleasedAt::Lsn)
        }),
        initialized: annotations.is_some_and(|a| a.contains_key(INITIALIZED)),
        survey: annotations.and_then(|a| a.get(SURVEY).cloned()),
        transitions: lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0),
    }
}

pub(super) fn mono(moment: Moment) -> Mono {
    Mono::at(moment.since(Moment::zero()))
}

impl Manager {
    pub(super) async fn observe(&mut self) -> Observation {
        let role = match &self.args.role {
            Some(role) => role_label(&format!("k=\"{role}\""), "k"),
            None => std::fs::read_to_string(&self.args.role_file)
                .map_or(RoleLabel::Absent, |text| {
                    role_label(&text, &self.args.role_label)
                }),
        };
        let server = self.observe_server().await;
        let data = self.observe_data().await;
        if let Some(lease) = &self.lease {
            self.lease_read = match lease.read().await {
                Ok(seen) => LeaseRead::Seen(lease_seen(
                    &seen.lease,
                    seen.read_at,
                    k8s_openapi::jiff::Timestamp::now(),
                )),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the Lease failed");
                    LeaseRead::Unreadable
                }
            };
        }
        if let Some(t) = self.lease_read.seen().and_then(LeaseSeen::tenure) {
            self.tenure = Some(t);
        }
        let own = self.postmaster.as_ref().map(Postmaster::pid);
        let stray = process::stray_postmaster(&self.args.pgdata, own)
            .and_then(|pid| u32::try_from(pid).ok());
        let streaming = matches!(&server, Server::Standby(s) if s.streaming);
        self.streamed |= streaming;
        self.not_streaming_since = match &server {
            Server::Standby(s) if !s.streaming => self
                .not_streaming_since
                .or_else(|| Some(mono(Moment::now()))),
            _ => None,
        };
        let upstream_writable = match self.state {
            AgentState::Starting => self.prepare.upstream_writable().await.is_ok(),
            AgentState::Standby if !streaming => self.prepare.upstream_writable().await.is_ok(),
            _ => false,
        };
        Observation {
            role,
            data,
            server,
            lease: self.lease_read.clone(),
            now: mono(Moment::now()),
            renewed: self.fence.last_renewal().map(mono),
            stray,
            finished: self.finished.take(),
            upstream_writable,
            not_streaming_since: self.not_streaming_since,
            streamed: self.streamed,
            cloned: self.cloned,
            tenure: self.tenure.clone(),
            upstream: self.prepare.upstream.clone(),
            wal_stall: self.wal_stall,
        }
    }

    pub(super) async fn observe_server(&mut self) -> Server {
        let Some(pm) = self.postmaster.as_mut() else {
            return Server::Down {
                exit: self.last_exit,
            };
        };
        match pm.try_exit() {
            Ok(Some(exit)) => {
                tracing::info!(code = exit.code(), "postgres exited");
                self.fence.release();
                self.postmaster = None;
                // `Server::Down` promises that no process of the server is left (the
                // agent then releases the Lease): backends the postmaster left behind
                // are killed before it is said.
                let killed = process::kill_left_behind(&self.args.pgdata);
                if killed > 0 {
                    tracing::warn!(killed, "killed processes the exited postmaster left behind");
                }
                self.last_exit = Some(exit.code());
                self.wal_stall = None;
                return Server::Down {
                    exit: self.last_exit,
                };
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "waiting for postgres"),
        }
        match self.local().query(SERVER_QUERY).await {
            Ok(rows) => {
                self.stats = rows.first().map(|row| stats_from_row(row));
                if let Some(stats) = &self.stats {
                    self.metrics.record_stats(stats);
                }
                let server = rows
                    .first()
                    .map_or(Server::Unanswering, |r| server_from_row(r));
                self.wal_stall = match (&server, rows.first().and_then(|r| wal_positions(r))) {
                    (Server::Writable { .. }, Some((inserted, flushed))) => {
                        WalStall::next(self.wal_stall, inserted, flushed, mono(Moment::now()))
                    }
                    // A server that does not answer keeps the stall it had: its queries
                    // may hang on the same volume.
                    (Server::Unanswering, _) => self.wal_stall,
                    _ => None,
                };
                if !matches!(server, Server::Unanswering) {
                    self.phase("running");
                }
                server
            }
            Err(e) => {
                tracing::debug!(error = %e, "the server did not answer");
                Server::Unanswering
            }
        }
    }

    /// This round's answer to the survey the Lease asks ([`answers`]), if this manager
    /// has not answered that token yet, its server answers as a standby, and it streams
    /// from nobody the Lease no longer vouches for ([`crate::instance::may_answer`]).
    pub(super) async fn answer(&mut self, seen: &Observation) -> Option<Answer> {
        let token = seen.lease.seen()?.survey.clone()?;
        if self.answered.as_deref() == Some(token.as_str()) || self.reporter.is_none() {
            return None;
        }
        if !matches!(seen.server, Server::Standby(_))
            || !crate::instance::may_answer(&self.spec, seen)
        {
            return None;
        }
        let wal_timeline = match self.local().value(WAL_TIMELINE_QUERY).await {
            Ok(value) => value.and_then(|v| v.parse().ok()),
            Err(error) => {
                tracing::warn!(%error, "reading the timeline of the WAL files failed");
                None
            }
        };
        let said = crate::instance::observe::answer(seen, &token, wal_timeline)?;
        tracing::info!(
            token,
            timeline = said.timeline,
            received = %said.received,
            replayed = %said.replayed,
            "answered survey {token}"
        );
        self.answered = Some(token);
        Some(said)
    }

    pub(super) async fn observe_data(&self) -> DataDir {
        let layout: &Layout = &self.prepare.layout;
        if layout.interrupted() {
            return DataDir::Interrupted;
        }
        if !layout.has_data() {
            return if layout.is_empty() {
                DataDir::Empty
            } else {
                DataDir::Foreign
            };
        }
        let control = if self.postmaster.is_none() {
            self.prepare.control().await.unwrap_or_default()
        } else {
            super::super::prepare::Control::default()
        };
        if layout.is_standby() {
            DataDir::Standby {
                clean: control.state == "shut down in recovery",
            }
        } else {
            DataDir::Primary {
                clean: control.state == "shut down",
                checkpoint: control
                    .checkpoint
                    .as_deref()
                    .and_then(|c| c.parse::<Lsn>().ok())
                    .map(|lsn| Position {
                        timeline: control.timeline.unwrap_or(0),
                        lsn,
                    }),
            }
        }
    }
}
