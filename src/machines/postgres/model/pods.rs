//! How the model's world begins and how its pods come and go: a fresh cluster, one
//! already running, a pod recreated by its StatefulSet or deleted.

use super::*;

impl World {
    pub(super) fn new_uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    pub(super) fn recreate(&mut self, k: i32) {
        let Some((image, replicas)) = self.sts.clone() else {
            return;
        };
        if k < replicas && !self.pods.contains_key(&k) {
            let uid = self.new_uid();
            self.pods
                .insert(k, Pod::new(uid, image, self.now, self.lease_seconds));
            self.claim(k);
        }
    }

    pub(super) fn delete_pod(&mut self, k: i32, uid: u64, cause: DeleteCause) {
        if self.pods.get(&k).map(|p| p.uid) != Some(uid) {
            return; // NotFound or a failed UID precondition: a no-op.
        }
        if let Some(p) = self.pods.get_mut(&k)
            && cause == DeleteCause::Fence
            && (p.writable || p.terminating)
        {
            // A failed primary's pod lingers Terminating, its server possibly still
            // running, until its node answers (or is declared lost).
            p.terminating = true;
            p.ready = false;
            return;
        }
        if cause == DeleteCause::Upgrade {
            let round_image = self.sts.as_ref().map(|(i, _)| i.clone());
            let replicas = self.sts.as_ref().map_or(0, |(_, r)| *r);
            if k == self.db_primary && replicas > 1 {
                self.violations.push(format!(
                    "deleted the serving primary {k} for an upgrade while it has replicas"
                ));
            }
            if self.round_primary == Some(k) {
                let behind: Vec<i32> = (0..replicas)
                    .filter(|j| *j != k)
                    .filter(|j| {
                        self.pods.get(j).map(|p| Some(&p.image)) != Some(round_image.as_ref())
                    })
                    .collect();
                if !behind.is_empty() {
                    self.violations.push(format!(
                        "deleted pod {k}, the round's primary, while {behind:?} still ran an older image"
                    ));
                }
            }
            let round = (self.round, self.restart_settings, k);
            let count = self.upgrade_deletes.entry(round).or_default();
            *count += 1;
            if *count > 1 {
                self.violations.push(format!(
                    "deleted pod {k} {count} times for upgrade round {} (restart-only settings changed {} times)",
                    self.round, self.restart_settings
                ));
            }
        }
        self.pods.remove(&k);
    }

    pub(super) fn spec_backup() -> BackupSpec {
        BackupSpec {
            s3_endpoint: "http://s3.local".to_owned(),
            bucket: "b".to_owned(),
            prefix: None,
            region: None,
            virtual_hosted_style: false,
            credentials_secret: "s3".to_owned(),
            image: "pg-backup".to_owned(),
            timeout_seconds: 600,
            suspend: false,
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
            wal_archive: None,
            method: None,
            retention: None,
        }
    }

    /// A cluster just created: nothing exists yet.
    pub(super) fn fresh(replicas: i32, backup: bool, schedule: usize) -> Self {
        World {
            version: 0,
            replicas,
            backup,
            schedule: if backup { schedule } else { 0 },
            backup_token: 0,
            switchover: None,
            switchover_served: std::cell::Cell::new(0),
            backup_served: std::cell::RefCell::default(),
            skip_final: false,
            retry_promote: false,
            adopt_hatch: false,
            lease_seconds: LEASE_SECONDS,
            longest_lease: Some(LEASE_SECONDS),
            restart_settings: 0,
            hibernate: false,
            deleted: false,
            synchronous: None,
            terms_record: None,
            fenced_hatch: false,
            last_holder: None,
            in_sync: InSync::default(),
            sts: None,
            pods: BTreeMap::new(),
            jobs: Vec::new(),
            cronjob: None,
            lease: None,
            next_uid: 0,
            now: epoch(),
            skew: 0,
            db_primary: 0,
            head: Pos::START,
            timelines: Timelines::default(),
            acked: 0,
            served: false,
            mark_lost: false,
            received: BTreeMap::new(),
            answers_lost: BTreeSet::new(),
            asked: Vec::new(),
            missed_at_hand_over: None,
            away_at_hand_over: None,
            streaming: BTreeSet::new(),
            volumes: BTreeMap::new(),
            claims: BTreeMap::new(),
            restore: None,
            restore_targets: BTreeMap::new(),
            restore_served: std::cell::Cell::new(0),
            restore_started: std::cell::Cell::new(0),
            restored: 0,
            restore_epoch: None,
            agent_decide: REAL_AGENT,
            answer_gate: REAL_GATE,
            reclone_off: false,
            round: 0,
            round_primary: None,
            upgrade_deletes: BTreeMap::new(),
            final_backup_succeeded: false,
            backup_keys: BTreeSet::new(),
            persisted_keys: std::cell::RefCell::default(),
            ever_without_backup: !backup,
            violations: Vec::new(),
            quiet_settles: 0,
        }
    }

    /// A cluster whose objects already run (an operator that lost its status, or one
    /// adopting a cluster): pods Ready at version 0, pod 0 primary.
    pub(super) fn running(&mut self) {
        self.in_sync = InSync::ALL;
        self.sts = Some((image(0), self.replicas));
        for k in 0..self.replicas {
            let uid = self.new_uid();
            let role = if k == 0 { Role::Primary } else { Role::Replica };
            let mut pod = Pod::new(uid, image(0), self.now, self.lease_seconds);
            pod.ready = true;
            pod.role = Some(role);
            pod.role_seen = Some(role);
            pod.writable = k == 0;
            pod.starts_primary = k == 0;
            pod.agent = if k == 0 {
                AgentState::Primary
            } else {
                AgentState::Standby
            };
            pod.server = if k == 0 { Srv::Writable } else { Srv::Standby };
            pod.renewed = (k == 0).then_some(self.now);
            self.pods.insert(k, pod);
            self.claim(k);
            if k != 0 {
                self.streaming.insert(k);
            }
            self.volumes.insert(
                k,
                if k == 0 {
                    Vol::Primary { clean: false }
                } else {
                    Vol::Standby
                },
            );
        }
        let holder = self.pods.get(&0).map(|p| (0, p.uid));
        // The standbys stream from the holder, by name.
        for (k, p) in &mut self.pods {
            if let Some((j, uid)) = holder.filter(|_| *k != 0) {
                p.upstream = Upstream::Holder(format!("pg-{j}/{uid}"));
                p.connected_to = Some(uid);
            }
        }
        self.lease = Some(ModelLease {
            holder,
            renewed: epoch(),
            seen: epoch(),
            released_by: None,
            released_lsn: None,
            transitions: 0,
            version: 1,
            duration: self.lease_seconds,
            initialized: true,
            survey: None,
            never_held: false,
        });
        // The operator lost its status: it no longer says the longest `L` it saw.
        self.longest_lease = None;
        self.served = true;
        self.round = 1;
        self.round_primary = Some(0);
    }
}
