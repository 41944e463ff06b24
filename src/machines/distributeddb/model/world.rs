//! How the simulated cluster answers the harness: spec edits, actions, environment moves, invariants.

use super::*;
use crate::machines::common::tls::CertificatesView;
use crate::machines::distributeddb::observe::PodView;
use crate::machines::distributeddb::tls;

/// Any machine with DistributedDB's types runs in this world (the real one, and the
/// planted bugs of the scenarios).
impl<M> WorldModel<M> for Cluster
where
    M: Machine<Spec = DistributedDBSpec, State = DdbState, Observed = Observed, Action = DdbAction>,
{
    type Move = Move;
    type Edit = Edit;

    fn initial() -> BoxedStrategy<Self> {
        (
            1..=3i32,
            prop::option::of(0..=1i32),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(replicas, hooks, backups, existing)| {
                // Existing objects: more of each run is spent upgrading, scaling and
                // deleting.
                if existing {
                    Cluster::existing(replicas, hooks, backups)
                } else {
                    Cluster::new(replicas, hooks, backups)
                }
            })
            .boxed()
    }

    fn spec(&self) -> DistributedDBSpec {
        self.spec.clone()
    }

    fn spec_edits() -> BoxedStrategy<Edit> {
        prop_oneof![
            4 => (0..3u8).prop_map(Edit::Image),
            2 => (1..=3i32).prop_map(Edit::Replicas),
            1 => Just(Edit::ToggleBackups),
        ]
        .boxed()
    }

    fn edit_spec(&mut self, edit: &Edit) {
        self.tick += 1;
        match edit {
            Edit::Image(i) => {
                let image = IMAGES[usize::from(*i) % IMAGES.len()].to_owned();
                self.asked.insert(image.clone());
                self.spec.image = image;
            }
            Edit::Replicas(n) => self.spec.replicas = *n,
            Edit::ToggleBackups => {
                self.spec.backup_policy = match self.spec.backup_policy {
                    Some(_) => None,
                    None => Some(policy()),
                };
                self.ever_without_policy |= self.spec.backup_policy.is_none();
                if let Some((_, in_sync)) = &mut self.cron {
                    *in_sync = false;
                }
            }
        }
    }

    fn observe(&self) -> Observed {
        Observed {
            name: "db".to_owned(),
            statefulset: self.sts.as_ref().map(|s| StatefulSetView {
                conforms: !s.drifted,
                image: Some(s.image.clone()),
                replicas: s.replicas,
                caught_up: s.observed == s.generation,
            }),
            pods: self
                .pods
                .iter()
                .map(|(k, p)| {
                    (
                        *k,
                        PodView {
                            version: p.version(),
                            ..testing::pod(p.uid.clone(), &p.image, p.ready, p.terminating, ())
                        },
                    )
                })
                .collect(),
            jobs: self
                .jobs
                .iter()
                .map(|j| JobView {
                    name: j.name.clone(),
                    uid: j.uid.clone(),
                    key: j.key.clone(),
                    purpose: Some(j.purpose),
                    created: Some(epoch()),
                    outcome: match j.outcome {
                        Outcome::Running => JobOutcome::Running,
                        Outcome::Succeeded => JobOutcome::Succeeded { at: epoch() },
                        Outcome::Failed => JobOutcome::Failed {
                            at: epoch(),
                            reason: "BackoffLimitExceeded".to_owned(),
                            message: String::new(),
                        },
                    },
                    held: j.held.then(|| Hold {
                        resource_version: "1".to_owned(),
                        others: Vec::new(),
                    }),
                })
                .collect(),
            cronjob: self.cron.as_ref().map(|(uid, in_sync)| CronJobView {
                uid: uid.clone(),
                in_sync: *in_sync,
            }),
            requests: self.requests.clone(),
            own: Own {
                service_in_sync: self.service == Some(true),
                pdb_in_sync: self.pdb,
                volumes: crate::machines::distributeddb::observe::Volumes {
                    template_size: self.sts.as_ref().map(|_| "1Gi".to_owned()),
                    claims: BTreeMap::new(),
                },
                requests: self.hook_requests.clone(),
                certificates: self.certificates.then(|| CertificatesView {
                    uid: "uid-tls".to_owned(),
                    version: "1".to_owned(),
                    renew_at: None,
                    ca: None,
                }),
            },
        }
    }

    fn apply(&mut self, action: &DdbAction) {
        match action {
            DdbAction::EnsureService => self.service = Some(true),
            DdbAction::EnsurePdb => self.pdb = true,
            DdbAction::EnsureStatefulSet(shape) => {
                if !self.asked.contains(&shape.image) {
                    self.violations.push(format!(
                        "wrote {} into the StatefulSet template, an image no spec asked for",
                        shape.image
                    ));
                }
                if self.sts.is_none() && tls::issues(&self.spec) && !self.certificates {
                    self.violations.push(
                        "created the StatefulSet before its certificates: its members would start without TLS, or wait".to_owned(),
                    );
                }
                match self.sts.as_ref().map(|s| s.replicas) {
                    // Its creation bootstraps the membership, whatever the persisted
                    // state (a reconcile on a stale read of Creating may create it after).
                    None => self.members = (0..shape.replicas).collect(),
                    Some(from) if from != shape.replicas => {
                        self.check_resize(from, shape.replicas);
                    }
                    Some(_) => {}
                }
                match &mut self.sts {
                    None => {
                        self.sts = Some(Sts {
                            image: shape.image.clone(),
                            replicas: shape.replicas,
                            generation: 1,
                            observed: 0,
                            drifted: false,
                            synced_image: shape.image.clone(),
                            synced_replicas: shape.replicas,
                        });
                    }
                    Some(s) => {
                        if s.image != shape.image || s.replicas != shape.replicas || s.drifted {
                            s.image = shape.image.clone();
                            s.replicas = shape.replicas;
                            s.drifted = false;
                            s.generation += 1;
                        }
                    }
                }
            }
            DdbAction::EvictPod { ordinal, uid }
            | DdbAction::DeleteUnstarted { ordinal, uid, .. } => {
                let as_read = match action {
                    DdbAction::DeleteUnstarted { version, .. } => Some(version),
                    _ => None,
                };
                let evicting = matches!(action, DdbAction::EvictPod { .. });
                if let Some(pod) = self.pods.get(ordinal).cloned()
                    && pod.uid == *uid
                    && as_read.is_none_or(|v| *v == pod.version())
                    && !pod.terminating
                    && !(evicting && self.budget_refuses(&pod))
                {
                    self.check_delete(*ordinal, &pod, as_read.is_some());
                    if let Some(p) = self.pods.get_mut(ordinal) {
                        p.terminating = true;
                    }
                }
            }
            DdbAction::RunHook {
                phase,
                key,
                ordinal,
                ..
            } => {
                if *phase == HookPhase::Pre
                    && !self.jobs.iter().any(|j| j.key.as_ref() == Some(key))
                {
                    self.check_drained(*ordinal, "started the pre-hook of");
                }
                if phase.of(&self.spec).is_some() {
                    self.add_job(Some(key.clone()), Purpose::Hook);
                }
            }
            DdbAction::Jobs(JobAction::RunBackup { key, kind }) => {
                if self.spec.backup_policy.is_some() {
                    let purpose = match kind {
                        BackupKind::Final => Purpose::FinalBackup,
                        BackupKind::OnDemand | BackupKind::Scheduled => Purpose::Backup,
                    };
                    self.add_job(Some(key.clone()), purpose);
                }
            }
            DdbAction::Jobs(JobAction::EnsureCronJob) => {
                if self.spec.backup_policy.is_some() {
                    let uid = match &self.cron {
                        Some((uid, _)) => uid.clone(),
                        None => self.uid("c"),
                    };
                    self.cron = Some((uid, true));
                }
            }
            DdbAction::Jobs(JobAction::DeleteCronJob { uid }) => {
                if self.cron.as_ref().is_some_and(|(u, _)| u == uid) {
                    self.cron = None;
                }
            }
            DdbAction::CreateCertificates => self.certificates = true,
            DdbAction::ExpandVolume { .. } | DdbAction::RenewCertificates(_) => {}
            DdbAction::Jobs(JobAction::DeleteJob { uid, .. }) => self.delete_job(uid),
            DdbAction::Jobs(JobAction::ReleaseJob { uid, .. }) => self.release_job(uid),
        }
        self.refresh();
    }

    fn environment_moves() -> BoxedStrategy<Move> {
        prop_oneof![
            6 => Just(Move::StsObserves),
            6 => Just(Move::StsCreatesPods),
            6 => any::<u8>().prop_map(Move::PodGone),
            10 => any::<u8>().prop_map(Move::PodReady),
            1 => any::<u8>().prop_map(Move::PodStuck),
            1 => any::<u8>().prop_map(Move::PodEvicted),
            1 => (0..3u8).prop_map(Move::SkipHook),
            8 => (any::<u8>(), prop::bool::weighted(0.7)).prop_map(|(n, ok)| Move::JobFinishes(n, ok)),
            1 => Just(Move::StsDrifts),
            1 => Just(Move::StsImageTampered),
            1 => Just(Move::ServiceDeleted),
            1 => Just(Move::PdbDeleted),
            1 => Just(Move::CronJobDeleted),
            1 => Just(Move::CronFires),
            1 => (0..3u8).prop_map(Move::BackupNow),
            1 => any::<u8>().prop_map(Move::BackupJobDeleted),
            1 => any::<u8>().prop_map(Move::JobDeleted),
            1 => Just(Move::SkipFinalBackup),
        ]
        .boxed()
    }

    fn step_environment(&mut self, mv: &Move) {
        self.tick += 1;
        match *mv {
            Move::StsObserves => self.sts_observes(),
            Move::StsCreatesPods => self.sts_creates_pods(),
            Move::PodGone(n) => {
                let k = i32::from(n % 4);
                if self.pods.get(&k).is_some_and(|p| p.terminating) {
                    self.pods.remove(&k);
                }
            }
            Move::PodReady(n) => {
                if let Some(p) = self.pod_at(n)
                    && !p.terminating
                    && !p.stuck
                {
                    p.ready = true;
                }
            }
            Move::PodStuck(n) => {
                if let Some(p) = self.pod_at(n)
                    && !p.ready
                {
                    p.stuck = true;
                }
            }
            Move::PodEvicted(n) => {
                let k = i32::from(n % 4);
                if let Some(p) = self.pods.get_mut(&k)
                    && !p.terminating
                {
                    p.terminating = true;
                    self.evicted.insert(k);
                }
            }
            Move::SkipHook(n) => self.hook_requests.skip_hook = Some(format!("s{n}")),
            Move::JobFinishes(n, ok) => {
                let mut succeeded = None;
                let mut finished_failed = None;
                let mut final_done = false;
                if let Some(j) = self.running_job(n) {
                    j.outcome = if ok {
                        Outcome::Succeeded
                    } else {
                        Outcome::Failed
                    };
                    final_done = ok && j.purpose == Purpose::FinalBackup;
                    succeeded = j.key.clone().filter(|_| ok);
                    if !ok && let Some(key) = j.key.clone() {
                        finished_failed = Some(key);
                    }
                }
                if let Some(key) = finished_failed {
                    self.scale_hook_finished(&key, false);
                }
                self.final_backup_done |= final_done;
                if let Some(key) = succeeded {
                    self.hook_succeeded(&key);
                }
            }
            Move::JobDeleted(n) => {
                if !self.jobs.is_empty() {
                    let uid = self.jobs[usize::from(n) % self.jobs.len()].uid.clone();
                    self.delete_job(&uid);
                }
            }
            Move::BackupJobDeleted(n) => {
                let finished: Vec<String> = self
                    .jobs
                    .iter()
                    .filter(|j| j.outcome != Outcome::Running)
                    .filter(|j| match j.purpose {
                        // A scheduled one (no key) whenever.
                        Purpose::Backup => j
                            .key
                            .as_ref()
                            .is_none_or(|k| self.persisted_keys.borrow().contains(k)),
                        Purpose::FinalBackup => true,
                        _ => false,
                    })
                    .map(|j| j.uid.clone())
                    .collect();
                if !finished.is_empty() {
                    let uid = finished[usize::from(n) % finished.len()].clone();
                    self.jobs.retain(|j| j.uid != uid);
                }
            }
            Move::PodFails(n) => {
                if let Some(p) = self.pod_at(n)
                    && !p.terminating
                {
                    p.ready = false;
                }
            }
            Move::StsDrifts => {
                if let Some(s) = &mut self.sts {
                    s.drifted = true;
                    s.generation += 1;
                }
            }
            Move::StsImageTampered => self.tamper(ROGUE),
            Move::StsImageSet(i) => self.tamper(IMAGES[usize::from(i) % IMAGES.len()]),
            Move::ServiceDeleted => self.service = None,
            Move::PdbDeleted => self.pdb = false,
            Move::CronJobDeleted => self.cron = None,
            Move::CronFires => {
                if self.cron.is_some() {
                    self.add_job(None, Purpose::Backup);
                }
            }
            Move::BackupNow(n) => self.requests.backup_now = Some(format!("t{n}")),
            Move::SkipFinalBackup => self.requests.skip_final_backup = true,
        }
        self.refresh();
    }

    fn invariants(&self, state: &DdbState) -> Result<(), String> {
        if let Some(first) = self.violations.first() {
            return Err(first.clone());
        }
        if *state != DdbState::Creating {
            self.bootstrapped.set(true);
        }
        if let DdbState::BackingUp { request, job, .. } = state {
            self.persisted_keys
                .borrow_mut()
                .insert(on_demand::serving(request, job.as_deref()));
            self.persisted_token.replace(Some(request.clone()));
        }
        let reading = match state {
            DdbState::BackingUp { request, job, .. } => {
                Some(on_demand::serving(request, job.as_deref()))
            }
            DdbState::Finalizing { attempt } => Some(finalize::key(*attempt)),
            _ => None,
        };
        self.reading.replace(reading.clone());
        if let Some(key) = reading.filter(|k| self.released.contains(k)) {
            return Err(format!(
                "the outcome finalizer of Job {key} was removed while {state:?} still reads its outcome"
            ));
        }
        if self.down.len() > 1 {
            return Err(format!("pods {:?} were all taken down at once", self.down));
        }
        if *state == DdbState::Finalized
            && !(self.ever_without_policy
                || self.requests.skip_final_backup
                || self.final_backup_done)
        {
            return Err("finalized without a successful or skipped final backup".to_owned());
        }
        Ok(())
    }

    fn converged(&self, state: &DdbState) -> bool {
        let spec = &self.spec;
        let DdbState::Ready { version, replicas } = state else {
            return false;
        };
        let sts_ok = self.sts.as_ref().is_some_and(|s| {
            s.image == spec.image
                && s.replicas == spec.replicas
                && !s.drifted
                && s.observed == s.generation
        });
        let pods_ok = self.pods.len() == usize::try_from(spec.replicas).unwrap_or(0)
            && (0..spec.replicas).all(|k| {
                self.pods
                    .get(&k)
                    .is_some_and(|p| p.ready && !p.terminating && p.image == spec.image)
            });
        let cron_ok = match (&spec.backup_policy, &self.cron) {
            (Some(_), Some((_, in_sync))) => *in_sync,
            (None, None) => true,
            _ => false,
        };
        let pruned = !self
            .jobs
            .iter()
            .any(|j| j.purpose == Purpose::Hook && j.outcome != Outcome::Running);
        let backup_served = match (&self.requests.backup_now, &spec.backup_policy) {
            // Served: a persisted state served it (its Job may have been deleted since).
            // A Job created by a reconcile whose status write was lost is not: the next
            // reconcile follows it ([`crate::machines::common::on_demand`]).
            (Some(token), Some(_)) => self.persisted_token.borrow().as_ref() == Some(token),
            _ => true,
        };
        // At rest, finished on-demand Jobs are within their history limit.
        let bounded = [Outcome::Succeeded, Outcome::Failed].iter().all(|o| {
            self.jobs
                .iter()
                .filter(|j| j.purpose == Purpose::Backup && j.key.is_some() && j.outcome == *o)
                .count()
                <= crate::machines::common::on_demand::HISTORY_LIMIT
        });
        // At rest, every finished Job's outcome is recorded, so none is held any more.
        let released = self
            .jobs
            .iter()
            .all(|j| !j.held || j.outcome == Outcome::Running);
        // The membership is the pods, unless a scaling hook failed (and may have been
        // skipped by the user, who then owns the membership).
        let members_ok = spec.scaling.is_none()
            || !self.scale_hook_failed.is_empty()
            || self.members == (0..spec.replicas).collect::<BTreeSet<_>>();
        *version == spec.image
            && *replicas == spec.replicas
            && members_ok
            && released
            && self.service == Some(true)
            && self.pdb
            && sts_ok
            && pods_ok
            && cron_ok
            && pruned
            && bounded
            && backup_served
    }

    fn settle(&mut self) {
        self.sts_observes();
        self.pods.retain(|_, p| !p.terminating);
        self.sts_creates_pods();
        self.pods.retain(|_, p| !p.terminating);
        for p in self.pods.values_mut() {
            p.stuck = false;
            p.ready = true;
        }
        let mut succeeded = Vec::new();
        for j in &mut self.jobs {
            if j.outcome == Outcome::Running {
                j.outcome = Outcome::Succeeded;
                self.final_backup_done |= j.purpose == Purpose::FinalBackup;
                succeeded.extend(j.key.clone());
            }
        }
        for key in succeeded {
            self.hook_succeeded(&key);
        }
        // A user who finds a hook out of retries asks for it to run again.
        self.hook_requests.retry_hook = Some("settled".to_owned());
        self.refresh();
    }
}
