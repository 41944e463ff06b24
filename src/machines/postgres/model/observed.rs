//! What the operator observes of the model's world: the [`Observed`] its `decide` reads,
//! built from the simulated objects as the cache would show them.

use super::*;

impl World {
    /// The world as the operator's cache shows it now.
    pub(super) fn observed(&self) -> Observed {
        let at = epoch();
        Observed {
            name: "pg".to_owned(),
            statefulset: self.sts.as_ref().map(|(image, replicas)| StatefulSetView {
                conforms: true,
                image: Some(image.clone()),
                replicas: *replicas,
                caught_up: true,
            }),
            // A force-deleted pod's object is gone ([`GONE`]).
            pods: self
                .pods
                .range(..GONE)
                .map(|(k, p)| {
                    (
                        *k,
                        testing::pod(p.uid.to_string(), &p.image, p.ready, p.terminating, p.role),
                    )
                })
                .collect(),
            jobs: self
                .jobs
                .iter()
                .map(|j| JobView {
                    name: format!("pg-{}", j.key),
                    uid: j.uid.to_string(),
                    key: Some(j.key.clone()),
                    purpose: Some(match j.kind {
                        JobKind::Backup => Purpose::Backup,
                        JobKind::Final => Purpose::FinalBackup,
                    }),
                    created: Some(at),
                    outcome: match j.done {
                        None => JobOutcome::Running,
                        Some(true) => JobOutcome::Succeeded { at },
                        Some(false) => JobOutcome::Failed {
                            at,
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
            cronjob: self.cronjob.map(|(uid, schedule)| CronJobView {
                uid: uid.to_string(),
                in_sync: schedule == SCHEDULES[self.schedule],
            }),
            requests: Requests {
                backup_now: (self.backup_token > 0).then(|| format!("t{}", self.backup_token)),
                skip_final_backup: self.skip_final,
            },
            own: Own {
                in_sync: self.in_sync,
                // Not modelled: the certificates' renewal is a patch of a Secret at rest,
                // which no decision reads back.
                certificates: None,
                network_policy_uid: (!self.in_sync.network_policy).then(|| "np".to_owned()),
                // The model's backups report no recoverable point.
                job_results: BTreeMap::new(),
                // What each live pod's manager last answered to a survey.
                answers: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating)
                    .filter_map(|(k, p)| Some((*k, p.answer.clone()?)))
                    .collect(),
                lease: self.lease.as_ref().map(|l| LeaseView {
                    holder: l.holder.map(|(k, uid)| format!("pg-{k}/{uid}")),
                    // Its holder's agent renews it every R seconds while it may write,
                    // and writes the `L` it runs with at each renewal.
                    renewed: Some(l.renewed),
                    renewal_seen: Some(l.seen),
                    duration: l.duration,
                    transitions: l.transitions,
                    released_by: l.released_by.map(|(k, uid)| format!("pg-{k}/{uid}")),
                    released_lsn: l.released_lsn.map(|x| format!("0/{x:X}")),
                    survey: l.survey.clone(),
                    never_held: l.never_held,
                    uid: "lease".to_owned(),
                    version: l.version.to_string(),
                }),
                requests: PgRequests {
                    retry_promote: self.retry_promote.then(|| "settled".to_owned()),
                    adopt_primary: self.adopt_hatch.then(|| format!("pg-{}", self.adoptable())),
                    fenced: self.fenced_hatch.then(|| self.fenced()).flatten(),
                    switchover: self.switchover.map(|(k, n)| format!("pg-{k}:{n}")),
                },
                lease_seconds: self
                    .pods
                    .range(..GONE)
                    .map(|(k, p)| (*k, p.lease_seconds))
                    .collect(),
                longest_lease_seconds: self.longest_lease,
                synchronous_terms: self.terms_record.clone(),
                // A live pod whose server runs the spec's synchronous terms reports it
                // judged the spec's settings.
                judged: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating && p.server != Srv::Down)
                    .filter(|(_, p)| p.sync_runs.as_ref().is_none_or(|r| *r == self.runs()))
                    .map(|(k, _)| *k)
                    .collect(),
                unconfigured: Default::default(),
                // A running server's manager reports on the settings it last read.
                unjudged: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating && p.server != Srv::Down)
                    .filter(|(_, p)| p.settings_judged < self.restart_settings)
                    .map(|(k, _)| *k)
                    .collect(),
                // The model's clusters bootstrap with initdb.
                recovery_failed: Default::default(),
                // A running server that started before a change of a restart-only
                // parameter its manager has read reports it pending (its manager reads
                // `pg_settings.pending_restart` after the reload); the model's servers
                // refuse no value.
                settings: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating && p.server != Srv::Down)
                    .filter(|(_, p)| p.settings_started < p.settings_judged)
                    .map(|(k, _)| {
                        let report = SettingsReport {
                            refused: Vec::new(),
                            pending_restart: vec!["shared_buffers".to_owned()],
                            judged: None,
                        };
                        (*k, report)
                    })
                    .collect(),
                // A standby whose receiver stopped streaming says so once it has not
                // streamed for NOT_STREAMING_SECONDS (its manager's rule).
                lagging: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating && p.server == Srv::Standby)
                    .filter(|(_, p)| {
                        p.stream_broken.is_some_and(|at| {
                            let quiet = crate::pod::streaming::NOT_STREAMING_SECONDS;
                            self.now - at
                                >= chrono::Duration::seconds(
                                    i64::try_from(quiet).unwrap_or(i64::MAX),
                                )
                        })
                    })
                    .map(|(k, _)| *k)
                    .collect(),
                // The model's clusters do not archive (spec.backup.walArchive unset):
                // an archiving report only ever makes a Ready stay Degraded.
                archiving: BTreeMap::new(),
                archived: BTreeMap::new(),
                objects: None,
                // What each live pod's manager last reported of its server.
                instances: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating)
                    .filter_map(|(k, p)| {
                        let server = Some(p.server_reported?);
                        Some((
                            *k,
                            Reported {
                                server,
                                streaming: None,
                            },
                        ))
                    })
                    .collect(),
                synchronous: BTreeMap::new(),
                // Every pod's manager is this operator's.
                older_managers: BTreeSet::new(),
                claims: self
                    .claims
                    .iter()
                    .map(|(k, uid)| (*k, uid.to_string()))
                    .collect(),
                restore_annotated: self.restore_annotated(),
                // What each live pod's manager last reported of its volume.
                empty: self
                    .pods
                    .range(..GONE)
                    .filter(|(_, p)| !p.terminating && p.data_reported == Some(false))
                    .map(|(k, _)| *k)
                    .collect(),
            },
        }
    }
}
