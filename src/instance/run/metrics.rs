//! The instance manager's metrics: what it last saw of its server and its Lease, in
//! Prometheus conventions, served at `/metrics` on `LOCKSTEP_METRICS_PORT` (the pod's
//! port named `metrics`) by the operator's own health server
//! ([`crate::ops::health::serve`]).
//!
//! Every series is a gauge refreshed at each of the manager's rounds (every `R` seconds
//! at most) from the same observation its `decide` reads: a scrape never touches the
//! server or the API. Position and lag are bytes of WAL; a series that does not apply
//! (a primary's replay lag) is absent, never a made-up zero.
//!
//! | series | meaning |
//! |---|---|
//! | `lockstep_instance_up` | 1 when the server answered this round |
//! | `lockstep_instance_writable` | 1 when it accepts writes (a primary) |
//! | `lockstep_instance_state{state}` | 1 for the manager's state (`Primary`, `Standby`, …) |
//! | `lockstep_instance_role{role}` | 1 for the pod's role label as read (`primary`, `replica`, `demoted`, `none`) |
//! | `lockstep_instance_timeline` | the timeline of its last position |
//! | `lockstep_instance_wal_position_bytes` | a primary's write position, a standby's furthest (received or replayed) |
//! | `lockstep_instance_replay_lag_bytes` | a standby's received minus replayed |
//! | `lockstep_instance_streaming` | 1 when a standby's WAL receiver streams |
//! | `lockstep_instance_lease_held` | 1 when the primary Lease names this pod |
//! | `lockstep_instance_seconds_since_renewal` | since its last accepted renewal (a holder's) |
//! | `lockstep_instance_settings_refused` | parameters and `pg_hba.conf` rules of `spec.postgresql` the server refused (kept out) |
//! | `lockstep_instance_settings_pending_restart` | parameters written that the server applies only at its next start |
//! | `lockstep_instance_synchronous_standbys` | how many standbys a commit waits for (`spec.synchronous.number`; 0: asynchronous) |
//! | `lockstep_instance_synchronous_degraded` | 1 while `spec.synchronous` asks for standbys but replication is asynchronous (`Preferred`, too few stream) |
//! | `lockstep_instance_connections` | client connections (`pg_stat_activity`'s client backends) |
//! | `lockstep_instance_replay_lag_seconds` | a standby's replay lag in time: 0 when it has replayed all it received, else since the last transaction it replayed committed (0 on a primary) |
//! | `lockstep_instance_wal_archived_total` | WAL files the archiver archived (`pg_stat_archiver.archived_count`, kept counting across server restarts) |
//! | `lockstep_instance_wal_archive_failures_total` | failed archiving attempts (`pg_stat_archiver.failed_count`, the same way) |
//! | `lockstep_instance_last_archived_timestamp_seconds` | when the archiver last archived a WAL file (Unix time; 0: never since the server started) |
//! | `lockstep_instance_wal_archive_waiting_seconds` | how long the primary's oldest WAL file not yet archived has waited (0: none waits) |
//! | `lockstep_instance_wal_archive_report{reason}` | 1 for what the primary reports of its archive (`Archiving`, `ArchiveFailing`, `ArchiveUnreachable`, `ArchiveStalled`, `StanzaCreateFailed`); no series on a standby |

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::instance::observe::{LeaseRead, Observation, Position, RoleLabel, Server};
use crate::instance::{AgentKind, AgentState};
use crate::ops::health::Scrape;
use crate::pod::archiving::Archiving;

use super::settings::Settings;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

/// The manager's gauges. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct InstanceMetrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    up: Gauge,
    writable: Gauge,
    state: Family<StateLabels, Gauge>,
    role: Family<RoleLabels, Gauge>,
    timeline: Gauge,
    position: Gauge,
    replay_lag: Gauge,
    streaming: Gauge,
    lease_held: Gauge,
    since_renewal: Gauge,
    refused: Gauge,
    pending_restart: Gauge,
    synchronous: Gauge,
    synchronous_degraded: Gauge,
    connections: Gauge,
    replay_lag_seconds: Gauge<f64, AtomicU64>,
    archived: Counter,
    archive_failures: Counter,
    last_archived: Gauge<f64, AtomicU64>,
    archive_waiting: Gauge,
    archive_report: Family<ReasonLabels, Gauge>,
    /// The archiver's counts as last read, to count on across a server restart (which
    /// starts them again from 0).
    archived_seen: AtomicI64,
    archive_failures_seen: AtomicI64,
}

/// What one round's [`SERVER_QUERY`](super::manager::SERVER_QUERY) says beyond what
/// `decide` reads: for `/metrics` only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerStats {
    /// Client connections.
    pub connections: i64,
    /// A standby's replay lag in seconds (none on a primary).
    pub replay_lag_seconds: Option<f64>,
    /// `pg_stat_archiver.archived_count`.
    pub archived: i64,
    /// `pg_stat_archiver.failed_count`.
    pub archive_failures: i64,
    /// `pg_stat_archiver.last_archived_time`, as Unix time.
    pub last_archived: Option<f64>,
    /// `pg_stat_archiver.last_archived_wal`.
    pub last_archived_wal: Option<String>,
    /// `pg_stat_archiver.last_failed_wal`.
    pub last_failed_wal: Option<String>,
    /// `pg_stat_archiver.last_failed_time`, as Unix time.
    pub last_failed: Option<f64>,
    /// `synchronous_standby_names` and `synchronous_commit` as the server runs them.
    pub synchronous: Option<(String, String)>,
}

impl ServerStats {
    /// The archiver's last attempt failed: it failed more recently than it succeeded,
    /// and after `since` (Unix time; earlier failures do not count).
    #[must_use]
    pub fn archive_failing_since(&self, since: f64) -> bool {
        self.last_failed
            .is_some_and(|failed| failed > since && failed > self.last_archived.unwrap_or(0.0))
    }
}

/// [`ServerStats`] from the columns of [`SERVER_QUERY`](super::manager::SERVER_QUERY)
/// after the ones `decide` reads (7 to 16); a column that does not parse reads as none.
#[must_use]
pub fn stats_from_row(row: &[String]) -> ServerStats {
    let field = |i: usize| row.get(i).map(String::as_str).unwrap_or_default();
    ServerStats {
        connections: field(7).parse().unwrap_or(0),
        replay_lag_seconds: field(8).parse().ok(),
        archived: field(9).parse().unwrap_or(0),
        archive_failures: field(10).parse().unwrap_or(0),
        last_archived: field(11).parse().ok(),
        last_archived_wal: Some(field(12)).filter(|w| !w.is_empty()).map(str::to_owned),
        last_failed_wal: Some(field(13)).filter(|w| !w.is_empty()).map(str::to_owned),
        last_failed: field(14).parse().ok(),
        synchronous: (row.len() > 16).then(|| (field(15).to_owned(), field(16).to_owned())),
    }
}

/// Count `now` (a server-side count that restarts from 0 with the server) on `counter`:
/// the growth since `seen`, or all of `now` once it went back.
fn count_on(counter: &Counter, seen: &AtomicI64, now: i64) {
    let before = seen.swap(now, Ordering::Relaxed);
    let grown = if now >= before { now - before } else { now };
    counter.inc_by(u64::try_from(grown).unwrap_or(0));
}

impl Default for InstanceMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl InstanceMetrics {
    /// Every gauge registered, none set yet.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("lockstep_instance");
        let inner = Inner {
            up: Gauge::default(),
            writable: Gauge::default(),
            state: Family::default(),
            role: Family::default(),
            timeline: Gauge::default(),
            position: Gauge::default(),
            replay_lag: Gauge::default(),
            streaming: Gauge::default(),
            lease_held: Gauge::default(),
            since_renewal: Gauge::default(),
            refused: Gauge::default(),
            pending_restart: Gauge::default(),
            synchronous: Gauge::default(),
            synchronous_degraded: Gauge::default(),
            connections: Gauge::default(),
            replay_lag_seconds: Gauge::default(),
            archived: Counter::default(),
            archive_failures: Counter::default(),
            last_archived: Gauge::default(),
            archive_waiting: Gauge::default(),
            archive_report: Family::default(),
            archived_seen: AtomicI64::new(0),
            archive_failures_seen: AtomicI64::new(0),
            registry: Registry::default(),
        };
        registry.register(
            "up",
            "1 when the server answered the manager's last round",
            inner.up.clone(),
        );
        registry.register(
            "writable",
            "1 when the server accepts writes",
            inner.writable.clone(),
        );
        registry.register(
            "state",
            "1 for the instance manager's state",
            inner.state.clone(),
        );
        registry.register(
            "role",
            "1 for the pod's role label as last read",
            inner.role.clone(),
        );
        registry.register(
            "timeline",
            "The timeline of the server's last position",
            inner.timeline.clone(),
        );
        registry.register(
            "wal_position_bytes",
            "A primary's write position, a standby's furthest received or replayed, in bytes of WAL",
            inner.position.clone(),
        );
        registry.register(
            "replay_lag_bytes",
            "A standby's received minus replayed WAL, in bytes",
            inner.replay_lag.clone(),
        );
        registry.register(
            "streaming",
            "1 when a standby's WAL receiver streams",
            inner.streaming.clone(),
        );
        registry.register(
            "lease_held",
            "1 when the primary Lease names this pod",
            inner.lease_held.clone(),
        );
        registry.register(
            "seconds_since_renewal",
            "Seconds since this pod's last accepted renewal of the primary Lease",
            inner.since_renewal.clone(),
        );
        registry.register(
            "settings_refused",
            "Parameters and pg_hba.conf rules of spec.postgresql the server refused (kept out of its files)",
            inner.refused.clone(),
        );
        registry.register(
            "settings_pending_restart",
            "Parameters written that the server applies only at its next start",
            inner.pending_restart.clone(),
        );
        registry.register(
            "synchronous_standbys",
            "How many standbys a commit waits for (spec.synchronous.number; 0: asynchronous)",
            inner.synchronous.clone(),
        );
        registry.register(
            "synchronous_degraded",
            "1 while spec.synchronous asks for standbys but replication is asynchronous (Preferred, too few stream)",
            inner.synchronous_degraded.clone(),
        );
        registry.register(
            "connections",
            "Client connections to the server",
            inner.connections.clone(),
        );
        registry.register(
            "replay_lag_seconds",
            "A standby's replay lag: 0 when it replayed all it received, else seconds since the last replayed transaction committed",
            inner.replay_lag_seconds.clone(),
        );
        registry.register(
            "wal_archived",
            "WAL files the archiver archived",
            inner.archived.clone(),
        );
        registry.register(
            "wal_archive_failures",
            "Failed attempts of the archiver",
            inner.archive_failures.clone(),
        );
        registry.register(
            "last_archived_timestamp_seconds",
            "When the archiver last archived a WAL file (Unix time; 0: never since the server started)",
            inner.last_archived.clone(),
        );
        registry.register(
            "wal_archive_waiting_seconds",
            "How long the primary's oldest WAL file not yet archived has waited (0: none waits)",
            inner.archive_waiting.clone(),
        );
        registry.register(
            "wal_archive_report",
            "1 for what the primary reports of its archive (Archiving, ArchiveFailing, ArchiveStalled, StanzaCreateFailed)",
            inner.archive_report.clone(),
        );
        Self {
            inner: Arc::new(Inner { registry, ..inner }),
        }
    }

    /// Refresh the series read from [`ServerStats`].
    pub fn record_stats(&self, stats: &ServerStats) {
        let m = &self.inner;
        m.connections.set(stats.connections);
        m.replay_lag_seconds
            .set(stats.replay_lag_seconds.unwrap_or(0.0).max(0.0));
        count_on(&m.archived, &m.archived_seen, stats.archived);
        count_on(
            &m.archive_failures,
            &m.archive_failures_seen,
            stats.archive_failures,
        );
        m.last_archived.set(stats.last_archived.unwrap_or(0.0));
    }

    /// Refresh the archive's gauges: how long the oldest WAL file not yet archived has
    /// `waited` (none: none waits, or not a primary), and the primary's `report`.
    pub fn record_archiving(&self, waited: Option<Duration>, report: Option<&Archiving>) {
        let m = &self.inner;
        m.archive_waiting
            .set(waited.map_or(0, |w| i64::try_from(w.as_secs()).unwrap_or(i64::MAX)));
        m.archive_report.clear();
        if let Some(report) = report {
            let (_, reason, _) = report.condition();
            m.archive_report
                .get_or_create(&ReasonLabels { reason })
                .set(1);
        }
    }

    /// Refresh the settings gauges.
    pub fn record_settings(&self, settings: &Settings) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.inner.refused.set(count(settings.refused_count()));
        self.inner
            .pending_restart
            .set(count(settings.pending_restart_count()));
        self.inner
            .synchronous
            .set(count(settings.synchronous_number()));
        self.inner
            .synchronous_degraded
            .set(i64::from(settings.synchronous_degraded()));
    }

    /// Refresh every gauge from a round's observation, the state the manager is in, and
    /// its identity `me` (`<pod>/<uid>`) on the Lease.
    pub fn record(&self, seen: &Observation, state: &AgentState, me: Option<&str>) {
        let m = &self.inner;
        m.state.clear();
        m.state
            .get_or_create(&StateLabels {
                state: AgentKind::from(state).into(),
            })
            .set(1);
        m.role.clear();
        m.role
            .get_or_create(&RoleLabels {
                role: role_name(&seen.role),
            })
            .set(1);
        let (up, writable) = match &seen.server {
            Server::Down { .. } | Server::Unanswering => (false, false),
            Server::Standby(_) => (true, false),
            Server::Writable { .. } => (true, true),
        };
        m.up.set(i64::from(up));
        m.writable.set(i64::from(writable));
        let furthest: Option<Position> = match &seen.server {
            Server::Writable { position } => Some(*position),
            Server::Standby(s) => s.furthest(),
            _ => None,
        };
        if let Some(p) = furthest {
            m.timeline.set(i64::from(p.timeline));
            m.position.set(bytes(p));
        }
        match &seen.server {
            Server::Standby(s) => {
                m.streaming.set(i64::from(s.streaming));
                if let (Some(r), Some(p)) = (s.received, s.replayed) {
                    m.replay_lag.set(bytes(r).saturating_sub(bytes(p)).max(0));
                }
            }
            _ => {
                m.streaming.set(0);
                m.replay_lag.set(0);
            }
        }
        let held = match (&seen.lease, me) {
            (LeaseRead::Seen(l), Some(me)) => l.names(me),
            _ => false,
        };
        m.lease_held.set(i64::from(held));
        m.since_renewal.set(
            seen.since_renewal()
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        );
    }
}

impl Scrape for InstanceMetrics {
    fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}

fn bytes(p: Position) -> i64 {
    i64::try_from(p.lsn.0).unwrap_or(i64::MAX)
}

fn role_name(role: &RoleLabel) -> &'static str {
    match role {
        RoleLabel::Is(role) => (*role).into(),
        RoleLabel::Absent => "none",
        RoleLabel::Unknown(_) => "unknown",
    }
}
