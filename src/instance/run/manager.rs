//! `lockstep instance`: the loop that observes, asks the agent's pure
//! [`decide`](crate::instance::decide::decide) what to do, and carries out its actions.
//!
//! Each round: fill in an [`Observation`] (the role label, `$PGDATA`, the server through
//! one bounded query, the Lease through one bounded read, the clock, the start of the last
//! accepted renewal as the fence recorded it, a stray postmaster, the preparation that
//! finished), call `decide`, run its actions in order (a failing one stops the rest and
//! the transition is not taken), then wait as the decision says, waking early on
//! `SIGTERM` or the server's exit.
//!
//! # Guarantees
//! - The fence ([`Fence`]) guards the postmaster from the moment a writable start or a
//!   promotion is *requested* (before the server can accept a write) until it has
//!   exited; the renewals it counts from are exactly the accepted ones
//!   ([`LeaseClient::renew`] returns when its read began).
//! - `SIGTERM` is an input to `decide` (a clean stop, renewing meanwhile), never an exit:
//!   the manager exits only once the agent reached `Exited`, and a server still running
//!   then is stopped immediately first. `SIGINT` and `SIGQUIT` are forwarded to the
//!   postmaster as well.
//! - Liveness: the phase file (`<socket dir>/lockstep-phase.<port>`) says `running`
//!   once the server answered; [`liveness`] then fails only when `pg_isready` gets no
//!   answer at all.
//!
//! # Assumptions
//! - The preparations (bootstrap, clone, rewind, local promotion) run inline: while one
//!   runs, no server of this manager runs, so nothing needs renewing; `SIGTERM` is acted
//!   on when it ends (each is bounded).
//!
//! # Errors
//! [`ManagerError`] for what keeps the manager from running at all; everything else is
//! an observation or a failed action that `decide` answers.

use std::path::PathBuf;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use super::archive::Archiver;
use super::auth::EndpointToken;
use super::basebackup::{BaseBackups, Endpoints};
use super::clock::Moment;
use super::config::InstanceArgs;
use super::fence::Fence;
use super::lease::LeaseClient;
use super::managed::{Objects, Wanted};
use super::metrics::{InstanceMetrics, ServerStats, stats_from_row};
use super::postmaster::Postmaster;
use super::prepare::{Layout, Prepare};
use super::process::{self, Pidfd, Signal};
use super::report::{self, Reporter};
use super::settings::Settings;
use super::sql::Psql;
use crate::engine::Decision;
use crate::instance::machine::{AgentSpec, LeaseTerms};
use crate::instance::observe::{
    DataDir, Finished, LeaseRead, LeaseSeen, Lsn, Mono, Observation, Position, ReleasedAt,
    RoleLabel, Server, Standby, Task, Upstream,
};
use crate::instance::{AgentAction, AgentState, decide};
use crate::machines::postgres::actions::Role;
use crate::machines::postgres::answers::{self, Answer, SURVEY};
use crate::machines::postgres::instances::{ServerRole, report_of};
use crate::machines::postgres::observe::{INITIALIZED, RELEASED_BY, RELEASED_LSN};
use crate::machines::postgres::settings::digest_of;
use crate::machines::postgres::streaming::NOT_STREAMING_SECONDS;

/// What keeps the manager from running.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// A setting is missing or invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The fence thread could not start.
    #[error("starting the fence thread: {0}")]
    Fence(#[source] std::io::Error),
    /// The signal handlers could not be installed.
    #[error("installing signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The Kubernetes client could not be configured.
    #[error("configuring the Kubernetes client: {0}")]
    Kube(String),
}

impl ManagerError {
    /// The exit status of a manager that could not start: 2 for its configuration (as
    /// a misconfigured agent exits), 1 for anything else.
    #[must_use]
    pub fn status(&self) -> i32 {
        match self {
            ManagerError::Config(_) | ManagerError::Kube(_) => 2,
            ManagerError::Fence(_) | ManagerError::Signals(_) => 1,
        }
    }
}

/// The path of the phase file the liveness check reads.
#[must_use]
pub fn phase_file(args: &InstanceArgs) -> PathBuf {
    args.socket_dir
        .join(format!("lockstep-phase.{}", args.port))
}

/// The liveness check (`lockstep instance --liveness`): alive while the manager prepares;
/// once the server answered, alive unless `pg_isready` gets no answer at all (a server
/// rejecting connections, starting or in a long recovery, is alive). Returns the exit
/// status: 0 alive, 1 dead.
pub async fn liveness(args: &InstanceArgs) -> i32 {
    let phase = std::fs::read_to_string(phase_file(args)).unwrap_or_default();
    if phase.trim() != "running" {
        return 0;
    }
    let status = tokio::process::Command::new(args.binary("pg_isready"))
        .arg("-q")
        .arg("-h")
        .arg(&args.socket_dir)
        .arg("-p")
        .arg(args.port.to_string())
        .args(["-t", "5"])
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(Duration::from_secs(8), status).await {
        // 0 accepting, 1 rejecting (alive), 2 no answer, 3 no attempt (bad arguments).
        Ok(Ok(s)) if s.code() == Some(2) => 1,
        Ok(Ok(_)) => 0,
        _ => 1,
    }
}

/// Whether a standby says it streams this round ([`crate::machines::postgres::streaming`]):
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

/// The agent's spec from the settings.
///
/// # Errors
/// [`ManagerError::Config`] when a Lease is configured without the pod's identity.
pub fn agent_spec(args: &InstanceArgs) -> Result<AgentSpec, ManagerError> {
    let lease = match &args.lease_name {
        None => None,
        Some(_) => {
            let identity = args.holder().ok_or_else(|| {
                ManagerError::Config("LOCKSTEP_LEASE_NAME needs POD_NAME and POD_UID".to_owned())
            })?;
            if args.pod_namespace.is_none() {
                return Err(ManagerError::Config(
                    "LOCKSTEP_LEASE_NAME needs POD_NAMESPACE".to_owned(),
                ));
            }
            if args.fence() >= args.lease() {
                return Err(ManagerError::Config(format!(
                    "T ({:?}) must be shorter than L ({:?})",
                    args.fence(),
                    args.lease()
                )));
            }
            Some(LeaseTerms {
                identity,
                duration: args.lease(),
                fence: args.fence(),
                renew: args.renew(),
            })
        }
    };
    let mut spec = match lease {
        Some(lease) => AgentSpec::with_lease(lease),
        None => AgentSpec {
            lease: None,
            ..AgentSpec::with_lease(LeaseTerms::for_lease("", 15))
        },
    };
    spec.clean_stop = Duration::from_secs(args.start_timeout_seconds);
    spec.reclone_on_rewind_failure = args.reclone_on_rewind_failure;
    spec.standby_stall = Duration::from_secs(args.standby_stall_seconds);
    if let Some(l) = &spec.lease {
        // The fence starts at T - G: that must leave room for two renewals, or one
        // slow renewal (or none yet, right after a start) fences a healthy primary.
        if l.fence < spec.immediate_grace + 2 * l.renew {
            return Err(ManagerError::Config(format!(
                "T ({}s, LOCKSTEP_FENCE_SECONDS, L/2 by default) must be at least G ({}s) + 2 R \
                 ({}s, LOCKSTEP_RENEW_SECONDS): raise LOCKSTEP_LEASE_SECONDS \
                 (spec.fencing.leaseDurationSeconds) or lower R",
                l.fence.as_secs(),
                spec.immediate_grace.as_secs(),
                2 * l.renew.as_secs()
            )));
        }
    }
    Ok(spec)
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
/// ([`super::metrics::stats_from_row`]): client connections, a standby's replay lag in
/// seconds, the archiver's archived and failed counts and last archived time; and for
/// the archive's report ([`super::archive`]), the last archived and last failed WAL
/// files and when the last attempt failed.
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
     coalesce(extract(epoch FROM last_failed_time)::text, '') \
     FROM pg_stat_archiver";

/// The timeline of a standby's furthest WAL: the newest timeline whose segment file in
/// `pg_wal` holds the byte before its furthest position (the WAL receiver names each
/// segment by the timeline it streamed it on), 0 if none. A failover asks once the
/// primary is gone, when PostgreSQL no longer says through SQL which timeline a standby
/// received (its WAL receiver stopped), and its last restartpoint's may predate a switch
/// ([`answers`]).
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
fn lease_seen(
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

fn mono(moment: Moment) -> Mono {
    Mono::at(moment.since(Moment::zero()))
}

/// The manager (see the module doc).
#[derive(Debug)]
pub struct Manager {
    args: InstanceArgs,
    spec: AgentSpec,
    prepare: Prepare,
    lease: Option<LeaseClient>,
    fence: Fence,
    postmaster: Option<Postmaster>,
    last_exit: Option<i32>,
    finished: Option<Finished>,
    lease_read: LeaseRead,
    state: AgentState,
    signalled: bool,
    /// The reason of the last round's stay (none after a transition): a stay is logged
    /// at `info` when it begins, at `debug` while it lasts.
    staying: Option<&'static str>,
    /// What the last round saw, for `/metrics`.
    metrics: InstanceMetrics,
    /// The person's settings ([`super::settings`]).
    settings: Settings,
    /// Tells the operator what the server made of them ([`super::report`]).
    reporter: Option<Reporter>,
    /// A reload was sent: the next round reads what waits for a restart.
    reloaded: bool,
    /// The certificates' contents as last seen ([`super::tls::digest`]): when the
    /// kubelet refreshes them (a renewal), the configuration is rewritten and reloaded.
    certificates: Option<u64>,
    /// Since when the server has answered as a standby that does not stream.
    not_streaming_since: Option<Mono>,
    /// Continuous WAL archiving, when `LOCKSTEP_WAL_ARCHIVE` is set ([`super::archive`]).
    archiver: Option<Archiver>,
    /// Base backups on request, when archiving ([`super::basebackup`]).
    backups: Option<BaseBackups>,
    /// The error of a bootstrap from backups that failed, told to the operator before
    /// the manager exits ([`crate::machines::postgres::recovery`]).
    recovery_failed: Option<String>,
    /// What the last answer said beyond `decide`'s part (none when it did not answer).
    stats: Option<ServerStats>,
    /// The last server report ([`report_of`]): a round that cannot read the Lease keeps
    /// its term, and no round reports an older timeline (a data directory's timeline
    /// never goes back, but a standby whose WAL receiver stopped reads it from its last
    /// restartpoint, which may predate the switch it streamed).
    reported: Option<ServerRole>,
    /// The token of the last survey this manager answered ([`answers`]): each is
    /// answered once.
    answered: Option<String>,
    /// Keeps `spec.roles` and `spec.databases` on the writable server
    /// ([`super::managed`]).
    objects: Objects,
}

impl Manager {
    /// A manager for `args`; connects nothing yet but the Kubernetes client's config.
    ///
    /// # Errors
    /// [`ManagerError`].
    pub async fn new(args: InstanceArgs) -> Result<Self, ManagerError> {
        let spec = agent_spec(&args)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return Err(ManagerError::Config(
                "must not run as root: PostgreSQL refuses it; run as the postgres user (runAsUser: 999)"
                    .to_owned(),
            ));
        }
        if args.role.is_none()
            && let Err(e) = std::fs::read_to_string(&args.role_file)
        {
            // The downward-API volume is in place before the container starts: a file
            // missing now is a wrong LOCKSTEP_ROLE_FILE or a missing volume, not a wait.
            return Err(ManagerError::Config(format!(
                "the role labels file LOCKSTEP_ROLE_FILE={} cannot be read ({e}): \
                 mount the pod's labels through the downward API there",
                args.role_file.display()
            )));
        }
        let mut secrets = None;
        let (lease, reporter) = match (&args.lease_name, &args.pod_namespace, args.holder()) {
            (Some(name), Some(namespace), Some(me)) => {
                let mut config = kube::Config::infer()
                    .await
                    .map_err(|e| ManagerError::Kube(e.to_string()))?;
                let bound = Duration::from_secs(args.lease_request_seconds.max(1));
                config.connect_timeout = Some(bound);
                config.read_timeout = Some(bound);
                config.write_timeout = Some(bound);
                let client = kube::Client::try_from(config)
                    .map_err(|e| ManagerError::Kube(e.to_string()))?;
                let l = i32::try_from(args.lease_seconds).unwrap_or(i32::MAX);
                let reporter = args
                    .pod_name
                    .as_deref()
                    .map(|pod| Reporter::start(client.clone(), namespace, pod));
                secrets = Some(kube::Api::namespaced(client.clone(), namespace));
                (
                    Some(LeaseClient::new(client, namespace, name, &me, l, bound)),
                    reporter,
                )
            }
            _ => (None, None),
        };
        let fence = Fence::start(args.fence()).map_err(ManagerError::Fence)?;
        let args_annotations = args.annotations_file.clone();
        let mut settings = Settings::new(args_annotations);
        // What this volume's server last ran with (absent on a new volume).
        settings.remember_accepted(
            &std::fs::read_to_string(args.pgdata.join("lockstep.conf")).unwrap_or_default(),
        );
        let archiver = args.wal_archive.is_some().then(Archiver::default);
        let backups = args.wal_archive.is_some().then(BaseBackups::default);
        let certificates =
            super::tls::digest(args.tls_dir.as_deref(), args.server_tls_dir.as_deref());
        let prepare = Prepare::new(args.clone());
        // Creating or dropping a database may take longer than a round's queries.
        let objects = Objects::start(
            Psql {
                statement_timeout: Duration::from_secs(60),
                ..prepare.local()
            },
            secrets,
        );
        Ok(Self {
            prepare,
            objects,
            args,
            spec,
            lease,
            fence,
            postmaster: None,
            last_exit: None,
            not_streaming_since: None,
            archiver,
            backups,
            recovery_failed: None,
            stats: None,
            reported: None,
            answered: None,
            finished: None,
            lease_read: LeaseRead::Unreadable,
            state: AgentState::Starting,
            signalled: false,
            staying: None,
            metrics: InstanceMetrics::new(),
            settings,
            reporter,
            reloaded: false,
            certificates,
        })
    }

    fn phase(&self, phase: &str) {
        let _ = std::fs::write(phase_file(&self.args), format!("{phase}\n"));
    }

    /// Runs until the agent exits; returns the process's exit status.
    ///
    /// # Errors
    /// [`ManagerError::Signals`].
    pub async fn run(mut self) -> Result<i32, ManagerError> {
        let mut term = signal(SignalKind::terminate()).map_err(ManagerError::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(ManagerError::Signals)?;
        let mut quit = signal(SignalKind::quit()).map_err(ManagerError::Signals)?;
        let mut ignored = super::signals::Ignored::install().map_err(ManagerError::Signals)?;
        self.phase("starting");
        if let Some(port) = self.args.metrics_port {
            self.serve_metrics(port).await;
        }
        let me = self.args.holder();
        loop {
            let seen = self.observe().await;
            self.apply_settings().await;
            self.metrics.record(&seen, &self.state, me.as_deref());
            self.metrics.record_settings(&self.settings);
            let writable = matches!(seen.server, Server::Writable { .. });
            if let Some(backups) = &self.backups {
                backups.set_writable(writable);
            }
            let waiting = (writable && self.archiver.is_some())
                .then(|| super::archive::oldest_waiting(&self.args.pgdata))
                .flatten();
            let waited = waiting.as_ref().map(|(_, waited)| *waited);
            let archiving = self
                .archiver
                .as_mut()
                .and_then(|a| a.round(writable, self.stats.as_ref(), waiting));
            self.metrics.record_archiving(waited, archiving.as_ref());
            let archived = self.archiver.as_mut().and_then(|a| {
                a.last_archived(writable, self.stats.as_ref(), std::time::Instant::now())
            });
            // The timeline reported never goes back ([`Manager::reported`]).
            let me = self.args.holder().unwrap_or_default();
            let server = report_of(&seen, &me, self.reported).map(|role| ServerRole {
                timeline: role.timeline.max(self.reported.map_or(0, |r| r.timeline)),
                ..role
            });
            if server.is_some() {
                self.reported = server;
            }
            let answer = self.answer(&seen).await;
            let wanted = self.settings.wanted();
            self.objects.want(Wanted {
                roles: wanted.roles.clone(),
                databases: wanted.databases.clone(),
                judged: digest_of(wanted),
                writable,
            });
            let objects = self.objects.report();
            if let Some(reporter) = &self.reporter {
                let settings = self.settings.is_written().then(|| self.settings.report());
                let synchronous = writable
                    .then(|| self.settings.synchronous_report())
                    .flatten();
                reporter.report(report::report(&report::Round {
                    settings: settings.as_ref(),
                    streaming: streams(&seen),
                    archiving: archiving.as_ref(),
                    synchronous,
                    data: Some(matches!(
                        seen.data,
                        DataDir::Primary { .. } | DataDir::Standby { .. }
                    )),
                    archived: archived.as_ref(),
                    server,
                    answer: answer.as_ref(),
                    objects: objects.as_ref(),
                }));
            }
            let decision = decide(&self.spec, &self.state, &seen, self.signalled);
            let (to, wait) = match &decision {
                Decision::Go {
                    to,
                    reason,
                    message,
                    ..
                } => {
                    tracing::info!(from = <&str>::from(crate::instance::AgentKind::from(&self.state)), to = <&str>::from(crate::instance::AgentKind::from(to)), reason, %message, "transition");
                    if let AgentState::Exited { code } = to
                        && code.status() == 2
                    {
                        // Misconfigured: name what a person has to fix.
                        tracing::error!(
                            reason,
                            pgdata = %self.args.pgdata.display(),
                            role_file = %self.args.role_file.display(),
                            "{message}"
                        );
                    }
                    self.staying = None;
                    (Some(to.clone()), Duration::ZERO)
                }
                Decision::Stay {
                    reason,
                    message,
                    wait,
                    ..
                } => {
                    if self.staying == Some(*reason) {
                        tracing::debug!(reason, "{message}");
                    } else {
                        tracing::info!(reason, "{message}");
                        self.staying = Some(*reason);
                    }
                    let wait = match wait {
                        crate::engine::Wait::Requeue(d) => *d,
                        _ => self.spec.period(),
                    };
                    (None, wait)
                }
            };
            let mut all_done = true;
            for action in decision.actions() {
                if let Err(why) = self.act(action).await {
                    tracing::warn!(?action, %why, "action failed: the rest of this round's actions are skipped");
                    all_done = false;
                    break;
                }
            }
            let wait = if all_done {
                if let Some(to) = to {
                    self.state = to;
                }
                wait
            } else {
                // The transition is not taken: look again after a period, not at once.
                self.spec.period()
            };
            if let AgentState::Exited { code } = self.state {
                if let Some(mut pm) = self.postmaster.take() {
                    let _ = pm.immediate().await;
                }
                if let (Some(error), Some(reporter)) = (&self.recovery_failed, &self.reporter) {
                    let report = report::Report::from([(
                        crate::machines::postgres::recovery::RECOVERY,
                        crate::machines::postgres::recovery::condition(error),
                    )]);
                    reporter
                        .tell_before_exit(&report, Duration::from_secs(5))
                        .await;
                }
                self.phase("exited");
                tracing::info!(status = code.status(), "exiting");
                return Ok(code.status());
            }
            // Sleep until the decision's time, the server's exit, or a signal.
            let exited = async {
                match self.postmaster.as_mut() {
                    Some(pm) => {
                        let _ = pm.exited().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = exited => {}
                _ = term.recv() => self.on_signal(Signal::Term),
                _ = int.recv() => self.on_signal(Signal::Int),
                _ = quit.recv() => self.on_signal(Signal::Quit),
                name = ignored.recv() => tracing::info!(
                    signal = name,
                    "signal ignored: the manager applies the server's settings from the pod's annotation (edit spec.postgresql)"
                ),
            }
        }
    }

    /// Serve `/metrics`, `/healthz` and `POST /backup` on `port` for as long as the process runs. A
    /// port that cannot be bound is logged, not fatal: the database runs without it.
    async fn serve_metrics(&self, port: u16) {
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
        match crate::ops::health::bind(addr).await {
            Ok(listener) => {
                let status = crate::ops::health::Status::new(false);
                status.set_leader(true);
                status.set_synced(true);
                let metrics = Endpoints {
                    metrics: self.metrics.clone(),
                    backups: self.backups.clone(),
                    token: EndpointToken::from_file(self.args.endpoint_token_file.clone()),
                };
                tokio::spawn(async move {
                    let shutdown = tokio_util::sync::CancellationToken::new();
                    if let Err(error) =
                        crate::ops::health::serve(listener, status, metrics, shutdown).await
                    {
                        tracing::warn!(%error, "the metrics server stopped");
                    }
                });
                tracing::info!(%addr, "serving /metrics");
            }
            Err(error) => tracing::warn!(%error, "not serving /metrics"),
        }
    }

    fn on_signal(&mut self, signal: Signal) {
        tracing::info!(?signal, "signalled: stopping");
        self.signalled = true;
        if signal != Signal::Term
            && let Some(pm) = &self.postmaster
        {
            let _ = pm.signal(signal);
        }
    }

    async fn observe(&mut self) -> Observation {
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
        let own = self.postmaster.as_ref().map(Postmaster::pid);
        let stray = process::stray_postmaster(&self.args.pgdata, own)
            .and_then(|pid| u32::try_from(pid).ok());
        let streaming = matches!(&server, Server::Standby(s) if s.streaming);
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
            upstream: self.prepare.upstream.clone(),
        }
    }

    async fn observe_server(&mut self) -> Server {
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
                return Server::Down {
                    exit: self.last_exit,
                };
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "waiting for postgres"),
        }
        match self.prepare.local().query(SERVER_QUERY).await {
            Ok(rows) => {
                self.stats = rows.first().map(|row| stats_from_row(row));
                if let Some(stats) = &self.stats {
                    self.metrics.record_stats(stats);
                }
                let server = rows
                    .first()
                    .map_or(Server::Unanswering, |r| server_from_row(r));
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
    /// has not answered that token yet and its server answers as a standby.
    async fn answer(&mut self, seen: &Observation) -> Option<Answer> {
        let token = seen.lease.seen()?.survey.clone()?;
        if self.answered.as_deref() == Some(token.as_str()) || self.reporter.is_none() {
            return None;
        }
        if !matches!(seen.server, Server::Standby(_)) {
            return None;
        }
        let wal_timeline = match self.prepare.local().value(WAL_TIMELINE_QUERY).await {
            Ok(value) => value.and_then(|v| v.parse().ok()),
            Err(error) => {
                tracing::warn!(%error, "reading the timeline of the WAL files failed");
                None
            }
        };
        let said = answers::answer(seen, &token, wal_timeline)?;
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

    async fn observe_data(&self) -> DataDir {
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
            super::prepare::Control::default()
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

    fn task_done(&mut self, task: Task, result: Result<(), super::prepare::PrepareError>) {
        if let Err(e) = &result {
            tracing::error!(%task, error = %e, "preparation failed");
            if let super::prepare::PrepareError::Recovery(_) = e {
                self.recovery_failed = Some(e.to_string());
            }
        }
        self.finished = Some(Finished {
            task,
            ok: result.is_ok(),
            unreached: result
                .as_ref()
                .is_err_and(super::prepare::PrepareError::unreached),
        });
    }

    /// Writes the configuration with the person's settings and has PostgreSQL check the
    /// parameters before a start: the ones it refuses are left out (a start that fails
    /// on them would fail again at every restart).
    async fn write_checked_config(&mut self, standby: bool) -> Result<(), String> {
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
                .refused_parameters()
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

    /// This member's name in `synchronous_standby_names` (its `application_name`).
    fn member(&self) -> String {
        self.prepare.application_name()
    }

    /// Applies a change of the person's settings to the running server: the files
    /// rewritten (what `postgres -C` refuses left out, as before a start) and a reload;
    /// then a `pg_hba.conf` rule the server cannot parse is left out (and the server
    /// reloaded again), and the round after reads what waits for a restart. Failures
    /// are logged and retried at the next round; the agent's decisions never wait on
    /// them.
    async fn apply_settings(&mut self) {
        let standby = match self.state {
            AgentState::Primary => false,
            AgentState::Standby => true,
            _ => return,
        };
        if self.postmaster.is_none() {
            return;
        }
        let psql = self.prepare.local();
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
        let certificates = super::tls::digest(
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

    async fn checked_start(&mut self, standby: bool) -> Result<(), String> {
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

    fn start(&mut self, standby: bool) -> Result<(), String> {
        let pm = Postmaster::start(&self.args.binary("postgres"), &self.args.pgdata, &[])
            .map_err(|e| e.to_string())?;
        if !standby && self.spec.lease.is_some() {
            // Guarded before it can accept a write.
            self.fence.guard(pm.pidfd());
        }
        self.last_exit = None;
        self.postmaster = Some(pm);
        // A server that starts reads every parameter in its files: none waits any more.
        self.settings
            .set_pending_restart(std::collections::BTreeSet::new());
        Ok(())
    }

    /// Carries out one action; `Err` stops the round's remaining actions.
    async fn act(&mut self, action: &AgentAction) -> Result<(), String> {
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
                let r = self.prepare.promote_locally().await;
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
                        .prepare
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
                match self
                    .prepare
                    .local()
                    .value("SELECT pg_promote(wait => false)")
                    .await
                {
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

    fn signal(&self, signal: Signal) -> Result<(), String> {
        match &self.postmaster {
            Some(pm) => pm.signal(signal).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings of a Lease holder running with `L` = `lease` seconds (`T` = L/2).
    fn holder_with_lease(lease: &str) -> InstanceArgs {
        let argv = [
            "lockstep",
            "--pgdata",
            "/d",
            "--superuser-password",
            "s",
            "--replication-password",
            "r",
            "--lease-name",
            "pg-primary",
            "--pod-name",
            "pg-0",
            "--pod-uid",
            "u",
            "--pod-namespace",
            "ns",
            "--lease-seconds",
            lease,
        ];
        super::super::config::parsed(&argv[1..])
    }

    #[test]
    fn a_fence_too_short_for_two_renewals_is_refused_naming_the_settings() {
        let err = agent_spec(&holder_with_lease("10")).expect_err("T = 5 < G + 2R = 6");
        let text = err.to_string();
        assert!(text.contains("LOCKSTEP_LEASE_SECONDS"), "{text}");
        assert!(text.contains("spec.fencing.leaseDurationSeconds"), "{text}");
        assert!(
            agent_spec(&holder_with_lease("12")).is_ok(),
            "the CRD's minimum runs"
        );
    }

    #[test]
    fn the_role_is_read_from_the_downward_api_labels_file() {
        let labels = "app=\"pg\"\nlockstep.dev/role=\"primary\"\n";
        assert_eq!(
            role_label(labels, "lockstep.dev/role"),
            RoleLabel::Is(Role::Primary)
        );
        assert_eq!(
            role_label("app=\"pg\"\n", "lockstep.dev/role"),
            RoleLabel::Absent
        );
        assert_eq!(
            role_label("lockstep.dev/role=\"leader\"", "lockstep.dev/role"),
            RoleLabel::Unknown("leader".to_owned())
        );
    }

    fn row(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn a_primary_answers_its_write_position_on_its_timeline() {
        assert_eq!(
            server_from_row(&row(&["f", "0/3000148", "", "", "2", "0", "f"])),
            Server::Writable {
                position: Position {
                    timeline: 2,
                    lsn: "0/3000148".parse().unwrap_or_default(),
                },
            }
        );
    }

    #[test]
    fn a_standby_answers_what_it_received_and_replayed_and_whether_it_streams() {
        let Server::Standby(standby) =
            server_from_row(&row(&["t", "", "0/5000000", "0/4000000", "1", "2", "t"]))
        else {
            panic!("a standby");
        };
        assert_eq!(standby.received.map(|p| p.timeline), Some(2));
        assert_eq!(standby.replayed.map(|p| p.timeline), Some(1));
        assert!(standby.streaming);
        assert!(standby.has("0/5000000".parse().unwrap_or_default()));
    }

    #[test]
    fn a_server_reports_its_role_on_its_timeline_and_one_that_does_not_answer_reports_nothing() {
        let me = "pg-0/u0";
        let seen = |fields: &[&str], holder: Option<&str>| Observation {
            role: RoleLabel::Absent,
            data: crate::instance::DataDir::Empty,
            server: server_from_row(&row(fields)),
            lease: crate::instance::LeaseRead::Seen(crate::instance::LeaseSeen {
                holder: holder.map(str::to_owned),
                transitions: 4,
                ..Default::default()
            }),
            now: crate::instance::Mono(0),
            renewed: None,
            stray: None,
            finished: None,
            upstream_writable: false,
            not_streaming_since: None,
            upstream: crate::instance::Upstream::Service,
        };
        let primary = ["f", "0/3000148", "", "", "2", "0", "f"];
        assert_eq!(
            report_of(&seen(&primary, Some(me)), me, None),
            Some(ServerRole {
                primary: true,
                timeline: 2,
                term: Some(4),
            }),
            "a primary the Lease names reports the Lease's term"
        );
        assert_eq!(
            report_of(&seen(&primary, Some("pg-1/u1")), me, None).and_then(|r| r.term),
            None,
            "a primary the Lease does not name holds no term"
        );
        assert_eq!(
            report_of(
                &seen(
                    &["t", "", "0/5000000", "0/4000000", "1", "2", "t"],
                    Some(me)
                ),
                me,
                None
            ),
            Some(ServerRole {
                primary: false,
                timeline: 2,
                term: None,
            }),
            "a standby's timeline is its furthest position's"
        );
        assert_eq!(report_of(&seen(&["?"], None), me, None), None);
        // A round that could not read the Lease keeps the term last reported.
        let last = report_of(&seen(&primary, Some(me)), me, None);
        let mut unread = seen(&primary, Some(me));
        unread.lease = crate::instance::LeaseRead::Unreadable;
        assert_eq!(report_of(&unread, me, last).and_then(|r| r.term), Some(4));
        assert_eq!(report_of(&unread, me, None).and_then(|r| r.term), None);
    }
}
