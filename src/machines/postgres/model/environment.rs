//! What the world does on its own ([`Move`]): the kubelet, the StatefulSet controller,
//! the pods' agents and servers, the network and the people around the cluster.

use super::*;

impl World {
    /// The world takes `mv`.
    pub(super) fn environment_step(&mut self, mv: &Move) {
        self.quiet_settles = 0;
        match *mv {
            Move::Recreate(k) => self.recreate(k),
            Move::BecomesReady(k) => {
                if let Some(p) = self.pods.get_mut(&k).filter(|p| !p.terminating) {
                    p.ready = true;
                    p.probe_blocked = false;
                }
            }
            Move::BecomesUnready(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.ready = false;
                    p.probe_blocked = false;
                }
            }
            Move::ProbeBlocked(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.ready = false;
                    p.probe_blocked = true;
                }
            }
            Move::Evicted(k) => {
                self.pods.remove(&k);
            }
            Move::ScaledDown => {
                let n = self.sts.as_ref().map_or(0, |(_, r)| *r);
                // An assumption (`docs/fencing.md`): what the primary sent before reaches
                // every remaining standby that streams before a removed pod is gone.
                let streaming: Vec<i32> = self
                    .streaming
                    .iter()
                    .copied()
                    .filter(|k| ordinal(*k) < n)
                    .collect();
                let removed = self.pods_beyond(n);
                if !removed.is_empty() {
                    for k in streaming {
                        self.replicate(k);
                    }
                }
                self.pods.retain(|k, _| *k < n || *k >= GONE);
                self.claims_scaled_away(&removed, n);
            }
            Move::JobFinishes { nth, ok } => {
                let running: Vec<usize> = (0..self.jobs.len())
                    .filter(|i| self.jobs[*i].done.is_none())
                    .collect();
                if let Some(i) = running.get(usize::from(nth)) {
                    self.finish(*i, ok);
                }
            }
            Move::Drift => self.in_sync = InSync::default(),
            // Without a destination the request is a Degraded hold (unit-tested), which
            // the liveness phase would read as a quiet rest it is not.
            Move::RequestBackup if self.backup => self.backup_token += 1,
            Move::RequestBackup => {}
            Move::RequestSwitchover(k) => {
                let n = self.switchover.map_or(0, |(_, n)| n) + 1;
                self.switchover = Some((k, n));
            }
            Move::SkipFinalBackup => self.skip_final = true,
            Move::AgentTick(k) => self.agent_tick(k),
            Move::Partition(k) => self.partition(k),
            Move::Heal(k) => self.heal(k),
            Move::ClockSkew(sign) => self.skew = i64::from(sign) * SKEW_SECONDS,
            Move::ServerStops(k) => self.server_stops(k),
            Move::RefuseNext(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.refuse_next = true;
                }
            }
            Move::SlowRenewal(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.slow_next = true;
                }
            }
            Move::WalHangs(k) => {
                let now = self.now;
                if let Some(p) = self.pods.get_mut(&k).filter(|p| p.writable) {
                    p.wal_hung.get_or_insert(now);
                }
            }
            Move::Pause(k) => self.pause(k),
            Move::Resume(k) => self.resume(k),
            Move::PromotionEnds(k) => self.promotion_ends(k),
            Move::ServerCrashes(k) => self.server_crashes(k),
            Move::TaskFails(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.fail_task = true;
                }
            }
            Move::Deleted(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.terminating = true;
                    p.ready = false;
                }
            }
            Move::LabelGarbled(k) => {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.garbled = true;
                }
            }
            Move::PromotedByHand(k) => self.promoted_by_hand(k),
            Move::ForeignFiles(k) => {
                if self.pods.get(&k).is_some_and(|p| p.server == Srv::Down)
                    && !self.volumes.contains_key(&k)
                {
                    self.volumes.insert(k, Vol::Foreign);
                }
            }
            Move::ForceDeleted(k) => self.force_delete(k),
            Move::StreamBreaks(k) => self.stream_breaks(k),
            Move::AnswerLost(k) => {
                self.answers_lost.insert(k);
            }
            Move::VolumeLost(k) => {
                let others = self.volumes.iter().any(|(j, v)| *j != k && v.has_data());
                // Not while a force-deleted pod's server still runs on it: that server
                // would lose its disk too, which the model does not play.
                if others && self.pods.contains_key(&k) && !self.pods.contains_key(&(GONE + k)) {
                    self.pods.remove(&k);
                    self.claims.remove(&k);
                    self.volumes.remove(&k);
                    self.received.remove(&k);
                    self.streaming.remove(&k);
                }
            }
            Move::LeaseDeleted => {
                // The agents read no Lease (as unreadable: they cannot renew it) until
                // the operator creates it again; a writable holder stops by `T` after
                // its last renewal, or at once once it reads one naming nobody.
                self.last_holder = self
                    .lease
                    .as_ref()
                    .and_then(|l| l.holder)
                    .or(self.last_holder);
                self.mark_lost |= self.served;
                self.lease = None;
            }
            Move::RequestRestore(share) => self.request_restore(share),
            Move::SettingsRead(k) => {
                let settings = self.restart_settings;
                let runs = self.runs();
                if let Some(p) = self.pods.get_mut(&k).filter(|p| !p.paused) {
                    p.settings_judged = settings;
                    p.sync_runs = Some(runs);
                }
            }
            Move::Write => self.write(),
            Move::Replicate(k) => self.replicate(k),
            Move::Terminated(k) => {
                if self.pods.get(&k).is_some_and(|p| p.terminating) {
                    self.pods.remove(&k);
                }
            }
            Move::LeaseCleared => {
                // A writable holder's agent sees it on its next renewal (within R) and
                // fences at once; the model takes the two as one move, so the Lease's
                // renewal time (its last hand-over) is no later than any renewal of a
                // server still writable.
                let holder = self.lease.as_ref().and_then(|l| l.holder);
                self.last_holder = holder.or(self.last_holder);
                if let Some(l) = self.lease.as_mut() {
                    l.holder = None;
                    l.version += 1;
                }
                if let Some((k, uid)) = holder
                    && self
                        .pods
                        .get(&k)
                        .is_some_and(|p| p.uid == uid && p.writable && p.cut.is_none() && !p.paused)
                {
                    self.agent_tick(k);
                    self.server_stops(k);
                }
            }
            Move::BackupJobDeleted(nth) => {
                let finished: Vec<u64> = self
                    .jobs
                    .iter()
                    .filter(|j| j.done.is_some())
                    .filter(|j| matches!(j.kind, JobKind::Backup | JobKind::Final))
                    // An on-demand one only once a persisted state served its token.
                    .filter(|j| {
                        !self.backup_keys.contains(&j.key)
                            || self.persisted_keys.borrow().contains(&j.key)
                    })
                    .map(|j| j.uid)
                    .collect();
                if !finished.is_empty() {
                    let uid = finished[usize::from(nth) % finished.len()];
                    self.jobs.retain(|j| j.uid != uid);
                }
            }
        }
    }
}

impl World {
    /// The ordinals of the pods a StatefulSet of `n` replicas removes (a force-deleted
    /// pod, [`GONE`] and above, is the kubelet's, not the StatefulSet's).
    pub(super) fn pods_beyond(&self, n: i32) -> Vec<i32> {
        self.pods
            .keys()
            .copied()
            .filter(|k| *k >= n && *k < GONE)
            .collect()
    }

    /// The StatefulSet's claim retention policy (`whenScaled`), as the operator renders
    /// it ([`crate::machines::postgres::render::when_scaled`]): with `Delete`, the
    /// claims of the pods `removed` by a scale-down to `n` go with them.
    pub(super) fn claims_scaled_away(&mut self, removed: &[i32], n: i32) {
        if crate::machines::postgres::render::when_scaled(n) != "Delete" {
            return;
        }
        for k in removed {
            self.claims.remove(k);
            self.volumes.remove(k);
            self.received.remove(k);
            self.streaming.remove(k);
        }
    }
}
