//! The servers and the Lease in the PostgresCluster world: which pods run a writable
//! server, the holder's agent (renew, or stop its server), writes and their
//! replication, and the Lease's hand-overs.

use super::*;

impl World {
    /// The pods running a writable server (a frozen one counts until its fence would
    /// stop it as it thaws: [`World::may_write`]).
    pub(super) fn writable(&self) -> Vec<i32> {
        self.pods
            .iter()
            .filter(|(_, p)| self.may_write(p))
            .map(|(k, _)| *k)
            .collect()
    }

    /// Whether `p` runs a writable server now or may once it thaws: frozen, it is
    /// fenced as it thaws once `T` has passed since its last renewal (its fence counts
    /// on a monotonic clock).
    pub(super) fn may_write(&self, p: &Pod) -> bool {
        p.writable
            && p.paused.is_none_or(|since| {
                self.now < since + chrono::Duration::seconds(fence_seconds(p.lease_seconds))
            })
    }

    /// `target`'s data becomes the writable timeline: promoted by its own agent while it
    /// runs (`running`: it must be Ready), or locally as its container starts labelled
    /// primary. It must be the most advanced of the standbys that are Ready (in a
    /// planned switchover every standby Ready when the old primary stopped cleanly
    /// received everything: [`World::agent_tick`]).
    pub(super) fn promote(&mut self, target: i32, running: bool) {
        let mine = self.received.get(&target).copied().unwrap_or(0);
        if let Some(x) = self.lease.as_ref().and_then(|l| l.released_lsn)
            && mine < x
        {
            self.violations.push(format!(
                "promoted pod {target} at WAL {mine}, short of the {x} a primary acknowledged before it stopped cleanly for a switchover"
            ));
        }
        if let Some(l) = self.lease.as_mut() {
            l.released_lsn = None;
        }
        if let Some((k, theirs)) = self
            .pods
            .iter()
            .filter(|(k, p)| {
                **k != target && **k != self.db_primary && p.ready && !p.terminating && !p.writable
            })
            .map(|(k, _)| (*k, self.received.get(k).copied().unwrap_or(0)))
            .find(|(_, theirs)| *theirs > mine)
        {
            self.violations.push(format!(
                "promoted pod {target} at WAL {mine} while pod {k} had received {theirs}"
            ));
        }
        if running && !self.pods.get(&target).is_some_and(|p| p.ready) {
            self.violations
                .push(format!("promoted pod {target}, which is not Ready"));
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
        // The new timeline continues from what the target has.
        self.wal = self.received.get(&target).copied().unwrap_or(0);
    }

    /// A pod labelled primary before it started starts writable once it holds the Lease
    /// (standby data is promoted locally first: the entrypoint's `promote_local_standby`).
    pub(super) fn start_primaries(&mut self) {
        let holder = self.lease.as_ref().and_then(|l| l.holder);
        let starting: Vec<i32> = self
            .pods
            .iter()
            .filter(|(k, p)| {
                p.starts_primary
                    && p.paused.is_none()
                    && !p.writable
                    && p.role == Some(Role::Primary)
                    && holder == Some((**k, p.uid))
            })
            .map(|(k, _)| *k)
            .collect();
        for k in starting {
            if k == self.db_primary {
                if let Some(p) = self.pods.get_mut(&k) {
                    p.writable = true;
                }
            } else if self.caught_up(k) {
                self.promote(k, false);
            } else if let Some(p) = self.pods.get_mut(&k) {
                // Standby data behind the released position: it starts as a standby, and
                // its agent promotes it once it has caught up.
                p.starts_primary = false;
            }
        }
    }

    /// Whether pod `k` has received all a primary that stopped cleanly on demotion
    /// wrote (the Lease's released position), if one did.
    pub(super) fn caught_up(&self, k: i32) -> bool {
        let released = self.lease.as_ref().and_then(|l| l.released_lsn);
        released.is_none_or(|x| self.received.get(&k).copied().unwrap_or(0) >= x)
    }

    /// The agent of pod `k` looks at its label and the Lease: a writable server that is
    /// no longer labelled primary or no longer holds the Lease stops (cleanly, sending
    /// every standby that is Ready all it wrote, when it still held the Lease and
    /// releases it; at once otherwise); a Ready standby labelled primary that holds the
    /// Lease renews it and promotes itself.
    pub(super) fn agent_tick(&mut self, k: i32) {
        let holder = self.lease.as_ref().and_then(|l| l.holder);
        let now = self.now;
        let Some(p) = self.pods.get_mut(&k).filter(|p| p.paused.is_none()) else {
            return;
        };
        if let Some(since) = p.cut {
            // Cut off, it sees neither the Lease nor its label: it fences only for want
            // of a renewal, once T has passed since the last one began.
            let t = fence_seconds(p.lease_seconds);
            if p.writable && now >= since + chrono::Duration::seconds(t) {
                self.fence_cut(k);
            }
            return;
        }
        let me = Some((k, p.uid));
        if p.writable && (p.role != Some(Role::Primary) || holder != me) {
            p.writable = false;
            // Its container restarts: labelled primary and holding the Lease, it starts
            // writable again; otherwise it rejoins as a standby.
            p.starts_primary = true;
            if holder == me {
                // A clean stop: the walsenders send everything to connected standbys.
                self.clean_stop_replicates();
                let wal = self.wal;
                if let Some(l) = self.lease.as_mut() {
                    l.holder = None;
                    l.released_by = me;
                    l.released_lsn = Some(wal);
                    l.version += 1;
                }
            }
        } else if !p.writable
            && !p.terminating
            && p.ready
            && p.role == Some(Role::Primary)
            && holder == me
            && self.caught_up(k)
        {
            self.promote(k, true);
        }
        self.start_primaries();
    }

    /// Every standby that is Ready receives all that was written (a clean stop of the
    /// writable server).
    fn clean_stop_replicates(&mut self) {
        let standbys: Vec<i32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.ready && !p.writable && !p.terminating)
            .map(|(k, _)| *k)
            .collect();
        for k in standbys {
            self.received.insert(k, self.wal);
        }
    }

    /// A client commits on the writable server, if there is exactly one.
    pub(super) fn write(&mut self) {
        if let [k] = self.writable()[..]
            && self.pods.get(&k).is_some_and(|p| p.paused.is_none())
        {
            self.wal += 1;
            self.received.insert(k, self.wal);
        }
    }

    /// Standby `k` catches up with the writable server, if one runs.
    pub(super) fn replicate(&mut self, k: i32) {
        let streams = self
            .pods
            .get(&k)
            .is_some_and(|p| !p.writable && !p.terminating);
        if streams && self.writable().len() == 1 {
            self.received.insert(k, self.wal);
        }
    }

    /// Whether the Lease's holder runs a writable server and reaches the API server (and
    /// so renews it).
    pub(super) fn holder_renews(&self) -> bool {
        self.holder_writable()
            && self
                .lease
                .as_ref()
                .and_then(|l| l.holder)
                .and_then(|(k, _)| self.pods.get(&k))
                .is_some_and(|p| p.cut.is_none() && p.paused.is_none())
    }

    /// Whether the Lease's holder runs a writable server (renewing, cut off, frozen
    /// but not yet past its `T`, or force-deleted but still running).
    pub(super) fn holder_writable(&self) -> bool {
        self.lease
            .as_ref()
            .and_then(|l| l.holder)
            .is_some_and(|(k, uid)| {
                self.pods
                    .get(&k)
                    .is_some_and(|p| p.uid == uid && self.may_write(p))
                    || self.ghosts.iter().any(|g| g.ordinal == k && g.uid == uid)
            })
    }

    /// Pod `k` loses its path to the API server. A writable holder's last renewal began
    /// now: the Lease keeps the `renewTime` it wrote then, by its own clock. A standby
    /// cut off can no longer renew, so its agent never promotes it.
    pub(super) fn partition(&mut self, k: i32) {
        if !self.holder_renews()
            || self.lease.as_ref().and_then(|l| l.holder).map(|(h, _)| h) != Some(k)
        {
            let now = self.now;
            if let Some(p) = self
                .pods
                .get_mut(&k)
                .filter(|p| !p.writable && p.cut.is_none())
            {
                p.cut = Some(now);
            }
            return;
        }
        self.last_renewal_now(k);
        let now = self.now;
        if let Some(p) = self.pods.get_mut(&k) {
            p.cut = Some(now);
        }
    }

    /// Pod `k` reaches the API server again; a holder still writable renews at once.
    pub(super) fn heal(&mut self, k: i32) {
        if let Some(p) = self.pods.get_mut(&k).filter(|p| p.cut.is_some()) {
            p.cut = None;
            if let Some(l) = self.lease.as_mut() {
                l.version += 1;
            }
        }
    }

    /// A cut-off pod's agent stops its server (`pg_ctl stop -m immediate`, exit 5): it
    /// cannot release the Lease. Its container restarts; the model lets the restarted
    /// one reach the API server (it waits for the Lease before it serves as a primary
    /// again, so nothing it does then can make a second writable server).
    pub(super) fn fence_cut(&mut self, k: i32) {
        if let Some(p) = self.pods.get_mut(&k) {
            p.writable = false;
            p.starts_primary = true;
            p.cut = None;
        }
    }

    /// The operator's clock reads `now` (the true time). A cut-off holder that has not
    /// fenced yet does by `T + R + 1` after its last renewal began: its agent checks
    /// every `R` and stops its server within a second.
    pub(super) fn clock_to(&mut self, now: DateTime<Utc>) {
        self.now = now;
        let deadline = |since: DateTime<Utc>, l: i64| {
            since + chrono::Duration::seconds(fence_seconds(l) + RENEW_SECONDS + 1)
        };
        let late: Vec<i32> = self
            .pods
            .iter()
            .filter(|(_, p)| p.writable && p.paused.is_none())
            .filter(|(_, p)| {
                p.cut
                    .is_some_and(|since| now >= deadline(since, p.lease_seconds))
            })
            .map(|(k, _)| *k)
            .collect();
        for k in late {
            self.fence_cut(k);
        }
        self.ghosts
            .retain(|g| now < deadline(g.since, g.lease_seconds));
    }

    /// The operator hands the Lease over at `at`: its old holder must be certainly
    /// fenced by then (a writable holder renews, so it never is until it stops).
    pub(super) fn hand_lease(
        &mut self,
        holder: Option<(i32, u64)>,
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
        self.lease = Some(ModelLease {
            holder,
            renewed: at,
            released_by: None,
            released_lsn: l.released_lsn,
            transitions,
            version: l.version + 1,
            duration: self.lease_seconds,
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
            p.starts_primary = *j == k;
        }
        self.db_primary = k;
        self.round_primary = Some(k);
        let holder = self.pods.get(&k).map(|p| (k, p.uid));
        if let Some(l) = self.lease.as_mut() {
            l.holder = holder;
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
