//! What the people around the cluster do once the world is left alone: each escape
//! hatch a status message names, used as a person would use it, so that the liveness
//! phase checks the machine converges once they have.

use super::*;

impl World {
    /// The member a person names with `lockstep.dev/adopt-primary`: the database's
    /// primary, unless its volume was lost; then the member (within the spec's replicas)
    /// that has the most of the data.
    pub(super) fn adoptable(&self) -> i32 {
        let has_data =
            |k: &i32| *k < self.replicas && self.volumes.get(k).is_some_and(Vol::has_data);
        if has_data(&self.db_primary) {
            return self.db_primary;
        }
        self.volumes
            .keys()
            .filter(|k| has_data(k))
            .max_by_key(|k| (self.held(**k), -**k))
            .copied()
            .unwrap_or(self.db_primary)
    }

    pub(super) fn settle_once(&mut self) {
        // A user told that a primary stopped for a hung WAL volume mends the volume.
        for p in self.pods.values_mut() {
            p.wal_hung = None;
        }
        // A user told that a node's clock is off beyond `S` (the failover's message says
        // so) fixes it: safety never rested on it, but a standby judges its holder's
        // tenure by the holder's `renewTime`.
        if self.skew.abs() > SKEW_SECONDS {
            self.skew = self.skew.signum() * SKEW_SECONDS;
        }
        // A user who finds a promotion out of retries asks for it to be tried again.
        self.retry_promote = true;
        self.wake_if_deleted();
        // A user who finds an adoption ambiguous names the primary.
        self.adopt_hatch = true;
        // A user whose switchover request names a pod that no longer exists removes it.
        if self.switchover.is_some_and(|(k, _)| k >= self.replicas) {
            self.switchover = None;
        }
        // A user who finds a switchover waiting for a release that cannot come (the old
        // primary's node is down) says so.
        self.fenced_hatch = true;
        // A user who finds a promotion held back short of the position the old primary
        // stopped at removes it from the Lease, accepting the loss, once the operator
        // names that way out: after its survey moved the promotion to the member that
        // holds the most (so no Ready member but the old primary has the position, and
        // none holds more than the target). Removed earlier, from a target behind
        // another standby, it would lose that standby's acknowledged commits.
        let ready_others = || {
            self.pods
                .iter()
                .filter(|(k, p)| **k != self.db_primary && **k < GONE && p.ready && !p.terminating)
        };
        let held_back = self.pods.iter().any(|(k, p)| {
            p.role == Some(Role::Primary)
                && !p.writable
                && !self.caught_up(*k)
                && ready_others().all(|(j, _)| self.held(*j) <= self.held(*k))
        }) && !ready_others().any(|(k, _)| self.caught_up(*k));
        if held_back && let Some(l) = self.lease.as_mut() {
            l.released_lsn = None;
        }
        let n = self.sts.as_ref().map_or(0, |(_, r)| *r);
        // A user whose cluster no longer has its data on any member (the volumes were lost
        // or scaled away) while an empty member waits behind the Lease's `initialized`
        // mark starts it anew, empty: they remove the mark, accepting the loss.
        let data_within = self.volumes.iter().any(|(k, v)| *k < n && v.has_data());
        if !data_within && let Some(l) = self.lease.as_mut().filter(|l| l.initialized) {
            l.initialized = false;
            self.mark_lost = true;
        }
        // A user whose synchronous failover waits, Degraded, for members that lost their
        // data, and whose old primary lost its own, accepts the loss of the commits only
        // they may have had: dataDurability Preferred, the way out the operator names.
        // The failover counts the members of the cluster it began in: the StatefulSet's
        // (a scale-down waits for it to end), or the spec's if more.
        let has_data = |k: &i32| self.volumes.get(k).is_some_and(Vol::has_data);
        let members = self.replicas.max(n);
        let others = usize::try_from(members - 1).unwrap_or(0);
        let kept = (0..members)
            .filter(|k| *k != self.db_primary && has_data(k))
            .count();
        if let Some(sync) = self
            .synchronous
            .as_mut()
            .filter(|s| s.data_durability == DataDurability::Required)
            && !has_data(&self.db_primary)
            && crate::pod::synchronous::survey_quorum(Some(sync), others)
                .is_some_and(|needed| kept < needed)
        {
            sync.data_durability = DataDurability::Preferred;
        }
        // A user whose data is left only on members beyond spec.replicas (the primary
        // was lost while it scaled down, before the StatefulSet did) raises spec.replicas
        // to keep the most advanced of them, instead of scaling the data away.
        let within_spec = self
            .volumes
            .iter()
            .any(|(k, v)| *k < self.replicas && v.has_data());
        let beyond = self
            .volumes
            .iter()
            .filter(|(k, v)| **k >= self.replicas && **k < n && v.has_data())
            .max_by_key(|(k, _)| (self.held(**k), -**k))
            .map(|(k, _)| *k);
        if !within_spec && let Some(k) = beyond {
            self.replicas = k + 1;
        }
        // Partitioned nodes answer: the kubelet kills the containers of pods that no
        // longer exist (force-deleted ones, [`GONE`]).
        let removed = self.pods_beyond(n);
        self.pods.retain(|k, p| *k < n && !p.terminating);
        self.claims_scaled_away(&removed, n);
        // Partitions heal (a cut holder still writable renews again), paused pods
        // resume, requests go through.
        for p in self.pods.values_mut() {
            p.cut = None;
            p.refuse_next = false;
            p.slow_next = false;
            p.fail_task = false;
            p.garbled = false;
        }
        // A person clears files left on a volume.
        self.volumes.retain(|_, v| *v != Vol::Foreign);
        // Every manager reads the settings annotation in the end.
        let settings = self.restart_settings;
        let runs = self.runs();
        for p in self.pods.values_mut() {
            p.settings_judged = settings;
            p.sync_runs = Some(runs.clone());
        }
        let paused: Vec<i32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(k, _)| *k)
            .collect();
        for k in paused {
            self.resume(k);
        }
        for k in 0..n {
            self.recreate(k);
        }
        // Probes pass where a server runs; a pod whose server is down (starting, cloning,
        // or waiting for a primary to clone from) is not Ready, and a survey cannot read
        // it (an empty volume was read as a standby at `0/0` and promoted; seeds 0, 1, 7).
        for p in self.pods.values_mut().filter(|p| !p.terminating) {
            p.ready = p.server != Srv::Down;
            p.probe_blocked = false;
        }
        for i in 0..self.jobs.len() {
            if self.jobs[i].done.is_none() {
                self.finish(i, true);
            }
        }
        // Every agent looks, stops finish, standbys catch up, a few times over (a
        // hand-over takes a stop, a release and a promotion).
        for _ in 0..4 {
            let ordinals: Vec<i32> = self.pods.keys().copied().collect();
            for k in ordinals {
                self.agent_tick(k);
                self.server_stops(k);
                self.promotion_ends(k);
                self.replicate(k);
            }
        }
        for p in self.pods.values_mut().filter(|p| !p.terminating) {
            if p.server != Srv::Down {
                p.ready = true;
            }
        }
    }
}
