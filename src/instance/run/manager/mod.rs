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
use super::args::InstanceArgs;
use super::auth::EndpointToken;
use super::basebackup::{BaseBackups, Endpoints};
use super::clock::Moment;
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
use crate::instance::observe::report_of;
use crate::instance::observe::{
    DataDir, Finished, LeaseRead, LeaseSeen, Lsn, Mono, Observation, Position, ReleasedAt,
    RoleLabel, Server, Standby, Task, Upstream,
};
use crate::instance::{AgentAction, AgentState, WalStall, decide};
use crate::pod::Role;
use crate::pod::answers::{Answer, SURVEY};
use crate::pod::lease::{INITIALIZED, RELEASED_BY, RELEASED_LSN};
use crate::pod::server::ServerRole;
use crate::pod::settings::digest_of;
use crate::pod::streaming::NOT_STREAMING_SECONDS;

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
    spec.wal_stall = Duration::from_secs(args.wal_stall_seconds);
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
    /// A writable server's WAL flush standing still behind what it wrote.
    wal_stall: Option<WalStall>,
    /// The standby's server has answered as streaming since it was last started.
    streamed: bool,
    /// This process cloned `$PGDATA`.
    cloned: bool,
    /// The holder's tenure from the last Lease this process read.
    tenure: Option<crate::instance::Tenure>,
    /// Continuous WAL archiving, when `LOCKSTEP_WAL_ARCHIVE` is set ([`super::archive`]).
    archiver: Option<Archiver>,
    /// Base backups on request, when archiving ([`super::basebackup`]).
    backups: Option<BaseBackups>,
    /// The error of a bootstrap from backups that failed, told to the operator before
    /// the manager exits ([`crate::pod::recovery`]).
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

mod acting;
mod deadline;
mod observing;

use observing::lease_seen;
pub use observing::{SERVER_QUERY, WAL_TIMELINE_QUERY, role_label, server_from_row, streams};

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
            wal_stall: None,
            streamed: false,
            cloned: false,
            tenure: None,
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
            let in_files = self.settings.in_files().map(str::to_owned);
            self.apply_settings().await;
            self.metrics.record(&seen, &self.state, me.as_deref());
            self.metrics.record_settings(&self.settings);
            self.report_round(&seen, in_files.as_deref()).await;
            let decision = decide(&self.spec, &self.state, &seen, self.signalled);
            let wait = self.take(&decision).await;
            if let AgentState::Exited { code } = self.state {
                return Ok(self.exit(code.status()).await);
            }
            // Sleep until the decision's time (or the renewal's deadline), the server's
            // exit, or a signal.
            let wait = self.until_next_round(wait);
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

    /// What this round tells the outside: the archive's and the backups' view of whether
    /// the server is writable, and the pod's conditions (settings, streaming, archiving,
    /// synchronous replication, data, the server's role, a survey's answer, the
    /// declared roles and databases) from what the round `seen`; `in_files`: the
    /// settings as written before this round applied them.
    async fn report_round(&mut self, seen: &Observation, in_files: Option<&str>) {
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
        let server = report_of(seen, &me, self.reported).map(|role| ServerRole {
            timeline: role.timeline.max(self.reported.map_or(0, |r| r.timeline)),
            ..role
        });
        if server.is_some() {
            self.reported = server;
        }
        let answer = self.answer(seen).await;
        let wanted = self.settings.wanted();
        self.objects.want(Wanted {
            roles: wanted.roles.clone(),
            databases: wanted.databases.clone(),
            judged: digest_of(wanted),
            writable,
            app_role: self.args.app_user.clone(),
        });
        let objects = self.objects.report();
        let app_password = writable.then(|| self.objects.app_password()).flatten();
        let synchronous = writable
            .then(|| self.synchronous_waiting(in_files))
            .flatten();
        if let Some(reporter) = &self.reporter {
            let settings = self.settings.is_written().then(|| self.settings.report());
            reporter.report(report::report(&report::Round {
                settings: settings.as_ref(),
                streaming: streams(seen),
                archiving: archiving.as_ref(),
                synchronous: synchronous.as_ref(),
                data: Some(matches!(
                    seen.data,
                    DataDir::Primary { .. } | DataDir::Standby { .. }
                )),
                archived: archived.as_ref(),
                server,
                answer: answer.as_ref(),
                objects: objects.as_ref(),
                app_password: app_password.as_deref(),
            }));
        }
    }

    /// Logs `decision` (a transition once; a stay when its reason changes), carries out
    /// its actions, and takes its edge if they all succeeded. Returns how long to wait
    /// before the next round.
    async fn take(&mut self, decision: &Decision<AgentState, AgentAction>) -> Duration {
        let (to, wait) = match decision {
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
        for action in decision.actions() {
            if let Err(why) = self.act(action).await {
                tracing::warn!(?action, %why, "action failed: the rest of this round's actions are skipped");
                // The transition is not taken: look again after a period, not at once.
                return self.spec.period();
            }
        }
        if let Some(to) = to {
            self.state = to;
        }
        wait
    }

    /// The agent exited with `status`: the server is stopped at once if it still runs, a
    /// failed recovery is told before the container ends. Returns `status`.
    async fn exit(&mut self, status: i32) -> i32 {
        if let Some(mut pm) = self.postmaster.take() {
            let _ = pm.immediate().await;
        }
        if let (Some(error), Some(reporter)) = (&self.recovery_failed, &self.reporter) {
            let report = report::Report::from([(
                crate::pod::recovery::RECOVERY,
                crate::pod::recovery::condition(error),
            )]);
            reporter
                .tell_before_exit(&report, Duration::from_secs(5))
                .await;
        }
        self.phase("exited");
        tracing::info!(status, "exiting");
        status
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
        super::super::args::parsed(&argv[1..])
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
    fn a_primary_row_ends_with_its_wal_insert_and_flush_positions() {
        // Columns 17 and 18 (the pod scripts' hung WAL volume reads them from a real
        // server).
        let mut fields = vec![""; 17];
        fields.extend(["0/1527B38", "0/1527AD0"]);
        assert_eq!(
            observing::wal_positions(&row(&fields)),
            Some((
                "0/1527B38".parse().unwrap_or_default(),
                "0/1527AD0".parse().unwrap_or_default()
            ))
        );
        assert_eq!(observing::wal_positions(&row(&fields[..18])), None);
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
            wal_stall: None,
            streamed: false,
            cloned: false,
            tenure: None,
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
