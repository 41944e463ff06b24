//! The in-place restore in the PostgresCluster world (`spec.restore`): a person asks
//! to rewind the cluster to a position of its writable history; the operator stops
//! every pod, deletes the volume claims and the Lease, and pod 0's manager restores
//! the archive up to that position on a new volume, promoting there (a new timeline).
//!
//! The model's archive holds the whole writable history (its servers archive before
//! they acknowledge). Invariants:
//! - while the claims are replaced, nothing is writable;
//! - once a restore promoted, every running member's data descends from the timeline
//!   it made (no member runs the pre-restore timeline), and the only writable server
//!   is one that recovered to the target first;
//! - a bootstrap while a restore the operator took on is in flight restores; it never
//!   runs `initdb` in its place.

use super::*;
use crate::machines::postgres::api::{RecoveryTarget, RestoreSpec};
use crate::machines::postgres::state::RestoreStep;

/// The token of restore request `serial`.
fn token(serial: u32) -> String {
    format!("r{serial}")
}

/// The serial of a restore token.
fn serial(token: &str) -> Option<u32> {
    token.strip_prefix('r')?.parse().ok()
}

impl World {
    /// A person sets `spec.restore` to a new token whose target is `share`/255 of the
    /// writable history (a position on it). Only for a cluster with a backup store,
    /// whose database exists.
    pub(super) fn request_restore(&mut self, share: u8) {
        if !self.backup || !self.served {
            return;
        }
        let serial = self.restore.map_or(0, |(n, _)| n) + 1;
        let lsn = self.head.lsn * u64::from(share) / 255;
        let target = Pos {
            timeline: self.head.timeline,
            lsn,
        };
        self.restore = Some((serial, target));
        self.restore_targets.insert(serial, target);
    }

    /// `spec.restore` as the world's person wrote it.
    pub(super) fn restore_spec(&self) -> Option<RestoreSpec> {
        let (n, target) = self.restore?;
        Some(RestoreSpec {
            token: token(n),
            target: Some(RecoveryTarget {
                lsn: Some(format!("0/{:X}", target.lsn)),
                ..RecoveryTarget::default()
            }),
        })
    }

    /// The digests of the restore annotations on the live pods.
    pub(super) fn restore_annotated(&self) -> BTreeMap<i32, String> {
        self.pods
            .range(..GONE)
            .filter(|(_, p)| !p.terminating)
            .filter_map(|(k, p)| Some((*k, crate::driver::cache::digest(p.restore.as_ref()?))))
            .collect()
    }

    /// The operator's restore annotation, on the pod as read (its UID).
    pub(super) fn annotate_restore(&mut self, k: i32, uid: &str, value: &str) {
        if let Some(p) = self.pods.get_mut(&k).filter(|p| p.uid.to_string() == uid) {
            p.restore = Some(value.to_owned());
        }
    }

    /// The StatefulSet controller makes pod `k`'s claim with its pod, if it has none.
    pub(super) fn claim(&mut self, k: i32) {
        if !self.claims.contains_key(&k) {
            let uid = self.new_uid();
            self.claims.insert(k, uid);
        }
    }

    /// The operator deletes claim `k` if it still has `uid`; a claim a pod still uses
    /// waits for it (the protection finalizer), which the operator sees as not gone.
    pub(super) fn delete_claim(&mut self, k: i32, uid: &str) {
        if self.claims.get(&k).map(u64::to_string).as_deref() != Some(uid)
            || self.pods.contains_key(&k)
        {
            return;
        }
        self.claims.remove(&k);
        self.volumes.remove(&k);
        self.received.remove(&k);
        self.streaming.remove(&k);
    }

    /// The operator deletes the Lease (its UID is always the model's one): as
    /// [`Move::LeaseDeleted`], its `initialized` mark goes with it.
    pub(super) fn delete_lease(&mut self) {
        self.last_holder = self
            .lease
            .as_ref()
            .and_then(|l| l.holder)
            .or(self.last_holder);
        self.mark_lost |= self.served;
        self.lease = None;
    }

    /// Pod `k`'s manager bootstraps: with a restore annotation it restores the archive
    /// up to the request's target and promotes there; without one, while a restore the
    /// operator took on waits for its primary, running `initdb` instead is a violation.
    /// `true` when it was a restore.
    pub(super) fn bootstrap_restores(&mut self, k: i32) -> bool {
        let asked = self
            .pods
            .get(&k)
            .and_then(|p| p.restore.as_deref())
            .and_then(|v| serde_json::from_str::<RestoreSpec>(v).ok())
            .and_then(|r| serial(&r.token));
        let Some(target) = asked.and_then(|n| self.restore_targets.get(&n).copied()) else {
            let pending = self.restore_started.get() > self.restored;
            if pending {
                self.violations.push(format!(
                    "pod {k} ran initdb while restore r{} waited for its primary",
                    self.restore_started.get()
                ));
            }
            return false;
        };
        self.restored = self.restored.max(asked.unwrap_or_default());
        self.volumes.insert(k, Vol::Primary { clean: true });
        let forked = self.timelines.fork(target);
        self.db_primary = k;
        self.head = forked;
        self.acked = self.acked.min(target.lsn);
        self.received.insert(k, forked);
        self.restore_epoch = Some(forked.timeline);
        true
    }

    /// A restore request is served once a restoring state carried its token (or a
    /// Creating state took it as served).
    pub(super) fn note_restore(&self, state: &PgState) {
        let (taken, started) = match state {
            PgState::RestoringInPlace(r) => (serial(&r.restore.token), true),
            // Taken as served without a restore (a token the spec held at creation or
            // adoption): nothing waits for a restored primary.
            PgState::Creating {
                served_restore: Some(t),
                ..
            } => (serial(t), false),
            _ => (None, false),
        };
        if let Some(n) = taken {
            self.restore_served.set(self.restore_served.get().max(n));
            if started {
                self.restore_started.set(self.restore_started.get().max(n));
            }
        }
    }

    /// Whether the world's restore request, if any, was taken on.
    pub(super) fn restore_taken(&self) -> bool {
        self.restore
            .is_none_or(|(n, _)| self.restore_served.get() >= n)
    }

    /// The restore's invariants in `state`.
    pub(super) fn restore_invariants(&self, state: &PgState) -> Result<(), String> {
        if let PgState::RestoringInPlace(r) = state
            && r.restore_step == RestoreStep::ReplaceVolumes
            && let Some(k) = self.pods.keys().find(|k| self.pods[*k].writable)
        {
            return Err(format!(
                "pod {} runs a writable server while restore {} replaces the volumes",
                ordinal(*k),
                r.restore.token
            ));
        }
        let Some(epoch) = self.restore_epoch else {
            return Ok(());
        };
        for (k, p) in self.pods.range(..GONE) {
            if p.server != Srv::Down && !self.timelines.descends(self.pos(*k), epoch) {
                return Err(format!(
                    "pod {k} runs a server on {:?}, which the restore's timeline {epoch} does not lead to: it runs the pre-restore history",
                    self.pos(*k)
                ));
            }
        }
        Ok(())
    }
}
