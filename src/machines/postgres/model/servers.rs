//! The servers and the Lease in the PostgresCluster world: which pods run a writable
//! server, the holder's agent (renew, or stop its server), writes and their
//! replication, and the Lease's hand-overs.

use super::agent::{Srv, Vol};
use super::history::Pos;
use super::*;
use crate::instance::AgentState;

impl World {
    /// The pods running a writable server (keys of [`World::pods`]: a force-deleted
    /// one's still running counts, [`GONE`]; a paused one counts until its fence would
    /// stop it as it resumes: [`World::may_write`]).
    pub(super) fn writable(&self) -> Vec<i32> {
        self.pods
            .iter()
            .filter(|(_, p)| self.may_write(p))
            .map(|(k, _)| *k)
            .collect()
    }

    /// Whether `p` runs a writable server now or may once it resumes: paused, its
    /// runtime's fence thread kills the server as it resumes once `T` has passed since
    /// its last accepted renewal began ([`World::resume`]), so from then on it can
    /// write nothing more.
    pub(super) fn may_write(&self, p: &Pod) -> bool {
        p.writable && !(p.paused && p.agent.guarded() && self.fence_passed(p))
    }

    /// Whether `T` (the pod's own, from the `L` it was created with) has passed since
    /// its agent's last accepted renewal began (or it never renewed).
    pub(super) fn fence_passed(&self, p: &Pod) -> bool {
        p.renewed.is_none_or(|r| {
            self.now >= r + chrono::Duration::seconds(fence_seconds(p.lease_seconds))
        })
    }

    /// The pod whose agent is `holder` (`(ordinal, uid)`): the pod object, or a
    /// force-deleted one still running ([`GONE`]).
    pub(super) fn pod_of(&self, (k, uid): (i32, u64)) -> Option<&Pod> {
        [k, GONE + k]
            .iter()
            .filter_map(|key| self.pods.get(key))
            .find(|p| p.uid == uid)
    }

    /// Where ordinal `k`'s data directory stands (an empty one at a new cluster's start).
    pub(super) fn pos(&self, k: i32) -> Pos {
        self.received.get(&k).copied().unwrap_or(Pos::START)
    }

    /// How much of the writable history ordinal `k`'s data holds: up to where its
    /// timeline and the writable one agree, not its LSN alone.
    pub(super) fn held(&self, k: i32) -> u64 {
        self.timelines.shared(self.pos(k), self.head)
    }

    /// Ordinal `k`'s data now stands at the writable head.
    pub(super) fn at_head(&mut self, k: i32) {
        let head = self.head;
        self.received.insert(k, head);
    }

    /// Pod `k`'s server is promoted: its data moves to a new timeline, forked where it
    /// stands.
    pub(super) fn fork(&mut self, k: i32) {
        let forked = self.timelines.fork(self.pos(k));
        self.received.insert(k, forked);
    }

    /// `target`'s data becomes the writable timeline: promoted by its own agent while it
    /// runs (`running`: it must have been Ready when it was labelled primary), or locally
    /// as its container starts labelled primary. It must be the most advanced of the
    /// standbys that are Ready (and were when the Lease was handed to it), by how much
    /// of the writable history each holds (in a planned switchover every standby Ready
    /// when the old primary stopped cleanly received everything: [`World::agent_tick`]).
    pub(super) fn promote(&mut self, target: i32, running: bool) {
        let mine = self.held(target);
        if let Some(x) = self.lease.as_ref().and_then(|l| l.released_lsn)
            && mine < x
        {
            self.violations.push(format!(
                "promoted pod {target} at WAL {mine}, short of the {x} a primary acknowledged before it stopped cleanly for a switchover"
            ));
        }
        if self.required() && mine < self.acked {
            self.violations.push(format!(
                "promoted pod {target} at WAL {mine}, short of the {} a standby had acknowledged (synchronous replication)",
                self.acked
            ));
        }
        if let Some(l) = self.lease.as_mut() {
            l.released_lsn = None;
        }
        let missed_at_hand_over = self.missed_at_hand_over.take();
        let away_at_hand_over = self.away_at_hand_over.take().unwrap_or_default();
        if let Some((k, theirs)) = self
            .pods
            .iter()
            .filter(|(k, p)| {
                **k != target && **k != self.db_primary && p.ready && !p.terminating && !p.writable
            })
            .filter(|(k, _)| !away_at_hand_over.contains(*k))
            .filter(|(k, _)| {
                missed_at_hand_over
                    .as_ref()
                    .and_then(|m| m.get(*k).copied())
                    .unwrap_or_else(|| self.missed(**k))
                    < crate::machines::postgres::decide::switching_over::surveying::SURVEYS_FOR_EVERY_MEMBER
            })
            .map(|(k, _)| (*k, self.held(*k)))
            .find(|(_, theirs)| *theirs > mine)
        {
            self.violations.push(format!(
                "promoted pod {target} at WAL {mine} while pod {k} had received {theirs} (at {:?} and {:?}; the writable history at {:?})",
                self.pos(target),
                self.pos(k),
                self.head
            ));
        }
        if running
            && self
                .pods
                .get(&target)
                .is_none_or(|p| !p.ready && p.labelled_unready)
        {
            self.violations.push(format!(
                "promoted pod {target}, which is not Ready and was labelled primary while it was not"
            ));
        }

        let old = self.db_primary;
        let old_serving = self.pods.get(&old).is_some_and(|p| p.ready);
        if !old_serving {
            // A failover: the round's primary lost its role by failing, not by handing it
            // over, so the order no longer binds it.
            self.round_primary = None;
        }
        // The old primary's server keeps running until its agent fences it.
        if let Some(p) = self.pods.get_mut(&target) {
            p.writable = true;
        }
        self.db_primary = target;
        // The writable history is now the target's (its own timeline, forked as it was
        // promoted; an old primary's data started again continues its own).
        self.head = self.pos(target);
    }

    /// The agents of pods that wait to start (for their label, the Lease, their data)
    /// look now: they poll, so a change of label or Lease reaches them within a round.
    pub(super) fn start_primaries(&mut self) {
        let waiting: Vec<i32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.server == Srv::Down && !p.agent.guarded())
            .map(|(k, _)| *k)
            .collect();
        for k in waiting {
            self.agent_tick(k);
        }
    }

    /// Whether pod `k` has received all a primary that stopped cleanly on demotion
    /// wrote (the Lease's released position), if one did.
    pub(super) fn caught_up(&self, k: i32) -> bool {
        let released = self.lease.as_ref().and_then(|l| l.released_lsn);
        released.is_none_or(|x| self.held(k) >= x)
    }

    /// Every standby connected to the writable server receives all it wrote (its clean
    /// stop waits for its walsenders). One not connected yet (the server came back
    /// after a crash, and the standby has not reconnected) receives nothing.
    pub(super) fn clean_stop_replicates(&mut self) {
        let standbys: Vec<i32> = self
            .pods
            .iter()
            .filter(|(k, p)| {
                p.ready
                    && !p.writable
                    && !p.terminating
                    && p.server == Srv::Standby
                    && self.streaming.contains(k)
            })
            .map(|(k, _)| *k)
            .collect();
        for k in standbys {
            self.at_head(k);
        }
        self.acknowledge();
    }

    /// The synchronous terms the spec asks for: `spec.synchronous` and the members.
    pub(super) fn runs(&self) -> Runs {
        (self.synchronous.clone(), self.replicas)
    }

    /// Before an edit changes the terms: every server that runs the world's own runs
    /// them as they were, until its manager reads the new ones.
    pub(super) fn freeze_runs(&mut self) {
        let runs = self.runs();
        for p in self.pods.values_mut() {
            p.sync_runs.get_or_insert_with(|| runs.clone());
        }
    }

    /// `spec.synchronous` asks for `Required`: acknowledged commits are promised.
    fn required(&self) -> bool {
        self.synchronous
            .as_ref()
            .is_some_and(|s| s.data_durability == DataDurability::Required)
    }

    /// The furthest commit the writable server may acknowledge now under `Required`:
    /// what `number` of the standbys streaming from it have received (every one in
    /// [`World::streaming`] joined this server, so its position is on this timeline);
    /// `Any`: the `number`-th most advanced of them; `First`: the least advanced of the
    /// first `number` by ordinal (PostgreSQL's priority list is the members by ordinal).
    /// `None`: fewer stream, and commits wait.
    fn sync_acked(&self) -> Option<u64> {
        let [w] = self.writable()[..] else {
            return None;
        };
        // The terms the writable server runs, which may not be the spec's yet.
        let (spec, members) = self.pods.get(&w)?.sync_runs.clone().unwrap_or(self.runs());
        let spec = spec.filter(|s| s.data_durability == DataDurability::Required)?;
        let number = usize::try_from(spec.number).ok().filter(|n| *n > 0)?;
        let mut streaming: Vec<u64> = self
            .streaming
            .iter()
            .filter(|k| ordinal(**k) != ordinal(w) && ordinal(**k) < members)
            .map(|k| self.held(*k))
            .collect();
        if streaming.len() < number {
            return None;
        }
        match spec.method {
            SyncMethod::First => streaming[..number].iter().min().copied(),
            SyncMethod::Any => {
                streaming.sort_unstable_by(|a, b| b.cmp(a));
                streaming.get(number - 1).copied()
            }
        }
    }

    /// The writable server acknowledges every commit its synchronous standbys have now.
    fn acknowledge(&mut self) {
        if let Some(x) = self.sync_acked() {
            self.acked = self.acked.max(x);
        }
    }

    /// A client commits on the writable server, if there is exactly one and it accepts
    /// writes (not stopping, not paused, its WAL volume not hung: the commit waits).
    pub(super) fn write(&mut self) {
        if let [k] = self.writable()[..]
            && self
                .pods
                .get(&k)
                .is_some_and(|p| p.server == Srv::Writable && !p.paused && p.wal_hung.is_none())
        {
            self.head.lsn += 1;
            self.at_head(k);
            // A force-deleted pod's server writes on its ordinal's volume: a pod made
            // there later starts on what it wrote (found from seed 0: without this, the
            // recreated primary released a position short of the commit on its disk).
            self.at_head(ordinal(k));
        }
    }

    /// Standby `k` catches up with the writable server, if one runs and its data is on
    /// the writable history. Past a fork on a timeline the writable one left (it received
    /// an old primary's last writes), it cannot follow: its stream breaks, as
    /// PostgreSQL's WAL receiver refuses a timeline that forked before its position.
    pub(super) fn replicate(&mut self, k: i32) {
        let streams = self.pods.get(&k).is_some_and(|p| {
            !p.writable
                && !p.terminating
                && !p.paused
                && p.server == Srv::Standby
                && p.stream_broken.is_none()
        });
        let source = self.writable();
        if streams
            && let [w] = source[..]
            && let Some(uid) = self.pods.get(&w).filter(|p| !p.paused).map(|p| p.uid)
            && self.follows(k, (ordinal(w), uid))
        {
            if self.held(k) < self.pos(k).lsn {
                self.stream_breaks(k);
                return;
            }
            self.at_head(k);
            self.streaming.insert(k);
            if let Some(p) = self.pods.get_mut(&k) {
                p.connected_to = Some(uid);
            }
            self.acknowledge();
        }
    }

    /// Whether standby `k`'s configuration lets it stream from the server of `(ordinal,
    /// uid)`: the `-rw` Service reaches whichever server writes; a holder's name only
    /// that holder's.
    fn follows(&self, k: i32, (w, uid): (i32, u64)) -> bool {
        self.pods.get(&k).is_some_and(|p| match &p.upstream {
            Upstream::Service => true,
            Upstream::Holder(h) => *h == format!("pg-{w}/{uid}"),
            Upstream::Nobody => false,
        })
    }

    /// Whether the Lease's holder runs a writable server (renewing, cut off, paused
    /// short of `T`, or force-deleted but still running).
    pub(super) fn holder_writable(&self) -> bool {
        self.lease
            .as_ref()
            .and_then(|l| l.holder)
            .and_then(|h| self.pod_of(h))
            .is_some_and(|p| self.may_write(p))
    }

    /// Pod `k` loses its path to the API server: its agent can neither read nor renew
    /// the Lease nor read a new label; its server stays up, writable or not, and keeps
    /// replicating.
    pub(super) fn partition(&mut self, k: i32) {
        let now = self.now;
        if let Some(p) = self.pods.get_mut(&k).filter(|p| p.cut.is_none()) {
            p.cut = Some(now);
        }
    }

    /// Pod `k` reaches the API server again.
    pub(super) fn heal(&mut self, k: i32) {
        if let Some(p) = self.pods.get_mut(&k).filter(|p| p.cut.is_some()) {
            p.cut = None;
        }
    }

    /// The operator hands the Lease over at `at`: its old holder must be certainly
    /// fenced by then (a writable holder renews, so it never is until it stops).
    pub(super) fn hand_lease(
        &mut self,
        holder: Option<(i32, u64)>,
        gate: LsnGate,
        at: DateTime<Utc>,
        transitions: i32,
    ) {
        let Some(l) = self.lease.clone() else {
            return;
        };
        if self.holder_writable()
            && let Some((k, _)) = l.holder.filter(|h| Some(*h) != holder)
        {
            self.violations.push(format!(
                "the Lease was handed from pod {k} to {holder:?} while pod {k} still runs a writable server"
            ));
        }
        if holder.is_some() {
            let missed = self.pods.keys().map(|k| (*k, self.missed(*k))).collect();
            self.missed_at_hand_over = Some(missed);
            let here = |k: &i32| self.pods.get(k).is_some_and(|p| p.ready && !p.terminating);
            let away = (0..MAX_PODS).filter(|k| !here(k)).collect();
            self.away_at_hand_over = Some(away);
        }
        self.lease = Some(ModelLease {
            holder,
            renewed: at,
            seen: at,
            released_by: None,
            released_lsn: match gate {
                LsnGate::Keep => l.released_lsn,
                LsnGate::Waive => None,
            },
            transitions,
            version: l.version + 1,
            duration: self.lease_seconds,
            initialized: l.initialized,
            survey: l.survey.clone(),
            never_held: false,
        });
        self.start_primaries();
    }

    /// Move the running cluster's primary to pod `k` (as a failover did before the
    /// status was lost): its server is the writable one and it holds the Lease.
    pub(super) fn primary_moved_to(&mut self, k: i32) {
        for (j, p) in &mut self.pods {
            p.role = Some(if *j == k {
                Role::Primary
            } else {
                Role::Replica
            });
            p.writable = *j == k;
            p.server = if *j == k { Srv::Writable } else { Srv::Standby };
            p.agent = if *j == k {
                AgentState::Primary
            } else {
                AgentState::Standby
            };
            p.renewed = Some(self.now);
            self.volumes.insert(
                *j,
                if *j == k {
                    Vol::Primary { clean: false }
                } else {
                    Vol::Standby
                },
            );
        }
        self.db_primary = k;
        self.round_primary = Some(k);
        self.streaming = self.pods.keys().copied().filter(|j| *j != k).collect();
        if let Some(uid) = self.pods.get(&k).map(|p| p.uid) {
            for (j, p) in &mut self.pods {
                if *j != k {
                    p.upstream = Upstream::Holder(format!("pg-{k}/{uid}"));
                    p.connected_to = Some(uid);
                }
            }
        }
        let holder = self.pods.get(&k).map(|p| (k, p.uid));
        let now = self.now;
        if let Some(l) = self.lease.as_mut() {
            l.holder = holder;
            l.renewed = now;
            l.seen = now;
            l.transitions = 1;
            l.version += 1;
        }
    }

    pub(super) fn primary_labels(&self) -> Vec<i32> {
        self.pods
            .iter()
            .filter(|(_, p)| p.role == Some(Role::Primary))
            .map(|(k, _)| *k)
            .collect()
    }
}
