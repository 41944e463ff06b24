//! Whole reconciles through the engine ([`crate::engine::step`]) for what a decision
//! alone cannot show: what the persisted record remembers once the Jobs are gone, and
//! what a lost record does to deletion.

use super::*;
use crate::engine::{EngineStatus, Outcome};
use crate::machines::common::testing::{self, reconcile_at, status_in};

/// One reconcile from `status`, which then holds what it wrote.
fn reconcile(
    spec: &DistributedDBSpec,
    status: &mut EngineStatus<DdbState>,
    o: &Observed,
    deleting: bool,
) -> Outcome<DistributedDb> {
    testing::reconcile_at(spec, status, o, deleting, 1000)
}

fn current(status: &EngineStatus<DdbState>) -> Option<DdbState> {
    testing::current::<DistributedDb>(status)
}

fn state_of(out: &Outcome<DistributedDb>) -> Option<&DdbState> {
    out.state.as_ref()
}

fn runs_backup(out: &Outcome<DistributedDb>) -> bool {
    out.actions
        .iter()
        .any(|a| matches!(a, DdbAction::Jobs(JobAction::RunBackup { .. })))
}

fn with_token(mut o: Observed, token: &str) -> Observed {
    o.requests.backup_now = Some(token.to_owned());
    o
}

/// Bug 2 of issue 11: pruning the Job that served a token must not run another backup.
#[test]
fn a_served_token_runs_no_second_backup_once_its_job_is_gone() {
    let s = with_backups(spec("db:1"));
    let mut status = status_in(&ready("db:1"));
    let mut o = with_token(at_rest("db:1"), "t1");
    let key = backup_key("t1");
    let mut backups = 0;
    for _ in 0..3 {
        let out = reconcile(&s, &mut status, &o, false);
        if runs_backup(&out) {
            backups += 1;
            o.jobs = vec![job(&key, Purpose::Backup, JobOutcome::Running)];
        }
    }
    assert_eq!(backups, 1, "the token's Job is created once");
    o.jobs = vec![job(&key, Purpose::Backup, succeeded())];
    let out = reconcile(&s, &mut status, &o, false);
    assert_eq!(out.taken.map(|t| t.reason), Some(BACKUP_SUCCEEDED));
    // A cleanup (a TTL controller, a person, Lockstep's own history limit) removes it.
    o.jobs.clear();
    for _ in 0..3 {
        let out = reconcile(&s, &mut status, &o, false);
        assert!(!runs_backup(&out), "token t1 was served: {:?}", out.actions);
        assert_eq!(state_of(&out), Some(&ready("db:1")));
    }
    // A new token is a new backup.
    let mut asked = false;
    for _ in 0..2 {
        let out = reconcile(&s, &mut status, &with_token(at_rest("db:1"), "t2"), false);
        asked |= runs_backup(&out);
    }
    assert!(asked, "a new token runs a backup");
}

/// Bug 2 of issue 11: a Job deleted before its outcome was read is not run again.
#[test]
fn a_backup_job_gone_before_its_outcome_was_read_is_not_run_again() {
    let s = with_backups(spec("db:1"));
    let mut status = status_in(&ready("db:1"));
    let o = with_token(at_rest("db:1"), "t1");
    let mut created = 0;
    for _ in 0..2 {
        created += usize::from(runs_backup(&reconcile(&s, &mut status, &o, false)));
    }
    assert_eq!(created, 1);
    // Not in the cache yet (a watch event behind): waited for, not taken for lost.
    let out = reconcile_at(&s, &mut status, &o, false, 1010);
    assert!(!runs_backup(&out), "{:?}", out.actions);
    assert!(matches!(current(&status), Some(DdbState::BackingUp { .. })));
    // The Job ran, finished and was deleted while the operator was away.
    for _ in 0..3 {
        let out = reconcile_at(&s, &mut status, &o, false, 1000 + 61);
        assert!(!runs_backup(&out), "{:?}", out.actions);
    }
    assert_eq!(
        current(&status),
        Some(ready("db:1")),
        "the backup is reported lost and the machine is back at rest"
    );
}

/// Bug 8 of issue 11: served on-demand backup Jobs are pruned beyond a history limit per
/// outcome, oldest first, as a CronJob prunes its Jobs.
#[test]
fn on_demand_backup_jobs_are_pruned_beyond_the_history_limit() {
    let s = with_backups(spec("db:1"));
    let mut o = at_rest("db:1");
    let mut keys = Vec::new();
    for (i, token) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let key = backup_key(token);
        let mut j = job(
            &key,
            Purpose::Backup,
            JobOutcome::Succeeded { at: t(i as i64) },
        );
        j.created = Some(t(i as i64));
        o.jobs.push(j);
        keys.push(key);
    }
    let mut f = job(&backup_key("f"), Purpose::Backup, failed(10));
    f.created = Some(t(10));
    o.jobs.push(f);
    o.requests.backup_now = Some("e".to_owned());
    let mut status = status_in(&ready("db:1"));
    // The current token's backup was served (its Job is there): back at rest.
    let _ = reconcile(&s, &mut status, &o, false);
    let _ = reconcile(&s, &mut status, &o, false);
    let out = reconcile(&s, &mut status, &o, false);
    let pruned: Vec<String> =
        picked!(out.actions, DdbAction::Jobs(JobAction::DeleteJob { name, .. }) => name.clone());
    assert_eq!(
        pruned,
        [format!("db-{}", keys[0]), format!("db-{}", keys[1])],
        "the two oldest successful ones go; the newest three and the one failure stay"
    );
}

/// Bug 7 of issue 11: a record lost while deleting never skips the final backup.
#[test]
fn a_lost_record_while_deleting_still_takes_the_final_backup() {
    let s = with_backups(spec("db:1"));
    let mut status = EngineStatus::default();
    let o = at_rest("db:1");
    let out = reconcile(&s, &mut status, &o, true);
    assert!(!out.release_finalizer, "the cluster may hold data");
    let mut finalizing = false;
    for _ in 0..3 {
        let out = reconcile(&s, &mut status, &o, true);
        assert!(!out.release_finalizer);
        finalizing |= matches!(out.state, Some(DdbState::Finalizing { .. }));
        if runs_backup(&out) {
            assert!(finalizing);
            return;
        }
    }
    panic!("no final backup was started: {:?}", status.machine);
}

/// Bug 7 of issue 11: an object that never created anything is released at once.
#[test]
fn a_lost_record_while_deleting_releases_when_nothing_was_created() {
    let s = with_backups(spec("db:1"));
    let mut status = EngineStatus::default();
    let mut o = at_rest("db:1");
    o.statefulset = None;
    o.pods.clear();
    o.own.volumes.claims.clear();
    let out = reconcile(&s, &mut status, &o, true);
    assert!(out.release_finalizer);
    assert!(out.actions.is_empty());
}
