//! Each pod's agent in the PostgresCluster world: the instance manager's own
//! [`decide`](crate::instance::decide) (nothing here re-implements it), run for every pod
//! on its own clock, its actions applied to the world.
//!
//! An agent takes a round every `R` (sooner when its decision asks: a fence deadline),
//! on the true time ([`World::clock_to`]), and whenever the environment says
//! ([`Move::AgentTick`]). Its steps are not atomic where reality is not:
//! - a stop (clean or immediate) runs until [`Move::ServerStops`]: meanwhile the server
//!   may still write, and the agent keeps taking rounds;
//! - a write to the API server (a renewal, a release) can fail ([`Move::RefuseNext`], or
//!   a partition);
//! - a renewal can be slower than `R` ([`Move::SlowRenewal`]: it began `R + 1` s before
//!   it was accepted, and the agent counts from its start);
//! - the whole pod can pause ([`Move::Pause`]: no rounds, no writes, no progress of a
//!   stop) and resume ([`Move::Resume`]: the runtime's fence thread, which needs no round,
//!   kills a server whose deadline passed before anything else runs).

use std::cell::RefCell;
use std::collections::BTreeSet;

use super::*;
use crate::engine::{Decision, Wait};
use crate::instance::{
    self, AgentAction, AgentSpec, AgentState, DataDir, Finished, Instance, LeaseRead, LeaseSeen,
    LeaseTerms, Lsn, Mono, Observation, Position, ReleasedAt, RoleLabel, Server, Standby, Task,
    WalStall,
};

/// How an agent decides: [`instance::decide`], or a planted bug's distortion of it.
pub(super) type AgentDecide =
    fn(&AgentSpec, &AgentState, &Observation, bool) -> Decision<AgentState, AgentAction>;

/// The real agent.
pub(super) const REAL_AGENT: AgentDecide = instance::decide;

/// Whether an agent may answer a survey, as far as whom it streams from goes.
pub(super) type AnswerGate = fn(&AgentSpec, &Observation) -> bool;

/// The real gate.
pub(super) const REAL_GATE: AnswerGate = instance::may_answer;

/// A pod's server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Srv {
    /// No server runs.
    Down,
    /// A standby.
    Standby,
    /// It accepts writes.
    Writable,
    /// Asked to promote: it finishes recovery ([`Move::PromotionEnds`]); counted as
    /// writable from the request on.
    Promoting,
    /// A stop runs (`clean`: fast, else immediate); it may still write until it is down.
    Stopping { clean: bool },
}

/// What a pod's volume holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Vol {
    /// A primary's data (`clean`: shut down cleanly).
    Primary { clean: bool },
    /// A standby's data.
    Standby,
    /// Files that are no data directory of ours ([`Move::ForeignFiles`]).
    Foreign,
}

impl Vol {
    /// It holds the cluster's data (a primary's or a standby's).
    pub(super) fn has_data(&self) -> bool {
        matches!(self, Vol::Primary { .. } | Vol::Standby)
    }
}

thread_local! {
    /// The agent edges taken on this thread (one test), as `From -> To (Reason)`.
    static AGENT_EDGES: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

/// The agent edges taken so far on this thread.
pub(super) fn agent_edges_taken() -> BTreeSet<String> {
    AGENT_EDGES.with(|e| e.borrow().clone())
}

/// The rounds an agent takes at one instant before it waits (a container that keeps
/// failing backs off).
const ROUNDS_AT_ONCE: usize = 12;

/// A monotonic reading for the true time `t` (every pod's clock runs at the same rate).
fn mono(t: DateTime<Utc>) -> Mono {
    Mono(u64::try_from((t - epoch()).num_milliseconds() + 1_000_000).unwrap_or(0))
}

fn position(at: Pos) -> Position {
    Position {
        timeline: at.timeline,
        lsn: Lsn(at.lsn),
    }
}

fn seconds(d: std::time::Duration) -> chrono::Duration {
    chrono::Duration::milliseconds(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl World {
    /// Whether every pod runs the real agent.
    pub(super) fn agent_decide_is_real(&self) -> bool {
        std::ptr::fn_addr_eq(self.agent_decide, REAL_AGENT)
            && std::ptr::fn_addr_eq(self.answer_gate, REAL_GATE)
    }

    /// What pod `k`'s agent runs with: the L its pod was created with (its
    /// environment), T = ⌊L/2⌋, R, G = 2 s, a 120 s bound on a clean stop, re-cloning on
    /// a failed rewind unless the world turns it off.
    fn agent_spec(&self, k: i32, p: &Pod) -> AgentSpec {
        AgentSpec {
            reclone_on_rewind_failure: !self.reclone_off,
            ..AgentSpec::with_lease(LeaseTerms::for_lease(
                format!("pg-{}/{}", ordinal(k), p.uid),
                u64::try_from(p.lease_seconds).unwrap_or(15),
            ))
        }
    }

    /// A new container's agent and server (a new pod, or a restarted container).
    pub(super) fn fresh_container(p: &mut Pod, now: DateTime<Utc>) {
        p.agent = AgentState::Starting;
        p.server = Srv::Down;
        p.writable = false;
        p.renewed = None;
        p.finished = None;
        p.stream_broken = None;
        p.streamed = false;
        p.cloned = false;
        p.tenure = None;
        p.answered = None;
        p.next_round = now + chrono::Duration::seconds(RENEW_SECONDS);
    }

    /// What pod `k`'s agent observes now.
    fn observation(&self, k: i32) -> Option<Observation> {
        let p = self.pods.get(&k)?;
        let mine = self.pos(k);
        let data = match self.volumes.get(&k) {
            None => DataDir::Empty,
            Some(Vol::Primary { clean }) => DataDir::Primary {
                clean: *clean,
                checkpoint: Some(position(mine)),
            },
            Some(Vol::Standby) => DataDir::Standby {
                clean: p.server == Srv::Down,
            },
            Some(Vol::Foreign) => DataDir::Foreign,
        };
        // The readiness probe measures whether the server answers, unless it is
        // blocked from outside while the server answers its own manager.
        let server = match p.server {
            Srv::Down => Server::Down { exit: None },
            Srv::Stopping { .. } => Server::Unanswering,
            _ if !p.ready && !p.probe_blocked => Server::Unanswering,
            Srv::Standby | Srv::Promoting => Server::Standby(Standby {
                received: Some(position(mine)),
                replayed: Some(position(mine)),
                streaming: p.stream_broken.is_none(),
            }),
            Srv::Writable => Server::Writable {
                position: position(self.head),
            },
        };
        let streamed = p.streamed || matches!(&server, Server::Standby(s) if s.streaming);
        let not_streaming_since = match server {
            Server::Standby(_) => p.stream_broken.map(mono),
            _ => None,
        };
        let lease = match (&self.lease, p.cut) {
            (Some(l), None) => LeaseRead::Seen(LeaseSeen {
                holder: l.holder.map(|(j, uid)| format!("pg-{j}/{uid}")),
                released_by: l.released_by.map(|(j, uid)| format!("pg-{j}/{uid}")),
                released_at: l.released_lsn.map(|x| ReleasedAt::Lsn(Lsn(x))),
                initialized: l.initialized,
                transitions: l.transitions,
                survey: l.survey.clone(),
                // renewTime (the holder's clock) + L, on this agent's (true time).
                holder_until: Some(mono(l.renewed + chrono::Duration::seconds(l.duration))),
            }),
            _ => LeaseRead::Unreadable,
        };
        let tenure = lease
            .seen()
            .and_then(LeaseSeen::tenure)
            .or(p.tenure.clone());
        Some(Observation {
            role: if p.garbled {
                RoleLabel::Unknown("garbled".to_owned())
            } else {
                p.role_seen.map_or(RoleLabel::Absent, RoleLabel::Is)
            },
            data,
            server,
            lease,
            now: mono(self.now),
            renewed: p.renewed.map(mono),
            stray: None,
            finished: p.finished,
            upstream_writable: self
                .pods
                .iter()
                .any(|(j, q)| *j != k && q.server == Srv::Writable),
            not_streaming_since,
            // As the manager keeps them (`manager::observing`, `acting`).
            streamed,
            cloned: p.cloned,
            tenure,
            upstream: p.upstream.clone(),
            // A hung WAL volume, as its manager reads it: the flush position standing
            // still behind what the server wrote, while the server may write.
            wal_stall: p.wal_hung.filter(|_| p.writable).map(|since| WalStall {
                since: mono(since),
                flushed: Lsn(self.head.lsn),
                inserted: Lsn(self.head.lsn + 1),
            }),
        })
    }

    /// Pod `k`'s agent takes one round now; whether it took a transition.
    fn agent_round(&mut self, k: i32) -> bool {
        let Some(p) = self.pods.get_mut(&k).filter(|p| !p.paused) else {
            return false;
        };
        if p.cut.is_none() {
            p.role_seen = p.role;
        }
        let Some(p) = self.pods.get(&k) else {
            return false;
        };
        let (spec, state, signalled) = (
            self.agent_spec(k, p),
            p.agent.clone(),
            p.terminating && p.cut.is_none(),
        );
        let Some(seen) = self.observation(k) else {
            return false;
        };
        let decision = (self.agent_decide)(&spec, &state, &seen, signalled);
        if let Some(p) = self.pods.get_mut(&k) {
            p.finished = None;
            p.streamed = seen.streamed;
            p.tenure.clone_from(&seen.tenure);
            // Its manager reports what its volume holds each round (`report.rs`).
            if p.cut.is_none() {
                p.data_reported = Some(matches!(
                    seen.data,
                    DataDir::Primary { .. } | DataDir::Standby { .. }
                ));
                // And what its server is (`instance::observe::report_of`), when it answers.
                let me = format!("pg-{k}/{}", p.uid);
                if let Some(role) = report_of(&seen, &me, p.server_reported) {
                    p.server_reported = Some(role);
                }
                // And answers a survey the Lease asks that it has not answered
                // (`answers::answer`), once it follows whom the Lease says
                // (`instance::may_answer`, or a planted gate), unless its answer is lost.
                if let Some(token) = seen.lease.seen().and_then(|l| l.survey.clone())
                    && p.answered.as_ref() != Some(&token)
                {
                    if self.answers_lost.remove(&k) {
                        p.answered = Some(token);
                    } else if let Some(said) = (self.answer_gate)(&spec, &seen)
                        .then(|| answer(&seen, &token, None))
                        .flatten()
                    {
                        p.answer = Some(said);
                        p.answered = Some(token);
                    }
                }
            }
        }
        let mut ok = true;
        for action in decision.actions() {
            if !self.agent_act(k, action) {
                ok = false;
                break;
            }
        }
        let now = self.now;
        let period = chrono::Duration::seconds(RENEW_SECONDS);
        let Some(p) = self.pods.get_mut(&k) else {
            return false;
        };
        match decision {
            Decision::Go { to, reason, .. } if ok => {
                let (from, into): (&str, &str) = (
                    instance::AgentKind::from(&state).into(),
                    instance::AgentKind::from(&to).into(),
                );
                AGENT_EDGES.with(|e| {
                    e.borrow_mut()
                        .insert(format!("{from} -> {into} ({reason})"))
                });
                p.next_round = now;
                if matches!(to, AgentState::Exited { .. }) {
                    if p.terminating {
                        // The deleted pod's container ends: the pod is gone.
                        self.pods.remove(&k);
                    } else {
                        // The container restarts (after a back-off).
                        p.ready = false;
                        Self::fresh_container(p, now);
                    }
                } else {
                    p.agent = to;
                }
                true
            }
            Decision::Stay {
                wait: Wait::Requeue(after),
                ..
            } if ok => {
                p.next_round = now + seconds(after).min(period);
                false
            }
            _ => {
                p.next_round = now + period;
                false
            }
        }
    }

    /// Pod `k`'s agent takes rounds now until it rests.
    pub(super) fn agent_tick(&mut self, k: i32) {
        for _ in 0..ROUNDS_AT_ONCE {
            if !self.agent_round(k) {
                break;
            }
        }
    }

    /// Carry out one action of pod `k`'s agent; whether it succeeded.
    fn agent_act(&mut self, k: i32, action: &AgentAction) -> bool {
        let now = self.now;
        let skew = chrono::Duration::seconds(self.skew);
        let me = self.pods.get(&k).map(|p| (ordinal(k), p.uid));
        // A long action succeeds, or fails having reached the primary (a planted
        // failure), or fails having reached none (`unreached`: nothing changed).
        let finished = |w: &mut World, task, ok| {
            if let Some(p) = w.pods.get_mut(&k) {
                p.finished = Some(Finished {
                    task,
                    ok,
                    unreached: false,
                });
            }
        };
        let unreached = |w: &mut World, task| {
            if let Some(p) = w.pods.get_mut(&k) {
                p.finished = Some(Finished {
                    task,
                    ok: false,
                    unreached: true,
                });
            }
        };
        let upstream = self.pods.values().any(|q| q.server == Srv::Writable);
        let long = matches!(
            action,
            AgentAction::Bootstrap
                | AgentAction::PromoteLocally
                | AgentAction::Clone
                | AgentAction::Rewind
        );
        if long
            && self
                .pods
                .get_mut(&k)
                .is_some_and(|p| std::mem::take(&mut p.fail_task))
        {
            let task = match action {
                AgentAction::Bootstrap => Task::Bootstrap,
                AgentAction::PromoteLocally => Task::PromoteLocally,
                AgentAction::Clone => Task::Clone,
                _ => Task::Rewind,
            };
            finished(self, task, false);
            return true;
        }
        match action {
            AgentAction::KillStray { .. } => true,
            AgentAction::Follow { holder } => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.upstream = holder.clone().map_or(Upstream::Nobody, Upstream::Holder);
                    // The reload restarts the WAL receiver.
                    p.connected_to = None;
                }
                self.streaming.remove(&k);
                true
            }
            // `Prepare::bootstrap` refuses a `$PGDATA` of foreign files.
            AgentAction::Bootstrap if self.volumes.get(&k) == Some(&Vol::Foreign) => {
                finished(self, Task::Bootstrap, false);
                true
            }
            AgentAction::Bootstrap if self.bootstrap_restores(k) => {
                finished(self, Task::Bootstrap, true);
                true
            }
            AgentAction::Bootstrap => {
                if self.served && !self.mark_lost {
                    self.violations.push(format!(
                        "pod {k} bootstrapped an empty database in place of the cluster's, which had served writes"
                    ));
                }
                self.volumes.insert(k, Vol::Primary { clean: true });
                if self.volumes.keys().any(|j| *j != k) {
                    // A database of its own beside the cluster's: it shares no history.
                    let apart = self.timelines.fork(Pos::START);
                    self.received.insert(k, apart);
                } else {
                    self.db_primary = k;
                    self.timelines = Timelines::default();
                    self.head = Pos::START;
                    self.received.insert(k, Pos::START);
                }
                finished(self, Task::Bootstrap, true);
                true
            }
            AgentAction::PromoteLocally => {
                self.volumes.insert(k, Vol::Primary { clean: true });
                self.fork(k);
                finished(self, Task::PromoteLocally, true);
                true
            }
            AgentAction::Clone => {
                if upstream {
                    self.volumes.insert(k, Vol::Standby);
                    self.at_head(k);
                    if let Some(p) = self.pods.get_mut(&k) {
                        p.cloned = true;
                    }
                }
                finished(self, Task::Clone, upstream);
                true
            }
            AgentAction::Rewind => {
                if upstream {
                    self.volumes.insert(k, Vol::Standby);
                    // pg_rewind takes it back to where its history and the writable
                    // one agree; it follows the writable timeline from there.
                    let kept = Pos {
                        timeline: self.head.timeline,
                        lsn: self.held(k),
                    };
                    self.received.insert(k, kept);
                    finished(self, Task::Rewind, true);
                } else {
                    // No writable primary to rewind from: pg_rewind changes nothing.
                    unreached(self, Task::Rewind);
                }
                true
            }
            AgentAction::StartStandby => {
                let standby = self.volumes.get(&k) == Some(&Vol::Standby);
                let settings = self.restart_settings;
                let runs = self.runs();
                if let Some(p) = self.pods.get_mut(&k).filter(|_| standby) {
                    p.server = Srv::Standby;
                    p.settings_started = settings;
                    p.settings_judged = settings;
                    p.sync_runs = Some(runs);
                    p.stream_broken = None;
                    p.streamed = false;
                    self.streaming.remove(&k);
                }
                standby
            }
            AgentAction::StartPrimary => {
                if !matches!(self.volumes.get(&k), Some(Vol::Primary { .. })) {
                    return false;
                }
                if k != self.db_primary {
                    self.promote(k, false);
                }
                self.volumes.insert(k, Vol::Primary { clean: false });
                let settings = self.restart_settings;
                let runs = self.runs();
                if let Some(p) = self.pods.get_mut(&k) {
                    p.server = Srv::Writable;
                    p.writable = true;
                    p.settings_started = settings;
                    p.settings_judged = settings;
                    p.sync_runs = Some(runs);
                }
                // A server that starts writable has no standby connected yet.
                self.streaming.clear();
                self.served = true;
                true
            }
            AgentAction::Promote => {
                if self.pods.get(&k).map(|p| p.server) != Some(Srv::Standby) {
                    return false;
                }
                self.fork(k);
                self.promote(k, true);
                self.volumes.insert(k, Vol::Primary { clean: false });
                if let Some(p) = self.pods.get_mut(&k) {
                    p.server = Srv::Promoting;
                }
                self.streaming.clear();
                true
            }
            AgentAction::Renew {
                lease,
                drop_released_lsn,
                mark_initialized,
            } => {
                if !self.api_accepts(k) || self.lease.as_ref().and_then(|l| l.holder) != me {
                    return false;
                }
                let slow = self
                    .pods
                    .get_mut(&k)
                    .is_some_and(|p| std::mem::take(&mut p.slow_next));
                let began = if slow {
                    now - chrono::Duration::seconds(RENEW_SECONDS + 1)
                } else {
                    now
                };
                let duration = i64::try_from(lease.as_secs()).unwrap_or(i64::MAX);
                if let Some(l) = self.lease.as_mut() {
                    l.renewed = began + skew;
                    l.seen = now;
                    l.duration = duration;
                    l.version += 1;
                    if *drop_released_lsn {
                        l.released_lsn = None;
                    }
                    if *mark_initialized {
                        l.initialized = true;
                        self.mark_lost = false;
                    }
                }
                if let Some(p) = self.pods.get_mut(&k) {
                    p.renewed = Some(began);
                }
                true
            }
            AgentAction::Release { lsn } => {
                if !self.api_accepts(k) || self.lease.as_ref().and_then(|l| l.holder) != me {
                    return false;
                }
                if let Some(l) = self.lease.as_mut() {
                    let before = l.released_lsn;
                    l.holder = None;
                    l.released_by = me;
                    // As the manager writes it (`lease::released`).
                    l.released_lsn =
                        instance::observe::released_position(l.released_lsn.map(Lsn), *lsn)
                            .map(|x| x.0);
                    l.version += 1;
                    // Invariant 16: the high-water mark of released positions.
                    if l.released_lsn < before {
                        self.violations.push(format!(
                            "pod {k}'s release (position {lsn:?}) lowered the released position on the Lease from {before:?} to {:?}",
                            l.released_lsn
                        ));
                    }
                }
                true
            }
            AgentAction::StopClean | AgentAction::StopImmediate => {
                let clean = *action == AgentAction::StopClean;
                if let Some(p) = self.pods.get_mut(&k).filter(|p| p.server != Srv::Down) {
                    p.server = Srv::Stopping { clean };
                }
                true
            }
            AgentAction::Kill => {
                self.server_down(k, false);
                true
            }
        }
    }

    /// Whether pod `k` reaches the API server and its next write is not refused.
    fn api_accepts(&mut self, k: i32) -> bool {
        self.pods
            .get_mut(&k)
            .is_some_and(|p| p.cut.is_none() && !p.paused && !std::mem::take(&mut p.refuse_next))
    }

    /// Pod `k`'s server is down (`clean`: after a clean stop).
    fn server_down(&mut self, k: i32, clean: bool) {
        let Some(p) = self.pods.get_mut(&k) else {
            return;
        };
        let was_primary = p.writable;
        p.server = Srv::Down;
        p.writable = false;
        p.stream_broken = None;
        p.connected_to = None;
        let uid = p.uid;
        for q in self.pods.values_mut() {
            if q.connected_to == Some(uid) {
                q.connected_to = None;
            }
        }
        self.streaming.remove(&k);
        if was_primary {
            self.volumes.insert(k, Vol::Primary { clean });
            self.streaming.clear();
        }
    }

    /// Pod `k`'s stop finishes: a clean one sends every standby that is Ready (streaming)
    /// all it wrote first.
    pub(super) fn server_stops(&mut self, k: i32) {
        let Some(p) = self.pods.get(&k).filter(|p| !p.paused) else {
            return;
        };
        if let Srv::Stopping { clean } = p.server {
            if clean && p.writable {
                self.clean_stop_replicates();
            }
            self.server_down(k, clean);
        }
    }

    /// Pod `k`'s promotion finishes: it accepts writes.
    pub(super) fn promotion_ends(&mut self, k: i32) {
        if let Some(p) = self
            .pods
            .get_mut(&k)
            .filter(|p| !p.paused && p.server == Srv::Promoting)
        {
            p.server = Srv::Writable;
        }
    }

    /// Pod `k`'s server exits on its own (a crash, an OOM kill).
    pub(super) fn server_crashes(&mut self, k: i32) {
        if self.pods.get(&k).is_some_and(|p| !p.paused) {
            self.server_down(k, false);
        }
    }

    /// Standby `k`'s WAL receiver stops streaming: it is no longer connected to the
    /// writable server (a clean stop sends it nothing, and it acknowledges nothing), and
    /// it receives nothing until its server starts again.
    pub(super) fn stream_breaks(&mut self, k: i32) {
        let now = self.now;
        if let Some(p) = self
            .pods
            .get_mut(&k)
            .filter(|p| !p.paused && p.server == Srv::Standby && p.stream_broken.is_none())
        {
            p.stream_broken = Some(now);
            self.streaming.remove(&k);
        }
    }

    /// Someone runs `pg_promote()` on standby `k` by hand while a primary runs; its
    /// agent, which asked no promotion, fences it at its next round (taken as one move
    /// with it: the model does not let a second writable server run meanwhile), and it
    /// rejoins through `pg_rewind`.
    pub(super) fn promoted_by_hand(&mut self, k: i32) {
        if !self.pods.values().any(|q| q.server == Srv::Writable) {
            return;
        }
        let Some(p) = self
            .pods
            .get_mut(&k)
            .filter(|p| !p.paused && p.cut.is_none() && p.server == Srv::Standby && p.ready)
        else {
            return;
        };
        if !matches!(p.agent, AgentState::Standby) {
            return;
        }
        p.server = Srv::Writable;
        p.writable = true;
        // Its recovery ends on a timeline of its own, forked where it stood.
        self.fork(k);
        self.agent_round(k);
        self.server_stops(k);
        self.agent_tick(k);
    }

    /// The whole pod `k` pauses.
    pub(super) fn pause(&mut self, k: i32) {
        if let Some(p) = self.pods.get_mut(&k) {
            p.paused = true;
        }
    }

    /// Pod `k` resumes. The runtime's fence thread (it needs no round of the agent) kills
    /// a server that may write and has not renewed for `T` before anything else runs.
    pub(super) fn resume(&mut self, k: i32) {
        let now = self.now;
        let Some(p) = self.pods.get(&k).filter(|p| p.paused) else {
            return;
        };
        let fence = p.writable && p.agent.guarded() && self.fence_passed(p);
        // Resuming, its backends complete the commits in flight as its fence thread
        // stops the server: a standby still connected acknowledges them, though the
        // Lease was handed to another member (which may lack them). While it names
        // nobody (released, or deleted and made anew) nobody else was promoted yet.
        let handed_on = self
            .lease
            .as_ref()
            .and_then(|l| l.holder)
            .is_some_and(|h| h != (ordinal(k), p.uid));
        if fence && handed_on {
            let uid = p.uid;
            for (j, q) in &self.pods {
                if *j != k && !q.paused && q.connected_to == Some(uid) {
                    self.violations.push(format!(
                        "pod {j} still streamed from pod {k} as it resumed, after the Lease left it: it would acknowledge the commits pod {k} finishes before its fence stops it"
                    ));
                }
            }
        }
        if let Some(p) = self.pods.get_mut(&k) {
            p.paused = false;
            p.next_round = now;
        }
        if fence {
            self.server_down(k, false);
        }
        self.agent_tick(k);
    }

    /// The true time moves to `now`: every agent takes the rounds due until then, in
    /// order.
    pub(super) fn clock_to(&mut self, now: DateTime<Utc>) {
        loop {
            let due = self
                .pods
                .iter()
                .filter(|(_, p)| !p.paused)
                .map(|(k, p)| (p.next_round, *k))
                .min();
            match due {
                Some((at, k)) if at <= now => {
                    self.now = self.now.max(at);
                    let before = self.pods.get(&k).map(|p| p.next_round);
                    self.agent_tick(k);
                    // A round always moves its next one on (or ends the pod).
                    if let Some(p) = self.pods.get_mut(&k)
                        && Some(p.next_round) <= before
                    {
                        p.next_round = self.now + chrono::Duration::seconds(RENEW_SECONDS);
                    }
                }
                _ => break,
            }
        }
        self.now = now;
    }
}

/// Agent edges the model takes in no run, each with why; unit tests take them
/// (`src/instance/tests/`).
pub(super) const UNIT_TESTED_ONLY: &[(&str, &str)] = &[(
    "Promoting -> Stopping (Demoted)",
    "the operator labels `demoted` only an old primary it hands over from, never a pod it is promoting; a story that labels one so by hand leaves a cluster without a primary that the model's operator cannot recover",
)];

/// Every agent edge the runs on this thread took, against the table: the edges none took
/// (besides those only unit tests take).
pub(super) fn agent_edges_never_taken() -> Vec<String> {
    let taken = agent_edges_taken();
    <Instance as Machine>::table()
        .iter()
        .map(|e| {
            let (from, to): (&str, &str) = (e.from.into(), e.to.into());
            format!("{from} -> {to} ({})", e.reason)
        })
        .filter(|e| !taken.contains(e))
        .filter(|e| !UNIT_TESTED_ONLY.iter().any(|(u, _)| u == e))
        .collect()
}

/// Stories for the agent edges that generated runs seldom take: each starts from a
/// running cluster of three (pod 0 primary) that `setup` changes, and tells `events`; the
/// liveness phase then settles the world as for any run.
#[cfg(test)]
pub(super) mod stories;
