//! What the agent sees on one round: its [`Observation`].
//!
//! The runtime (`lockstep instance`) fills one in before every call to
//! [`decide`](super::decide::decide): the pod's role label, the state of `$PGDATA`, the
//! server it supervises (with its positions, each carrying its timeline), the Lease as
//! it last read it, its monotonic clock and when its last accepted renewal began, a
//! postmaster it did not start, and the long-running action that finished since the last round. Reading
//! it is the runtime's job; nothing here does I/O.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pod::Role;
pub use crate::pod::answers::Answer;
pub use crate::pod::lsn::{Lsn, NotAnLsn};
use crate::pod::server::ServerRole;

/// A reading of the agent's monotonic clock (`CLOCK_BOOTTIME` since the pod's node
/// booted), in milliseconds. Never set back, so `T` counted on it cannot be cut short
/// or stretched by a wall-clock step.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(transparent)]
pub struct Mono(pub u64);

impl Mono {
    /// The reading `d` after the clock's origin.
    pub fn at(d: Duration) -> Self {
        Mono(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// How long after `earlier` this reading is (zero if it is not later).
    pub fn since(self, earlier: Mono) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// The reading `d` later.
    #[must_use]
    pub fn after(self, d: Duration) -> Mono {
        Mono(
            self.0
                .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }
}

/// The released position a release leaves on the Lease, from the one `there` (if any)
/// and the one the releasing holder `given` (if any): the higher, so that a release
/// never erases nor lowers a position (`lockstep.dev/released-lsn`) the next primary
/// must have received. Only a writable holder that moved past it, a person, or the
/// operator's waiver removes it.
#[must_use]
pub fn released_position(there: Option<Lsn>, given: Option<Lsn>) -> Option<Lsn> {
    // `None` orders below every position.
    there.max(given)
}

/// A position in the WAL history: the timeline and the LSN on it. Two positions compare
/// by timeline first: a server on a later timeline is ahead of one on an earlier
/// timeline whatever their LSNs (the earlier one must rewind before it can follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// The timeline (`pg_control_checkpoint().timeline_id`, or the WAL receiver's).
    pub timeline: u32,
    /// The LSN on that timeline.
    pub lsn: Lsn,
}

/// The role label as the pod's downward-API labels file shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleLabel {
    /// The pod has no role label yet (the operator labels a new pod shortly).
    Absent,
    /// One of the roles the operator assigns.
    Is(Role),
    /// A value that is no role: the agent refuses to start, and fences a writable server.
    Unknown(String),
}

/// What `$PGDATA` holds, as the runtime reads it (`PG_VERSION`, `standby.signal`, the
/// in-progress markers beside it, `pg_controldata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataDir {
    /// Nothing (or missing): a new member.
    Empty,
    /// A bootstrap or a clone was interrupted (its marker file is there): redone from
    /// scratch.
    Interrupted,
    /// Not empty, but no PostgreSQL data directory and no marker of ours: never written
    /// over.
    Foreign,
    /// The data directory of a primary (no `standby.signal`).
    Primary {
        /// `pg_controldata` says `shut down`: the last stop was clean, so its latest
        /// checkpoint is the last record this server wrote.
        clean: bool,
        /// The latest checkpoint's position (`pg_controldata`), if it could be read.
        checkpoint: Option<Position>,
    },
    /// The data directory of a standby (`standby.signal`).
    Standby {
        /// `pg_controldata` says `shut down in recovery`.
        clean: bool,
    },
}

/// The server the agent started, as it answers (with connect and statement timeouts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Server {
    /// No postmaster of this agent runs: none was started, or it exited.
    Down {
        /// The exit status of the one that ran, if one did.
        exit: Option<i32>,
    },
    /// Its postmaster runs but did not answer this round (starting, busy, stopping,
    /// hung).
    Unanswering,
    /// It answers and is in recovery.
    Standby(Standby),
    /// It answers and is not in recovery: it accepts writes.
    Writable {
        /// Its current write position (`pg_current_wal_lsn()`) on its timeline.
        position: Position,
    },
}

/// A standby's positions, each with its timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standby {
    /// WAL received and flushed by the WAL receiver (`pg_last_wal_receive_lsn()`).
    pub received: Option<Position>,
    /// WAL replayed (`pg_last_wal_replay_lsn()`).
    pub replayed: Option<Position>,
    /// The WAL receiver is streaming (`pg_stat_wal_receiver.status = 'streaming'`).
    pub streaming: bool,
}

impl Standby {
    /// The furthest position this standby has: the later of what it received and what
    /// it replayed.
    pub fn furthest(&self) -> Option<Position> {
        self.received.max(self.replayed)
    }

    /// Whether it holds the WAL up to `lsn`, written on the timeline it follows.
    pub fn has(&self, lsn: Lsn) -> bool {
        self.furthest().is_some_and(|p| p.lsn >= lsn)
    }
}

/// The position a primary released the Lease at, as the annotation
/// `lockstep.dev/released-lsn` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleasedAt {
    /// A position: whoever promotes next must have received up to it.
    Lsn(Lsn),
    /// A value that is no LSN: nobody promotes until a person removes it.
    Invalid(String),
}

/// The Lease `<cluster>-primary` as the agent last read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseSeen {
    /// `spec.holderIdentity` (`"<pod name>/<pod uid>"`), if any.
    pub holder: Option<String>,
    /// The annotation `lockstep.dev/released-by`: who released it last.
    pub released_by: Option<String>,
    /// The annotation `lockstep.dev/released-lsn`.
    pub released_at: Option<ReleasedAt>,
    /// The annotation `lockstep.dev/initialized` is there: the cluster's database exists.
    pub initialized: bool,
    /// `spec.leaseTransitions`: the Lease's term, raised by every hand-over.
    pub transitions: i32,
    /// The annotation `lockstep.dev/survey`: the token of the failover's survey the
    /// operator asks the standbys to answer
    /// ([`crate::pod::answers`]).
    pub survey: Option<String>,
    /// When the holder's tenure runs out on this agent's clock: the Lease's `renewTime +
    /// leaseDurationSeconds` as read, carried onto the monotonic clock at the read (so a
    /// later step of the wall clock does not move it). `None` without a renewal time.
    pub holder_until: Option<Mono>,
}

impl LeaseSeen {
    /// The holder's tenure, when the Lease names one and has a renewal time.
    pub fn tenure(&self) -> Option<Tenure> {
        Some(Tenure {
            holder: self.holder.clone()?,
            until: self.holder_until?,
        })
    }

    /// Whether the Lease names `me` as its holder.
    pub fn names(&self, me: &str) -> bool {
        self.holder.as_deref() == Some(me)
    }

    /// Whether `me` released it and nobody holds it since.
    pub fn released_by(&self, me: &str) -> bool {
        self.holder.is_none() && self.released_by.as_deref() == Some(me)
    }
}

/// Whom a standby's server streams from (its `primary_conninfo`), as the runtime last
/// configured it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Upstream {
    /// The `<cluster>-rw` Service, whichever pod it selects: how a standby starts, and
    /// all it ever follows without a Lease.
    #[default]
    Service,
    /// The pod a Lease holder identity (`<pod name>/<pod uid>`) names, by its stable DNS
    /// name.
    Holder(String),
    /// Nobody: the WAL receiver does not run.
    Nobody,
}

/// A holder's tenure as a read of the Lease gave it: who held it, and until when on this
/// agent's monotonic clock ([`LeaseSeen::holder_until`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    /// The holder identity (`<pod name>/<pod uid>`).
    pub holder: String,
    /// When its tenure runs out, as read.
    pub until: Mono,
}

/// The Lease, or why it could not be read this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRead {
    /// The read failed (the API server did not answer within its bound, refused, or the
    /// Lease does not exist).
    Unreadable,
    /// The Lease as read.
    Seen(LeaseSeen),
}

impl LeaseRead {
    /// The Lease, if it was read.
    pub fn seen(&self) -> Option<&LeaseSeen> {
        match self {
            LeaseRead::Seen(l) => Some(l),
            LeaseRead::Unreadable => None,
        }
    }
}

/// A long-running action of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum Task {
    /// `initdb` and the roles, or a restore from backups (`spec.bootstrap.recovery`).
    Bootstrap,
    /// The local promotion of standby data before a writable start.
    PromoteLocally,
    /// `pg_basebackup`, after waiting for a writable primary within its bound.
    Clone,
    /// `pg_rewind`, after waiting for a writable primary within its bound.
    Rewind,
}

/// A long-running action that finished since the last round, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Which.
    pub task: Task,
    /// It succeeded (else the runtime logged its error).
    pub ok: bool,
    /// It failed before it changed anything because it never reached the primary: no
    /// writable primary answered within its bound, or the tool could not connect to it.
    /// `$PGDATA` is as it was.
    pub unreached: bool,
}

/// What the agent sees on one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The pod's role label.
    pub role: RoleLabel,
    /// What `$PGDATA` holds.
    pub data: DataDir,
    /// The server this agent started.
    pub server: Server,
    /// The Lease as last read (ignored when the agent runs without one).
    pub lease: LeaseRead,
    /// The monotonic clock now.
    pub now: Mono,
    /// When the last renewal of the Lease that the API server accepted *began* (so the
    /// time since it is never under-counted), if one did in this process.
    pub renewed: Option<Mono>,
    /// The process id of a postmaster running on `$PGDATA` that this agent did not
    /// start (one started by hand).
    pub stray: Option<u32>,
    /// The long-running action that finished since the last round.
    pub finished: Option<Finished>,
    /// A writable primary answers at the upstream address (`<cluster>-rw`).
    pub upstream_writable: bool,
    /// Since when the server has answered as a standby whose WAL receiver does not
    /// stream (in this process); `None` while it streams, or when it is no standby.
    pub not_streaming_since: Option<Mono>,
    /// Whether the standby's server has answered as streaming since this process last
    /// started it.
    pub streamed: bool,
    /// Whether this process cloned `$PGDATA` (a standby that fails on data cloned a moment
    /// ago does not fail for its data, and is not cloned again).
    pub cloned: bool,
    /// The holder's tenure from the last Lease this process read (this round's, when it
    /// read one): while the Lease is unreadable, a standby streams from that holder only
    /// until it runs out.
    pub tenure: Option<Tenure>,
    /// Whom the standby's server streams from, as last configured.
    pub upstream: Upstream,
    /// A writable server whose WAL, written up to `inserted`, has been flushed to
    /// `flushed` and no further since `since` (in this process); `None` while it flushes
    /// all it writes, or moves on.
    pub wal_stall: Option<WalStall>,
}

/// WAL written and not flushed, the flush position unmoved: every commit waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalStall {
    /// Since when the flush position has stood at `flushed` behind the insert position.
    pub since: Mono,
    /// The flush position.
    pub flushed: Lsn,
    /// The insert position, as last read.
    pub inserted: Lsn,
}

impl WalStall {
    /// The stall as read `now`: the insert and flush positions of a writable server,
    /// and the stall read before. `None` once everything written is flushed, or when
    /// all that lies between is the header of the page the flush position starts
    /// (a WAL switch on an idle server); a new flush position starts the count again.
    #[must_use]
    pub fn next(before: Option<WalStall>, inserted: Lsn, flushed: Lsn, now: Mono) -> Option<Self> {
        (inserted > flushed && !header_only(inserted, flushed)).then(|| WalStall {
            since: before
                .filter(|b| b.flushed == flushed)
                .map_or(now, |b| b.since),
            flushed,
            inserted,
        })
    }
}

/// The size of a WAL page (PostgreSQL's `XLOG_BLCKSZ`, 8 kB as Debian builds it).
const WAL_PAGE: u64 = 8192;

/// The size of a WAL segment's first page header (`SizeOfXLogLongPHD`); every other
/// page's is shorter.
const LONG_PAGE_HEADER: u64 = 40;

/// Whether `inserted` is only past the header of the page that begins at `flushed`:
/// after a WAL switch (a failover's new timeline, `pg_switch_wal()`) an idle server's
/// insert position points past the new page's header, which nothing is flushed for
/// until the next record. No commit waits on it.
fn header_only(inserted: Lsn, flushed: Lsn) -> bool {
    flushed.0.is_multiple_of(WAL_PAGE) && inserted.0.saturating_sub(flushed.0) <= LONG_PAGE_HEADER
}

impl Observation {
    /// How long ago the last accepted renewal began, if there was one.
    pub fn since_renewal(&self) -> Option<Duration> {
        self.renewed.map(|r| self.now.since(r))
    }
}

/// What the manager that saw `seen` answers to `token`: for a standby, its positions,
/// on the newest timeline it holds (`wal_timeline`, read from its WAL files, or its
/// positions' own); `None` for any other server, or a standby with no position yet.
#[must_use]
pub fn answer(seen: &Observation, token: &str, wal_timeline: Option<u32>) -> Option<Answer> {
    let Server::Standby(standby) = &seen.server else {
        return None;
    };
    let furthest = standby.furthest()?;
    let replayed = standby.replayed.map_or(furthest.lsn, |p| p.lsn);
    Some(Answer {
        token: token.to_owned(),
        timeline: furthest.timeline.max(wal_timeline.unwrap_or(0)),
        received: standby.received.map_or(replayed, |p| p.lsn),
        replayed,
    })
}

/// What the manager of pod `me` (its Lease holder identity) reports of the server it saw
/// in `seen`, its `last` report before: a primary or a standby and its timeline (a
/// standby's furthest position's), and for a primary the term of a Lease read this round
/// that names `me` (a round that could not read the Lease keeps the term last reported,
/// so an API server's hiccup costs no write). `None` while the server does not answer.
#[must_use]
pub fn report_of(seen: &Observation, me: &str, last: Option<ServerRole>) -> Option<ServerRole> {
    match &seen.server {
        Server::Writable { position } => Some(ServerRole {
            primary: true,
            timeline: position.timeline,
            term: match seen.lease.seen() {
                Some(l) => l.names(me).then_some(l.transitions),
                None => last.filter(|r| r.primary).and_then(|r| r.term),
            },
        }),
        Server::Standby(s) => s.furthest().map(|p| ServerRole {
            primary: false,
            timeline: p.timeline,
            term: None,
        }),
        Server::Down { .. } | Server::Unanswering => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_lsn_reads_and_prints_as_postgresql_writes_it() {
        let lsn: Lsn = "16/B374D848".parse().unwrap_or_default();
        assert_eq!(lsn, Lsn((0x16 << 32) | 0xB374_D848));
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>(), Ok(Lsn(0)));
    }

    #[test]
    fn a_release_keeps_the_higher_position_and_never_erases_one() {
        assert_eq!(released_position(Some(Lsn(9)), None), Some(Lsn(9)));
        assert_eq!(released_position(Some(Lsn(9)), Some(Lsn(5))), Some(Lsn(9)));
        assert_eq!(released_position(Some(Lsn(5)), Some(Lsn(9))), Some(Lsn(9)));
        assert_eq!(released_position(None, Some(Lsn(5))), Some(Lsn(5)));
        assert_eq!(released_position(None, None), None);
    }

    #[test]
    fn a_string_that_is_no_lsn_is_refused() {
        for bad in ["", "16", "/1", "1/", "x/1", "1/123456789", "1/2/3"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_later_timeline_is_ahead_whatever_its_lsn() {
        let old = Position {
            timeline: 1,
            lsn: Lsn(900),
        };
        let new = Position {
            timeline: 2,
            lsn: Lsn(100),
        };
        assert!(new > old);
    }
}
