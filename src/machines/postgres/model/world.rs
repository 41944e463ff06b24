//! How the simulated cluster answers the harness: spec edits, actions, environment moves, invariants.

use super::*;

/// `pg-<ordinal>/<uid>` as `(ordinal, uid)`.
fn parse_holder(h: &str) -> Option<(i32, u64)> {
    let (pod, uid) = h.split_once('/')?;
    Some((pod.strip_prefix("pg-")?.parse().ok()?, uid.parse().ok()?))
}

/// Any machine with Postgres's types runs in this world (the real one, and the planted
/// bugs of [`super::planted`]).
impl<M> WorldModel<M> for World
where
    M: Machine<Spec = PostgresClusterSpec, State = PgState, Observed = Observed, Action = PgAction>,
{
    type Move = Move;
    type Edit = Edit;

    fn initial() -> BoxedStrategy<Self> {
        let synchronous = (
            any::<bool>(),
            prop_oneof![Just(SyncMethod::Any), Just(SyncMethod::First)],
            prop_oneof![
                3 => Just(DataDurability::Required),
                1 => Just(DataDurability::Preferred)
            ],
        )
            .prop_map(|(two, method, data_durability)| SynchronousSpec {
                number: if two { 2 } else { 1 },
                method,
                data_durability,
            });
        (
            prop_oneof![1 => Just(1), 1 => Just(2), 4 => Just(3)],
            any::<bool>(),
            0..SCHEDULES.len(),
            prop_oneof![1 => Just(false), 3 => Just(true)],
            prop_oneof![2 => Just(None), 1 => synchronous.prop_map(Some)],
        )
            .prop_map(|(replicas, backup, schedule, running, synchronous)| {
                let mut world = World::fresh(replicas, backup, schedule);
                // `number` < `replicas`, as the API server requires.
                world.synchronous = synchronous
                    .map(|s| SynchronousSpec {
                        number: s.number.min(replicas - 1),
                        ..s
                    })
                    .filter(|s| s.number >= 1);
                if running {
                    world.running();
                }
                world
            })
            .boxed()
    }
    fn spec(&self) -> PostgresClusterSpec {
        PostgresClusterSpec {
            version: VERSIONS[self.version].to_owned(),
            image: None,
            replicas: self.replicas,
            storage_size: "1Gi".to_owned(),
            storage_class_name: None,
            resources: None,
            failover_delay_seconds: 30,
            credentials_secret: None,
            certificates: None,
            bootstrap: None,
            restore: self.restore_spec(),
            network_policy: Default::default(),
            hibernate: self.hibernate,
            synchronous: self.synchronous.clone(),
            database: None,
            roles: Vec::new(),
            databases: Vec::new(),
            backup_schedule: if self.backup {
                SCHEDULES[self.schedule].map(str::to_owned)
            } else {
                None
            },
            backup: self.backup.then(World::spec_backup),
            fencing: crate::machines::postgres::api::FencingSpec {
                lease_duration_seconds: self.lease_seconds,
                clock_skew_seconds: SKEW_SECONDS,
            },
            placement: None,
            spread: Default::default(),
            postgresql: Default::default(),
        }
    }

    fn spec_edits() -> BoxedStrategy<Edit> {
        prop_oneof![
            3 => (0..VERSIONS.len()).prop_map(Edit::Version),
            2 => (1..=MAX_PODS).prop_map(Edit::Replicas),
            1 => (0..SCHEDULES.len()).prop_map(Edit::Schedule),
            1 => prop_oneof![Just(LEASE_SECONDS), Just(LONG_LEASE_SECONDS)]
                .prop_map(Edit::LeaseSeconds),
            1 => Just(Edit::RestartSetting),
        ]
        .boxed()
    }

    fn edit_spec(&mut self, edit: &Edit) {
        self.quiet_settles = 0;
        match *edit {
            Edit::Version(v) => self.version = v,
            // The API server refuses `replicas` at or below `spec.synchronous.number`.
            Edit::Replicas(n) if self.synchronous.as_ref().is_some_and(|s| n <= s.number) => {}
            Edit::Replicas(n) => {
                self.freeze_runs();
                self.replicas = n;
            }
            Edit::Synchronous(number, _) if number >= self.replicas => {}
            Edit::Synchronous(number, durability) => {
                self.freeze_runs();
                if let Some(s) = self.synchronous.as_mut() {
                    s.number = number;
                    s.data_durability = durability;
                }
                // `Preferred` is the person's consent to lose what only the members a
                // failover did not read had: nothing acknowledged before is promised.
                if durability != DataDurability::Required {
                    self.acked = 0;
                }
            }
            Edit::Schedule(s) if self.backup => self.schedule = s,
            Edit::Schedule(_) => {}
            Edit::LeaseSeconds(l) => {
                self.lease_seconds = l;
                // The status projection's high-water: the old value, the spec's and
                // every pod's (`status::longest_lease_seconds`).
                let pods = self.pods.range(..GONE).map(|(_, p)| p.lease_seconds);
                self.longest_lease = Some(pods.chain(self.longest_lease).fold(l, i64::max));
            }
            Edit::RestartSetting => self.restart_settings += 1,
            Edit::Hibernate(on) => self.hibernate = on,
            Edit::ToggleBackup => {
                self.backup = !self.backup;
                if !self.backup {
                    self.ever_without_backup = true;
                    self.backup_token = 0;
                }
            }
        }
    }

    fn observe(&self) -> Observed {
        self.observed()
    }

    fn apply(&mut self, action: &PgAction) {
        self.quiet_settles = 0;
        match action {
            PgAction::CreateCredentials | PgAction::RenewCertificates(_) => {}
            PgAction::EnsureScripts => self.in_sync.scripts = true,
            PgAction::EnsureService(kind) => match kind {
                ServiceKind::Headless => self.in_sync.headless = true,
                ServiceKind::ReadWrite => self.in_sync.read_write = true,
                ServiceKind::ReadOnly => self.in_sync.read_only = true,
            },
            PgAction::EnsurePdb => self.in_sync.pdb = true,
            // The model's spec leaves the policy off: one out of sync is one left from
            // when it was on, which the delete removes.
            PgAction::EnsureNetworkPolicy | PgAction::DeleteNetworkPolicy { .. } => {
                self.in_sync.network_policy = true;
            }
            PgAction::EnsureStatefulSet { image, replicas } => {
                if self.sts.as_ref().map(|(i, _)| i) != Some(image) {
                    self.round += 1;
                    self.round_primary = Some(self.db_primary);
                }
                self.sts = Some((image.clone(), *replicas));
            }
            PgAction::Label {
                ordinal, role, uid, ..
            } => {
                // Fenced on the pod as read: a replaced pod keeps its own label.
                if let Some(p) = self
                    .pods
                    .get_mut(ordinal)
                    .filter(|p| p.uid.to_string() == *uid)
                {
                    // A pod waiting for its first label starts as what it is labelled
                    // (a primary once it also holds the Lease).
                    if p.role.is_none() && *role == Role::Primary {
                        p.starts_primary = true;
                    }
                    if p.role != Some(*role) {
                        p.labelled_unready = !p.ready;
                    }
                    p.role = Some(*role);
                }
                self.start_primaries();
            }
            // The model has no settings: nothing is ever unconfigured.
            PgAction::Configure { .. } => {}
            PgAction::AnnotateRestore {
                ordinal,
                value,
                uid,
                ..
            } => self.annotate_restore(*ordinal, uid, value),
            PgAction::DeleteClaim { ordinal, uid } => self.delete_claim(*ordinal, uid),
            PgAction::DeleteLease { .. } => self.delete_lease(),
            PgAction::DeletePod {
                ordinal,
                uid,
                cause,
            } => {
                if let Ok(uid) = uid.parse() {
                    self.delete_pod(*ordinal, uid, *cause);
                }
            }
            PgAction::AskSurvey { token, version, .. } => {
                // A merge patch on the Lease as observed.
                if let Some(l) = self
                    .lease
                    .as_mut()
                    .filter(|l| l.version.to_string() == *version)
                {
                    if l.survey.as_ref() != Some(token) {
                        self.asked.push(token.clone());
                    }
                    l.survey = Some(token.clone());
                    l.version += 1;
                }
            }
            PgAction::Jobs(JobAction::RunBackup { key, kind }) => {
                let job = match kind {
                    BackupKind::Final => JobKind::Final,
                    BackupKind::OnDemand | BackupKind::Scheduled => JobKind::Backup,
                };
                let on_demand = *kind == BackupKind::OnDemand;
                if self.backup
                    && self.create_job(key, job)
                    && on_demand
                    && !self.backup_keys.insert(key.clone())
                {
                    self.violations.push(format!(
                        "on-demand backup Job {key} created a second time: a token ran two backups"
                    ));
                }
            }
            PgAction::Jobs(JobAction::EnsureCronJob) => {
                if self.backup && SCHEDULES[self.schedule].is_some() {
                    let uid = match self.cronjob {
                        Some((uid, _)) => uid,
                        None => self.new_uid(),
                    };
                    self.cronjob = Some((uid, SCHEDULES[self.schedule]));
                }
            }
            PgAction::Jobs(JobAction::DeleteCronJob { uid }) => {
                if self.cronjob.map(|(u, _)| u.to_string()).as_ref() == Some(uid) {
                    self.cronjob = None;
                }
            }
            PgAction::Jobs(JobAction::DeleteJob { uid, .. }) => self.delete_job(uid),
            PgAction::Jobs(JobAction::ReleaseJob { uid, .. }) => self.release_job(uid),
            PgAction::CreateLease {
                holder,
                at,
                seconds,
                never_held,
            } => {
                if self.lease.is_none() {
                    self.lease = Some(ModelLease {
                        holder: holder.as_deref().and_then(parse_holder),
                        renewed: *at,
                        seen: self.now,
                        released_by: None,
                        released_lsn: None,
                        transitions: 0,
                        version: 1,
                        duration: *seconds,
                        initialized: false,
                        survey: None,
                        never_held: *never_held,
                    });
                    self.start_primaries();
                }
            }
            PgAction::HandLease {
                holder,
                gate,
                transitions,
                at,
                version,
                ..
            } => {
                // Fenced on the version read: a concurrent change refuses it.
                if self.lease.as_ref().map(|l| l.version.to_string()).as_ref() == Some(version) {
                    self.hand_lease(
                        holder.as_deref().and_then(parse_holder),
                        *gate,
                        *at,
                        *transitions,
                    );
                }
            }
        }
    }

    fn environment_moves() -> BoxedStrategy<Move> {
        prop_oneof![
            4 => (0..MAX_PODS).prop_map(Move::Recreate),
            4 => (0..MAX_PODS).prop_map(Move::BecomesReady),
            2 => (0..MAX_PODS).prop_map(Move::BecomesUnready),
            2 => (0..MAX_PODS).prop_map(Move::ProbeBlocked),
            1 => (0..MAX_PODS).prop_map(Move::Evicted),
            1 => Just(Move::ScaledDown),
            4 => (0u8..3, prop_oneof![3 => Just(true), 1 => Just(false)])
                .prop_map(|(nth, ok)| Move::JobFinishes { nth, ok }),
            1 => Just(Move::Drift),
            1 => Just(Move::RequestBackup),
            1 => (0..MAX_PODS).prop_map(Move::RequestSwitchover),
            1 => Just(Move::SkipFinalBackup),
            1 => any::<u8>().prop_map(Move::BackupJobDeleted),
            3 => (0..MAX_PODS).prop_map(Move::AgentTick),
            1 => Just(Move::LeaseCleared),
            2 => (0..MAX_PODS).prop_map(Move::Terminated),
            3 => Just(Move::Write),
            3 => (0..MAX_PODS).prop_map(Move::Replicate),
            1 => (0..MAX_PODS).prop_map(Move::Partition),
            1 => (0..MAX_PODS).prop_map(Move::Heal),
            1 => (-2i8..=2).prop_map(Move::ClockSkew),
            2 => (0..MAX_PODS).prop_map(Move::ServerStops),
            1 => (0..MAX_PODS).prop_map(Move::RefuseNext),
            1 => (0..MAX_PODS).prop_map(Move::SlowRenewal),
            1 => (0..MAX_PODS).prop_map(Move::Pause),
            1 => (0..MAX_PODS).prop_map(Move::Resume),
            2 => (0..MAX_PODS).prop_map(Move::PromotionEnds),
            1 => (0..MAX_PODS).prop_map(Move::ServerCrashes),
            1 => (0..MAX_PODS).prop_map(Move::TaskFails),
            1 => (0..MAX_PODS).prop_map(Move::Deleted),
            1 => (0..MAX_PODS).prop_map(Move::LabelGarbled),
            1 => (0..MAX_PODS).prop_map(Move::PromotedByHand),
            1 => (0..MAX_PODS).prop_map(Move::ForeignFiles),
            1 => (0..MAX_PODS).prop_map(Move::StreamBreaks),
            1 => (0..MAX_PODS).prop_map(Move::AnswerLost),
            1 => (0..MAX_PODS).prop_map(Move::VolumeLost),
            1 => (0..MAX_PODS).prop_map(Move::ForceDeleted),
            1 => Just(Move::LeaseDeleted),
            2 => (0..MAX_PODS).prop_map(Move::SettingsRead),
            1 => any::<u8>().prop_map(Move::RequestRestore),
            1 => (0..MAX_PODS).prop_map(Move::WalHangs),
        ]
        .boxed()
    }

    fn step_environment(&mut self, mv: &Move) {
        self.environment_step(mv);
    }

    fn invariants(&self, state: &PgState) -> Result<(), String> {
        if let PgState::SwitchingOver(s) = state
            && let Some(serial) = s
                .request
                .as_deref()
                .and_then(|t| t.split(':').nth(1))
                .and_then(|n| n.parse::<u32>().ok())
        {
            self.switchover_served
                .set(self.switchover_served.get().max(serial));
        }
        if let PgState::BackingUp { request, job, .. } = state {
            self.persisted_keys
                .borrow_mut()
                .insert(crate::machines::common::on_demand::serving(
                    request,
                    job.as_deref(),
                ));
            self.backup_served.replace(Some(request.clone()));
        }
        self.note_restore(state);
        if let Some(v) = self.violations.first() {
            return Err(v.clone());
        }
        self.restore_invariants(state)?;
        self.hibernation_invariants(state)?;
        let writable = self.writable();
        if let Some(gone) = writable.iter().find(|k| **k >= GONE)
            && writable.len() > 1
        {
            return Err(format!(
                "pods {writable:?} all run a writable server (pod {}'s was force-deleted, its server still runs)",
                ordinal(*gone)
            ));
        }
        if writable.len() > 1 {
            return Err(format!("pods {writable:?} all run a writable server"));
        }
        // A failover promises the most advanced standby, not the old primary's last
        // commits: it never hands the Lease over under a released position its target
        // lacks (its agent would wait for it forever once nobody can send it).
        if let PgState::SwitchingOver(s) = state
            && s.cause == SwitchCause::Failover
            && let Some(l) = &self.lease
            && let Some(x) = l.released_lsn
            && l.holder.is_some_and(|(k, _)| k == s.target.ordinal)
            && !self.caught_up(s.target.ordinal)
        {
            return Err(format!(
                "a failover handed the Lease to pod {} under the position {x} the old primary released, which pod {} never received (it cannot promote)",
                s.target.ordinal, s.target.ordinal
            ));
        }
        let primaries = self.primary_labels();
        if primaries.len() > 1 {
            return Err(format!("pods {primaries:?} are all labelled primary"));
        }
        let deleting = matches!(state, PgState::Finalizing { .. } | PgState::Finalized);
        // Mid-promotion the target is labelled primary once it holds the Lease (its
        // agent fences a writable server labelled otherwise): `-rw` may select a standby
        // while nobody else is writable, never a standby while another pod writes.
        let writable = self.writable();
        if !deleting
            && let Some(k) = primaries
                .first()
                .filter(|k| **k != self.db_primary && writable.iter().any(|w| w != *k))
        {
            return Err(format!(
                "pod {k} is labelled primary but pod {} holds the writable timeline",
                self.db_primary
            ));
        }
        if !deleting
            && let Some(k) = self
                .pods
                .iter()
                .find(|(_, p)| p.role == Some(Role::Replica) && p.writable)
                .map(|(k, _)| *k)
        {
            return Err(format!(
                "pod {k} is labelled replica (`-ro` routes to it) but may still be a writable primary"
            ));
        }
        if matches!(state, PgState::Finalized)
            && !self.ever_without_backup
            && !self.skip_final
            && !self.final_backup_succeeded
        {
            return Err(
                "finalized without a successful final backup or the skip annotation".into(),
            );
        }
        Ok(())
    }

    fn converged(&self, state: &PgState) -> bool {
        if self.hibernate {
            return self.asleep(state);
        }
        let PgState::Ready { cluster } = state else {
            return false;
        };
        if self.quiet_settles < 2 {
            return false;
        }
        let want = image(self.version);
        let scheduled = self.backup && SCHEDULES[self.schedule].is_some();
        let token = format!("t{}", self.backup_token);
        // Served: a persisted state served it (its Job may have been deleted since).
        let token_served =
            self.backup_token == 0 || self.backup_served.borrow().as_deref() == Some(&token);
        // A switchover request is served once a switchover state took its token on.
        let switchover_served = self
            .switchover
            .is_none_or(|(_, n)| self.switchover_served.get() >= n);
        // At rest, finished on-demand Jobs are within their history limit.
        let bounded = [true, false].iter().all(|ok| {
            self.jobs
                .iter()
                .filter(|j| j.kind == JobKind::Backup && j.done == Some(*ok))
                .count()
                <= crate::machines::common::on_demand::HISTORY_LIMIT
        });
        let holds = self
            .pods
            .get(&cluster.primary)
            .map(|p| (cluster.primary, p.uid));
        // At rest, every finished Job's outcome is recorded, so none is held any more.
        let released = self.jobs.iter().all(|j| !j.held || j.done.is_none());
        bounded
            && released
            && self.lease.as_ref().and_then(|l| l.holder) == holds
            && self.writable() == [cluster.primary]
            && cluster.image == want
            && cluster.replicas == self.replicas
            && self.db_primary == cluster.primary
            && self.in_sync == InSync::ALL
            && self.sts == Some((want.clone(), self.replicas))
            && self.pods.len() == usize::try_from(self.replicas).unwrap_or(0)
            && self.pods.iter().all(|(k, p)| {
                *k < self.replicas
                    && p.ready
                    && p.image == want
                    // Its server runs with the spec's restart-only settings (found from
                    // seeds 4, 10 and 12: a one-instance cluster whose setting changed
                    // while its primary was lost recovered to Ready, then restarted).
                    && p.settings_started == self.restart_settings
                    && p.role
                        == Some(if *k == cluster.primary {
                            Role::Primary
                        } else {
                            Role::Replica
                        })
            })
            && self.cronjob.is_some() == scheduled
            && self
                .cronjob
                .is_none_or(|(_, s)| s == SCHEDULES[self.schedule])
            && token_served
            && switchover_served
            && self.restore_taken()
    }

    fn clock(&mut self, now: DateTime<Utc>) {
        self.clock_to(now);
        // The status projection, as each reconcile's write records it.
        let observed = <World as WorldModel<Postgres>>::observe(self);
        let spec = <World as WorldModel<Postgres>>::spec(self);
        self.terms_record = Some(crate::machines::postgres::status::synchronous_terms(
            &spec,
            &observed,
            self.terms_record.as_deref(),
        ));
    }

    fn deleted(&mut self) {
        self.deleted = true;
    }

    fn settle(&mut self) {
        let before = format!("{self:?}");
        self.settle_once();
        self.quiet_settles = if format!("{self:?}") == before {
            self.quiet_settles.saturating_add(1)
        } else {
            0
        };
    }
}

/// The environment moves the fencing review found missing: a force-deleted pod whose server runs
/// on, and the settling world's person who says a holder is down.
impl World {
    /// `lockstep.dev/fenced` as the settling world's person writes it: the Lease's
    /// holder (or its last one), if its server is certainly not writable.
    pub(super) fn fenced(&self) -> Option<String> {
        let (k, uid) = self
            .lease
            .as_ref()
            .and_then(|l| l.holder)
            .or(self.last_holder)?;
        let down = !self.pod_of((k, uid)).is_some_and(|p| self.may_write(p));
        down.then(|| format!("pg-{k}/{uid}"))
    }

    /// How many surveys in a row pod `k` has not answered: the tokens asked since the
    /// last one it answered (all of them if it never answered).
    pub(super) fn missed(&self, k: i32) -> u32 {
        let last = self
            .pods
            .get(&k)
            .and_then(|p| p.answer.as_ref())
            .and_then(|a| self.asked.iter().position(|t| *t == a.token));
        let since = last.map_or(0, |i| i + 1);
        u32::try_from(self.asked.len().saturating_sub(since)).unwrap_or(u32::MAX)
    }

    /// Pod `k` is force-deleted while its node is partitioned: the object is gone at
    /// once; its container runs on, cut off (under the key `GONE + k`), its agent
    /// deciding as any other's, until its own fence stops a writable server and it
    /// exits. A pod whose server is not writable is simply gone (cut off, its agent
    /// never promotes it).
    pub(super) fn force_delete(&mut self, k: i32) {
        let now = self.now;
        let Some(mut p) = self.pods.remove(&k) else {
            return;
        };
        if p.writable {
            p.cut = p.cut.or(Some(now));
            p.terminating = true;
            p.ready = false;
            p.role = None;
            let key = (1..)
                .map(|n| n * GONE + k)
                .find(|key| !self.pods.contains_key(key))
                .unwrap_or(GONE + k);
            self.pods.insert(key, p);
        }
    }
}
