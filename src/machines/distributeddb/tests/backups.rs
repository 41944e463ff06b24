//! Backups and finalizing.

use super::*;
use crate::machines::common::testing::decide_deleting;

#[test]
fn backup_now_runs_one_backup_per_token() {
    let mut asked = at_rest("db:1");
    asked.cronjob = Some(CronJobView {
        uid: "cj".to_owned(),
        in_sync: true,
    });
    asked.requests.backup_now = Some("t1".to_owned());
    let succeeded =
        asked
            .clone()
            .with_job(job(&backup_key("t1", None), Purpose::Backup, succeeded()));
    let pruned = Observed {
        jobs: Vec::new(),
        ..succeeded.clone()
    };
    let seen = testing::BackupSteps {
        before: asked,
        finished: succeeded,
        after: pruned,
    };
    let s = with_backups(spec("db:1"));
    let backing_up =
        testing::assert_a_token_runs_one_backup::<DistributedDb>(&s, &ready("db:1"), SERVING, seen);
    assert!(
        matches!(backing_up, DdbState::BackingUp { .. }),
        "{backing_up:?}"
    );
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
    assert_degraded(&d, PODS_NOT_READY);
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

#[test]
fn deleting_without_a_backup_policy_releases_at_once() {
    let d = decide_deleting::<DistributedDb>(&spec("db:1"), &ready("db:1"), at_rest("db:1"));
    assert_goes(&d, NO_BACKUP_POLICY, &DdbState::Finalized);
}

#[test]
fn the_finalizer_is_held_until_the_final_backup_succeeds() {
    let s = with_backups(spec("db:1"));
    let finalizing = DdbState::Finalizing { attempt: 1 };
    let d = decide_deleting::<DistributedDb>(&s, &ready("db:1"), at_rest("db:1"));
    assert_eq!(target(&d), Some(&finalizing));
    let broken = at_rest("db:1").with_job(job("final-backup-1", Purpose::FinalBackup, failed(995)));
    let mut skipped = broken.clone();
    skipped.requests.skip_final_backup = true;
    let seen = testing::BackupSteps {
        before: at_rest("db:1"),
        finished: broken,
        after: skipped,
    };
    testing::assert_final_backup_holds_the_finalizer::<DistributedDb>(
        &s,
        &finalizing,
        &DdbState::Finalized,
        seen,
    );
}

#[test]
fn nothing_but_the_final_backup_is_created_while_deleting() {
    let s = with_backups(spec("db:2"));
    let mut o = at_rest("db:1");
    o.statefulset = None;
    o.own.service_in_sync = false;
    let d = decide_deleting::<DistributedDb>(&s, &DdbState::Finalizing { attempt: 1 }, o);
    assert!(d.actions().iter().all(|a| matches!(
        a,
        DdbAction::Jobs(JobAction::RunBackup {
            kind: BackupKind::Final,
            ..
        })
    )));
}
