//! The servers and the Lease in the PostgresCluster world: which pods run a writable
//! server, the holder's agent (renew, or stop its server), writes and their
//! replication, and the Lease's hand-overs.

use super::*;

impl World {
    /// The pods running a writable server.
    pub(super) fn writable(&self) -> Vec<i32> {
        self.pods
            .iter()
            .filter(|(_, p)| p.writable)
            .map(|(k, _)| *k)
            .collect()
    }

    /// A pod labelled primary before it started starts writable once it holds the Lease.
    pub(super) fn start_primaries(&mut self) {
        let holder = self.lease.as_ref().and_then(|l| l.holder);
        for (k, p) in &mut self.pods {
            if p.starts_primary
                && !p.writable
                && p.role == Some(Role::Primary)
                && holder == Some((*k, p.uid))
            {
                p.writable = true;
            }
        }
    }

    /// The agent of pod `k` looks at its label and the Lease.
    pub(super) fn agent_tick(&mut self, k: i32) {
        let holder = self.lease.as_ref().and_then(|l| l.holder);
        let Some(p) = self.pods.get_mut(&k) else {
            return;
        };
        let me = Some((k, p.uid));
        if p.writable && (p.role != Some(Role::Primary) || holder != me) {
            p.writable = false;
            // Its container restarts: labelled primary and holding the Lease, it starts
            // writable again; otherwise it rejoins as a standby.
            p.starts_primary = true;
            if holder == me
                && let Some(l) = self.lease.as_mut()
            {
                l.holder = None;
                l.released_by = me;
                l.version += 1;
            }
        }
        self.start_primaries();
    }

    /// A client commits on the writable server, if there is exactly one.
    pub(super) fn write(&mut self) {
        if let [k] = self.writable()[..] {
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

    /// Whether the Lease's holder runs a writable server (and so renews it).
    pub(super) fn holder_renews(&self) -> bool {
        self.lease
            .as_ref()
            .and_then(|l| l.holder)
            .is_some_and(|(k, uid)| {
                self.pods
                    .get(&k)
                    .is_some_and(|p| p.uid == uid && p.writable)
            })
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
        if self.holder_renews()
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
            transitions,
            version: l.version + 1,
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
