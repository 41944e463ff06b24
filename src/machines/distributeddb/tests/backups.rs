//! Backups and finalizing.

use super::*;

#[test]
fn backup_now_runs_one_backup_per_token() {
    let s = with_backups(spec("db:1"));
    let mut o = at_rest("db:1");
    o.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: true,
    });
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&s, &ready("db:1"), o.clone());
    assert_eq!(d.reason(), BACKUP_REQUESTED);
    let backing_up = target(&d).cloned().unwrap_or(DdbState::Creating);
    // The Job is created by the transition that persists BackingUp (and acks the token).
    let key = backup_key("t1");
    assert_eq!(
        d.actions(),
        &[DdbAction::Jobs(JobAction::RunBackup {
            key: key.clone(),
            kind: BackupKind::OnDemand
        })]
    );
    let served = |o: Observed| World {
        acks: [(
            crate::machines::common::annotations::BACKUP_NOW.to_owned(),
            "t1".to_owned(),
        )]
        .into(),
        ..world(o)
    };
    o.jobs.push(job(&key, Purpose::Backup, succeeded()));
    let d = DistributedDb::decide(&s, &backing_up, &served(o.clone()));
    assert_eq!(d.reason(), BACKUP_SUCCEEDED);
    // Back at rest, the served token asks for nothing more, Job or no Job.
    let d = DistributedDb::decide(&s, &ready("db:1"), &served(o.clone()));
    assert_eq!(d.reason(), SERVING);
    o.jobs.clear();
    let d = DistributedDb::decide(&s, &ready("db:1"), &served(o));
    assert_eq!(d.reason(), SERVING);
}

#[test]
fn backup_now_without_a_policy_does_nothing_and_is_reported_degraded() {
    let mut o = at_rest("db:1");
    o.requests.backup_now = Some("t1".to_owned());
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert!(target(&d).is_none() && d.actions().is_empty());
    assert_eq!(d.reason(), BACKUP_NOT_CONFIGURED);
    assert!(
        is_degraded(&d),
        "the ignored request shows in the Degraded condition"
    );
    assert!(message(&d).contains("spec.backupPolicy is not set"));
}

#[test]
fn a_ready_cluster_with_a_pod_down_is_reported_degraded_naming_the_pod() {
    let mut o = at_rest("db:1");
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&spec("db:1"), &ready("db:1"), o);
    assert!(target(&d).is_none(), "a pod down at rest moves no state");
    assert_eq!(d.reason(), PODS_NOT_READY);
    assert!(is_degraded(&d));
    assert!(message(&d).contains("db-1"), "{}", message(&d));
}

#[test]
fn last_backup_comes_from_the_newest_finished_backup_job() {
    let mut o = at_rest("db:1");
    o.jobs = vec![
        job(
            "backup-a",
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(10) },
        ),
        job("backup-b", Purpose::Backup, failed(20)),
        job("backup-c", Purpose::Backup, JobOutcome::Running),
        job("pre-x", Purpose::Hook, JobOutcome::Succeeded { at: t(30) }),
    ];
    let last = crate::machines::distributeddb::last_backup(&o, None);
    assert_eq!(last.as_ref().map(|l| l.job.as_str()), Some("db-backup-b"));
    assert!(last.is_some_and(|l| l.outcome.starts_with("Failed (BackoffLimitExceeded")));
}

// --- Finalizing -----------------------------------------------------------------------

fn deleting(
    spec: &DistributedDBSpec,
    state: &DdbState,
    o: Observed,
) -> Decision<DdbState, DdbAction> {
    let w = World {
        deleting: true,
        ..world(o)
    };
    let d = DistributedDb::decide(spec, state, &w);
    assert_declared(state, &d);
    d
}

#[test]
fn deleting_without_a_backup_policy_releases_at_once() {
    let d = deleting(&spec("db:1"), &ready("db:1"), at_rest("db:1"));
    assert_eq!(target(&d), Some(&DdbState::Finalized));
    assert_eq!(d.reason(), NO_BACKUP_POLICY);
}

#[test]
fn the_finalizer_is_held_until_the_final_backup_succeeds() {
    let s = with_backups(spec("db:1"));
    let d = deleting(&s, &ready("db:1"), at_rest("db:1"));
    assert_eq!(target(&d), Some(&DdbState::Finalizing { attempt: 1 }));
    let state = DdbState::Finalizing { attempt: 1 };
    let d = deleting(&s, &state, at_rest("db:1"));
    assert_eq!(
        d.actions(),
        &[DdbAction::Jobs(JobAction::RunBackup {
            key: "final-backup-1".to_owned(),
            kind: BackupKind::Final
        })]
    );
    let mut o = at_rest("db:1");
    o.jobs
        .push(job("final-backup-1", Purpose::FinalBackup, failed(995)));
    let d = deleting(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert!(message(&d).contains("BackoffLimitExceeded"));
    assert!(!DistributedDb::finalized(&state));
    o.requests.skip_final_backup = true;
    let d = deleting(&s, &state, o);
    assert_eq!(d.reason(), FINAL_BACKUP_SKIPPED);
    assert_eq!(target(&d), Some(&DdbState::Finalized));
}

#[test]
fn nothing_but_the_final_backup_is_created_while_deleting() {
    let s = with_backups(spec("db:2"));
    let mut o = at_rest("db:1");
    o.statefulset = None;
    o.own.service_in_sync = false;
    let state = DdbState::Finalizing { attempt: 1 };
    let d = deleting(&s, &state, o);
    assert!(d.actions().iter().all(|a| matches!(
        a,
        DdbAction::Jobs(JobAction::RunBackup {
            kind: BackupKind::Final,
            ..
        })
    )));
}
